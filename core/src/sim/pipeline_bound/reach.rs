//! Which rows of every value depend on a suffix of the graph input's rows ([`Reach`], or a
//! direct scan: [`dependent_rows`]), and which rows one output row reads ([`Cones`]).

use crate::rows::{Footprint, Rows};
use crate::sim::Simulator;
use crate::structure::NodeId;
use crate::structure::Structure;

/// Per value, how many of its rows depend on graph-input rows `from..` ; `None` when the
/// dependent rows of some value are not a suffix of its rows (no bound is claimed then).
pub fn dependent_rows(sim: &Simulator<'_>, input: NodeId, from: usize) -> Option<Vec<usize>> {
    let g = sim.graph();
    let mut dep = vec![0usize; g.node_count()];
    dep[input] = g.node_info(input).rows().max(1).saturating_sub(from);
    for id in 0..g.node_count() {
        if !g.node_is_op(id) {
            continue;
        }
        let node = g.node(id);
        let rows = node.info.rows().max(1);
        let mut count = 0;
        let mut first = rows;
        for r in 0..rows {
            let depends = node.inputs.iter().enumerate().any(|(k, &v)| {
                if dep[v] == 0 {
                    return false;
                }
                let v_rows = g.node_info(v).rows().max(1);
                match g.footprint(id, k, &(r..r + 1)) {
                    Footprint::Rows(f) => f.end > v_rows - dep[v],
                    Footprint::Broadcast | Footprint::Whole => true,
                }
            });
            if depends {
                count += 1;
                first = first.min(r);
            }
        }
        if count > 0 && count != rows - first {
            return None;
        }
        dep[id] = count;
    }
    Some(dep)
}

/// Whether every row of every live op that is not a graph output is read by some live
/// consumer (a 1x1 stride-2 convolution alone leaves every other row unread). Then a server's
/// last kernel computes rows of a graph output, which still come down: a kernel whose rows
/// some consumer reads is followed by that consumer's kernel.
pub fn every_row_is_read(sim: &Simulator<'_>) -> bool {
    let g = sim.graph();
    let live_op = |id: NodeId| g.node_is_op(id) && sim.is_live(id);
    let mut read: Vec<Vec<bool>> = (0..g.node_count()).map(|id| vec![false; g.node_info(id).rows().max(1)]).collect();
    for (v, node) in (0..g.node_count()).filter(|&v| live_op(v)).map(|v| (v, g.node(v))) {
        for (k, &u) in node.inputs.iter().enumerate() {
            let rows_u = read[u].len();
            for r in 0..node.info.rows().max(1) {
                let f = match g.footprint(v, k, &(r..r + 1)) {
                    Footprint::Rows(f) => f.start.min(rows_u)..f.end.min(rows_u),
                    Footprint::Broadcast | Footprint::Whole => 0..rows_u,
                };
                read[u][f].iter_mut().for_each(|x| *x = true);
            }
        }
    }
    (0..g.node_count()).filter(|&u| live_op(u) && !g.outputs().contains(&u)).all(|u| read[u].iter().all(|&x| x))
}

/// How one op input is read, row by row: wholly (every output row reads all of it), or by
/// row ranges whose ends, per output row, never decrease.
enum Read {
    /// Every output row reads the whole input (or a broadcast of it).
    Whole,
    /// The end of the input rows each output row reads.
    Ends(Vec<usize>),
}

/// For every op in the graph input's forward cone, how it reads each input in that cone: what
/// finds the rows depending on any input suffix with one binary search per op input.
pub struct Reach {
    /// Per node, per input (`None`: an input that does not depend on the graph input).
    reads: Vec<Vec<Option<Read>>>,
}

impl Reach {
    /// `None` when some footprint in the cone is empty, mixes whole and ranged reads, or ends
    /// above the next row's: the suffix structure does not hold.
    pub fn new(sim: &Simulator<'_>, input: NodeId) -> Option<Reach> {
        let g = sim.graph();
        let mut in_cone = vec![false; g.node_count()];
        in_cone[input] = true;
        let mut reads = Vec::with_capacity(g.node_count());
        for (id, node) in (0..g.node_count()).map(|id| (id, g.node(id))) {
            let mut per_input = Vec::with_capacity(node.inputs.len());
            if !g.node_is_op(id) {
                reads.push(per_input);
                continue;
            }
            let rows = node.info.rows().max(1);
            for (k, &v) in node.inputs.iter().enumerate() {
                if !in_cone[v] {
                    per_input.push(None);
                    continue;
                }
                in_cone[id] = true;
                let mut ends = Vec::with_capacity(rows);
                let mut whole = 0;
                for r in 0..rows {
                    match g.footprint(id, k, &(r..r + 1)) {
                        Footprint::Rows(f) if f.start < f.end && ends.last().is_none_or(|&e| e <= f.end) => ends.push(f.end),
                        Footprint::Rows(_) => return None,
                        Footprint::Broadcast | Footprint::Whole => whole += 1,
                    }
                }
                per_input.push(Some(match (whole, ends.len()) {
                    (0, _) => Read::Ends(ends),
                    (_, 0) => Read::Whole,
                    _ => return None,
                }));
            }
            reads.push(per_input);
        }
        Some(Reach { reads })
    }

    /// Per value, how many of its rows (a suffix) depend on graph-input rows `from..`.
    pub fn dependent_rows(&self, sim: &Simulator<'_>, input: NodeId, from: usize) -> Vec<usize> {
        let g = sim.graph();
        let mut dep = vec![0usize; g.node_count()];
        dep[input] = g.node_info(input).rows().max(1).saturating_sub(from);
        for (id, node) in (0..g.node_count()).map(|id| (id, g.node(id))) {
            let rows = node.info.rows().max(1);
            let mut first = rows;
            for (k, &v) in node.inputs.iter().enumerate() {
                if dep[v] == 0 {
                    continue;
                }
                let below = g.node_info(v).rows().max(1) - dep[v];
                first = first.min(match &self.reads[id][k] {
                    Some(Read::Whole) => 0,
                    Some(Read::Ends(ends)) => ends.partition_point(|&e| e <= below),
                    None => rows,
                });
            }
            if g.node_is_op(id) {
                dep[id] = rows - first;
            }
        }
        dep
    }
}

/// How an op reads one of its inputs, per output row, for tracing what a row depends on.
pub enum Trace {
    /// Every output row reads the whole input (a global op, a broadcast operand).
    Whole,
    /// The input rows each output row reads; `gapless` when the reads of consecutive rows
    /// never move up and overlap or touch, so that a run of rows reads exactly the rows from
    /// its first row's first to its last row's last (a strided 1x1 convolution skips rows and
    /// is traced row by row instead).
    Rows {
        /// Per output row, the input rows it reads.
        reads: Vec<Rows>,
        /// Whether consecutive rows' reads form one run (above).
        gapless: bool,
    },
}

/// Traces which rows of every node a given output row reads, transitively: the rows that must
/// exist before it does.
pub struct Cones {
    /// Per node, per input; empty for inputs and constants.
    pub traces: Vec<Vec<Trace>>,
}

impl Cones {
    /// Every op's traces over `g`.
    pub fn new(g: &dyn Structure) -> Cones {
        let traces = (0..g.node_count())
            .map(|id| (id, g.node(id)))
            .map(|(id, node)| {
                if !g.node_is_op(id) {
                    return Vec::new();
                }
                let rows = node.info.rows().max(1);
                (0..node.inputs.len())
                    .map(|k| {
                        let mut reads = Vec::with_capacity(rows);
                        for r in 0..rows {
                            match g.footprint(id, k, &(r..r + 1)) {
                                Footprint::Rows(f) => reads.push(f),
                                Footprint::Broadcast | Footprint::Whole => return Trace::Whole,
                            }
                        }
                        let gapless = reads.iter().all(|f| f.start < f.end)
                            && reads.windows(2).all(|w| w[0].start <= w[1].start && w[0].end <= w[1].end && w[1].start <= w[0].end);
                        Trace::Rows { reads, gapless }
                    })
                    .collect()
            })
            .collect();
        Cones { traces }
    }

    /// Per node, the sorted disjoint row ranges that row `row` of node `of` reads, itself
    /// included (node ids are topological: every node's inputs come before it).
    pub fn of(&self, g: &dyn Structure, of: NodeId, row: usize) -> Vec<Vec<Rows>> {
        let mut need: Vec<Vec<Rows>> = vec![Vec::new(); g.node_count()];
        need[of].push(row..row + 1);
        for id in (0..=of).rev() {
            if need[id].is_empty() {
                continue;
            }
            merge(&mut need[id]);
            for (k, trace) in self.traces[id].iter().enumerate() {
                let v = g.node_inputs(id)[k];
                let read: Vec<Rows> = match trace {
                    Trace::Whole => std::iter::once(0..g.node_info(v).rows().max(1)).collect(),
                    Trace::Rows { reads, gapless: true } => need[id].iter().map(|r| reads[r.start].start..reads[r.end - 1].end).collect(),
                    Trace::Rows { reads, gapless: false } => {
                        need[id].iter().flat_map(|r| r.clone().map(|y| reads[y].clone())).filter(|f| f.start < f.end).collect()
                    }
                };
                need[v].extend(read);
            }
        }
        need
    }
}

/// Sorts row ranges and merges those that overlap or touch.
fn merge(ranges: &mut Vec<Rows>) {
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Rows> = Vec::with_capacity(ranges.len());
    for r in ranges.drain(..) {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    *ranges = out;
}
