//! What a method's run reports ([`MethodReport`]) and the statistics behind it: latency
//! moments, the outputs' agreement with the unsplit model ([`Outputs`]), the modelled robot
//! energy, and the median the overhead measurement uses. A leaf: it computes on numbers and
//! tensors only.

use lop::sim::RobotPower;
use tch::Tensor;

use crate::client::InferenceStats;
use crate::error::Result;

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
    /// ([`calibration_ms`](super::calibration_ms)).
    pub calibration_before_ms: f64,
    /// The same after it ran.
    pub calibration_after_ms: f64,
    /// Whether this machine held its speed during the method: paced robot kernels overran by
    /// at most [`OVERRUN_SHARE`](super::OVERRUN_SHARE) of the latency, and, for a method that
    /// used the edge (whose compute is this machine's, not paced), the calibration kernel stayed
    /// within [`STEADY`](super::STEADY) of itself before and after. When false, the
    /// measured-over-simulated ratio describes the machine, not the system.
    pub steady: bool,
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
pub(super) struct Outputs {
    pub(super) max_rel_err: f64,
    pub(super) agree: bool,
    pub(super) reordered: usize,
}

impl Outputs {
    pub(super) fn new() -> Self {
        Outputs { max_rel_err: 0.0, agree: true, reordered: 0 }
    }

    /// Adds one inference's outputs against its reference.
    pub(super) fn check(&mut self, outputs: &[Tensor], reference: &[Tensor]) -> Result<()> {
        let a = lop::exec::agree_all(outputs, reference, lop::exec::Tolerance::OTHER_RUNTIME)?;
        self.max_rel_err = self.max_rel_err.max(a.rel_err);
        self.agree &= a.within;
        self.reordered += a.reordered;
        Ok(())
    }
}

/// The report of a method's timed requests (latencies in ms, simulated makespans in s, each
/// request's statistics with its modelled energy); the yardsticks and calibration are left for
/// the caller to fill in.
pub(super) fn summarize(lat_ms: &mut [f64], sims: &[f64], stats: &[(InferenceStats, f64)], outputs: Outputs, dropped: u64) -> MethodReport {
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

/// The median of `v` (NaN when empty).
pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}
