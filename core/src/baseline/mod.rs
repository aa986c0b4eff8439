//! Baselines (DESIGN.md section 5), all evaluated by the same [`Simulator`] and scored by the
//! same [`Objective`] as the planner: robot-only, server-only, the best layer partition
//! (DSCCS / Neurosurgeon) and the energy-optimal layer partition under a deadline (the SPSO-GA
//! objective), the last two from minimum cuts and a budgeted exact search.
//!
//! ## The layer-partition search
//!
//! A layer partition puts every op whole on one side; the robot's set `D` must be down-closed
//! (it holds the input, so it can only compute ops whose computing predecessors it computes
//! too), the server computes the rest and returns the outputs. On a DAG with skip connections
//! the candidates are all down-closed sets (order ideals), not just topological prefixes, and a
//! detector's neck has exponentially many of them.
//!
//! Under this simulator the cost of `D` does not decompose over edges: uploads overlap the
//! robot's remaining ops, the server starts as soon as its first inputs land, and the link is a
//! FIFO queue. The search therefore has three stages, each polynomial or bounded:
//!
//! 1. **Minimum cuts** ([`min_cut`]): the optimum of the sequential cost model (nothing
//!    overlaps), exact and polynomial for any DAG, under a few weightings of its terms (transfers
//!    cheaper or dearer, as overlap makes them; for energy objectives, each term at its watts).
//!    Each cut is simulated; the best is the incumbent.
//! 2. **Polish**: single ops on the cut's boundary change side while that improves the score.
//! 3. **Branch and bound over ideals** under the simulator, seeded with the incumbent: ops are
//!    decided in topological order, an op may join `D` only if all its computing inputs are in
//!    `D`, and "server" is always allowed. Every ideal is reached by exactly one path (the
//!    decisions are its indicator vector), every leaf is an ideal, and every ideal is a leaf, so
//!    without pruning the search is exhaustive. Pruning uses [`Objective::lower_bound`] on `R`,
//!    the robot seconds of the ops already put in `D` that are ancestors of an output: the robot
//!    runs its ops one at a time, and an output cannot be whole before an op it depends on is
//!    done, so every completion of the branch has `makespan >= R` with `R` seconds of robot
//!    computing inside `[0, makespan]`. A branch is cut only when that bound is strictly worse
//!    than the best score found, so no optimum is lost. When the search completes
//!    ([`SearchStatus::Exact`]) the result is the exact optimum under the simulator (every zoo
//!    model but the detectors: at most a few hundred simulations, the cuts prune that well);
//!    when its budget
//!    ([`SearchOptions::max_evaluations`]) runs out first ([`SearchStatus::Budget`], detector
//!    DAGs) the result is the best plan seen, never worse than the minimum cuts, and the plan is
//!    still returned: a table never fails because a baseline search ran long.

pub mod min_cut;

use crate::error::{Error, Result};
use crate::plan::{NodeSplit, PLAN_VERSION, Plan};
use crate::rows::effective_units;
use crate::sim::{Cost, Objective, Simulator};
use crate::structure::NodeId;

/// Limits of the layer-partition searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchOptions {
    /// Units per op in the plans produced.
    pub units: usize,
    /// Most simulations one search may run; past it the best plan seen is returned with
    /// [`SearchStatus::Budget`].
    pub max_evaluations: usize,
}

/// The default budget of a layer-partition search, in simulations: enough for every zoo
/// classifier's ideals, small enough that a 31-bucket table of a detector stays quick.
pub const DEFAULT_MAX_EVALUATIONS: usize = 4_000;

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions { units: 8, max_evaluations: DEFAULT_MAX_EVALUATIONS }
    }
}

/// How a baseline's search ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchStatus {
    /// Nothing to search (robot-only, server-only).
    #[default]
    Fixed,
    /// The search covered every candidate: the exact optimum under the simulator.
    Exact,
    /// The budget ran out: the best plan seen (never worse than the minimum cuts).
    Budget,
}

/// A plan and what it costs (`None`: infeasible, e.g. it needs a link that is down).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Which baseline.
    pub name: &'static str,
    /// The plan.
    pub plan: Plan,
    /// Its simulated cost.
    pub cost: Option<Cost>,
    /// Simulations run to find it.
    pub evaluated: usize,
    /// How its search ended.
    pub status: SearchStatus,
}

impl Candidate {
    /// The score under `objective` (infinity when infeasible).
    pub fn score(&self, objective: &Objective) -> f64 {
        self.cost.as_ref().map_or(f64::INFINITY, |c| objective.score(c))
    }
}

/// The layer partition with the robot computing exactly the ops in `robot` (whole, one kernel
/// each) and the server the rest.
pub fn layer_plan(sim: &Simulator<'_>, units: usize, robot: &[bool]) -> Plan {
    let g = sim.graph();
    let splits = (0..g.node_count())
        .map(|id| (id, g.node(id)))
        .map(|(id, n)| {
            let u = effective_units(n.info.rows(), units);
            let end = if robot.get(id).copied().unwrap_or(false) { u } else { 0 };
            NodeSplit { robot_end: end, server_start: end, robot_chunks: 1, server_chunks: 1 }
        })
        .collect();
    Plan { version: PLAN_VERSION, units, splits, last_cut_aligned: false, taper: Default::default(), server_cuts: Vec::new() }
}

/// Cost of a plan, with "needs a link that is not there" as `None`.
///
/// # Errors
/// Simulation errors other than [`Error::Infeasible`].
pub fn evaluate(sim: &Simulator<'_>, plan: &Plan) -> Result<Option<Cost>> {
    match sim.cost(plan) {
        Ok(c) => Ok(Some(c)),
        Err(Error::Infeasible(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Everything on the robot.
///
/// # Errors
/// Simulation errors.
pub fn robot_only(sim: &Simulator<'_>, units: usize) -> Result<Candidate> {
    let plan = Plan::robot_only(sim.graph(), units);
    Ok(Candidate { name: "robot-only", cost: evaluate(sim, &plan)?, plan, evaluated: 1, status: SearchStatus::Fixed })
}

/// Everything on the server (input up, outputs down).
///
/// # Errors
/// Simulation errors.
pub fn server_only(sim: &Simulator<'_>, units: usize) -> Result<Candidate> {
    let plan = Plan::server_only(sim.graph(), units);
    Ok(Candidate { name: "server-only", cost: evaluate(sim, &plan)?, plan, evaluated: 1, status: SearchStatus::Fixed })
}

struct Search<'a, 'g> {
    sim: &'a Simulator<'g>,
    objective: Objective,
    opts: SearchOptions,
    /// Computing nodes in topological order.
    ops: Vec<NodeId>,
    /// Per op: robot seconds of the whole op (0 when it is not an ancestor of an output).
    bound_s: Vec<f64>,
    in_d: Vec<bool>,
    plan: Plan,
    best: Option<(Cost, Plan)>,
    evaluated: usize,
    /// The budget ran out.
    stopped: bool,
}

impl Search<'_, '_> {
    fn set(&mut self, id: NodeId, robot: bool) {
        let u = effective_units(self.sim.graph().node_info(id).rows(), self.opts.units);
        let end = if robot { u } else { 0 };
        self.plan.splits[id].robot_end = end;
        self.plan.splits[id].server_start = end;
        self.in_d[id] = robot;
    }

    /// Simulates `plan`; keeps it when it beats the best so far.
    fn offer(&mut self, plan: &Plan) -> Result<bool> {
        self.evaluated += 1;
        let Some(cost) = evaluate(self.sim, plan)? else { return Ok(false) };
        let improves = match &self.best {
            None => self.objective.score(&cost).is_finite(),
            Some((b, _)) => self.objective.better(&cost, b),
        };
        if improves {
            self.best = Some((cost, plan.clone()));
        }
        Ok(improves)
    }

    fn leaf(&mut self) -> Result<()> {
        if self.evaluated >= self.opts.max_evaluations {
            self.stopped = true;
            return Ok(());
        }
        let plan = self.plan.clone();
        self.offer(&plan).map(|_| ())
    }

    /// Stages 1 and 2 of the module docs: the minimum cuts under a few weightings, then single
    /// boundary ops moved while that improves the best.
    fn seed(&mut self) -> Result<()> {
        let g = self.sim.graph();
        let p = self.sim.config().power;
        let mut weightings: Vec<(f64, f64)> = [1.0, 0.5, 0.25, 2.0].iter().map(|&t| (1.0, t)).collect();
        if !matches!(self.objective, Objective::Latency) && p.idle_w > 0.0 {
            // Energy: robot computing and transmitting at their watts, the server's time at idle.
            weightings.extend([1.0, 0.5].iter().map(|&t| (p.computing_w / p.idle_w, t * p.transmitting_w / p.idle_w)));
        }
        let mut seen: Vec<Vec<bool>> = Vec::new();
        for (robot_weight, transfer_weight) in weightings {
            let costs = min_cut::SequentialCosts::from_sim(self.sim, robot_weight, transfer_weight);
            let cut = min_cut::min_cut_partition(g, &costs);
            if !seen.contains(&cut) {
                let plan = layer_plan(self.sim, self.opts.units, &cut);
                self.offer(&plan)?;
                seen.push(cut);
            }
        }
        let Some((_, best)) = &self.best else { return Ok(()) };
        let mut robot: Vec<bool> = (0..g.node_count()).map(|id| g.node_is_op(id) && best.splits[id].robot_end > 0).collect();
        let consumers = g.consumers();
        let budget = self.opts.max_evaluations / 4;
        let mut improved = true;
        while improved && self.evaluated < budget {
            improved = false;
            for i in 0..self.ops.len() {
                let id = self.ops[i];
                if self.evaluated >= budget {
                    break;
                }
                let movable = if robot[id] {
                    consumers[id].iter().all(|&c| !robot[c])
                } else {
                    g.node_inputs(id).iter().all(|&p| !g.node_is_op(p) || robot[p])
                };
                if !movable {
                    continue;
                }
                robot[id] = !robot[id];
                if self.offer(&layer_plan(self.sim, self.opts.units, &robot))? {
                    improved = true;
                } else {
                    robot[id] = !robot[id];
                }
            }
        }
        Ok(())
    }

    fn visit(&mut self, i: usize, robot_s: f64) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        if let Some((b, _)) = &self.best {
            if self.objective.lower_bound(robot_s, &self.sim.config().power) > self.objective.score(b) {
                return Ok(());
            }
        } else if self.objective.lower_bound(robot_s, &self.sim.config().power).is_infinite() {
            return Ok(());
        }
        let Some(&id) = self.ops.get(i) else { return self.leaf() };
        let g = self.sim.graph();
        let can_robot = g.node_inputs(id).iter().all(|&p| !g.node_is_op(p) || self.in_d[p]);
        if can_robot {
            self.set(id, true);
            self.visit(i + 1, robot_s + self.bound_s[i])?;
        }
        self.set(id, false);
        self.visit(i + 1, robot_s)
    }
}

/// The best layer partition of the DAG under `objective` (see the module docs: exact when the
/// status is [`SearchStatus::Exact`]). Returns `cost: None` when no layer partition is feasible
/// (e.g. every one misses the deadline).
///
/// # Errors
/// Simulation errors (never the budget: see [`SearchStatus::Budget`]).
pub fn best_layer_partition(sim: &Simulator<'_>, objective: Objective, opts: &SearchOptions) -> Result<Candidate> {
    let g = sim.graph();
    let ops: Vec<NodeId> = (0..g.node_count()).filter(|&id| g.node_is_op(id)).collect();
    let name = match objective {
        Objective::EnergyUnderDeadline { .. } => "layer-partition-energy-deadline",
        _ => "layer-partition",
    };
    if sim.config().link.bandwidth <= 0.0 {
        // No link: a server op would need the input or an intermediate sent, so the robot
        // computing everything is the only feasible partition.
        let all: Vec<bool> = (0..g.node_count()).map(|id| g.node_is_op(id)).collect();
        let plan = layer_plan(sim, opts.units, &all);
        let cost = evaluate(sim, &plan)?.filter(|c| objective.score(c).is_finite());
        return Ok(Candidate { name, plan, cost, evaluated: 1, status: SearchStatus::Exact });
    }
    let bound_s = ops
        .iter()
        .map(|&id| if sim.is_live(id) { sim.op_time(crate::plan::Side::Robot, id, g.node_info(id).rows()) } else { 0.0 })
        .collect();
    let mut s = Search {
        sim,
        objective,
        opts: *opts,
        ops,
        bound_s,
        in_d: vec![false; g.node_count()],
        plan: layer_plan(sim, opts.units, &[]),
        best: None,
        evaluated: 0,
        stopped: false,
    };
    s.seed()?;
    s.visit(0, 0.0)?;
    let (evaluated, status) = (s.evaluated, if s.stopped { SearchStatus::Budget } else { SearchStatus::Exact });
    Ok(match s.best {
        Some((cost, plan)) => Candidate { name, plan, cost: Some(cost), evaluated, status },
        None => Candidate { name, plan: layer_plan(sim, opts.units, &[]), cost: None, evaluated, status },
    })
}

/// The energy-optimal layer partition whose makespan meets `deadline_s` (exact).
///
/// # Errors
/// As [`best_layer_partition`].
pub fn energy_layer_partition(sim: &Simulator<'_>, deadline_s: f64, opts: &SearchOptions) -> Result<Candidate> {
    best_layer_partition(sim, Objective::EnergyUnderDeadline { deadline_s }, opts)
}

/// Every baseline: robot-only, server-only, the best layer partition for latency, and, when
/// `objective` is not latency, the best layer partition under `objective` too (for
/// [`Objective::EnergyUnderDeadline`], the SPSO-GA baseline). The best of them under
/// `objective` ([`best`]) seeds and bounds the planner.
///
/// # Errors
/// As [`best_layer_partition`].
pub fn all(sim: &Simulator<'_>, objective: Objective, opts: &SearchOptions) -> Result<Vec<Candidate>> {
    let mut out = vec![robot_only(sim, opts.units)?, server_only(sim, opts.units)?, best_layer_partition(sim, Objective::Latency, opts)?];
    if objective != Objective::Latency {
        out.push(best_layer_partition(sim, objective, opts)?);
    }
    Ok(out)
}

/// The best candidate under `objective` (the first on ties), if any is feasible.
pub fn best<'c>(candidates: &'c [Candidate], objective: &Objective) -> Option<&'c Candidate> {
    candidates.iter().filter(|c| c.score(objective).is_finite()).fold(None, |acc: Option<&Candidate>, c| match (acc, &c.cost) {
        (Some(a), Some(cc)) => match &a.cost {
            Some(ac) if objective.better(cc, ac) => Some(c),
            _ => Some(a),
        },
        (None, _) => Some(c),
        (a, None) => a,
    })
}
