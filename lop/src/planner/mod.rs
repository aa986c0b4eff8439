//! LOSS, the planner (DESIGN.md section 5), and its schedule tables.
//!
//! The search itself (baselines, seeds, beam search, large-neighbourhood search, tapers and
//! release cuts) is `lop_core::planner`'s, re-exported here; it reads models only through
//! `lop_core::structure`. The schedule tables ([`table`]: one plan per bandwidth bucket, built
//! on several threads, cached by the model's content hash) are the engine's, since they hash
//! the model's weights and plan on shared copies of its graph. The planner's tests run here,
//! on real graphs.

pub use lop_core::planner::*;
#[cfg(test)]
mod release_tests;
pub mod table;
#[cfg(test)]
mod tests;

pub use table::{
    BaselineCost, BucketEntry, CacheUse, ScheduleTable, TableConfig, TableKey, TableSpec, auto_bandwidth_scale, load_or_build,
    parse_buckets,
};
