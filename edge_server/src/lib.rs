//! The LOP edge server behind `lop_edge --config FILE` (DESIGN.md sections 2 and 6).
//!
//! The service itself is [`lop_runtime::edge::EdgeService`]; this crate reads the YAML
//! configuration ([`config`]), prepares the models (the store, sha256 checks, server profiles:
//! [`prepare`]), runs the service on a Zenoh session until SIGTERM or Ctrl-C ([`run`]), and
//! reports the GPU energy of every served inference through NVML when there is one ([`energy`]).
//!
//! Operators watch it through [`http`] (Prometheus `/metrics` from [`metrics`], `/health/live`,
//! `/health/ready`) and systemd through [`notify`] (`READY=1`, `STOPPING=1`, and `WATCHDOG=1`
//! while the serving runtime's heartbeat is fresh).
//!
//! Shutdown: the service refuses new sessions and inferences, running inferences get
//! `shutdown_grace_s` to finish, the Zenoh session closes, totals are logged, and [`run`] returns.

pub mod config;
pub mod energy;
pub mod http;
pub mod metrics;
pub mod notify;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lop::graph::Graph;
use lop::model::LoadOptions;
use lop::plan::Side;
use lop::profile::{DeviceKind, Profile, ProfileCache, ProfileOptions};
use lop_power::Ring;
use lop_runtime::edge::{EdgeModel, EdgeOptions, EdgeService, Served, ServerDevice};
use lop_runtime::fleet::{AggregatorHandle, ReporterHandle};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::serve_zenoh;
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

pub use config::{ConfigError, EdgeConfig};
use config::{ModelSource, ProfileSource};
use energy::{EnergyTotals, IntervalEnergy, Meter, RingEnergy};

/// Errors of the edge server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A model could not be loaded, hashed or profiled.
    #[error("model '{id}': {source}")]
    Model {
        /// The model's id.
        id: String,
        /// The engine's error.
        source: Box<lop::Error>,
    },
    /// A file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What the file is for.
        what: &'static str,
        /// The file or directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The runtime failed (Zenoh, the service).
    #[error(transparent)]
    Runtime(#[from] lop_runtime::Error),
    /// The operators' endpoints could not listen (`metrics.listen`).
    #[error("{0}")]
    Metrics(std::io::Error),
}

/// The synthetic profile (`server_profile: synthetic`; tests and demos): the same function the
/// robot's configuration uses, so both build the same table.
pub use lop::profile::synthetic_profile;

/// The sha256 (hex) of a file's bytes.
fn file_sha256(path: &std::path::Path) -> Result<String, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Io { what: "model file", path: path.to_path_buf(), source })?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// Loads every model once (checking its sha256 and its server profile, measuring the profile
/// when asked), creates the cache directories, and returns the service's options.
///
/// # Errors
/// Missing or mismatching models, bad profiles, unwritable caches.
pub fn prepare(cfg: &EdgeConfig) -> Result<EdgeOptions, Error> {
    let named = cfg.devices()?;
    let device = named[0].1;
    let spec = cfg.table_spec()?;
    for (what, dir) in [("table cache", &cfg.table_cache), ("profile cache", &cfg.profile_cache)] {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io { what, path: dir.clone(), source })?;
    }
    if !cfg.robot_profiles.is_dir() {
        tracing::info!(dir = %cfg.robot_profiles.display(), "no robot profiles directory: robots' profiles come in their Hellos");
    }
    let mut models = Vec::new();
    for (i, m) in cfg.models.iter().enumerate() {
        let source = cfg.model_source(i)?;
        let preprocess = m
            .preprocess
            .as_deref()
            .map(lop::preprocess::Preprocess::parse)
            .transpose()
            .map_err(|e| Error::Model { id: m.id.clone(), source: Box::new(e) })?;
        let postprocess = m
            .task
            .as_deref()
            .map(lop::postprocess::Postprocess::parse)
            .transpose()
            .map_err(|e| Error::Model { id: m.id.clone(), source: Box::new(e) })?;
        let file_sha = match &source {
            ModelSource::File(p) if m.sha256.is_some() => Some(file_sha256(p)?),
            _ => None,
        };
        for (input_shape, fit) in cfg.served_variants(i) {
            let (preprocess, postprocess) = (preprocess.clone(), postprocess.clone());
            let load = LoadOptions { input_shape, preprocess, postprocess, fit, ..LoadOptions::default() };
            models.push(prepare_variant(cfg, i, &source, load, file_sha.as_deref(), device)?);
        }
    }
    let devices = device_speeds(cfg, &named, &models)?;
    Ok(EdgeOptions {
        models,
        robot_profiles: Vec::new(),
        profiles_dir: Some(cfg.robot_profiles.clone()),
        spec,
        cache_dir: cfg.table_cache.clone(),
        replicas: cfg.replicas,
        devices,
        limits: lop_msgs::protocol::Limits { max_frame_len: cfg.max_frame_bytes },
        hello_timeout: Duration::from_secs_f64(cfg.hello_timeout_s),
        table_wait: Duration::from_secs_f64(cfg.table_wait_s),
        dilation: cfg.dilation,
        memory_budget: cfg.memory_budget(),
        batching: lop_runtime::edge::Batching { max: cfg.max_batch, ..Default::default() },
    })
}

/// One served variant of model `i` (its own shape, or one of its `input_shapes`): loaded, its
/// sha256 checked, its server profile read, measured or made up.
fn prepare_variant(
    cfg: &EdgeConfig,
    i: usize,
    source: &ModelSource,
    load: LoadOptions,
    file_sha: Option<&str>,
    device: tch::Device,
) -> Result<EdgeModel, Error> {
    let m = &cfg.models[i];
    let engine = |source| Error::Model { id: m.id.clone(), source: Box::new(source) };
    let mut graph = lop::model::load(&source.load_name(), &load).map_err(engine)?;
    let hash = graph.content_hash().map_err(engine)?;
    if let Some(expected) = &m.sha256 {
        let expected = expected.to_ascii_lowercase();
        if expected != hash && file_sha != Some(expected.as_str()) {
            let file = file_sha.map(|f| format!(", file sha256 {f}")).unwrap_or_default();
            return Err(ConfigError::Invalid {
                path: cfg.path.clone(),
                field: format!("models[{i}].sha256"),
                msg: format!("expected {expected}, but '{}' has content hash {hash}{file}", source.load_name()),
            }
            .into());
        }
    }
    cfg.table.input_wire.check(&graph).map_err(|e| ConfigError::Invalid {
        path: cfg.path.clone(),
        field: "table.input_wire".into(),
        msg: format!("model '{}': {e}", m.id),
    })?;
    let server_profile = match &m.server_profile {
        ProfileSource::Synthetic => synthetic_profile(&graph, Side::Server).map_err(engine)?,
        ProfileSource::File(p) => {
            let prof = Profile::load(p).and_then(|prof| prof.validate(&graph, &hash).map(|()| prof));
            let bad = |msg: String| ConfigError::Invalid {
                path: cfg.path.clone(),
                field: format!("models[{i}].server_profile"),
                msg: format!("{}: {msg}", p.display()),
            };
            let prof = prof.map_err(|e| bad(e.to_string()))?;
            if prof.role != Side::Server {
                return Err(bad("not a server profile (role robot)".into()).into());
            }
            prof
        }
        ProfileSource::Measure => measured_profile(cfg, &m.id, &mut graph, &hash, device)?,
    };
    let shape = graph.inputs().first().map(|&n| graph.nodes[n].info.shape.clone()).unwrap_or_default();
    let layout = server_profile.layout.name();
    tracing::info!(model = %m.id, source = %source.load_name(), ?shape, %hash, profile = %server_profile.hash(), layout, "model ready");
    // The replicas run the model as its profile measured it.
    let load = LoadOptions { layout: server_profile.layout, ..load };
    Ok(EdgeModel { id: m.id.clone(), source: source.load_name(), load, server_profile })
}

/// The edge's devices with their speeds: on a device other than the first (another GPU, not a
/// CPU group standing in), every model whose profile is measured is measured there too
/// (cached), and the device's speed is the first device's profiled seconds over its own, all
/// models together; 1 where nothing is measured.
fn device_speeds(cfg: &EdgeConfig, named: &[(String, tch::Device)], models: &[EdgeModel]) -> Result<Vec<ServerDevice>, Error> {
    let profiled_s = |p: &Profile| p.ops.iter().map(|op| op.fit.time(op.out_rows.max(1))).sum::<f64>();
    let mut out = Vec::with_capacity(named.len());
    for (name, device) in named {
        let mut speed = 1.0;
        if *device != named[0].1 {
            let (mut first, mut here) = (0.0, 0.0);
            for m in models {
                let measured = cfg.models.iter().find(|e| e.id == m.id).is_some_and(|e| matches!(e.server_profile, ProfileSource::Measure));
                if !measured {
                    continue;
                }
                let engine = |source| Error::Model { id: m.id.clone(), source: Box::new(source) };
                let mut graph = lop::model::load(&m.source, &m.load).map_err(engine)?;
                let hash = graph.content_hash().map_err(engine)?;
                let p = measured_profile(cfg, &m.id, &mut graph, &hash, *device)?;
                first += profiled_s(&m.server_profile);
                here += profiled_s(&p);
            }
            if first > 0.0 && here > 0.0 {
                speed = first / here;
            }
        }
        tracing::info!(device = %name, speed, "server device");
        out.push(ServerDevice { name: name.clone(), device: *device, speed });
    }
    Ok(out)
}

/// The server profile of a model measured on `device`, or the cached one.
fn measured_profile(cfg: &EdgeConfig, id: &str, graph: &mut Graph, hash: &str, device: tch::Device) -> Result<Profile, Error> {
    let engine = |source| Error::Model { id: id.to_string(), source: Box::new(source) };
    let kind = if device.is_cuda() { DeviceKind::Cuda } else { DeviceKind::Cpu };
    let opts = ProfileOptions { role: Side::Server, device: kind, dilation: 1.0, runs: 5, warmup: 1, units: 8, layout: cfg.layout };
    let cache = ProfileCache::new(&cfg.profile_cache);
    if let Some((p, at)) = cache.load(graph, hash, &opts, device) {
        tracing::info!(model = %id, profile = %at.display(), "using the cached server profile");
        return Ok(p);
    }
    tracing::info!(model = %id, device = ?device, threads = tch::get_num_threads(), "measuring the server profile (once; cached)");
    let started = Instant::now();
    graph.to_device(device).map_err(engine)?;
    let inputs: Vec<tch::Tensor> = lop::exec::synthetic_inputs(graph, 0).map_err(engine)?.iter().map(|t| t.to_device(device)).collect();
    let (prof, at) = cache.measure(graph, hash, &inputs, &opts, device, |_, _, _| {}).map_err(engine)?;
    tracing::info!(model = %id, seconds = started.elapsed().as_secs_f64(), profile = %at.display(), "server profile measured");
    Ok(prof)
}

/// What a run did, for the final log line and for tests.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RunSummary {
    /// The service's counters at the end.
    pub counts: lop_runtime::edge::EdgeCounts,
    /// GPU energy totals (`None` when NVML was not used).
    pub gpu_energy: Option<EnergyTotals>,
    /// Inferences still running when the grace period ended.
    pub abandoned: u64,
}

/// Prepares the models, serves until SIGTERM or Ctrl-C, shuts down gracefully.
///
/// # Errors
/// A bad configuration, models that do not load, a Zenoh session that does not open.
pub fn run(cfg: EdgeConfig) -> Result<RunSummary, Error> {
    if let Some(t) = cfg.threads {
        tch::set_num_threads(t);
    }
    let metrics_addr = cfg.metrics_addr()?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("lop-edge").build().map_err(|source| Error::Io {
        what: "tokio runtime",
        path: "-".into(),
        source,
    })?;
    rt.block_on(async {
        // The endpoints answer from the start: not ready while the models load.
        let registry = if metrics_addr.is_some() { metrics::Metrics::new() } else { metrics::Metrics::off() };
        let ops = Arc::new(http::OpsState::new(registry));
        let endpoints = match metrics_addr {
            Some(addr) => {
                let listener = http::bind(addr).await.map_err(Error::Metrics)?;
                tracing::info!(%addr, "metrics and health endpoints: /metrics, /health/live, /health/ready");
                Some(tokio::spawn(http::serve(listener, ops.clone())))
            }
            None => None,
        };
        let heart = tokio::spawn(heartbeat(ops.clone(), None));
        let prepared = {
            let cfg = cfg.clone();
            tokio::task::spawn_blocking(move || prepare(&cfg)).await.map_err(|e| Error::Io {
                what: "model preparation",
                path: "-".into(),
                source: std::io::Error::other(e.to_string()),
            })?
        };
        heart.abort();
        let opts = prepared?;
        let shutdown = async {
            match wait_for_signal().await {
                Ok(sig) => tracing::info!(signal = sig, "shutting down"),
                Err(e) => tracing::error!(error = %e, "cannot wait for signals; shutting down"),
            }
        };
        let summary = serve(cfg, opts, ops, shutdown).await;
        if let Some(e) = endpoints {
            e.abort();
        }
        summary
    })
}

/// Beats `ops`' heartbeat every [`HEARTBEAT_PERIOD`] from the serving runtime, after taking the
/// service's locks in turn (`svc`), and tells systemd's watchdog while the beat is fresh.
async fn heartbeat(ops: Arc<http::OpsState>, svc: Option<(EdgeService, Arc<notify::Notifier>)>) {
    let period = svc.as_ref().and_then(|(_, n)| n.watchdog()).map_or(HEARTBEAT_PERIOD, |w| (w / 2).min(HEARTBEAT_PERIOD));
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        if let Some((svc, notifier)) = &svc {
            svc.heartbeat();
            ops.beat();
            if notifier.watchdog().is_some() && ops.alive() {
                notifier.notify("WATCHDOG=1");
            }
        } else {
            ops.beat();
        }
    }
}

/// How often the serving runtime beats.
pub const HEARTBEAT_PERIOD: Duration = Duration::from_secs(1);

async fn wait_for_signal() -> std::io::Result<&'static str> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => Ok("SIGTERM"),
        r = tokio::signal::ctrl_c() => r.map(|()| "SIGINT"),
    }
}

/// Runs the service on a Zenoh session until `shutdown` completes, then shuts down gracefully.
///
/// # Errors
/// The service or the Zenoh session failing to start.
pub async fn serve(
    cfg: EdgeConfig,
    opts: EdgeOptions,
    ops: Arc<http::OpsState>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<RunSummary, Error> {
    tokio::pin!(shutdown);
    let device = opts.devices.first().map_or(tch::Device::Cpu, |d| d.device);
    ops.metrics.attach_gpus(gpu_gauges(&opts));
    let notifier = Arc::new(notify::Notifier::from_env());
    let svc = EdgeService::start(opts).await?;
    ops.metrics.attach(svc.clone());
    let heart = tokio::spawn(heartbeat(ops.clone(), Some((svc.clone(), notifier.clone()))));
    let (stop_tx, stop_rx) = oneshot::channel();
    let meter = gpu_meter(&cfg, device);
    let accounting = tokio::spawn(account(svc.served(), meter, ops.clone(), stop_rx));
    let (zcfg, session) = open_session(&cfg).await?;
    let edge_id = cfg.edge_id();
    let tasks = accept_robots(&cfg, &svc, &session, &edge_id).await?;
    // Robots' bandwidth monitors time uploads and downloads against this responder when idle.
    // Rationed per robot and in total (`ProbeLimits`), counted in /metrics.
    let probes = lop_runtime::bandwidth::probe::serve_probes(&session, Default::default(), svc.probe_counts()).await?;
    let (reporter, _aggregator) = join_fleet(&cfg, &svc, &session, &edge_id, device).await?;
    log_serving(&cfg, &edge_id, &zcfg, &svc);
    serve_until(&svc, &ops, &notifier, &edge_id, shutdown).await;
    ops.ready.store(false, std::sync::atomic::Ordering::SeqCst);
    notifier.notify("STOPPING=1");
    // Leave the fleet first, so robots route elsewhere while running inferences finish.
    drop(reporter);
    let abandoned = drain(&cfg, &svc).await;
    probes.stop();
    close_session(session, tasks).await;
    let counts = svc.counts();
    heart.abort();
    drop(svc);
    let _ = stop_tx.send(());
    let gpu_energy = match tokio::time::timeout(Duration::from_secs(5), accounting).await {
        Ok(Ok(t)) => t,
        _ => None,
    };
    log_stopped(&counts, gpu_energy.as_ref());
    Ok(RunSummary { counts, gpu_energy, abandoned })
}

/// Every CUDA device's NVML figures for /metrics, where NVML answers.
fn gpu_gauges(opts: &EdgeOptions) -> Vec<(String, lop_power::nvml::GpuGauges)> {
    opts.devices
        .iter()
        .filter_map(|d| match d.device {
            tch::Device::Cuda(i) => match lop_power::nvml::GpuGauges::open(i as u32) {
                Ok(g) => Some((d.name.clone(), g)),
                Err(e) => {
                    tracing::info!(device = %d.name, "no NVML figures in /metrics: {e}");
                    None
                }
            },
            _ => None,
        })
        .collect()
}

/// Opens the edge's Zenoh session on the endpoints its listen plan allows, logging the plan's
/// warnings; returns the session's configuration with it.
async fn open_session(cfg: &EdgeConfig) -> Result<(ZenohConfig, zenoh::Session), Error> {
    let zcfg = cfg.zenoh_config()?;
    for warning in cfg.listen_plan()?.warnings {
        tracing::warn!("{warning}");
    }
    let session = zcfg.open().await?;
    Ok((zcfg, session))
}

/// Serves robots that address this edge by its fleet id, and (unless turned off) robots
/// configured with this edge's address: the single-edge key space. One task per key space.
async fn accept_robots(cfg: &EdgeConfig, svc: &EdgeService, session: &zenoh::Session, edge_id: &str) -> Result<Vec<JoinHandle<()>>, Error> {
    let keys = lop_msgs::key::SessionKeys::fleet(edge_id).map_err(|e| {
        Error::Config(crate::config::ConfigError::Invalid { path: cfg.path.clone(), field: "id".into(), msg: e.to_string() })
    })?;
    let mut tasks = vec![serve_zenoh(svc.clone(), EdgeAcceptor::on(session, keys).await?)];
    if cfg.serve_unaddressed {
        tasks.push(serve_zenoh(svc.clone(), EdgeAcceptor::new(session).await?));
    }
    Ok(tasks)
}

/// Joins the fleet: a liveliness token and a load report (10 Hz by default), so robots find this
/// edge; the site's aggregator where configured; forwarding where allowed. The reporter's handle
/// leaves the fleet when dropped, the aggregator's stops the digests.
async fn join_fleet(
    cfg: &EdgeConfig,
    svc: &EdgeService,
    session: &zenoh::Session,
    edge_id: &str,
    device: tch::Device,
) -> Result<(ReporterHandle, Option<AggregatorHandle>), Error> {
    let gpu_memory = match device {
        tch::Device::Cuda(i) => {
            lop_power::nvml::GpuMemory::open(i as u32).map_err(|e| tracing::info!("GPU free memory not reported: {e}")).ok()
        }
        _ => None,
    };
    let reporter = lop_runtime::fleet::start_reporter(
        session,
        edge_id,
        svc.clone(),
        Duration::from_secs_f64(cfg.site.report_period_ms / 1e3),
        Box::new(move || gpu_memory.as_ref().and_then(|g| g.free_bytes())),
    )
    .await?;
    // The site's aggregator, where configured: digests of shards for robots hearing the site.
    let aggregator = if cfg.site.aggregate {
        Some(
            lop_runtime::fleet::start_aggregator(
                session,
                cfg.site.shard_size,
                Duration::from_secs_f64(cfg.site.digest_period_ms / 1e3),
                lop_runtime::fleet::STALE_AFTER,
            )
            .await?,
        )
    } else {
        None
    };
    // Inferences it cannot serve in time go to an edge of its own view of the fleet.
    if cfg.max_forwards > 0 {
        let forwarding = lop_runtime::fleet::forwarding(session, edge_id, cfg.max_forwards, lop_runtime::fleet::STALE_AFTER).await?;
        svc.set_forwarding(forwarding)?;
    }
    Ok((reporter, aggregator))
}

/// The start-up line: what the edge serves, where and how.
fn log_serving(cfg: &EdgeConfig, edge_id: &str, zcfg: &ZenohConfig, svc: &EdgeService) {
    tracing::info!(
        edge = %edge_id,
        mode = ?cfg.zenoh.mode,
        listen = ?zcfg.listen,
        tls = zcfg.security.has_tls(),
        access_control = zcfg.security.access.is_some(),
        connect = ?cfg.zenoh.connect,
        models = ?svc.model_ids(),
        replicas = cfg.replicas,
        device = %cfg.device,
        "lop_edge serving"
    );
}

/// Serves until `shutdown`: ready once the tables of the robot profiles it was given are planned
/// (robots whose profile comes in a Hello get theirs on first contact, running alone meanwhile),
/// and never ready when `shutdown` comes first.
async fn serve_until(
    svc: &EdgeService,
    ops: &http::OpsState,
    notifier: &notify::Notifier,
    edge_id: &str,
    mut shutdown: Pin<&mut impl std::future::Future<Output = ()>>,
) {
    let tables = tokio::select! {
        n = svc.prepare_tables() => Some(n),
        () = &mut shutdown => None,
    };
    if let Some(tables) = tables {
        ops.ready.store(true, std::sync::atomic::Ordering::SeqCst);
        notifier.notify("READY=1");
        tracing::info!(edge = %edge_id, tables, "lop_edge ready");
        shutdown.await;
    }
}

/// Refuses new work and gives running inferences `shutdown_grace_s` to finish; returns how many
/// were still running when it ended.
async fn drain(cfg: &EdgeConfig, svc: &EdgeService) -> u64 {
    svc.shutdown();
    let grace = Duration::from_secs_f64(cfg.shutdown_grace_s);
    if svc.drain(grace).await {
        0
    } else {
        let left = svc.in_flight();
        tracing::warn!(left, grace_s = cfg.shutdown_grace_s, "grace period over with inferences still running");
        left
    }
}

/// Closes the Zenoh session, then waits up to 2 s for each acceptor task to end (aborting it
/// after that).
async fn close_session(session: zenoh::Session, tasks: Vec<JoinHandle<()>>) {
    if let Err(e) = session.close().await {
        tracing::warn!(error = %e, "closing the Zenoh session");
    }
    for mut task in tasks {
        if tokio::time::timeout(Duration::from_secs(2), &mut task).await.is_err() {
            task.abort();
        }
    }
}

/// The closing lines: the service's counters, and the GPU energy of served inferences.
fn log_stopped(counts: &lop_runtime::edge::EdgeCounts, gpu_energy: Option<&EnergyTotals>) {
    tracing::info!(
        sessions = counts.sessions,
        rejected = counts.rejected,
        inferences = counts.inferences,
        done = counts.done,
        aborted = counts.aborted,
        overloaded = counts.overloaded,
        forwarded = counts.forwarded,
        late = counts.late,
        batches = counts.batches,
        batched = counts.batched,
        dropped_frames = counts.dropped.total(),
        "lop_edge stopped"
    );
    if let Some(t) = gpu_energy {
        tracing::info!(
            inferences = t.inferences,
            measured = t.measured,
            joules = t.joules,
            mean_j = t.mean_j(),
            "GPU energy of served inferences"
        );
    }
}

/// The NVML meter, or `None` (logged once) when GPU energy is off or unavailable.
fn gpu_meter(cfg: &EdgeConfig, device: tch::Device) -> Option<Meter<RingEnergy>> {
    let g = cfg.gpu_energy;
    if !g.enabled {
        tracing::info!("GPU energy disabled in the configuration");
        return None;
    }
    let index = match (g.nvml_index, device) {
        (Some(i), _) => i,
        (None, tch::Device::Cuda(n)) => u32::try_from(n).unwrap_or(0),
        (None, _) => {
            tracing::info!("GPU energy not measured: the models run on the CPU");
            return None;
        }
    };
    let source = match lop_power::nvml::NvmlSource::open(index) {
        Ok(s) => s,
        Err(e) => {
            tracing::info!(reason = %e, "GPU energy not available");
            return None;
        }
    };
    let capacity = (g.rate_hz * 60.0).ceil().max(16.0) as usize;
    let ring = match Ring::new(capacity) {
        Ok(r) => Arc::new(Mutex::new(r)),
        Err(e) => {
            tracing::warn!(error = %e, "GPU energy not available");
            return None;
        }
    };
    let sampler = lop_power::SamplerConfig { rate_hz: g.rate_hz, ..Default::default() };
    match lop_power::sampler::spawn(Box::new(source), sampler, ring.clone()) {
        Ok(handle) => {
            // The sampler runs for the life of the process.
            std::mem::forget(handle);
            tracing::info!(gpu = index, rate_hz = g.rate_hz, "GPU energy per served inference through NVML");
            let patience = Duration::from_secs_f64((20.0 / g.rate_hz).max(1.0));
            Some(Meter::new(RingEnergy { ring, opts: Default::default() }, patience))
        }
        Err(e) => {
            tracing::warn!(error = %e, "GPU energy not available");
            None
        }
    }
}

fn log_served(s: &Served) {
    tracing::debug!(
        robot = %s.robot_id,
        model = %s.model_id,
        inference = s.inference_id,
        replica = s.replica,
        outcome = s.outcome.as_str(),
        ms = s.duration().as_secs_f64() * 1e3,
        compute_ms = s.server_compute_s * 1e3,
        bytes_in = s.bytes_received,
        bytes_out = s.bytes_sent,
        "inference served"
    );
}

/// Logs every served inference and, with a meter, its GPU energy, until `stop`; then resolves
/// what is pending (bounded by the meter's patience) and returns the totals.
async fn account<S: IntervalEnergy>(
    mut served: broadcast::Receiver<Served>,
    mut meter: Option<Meter<S>>,
    ops: Arc<http::OpsState>,
    mut stop: oneshot::Receiver<()>,
) -> Option<EnergyTotals> {
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    let report = |meter: &mut Option<Meter<S>>| {
        if let Some(m) = meter.as_mut() {
            for e in m.poll(Instant::now()) {
                match e.joules {
                    Ok(j) => tracing::info!(
                        robot = %e.served.robot_id,
                        model = %e.served.model_id,
                        inference = e.served.inference_id,
                        outcome = e.served.outcome.as_str(),
                        ms = e.served.duration().as_secs_f64() * 1e3,
                        gpu_j = j,
                        method = e.method.unwrap_or(""),
                        "GPU energy"
                    ),
                    Err(why) => tracing::debug!(inference = e.served.inference_id, %why, "no GPU energy figure"),
                }
            }
        }
    };
    loop {
        tokio::select! {
            r = served.recv() => match r {
                Ok(s) => {
                    log_served(&s);
                    ops.metrics.observe(&s);
                    if let Some(m) = meter.as_mut() {
                        m.offer(s, Instant::now());
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => tracing::warn!(missed = n, "served-inference reports lost (lagging)"),
                Err(broadcast::error::RecvError::Closed) => break,
            },
            _ = tick.tick() => report(&mut meter),
            _ = &mut stop => break,
        }
    }
    while let Ok(s) = served.try_recv() {
        log_served(&s);
        ops.metrics.observe(&s);
        if let Some(m) = meter.as_mut() {
            m.offer(s, Instant::now());
        }
    }
    // Every pending inference resolves within its patience; bounded at 200 ticks regardless.
    for _ in 0..200 {
        report(&mut meter);
        if meter.as_ref().is_none_or(|m| m.pending() == 0) {
            break;
        }
        tick.tick().await;
    }
    meter.map(|m| m.totals())
}
