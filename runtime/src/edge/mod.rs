//! The edge service (DESIGN.md section 6): serves many robots at once, each in an isolated
//! session, from warm model replicas. The edge loads models only from its own store (matched by
//! content hash) and never executes anything a robot sends: a robot names a model and a plan by
//! hash, and sends tensors.
//!
//! Per session: the first frame must be Hello; the edge answers Welcome (its profile, and the
//! hash of the schedule table it built or loaded for that model and robot profile) or Reject
//! with the reason (`Planning` with its profile too, so that a robot planned for another server
//! plans the same table meanwhile). Then, per inference: Start names the plan; the server side
//! of it runs on a free replica, sending bands as they are computed; Done (with statistics) or
//! Error ends it. A newer Start aborts an older inference, and so does the robot's Cancel of
//! it; frames of other inferences are stale and dropped.
//!
//! # Layout
//!
//! One concept a file, in layers: each file imports only files listed before it here (`mod.rs`
//! itself only re-exports), so no files import each other in a circle (issue 57).
//!
//! - `options`: how to run the edge ([`EdgeOptions`], [`EdgeModel`], [`ServerDevice`],
//!   [`Batching`]), where a fleet's edge forwards what it cannot serve in time
//!   ([`Forwarding`]), and the check that refuses bad options before anything loads; `served`:
//!   the report of each served inference ([`Served`]); `start_budget`: a session's Start budget,
//!   the token bucket against floods ([`MAX_STARTS_PER_S`]). These use no other file.
//! - `replica`: a model's warm replicas (a worker thread each, with its own copy of the model
//!   on one device), spawning them, the states of an inference queued on one (`JOB_QUEUED`...),
//!   and which one finishes an inference first ([`finishes_first`]); `batch`: what a replica's
//!   thread runs, the oldest waiting inference batched with the others of its plan; `model`:
//!   the model store: each served model's replicas, demand, server seconds and refusals, and
//!   loading them at start (warm while they fit the memory budget).
//! - `state`: the state the rooms below share: [`EdgeService`] over `Inner` (the options, the
//!   models, the plan books, robot profiles, the counters). Each room below adds its methods.
//! - `profiles`: robot profiles (configured, in the profiles folder, or received in Hello and
//!   kept bounded) and whose table may be planned now; `tables`: the plan books, built once
//!   per model, robot profile and input wire, in the background; `placement`: keeping warm the
//!   models recent demand asks for, within the budget; `counts`: the counters and loads behind
//!   the metrics and the fleet's load reports ([`EdgeCounts`], [`ModelStats`],
//!   [`ModelLoadNow`], [`DeviceLoad`]).
//! - `session`: one robot's session, its current inference as it sees it, and its frames but
//!   Hello and Start; `admission`: a Start admitted, dropped (over its Start budget) or
//!   answered at once; `forwarding`: a Start this edge would not finish in time, forwarded to
//!   another edge or refused; `job`: an admitted inference from its replica's queue to its
//!   answer; `hello`: the handshake (Welcome or Reject). The later ones add methods to the
//!   session (`start`, `route`, `queue`, `hello`), which it calls without importing them.
//! - `service`: the top level, which no file uses: start, serving a link as a session, the
//!   served inferences' reports, shutdown and drain.

mod admission;
mod batch;
mod counts;
mod forwarding;
mod hello;
mod job;
mod model;
mod options;
mod placement;
mod profiles;
mod replica;
mod served;
mod service;
mod session;
mod start_budget;
mod state;
mod tables;

pub use counts::{DeviceLoad, EdgeCounts, ModelLoadNow, ModelStats};
pub use options::{Batching, DEMAND_WINDOW, EdgeModel, EdgeOptions, Forwarding, PLACEMENT_PERIOD, PickEdge, ServerDevice};
pub use profiles::MAX_RECEIVED_BUILDS;
pub use replica::finishes_first;
pub use served::{SERVED_CHANNEL_CAPACITY, Served, ServedOutcome};
pub use start_budget::{EMPTY_START_PENALTY, MAX_STARTS_PER_S, START_BURST};
pub use state::EdgeService;
