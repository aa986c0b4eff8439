//! The netns run ([`run_netns`]): robot and edge in two network namespaces joined by a veth pair
//! shaped with `tc` ([`crate::netns`]). The edge is a child process inside the edge namespace
//! ([`super::edge_child`]); the robot runs on a thread of this process that entered the robot
//! namespace before creating its tokio runtime and Zenoh session. This thread replays the trace
//! on both directions from trace time 0 at the start of every method, relays the robot's
//! progress, and cleans up on success, error and interruption.

use std::collections::BTreeMap;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use tch::Tensor;

use super::config::{BenchConfig, robot_id};
use super::edge_child::{NetnsBenchOptions, edge_exited, interrupted, start_edge_child, write_edge_config};
use super::methods::run_methods;
use super::report::MethodReport;
use crate::client::InferenceStats;
use crate::error::{Error, Result};
use crate::netns::{NetnsLink, NetnsOptions, NetnsSide, ShapingHandle, ShapingStats};
use crate::zenoh_link::ZenohConfig;
use crate::zenoh_service::ZenohConnector;

/// What [`run_netns`] did besides the methods' results.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct NetnsSummary {
    /// The robot's namespace.
    pub robot_ns: String,
    /// The edge's namespace.
    pub edge_ns: String,
    /// The edge's endpoint.
    pub endpoint: String,
    /// Shaping per method (steps taken, `tc` updates, failures), in run order.
    pub shaping: Vec<(String, ShapingSummary)>,
}

/// A serializable [`ShapingStats`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ShapingSummary {
    /// Steps evaluated.
    pub steps: u64,
    /// `tc` rate changes applied.
    pub updates: u64,
    /// `tc` changes that failed.
    pub failures: u64,
    /// The last failure.
    pub last_error: Option<String>,
}

impl From<ShapingStats> for ShapingSummary {
    fn from(s: ShapingStats) -> Self {
        ShapingSummary { steps: s.steps, updates: s.updates, failures: s.failures, last_error: s.last_error }
    }
}

/// Messages from the robot thread of [`run_netns`] to the thread that owns the namespaces.
enum RobotEvent {
    /// A method starts: restart the trace replay, then answer.
    MethodStart(String, std_mpsc::Sender<std::result::Result<(), String>>),
    Progress(String, usize, Box<InferenceStats>, Vec<Tensor>),
    Finished(Result<BTreeMap<String, MethodReport>>),
}

/// Runs every method with robot and edge in two network namespaces joined by a veth pair shaped
/// by `tc` from `cfg.trace` (see the module docs). Blocking; call it outside any tokio runtime.
/// The namespaces are removed and the edge process stopped before this returns, whatever
/// happens (also when `opts.interrupted` is set, which returns an error).
///
/// # Errors
/// Namespaces or `tc` unavailable, the edge process failing or not getting ready in time, an
/// interruption, and everything [`run_in_process`](super::run_in_process) can fail with.
pub fn run_netns(
    cfg: &BenchConfig,
    opts: &NetnsBenchOptions,
    mut progress: impl FnMut(&str, usize, &InferenceStats, &[Tensor]),
) -> Result<(BTreeMap<String, MethodReport>, NetnsSummary)> {
    let (link, mut summary) = netns_link(cfg, opts)?;
    let endpoint = summary.endpoint.clone();
    let config = write_edge_config(cfg, opts, &endpoint)?;
    let mut edge = start_edge_child(&link, opts, &config)?;
    tracing::info!(%endpoint, "edge process ready");
    let (robot, ev_rx) = spawn_robot(cfg, &summary.robot_ns, &endpoint)?;
    let mut shaping: Option<(String, ShapingHandle)> = None;
    let result = loop {
        interrupted(opts)?;
        edge_exited(&mut edge.process.0)?;
        match ev_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(RobotEvent::MethodStart(method, ack)) => {
                if let Some((m, h)) = shaping.take() {
                    summary.shaping.push((m, h.stop().into()));
                }
                let started = link.start_shaping(cfg.trace.clone(), cfg.trace.clone());
                let _ = ack.send(started.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                shaping = Some((method, started?));
            }
            Ok(RobotEvent::Progress(m, i, s, outputs)) => progress(&m, i, &s, &outputs),
            Ok(RobotEvent::Finished(r)) => break r,
            Err(std_mpsc::RecvTimeoutError::Timeout) => {}
            Err(std_mpsc::RecvTimeoutError::Disconnected) => {
                break Err(Error::Executor("the robot thread ended without a result (it panicked?)".into()));
            }
        }
    };
    if robot.join().is_err() {
        tracing::warn!("the robot thread panicked");
    }
    if let Some((m, h)) = shaping.take() {
        summary.shaping.push((m, h.stop().into()));
    }
    drop(edge);
    drop(link);
    drop(config);
    Ok((result?, summary))
}

/// The shaped link of a run (stale namespaces of an earlier run with the same prefix stem
/// removed first), and the summary naming its namespaces and the edge's endpoint.
fn netns_link(cfg: &BenchConfig, opts: &NetnsBenchOptions) -> Result<(NetnsLink, NetnsSummary)> {
    let stem: String = opts.prefix.chars().take_while(|c| !c.is_ascii_digit()).collect();
    if !stem.is_empty() {
        crate::netns::remove_stale(&stem);
    }
    let initial = cfg.trace.rate_mbps(Duration::ZERO);
    let link =
        NetnsLink::create(NetnsOptions::default().with_prefix(opts.prefix.clone()).with_latency(opts.latency).with_initial_mbit(initial))?;
    let endpoint = format!("tcp/{}:{}", link.address(NetnsSide::Edge), opts.port);
    let summary = NetnsSummary {
        robot_ns: link.namespace(NetnsSide::Robot).to_string(),
        edge_ns: link.namespace(NetnsSide::Edge).to_string(),
        endpoint,
        shaping: Vec::new(),
    };
    Ok((link, summary))
}

/// The robot: a thread that enters the robot namespace before it creates its tokio runtime
/// and Zenoh session (threads it spawns start there too), and the channel of its events.
fn spawn_robot(cfg: &BenchConfig, robot_ns: &str, endpoint: &str) -> Result<(JoinHandle<()>, std_mpsc::Receiver<RobotEvent>)> {
    let (ev_tx, ev_rx) = std_mpsc::channel::<RobotEvent>();
    let (robot_cfg, robot_ns, robot_endpoint) = (cfg.clone(), robot_ns.to_string(), endpoint.to_string());
    let robot = std::thread::Builder::new()
        .name("bench-robot".into())
        .spawn(move || {
            let events = ev_tx.clone();
            let result = robot_thread(&robot_cfg, &robot_ns, &robot_endpoint, &events);
            let _ = ev_tx.send(RobotEvent::Finished(result));
        })
        .map_err(|source| Error::Netns { what: "spawning the robot thread".into(), source })?;
    Ok((robot, ev_rx))
}

/// The robot thread's body: enters `robot_ns`, opens a Zenoh client session to `endpoint` and
/// runs every method, asking the main thread to restart the trace replay before each one.
fn robot_thread(
    cfg: &BenchConfig,
    robot_ns: &str,
    endpoint: &str,
    events: &std_mpsc::Sender<RobotEvent>,
) -> Result<BTreeMap<String, MethodReport>> {
    crate::netns::enter_namespace(robot_ns)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|source| Error::Netns { what: "starting the robot's tokio runtime".into(), source })?;
    rt.block_on(async {
        let session = ZenohConfig::client(vec![endpoint.to_string()]).open().await?;
        let mut connect = |m: &str| -> Result<ZenohConnector> {
            let (ack_tx, ack_rx) = std_mpsc::channel();
            events
                .send(RobotEvent::MethodStart(m.to_string(), ack_tx))
                .map_err(|_| Error::Executor("the benchmark's main thread is gone".into()))?;
            let ack = tokio::task::block_in_place(|| ack_rx.recv_timeout(Duration::from_secs(30)));
            match ack {
                Ok(Ok(())) => Ok(ZenohConnector::new(session.clone(), &robot_id(m))),
                Ok(Err(e)) => Err(Error::Command { command: "tc (restarting the trace replay)".into(), stderr: e }),
                Err(_) => Err(Error::Executor("no answer from the shaping thread".into())),
            }
        };
        let mut progress = |m: &str, i: usize, s: &InferenceStats, outputs: &[Tensor]| {
            let outputs = outputs.iter().map(Tensor::shallow_clone).collect();
            let _ = events.send(RobotEvent::Progress(m.to_string(), i, Box::new(s.clone()), outputs));
        };
        let r = run_methods(cfg, &mut connect, &mut progress).await;
        if let Err(e) = session.close().await {
            tracing::debug!(error = %e, "closing the robot's Zenoh session");
        }
        r
    })
}
