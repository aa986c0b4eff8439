//! `lop bench-batch --robots N`: what batching across robots gains through the whole edge
//! service, not only its kernels. N robots in this process send frames back to back over fast
//! in-process links to one edge replica for a fixed time, once with batching off and once on;
//! frames answered per second, batches formed, and every answer checked against the unsplit model
//! of its own frame (each robot sends a different one).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use lop::model::LoadOptions;
use lop::plan::Side;
use lop::planner::table::{ScheduleTable, TableSpec};
use tch::Tensor;

use crate::client::{ClientOptions, RobotClient};
use crate::edge::{Batching, EdgeModel, EdgeOptions, EdgeService};
use crate::error::{Error, Result};
use crate::exec::Worker;
use crate::local::Switchboard;
use crate::shaped::ShapedConfig;
use crate::trace::Trace;
use lop::profile::synthetic_profile;

/// What to run.
#[derive(Debug, Clone)]
pub struct EdgeBatchBench {
    /// `zoo:NAME` or an ONNX path.
    pub source: String,
    /// How to load it.
    pub load: LoadOptions,
    /// Robots sending at once.
    pub robots: usize,
    /// How long each setting runs.
    pub seconds: f64,
    /// The robots' method (`server-only` or `lop`).
    pub method: String,
    /// Where the schedule table is cached.
    pub cache_dir: PathBuf,
}

/// One setting's result.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct EdgeBatchReport {
    /// The edge's `max_batch`.
    pub max_batch: usize,
    /// Frames answered by the edge (not finished by a robot alone).
    pub frames: usize,
    /// Those per second.
    pub frames_per_s: f64,
    /// Frames a robot finished alone (the edge failed them).
    pub fallbacks: usize,
    /// Batches of two or more the edge ran, and the inferences in them.
    pub batches: u64,
    /// Inferences that ran in batches.
    pub batched: u64,
    /// The worst relative error of an answer against its frame's unsplit output.
    pub max_rel_err: f64,
}

/// A robot's frame (graph inputs) and the unsplit model's outputs for it.
type Frame = (Vec<Tensor>, Vec<Tensor>);

/// The link every robot uses: far faster than the edge, so that the edge is what limits.
const LINK_MB_S: f64 = 1000.0;

/// Runs the robots against an edge with `max_batch`, printing nothing.
///
/// # Errors
/// A model that does not load, a table that cannot be built, an edge or robot that fails to
/// start, an answer that is not its frame's unsplit output.
pub async fn run_edge_batching(cfg: &EdgeBatchBench, max_batch: usize) -> Result<EdgeBatchReport> {
    if cfg.robots == 0 || !(cfg.seconds.is_finite() && cfg.seconds > 0.0) {
        return Err(Error::InvalidConfig { what: format!("{} robots for {} s: both must be positive", cfg.robots, cfg.seconds) });
    }
    let (source, load, robots) = (cfg.source.clone(), cfg.load.clone(), cfg.robots);
    let cache = cfg.cache_dir.clone();
    // Model, profiles, table, frames and their unsplit outputs, off the async executor.
    let setup = tokio::task::spawn_blocking(move || -> lop::Result<_> {
        let g = lop::model::load(&source, &load)?;
        let robot = synthetic_profile(&g, Side::Robot)?;
        let server = synthetic_profile(&g, Side::Server)?;
        let spec = TableSpec::latency(vec![0.0, LINK_MB_S], 0.0005);
        let table = lop::planner::table::load_or_build(&cache, &g, &robot, &server, &spec, 1)?.0;
        let mut frames = Vec::with_capacity(robots);
        for k in 0..robots {
            let inputs = lop::exec::synthetic_inputs(&g, 1000 + k as u64)?;
            let whole = lop::exec::run_whole(&g, &inputs)?.outputs;
            frames.push((inputs, whole));
        }
        Ok((robot, server, spec, table, frames))
    })
    .await
    .map_err(|e| Error::Executor(format!("bench set-up: {e}")))?
    .map_err(Error::Engine)?;
    let (robot, server, spec, table, frames) = setup;
    let (spec, table, frames): (TableSpec, ScheduleTable, Vec<Frame>) = (spec, table, frames);
    let service = EdgeService::start(EdgeOptions {
        models: vec![EdgeModel { id: "model".into(), source: cfg.source.clone(), load: cfg.load.clone(), server_profile: server }],
        robot_profiles: vec![robot],
        profiles_dir: None,
        spec,
        cache_dir: cfg.cache_dir.clone(),
        replicas: 1,
        devices: vec![crate::edge::ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: Duration::from_secs(60),
        table_wait: Duration::from_secs(600),
        dilation: 1.0,
        memory_budget: None,
        batching: Batching { max: max_batch, ..Default::default() },
    })
    .await?;
    let board = Switchboard::new();
    let edge = board.plug(service);
    let mut clients = Vec::with_capacity(robots);
    for k in 0..robots {
        let id = format!("bench-batch-{k}");
        let (source, load) = (cfg.source.clone(), cfg.load.clone());
        let (worker, loaded) = Worker::spawn(&id, move || lop::model::load(&source, &load)).await?;
        let link = ShapedConfig::symmetric(Trace::constant(LINK_MB_S)?);
        let mut opts = ClientOptions::new(&id, "model");
        opts.method = cfg.method.clone();
        opts.hello_timeout = Duration::from_secs(60);
        opts.deadline_slack = Duration::from_secs(30);
        clients.push(RobotClient::new(board.connector(link), opts, worker, loaded.meta, &loaded.hash, table.clone()).await?);
    }
    let until = Instant::now() + Duration::from_secs_f64(cfg.seconds);
    let mut runs = tokio::task::JoinSet::new();
    for (mut client, (inputs, whole)) in clients.into_iter().zip(frames) {
        runs.spawn(async move {
            let (mut answered, mut fallbacks, mut worst) = (0usize, 0usize, (0.0f64, true));
            while Instant::now() < until {
                let r = client.infer(inputs.iter().map(Tensor::shallow_clone).collect(), LINK_MB_S).await?;
                let a = lop::exec::agree_all(&r.outputs, &whole, lop::exec::Tolerance::SPLIT).map_err(Error::Engine)?;
                worst = (worst.0.max(a.rel_err), worst.1 && a.within);
                if r.stats.fallback {
                    fallbacks += 1;
                } else {
                    answered += 1;
                }
            }
            Ok::<_, Error>((answered, fallbacks, worst))
        });
    }
    let started = Instant::now();
    let (mut frames_done, mut fallbacks, mut worst, mut agreed) = (0, 0, 0.0f64, true);
    while let Some(done) = runs.join_next().await {
        let (a, f, w) = done.map_err(|e| Error::Executor(format!("a bench robot failed: {e}")))??;
        frames_done += a;
        fallbacks += f;
        worst = worst.max(w.0);
        agreed &= w.1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    if !agreed {
        return Err(Error::Executor(format!(
            "an answer differs from its frame's unsplit output: relative error {worst} (tolerance {})",
            lop::exec::Tolerance::SPLIT.describe()
        )));
    }
    let counts = edge.service().counts();
    Ok(EdgeBatchReport {
        max_batch,
        frames: frames_done,
        frames_per_s: frames_done as f64 / elapsed,
        fallbacks,
        batches: counts.batches,
        batched: counts.batched,
        max_rel_err: worst,
    })
}
