//! /diagnostics: the task that publishes, for each input (camera), its counters, the live
//! settings, rates and latency percentiles about once a second.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use tokio::sync::watch;

use super::counters::RobotCounters;
use super::shared::{RecentTimes, Shared};
use crate::backend::{Diagnostics, InputFaultCounts, Level, Pub, SharedRos, Stamp};
use crate::config::{RobotConfig, Sensor};
use crate::lifecycle::{Lifecycle, State};
use crate::live::LiveSettings;
use crate::window::{Rate, Recent};

/// Spawns the task that publishes /diagnostics every `diagnostics_period` until `stop`: for
/// each input (camera) a status of its own, named after it (`lop_robot: inference (front)`),
/// with its counters, topic and edge session, the lifecycle state, the live settings, rates
/// and latency percentiles, at level Warn while its edge session is not connected.
pub(super) fn spawn_diagnostics(
    cfg: &RobotConfig,
    ros: &SharedRos,
    diagnostics: Pub<Diagnostics>,
    shared: &[Shared],
    lifecycle: Arc<Lifecycle>,
    mut stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let (period, hw, ros) = (cfg.diagnostics_period, cfg.robot_id.clone(), ros.clone());
    let mut inputs: Vec<InputStatus> = cfg.inputs.iter().zip(shared).map(|(sensor, s)| InputStatus::new(sensor, s)).collect();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.changed() => break,
                _ = tick.tick() => {}
            }
            let state = lifecycle.state();
            // The backend's input faults are the node's, not one camera's: the first reports them.
            let mut faults = ros.input_faults();
            for input in &mut inputs {
                let d = input.status(state, faults, &hw);
                faults = InputFaultCounts::default();
                if let Err(e) = diagnostics.publish(&d) {
                    tracing::warn!(error = %e, "publishing diagnostics failed");
                }
            }
        }
    })
}

/// What one input's /diagnostics status is made of: its name and where it comes from, its
/// counters, live settings and recent times, and its rates.
struct InputStatus {
    name: String,
    camera: Vec<(String, String)>,
    counters: Arc<RobotCounters>,
    live: Arc<LiveSettings>,
    recent: Arc<RecentTimes>,
    rates: (Rate, Rate),
}

impl InputStatus {
    /// The status of `sensor`, whose counters and times `shared` holds.
    fn new(sensor: &Sensor, shared: &Shared) -> InputStatus {
        let camera = if sensor.name.is_empty() {
            Vec::new()
        } else {
            vec![
                ("camera".to_string(), sensor.name.clone()),
                ("camera_topic".to_string(), sensor.input_topic()),
                ("camera_namespace".to_string(), sensor.namespace.clone()),
                ("edge_session_id".to_string(), sensor.edge_id.clone()),
            ]
        };
        InputStatus {
            name: sensor.status_name(),
            camera,
            counters: shared.counters.clone(),
            live: shared.live.clone(),
            recent: shared.recent.clone(),
            rates: (Rate::new(), Rate::new()),
        }
    }

    /// The status now, in lifecycle `state`, counting `faults` of the backend as bad input.
    fn status(&mut self, state: State, faults: InputFaultCounts, hw: &str) -> Diagnostics {
        let (counters, live) = (&self.counters, &self.live);
        let connected = counters.connected.load(Ordering::Relaxed);
        let bad = counters.bad_total(faults);
        let now = Instant::now();
        let mut values = self.camera.clone();
        values.extend(counters.values(faults));
        values.extend(live_values(
            live,
            &self.recent.lock().unwrap_or_else(PoisonError::into_inner),
            self.rates.0.per_second(now, counters.received.load(Ordering::Relaxed)),
            self.rates.1.per_second(now, counters.answered.load(Ordering::Relaxed)),
        ));
        values.push(("lifecycle_state".into(), state.label().to_string()));
        let paused = if live.enabled() { "" } else { "paused (enabled: false); " };
        // Only an active node holds an edge session: an inactive one is not warned about.
        let (level, message) = match state {
            State::Active if connected => (Level::Ok, format!("{paused}edge connected; {bad} bad frames")),
            State::Active => (Level::Warn, format!("{paused}edge not connected (robot alone); {bad} bad frames")),
            other => (Level::Ok, format!("{} (lifecycle): frames not answered; {bad} bad frames", other.label())),
        };
        Diagnostics { stamp: Stamp::now(), level, name: self.name.clone(), message, hardware_id: hw.to_string(), values }
    }
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
