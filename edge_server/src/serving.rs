//! The edge's life: prepare the models while the operators' endpoints already answer, serve on
//! Zenoh until SIGTERM or Ctrl-C (heartbeat, readiness, systemd notifications), then shut down
//! gracefully (leave the fleet, drain, close) and log the totals.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lop_runtime::edge::{EdgeOptions, EdgeService};
use lop_runtime::zenoh_link::ZenohConfig;
use tokio::sync::oneshot;

use crate::accounting::{account, gpu_gauges, gpu_meter};
use crate::config::EdgeConfig;
use crate::energy::EnergyTotals;
use crate::models::prepare;
use crate::network::{accept_robots, close_session, join_fleet, open_session};
use crate::{Error, http, metrics, notify};

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
