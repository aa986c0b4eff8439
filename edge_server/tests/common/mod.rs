//! The `lop_edge` process as the end-to-end tests drive it: started on a configuration, its log
//! collected, killed if a test fails before it exits.
#![allow(clippy::unwrap_used, dead_code)]

pub mod fixture;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[allow(unused_imports)] // not every test binary starts a router
pub use lop_runtime::ports::free_loopback_port as free_port;

/// A running `lop_edge`.
pub struct Edge {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    pub log: Vec<String>,
}

impl Edge {
    /// Starts `lop_edge --config CONFIG` and waits (up to two minutes) until it is ready.
    pub fn start(config: &std::path::Path) -> Edge {
        Edge::start_with(Command::new(env!("CARGO_BIN_EXE_lop_edge")), config)
    }

    /// [`Edge::start`] through `program`, a command that runs `lop_edge` (inside a network
    /// namespace, say) and takes its arguments after its own.
    pub fn start_with(mut program: Command, config: &std::path::Path) -> Edge {
        // Several edges run at once in these tests: each its own metrics port unless its
        // configuration names one (the default, 9464, would be taken by the first).
        let text = std::fs::read_to_string(config).unwrap();
        if !text.lines().any(|l| l.starts_with("metrics:")) {
            std::fs::write(config, format!("{text}\nmetrics:\n  listen: 127.0.0.1:{}\n", free_port())).unwrap();
        }
        let mut child =
            program.arg("--config").arg(config).env_remove("LOP_LOG").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut edge = Edge { child, lines, log: Vec::new() };
        assert!(edge.wait_for("lop_edge ready", Duration::from_secs(120)), "the edge did not start:\n{}", edge.log.join("\n"));
        edge
    }

    /// The log so far: every line written until now.
    pub fn log_now(&mut self) -> String {
        while let Ok(l) = self.lines.try_recv() {
            self.log.push(l);
        }
        self.log.join("\n")
    }

    /// Collects log lines until one contains `what` (true) or `limit` passes (false).
    pub fn wait_for(&mut self, what: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let hit = l.contains(what);
                    self.log.push(l);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
        false
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One model served by one edge, prepared as the single-edge tests need it: a temporary
/// configuration (synthetic profiles, three buckets), the robot's profile where the edge finds
/// it, the schedule table built once into the edge's cache (the robot runs the same), and a
/// frame with the unsplit model's output to check every answer against.
pub struct OneModelEdge {
    pub dir: std::path::PathBuf,
    pub config: std::path::PathBuf,
    pub table: lop::planner::table::ScheduleTable,
    pub inputs: Vec<tch::Tensor>,
    pub whole: Vec<tch::Tensor>,
}

impl OneModelEdge {
    /// `name` names the temporary folder; the model is served as `resnet18` (any zoo source);
    /// `zenoh` adds lines to the config's zenoh section, `settings` top-level lines.
    pub fn prepare(name: &str, model: &str, listen: &str, zenoh: &str, settings: &str, seed: u64) -> OneModelEdge {
        let dir = fresh_dir(&format!("lop-{name}"));
        let config = dir.join("edge.yaml");
        std::fs::write(
            &config,
            format!(
                "zenoh:\n  listen: [\"{listen}\"]\n{zenoh}\
                 models:\n  - id: resnet18\n    source: \"{model}\"\n    server_profile: synthetic\n\
                 {settings}robot_profiles: robots\ntable_cache: tables\nprofile_cache: profiles\n\
                 table:\n  buckets: [0, 8, 30]\nhello_timeout_s: 60\nlog: \"warn,edge_server=info\"\n"
            ),
        )
        .unwrap();
        let fixture::RobotSide { table, inputs, whole, .. } = fixture::robot_side(&config, model, None, seed, true).unwrap();
        OneModelEdge { dir, config, table, inputs, whole: whole.unwrap() }
    }
}

/// An empty temporary folder `NAME-PID` (whatever an earlier run left there removed).
pub fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Resident set size of a process, bytes (`/proc/<pid>/status`, VmRSS).
pub fn rss_bytes(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"));
    kb * 1024
}
