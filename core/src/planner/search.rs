//! The search itself: seeds, the segment beam, and the large-neighbourhood search.

use super::PlannerConfig;
use super::moves::{band, copy_split, graded_chunks, replicate_back, set_robot, set_server, shift, units_of};
use crate::baseline::{Candidate, evaluate};
use crate::error::Result;
use crate::plan::{Plan, Taper};
use crate::rng::Rng;
use crate::sim::{Cost, Objective, SimReport, Simulator};
use crate::structure::NodeId;
use crate::structure::NodeKind;
use std::hash::{Hash, Hasher};
use std::time::Instant;

/// The best plan found (if any passed the rules) and what it took.
pub(super) struct Found {
    pub best: Option<(Plan, Cost)>,
    pub evaluations: usize,
    pub hit_time_limit: bool,
}

struct Search<'a, 'g> {
    sim: &'a Simulator<'g>,
    obj: Objective,
    cfg: &'a PlannerConfig,
    ops: Vec<NodeId>,
    consumers: Vec<Vec<NodeId>>,
    input_bytes: usize,
    evals: usize,
    started: Instant,
    timed_out: bool,
}

/// A scored plan.
#[derive(Clone)]
struct State {
    plan: Plan,
    cost: Cost,
}

impl Search<'_, '_> {
    fn out_of_time(&mut self) -> bool {
        if !self.timed_out && self.started.elapsed().as_secs_f64() > self.cfg.time_limit_s {
            self.timed_out = true;
        }
        self.timed_out
    }

    /// Simulates `plan`; `None` when infeasible, missing the objective, or pruned.
    fn eval(&mut self, plan: Plan) -> Result<Option<State>> {
        self.evals += 1;
        let cost = match evaluate(self.sim, &plan) {
            Ok(Some(c)) => c,
            Ok(None) | Err(crate::error::Error::Plan(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        if !self.obj.score(&cost).is_finite() || (self.cfg.prune_larger_than_input && cost.max_value_bytes > self.input_bytes) {
            return Ok(None);
        }
        Ok(Some(State { plan, cost }))
    }

    fn better(&self, a: &State, b: &State) -> bool {
        self.obj.better(&a.cost, &b.cost)
    }

    /// Sorts by objective (stable: earlier candidates win ties), drops duplicates, keeps `n`.
    fn keep_best(&self, mut v: Vec<State>, n: usize) -> Vec<State> {
        v.sort_by(|a, b| {
            let (sa, sb) = (self.obj.score(&a.cost), self.obj.score(&b.cost));
            sa.total_cmp(&sb).then(a.cost.makespan_s.total_cmp(&b.cost.makespan_s))
        });
        let mut out: Vec<State> = Vec::with_capacity(n);
        for s in v {
            if out.len() == n {
                break;
            }
            if !out.iter().any(|o| o.plan == s.plan) {
                out.push(s);
            }
        }
        out
    }

    /// The structured seed families (see the module docs of [`super`]).
    fn seeds(&self, baselines: &[Candidate]) -> Vec<Plan> {
        let g = self.sim.graph();
        let n = self.ops.len();
        let depths: Vec<usize> = [32, 16, 8, 4, 2, 1].iter().map(|d| (n / d).max(1)).collect();
        let mut out: Vec<Plan> = baselines.iter().filter(|c| c.cost.is_some()).map(|c| c.plan.clone()).collect();
        let bases: Vec<Plan> = out.clone();
        let rows0 = g.node_info(self.ops[0]).rows().max(1);
        for base in &bases {
            for &k in self.cfg.chunk_choices.iter().filter(|&&k| k > 1) {
                for &d in &depths {
                    for taper in [false, true] {
                        let mut p = base.clone();
                        for &id in &self.ops[..d] {
                            // Tapered: the same rows of the frame per chunk at every depth.
                            let kk = if taper { (k * g.node_info(id).rows()).div_ceil(rows0).max(1) } else { k };
                            if p.splits[id].robot_end < units_of(g, &p, id) {
                                p.splits[id].server_chunks = kk;
                            } else {
                                p.splits[id].robot_chunks = kk;
                            }
                        }
                        out.push(p);
                    }
                }
            }
        }
        // Graded chunking of the whole network (or its first half): fine chunks where kernels
        // are cheap to launch, so that each side computes band after band, layer after layer,
        // while the frame is in flight.
        let time = |side, id, rows| self.sim.op_time(side, id, rows);
        for base in &bases {
            for k0 in [8, 16, 32, 64, 128, rows0] {
                for frac in [0.05, 0.15, 0.5, f64::INFINITY] {
                    for d in [n / 2, n] {
                        let mut p = base.clone();
                        graded_chunks(g, &mut p, &self.ops[..d.max(1)], k0, frac, time);
                        out.push(p);
                    }
                }
            }
        }
        let server = Plan::server_only(g, self.cfg.units);
        for m0 in 1..self.cfg.units {
            for &d in &depths[..depths.len() - 1] {
                for replicate in [false, true] {
                    for k in [1, 4] {
                        let mut p = server.clone();
                        for &id in &self.ops[..d] {
                            p.splits[id].server_chunks = k;
                            band(g, &mut p, id, m0);
                        }
                        if replicate {
                            replicate_back(g, &mut p, &self.ops[..d], &self.consumers);
                        }
                        out.push(p);
                    }
                }
            }
        }
        out
    }

    /// The candidate splits of one segment, applied to `base`.
    fn segment_moves(&self, base: &Plan, seg: &[NodeId]) -> Vec<Plan> {
        let g = self.sim.graph();
        let mut out = Vec::new();
        for &k in &self.cfg.chunk_choices {
            let mut p = base.clone();
            seg.iter().for_each(|&id| set_server(&mut p, id, k));
            out.push(p);
            let mut p = base.clone();
            for &id in seg {
                let s = &mut p.splits[id];
                if s.robot_end > 0 {
                    s.robot_chunks = k;
                }
                if s.server_start < units_of(g, base, id) {
                    s.server_chunks = k;
                }
            }
            out.push(p);
        }
        let mut p = base.clone();
        seg.iter().for_each(|&id| set_robot(g, &mut p, id, 1));
        out.push(p);
        for frac in [1, 2, 3] {
            for replicate in [false, true] {
                let mut p = base.clone();
                for &id in seg {
                    let target = (units_of(g, &p, id) * frac).div_ceil(4);
                    band(g, &mut p, id, target);
                }
                if replicate {
                    replicate_back(g, &mut p, seg, &self.consumers);
                }
                out.push(p);
            }
        }
        out.retain(|p| p != base);
        out
    }

    fn beam(&mut self, start: Vec<State>) -> Result<Vec<State>> {
        let n = self.ops.len();
        let groups = self.cfg.groups.min(n).max(1);
        let mut beam = start;
        for gi in 0..groups {
            let seg: Vec<NodeId> = self.ops[gi * n / groups..(gi + 1) * n / groups].to_vec();
            let mut next = beam.clone();
            for st in &beam {
                for p in self.segment_moves(&st.plan, &seg) {
                    if self.out_of_time() {
                        return Ok(self.keep_best(next, self.cfg.beam_width));
                    }
                    if let Some(s) = self.eval(p)? {
                        next.push(s);
                    }
                }
            }
            beam = self.keep_best(next, self.cfg.beam_width);
        }
        Ok(beam)
    }

    /// One random edit of the ops around `centre`.
    fn mutate(&self, plan: &Plan, centre: usize, rng: &mut Rng) -> Plan {
        let g = self.sim.graph();
        let w = rng.below(4);
        let lo = centre.saturating_sub(w);
        let hi = (centre + w + 1).min(self.ops.len());
        let window = &self.ops[lo..hi];
        let mut p = plan.clone();
        let choices = &self.cfg.chunk_choices;
        let k = choices[rng.below(choices.len())];
        let delta = if rng.below(2) == 0 { -1 } else { 1 };
        if rng.below(8) == 0 {
            // Graded chunking of everything up to the window (see `graded_chunks`).
            let k0 = [8, 16, 32, 64, 128][rng.below(5)];
            let frac = [0.05, 0.15, 0.5, 2.0][rng.below(4)];
            graded_chunks(g, &mut p, &self.ops[..hi], k0, frac, |side, id, rows| self.sim.op_time(side, id, rows));
            return p;
        }
        match rng.below(7) {
            0 => window.iter().for_each(|&id| p.splits[id].server_chunks = k),
            1 => window.iter().for_each(|&id| p.splits[id].robot_chunks = k),
            2 => window.iter().for_each(|&id| shift(g, &mut p, id, true, delta)),
            3 => window.iter().for_each(|&id| shift(g, &mut p, id, false, delta)),
            4 => window.iter().for_each(|&id| set_server(&mut p, id, k)),
            5 => {
                let target = 1 + rng.below(self.cfg.units);
                window.iter().for_each(|&id| band(g, &mut p, id, target));
                if rng.below(2) == 0 {
                    let upto = &self.ops[..hi];
                    replicate_back(g, &mut p, upto, &self.consumers);
                }
            }
            _ => {
                let from = self.ops[centre];
                window.iter().for_each(|&id| copy_split(g, &mut p, from, id));
            }
        }
        p
    }

    fn lns(&mut self, mut best: State) -> Result<State> {
        let mut rng = Rng::new(self.cfg.seed);
        let mut critical = self.critical(&self.sim.simulate(&best.plan)?);
        let budget = self.evals + self.cfg.lns_evaluations;
        while self.evals < budget && !self.out_of_time() {
            let centre = if critical.is_empty() { rng.below(self.ops.len()) } else { critical[rng.below(critical.len())] };
            let p = self.mutate(&best.plan, centre, &mut rng);
            if p == best.plan || p.validate(self.sim.graph()).is_err() {
                self.evals += 1;
                continue;
            }
            if let Some(s) = self.eval(p)?
                && self.better(&s, &best)
            {
                best = s;
                critical = self.critical(&self.sim.simulate(&best.plan)?);
            }
        }
        Ok(best)
    }

    /// Positions (in `ops`) of the ops on the critical path: from the span that completes the
    /// outputs, back through whichever span ended (or arrived) exactly when it started.
    fn critical(&self, r: &SimReport) -> Vec<usize> {
        let tl = &r.timeline;
        let Some(mut cur) = (0..tl.len()).max_by(|&a, &b| tl[a].arrive.total_cmp(&tl[b].arrive)) else { return vec![] };
        let mut nodes = vec![tl[cur].node];
        for _ in 0..tl.len() {
            let t = tl[cur].start;
            if t <= 0.0 {
                break;
            }
            let close = |x: f64| (x - t).abs() <= 1e-12 * t.max(1.0);
            let prev = (0..tl.len())
                .find(|&j| j != cur && tl[j].resource != tl[cur].resource && close(tl[j].arrive))
                .or_else(|| (0..tl.len()).find(|&j| j != cur && tl[j].resource == tl[cur].resource && close(tl[j].end)));
            let Some(j) = prev else { break };
            cur = j;
            nodes.push(tl[cur].node);
        }
        let mut pos: Vec<usize> = nodes.iter().filter_map(|n| self.ops.iter().position(|o| o == n)).collect();
        pos.sort_unstable();
        pos.dedup();
        pos
    }
}

impl<'a, 'g> Search<'a, 'g> {
    fn new(sim: &'a Simulator<'g>, obj: Objective, cfg: &'a PlannerConfig) -> Search<'a, 'g> {
        let g = sim.graph();
        let ops: Vec<NodeId> = (0..g.node_count()).filter(|&id| g.node_is_op(id)).collect();
        let mut consumers = vec![Vec::new(); g.node_count()];
        for &id in &ops {
            for &i in g.node_inputs(id) {
                consumers[i].push(id);
            }
        }
        let per_elem = sim.config().input_bytes_per_element;
        let input_bytes = (0..g.node_count())
            .map(|id| g.node(id))
            .filter(|n| n.kind == NodeKind::Input)
            .map(|n| per_elem.map_or(n.info.bytes_of_rows(n.info.rows()), |b| n.info.numel() * b))
            .sum();
        Search { sim, obj, cfg, ops, consumers, input_bytes, evals: 0, started: Instant::now(), timed_out: false }
    }
}

/// LNS alone, from `plan`: the plan it ends at if `plan` passed the rules, and the
/// simulations it ran. Polishes a plan a neighbouring bucket lent
/// (the engine's schedule tables lend them), which the bucket's own search never started from.
pub fn polish(sim: &Simulator<'_>, obj: Objective, cfg: &PlannerConfig, plan: Plan) -> Result<(Option<(Plan, Cost)>, usize)> {
    let mut s = Search::new(sim, obj, cfg);
    if s.ops.is_empty() {
        return Ok((None, 0));
    }
    let Some(start) = s.eval(plan)? else { return Ok((None, s.evals)) };
    let best = s.lns(start)?;
    Ok((Some((best.plan, best.cost)), s.evals))
}

/// Sizes the chunks of `best` by every other [`Taper`] (up to three halvings at each end) and,
/// when one is better, polishes it by LNS with a quarter of the usual simulations (its chunk
/// counts were chosen for even chunks): the better plan, if any, and the simulations run. The
/// plans the search chose stay as they were unless this finds a strictly better one.
pub(super) fn taper(
    sim: &Simulator<'_>,
    obj: Objective,
    cfg: &PlannerConfig,
    best: &(Plan, Cost),
) -> Result<(Option<(Plan, Cost)>, usize)> {
    let mut s = Search::new(sim, obj, cfg);
    if s.ops.is_empty() {
        return Ok((None, 0));
    }
    let mut found = State { plan: best.0.clone(), cost: best.1 };
    let start = found.plan.taper;
    for head in 0..=3 {
        for tail in 0..=3 {
            let t = Taper { head, tail };
            if t == start || s.out_of_time() {
                continue;
            }
            let p = Plan { taper: t, ..best.0.clone() };
            if let Some(st) = s.eval(p)?
                && s.better(&st, &found)
            {
                found = st;
            }
        }
    }
    if found.plan.taper == start {
        return Ok((None, s.evals));
    }
    let quarter = PlannerConfig { lns_evaluations: cfg.lns_evaluations.div_ceil(4), ..cfg.clone() };
    let (polished, evals) = polish(sim, obj, &quarter, found.plan.clone())?;
    let best = match polished {
        Some((p, c)) if obj.better(&c, &found.cost) => (p, c),
        _ => (found.plan, found.cost),
    };
    Ok((Some(best), s.evals + evals))
}

/// Runs seeds, beam and LNS over plans with [`Plan::last_cut_aligned`] as given; the best plan
/// that passed the rules.
pub(super) fn run(
    sim: &Simulator<'_>,
    obj: Objective,
    cfg: &PlannerConfig,
    baselines: &[Candidate],
    last_cut_aligned: bool,
) -> Result<Found> {
    let mut s = Search::new(sim, obj, cfg);
    if s.ops.is_empty() {
        return Ok(Found { best: None, evaluations: 0, hit_time_limit: false });
    }
    let mut seeded = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for mut p in s.seeds(baselines) {
        p.last_cut_aligned = last_cut_aligned;
        if s.out_of_time() {
            break;
        }
        // Seed families overlap (e.g. graded chunking capped to the same counts): simulate
        // each distinct plan once (a fixed-key hasher: deterministic).
        let mut h = std::collections::hash_map::DefaultHasher::new();
        p.splits.iter().for_each(|x| (x.robot_end, x.server_start, x.robot_chunks, x.server_chunks).hash(&mut h));
        if !seen.insert(h.finish()) {
            continue;
        }
        if let Some(st) = s.eval(p)? {
            seeded.push(st);
        }
    }
    let start = s.keep_best(seeded, cfg.beam_width);
    if start.is_empty() {
        return Ok(Found { best: None, evaluations: s.evals, hit_time_limit: s.timed_out });
    }
    let beam = s.beam(start)?;
    let best = match beam.into_iter().next() {
        Some(b) => Some(s.lns(b)?),
        None => None,
    };
    Ok(Found { best: best.map(|b| (b.plan, b.cost)), evaluations: s.evals, hit_time_limit: s.timed_out })
}
