//! The benchmark harness behind `lop bench`: every method over the same bandwidth trace in one
//! run, through the real executor, edge service and robot client, with per-method latency
//! statistics, bytes, modelled robot energy, fallbacks, the simulator's prediction for the plans
//! that ran, and the worst output error against the unsplit model.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lop::model::LoadOptions;
use lop::planner::table::TableSpec;
use lop::power::model::PowerModel;
use lop::profile::Profile;
use tch::Tensor;

use crate::client::{ClientOptions, Connector, InferenceStats, RobotClient};
use crate::edge::{EdgeModel, EdgeOptions, EdgeService};
use crate::error::{Error, Result};
use crate::exec::{InputWire, Worker};
use crate::local::Switchboard;
use crate::shaped::ShapedConfig;
use crate::trace::Trace;

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
    /// How the raw input travels.
    pub input_wire: InputWire,
    /// Where schedule tables are cached.
    pub cache_dir: PathBuf,
    /// The robot's power model (modelled energy).
    pub power: PowerModel,
    /// Pause between inferences (0: back to back).
    pub gap: Duration,
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
    /// Bytes sent to the edge, per inference (mean).
    pub bytes_up: f64,
    /// Bytes received from the edge, per inference (mean).
    pub bytes_down: f64,
    /// Modelled robot energy per inference (mean), joules.
    pub energy_j: f64,
    /// Inferences the robot finished alone.
    pub fallbacks: usize,
    /// Worst relative error of the outputs against the unsplit model.
    pub max_rel_err: f64,
}

/// Modelled robot energy of one inference: computing watts while it computed, transmitting
/// watts while its uplink bytes were on the wire (at the link rate when it started), idle watts
/// for the rest.
pub fn modelled_energy(power: &PowerModel, s: &InferenceStats, uplink_mbps: f64) -> f64 {
    let tx_s = if uplink_mbps > 0.0 { s.bytes_up as f64 * 8.0 / (uplink_mbps * 1e6) } else { 0.0 };
    let compute = s.robot_compute_s.min(s.total_s);
    let tx = tx_s.min(s.total_s - compute);
    power.computing_w * compute + power.transmitting_w * tx + power.idle_w * (s.total_s - compute - tx).max(0.0)
}

fn summarize(lat_ms: &mut [f64], sims: &[f64], stats: &[(InferenceStats, f64)], err: f64) -> MethodReport {
    let n = lat_ms.len().max(1) as f64;
    let mean = lat_ms.iter().sum::<f64>() / n;
    let var = lat_ms.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    lat_ms.sort_by(f64::total_cmp);
    let pct = |p: f64| lat_ms.get(((lat_ms.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0);
    MethodReport {
        requests: lat_ms.len(),
        mean_ms: mean,
        std_ms: var.sqrt(),
        p50_ms: pct(0.5),
        p95_ms: pct(0.95),
        sim_mean_ms: sims.iter().sum::<f64>() / sims.len().max(1) as f64 * 1e3,
        bytes_up: stats.iter().map(|s| s.0.bytes_up as f64).sum::<f64>() / n,
        bytes_down: stats.iter().map(|s| s.0.bytes_down as f64).sum::<f64>() / n,
        energy_j: stats.iter().map(|s| s.1).sum::<f64>() / n,
        fallbacks: stats.iter().filter(|s| s.0.fallback).count(),
        max_rel_err: err,
    }
}

/// Starts the edge for a benchmark (one replica, CPU).
///
/// # Errors
/// As [`EdgeService::start`].
pub async fn start_edge(cfg: &BenchConfig) -> Result<EdgeService> {
    EdgeService::start(EdgeOptions {
        models: vec![EdgeModel {
            id: cfg.model_id.clone(),
            source: cfg.source.clone(),
            load: cfg.load.clone(),
            server_profile: cfg.server.clone(),
        }],
        robot_profiles: vec![cfg.robot.clone()],
        profiles_dir: None,
        spec: cfg.spec.clone(),
        cache_dir: cfg.cache_dir.clone(),
        replicas: 1,
        device: tch::Device::Cpu,
        limits: Default::default(),
        hello_timeout: Duration::from_secs(120),
    })
    .await
}

/// Runs every method over the in-process shaped link replaying `cfg.trace` (each method from
/// trace time 0), calling `progress(method, index, stats)` after each inference.
///
/// # Errors
/// Model, table or engine failures; a method with no plans.
pub async fn run_in_process(
    cfg: &BenchConfig,
    mut progress: impl FnMut(&str, usize, &InferenceStats),
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
    progress: &mut dyn FnMut(&str, usize, &InferenceStats),
) -> Result<BTreeMap<String, MethodReport>> {
    if cfg.requests == 0 {
        return Err(Error::InvalidConfig { what: "requests must be at least 1".into() });
    }
    let (source, load) = (cfg.source.clone(), cfg.load.clone());
    let (mut worker, loaded) = Worker::spawn("robot", move || lop::model::load(&source, &load)).await?;
    let (inputs, whole) = worker
        .call(|g| -> lop::Result<(Vec<Tensor>, Vec<Tensor>)> {
            let inputs = lop::exec::synthetic_inputs(g, 1)?;
            let whole = lop::exec::run_whole(g, &inputs)?.outputs;
            Ok((inputs, whole))
        })
        .await??;
    let (robot, server, spec, dir) = (cfg.robot.clone(), cfg.server.clone(), cfg.spec.clone(), cfg.cache_dir.clone());
    let (table, _, _) = worker.call(move |g| lop::planner::table::load_or_build(&dir, g, None, &robot, &server, &spec, 1)).await??;
    let mut out = BTreeMap::new();
    for method in &cfg.methods {
        let mut opts = ClientOptions::new("bench-robot", &cfg.model_id);
        opts.method = method.clone();
        opts.dilation = cfg.dilation;
        opts.input_wire = cfg.input_wire;
        opts.hello_timeout = Duration::from_secs(120);
        let mut client = RobotClient::new(connect(method), opts, worker, loaded.meta.clone(), &loaded.hash, table.clone()).await?;
        if !client.connected() && method != "robot-only" {
            tracing::warn!(%method, "the edge did not answer; this method will run on the robot alone");
        }
        let epoch = Instant::now();
        let (mut lat, mut sims, mut stats, mut err) = (Vec::new(), Vec::new(), Vec::new(), 0.0f64);
        for i in 0..cfg.requests {
            let rate = cfg.trace.rate_mbps(epoch.elapsed());
            let bucket_units = rate / 8.0 / cfg.spec.bandwidth_scale;
            let inputs: Vec<Tensor> = inputs.iter().map(|t| t.shallow_clone()).collect();
            let r = client.infer(inputs, bucket_units).await?;
            err = err.max(lop::exec::max_rel_err_all(&r.outputs, &whole)?);
            progress(method, i, &r.stats);
            lat.push(r.stats.total_s * 1e3);
            if let Some(p) = r.stats.predicted_s {
                sims.push(p);
            }
            let e = modelled_energy(&cfg.power, &r.stats, rate);
            stats.push((r.stats, e));
            if !cfg.gap.is_zero() {
                tokio::time::sleep(cfg.gap).await;
            }
        }
        out.insert(method.clone(), summarize(&mut lat, &sims, &stats, err));
        worker = client.into_worker();
    }
    Ok(out)
}
