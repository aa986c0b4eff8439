//! `lop_msgs`: the messages of LOP inference, shared by the robot and the edge server.
//!
//! # Layout
//!
//! - [`protocol`]: the versioned robot <-> edge wire protocol: [`Frame`] and its kinds, pure
//!   encode/decode functions and the byte layout (a table in the module docs). No I/O.
//! - [`key`]: names in the Zenoh key space `lop/v1/...` ([`Key`]) and id validation.
//! - [`load`]: an edge server's load report, the fleet's routing state (DESIGN.md section 10).
//! - [`Digest`]: 32-byte sha256 content hashes, as they travel on the wire.
//! - [`Error`]: one error type; [`Error::Incomplete`] (read more bytes) is kept apart from the
//!   malformed-input variants.
//!
//! - `ros` (feature `ros`, off by default): the ROS 2 messages of the interface package
//!   `lop_msgs` (`msg/*.msg`, `package.xml`, `CMakeLists.txt` in this directory) as Rust types
//!   generated from the same `.msg` files, for hiroz publishers and subscribers, with their
//!   REP-2011 type hashes.
//!
//! This crate depends on no other workspace crate and does no I/O.
//!
//! # Example
//!
//! ```
//! use lop_msgs::protocol::{decode, Frame, Start};
//! use lop_msgs::{Digest, Key};
//!
//! let start = Frame::Start(Start { inference_id: 1, bucket: 2, plan_hash: Digest([7; 32]), input_stamp_ns: 10, deadline_ns: 200_000_000, due_ns: 0, path: Vec::new() });
//! let bytes = start.encode().unwrap();
//! assert_eq!(decode(&bytes).unwrap(), start);
//! assert!(decode(&bytes[..5]).unwrap_err().is_incomplete());
//! assert_eq!(Key::up("robot-1").unwrap().to_string(), "lop/v1/robot-1/up");
//! ```
#![deny(missing_docs)]

mod digest;
mod error;
pub mod key;
pub mod load;
pub mod protocol;
#[cfg(feature = "ros")]
pub mod ros;
pub mod site;
/// Where the generated code finds `SizeEstimation` (hiroz-msgs' trait, so that nested std_msgs
/// types and ours share one).
#[cfg(feature = "ros")]
mod size_estimation {
    pub use hiroz_msgs::size_estimation::SizeEstimation;
}

pub use digest::Digest;
pub use error::{Error, Result};
pub use key::{Key, MAX_ID_LEN, MAX_LANES, is_lane_id, lane_robot_id, validate_id, validate_robot_id};
pub use protocol::{Frame, FrameKind};
