//! Objectives (DESIGN.md section 5): what a planner or a baseline search minimises.

use super::Cost;
use crate::power::model::PowerModel;

/// What to minimise. Every objective scores a [`Cost`]; lower is better; an infeasible cost
/// (a missed deadline) scores infinity.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Objective {
    /// Makespan (seconds).
    Latency,
    /// Modelled robot energy (joules).
    Energy,
    /// `makespan + lambda * energy`.
    Weighted {
        /// Seconds per joule.
        lambda: f64,
    },
    /// Energy, subject to `makespan <= deadline_s` (the SPSO-GA objective).
    EnergyUnderDeadline {
        /// The deadline, seconds.
        deadline_s: f64,
    },
}

impl Objective {
    /// The score of a cost (infinity when a deadline is missed).
    pub fn score(&self, c: &Cost) -> f64 {
        match *self {
            Objective::Latency => c.makespan_s,
            Objective::Energy => c.energy_j,
            Objective::Weighted { lambda } => c.makespan_s + lambda * c.energy_j,
            Objective::EnergyUnderDeadline { deadline_s } => {
                if c.makespan_s <= deadline_s {
                    c.energy_j
                } else {
                    f64::INFINITY
                }
            }
        }
    }

    /// Whether `a` is strictly better than `b`: lower score, ties broken by lower makespan.
    pub fn better(&self, a: &Cost, b: &Cost) -> bool {
        let (sa, sb) = (self.score(a), self.score(b));
        sa < sb || (sa == sb && sa.is_finite() && a.makespan_s < b.makespan_s)
    }

    /// A lower bound on the score of any plan in which the robot must compute for at least
    /// `robot_s` seconds before the outputs are whole (so `makespan >= robot_s` and at least
    /// `robot_s` of robot computing falls in `[0, makespan]`).
    ///
    /// Energy is at least `computing_w * robot_s`: with `c >= robot_s` computing seconds in a
    /// makespan `T >= c`, energy `>= computing_w * c + min(transmitting_w, idle_w) * (T - c)`,
    /// which is `>= computing_w * robot_s` whichever of the watts is larger.
    pub fn lower_bound(&self, robot_s: f64, power: &PowerModel) -> f64 {
        let e = power.computing_w * robot_s;
        match *self {
            Objective::Latency => robot_s,
            Objective::Energy => e,
            Objective::Weighted { lambda } => robot_s + lambda * e,
            Objective::EnergyUnderDeadline { deadline_s } => {
                if robot_s > deadline_s {
                    f64::INFINITY
                } else {
                    e
                }
            }
        }
    }
}
