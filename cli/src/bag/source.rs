//! Which files a recording is: one `.mcap` file, or a rosbag2 folder (`metadata.yaml` beside
//! `NAME_0.mcap`, `NAME_1.mcap`, ... when the recorder split it), in the order recorded.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::BagError;

/// MCAP's magic, the first eight bytes of every MCAP file.
const MAGIC: &[u8; 8] = b"\x89MCAP0\r\n";

/// The extension of `path`, lower case.
fn extension(path: &Path) -> Option<String> {
    path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase)
}

/// Whether the file starts with MCAP's magic.
fn has_magic(path: &Path) -> bool {
    let mut head = [0u8; 8];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head)).is_ok() && &head == MAGIC
}

/// See [`super::is_recording`].
pub fn is_recording(path: &Path) -> bool {
    if path.is_dir() {
        return path.join("metadata.yaml").is_file() || entries(path).is_ok_and(|v| v.iter().any(|p| is_storage(p)));
    }
    is_storage(path) || (path.is_file() && has_magic(path))
}

/// Whether the name says a rosbag2 storage file.
fn is_storage(path: &Path) -> bool {
    matches!(extension(path).as_deref(), Some("mcap" | "db3"))
}

/// The folder's entries.
fn entries(dir: &Path) -> Result<Vec<PathBuf>, BagError> {
    let read = std::fs::read_dir(dir).map_err(|source| BagError::Read { path: dir.to_path_buf(), source })?;
    Ok(read.filter_map(|e| e.ok().map(|e| e.path())).collect())
}

/// The MCAP files of the recording at `path`, in the order recorded: the file itself, or the
/// folder's `.mcap` files by the number at the end of their names (`NAME_2` before `NAME_10`).
///
/// # Errors
/// [`BagError::Sqlite`] for SQLite3 storage, [`BagError::NoRecording`] for a folder without
/// MCAP files, [`BagError::Read`] for a path that cannot be read.
pub fn files(path: &Path) -> Result<Vec<PathBuf>, BagError> {
    if !path.is_dir() {
        if extension(path).as_deref() == Some("db3") {
            return Err(BagError::Sqlite { path: path.to_path_buf() });
        }
        std::fs::metadata(path).map_err(|source| BagError::Read { path: path.to_path_buf(), source })?;
        return Ok(vec![path.to_path_buf()]);
    }
    let all = entries(path)?;
    let mut mcap: Vec<PathBuf> = all.iter().filter(|p| extension(p).as_deref() == Some("mcap")).cloned().collect();
    if mcap.is_empty() {
        return Err(match all.into_iter().find(|p| extension(p).as_deref() == Some("db3")) {
            Some(db3) => BagError::Sqlite { path: db3 },
            None => BagError::NoRecording { path: path.to_path_buf() },
        });
    }
    mcap.sort_by_key(|p| split_order(p));
    Ok(mcap)
}

/// How a split recording's file sorts: by the name before its trailing number, then by the
/// number (rosbag2 names the parts `NAME_0.mcap`, `NAME_1.mcap`, ...).
fn split_order(path: &Path) -> (String, u64, String) {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let digits = stem.len() - stem.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (base, number) = stem.split_at(stem.len() - digits);
    (base.to_string(), number.parse().unwrap_or(0), stem.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_parts_sort_by_their_number() {
        let mut v: Vec<PathBuf> = ["b_10.mcap", "b_2.mcap", "b_0.mcap", "b_1.mcap"].iter().map(PathBuf::from).collect();
        v.sort_by_key(|p| split_order(p));
        assert_eq!(v, ["b_0.mcap", "b_1.mcap", "b_2.mcap", "b_10.mcap"].map(PathBuf::from));
    }

    #[test]
    fn a_folder_of_pictures_is_not_a_recording() {
        let dir = std::env::temp_dir().join(format!("lop-bag-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("a.png"), b"\x89PNG").expect("write");
        assert!(!is_recording(&dir));
        assert!(!is_recording(&dir.join("a.png")));
        std::fs::write(dir.join("x.bin"), MAGIC).expect("write");
        assert!(is_recording(&dir.join("x.bin")), "MCAP's magic, whatever the name");
        std::fs::write(dir.join("r.db3"), b"SQLite format 3\0").expect("write");
        assert!(is_recording(&dir));
        assert!(matches!(files(&dir), Err(BagError::Sqlite { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
