//! Named network namespaces as `ip netns` keeps them: adding them, entering one from a thread,
//! per-process names, and removing those a killed run left behind.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::command::{find_tool, run};
use crate::error::{Error, Result};

/// Where `ip netns` keeps the namespace handles.
const NETNS_DIR: &str = "/var/run/netns";

/// Moves the calling thread into the named network namespace (a handle under
/// `/var/run/netns`, as `ip netns add` creates); see [`NetnsLink::enter`](super::NetnsLink::enter). Threads spawned by the
/// calling thread afterwards start there too.
///
/// # Errors
///
/// [`Error::Netns`] if the namespace handle cannot be opened or `setns` fails.
pub fn enter_namespace(name: &str) -> Result<()> {
    let path = Path::new(NETNS_DIR).join(name);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|source| Error::Netns { what: format!("opening {}", path.display()), source })?;
    // SAFETY: the fd is open (owned by `file` for the duration of the call); setns only changes
    // the calling thread's network namespace.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc != 0 {
        let source = std::io::Error::last_os_error();
        return Err(Error::Netns { what: format!("setns({}, CLONE_NEWNET)", path.display()), source });
    }
    tracing::debug!(ns = %name, "thread entered network namespace");
    Ok(())
}

/// Namespace names `{stem}{pid}-robot` / `{stem}{pid}-edge` (and `-wire`) of a process: a per-process prefix
/// (at most 13 characters for stems up to 5 characters) so that concurrent runs never collide
/// and [`remove_stale`] can tell whose namespaces were left behind.
pub fn process_prefix(stem: &str) -> String {
    format!("{stem}{}", std::process::id())
}

/// Deletes namespaces named `{stem}{pid}-robot` / `-edge` / `-wire` whose process `pid` no
/// longer runs (left by a run that was killed with SIGKILL, which no guard survives); returns
/// the names deleted. Failures are logged, never fatal.
pub fn remove_stale(stem: &str) -> Vec<String> {
    let Some(ip) = find_tool("ip") else { return Vec::new() };
    let Ok(list) = run(&ip, &["netns", "list"]) else { return Vec::new() };
    let mut removed = Vec::new();
    for name in list.lines().filter_map(|l| l.split_whitespace().next()) {
        let Some(rest) = name.strip_prefix(stem) else { continue };
        let Some(pid) = ["-robot", "-edge", "-wire"].iter().find_map(|suffix| rest.strip_suffix(suffix)) else { continue };
        if pid.is_empty() || !pid.chars().all(|c| c.is_ascii_digit()) || Path::new("/proc").join(pid).exists() {
            continue;
        }
        match run(&ip, &["netns", "del", name]) {
            Ok(_) => {
                tracing::warn!(ns = %name, "removed a stale network namespace of a dead process");
                removed.push(name.to_string());
            }
            Err(e) => tracing::warn!(ns = %name, error = %e, "removing a stale network namespace failed"),
        }
    }
    removed
}

/// Adds the named namespaces, after removing stale ones of the same names (left by a crashed
/// run); on a failure, those already added are deleted again.
pub(super) fn add_namespaces<'a>(ip: &Path, names: impl Iterator<Item = &'a String>) -> Result<()> {
    let mut added: Vec<&String> = Vec::new();
    for ns in names {
        if Path::new(NETNS_DIR).join(ns).exists() {
            tracing::warn!(ns = %ns, "removing a stale network namespace");
            run(ip, &["netns", "del", ns])?;
        }
        if let Err(e) = run(ip, &["netns", "add", ns]) {
            for earlier in added {
                let _ = run(ip, &["netns", "del", earlier]);
            }
            return Err(e);
        }
        added.push(ns);
    }
    Ok(())
}
