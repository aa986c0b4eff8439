//! How far server-side pipelining can go under exact halos: a lower bound on the makespan of
//! every plan in which the robot only sends the graph input and the server computes every op.
//!
//! Whatever the chunking and order, every output row that depends on the input's last row can
//! only be computed after that row has arrived, and the server computes one kernel at a time.
//! So such a plan takes at least: the whole input over the uplink (one message's overhead, its
//! bytes at the link's bandwidth, the latency), then the server time of every op's rows that
//! depend on the last input row (one kernel per op, the fewest), then those rows of the outputs
//! over the downlink. Receptive fields decide the middle term: the deep layers of a 224x224
//! CNN depend on the last input row in every row, which is why exactness caps the gain of
//! hiding the server's compute behind the upload.
//!
//! Where the server's compute outweighs the upload (a 3D grid, a fast link), a second term
//! binds: the server computes nothing before the first input row arrives, then runs every op
//! whole (chunks of `r` rows at `a + b r` each take at least the whole op's time), and its last
//! kernel produces output rows (a kernel whose result feeds no output is not needed, so any
//! later kernel would be) that still cross the downlink. So such a plan also takes at least:
//! one input row over the uplink, the server time of every op, one output row over the
//! downlink. And where the outputs outweigh the input (a raw 3D grid), a third: every output
//! byte crosses the downlink, none before the first input row has come up. The bound is the
//! largest of the three.

use super::Simulator;
use crate::graph::NodeId;
use crate::plan::Side;
use crate::rows::Footprint;

/// Per value, how many of its rows depend on the graph input's last row; `None` when the
/// dependent rows of some value are not a suffix of its rows (no bound is claimed then).
fn dependent_rows(sim: &Simulator<'_>, input: NodeId) -> Option<Vec<usize>> {
    let g = sim.graph();
    let mut dep = vec![0usize; g.nodes.len()];
    dep[input] = 1;
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

/// The three terms of [`Simulator::server_pipeline_bound`], for callers that price the same
/// pipelined offload under other links or server speeds (the fleet simulator, `lop::fleet`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PipelineTerms {
    /// Bytes of the whole graph input on the wire (one band header included).
    pub input_bytes: f64,
    /// Server seconds of the rows that depend on the input's last row (one kernel per op).
    pub tail_s: f64,
    /// Bytes of the output rows that depend on the input's last row (a band header each).
    pub output_bytes: f64,
}

impl Simulator<'_> {
    /// The lower bound described in the module docs, in seconds; `None` without a link, for
    /// graphs with more than one input, or when dependent rows are not suffixes.
    pub fn server_pipeline_bound(&self) -> Option<f64> {
        let link = self.config().link;
        if link.bandwidth <= 0.0 {
            return None;
        }
        let t = self.server_pipeline_terms()?;
        let transfer = |bytes: f64| link.overhead_s + bytes / link.bandwidth + link.latency_s;
        let pipelined = transfer(t.input_bytes) + t.tail_s + transfer(t.output_bytes);
        let g = self.graph();
        let header = |id: NodeId| self.band_header(id);
        let input = self.single_input()?;
        let first_row = transfer((self.row_bytes[input] + header(input)) as f64);
        // The compute term: every live op whole on the server, then one output row down.
        let compute: f64 = (0..g.nodes.len())
            .filter(|&id| g.is_op(id) && self.is_live(id))
            .map(|id| self.op_time(Side::Server, id, g.nodes[id].info.rows()))
            .sum();
        let last_row = g.outputs.iter().map(|&o| self.row_bytes[o] + header(o)).min().unwrap_or(0);
        // The download term: every output byte.
        let outputs: usize = g.outputs.iter().map(|&o| self.row_bytes[o] * g.nodes[o].info.rows().max(1) + header(o)).sum();
        Some(pipelined.max(first_row + compute + transfer(last_row as f64)).max(first_row + transfer(outputs as f64)))
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

    /// The bound's terms, independent of the link; `None` for graphs with more than one input
    /// or when dependent rows are not suffixes.
    pub fn server_pipeline_terms(&self) -> Option<PipelineTerms> {
        let g = self.graph();
        let input = self.single_input()?;
        let dep = dependent_rows(self, input)?;
        let header = |id: NodeId| self.band_header(id);
        let input_bytes = (self.row_bytes[input] * g.nodes[input].info.rows().max(1) + header(input)) as f64;
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
        let pool = || Op::MaxPool(Pool::same_3x3());
        let mut b = GraphBuilder::new("chain");
        let x = b.input("x", vec![1, 1, 16, 4], DType::U8);
        let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
        let p1 = b.add("pool1", pool(), &[n]).expect("pool1");
        let p2 = b.add("pool2", pool(), &[p1]).expect("pool2");
        b.output(p2);
        b.build().expect("graph")
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
        let robot = Profile::synthetic(&g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
        // Kernels with a high fixed cost, so that the tail outweighs the other two terms.
        let server = Profile::synthetic(&g, Side::Server, |_| Fit::new(5e-3, 1e-4)).expect("server");
        let link = Link { bandwidth: 1e4, latency_s: 2e-3, overhead_s: 1e-4 };
        let sim = Simulator::new(&g, &robot, &server, SimConfig { link, ..SimConfig::default() }).expect("sim");
        let dep = dependent_rows(&sim, 0).expect("suffixes");
        // The last input row reaches norm's last row, pool1's last 2 rows and pool2's last 3.
        assert_eq!(&dep[1..], &[1, 2, 3]);
        // Upload 64 bytes, server tail (1+2+3 rows), download pool2's last 3 rows (48 bytes),
        // each message with its band header: 41.4 ms, against 36.4 for the compute term and 40.6
        // for the download term.
        let h = crate::sim::band_header_bytes(4) as f64;
        let want = (1e-4 + (64.0 + h) / 1e4 + 2e-3) + (3.0 * 5e-3 + 6.0 * 1e-4) + (1e-4 + (48.0 + h) / 1e4 + 2e-3);
        let got = sim.server_pipeline_bound().expect("bound");
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        // No server-side plan beats it, however finely chunked; the finest comes close.
        let whole = baseline::server_only(&sim, 16).expect("server-only").cost.expect("feasible");
        assert!(whole.makespan_s > got);
        no_chunking_beats(&sim, &g, got, &[2, 4, 8, 16]);
    }

    /// A server much slower than the link: the compute term binds, and no server-side plan,
    /// however chunked, beats it.
    #[test]
    fn a_compute_bound_server_is_bound_by_its_whole_work() {
        let g = chain();
        let robot = Profile::synthetic(&g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
        let server = Profile::synthetic(&g, Side::Server, |_| Fit::new(1e-4, 1e-3)).expect("server");
        let link = Link { bandwidth: 1e7, latency_s: 1e-4, overhead_s: 1e-5 };
        let sim = Simulator::new(&g, &robot, &server, SimConfig { link, ..SimConfig::default() }).expect("sim");
        // One input row (4 bytes) up, 3 ops of 16 rows, one output row (16 bytes) down, each
        // message with its band header.
        let h = crate::sim::band_header_bytes(4) as f64;
        let want = (1e-5 + (4.0 + h) / 1e7 + 1e-4) + 3.0 * (1e-4 + 16.0 * 1e-3) + (1e-5 + (16.0 + h) / 1e7 + 1e-4);
        let got = sim.server_pipeline_bound().expect("bound");
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        let t = sim.server_pipeline_terms().expect("terms");
        assert!(got > 1.5 * (t.input_bytes / 1e7 + t.tail_s + t.output_bytes / 1e7), "the compute term binds");
        no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8, 16]);
    }

    /// Outputs far larger than the input: every output byte comes down after the first input
    /// row went up.
    #[test]
    fn large_outputs_bound_by_their_download() {
        let g = chain();
        let robot = Profile::synthetic(&g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
        let server = Profile::synthetic(&g, Side::Server, |_| Fit::new(0.0, 0.0)).expect("server");
        let link = Link { bandwidth: 1e4, latency_s: 2e-3, overhead_s: 1e-4 };
        let sim = Simulator::new(&g, &robot, &server, SimConfig { link, ..SimConfig::default() }).expect("sim");
        // The input is 64 bytes, the float output 256: one 4-byte row up, 256 bytes down, each
        // message with its band header.
        let h = crate::sim::band_header_bytes(4) as f64;
        let want = (1e-4 + (4.0 + h) / 1e4 + 2e-3) + (1e-4 + (256.0 + h) / 1e4 + 2e-3);
        let got = sim.server_pipeline_bound().expect("bound");
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
        no_chunking_beats(&sim, &g, got, &[1, 4, 16]);
    }
}
