//! What one method's timed requests gather ([`Tally`]: latencies, simulated makespans, each
//! request's statistics and energy, the outputs' agreement, and the yardsticks and server
//! compute of the buckets they ran in), and how that becomes the method's [`MethodReport`],
//! judged steady or not. Between the statistics below it and the runs that feed it.

use super::config::BenchConfig;
use super::report::{MethodReport, Outputs, summarize};
use super::steady::steady;
use super::yardsticks::BucketYardsticks;
use crate::client::InferenceStats;

/// One method's timed requests so far.
pub(super) struct Tally {
    /// Latencies, ms.
    lat: Vec<f64>,
    /// Simulated makespans of the plans that ran, s.
    sims: Vec<f64>,
    /// Each request's statistics and modelled energy (J).
    stats: Vec<(InferenceStats, f64)>,
    /// The outputs against the unsplit model's.
    pub(super) err: Outputs,
    /// The yardsticks of the requests' buckets, s.
    bound_s: Vec<f64>,
    best_s: Vec<f64>,
    fluid_s: Vec<f64>,
    /// Measured server compute and the simulator's for the same requests, s.
    server_s: Vec<f64>,
    server_sim_s: Vec<f64>,
}

impl Tally {
    pub(super) fn new() -> Tally {
        Tally {
            lat: Vec::new(),
            sims: Vec::new(),
            stats: Vec::new(),
            err: Outputs::new(),
            bound_s: Vec::new(),
            best_s: Vec::new(),
            fluid_s: Vec::new(),
            server_s: Vec::new(),
            server_sim_s: Vec::new(),
        }
    }

    /// Adds one request of `method`: its statistics, their modelled energy `energy_j`, and the
    /// yardsticks of its bucket in `marks`.
    pub(super) fn add(&mut self, method: &str, marks: &[BucketYardsticks], stats: InferenceStats, energy_j: f64) {
        self.lat.push(stats.total_s * 1e3);
        if let Some(p) = stats.predicted_s {
            self.sims.push(p);
        }
        if let Some(m) = marks.get(stats.bucket as usize) {
            self.bound_s.extend(m.bound_s);
            self.fluid_s.extend(m.fluid_s);
            self.best_s.extend(m.best_baseline_s);
            // Pairs from the requests whose plan kept the server computing and that it
            // answered (not fallen back).
            let sim_s = m.server_busy_s.get(method).copied().filter(|&s| s > 0.0 && !stats.fallback);
            if let (Some(sim_s), Some(meas_s)) = (sim_s, stats.server_compute_s) {
                self.server_sim_s.push(sim_s);
                self.server_s.push(meas_s);
            }
        }
        self.stats.push((stats, energy_j));
    }

    /// The method's report: the requests' statistics, the calibration kernel's milliseconds
    /// before and after, and the frames the robot dropped.
    pub(super) fn report(mut self, cfg: &BenchConfig, method: &str, (before_ms, after_ms): (f64, f64), dropped: u64) -> MethodReport {
        let mut report = summarize(&mut self.lat, &self.sims, &self.stats, self.err, dropped);
        report.calibration_before_ms = before_ms;
        report.calibration_after_ms = after_ms;
        let used_edge = self.stats.iter().any(|s| s.0.bytes_up > 0 || s.0.bytes_down > 0);
        report.steady = steady(&report, used_edge);
        if !report.steady {
            tracing::warn!(
                %method, before_ms, after_ms, overruns = report.overruns, overrun_ms = report.overrun_ms,
                "this machine did not hold its speed during the method: its measured-over-simulated ratio describes the machine"
            );
        }
        let mean_ms = |v: &[f64]| (v.len() == cfg.requests).then(|| v.iter().sum::<f64>() / v.len() as f64 * 1e3);
        report.sim_bound_ms = mean_ms(&self.bound_s);
        report.fluid_bound_ms = mean_ms(&self.fluid_s);
        report.sim_best_baseline_ms = mean_ms(&self.best_s);
        if !self.server_s.is_empty() {
            let n = self.server_s.len() as f64;
            report.server_compute_ms = Some(self.server_s.iter().sum::<f64>() / n * 1e3);
            report.sim_server_compute_ms = Some(self.server_sim_s.iter().sum::<f64>() / n * 1e3);
        }
        report
    }
}
