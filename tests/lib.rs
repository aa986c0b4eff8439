//! Helpers shared by the workspace integration tests (each test file in this crate is its own
//! test binary and pulls these in as `tests::...`).
//!
//! - [`workspace_root`]: the repository root, whatever the current directory.
//! - [`run_command`]: runs a process, turning a spawn failure or non-zero exit into an error that
//!   names the command, its exit status and the tail of its output.
//! - [`python_test_env`]: once per test process, `scripts/setup.sh --test-deps` (the venv with
//!   torch, torchvision, onnx, onnxruntime, ddddocr); returns the venv's Python.
//! - [`built_binary`]: a binary of this build (`lop`, `lop_edge`, `lop_robot`).
//! - [`rel_err`]: the comparison metric, `max|actual - expected| / max|expected|`.
#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use tch::Tensor;

/// The workspace root (the folder holding the workspace `Cargo.toml`, `scripts/`, `.venv/`):
/// the parent of this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the tests crate sits inside the workspace").to_path_buf()
}

/// Runs `cmd` to completion with its output captured; on success echoes its stderr (progress
/// lines, visible with `--nocapture`) and returns its stdout.
///
/// # Errors
/// A message naming `what`, the full command line and, for a non-zero exit, the exit status and
/// the last 4000 characters of its stdout and stderr.
pub fn run_command(what: &str, cmd: &mut Command) -> Result<String, String> {
    let line = format!("{cmd:?}");
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{what}: could not start {line}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {line}\n--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
            out.status,
            tail(&stdout, 4000),
            tail(&stderr, 4000)
        ));
    }
    eprint!("{stderr}");
    Ok(stdout)
}

fn tail(s: &str, n: usize) -> &str {
    let s = s.trim_end();
    let mut start = s.len().saturating_sub(n);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// Makes sure the Python peers of the tests are installed, by running
/// `scripts/setup.sh --test-deps` once per test process (fast when they already are), and
/// returns the path of the venv's Python.
///
/// # Errors
/// The set-up's failure (for example no access to the package index), with its output. The
/// same error is returned to every caller in the process; callers should fail, not skip.
pub fn python_test_env() -> Result<PathBuf, String> {
    static ONCE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let root = workspace_root();
        run_command(
            "installing the tests' Python dependencies (scripts/setup.sh --test-deps; needs the package index on first run)",
            Command::new("bash").arg(root.join("scripts/setup.sh")).arg("--test-deps").current_dir(&root),
        )?;
        let python = root.join(".venv/bin/python");
        if python.is_file() { Ok(python) } else { Err(format!("{} missing after scripts/setup.sh", python.display())) }
    })
    .clone()
}

/// A binary of this build: in the profile directory that holds the running test executable
/// (`target/release/deps/NAME-HASH` sits below `target/release`). Panics with the command that
/// builds it when it is missing.
pub fn built_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let dir = exe.parent().and_then(Path::parent).expect("the test executable sits in target/<profile>/deps");
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: build the binaries first with `cargo build --release --workspace --bins` \
         (`cargo test --release --workspace` builds them too)",
        bin.display()
    );
    bin
}

/// The project's comparison metric ([`lop::exec::max_rel_err`]: `max|actual - expected| /
/// max|expected|`), as a plain number: infinite when the shapes differ or either side has a NaN
/// or infinity, so that `rel_err(..) <= tol` is false for them.
pub fn rel_err(actual: &Tensor, expected: &Tensor) -> f64 {
    let expected = expected.to_device(actual.device());
    match lop::exec::max_rel_err(actual, &expected) {
        Ok(e) if actual.isfinite().all().int64_value(&[]) != 0 => e,
        _ => f64::INFINITY,
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn rel_err_basics() {
        let e = Tensor::from_slice(&[1.0f32, -2.0, 4.0]);
        assert_eq!(rel_err(&e, &e), 0.0);
        let a = Tensor::from_slice(&[1.0f32, -2.0, 4.4]);
        assert!((rel_err(&a, &e) - 0.1).abs() < 1e-6);
        assert!(rel_err(&Tensor::from_slice(&[f32::NAN, 0.0, 0.0]), &e).is_infinite());
        assert!(rel_err(&Tensor::from_slice(&[1.0f32]), &e).is_infinite());
    }

    #[test]
    fn root_has_scripts() {
        assert!(workspace_root().join("scripts/setup.sh").is_file());
    }

    #[test]
    fn failing_command_names_itself() {
        let err = run_command("probe", Command::new("sh").args(["-c", "echo boom >&2; exit 3"])).unwrap_err();
        assert!(err.contains("probe failed") && err.contains("boom"), "{err}");
    }
}
