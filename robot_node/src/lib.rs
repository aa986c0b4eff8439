//! ROS 2 nodes of LOP inference on the robot (DESIGN.md sections 7 and 8).
//!
//! # Layout
//!
//! - [`robot`]: `lop_robot`, camera frames or LiDAR sweeps in, exact inference results out
//!   (one-slot mailbox, bucket selection, diagnostics, ROS-layer latency).
//! - [`bandwidth_node`]: `lop_bandwidth`, passive samples from results, active probes, estimates
//!   (the estimation itself is `lop_runtime::bandwidth`).
//! - [`power_node`]: `lop_power`, power sampling, energy per inference, a CSV log.
//! - [`backend`]: the [`backend::Ros`] trait the nodes use, with the hiroz adapter (default) and
//!   the r2r adapter (feature `ros2`).
//! - [`params`] and [`config`]: parameters the ROS 2 way (params file, `--ros-args -p`), typed
//!   per node; [`live`]: the few that change while a node runs (parameter services), checked;
//!   [`cli`]: what the three binaries share.
//! - [`annotate`]: the debug image's drawing (boxes, labels, keypoints, masks, the caption) on
//!   a copy of the frame, backend-free.
//! - [`convert`], [`power`]: backend-free logic (sensor messages to tensors, energy accounting
//!   per inference over the `lop_power` crate's sources).
//! - [`lifecycle`]: `lop_robot` as a ROS 2 managed node (the state machine of
//!   `lifecycle_msgs`, pure, and the handle its backend's services share with the node).
//! - [`input_shape`]: the shape a model with dynamic dimensions is loaded at (configuration or
//!   the first frame).
//! - [`mailbox`]: the one-slot mailbox; [`window`]: recent latencies and rates for
//!   /diagnostics; [`Error`]: the error type.
#![deny(missing_docs)]

pub mod annotate;
pub mod backend;
pub mod bandwidth_node;
pub mod cli;
pub mod config;
pub mod convert;
mod error;
pub mod input_shape;
pub mod lifecycle;
pub mod live;
pub mod mailbox;
pub mod params;
pub mod power;
pub mod power_node;
pub mod results;
pub mod robot;
pub mod window;

pub use error::{Error, Result};
