//! Fleets over Zenoh (DESIGN.md section 10): every edge declares a liveliness token and
//! publishes its load at 10 Hz ([`report`]); robots learn the fleet from these alone, with no
//! edge address configured ([`view`]); a fleet robot routes every inference over them
//! ([`client`]), and a stream too fast for one edge keeps several frames in flight, published in
//! order ([`stream`]). An edge that cannot serve an inference in time forwards it to another
//! edge of its own view ([`forward`]). The decisions themselves are pure and live in `lop_fleet`
//! (routing, forwarding, shards and their digests), shared with the fleet simulator; the link it prices to each edge is
//! measured per edge ([`links`]). At a large site an aggregator republishes the reports as one
//! digest per shard of edges ([`site`]), and robots hear only their shards' digests.

pub mod client;
pub mod forward;
pub mod links;
pub mod report;
pub mod site;
pub mod stream;
pub mod view;

pub use client::{AloneWhy, FleetClient, FleetInference, ModelLoader, Routed};
pub use forward::forwarding;
pub use links::EdgeLinks;
pub use report::{LoadReporter, ReporterHandle, start_reporter};
pub use site::{AggregatorHandle, DEFAULT_SHARD_SIZE, start_aggregator};
pub use stream::{FleetStream, StreamResult};
pub use view::{EdgeSeen, FleetView, ViewCounts};

/// How often an edge reports its load.
pub const REPORT_PERIOD: std::time::Duration = std::time::Duration::from_millis(100);
/// A robot forgets an edge whose last report is older than this (five report periods), so an
/// edge that dies without closing its session leaves every view within this time plus one
/// period, well inside a second.
pub const STALE_AFTER: std::time::Duration = std::time::Duration::from_millis(500);
