//! The robot's watts per activity, as the simulator prices a plan's energy.

/// The robot's power draw while computing, transmitting and idle: the plain numbers behind the
/// simulator's modelled energy (DESIGN.md section 5). Measuring and modelling power live in the
/// `lop_power` crate; the engine needs only these three figures.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RobotPower {
    /// Watts while computing (computing takes precedence when the robot also transmits).
    pub computing_w: f64,
    /// Watts while transmitting only.
    pub transmitting_w: f64,
    /// Watts while idle.
    pub idle_w: f64,
}

impl Default for RobotPower {
    /// The project's reference robot: 13.35 W computing, 4.25 W transmitting, 4.04 W idle (the
    /// same defaults as `lop_power`'s state model, which a robot_node test checks).
    fn default() -> Self {
        RobotPower { computing_w: 13.35, transmitting_w: 4.25, idle_w: 4.04 }
    }
}
