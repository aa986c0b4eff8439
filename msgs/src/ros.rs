//! The ROS 2 messages of the `lop_msgs` interface package, as Rust types (feature `ros`).
//!
//! The types in [`msg`] are generated at build time by hiroz-codegen from this crate's
//! `msg/*.msg` files, the very files `CMakeLists.txt` hands to `rosidl_generate_interfaces`: one
//! source of truth for ROS 2 (C++/Python via rosidl) and Rust. Each type implements
//! [`hiroz::MessageTypeInfo`] (DDS name and the REP-2011 `RIHS01_` type hash of ROS Jazzy) and
//! hiroz' CDR traits, which make it a [`hiroz::msg::ZMessage`]: publish and subscribe it with hiroz
//! 0.2 nodes like any hiroz-msgs type. References to `std_msgs` and `builtin_interfaces` are the
//! hiroz-msgs types themselves (`hiroz_msgs::ros::std_msgs::Header`, ...).
//!
//! Every type also carries its names and hash as a constant, `T::ROS_TYPE` (a [`RosType`]), and
//! [`ALL_TYPES`] lists them all. `tests/interop/rep2011.py` recomputes the hashes independently
//! from the `.msg` files; the crate's tests check that both agree.
//!
//! | type | topic | units |
//! |---|---|---|
//! | [`msg::InferenceResult`] | `/lop/inference` | latencies in seconds, bandwidth in Mbit/s |
//! | [`msg::Bandwidth`] | `/lop/bandwidth` | Mbit/s (10^6 bit/s) |
//! | [`msg::InferenceEnergy`] | `/lop/energy` | joules, watts |
//! | [`msg::PowerSample`] | `/lop/power` | watts |
//! | [`msg::KeypointsArray`] | `/lop/keypoints` | pixels |
//! | [`vision::Detection2DArray`] | `/lop/detections` | pixels |
//!
//! with the nested [`msg::OutputTensor`], [`msg::ClassScore`], [`msg::RailEnergy`],
//! [`msg::Keypoints`] and [`msg::Keypoint`], and vision_msgs' nested types.
//!
//! # Example
//!
//! ```
//! use hiroz::MessageTypeInfo;
//! use hiroz::msg::ZMessage;
//! use lop_msgs::ros::msg::{Bandwidth, InferenceResult};
//!
//! assert_eq!(InferenceResult::ROS_TYPE.name, "lop_msgs/msg/InferenceResult");
//! assert_eq!(InferenceResult::type_name(), "lop_msgs::msg::dds_::InferenceResult_");
//! assert!(InferenceResult::ROS_TYPE.hash.starts_with("RIHS01_"));
//!
//! let bw = Bandwidth { estimate_mbps: 42.0, predictor: "harmonic-mean".into(), ..Default::default() };
//! let bytes = bw.serialize();
//! assert_eq!(&bytes[..4], &[0, 1, 0, 0]); // CDR little-endian encapsulation header
//! let back = Bandwidth::deserialize(&bytes).unwrap();
//! assert_eq!(back.predictor, "harmonic-mean");
//! ```

/// The code hiroz-codegen wrote (`OUT_DIR/generated.rs`): `ros::lop_msgs::*`.
#[allow(missing_docs, unused_qualifications, clippy::all, clippy::pedantic, clippy::nursery)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/generated.rs"));
}

/// The message types of `lop_msgs` (ROS namespace `lop_msgs/msg`). Field meanings and units are
/// documented in the `.msg` files (`msgs/msg/*.msg`).
pub mod msg {
    pub use super::generated::ros::lop_msgs::*;
}

/// vision_msgs' detection messages (ROS namespace `vision_msgs/msg`), defined field for field as
/// in vision_msgs 4.x (`msgs/vision_msgs/msg/*.msg`), so that their type names and REP-2011
/// hashes equal those of the real package in ROS Jazzy and users' vision_msgs subscribers take
/// them: [`vision::Detection2DArray`] on `/lop/detections`.
pub mod vision {
    pub use super::generated::ros::vision_msgs::*;
}

/// The ROS identity of one message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RosType {
    /// ROS type name, e.g. `lop_msgs/msg/InferenceResult`.
    pub name: &'static str,
    /// DDS type name (as rmw_zenoh puts it in key expressions), e.g.
    /// `lop_msgs::msg::dds_::InferenceResult_`.
    pub dds_name: &'static str,
    /// REP-2011 type hash for ROS Jazzy: `RIHS01_` followed by 64 lowercase hex digits.
    pub hash: &'static str,
}

impl RosType {
    /// The rmw_zenoh data key expression of a topic of this type in a ROS domain:
    /// `<domain>/<topic without leading slash>/<dds name>/<hash>`.
    pub fn key_expr(&self, domain: u32, topic: &str) -> String {
        format!("{domain}/{}/{}/{}", topic.trim_start_matches('/'), self.dds_name, self.hash)
    }

    /// The entry of [`ALL_TYPES`] with the given ROS type name (`lop_msgs/msg/Bandwidth`).
    pub fn by_name(name: &str) -> Option<&'static RosType> {
        ALL_TYPES.iter().find(|t| t.name == name)
    }
}

include!(concat!(env!("OUT_DIR"), "/type_table.rs"));
