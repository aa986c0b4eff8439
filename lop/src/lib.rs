//! # lop: the local-operator parallelism engine
//!
//! Runs a CNN's operators on arbitrary row bands, on either side of a robot/edge split, and
//! reassembles exactly the output of the unsplit model. No networking, no async: the runtime
//! crate builds on this.
//!
//! ## Layout
//! - `content_hash`, `rows`, `order`, `value` (with libtorch's side of it here), the robot's
//!   watts (`sim::RobotPower`) and a model's price list for fleets (`sim::model_cost`): the
//!   parts that need no libtorch live in `lop_core` and are re-exported at their old paths; so
//!   do `plan` (band layouts: who computes which rows of which op, and their validation) and
//!   `OpClass` (a node's locality class), which read a model through `lop_core::structure`.
//! - `codec`: frame codecs (raw, lossless, JPEG, the camera's JPEG), band by band, with the
//!   digest of the decoded pixels and their measured costs: the `lop_codec` crate, re-exported.
//! - [`graph`]: the IR (nodes, values, row axes) and its builder.
//! - [`ops`]: operators: output shape, footprint, band computation.
//! - [`exec`]: whole-graph execution, one side's band executor, and the in-process split run.
//! - [`onnx`]: ONNX import.
//! - [`zoo`]: built-in models with seeded weights.
//! - [`model`]: loading a model by zoo name or path.
//! - [`fuse`]: folding ReLU and SiLU into the convolutions that feed them (oneDNN post-ops),
//!   applied by [`model::load`]; [`fuse_linear`] then gives linear layers their bias and
//!   activation and makes a written-out GELU one op.
//! - [`preprocess`]: the model's front end (channel order, scale, mean, std) as graph ops, so that
//!   frames cross the link as bytes for float-input models too.
//! - [`postprocess`]: the model's back end (detections with NMS, keypoints, class maps,
//!   occupancy bits) as the graph's last op, placed by the planner like any other.
//! - [`inspect`]: locality statistics.
//! - [`profile`]: measuring per-op compute-time profiles (band timings and fits); the profile's
//!   data and checks are `lop_core::profile`'s, re-exported here.
//! - [`sim`] (from `lop_core`): the event-driven simulator of a plan (timeline, bytes, makespan,
//!   modelled energy) and the lower bounds plans are judged against (server pipelining, fluid).
//! - [`baseline`] (from `lop_core`): robot-only, server-only, and the best layer partitions
//!   (latency, energy under a deadline): minimum cuts, then a budgeted exact search under the
//!   simulator. The tests of both run here, on real graphs (`sim_tests`).
//! - [`planner`] (from `lop_core`): LOSS (seeded beam search and critical-path LNS over band
//!   layouts), schedule tables per bandwidth bucket (built in parallel, cached by content hash),
//!   SVG pictures; the engine's graph is a `TableModel` here.
#![deny(missing_docs)]

pub use lop_codec as codec;
/// The engine's pure parts, whose errors ([`lop_core::Error`]) the planner, the simulator and
/// profiles return; crates above the engine convert them as they convert [`Error`].
pub use lop_core;
pub use lop_core::baseline;
pub use lop_core::content_hash;
pub mod error;
pub mod exec;
pub mod fit;
pub mod fuse;
pub mod fuse_linear;
pub mod graph;
pub mod inspect;
pub mod libtorch;
pub mod model;
pub mod onnx;
pub mod ops;
pub use lop_core::order;
pub use lop_core::plan;
pub mod planner;
mod post_append;
pub mod postprocess;
pub mod preprocess;
pub mod profile;
pub use lop_core::Rng;
pub(crate) use lop_core::rng;
pub use lop_core::rows;
pub use lop_core::sim;
#[cfg(test)]
mod sim_tests;
pub mod value;
pub mod zoo;

pub use error::{Error, Result};
pub use graph::{DType, Graph, GraphBuilder, Layout, NodeId, ValueInfo};
pub use ops::{Op, OpClass};
pub use plan::{NodeSplit, Plan, Side};
