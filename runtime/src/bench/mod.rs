//! The benchmark harness behind `lop bench`: every method over the same bandwidth trace in one
//! run, through the real executor, edge service and robot client, with per-method latency
//! statistics, bytes, modelled robot energy, fallbacks, the simulator's prediction for the plans
//! that ran, and the worst output error against the unsplit model.
//!
//! # Transports
//!
//! - [`run_in_process`]: edge and robot in this process over the in-process shaped link, which
//!   replays the trace (and adds the configured latency).
//! - [`run_zenoh_loopback`]: the edge behind a Zenoh router session on `127.0.0.1` (a free port),
//!   the robot on a Zenoh client session; loopback cannot be shaped, so the trace only selects
//!   the plans (the link is as fast as this machine's loopback).
//! - [`run_netns`]: robot and edge in two network namespaces joined by a veth pair shaped with
//!   `tc` ([`crate::netns`]): the edge is a child process started inside the edge namespace (its
//!   side is [`serve_edge_process`]), the robot runs on a thread of this process that entered the
//!   robot namespace before creating its tokio runtime and Zenoh session. This process replays the
//!   trace on both directions every 0.5 s, from trace time 0 at the start of every method, and
//!   removes the namespaces and stops the child on success, error and interruption.
//! - [`run_overhead`]: the runtime's own cost on unshaped loopback Zenoh: a bare forward, a raw
//!   ping-pong of the input and output bytes, and server-only through the runtime.
//!
//! # Files
//!
//! One concept per file, from the leaves up (a file imports only the ones listed before it):
//!
//! - `config.rs`: what to run ([`BenchConfig`], [`Progress`], [`robot_id`]).
//! - `report.rs`: a method's [`MethodReport`] and the statistics behind it.
//! - `steady.rs`: whether the machine held its speed ([`calibration_ms`], [`STEADY`]).
//! - `samples.rs`: the robot's worker and inputs with the unsplit model's outputs.
//! - `yardsticks.rs`: the schedule table and the simulator's yardsticks per bucket.
//! - `tally.rs`: one method's timed requests, summarized into its report.
//! - `edge_side.rs`: the benchmark's edge, in this process or behind a Zenoh router
//!   ([`start_edge`], [`ZenohEdge`]).
//! - `methods.rs`: every method in turn through any connector ([`run_with`]).
//! - `in_process.rs`, `zenoh_loopback.rs`: the in-process and loopback runs.
//! - `edge_process.rs`: the netns run's edge process, its own side ([`serve_edge_process`]).
//! - `edge_child.rs`: the same process from the parent's side ([`NetnsBenchOptions`]).
//! - `netns_run.rs`: the netns run ([`run_netns`]).
//! - `ping_pong.rs`, `overhead.rs`: the overhead measurement ([`run_overhead`]).

mod config;
mod edge_child;
mod edge_process;
mod edge_side;
mod in_process;
mod methods;
mod netns_run;
mod overhead;
mod ping_pong;
mod report;
mod samples;
mod steady;
mod tally;
mod yardsticks;
mod zenoh_loopback;

pub use config::{BenchConfig, Progress, robot_id};
pub use edge_child::NetnsBenchOptions;
pub use edge_process::{EDGE_READY, EdgeProcessConfig, print_ready, serve_edge_process};
pub use edge_side::{ZenohEdge, start_edge};
pub use in_process::run_in_process;
pub use methods::run_with;
pub use netns_run::{NetnsSummary, ShapingSummary, run_netns};
pub use overhead::{OverheadReport, run_overhead};
pub use report::{MethodReport, modelled_energy};
pub use steady::{OVERRUN_SHARE, STEADY, calibration_ms};
pub use zenoh_loopback::run_zenoh_loopback;
