//! Running the iproute2 tools (`ip`, `tc`): finding them, and turning a failed run into an
//! [`Error::Command`] that names the command line and its stderr.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// Runs `program args...` and returns its stdout; failures become [`Error::Command`] with the
/// command line and stderr.
pub(super) fn run(program: &Path, args: &[&str]) -> Result<String> {
    let command = std::iter::once(program.display().to_string()).chain(args.iter().map(|a| a.to_string())).collect::<Vec<_>>().join(" ");
    tracing::trace!(%command, "running");
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| Error::Command { command: command.clone(), stderr: format!("cannot run: {e}") })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    let stderr = if stderr.is_empty() { format!("exited with {}", output.status) } else { stderr };
    Err(Error::Command { command, stderr })
}

/// Finds an iproute2 tool on `PATH` or in the sbin directories (often missing from a user's PATH).
pub(super) fn find_tool(name: &str) -> Option<PathBuf> {
    let path_dirs = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    let fallback = ["/usr/sbin", "/sbin", "/usr/bin", "/bin", "/usr/local/sbin"].map(PathBuf::from);
    path_dirs.into_iter().chain(fallback).map(|d| d.join(name)).find(|p| p.is_file())
}
