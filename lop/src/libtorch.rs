//! Which libtorch this process runs on, and whether this build supports it.
//!
//! tch 0.26 wraps libtorch 2.13's operators. torch-sys refuses any other version at build time
//! (unless `LIBTORCH_BYPASS_VERSION_CHECK` is set), but the library is found again at start, by
//! the dynamic loader: a robot whose `LD_LIBRARY_PATH` names another PyTorch (a JetPack wheel, an
//! older venv) starts, and dies at the first operator that version lacks, as a "symbol lookup
//! error" that names no version. The binaries call [`check_loaded`] first, which names the
//! version found, where, the version it was built against and the supported range.

use std::path::{Path, PathBuf};

use lop_core::libtorch as range;

pub use range::{MAJOR, MINORS};

/// The libtorch version this build was compiled against (`2.13.0+cu130`), empty where the build
/// could not tell (a libtorch folder that records none).
pub const BUILT_AGAINST: &str = env!("LOP_LIBTORCH_BUILT");

/// The supported range as users read it.
pub fn supported_range() -> String {
    format!("{MAJOR}.{}.x to {MAJOR}.{}.x", MINORS.start(), MINORS.end())
}

/// The libtorch library mapped into this process and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    /// The path of `libtorch_cpu.so` as the loader opened it.
    pub library: PathBuf,
    /// The version string its installation records (`2.13.0+cu130`), from the PyPI wheel's
    /// `torch/version.py` or a libtorch archive's `build-version`.
    pub version: String,
}

/// A loaded libtorch this build cannot run on.
#[derive(Debug, thiserror::Error)]
pub enum Unsupported {
    /// Outside the supported range.
    #[error(
        "libtorch {version} is loaded ({library}), but lop supports libtorch {supported} only (tch 0.26; \
         docs/jetson.md lists the versions tried): point LD_LIBRARY_PATH at the lib folder of a supported torch \
         (scripts/env.sh uses the torch==2.13.0 wheel of scripts/setup.sh)"
    )]
    OutOfRange {
        /// The version found.
        version: String,
        /// Where it was loaded from.
        library: String,
        /// The supported range, as [`supported_range`] writes it.
        supported: String,
    },
    /// Another minor than the build's: the operators tch wraps differ between minors.
    #[error(
        "libtorch {version} is loaded ({library}), but this build of lop was built against libtorch {built}: \
         point LD_LIBRARY_PATH at that libtorch's lib folder (scripts/env.sh does, for the torch==2.13.0 wheel \
         of scripts/setup.sh), or rebuild lop against this one (supported: {supported})"
    )]
    NotBuiltAgainst {
        /// The version found.
        version: String,
        /// Where it was loaded from.
        library: String,
        /// The version the build recorded.
        built: String,
        /// The supported range, as [`supported_range`] writes it.
        supported: String,
    },
}

/// Checks the libtorch this process has loaded. `Ok(None)` when it cannot be told (linked
/// statically, or an installation that records no version): nothing is refused on a guess.
pub fn check_loaded() -> Result<Option<Loaded>, Unsupported> {
    let Some(loaded) = loaded() else { return Ok(None) };
    check_version(&loaded.version, &loaded.library, Some(BUILT_AGAINST).filter(|b| !b.is_empty()))?;
    Ok(Some(loaded))
}

/// The libtorch mapped into this process (Linux: `/proc/self/maps`), with its recorded version.
pub fn loaded() -> Option<Loaded> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let library = library_in_maps(&maps)?;
    let version = recorded_version(&library)?;
    Some(Loaded { library, version })
}

/// Refuses a version outside the supported range, or of another minor than `built` (the version
/// the build recorded); `library` names where it came from.
pub fn check_version(version: &str, library: &Path, built: Option<&str>) -> Result<(), Unsupported> {
    if !range::in_range(version) {
        return Err(Unsupported::OutOfRange {
            version: version.to_string(),
            library: library.display().to_string(),
            supported: supported_range(),
        });
    }
    match built {
        Some(built) if range::major_minor(built) != range::major_minor(version) => Err(Unsupported::NotBuiltAgainst {
            version: version.to_string(),
            library: library.display().to_string(),
            built: built.to_string(),
            supported: supported_range(),
        }),
        _ => Ok(()),
    }
}

/// The path of `libtorch_cpu.so` in the text of a `/proc/PID/maps`.
fn library_in_maps(maps: &str) -> Option<PathBuf> {
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| Path::new(path).file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("libtorch_cpu.so")))
        .map(PathBuf::from)
}

/// The version an installation records next to its `lib/` folder: `../version.py` in a PyPI
/// wheel (`__version__ = '2.13.0+cu130'`), `../build-version` in a libtorch archive.
fn recorded_version(library: &Path) -> Option<String> {
    let root = library.parent()?.parent()?;
    if let Ok(text) = std::fs::read_to_string(root.join("version.py")) {
        return version_py(&text);
    }
    let text = std::fs::read_to_string(root.join("build-version")).ok()?;
    Some(text.trim().to_string()).filter(|v| !v.is_empty())
}

/// `__version__` of a PyTorch `version.py`.
fn version_py(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.trim().strip_prefix("__version__")?.trim_start().strip_prefix('=')?.trim();
        let quote = value.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        let inner = &value[1..];
        Some(inner[..inner.find(quote)?].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supported_minors_pass_and_others_are_named() {
        let lib = Path::new("/opt/torch/lib/libtorch_cpu.so");
        for ok in ["2.13.0+cu130", "2.13.1", "2.12.1+cu130"] {
            assert!(check_version(ok, lib, None).is_ok(), "{ok}");
        }
        for other in ["2.9.1+cu128", "2.5.0a0+872d972e41.nv24.08", "3.13.0", "", "garbage"] {
            let e = check_version(other, lib, None).expect_err(other).to_string();
            assert!(e.contains(&format!("libtorch {other} is loaded (/opt/torch/lib/libtorch_cpu.so)")), "{e}");
            assert!(e.contains("supports libtorch 2.12.x to 2.13.x only"), "{e}");
        }
        // Within the range, the loaded minor must be the build's.
        assert!(check_version("2.13.1", lib, Some("2.13.0+cu130")).is_ok());
        let e = check_version("2.12.1+cu130", lib, Some("2.13.0+cu130")).expect_err("another minor").to_string();
        assert!(e.contains("libtorch 2.12.1+cu130 is loaded (/opt/torch/lib/libtorch_cpu.so)"), "{e}");
        assert!(e.contains("was built against libtorch 2.13.0+cu130"), "{e}");
    }

    #[test]
    fn maps_and_version_files_are_read() {
        let maps = "7f00-7f10 r-xp 00000000 fd:01 12 /usr/lib/libc.so.6\n\
                    7f20-7f30 r-xp 00000000 fd:01 13 /x/torch/lib/libtorch_cpu.so\n\
                    7f40-7f50 rw-p 00000000 00:00 0 \n";
        assert_eq!(library_in_maps(maps), Some(PathBuf::from("/x/torch/lib/libtorch_cpu.so")));
        assert_eq!(library_in_maps("7f00-7f10 r-xp 0 fd:01 12 /usr/lib/libtorch_cuda.so\n"), None);
        let py = "from typing import Optional\n__version__ = '2.13.0+cu130'\ndebug = False\n";
        assert_eq!(version_py(py).as_deref(), Some("2.13.0+cu130"));
        assert_eq!(version_py("__version__ = \"2.5.0a0+872d972e41.nv24.08\"\n").as_deref(), Some("2.5.0a0+872d972e41.nv24.08"));
        assert_eq!(version_py("version = '1'\n"), None);
    }

    /// The test process itself runs on the project's libtorch (linked by tch): it is found in
    /// the maps, its version is read from the installation, and it passes.
    #[test]
    fn this_process_runs_a_supported_libtorch() {
        let _ = tch::Tensor::zeros([1], (tch::Kind::Float, tch::Device::Cpu));
        let loaded = check_loaded().expect("the project's libtorch is supported").expect("libtorch_cpu.so is in /proc/self/maps");
        assert!(loaded.version.starts_with("2.13."), "{loaded:?}");
        assert!(BUILT_AGAINST.starts_with("2.13."), "build.rs recorded {BUILT_AGAINST:?}");
    }
}
