//! The two sides of a netns link and the two directions between them: which namespace is the
//! robot's and which the edge's, and which side's egress shapes each direction.

use std::fmt;

/// One of the two namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetnsSide {
    /// The robot's namespace (`{prefix}-robot`).
    Robot,
    /// The edge's namespace (`{prefix}-edge`).
    Edge,
}

impl fmt::Display for NetnsSide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NetnsSide::Robot => "robot",
            NetnsSide::Edge => "edge",
        })
    }
}

/// A direction of the link; each is shaped on the egress of its sending side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Robot -> edge, shaped on the robot's veth end.
    Up,
    /// Edge -> robot, shaped on the edge's veth end.
    Down,
}

impl Direction {
    /// The side whose egress shapes this direction.
    pub fn sender(self) -> NetnsSide {
        match self {
            Direction::Up => NetnsSide::Robot,
            Direction::Down => NetnsSide::Edge,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Up => "up",
            Direction::Down => "down",
        })
    }
}
