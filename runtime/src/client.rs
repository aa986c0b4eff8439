//! The robot-side client: connects to an edge, then runs each inference by the plan of the
//! bucket in force, its part on a dedicated thread overlapped with the edge's, and returns the
//! outputs with per-inference statistics. When the edge is unreachable, late, restarted or
//! killed, the inference is finished on the robot from what it holds (marked as a fallback); the
//! client reconnects in the background and the next inference uses the edge again.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant, SystemTime};

use lop::exec::SideExec;
use lop::plan::Side;
use lop::planner::table::ScheduleTable;
use lop::profile::Profile;
use lop_msgs::Frame;
use lop_msgs::protocol::DType;
use lop_msgs::protocol::{Cancel, DoneStats, Forward, Hello, Limits, MAX_PROFILE_LEN, Reject, RejectReason, Start};
use tch::{Device, Tensor};
use tokio::sync::{mpsc as tmpsc, oneshot};
use tokio::task::JoinHandle;

use crate::bandwidth::upload;
use crate::error::{Error, Result};
use crate::exec::{
    CameraJpeg, GraphMeta, Incoming, InputWire, Pace, SideConfig, SideStats, Stopped, Stretch, Worker, finish_dilated, outputs, run_side,
    run_side_racing,
};
use crate::link::{LinkRx, LinkTx};
use crate::plans::{PlanBook, Prepared, digest};
use crate::session::{Drop as Dropped, FrameCounts, FrameStats, Inbound, classify, match_band};

/// Opens a fresh link to the edge (a new Zenoh session key set, a new in-process pair, ...).
pub trait Connector: Send + Sync + 'static {
    /// The sending half.
    type Tx: LinkTx + 'static;
    /// The receiving half.
    type Rx: LinkRx + 'static;
    /// Opens the link.
    fn connect(&self) -> impl Future<Output = Result<(Self::Tx, Self::Rx)>> + Send;
}

/// How the client runs.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// This robot's id.
    pub robot_id: String,
    /// The model's id at the edge.
    pub model_id: String,
    /// Which plans to run: `lop` (default) or a baseline (`robot-only`, `server-only`,
    /// `layer-partition`).
    pub method: String,
    /// Robot kernels stretched this many times (emulating a slower robot; 1 = none).
    pub dilation: f64,
    /// With a dilation over 1: each robot kernel lasts what `robot_profile` predicts for it,
    /// scaled to the dilation ([`Stretch::Paced`]: the emulated robot is its profile, whatever
    /// this machine's noise), rather than `dilation` times its measured duration.
    pub paced: bool,
    /// How the raw input travels.
    pub input_wire: InputWire,
    /// Where the robot computes.
    pub device: Device,
    /// An inference's deadline is `factor x predicted makespan + slack`.
    pub deadline_factor: f64,
    /// See `deadline_factor`.
    pub deadline_slack: Duration,
    /// How long to wait for Welcome.
    pub hello_timeout: Duration,
    /// Least time between reconnection attempts.
    pub retry_interval: Duration,
    /// Frame size limit.
    pub limits: Limits,
    /// The robot's profile (the one its table was planned from), sent in Hello so that an edge
    /// that has never seen this robot plans for it; `None` sends its hash only.
    pub robot_profile: Option<Profile>,
    /// Plans the robot's table again when the edge's differs (see [`Replanner`]); `None`: such
    /// an edge is never used.
    pub replan: Option<Replanner>,
    /// Reads the table at the effective bandwidth the frames' running size ratio gives
    /// ([`crate::frame_ratio::FrameRatio`]; default on). Benchmarks that compare each bucket's
    /// plan with its simulation turn it off.
    pub follow_frame_ratio: bool,
}

/// How often a robot whose edge went silent tries it again (every other inference meanwhile
/// runs on the robot at once, without waiting for a deadline).
pub const SILENT_EDGE_RETRY: Duration = Duration::from_millis(250);

/// The fallback reason of an inference whose edge did not finish in time.
const DEADLINE_EXCEEDED: &str = "deadline exceeded";

/// The fallback reason of a frame past its binding deadline for which the robot computed bands
/// of the edge's rather than wait for them (the edge was still working on it: not a silent edge).
const RACE_WON: &str = "past the frame's deadline";

/// The stop reason of a hop the edge forwarded (never a fallback: the caller sends it on).
const FORWARDED: &str = "forwarded";

/// Plans the schedule table for the edge's server profile, received in Welcome when the edge's
/// table differs from the robot's (the robot was configured with another server profile, e.g.
/// the synthetic default against an edge that measured its own). Called on a blocking thread
/// while the robot keeps running alone; the caller knows the model's source, the table settings
/// and the cache. The table must come out as the edge's (same model, robot profile, settings).
#[derive(Clone)]
pub struct Replanner(pub Arc<dyn Fn(Profile) -> Result<ScheduleTable> + Send + Sync>);

impl std::fmt::Debug for Replanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Replanner")
    }
}

impl ClientOptions {
    /// Defaults for a robot id and model id.
    pub fn new(robot_id: &str, model_id: &str) -> ClientOptions {
        ClientOptions {
            robot_id: robot_id.into(),
            model_id: model_id.into(),
            method: "lop".into(),
            dilation: 1.0,
            paced: false,
            input_wire: InputWire::Native,
            device: Device::Cpu,
            deadline_factor: 3.0,
            deadline_slack: Duration::from_millis(250),
            hello_timeout: Duration::from_secs(5),
            retry_interval: Duration::from_millis(500),
            limits: Limits::default(),
            robot_profile: None,
            replan: None,
            follow_frame_ratio: true,
        }
    }
}

/// What one inference did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InferenceStats {
    /// Inference id (increasing).
    pub id: u64,
    /// The method whose plan ran.
    pub method: String,
    /// Bucket index and value (MB/s) in force.
    pub bucket: u32,
    /// See `bucket`.
    pub bucket_mb_s: f64,
    /// The plan's content hash (hex).
    pub plan_hash: String,
    /// Whether the robot finished the inference alone after the edge failed it.
    pub fallback: bool,
    /// Why, for a fallback.
    pub fallback_reason: Option<String>,
    /// Seconds from the call to the outputs.
    pub total_s: f64,
    /// Seconds the robot computed (dilation included).
    pub robot_compute_s: f64,
    /// Robot kernels that took longer than their paced duration ([`ClientOptions::paced`]).
    pub robot_overruns: u32,
    /// Seconds those kernels took beyond their paced durations, all together.
    pub robot_overrun_s: f64,
    /// Seconds the robot spent coding its frame for the link (0: raw frames, or no input row
    /// crossed): under a lossy codec the outputs are then the model's on the decoded frame.
    pub robot_coding_s: f64,
    /// Whether the frame crossed coded (so the robot computed on its decoding under a lossy
    /// codec).
    pub frame_coded: bool,
    /// The running estimate of the coded frames' size over their raw size, after this frame
    /// ([`crate::frame_ratio::FrameRatio`]; `None` until a coded frame went up).
    pub frame_ratio: Option<f64>,
    /// Seconds the robot waited for bands.
    pub robot_wait_s: f64,
    /// Seconds the edge computed (from its Done, when it arrived in time).
    pub server_compute_s: Option<f64>,
    /// Bytes sent to the edge (whole frames).
    pub bytes_up: u64,
    /// Bytes received from the edge (whole frames).
    pub bytes_down: u64,
    /// The simulator's makespan for the plan, seconds.
    pub predicted_s: Option<f64>,
    /// Seconds the upload took as the edge saw it (from its Done: the Start's arrival to the
    /// last band's), when the edge finished its part and received bands.
    pub upload_s: Option<f64>,
    /// Seconds from sending the Start to handing the last band to the link, when bands went up.
    pub send_span_s: Option<f64>,
}

impl InferenceStats {
    /// The upload rate to the edge this inference measured, Mbit/s, where the link limited the
    /// upload ([`crate::bandwidth::upload::upload_mbps`]).
    pub fn upload_mbps(&self) -> Option<f64> {
        upload::upload_mbps(self.bytes_up, self.upload_s?, self.send_span_s?)
    }
}

/// How one try of an inference at this client's edge is sent: the path of edges that forwarded
/// it here, what is left of its budget (`None`: a first try, budgeted by its plan) and of the
/// frame's deadline.
#[derive(Debug, Clone, Default)]
pub struct Hop {
    /// The edges that forwarded the inference, in order (from the last [`Hopped::Forwarded`]).
    pub path: Vec<String>,
    /// What is left of the inference's budget: how long the edge may work on it.
    pub budget: Option<Duration>,
    /// What is left of the frame's deadline (`None`: the budget is the deadline). The edge
    /// forwards what its queue cannot finish by then; the robot stops waiting then and computes
    /// the edge's bands itself, taking each from the edge if it still comes first
    /// ([`crate::exec::run_side_racing`]).
    pub due: Option<Duration>,
}

/// How a try of an inference ended: answered (split, or finished by the robot), or forwarded by
/// the edge to another edge of the fleet, for the caller to send there.
#[derive(Debug)]
pub enum Hopped {
    /// The inference, done.
    Done(Inference),
    /// The edge cannot meet the deadline and forwards the inference to `to`; nothing was
    /// computed for it on the robot meanwhile.
    Forwarded {
        /// The fleet id of the edge to send it to.
        to: String,
        /// The path for the next Start (the forwarding edge included).
        path: Vec<String>,
        /// What is left of the budget.
        budget_left: Duration,
        /// The inputs, to send there.
        inputs: Vec<Tensor>,
    },
}

/// The result of one inference.
#[derive(Debug)]
pub struct Inference {
    /// The model's outputs (exactly the unsplit model's).
    pub outputs: Vec<Tensor>,
    /// What happened.
    pub stats: InferenceStats,
}

struct Route {
    id: u64,
    plan: Arc<Prepared>,
    bands: mpsc::Sender<Incoming>,
    received: Vec<bool>,
}

#[derive(Default)]
struct Shared {
    route: Option<Route>,
    done: Option<(u64, DoneStats)>,
    /// The edge's Forward of the inference in `route`.
    forward: Option<Forward>,
    /// The last inference that ended: its Done or Error may still arrive (a control frame
    /// can trail the final bands), and is not a bad frame.
    last_ended: u64,
    welcome: Option<oneshot::Sender<Frame>>,
    /// The last inference that ended before its Done came: its id, bytes sent and send span,
    /// to read its upload rate from a Done that trails it.
    sent: Option<(u64, u64, f64)>,
    /// The upload rate the latest Done measured, Mbit/s ([`RobotClient::take_upload_mbps`]).
    upload_mbps: Option<f64>,
}

struct Conn {
    out: tmpsc::UnboundedSender<Vec<u8>>,
    shared: Arc<Mutex<Shared>>,
    gone: Arc<AtomicBool>,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The running ratio estimate for `book`'s table: its frames priced at the table's ratio (1 for
/// raw frames).
fn frame_ratio_of(book: &PlanBook) -> crate::frame_ratio::FrameRatio {
    let frame = &book.table.spec.frame;
    crate::frame_ratio::FrameRatio::new(if frame.codec.is_coded() { frame.ratio } else { 1.0 })
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The robot's client of one edge.
pub struct RobotClient<C: Connector> {
    connector: Arc<C>,
    opts: ClientOptions,
    worker: Worker,
    meta: Arc<GraphMeta>,
    book: Arc<PlanBook>,
    /// How much the frames sent shrink, against the table's price: where the table is read.
    ratio: crate::frame_ratio::FrameRatio,
    hello: Frame,
    conn: Option<Conn>,
    pending: Option<JoinHandle<Result<Conn>>>,
    /// A table being planned for the edge's server profile (its hash, the task).
    replanning: Option<(String, JoinHandle<Result<ScheduleTable>>)>,
    /// Server profiles a table was planned for already (never planned twice).
    replanned: Vec<String>,
    /// Whether a replanned table still differed from the edge's (warned once).
    replan_failed: bool,
    last_attempt: Option<Instant>,
    /// Why the last attempt to reach the edge failed (cleared once connected).
    last_connect_error: Option<String>,
    /// Since when the edge has been silent (an inference ran out of time with not one band
    /// back), and when a split was last tried since: while set, inferences run on the robot
    /// at once, and one every [`SILENT_EDGE_RETRY`] tries the edge again.
    silent: Option<(Instant, Instant)>,
    /// How the robot's kernels are stretched (from `opts.dilation` and `opts.paced`).
    stretch: Stretch,
    next_id: u64,
    stats: Arc<FrameStats>,
}

impl<C: Connector> std::fmt::Debug for RobotClient<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobotClient").field("robot", &self.opts.robot_id).field("connected", &self.connected()).finish()
    }
}

/// The profile's JSON for Hello (empty without one), after checking that it is the profile the
/// table was planned from and that it fits in a Hello.
fn hello_profile(profile: Option<&Profile>, table_profile_hash: &str) -> Result<Vec<u8>> {
    let Some(p) = profile else { return Ok(Vec::new()) };
    if p.hash() != table_profile_hash {
        return Err(Error::InvalidConfig {
            what: format!("the robot profile {} is not the one the schedule table was planned from ({table_profile_hash})", p.hash()),
        });
    }
    let json = serde_json::to_vec(p).map_err(|e| Error::InvalidConfig { what: format!("serialising the robot profile: {e}") })?;
    if json.len() > MAX_PROFILE_LEN {
        return Err(Error::InvalidConfig {
            what: format!("the robot profile is {} bytes as JSON; a Hello carries at most {MAX_PROFILE_LEN}", json.len()),
        });
    }
    Ok(json)
}

impl<C: Connector> RobotClient<C> {
    /// Prepares the client: `worker` holds the model, `table` is the schedule table built from
    /// the robot's profile and the edge's (the edge builds the same one and the handshake checks
    /// its hash). Tries to connect once, waiting up to the hello timeout; a client that could not
    /// connect still works (robot alone) and keeps retrying.
    ///
    /// # Errors
    /// A table that does not fit the model; bad ids.
    pub async fn new(
        connector: C,
        opts: ClientOptions,
        worker: Worker,
        meta: GraphMeta,
        model_hash: &str,
        table: ScheduleTable,
    ) -> Result<Self> {
        lop_msgs::validate_robot_id(&opts.robot_id).map_err(|e| Error::InvalidConfig { what: e.to_string() })?;
        lop_msgs::validate_id(&opts.model_id).map_err(|e| Error::InvalidConfig { what: e.to_string() })?;
        if !(opts.dilation >= 1.0 && opts.dilation.is_finite()) {
            return Err(Error::InvalidConfig { what: format!("dilation must be >= 1, got {}", opts.dilation) });
        }
        let input = (0..meta.len()).find(|&i| meta.is_input(i)).map(|i| meta.info(i).clone());
        let input_dtype = match (opts.input_wire, input.as_ref().map(|i| i.dtype)) {
            (InputWire::F32, _) | (_, Some(lop::graph::DType::F32)) => DType::F32,
            (_, Some(lop::graph::DType::I64)) => DType::I64,
            _ => DType::U8,
        };
        let hello = Frame::Hello(Hello {
            robot_id: opts.robot_id.clone(),
            model_id: opts.model_id.clone(),
            model_sha256: digest(model_hash)?,
            robot_profile_hash: digest(&table.key.robot_profile_hash)?,
            planner_hash: digest(&table.key.config_hash)?,
            input_dtype,
            input_shape: input.map(|i| i.shape.iter().map(|&d| d as u32).collect()).unwrap_or_default(),
            robot_profile: hello_profile(opts.robot_profile.as_ref(), &table.key.robot_profile_hash)?,
        });
        let book = Arc::new(PlanBook::prepare(&worker, &meta, Arc::new(table), opts.input_wire).await?);
        let stretch = robot_stretch(&opts, &worker).await?;
        let mut c = RobotClient {
            connector: Arc::new(connector),
            opts,
            stretch,
            worker,
            meta: Arc::new(meta),
            ratio: frame_ratio_of(&book),
            book,
            hello,
            conn: None,
            pending: None,
            replanning: None,
            replanned: Vec::new(),
            replan_failed: false,
            last_attempt: None,
            last_connect_error: None,
            silent: None,
            next_id: 1,
            stats: Arc::new(FrameStats::default()),
        };
        c.last_attempt = Some(Instant::now());
        let first = c.attempt().await;
        c.last_connect_error = first.as_ref().err().map(ToString::to_string);
        match first {
            Ok(conn) => c.conn = Some(conn),
            Err(Error::TableMismatch { edge, ours, server_profile }) => {
                tracing::info!(%edge, %ours, "the edge planned another schedule table; running alone while this robot plans the edge's");
                c.start_replan(&server_profile);
            }
            Err(Error::EdgePlanning { server_profile, .. }) if !server_profile.is_empty() => c.start_replan(&server_profile),
            Err(e) => tracing::warn!(error = %e, "edge not reachable; running alone until it is"),
        }
        Ok(c)
    }

    /// Whether a session with the edge is up.
    pub fn connected(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| !c.gone.load(Ordering::SeqCst))
    }

    /// Why the last attempt to reach the edge failed, while not connected: no edge found, no
    /// answer to Hello, or the edge's refusal (another protocol version, an unknown model, ...).
    pub fn last_connect_error(&self) -> Option<&str> {
        self.last_connect_error.as_deref()
    }

    /// How long the edge has been silent, while it is: an inference ran out of its deadline with
    /// not one band back, so inferences run on the robot at once and one every
    /// [`SILENT_EDGE_RETRY`] tries the edge again. `None` while the edge answers.
    pub fn edge_silent_for(&self) -> Option<Duration> {
        self.silent.map(|(since, _)| since.elapsed())
    }

    /// The plans this client runs.
    pub fn book(&self) -> &PlanBook {
        &self.book
    }

    /// Frames dropped so far (malformed, stale, duplicate, out of plan, ...).
    pub fn dropped(&self) -> FrameCounts {
        self.stats.snapshot()
    }

    /// The robot's model worker (its libtorch thread), e.g. to time something there.
    pub fn worker(&self) -> &Worker {
        &self.worker
    }

    /// Ends the client and returns its model worker (to reuse the loaded model).
    pub fn into_worker(self) -> Worker {
        self.worker
    }

    /// Switches the method (`lop` or a baseline), for benchmarks.
    pub fn set_method(&mut self, method: &str) {
        self.opts.method = method.to_string();
    }

    fn attempt(&self) -> impl Future<Output = Result<Conn>> + Send + 'static {
        let (connector, hello, stats, limits, timeout) =
            (self.connector.clone(), self.hello.clone(), self.stats.clone(), self.opts.limits, self.opts.hello_timeout);
        let table_hash = self.book.table_hash;
        async move {
            // Connecting may wait for the edge (a Zenoh link waits for its token): within the
            // same time as the Hello's answer.
            let (tx, rx) = tokio::time::timeout(timeout, connector.connect())
                .await
                .map_err(|_| Error::Protocol(format!("no edge found within {timeout:?}")))??;
            let shared = Arc::new(Mutex::new(Shared::default()));
            let gone = Arc::new(AtomicBool::new(false));
            let (welcome_tx, welcome_rx) = oneshot::channel();
            lock(&shared).welcome = Some(welcome_tx);
            let (out, out_rx) = tmpsc::unbounded_channel();
            let writer = tokio::spawn(write_loop(tx, out_rx, gone.clone()));
            let reader = tokio::spawn(read_loop(rx, shared.clone(), gone.clone(), stats, limits));
            let conn = Conn { out, shared, gone, tasks: [writer, reader] };
            let _ = conn.out.send(hello.encode()?);
            match tokio::time::timeout(timeout, welcome_rx).await {
                Ok(Ok(Frame::Welcome(w))) if w.table_hash == table_hash => Ok(conn),
                Ok(Ok(Frame::Welcome(w))) => {
                    Err(Error::TableMismatch { edge: w.table_hash.to_hex(), ours: table_hash.to_hex(), server_profile: w.server_profile })
                }
                Ok(Ok(Frame::Reject(r))) if r.reason == RejectReason::Planning => {
                    tracing::info!(text = %r.text, "the edge is building the schedule table for this robot; running alone until it is ready");
                    Err(Error::EdgePlanning { text: r.text, server_profile: r.server_profile })
                }
                Ok(Ok(Frame::Reject(r))) if r.reason == RejectReason::Loading => {
                    tracing::info!(text = %r.text, "the edge is loading the model; running alone until it is warm");
                    Err(Error::Protocol(format!("the edge is loading the model: {}", r.text)))
                }
                Ok(Ok(Frame::Reject(r))) => Err(Error::Protocol(format!("the edge refused: {:?}: {}", r.reason, r.text))),
                Ok(_) => Err(Error::Closed),
                Err(_) => Err(Error::Protocol(format!("no answer to Hello within {timeout:?}"))),
            }
        }
    }

    /// Starts planning the table for the edge's server profile (JSON from Welcome, or from the
    /// Planning reject, so that both sides plan at once) in the background, unless the robot's
    /// table is planned for it already, one is being planned, or the client cannot plan.
    fn start_replan(&mut self, server_profile: &[u8]) {
        let Some(replan) = self.opts.replan.clone() else {
            tracing::warn!("the edge's schedule table differs from this robot's and no planner is set: running alone");
            return;
        };
        if self.replanning.is_some() {
            return;
        }
        let profile: Profile = match serde_json::from_slice(server_profile) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, bytes = server_profile.len(), "the edge's server profile in Welcome is not a profile: running alone");
                return;
            }
        };
        let hash = profile.hash();
        if hash == self.book.table.key.server_profile_hash {
            // Planned for this server already: the edge's table will be this one.
            return;
        }
        if self.replanned.contains(&hash) {
            // Planned for it already, and the edge still names another table: the two sides do
            // not plan alike (other table settings or planner versions). Said once.
            if !self.replan_failed {
                self.replan_failed = true;
                tracing::warn!(profile = %hash, "the table planned for the edge's server profile still differs from the edge's: running alone (check that both use the same table settings and lop version)");
            }
            return;
        }
        if profile.role != Side::Server || profile.check().is_err() {
            tracing::warn!(profile = %hash, "the edge's server profile in Welcome is not a valid server profile: running alone");
            return;
        }
        tracing::info!(server_profile = %hash, "planning the schedule table for the edge's server profile; running alone meanwhile");
        self.replanned.push(hash.clone());
        self.replanning = Some((hash, tokio::task::spawn_blocking(move || (replan.0)(profile))));
    }

    /// Takes a finished replanned table into use (then connects again at once).
    async fn finish_replan(&mut self) {
        let Some((hash, task)) = self.replanning.take_if(|(_, t)| t.is_finished()) else { return };
        let table = match task.await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return tracing::warn!(server_profile = %hash, error = %e, "planning the edge's table failed: running alone"),
            Err(e) => return tracing::warn!(error = %e, "the planning task failed: running alone"),
        };
        match PlanBook::prepare(&self.worker, &self.meta, Arc::new(table), self.opts.input_wire).await {
            Ok(book) => {
                tracing::info!(server_profile = %hash, table = %book.table_hash.to_hex(), "schedule table planned for the edge; connecting");
                // The frames seen so far still tell how they code.
                self.ratio = self.ratio.repriced(frame_ratio_of(&book).priced());
                self.book = Arc::new(book);
                self.last_attempt = None;
            }
            Err(e) => tracing::warn!(error = %e, "the edge's table does not fit the model: running alone"),
        }
    }

    /// Moves the connection along without running an inference: takes a finished background
    /// attempt or replanned table into use, or starts a new attempt when one is due. Never
    /// waits for the edge. True if a session is up now.
    pub async fn poll_connection(&mut self) -> bool {
        self.ensure_connected().await
    }

    /// The upload rate to the edge that the latest measured inference showed, Mbit/s, once
    /// (`None` when no inference since the last call measured one: see
    /// [`crate::bandwidth::upload`]). Its Done may trail the inference, so it can come later
    /// than the inference's own stats.
    pub fn take_upload_mbps(&self) -> Option<f64> {
        self.conn.as_ref().and_then(|c| lock(&c.shared).upload_mbps.take())
    }

    /// Makes sure a session is up or being set up in the background; true if it is up now.
    async fn ensure_connected(&mut self) -> bool {
        if self.connected() {
            return true;
        }
        self.conn = None;
        self.finish_replan().await;
        if let Some(p) = self.pending.take_if(|p| p.is_finished()) {
            let attempt = p.await;
            self.last_connect_error = match &attempt {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            match attempt {
                Ok(Ok(conn)) => {
                    tracing::info!("reconnected to the edge");
                    self.conn = Some(conn);
                    return true;
                }
                Ok(Err(Error::TableMismatch { edge, ours, server_profile })) => {
                    tracing::debug!(%edge, %ours, "the edge planned another schedule table");
                    self.start_replan(&server_profile);
                }
                Ok(Err(Error::EdgePlanning { server_profile, .. })) if !server_profile.is_empty() => self.start_replan(&server_profile),
                Ok(Err(e)) => tracing::debug!(error = %e, "reconnection failed"),
                Err(e) => tracing::debug!(error = %e, "reconnection task failed"),
            }
        }
        // No new Hello while the edge's table is being planned: it would be welcomed with the
        // same table again.
        if self.replanning.is_some() {
            return false;
        }
        if self.pending.is_none() && self.last_attempt.is_none_or(|t| t.elapsed() >= self.opts.retry_interval) {
            self.last_attempt = Some(Instant::now());
            self.pending = Some(tokio::spawn(self.attempt()));
        }
        false
    }

    /// Runs one inference on `inputs` with the plan for a link of `bandwidth_mb_s` MB/s (bucket
    /// units). Never loses a request to link trouble: if the edge fails, the robot finishes it
    /// (also when the edge forwards it: a single edge's robot has nowhere else to send it).
    ///
    /// # Errors
    /// Inputs that do not fit the model, engine failures.
    pub async fn infer(&mut self, inputs: Vec<Tensor>, bandwidth_mb_s: f64) -> Result<Inference> {
        self.infer_camera(inputs, None, bandwidth_mb_s).await
    }

    /// As [`RobotClient::infer`], with the camera's own JPEG of the frame: under the frame codec
    /// `passthrough` the frame crosses as those bytes, unchanged. `inputs` must then be their
    /// decoding by [`lop::codec::decode`] (the edge checks the digest and refuses other pixels).
    /// Without one (or under another codec) the frame is coded as the table says.
    ///
    /// # Errors
    /// As [`RobotClient::infer`].
    pub async fn infer_camera(&mut self, inputs: Vec<Tensor>, camera: Option<CameraJpeg>, bandwidth_mb_s: f64) -> Result<Inference> {
        match self.run(inputs, camera, bandwidth_mb_s, None).await? {
            Hopped::Done(inference) => Ok(inference),
            // Not reached: without a hop a Forward is finished on the robot like any refusal.
            Hopped::Forwarded { .. } => Err(Error::Protocol("an inference not sent as a hop was forwarded".into())),
        }
    }

    /// Runs one try of an inference in a fleet: as [`RobotClient::infer`], sent with `hop`'s path
    /// and budget; an edge that forwards it returns [`Hopped::Forwarded`] at once (the robot
    /// computes nothing for it), for the caller to send to that edge.
    ///
    /// # Errors
    /// As [`RobotClient::infer`].
    pub async fn infer_hop(&mut self, inputs: Vec<Tensor>, bandwidth_mb_s: f64, hop: &Hop) -> Result<Hopped> {
        self.run(inputs, None, bandwidth_mb_s, Some(hop)).await
    }

    /// As [`RobotClient::infer_hop`], with the camera's own JPEG of the frame (as
    /// [`RobotClient::infer_camera`]): a fleet's frames cross as the camera wrote them too.
    ///
    /// # Errors
    /// As [`RobotClient::infer`].
    pub async fn infer_hop_camera(
        &mut self,
        inputs: Vec<Tensor>,
        camera: Option<CameraJpeg>,
        bandwidth_mb_s: f64,
        hop: &Hop,
    ) -> Result<Hopped> {
        self.run(inputs, camera, bandwidth_mb_s, Some(hop)).await
    }

    async fn run(&mut self, inputs: Vec<Tensor>, camera: Option<CameraJpeg>, bandwidth_mb_s: f64, hop: Option<&Hop>) -> Result<Hopped> {
        let t0 = Instant::now();
        let method = self.opts.method.clone();
        let plan = self
            .book
            .get(&method, if self.opts.follow_frame_ratio { self.ratio.effective_mb_s(bandwidth_mb_s) } else { bandwidth_mb_s })
            .ok_or_else(|| Error::InvalidConfig { what: format!("no plans for method '{method}'") })?;
        let id = self.next_id;
        self.next_id += 1;
        // A silent edge (a cut or lossy link the session has not noticed yet) would cost every
        // frame its whole deadline before the robot finishes it: run alone at once instead, and
        // try the edge again every SILENT_EDGE_RETRY.
        let silent_wait = self.silent.filter(|(_, tried)| tried.elapsed() < SILENT_EDGE_RETRY).map(|(since, _)| since);
        let use_link = plan.uses_link() && silent_wait.is_none() && self.ensure_connected().await;
        if use_link && let Some((since, _)) = self.silent {
            self.silent = Some((since, Instant::now()));
        }
        let budget = match hop.and_then(|h| h.budget) {
            Some(left) => left.as_secs_f64(),
            None => plan.predicted_s.unwrap_or(1.0) * self.opts.deadline_factor + self.opts.deadline_slack.as_secs_f64(),
        };
        // The robot waits for the edge until the frame's deadline (at most the budget); past it,
        // it races the edge, which may work until the budget.
        let due = hop.and_then(|h| h.due).map(|d| d.as_secs_f64().min(budget));
        let racing = due.is_some_and(|d| d < budget);
        let codec = self.book.table.spec.frame.codec;
        let config = SideConfig {
            side: Side::Robot,
            inference_id: id,
            device: self.opts.device,
            stretch: self.stretch.clone(),
            input_wire: self.opts.input_wire,
            codec,
            camera: camera.filter(|_| codec == lop::codec::FrameCodec::Passthrough),
            // A plan that keeps everything on the robot waits for nothing: no deadline (one
            // would only turn a slow robot's own run into a "fallback" that recomputes it).
            deadline: plan.uses_link().then(|| t0 + Duration::from_secs_f64(due.unwrap_or(budget))),
        };
        let (band_tx, band_rx) = mpsc::channel();
        let mut out = None;
        let mut start_sent = None;
        // A hop may come back forwarded: the inputs go on with it (a shallow copy, no data).
        let kept: Vec<Tensor> = if hop.is_some() { inputs.iter().map(Tensor::shallow_clone).collect() } else { Vec::new() };
        let forwarded_here = hop.is_some().then(|| self.conn.as_ref().map(|c| c.shared.clone())).flatten();
        if use_link && let Some(conn) = &self.conn {
            lock(&conn.shared).route =
                Some(Route { id, plan: plan.clone(), bands: band_tx, received: vec![false; plan.schedule.transfers.len()] });
            let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
            let start = Frame::Start(Start {
                inference_id: id,
                bucket: plan.bucket,
                plan_hash: plan.plan_hash,
                input_stamp_ns: stamp,
                deadline_ns: (budget * 1e9) as u64,
                due_ns: due.map_or(0, |d| ((d * 1e9) as u64).max(1)),
                path: hop.map(|h| h.path.clone()).unwrap_or_default(),
            });
            let _ = conn.out.send(start.encode()?);
            start_sent = Some(Instant::now());
            out = Some(conn.out.clone());
        }
        let alone = plan.uses_link() && out.is_none();
        let (meta, run_plan) = (self.meta.clone(), plan.clone());
        let job = self.worker.call(move |g| -> Result<RobotSide> {
            lop::exec::check_inputs(g, &inputs)?;
            let mut exec = SideExec::new(g, Side::Robot);
            for (&i, t) in g.inputs().iter().zip(inputs) {
                let t = t.f_to_device(config.device).map_err(|e| Error::Executor(format!("input to device: {e}")))?;
                // A lossy codec replaces the frame's rows by their decoding: on a copy, never on
                // the caller's tensor.
                let t = if matches!(config.codec, lop::codec::FrameCodec::Jpeg { .. }) && !alone {
                    t.f_empty_like()
                        .and_then(|mut c| c.f_copy_(&t).map(|_| c))
                        .map_err(|e| Error::Executor(format!("copying the input: {e}")))?
                } else {
                    t
                };
                exec.insert(i, 0..g.nodes[i].info.rows(), t)?;
            }
            if alone {
                let why = match silent_wait {
                    Some(since) => format!(
                        "edge silent for {:.1} s; trying it every {} ms",
                        since.elapsed().as_secs_f64(),
                        SILENT_EDGE_RETRY.as_millis()
                    ),
                    None => "edge unreachable".into(),
                };
                return Ok((finish_dilated(&mut exec, &config.stretch)?, SideStats::default(), Some(why), None));
            }
            let mut last_sent = None;
            let mut send = |b: Vec<u8>| {
                let sent = out.as_ref().is_some_and(|o| o.send(b).is_ok());
                if sent {
                    last_sent = Some(Instant::now());
                }
                sent
            };
            let run = if racing { run_side_racing } else { run_side };
            let (stop, stats) = run(&mut exec, &meta, &run_plan.schedule, &config, &band_rx, &mut send)?;
            let (outputs, stats, reason) = match stop {
                // Past a binding deadline the robot computed the bands it would have waited for.
                Stopped::Finished if stats.stolen > 0 => {
                    let why = format!("{RACE_WON}: {} of the edge's bands computed on the robot", stats.stolen);
                    (outputs(&exec)?, stats, Some(why))
                }
                Stopped::Finished => (outputs(&exec)?, stats, None),
                Stopped::DeadlineExceeded => (finish_dilated(&mut exec, &config.stretch)?, stats, Some(DEADLINE_EXCEEDED.into())),
                // Forwarded: the caller sends it to the other edge; nothing more to compute.
                Stopped::Aborted(_)
                    if forwarded_here.as_ref().is_some_and(|sh| lock(sh).forward.as_ref().is_some_and(|f| f.inference_id == id)) =>
                {
                    (Vec::new(), stats, Some(FORWARDED.into()))
                }
                Stopped::Aborted(why) => (finish_dilated(&mut exec, &config.stretch)?, stats, Some(why)),
            };
            Ok((outputs, stats, reason, last_sent))
        });
        let (outputs, side, reason, last_sent) = job.await??;
        // Finished without the edge's answer (computed the bands it would have waited for past
        // the frame's deadline, or ran out the deadline): the edge may still be working on it.
        // Cancel frees its replica for other frames (an edge that already ended it ignores it).
        if use_link
            && (side.stolen > 0 || reason.as_deref() == Some(DEADLINE_EXCEEDED))
            && let Some(conn) = &self.conn
        {
            let _ = conn.out.send(Frame::Cancel(Cancel { inference_id: id }).encode()?);
        }
        let send_span_s = start_sent.zip(last_sent).map(|(s, l)| l.saturating_duration_since(s).as_secs_f64());
        if use_link {
            let timed_out_silent = reason.as_deref() == Some(DEADLINE_EXCEEDED) && side.bands_received == 0;
            self.silent = match (timed_out_silent, self.silent) {
                (true, None) => {
                    tracing::warn!(
                        inference = id,
                        "no band from the edge within the deadline: running alone, trying the edge every {} ms",
                        SILENT_EDGE_RETRY.as_millis()
                    );
                    Some((t0, Instant::now()))
                }
                (true, kept @ Some(_)) => kept,
                (false, Some((since, _))) => {
                    tracing::info!(silent_s = since.elapsed().as_secs_f64(), "the edge answers again");
                    None
                }
                (false, None) => None,
            };
        }
        let mut server_compute_s = None;
        let mut upload_s = None;
        let mut forward = None;
        if let Some(conn) = &self.conn {
            let mut sh = lock(&conn.shared);
            sh.route = None;
            sh.last_ended = id;
            forward = sh.forward.take().filter(|f| f.inference_id == id);
            sh.sent = None;
            if let Some((d, st)) = sh.done.take()
                && d == id
            {
                server_compute_s = Some(st.server_compute_ns as f64 * 1e-9);
                upload_s = (st.upload_ns > 0).then_some(st.upload_ns as f64 * 1e-9);
            }
            match (upload_s, send_span_s) {
                (Some(up), Some(span)) => sh.upload_mbps = upload::upload_mbps(side.bytes_sent, up, span).or(sh.upload_mbps),
                // The Done (and the edge's view of the upload) may trail the last band.
                (None, Some(span)) => sh.sent = Some((id, side.bytes_sent, span)),
                _ => {}
            }
        }
        if let Some(f) = forward.filter(|_| reason.as_deref() == Some(FORWARDED)) {
            tracing::debug!(inference = id, to = %f.to, path = ?f.path, "forwarded by the edge");
            let budget_left = Duration::from_secs_f64(budget).saturating_sub(t0.elapsed());
            return Ok(Hopped::Forwarded { to: f.to, path: f.path, budget_left, inputs: kept });
        }
        if let Some(r) = &reason {
            tracing::warn!(inference = id, reason = %r, "finished on the robot alone");
        }
        self.ratio.record(side.input_coded_bytes, side.input_raw_bytes);
        let stats = InferenceStats {
            id,
            method,
            bucket: plan.bucket,
            bucket_mb_s: plan.bucket_mb_s,
            plan_hash: plan.plan_hash.to_hex(),
            fallback: reason.is_some(),
            fallback_reason: reason,
            total_s: t0.elapsed().as_secs_f64(),
            robot_compute_s: side.compute_s,
            robot_overruns: side.overruns,
            robot_overrun_s: side.overrun_s,
            robot_coding_s: side.coding_s,
            frame_coded: side.coded,
            frame_ratio: self.ratio.seen(),
            robot_wait_s: side.wait_s,
            server_compute_s,
            bytes_up: side.bytes_sent,
            bytes_down: side.bytes_received,
            predicted_s: plan.predicted_s,
            upload_s,
            send_span_s,
        };
        Ok(Hopped::Done(Inference { outputs, stats }))
    }
}

/// How the robot's kernels are stretched: paced by its profile ([`ClientOptions::paced`]),
/// or by their measured durations.
async fn robot_stretch(opts: &ClientOptions, worker: &Worker) -> Result<Stretch> {
    if !opts.paced || opts.dilation <= 1.0 {
        return Ok(Stretch::measured(opts.dilation));
    }
    let Some(profile) = opts.robot_profile.clone() else {
        return Err(Error::InvalidConfig { what: "a paced robot (paced: true) needs its robot profile".into() });
    };
    let dilation = opts.dilation;
    let pace = worker.call(move |g| Pace::new(g, &profile, dilation)).await??;
    Ok(Stretch::Paced(Arc::new(pace)))
}

/// The robot's side of one inference: its outputs, statistics, why it finished alone (if it
/// did), and when it handed its last band to the link.
type RobotSide = (Vec<Tensor>, SideStats, Option<String>, Option<Instant>);

async fn write_loop<T: LinkTx>(tx: T, mut out: tmpsc::UnboundedReceiver<Vec<u8>>, gone: Arc<AtomicBool>) {
    while let Some(b) = out.recv().await {
        if tx.send(b).await.is_err() {
            gone.store(true, Ordering::SeqCst);
            break;
        }
    }
}

async fn read_loop<R: LinkRx>(mut rx: R, shared: Arc<Mutex<Shared>>, gone: Arc<AtomicBool>, stats: Arc<FrameStats>, limits: Limits) {
    loop {
        let bytes = match rx.recv().await {
            Ok(Some(b)) => b,
            Ok(None) | Err(_) => break,
        };
        if let Err(lop_msgs::Error::UnsupportedVersion { found, supported }) = limits.header(&bytes) {
            // An edge of another release: the header's layout is the same in every version, so
            // the robot can say which one it speaks (to the Hello's waiter, as a refusal).
            stats.count(Dropped::Malformed);
            if let Some(w) = lock(&shared).welcome.take() {
                let text = format!(
                    "the edge speaks protocol version {found}, this robot speaks {supported}; run the same lop release on robot and edge"
                );
                let _ = w.send(Frame::Reject(Reject { reason: RejectReason::UnsupportedVersion, text, server_profile: Vec::new() }));
            }
            continue;
        }
        let Some(inbound) = classify(&limits, bytes, &stats) else { continue };
        let mut sh = lock(&shared);
        match inbound {
            Inbound::Control(f @ (Frame::Welcome(_) | Frame::Reject(_))) => match sh.welcome.take() {
                Some(w) => {
                    let _ = w.send(f);
                }
                None => stats.count(Dropped::Unexpected),
            },
            Inbound::Control(Frame::Done(d)) => match &sh.route {
                Some(r) if r.id == d.inference_id => sh.done = Some((d.inference_id, d.stats)),
                _ if sh.last_ended == d.inference_id => match sh.sent.take_if(|s| s.0 == d.inference_id) {
                    Some((_, bytes, span)) => {
                        let up = d.stats.upload_ns as f64 * 1e-9;
                        sh.upload_mbps = upload::upload_mbps(bytes, up, span).or(sh.upload_mbps);
                    }
                    None => sh.done = Some((d.inference_id, d.stats)),
                },
                _ => stats.count(Dropped::Stale),
            },
            Inbound::Control(Frame::Forward(f)) => match &sh.route {
                Some(r) if r.id == f.inference_id => {
                    let _ = r.bands.send(Incoming::Abort(format!("the edge forwarded it to edge '{}'", f.to)));
                    sh.forward = Some(f);
                }
                _ if sh.last_ended == f.inference_id => {}
                _ => stats.count(Dropped::Stale),
            },
            Inbound::Control(Frame::Error(e)) => match &sh.route {
                Some(r) if r.id == e.inference_id => {
                    let _ = r.bands.send(Incoming::Abort(format!("edge error {:?}: {}", e.code, e.text)));
                }
                _ if sh.last_ended == e.inference_id => {}
                _ => stats.count(Dropped::Stale),
            },
            Inbound::Control(_) => stats.count(Dropped::Unexpected),
            Inbound::Band(id, frame) => match sh.route.as_mut() {
                Some(r) if r.id == id => {
                    if let Some(b) = match_band(&limits, &r.plan, false, frame, &mut r.received, &stats) {
                        let _ = r.bands.send(Incoming::Band(b));
                    }
                }
                _ => stats.count(Dropped::Stale),
            },
        }
    }
    gone.store(true, Ordering::SeqCst);
    if let Some(r) = &lock(&shared).route {
        let _ = r.bands.send(Incoming::Abort("the edge went away".into()));
    }
}
