//! The edge service (DESIGN.md section 6): serves many robots at once, each in an isolated
//! session, from warm model replicas. The edge loads models only from its own store (matched by
//! content hash) and never executes anything a robot sends: a robot names a model and a plan by
//! hash, and sends tensors.
//!
//! Per session: the first frame must be Hello; the edge answers Welcome (its profile, and the
//! hash of the schedule table it built or loaded for that model and robot profile) or Reject
//! with the reason (`Planning` with its profile too, so that a robot planned for another server
//! plans the same table meanwhile). Then, per inference: Start names the plan; the server side of it runs on a
//! free replica, sending bands as they are computed; Done (with statistics) or Error ends it.
//! A newer Start aborts an older inference, and so does the robot's Cancel of it; frames of
//! other inferences are stale and dropped.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use lop::exec::SideExec;
use lop::graph::{DType as GraphDType, Graph};
use lop::model::LoadOptions;
use lop::plan::Side;
use lop::planner::table::{TableSpec, load_or_build};
use lop::profile::Profile;
use lop_msgs::protocol::DType;
use lop_msgs::protocol::{Done, DoneStats, ErrorCode, ErrorFrame, Forward, Hello, Limits, Reject, RejectReason, Start, Welcome};
use lop_msgs::{Digest, Frame};
use tch::Device;
use tokio::sync::{broadcast, oneshot, watch};

use crate::build_turns::BuildTurns;
use crate::error::{Error, Result};
use crate::exec::worker::Loaded;
use crate::exec::{
    BatchConfig, GraphMeta, Incoming, InputWire, Member, SideConfig, SideStats, Stopped, Stretch, Worker, run_batch, run_side,
};
use crate::link::{LinkRx, LinkTx};
use crate::outbox::{Outbox, write_session};
use crate::plans::{PlanBook, Prepared, digest};
use crate::received_profiles::ReceivedProfiles;
use crate::session::{Drop as Dropped, FrameCounts, FrameStats, Inbound, classify, match_band};

/// A model the edge serves.
#[derive(Debug, Clone)]
pub struct EdgeModel {
    /// Its id (what robots name in Hello).
    pub id: String,
    /// `zoo:NAME` or an ONNX path in the model store.
    pub source: String,
    /// Loading options (input shape for dynamic ONNX inputs).
    pub load: LoadOptions,
    /// The edge's own profile of it (role server).
    pub server_profile: Profile,
}

/// How to run the edge.
#[derive(Debug, Clone)]
pub struct EdgeOptions {
    /// Models served.
    pub models: Vec<EdgeModel>,
    /// Robot profiles known up front (a robot's Hello names its profile by hash).
    pub robot_profiles: Vec<Profile>,
    /// A directory searched for `*.json` robot profiles when a Hello names an unknown hash.
    pub profiles_dir: Option<PathBuf>,
    /// The schedule table configuration; a robot's Hello must carry its hash.
    pub spec: TableSpec,
    /// Where schedule tables are cached.
    pub cache_dir: PathBuf,
    /// Warm replicas per model on each device (concurrent inferences per model and device).
    pub replicas: usize,
    /// Where the server computes: one device or several (each with `replicas` replicas of every
    /// warm model; an inference goes to the replica that will finish it first).
    pub devices: Vec<ServerDevice>,
    /// Frame size limit.
    pub limits: Limits,
    /// How long a session may take to send Hello.
    pub hello_timeout: Duration,
    /// How long a Hello waits for its schedule table (loaded from the cache or built for a new
    /// robot profile) before the edge answers Reject `Planning` and finishes it in the background.
    pub table_wait: Duration,
    /// Server kernels stretched this many times (emulating a slower server, e.g. in a fleet
    /// test; 1 = none). The load reports measure it like any other slowness.
    pub dilation: f64,
    /// Memory the models' warm replicas may take, in bytes of weights (`None`: every model is
    /// warm). With a budget, the models kept warm are placed by recent demand
    /// (`lop::fleet::place`, EPARA's placement) every [`PLACEMENT_PERIOD`]: a Hello for a cold
    /// model is answered Reject `Loading` and has it placed at once; its load reports say which
    /// models are warm, so routing avoids the edge for a cold one.
    pub memory_budget: Option<u64>,
    /// Batching across robots: concurrent inferences of one plan queued on a replica run as
    /// one batch.
    pub batching: Batching,
}

/// One device an edge computes on.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerDevice {
    /// Its name in the configuration and the metrics (`cuda:1`, or `cpu:0`, `cpu:1` for CPU
    /// replica groups standing in for devices).
    pub name: String,
    /// Where libtorch runs its replicas.
    pub device: Device,
    /// Its speed relative to the first device (measured profiles' time on the first over
    /// theirs on it; 1 when not measured): an inference there takes the model's server seconds
    /// over this.
    pub speed: f64,
}

impl ServerDevice {
    /// The one device of an edge, named as the configuration names it (`cpu`, `cuda:N`).
    pub fn only(device: Device) -> ServerDevice {
        let name = match device {
            Device::Cuda(i) => format!("cuda:{i}"),
            _ => "cpu".to_string(),
        };
        ServerDevice { name, device, speed: 1.0 }
    }
}

/// One device's share of the edge's work now ([`EdgeService::device_loads`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceLoad {
    /// Its name.
    pub name: String,
    /// Its speed relative to the first device.
    pub speed: f64,
    /// Warm replicas on it, every model's.
    pub replicas: usize,
    /// Inferences queued or running on them.
    pub queued: usize,
}

/// Which replica an inference goes to: the one that will finish it first, given each replica's
/// queued inferences and its device's speed (`(queued + 1) / speed`, ties to the first);
/// `None` for no replica.
pub fn finishes_first(replicas: impl IntoIterator<Item = (usize, f64)>) -> Option<usize> {
    replicas
        .into_iter()
        .enumerate()
        .map(|(i, (queued, speed))| (i, (queued as f64 + 1.0) / speed.max(1e-9)))
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .map(|(i, _)| i)
}

/// Batching across robots (EPARA's multi-request batching): inferences of the same model and
/// plan (the same server chunks and row ranges) waiting on one replica run as one batch, every
/// chunk one kernel call for all of them, each result the one its robot would get alone.
/// Batches form only from work already waiting, so batching adds no wait to an idle edge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Batching {
    /// The most inferences in one batch (1: no batching).
    pub max: usize,
    /// How long a batch waits for a member's band that every other member has sent before it
    /// drops that member (its robot finishes the frame alone).
    pub straggler_wait: Duration,
}

impl Batching {
    /// The most inferences a batch may hold (`edge.yaml`'s `max_batch` is checked against it).
    pub const MAX: usize = 64;
}

impl Default for Batching {
    /// No batching.
    fn default() -> Batching {
        Batching { max: 1, straggler_wait: Duration::from_millis(20) }
    }
}

/// How often an edge with a memory budget places its models again.
pub const PLACEMENT_PERIOD: Duration = Duration::from_secs(2);

/// The time constant of a model's demand (requests per second, decayed over about this long).
pub const DEMAND_WINDOW: Duration = Duration::from_secs(30);

/// A plan book's key: model index, robot profile hash, input wire.
type BookKey = (usize, String, InputWire);

/// What a plan book build ends with (errors as text: they go into a Reject).
type BookResult = std::result::Result<Arc<PlanBook>, String>;

/// A plan book, ready or being built (its result arrives on the channel).
enum BookSlot {
    Ready(Arc<PlanBook>),
    /// Being loaded or planned since the instant.
    Building(watch::Receiver<Option<BookResult>>, Instant),
}

struct Replica {
    worker: Worker,
    /// Its device (index into [`EdgeOptions::devices`]).
    device: usize,
    queued: AtomicUsize,
    /// Inferences whose first band has come, waiting for the worker; it takes them in order,
    /// each with the others of its plan up to [`Batching::max`].
    waiting: Arc<std::sync::Mutex<VecDeque<Waiting>>>,
}

/// An inference waiting on a replica: everything its server side needs, and where its outcome
/// goes.
struct Waiting {
    plan: Arc<Prepared>,
    meta: Arc<GraphMeta>,
    config: SideConfig,
    bands: mpsc::Receiver<Incoming>,
    out: Outbox,
    state: Arc<AtomicU8>,
    result: oneshot::Sender<Result<(Stopped, SideStats)>>,
    /// When its first result band went out (the start of its download, as the edge sees it).
    first_out: Arc<std::sync::OnceLock<Instant>>,
}

/// Batches run so far (two inferences or more) and the inferences in them.
#[derive(Debug, Default)]
struct BatchCounts {
    batches: AtomicU64,
    batched: AtomicU64,
}

/// Runs, on a replica's worker thread, the oldest waiting inference together with the others of
/// its plan (at most `batching.max`); inferences replaced before they started are skipped.
fn run_waiting(graph: &mut Graph, waiting: &std::sync::Mutex<VecDeque<Waiting>>, batching: Batching, counts: &BatchCounts) {
    let group: Vec<Waiting> = {
        let mut q = waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(first) = q.pop_front() else { return };
        let mut group = vec![first];
        let mut k = 0;
        while group.len() < batching.max && k < q.len() {
            let same = q[k].plan.plan_hash == group[0].plan.plan_hash && q[k].config.input_wire == group[0].config.input_wire;
            match (same, same.then(|| q.remove(k)).flatten()) {
                (true, Some(w)) => group.push(w),
                _ => k += 1,
            }
        }
        group
    };
    let mut jobs = Vec::with_capacity(group.len());
    for w in group {
        if w.state.compare_exchange(JOB_QUEUED, JOB_RUNNING, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            jobs.push(w);
        } else {
            // Replaced by a newer inference of its session before it started: nothing to do.
            let _ = w.result.send(Ok((Stopped::Aborted("replaced before it started".into()), SideStats::default())));
        }
    }
    if jobs.len() > 1 {
        match SideExec::batched(graph, Side::Server, jobs.len()) {
            Ok(mut exec) => {
                counts.batches.fetch_add(1, Ordering::Relaxed);
                counts.batched.fetch_add(jobs.len() as u64, Ordering::Relaxed);
                let mut sends: Vec<Box<dyn FnMut(Vec<u8>) -> bool>> = jobs
                    .iter()
                    .map(|j| {
                        let (out, first_out, id) = (j.out.clone(), j.first_out.clone(), j.config.inference_id);
                        Box::new(move |b: Vec<u8>| {
                            first_out.get_or_init(Instant::now);
                            out.send_band(id, b)
                        }) as Box<dyn FnMut(Vec<u8>) -> bool>
                    })
                    .collect();
                let mut members: Vec<Member<'_>> = jobs
                    .iter()
                    .zip(sends.iter_mut())
                    .map(|(j, send)| Member { config: j.config.clone(), incoming: &j.bands, send: send.as_mut() })
                    .collect();
                let config = BatchConfig { straggler_wait: batching.straggler_wait };
                let res = run_batch(&mut exec, &jobs[0].meta, &jobs[0].plan.schedule, &mut members, &config);
                drop(members);
                match res {
                    Ok(outcomes) => {
                        let n = jobs.len() as u32;
                        for (j, (stop, mut st)) in jobs.into_iter().zip(outcomes) {
                            st.batch = n;
                            let _ = j.result.send(Ok((stop, st)));
                        }
                    }
                    Err(e) => {
                        let text = e.to_string();
                        for j in jobs {
                            let _ = j.result.send(Err(Error::Executor(text.clone())));
                        }
                    }
                }
                return;
            }
            // A model without a batch axis: its inferences run one after the other.
            Err(e) => tracing::debug!(error = %e, "inferences run one by one"),
        }
    }
    for j in jobs {
        let mut exec = SideExec::new(graph, Side::Server);
        let (out, first_out, id) = (j.out.clone(), j.first_out.clone(), j.config.inference_id);
        let mut send = |b: Vec<u8>| {
            first_out.get_or_init(Instant::now);
            out.send_band(id, b)
        };
        let res = run_side(&mut exec, &j.meta, &j.plan.schedule, &j.config, &j.bands, &mut send).map(|(stop, mut st)| {
            st.batch = 1;
            (stop, st)
        });
        let _ = j.result.send(res);
    }
}

/// A model's recent demand: requests (Hellos and Starts), decayed with [`DEMAND_WINDOW`].
#[derive(Debug, Clone, Copy)]
struct Demand {
    count: f64,
    at: Instant,
}

impl Demand {
    fn decayed(&self, now: Instant) -> f64 {
        self.count * (-now.saturating_duration_since(self.at).as_secs_f64() / DEMAND_WINDOW.as_secs_f64()).exp()
    }
}

struct Model {
    id: String,
    /// Where it loads from, for placement's loads.
    source: String,
    load: LoadOptions,
    hash: Digest,
    meta: Arc<GraphMeta>,
    input_dtype: Option<GraphDType>,
    input_shape: Vec<u32>,
    /// Its warm replicas; none while it is cold (placement). A job holds the snapshot it was
    /// queued on, so unloading never pulls a replica from under a running inference.
    replicas: std::sync::RwLock<Arc<Vec<Replica>>>,
    /// Bytes of weights its replicas hold when warm (every replica's copy).
    bytes: u64,
    demand: std::sync::Mutex<Demand>,
    server_profile: Profile,
    /// Recent mean server compute seconds per inference (f64 bits): the profile's sum at
    /// first, then a moving average of measured inferences.
    server_s: AtomicU64,
    /// Its inferences that did not run here: refused as overloaded, forwarded, late; and
    /// those the robot cancelled.
    refusals: ModelRefusals,
}

/// Per model: inferences refused or cancelled (see [`ModelStats`]).
#[derive(Debug, Default)]
struct ModelRefusals {
    overloaded: AtomicU64,
    forwarded: AtomicU64,
    late: AtomicU64,
    cancelled: AtomicU64,
}

/// One model's state and counts now, for metrics ([`EdgeService::model_stats`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelStats {
    /// The model's id.
    pub id: String,
    /// Whether its replicas are loaded.
    pub warm: bool,
    /// Its warm replicas.
    pub replicas: usize,
    /// Replicas with an inference queued or running.
    pub replicas_busy: usize,
    /// Inferences refused at once (Error `Overloaded`).
    pub overloaded: u64,
    /// Inferences forwarded to another edge.
    pub forwarded: u64,
    /// Forwarded inferences that arrived too late (Error `Late`).
    pub late: u64,
    /// Inferences the robot cancelled.
    pub cancelled: u64,
}

impl Model {
    fn replicas(&self) -> Arc<Vec<Replica>> {
        self.replicas.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn set_replicas(&self, replicas: Vec<Replica>) -> Arc<Vec<Replica>> {
        std::mem::replace(&mut *self.replicas.write().unwrap_or_else(std::sync::PoisonError::into_inner), Arc::new(replicas))
    }

    /// Counts one request for it.
    fn asked(&self) {
        let now = Instant::now();
        let mut d = self.demand.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *d = Demand { count: d.decayed(now) + 1.0, at: now };
    }

    /// Requests per second lately.
    fn demand_per_s(&self, now: Instant) -> f64 {
        self.demand.lock().unwrap_or_else(std::sync::PoisonError::into_inner).decayed(now) / DEMAND_WINDOW.as_secs_f64()
    }
}

/// Bytes of a graph's weights.
fn weight_bytes(g: &Graph) -> u64 {
    g.nodes.iter().flat_map(|n| n.op.weights()).map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64).sum()
}

/// Spawns `n` replicas of a model on each of `devices` (each a thread that loads its own copy
/// on its device), device by device.
async fn spawn_replicas(id: &str, source: &str, load: &LoadOptions, devices: &[ServerDevice], n: usize) -> Result<(Vec<Replica>, Loaded)> {
    let mut replicas = Vec::new();
    let mut loaded = None;
    for (d, dev) in devices.iter().enumerate() {
        for r in 0..n {
            let (source, load, device) = (source.to_string(), load.clone(), dev.device);
            let (worker, info) = Worker::spawn(&format!("edge-{id}-{}-{r}", dev.name), move || {
                let mut g = lop::model::load(&source, &load)?;
                g.to_device(device)?;
                Ok(g)
            })
            .await?;
            replicas.push(Replica { worker, device: d, queued: AtomicUsize::new(0), waiting: Arc::default() });
            loaded = Some(info);
        }
    }
    let loaded = loaded.ok_or_else(|| Error::InvalidConfig { what: "replicas must be at least 1".into() })?;
    Ok((replicas, loaded))
}

/// Refuses options the edge cannot run with, before anything loads.
///
/// # Errors
/// [`Error::InvalidConfig`] for no replicas, a dilation under 1, a zero memory budget; the
/// table spec's own errors.
fn check_options(opts: &EdgeOptions) -> Result<()> {
    if opts.replicas == 0 {
        return Err(Error::InvalidConfig { what: "replicas must be at least 1".into() });
    }
    if opts.devices.is_empty() {
        return Err(Error::InvalidConfig { what: "an edge needs at least one device".into() });
    }
    for (i, d) in opts.devices.iter().enumerate() {
        if opts.devices[..i].iter().any(|e| e.name == d.name) {
            return Err(Error::InvalidConfig { what: format!("device '{}' is listed twice", d.name) });
        }
        if !(d.speed.is_finite() && d.speed > 0.0) {
            return Err(Error::InvalidConfig { what: format!("device '{}': speed {} must be > 0", d.name, d.speed) });
        }
    }
    if !(opts.dilation.is_finite() && opts.dilation >= 1.0) {
        return Err(Error::InvalidConfig { what: format!("dilation must be >= 1, got {}", opts.dilation) });
    }
    opts.spec.check()?;
    if opts.memory_budget == Some(0) {
        return Err(Error::InvalidConfig { what: "the memory budget must be more than 0 bytes".into() });
    }
    Ok(())
}

/// Loads every model served, in configuration order (see [`load_model`]).
///
/// # Errors
/// As [`load_model`].
async fn load_models(opts: &EdgeOptions) -> Result<Vec<Model>> {
    let mut models = Vec::new();
    // Preloading under a memory budget: models in configuration order while they fit.
    let mut budget_left = opts.memory_budget;
    for m in &opts.models {
        models.push(load_model(opts, m, &mut budget_left).await?);
    }
    Ok(models)
}

/// Loads one model: one replica first (it tells the model's hash, shapes and size), then the
/// others when it is warm, i.e. when there is no memory budget or it fits in what `budget_left`
/// still holds (taken from it); a cold model keeps no replica until placement loads it.
///
/// # Errors
/// A bad model id, a model that does not load, one larger than the whole memory budget, a
/// server profile that is not one of that model.
async fn load_model(opts: &EdgeOptions, m: &EdgeModel, budget_left: &mut Option<u64>) -> Result<Model> {
    lop_msgs::validate_id(&m.id).map_err(|e| Error::InvalidConfig { what: format!("model id '{}': {e}", m.id) })?;
    // One replica first: it tells the model's hash, shapes and size.
    let (mut replicas, info) = spawn_replicas(&m.id, &m.source, &m.load, &opts.devices[..1], 1).await?;
    let bytes = replicas[0].worker.call(|g| weight_bytes(g)).await? * (opts.replicas * opts.devices.len()) as u64;
    if let Some(budget) = opts.memory_budget
        && bytes > budget
    {
        return Err(Error::InvalidConfig {
            what: format!(
                "model '{}' takes {:.1} MB warm ({} replicas), more than the memory budget of {:.1} MB: it could never be served",
                m.id,
                bytes as f64 / 1e6,
                opts.replicas,
                budget as f64 / 1e6
            ),
        });
    }
    let warm = match budget_left.as_mut() {
        None => true,
        Some(left) if bytes <= *left => {
            *left -= bytes;
            true
        }
        Some(_) => false,
    };
    if warm {
        if opts.replicas > 1 {
            let (more, _) = spawn_replicas(&m.id, &m.source, &m.load, &opts.devices[..1], opts.replicas - 1).await?;
            replicas.extend(more);
        }
        if opts.devices.len() > 1 {
            let (more, _) = spawn_replicas(&m.id, &m.source, &m.load, &opts.devices[1..], opts.replicas).await?;
            // Their device indices count from the second device.
            replicas.extend(more.into_iter().map(|mut r| {
                r.device += 1;
                r
            }));
        }
    }
    if m.server_profile.model_hash != info.hash || m.server_profile.role != Side::Server {
        return Err(Error::InvalidConfig {
            what: format!("the server profile given for model '{}' is not a server profile of that model", m.id),
        });
    }
    if warm {
        let devices: Vec<&str> = opts.devices.iter().map(|d| d.name.as_str()).collect();
        tracing::info!(model = %m.id, hash = %info.hash, replicas = opts.replicas, ?devices, mb = bytes as f64 / 1e6, "model loaded");
    } else {
        replicas.clear();
        tracing::info!(model = %m.id, hash = %info.hash, mb = bytes as f64 / 1e6, "model cold: past the memory budget until robots ask for it");
    }
    Model::new(m, info, bytes, replicas)
}

impl Model {
    /// The served model `m` as loaded (`info`), with its replicas (none when cold) and the
    /// bytes they hold when warm; its server seconds start at its profile's sum.
    ///
    /// # Errors
    /// A model hash that is not a digest.
    fn new(m: &EdgeModel, info: Loaded, bytes: u64, replicas: Vec<Replica>) -> Result<Model> {
        let inputs: Vec<usize> = (0..info.meta.len()).filter(|&i| info.meta.is_input(i)).collect();
        let first = inputs.first().map(|&i| info.meta.info(i).clone());
        let profiled_s: f64 = m.server_profile.ops.iter().map(|op| op.fit.time(op.out_rows.max(1))).sum();
        Ok(Model {
            id: m.id.clone(),
            source: m.source.clone(),
            load: m.load.clone(),
            bytes,
            demand: std::sync::Mutex::new(Demand { count: 0.0, at: Instant::now() }),
            hash: digest(&info.hash)?,
            meta: Arc::new(info.meta),
            input_dtype: first.as_ref().map(|i| i.dtype),
            input_shape: first.map(|i| i.shape.iter().map(|&d| d as u32).collect()).unwrap_or_default(),
            replicas: std::sync::RwLock::new(Arc::new(replicas)),
            server_profile: m.server_profile.clone(),
            server_s: AtomicU64::new(profiled_s.max(1e-6).to_bits()),
            refusals: ModelRefusals::default(),
        })
    }
}

impl Inner {
    /// The service's state for `opts` and its loaded models: every counter at zero, no
    /// schedule table yet, no forwarding.
    fn new(opts: EdgeOptions, models: Vec<Model>) -> Inner {
        let robot_profiles = std::sync::Mutex::new(opts.robot_profiles.clone());
        Inner {
            place_now: tokio::sync::Notify::new(),
            opts,
            models,
            robot_profiles,
            books: std::sync::Mutex::new(HashMap::new()),
            stats: FrameStats::default(),
            sessions: AtomicU64::new(0),
            open_sessions: AtomicU64::new(0),
            rejects: std::array::from_fn(|_| AtomicU64::new(0)),
            rejected: AtomicU64::new(0),
            inferences: AtomicU64::new(0),
            done: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            overloaded: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            late: AtomicU64::new(0),
            input_mismatches: AtomicU64::new(0),
            outbound_refused: Arc::default(),
            batch_counts: Arc::default(),
            forwarding: std::sync::OnceLock::new(),
            rate_limited: AtomicU64::new(0),
            profiles_refused: AtomicU64::new(0),
            probes: Arc::default(),
            link_refusals: std::sync::Mutex::default(),
            received: std::sync::Mutex::new(ReceivedProfiles::default()),
            turns: std::sync::Mutex::default(),
            shutting_down: AtomicBool::new(false),
            served: broadcast::channel(SERVED_CHANNEL_CAPACITY).0,
            busy_ns: AtomicU64::new(0),
        }
    }
}

/// Weight of the newest measurement in a model's moving mean of server seconds.
const SERVER_S_EWMA: f64 = 0.2;

/// Picks the edge an inference goes to when this one cannot meet its deadline:
/// `(model id, seconds left of the deadline, edges to leave out)` to a fleet id, or `None`
/// when no edge can. See `crate::fleet::forward`.
pub type PickEdge = Box<dyn Fn(&str, f64, &[String]) -> Option<String> + Send + Sync>;

/// How an edge of a fleet forwards the inferences it cannot serve in time (EPARA's
/// forwarding). The edge answers a Start with Frame `Forward` naming the other edge; the robot,
/// which holds the input, sends it there (one upload instead of a relay's two) with the path in
/// its Start. An edge never forwards to an edge of the path or to itself, nor once the path is
/// `max_forwards` long: then it answers `Overloaded` at once and the robot runs the frame.
pub struct Forwarding {
    /// This edge's fleet id (appended to the path).
    pub edge_id: String,
    /// Most forwards a request may take, this one included (the default is 2).
    pub max_forwards: usize,
    /// Where to.
    pub pick: PickEdge,
}

impl std::fmt::Debug for Forwarding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarding").field("edge_id", &self.edge_id).field("max_forwards", &self.max_forwards).finish()
    }
}

/// One model's load on the edge now, for the fleet's load reports.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelLoadNow {
    /// The model's id.
    pub id: String,
    /// Inferences queued or running on its replicas.
    pub in_flight: usize,
    /// Recent mean server compute seconds per inference.
    pub server_s: f64,
    /// Whether its replicas are loaded (placement may keep it cold under a memory budget).
    pub warm: bool,
}

/// Service-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EdgeCounts {
    /// Sessions welcomed.
    pub sessions: u64,
    /// Sessions rejected.
    pub rejected: u64,
    /// Inferences started.
    pub inferences: u64,
    /// Inferences that ended with Done.
    pub done: u64,
    /// Inferences aborted or failed.
    pub aborted: u64,
    /// Inferences the robot cancelled (it computed the answer itself past the frame's
    /// deadline); each is also counted in `aborted` once its replica stops.
    pub cancelled: u64,
    /// Inferences refused at once (Error `Overloaded`): the work queued ahead of them on the
    /// model's replicas would not have let them finish before their deadline.
    pub overloaded: u64,
    /// Inferences this edge could not meet the deadline of and forwarded to another edge of the
    /// fleet (Frame `Forward`), never computed here.
    pub forwarded: u64,
    /// Forwarded inferences that arrived with too little of their deadline left (Error `Late`),
    /// answered at once, never computed.
    pub late: u64,
    /// Inferences refused because a coded input band did not decode to the robot's pixels
    /// (Error `InputMismatch`); each is also counted in `aborted`.
    pub input_mismatches: u64,
    /// Inferences given up because a band of theirs did not fit the session's send queue (its
    /// robot reads slower than the edge sends, or has stopped: `zenoh_link::admission`'s
    /// `SESSION_OUT_BYTES` and `TOTAL_OUT_BYTES`); each is also counted in `aborted`, and its
    /// robot finishes it alone.
    pub outbound_refused: u64,
    /// Batches run (two inferences of one plan or more at once, [`Batching`]).
    pub batches: u64,
    /// Inferences that ran in those batches.
    pub batched: u64,
    /// Start frames dropped because their session sent more than [`MAX_STARTS_PER_S`] (a
    /// flood: no answer is sent, the robot finishes such an inference alone at its deadline).
    pub rate_limited: u64,
    /// Hellos refused because they carried a robot profile the edge has not seen while
    /// [`MAX_RECEIVED_BUILDS`] schedule tables were being built (the robot retries, running
    /// alone meanwhile).
    pub profiles_refused: u64,
    /// Received robot profiles forgotten, to make room for newer ones or unused for an hour
    /// ([`ReceivedProfiles`]); their plan books go with them.
    pub profiles_evicted: u64,
    /// Robot profiles received in Hellos and kept now (at most
    /// [`crate::received_profiles::MAX_RECEIVED_PROFILES`]).
    pub profiles_kept: u64,
    /// Bandwidth probes answered ([`crate::bandwidth::probe::serve_probes`]).
    pub probes_answered: u64,
    /// Bandwidth probes refused: their peer, or all peers, past the probe budget
    /// ([`crate::bandwidth::probe_limit::ProbeLimits`]).
    pub probes_refused: u64,
    /// Bytes sent in answer to probes.
    pub probe_bytes: u64,
    /// Hellos refused before any session was made, past a cap of the acceptor: sessions open,
    /// robot ids tracked, or bytes queued in all sessions
    /// ([`crate::zenoh_link::admission`]); the robot is told `Busy` and runs alone.
    pub sessions_refused: u64,
    /// Frames dropped, by reason.
    pub dropped: FrameCounts,
}

/// How a served inference ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServedOutcome {
    /// The server finished its part and sent Done.
    Done,
    /// The deadline passed before the server finished its part.
    DeadlineExceeded,
    /// Aborted (a newer inference, the session ended, the link broke), with the reason.
    Aborted(String),
    /// The engine or the replica failed, with the error.
    Failed(String),
}

impl ServedOutcome {
    /// `done`, `deadline`, `aborted` or `failed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ServedOutcome::Done => "done",
            ServedOutcome::DeadlineExceeded => "deadline",
            ServedOutcome::Aborted(_) => "aborted",
            ServedOutcome::Failed(_) => "failed",
        }
    }
}

/// One inference the edge served (its server part), as reported by [`EdgeService::served`].
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// The robot's inference id.
    pub inference_id: u64,
    /// The robot (its Hello's robot id).
    pub robot_id: String,
    /// The model's id.
    pub model_id: String,
    /// Which warm replica of the model ran it.
    pub replica: usize,
    /// When the server part was queued on the replica (monotonic clock).
    pub start: Instant,
    /// When it ended.
    pub end: Instant,
    /// `start` on the wall clock.
    pub start_wall: std::time::SystemTime,
    /// Seconds the server spent computing chunks (0 when it failed before reporting).
    pub server_compute_s: f64,
    /// Bytes of bands the server received for it.
    pub bytes_received: u64,
    /// Bytes of bands the server sent for it.
    pub bytes_sent: u64,
    /// Seconds from its Start's arrival to its last band's, as the edge saw the upload (0
    /// before any band).
    pub upload_s: f64,
    /// Seconds it was on the edge but neither computing nor waiting for bands: its wait for
    /// the replica (queue) and the edge's own overhead.
    pub queue_s: f64,
    /// Inferences computed together in the batch it ran in (1: alone; 0: it never ran).
    pub batch: u32,
    /// Seconds from its first result band out to its end: its download as the edge sees it
    /// (0 when it sent none).
    pub download_s: f64,
    /// The device it ran on (its name in [`EdgeOptions::devices`]; empty when it never ran).
    pub device: String,
    /// How it ended.
    pub outcome: ServedOutcome,
}

impl Served {
    /// `end - start`.
    pub fn duration(&self) -> Duration {
        self.end.saturating_duration_since(self.start)
    }
}

/// Capacity of the [`EdgeService::served`] channel: a receiver that falls further behind loses
/// the oldest reports (and is told how many).
pub const SERVED_CHANNEL_CAPACITY: usize = 1024;

/// The edge service. Cheap to clone (shared state).
#[derive(Clone)]
pub struct EdgeService {
    inner: Arc<Inner>,
}

struct Inner {
    opts: EdgeOptions,
    models: Vec<Model>,
    robot_profiles: std::sync::Mutex<Vec<Profile>>,
    books: std::sync::Mutex<HashMap<BookKey, BookSlot>>,
    stats: FrameStats,
    sessions: AtomicU64,
    /// Sessions open now (links served, welcomed or not).
    open_sessions: AtomicU64,
    /// Hellos refused, by [`RejectReason`] code.
    rejects: [AtomicU64; 256],
    rejected: AtomicU64,
    inferences: AtomicU64,
    done: AtomicU64,
    aborted: AtomicU64,
    cancelled: AtomicU64,
    overloaded: AtomicU64,
    forwarded: AtomicU64,
    late: AtomicU64,
    input_mismatches: AtomicU64,
    outbound_refused: Arc<AtomicU64>,
    /// Shared with the replicas' worker threads.
    batch_counts: Arc<BatchCounts>,
    rate_limited: AtomicU64,
    profiles_refused: AtomicU64,
    /// The probe responder's counts (the responder runs beside the service, on its session).
    probes: Arc<crate::bandwidth::probe_limit::ProbeCounts>,
    /// Hellos its acceptors refused past their session caps (`zenoh_link::admission`).
    link_refusals: std::sync::Mutex<Vec<Arc<AtomicU64>>>,
    /// Where inferences this edge cannot serve in time go (set once the fleet view is up).
    forwarding: std::sync::OnceLock<Forwarding>,
    /// Robot profiles received in Hellos and remembered, bounded ([`ReceivedProfiles`]).
    received: std::sync::Mutex<ReceivedProfiles>,
    /// New profiles refused for want of a build slot, waiting their turn ([`BuildTurns`]).
    turns: std::sync::Mutex<BuildTurns>,
    shutting_down: AtomicBool,
    served: broadcast::Sender<Served>,
    /// Server compute time of every inference so far, nanoseconds.
    busy_ns: AtomicU64,
    /// Wakes placement at once (a Hello for a cold model).
    place_now: tokio::sync::Notify,
}

impl std::fmt::Debug for EdgeService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeService").field("models", &self.inner.models.iter().map(|m| &m.id).collect::<Vec<_>>()).finish()
    }
}

impl EdgeService {
    /// Loads every model on its replicas (each replica a thread with its own copy, `replicas`
    /// on each of `opts.devices`) and checks each server profile against its model.
    ///
    /// # Errors
    /// A model that does not load, a profile for another model, a bad option.
    pub async fn start(opts: EdgeOptions) -> Result<EdgeService> {
        check_options(&opts)?;
        let models = load_models(&opts).await?;
        let svc = EdgeService { inner: Arc::new(Inner::new(opts, models)) };
        if svc.inner.opts.memory_budget.is_some() {
            tokio::spawn(placement_loop(Arc::downgrade(&svc.inner)));
        }
        Ok(svc)
    }

    /// Lets this edge forward the inferences it cannot serve in time (see [`Forwarding`]).
    /// Set once, when the edge's fleet view is up.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when forwarding is set already, or `max_forwards` exceeds what
    /// a Start's path can carry ([`MAX_PATH`](lop_msgs::protocol::MAX_PATH)).
    pub fn set_forwarding(&self, forwarding: Forwarding) -> Result<()> {
        if forwarding.max_forwards > lop_msgs::protocol::MAX_PATH {
            return Err(Error::InvalidConfig {
                what: format!("max_forwards is {}, at most {} allowed", forwarding.max_forwards, lop_msgs::protocol::MAX_PATH),
            });
        }
        lop_msgs::validate_id(&forwarding.edge_id).map_err(|e| Error::InvalidConfig { what: e.to_string() })?;
        self.inner.forwarding.set(forwarding).map_err(|_| Error::InvalidConfig { what: "forwarding is set already".into() })
    }

    /// Counters so far.
    pub fn counts(&self) -> EdgeCounts {
        let i = &self.inner;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EdgeCounts {
            sessions: l(&i.sessions),
            rejected: l(&i.rejected),
            inferences: l(&i.inferences),
            done: l(&i.done),
            aborted: l(&i.aborted),
            cancelled: l(&i.cancelled),
            overloaded: l(&i.overloaded),
            forwarded: l(&i.forwarded),
            late: l(&i.late),
            input_mismatches: l(&i.input_mismatches),
            outbound_refused: l(&i.outbound_refused),
            batches: l(&i.batch_counts.batches),
            batched: l(&i.batch_counts.batched),
            rate_limited: l(&i.rate_limited),
            profiles_refused: l(&i.profiles_refused),
            profiles_evicted: i.received.lock().map_or(0, |r| r.evicted()),
            profiles_kept: i.received.lock().map_or(0, |r| r.len() as u64),
            probes_answered: i.probes.snapshot().0,
            probes_refused: i.probes.snapshot().1,
            probe_bytes: i.probes.snapshot().2,
            sessions_refused: i.link_refusals.lock().map_or(0, |v| v.iter().map(|c| c.load(Ordering::Relaxed)).sum()),
            dropped: i.stats.snapshot(),
        }
    }

    /// Counts the Hellos an acceptor serving this service refuses past its caps in
    /// [`EdgeCounts::sessions_refused`] (`serve_zenoh` does it).
    pub fn track_link_refusals(&self, counter: Arc<AtomicU64>) {
        if let Ok(mut v) = self.inner.link_refusals.lock() {
            v.push(counter);
        }
    }

    /// Where the probe responder beside this service counts (`serve_probes`), so that
    /// [`EdgeService::counts`] reports its probes too.
    pub fn probe_counts(&self) -> Arc<crate::bandwidth::probe_limit::ProbeCounts> {
        self.inner.probes.clone()
    }

    /// Every model's load now (in-flight inferences, mean server seconds): what the fleet's load
    /// reports are made of (`crate::fleet`).
    pub fn model_loads(&self) -> Vec<ModelLoadNow> {
        self.inner
            .models
            .iter()
            .map(|m| {
                let replicas = m.replicas();
                ModelLoadNow {
                    id: m.id.clone(),
                    in_flight: replicas.iter().map(|r| r.queued.load(Ordering::Relaxed)).sum(),
                    server_s: f64::from_bits(m.server_s.load(Ordering::Relaxed)),
                    warm: !replicas.is_empty(),
                }
            })
            .collect()
    }

    /// Every device's warm replicas and the inferences queued on them now (in configuration
    /// order).
    pub fn device_loads(&self) -> Vec<DeviceLoad> {
        let mut loads: Vec<DeviceLoad> =
            self.inner.opts.devices.iter().map(|d| DeviceLoad { name: d.name.clone(), speed: d.speed, replicas: 0, queued: 0 }).collect();
        for m in &self.inner.models {
            for r in m.replicas().iter() {
                if let Some(l) = loads.get_mut(r.device) {
                    l.replicas += 1;
                    l.queued += r.queued.load(Ordering::Relaxed);
                }
            }
        }
        loads
    }

    /// Every model's state and refusals now (in configuration order).
    pub fn model_stats(&self) -> Vec<ModelStats> {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.inner
            .models
            .iter()
            .map(|m| {
                let replicas = m.replicas();
                ModelStats {
                    id: m.id.clone(),
                    warm: !replicas.is_empty(),
                    replicas: replicas.len(),
                    replicas_busy: replicas.iter().filter(|r| r.queued.load(Ordering::Relaxed) > 0).count(),
                    overloaded: l(&m.refusals.overloaded),
                    forwarded: l(&m.refusals.forwarded),
                    late: l(&m.refusals.late),
                    cancelled: l(&m.refusals.cancelled),
                }
            })
            .collect()
    }

    /// Hellos refused so far, by reason (every reason, zeros included).
    pub fn rejects(&self) -> Vec<(RejectReason, u64)> {
        (0..=u8::MAX)
            .filter_map(RejectReason::from_u8)
            .map(|r| (r, self.inner.rejects.get(r as usize).map_or(0, |c| c.load(Ordering::Relaxed))))
            .collect()
    }

    /// Sessions open now.
    pub fn open_sessions(&self) -> u64 {
        self.inner.open_sessions.load(Ordering::Relaxed)
    }

    /// Schedule tables being loaded or planned now, and how long the oldest has taken so far.
    pub fn tables_building(&self) -> (usize, Duration) {
        let books = self.inner.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        books.values().fold((0, Duration::ZERO), |(n, oldest), slot| match slot {
            BookSlot::Building(_, since) => (n + 1, oldest.max(since.elapsed())),
            BookSlot::Ready(_) => (n, oldest),
        })
    }

    /// Plans (or loads from the cache) the schedule tables of the robot profiles in the
    /// configured profiles folder, for each model whose profile they are, and waits for them;
    /// returns how many are ready. A table that fails is logged and not counted.
    pub async fn prepare_tables(&self) -> usize {
        let Some(dir) = self.inner.opts.profiles_dir.clone() else { return 0 };
        let Ok(entries) = std::fs::read_dir(&dir) else { return 0 };
        let mut waits = Vec::new();
        for path in entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")) {
            let Ok(p) = Profile::load(&path) else { continue };
            if p.role != Side::Robot {
                continue;
            }
            for (mi, m) in self.inner.models.iter().enumerate() {
                if p.model_hash == m.server_profile.model_hash && !m.replicas().is_empty() {
                    tracing::info!(model = %m.id, profile = %path.display(), "preparing the schedule table of a configured robot profile");
                    waits.push(Inner::book(&self.inner, mi, p.clone(), InputWire::Native));
                }
            }
        }
        let mut ready = 0;
        for mut rx in waits {
            if let Ok(r) = rx.wait_for(Option::is_some).await
                && matches!(&*r, Some(Ok(_)))
            {
                ready += 1;
            }
        }
        ready
    }

    /// Takes the service's locks in turn and lets go: a serving loop that deadlocked on one
    /// would hang here, so the edge's heartbeat (and systemd's watchdog) stops.
    pub fn heartbeat(&self) {
        drop(self.inner.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        drop(self.inner.robot_profiles.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for m in &self.inner.models {
            drop(m.replicas());
        }
    }

    /// Seconds of server compute spent on every inference so far (a monotonic counter: its
    /// growth over a period is the busy time of that period).
    pub fn busy_s(&self) -> f64 {
        self.inner.busy_ns.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// Stops accepting sessions and inferences (Hello gets Reject "shutting down", Start gets
    /// Error); inferences already running finish.
    pub fn shutdown(&self) {
        self.inner.shutting_down.store(true, Ordering::SeqCst);
    }

    /// Whether [`EdgeService::shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutting_down.load(Ordering::SeqCst)
    }

    /// Inferences whose server part is queued or running now.
    pub fn in_flight(&self) -> u64 {
        let c = self.counts();
        c.inferences.saturating_sub(c.done + c.aborted)
    }

    /// Waits until no inference is in flight, checking every 10 ms, for at most `grace`.
    /// Returns whether none was left. Call after [`EdgeService::shutdown`] so that no new one
    /// starts meanwhile.
    pub async fn drain(&self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            if self.in_flight() == 0 {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A receiver of every inference served from now on (one [`Served`] as each ends, whatever
    /// its outcome). Receivers that lag more than [`SERVED_CHANNEL_CAPACITY`] reports behind lose
    /// the oldest ones; with no receiver, reports are discarded.
    pub fn served(&self) -> broadcast::Receiver<Served> {
        self.inner.served.subscribe()
    }

    /// The ids of the models served, in configuration order.
    pub fn model_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::new();
        for m in &self.inner.models {
            if !ids.contains(&m.id) {
                ids.push(m.id.clone());
            }
        }
        ids
    }

    /// Serves one robot session over a link until the robot closes it or the link breaks.
    pub async fn serve<T: LinkTx + 'static, R: LinkRx>(&self, tx: T, mut rx: R) {
        self.inner.open_sessions.fetch_add(1, Ordering::Relaxed);
        let _open = OpenSession(&self.inner.open_sessions);
        let (out, out_rx) = Outbox::new();
        let writer = tokio::spawn(write_session(tx, out_rx, out.given_up(), self.inner.outbound_refused.clone()));
        let mut s = Session {
            svc: self.inner.clone(),
            out,
            model: None,
            book: None,
            input_wire: InputWire::Native,
            current: None,
            last_id: 0,
            robot_id: String::new(),
            starts: StartBudget::new(tokio::time::Instant::now()),
            refused: false,
        };
        let hello_deadline = tokio::time::Instant::now() + self.inner.opts.hello_timeout;
        loop {
            let next = if s.book.is_none() { tokio::time::timeout_at(hello_deadline, rx.recv()).await } else { Ok(rx.recv().await) };
            let bytes = match next {
                Ok(Ok(Some(b))) => b,
                Ok(Ok(None)) => break,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "session link broke");
                    break;
                }
                Err(_) => {
                    tracing::warn!("no Hello in time; closing the session");
                    break;
                }
            };
            match classify(&self.inner.opts.limits, bytes, &self.inner.stats) {
                None => {}
                Some(Inbound::Control(f)) => s.control(f).await,
                Some(Inbound::Band(id, frame)) => s.band(id, frame),
            }
            if s.refused {
                // A refused Hello ends its session at once (its Reject still goes out): a robot
                // retries with a new Hello, which makes a new session, so a refused one would
                // only hold its threads and queue until `hello_timeout`.
                break;
            }
        }
        s.abort_current("the session ended");
        drop(s);
        let _ = writer.await;
    }
}

/// Counts an open session until dropped.
struct OpenSession<'a>(&'a AtomicU64);

impl Drop for OpenSession<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Start frames a session may send per second, sustained (a camera at 30 fps sends 30; the
/// robot infers at most as fast as it computes).
pub const MAX_STARTS_PER_S: f64 = 100.0;
/// Start frames a session may send at once above the sustained rate.
pub const START_BURST: f64 = 20.0;
/// Extra Start tokens a session pays when it starts an inference while its previous one has
/// received no band at all: a Start with nothing to compute holds a replica until it is
/// replaced, so a session that keeps doing so is slowed to a few Starts a second.
pub const EMPTY_START_PENALTY: f64 = 10.0;
/// Schedule tables being built (any profile's) past which a Hello with a new robot profile is
/// refused as `Planning`, to retry: each table is planned on the model's first replica, so a
/// flood of made-up profiles would otherwise queue plannings ahead of every inference there.
pub const MAX_RECEIVED_BUILDS: usize = 1;

/// A token bucket of Start frames: [`MAX_STARTS_PER_S`], bursts of [`START_BURST`].
#[derive(Debug)]
struct StartBudget {
    tokens: f64,
    at: tokio::time::Instant,
}

impl StartBudget {
    fn new(now: tokio::time::Instant) -> StartBudget {
        StartBudget { tokens: START_BURST, at: now }
    }

    /// Charges `tokens` more (down to one burst in debt).
    fn charge(&mut self, tokens: f64) {
        self.tokens = (self.tokens - tokens).max(-START_BURST);
    }

    /// Takes one Start's token; false when the session is over its rate.
    fn take(&mut self, now: tokio::time::Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * MAX_STARTS_PER_S;
        self.tokens = (self.tokens + refill).min(START_BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Where a queued inference stands on its replica, so that one replaced before it started stops
/// counting as work queued ahead of others at once (a session has at most one queued).
const JOB_QUEUED: u8 = 0;
const JOB_RUNNING: u8 = 1;
const JOB_RELEASED: u8 = 2;

/// One inference running on a replica.
struct Active {
    id: u64,
    plan: Arc<Prepared>,
    bands: mpsc::Sender<Incoming>,
    received: Vec<bool>,
    /// [`JOB_QUEUED`], [`JOB_RUNNING`] or [`JOB_RELEASED`].
    state: Arc<AtomicU8>,
    /// The replicas (the snapshot it was queued on) and the one whose queue count this job
    /// holds until it ends or is released.
    replicas: Arc<Vec<Replica>>,
    replica: usize,
    /// Sends the job to its replica; taken by the first band.
    go: Option<oneshot::Sender<()>>,
    /// Whether its session paid [`EMPTY_START_PENALTY`] for it.
    charged: bool,
    /// When its Start arrived, and the last band's arrival after it (ns; 0 before any band):
    /// the upload as this edge saw it, reported in Done as `upload_ns`.
    arrived: Instant,
    upload_ns: Arc<AtomicU64>,
}

/// The answer to a Start as an Error frame.
fn error_frame(s: &Start, code: ErrorCode, text: String) -> Frame {
    Frame::Error(ErrorFrame { inference_id: s.inference_id, code, text })
}

/// A Start this edge serves: its plan and the replica it is queued on (in the snapshot of the
/// model's replicas it was chosen from).
struct Admitted {
    plan: Arc<Prepared>,
    replicas: Arc<Vec<Replica>>,
    replica: usize,
}

/// What ended the server part of an inference: the replica's outcome, or (`Err`) a replica
/// that dropped the inference without one.
type JobResult = std::result::Result<Result<(Stopped, SideStats)>, oneshot::error::RecvError>;

/// A queued inference's task: what it needs once its Start is handled, until it ends.
struct Job {
    svc: Arc<Inner>,
    out: Outbox,
    /// The inference's id.
    id: u64,
    /// The model's index.
    mi: usize,
    /// [`JOB_QUEUED`], [`JOB_RUNNING`] or [`JOB_RELEASED`] (shared with its [`Active`]).
    state: Arc<AtomicU8>,
    replicas: Arc<Vec<Replica>>,
    replica: usize,
    robot_id: String,
    started: Instant,
    started_wall: std::time::SystemTime,
    /// The upload as this edge saw it (set by the session's bands), for Done.
    upload_ns: Arc<AtomicU64>,
    /// When its first result band went out (set on the replica's thread).
    first_out: Arc<std::sync::OnceLock<Instant>>,
    deadline: Instant,
}

impl Job {
    /// Waits for the inference's first band (or its end), runs it on the replica, then gives
    /// back its place in the replica's count, records it (busy time, the model's server
    /// seconds, [`EdgeService::served`]) and answers Done or Error.
    async fn run(self, first_band: oneshot::Receiver<()>, waiting: Waiting, finished: oneshot::Receiver<Result<(Stopped, SideStats)>>) {
        let res = match tokio::time::timeout_at(tokio::time::Instant::from_std(self.deadline), first_band).await {
            Ok(Ok(())) => self.on_replica(waiting, finished).await,
            // Replaced, or its session ended, or its deadline passed, before any band came.
            why => self.released(why.is_err()),
        };
        let ended = Instant::now();
        if self.state.load(Ordering::SeqCst) != JOB_RELEASED {
            self.replicas[self.replica].queued.fetch_sub(1, Ordering::Relaxed);
        }
        let (stats, outcome) = match &res {
            Ok(Ok((Stopped::Finished, st))) => (Some(*st), ServedOutcome::Done),
            Ok(Ok((Stopped::DeadlineExceeded, st))) => (Some(*st), ServedOutcome::DeadlineExceeded),
            Ok(Ok((Stopped::Aborted(why), st))) => (Some(*st), ServedOutcome::Aborted(why.clone())),
            Ok(Err(e)) => (None, ServedOutcome::Failed(e.to_string())),
            Err(_) => (None, ServedOutcome::Failed("the replica failed".into())),
        };
        if let Some(st) = stats.filter(|st| st.compute_s.is_finite() && st.compute_s > 0.0) {
            self.svc.busy_ns.fetch_add((st.compute_s * 1e9) as u64, Ordering::Relaxed);
            if outcome == ServedOutcome::Done {
                // In the first device's seconds: a faster device's inference counts for more.
                let speed = self.replicas.get(self.replica).and_then(|r| self.svc.opts.devices.get(r.device)).map_or(1.0, |d| d.speed);
                let cell = &self.svc.models[self.mi].server_s;
                let old = f64::from_bits(cell.load(Ordering::Relaxed));
                cell.store((old + SERVER_S_EWMA * (st.compute_s * speed - old)).to_bits(), Ordering::Relaxed);
            }
        }
        let served = Served {
            inference_id: self.id,
            robot_id: self.robot_id.clone(),
            model_id: self.svc.models[self.mi].id.clone(),
            replica: self.replica,
            start: self.started,
            end: ended,
            start_wall: self.started_wall,
            server_compute_s: stats.map_or(0.0, |s| s.compute_s),
            bytes_received: stats.map_or(0, |s| s.bytes_received),
            bytes_sent: stats.map_or(0, |s| s.bytes_sent),
            upload_s: self.upload_ns.load(Ordering::Relaxed) as f64 * 1e-9,
            queue_s: stats.map_or(0.0, |s| (ended.saturating_duration_since(self.started).as_secs_f64() - s.compute_s - s.wait_s).max(0.0)),
            batch: stats.map_or(0, |s| s.batch),
            download_s: self.first_out.get().map_or(0.0, |f| ended.saturating_duration_since(*f).as_secs_f64()),
            device: stats
                .and_then(|_| self.replicas.get(self.replica))
                .and_then(|r| self.svc.opts.devices.get(r.device))
                .map(|d| d.name.clone())
                .unwrap_or_default(),
            outcome,
        };
        if let Ok(b) = self.answer(res).encode() {
            self.out.send(b);
        }
        // No receiver is not an error: nobody asked.
        let _ = self.svc.served.send(served);
    }

    /// Puts the inference in its replica's queue, posts a run for it, and waits for its outcome.
    async fn on_replica(&self, waiting: Waiting, finished: oneshot::Receiver<Result<(Stopped, SideStats)>>) -> JobResult {
        let replica = &self.replicas[self.replica];
        replica.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push_back(waiting);
        let (queue, batching, counts) = (replica.waiting.clone(), self.svc.opts.batching, self.svc.batch_counts.clone());
        // Each waiting inference posts one run; a run finds the queue empty when an
        // earlier one took its inference into a batch. The outcome comes on `finished`.
        drop(replica.worker.run(move |g: &mut Graph| run_waiting(g, &queue, batching, &counts)));
        finished.await
    }

    /// The outcome of an inference that ended before any band came (`expired`: its deadline
    /// passed); its place in the replica's count is given back unless that was done already.
    fn released(&self, expired: bool) -> JobResult {
        if self.state.compare_exchange(JOB_QUEUED, JOB_RELEASED, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            self.replicas[self.replica].queued.fetch_sub(1, Ordering::Relaxed);
        }
        let stop = if expired { Stopped::DeadlineExceeded } else { Stopped::Aborted("no band before it ended".into()) };
        Ok(Ok((stop, SideStats::default())))
    }

    /// The answer to the robot (Done with the server's statistics, or Error), counted as done
    /// or aborted.
    fn answer(&self, res: JobResult) -> Frame {
        let (svc, id) = (&self.svc, self.id);
        match res {
            Ok(Ok((Stopped::Finished, st))) => {
                svc.done.fetch_add(1, Ordering::Relaxed);
                Frame::Done(Done {
                    inference_id: id,
                    stats: DoneStats {
                        server_compute_ns: (st.compute_s * 1e9) as u64,
                        server_wait_ns: (st.wait_s * 1e9) as u64,
                        bytes_received: st.bytes_received,
                        bytes_sent: st.bytes_sent,
                        bands_received: st.bands_received,
                        bands_sent: st.bands_sent,
                        upload_ns: self.upload_ns.load(Ordering::Relaxed),
                    },
                })
            }
            Ok(Ok((stop, _))) => {
                svc.aborted.fetch_add(1, Ordering::Relaxed);
                let code = if stop == Stopped::DeadlineExceeded { ErrorCode::DeadlineExceeded } else { ErrorCode::Other };
                Frame::Error(ErrorFrame { inference_id: id, code, text: format!("{stop:?}").chars().take(200).collect() })
            }
            Ok(Err(Error::InputMismatch(why))) => {
                svc.aborted.fetch_add(1, Ordering::Relaxed);
                svc.input_mismatches.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(inference = id, %why, "refused a coded input band");
                Frame::Error(ErrorFrame { inference_id: id, code: ErrorCode::InputMismatch, text: why.chars().take(200).collect() })
            }
            Ok(Err(e)) => {
                svc.aborted.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "server side failed");
                Frame::Error(ErrorFrame { inference_id: id, code: ErrorCode::Internal, text: e.to_string().chars().take(200).collect() })
            }
            Err(_) => {
                svc.aborted.fetch_add(1, Ordering::Relaxed);
                Frame::Error(ErrorFrame { inference_id: id, code: ErrorCode::Internal, text: "the replica failed".into() })
            }
        }
    }
}

struct Session {
    svc: Arc<Inner>,
    out: Outbox,
    model: Option<usize>,
    book: Option<Arc<PlanBook>>,
    input_wire: InputWire,
    current: Option<Active>,
    last_id: u64,
    robot_id: String,
    starts: StartBudget,
    /// Its Hello was refused: the session ends once the Reject is sent.
    refused: bool,
}

impl Session {
    fn send(&self, f: Frame) {
        match f.encode() {
            Ok(b) => {
                self.out.send(b);
            }
            Err(e) => tracing::error!(error = %e, "encoding a frame"),
        }
    }

    fn reject(&mut self, reason: RejectReason, text: String) {
        self.reject_with(reason, text, Vec::new());
    }

    fn reject_with(&mut self, reason: RejectReason, text: String, server_profile: Vec<u8>) {
        self.refused = true;
        tracing::info!(?reason, %text, "rejecting a session");
        self.svc.rejected.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.svc.rejects.get(reason as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let text: String = text.chars().take(200).collect();
        self.send(Frame::Reject(Reject { reason, text, server_profile }));
    }

    /// Stops the current inference; whether it was still queued or running (a job that ended
    /// has dropped its band channel).
    fn abort_current(&mut self, why: &str) -> bool {
        let Some(a) = self.current.take() else { return false };
        // Not started yet: it no longer counts as queued work; the replica skips it.
        let queued = a.state.compare_exchange(JOB_QUEUED, JOB_RELEASED, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        if queued {
            a.replicas[a.replica].queued.fetch_sub(1, Ordering::Relaxed);
        }
        let running = a.bands.send(Incoming::Abort(why.to_string())).is_ok();
        queued || running
    }

    async fn control(&mut self, f: Frame) {
        match f {
            Frame::Hello(h) => self.hello(h).await,
            Frame::Start(s) => self.start(s),
            Frame::Cancel(c) => self.cancel(c.inference_id),
            _ => self.svc.stats.count(Dropped::Unexpected),
        }
    }

    /// The robot computed this inference's answer itself (past the frame's deadline): stop
    /// working on it, so that the replica serves other frames. A Cancel of an inference that
    /// is not this session's current one (finished, replaced) is stale and changes nothing.
    fn cancel(&mut self, id: u64) {
        if self.current.as_ref().is_some_and(|a| a.id == id) && self.abort_current("cancelled by the robot") {
            tracing::debug!(inference = id, "cancelled by the robot");
            self.svc.cancelled.fetch_add(1, Ordering::Relaxed);
            if let Some(m) = self.model.and_then(|mi| self.svc.models.get(mi)) {
                m.refusals.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            self.svc.stats.count(Dropped::Stale);
        }
    }

    async fn hello(&mut self, h: Hello) {
        self.abort_current("a new Hello");
        self.book = None;
        if self.svc.shutting_down.load(Ordering::SeqCst) {
            return self.reject(RejectReason::ShuttingDown, "the edge is shutting down".into());
        }
        let Some(mi) = self.svc.models.iter().position(|m| m.hash == h.model_sha256) else {
            // The same model at another input size is the likely cause: say which sizes are served.
            let shapes: Vec<&Vec<u32>> = self.svc.models.iter().filter(|m| m.id == h.model_id).map(|m| &m.input_shape).collect();
            let text = if shapes.is_empty() || shapes.contains(&&h.input_shape) {
                format!("no model with sha256 {} (id '{}') in the store", h.model_sha256.to_hex(), h.model_id)
            } else {
                format!(
                    "model '{}' is served at input shapes {shapes:?}, not {:?} (edge: models[].input_shapes, or models[].camera_fits for robots with image.camera_size)",
                    h.model_id, h.input_shape
                )
            };
            return self.reject(RejectReason::UnknownModel, text);
        };
        let model = &self.svc.models[mi];
        if h.input_shape != model.input_shape {
            return self
                .reject(RejectReason::BadInput, format!("input shape {:?}, the model takes {:?}", h.input_shape, model.input_shape));
        }
        let input_wire = match (h.input_dtype, model.input_dtype) {
            (DType::F32, Some(GraphDType::U8)) => InputWire::F32,
            (DType::U8, Some(GraphDType::U8)) | (DType::F32, Some(GraphDType::F32)) => InputWire::Native,
            (d, m) => return self.reject(RejectReason::BadInput, format!("input dtype {d:?} for a model input of {m:?}")),
        };
        let spec_hash = self.svc.opts.spec.hash();
        if digest(&spec_hash).ok() != Some(h.planner_hash) {
            return self.reject(
                RejectReason::NoTable,
                format!("planner configuration {} differs from the edge's {spec_hash}", h.planner_hash.to_hex()),
            );
        }
        model.asked();
        if model.replicas().is_empty() {
            // Cold under the memory budget: this request (a well-formed one: model, shape, dtype and
            // planner checked) counts for placement, run now.
            self.svc.place_now.notify_one();
            return self.reject(
                RejectReason::Loading,
                format!("model '{}' is not loaded on this edge (memory budget); placing it now: retry (run alone meanwhile)", model.id),
            );
        }
        let robot = match self.svc.robot_profile(&h.robot_profile_hash.to_hex()) {
            Some(p) => p,
            None if h.robot_profile.is_empty() => {
                return self.reject(
                    RejectReason::NoTable,
                    format!("unknown robot profile {} and the Hello carries none", h.robot_profile_hash.to_hex()),
                );
            }
            None if !self.svc.build_turn(&h.robot_profile_hash.to_hex()) => {
                self.svc.profiles_refused.fetch_add(1, Ordering::Relaxed);
                return self.reject(
                    RejectReason::Planning,
                    format!(
                        "robot profile {} is new and the edge is building {MAX_RECEIVED_BUILDS} schedule table(s) already, or another new profile has waited longer: retry (run alone meanwhile), or add it to the edge's robot_profiles",
                        h.robot_profile_hash.to_hex()
                    ),
                );
            }
            None => match received_profile(&h, &model.hash.to_hex()) {
                Ok(p) => {
                    tracing::info!(robot = %h.robot_id, model = %h.model_id, profile = %p.hash(), ops = p.ops.len(), "robot profile received in Hello");
                    self.svc.remember_profile(&h.robot_id, p.clone());
                    p
                }
                Err(why) => return self.reject(RejectReason::BadInput, format!("the robot profile in Hello: {why}")),
            },
        };
        let profile_hash = robot.hash();
        let mut ready = Inner::book(&self.svc, mi, robot, input_wire);
        let wait = self.svc.opts.table_wait;
        let outcome = match tokio::time::timeout(wait, ready.wait_for(Option::is_some)).await {
            Ok(Ok(r)) => r.clone(),
            Ok(Err(_)) => Some(Err("the table build stopped".into())),
            Err(_) => None,
        };
        match outcome {
            // The profile goes along: a robot planned for another server can plan meanwhile.
            None => self.reject_with(
                RejectReason::Planning,
                format!(
                    "building the schedule table for robot profile {} (model '{}'); it was not ready within {wait:?}: retry (run alone meanwhile)",
                    &profile_hash[..12.min(profile_hash.len())],
                    model.id
                ),
                server_profile_json(&model.server_profile),
            ),
            Some(Ok(book)) => {
                let Ok(server_hash) = digest(&model.server_profile.hash()) else {
                    return self.reject(RejectReason::Other, "bad server profile hash".into());
                };
                // The profile goes along, so a robot that planned for another server profile
                // can plan this table itself (it answers with a new Hello once it has).
                let server_profile = server_profile_json(&model.server_profile);
                self.send(Frame::Welcome(Welcome { server_profile_hash: server_hash, table_hash: book.table_hash, server_profile }));
                self.svc.sessions.fetch_add(1, Ordering::Relaxed);
                tracing::info!(robot = %h.robot_id, model = %h.model_id, "session welcomed");
                self.model = Some(mi);
                self.book = Some(book);
                self.input_wire = input_wire;
                self.last_id = 0;
                self.robot_id = h.robot_id.clone();
            }
            Some(Err(e)) => self.reject(RejectReason::NoTable, format!("building the schedule table: {e}")),
        }
    }

    /// A Start: dropped when out of place (no session yet, or stale) or over the session's
    /// Start budget; else it aborts the current inference and is either answered at once
    /// ([`Session::admit`]) or queued ([`Session::queue`]).
    fn start(&mut self, s: Start) {
        let (Some(book), Some(mi)) = (self.book.clone(), self.model) else {
            self.svc.stats.count(Dropped::Unexpected);
            return;
        };
        if s.inference_id <= self.last_id {
            self.svc.stats.count(Dropped::Stale);
            return;
        }
        if !self.take_start() {
            return;
        }
        self.abort_current("a newer inference started");
        self.last_id = s.inference_id;
        if let Some(admitted) = self.admit(&s, &book, mi) {
            self.queue(&s, mi, admitted);
        }
    }

    /// Takes a Start from the session's budget, charging [`EMPTY_START_PENALTY`] first when
    /// the inference it replaces got no band. False for a flood: the Start is dropped without
    /// an answer (an answer per Start would amplify it) and the current inference goes on.
    fn take_start(&mut self) -> bool {
        if let Some(a) = self.current.as_mut().filter(|a| !a.charged && !a.received.iter().any(|&r| r)) {
            a.charged = true;
            self.starts.charge(EMPTY_START_PENALTY);
        }
        if self.starts.take(tokio::time::Instant::now()) {
            return true;
        }
        if self.svc.rate_limited.fetch_add(1, Ordering::Relaxed).is_multiple_of(1000) {
            tracing::warn!(robot = %self.robot_id, "Start frames over {MAX_STARTS_PER_S}/s: dropped (counted)");
        }
        false
    }

    /// Whether this edge serves the Start now, on the least busy replica of the model; when it
    /// does not, the answer is sent and `None` returned: an Error (shutting down, unknown plan,
    /// the model unloaded, or see [`Session::route`]) or a Forward.
    fn admit(&self, s: &Start, book: &PlanBook, mi: usize) -> Option<Admitted> {
        let answer = |f: Frame| -> Option<Admitted> {
            self.send(f);
            None
        };
        if self.svc.shutting_down.load(Ordering::SeqCst) {
            return answer(error_frame(s, ErrorCode::ShuttingDown, "the edge is shutting down".into()));
        }
        let Some(plan) = book.by_hash(&s.plan_hash) else {
            let text = format!("no plan {} in table {}", s.plan_hash.to_hex(), book.table_hash.to_hex());
            return answer(error_frame(s, ErrorCode::UnknownPlan, text));
        };
        let model = &self.svc.models[mi];
        model.asked();
        let replicas = model.replicas();
        let devices = &self.svc.opts.devices;
        let first =
            finishes_first(replicas.iter().map(|r| (r.queued.load(Ordering::Relaxed), devices.get(r.device).map_or(1.0, |d| d.speed))));
        let Some(replica) = first.and_then(|i| replicas.get(i)) else {
            self.svc.overloaded.fetch_add(1, Ordering::Relaxed);
            model.refusals.overloaded.fetch_add(1, Ordering::Relaxed);
            let text = format!("model '{}' was unloaded from this edge (memory budget)", model.id);
            return answer(error_frame(s, ErrorCode::Overloaded, text));
        };
        let ahead = replica.queued.load(Ordering::Relaxed);
        if let Some(f) = self.route(s, model, ahead) {
            return answer(f);
        }
        let replica = replicas.iter().position(|r| std::ptr::eq(r, replica)).unwrap_or(0);
        Some(Admitted { plan, replicas, replica })
    }

    /// Where a Start goes with `ahead` inferences queued before it on the least busy replica:
    /// `None` to be served here; else the answer: Overloaded when this edge forwarded it
    /// already, Late when a forwarded one has less time left than this edge needs, a Forward
    /// to an edge that can meet the deadline, or Overloaded past the work budget.
    fn route(&self, s: &Start, model: &Model, ahead: usize) -> Option<Frame> {
        let server_s = f64::from_bits(model.server_s.load(Ordering::Relaxed));
        let budget_s = s.deadline_ns as f64 * 1e-9;
        // The frame's own deadline (a fleet robot's); without one, the budget.
        let due_s = if s.due_ns > 0 { (s.due_ns as f64 * 1e-9).min(budget_s) } else { budget_s };
        let forwarding = self.svc.forwarding.get();
        if let Some(f) = forwarding
            && s.path.contains(&f.edge_id)
        {
            // Only a robot that ignores Forward's rules sends this: never forwarded again.
            self.svc.overloaded.fetch_add(1, Ordering::Relaxed);
            model.refusals.overloaded.fetch_add(1, Ordering::Relaxed);
            return Some(error_frame(s, ErrorCode::Overloaded, format!("edge '{}' forwarded this inference already", f.edge_id)));
        }
        // A forwarded inference whose deadline leaves less than this edge's own time is late
        // whatever the queue: answered at once, never computed.
        if !s.path.is_empty() && due_s < server_s {
            self.svc.late.fetch_add(1, Ordering::Relaxed);
            model.refusals.late.fetch_add(1, Ordering::Relaxed);
            return Some(error_frame(
                s,
                ErrorCode::Late,
                format!("forwarded by {:?} with {:.0} ms left; this edge needs about {:.0} ms", s.path, due_s * 1e3, server_s * 1e3),
            ));
        }
        // With inferences queued ahead on the least busy replica (an idle replica is always
        // tried), their mean server time says when this one would finish. Past the frame's
        // deadline: forwarded to an edge that can meet it. With nowhere to forward it, refused
        // at once (the robot finishes it alone now) if it would not finish within the work
        // budget either; otherwise served late: the robot, which stops waiting at the deadline
        // and computes the bands it would wait for, takes each from whichever side has it first.
        let finish_s = (ahead + 1) as f64 * server_s;
        if ahead > 0
            && finish_s > due_s
            && let Some(f) = forwarding
            && s.path.len() < f.max_forwards
        {
            let mut path = s.path.clone();
            path.push(f.edge_id.clone());
            if let Some(to) = (f.pick)(&model.id, due_s, &path) {
                self.svc.forwarded.fetch_add(1, Ordering::Relaxed);
                model.refusals.forwarded.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(robot = %self.robot_id, %to, ?path, ahead, due_ms = due_s * 1e3, "overloaded: inference forwarded");
                return Some(Frame::Forward(Forward { inference_id: s.inference_id, to, path }));
            }
        }
        if ahead > 0 && finish_s > budget_s {
            self.svc.overloaded.fetch_add(1, Ordering::Relaxed);
            model.refusals.overloaded.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(robot = %self.robot_id, ahead, server_ms = server_s * 1e3, budget_ms = budget_s * 1e3, "overloaded: inference refused");
            return Some(error_frame(
                s,
                ErrorCode::Overloaded,
                format!("{ahead} inference(s) ahead at about {:.0} ms each; the deadline is {:.0} ms away", server_s * 1e3, budget_s * 1e3),
            ));
        }
        None
    }

    /// Queues an admitted inference on its replica: counted, its job spawned ([`Job::run`]),
    /// and it becomes the session's current inference, which the bands go to.
    fn queue(&mut self, s: &Start, mi: usize, admitted: Admitted) {
        let Admitted { plan, replicas, replica: replica_ix } = admitted;
        self.svc.inferences.fetch_add(1, Ordering::Relaxed);
        replicas[replica_ix].queued.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(AtomicU8::new(JOB_QUEUED));
        let (bands, band_rx) = mpsc::channel();
        let deadline = Instant::now() + Duration::from_nanos(s.deadline_ns.max(1));
        let config = SideConfig {
            side: Side::Server,
            inference_id: s.inference_id,
            device: self.svc.opts.devices.get(replicas[replica_ix].device).map_or(Device::Cpu, |d| d.device),
            stretch: Stretch::measured(self.svc.opts.dilation),
            input_wire: self.input_wire,
            // The server codes nothing: each band's header says how to decode it.
            codec: Default::default(),
            camera: None,
            deadline: Some(deadline),
        };
        let (result, finished) = oneshot::channel();
        let first_out = Arc::new(std::sync::OnceLock::new());
        let waiting = Waiting {
            plan: plan.clone(),
            meta: self.svc.models[mi].meta.clone(),
            config,
            bands: band_rx,
            out: self.out.clone(),
            state: state.clone(),
            result,
            first_out: first_out.clone(),
        };
        // The job goes to the replica with the inference's first band: a Start alone (a robot
        // that never sends, or a flood of Starts) holds no replica.
        let (go, first_band) = oneshot::channel::<()>();
        let job = Job {
            svc: self.svc.clone(),
            out: self.out.clone(),
            id: s.inference_id,
            mi,
            state: state.clone(),
            replicas: replicas.clone(),
            replica: replica_ix,
            robot_id: self.robot_id.clone(),
            started: Instant::now(),
            started_wall: std::time::SystemTime::now(),
            upload_ns: Arc::new(AtomicU64::new(0)),
            first_out,
            deadline,
        };
        let (started, upload_ns) = (job.started, job.upload_ns.clone());
        tokio::spawn(job.run(first_band, waiting, finished));
        let received = vec![false; plan.schedule.transfers.len()];
        self.current = Some(Active {
            id: s.inference_id,
            plan,
            bands,
            received,
            state,
            replicas,
            replica: replica_ix,
            go: Some(go),
            charged: false,
            arrived: started,
            upload_ns,
        });
    }

    fn band(&mut self, id: u64, frame: Vec<u8>) {
        let stats = &self.svc.stats;
        let Some(a) = self.current.as_mut().filter(|a| a.id == id) else {
            stats.count(Dropped::Stale);
            return;
        };
        if let Some(b) = match_band(&self.svc.opts.limits, &a.plan, true, frame, &mut a.received, stats) {
            a.upload_ns.store(u64::try_from(a.arrived.elapsed().as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
            let _ = a.bands.send(Incoming::Band(b));
            if let Some(go) = a.go.take() {
                let _ = go.send(());
            }
        }
    }
}

/// The edge's profile as JSON for Welcome and the Planning reject (empty, with a warning, when
/// it does not fit a frame: robots with other tables then cannot plan this one).
fn server_profile_json(p: &Profile) -> Vec<u8> {
    match serde_json::to_vec(p) {
        Ok(j) if j.len() <= lop_msgs::protocol::MAX_PROFILE_LEN => j,
        Ok(j) => {
            tracing::warn!(bytes = j.len(), "the server profile is too large to send; robots with other tables cannot plan this one");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!(error = %e, "serialising the server profile");
            Vec::new()
        }
    }
}

/// The robot profile a Hello carries, checked as data: JSON of a profile (never code) whose own
/// contents are sane, of a robot, of this model, with the hash the Hello names. Whether every
/// op of the model has an entry is checked when the table is built.
fn received_profile(h: &Hello, model_hash: &str) -> std::result::Result<Profile, String> {
    let p: Profile = serde_json::from_slice(&h.robot_profile).map_err(|e| format!("not a profile: {e}"))?;
    p.check().map_err(|e| e.to_string())?;
    if p.role != Side::Robot {
        return Err(format!("a {:?} profile, not a robot's", p.role));
    }
    if p.model_hash != model_hash {
        return Err(format!("a profile of model {} ({}), not of this model ({model_hash})", p.model, p.model_hash));
    }
    let (named, got) = (h.robot_profile_hash.to_hex(), p.hash());
    if named != got {
        return Err(format!("its content hash is {got}, the Hello names {named}"));
    }
    Ok(p)
}

impl Inner {
    fn robot_profile(&self, hash: &str) -> Option<Profile> {
        let cached = self.robot_profiles.lock().ok()?.iter().find(|p| p.hash() == hash).cloned();
        if cached.is_some() {
            return cached;
        }
        let received = self.received.lock().ok()?.get(hash, Instant::now());
        if received.is_some() {
            return received;
        }
        let dir = self.opts.profiles_dir.as_ref()?;
        for e in std::fs::read_dir(dir).ok()?.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "json")
                && let Ok(p) = Profile::load(&path)
                && p.role == Side::Robot
                && p.hash() == hash
            {
                if let Ok(mut v) = self.robot_profiles.lock() {
                    v.push(p.clone());
                }
                return Some(p);
            }
        }
        None
    }

    /// Keeps a robot profile received in a Hello from `robot` (in memory, bounded; the table
    /// cache keeps its tables across restarts, and the robot sends it again), and drops the
    /// plan books of the profiles it made room for.
    fn remember_profile(&self, robot: &str, p: Profile) {
        let gone = self.received.lock().map(|mut r| r.insert(robot, p, Instant::now())).unwrap_or_default();
        if gone.is_empty() {
            return;
        }
        tracing::info!(profiles = gone.len(), "received robot profiles forgotten (unused longest, or unused for an hour)");
        let mut books = self.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        books.retain(|(_, hash, _), slot| !(gone.contains(hash) && matches!(slot, BookSlot::Ready(_))));
    }

    /// Whether a robot profile is still one this edge plans for: configured, found in its
    /// profiles folder, or received and not forgotten.
    fn knows_profile(&self, hash: &str) -> bool {
        self.robot_profiles.lock().is_ok_and(|v| v.iter().any(|p| p.hash() == hash)) || self.received.lock().is_ok_and(|r| r.contains(hash))
    }

    /// Whether a Hello with the new robot profile `hash` may have its table planned now: a build
    /// slot is free and no other refused profile has waited longer ([`BuildTurns`]).
    fn build_turn(&self, hash: &str) -> bool {
        let slot_free = self.builds_in_progress() < MAX_RECEIVED_BUILDS;
        let mut turns = self.turns.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        turns.ask(hash, slot_free, Instant::now())
    }

    /// Schedule tables being loaded or planned now.
    fn builds_in_progress(&self) -> usize {
        let books = self.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        books.values().filter(|slot| matches!(slot, BookSlot::Building(..))).count()
    }

    /// The plan book for a model and robot profile: ready, being built, or started now in the
    /// background (loaded from the table cache or planned). The channel holds its result once
    /// there is one; a failed build is forgotten, so that a later Hello tries again.
    fn book(this: &Arc<Inner>, mi: usize, robot: Profile, input_wire: InputWire) -> watch::Receiver<Option<BookResult>> {
        let key = (mi, robot.hash(), input_wire);
        let mut books = this.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match books.get(&key) {
            Some(BookSlot::Ready(b)) => return watch::channel(Some(Ok(b.clone()))).1,
            Some(BookSlot::Building(rx, _)) => return rx.clone(),
            None => {}
        }
        let (tx, rx) = watch::channel(None);
        books.insert(key.clone(), BookSlot::Building(rx.clone(), Instant::now()));
        drop(books);
        let inner = this.clone();
        tokio::spawn(async move {
            let result = inner.build_book(mi, robot, input_wire).await.map_err(|e| e.to_string());
            let mut books = inner.books.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match &result {
                // A book for a profile forgotten while it was built is not kept.
                Ok(b) if inner.knows_profile(&key.1) => {
                    books.insert(key, BookSlot::Ready(b.clone()));
                }
                Ok(_) => {
                    books.remove(&key);
                }
                Err(e) => {
                    tracing::warn!(model = %inner.models[mi].id, error = %e, "the schedule table could not be built");
                    books.remove(&key);
                }
            }
            let _ = tx.send(Some(result));
        });
        rx
    }

    /// Loads the schedule table from the cache or plans it (on the model's first replica), then
    /// prepares its plans.
    async fn build_book(&self, mi: usize, robot: Profile, input_wire: InputWire) -> Result<Arc<PlanBook>> {
        let model = &self.models[mi];
        let (server, spec, dir) = (model.server_profile.clone(), self.opts.spec.clone(), self.opts.cache_dir.clone());
        let replicas = model.replicas();
        let worker = &replicas.first().ok_or_else(|| Error::InvalidConfig { what: format!("model '{}' is not loaded", model.id) })?.worker;
        let started = Instant::now();
        tracing::info!(model = %model.id, robot_profile = %robot.hash(), buckets = spec.buckets.len(), "schedule table: loading from the cache or planning");
        // A coded frame is priced by both profiles' measured costs of the codec.
        let spec = spec.clone().with_frame_codec(spec.frame.codec, &robot, &server)?;
        let (table, _, cache) = worker.call(move |g| load_or_build(&dir, g, None, &robot, &server, &spec, 1)).await??;
        tracing::info!(model = %model.id, ?cache, seconds = started.elapsed().as_secs_f64(), "schedule table ready");
        Ok(Arc::new(PlanBook::prepare(worker, &model.meta, Arc::new(table), input_wire).await?))
    }
}

/// Places the models again every [`PLACEMENT_PERIOD`], or at once when a Hello asks for a cold
/// one, until the service is dropped or shuts down.
async fn placement_loop(inner: std::sync::Weak<Inner>) {
    loop {
        let Some(svc) = inner.upgrade() else { return };
        if svc.shutting_down.load(Ordering::SeqCst) {
            return;
        }
        svc.place().await;
        let _ = tokio::time::timeout(PLACEMENT_PERIOD, svc.place_now.notified()).await;
    }
}

impl Inner {
    /// One placement step: the models to keep warm by recent demand within the budget
    /// (`lop::fleet::place`); unloads first (never a model with work queued), then loads.
    async fn place(self: &Arc<Self>) {
        let Some(budget) = self.opts.memory_budget else { return };
        let now = Instant::now();
        let snapshots: Vec<Arc<Vec<Replica>>> = self.models.iter().map(Model::replicas).collect();
        let candidates: Vec<lop::fleet::PlaceCandidate> = self
            .models
            .iter()
            .zip(&snapshots)
            .map(|(m, r)| lop::fleet::PlaceCandidate {
                bytes: m.bytes,
                demand: m.demand_per_s(now),
                warm: !r.is_empty(),
                pinned: r.iter().any(|r| r.queued.load(Ordering::Relaxed) > 0),
            })
            .collect();
        let chosen = lop::fleet::place(&candidates, budget);
        for (i, m) in self.models.iter().enumerate() {
            if !chosen[i] && candidates[i].warm && !candidates[i].pinned {
                let old = m.set_replicas(Vec::new());
                tracing::info!(model = %m.id, demand_per_s = candidates[i].demand, mb = m.bytes as f64 / 1e6, "placement: model unloaded");
                // Joining the replicas' threads blocks: not on the executor.
                tokio::task::spawn_blocking(move || drop(old));
            }
        }
        for (i, m) in self.models.iter().enumerate() {
            if chosen[i] && !candidates[i].warm {
                let started = Instant::now();
                match spawn_replicas(&m.id, &m.source, &m.load, &self.opts.devices, self.opts.replicas).await {
                    Ok((replicas, _)) => {
                        m.set_replicas(replicas);
                        tracing::info!(model = %m.id, demand_per_s = candidates[i].demand, seconds = started.elapsed().as_secs_f64(), "placement: model loaded");
                    }
                    Err(e) => tracing::warn!(model = %m.id, error = %e, "placement: loading the model failed"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Start budget: a burst, then the sustained rate; an empty inference costs its penalty,
    /// and the debt is bounded, so a session that stops flooding recovers.
    #[test]
    fn an_inference_goes_where_it_finishes_first() {
        // Idle replicas: the first; a queue: the other; a device twice as fast takes two
        // queued before an idle one of half its speed.
        assert_eq!(finishes_first([(0, 1.0), (0, 1.0)]), Some(0));
        assert_eq!(finishes_first([(1, 1.0), (0, 1.0)]), Some(1));
        assert_eq!(finishes_first([(0, 1.0), (1, 2.0)]), Some(0));
        assert_eq!(finishes_first([(0, 0.5), (2, 2.0)]), Some(1));
        assert_eq!(finishes_first([(0, 0.5), (4, 2.0)]), Some(0));
        assert_eq!(finishes_first(Vec::<(usize, f64)>::new()), None);
        assert_eq!(ServerDevice::only(Device::Cuda(1)).name, "cuda:1");
    }

    #[test]
    fn start_budget_is_a_bounded_token_bucket() {
        let t0 = tokio::time::Instant::now();
        let mut b = StartBudget::new(t0);
        let burst = START_BURST as usize;
        assert_eq!((0..burst + 5).filter(|_| b.take(t0)).count(), burst, "a burst, then nothing at the same instant");
        // 100 ms refill: MAX_STARTS_PER_S / 10 tokens (never more than a burst).
        let t1 = t0 + Duration::from_millis(100);
        let refilled = (MAX_STARTS_PER_S / 10.0).min(START_BURST) as usize;
        assert_eq!((0..burst).filter(|_| b.take(t1)).count(), refilled);
        // Charged into debt, bounded by one burst: after a burst's worth of time it is whole.
        for _ in 0..100 {
            b.charge(EMPTY_START_PENALTY);
        }
        assert!(b.tokens >= -START_BURST);
        let t2 = t1 + Duration::from_secs_f64(2.0 * START_BURST / MAX_STARTS_PER_S);
        assert!(b.take(t2), "recovered after the flood stops");
        assert!(b.tokens >= START_BURST - 1.0 - 1e-9, "{}", b.tokens);
    }
}
