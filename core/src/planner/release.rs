//! Release cuts (the planner's step 7): each op's server chunks cut where the frame's rows
//! release them, chosen by a min-max over release times.
//!
//! In a plan where the robot only sends the frame, every server kernel waits for one input row:
//! the last its rows read, through every op on the way (the row's *release*). Cut the frame into
//! messages, and cut each op only where its rows' releases cross a message's end, at a subset
//! of the cuts of the op before it in topological order. Then every chunk can start once its
//! message has come and the chunks before it are done, and the server is one machine with jobs
//! released at the messages' arrivals: it finishes at the largest, over messages, of the
//! message's arrival plus the work released with it or later (any order that never idles while
//! work is ready does; [`Model::terms`]). That formula costs microseconds, so the search here
//! runs on it: message ends and, per message, how deep in the topological order ops cut at it
//! (the cuts of every op are then nested, as above). The simulator prices the plan it ends at,
//! which the planner keeps only when strictly better. This is what LOSS's chunk counts and
//! spreads could not express: small chunks early, large ones in the middle, and deep ops cut
//! only where the frame releases many of their rows (vgg16, u8, robot 8x, 2.95 MB/s: 96.90 ms,
//! against 98.56 for the plan of steps 1 to 6 and a pipelining bound of 93.25).

use crate::plan::{OpCuts, Plan, Side};
use crate::rows::Footprint;
use crate::sim::Simulator;
use crate::structure::NodeId;

/// One op the search cuts: its rows' releases as counts of rows released by each input row.
/// Public, with the rest of the search's model, for the engine's tests of it, not an API.
#[doc(hidden)]
pub struct Cut {
    pub id: NodeId,
    /// `below[t]`: how many of the op's rows read only input rows `< t` (length: input rows + 1).
    pub below: Vec<u32>,
}

/// The server-only plan's release-time model of one bucket.
#[doc(hidden)]
pub struct Model<'s, 'g> {
    pub sim: &'s Simulator<'g>,
    /// Input rows.
    pub rows: usize,
    /// Seconds on the link per input row, per message, and the one-way latency.
    pub row_s: f64,
    pub message_s: f64,
    pub latency_s: f64,
    /// Ops the search cuts, in topological order.
    pub ops: Vec<Cut>,
    /// Server work that waits for the whole frame (global ops, ops not cut here), seconds.
    pub last_s: f64,
    /// The input row ends an op's first chunk can end at (where the first op's releases change).
    pub ends: Vec<usize>,
}

/// Where the frame and every op are cut: message ends (input rows, increasing, the last the
/// frame's end) and, per message, how many ops (a prefix of [`Model::ops`]) cut at its end.
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub struct State {
    pub ends: Vec<usize>,
    pub depth: Vec<usize>,
}

/// Each node's release ends per row: `Some(v)` with `v[r]` one past the last input row that row
/// `r` reads (0 when it reads none); `None` for nodes that do not depend on `input`.
fn releases(sim: &Simulator<'_>, input: NodeId) -> Vec<Option<Vec<u32>>> {
    let g = sim.graph();
    let mut rel: Vec<Option<Vec<u32>>> = vec![None; g.node_count()];
    rel[input] = Some((1..=g.node_info(input).rows().max(1) as u32).collect());
    for (id, node) in (0..g.node_count()).map(|id| (id, g.node(id))) {
        if !g.node_is_op(id) {
            continue;
        }
        let rows = node.info.rows().max(1);
        let mut out: Option<Vec<u32>> = None;
        for (k, &v) in node.inputs.iter().enumerate() {
            let Some(src) = rel[v].as_ref() else { continue };
            let whole = src.iter().copied().max().unwrap_or(0);
            let o = out.get_or_insert_with(|| vec![0; rows]);
            for (r, slot) in o.iter_mut().enumerate() {
                let reach = match g.footprint(id, k, &(r..r + 1)) {
                    Footprint::Rows(f) => {
                        let f = f.start.min(src.len())..f.end.min(src.len());
                        f.map(|i| src[i]).max().unwrap_or(0)
                    }
                    Footprint::Broadcast | Footprint::Whole => whole,
                };
                *slot = (*slot).max(reach);
            }
        }
        rel[id] = out;
    }
    rel
}

impl<'s, 'g> Model<'s, 'g> {
    /// The model of `plan`'s bucket, if `plan` is one the model describes: the robot computes
    /// nothing, and one graph input carries rows.
    pub fn new(sim: &'s Simulator<'g>, plan: &Plan) -> Option<Model<'s, 'g>> {
        let g = sim.graph();
        let inputs: Vec<NodeId> = (0..g.node_count()).filter(|&id| g.node_is_input(id)).collect();
        let &[input] = &inputs[..] else { return None };
        let rows = g.node_info(input).rows();
        if rows < 2 || g.node_info(input).row_axis.is_none() {
            return None;
        }
        if (0..g.node_count()).any(|id| g.node_is_op(id) && sim.is_live(id) && !plan.rows(g, id, Side::Robot).is_empty()) {
            return None;
        }
        let rel = releases(sim, input);
        let mut ops = Vec::new();
        let mut last_s = 0.0;
        for id in (0..g.node_count()).filter(|&id| g.node_is_op(id) && sim.is_live(id)) {
            let server = plan.rows(g, id, Side::Server);
            if server.is_empty() {
                continue;
            }
            let n = g.node_info(id).rows().max(1);
            let monotone = rel[id].as_ref().filter(|v| v.windows(2).all(|w| w[0] <= w[1]) && v.first().is_some_and(|&f| f > 0));
            match monotone {
                Some(v) if g.node_locality(id).is_local() && server.len() == n && n > 1 => {
                    let mut below = vec![0u32; rows + 1];
                    for &e in v {
                        below[(e as usize).min(rows)] += 1;
                    }
                    for t in 1..=rows {
                        below[t] += below[t - 1];
                    }
                    ops.push(Cut { id, below });
                }
                _ => last_s += sim.op_time(Side::Server, id, server.len()),
            }
        }
        let first = ops.first()?;
        let mut ends: Vec<usize> = (1..=rows).filter(|&t| first.below[t] > first.below[t - 1]).collect();
        if ends.last() != Some(&rows) {
            ends.push(rows);
        }
        let link = sim.config().link;
        if link.bandwidth <= 0.0 {
            return None;
        }
        let row_bytes = sim.value_bytes(input) as f64 / rows as f64;
        Some(Model {
            sim,
            rows,
            row_s: row_bytes / link.bandwidth,
            message_s: sim.band_header(input) as f64 / link.bandwidth + link.overhead_s,
            latency_s: link.latency_s,
            ops,
            last_s,
            ends,
        })
    }

    pub fn time(&self, k: usize, rows: u32) -> f64 {
        if rows == 0 { 0.0 } else { self.sim.op_time(Side::Server, self.ops[k].id, rows as usize) }
    }

    /// Per message: its arrival plus the server work released with it or later (seconds). The
    /// largest is when the server's last local kernel can end at the soonest.
    pub fn terms(&self, s: &State) -> Vec<f64> {
        let work = self.work(s);
        let mut out = Vec::with_capacity(work.len());
        let (mut arrive, mut sent) = (self.latency_s, 0);
        let mut after: f64 = work.iter().sum();
        for (i, w) in work.iter().enumerate() {
            arrive += (s.ends[i] - sent) as f64 * self.row_s + self.message_s;
            sent = s.ends[i];
            out.push(arrive + after);
            after -= w;
        }
        out
    }

    /// Server work released at each message's arrival, seconds: at message `i`, each of the
    /// first `depth[i]` ops (every op at the last message) computes the rows it can since its
    /// previous cut. Visits message by message, each only as deep as it cuts, adding every
    /// message's kernels in op order.
    pub fn work(&self, s: &State) -> Vec<f64> {
        let q = s.ends.len();
        let mut work = vec![0.0; q];
        work[q - 1] += self.last_s;
        let mut done = vec![0u32; self.ops.len()];
        for (i, w) in work.iter_mut().enumerate() {
            let depth = if i + 1 == q { self.ops.len() } else { s.depth[i].min(self.ops.len()) };
            for (k, (op, done)) in self.ops.iter().zip(done.iter_mut()).take(depth).enumerate() {
                let c = op.below[s.ends[i]];
                *w += self.time(k, c - *done);
                *done = c;
            }
        }
        work
    }
}

/// The smooth maximum the search descends (log-sum-exp at `tau` seconds): it lowers every
/// term near the largest, not only the largest, so that moves that help the second-largest term
/// are taken too.
#[doc(hidden)]
pub fn soft_max(terms: &[f64], tau: f64) -> f64 {
    let m = hard_max(terms);
    m + tau * terms.iter().map(|t| ((t - m) / tau).exp()).sum::<f64>().ln()
}

#[doc(hidden)]
pub fn hard_max(terms: &[f64]) -> f64 {
    terms.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

impl Model<'_, '_> {
    /// The cuts of `plan` as a [`State`]: its messages at every release end any op is cut at,
    /// each as deep as the ops that all cut there.
    pub fn state_of(&self, plan: &Plan) -> State {
        let g = self.sim.graph();
        let bounds = crate::sim::chunk_bounds(g, plan, Side::Server, self.sim.config().bounds);
        // Per op, the input row ends its cuts wait for.
        let per_op: Vec<Vec<usize>> = self
            .ops
            .iter()
            .map(|op| bounds[op.id].iter().map(|r| op.below.partition_point(|&c| (c as usize) < r.end).min(self.rows)).collect())
            .collect();
        let mut ends: Vec<usize> = per_op.iter().flatten().copied().filter(|&t| t < self.rows).collect();
        ends.push(self.rows);
        ends.sort_unstable();
        ends.dedup();
        let depth = ends.iter().map(|t| per_op.iter().take_while(|c| c.contains(t)).count().max(1)).collect();
        State { ends, depth }
    }

    /// `q` messages of about equal rows (on the ends the first op can cut at), every op cut at
    /// every message.
    pub fn uniform(&self, q: usize) -> State {
        let n = self.ends.len();
        let q = q.clamp(1, n);
        let mut ends: Vec<usize> = (1..=q).map(|j| self.ends[(j * n).div_ceil(q) - 1]).collect();
        ends.dedup();
        let depth = vec![self.ops.len(); ends.len()];
        State { ends, depth }
    }

    /// The plan `base` with every op of the model cut as `s` says.
    pub fn plan(&self, base: &Plan, s: &State) -> Plan {
        let mut plan = base.clone();
        plan.server_cuts.retain(|c| !self.ops.iter().any(|op| op.id == c.node));
        let q = s.ends.len();
        for (k, op) in self.ops.iter().enumerate() {
            let mut ends: Vec<usize> =
                (0..q).filter(|&i| i + 1 == q || s.depth[i] > k).map(|i| op.below[s.ends[i]] as usize).filter(|&e| e > 0).collect();
            ends.dedup();
            let rows = self.sim.graph().node_info(op.id).rows().max(1);
            if ends.last() != Some(&rows) {
                ends.push(rows);
            }
            plan.splits[op.id].server_chunks = ends.len();
            plan.server_cuts.push(OpCuts { node: op.id, ends });
        }
        plan.server_cuts.sort_by_key(|c| c.node);
        plan
    }

    /// Visits the terms of `s` with message `i` cut by the first `d` ops, for every `d` from 1
    /// to all of them, in one pass (`visit(d, terms)`): adding op `k`'s cut at `i` splits its
    /// chunk around `i` in two, which costs one more kernel for the terms up to `i` and frees
    /// the rows above the cut from the terms after it, up to the op's next cut. One vector of
    /// terms is updated in place, so a caller that keeps few of them copies few.
    pub fn visit_depth_terms(&self, s: &State, i: usize, mut visit: impl FnMut(usize, &[f64])) {
        let q = s.ends.len();
        let n_ops = self.ops.len();
        let mut base = s.clone();
        base.depth[i] = 1;
        let mut terms = self.terms(&base);
        // Per op, the message of its previous cut before `i` and its next after.
        let mut prev = vec![None; n_ops];
        let mut m = 1;
        for j in (0..i).rev() {
            while m < s.depth[j].min(n_ops) {
                prev[m] = Some(j);
                m += 1;
            }
        }
        let mut next = vec![q - 1; n_ops];
        let mut m = 1;
        for j in i + 1..q - 1 {
            while m < s.depth[j].min(n_ops) {
                next[m] = j;
                m += 1;
            }
        }
        visit(1, &terms);
        for k in 1..n_ops {
            let op = &self.ops[k];
            let lo = prev[k].map_or(0, |j| op.below[s.ends[j]]);
            let (mid, hi) = (op.below[s.ends[i]], op.below[s.ends[next[k]]]);
            // (A cut with nothing above it changes nothing; one with nothing below it moves the
            // rows above it to `i`'s release.)
            let (r1, r2) = (mid - lo, hi - mid);
            if r1 > 0 {
                let whole = self.time(k, r1 + r2);
                let (up, down) = (self.time(k, r1) + self.time(k, r2) - whole, self.time(k, r2) - whole);
                for (j, t) in terms.iter_mut().enumerate() {
                    if j <= i {
                        *t += up;
                    } else if j <= next[k] {
                        *t += down;
                    }
                }
            }
            visit(k + 1, &terms);
        }
    }

    /// The depth of message `i` whose terms have the smallest smooth maximum (the shallowest
    /// of equals), with those terms; `None` when there are no ops. Counts the depths evaluated
    /// into `evals`. A depth whose largest term is not below the best smooth maximum so far
    /// cannot beat it (the smooth maximum is never below the largest term) and is skipped
    /// without its exponentials.
    pub fn best_depth(&self, s: &State, i: usize, tau: f64, evals: &mut usize) -> Option<(usize, Vec<f64>)> {
        let mut best: Option<(usize, f64, Vec<f64>)> = None;
        self.visit_depth_terms(s, i, |d, terms| {
            *evals += 1;
            let bar = best.as_ref().map_or(f64::INFINITY, |b| b.1);
            if hard_max(terms) >= bar {
                return;
            }
            let v = soft_max(terms, tau);
            if v < bar {
                best = Some((d, v, terms.to_vec()));
            }
        });
        best.map(|(d, _, t)| (d, t))
    }

    /// Local search from `s` on the smooth maximum of its terms: each message's depth (every
    /// depth at once, [`Model::best_depth`]), its end moved to nearby ends, removed, or split in
    /// two. Stops when a sweep finds nothing better or after `sweeps`. Returns the state with
    /// the smallest largest term seen and the terms evaluated.
    pub fn descend(&self, mut s: State, sweeps: usize) -> (State, f64, usize) {
        let mut evals = 1;
        let mut cur = self.terms(&s);
        let tau = (hard_max(&cur) * 2e-3).max(1e-9);
        let mut soft = soft_max(&cur, tau);
        let (mut best, mut best_max) = (s.clone(), hard_max(&cur));
        let mut take = |s: &mut State, cand: State, t: Vec<f64>, cur: &mut Vec<f64>, soft: &mut f64| {
            // The smooth maximum is never below the largest term: a candidate whose largest
            // term is not below the bar cannot pass it, and costs no exponentials.
            if hard_max(&t) >= *soft - 1e-12 {
                return false;
            }
            let v = soft_max(&t, tau);
            if v < *soft - 1e-12 {
                *s = cand;
                *cur = t;
                *soft = v;
                if hard_max(cur) < best_max {
                    best_max = hard_max(cur);
                    best = s.clone();
                }
                true
            } else {
                false
            }
        };
        for _ in 0..sweeps {
            let mut moved = false;
            let mut i = 0;
            while i + 1 < s.ends.len() {
                // Depth.
                let (d, t) = self.best_depth(&s, i, tau, &mut evals).unwrap_or((s.depth[i], cur.clone()));
                if d != s.depth[i] {
                    let mut c = s.clone();
                    c.depth[i] = d;
                    moved |= take(&mut s, c, t, &mut cur, &mut soft);
                }
                // End: moved, removed, split.
                let at = self.ends.partition_point(|&e| e < s.ends[i]);
                let lo = if i == 0 { 0 } else { s.ends[i - 1] };
                let hi = s.ends[i + 1];
                let mut cands = Vec::new();
                for step in [1isize, 2, 4, 8, -1, -2, -4, -8] {
                    let j = at as isize + step;
                    if let Some(&e) = usize::try_from(j).ok().and_then(|j| self.ends.get(j))
                        && lo < e
                        && e < hi
                    {
                        let mut c = s.clone();
                        c.ends[i] = e;
                        cands.push(c);
                    }
                }
                let mut c = s.clone();
                c.ends.remove(i);
                c.depth.remove(i);
                cands.push(c);
                let lo_at = self.ends.partition_point(|&e| e <= lo);
                if at > lo_at {
                    let e = self.ends[(lo_at + at) / 2];
                    if lo < e && e < s.ends[i] {
                        let mut c = s.clone();
                        c.ends.insert(i, e);
                        c.depth.insert(i, s.depth[i]);
                        cands.push(c);
                    }
                }
                for c in cands {
                    evals += 1;
                    let t = self.terms(&c);
                    if take(&mut s, c, t, &mut cur, &mut soft) {
                        moved = true;
                        break;
                    }
                }
                i += 1;
            }
            if !moved {
                break;
            }
        }
        (best, best_max, evals)
    }
}

/// Sweeps of the local search per start.
const SWEEPS: usize = 40;

/// The plan `best` with release cuts ([`crate::planner::release`]) if the simulator finds it
/// strictly better under `obj`, and the release-time evaluations and simulations run.
pub fn release_cuts(
    sim: &Simulator<'_>,
    obj: crate::sim::Objective,
    best: &(Plan, crate::sim::Cost),
) -> crate::error::Result<(Option<(Plan, crate::sim::Cost)>, usize)> {
    let Some(model) = Model::new(sim, &best.0) else { return Ok((None, 0)) };
    let mut starts = vec![model.state_of(&best.0)];
    for q in [8, 16, 32, 64] {
        starts.push(model.uniform(q));
    }
    let mut evals = 0;
    let mut found: Option<(State, f64)> = None;
    for s in starts {
        let (s, m, e) = model.descend(s, SWEEPS);
        evals += e;
        if found.as_ref().is_none_or(|f| m < f.1) {
            found = Some((s, m));
        }
    }
    let Some((s, _)) = found else { return Ok((None, evals)) };
    let plan = model.plan(&best.0, &s);
    evals += 1;
    match sim.cost(&plan) {
        Ok(c) if obj.better(&c, &best.1) => Ok((Some((plan, c)), evals)),
        Ok(_) | Err(crate::error::Error::Plan(_)) => Ok((None, evals)),
        Err(e) => Err(e),
    }
}
