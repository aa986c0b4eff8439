//! Lending plans between buckets: a bucket tries its neighbours' plans in its own simulator and
//! keeps one that beats its own (then polishes it with its LNS).

use super::buckets::bucket_seed;
use super::schedule::BucketEntry;
use super::spec::TableSpec;
use crate::error::Result;
use crate::plan::Plan;
use crate::profile::Profile;
use crate::sim::Simulator;
use crate::structure::Structure;

/// How many buckets on each side lend a bucket their plans ([`lend_plans`]).
pub(super) const LENDING_REACH: usize = 4;

/// Tries each bucket's neighbours' plans (up to [`LENDING_REACH`] buckets away) in its own
/// simulator, and keeps the best under the objective where it beats the bucket's own plan.
///
/// Each bucket's search is local and seeded apart, so it can stop at a plan that a
/// neighbour's search, at a nearby bandwidth, got past: measured on vgg16 (u8, robot 8x),
/// bucket 13's plan ran bucket 14 in 144.7 ms against bucket 14's own 147.9. The lent plans
/// are the ones the buckets planned (not what they were lent), so the result does not depend
/// on the order, and a bucket keeps its own plan unless another is strictly better. A bucket
/// that takes a lent plan then runs its LNS from it (its own seed, its full LNS budget).
/// Returns the seconds each bucket spent on it, which count in its planning time.
///
/// # Errors
/// Profiles that do not fit the model (the simulator refuses them).
pub fn lend_plans(
    graph: &dyn Structure,
    robot: &Profile,
    server: &Profile,
    spec: &TableSpec,
    entries: &mut [BucketEntry],
) -> Result<Vec<f64>> {
    let lent: Vec<Plan> = entries.iter().map(|e| e.plan.clone()).collect();
    let mut sim = Simulator::new(graph, robot, server, spec.sim_config(0.0))?;
    let mut seconds = vec![0.0; entries.len()];
    for i in 0..entries.len() {
        let started = std::time::Instant::now();
        if entries[i].feasible {
            sim.set_config(spec.sim_config(entries[i].bucket_mb_s))?;
            lend_to(&sim, spec, &lent, i, &mut entries[i])?;
        }
        seconds[i] = started.elapsed().as_secs_f64();
    }
    Ok(seconds)
}

/// Bucket `i`'s part of [`lend_plans`], in its own simulator `sim`.
fn lend_to(sim: &Simulator<'_>, spec: &TableSpec, lent: &[Plan], i: usize, entry: &mut BucketEntry) -> Result<()> {
    let Ok(mut best) = sim.cost(&lent[i]) else { return Ok(()) };
    let mut from = None;
    let near = i.saturating_sub(LENDING_REACH)..(i + LENDING_REACH + 1).min(lent.len());
    for j in near.filter(|&j| j != i && lent[j] != lent[i]) {
        if let Ok(cost) = sim.cost(&lent[j])
            && spec.objective.better(&cost, &best)
        {
            (best, from) = (cost, Some(j));
        }
    }
    let Some(j) = from else { return Ok(()) };
    // The bucket's own search never started from the lent plan: its LNS may improve it.
    let mut plan = lent[j].clone();
    let mut cfg = spec.planner.clone();
    cfg.seed = bucket_seed(cfg.seed, i);
    let (polished, evaluations) = crate::planner::polish(sim, spec.objective, &cfg, plan.clone())?;
    if let Some((p, cost)) = polished
        && spec.objective.better(&cost, &best)
    {
        (plan, best) = (p, cost);
    }
    entry.evaluations += evaluations;
    entry.plan_hash = plan.hash();
    entry.plan = plan;
    entry.method = "lop".to_string();
    entry.makespan_s = Some(best.makespan_s);
    entry.energy_j = Some(best.energy_j);
    Ok(())
}
