//! # lop_core: the engine's parts that need no libtorch
//!
//! What the planner, the simulator and the fleet speak of, without tensors, so that a crate that
//! only reasons about plans and costs builds without the 4.7 GB torch wheel (`lop_fleet` does).
//! The engine (`lop`) re-exports each module at its old path (`lop::rows`, `lop::value`, ...).
//!
//! - [`value`]: a value's element type, static shape, row axis and memory layout.
//! - [`rows`]: row ranges, units and footprints: the vocabulary of splitting along the row axis.
//! - [`structure`]: what plans, the simulator and the planner read of a model (nodes, their
//!   values, inputs, kinds, locality classes and footprints), as a trait the engine's graph
//!   implements.
//! - [`plan`]: band layouts (who computes which rows of which op), their checks and hashes.
//! - [`power`]: the robot's watts per activity, as plans' energy is priced.
//! - [`cost`]: one model's price list in a fleet ([`ModelCost`]).
//! - [`order`]: a heap entry popped earliest first ([`order::Earliest`]).
//! - [`rng`]: a small seeded generator, the same on every machine ([`Rng`]).
//! - [`content_hash`]: hashes of JSON artifacts that survive a round trip.
//! - [`libtorch`]: the libtorch versions the engine supports, and reading a version string.
//! - [`fit`]: a side's time for one kernel call as a line in its rows ([`fit::Fit`]).
//! - [`profile`]: a model's measured compute times per op and side ([`profile::Profile`]), its
//!   checks, JSON form and hash; measuring one is the engine's.
//! - [`sim`]: the event-driven simulator of a plan, its chunk bounds and the lower bounds plans
//!   are judged against; [`baseline`]: robot-only, server-only and the layer partitions;
//!   [`planner`]: the LOSS search and its schedule tables. Their tests build the engine's
//!   graphs and run in `lop` (`lop/src/sim_tests/`, `lop/src/planner/`).
//! - [`frame`]: how a frame's rows travel ([`frame::FrameCodec`]), the image it carries and what
//!   a codec costs; the codecs themselves are `lop_codec`'s.
//! - [`flow`]: maximum flow and minimum cut, for the layer partition and the fluid bound.
//! - [`error`]: what these parts refuse.
#![deny(missing_docs)]

pub mod baseline;
pub mod content_hash;
pub mod cost;
pub mod error;
pub mod fit;
pub mod flow;
pub mod frame;
pub mod libtorch;
pub mod order;
pub mod plan;
pub mod planner;
pub mod power;
pub mod profile;
pub mod rng;
pub mod rows;
pub mod sim;
pub mod structure;
pub mod value;

pub use cost::ModelCost;
pub use error::{Error, Result};
pub use power::RobotPower;
pub use rng::Rng;
