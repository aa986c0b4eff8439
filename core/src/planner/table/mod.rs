//! Schedule tables (DESIGN.md section 4): one plan per bandwidth bucket, keyed by the model,
//! both profiles and the planner configuration, built in parallel and cached on disk by
//! content hash.
//!
//! One file per part: `spec.rs` ([`TableSpec`]), `buckets.rs` (parsing the buckets, their
//! seeds), `key.rs` ([`TableKey`]), `schedule.rs` ([`ScheduleTable`] and its entries),
//! `build.rs` (planning every bucket in parallel), `lending.rs` (neighbours' plans lent), and
//! `cache.rs` ([`load_or_build`]), `model.rs` ([`TableModel`]: what a table needs of a model).

mod buckets;
mod build;
mod cache;
mod key;
mod lending;
mod model;
mod schedule;
mod spec;
mod workers;

pub use buckets::{MAX_RANGE_BUCKETS, parse_buckets};
pub use cache::{CacheUse, cache_path, load_or_build};
pub use key::TableKey;
#[doc(hidden)]
pub use lending::lend_plans;
pub use model::TableModel;
pub use schedule::{BaselineCost, BucketEntry, ScheduleTable};
pub use spec::{TableConfig, TableSpec, auto_bandwidth_scale};

/// Current table format version (3: aligned chunk bounds spread a consumer's cuts over its
/// producer's when their chunk counts differ, so older tables timed other chunks).
pub const TABLE_VERSION: u32 = 3;

/// Bumped when the planner's choices change for the same inputs (part of [`TableSpec::hash`]).
/// 2: graph outputs coming down are exempt from pruning, which is off by default. 3: every band
/// message's header bytes are priced. 4: plans may align ops' last cuts
/// ([`crate::plan::Plan::last_cut_aligned`]). 5: buckets lend their plans to their neighbours
/// ([`lend_plans`](lending::lend_plans)). 6: the best plan's chunks may taper at either end
/// ([`crate::plan::Taper`]). 7: ops of server-only plans cut where the frame's rows release
/// them ([`crate::plan::Plan::server_cuts`]).
pub const PLANNER_REVISION: u32 = 7;
