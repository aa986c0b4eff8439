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
//! such cut per op is found exactly ([`kernels::group_rows`]); the weights are searched by Frank-Wolfe
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
//! grouping its rows with its own `b` and the `a`s it is given (`kernels::dominated`): at the
//! weights' rows, `i` pays at least the largest of those counts, so at least any mean of them. A
//! cheap `a` before an expensive op (a normalization before a first convolution whose `a` is nothing)
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

pub mod kernels;
pub mod reach;

use std::collections::HashMap;

use crate::plan::Side;
use crate::rows::Rows;
use crate::sim::{Link, Simulator};
use crate::structure::NodeId;
use kernels::SHARE_ROUNDS;
use reach::{Cones, Reach, dependent_rows, every_row_is_read};

/// The three terms of the pipelined offload's classic bound (the input's last row), for
/// callers that price the same offload under other links or server speeds (the fleet
/// simulator, `lop_fleet`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PipelineTerms {
    /// Bytes of the whole graph input on the wire (one band header included).
    pub input_bytes: f64,
    /// Server seconds of the rows that depend on the input's last row (one kernel per op).
    pub tail_s: f64,
    /// Bytes of the output rows that depend on the input's last row (a band header each).
    pub output_bytes: f64,
}

/// The arguments of [`Simulator::server_pipeline_bound`], seconds.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct PipelineParts {
    /// Each input row's release alone, with one header in all.
    pub per_row: f64,
    /// The best cut of the input into messages.
    pub message_cut: f64,
    /// Rows' releases weighed together (two rows, or weights over every row), each op in as
    /// many kernels as serves them best.
    pub mixture: f64,
}

/// What the input rows from one row down release: the server's work that depends on them and
/// the output bytes that do.
#[derive(Debug, Clone, Copy)]
#[doc(hidden)]
pub struct Release {
    /// The first of the rows.
    pub row: usize,
    /// Server seconds of the rows that depend on them (one kernel per op).
    pub work_s: f64,
    /// Bytes of the output rows that do (a band header each).
    pub output_bytes: f64,
    /// The smallest message of one dependent output row.
    pub last_message_bytes: f64,
    /// Server seconds, after the rows arrive, before the first dependent output row can leave:
    /// the least, over outputs, of the work of that row's rows in every op that depend on the
    /// rows (one kernel per op).
    pub first_output_s: f64,
}

/// [`Release`] per input row (every row where the suffix structure holds, else the first and
/// the last), with the input's wire size.
#[doc(hidden)]
pub struct Releases {
    /// Input rows.
    pub rows: usize,
    /// Bytes of one input row on the wire.
    pub row_bytes: f64,
    /// Bytes of one input message's band header.
    pub header_bytes: f64,
    /// Per row counted, top to bottom.
    pub from: Vec<Release>,
    /// Per row counted, per node, how many of its rows depend on that row or rows below.
    pub deps: Vec<Vec<usize>>,
    /// Whether the server's last kernel is always followed by an output row's download
    /// ([`every_row_is_read`]).
    pub download_follows: bool,
}

/// The least makespan over every way of cutting the input into messages, top to bottom: a
/// message that ends at row `e` as the `j`-th arrives no sooner than `transfer(e` rows and `j`
/// headers`)`, after which what its first row releases takes `tails[first row]` more; a cut's
/// makespan is the largest over its messages, and the bound the least over cuts. `tails` must
/// not increase. Solved exactly: a makespan `t` is reachable iff sending each message as far
/// down as `t` allows reaches the last row (ending a message lower leaves the next message's
/// tail no longer and its own no later than any other cut with as many messages), so a
/// bisection on `t` finds the least, returned from below (`lo`, never above the optimum).
pub fn best_message_cut(tails: &[f64], row_bytes: f64, header_bytes: f64, link: &Link, lo: f64) -> f64 {
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
    pub fn pipeline_parts(&self, share_rounds: usize) -> Option<PipelineParts> {
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

    /// What each input row releases; `None` as for [`Simulator::server_pipeline_bound`].
    pub fn releases(&self) -> Option<Releases> {
        let g = self.graph();
        let input = self.single_input()?;
        let n = g.node_info(input).rows().max(1);
        let header = |id: NodeId| self.band_header(id);
        let cones = Cones::new(g);
        let mut traced: HashMap<(NodeId, usize), Vec<Vec<Rows>>> = HashMap::new();
        let mut release = |row: usize, dep: &[usize]| {
            let work_s = (0..g.node_count())
                .filter(|&id| g.node_is_op(id) && dep[id] > 0 && self.is_live(id))
                .map(|id| self.op_time(Side::Server, id, dep[id]))
                .sum();
            let outs = || g.outputs().iter().filter(|&&o| dep[o] > 0);
            // An output's dependent rows leave in row order, so none before its first exists:
            // that row's cone, in the rows that depend on these, is computed after they arrive.
            let mut first_output_s = f64::INFINITY;
            for &o in outs() {
                let first = g.node_info(o).rows().max(1) - dep[o];
                let cone = traced.entry((o, first)).or_insert_with(|| cones.of(g, o, first));
                let work: f64 = (0..g.node_count())
                    .filter(|&id| g.node_is_op(id) && dep[id] > 0 && self.is_live(id))
                    .map(|id| {
                        let from = g.node_info(id).rows().max(1) - dep[id];
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
        let inputs: Vec<NodeId> = (0..g.node_count()).filter(|&id| g.node_is_input(id)).collect();
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
        let n = g.node_info(input).rows().max(1);
        let dep = dependent_rows(self, input, n - 1)?;
        let header = |id: NodeId| self.band_header(id);
        let input_bytes = (self.row_bytes[input] * n + header(input)) as f64;
        let tail_s: f64 = (0..g.node_count())
            .filter(|&id| g.node_is_op(id) && dep[id] > 0 && self.is_live(id))
            .map(|id| self.op_time(Side::Server, id, dep[id]))
            .sum();
        let output_bytes: usize = g.outputs().iter().filter(|&&o| dep[o] > 0).map(|&o| self.row_bytes[o] * dep[o] + header(o)).sum();
        Some(PipelineTerms { input_bytes, tail_s, output_bytes: output_bytes as f64 })
    }
}
