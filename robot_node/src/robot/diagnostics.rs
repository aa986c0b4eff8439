//! /diagnostics: the task that publishes the counters, the live settings, rates and latency
//! percentiles about once a second.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use tokio::sync::watch;

use super::shared::Shared;
use crate::backend::{Diagnostics, Level, Pub, SharedRos, Stamp};
use crate::config::RobotConfig;
use crate::lifecycle::{Lifecycle, State};
use crate::live::LiveSettings;
use crate::window::{Rate, Recent};

/// Spawns the task that publishes /diagnostics every `diagnostics_period` until `stop`: the
/// counters, the lifecycle state, the live settings, rates and latency percentiles, at level
/// Warn while the edge is not connected.
pub(super) fn spawn_diagnostics(
    cfg: &RobotConfig,
    ros: &SharedRos,
    diagnostics: Pub<Diagnostics>,
    shared: &Shared,
    lifecycle: Arc<Lifecycle>,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let (counters, period, hw) = (shared.counters.clone(), cfg.diagnostics_period, cfg.robot_id.clone());
    let (ros, live, recent) = (ros.clone(), shared.live.clone(), shared.recent.clone());
    let (mut rate_in, mut rate_out) = (Rate::new(), Rate::new());
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => {}
            }
            let connected = counters.connected.load(Ordering::Relaxed);
            let faults = ros.input_faults();
            let bad = counters.bad_total(faults);
            let now = Instant::now();
            let mut values = counters.values(faults);
            values.extend(live_values(
                &live,
                &recent.lock().unwrap_or_else(PoisonError::into_inner),
                rate_in.per_second(now, counters.received.load(Ordering::Relaxed)),
                rate_out.per_second(now, counters.answered.load(Ordering::Relaxed)),
            ));
            let state = lifecycle.state();
            values.push(("lifecycle_state".into(), state.label().to_string()));
            let paused = if live.enabled() { "" } else { "paused (enabled: false); " };
            // Only an active node holds an edge session: an inactive one is not warned about.
            let (level, message) = match state {
                State::Active if connected => (Level::Ok, format!("{paused}edge connected; {bad} bad frames")),
                State::Active => (Level::Warn, format!("{paused}edge not connected (robot alone); {bad} bad frames")),
                other => (Level::Ok, format!("{} (lifecycle): frames not answered; {bad} bad frames", other.label())),
            };
            let d =
                Diagnostics { stamp: Stamp::now(), level, name: "lop_robot: inference".into(), message, hardware_id: hw.clone(), values };
            if let Err(e) = diagnostics.publish(&d) {
                tracing::warn!(error = %e, "publishing diagnostics failed");
            }
        }
    })
}

/// The /diagnostics values beside the counters: the live settings, the plan of the last result,
/// the rates of frames in and results out, and percentiles of recent inference latencies and
/// ROS-layer times.
fn live_values(live: &LiveSettings, recent: &(Recent, Recent, String), in_hz: f64, out_hz: f64) -> Vec<(String, String)> {
    let (latency, ros, plan) = recent;
    let ms = |w: &Recent, q: f64| w.quantile(q).map_or_else(|| "-".to_string(), |s| format!("{:.3}", s * 1e3));
    let mut v = vec![
        ("enabled".to_string(), live.enabled().to_string()),
        ("method".into(), live.method().to_string()),
        ("drop_policy".into(), live.drop_policy().as_str().to_string()),
        ("plan_hash".into(), plan.clone()),
        ("frames_in_hz".into(), format!("{in_hz:.2}")),
        ("results_out_hz".into(), format!("{out_hz:.2}")),
        ("latency_window".into(), latency.len().to_string()),
    ];
    for (name, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)] {
        v.push((format!("latency_ms_{name}"), ms(latency, q)));
        v.push((format!("ros_latency_ms_{name}"), ms(ros, q)));
    }
    v
}
