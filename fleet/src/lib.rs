//! # lop_fleet: fleets of robots and edges, the pure part
//!
//! Many robots, many edge servers (DESIGN.md section 10), with no I/O and no libtorch: where a
//! frame goes ([`route`]: EPARA's rule and the policies it is compared with), when an offloaded
//! inference is back ([`offload`]), where an edge forwards what it cannot serve in time
//! ([`forward`]), which models an edge keeps warm under its memory budget ([`place`]), what each
//! robot of a large site hears ([`shard`]: capacity-balanced shards; [`digest`]: their digests),
//! and a discrete-event fleet simulator ([`sim`]) that prices each policy's goodput on the same
//! generated fleet. A model's price list ([`ModelCost`]) is `lop_core`'s; the engine derives it
//! (`lop::sim::model_cost`). Discovery, load reports, the views and the robot's router over
//! Zenoh live in `lop_runtime::fleet`, which calls these same functions: what is simulated is
//! what runs.
#![deny(missing_docs)]

pub mod digest;
pub mod forward;
pub mod offload;
pub mod place;
pub mod route;
pub mod shard;
pub mod sim;

pub use forward::{EdgeSeen, pick_edge};
pub use lop_core::ModelCost;
pub use offload::offload_finish;
pub use place::{PlaceCandidate, place};
pub use route::{Choice, Policy, Router, ServerView};
pub use sim::{BandwidthTrace, Fleet, FleetSpec, Hearing, PolicyReport, RobotSpec};
