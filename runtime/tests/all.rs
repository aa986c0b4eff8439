//! The runtime end to end: in process, over Zenoh on loopback, fleets, hostile peers.
//!
//! One test binary for the crate (`autotests = false` in its Cargo.toml): each file of this folder
//! is a module of it, so that the test build links zenoh and libtorch once per crate instead of
//! once per file. Tests that start processes or Zenoh sessions, or time what they measure, take
//! [`HEAVY`] and run one at a time.

mod bench_switch;
mod coded_frames;
mod common;
mod edge_figures;
mod fleet_discovery;
mod fleet_edges;
mod fleet_routing;
mod fleet_site;
mod fleet_stream;
mod hostile_peers;
mod inprocess;
mod profile_flood;
mod security;
mod zenoh_e2e;

/// Held by the tests that start processes or Zenoh sessions or time what they measure, so that no
/// two of them share the two cores at once.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
