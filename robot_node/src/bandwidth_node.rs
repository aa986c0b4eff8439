//! `lop_bandwidth`: the link monitor node. Passive samples come from every (non-fallback)
//! `/lop/inference` result (bytes both ways over the result's transfer time); when no sample has
//! arrived for a while, an active probe runs against the edge's responder
//! ([`lop_runtime::bandwidth::probe::probe`]); a [`Monitor`] turns them into `/lop/bandwidth` estimates at
//! the configured rate (2 Hz by default).

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::watch;

use crate::backend::{Bandwidth, SharedRos, Stamp, to_time};
use crate::config::BandwidthConfig;
use crate::error::{Error, Result};
use lop_runtime::bandwidth::Monitor;

fn lock(m: &Mutex<Monitor>) -> std::sync::MutexGuard<'_, Monitor> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `lop_bandwidth` until `shutdown` resolves; returns the number of estimates published.
///
/// # Errors
/// An invalid monitor configuration; topics the backend refuses; a malformed edge endpoint.
pub async fn run(cfg: BandwidthConfig, ros: SharedRos, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<u64> {
    let (stop_tx, mut stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let monitor = Monitor::new(cfg.monitor.clone(), Instant::now()).map_err(|e| Error::Config { what: e.to_string() })?;
    let buckets = monitor.selector().buckets().to_vec();
    let monitor = Arc::new(Mutex::new(monitor));
    let probing = !cfg.monitor.probe_interval.is_zero();
    let session = if probing { Some(cfg.edge.open().await?) } else { None };
    let publisher = ros.bandwidth_publisher(&cfg.bandwidth_topic)?;
    let _sub = {
        let monitor = monitor.clone();
        ros.subscribe_inference(
            &cfg.inference_topic,
            Box::new(move |r| {
                if !r.fallback {
                    lock(&monitor).passive(Instant::now(), r.bytes_up.saturating_add(r.bytes_down), r.transfer_s);
                }
            }),
        )?
    };
    tracing::info!(topic = %cfg.bandwidth_topic, probing, "ready");
    let mut tick = tokio::time::interval(cfg.monitor.publish_period.min(std::time::Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut probe_task: Option<tokio::task::JoinHandle<()>> = None;
    let mut published = 0u64;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        // A statement of its own: a guard in an `if let` scrutinee lives through the body.
        let due = lock(&monitor).probe_due(now);
        if let Some(s) = &session
            && probe_task.as_ref().is_none_or(|t| t.is_finished())
            && let Some(bytes) = due
        {
            lock(&monitor).probe_started(now);
            let (s, monitor, timeout, id) = (s.clone(), monitor.clone(), cfg.probe_timeout, cfg.robot_id.clone());
            probe_task = Some(tokio::spawn(async move {
                let r = lop_runtime::bandwidth::probe::probe(&s, &id, bytes, timeout).await;
                let (up, down) = match r {
                    Ok(p) => {
                        tracing::debug!(up = p.up_mbps, down = p.down_mbps, rtt_ms = p.rtt_s * 1e3, "probe");
                        (Some(p.up_mbps), Some(p.down_mbps))
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "probe failed");
                        (None, None)
                    }
                };
                lock(&monitor).probe_result(Instant::now(), up, down);
            }));
        }
        let estimate = lock(&monitor).tick(now);
        if let Some(e) = estimate {
            let msg = Bandwidth {
                stamp: to_time(Stamp::now()),
                estimate_mbps: e.estimate_mbps,
                prediction_mbps: e.prediction_mbps,
                samples: e.samples,
                bucket: buckets.iter().position(|&b| b == e.bucket).and_then(|i| u32::try_from(i).ok()).unwrap_or(0),
                predictor: e.predictor.to_string(),
            };
            match publisher.publish(&msg) {
                Ok(()) => published += 1,
                Err(err) => tracing::warn!(error = %err, "publishing the estimate failed"),
            }
        }
    }
    if let Some(t) = probe_task {
        t.abort();
    }
    if let Some(s) = session
        && let Err(e) = s.close().await
    {
        tracing::debug!(error = %e, "closing the edge session");
    }
    Ok(published)
}
