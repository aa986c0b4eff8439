//! The synthetic profiles that `synthetic` means in `config/edge.yaml` and `config/robot.yaml`
//! (tests and demos without measured profiles). Robot and edge must build the very same profile,
//! or their schedule-table hashes differ, so both take it from here.

use lop::graph::Graph;
use lop::plan::Side;
use lop::profile::{Fit, Profile};

/// The synthetic profile of `graph` for `side`: every op costs 20 us plus 1 ns (server) or 8 ns
/// (robot) per output byte of a row, times its rows.
///
/// # Errors
/// When the graph's content hash cannot be computed.
pub fn synthetic_profile(graph: &Graph, side: Side) -> lop::Result<Profile> {
    let scale = if side == Side::Server { 1e-9 } else { 8e-9 };
    Profile::synthetic(graph, side, |id| Fit::new(2e-5, graph.nodes[id].info.bytes_of_rows(1) as f64 * scale))
}
