//! Whether the machine held its speed while a method ran: a fixed calibration kernel timed
//! before and after ([`calibration_ms`]), and the rule that reads it with the paced robot's
//! overruns ([`STEADY`], [`OVERRUN_SHARE`]). Above the report it judges, below the runs that
//! time it.

use std::time::Instant;

use tch::Tensor;

use super::report::MethodReport;
use crate::error::{Error, Result};
use crate::exec::Worker;

/// How far the calibration kernel may drift between before and after a method (as a ratio,
/// either way) for the machine to count as steady: the benchmark's own fidelity target.
pub const STEADY: f64 = 1.15;

/// The share of a method's mean latency that paced robot kernels may add by overrunning
/// their targets before the machine counts as unable to hold the emulated robot.
pub const OVERRUN_SHARE: f64 = 0.02;

/// [`MethodReport::steady`] from the report's calibration, overruns and latency: whether the
/// machine held its speed while the method ran (`used_edge`: some request used the edge, whose
/// compute is this machine's).
pub(super) fn steady(r: &MethodReport, used_edge: bool) -> bool {
    let drift = r.calibration_after_ms / r.calibration_before_ms;
    let held_robot = r.overrun_ms <= OVERRUN_SHARE * r.mean_ms;
    let held_speed = drift.is_finite() && (1.0 / STEADY..=STEADY).contains(&drift);
    held_robot && (held_speed || !used_edge)
}

/// Milliseconds of a fixed kernel (a 64-channel 3x3 convolution over 112x112, the median of
/// seven runs after two untimed ones), on `worker`'s thread: the machine's speed right now.
/// Timed before and after each method, it tells a steady machine from one whose speed changed
/// (another process, a throttled or oversubscribed virtual CPU).
///
/// # Errors
/// libtorch failures.
pub async fn calibration_ms(worker: &Worker) -> Result<f64> {
    worker
        .call(|_| -> Result<f64> {
            let _guard = tch::no_grad_guard();
            let opts = (tch::Kind::Float, tch::Device::Cpu);
            let x = Tensor::ones([1, 64, 112, 112], opts);
            let w = Tensor::ones([64, 64, 3, 3], opts) * 1e-3;
            let mut times = Vec::new();
            for i in 0..9 {
                let t0 = Instant::now();
                let y =
                    x.f_conv2d(&w, None::<Tensor>, [1, 1], [1, 1], [1, 1], 1).map_err(|e| Error::Executor(format!("calibration: {e}")))?;
                let _ = y.f_sum(tch::Kind::Float).map_err(|e| Error::Executor(format!("calibration: {e}")))?;
                if i >= 2 {
                    times.push(t0.elapsed().as_secs_f64() * 1e3);
                }
            }
            times.sort_by(f64::total_cmp);
            Ok(times[times.len() / 2])
        })
        .await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_is_steady_unless_the_machine_drifted_under_it_or_paced_kernels_overran() {
        let r = |before: f64, after: f64, overrun_ms: f64| MethodReport {
            mean_ms: 100.0,
            calibration_before_ms: before,
            calibration_after_ms: after,
            overrun_ms,
            ..MethodReport::default()
        };
        assert!(steady(&r(10.0, 11.0, 0.0), true));
        // Drift either way beyond 15% marks a method that used the edge, not a robot-only one.
        assert!(!steady(&r(10.0, 12.0, 0.0), true) && !steady(&r(12.0, 10.0, 0.0), true));
        assert!(steady(&r(10.0, 20.0, 0.0), false));
        // Overruns past 2% of the latency mark any method.
        assert!(steady(&r(10.0, 10.0, 1.9), false) && !steady(&r(10.0, 10.0, 2.1), false));
        // A calibration that could not be timed is no evidence of a steady machine.
        assert!(!steady(&r(0.0, 10.0, 0.0), true));
    }
}
