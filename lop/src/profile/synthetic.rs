//! The project's one synthetic profile: what `synthetic` means in `config/edge.yaml` and
//! `config/robot.yaml`, what `lop bench --synthetic-profiles` plans with, and what tests plan
//! with when they need a table but no measurement. Robot and edge must build the very same
//! profile, or their schedule-table hashes differ, so everything takes it from here.

use super::{Fit, Profile};
use crate::error::Result;
use crate::graph::Graph;
use crate::plan::Side;

/// A synthetic cost model: every op costs `kernel_s` plus `server_s_per_byte` per output byte
/// of a row, times its rows, on the server; the robot pays `robot_slowdown` times the per-byte
/// part (the kernel launch cost is the same on both sides).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyntheticCosts {
    /// Fixed seconds per kernel (per chunk computed), either side.
    pub kernel_s: f64,
    /// The server's seconds per output byte.
    pub server_s_per_byte: f64,
    /// How many times the robot's per-byte cost exceeds the server's.
    pub robot_slowdown: f64,
}

/// The synthetic profile: 20 us per kernel plus 1 ns per output byte on the server, the robot
/// 8x slower per byte (a Jetson against a GPU server, roughly).
pub const SYNTHETIC: SyntheticCosts = SyntheticCosts { kernel_s: 2e-5, server_s_per_byte: 1e-9, robot_slowdown: 8.0 };

impl SyntheticCosts {
    /// The profile of `graph` for `side` under these costs.
    ///
    /// # Errors
    /// When the graph's content hash cannot be computed.
    pub fn profile(&self, graph: &Graph, side: Side) -> Result<Profile> {
        let per_byte = match side {
            Side::Server => self.server_s_per_byte,
            Side::Robot => self.server_s_per_byte * self.robot_slowdown,
        };
        crate::profile::from_fits(graph, side, |id| Fit::new(self.kernel_s, graph.nodes[id].info.bytes_of_rows(1) as f64 * per_byte))
    }

    /// Both profiles, robot first.
    ///
    /// # Errors
    /// As [`SyntheticCosts::profile`].
    pub fn pair(&self, graph: &Graph) -> Result<(Profile, Profile)> {
        Ok((self.profile(graph, Side::Robot)?, self.profile(graph, Side::Server)?))
    }
}

/// [`SYNTHETIC`]'s profile of `graph` for `side`.
///
/// # Errors
/// As [`SyntheticCosts::profile`].
pub fn synthetic_profile(graph: &Graph, side: Side) -> Result<Profile> {
    SYNTHETIC.profile(graph, side)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_robot_pays_the_slowdown_per_byte_and_the_same_kernel_cost() {
        let g = crate::zoo::build("resnet18@32x32").expect("zoo");
        let (robot, server) = SYNTHETIC.pair(&g).expect("profiles");
        assert_eq!(robot.ops.len(), server.ops.len());
        for (r, s) in robot.ops.iter().zip(&server.ops) {
            let bytes = g.nodes[s.id].info.bytes_of_rows(1) as f64;
            assert_eq!((s.fit.a_s, s.fit.b_s_per_row), (2e-5, bytes * 1e-9), "{}", s.name);
            assert_eq!(r.fit.a_s, s.fit.a_s, "{}", r.name);
            assert!(
                (r.fit.b_s_per_row - 8.0 * s.fit.b_s_per_row).abs() <= 1e-18,
                "{}: {} against 8 x {}",
                r.name,
                r.fit.b_s_per_row,
                s.fit.b_s_per_row
            );
        }
        assert_eq!((robot.role, server.role), (Side::Robot, Side::Server));
    }
}
