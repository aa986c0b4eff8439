//! Fleets: many robots, many edge servers (DESIGN.md section 10). The engine's part is pure:
//! what an inference costs a fleet ([`cost`]), where a frame goes ([`route`]: EPARA's rule and
//! the policies it is compared with), which models an edge keeps warm under its memory budget
//! ([`place`]: EPARA's placement), and a discrete-event fleet simulator ([`sim`]) that
//! prices each policy's goodput on the same generated fleet, and what each robot of a large
//! site hears ([`shard`]: digests of capacity-balanced shards). Discovery, load reports and the
//! robot's router over Zenoh live in `lop_runtime`.

pub mod cost;
pub mod place;
pub mod route;
pub mod shard;
pub mod sim;

pub use cost::{ModelCost, offload_finish};
pub use place::{PlaceCandidate, place};
pub use route::{Choice, Policy, Router, ServerView};
pub use sim::{BandwidthTrace, Fleet, FleetSpec, Hearing, PolicyReport, RobotSpec};
