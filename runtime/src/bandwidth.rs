//! Bandwidth estimation, in one place (DESIGN.md section 7): what the robot knows of its link
//! and how it turns that into the schedule table's bucket.
//!
//! - [`predict`]: predictors of the next throughput sample (the harmonic mean by default) and
//!   their evaluation on traces.
//! - [`monitor`]: the monitor behind `lop_bandwidth` (passive samples, when to probe, published
//!   estimates) and the robot's [`BucketSelector`] with its [`Hysteresis`].
//! - [`probe`]: active probes against the edge's responder, over Zenoh.
//! - [`upload`]: the upload rate to an edge read from one inference (per edge in a fleet).
//!
//! The traces that feed tests and benchmarks are [`crate::Trace`]; the links that carry the
//! measured transfers are [`crate::link`].

pub mod monitor;
pub mod predict;
pub mod probe;
pub mod probe_limit;
pub mod upload;

pub use monitor::{BucketSelector, Estimate, Hysteresis, Monitor, MonitorConfig};
pub use predict::Predictor;
