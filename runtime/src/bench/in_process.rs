//! The in-process run ([`run_in_process`]): edge and robot in this process over the in-process
//! shaped link, which replays the trace (and adds the configured latency) afresh for every
//! method.

use std::collections::BTreeMap;
use std::time::Duration;

use tch::Tensor;

use super::config::BenchConfig;
use super::edge_side::start_edge;
use super::methods::run_with;
use super::report::MethodReport;
use crate::client::InferenceStats;
use crate::error::Result;
use crate::local::Switchboard;
use crate::shaped::ShapedConfig;

/// Runs every method over the in-process shaped link replaying `cfg.trace` (each method from
/// trace time 0), calling `progress(method, index, stats, outputs)` after each inference.
///
/// # Errors
/// Model, table or engine failures; a method with no plans.
pub async fn run_in_process(
    cfg: &BenchConfig,
    mut progress: impl FnMut(&str, usize, &InferenceStats, &[Tensor]),
) -> Result<BTreeMap<String, MethodReport>> {
    let board = Switchboard::new();
    let _edge = board.plug(start_edge(cfg).await?);
    let link = ShapedConfig { up: cfg.trace.clone(), down: cfg.trace.clone(), latency: cfg.latency, overhead: Duration::ZERO };
    let connect = |_: &str| board.connector(link.clone());
    run_with(cfg, connect, &mut progress).await
}
