//! Where each op's compute chunks start and end on each side ([`ChunkBounds`]): shared by the
//! simulator and the runtime executor, which must cut the same chunks.

use crate::plan::{Plan, Side};
use crate::rows::{Footprint, Rows};
use crate::structure::NodeId;
use crate::structure::Structure;

/// How an op's rows on one side are cut into its [`Plan::chunks`] chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChunkBounds {
    /// Equal splits of the op's own rows ([`crate::rows::chunks`]), or as the plan's [`Plan::taper`]
    /// sizes them: boundaries line up across layers, so with a halo chunk `j` of a consumer
    /// needs rows of its producer's chunk `j + 1`.
    #[default]
    Even,
    /// Receptive-field aligned: boundary `j` (of `k - 1`) of an op is the largest output row
    /// `b` such that the footprint of rows `[0, b)` in every row-carrying input computed in two
    /// or more chunks on the same side ends at or before that input's boundary
    /// `i = ceil((j + 1) n / k) - 1`, `n` being the input's chunk count, or, in a plan with
    /// [`Plan::last_cut_aligned`], `i = ceil((j + 1) (n - 1) / (k - 1)) - 1`. When the counts
    /// match, `i = j` either way: chunk `j` can run once chunk `j` of each producer is done.
    /// An op with fewer chunks than its producer spreads its boundaries evenly over the
    /// producer's, or puts its last on the producer's last (`i = n - 2`, its last chunk then
    /// holding only the rows that read the producer's last chunk) and spreads the others over
    /// the producer's first `n - 1`. Inputs
    /// computed whole do not constrain (they are all there at once), and ops with no
    /// constraining input (the first chunked ops, or ops after whole ones) cut their rows
    /// evenly (or as the plan's [`Plan::taper`] sizes them), so that their output can still
    /// stream; an input's boundaries past its
    /// second-to-last chunk do not constrain; chunks that come out empty are dropped; the last
    /// boundary is the side's range end.
    Aligned,
}

/// Each node's chunks on `side` under `plan`, indexed by node id (empty for graph inputs,
/// constants and ops with no rows on `side`), top to bottom, non-empty, covering exactly
/// [`Plan::rows`]. The plan must fit the graph ([`Plan::validate`]).
pub fn chunk_bounds(graph: &dyn Structure, plan: &Plan, side: Side, mode: ChunkBounds) -> Vec<Vec<Rows>> {
    bounds_with(graph, plan, side, mode, |id, k, r| graph.footprint(id, k, r))
}

/// [`chunk_bounds`] with the footprint supplied (the simulator passes one that does not
/// allocate).
pub(super) fn bounds_with(
    graph: &dyn Structure,
    plan: &Plan,
    side: Side,
    mode: ChunkBounds,
    foot: impl Fn(NodeId, usize, &Rows) -> Footprint,
) -> Vec<Vec<Rows>> {
    let mut out: Vec<Vec<Rows>> = Vec::with_capacity(graph.node_count());
    for id in 0..graph.node_count() {
        if !graph.node_is_op(id) {
            out.push(Vec::new());
            continue;
        }
        let range = plan.rows(graph, id, side);
        let k = plan.chunks(id, side);
        if range.is_empty() {
            out.push(Vec::new());
            continue;
        }
        if let Some(ends) = plan.server_cuts_of(id).filter(|_| side == Side::Server) {
            let mut start = range.start;
            let mut chunks = Vec::with_capacity(ends.len());
            for &e in ends {
                let e = e.clamp(start, range.end);
                if e > start {
                    chunks.push(start..e);
                    start = e;
                }
            }
            if start < range.end {
                chunks.push(start..range.end);
            }
            out.push(chunks);
            continue;
        }
        let chunks = match mode {
            ChunkBounds::Even => plan.taper.chunks(&range, k),
            ChunkBounds::Aligned => aligned(graph, id, &range, k, &out, &foot, plan),
        };
        out.push(chunks);
    }
    out
}

/// The aligned chunks of node `id` over `range` (see [`ChunkBounds::Aligned`]); `done` holds the
/// chunks of every earlier node on the same side; `plan` gives [`Plan::last_cut_aligned`] and
/// the [`Plan::taper`] of an op that cuts its own rows.
fn aligned(
    graph: &dyn Structure,
    id: NodeId,
    range: &Rows,
    k: usize,
    done: &[Vec<Rows>],
    foot: &impl Fn(NodeId, usize, &Rows) -> Footprint,
    plan: &Plan,
) -> Vec<Rows> {
    let last_cut_aligned = plan.last_cut_aligned;
    let node = graph.node(id);
    // Row-carrying inputs computed in two or more chunks on this side, with their chunk ends
    // (an input computed whole is all there at once: it does not constrain).
    let mut producers: Vec<(usize, Vec<usize>)> = Vec::new();
    for (k_in, &inp) in node.inputs.iter().enumerate() {
        let ch = done.get(inp).map_or(&[][..], |c| &c[..]);
        if ch.len() < 2 || graph.node_info(inp).row_axis.is_none() {
            continue;
        }
        if let Footprint::Rows(_) = foot(id, k_in, range) {
            producers.push((k_in, ch.iter().map(|r| r.end).collect()));
        }
    }
    if producers.is_empty() || k <= 1 {
        return plan.taper.chunks(range, k);
    }
    // Footprint end of output rows [0, b) in input `k_in` (0 for b = 0).
    let end_of = |k_in: usize, b: usize| -> usize {
        if b == 0 {
            return 0;
        }
        match foot(id, k_in, &(0..b)) {
            Footprint::Rows(r) => r.end,
            _ => usize::MAX,
        }
    };
    let mut bounds = Vec::with_capacity(k);
    let mut lo = range.start;
    for j in 0..k - 1 {
        // The largest b in [lo, range.end] whose footprint fits each producer's boundary i,
        // spread evenly over the producer's chunks, or the last on its last (i = j when the
        // counts match; footprint ends grow with b, so binary search).
        let fits = |b: usize| {
            producers.iter().all(|(k_in, ends)| {
                let n = ends.len();
                let i = if last_cut_aligned { ((j + 1) * (n - 1)).div_ceil(k - 1) - 1 } else { ((j + 1) * n).div_ceil(k) - 1 };
                i + 1 >= n || end_of(*k_in, b) <= ends[i]
            })
        };
        let (mut a, mut z) = (lo, range.end);
        while a < z {
            let mid = a + (z - a).div_ceil(2);
            if fits(mid) { a = mid } else { z = mid - 1 }
        }
        lo = a;
        bounds.push(a);
    }
    bounds.push(range.end);
    let mut start = range.start;
    let mut chunks = Vec::with_capacity(k);
    for b in bounds {
        if b > start {
            chunks.push(start..b);
            start = b;
        }
    }
    chunks
}
