//! How far server-side pipelining can go under exact halos: a lower bound on the makespan of
//! every plan in which the robot only sends the graph input and the server computes every op.
//!
//! The argument is one of release times. Such a plan sends the input top to bottom (every
//! schedule the planner derives sends a value's rows in row order), so input row `i` has
//! arrived no earlier than one message carrying rows `0..=i` could bring it: one message's
//! overhead, those rows and one band header at the link's bandwidth, the latency. Every output
//! row of an op that depends on some input row at or below `i` (through the footprints) can
//! only be computed after that, and the server computes one kernel at a time, each of `r` rows
//! taking `a + b r` (so splitting a set of rows over several kernels never takes less than one
//! kernel of them all). So, for every `i`, such a plan takes at least:
//!
//! - the arrival of row `i`, then the server time of every op's rows that depend on rows `>= i`
//!   (one kernel per op, the fewest), then one output row over the downlink: the last of those
//!   kernels computes rows of a graph output (any later kernel would depend on it, and every
//!   op computed feeds an output), and they must still come down;
//! - the arrival of row `i`, then every output byte that depends on rows `>= i` over the
//!   downlink; and none of it leaves before the first of it exists. An output's rows leave in
//!   row order, so its first dependent row leaves first, and that row reads, through every op
//!   on the way ([`Cones`]), rows that depend on rows `>= i`: the server computes those after
//!   row `i` arrives, one kernel per op at least. So the download starts no sooner than the
//!   least of that work over the outputs (the first output row of an encoder-decoder waits
//!   for its whole receptive field to be computed, not only to arrive).
//!
//! Messages sharpen the first: the input crosses in messages, each with a band header, and a
//! row is there only when its whole message is. A message that ends at row `e` as the `j`-th
//! arrives no sooner than `e` rows and `j` headers can cross, and what its first row releases
//! follows. Any plan cuts its input somehow, so it takes at least the least, over every cut, of
//! the largest of these terms over its messages ([`best_message_cut`] finds that least
//! exactly). Few large messages leave much work for the end; many small ones pay a header
//! each. With headers left out the cut into single rows is free and this is the row-by-row
//! bound.
//!
//! Kernels sharpen it again. The row-by-row terms let an op compute its rows that do not
//! depend on row `i` before row `i` arrives and the rest after, as if the split were free; but
//! a kernel costs `a` however few its rows, and it starts only once the input its last row
//! reads has come. Take rows `i1 < i2` and a weight `t` in `[0, 1]`: the plan's makespan is
//! at least `t` times the `i1` term plus `1 - t` times the `i2` term, each counting the work
//! of the kernels that start after that row's arrival. An op's rows that read row `i1` or
//! below but nothing from `i2` down are either computed in the kernel that waits for `i2` (late
//! for both) or in kernels of their own (late for `i1` only, at weight `t`, and one `a` more);
//! whichever is cheaper for each op, the sum bounds the plan ([`Simulator::kernel_mixture`]).
//! The same holds for weights spread over any rows: each op's rows are cut into kernels, each
//! charged at the weight of the rows at or below the last input row it reads, and the least
//! such cut per op is found exactly ([`group_rows`]); the weights are searched by Frank-Wolfe
//! steps ([`Simulator::kernel_weights`]).
//! This only needs the server's last kernel to compute rows of a graph output; where some op
//! leaves rows unread ([`every_row_is_read`]), no term counts the download after it.
//!
//! Kernels are shared. A kernel can start no sooner than the kernels that compute the rows it
//! reads, so its release is that of one of its producers' kernels (or of its own input rows),
//! and, tracing back, one of every op's kernels on every path from the input to it. Give every
//! kernel the latest input row its start waits for that way; merging an op's kernels that wait
//! for the same row only saves their `a`. Then an op `j` dominated by an op `i` (every path from
//! the graph input to `j` passes through `i`) waits for no row that `i` has no kernel waiting
//! for: `i` pays its `a` at least once for every row any such `j` waits for. So `i`'s kernel
//! time may be split between itself and the ops it dominates, in shares summing to one, each op
//! grouping its rows with its own `b` and the `a`s it is given ([`dominated`]): at the weights'
//! rows, `i` pays at least the largest of those counts, so at least any mean of them. A cheap
//! `a` before an expensive op (a normalization before a first convolution whose `a` is nothing)
//! no longer lets the one cut its rows in few kernels and the other in many. The shares are
//! searched by Frank-Wolfe steps too, each moving an op's time toward whichever of itself and
//! the ops it dominates groups its rows into the most kernel weight, alternating with the
//! weights' steps ([`Simulator::kernel_weights`]).
//!
//! The bound is the largest of these over every input row `i`. For `i` the last row, it is the
//! classic pipelining argument: the whole input up, the server's tail, the result down;
//! receptive fields decide the tail, and the deep layers of a CNN depend on the last input row
//! in most of their rows, which is why exactness caps the gain of hiding the server's compute
//! behind the upload. For `i = 0` it is the server's whole work (a 3D grid, a fast link) or the
//! whole output's download (raw heads larger than the frame). In between it binds where the
//! rows that arrive last release more server work than the link takes to bring them: the
//! deep, expensive rows of a CNN all wait for the bottom of the frame.
//!
//! The rows that depend on an input suffix are found per op by one footprint per output row
//! ([`Reach`]); where some footprint is not a non-empty row range that ends no earlier than
//! the previous row's, the dependent rows need not be suffixes, and only `i = 0` and the last
//! row are counted, each by a direct scan of every row ([`dependent_rows`]).

use std::collections::HashMap;

use super::Simulator;
use crate::graph::{Graph, NodeId};
use crate::plan::Side;
use crate::rows::{Footprint, Rows};

/// Per value, how many of its rows depend on graph-input rows `from..` ; `None` when the
/// dependent rows of some value are not a suffix of its rows (no bound is claimed then).
fn dependent_rows(sim: &Simulator<'_>, input: NodeId, from: usize) -> Option<Vec<usize>> {
    let g = sim.graph();
    let mut dep = vec![0usize; g.nodes.len()];
    dep[input] = g.nodes[input].info.rows().max(1).saturating_sub(from);
    for id in 0..g.nodes.len() {
        if !g.is_op(id) {
            continue;
        }
        let node = &g.nodes[id];
        let rows = node.info.rows().max(1);
        let mut count = 0;
        let mut first = rows;
        for r in 0..rows {
            let depends = node.inputs.iter().enumerate().any(|(k, &v)| {
                if dep[v] == 0 {
                    return false;
                }
                let v_rows = g.nodes[v].info.rows().max(1);
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
fn every_row_is_read(sim: &Simulator<'_>) -> bool {
    let g = sim.graph();
    let live_op = |id: NodeId| g.is_op(id) && sim.is_live(id);
    let mut read: Vec<Vec<bool>> = g.nodes.iter().map(|n| vec![false; n.info.rows().max(1)]).collect();
    for (v, node) in g.nodes.iter().enumerate().filter(|&(v, _)| live_op(v)) {
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
    (0..g.nodes.len()).filter(|&u| live_op(u) && !g.outputs.contains(&u)).all(|u| read[u].iter().all(|&x| x))
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
struct Reach {
    /// Per node, per input (`None`: an input that does not depend on the graph input).
    reads: Vec<Vec<Option<Read>>>,
}

impl Reach {
    /// `None` when some footprint in the cone is empty, mixes whole and ranged reads, or ends
    /// above the next row's: the suffix structure does not hold.
    fn new(sim: &Simulator<'_>, input: NodeId) -> Option<Reach> {
        let g = sim.graph();
        let mut in_cone = vec![false; g.nodes.len()];
        in_cone[input] = true;
        let mut reads = Vec::with_capacity(g.nodes.len());
        for (id, node) in g.nodes.iter().enumerate() {
            let mut per_input = Vec::with_capacity(node.inputs.len());
            if !g.is_op(id) {
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
    fn dependent_rows(&self, sim: &Simulator<'_>, input: NodeId, from: usize) -> Vec<usize> {
        let g = sim.graph();
        let mut dep = vec![0usize; g.nodes.len()];
        dep[input] = g.nodes[input].info.rows().max(1).saturating_sub(from);
        for (id, node) in g.nodes.iter().enumerate() {
            let rows = node.info.rows().max(1);
            let mut first = rows;
            for (k, &v) in node.inputs.iter().enumerate() {
                if dep[v] == 0 {
                    continue;
                }
                let below = g.nodes[v].info.rows().max(1) - dep[v];
                first = first.min(match &self.reads[id][k] {
                    Some(Read::Whole) => 0,
                    Some(Read::Ends(ends)) => ends.partition_point(|&e| e <= below),
                    None => rows,
                });
            }
            if g.is_op(id) {
                dep[id] = rows - first;
            }
        }
        dep
    }
}

/// How an op reads one of its inputs, per output row, for tracing what a row depends on.
enum Trace {
    /// Every output row reads the whole input (a global op, a broadcast operand).
    Whole,
    /// The input rows each output row reads; `gapless` when the reads of consecutive rows
    /// never move up and overlap or touch, so that a run of rows reads exactly the rows from
    /// its first row's first to its last row's last (a strided 1x1 convolution skips rows and
    /// is traced row by row instead).
    Rows { reads: Vec<Rows>, gapless: bool },
}

/// Traces which rows of every node a given output row reads, transitively: the rows that must
/// exist before it does.
struct Cones {
    /// Per node, per input; empty for inputs and constants.
    traces: Vec<Vec<Trace>>,
}

impl Cones {
    fn new(g: &Graph) -> Cones {
        let traces = g
            .nodes
            .iter()
            .enumerate()
            .map(|(id, node)| {
                if !g.is_op(id) {
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
    fn of(&self, g: &Graph, of: NodeId, row: usize) -> Vec<Vec<Rows>> {
        let mut need: Vec<Vec<Rows>> = vec![Vec::new(); g.nodes.len()];
        need[of].push(row..row + 1);
        for id in (0..=of).rev() {
            if need[id].is_empty() {
                continue;
            }
            merge(&mut need[id]);
            for (k, trace) in self.traces[id].iter().enumerate() {
                let v = g.nodes[id].inputs[k];
                let read: Vec<Rows> = match trace {
                    Trace::Whole => std::iter::once(0..g.nodes[v].info.rows().max(1)).collect(),
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

/// The three terms of the pipelined offload's classic bound (the input's last row), for
/// callers that price the same offload under other links or server speeds (the fleet
/// simulator, `lop::fleet`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PipelineTerms {
    /// Bytes of the whole graph input on the wire (one band header included).
    pub input_bytes: f64,
    /// Server seconds of the rows that depend on the input's last row (one kernel per op).
    pub tail_s: f64,
    /// Bytes of the output rows that depend on the input's last row (a band header each).
    pub output_bytes: f64,
}

/// Frank-Wolfe steps of [`Simulator::kernel_weights`] on the row weights before any kernel
/// time is shared.
const WEIGHT_STEPS: usize = 300;

/// Rounds of [`Simulator::kernel_weights`] that share kernel time with heirs, then move the
/// row weights again.
const SHARE_ROUNDS: usize = 10;

/// Frank-Wolfe steps on the shares per round.
const SHARE_STEPS_PER_ROUND: usize = 20;

/// Frank-Wolfe steps on the row weights per round after the first.
const WEIGHT_STEPS_PER_ROUND: usize = 30;

/// The least, over ways of cutting an op's rows into kernels (contiguous, top to bottom), of
/// each kernel's time (`a + b` rows) times `below[last]` of its last row, `last` giving each
/// row's last input row (never decreasing) and `below` each input row's weight at or below
/// it (never decreasing). Adds each kernel's time, in the best cut, to `charge[last of its
/// last row]`, and returns with the least the sum of the kernels' weights (`below[last]` of
/// each kernel's last row: what one more `a` per kernel would add). A convex-hull sweep: the
/// cost of a kernel ending at row `e` is linear in where it starts, with a slope that only
/// grows, at a weight that only grows.
fn group_rows(a: f64, b: f64, last: &[usize], below: &[f64], charge: &mut [f64]) -> (f64, f64) {
    let m = last.len();
    let w = |e: usize| below[last[e - 1]];
    // Rows of zero weight cost nothing: one kernel of them, charged to its own last row.
    let zero = (1..=m).take_while(|&e| w(e) == 0.0).last().unwrap_or(0);
    if zero > 0 {
        charge[last[zero - 1]] += a + b * zero as f64;
    }
    if zero == m {
        return (0.0, 0.0);
    }
    if b <= 0.0 {
        // Every kernel costs `a` alone: one kernel of the rest is the least.
        charge[last[m - 1]] += a;
        return (a * w(m), w(m));
    }
    // f[e]: least cost of rows zero..e; lines f[s] - b s x over starts s, queried at x = w(e).
    let mut f = vec![0.0; m + 1];
    let mut from = vec![zero; m + 1];
    let mut hull: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    let line = |f: &[f64], s: usize, x: f64| f[s] - b * s as f64 * x;
    for e in zero + 1..=m {
        let s_new = e - 1;
        // Lines arrive with falling slopes (-b s); drop the last while the new one and the one
        // before it make it useless.
        while hull.len() >= 2 {
            let (l1, l2) = (hull[hull.len() - 2], hull[hull.len() - 1]);
            let (m1, m2, m3) = (-b * l1 as f64, -b * l2 as f64, -b * s_new as f64);
            let (c1, c2, c3) = (f[l1], f[l2], f[s_new]);
            if (c3 - c1) * (m1 - m2) <= (c2 - c1) * (m1 - m3) {
                hull.pop_back();
            } else {
                break;
            }
        }
        hull.push_back(s_new);
        let x = w(e);
        while hull.len() >= 2 && line(&f, hull[1], x) <= line(&f, hull[0], x) {
            hull.pop_front();
        }
        let s = hull[0];
        f[e] = line(&f, s, x) + (a + b * e as f64) * x;
        from[e] = s;
    }
    let (mut e, mut kernels) = (m, 0.0);
    while e > zero {
        let s = from[e];
        charge[last[e - 1]] += a + b * (e - s) as f64;
        kernels += w(e);
        e = s;
    }
    (f[m], kernels)
}

/// Per op of `ids`, the positions in `ids` of the other ops it dominates: every path from the
/// graph input to them passes through it. Every release of such an op's kernels is a release
/// of one of the dominator's (module docs, "Kernels are shared"). Node ids are topological.
fn dominated(g: &Graph, input: NodeId, ids: &[NodeId]) -> Vec<Vec<usize>> {
    let nodes = g.nodes.len();
    let words = nodes.div_ceil(64);
    let bit = |set: &[u64], id: NodeId| set[id / 64] >> (id % 64) & 1 == 1;
    // dom[v]: the nodes on every path from the input to v; None where no path reaches v.
    let mut dom: Vec<Option<Vec<u64>>> = vec![None; nodes];
    let mut own = vec![0u64; words];
    own[input / 64] |= 1 << (input % 64);
    dom[input] = Some(own);
    for id in 0..nodes {
        if id == input || !g.is_op(id) {
            continue;
        }
        let mut common: Option<Vec<u64>> = None;
        for &v in &g.nodes[id].inputs {
            if let Some(dv) = &dom[v] {
                common = Some(match common {
                    None => dv.clone(),
                    Some(mut c) => {
                        c.iter_mut().zip(dv).for_each(|(x, y)| *x &= y);
                        c
                    }
                });
            }
        }
        if let Some(mut c) = common {
            c[id / 64] |= 1 << (id % 64);
            dom[id] = Some(c);
        }
    }
    let mut heirs = vec![Vec::new(); ids.len()];
    for (k, &j) in ids.iter().enumerate() {
        if let Some(dj) = &dom[j] {
            for (h, &i) in heirs.iter_mut().zip(ids) {
                if i != j && bit(dj, i) {
                    h.push(k);
                }
            }
        }
    }
    heirs
}

/// The arguments of [`Simulator::server_pipeline_bound`], seconds.
#[derive(Debug, Clone, Copy)]
struct PipelineParts {
    /// Each input row's release alone, with one header in all.
    per_row: f64,
    /// The best cut of the input into messages.
    message_cut: f64,
    /// Rows' releases weighed together (two rows, or weights over every row), each op in as
    /// many kernels as serves them best.
    mixture: f64,
}

/// What the input rows from one row down release: the server's work that depends on them and
/// the output bytes that do.
#[derive(Debug, Clone, Copy)]
struct Release {
    /// The first of the rows.
    row: usize,
    /// Server seconds of the rows that depend on them (one kernel per op).
    work_s: f64,
    /// Bytes of the output rows that do (a band header each).
    output_bytes: f64,
    /// The smallest message of one dependent output row.
    last_message_bytes: f64,
    /// Server seconds, after the rows arrive, before the first dependent output row can leave:
    /// the least, over outputs, of the work of that row's rows in every op that depend on the
    /// rows (one kernel per op).
    first_output_s: f64,
}

/// [`Release`] per input row (every row where the suffix structure holds, else the first and
/// the last), with the input's wire size.
struct Releases {
    /// Input rows.
    rows: usize,
    /// Bytes of one input row on the wire.
    row_bytes: f64,
    /// Bytes of one input message's band header.
    header_bytes: f64,
    /// Per row counted, top to bottom.
    from: Vec<Release>,
    /// Per row counted, per node, how many of its rows depend on that row or rows below.
    deps: Vec<Vec<usize>>,
    /// Whether the server's last kernel is always followed by an output row's download
    /// ([`every_row_is_read`]).
    download_follows: bool,
}

/// The least makespan over every way of cutting the input into messages, top to bottom: a
/// message that ends at row `e` as the `j`-th arrives no sooner than `transfer(e` rows and `j`
/// headers`)`, after which what its first row releases takes `tails[first row]` more; a cut's
/// makespan is the largest over its messages, and the bound the least over cuts. `tails` must
/// not increase. Solved exactly: a makespan `t` is reachable iff sending each message as far
/// down as `t` allows reaches the last row (ending a message lower leaves the next message's
/// tail no longer and its own no later than any other cut with as many messages), so a
/// bisection on `t` finds the least, returned from below (`lo`, never above the optimum).
fn best_message_cut(tails: &[f64], row_bytes: f64, header_bytes: f64, link: &super::Link, lo: f64) -> f64 {
    let n = tails.len();
    let fixed = link.overhead_s + link.latency_s;
    let reaches = |t: f64| {
        let (mut row, mut messages) = (0usize, 0usize);
        while row < n {
            messages += 1;
            let bytes = (t - tails[row] - fixed) * link.bandwidth - messages as f64 * header_bytes;
            if bytes < 0.0 {
                return false;
            }
            // The rows this message may carry through; a hair of slack so that rounding never
            // calls a reachable makespan unreachable (which would lift the bound above it).
            let end = ((bytes / row_bytes) * (1.0 + 1e-12) + 1e-9).floor().min(n as f64) as usize;
            if end <= row {
                return false;
            }
            row = end;
        }
        true
    };
    // One message: a cut, so its makespan is at least the least.
    let mut hi = fixed + (n as f64 * row_bytes + header_bytes) / link.bandwidth + tails[0];
    let mut lo = lo.min(hi);
    for _ in 0..100 {
        if hi - lo <= 1e-12 * hi {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if reaches(mid) { hi = mid } else { lo = mid }
    }
    lo
}

impl Simulator<'_> {
    /// The lower bound described in the module docs, in seconds; `None` without a link, for
    /// graphs with more than one input, or when dependent rows are not suffixes.
    pub fn server_pipeline_bound(&self) -> Option<f64> {
        self.pipeline_parts(SHARE_ROUNDS).map(|p| p.per_row.max(p.message_cut).max(p.mixture))
    }

    /// The bound's three arguments, each a bound alone, with `share_rounds` rounds of kernel
    /// sharing ([`Simulator::kernel_weights`]).
    fn pipeline_parts(&self, share_rounds: usize) -> Option<PipelineParts> {
        let link = self.config().link;
        if link.bandwidth <= 0.0 {
            return None;
        }
        let transfer = |bytes: f64| link.overhead_s + bytes / link.bandwidth + link.latency_s;
        let rel = self.releases()?;
        let last_down = |r: &Release| if rel.download_follows { transfer(r.last_message_bytes) } else { 0.0 };
        let tail = |r: &Release| (r.work_s + last_down(r)).max(r.first_output_s + transfer(r.output_bytes));
        let arrival = |row: usize| transfer((row + 1) as f64 * rel.row_bytes + rel.header_bytes);
        // Each row in a message of its own with one header in all: a bound whatever the cut.
        let per_row = rel.from.iter().map(|r| arrival(r.row) + tail(r)).reduce(f64::max)?;
        if rel.from.len() < rel.rows || rel.row_bytes <= 0.0 {
            return Some(PipelineParts { per_row, message_cut: per_row, mixture: per_row });
        }
        let tails: Vec<f64> = rel.from.iter().map(tail).collect();
        let cut = best_message_cut(&tails, rel.row_bytes, rel.header_bytes, &link, per_row);
        // Rows' releases weighed together (a lower bound of the largest), each op grouped into
        // kernels as best serves the weights.
        let fixed: Vec<f64> = (0..rel.rows).map(|i| arrival(i) + last_down(&rel.from[i])).collect();
        let point = |i: usize| fixed[i] + rel.from[i].work_s;
        let best_row = (0..rel.rows).max_by(|&x, &y| point(x).total_cmp(&point(y))).unwrap_or(rel.rows - 1);
        let mixed = self.kernel_mixture(&rel, best_row, &fixed);
        let spread = self.kernel_weights(&rel, best_row, &fixed, share_rounds);
        Some(PipelineParts { per_row, message_cut: cut, mixture: mixed.max(spread) })
    }

    /// The kernel-count bound of the module docs: for rows `i1 < i2` and weight `t`, what
    /// every plan takes at least, `t` times the bound of `i1` plus `1 - t` times that of `i2`,
    /// with each op's rows that depend on `i1` but not on `i2` either in the late kernel of
    /// `i2` or in a kernel of their own. `fixed[i]` is the arrival of row `i` and the download
    /// after. Searched over `i2` the row whose own bound is largest (`best_row`) or the last
    /// row and every `i1` below (at most 256, evenly); for each pair the value is concave and
    /// piecewise linear in `t`, so a sweep over its breakpoints finds the best `t` exactly.
    fn kernel_mixture(&self, rel: &Releases, best_row: usize, fixed: &[f64]) -> f64 {
        let g = self.graph();
        let n = rel.rows;
        let ops: Vec<NodeId> = (0..g.nodes.len()).filter(|&id| g.is_op(id) && self.is_live(id)).collect();
        let cost = |id: NodeId, rows: usize| self.op_time(Side::Server, id, rows);
        let mut best = f64::NEG_INFINITY;
        let step = n.div_ceil(256).max(1);
        let mut breaks: Vec<(f64, f64)> = Vec::with_capacity(ops.len());
        for i2 in [best_row, n - 1] {
            for i1 in (0..i2).step_by(step) {
                let (d1, d2) = (&rel.deps[i1], &rel.deps[i2]);
                // At t = 0 the value is row i2's; each op's own rows between add `t` times
                // their kernel until that costs more than holding them late (from its break).
                let (mut value, mut slope) = (fixed[i2], fixed[i1] - fixed[i2]);
                breaks.clear();
                for &id in &ops {
                    let (z1, zt) = (d2[id], d1[id].saturating_sub(d2[id]));
                    if z1 > 0 {
                        value += cost(id, z1);
                    }
                    if zt > 0 {
                        let own = cost(id, zt);
                        slope += own;
                        if z1 > 0 && own > 0.0 {
                            breaks.push(((cost(id, z1 + zt) - cost(id, z1)) / own, own));
                        }
                    }
                }
                breaks.sort_by(|a, b| a.0.total_cmp(&b.0));
                let mut t = 0.0;
                best = best.max(value);
                for &(at, own) in breaks.iter().chain(std::iter::once(&(1.0, 0.0))) {
                    let at = at.clamp(t, 1.0);
                    if slope <= 0.0 {
                        break;
                    }
                    value += slope * (at - t);
                    t = at;
                    best = best.max(value);
                    slope -= own;
                }
            }
        }
        best
    }

    /// The kernel-count bound with weights spread over any rows: for weights `mu` (summing to
    /// 1), every plan takes at least the `mu`-weighted mean of the rows' terms, each counting
    /// the kernels that start after that row's arrival; so at least the weighted mean of
    /// `fixed` plus, per op, the least over ways of grouping its rows into kernels of each
    /// kernel's time times the weight of the rows at or above the last input row it reads
    /// ([`group_rows`]), each op's kernel time being its share of its own and its dominators'
    /// (module docs, "Kernels are shared"). Concave in `mu` for fixed shares, and in the shares
    /// for fixed `mu`: raised by Frank-Wolfe steps from the best single row (`best_row`), each
    /// toward the row the current grouping charges most, then `share_rounds` rounds that move
    /// the shares and the weights in turn; the best value seen is a bound whatever the search.
    fn kernel_weights(&self, rel: &Releases, best_row: usize, fixed: &[f64], share_rounds: usize) -> f64 {
        let g = self.graph();
        let n = rel.rows;
        // Per op in the input's cone: its time per kernel and per row, and per row the last
        // input row it reads (rows that read row i or below are the last deps[i] rows).
        let ids: Vec<NodeId> = (0..g.nodes.len())
            // Ops whose every row reads the input (a row that does not could run at any time).
            .filter(|&id| g.is_op(id) && self.is_live(id) && rel.deps[0][id] == g.nodes[id].info.rows().max(1))
            .collect();
        let ops: Vec<(f64, f64, Vec<usize>)> = ids
            .iter()
            .map(|&id| {
                let rows = g.nodes[id].info.rows().max(1);
                let a = self.op_time(Side::Server, id, 0);
                let b = self.op_time(Side::Server, id, 1) - a;
                let mut last = vec![0usize; rows];
                let mut i = 0;
                for (r, l) in last.iter_mut().enumerate() {
                    while i + 1 < n && rel.deps[i + 1][id] >= rows - r {
                        i += 1;
                    }
                    *l = i;
                }
                (a, b, last)
            })
            .collect();
        let heirs = match self.single_input() {
            Some(input) => dominated(g, input, &ids),
            None => vec![Vec::new(); ids.len()],
        };
        // shares[i][0]: the part of op i's kernel time it keeps; shares[i][1 + k]: the part
        // handed to heirs[i][k] (module docs, "Kernels are shared").
        let mut shares: Vec<Vec<f64>> = heirs.iter().map(|h| std::iter::once(1.0).chain(h.iter().map(|_| 0.0)).collect()).collect();
        let shared_a = |shares: &[Vec<f64>]| {
            let mut a: Vec<f64> = ops.iter().zip(shares).map(|((a, _, _), s)| a * s[0]).collect();
            for (i, h) in heirs.iter().enumerate() {
                for (k, &j) in h.iter().enumerate() {
                    a[j] += ops[i].0 * shares[i][k + 1];
                }
            }
            a
        };
        let start = best_row;
        let mut mu = vec![0.0; n];
        mu[start] = 1.0;
        let mut best = f64::NEG_INFINITY;
        let mut charge = vec![0.0; n + 1];
        let mut below = vec![0.0; n];
        let mut kernels = vec![0.0; ops.len()];
        // The value at `mu` with every op's kernel time `a`; fills `below`, `charge` and each
        // op's kernel weight.
        let value_at = |mu: &[f64], a: &[f64], below: &mut [f64], charge: &mut [f64], kernels: &mut [f64]| {
            let mut acc = 0.0;
            for (w, m) in below.iter_mut().zip(mu) {
                acc += m;
                *w = acc;
            }
            charge.iter_mut().for_each(|c| *c = 0.0);
            let mut value: f64 = mu.iter().zip(fixed).map(|(m, f)| m * f).sum();
            for (((_, b, last), &a), k) in ops.iter().zip(a).zip(kernels.iter_mut()) {
                let (v, w) = group_rows(a, *b, last, below, charge);
                value += v;
                *k = w;
            }
            value
        };
        let (mut mu_steps, mut share_steps) = (0usize, 0usize);
        let mut a = shared_a(&shares);
        for round in 0..=share_rounds {
            // Frank-Wolfe steps on the row weights.
            let steps = if round == 0 { WEIGHT_STEPS } else { WEIGHT_STEPS_PER_ROUND };
            for _ in 0..steps {
                let value = value_at(&mu, &a, &mut below, &mut charge, &mut kernels);
                best = best.max(value);
                // charge[j] counts for every row at or below j: the supergradient at row i is
                // fixed[i] plus the charges from i up.
                let mut up = 0.0;
                let mut toward = (f64::NEG_INFINITY, start);
                for i in (0..n).rev() {
                    up += charge[i];
                    let grad = fixed[i] + up;
                    if grad > toward.0 {
                        toward = (grad, i);
                    }
                }
                let gamma = 2.0 / (mu_steps as f64 + 2.0);
                mu_steps += 1;
                mu.iter_mut().for_each(|m| *m *= 1.0 - gamma);
                mu[toward.1] += gamma;
            }
            if round == share_rounds || heirs.iter().all(Vec::is_empty) {
                break;
            }
            // Frank-Wolfe steps on the shares: each op hands its kernel time toward whichever
            // of itself and its heirs has the most kernel weight (the value's supergradient in
            // its share of op j is its `a` times op j's kernel weight).
            for _ in 0..SHARE_STEPS_PER_ROUND {
                let value = value_at(&mu, &a, &mut below, &mut charge, &mut kernels);
                best = best.max(value);
                let gamma = 2.0 / (share_steps as f64 + 2.0);
                share_steps += 1;
                for (i, h) in heirs.iter().enumerate() {
                    let mut toward = (kernels[i], 0);
                    for (k, &j) in h.iter().enumerate() {
                        if kernels[j] > toward.0 {
                            toward = (kernels[j], k + 1);
                        }
                    }
                    shares[i].iter_mut().for_each(|x| *x *= 1.0 - gamma);
                    shares[i][toward.1] += gamma;
                }
                a = shared_a(&shares);
            }
        }
        best
    }

    /// What each input row releases; `None` as for [`Simulator::server_pipeline_bound`].
    fn releases(&self) -> Option<Releases> {
        let g = self.graph();
        let input = self.single_input()?;
        let n = g.nodes[input].info.rows().max(1);
        let header = |id: NodeId| self.band_header(id);
        let cones = Cones::new(g);
        let mut traced: HashMap<(NodeId, usize), Vec<Vec<Rows>>> = HashMap::new();
        let mut release = |row: usize, dep: &[usize]| {
            let work_s = (0..g.nodes.len())
                .filter(|&id| g.is_op(id) && dep[id] > 0 && self.is_live(id))
                .map(|id| self.op_time(Side::Server, id, dep[id]))
                .sum();
            let outs = || g.outputs.iter().filter(|&&o| dep[o] > 0);
            // An output's dependent rows leave in row order, so none before its first exists:
            // that row's cone, in the rows that depend on these, is computed after they arrive.
            let mut first_output_s = f64::INFINITY;
            for &o in outs() {
                let first = g.nodes[o].info.rows().max(1) - dep[o];
                let cone = traced.entry((o, first)).or_insert_with(|| cones.of(g, o, first));
                let work: f64 = (0..g.nodes.len())
                    .filter(|&id| g.is_op(id) && dep[id] > 0 && self.is_live(id))
                    .map(|id| {
                        let from = g.nodes[id].info.rows().max(1) - dep[id];
                        let rows: usize = cone[id].iter().map(|r| r.end.saturating_sub(r.start.max(from))).sum();
                        if rows > 0 { self.op_time(Side::Server, id, rows) } else { 0.0 }
                    })
                    .sum();
                first_output_s = first_output_s.min(work);
            }
            Release {
                row,
                work_s,
                output_bytes: outs().map(|&o| self.row_bytes[o] * dep[o] + header(o)).sum::<usize>() as f64,
                last_message_bytes: outs().map(|&o| self.row_bytes[o] + header(o)).min().unwrap_or(0) as f64,
                first_output_s: if first_output_s.is_finite() { first_output_s } else { 0.0 },
            }
        };
        let (rows, deps): (Vec<usize>, Vec<Vec<usize>>) = match Reach::new(self, input) {
            Some(reach) => (0..n).map(|i| (i, reach.dependent_rows(self, input, i))).unzip(),
            None => [0, n - 1]
                .iter()
                .map(|&i| dependent_rows(self, input, i).map(|dep| (i, dep)))
                .collect::<Option<Vec<_>>>()?
                .into_iter()
                .unzip(),
        };
        let from = rows.iter().zip(&deps).map(|(&i, dep)| release(i, dep)).collect();
        Some(Releases {
            rows: n,
            row_bytes: self.row_bytes[input] as f64,
            header_bytes: header(input) as f64,
            from,
            deps,
            download_follows: every_row_is_read(self),
        })
    }

    /// The graph's one input; `None` for graphs with several.
    fn single_input(&self) -> Option<NodeId> {
        let g = self.graph();
        let inputs: Vec<NodeId> = (0..g.nodes.len()).filter(|&id| matches!(g.nodes[id].op, crate::ops::Op::Input)).collect();
        match inputs[..] {
            [input] => Some(input),
            _ => None,
        }
    }

    /// The classic bound's terms (the input's last row), independent of the link; `None` for
    /// graphs with more than one input or when dependent rows are not suffixes.
    pub fn server_pipeline_terms(&self) -> Option<PipelineTerms> {
        let g = self.graph();
        let input = self.single_input()?;
        let n = g.nodes[input].info.rows().max(1);
        let dep = dependent_rows(self, input, n - 1)?;
        let header = |id: NodeId| self.band_header(id);
        let input_bytes = (self.row_bytes[input] * n + header(input)) as f64;
        let tail_s: f64 = (0..g.nodes.len())
            .filter(|&id| g.is_op(id) && dep[id] > 0 && self.is_live(id))
            .map(|id| self.op_time(Side::Server, id, dep[id]))
            .sum();
        let output_bytes: usize = g.outputs.iter().filter(|&&o| dep[o] > 0).map(|&o| self.row_bytes[o] * dep[o] + header(o)).sum();
        Some(PipelineTerms { input_bytes, tail_s, output_bytes: output_bytes as f64 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline;
    use crate::graph::{DType, Graph, GraphBuilder};
    use crate::ops::{Op, Pool};
    use crate::plan::Plan;
    use crate::profile::{Fit, Profile};
    use crate::sim::{Link, SimConfig};

    /// input u8 [1,1,16,4] -> norm -> 3x3 max pool (pad 1) -> 3x3 max pool (pad 1).
    fn chain() -> Graph {
        chain_then(false)
    }

    /// [`chain`], with a global mean after it where `mean` (so that little comes down).
    fn chain_then(mean: bool) -> Graph {
        let pool = || Op::MaxPool(Pool::same_3x3());
        let mut b = GraphBuilder::new("chain");
        let x = b.input("x", vec![1, 1, 16, 4], DType::U8);
        let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
        let p1 = b.add("pool1", pool(), &[n]).expect("pool1");
        let mut out = b.add("pool2", pool(), &[p1]).expect("pool2");
        if mean {
            out = b.add("mean", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[out]).expect("mean");
        }
        b.output(out);
        b.build().expect("graph")
    }

    /// A simulator over `g` whose server takes `server` per op, the robot 1 ms a kernel and a
    /// row, on `link`, band headers priced or not.
    fn server_sim<'g>(g: &'g Graph, server: impl FnMut(NodeId) -> Fit, link: Link, band_headers: bool) -> Simulator<'g> {
        let robot = Profile::synthetic(g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
        let server = Profile::synthetic(g, Side::Server, server).expect("server");
        Simulator::new(g, &robot, &server, SimConfig { link, band_headers, ..SimConfig::default() }).expect("sim")
    }

    /// Server-only plans with every op in each of `chunks` chunks never beat `bound`.
    fn no_chunking_beats(sim: &Simulator<'_>, g: &Graph, bound: f64, chunks: &[usize]) {
        for &k in chunks {
            let mut plan = Plan::server_only(g, 16);
            for id in 1..g.nodes.len() {
                plan.splits[id].server_chunks = k;
            }
            let cost = sim.cost(&plan).expect("chunked");
            assert!(cost.makespan_s >= bound - 1e-12, "{k} chunks: {} < bound {bound}", cost.makespan_s);
        }
    }

    #[test]
    fn the_bound_counts_the_rows_that_read_the_last_input_row() {
        let g = chain();
        // Kernels with a high fixed cost (8 ms), so that the tail, and the choice between more
        // kernels and late rows, outweigh the rest.
        let sim = server_sim(&g, |_| Fit::new(8e-3, 1e-4), Link { bandwidth: 1e4, latency_s: 2e-3, overhead_s: 1e-4 }, false);
        let dep = dependent_rows(&sim, 0, 15).expect("suffixes");
        // The last input row reaches norm's last row, pool1's last 2 rows and pool2's last 3.
        assert_eq!(&dep[1..], &[1, 2, 3]);
        let reach = Reach::new(&sim, 0).expect("suffixes");
        for from in 0..16 {
            assert_eq!(reach.dependent_rows(&sim, 0, from), dependent_rows(&sim, 0, from).expect("suffixes"), "from row {from}");
        }
        // Band headers are left out here (see `headers_cut_the_input_into_few_messages`).
        // The last row: upload 64 bytes, server tail (1+2+3 rows), one row of pool2 (16 bytes)
        // down: 36.8 ms. A row released earlier arrives 0.4 ms sooner a row and adds only 0.3 ms
        // of work (35.0 ms for row 0: the whole work after the first row).
        let last = (1e-4 + 64.0 / 1e4 + 2e-3) + (3.0 * 8e-3 + 6.0 * 1e-4) + (1e-4 + 16.0 / 1e4 + 2e-3);
        let rel = sim.releases().expect("releases");
        let arrival = |i: usize| 1e-4 + (i + 1) as f64 * 4.0 / 1e4 + 2e-3;
        let tail_of_last = rel.from[15].work_s + (1e-4 + 16.0 / 1e4 + 2e-3);
        assert!((arrival(15) + tail_of_last - last).abs() < 1e-12, "{} vs {last}", arrival(15) + tail_of_last);
        // Every output byte depends on row 2 and comes down after it; the output leaves in
        // row order, and its first row reads input rows 0-2 through norm's rows 0-2 and
        // pool1's rows 0-1, so after row 2 arrives (3.3 ms) norm's row 2, pool1's row 1 and
        // pool2's row 0 take a kernel each (24.3 ms) before the first of the 256 bytes may
        // leave (27.7 ms): 55.3 ms, where the download counted from row 2's arrival gave 31.0.
        let want = arrival(2) + 3.0 * (8e-3 + 1e-4) + (1e-4 + 256.0 / 1e4 + 2e-3);
        assert!((rel.from[2].first_output_s - 3.0 * (8e-3 + 1e-4)).abs() < 1e-12, "{:?}", rel.from[2]);
        let parts = sim.pipeline_parts(SHARE_ROUNDS).expect("bound");
        assert!((parts.per_row - want).abs() < 1e-12, "{parts:?} vs {want}");
        // The tail alone holds only the rows that read the last row, as if the others were
        // done before at no cost; each op's other rows need a kernel of their own (8 ms)
        // before it, or wait for the end. Weighing row 0 (at about 1/6) with the last row
        // charges that choice (40.5 ms), still below the download's term here.
        assert!(parts.mixture > 40e-3 && parts.mixture < want, "{parts:?}");
        let got = sim.server_pipeline_bound().expect("bound");
        assert!((got - want).abs() < 1e-12, "{parts:?}");
        // No server-side plan beats it, however finely chunked.
        let whole = baseline::server_only(&sim, 16).expect("server-only").cost.expect("feasible");
        assert!(whole.makespan_s > got);
        no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8, 16]);
    }

    /// Cones are exact: a 3x3 pool reads a run of rows (traced as one range), a 1x1 stride-2
    /// pool every other row (traced row by row, never the hull, which would charge rows no
    /// plan computes). input u8 [1,1,16,4] -> norm -> 1x1 stride-2 max pool (8 rows) -> 3x3
    /// max pool (pad 1).
    #[test]
    fn cones_trace_exactly_the_rows_an_output_row_reads() {
        let mut b = GraphBuilder::new("strided");
        let x = b.input("x", vec![1, 1, 16, 4], DType::U8);
        let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
        let skip = Pool { kernel: vec![1, 1], strides: vec![2, 2], pads_begin: vec![0, 0], pads_end: vec![0, 0], ..Pool::same_3x3() };
        let p1 = b.add("skip", Op::MaxPool(skip), &[n]).expect("skip");
        let p2 = b.add("pool", Op::MaxPool(Pool::same_3x3()), &[p1]).expect("pool");
        b.output(p2);
        let g = b.build().expect("graph");
        let cones = Cones::new(&g);
        assert!(matches!(&cones.traces[p1][0], Trace::Rows { gapless: false, .. }));
        assert!(matches!(&cones.traces[p2][0], Trace::Rows { gapless: true, .. }));
        // Row 3 of the 3x3 pool reads rows 2-4 of the strided pool, which read norm's rows 4,
        // 6 and 8, which read the same input rows.
        let cone = cones.of(&g, p2, 3);
        assert_eq!(cone[p2], vec![3..4]);
        assert_eq!(cone[p1], vec![2..5]);
        assert_eq!(cone[n], vec![4..5, 6..7, 8..9]);
        assert_eq!(cone[x], vec![4..5, 6..7, 8..9]);
        // The bound built on them still holds for every chunking of a server-only plan.
        let sim = server_sim(&g, |_| Fit::new(2e-3, 1e-4), Link { bandwidth: 2e3, latency_s: 1e-3, overhead_s: 1e-4 }, false);
        let got = sim.server_pipeline_bound().expect("bound");
        no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8]);
    }

    /// A server much slower than the link: the compute term binds, and no server-side plan,
    /// however chunked, beats it.
    #[test]
    fn a_compute_bound_server_is_bound_by_its_whole_work() {
        let g = chain();
        let sim = server_sim(&g, |_| Fit::new(1e-4, 1e-3), Link { bandwidth: 1e7, latency_s: 1e-4, overhead_s: 1e-5 }, false);
        // One input row (4 bytes) up, 3 ops of 16 rows, one output row (16 bytes) down.
        let want = (1e-5 + 4.0 / 1e7 + 1e-4) + 3.0 * (1e-4 + 16.0 * 1e-3) + (1e-5 + 16.0 / 1e7 + 1e-4);
        let parts = sim.pipeline_parts(SHARE_ROUNDS).expect("bound");
        assert!((parts.per_row - want).abs() < 1e-12, "{parts:?} vs {want}");
        let got = sim.server_pipeline_bound().expect("bound");
        assert!(got >= want && got < want * 1.0001, "{got} vs {want}");
        let t = sim.server_pipeline_terms().expect("terms");
        assert!(got > 1.5 * (t.input_bytes / 1e7 + t.tail_s + t.output_bytes / 1e7), "the compute term binds");
        no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8, 16]);
    }

    /// Outputs far larger than the input: every output byte comes down after the input row
    /// that all of them depend on went up.
    #[test]
    fn large_outputs_bound_by_their_download() {
        let g = chain();
        let sim = server_sim(&g, |_| Fit::new(0.0, 0.0), Link { bandwidth: 1e4, latency_s: 2e-3, overhead_s: 1e-4 }, false);
        // The input is 64 bytes, the float output 256. Every output row depends on input row 2
        // (pool2's row 0 reads pool1's row 1, which reads norm's row 2): three 4-byte rows up,
        // then 256 bytes down.
        let want = (1e-4 + 12.0 / 1e4 + 2e-3) + (1e-4 + 256.0 / 1e4 + 2e-3);
        let got = sim.server_pipeline_bound().expect("bound");
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        no_chunking_beats(&sim, &g, got, &[1, 4, 16]);
    }

    /// The rows that arrive first can bind: input u8 [1,1,16,4] -> norm -> 2x2 stride-2 max
    /// pool (8 rows) -> 3x3 max pool (pad 1), with only the last op costly (10 ms a row). Its
    /// first row reads pool1's rows 0-1, which read input rows 0-3, so all of its work waits
    /// for row 3; at 1 ms a row up, the last row releases only 2 of its rows.
    #[test]
    fn work_released_by_early_rows_binds_between_the_ends() {
        let mut b = GraphBuilder::new("stride");
        let x = b.input("x", vec![1, 1, 16, 4], DType::U8);
        let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
        let half = Pool { kernel: vec![2, 2], strides: vec![2, 2], pads_begin: vec![0, 0], pads_end: vec![0, 0], ..Pool::same_3x3() };
        let p1 = b.add("pool1", Op::MaxPool(half), &[n]).expect("pool1");
        let p2 = b.add("pool2", Op::MaxPool(Pool::same_3x3()), &[p1]).expect("pool2");
        b.output(p2);
        let g = b.build().expect("graph");
        let sim = server_sim(
            &g,
            |id| Fit::new(0.0, if id == 3 { 1e-2 } else { 0.0 }),
            Link { bandwidth: 4e3, latency_s: 0.0, overhead_s: 0.0 },
            false,
        );
        // Rows 0-3 up (4 ms), pool2's 8 rows (80 ms), one 8-byte row down (2 ms): 86 ms. Row 0
        // alone gives 83 ms (the whole work after the first row), the last row 38 ms (2 rows
        // of pool2 after the whole input).
        let want = 16.0 / 4e3 + 8.0 * 1e-2 + 8.0 / 4e3;
        let got = sim.server_pipeline_bound().expect("bound");
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        let first_row = 4.0 / 4e3 + 8.0 * 1e-2 + 8.0 / 4e3;
        assert!(got > first_row + 2e-3, "tighter than the whole work after the first row");
        no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8]);
    }

    /// Every way of cutting `tails.len()` rows into messages, top to bottom: the least of their
    /// makespans (each message's arrival, then its first row's tail; the largest over messages).
    fn every_cut(tails: &[f64], row_bytes: f64, header_bytes: f64, link: &Link) -> f64 {
        let n = tails.len();
        (0..1u32 << (n - 1))
            .map(|mask| {
                let (mut start, mut messages, mut worst) = (0, 0, 0.0f64);
                for end in 1..=n {
                    if end == n || mask & (1 << (end - 1)) != 0 {
                        messages += 1;
                        let bytes = end as f64 * row_bytes + messages as f64 * header_bytes;
                        worst = worst.max(link.overhead_s + bytes / link.bandwidth + link.latency_s + tails[start]);
                        start = end;
                    }
                }
                worst
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// The best cut into messages, found by bisection with a greedy test, equals the least over
    /// every cut, on random tails, rows, headers and links.
    #[test]
    fn the_best_message_cut_is_the_least_over_every_cut() {
        let mut rng = crate::rng::Rng::new(7);
        for case in 0..300 {
            let n = 1 + rng.below(11);
            let mut tails: Vec<f64> = (0..n).map(|_| rng.unit() * 2e-2).collect();
            tails.sort_by(|a, b| b.total_cmp(a));
            let link = Link { bandwidth: [1e3, 1e4, 1e5][rng.below(3)], latency_s: rng.unit() * 1e-3, overhead_s: rng.unit() * 1e-4 };
            let (row_bytes, header_bytes) = (1.0 + rng.unit() * 40.0, rng.unit() * 60.0);
            let want = every_cut(&tails, row_bytes, header_bytes, &link);
            let got = best_message_cut(&tails, row_bytes, header_bytes, &link, 0.0);
            assert!(got <= want * (1.0 + 1e-12) && got >= want * (1.0 - 1e-9), "case {case}: {got} vs {want}");
        }
    }

    /// With band headers priced, each message the input is cut into costs one: the bound
    /// charges the cut that serves the tail best, above the one header of the row-by-row
    /// relaxation, and no chunking beats it.
    #[test]
    fn headers_cut_the_input_into_few_messages() {
        let g = chain();
        let link = Link { bandwidth: 1e4, latency_s: 2e-3, overhead_s: 1e-4 };
        let bound = |band_headers: bool| {
            let sim = server_sim(&g, |_| Fit::new(1e-3, 1e-3), link, band_headers);
            (sim.pipeline_parts(SHARE_ROUNDS).expect("bound"), sim)
        };
        let (bare, _) = bound(false);
        let (parts, sim) = bound(true);
        let header = crate::sim::band_header_bytes(4) as f64;
        // The input's header and the output's: what the row-by-row relaxation adds.
        assert!((parts.per_row - bare.per_row - 2.0 * header / 1e4).abs() < 1e-12, "{parts:?} vs {bare:?}");
        // Headers left out, single rows are free messages: the cut is the row-by-row bound.
        assert!((bare.message_cut - bare.per_row).abs() < 1e-12, "{bare:?}");
        assert!(parts.message_cut > parts.per_row + 1e-4, "{parts:?}");
        let got = sim.server_pipeline_bound().expect("bound");
        no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8, 16]);
    }

    /// Kernels cost a fixed time each, so an op either computes its rows as they arrive, in
    /// more kernels, or late in one: input u8 [1,1,2,1] (10 ms a row up) -> norm (10 ms a
    /// kernel and 10 ms a row) -> global mean (free, 4 bytes down in 40 ms). Row 0 alone: 10 +
    /// 30 + 40 ms; row 1 alone: 20 + 20 + 40 ms. Weighed half and half, norm's row 0 costs
    /// either 10 ms more in the late kernel or a 10 ms kernel of its own at half weight: 85 ms.
    /// Every plan takes 90.
    #[test]
    fn weighing_two_rows_charges_the_kernels_between_them() {
        let mut b = GraphBuilder::new("two");
        let x = b.input("x", vec![1, 1, 2, 1], DType::U8);
        let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
        let m = b.add("mean", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[n]).expect("mean");
        b.output(m);
        let g = b.build().expect("graph");
        let sim = server_sim(
            &g,
            |id| if id == 1 { Fit::new(1e-2, 1e-2) } else { Fit::new(0.0, 0.0) },
            Link { bandwidth: 100.0, latency_s: 0.0, overhead_s: 0.0 },
            false,
        );
        let parts = sim.pipeline_parts(SHARE_ROUNDS).expect("bound");
        assert!((parts.per_row - 0.08).abs() < 1e-12, "{parts:?}");
        assert!((parts.mixture - 0.085).abs() < 1e-12, "{parts:?}");
        assert!((sim.server_pipeline_bound().expect("bound") - 0.085).abs() < 1e-12);
        no_chunking_beats(&sim, &g, 0.085, &[1, 2]);
        let whole = baseline::server_only(&sim, 2).expect("server-only").cost.expect("feasible");
        assert!((whole.makespan_s - 0.09).abs() < 1e-9, "{}", whole.makespan_s);
    }

    /// An op pays its kernels' `a` for the ops it dominates: norm costs 3 ms a kernel and
    /// nothing per row, the pools nothing a kernel and 1 ms a row, and the 16 input rows take
    /// 32 ms to come. Unshared, the bound lets norm run in one kernel while the pools run row by
    /// row as the rows come (44 ms); every plan that cuts the pools finely cuts norm as finely.
    /// Shared, the bound rises (50.8 ms), and no server-only plan in any chunk counts (either
    /// chunk bounds; the best takes 55 ms) beats it.
    #[test]
    fn an_op_pays_its_kernels_for_the_ops_it_dominates() {
        let g = chain_then(true);
        let fit = |id: NodeId| match id {
            1 => Fit::new(3e-3, 0.0),
            2 | 3 => Fit::new(0.0, 1e-3),
            _ => Fit::new(0.0, 0.0),
        };
        let link = Link { bandwidth: 2000.0, latency_s: 1e-3, overhead_s: 0.0 };
        let sim = server_sim(&g, fit, link, false);
        let shared = sim.server_pipeline_bound().expect("bound");
        let parts = |rounds| sim.pipeline_parts(rounds).expect("bound");
        let unshared = parts(0);
        let unshared = unshared.per_row.max(unshared.message_cut).max(unshared.mixture);
        assert!(shared > unshared * 1.02, "shared {shared} s, unshared {unshared} s");
        assert_eq!(parts(SHARE_ROUNDS).mixture.max(unshared), shared.max(unshared));
        let mut least = f64::INFINITY;
        for bounds in [crate::sim::ChunkBounds::Even, crate::sim::ChunkBounds::Aligned] {
            let robot = Profile::synthetic(&g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
            let server = Profile::synthetic(&g, Side::Server, fit).expect("server");
            let sim =
                Simulator::new(&g, &robot, &server, SimConfig { link, band_headers: false, bounds, ..SimConfig::default() }).expect("sim");
            for k in 0..16 * 16 * 16 {
                let mut plan = Plan::server_only(&g, 16);
                for (id, c) in [(1, k % 16), (2, k / 16 % 16), (3, k / 256)] {
                    plan.splits[id].server_chunks = 1 + c;
                }
                let cost = sim.cost(&plan).expect("server-side");
                assert!(cost.makespan_s >= shared - 1e-12, "chunks {k}: {} s below the bound {shared} s", cost.makespan_s);
                least = least.min(cost.makespan_s);
            }
        }
        eprintln!("unshared {unshared} s, shared {shared} s, best plan {least} s");
    }

    /// The convex-hull sweep finds the least grouping of an op's rows into kernels, and the
    /// charges it returns are that grouping's: checked against every grouping of random rows.
    #[test]
    fn grouping_rows_into_kernels_is_the_least_over_every_grouping() {
        let mut rng = crate::rng::Rng::new(11);
        for case in 0..400 {
            let m = 1 + rng.below(10);
            let n = 1 + rng.below(8);
            let mut last: Vec<usize> = (0..m).map(|_| rng.below(n)).collect();
            last.sort_unstable();
            let mut below: Vec<f64> = (0..n).map(|_| if rng.below(4) == 0 { 0.0 } else { rng.unit() }).collect();
            below.sort_by(f64::total_cmp);
            let (a, b) = (rng.unit() * 1e-2 * (rng.below(3) as f64), rng.unit() * 1e-2 * (rng.below(3) as f64));
            let want = (0..1u32 << (m - 1))
                .map(|mask| {
                    let (mut start, mut total) = (0, 0.0);
                    for end in 1..=m {
                        if end == m || mask & (1 << (end - 1)) != 0 {
                            total += (a + b * (end - start) as f64) * below[last[end - 1]];
                            start = end;
                        }
                    }
                    total
                })
                .fold(f64::INFINITY, f64::min);
            let mut charge = vec![0.0; n + 1];
            let (got, _) = group_rows(a, b, &last, &below, &mut charge);
            assert!((got - want).abs() <= 1e-12 + 1e-9 * want, "case {case}: {got} vs {want}");
            let charged: f64 = charge.iter().zip(&below).map(|(c, w)| c * w).sum();
            assert!((charged - got).abs() <= 1e-12 + 1e-9 * got, "case {case}: charges {charged} vs {got}");
        }
    }
}
