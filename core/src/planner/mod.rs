//! LOSS, the planner (DESIGN.md section 5): for one link, which rows of which op run where, in
//! how many chunks.
//!
//! 1. **Baselines** ([`crate::baseline::all`]) under the same simulator and objective; the best
//!    one is the incumbent, and the result is never worse than it: LOSS returns the baseline's
//!    own plan unless it found a strictly better one.
//! 2. **Seeds**: structured families around the baselines: server-only and the best layer
//!    partition with the first ops (a prefix of the topological order, up to the whole
//!    network) computed in `k` chunks, uniform or graded (about the same rows of the frame per
//!    chunk at every depth, capped where a side's per-kernel overhead would cost more than a
//!    fraction of the op's time): the input then crosses in pieces and, under the simulator's
//!    wavefront order ([`crate::sim::ChunkOrder`]), the server computes band after band, layer
//!    after layer, while the rest of the frame is in flight; and "the
//!    robot computes the top rows of the early ops while the server does the rest", with the
//!    robot's band shrinking with depth so that it only reads rows it holds, with and without
//!    replicated overlaps on the server.
//! 3. **Beam search** over the ops in topological order, in `groups` contiguous segments (a
//!    decision per segment keeps the tree small; the LNS refines per op): each beam state tries
//!    a few candidate splits for the segment (whole on the server in `k` chunks, whole on the
//!    robot, a self-sufficient robot band of several widths with and without replication,
//!    other chunk counts), evaluated by simulating the whole plan; the best `beam_width`
//!    distinct plans survive.
//! 4. **Large-neighbourhood search** around the critical path of the best plan (found by
//!    walking the simulator's timeline back from the makespan): a window of ops around a
//!    critical op gets a random edit (chunks, graded chunks of the prefix up to the window,
//!    band ends, side, a neighbour's split), and the
//!    result is kept only when strictly better. The search stops after `lns_evaluations`
//!    simulations, so results depend only on the inputs and the seed. `time_limit_s` is a
//!    safety net for pathological graphs only: when it fires (reported in
//!    [`Outcome::hit_time_limit`]) the result depends on the machine's speed.
//! 5. **Both spreads**: under aligned chunk bounds, steps 2 to 4 run twice, once for each way an
//!    op computed in fewer chunks than its producer places its cuts
//!    ([`Plan::last_cut_aligned`]): spread evenly over the producer's (a busy server stays fed
//!    while the frame is in flight) or with the last on the producer's last (less work after
//!    the frame's last rows arrive: detectors' necks, whose deep rows read most of the frame).
//!    Plans co-adapt their chunk counts to the spread, so each gets its own search (the first
//!    exactly the single search of before, so no plan gets worse; the second with half the
//!    beam and LNS); the better wins.
//! 6. **Tapers**: the winner's chunks sized by every [`crate::plan::Taper`] of up to three
//!    halvings at each end (a small first message lets a busy server start sooner, a small last
//!    one leaves less to wait for on a slow link); where one is strictly better, a quarter of
//!    the LNS polishes it. The search's own plan stays unless this beats it.
//! 7. **Release cuts**: where the winner has the robot only send the frame, every op's server
//!    chunks are cut anew where the frame's rows release them ([`release`]): the server's
//!    finish is then exactly the largest, over messages, of a message's arrival plus the work
//!    released with it or later, and a local search on that formula picks the message ends
//!    and how deep each cuts; the plan replaces the winner only when the simulator finds it
//!    strictly better (zoo, robot 8x, u8: LOSS over the pipelining bound in buckets where the
//!    robot takes no rows fell from 1.032 to 1.019 on vgg16, 1.040 to 1.026 on vgg19).
//!
//! Pruning (the LOSS paper's rule, off by default, [`PlannerConfig::prune_larger_than_input`]):
//! a candidate that sends more bytes of any one value in one direction than the raw input takes
//! on the wire is discarded (the baselines themselves are exempt: they are the bound; so are
//! graph outputs coming down, which every plan computing them on the server sends). With byte
//! frames and float activations the rule bites far harder than with the paper's float input:
//! on the zoo (robot 20x slower, 31 buckets, u8 and f32) it found no better plan for any model,
//! planned no faster, and cost pose_hr 5% (u8: LOSS / best 0.945 with it, 0.895 without).

mod moves;
pub mod release;
mod search;
pub use search::polish;
pub mod svg;
pub mod table;

pub use table::{
    BaselineCost, BucketEntry, CacheUse, ScheduleTable, TableConfig, TableKey, TableModel, TableSpec, auto_bandwidth_scale, load_or_build,
    parse_buckets,
};

use crate::baseline::Candidate;
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::sim::{Cost, Objective, Simulator};
use sha2::{Digest, Sha256};

/// The planner's knobs. Part of a schedule table's key.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlannerConfig {
    /// Units per op.
    pub units: usize,
    /// Plans kept per beam step.
    pub beam_width: usize,
    /// Segments of the topological order the beam decides one at a time.
    pub groups: usize,
    /// Chunk counts tried (each >= 1).
    pub chunk_choices: Vec<usize>,
    /// Simulations the large-neighbourhood search may run.
    pub lns_evaluations: usize,
    /// Safety-net wall-clock bound per plan, seconds (see the module docs).
    pub time_limit_s: f64,
    /// Seed of the search's random choices.
    pub seed: u64,
    /// Discard candidates that send more bytes of one value than the raw input takes (see the
    /// module docs). Off by default: on every zoo model it found no better plan, and it cost
    /// pose_hr (u8 frames, float activations) 5% of its latency.
    pub prune_larger_than_input: bool,
    /// Budget of each exact baseline search.
    pub baseline_max_evaluations: usize,
    /// Cut the best server-only plan's ops where the frame's rows release them (step 7,
    /// [`release`]). On by default, and left out of the JSON when on, so that tables written
    /// before it still load; off only to measure what the earlier steps find alone.
    #[serde(default = "release_cuts_on", skip_serializing_if = "is_on")]
    pub release_cuts: bool,
}

fn release_cuts_on() -> bool {
    true
}

fn is_on(b: &bool) -> bool {
    *b
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            units: 8,
            beam_width: 2,
            groups: 16,
            chunk_choices: vec![1, 2, 4, 8, 16, 32],
            lns_evaluations: 300,
            time_limit_s: 120.0,
            seed: 0,
            prune_larger_than_input: false,
            baseline_max_evaluations: crate::baseline::DEFAULT_MAX_EVALUATIONS,
            release_cuts: true,
        }
    }
}

impl PlannerConfig {
    /// This configuration with `factor` times the search budget (LNS simulations times
    /// `factor`, beam width times `min(factor, 4)`, twice the segments when `factor > 1`).
    pub fn scaled(&self, factor: usize) -> PlannerConfig {
        let f = factor.max(1);
        PlannerConfig {
            lns_evaluations: self.lns_evaluations * f,
            beam_width: self.beam_width * f.min(4),
            groups: if f > 1 { self.groups * 2 } else { self.groups },
            time_limit_s: self.time_limit_s * f as f64,
            ..self.clone()
        }
    }

    /// Checks the knobs.
    ///
    /// # Errors
    /// [`Error::Input`] naming the bad knob.
    pub fn check(&self) -> Result<()> {
        let bad = |m: &str| Err(Error::Input(format!("planner config: {m}")));
        if self.units == 0 || self.beam_width == 0 || self.groups == 0 {
            return bad("units, beam width and groups must be >= 1");
        }
        if self.chunk_choices.is_empty() || self.chunk_choices.contains(&0) {
            return bad("chunk choices must be a non-empty list of counts >= 1");
        }
        if !self.time_limit_s.is_finite() || self.time_limit_s <= 0.0 {
            return bad("the time limit must be positive");
        }
        Ok(())
    }

    /// Content hash (sha256, hex) of the configuration.
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(serde_json::to_string(self).unwrap_or_default().as_bytes()))
    }
}

/// What the planner found for one link.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The plan to run: LOSS's, or the best baseline's when nothing beat it.
    pub plan: Plan,
    /// Its simulated cost (`None` only when no baseline is feasible at all).
    pub cost: Option<Cost>,
    /// `"lop"` when LOSS strictly beat every baseline, else the winning baseline's name.
    pub method: String,
    /// Whether the plan meets the objective (false: no plan met the deadline, and the plan is
    /// the fastest baseline).
    pub feasible: bool,
    /// Every baseline, as evaluated.
    pub baselines: Vec<Candidate>,
    /// Simulations run by LOSS (beyond the baselines).
    pub evaluations: usize,
    /// Whether the safety-net time bound stopped the search.
    pub hit_time_limit: bool,
}

/// Plans one link (the simulator's configuration) under `objective`.
///
/// # Errors
/// A bad configuration; simulation errors other than infeasibility.
pub fn plan(sim: &Simulator<'_>, objective: Objective, cfg: &PlannerConfig) -> Result<Outcome> {
    cfg.check()?;
    let opts = crate::baseline::SearchOptions { units: cfg.units, max_evaluations: cfg.baseline_max_evaluations };
    let baselines = crate::baseline::all(sim, objective, &opts)?;
    let Some(best) = crate::baseline::best(&baselines, &objective).cloned() else {
        // Nothing meets the objective: report the fastest baseline, unsearched.
        let fastest = baselines
            .iter()
            .filter(|c| c.cost.is_some())
            .min_by(|a, b| {
                let (ma, mb) = (a.cost.map_or(f64::INFINITY, |c| c.makespan_s), b.cost.map_or(f64::INFINITY, |c| c.makespan_s));
                ma.total_cmp(&mb)
            })
            .cloned();
        let (plan, cost, method) = match fastest {
            Some(c) => (c.plan, c.cost, c.name.to_string()),
            None => (Plan::robot_only(sim.graph(), cfg.units), None, "none".to_string()),
        };
        return Ok(Outcome { plan, cost, method, feasible: false, baselines, evaluations: 0, hit_time_limit: false });
    };
    let found = search_spreads_and_tapers(sim, objective, cfg, &baselines)?;
    let (evaluations, hit_time_limit) = (found.evaluations, found.hit_time_limit);
    let (plan, cost, method) = match found.best {
        Some((p, c)) if best.cost.as_ref().is_some_and(|b| objective.better(&c, b)) => (p, Some(c), "lop".to_string()),
        _ => (best.plan.clone(), best.cost, best.name.to_string()),
    };
    Ok(Outcome { plan, cost, method, feasible: true, baselines, evaluations, hit_time_limit })
}

/// Seeds, beam and LNS once for each way aligned chunk bounds spread an op's cuts over a finer
/// producer's ([`Plan::last_cut_aligned`]), each search's plans co-adapted to its own, and the
/// better result (ties to the even spread); once under other chunk bounds, where the choice
/// changes nothing. The even spread's search is the whole search of a single spread, so no
/// plan gets worse; the other gets half the beam (at least 1) and half the LNS simulations
/// (a table then costs about two thirds more, not twice) and what is left of the time limit.
fn search_both_spreads(sim: &Simulator<'_>, objective: Objective, cfg: &PlannerConfig, baselines: &[Candidate]) -> Result<search::Found> {
    let started = std::time::Instant::now();
    let even = search::run(sim, objective, cfg, baselines, false)?;
    let left = cfg.time_limit_s - started.elapsed().as_secs_f64();
    if sim.config().bounds != crate::sim::ChunkBounds::Aligned || even.hit_time_limit || left <= 0.0 {
        return Ok(even);
    }
    let half = PlannerConfig {
        beam_width: cfg.beam_width.div_ceil(2),
        lns_evaluations: cfg.lns_evaluations.div_ceil(2),
        time_limit_s: left,
        ..cfg.clone()
    };
    let last = search::run(sim, objective, &half, baselines, true)?;
    let best = match (even.best, last.best) {
        (Some(e), Some(l)) => Some(if objective.better(&l.1, &e.1) { l } else { e }),
        (e, l) => e.or(l),
    };
    Ok(search::Found { best, evaluations: even.evaluations + last.evaluations, hit_time_limit: last.hit_time_limit })
}

/// [`search_both_spreads`], then the best plan's chunks sized by every [`crate::plan::Taper`]
/// ([`search::taper`], which only returns a strictly better plan), then, where the robot only
/// sends the frame, cut where its rows release them ([`release::release_cuts`], the same).
fn search_spreads_and_tapers(
    sim: &Simulator<'_>,
    objective: Objective,
    cfg: &PlannerConfig,
    baselines: &[Candidate],
) -> Result<search::Found> {
    let started = std::time::Instant::now();
    let mut found = search_both_spreads(sim, objective, cfg, baselines)?;
    let left = cfg.time_limit_s - started.elapsed().as_secs_f64();
    let Some(best) = found.best.as_ref().filter(|_| !found.hit_time_limit && left > 0.0) else { return Ok(found) };
    let rest = PlannerConfig { time_limit_s: left, ..cfg.clone() };
    let (tapered, evaluations) = search::taper(sim, objective, &rest, best)?;
    found.evaluations += evaluations;
    if tapered.is_some() {
        found.best = tapered;
    }
    if let Some(best) = found.best.as_ref().filter(|_| cfg.release_cuts) {
        let (cut, evaluations) = release::release_cuts(sim, objective, best)?;
        found.evaluations += evaluations;
        if cut.is_some() {
            found.best = cut;
        }
    }
    Ok(found)
}
