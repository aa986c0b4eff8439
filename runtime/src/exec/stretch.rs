//! Emulating a slower device on this machine (DESIGN.md section 9): how long a side waits after
//! each kernel so that it runs as a K-times slower robot (or edge) would.
//!
//! Two ways. [`Stretch::Measured`] waits `(K - 1)` times the kernel's measured duration: simple,
//! but on a shared or virtual machine a kernel that follows a long wait runs slower (caches and
//! the CPU went to other work meanwhile), and that noise is multiplied by K: a robot dilated 20x
//! measured 1.8x to 3.2x slower than its profile, varying 1.8x between two runs of the same
//! benchmark. [`Stretch::Paced`] makes every kernel last what the side's profile predicts for
//! it, times K over the profile's own dilation: the emulated device *is* its profile, run after
//! run, and the waits absorb this machine's noise. A kernel that takes longer than its target
//! (this machine more than K times slower than profiled) is not shortened; it counts as an
//! overrun, which the benchmark reports.

use std::sync::Arc;
use std::time::Duration;

use lop::graph::{Graph, NodeId};
use lop::profile::{Fit, Profile};

use crate::error::{Error, Result};

/// How one side's kernels are stretched.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Stretch {
    /// Not at all: this machine's speed.
    #[default]
    None,
    /// Each kernel is followed by a wait of `K - 1` times its measured duration.
    Measured(f64),
    /// Each kernel lasts what the profile predicts (see [`Pace`]).
    Paced(Arc<Pace>),
}

/// Per-op kernel times of an emulated device: its profile's fits, scaled from the profile's
/// dilation to the one emulated.
#[derive(Debug, Clone, PartialEq)]
pub struct Pace {
    fits: Vec<Fit>,
    scale: f64,
    dilation: f64,
}

impl Pace {
    /// The pace of a device `dilation` times slower than this machine, from `profile` (of
    /// `graph`, measured at its own dilation, `profile.dilation`).
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] for a dilation under 1 or a profile that does not fit the graph.
    pub fn new(graph: &Graph, profile: &Profile, dilation: f64) -> Result<Pace> {
        if !(dilation.is_finite() && dilation >= 1.0) {
            return Err(Error::InvalidConfig { what: format!("dilation must be >= 1, got {dilation}") });
        }
        let fits = profile.fits(graph).map_err(|e| Error::InvalidConfig { what: format!("pacing by the robot profile: {e}") })?;
        Ok(Pace { fits, scale: dilation / profile.dilation, dilation })
    }

    /// The seconds a kernel computing `rows` rows of `node` lasts.
    pub fn seconds(&self, node: NodeId, rows: usize) -> f64 {
        self.fits.get(node).map_or(0.0, |f| f.time(rows) * self.scale)
    }
}

impl Stretch {
    /// [`Stretch::Measured`] for a dilation over 1, else [`Stretch::None`].
    pub fn measured(dilation: f64) -> Stretch {
        if dilation > 1.0 { Stretch::Measured(dilation) } else { Stretch::None }
    }

    /// How many times slower than this machine the side runs (1 for none).
    pub fn dilation(&self) -> f64 {
        match self {
            Stretch::None => 1.0,
            Stretch::Measured(k) => *k,
            Stretch::Paced(p) => p.dilation,
        }
    }

    /// The wait after a kernel that computed `rows` rows of `node` in `took`, and by how much
    /// the kernel overran its paced duration (zero when it did not, or is not paced).
    pub fn after(&self, node: NodeId, rows: usize, took: Duration) -> (Duration, Duration) {
        match self {
            Stretch::None => (Duration::ZERO, Duration::ZERO),
            Stretch::Measured(k) => (took.mul_f64((k - 1.0).max(0.0)), Duration::ZERO),
            Stretch::Paced(p) => {
                let target = Duration::from_secs_f64(p.seconds(node, rows));
                (target.saturating_sub(took), took.saturating_sub(target))
            }
        }
    }

    /// Waits as [`Stretch::after`] says; returns the overrun.
    pub fn wait_after(&self, node: NodeId, rows: usize, took: Duration) -> Duration {
        let (wait, over) = self.after(node, rows, took);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        over
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lop::plan::Side;
    use lop::profile::SYNTHETIC;

    #[test]
    fn a_paced_kernel_lasts_its_profile_time_scaled_to_the_emulated_dilation() {
        let g = lop::zoo::build("resnet18@32x32").expect("zoo");
        let mut robot = SYNTHETIC.profile(&g, Side::Robot).expect("profile");
        // A profile measured at 4x, emulated at 20x: every kernel 5x its profile time.
        robot.dilation = 4.0;
        let pace = Pace::new(&g, &robot, 20.0).expect("pace");
        let fits = robot.fits(&g).expect("fits");
        let op = (0..g.nodes.len()).find(|&i| g.is_op(i)).expect("an op");
        let rows = g.nodes[op].info.rows();
        let target = fits[op].time(rows) * 5.0;
        assert!((pace.seconds(op, rows) - target).abs() < 1e-12);
        let stretch = Stretch::Paced(Arc::new(pace));
        assert_eq!(stretch.dilation(), 20.0);
        // A fast kernel waits out the rest of its target; a slow one waits nothing and overruns.
        let (wait, over) = stretch.after(op, rows, Duration::from_secs_f64(target / 4.0));
        assert!(over.is_zero() && (wait.as_secs_f64() - target * 0.75).abs() < 1e-6, "{wait:?}");
        let (wait, over) = stretch.after(op, rows, Duration::from_secs_f64(target * 2.0));
        assert!(wait.is_zero() && (over.as_secs_f64() - target).abs() < 1e-6, "{over:?}");
        // Measured: (K - 1) times the kernel's duration.
        let (wait, over) = Stretch::measured(3.0).after(op, rows, Duration::from_millis(10));
        assert!(over.is_zero() && wait == Duration::from_millis(20));
        assert_eq!(Stretch::measured(1.0), Stretch::None);
        assert!(Pace::new(&g, &robot, 0.5).is_err());
    }
}
