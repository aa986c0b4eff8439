//! # lop_core: the engine's parts that need no libtorch
//!
//! What the planner, the simulator and the fleet speak of, without tensors, so that a crate that
//! only reasons about plans and costs builds without the 4.7 GB torch wheel (`lop_fleet` does).
//! The engine (`lop`) re-exports each module at its old path (`lop::rows`, `lop::value`, ...).
//!
//! - [`value`]: a value's element type, static shape, row axis and memory layout.
//! - [`rows`]: row ranges, units and footprints: the vocabulary of splitting along the row axis.
//! - [`power`]: the robot's watts per activity, as plans' energy is priced.
//! - [`cost`]: one model's price list in a fleet ([`ModelCost`]).
//! - [`order`]: a heap entry popped earliest first ([`order::Earliest`]).
//! - [`rng`]: a small seeded generator, the same on every machine ([`Rng`]).
//! - [`content_hash`]: hashes of JSON artifacts that survive a round trip.
//! - [`error`]: what these parts refuse.
#![deny(missing_docs)]

pub mod content_hash;
pub mod cost;
pub mod error;
pub mod order;
pub mod power;
pub mod rng;
pub mod rows;
pub mod value;

pub use cost::ModelCost;
pub use error::{Error, Result};
pub use power::RobotPower;
pub use rng::Rng;
