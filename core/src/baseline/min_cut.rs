//! The best layer partition under the sequential cost model, in polynomial time for any DAG: a
//! minimum s-t cut (as DADS and DSCCS solve it).
//!
//! ## The sequential cost model
//!
//! The robot computes the ops of its set `D` one after another, every value it holds that an op
//! outside `D` reads crosses the uplink once, the server computes the other ops, and every
//! output the server computed crosses the downlink once. Nothing overlaps:
//!
//! `cost(D) = sum_{v in D} r_v + sum_{v not in D} s_v + sum_{u sent} up_u + sum_{o output not in D} down_o`
//!
//! with `r_v` / `s_v` the robot / server time of op `v` whole, `up_u` the time to send value `u`
//! (a graph input, or an op in `D`, read by an op outside `D`) and `down_o` the time to return
//! output `o`; each transfer costs `overhead + bytes / bandwidth + latency`. `D` is down-closed:
//! it holds the input, so it computes an op only if it computes the op's computing inputs.
//!
//! ## The network, and why its minimum cut is the optimum
//!
//! Source side = robot, sink side = server. For every live op `v`: `source -> v` of capacity
//! `s_v` (plus `down_v` when `v` is an output), cut exactly when `v` is on the server, and
//! `v -> sink` of capacity `r_v`, cut exactly when `v` is on the robot. For every producer `u`
//! (the input or a live op) a helper node `a_u` with `u -> a_u` of capacity `up_u` and
//! `a_u -> c` of infinite capacity for each live consumer `c`: if `u` is on the robot and some
//! consumer on the server, `a_u` must be on the server (else an infinite edge is cut), so `up_u`
//! is paid once; if every consumer is on the robot, `a_u` goes with them and nothing is paid; if
//! `u` is on the server, no edge from `u` leaves the source side. Down-closure: `v -> p` of
//! infinite capacity for each computing input `p` of `v` (a robot op whose input is on the
//! server would cut it), and `source -> input` is infinite. So every finite cut is a down-closed
//! `D` and its capacity is `cost(D)`, and conversely: the minimum cut is the optimal `D`. The
//! maximum flow (Dinic's algorithm) runs in `O(V^2 E)`, polynomial, where enumerating down-sets is
//! exponential on DAGs with parallel branches.
//!
//! The simulator pipelines what this model serialises, so its optimum is not always the
//! simulator's; [`super::best_layer_partition`] uses several weightings of these terms as seeds.

use crate::flow::Network;
use crate::plan::Side;
use crate::sim::Simulator;
use crate::structure::NodeId;
use crate::structure::Structure;

/// The terms of the sequential cost model for one link, seconds (or any consistent unit).
#[derive(Debug, Clone, PartialEq)]
pub struct SequentialCosts {
    /// Per node: robot time of the op whole (0 for non-ops and dead ops).
    pub robot: Vec<f64>,
    /// Per node: server time of the op whole.
    pub server: Vec<f64>,
    /// Per node: time to send its value up (graph inputs and ops).
    pub up: Vec<f64>,
    /// Per node: time to return it when it is a graph output computed on the server.
    pub down: Vec<f64>,
    /// Per node: whether it is an op whose value reaches a graph output (dead ops cost nothing
    /// and read nothing).
    pub live: Vec<bool>,
}

impl SequentialCosts {
    /// The costs under `sim`'s profiles and link, with the transfer terms times
    /// `transfer_weight` and the robot terms times `robot_weight` (weightings steer the cut
    /// towards what the pipelined simulator rewards; 1 and 1 is the model itself).
    pub fn from_sim(sim: &Simulator<'_>, robot_weight: f64, transfer_weight: f64) -> SequentialCosts {
        let g = sim.graph();
        let link = sim.config().link;
        let n = g.node_count();
        let transfer = |bytes: usize| {
            if link.bandwidth > 0.0 {
                (link.overhead_s + bytes as f64 / link.bandwidth + link.latency_s) * transfer_weight
            } else {
                f64::INFINITY
            }
        };
        let live_op = |id: NodeId| g.node_is_op(id) && sim.is_live(id);
        let whole = |side, id: NodeId| if live_op(id) { sim.op_time(side, id, g.node_info(id).rows()) } else { 0.0 };
        SequentialCosts {
            robot: (0..n).map(|id| whole(Side::Robot, id) * robot_weight).collect(),
            server: (0..n).map(|id| whole(Side::Server, id)).collect(),
            up: (0..n).map(|id| transfer(sim.value_bytes(id))).collect(),
            down: (0..n).map(|id| if g.outputs().contains(&id) && live_op(id) { transfer(sim.value_bytes(id)) } else { 0.0 }).collect(),
            live: (0..n).map(live_op).collect(),
        }
    }

    /// `cost(D)` of the module docs for the robot set `robot` (per node; non-ops ignored).
    pub fn cost(&self, g: &dyn Structure, robot: &[bool]) -> f64 {
        let on_robot = |id: NodeId| g.node_is_input(id) || (g.node_is_op(id) && robot.get(id).copied().unwrap_or(false));
        let consumers = g.consumers();
        let mut total = 0.0;
        for (id, readers) in consumers.iter().enumerate() {
            if self.live[id] {
                total += if on_robot(id) { self.robot[id] } else { self.server[id] + self.down[id] };
            }
            let producer = g.node_is_input(id) || g.node_is_op(id);
            if producer && on_robot(id) && readers.iter().any(|&c| self.live[c] && !on_robot(c)) {
                total += self.up[id];
            }
        }
        total
    }
}

/// The robot set `D` (per node) minimising [`SequentialCosts::cost`], by a minimum cut.
pub fn min_cut_partition(g: &dyn Structure, costs: &SequentialCosts) -> Vec<bool> {
    let n = g.node_count();
    let (source, sink) = (2 * n, 2 * n + 1);
    let mut net = Network::new(2 * n + 2);
    let consumers = g.consumers();
    for (id, readers) in consumers.iter().enumerate() {
        let is_input = g.node_is_input(id);
        let live = costs.live[id];
        if is_input {
            net.edge(source, id, f64::INFINITY);
        }
        if live {
            net.edge(source, id, costs.server[id] + costs.down[id]);
            net.edge(id, sink, costs.robot[id]);
            for &p in g.node_inputs(id) {
                if g.node_is_op(p) {
                    net.edge(id, p, f64::INFINITY);
                }
            }
        }
        if is_input || live {
            let readers: Vec<NodeId> = readers.iter().copied().filter(|&c| costs.live[c]).collect();
            if !readers.is_empty() {
                let helper = n + id;
                net.edge(id, helper, costs.up[id]);
                for c in readers {
                    net.edge(helper, c, f64::INFINITY);
                }
            }
        }
    }
    let (robot_side, _) = net.min_cut(source, sink);
    (0..n).map(|id| g.node_is_op(id) && robot_side[id]).collect()
}
