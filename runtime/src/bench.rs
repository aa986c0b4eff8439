//! The benchmark harness behind `lop bench`: every method over the same bandwidth trace in one
//! run, through the real executor, edge service and robot client, with per-method latency
//! statistics, bytes, modelled robot energy, fallbacks, the simulator's prediction for the plans
//! that ran, and the worst output error against the unsplit model.
//!
//! # Transports
//!
//! - [`run_in_process`]: edge and robot in this process over the in-process shaped link, which
//!   replays the trace (and adds the configured latency).
//! - [`run_zenoh_loopback`]: the edge behind a Zenoh router session on `127.0.0.1` (a free port),
//!   the robot on a Zenoh client session; loopback cannot be shaped, so the trace only selects
//!   the plans (the link is as fast as this machine's loopback).
//! - [`run_netns`]: robot and edge in two network namespaces joined by a veth pair shaped with
//!   `tc` ([`crate::netns`]): the edge is a child process started inside the edge namespace (its
//!   side is [`serve_edge_process`]), the robot runs on a thread of this process that entered the
//!   robot namespace before creating its tokio runtime and Zenoh session. This process replays the
//!   trace on both directions every 0.5 s, from trace time 0 at the start of every method, and
//!   removes the namespaces and stops the child on success, error and interruption.
//! - [`run_overhead`]: the runtime's own cost on unshaped loopback Zenoh: a bare forward, a raw
//!   ping-pong of the input and output bytes, and server-only through the runtime.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use lop::model::LoadOptions;
use lop::planner::table::{ScheduleTable, TableSpec};
use lop::profile::Profile;
use lop::sim::RobotPower;
use tch::Tensor;
use zenoh::qos::{CongestionControl, Priority as ZPriority};

use crate::client::{ClientOptions, Connector, InferenceStats, RobotClient};
use crate::edge::{EdgeCounts, EdgeModel, EdgeOptions, EdgeService};
use crate::error::{Error, Result};
use crate::exec::worker::Loaded;
use crate::exec::{CameraJpeg, InputWire, Worker};
use crate::local::Switchboard;
use crate::netns::{NetnsLink, NetnsOptions, NetnsSide, ShapingHandle, ShapingStats};
use crate::shaped::ShapedConfig;
use crate::trace::Trace;
use crate::zenoh_link::{EdgeAcceptor, ZenohConfig};
use crate::zenoh_service::{ZenohConnector, serve_zenoh};

/// What to benchmark.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Model id (for the session) and source (`zoo:NAME` or an ONNX path).
    pub model_id: String,
    /// See `model_id`.
    pub source: String,
    /// Loading options.
    pub load: LoadOptions,
    /// Robot profile (measured with the dilation below).
    pub robot: Profile,
    /// Server profile.
    pub server: Profile,
    /// The schedule table configuration (its bandwidth scale is the trace's scale).
    pub spec: TableSpec,
    /// The link's rate over time, already multiplied by the bandwidth scale (Mbit/s).
    pub trace: Trace,
    /// One-way latency of the link.
    pub latency: Duration,
    /// Methods, by table name: `robot-only`, `server-only`, `layer-partition`, `lop`.
    pub methods: Vec<String>,
    /// Inferences per method.
    pub requests: usize,
    /// Robot dilation.
    pub dilation: f64,
    /// Whether the dilated robot is paced by its profile ([`crate::exec::Stretch::Paced`]): each
    /// robot kernel lasts what `robot` predicts for it, so that this machine's noise, multiplied
    /// by the dilation, does not make the emulated robot another device than the one planned for.
    pub paced: bool,
    /// Untimed inferences per method before its timed ones (first runs allocate, and libtorch
    /// prepares its kernels for each new shape).
    pub warmup: usize,
    /// How the raw input travels.
    pub input_wire: InputWire,
    /// Where schedule tables are cached.
    pub cache_dir: PathBuf,
    /// The robot's power model (modelled energy).
    pub power: RobotPower,
    /// Pause between inferences (0: back to back).
    pub gap: Duration,
    /// Real frames (planar uint8 `[C, H, W]` of the model's image input), used in turn; empty:
    /// one synthetic input. Codecs priced on random pixels would mislead.
    pub frames: Vec<Vec<u8>>,
    /// Under the frame codec `passthrough`: each frame's camera JPEG (`frames` holds their
    /// decodings), sent unchanged; empty otherwise.
    pub cameras: Vec<std::sync::Arc<[u8]>>,
}

/// One input and the unsplit model's outputs on it: as given, and as decoded after the table's
/// lossy codec (what the robot computes on once its frame crossed coded).
struct Sample {
    inputs: Vec<Tensor>,
    /// The camera's JPEG the input is the decoding of (`passthrough`).
    camera: Option<CameraJpeg>,
    whole: Vec<Tensor>,
    whole_coded: Vec<Tensor>,
}

impl Sample {
    fn inputs(&self) -> Vec<Tensor> {
        self.inputs.iter().map(|t| t.shallow_clone()).collect()
    }
    /// The outputs an inference must equal.
    fn reference(&self, coded: bool) -> &[Tensor] {
        if coded { &self.whole_coded } else { &self.whole }
    }
}

/// One method's results.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct MethodReport {
    /// Inferences run.
    pub requests: usize,
    /// Latency mean, ms.
    pub mean_ms: f64,
    /// Latency standard deviation, ms.
    pub std_ms: f64,
    /// Latency median, ms.
    pub p50_ms: f64,
    /// Latency 95th percentile, ms.
    pub p95_ms: f64,
    /// Mean simulated makespan of the plans that ran (in their buckets), ms.
    pub sim_mean_ms: f64,
    /// Measured over simulated mean latency (`mean_ms / sim_mean_ms`), when a simulation ran.
    pub fidelity: Option<f64>,
    /// Mean, over the requests' buckets, of the simulator's lower bound for plans in which the
    /// server computes everything (exact halos: the input's last rows arrive, then every row
    /// that reads them is computed); `None` when some bucket had no bound (no link).
    pub sim_bound_ms: Option<f64>,
    /// Mean, over the requests' buckets, of the simulator's fluid bound (no plan, robot bands
    /// included, beats it: `lop::sim::Simulator::fluid_bound`); `None` as for `sim_bound_ms`.
    pub fluid_bound_ms: Option<f64>,
    /// Mean, over the requests' buckets, of the simulated best of robot-only, server-only and
    /// the layer partition: with `sim_mean_ms` and `sim_bound_ms`, how much of what server
    /// pipelining could gain in these buckets the plans found.
    pub sim_best_baseline_ms: Option<f64>,
    /// The server's measured compute per request (mean of what the edge reports: its op
    /// chunks, without decoding or waiting), milliseconds, over the requests whose plan kept the
    /// server computing and that it answered; `None` when there were none.
    pub server_compute_ms: Option<f64>,
    /// What the simulator prices the same plans' server compute at, in the same requests'
    /// buckets (mean), milliseconds; beside [`MethodReport::server_compute_ms`], whether chunked compute
    /// costs what the plan says.
    pub sim_server_compute_ms: Option<f64>,
    /// Bytes sent to the edge, per inference (mean).
    pub bytes_up: f64,
    /// Bytes received from the edge, per inference (mean).
    pub bytes_down: f64,
    /// Modelled robot energy per inference (mean), joules.
    pub energy_j: f64,
    /// Inferences the robot finished alone.
    pub fallbacks: usize,
    /// Frames the robot dropped (malformed, stale, duplicate, out of plan, ...).
    pub dropped_frames: u64,
    /// Worst relative error of the outputs against the unsplit model.
    pub max_rel_err: f64,
    /// Whether every output agreed with the unsplit model's under
    /// [`lop::exec::Tolerance::OTHER_RUNTIME`] (the edge may compute on another device), ranked
    /// lists up to near-tied rows changing places ([`lop::exec::agree`]).
    pub outputs_agree: bool,
    /// Rows of ranked outputs (detections) that agreed only at another position, over all
    /// requests.
    pub reordered_rows: usize,
    /// Robot kernels that outlasted their paced duration (this machine slower than the
    /// emulated robot), over all requests.
    pub overruns: u64,
    /// Milliseconds per request those kernels took beyond their paced durations (mean): what
    /// the overruns added to the measured latency.
    pub overrun_ms: f64,
    /// Milliseconds of a fixed calibration kernel on this machine before the method ran
    /// ([`calibration_ms`]).
    pub calibration_before_ms: f64,
    /// The same after it ran.
    pub calibration_after_ms: f64,
    /// Whether this machine held its speed during the method: paced robot kernels overran by
    /// at most [`OVERRUN_SHARE`] of the latency, and, for a method that used the edge (whose
    /// compute is this machine's, not paced), the calibration kernel stayed within [`STEADY`]
    /// of itself before and after. When false, the measured-over-simulated ratio describes
    /// the machine, not the system.
    pub steady: bool,
}

/// How far the calibration kernel may drift between before and after a method (as a ratio,
/// either way) for the machine to count as steady: the benchmark's own fidelity target.
pub const STEADY: f64 = 1.15;

/// The share of a method's mean latency that paced robot kernels may add by overrunning
/// their targets before the machine counts as unable to hold the emulated robot.
pub const OVERRUN_SHARE: f64 = 0.02;

/// [`MethodReport::steady`] from the report's calibration, overruns and latency: whether the
/// machine held its speed while the method ran (`used_edge`: some request used the edge, whose
/// compute is this machine's).
fn steady(r: &MethodReport, used_edge: bool) -> bool {
    let drift = r.calibration_after_ms / r.calibration_before_ms;
    let held_robot = r.overrun_ms <= OVERRUN_SHARE * r.mean_ms;
    let held_speed = drift.is_finite() && (1.0 / STEADY..=STEADY).contains(&drift);
    held_robot && (held_speed || !used_edge)
}

/// Milliseconds of a fixed kernel (a 64-channel 3x3 convolution over 112x112, the median of
/// seven runs after two untimed ones), on `worker`'s thread: the machine's speed right now.
/// Timed before and after each method, it tells a steady machine from one whose speed changed
/// (another process, a throttled or oversubscribed virtual CPU).
///
/// # Errors
/// libtorch failures.
pub async fn calibration_ms(worker: &Worker) -> Result<f64> {
    worker
        .call(|_| -> Result<f64> {
            let _guard = tch::no_grad_guard();
            let opts = (tch::Kind::Float, tch::Device::Cpu);
            let x = Tensor::ones([1, 64, 112, 112], opts);
            let w = Tensor::ones([64, 64, 3, 3], opts) * 1e-3;
            let mut times = Vec::new();
            for i in 0..9 {
                let t0 = Instant::now();
                let y =
                    x.f_conv2d(&w, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1).map_err(|e| Error::Executor(format!("calibration: {e}")))?;
                let _ = y.f_sum(tch::Kind::Float).map_err(|e| Error::Executor(format!("calibration: {e}")))?;
                if i >= 2 {
                    times.push(t0.elapsed().as_secs_f64() * 1e3);
                }
            }
            times.sort_by(f64::total_cmp);
            Ok(times[times.len() / 2])
        })
        .await?
}

/// Modelled robot energy of one inference: computing watts while it computed, transmitting
/// watts while its uplink bytes were on the wire (at the link rate when it started), idle watts
/// for the rest.
pub fn modelled_energy(power: &RobotPower, s: &InferenceStats, uplink_mbps: f64) -> f64 {
    let tx_s = if uplink_mbps > 0.0 { s.bytes_up as f64 * 8.0 / (uplink_mbps * 1e6) } else { 0.0 };
    let compute = s.robot_compute_s.min(s.total_s);
    let tx = tx_s.min(s.total_s - compute);
    power.computing_w * compute + power.transmitting_w * tx + power.idle_w * (s.total_s - compute - tx).max(0.0)
}

/// Mean, standard deviation, median and 95th percentile (nearest rank) of `v`, ms in, ms out.
fn moments(v: &mut [f64]) -> (f64, f64, f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    v.sort_by(f64::total_cmp);
    let pct = |p: f64| v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0);
    (mean, var.sqrt(), pct(0.5), pct(0.95))
}

/// How a method's outputs compared with the unsplit model's, over its requests.
#[derive(Debug, Clone, Copy)]
struct Outputs {
    max_rel_err: f64,
    agree: bool,
    reordered: usize,
}

impl Outputs {
    fn new() -> Self {
        Outputs { max_rel_err: 0.0, agree: true, reordered: 0 }
    }

    /// Adds one inference's outputs against its reference.
    fn check(&mut self, outputs: &[Tensor], reference: &[Tensor]) -> Result<()> {
        let a = lop::exec::agree_all(outputs, reference, lop::exec::Tolerance::OTHER_RUNTIME)?;
        self.max_rel_err = self.max_rel_err.max(a.rel_err);
        self.agree &= a.within;
        self.reordered += a.reordered;
        Ok(())
    }
}

fn summarize(lat_ms: &mut [f64], sims: &[f64], stats: &[(InferenceStats, f64)], outputs: Outputs, dropped: u64) -> MethodReport {
    let n = lat_ms.len().max(1) as f64;
    let (mean, std, p50, p95) = moments(lat_ms);
    let sim_mean_ms = sims.iter().sum::<f64>() / sims.len().max(1) as f64 * 1e3;
    MethodReport {
        requests: lat_ms.len(),
        mean_ms: mean,
        std_ms: std,
        p50_ms: p50,
        p95_ms: p95,
        sim_mean_ms,
        fidelity: (sim_mean_ms > 0.0).then(|| mean / sim_mean_ms),
        sim_bound_ms: None,
        fluid_bound_ms: None,
        sim_best_baseline_ms: None,
        server_compute_ms: None,
        sim_server_compute_ms: None,
        bytes_up: stats.iter().map(|s| s.0.bytes_up as f64).sum::<f64>() / n,
        bytes_down: stats.iter().map(|s| s.0.bytes_down as f64).sum::<f64>() / n,
        energy_j: stats.iter().map(|s| s.1).sum::<f64>() / n,
        fallbacks: stats.iter().filter(|s| s.0.fallback).count(),
        dropped_frames: dropped,
        max_rel_err: outputs.max_rel_err,
        outputs_agree: outputs.agree,
        reordered_rows: outputs.reordered,
        overruns: stats.iter().map(|s| u64::from(s.0.robot_overruns)).sum(),
        overrun_ms: stats.iter().map(|s| s.0.robot_overrun_s).sum::<f64>() / n * 1e3,
        calibration_before_ms: 0.0,
        calibration_after_ms: 0.0,
        steady: true,
    }
}

/// The edge options of a benchmark (one replica, CPU).
fn edge_options(
    model_id: &str,
    source: &str,
    load: &LoadOptions,
    robot: &Profile,
    server: &Profile,
    spec: &TableSpec,
    cache_dir: &Path,
) -> EdgeOptions {
    EdgeOptions {
        models: vec![EdgeModel {
            id: model_id.to_string(),
            source: source.to_string(),
            // The replica runs the model as the server profile measured it.
            load: LoadOptions { layout: server.layout, ..load.clone() },
            server_profile: server.clone(),
        }],
        robot_profiles: vec![robot.clone()],
        profiles_dir: None,
        spec: spec.clone(),
        cache_dir: cache_dir.to_path_buf(),
        replicas: 1,
        devices: vec![crate::edge::ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: Duration::from_secs(120),
        // The benchmark's robot waits for its table rather than run alone.
        table_wait: Duration::from_secs(600),
        dilation: 1.0,
        memory_budget: None,
        batching: Default::default(),
    }
}

/// Starts the edge for a benchmark (one replica, CPU).
///
/// # Errors
/// As [`EdgeService::start`].
pub async fn start_edge(cfg: &BenchConfig) -> Result<EdgeService> {
    EdgeService::start(edge_options(&cfg.model_id, &cfg.source, &cfg.load, &cfg.robot, &cfg.server, &cfg.spec, &cfg.cache_dir)).await
}

/// Called after each inference with the method, the request's index, its statistics and its
/// outputs (to show what the frame's result holds).
pub type Progress<'a> = dyn FnMut(&str, usize, &InferenceStats, &[Tensor]) + 'a;

/// The robot id a benchmark uses for `method` (one per method, so that the edge never confuses
/// the end of one method's session with the next one's).
pub fn robot_id(method: &str) -> String {
    format!("bench-{method}")
}

/// Runs every method over the in-process shaped link replaying `cfg.trace` (each method from
/// trace time 0), calling `progress(method, index, stats, outputs)` after each inference.
///
/// # Errors
/// Model, table or engine failures; a method with no plans.
pub async fn run_in_process(
    cfg: &BenchConfig,
    mut progress: impl FnMut(&str, usize, &InferenceStats, &[Tensor]),
) -> Result<BTreeMap<String, MethodReport>> {
    let board = Switchboard::new();
    let _edge = board.plug(start_edge(cfg).await?);
    let link = ShapedConfig { up: cfg.trace.clone(), down: cfg.trace.clone(), latency: cfg.latency, overhead: Duration::ZERO };
    let connect = |_: &str| board.connector(link.clone());
    run_with(cfg, connect, &mut progress).await
}

/// Runs every method through connectors made by `connect(method)` (one fresh link per method, so
/// that each replays the trace from its start).
///
/// # Errors
/// As [`run_in_process`].
pub async fn run_with<C: Connector>(
    cfg: &BenchConfig,
    connect: impl Fn(&str) -> C,
    progress: &mut Progress<'_>,
) -> Result<BTreeMap<String, MethodReport>> {
    run_methods(cfg, &mut |m| Ok(connect(m)), progress).await
}

/// The robot's model worker, one input per frame (or a synthetic one) and the unsplit outputs.
async fn robot_worker(cfg: &BenchConfig) -> Result<(Worker, Loaded, Vec<Sample>)> {
    // The robot runs the model as its profile measured it.
    let (source, load) = (cfg.source.clone(), LoadOptions { layout: cfg.robot.layout, ..cfg.load.clone() });
    let (worker, loaded) = Worker::spawn("robot", move || lop::model::load(&source, &load)).await?;
    let (frames, codec, cameras) = (cfg.frames.clone(), cfg.spec.frame.codec, cfg.cameras.clone());
    let samples = worker
        .call(move |g| -> Result<Vec<Sample>> {
            let whole = |inputs: &[Tensor]| lop::exec::run_whole(g, inputs).map(|r| r.outputs);
            if frames.is_empty() {
                let inputs = lop::exec::synthetic_inputs(g, 1)?;
                let w = whole(&inputs)?;
                let wc = w.iter().map(|t| t.shallow_clone()).collect();
                return Ok(vec![Sample { inputs, camera: None, whole: w, whole_coded: wc }]);
            }
            let [input] = g.inputs()[..] else {
                return Err(Error::InvalidConfig { what: "real frames need a model with one image input".into() });
            };
            let image = lop::codec::Image::of(&g.nodes[input].info)
                .map_err(|why| Error::InvalidConfig { what: format!("real frames need an image input: {why}") })?;
            let tensor = |planar: &[u8]| {
                Tensor::f_from_data_size(planar, &[1, image.channels as i64, image.height as i64, image.width as i64], tch::Kind::Uint8)
                    .map_err(|e| Error::Executor(format!("frame to tensor: {e}")))
            };
            frames
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let inputs = vec![tensor(f)?];
                    let w = whole(&inputs)?;
                    let camera = cameras.get(i).map(|c| CameraJpeg(c.clone()));
                    // The decoded frame: one unit coded whole decodes to what the bands give
                    // (a camera's JPEG: the frame is its decoding already).
                    let wc = if codec.is_lossy() && camera.is_none() {
                        let unit = lop::codec::encode(codec, &image, f, image.height).map_err(lop::Error::from)?;
                        let decoded = lop::codec::decode(codec, &image, &unit, image.height).map_err(lop::Error::from)?;
                        whole(&[tensor(&decoded)?])?
                    } else {
                        w.iter().map(|t| t.shallow_clone()).collect()
                    };
                    Ok(Sample { inputs, camera, whole: w, whole_coded: wc })
                })
                .collect()
        })
        .await??;
    Ok((worker, loaded, samples))
}

/// Per table entry, simulated seconds: the best of robot-only, server-only and the layer
/// partition, and the server-pipelining bound (`lop::sim::Simulator::server_pipeline_bound`).
#[derive(Debug, Clone)]
struct BucketYardsticks {
    best_baseline_s: Option<f64>,
    bound_s: Option<f64>,
    fluid_s: Option<f64>,
    /// Per method (table name), the seconds the simulator keeps the server computing its plan:
    /// what the server's measured compute is checked against.
    server_busy_s: BTreeMap<String, f64>,
}

/// Per table entry and method, the simulated server compute of the method's plan in the
/// entry's bucket (its compute spans' union, seconds).
fn simulated_server_busy(
    table: &ScheduleTable,
    g: &lop::graph::Graph,
    robot: &Profile,
    server: &Profile,
) -> lop::Result<Vec<BTreeMap<String, f64>>> {
    let mut sim = lop::sim::Simulator::new(g, robot, server, table.spec.sim_config(0.0))?;
    let mut out = Vec::with_capacity(table.entries.len());
    for e in &table.entries {
        sim.set_config(table.spec.sim_config(e.bucket_mb_s))?;
        let mut busy = BTreeMap::new();
        for m in crate::plans::METHODS {
            // A plan infeasible in its bucket (one that uses the link, in a bucket without one)
            // has no price there.
            if let Some(r) = e.plan_of(m).and_then(|plan| sim.simulate(plan).ok()) {
                busy.insert(m.to_string(), r.server_compute.busy_s);
            }
        }
        out.push(busy);
    }
    Ok(out)
}

/// The schedule table and its entries' yardsticks.
async fn table(cfg: &BenchConfig, worker: &Worker) -> Result<(ScheduleTable, Vec<BucketYardsticks>)> {
    let (robot, server, spec, dir) = (cfg.robot.clone(), cfg.server.clone(), cfg.spec.clone(), cfg.cache_dir.clone());
    let out = worker
        .call(move |g| -> lop::Result<(ScheduleTable, Vec<BucketYardsticks>)> {
            let (table, _, _) = lop::planner::table::load_or_build(&dir, g, None, &robot, &server, &spec, 1)?;
            let bounds = table.pipeline_bounds(g, &robot, &server)?;
            let fluid = table.fluid_bounds(g, &robot, &server)?;
            let busy = simulated_server_busy(&table, g, &robot, &server)?;
            let marks = table
                .entries
                .iter()
                .zip(bounds.into_iter().zip(fluid).zip(busy))
                .map(|(e, ((bound_s, fluid_s), server_busy_s))| BucketYardsticks {
                    best_baseline_s: e.best_baseline_s(),
                    bound_s,
                    fluid_s: fluid_s.map(|f| f.bound_s),
                    server_busy_s,
                })
                .collect();
            Ok((table, marks))
        })
        .await??;
    Ok(out)
}

fn client_options(cfg: &BenchConfig, method: &str) -> ClientOptions {
    let mut opts = ClientOptions::new(&robot_id(method), &cfg.model_id);
    opts.method = method.to_string();
    opts.dilation = cfg.dilation;
    opts.paced = cfg.paced && cfg.dilation > 1.0;
    opts.robot_profile = Some(cfg.robot.clone());
    opts.input_wire = cfg.input_wire;
    opts.hello_timeout = Duration::from_secs(120);
    // Each bucket runs the plan its simulation priced.
    opts.follow_frame_ratio = false;
    opts
}

/// Every method in turn: a fresh connector and client per method, `cfg.requests` inferences,
/// the bandwidth estimate read from the trace at the time since the method started.
async fn run_methods<C: Connector>(
    cfg: &BenchConfig,
    connect: &mut dyn FnMut(&str) -> Result<C>,
    progress: &mut Progress<'_>,
) -> Result<BTreeMap<String, MethodReport>> {
    if cfg.requests == 0 {
        return Err(Error::InvalidConfig { what: "requests must be at least 1".into() });
    }
    let (mut worker, loaded, samples) = robot_worker(cfg).await?;
    let (table, marks) = table(cfg, &worker).await?;
    let mut out = BTreeMap::new();
    for method in &cfg.methods {
        let opts = client_options(cfg, method);
        let mut client = RobotClient::new(connect(method)?, opts, worker, loaded.meta.clone(), &loaded.hash, table.clone()).await?;
        if !client.connected() && method != "robot-only" {
            tracing::warn!(%method, "the edge did not answer; this method will run on the robot alone");
        }
        // Untimed: first runs of each plan allocate and prepare kernels (in the trace's first
        // bucket, where the timed requests start).
        let first_bucket = cfg.trace.rate_mbps(Duration::ZERO) / 8.0 / cfg.spec.bandwidth_scale;
        for w in 0..cfg.warmup {
            let sample = &samples[w % samples.len()];
            client.infer_camera(sample.inputs(), sample.camera.clone(), first_bucket).await?;
        }
        let before_ms = calibration_ms(client.worker()).await?;
        let epoch = Instant::now();
        let (mut lat, mut sims, mut stats, mut err) = (Vec::new(), Vec::new(), Vec::new(), Outputs::new());
        let (mut bound_s, mut best_s, mut fluid_s) = (Vec::new(), Vec::new(), Vec::new());
        let (mut server_s, mut server_sim_s) = (Vec::new(), Vec::new());
        for i in 0..cfg.requests {
            let rate = cfg.trace.rate_mbps(epoch.elapsed());
            let bucket_units = rate / 8.0 / cfg.spec.bandwidth_scale;
            let sample = &samples[i % samples.len()];
            let r = client.infer_camera(sample.inputs(), sample.camera.clone(), bucket_units).await?;
            err.check(&r.outputs, sample.reference(r.stats.frame_coded))?;
            progress(method, i, &r.stats, &r.outputs);
            lat.push(r.stats.total_s * 1e3);
            if let Some(p) = r.stats.predicted_s {
                sims.push(p);
            }
            if let Some(m) = marks.get(r.stats.bucket as usize) {
                bound_s.extend(m.bound_s);
                fluid_s.extend(m.fluid_s);
                best_s.extend(m.best_baseline_s);
                // Pairs from the requests whose plan kept the server computing and that it
                // answered (not fallen back).
                let sim_s = m.server_busy_s.get(method).copied().filter(|&s| s > 0.0 && !r.stats.fallback);
                if let (Some(sim_s), Some(meas_s)) = (sim_s, r.stats.server_compute_s) {
                    server_sim_s.push(sim_s);
                    server_s.push(meas_s);
                }
            }
            let e = modelled_energy(&cfg.power, &r.stats, rate);
            stats.push((r.stats, e));
            if !cfg.gap.is_zero() {
                tokio::time::sleep(cfg.gap).await;
            }
        }
        let after_ms = calibration_ms(client.worker()).await?;
        let dropped = client.dropped().total();
        let mut report = summarize(&mut lat, &sims, &stats, err, dropped);
        report.calibration_before_ms = before_ms;
        report.calibration_after_ms = after_ms;
        let used_edge = stats.iter().any(|s| s.0.bytes_up > 0 || s.0.bytes_down > 0);
        report.steady = steady(&report, used_edge);
        if !report.steady {
            tracing::warn!(
                %method, before_ms, after_ms, overruns = report.overruns, overrun_ms = report.overrun_ms,
                "this machine did not hold its speed during the method: its measured-over-simulated ratio describes the machine"
            );
        }
        let mean_ms = |v: &[f64]| (v.len() == cfg.requests).then(|| v.iter().sum::<f64>() / v.len() as f64 * 1e3);
        report.sim_bound_ms = mean_ms(&bound_s);
        report.fluid_bound_ms = mean_ms(&fluid_s);
        report.sim_best_baseline_ms = mean_ms(&best_s);
        if !server_s.is_empty() {
            let n = server_s.len() as f64;
            report.server_compute_ms = Some(server_s.iter().sum::<f64>() / n * 1e3);
            report.sim_server_compute_ms = Some(server_sim_s.iter().sum::<f64>() / n * 1e3);
        }
        out.insert(method.clone(), report);
        worker = client.into_worker();
    }
    Ok(out)
}

/// A free TCP port on 127.0.0.1 (bound and released; another process could take it meanwhile).
fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|source| Error::Netns { what: "binding 127.0.0.1:0 to find a free port".into(), source })?;
    l.local_addr().map(|a| a.port()).map_err(|source| Error::Netns { what: "reading a bound port".into(), source })
}

/// An edge served over Zenoh from this process: a router session, the acceptor's serving task
/// and the service. Dropping it stops serving.
#[derive(Debug)]
pub struct ZenohEdge {
    /// The router session.
    pub session: zenoh::Session,
    /// The service (counters).
    pub service: EdgeService,
    task: tokio::task::JoinHandle<()>,
}

impl ZenohEdge {
    /// Starts `service` behind a Zenoh router listening on `endpoint` (e.g. `tcp/127.0.0.1:7447`).
    ///
    /// # Errors
    /// [`Error::Zenoh`] when the session cannot open (e.g. the port is taken).
    pub async fn start(service: EdgeService, endpoint: &str) -> Result<ZenohEdge> {
        let session = ZenohConfig::router(vec![endpoint.to_string()]).open().await?;
        let acceptor = EdgeAcceptor::new(&session).await?;
        let task = serve_zenoh(service.clone(), acceptor);
        Ok(ZenohEdge { session, service, task })
    }

    /// Stops serving and closes the session.
    pub async fn close(self) {
        self.task.abort();
        if let Err(e) = self.session.close().await {
            tracing::debug!(error = %e, "closing the edge's Zenoh session");
        }
    }
}

impl Drop for ZenohEdge {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs every method over Zenoh on unshaped loopback: the edge in this process behind a router
/// session on a free port of 127.0.0.1, the robot on a client session. The trace only selects
/// the plans (bucket per inference); the link itself is not shaped.
///
/// # Errors
/// As [`run_in_process`]; Zenoh sessions that cannot open.
pub async fn run_zenoh_loopback(
    cfg: &BenchConfig,
    mut progress: impl FnMut(&str, usize, &InferenceStats, &[Tensor]),
) -> Result<(BTreeMap<String, MethodReport>, EdgeCounts)> {
    let endpoint = format!("tcp/127.0.0.1:{}", free_port()?);
    let edge = ZenohEdge::start(start_edge(cfg).await?, &endpoint).await?;
    let robot = ZenohConfig::client(vec![endpoint]).open().await?;
    let r = run_methods(cfg, &mut |m| Ok(ZenohConnector::new(robot.clone(), &robot_id(m))), &mut progress).await;
    let counts = edge.service.counts();
    if let Err(e) = robot.close().await {
        tracing::debug!(error = %e, "closing the robot's Zenoh session");
    }
    edge.close().await;
    Ok((r?, counts))
}

/// What the edge process of [`run_netns`] serves (written as JSON for `lop bench-edge`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct EdgeProcessConfig {
    /// Model id.
    pub model_id: String,
    /// Model source.
    pub source: String,
    /// Input shape for dynamic ONNX inputs.
    pub input_shape: Option<Vec<usize>>,
    /// The preprocess stage, as [`lop::preprocess::Preprocess::spec`] writes it.
    pub preprocess: Option<String>,
    /// The back end, as [`lop::postprocess::Postprocess::spec`] writes it.
    #[serde(default)]
    pub task: Option<String>,
    /// The model's fit of the camera's frame, as [`lop::fit::FrameFit::spec`] writes it.
    #[serde(default)]
    pub camera_fit: Option<String>,
    /// The robot's profile.
    pub robot: Profile,
    /// The server's profile.
    pub server: Profile,
    /// The schedule table configuration.
    pub spec: TableSpec,
    /// Where schedule tables are cached.
    pub cache_dir: PathBuf,
    /// The router's endpoint, e.g. `tcp/10.77.0.2:7447`.
    pub listen: String,
    /// libtorch intra-op threads.
    pub threads: Option<i32>,
}

impl BenchConfig {
    /// The configuration of an edge process serving this benchmark on `listen`.
    pub fn edge_process_config(&self, listen: &str, threads: Option<i32>) -> EdgeProcessConfig {
        EdgeProcessConfig {
            model_id: self.model_id.clone(),
            source: self.source.clone(),
            input_shape: self.load.input_shape.clone(),
            preprocess: self.load.preprocess.as_ref().map(lop::preprocess::Preprocess::spec),
            task: self.load.postprocess.as_ref().map(lop::postprocess::Postprocess::spec),
            camera_fit: self.load.fit.as_ref().map(lop::fit::FrameFit::spec),
            robot: self.robot.clone(),
            server: self.server.clone(),
            spec: self.spec.clone(),
            cache_dir: self.cache_dir.clone(),
            listen: listen.to_string(),
            threads,
        }
    }
}

/// The line an edge process prints on stdout once its router listens.
pub const EDGE_READY: &str = "lop-bench-edge ready";

/// The edge process's side of [`run_netns`]: serves the benchmark's model over a Zenoh router on
/// `cfg.listen`, calls `ready()` once it listens, and returns the service's counters when `stop`
/// completes (the parent closes the child's stdin, or the child is killed).
///
/// # Errors
/// The model or profiles do not load; the router cannot listen.
pub async fn serve_edge_process(
    cfg: &EdgeProcessConfig,
    stop: impl std::future::Future<Output = ()>,
    ready: impl FnOnce(),
) -> Result<EdgeCounts> {
    let preprocess = cfg.preprocess.as_deref().map(lop::preprocess::Preprocess::parse).transpose()?;
    let postprocess = cfg.task.as_deref().map(lop::postprocess::Postprocess::parse).transpose()?;
    let fit = cfg.camera_fit.as_deref().map(lop::fit::FrameFit::parse).transpose()?;
    let load = LoadOptions { input_shape: cfg.input_shape.clone(), preprocess, postprocess, fit, ..LoadOptions::default() };
    let service =
        EdgeService::start(edge_options(&cfg.model_id, &cfg.source, &load, &cfg.robot, &cfg.server, &cfg.spec, &cfg.cache_dir)).await?;
    let edge = ZenohEdge::start(service, &cfg.listen).await?;
    tracing::info!(listen = %cfg.listen, "bench edge serving");
    ready();
    stop.await;
    let counts = edge.service.counts();
    edge.close().await;
    Ok(counts)
}

/// How [`run_netns`] sets up the namespaces and the edge process.
#[derive(Debug, Clone)]
pub struct NetnsBenchOptions {
    /// Namespace name prefix (see [`crate::netns::process_prefix`]).
    pub prefix: String,
    /// One-way latency per direction (a delay line in userspace, see [`crate::netns`]; 0 adds none).
    pub latency: Duration,
    /// The edge router's TCP port on the edge address.
    pub port: u16,
    /// The edge program (usually this executable) and its arguments; the path of the
    /// [`EdgeProcessConfig`] JSON file is appended. It must print [`EDGE_READY`] on stdout once
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

/// The edge child process: closes its stdin (it exits on its own), then kills it if it has not
/// exited within 3 s; always reaps it.
struct ChildGuard(Child);

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
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn interrupted(opts: &NetnsBenchOptions) -> Result<()> {
    if opts.interrupted.is_some_and(|f| f.load(Ordering::SeqCst)) {
        return Err(Error::Netns {
            what: "the benchmark was interrupted by a signal".into(),
            source: std::io::Error::from(std::io::ErrorKind::Interrupted),
        });
    }
    Ok(())
}

fn edge_exited(child: &mut Child) -> Result<()> {
    match child.try_wait() {
        Ok(Some(status)) => {
            Err(Error::Command { command: "the edge process (lop bench-edge)".into(), stderr: format!("exited early: {status}") })
        }
        Ok(None) => Ok(()),
        Err(source) => Err(Error::Netns { what: "waiting for the edge process".into(), source }),
    }
}

/// Runs every method with robot and edge in two network namespaces joined by a veth pair shaped
/// by `tc` from `cfg.trace` (see the module docs). Blocking; call it outside any tokio runtime.
/// The namespaces are removed and the edge process stopped before this returns, whatever
/// happens (also when `opts.interrupted` is set, which returns an error).
///
/// # Errors
/// Namespaces or `tc` unavailable, the edge process failing or not getting ready in time, an
/// interruption, and everything [`run_in_process`] can fail with.
pub fn run_netns(
    cfg: &BenchConfig,
    opts: &NetnsBenchOptions,
    mut progress: impl FnMut(&str, usize, &InferenceStats, &[Tensor]),
) -> Result<(BTreeMap<String, MethodReport>, NetnsSummary)> {
    let stem: String = opts.prefix.chars().take_while(|c| !c.is_ascii_digit()).collect();
    if !stem.is_empty() {
        crate::netns::remove_stale(&stem);
    }
    let initial = cfg.trace.rate_mbps(Duration::ZERO);
    let link =
        NetnsLink::create(NetnsOptions::default().with_prefix(opts.prefix.clone()).with_latency(opts.latency).with_initial_mbit(initial))?;
    let endpoint = format!("tcp/{}:{}", link.address(NetnsSide::Edge), opts.port);
    let mut summary = NetnsSummary {
        robot_ns: link.namespace(NetnsSide::Robot).to_string(),
        edge_ns: link.namespace(NetnsSide::Edge).to_string(),
        endpoint: endpoint.clone(),
        shaping: Vec::new(),
    };
    // The edge process.
    let config = TempFile(std::env::temp_dir().join(format!("{}-edge.json", opts.prefix)));
    let json = serde_json::to_vec(&cfg.edge_process_config(&endpoint, opts.edge_threads))
        .map_err(|e| Error::InvalidConfig { what: format!("encoding the edge configuration: {e}") })?;
    std::fs::write(&config.0, json).map_err(|source| Error::Netns { what: format!("writing {}", config.0.display()), source })?;
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
    tracing::info!(%endpoint, "edge process ready");

    // The robot: a thread that enters the robot namespace before it creates its tokio runtime
    // and Zenoh session (threads it spawns start there too).
    let (ev_tx, ev_rx) = std_mpsc::channel::<RobotEvent>();
    let robot_cfg = cfg.clone();
    let robot_ns = summary.robot_ns.clone();
    let robot_endpoint = endpoint.clone();
    let robot = std::thread::Builder::new()
        .name("bench-robot".into())
        .spawn(move || {
            let events = ev_tx.clone();
            let result = robot_thread(&robot_cfg, &robot_ns, &robot_endpoint, &events);
            let _ = ev_tx.send(RobotEvent::Finished(result));
        })
        .map_err(|source| Error::Netns { what: "spawning the robot thread".into(), source })?;
    let mut shaping: Option<(String, ShapingHandle)> = None;
    let result = loop {
        interrupted(opts)?;
        edge_exited(&mut child.0)?;
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
    drop(child);
    drop(link);
    drop(config);
    Ok((result?, summary))
}

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

/// The runtime's own cost on unshaped loopback Zenoh (see [`run_overhead`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct OverheadReport {
    /// Timed repetitions of each measurement.
    pub requests: usize,
    /// (a) A bare libtorch forward of the whole model (`lop::exec::run_whole`), median, ms.
    pub forward_ms: f64,
    /// (b) Sending the raw input bytes one way and the output bytes back over the same Zenoh
    /// sessions (a ping-pong), median, ms.
    pub transfer_ms: f64,
    /// Raw input bytes (as they cross the link: uint8 or float32).
    pub input_bytes: usize,
    /// Raw output bytes.
    pub output_bytes: usize,
    /// (c) Server-only through the runtime (robot client, Zenoh, edge service), mean, ms.
    pub runtime_mean_ms: f64,
    /// (c), median, ms.
    pub runtime_p50_ms: f64,
    /// The edge's compute time inside (c) (from its Done frames), median, ms; `None` when no
    /// Done arrived before the robot had its outputs (the robot does not wait for it).
    pub server_compute_ms: Option<f64>,
    /// How many of (c)'s inferences reported the edge's compute time.
    pub server_compute_reported: usize,
    /// `runtime_p50_ms / (forward_ms + transfer_ms)`.
    pub ratio: f64,
    /// `runtime_mean_ms / (forward_ms + transfer_ms)`.
    pub ratio_mean: f64,
    /// Inferences of (c) the robot finished alone (should be 0).
    pub fallbacks: usize,
    /// Worst relative error of (c)'s outputs against the unsplit model.
    pub max_rel_err: f64,
    /// Whether every output agreed with the unsplit model's ([`MethodReport::outputs_agree`]).
    pub outputs_agree: bool,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A Zenoh echo: the edge side answers every `ping` with a `pong` of a fixed size.
struct PingPong {
    ping: zenoh::pubsub::Publisher<'static>,
    pong: zenoh::pubsub::Subscriber<zenoh::handlers::FifoChannelHandler<zenoh::sample::Sample>>,
    responder: tokio::task::JoinHandle<()>,
    payload: Vec<u8>,
}

impl Drop for PingPong {
    fn drop(&mut self) {
        self.responder.abort();
    }
}

const PING_KEY: &str = "lop/bench/overhead/ping";
const PONG_KEY: &str = "lop/bench/overhead/pong";

async fn publisher(session: &zenoh::Session, key: &'static str) -> Result<zenoh::pubsub::Publisher<'static>> {
    session
        .declare_publisher(key)
        .priority(ZPriority::DataLow)
        .congestion_control(CongestionControl::Block)
        .express(true)
        .await
        .map_err(|e| Error::Zenoh(format!("declaring a publisher on {key}: {e}")))
}

impl PingPong {
    async fn new(robot: &zenoh::Session, edge: &zenoh::Session, up_bytes: usize, down_bytes: usize) -> Result<PingPong> {
        let sub_err = |e: zenoh::Error| Error::Zenoh(format!("declaring a subscriber: {e}"));
        let ping_sub = edge.declare_subscriber(PING_KEY).await.map_err(sub_err)?;
        let pong_pub = publisher(edge, PONG_KEY).await?;
        let answer = vec![0x5a_u8; down_bytes];
        let responder = tokio::spawn(async move {
            while ping_sub.recv_async().await.is_ok() {
                if let Err(e) = pong_pub.put(answer.clone()).await {
                    tracing::warn!(error = %e, "overhead pong");
                    break;
                }
            }
        });
        let pong = robot.declare_subscriber(PONG_KEY).await.map_err(sub_err)?;
        let ping = publisher(robot, PING_KEY).await?;
        Ok(PingPong { ping, pong, responder, payload: vec![0xa5_u8; up_bytes] })
    }

    /// One round trip, seconds (None after 10 s without an answer).
    async fn round_trip(&self) -> Result<f64> {
        let t = Instant::now();
        self.ping.put(self.payload.clone()).await.map_err(|e| Error::Zenoh(format!("overhead ping: {e}")))?;
        match tokio::time::timeout(Duration::from_secs(10), self.pong.recv_async()).await {
            Ok(Ok(_)) => Ok(t.elapsed().as_secs_f64()),
            Ok(Err(e)) => Err(Error::Zenoh(format!("overhead pong: {e}"))),
            Err(_) => Err(Error::Zenoh("no pong within 10 s".into())),
        }
    }
}

/// Measures the runtime's own cost with the link unshaped (Zenoh over loopback, edge in this
/// process): (a) a bare forward of the whole model, (b) a ping-pong of the raw input and output
/// bytes over the same Zenoh sessions, (c) server-only through the runtime; `cfg.requests`
/// timed repetitions of each, interleaved so that drifting machine load hits all three alike,
/// after two untimed warm-up rounds.
///
/// # Errors
/// As [`run_zenoh_loopback`].
pub async fn run_overhead(cfg: &BenchConfig) -> Result<OverheadReport> {
    if cfg.requests == 0 {
        return Err(Error::InvalidConfig { what: "requests must be at least 1".into() });
    }
    let endpoint = format!("tcp/127.0.0.1:{}", free_port()?);
    let edge = ZenohEdge::start(start_edge(cfg).await?, &endpoint).await?;
    let robot = ZenohConfig::client(vec![endpoint]).open().await?;
    let (worker, loaded, samples) = robot_worker(cfg).await?;
    let (inputs, whole) = (samples[0].inputs(), samples[0].reference(false).iter().map(|t| t.shallow_clone()).collect::<Vec<_>>());
    let (table, _) = table(cfg, &worker).await?;
    // (a) runs on its own model copy, like the edge's replica.
    let (source, load) = (cfg.source.clone(), LoadOptions { layout: cfg.server.layout, ..cfg.load.clone() });
    let (bare, _) = Worker::spawn("bare", move || lop::model::load(&source, &load)).await?;
    let input_bytes: usize =
        inputs.iter().map(|t| t.numel() * if cfg.input_wire == InputWire::F32 { 4 } else { t.kind().elt_size_in_bytes() }).sum();
    let output_bytes: usize = whole.iter().map(|t| t.numel() * t.kind().elt_size_in_bytes()).sum();
    let pp = PingPong::new(&robot, &edge.session, input_bytes, output_bytes).await?;
    let mut client = RobotClient::new(
        ZenohConnector::new(robot.clone(), &robot_id("server-only")),
        client_options(cfg, "server-only"),
        worker,
        loaded.meta,
        &loaded.hash,
        table,
    )
    .await?;
    if !client.connected() {
        return Err(Error::Protocol("the edge did not answer over loopback Zenoh".into()));
    }
    let (mut fwd, mut xfer, mut rt, mut server) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut fallbacks, mut err) = (0, Outputs::new());
    for i in 0..cfg.requests + 2 {
        let x: Vec<Tensor> = inputs.iter().map(|t| t.shallow_clone()).collect();
        let a = bare
            .call(move |g| -> lop::Result<f64> {
                let t = Instant::now();
                let out = lop::exec::run_whole(g, &x)?;
                let s = t.elapsed().as_secs_f64();
                drop(out);
                Ok(s)
            })
            .await??;
        let b = pp.round_trip().await?;
        let r = client.infer(inputs.iter().map(|t| t.shallow_clone()).collect(), f64::MAX).await?;
        err.check(&r.outputs, &whole)?;
        if i < 2 {
            continue;
        }
        fallbacks += usize::from(r.stats.fallback);
        fwd.push(a * 1e3);
        xfer.push(b * 1e3);
        rt.push(r.stats.total_s * 1e3);
        if let Some(s) = r.stats.server_compute_s {
            server.push(s * 1e3);
        }
    }
    drop(client);
    drop(pp);
    let (forward_ms, transfer_ms) = (median(fwd), median(xfer));
    let runtime_mean_ms = rt.iter().sum::<f64>() / rt.len().max(1) as f64;
    let runtime_p50_ms = median(rt);
    if let Err(e) = robot.close().await {
        tracing::debug!(error = %e, "closing the robot's Zenoh session");
    }
    edge.close().await;
    Ok(OverheadReport {
        requests: cfg.requests,
        forward_ms,
        transfer_ms,
        input_bytes,
        output_bytes,
        runtime_mean_ms,
        runtime_p50_ms,
        server_compute_reported: server.len(),
        server_compute_ms: (!server.is_empty()).then(|| median(server)),
        ratio: runtime_p50_ms / (forward_ms + transfer_ms),
        ratio_mean: runtime_mean_ms / (forward_ms + transfer_ms),
        fallbacks,
        max_rel_err: err.max_rel_err,
        outputs_agree: err.agree,
    })
}

/// Writes `line` and a newline to stdout and flushes (for [`EDGE_READY`]).
///
/// # Errors
/// When stdout is closed.
pub fn print_ready() -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{EDGE_READY}").and_then(|_| out.flush()).map_err(|source| Error::Netns { what: "writing to stdout".into(), source })
}

#[cfg(test)]
mod steady_tests {
    use super::*;

    #[test]
    fn a_method_is_steady_unless_the_machine_drifted_under_it_or_paced_kernels_overran() {
        let r = |before: f64, after: f64, overrun_ms: f64| MethodReport {
            mean_ms: 100.0,
            calibration_before_ms: before,
            calibration_after_ms: after,
            overrun_ms,
            ..MethodReport::default()
        };
        assert!(steady(&r(10.0, 11.0, 0.0), true));
        // Drift either way beyond 15% marks a method that used the edge, not a robot-only one.
        assert!(!steady(&r(10.0, 12.0, 0.0), true) && !steady(&r(12.0, 10.0, 0.0), true));
        assert!(steady(&r(10.0, 20.0, 0.0), false));
        // Overruns past 2% of the latency mark any method.
        assert!(steady(&r(10.0, 10.0, 1.9), false) && !steady(&r(10.0, 10.0, 2.1), false));
        // A calibration that could not be timed is no evidence of a steady machine.
        assert!(!steady(&r(0.0, 10.0, 0.0), true));
    }
}
