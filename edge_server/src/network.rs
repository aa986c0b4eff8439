//! The edge on the network: its Zenoh session opened on the endpoints its listen plan allows,
//! the acceptors that serve robots, the fleet joined (load reports, the site's aggregator,
//! forwarding), and the session closed at the end.

use std::time::Duration;

use lop_runtime::edge::EdgeService;
use lop_runtime::fleet::{AggregatorHandle, ReporterHandle};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::serve_zenoh;
use tokio::task::JoinHandle;

use crate::Error;
use crate::config::EdgeConfig;

/// Opens the edge's Zenoh session on the endpoints its listen plan allows, logging the plan's
/// warnings; returns the session's configuration with it.
pub(super) async fn open_session(cfg: &EdgeConfig) -> Result<(ZenohConfig, zenoh::Session), Error> {
    let zcfg = cfg.zenoh_config()?;
    for warning in cfg.listen_plan()?.warnings {
        tracing::warn!("{warning}");
    }
    let session = zcfg.open().await?;
    Ok((zcfg, session))
}

/// Serves robots that address this edge by its fleet id, and (unless turned off) robots
/// configured with this edge's address: the single-edge key space. One task per key space.
pub(super) async fn accept_robots(
    cfg: &EdgeConfig,
    svc: &EdgeService,
    session: &zenoh::Session,
    edge_id: &str,
) -> Result<Vec<JoinHandle<()>>, Error> {
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
pub(super) async fn join_fleet(
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

/// Closes the Zenoh session, then waits up to 2 s for each acceptor task to end (aborting it
/// after that).
pub(super) async fn close_session(session: zenoh::Session, tasks: Vec<JoinHandle<()>>) {
    if let Err(e) = session.close().await {
        tracing::warn!(error = %e, "closing the Zenoh session");
    }
    for mut task in tasks {
        if tokio::time::timeout(Duration::from_secs(2), &mut task).await.is_err() {
            task.abort();
        }
    }
}
