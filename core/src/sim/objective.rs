//! Objectives (DESIGN.md section 5): what a planner or a baseline search minimises.

use super::Cost;
use super::RobotPower;

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
    pub fn lower_bound(&self, robot_s: f64, power: &RobotPower) -> f64 {
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

impl std::str::FromStr for Objective {
    type Err = crate::error::Error;

    /// Parses `latency`, `energy`, `weighted:LAMBDA` (seconds per joule) or `deadline:MS`.
    fn from_str(s: &str) -> crate::error::Result<Objective> {
        let bad = |what: &str| crate::error::Error::Input(format!("{what} in objective '{s}'"));
        let num = |v: &str| v.trim().parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
        match s.trim().split_once(':') {
            None if s.trim() == "latency" => Ok(Objective::Latency),
            None if s.trim() == "energy" => Ok(Objective::Energy),
            Some(("weighted", v)) => num(v).map(|lambda| Objective::Weighted { lambda }).ok_or_else(|| bad("bad lambda")),
            Some(("deadline", v)) => {
                num(v).map(|ms| Objective::EnergyUnderDeadline { deadline_s: ms / 1e3 }).ok_or_else(|| bad("bad deadline"))
            }
            _ => Err(crate::error::Error::Input(format!(
                "unknown objective '{s}' (expected latency, energy, weighted:LAMBDA or deadline:MS)"
            ))),
        }
    }
}

#[cfg(test)]
mod parse_tests {
    use super::Objective;

    #[test]
    fn objectives_parse_and_bad_ones_are_refused() {
        assert_eq!("latency".parse::<Objective>().ok(), Some(Objective::Latency));
        assert_eq!("energy".parse::<Objective>().ok(), Some(Objective::Energy));
        assert_eq!("weighted:0.5".parse::<Objective>().ok(), Some(Objective::Weighted { lambda: 0.5 }));
        assert_eq!("deadline:250".parse::<Objective>().ok(), Some(Objective::EnergyUnderDeadline { deadline_s: 0.25 }));
        for bad in ["", "fast", "weighted:", "weighted:-1", "deadline:nan", "deadline:x"] {
            assert!(bad.parse::<Objective>().is_err(), "{bad} accepted");
        }
    }
}
