//! The fluid bound: a lower bound on the makespan of every plan the planner can express, robot
//! bands included, that ignores what makes exact splitting hard (halos, kernel launches,
//! per-message costs, latency, ordering) and keeps what no plan escapes: each side's compute,
//! each direction's bytes, and the rows each side must hold to compute its band.
//!
//! ## The relaxation
//!
//! A plan gives every op `v` (with `N_v` rows) a robot band, the prefix `[0, x_v N_v)`, and a
//! server band, the suffix `[N_v - y_v N_v, N_v)`, with `x_v + y_v >= 1` (every row is computed;
//! overlaps are replicated). The graph input is the robot's (`x = 1`, `y = 0`). Then, whatever
//! the chunking and order:
//!
//! - **Robot compute** is at least `sum_v x_v R_v`, with `R_v` the robot's time for `v` whole:
//!   a kernel of `r` rows takes `a + b r >= (a + b N) r / N` (`a, b >= 0`, `r <= N`), so the
//!   chunks of a band of `x N` rows take at least `x` times the whole op. Likewise the **server**,
//!   `sum_v y_v S_v`.
//! - **Uplink**: the server must hold every row its band of `v` reads. Where an edge's footprint
//!   contains the proportional rows (checked below), the server's band of `v` reads at least the
//!   suffix `y_v` of each input `u`; it computed the suffix `y_u` itself, so at least
//!   `(y_v - y_u)^+` of `u` crosses, once for all consumers: `B_u max_v (y_v - y_u)^+` bytes
//!   (`B_u` the value's bytes on the wire). **Downlink** likewise for the robot's prefixes,
//!   `B_u max_v (x_v - x_u)^+`, plus `(1 - x_o) B_o` for every graph output `o`, which must end
//!   whole on the robot.
//!
//! Each resource works one thing at a time inside `[0, makespan]`, so the makespan is at least
//! each of the four totals (bytes over the bandwidth for the links), hence at least any convex
//! combination `L_lambda(x, y)` of them. For fixed weights `lambda` the minimum of `L_lambda` over
//! all fractional `x, y` is a minimum cut: with `y' = 1 - y`, every term is linear in one
//! variable or a weighted `(a_i - a_j)^+` (the constraint `x >= y'` is one with infinite
//! weight), and such a sum is minimised at a threshold of any fractional point (every threshold
//! is a cut, and the sum equals the integral of the cuts over thresholds), so the binary
//! minimum, the cut, is the fractional minimum. So for every `lambda`, and every plan,
//! `makespan >= min-cut(lambda)`, and the bound is the largest such cut over a grid of `lambda`
//! (by LP duality, the grid's maximum approaches the fluid relaxation's optimum from below).
//!
//! An edge whose footprint does not contain the proportional rows (the server's band of `v`
//! starting at row `a` reads from above `floor(a N_u / N_v)`, or the robot's prefix ending at
//! `b` reads less than `ceil(b N_u / N_v)` rows) is dropped from that side's coupling, which
//! only weakens the bound. Values that are not live (no graph output depends on them) are left
//! out, as is everything the bound does not need (latency, overheads): a true lower bound.

use super::Simulator;
use crate::flow::Network;
use crate::graph::NodeId;
use crate::ops::Op;
use crate::plan::Side;
use crate::rows::Footprint;

/// Steps per unit of the weight grid (weights `i / STEPS` over the 4 resources).
const STEPS: usize = 8;

/// Which couplings of an edge `u -> v` the bound may use.
#[derive(Debug, Clone, Copy)]
struct Containment {
    /// The server's suffix band of `v` reads at least the proportional suffix of `u`.
    suffix: bool,
    /// The robot's prefix band of `v` reads at least the proportional prefix of `u`.
    prefix: bool,
}

fn containment(sim: &Simulator<'_>, v: NodeId, k: usize) -> Containment {
    let g = sim.graph();
    let (nu, nv) = (g.nodes[g.nodes[v].inputs[k]].info.rows().max(1), g.nodes[v].info.rows().max(1));
    let mut c = Containment { suffix: true, prefix: true };
    for a in 0..nv {
        match g.footprint(v, k, &(a..nv)) {
            Footprint::Rows(r) => c.suffix &= r.start <= a * nu / nv && r.end >= nu,
            Footprint::Broadcast | Footprint::Whole => {}
        }
        match g.footprint(v, k, &(0..a + 1)) {
            Footprint::Rows(r) => c.prefix &= r.start == 0 && r.end >= ((a + 1) * nu).div_ceil(nv),
            Footprint::Broadcast | Footprint::Whole => {}
        }
    }
    c
}

impl Simulator<'_> {
    /// The fluid bound of the module docs, in seconds (`None` without a link: robot-only is then
    /// the only plan).
    pub fn fluid_bound(&self) -> Option<f64> {
        let g = self.graph();
        let link = self.config().link;
        if link.bandwidth <= 0.0 {
            return None;
        }
        let n = g.nodes.len();
        let live_op = |id: NodeId| g.is_op(id) && self.is_live(id);
        let is_input = |id: NodeId| matches!(g.nodes[id].op, Op::Input);
        let whole = |side, id| self.op_time(side, id, g.nodes[id].info.rows());
        // Per edge (consumer, input slot): which couplings hold, computed once.
        let edges: Vec<(NodeId, NodeId, Containment)> = (0..n)
            .filter(|&v| live_op(v))
            .flat_map(|v| g.nodes[v].inputs.iter().enumerate().map(move |(k, &u)| (u, v, k)))
            .filter(|&(u, _, _)| live_op(u) || is_input(u))
            .map(|(u, v, k)| (u, v, containment(self, v, k)))
            .collect();
        let seconds = |id: NodeId| self.value_bytes(id) as f64 / link.bandwidth;
        let mut best: f64 = 0.0;
        for wr in 0..=STEPS {
            for ws in 0..=STEPS - wr {
                for wu in 0..=STEPS - wr - ws {
                    let wd = STEPS - wr - ws - wu;
                    let w = |i: usize| i as f64 / STEPS as f64;
                    let (lr, ls, lu, ld) = (w(wr), w(ws), w(wu), w(wd));
                    // Nodes: x_v = v, y'_v = n + v, up helper 2n + u, down helper 3n + u.
                    let (source, sink) = (4 * n, 4 * n + 1);
                    let mut net = Network::new(4 * n + 2);
                    for id in 0..n {
                        let (x, y) = (id, n + id);
                        if is_input(id) {
                            net.edge(source, x, f64::INFINITY);
                            net.edge(source, y, f64::INFINITY);
                        } else if live_op(id) {
                            net.edge(x, sink, lr * whole(Side::Robot, id));
                            net.edge(source, y, ls * whole(Side::Server, id));
                            net.edge(y, x, f64::INFINITY);
                            if g.outputs.contains(&id) {
                                net.edge(source, x, ld * seconds(id));
                            }
                        }
                    }
                    for &(u, v, c) in &edges {
                        if c.suffix {
                            // min over consumers of y'_v, then (y'_u - min)^+.
                            let h = 2 * n + u;
                            net.edge(h, n + v, f64::INFINITY);
                        }
                        if c.prefix {
                            // max over consumers of x_v, then (max - x_u)^+.
                            let h = 3 * n + u;
                            net.edge(v, h, f64::INFINITY);
                        }
                    }
                    for u in (0..n).filter(|&u| live_op(u) || is_input(u)) {
                        net.edge(n + u, 2 * n + u, lu * seconds(u));
                        net.edge(3 * n + u, u, ld * seconds(u));
                    }
                    let (_, cut) = net.min_cut(source, sink);
                    best = best.max(cut);
                }
            }
        }
        Some(best)
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::{DType, Graph, GraphBuilder};
    use crate::ops::{BinaryOp, Op, Pool, UnaryOp};
    use crate::plan::{Plan, Side};
    use crate::profile::{Fit, Profile};
    use crate::rng::Rng;
    use crate::sim::{Link, SimConfig, Simulator};

    /// A random DAG of relus, 3x3 max pools (halos), stride-2 pools and adds over a u8 input.
    fn random_dag(seed: u64, ops: usize) -> Graph {
        let mut rng = Rng::new(seed);
        let mut b = GraphBuilder::new(format!("fdag{seed}"));
        let x = b.input("x", vec![1, 2, 16, 8], DType::U8);
        let first = b.add("norm", Op::NormalizeU8 { mean: vec![0.5, 0.5], std: vec![0.25, 0.25] }, &[x]).expect("norm");
        let mut vals = vec![first];
        for i in 1..ops {
            let a = vals[vals.len() - 1 - rng.below(vals.len().min(3))];
            let shape = |v: usize| b.nodes()[v].info.shape.clone();
            let (op, ins) = match rng.below(4) {
                0 => (Op::Unary(UnaryOp::Relu), vec![a]),
                1 => (Op::MaxPool(Pool::square2d(3, 1, 1)), vec![a]),
                2 if shape(a)[2] >= 4 => (Op::MaxPool(Pool::square2d(2, 2, 0)), vec![a]),
                _ => {
                    let same: Vec<usize> = vals.iter().copied().filter(|&v| shape(v) == shape(a)).collect();
                    (Op::Binary(BinaryOp::Add), vec![a, same[rng.below(same.len())]])
                }
            };
            vals.push(b.add(format!("op{i}"), op, &ins).expect("op"));
        }
        let consumed: std::collections::HashSet<usize> = b.nodes().iter().flat_map(|n| n.inputs.clone()).collect();
        for &v in &vals {
            if !consumed.contains(&v) {
                b.output(v);
            }
        }
        b.build().expect("graph")
    }

    /// A random plan: per op, a robot prefix and a server suffix covering every row (sometimes
    /// overlapping), in random chunk counts.
    fn random_plan(g: &Graph, rng: &mut Rng) -> Plan {
        let units = 8;
        let mut plan = Plan::server_only(g, units);
        for id in 0..g.nodes.len() {
            if !g.is_op(id) {
                continue;
            }
            let u = crate::rows::effective_units(g.nodes[id].info.rows(), units);
            let robot_end = rng.below(u + 1);
            let server_start = robot_end.saturating_sub(rng.below(2));
            let s = &mut plan.splits[id];
            s.robot_end = robot_end;
            s.server_start = server_start;
            s.robot_chunks = 1 + rng.below(3);
            s.server_chunks = 1 + rng.below(3);
        }
        plan
    }

    /// The bound holds for every plan: random plans (robot bands, replication, chunks) on random
    /// DAGs under random profiles and links are never faster than it, and it is not vacuous.
    #[test]
    fn no_plan_beats_the_fluid_bound() {
        let mut checked = 0;
        let mut tight = 0.0f64;
        for seed in 0..30 {
            let g = random_dag(seed, 4 + seed as usize % 9);
            let mut rng = Rng::new(seed ^ 0xf1);
            let t: Vec<(f64, f64)> = (0..g.nodes.len()).map(|_| (rng.unit() * 1e-3, rng.unit() * 5e-4)).collect();
            let speed = 1.0 + rng.unit() * 8.0;
            let r = Profile::synthetic(&g, Side::Robot, |id| Fit::new(t[id].0, t[id].1)).expect("robot");
            let s = Profile::synthetic(&g, Side::Server, |id| Fit::new(t[id].0 / speed, t[id].1 / speed)).expect("server");
            let link = Link { bandwidth: [2e4, 1e5, 1e6][rng.below(3)], latency_s: rng.unit() * 1e-3, overhead_s: rng.unit() * 1e-4 };
            let sim = Simulator::new(&g, &r, &s, SimConfig { link, ..SimConfig::default() }).expect("sim");
            let bound = sim.fluid_bound().expect("a link");
            assert!(bound > 0.0, "seed {seed}: a vacuous bound");
            let mut plans = vec![Plan::robot_only(&g, 8), Plan::server_only(&g, 8)];
            plans.extend((0..40).map(|_| random_plan(&g, &mut rng)));
            for plan in plans {
                let Ok(cost) = sim.cost(&plan) else { continue };
                assert!(
                    cost.makespan_s >= bound * (1.0 - 1e-9),
                    "seed {seed}: a plan takes {} s, below the bound {bound} s",
                    cost.makespan_s
                );
                tight = tight.max(bound / cost.makespan_s);
                checked += 1;
            }
            if let Some(pipe) = sim.server_pipeline_bound() {
                // Both are lower bounds of server-only; neither needs to dominate the other.
                assert!(pipe.is_finite());
            }
        }
        assert!(checked > 600, "{checked} plans checked");
        assert!(tight > 0.5, "the bound is far from every plan (best ratio {tight})");
    }
}
