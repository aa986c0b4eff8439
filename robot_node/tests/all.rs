//! The robot node end to end: its configuration file, a decompression bomb refused, several cameras on one model (their inferences batched at the edge, in fleet mode too), the annotated debug image, detections, instance maps, dynamic inputs, the sockets it exposes, camera frames to exact results, a recording replayed into it (`lop replay`).
//!
//! One test binary for the crate (`autotests = false` in its Cargo.toml): each file of this folder
//! is a module of it, so that the test build links zenoh and libtorch once per crate instead of
//! once per file. Tests that start processes or Zenoh sessions, or time what they measure, take
//! [`HEAVY`] and run one at a time.

mod camera_fit;
mod cameras;
mod cameras_together;
mod common;
mod config_file;
mod debug_image;
mod decode_cap;
mod detections;
mod dynamic_input;
mod exposure;
mod instances;
mod replay;
mod robot_e2e;

/// Held by the tests that start processes or Zenoh sessions or time what they measure, so that no
/// two of them share the two cores at once.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
