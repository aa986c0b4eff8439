//! The fluid bound: a lower bound on the makespan of every plan the planner can express, robot
//! bands included, that ignores what makes exact splitting hard (halos, kernel launches,
//! most per-message costs and latency, ordering) and keeps what no plan escapes: each side's
//! compute, each direction's bytes, the rows each side must hold to compute its band, and the
//! message the server waits for before it can start.
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
//! `makespan >= min-cut(lambda)`, and the bound is the largest such cut found. The weights are
//! searched by cutting planes: the weights best against the cuts seen so far (a grid over the
//! simplex, refined around its best point), then the true minimum cut at those weights, until
//! that finds no lower cut. Whatever the search finds is a true minimum cut at some weights, so
//! the search's precision only decides how tight the bound is, never whether it holds; by LP
//! duality its maximum is the fluid relaxation's optimum, `min` over fractional splits of the
//! largest total.
//!
//! ## Latency
//!
//! Each resource's work also lies inside a shorter window than `[0, makespan]` in any plan in
//! which the server computes something. Every server kernel reads rows that crossed the
//! uplink (every live op depends on the graph input, which only the robot holds), so the
//! server starts no sooner than one message can arrive: the link's latency and per-message
//! overhead. And the uplink's last message still has to arrive, a latency after it was sent,
//! having held the link for its overhead too. So such a plan takes at least the server's total
//! plus latency and overhead, and at least the uplink's total plus the same; these leads
//! (`Fluid::lead_s`) are added to those two totals in every cut's weighted sum, which stays a
//! bound for the same reason as before. Only the plan in which the server computes nothing is
//! left: the robot then computes every live op whole, so it takes at least the sum of their
//! robot times, and the bound is the smaller of that and the relaxation's value. Where some
//! live op does not depend on the input, or has an output row that reads no input row (a
//! convolution padded past its kernel), there are no leads.
//!
//! ## Global ops are whole
//!
//! That optimum may mix cuts that put a global op (a barrier: reshape, concat of flattened
//! heads, the post-processing stage) on different sides, as if a fraction of it ran on each:
//! at low bandwidth, a mix of robot-only and server-only on the same rows. No plan can do that:
//! a global op is computed whole, on the robot (`x = 1`) or on the server (`y = 1`). Pinning a
//! variable to 0 or 1 keeps the threshold argument (a threshold leaves a 0 or 1 alone), so the
//! relaxation with some global ops pinned is solved the same way, and its value bounds every
//! plan that keeps those ops where pinned. The bound is a best-first branch and bound over the
//! sides of the global ops: take the branch of lowest value; if the cuts binding at its
//! optimum (within a small slack) place some unpinned global op on different sides, replace
//! the branch by its two children, that op pinned to the robot and to the server; otherwise
//! stop. Every plan keeps the pins of some branch of the frontier, a child's value is at least
//! its parent's (it is a restriction), so the lowest value of the frontier bounds every plan
//! at every step, and a search that runs out of its budget of cuts still returns a bound.
//! A branch whose binding cuts agree on every global op has the value it would have with all
//! of them pinned there, so stopping there loses nothing. Where the simulator pins the
//! post-processing stage to one side ([`crate::sim::SimConfig::post_side`]), the root holds
//! that pin: every plan the simulator accepts keeps it.
//!
//! An edge whose footprint does not contain the proportional rows (the server's band of `v`
//! starting at row `a` reads from above `floor(a N_u / N_v)` or not to `u`'s last row, or the
//! robot's prefix ending at `b` reads less than `ceil(b N_u / N_v)` rows or not from row 0)
//! misses them by some rows of slack `s`: the largest shortfall of the start plus that of the
//! end over every `a` (`b`). A step-2 row slice (YOLOX's Focus) misses by one. Its side then
//! holds at least `(y_v - y_u) N_u - s` rows of `u` it did not compute (if its reads reach its
//! own rows, it lacks those from their start, at most `s` below the proportional row; if not, it
//! lacks all it reads, at least `y_v N_u - s`), so charging `(y_v - y_u)^+` overcharges by at
//! most `s` rows. So the coupling may be kept if the cut is lowered by each value's largest
//! slack over its consumers, in seconds of its bytes, times the link's weight, whether the cut
//! uses the coupling or not (the shortfall is not linear in the split); or the coupling may be
//! dropped, which only weakens the bound. Each way gives a bound, and the bound is the larger
//! of the two searches: keeping wins where the coupling carries a frame (a Focus slice at the
//! input), dropping where a row of slack on a large value costs more than its coupling gains
//! (a ResNet's 1x1 stride-2 shortcut misses its input's last row). Edges whose slack exceeds
//! `N_u / 64` rows (and one) are always dropped. Values that are not live (no graph output
//! depends on them) are left out, as is everything the bound does not need (latency and
//! overheads beyond the leads): a true lower bound.

use super::Simulator;
use crate::flow::Network;
use crate::plan::Side;
use crate::rows::Footprint;
use crate::structure::NodeId;

/// Steps per unit of the grid on which the cutting planes pick weights (`i / GRID`).
const GRID: usize = 40;

/// Finer grids searched around the best weights, and their half-width in steps.
const ZOOMS: usize = 3;
const ZOOM_STEPS: usize = 10;

/// Most cutting planes per relaxation.
const MAX_PLANES: usize = 40;

/// Most minimum cuts one bound computes, over all its branches; what is left unexplored then
/// keeps its parent's value, which bounds it too.
#[doc(hidden)]
pub const CUT_BUDGET: usize = 2000;

/// Cuts within this relative distance of the best at its weights count as the ones it mixes.
const ACTIVE_SLACK: f64 = 1e-2;

/// A relaxation solved: its value, the cut that attains it, and the cuts binding there.
#[doc(hidden)]
pub struct Solved {
    pub value: f64,
    side: Vec<bool>,
    active: Vec<Vec<bool>>,
}

/// Weights that (nearly) maximise the smallest weighted total over `cuts`, and that total: the
/// best point of a grid over the simplex, then of finer grids around it (each step a tenth of
/// the last), so that the cuts an optimal mixture uses are all within a small slack there.
fn best_weights<'a>(cuts: impl Iterator<Item = &'a [f64; 4]> + Clone) -> ([f64; 4], f64) {
    let score = |w: &[f64; 4]| cuts.clone().map(|t| w[0] * t[0] + w[1] * t[1] + w[2] * t[2] + w[3] * t[3]).fold(f64::INFINITY, f64::min);
    let mut best = ([0.25; 4], f64::NEG_INFINITY);
    let step = 1.0 / GRID as f64;
    for a in 0..=GRID {
        for b in 0..=GRID - a {
            for c in 0..=GRID - a - b {
                let w = [a as f64 * step, b as f64 * step, c as f64 * step, (GRID - a - b - c) as f64 * step];
                let z = score(&w);
                if z > best.1 {
                    best = (w, z);
                }
            }
        }
    }
    let mut step = step;
    for _ in 0..ZOOMS {
        step /= 10.0;
        let centre = best.0;
        let span = ZOOM_STEPS as i64;
        for i in -span..=span {
            for j in -span..=span {
                for k in -span..=span {
                    let w3 = [centre[0] + i as f64 * step, centre[1] + j as f64 * step, centre[2] + k as f64 * step];
                    let rest = 1.0 - w3.iter().sum::<f64>();
                    if w3.iter().any(|&x| x < 0.0) || rest < 0.0 {
                        continue;
                    }
                    let w = [w3[0], w3[1], w3[2], rest];
                    let z = score(&w);
                    if z > best.1 {
                        best = (w, z);
                    }
                }
            }
        }
    }
    best
}

/// Which couplings of an edge `u -> v` the bound may use, and with how many rows of slack.
#[derive(Debug, Clone, Copy)]
pub struct Containment {
    /// The server's suffix band of `v` reads the proportional suffix of `u` but for at most
    /// this many rows (`None`: no coupling).
    pub suffix: Option<usize>,
    /// The robot's prefix band of `v` reads the proportional prefix of `u` but for at most this
    /// many rows.
    pub prefix: Option<usize>,
}

/// Most rows of slack a coupling may have, per row of its input (and at least one): beyond it
/// the coupling's correction would cost the bound more than the coupling gains.
const SLACK_PER_ROW: f64 = 1.0 / 64.0;

/// Which couplings of input `k` of `v` the bound may use. Public for the engine's tests.
#[doc(hidden)]
pub fn containment(sim: &Simulator<'_>, v: NodeId, k: usize) -> Containment {
    let g = sim.graph();
    let (nu, nv) = (g.node_info(g.node_inputs(v)[k]).rows().max(1), g.node_info(v).rows().max(1));
    // Suffix: how far the reads of [a, nv) start below the proportional row, and end above the
    // last row; prefix: how far the reads of [0, a + 1) end above the proportional row, and
    // start below row 0. Each is the most over every `a`.
    let (mut late_start, mut early_end, mut short_end, mut late_first) = (0, 0, 0, 0);
    for a in 0..nv {
        if let Footprint::Rows(r) = g.footprint(v, k, &(a..nv)) {
            late_start = late_start.max(r.start.saturating_sub(a * nu / nv));
            early_end = early_end.max(nu.saturating_sub(r.end));
        }
        if let Footprint::Rows(r) = g.footprint(v, k, &(0..a + 1)) {
            short_end = short_end.max(((a + 1) * nu).div_ceil(nv).saturating_sub(r.end));
            late_first = late_first.max(r.start);
        }
    }
    let most = ((nu as f64 * SLACK_PER_ROW).floor() as usize).max(1);
    let within = |slack: usize| (slack <= most).then_some(slack);
    Containment { suffix: within(late_start + early_end), prefix: within(short_end + late_first) }
}

/// The fluid bound and where it comes from: the four resource totals of the fluid split that
/// the binding weights select: the time each resource spends in that ideal split, so the
/// largest of them says which resource the ideal split is limited by.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct FluidBound {
    /// The bound, seconds.
    pub bound_s: f64,
    /// Robot compute of the ideal split, seconds.
    pub robot_s: f64,
    /// Server compute, seconds.
    pub server_s: f64,
    /// Uplink bytes over the bandwidth, seconds.
    pub up_s: f64,
    /// Downlink bytes over the bandwidth, seconds.
    pub down_s: f64,
}

/// One weighting's network, built over the graph's live ops and edges. Public for the
/// engine's tests of this bound (`lop`'s `sim_tests`), not an API.
#[doc(hidden)]
pub struct Fluid<'s, 'g> {
    sim: &'s Simulator<'g>,
    /// Per edge `u -> v`: which couplings hold.
    edges: Vec<(NodeId, NodeId, Containment)>,
    /// Seconds the couplings' slack may overcharge, uplink and downlink: per value, its largest
    /// slack over its consumers, in rows, at its bytes per row. Subtracted from every cut that
    /// keeps those couplings.
    slack_s: [f64; 2],
    /// Whether the couplings with slack are kept (else dropped): each way gives a bound, and
    /// the bound is the larger of the two searches.
    pub keep_slack: bool,
    /// Seconds each resource's total is certainly shifted by in a plan where the server computes
    /// anything, `[robot, server, up, down]` (see "Latency" in the module docs).
    pub lead_s: [f64; 4],
}

impl Fluid<'_, '_> {
    fn live_op(&self, id: NodeId) -> bool {
        self.sim.graph().node_is_op(id) && self.sim.is_live(id)
    }

    fn is_input(&self, id: NodeId) -> bool {
        self.sim.graph().node_is_input(id)
    }

    /// The leads ("Latency" in the module docs): none where the server could compute a kernel
    /// before anything arrives: a live op that does not depend on the graph input, or an
    /// output row that reads no row of any input (a convolution padded past its kernel).
    fn leads(&self) -> [f64; 4] {
        let g = self.sim.graph();
        let mut fed = vec![false; g.node_count()];
        for id in 0..g.node_count() {
            fed[id] = self.is_input(id) || (g.node_is_op(id) && g.node_inputs(id).iter().any(|&u| fed[u]));
        }
        let reads_nothing = |id: NodeId| {
            (0..g.node_info(id).rows().max(1)).any(|r| {
                (0..g.node_inputs(id).len()).all(|k| matches!(g.footprint(id, k, &(r..r + 1)), Footprint::Rows(f) if f.is_empty()))
            })
        };
        if (0..g.node_count()).any(|id| self.live_op(id) && (!fed[id] || reads_nothing(id))) {
            return [0.0; 4];
        }
        let link = self.sim.config().link;
        [0.0, link.latency_s + link.overhead_s, link.latency_s + link.overhead_s, 0.0]
    }

    fn whole(&self, side: Side, id: NodeId) -> f64 {
        self.sim.op_time(side, id, self.sim.graph().node_info(id).rows())
    }

    fn seconds(&self, id: NodeId) -> f64 {
        self.sim.value_bytes(id) as f64 / self.sim.config().link.bandwidth
    }

    /// The minimum cut under weights `[robot, server, up, down]`: its capacity and, per network
    /// node, whether it is on the source side (nodes: `x_v` = v, `y'_v` = n + v, up helper
    /// 2n + u, down helper 3n + u).
    ///
    /// Couplings with slack are kept, with the slack's correction charged to the cut, where
    /// [`Fluid::keep_slack`] says so, else dropped; the side vector ends with one more entry,
    /// whether they were kept.
    fn cut(&self, [lr, ls, lu, ld]: [f64; 4], pins: &[Option<Side>]) -> (f64, Vec<bool>) {
        let slack = self.keep_slack;
        let g = self.sim.graph();
        let n = g.node_count();
        let (source, sink) = (4 * n, 4 * n + 1);
        let mut net = Network::new(4 * n + 2);
        for (id, pin) in pins.iter().enumerate() {
            match pin {
                // The robot computes it whole: x = 1.
                Some(Side::Robot) => net.edge(source, id, f64::INFINITY),
                // The server computes it whole: y = 1, so y' = 0.
                Some(Side::Server) => net.edge(n + id, sink, f64::INFINITY),
                None => {}
            }
        }
        for id in 0..n {
            let (x, y) = (id, n + id);
            if self.is_input(id) {
                net.edge(source, x, f64::INFINITY);
                net.edge(source, y, f64::INFINITY);
            } else if self.live_op(id) {
                net.edge(x, sink, lr * self.whole(Side::Robot, id));
                net.edge(source, y, ls * self.whole(Side::Server, id));
                net.edge(y, x, f64::INFINITY);
                if g.outputs().contains(&id) {
                    net.edge(source, x, ld * self.seconds(id));
                }
            }
        }
        for &(u, v, c) in &self.edges {
            if c.suffix.is_some_and(|rows| slack || rows == 0) {
                // The up helper is the minimum over consumers of y'_v; (y'_u - helper)^+ is paid.
                net.edge(2 * n + u, n + v, f64::INFINITY);
            }
            if c.prefix.is_some_and(|rows| slack || rows == 0) {
                // The down helper is the maximum over consumers of x_v; (helper - x_u)^+ is paid.
                net.edge(v, 3 * n + u, f64::INFINITY);
            }
        }
        for u in (0..n).filter(|&u| self.live_op(u) || self.is_input(u)) {
            net.edge(n + u, 2 * n + u, lu * self.seconds(u));
            net.edge(3 * n + u, u, ld * self.seconds(u));
        }
        let (mut side, value) = net.min_cut(source, sink);
        side.push(slack);
        if slack { (value - lu * self.slack_s[0] - ld * self.slack_s[1], side) } else { (value, side) }
    }

    /// The relaxation's value with `pins` (global ops held whole on one side), and the cuts it
    /// mixes: the largest minimum cut over the weight simplex, found by cutting planes (the
    /// weights that are best against the cuts seen so far, on a fine grid, then the true
    /// minimum cut there, until it finds no lower cut). Every value it returns is a true
    /// minimum cut at some weights, so a valid bound whatever the grid.
    pub fn solve(&self, pins: &[Option<Side>], budget: &mut usize) -> Option<Solved> {
        let dot = |w: &[f64; 4], t: &[f64; 4]| w.iter().zip(t).map(|(a, b)| a * b).sum::<f64>();
        let mut cuts: Vec<([f64; 4], Vec<bool>)> = Vec::new();
        let mut best: Option<(f64, [f64; 4], Vec<bool>)> = None;
        let lead = self.lead_s;
        let mut eval = |w: [f64; 4], cuts: &mut Vec<([f64; 4], Vec<bool>)>, budget: &mut usize| {
            *budget = budget.saturating_sub(1);
            // The bound is the cut's capacity, the minimum itself, plus the weighted leads; its
            // resource totals `t` (the same sum, split by resource) steer the search.
            let (cut, side) = self.cut(w, pins);
            let value = cut + dot(&w, &lead);
            let t = self.terms(&side);
            debug_assert!((value - dot(&w, &t)).abs() <= 1e-9 * value.abs().max(1e-12), "{value} vs {}", dot(&w, &t));
            if best.as_ref().is_none_or(|(b, _, _)| value > *b) {
                best = Some((value, w, side.clone()));
            }
            cuts.push((t, side));
            value
        };
        for k in 0..5 {
            let w = if k < 4 { std::array::from_fn(|i| if i == k { 1.0 } else { 0.0 }) } else { [0.25; 4] };
            eval(w, &mut cuts, budget);
        }
        for _ in 0..MAX_PLANES {
            if *budget == 0 {
                break;
            }
            let (w, model) = best_weights(cuts.iter().map(|(t, _)| t));
            let value = eval(w, &mut cuts, budget);
            if value >= model * (1.0 - 1e-9) {
                break;
            }
        }
        let (value, w, side) = best?;
        let active = cuts.into_iter().filter(|(t, _)| dot(&w, t) <= value * (1.0 + ACTIVE_SLACK) + 1e-15).map(|(_, s)| s).collect();
        Some(Solved { value, side, active })
    }

    /// A global op that the cuts binding in `solved` place on different sides: no plan splits a
    /// global op, so branching on it can raise the bound.
    fn split_global(&self, pins: &[Option<Side>], solved: &Solved) -> Option<NodeId> {
        let g = self.sim.graph();
        let n = g.node_count();
        (0..n).rev().find(|&id| {
            pins[id].is_none()
                && self.live_op(id)
                && !g.node_locality(id).is_local()
                && !solved.active.iter().all(|s| s[id])
                && !solved.active.iter().all(|s| !s[n + id])
        })
    }

    /// The bound with global ops held whole: best-first branch and bound over the sides of the
    /// global ops the relaxation splits. A branch's value bounds every plan keeping its pins;
    /// every plan keeps some frontier branch's pins, so the lowest frontier value is a bound,
    /// and it only rises as branches are expanded (a child's value is at least its parent's).
    /// The root holds the post-processing stage where [`SimConfig::post_side`] pins it: every
    /// plan the simulator accepts keeps it there.
    ///
    /// [`SimConfig::post_side`]: crate::sim::SimConfig::post_side
    pub fn branch_and_bound(&self, budget: &mut usize) -> Option<(f64, Vec<bool>)> {
        let g = self.sim.graph();
        let post_side = self.sim.config().post_side;
        let root_pins: Vec<Option<Side>> = (0..g.node_count()).map(|id| post_side.filter(|_| g.node_is_post(id))).collect();
        let root = self.solve(&root_pins, budget)?;
        let mut frontier = vec![(root_pins, root)];
        loop {
            let lowest = (0..frontier.len()).min_by(|&a, &b| frontier[a].1.value.total_cmp(&frontier[b].1.value))?;
            let split = self.split_global(&frontier[lowest].0, &frontier[lowest].1);
            let (Some(g), true) = (split, *budget > 0) else {
                let (_, solved) = frontier.swap_remove(lowest);
                return Some((solved.value, solved.side));
            };
            let (pins, parent) = frontier.swap_remove(lowest);
            for side in [Side::Robot, Side::Server] {
                let mut child_pins = pins.clone();
                child_pins[g] = Some(side);
                let mut child = self.solve(&child_pins, budget)?;
                if child.value < parent.value {
                    child.value = parent.value;
                    child.side = parent.side.clone();
                }
                frontier.push((child_pins, child));
            }
        }
    }

    /// The four resource totals of the split a cut describes, each with its lead, seconds.
    fn terms(&self, side: &[bool]) -> [f64; 4] {
        let g = self.sim.graph();
        let n = g.node_count();
        let mut t = [0.0; 4];
        for id in 0..n {
            if self.live_op(id) {
                let (x, y) = (side[id], !side[n + id]);
                t[0] += if x { self.whole(Side::Robot, id) } else { 0.0 };
                t[1] += if y { self.whole(Side::Server, id) } else { 0.0 };
                if g.outputs().contains(&id) && !x {
                    t[3] += self.seconds(id);
                }
            }
            if self.live_op(id) || self.is_input(id) {
                t[2] += if side[n + id] && !side[2 * n + id] { self.seconds(id) } else { 0.0 };
                t[3] += if side[3 * n + id] && !side[id] { self.seconds(id) } else { 0.0 };
            }
        }
        if side.last() == Some(&true) {
            t[2] -= self.slack_s[0];
            t[3] -= self.slack_s[1];
        }
        std::array::from_fn(|i| t[i] + self.lead_s[i])
    }
}

impl Simulator<'_> {
    /// The fluid bound of the module docs, in seconds (`None` without a link: robot-only is then
    /// the only plan).
    pub fn fluid_bound(&self) -> Option<f64> {
        self.fluid_bound_detail().map(|f| f.bound_s)
    }

    /// The fluid bound with the resource totals of the ideal split at the binding weights.
    pub fn fluid_bound_detail(&self) -> Option<FluidBound> {
        let mut fluid = self.fluid()?;
        let mut budget = CUT_BUDGET;
        let (mut bound_s, mut side) = fluid.branch_and_bound(&mut budget)?;
        if fluid.slack_s != [0.0; 2] {
            fluid.keep_slack = true;
            let mut budget = CUT_BUDGET;
            if let Some((kept, kept_side)) = fluid.branch_and_bound(&mut budget).filter(|(kept, _)| *kept > bound_s) {
                (bound_s, side) = (kept, kept_side);
            } else {
                fluid.keep_slack = false;
            }
        }
        // The leads hold for plans in which the server computes something; the others compute
        // every live op on the robot, at least one kernel each.
        if fluid.lead_s != [0.0; 4] && self.config().post_side != Some(Side::Server) {
            let robot_only: f64 =
                (0..self.graph().node_count()).filter(|&id| fluid.live_op(id)).map(|id| fluid.whole(Side::Robot, id)).sum();
            if robot_only < bound_s {
                return Some(FluidBound { bound_s: robot_only, robot_s: robot_only, server_s: 0.0, up_s: 0.0, down_s: 0.0 });
            }
        }
        let [robot_s, server_s, up_s, down_s] = fluid.terms(&side);
        // The slack's correction is charged to every cut; a link the split leaves idle reads 0.
        Some(FluidBound { bound_s, robot_s, server_s, up_s: up_s.max(0.0), down_s: down_s.max(0.0) })
    }

    /// The relaxation's networks over this graph; `None` without a link.
    pub fn fluid(&self) -> Option<Fluid<'_, '_>> {
        let g = self.graph();
        if self.config().link.bandwidth <= 0.0 {
            return None;
        }
        let mut fluid = Fluid { sim: self, edges: Vec::new(), slack_s: [0.0; 2], keep_slack: false, lead_s: [0.0; 4] };
        fluid.lead_s = fluid.leads();
        fluid.edges = (0..g.node_count())
            .filter(|&v| fluid.live_op(v))
            .flat_map(|v| g.node_inputs(v).iter().enumerate().map(move |(k, &u)| (u, v, k)))
            .filter(|&(u, _, _)| fluid.live_op(u) || fluid.is_input(u))
            .map(|(u, v, k)| (u, v, containment(self, v, k)))
            .collect();
        let mut most = vec![[0usize; 2]; g.node_count()];
        for &(u, _, c) in &fluid.edges {
            most[u][0] = most[u][0].max(c.suffix.unwrap_or(0));
            most[u][1] = most[u][1].max(c.prefix.unwrap_or(0));
        }
        let bandwidth = self.config().link.bandwidth;
        for (u, m) in most.iter().enumerate() {
            for (dir, &rows) in m.iter().enumerate() {
                fluid.slack_s[dir] += (rows * self.row_bytes[u]) as f64 / bandwidth;
            }
        }
        Some(fluid)
    }
}
