//! The `lop_edge` process driven end to end: configuration, fleets, security, chaos, soak, a
//! stalled robot, the operator's dashboard and alerting rules.
//!
//! One test binary for the crate (`autotests = false` in its Cargo.toml): the files of this folder
//! are its modules, so that the test build links zenoh and libtorch once instead of once per file.
//! Tests that start processes or Zenoh sessions, or time what they measure, take [`HEAVY`] and
//! run one at a time. The network-namespace tests (`chaos_netns.rs`, `fleet_links_netns.rs`) are
//! binaries of their own: they move the test thread into a namespace before Zenoh starts its
//! threads, which then stay there for every later test of the process.

mod chaos;
mod common;
mod config;
mod deploy;
mod fleet;
mod lop_edge;
mod operations;
mod security;
mod soak;
mod stall;

/// Held by the tests that start processes or Zenoh sessions or time what they measure, so that no
/// two of them share the two cores at once.
pub static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
