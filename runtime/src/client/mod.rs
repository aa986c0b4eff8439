//! The robot-side client: connects to an edge, then runs each inference by the plan of the
//! bucket in force, its part on a dedicated thread overlapped with the edge's, and returns the
//! outputs with per-inference statistics. When the edge is unreachable, late, restarted or
//! killed, the inference is finished on the robot from what it holds (marked as a fallback); the
//! client reconnects in the background and the next inference uses the edge again.
//!
//! # Layout
//!
//! This file holds [`RobotClient`] and what it is made from; each `client/` file has one job:
//!
//! - `options`: how the client runs ([`ClientOptions`], [`Connector`], [`Replanner`]).
//! - `outcome`: what an inference returns ([`Inference`], [`InferenceStats`], [`Hopped`]) and
//!   how a fleet's try of it is sent ([`Hop`]).
//! - `connection`: the session with the edge: attempts and reconnection, and the link's writer
//!   and reader (the edge's frames routed to the inference in flight).
//! - `replan`: planning the edge's schedule table when it differs from the robot's.
//! - `infer`: one inference, from the plan for the bandwidth to its outputs and statistics.
//! - `ending`: how an inference's route in the session ends: the edge's Done (waited for a
//!   moment when it trails the last band) and Forward, read into its figures.

mod connection;
mod ending;
mod infer;
mod options;
mod outcome;
mod replan;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lop::planner::table::ScheduleTable;
use lop::profile::Profile;
use lop_msgs::Frame;
use lop_msgs::protocol::{DType, Hello, MAX_PROFILE_LEN};
use tokio::task::JoinHandle;

use self::connection::Conn;
pub use self::options::{ClientOptions, Connector, Replanner};
pub use self::outcome::{Hop, Hopped, Inference, InferenceStats};
use crate::error::{Error, Result};
use crate::exec::{GraphMeta, InputWire, Pace, Stretch, Worker};
use crate::plans::{PlanBook, digest};
use crate::session::{FrameCounts, FrameStats};

/// How often a robot whose edge went silent tries it again (every other inference meanwhile
/// runs on the robot at once, without waiting for a deadline).
pub const SILENT_EDGE_RETRY: Duration = Duration::from_millis(250);

/// The running ratio estimate for `book`'s table: its frames priced at the table's ratio (1 for
/// raw frames).
fn frame_ratio_of(book: &PlanBook) -> crate::frame_ratio::FrameRatio {
    let frame = &book.table.spec.frame;
    crate::frame_ratio::FrameRatio::new(if frame.codec.is_coded() { frame.ratio } else { 1.0 })
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

/// The Hello this robot greets an edge with: its id, the model's and the table's hashes, the
/// model input's dtype on the wire and shape, and its profile when it sends one.
fn hello_frame(opts: &ClientOptions, meta: &GraphMeta, model_hash: &str, table: &ScheduleTable) -> Result<Frame> {
    let input = (0..meta.len()).find(|&i| meta.is_input(i)).map(|i| meta.info(i).clone());
    let input_dtype = match (opts.input_wire, input.as_ref().map(|i| i.dtype)) {
        (InputWire::F32, _) | (_, Some(lop::graph::DType::F32)) => DType::F32,
        (_, Some(lop::graph::DType::I64)) => DType::I64,
        _ => DType::U8,
    };
    Ok(Frame::Hello(Hello {
        robot_id: opts.robot_id.clone(),
        model_id: opts.model_id.clone(),
        model_sha256: digest(model_hash)?,
        robot_profile_hash: digest(&table.key.robot_profile_hash)?,
        planner_hash: digest(&table.key.config_hash)?,
        input_dtype,
        input_shape: input.map(|i| i.shape.iter().map(|&d| d as u32).collect()).unwrap_or_default(),
        robot_profile: hello_profile(opts.robot_profile.as_ref(), &table.key.robot_profile_hash)?,
    }))
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
        let hello = hello_frame(&opts, &meta, model_hash, &table)?;
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
        c.first_connect().await;
        Ok(c)
    }

    /// The first attempt to reach the edge, waiting up to the hello timeout: connected, or
    /// planning the edge's table meanwhile, or running alone while later attempts retry.
    async fn first_connect(&mut self) {
        self.last_attempt = Some(Instant::now());
        let first = self.attempt().await;
        self.last_connect_error = first.as_ref().err().map(ToString::to_string);
        match first {
            Ok(conn) => self.conn = Some(conn),
            Err(Error::TableMismatch { edge, ours, server_profile }) => {
                tracing::info!(%edge, %ours, "the edge planned another schedule table; running alone while this robot plans the edge's");
                self.start_replan(&server_profile);
            }
            Err(Error::EdgePlanning { server_profile, .. }) if !server_profile.is_empty() => self.start_replan(&server_profile),
            Err(e) => tracing::warn!(error = %e, "edge not reachable; running alone until it is"),
        }
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

    /// Forgets that the edge went silent, so that the next inference tries it. For a benchmark
    /// after its untimed warm-up: the first run of a plan prepares kernels (oneDNN makes a
    /// primitive per band shape), which on a loaded machine can outlast the deadline before the
    /// edge's first band is back; that says nothing of the link, and left set it turned the
    /// timed inferences that followed into fallbacks.
    pub fn forget_silence(&mut self) {
        self.silent = None;
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
