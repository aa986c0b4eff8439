//! The netns run's edge process, from the parent's side: how it is set up
//! ([`NetnsBenchOptions`]), its configuration file, starting it inside the edge namespace and
//! waiting until it is ready, and the guards that stop it and remove the file whatever happens.
//! The child's own side is [`super::edge_process`].

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use super::config::BenchConfig;
use super::edge_process::EDGE_READY;
use crate::error::{Error, Result};
use crate::netns::{NetnsLink, NetnsSide};

/// How [`run_netns`](super::run_netns) sets up the namespaces and the edge process.
#[derive(Debug, Clone)]
pub struct NetnsBenchOptions {
    /// Namespace name prefix (see [`crate::netns::process_prefix`]).
    pub prefix: String,
    /// One-way latency per direction (a delay line in userspace, see [`crate::netns`]; 0 adds none).
    pub latency: Duration,
    /// The edge router's TCP port on the edge address.
    pub port: u16,
    /// The edge program (usually this executable) and its arguments; the path of the
    /// [`EdgeProcessConfig`](super::EdgeProcessConfig) JSON file is appended. It must print [`EDGE_READY`] on stdout once
    /// it listens and exit when its stdin closes.
    pub edge_program: PathBuf,
    /// See `edge_program`.
    pub edge_args: Vec<String>,
    /// libtorch threads of the edge process.
    pub edge_threads: Option<i32>,
    /// How long the edge may take to be ready.
    pub ready_timeout: Duration,
    /// Set (by a signal handler, see [`crate::netns::interrupt_flag`]) to stop the run early;
    /// cleanup happens as for any error.
    pub interrupted: Option<&'static AtomicBool>,
}

/// The edge child process: closes its stdin (it exits on its own), then kills it if it has not
/// exited within 3 s; always reaps it.
pub(super) struct ChildGuard(pub(super) Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        drop(self.0.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            match self.0.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        tracing::warn!(pid = self.0.id(), "the edge process did not exit; killing it");
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A file removed when dropped.
pub(super) struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An error once `opts.interrupted` is set (a signal asked the run to stop).
pub(super) fn interrupted(opts: &NetnsBenchOptions) -> Result<()> {
    if opts.interrupted.is_some_and(|f| f.load(Ordering::SeqCst)) {
        return Err(Error::Netns {
            what: "the benchmark was interrupted by a signal".into(),
            source: std::io::Error::from(std::io::ErrorKind::Interrupted),
        });
    }
    Ok(())
}

/// An error once the edge process has exited (it should run until its stdin closes).
pub(super) fn edge_exited(child: &mut Child) -> Result<()> {
    match child.try_wait() {
        Ok(Some(status)) => {
            Err(Error::Command { command: "the edge process (lop bench-edge)".into(), stderr: format!("exited early: {status}") })
        }
        Ok(None) => Ok(()),
        Err(source) => Err(Error::Netns { what: "waiting for the edge process".into(), source }),
    }
}

/// Writes the edge process's configuration (serving `cfg` on `endpoint`) to a JSON file in the
/// temporary directory, removed when the returned guard is dropped.
pub(super) fn write_edge_config(cfg: &BenchConfig, opts: &NetnsBenchOptions, endpoint: &str) -> Result<TempFile> {
    let config = TempFile(std::env::temp_dir().join(format!("{}-edge.json", opts.prefix)));
    let json = serde_json::to_vec(&cfg.edge_process_config(endpoint, opts.edge_threads))
        .map_err(|e| Error::InvalidConfig { what: format!("encoding the edge configuration: {e}") })?;
    std::fs::write(&config.0, json).map_err(|source| Error::Netns { what: format!("writing {}", config.0.display()), source })?;
    Ok(config)
}

/// The edge process, ready: its guard, and the channel its stdout reader forwards lines into
/// (held open while the process runs, so that the reader goes on draining its stdout).
pub(super) struct EdgeChild {
    pub(super) process: ChildGuard,
    _lines: std_mpsc::Receiver<String>,
}

/// Starts the edge process inside the edge namespace of `link` with its configuration file
/// `config`, and waits until it prints [`EDGE_READY`] (at most `opts.ready_timeout`), failing
/// early when it exits or the run is interrupted.
pub(super) fn start_edge_child(link: &NetnsLink, opts: &NetnsBenchOptions, config: &TempFile) -> Result<EdgeChild> {
    let mut cmd = link.command(NetnsSide::Edge, &opts.edge_program);
    cmd.args(&opts.edge_args).arg(&config.0).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    let child = cmd.spawn().map_err(|source| Error::Netns { what: format!("starting the edge process {:?}", cmd), source })?;
    let mut child = ChildGuard(child);
    let stdout = child.0.stdout.take().ok_or_else(|| Error::Executor("the edge process has no stdout".into()))?;
    let (line_tx, line_rx) = std_mpsc::channel::<String>();
    std::thread::Builder::new()
        .name("bench-edge-stdout".into())
        .spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(std::result::Result::ok) {
                if line_tx.send(line).is_err() {
                    break;
                }
            }
        })
        .map_err(|source| Error::Netns { what: "spawning the edge stdout reader".into(), source })?;
    let ready_by = Instant::now() + opts.ready_timeout;
    loop {
        interrupted(opts)?;
        edge_exited(&mut child.0)?;
        match line_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(l) if l.trim() == EDGE_READY => break,
            Ok(l) => tracing::debug!(line = %l, "edge process"),
            Err(std_mpsc::RecvTimeoutError::Timeout) if Instant::now() < ready_by => {}
            Err(_) => {
                return Err(Error::Command {
                    command: "the edge process (lop bench-edge)".into(),
                    stderr: format!("not ready within {:?}", opts.ready_timeout),
                });
            }
        }
    }
    Ok(EdgeChild { process: child, _lines: line_rx })
}
