//! Scratch folders for the workspace's tests, named by process so that parallel runs never share
//! one, and swept of earlier runs' leftovers so that they do not pile up in the temp dir.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// `<temp dir>/<prefix>-<this process id>-<name>`, created if missing (what this process put there
/// before stays: several helpers of one test may share it).
///
/// The first call for a prefix in a process removes the folders of that prefix whose process is
/// gone (a test that passed or failed long ago); folders of live processes, a parallel run of the
/// same tests included, are left alone. Folders of this process stay for the caller to inspect
/// after a failure, and are swept by the next run.
///
/// # Panics
/// When the folder cannot be created (the temp dir is not writable: nothing could run).
pub fn scratch_dir(prefix: &str, name: &str) -> PathBuf {
    static SWEPT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut swept = SWEPT.lock().unwrap_or_else(PoisonError::into_inner);
    if !swept.iter().any(|p| p == prefix) {
        sweep(&std::env::temp_dir(), prefix);
        swept.push(prefix.to_owned());
    }
    drop(swept);
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{name}", std::process::id()));
    #[allow(clippy::expect_used)] // an unwritable temp dir: nothing on this machine can run
    std::fs::create_dir_all(&dir).expect("creating a scratch folder in the temp dir");
    dir
}

/// Removes `<dir>/<prefix>-<pid>-*` where no process `pid` runs (Linux: no `/proc/<pid>`).
fn sweep(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let own = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)).and_then(|r| r.strip_prefix('-')) else { continue };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != own && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_only_the_prefixes_folders_of_gone_processes() {
        let root = scratch_dir("lop-scratch-unit", "root");
        // pid 0 is never a user process; this process is live.
        let gone = root.join("lop-sweep-0-a");
        let live = root.join(format!("lop-sweep-{}-b", std::process::id()));
        let other = root.join("lop-sweepx-0-c");
        let unparsed = root.join("lop-sweep-notapid");
        for d in [&gone, &live, &other, &unparsed] {
            std::fs::create_dir_all(d).unwrap();
        }
        sweep(&root, "lop-sweep");
        assert!(!gone.exists(), "a gone process's folder stays");
        assert!(live.exists() && other.exists() && unparsed.exists(), "a folder that is not stale was removed");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_scratch_dir_is_per_process_and_kept_within_it() {
        let d = scratch_dir("lop-scratch-unit", "kept");
        std::fs::write(d.join("f"), b"x").unwrap();
        let again = scratch_dir("lop-scratch-unit", "kept");
        assert_eq!(d, again);
        assert!(d.ends_with(format!("lop-scratch-unit-{}-kept", std::process::id())));
        assert!(again.join("f").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
