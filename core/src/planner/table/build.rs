//! Building a schedule table: every bucket planned in parallel (each worker thread with its own
//! copy of the model, sharing its weights), then the neighbours' plans lent.

use super::TABLE_VERSION;
use super::TableModel;
use super::buckets::bucket_seed;
use super::key::TableKey;
use super::lending::lend_plans;
use super::schedule::{BaselineCost, BucketEntry, ScheduleTable};
use super::spec::TableSpec;
use super::workers::on_shared_copies;
use crate::error::{Error, Result};
use crate::planner::plan;
use crate::profile::Profile;
use crate::sim::Simulator;
use std::sync::Mutex;

/// One bucket's result and planning seconds, once planned.
type Slot = Option<Result<(BucketEntry, f64)>>;

fn plan_bucket(
    graph: &dyn crate::structure::Structure,
    robot: &Profile,
    server: &Profile,
    spec: &TableSpec,
    i: usize,
) -> Result<(BucketEntry, f64)> {
    let started = std::time::Instant::now();
    let b = spec.buckets[i];
    let sim = Simulator::new(graph, robot, server, spec.sim_config(b))?;
    let mut cfg = spec.planner.clone();
    cfg.seed = bucket_seed(cfg.seed, i);
    let o = plan(&sim, spec.objective, &cfg)?;
    let baselines = o
        .baselines
        .iter()
        .map(|c| BaselineCost {
            name: c.name.to_string(),
            makespan_s: c.cost.map(|c| c.makespan_s),
            energy_j: c.cost.map(|c| c.energy_j),
            plan: c.plan.clone(),
            search: c.status,
            evaluated: c.evaluated,
        })
        .collect();
    let entry = BucketEntry {
        bucket_mb_s: b,
        bandwidth_mb_s: b * spec.bandwidth_scale,
        method: o.method,
        feasible: o.feasible,
        makespan_s: o.cost.map(|c| c.makespan_s),
        energy_j: o.cost.map(|c| c.energy_j),
        baselines,
        evaluations: o.evaluations,
        plan_hash: o.plan.hash(),
        plan: o.plan,
    };
    Ok((entry, started.elapsed().as_secs_f64()))
}

impl ScheduleTable {
    /// Plans every bucket. The calling thread plans with `graph`; `threads - 1` more workers
    /// (std::thread::scope) each plan with their own [`TableModel::share`] copy of it (a graph
    /// serves one thread at a time; the copy shares its weights), taking buckets from a shared
    /// counter. Each bucket's plan
    /// depends only on its inputs and seed, so the table does not depend on the threads. Also
    /// returns the planning seconds of each bucket (not part of the table, which stays
    /// byte-identical).
    ///
    /// # Errors
    /// Profiles that do not fit the model, a bad spec, planner errors.
    pub fn build<G: TableModel>(
        graph: &G,
        robot: &Profile,
        server: &Profile,
        spec: &TableSpec,
        threads: usize,
    ) -> Result<(ScheduleTable, Vec<f64>)> {
        spec.check()?;
        let model_hash = graph.content_hash()?;
        robot.validate(graph, &model_hash)?;
        server.validate(graph, &model_hash)?;
        let key = TableKey { model_hash, robot_profile_hash: robot.hash(), server_profile_hash: server.hash(), config_hash: spec.hash() };
        let (mut entries, mut times) = plan_buckets(graph, robot, server, spec, threads)?;
        for (t, lent) in times.iter_mut().zip(lend_plans(graph, robot, server, spec, &mut entries)?) {
            *t += lent;
        }
        let mut t = ScheduleTable {
            version: TABLE_VERSION,
            model: graph.model_name().to_string(),
            key,
            spec: spec.clone(),
            entries,
            hash: String::new(),
        };
        t.hash = t.content_hash();
        Ok((t, times))
    }
}

/// Plans every bucket of `spec`: the calling thread with `graph`, `threads - 1` more workers with
/// their own [`TableModel::share`] copies, taking buckets from a shared counter
/// ([`on_shared_copies`]); returns the entries and each bucket's planning seconds,
/// in bucket order.
fn plan_buckets<G: TableModel>(
    graph: &G,
    robot: &Profile,
    server: &Profile,
    spec: &TableSpec,
    threads: usize,
) -> Result<(Vec<BucketEntry>, Vec<f64>)> {
    let n = spec.buckets.len();
    let slots: Mutex<Vec<Slot>> = Mutex::new((0..n).map(|_| None).collect());
    let finished = on_shared_copies(graph, threads, n, |g, next| {
        while let Some(i) = next() {
            let r = plan_bucket(g, robot, server, spec, i);
            if let Ok(mut v) = slots.lock() {
                v[i] = Some(r);
            }
        }
    });
    let worker_errors = finished.iter().filter(|f| f.is_none()).map(|_| Error::Input("a planning thread panicked".into())).collect();
    let slots = slots.into_inner().map_err(|_| Error::Input("a planning thread panicked".into()))?;
    gather(slots, worker_errors)
}

/// The planned buckets in order, with their planning seconds; a bucket left unplanned (its worker
/// failed) gives that worker's error.
fn gather(slots: Vec<Slot>, mut worker_errors: Vec<Error>) -> Result<(Vec<BucketEntry>, Vec<f64>)> {
    let mut entries = Vec::with_capacity(slots.len());
    let mut times = Vec::with_capacity(slots.len());
    for s in slots {
        let Some(res) = s else {
            return Err(worker_errors.pop().unwrap_or_else(|| Error::Input("a bucket was not planned".into())));
        };
        let (e, t) = res?;
        entries.push(e);
        times.push(t);
    }
    Ok((entries, times))
}
