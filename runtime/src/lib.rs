//! `lop_runtime`: the distributed runtime of LOP inference on tokio (DESIGN.md sections 2, 6, 9).
//!
//! # Layout
//!
//! - [`trace`]: bandwidth traces ([`Trace`]): CSV loading with errors that name file and line,
//!   rate lookup (looping by default), `--bandwidth-scale`, and transfer-time integration.
//! - [`link`]: the link abstraction: [`LinkTx`] / [`LinkRx`] halves that move encoded
//!   `lop_msgs` frames as bytes, two [`Priority`] classes (control frames never wait behind
//!   bands) and [`Traffic`] counters per direction.
//! - [`shaped`]: an in-process link ([`shaped_pair`]) that replays a trace per direction with a
//!   latency and a per-message overhead, on tokio's clock, for tests and the demo.
//! - [`bandwidth`]: bandwidth estimation: predictors, the monitor and bucket hysteresis, active
//!   probes against the edge.
//! - [`Error`]: one error type and the [`Result`] alias.
//!
//! - [`zenoh_link`]: the Zenoh link (router/client/peer sessions, control frames at a higher
//!   priority, liveliness tokens so each side learns at once when the other is gone);
//!   [`zenoh_service`] serves the edge and connects robots over it.
//! - [`security`]: mutual TLS, user/password authentication and access control for the Zenoh
//!   sessions, and a site's certificates (`lop certs`).
//! - [`netns`]: two network namespaces joined by a veth pair, shaped with tc from a trace.
//! - [`exec`]: the overlapped executor: one side of one inference on a dedicated thread, in the
//!   simulator's wavefront order, bands sent as soon as computed; exact robot-alone fallback.
//! - [`plans`]: every method's plan per bucket of a schedule table, with its schedule.
//! - [`session`]: classifying received frames and counting the ones dropped.
//! - [`edge`]: the edge service (many robots, isolated sessions, warm model replicas).
//! - [`fleet`]: fleets over Zenoh: each edge's liveliness token and 10 Hz load report, and the
//!   robot's view of the fleet built from them.
//! - [`client`]: the robot client (connect, infer, statistics, deadlines, fallback, reconnection).
//! - [`local`]: an edge and robots in one process over shaped links (tests, demo, benchmark).
//! - [`bench`]: the benchmark harness behind `lop bench`.
//! - [`ports`]: free loopback ports for tests and demos that start routers side by side.
//! - [`alloc`]: allocator settings for long-running inference processes.
//!
//! The engine crate `lop` stays free of tokio; this crate is where async lives.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use lop_runtime::{LinkRx, LinkTx, ShapedConfig, Trace, shaped_pair};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> lop_runtime::Result<()> {
//! let config = ShapedConfig::symmetric(Trace::constant(8.0)?).with_latency(Duration::from_millis(5));
//! let (robot, mut edge) = shaped_pair(config);
//! let t0 = tokio::time::Instant::now();
//! robot.tx.send(vec![0; 1_000]).await?; // 8000 bits at 8 Mbit/s: 1 ms, then 5 ms latency
//! assert_eq!(edge.rx.recv().await?, Some(vec![0; 1_000]));
//! assert_eq!(t0.elapsed(), Duration::from_millis(6));
//! drop(robot);
//! assert_eq!(edge.rx.recv().await?, None); // clean close
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub mod alloc;
pub mod bandwidth;
pub mod batch_bench;
pub mod bench;
pub mod build_turns;
pub mod client;
pub mod edge;
mod error;
pub mod exec;
pub mod fleet;
pub mod frame_ratio;
pub mod link;
pub mod local;
pub mod netns;
mod outbox;
pub mod plans;
pub mod ports;
pub mod received_profiles;
pub mod scratch;
pub mod security;
pub mod session;
pub mod shaped;
pub mod skips;
pub mod table_config;
pub mod trace;
pub mod zenoh_link;
pub mod zenoh_service;

pub use error::{Error, Result, TraceErrorKind};
pub use link::{LinkRx, LinkTx, Priority, Traffic};
pub use shaped::{ShapedConfig, ShapedEnd, ShapedRx, ShapedTx, shaped_pair};
pub use trace::{Trace, TraceEnd};
