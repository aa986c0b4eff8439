//! The simulator's yardsticks of a benchmark's schedule table, per table entry (bucket): the
//! best baseline, the server-pipelining and fluid bounds, and each method's simulated server
//! compute ([`BucketYardsticks`]); loaded or built with the table itself ([`table`]). The
//! measured requests are compared with them in their buckets.

use std::collections::BTreeMap;

use lop::planner::table::ScheduleTable;
use lop::profile::Profile;

use super::config::BenchConfig;
use crate::error::Result;
use crate::exec::Worker;

/// Per table entry, simulated seconds: the best of robot-only, server-only and the layer
/// partition, and the server-pipelining bound (`lop::sim::Simulator::server_pipeline_bound`).
#[derive(Debug, Clone)]
pub(super) struct BucketYardsticks {
    pub(super) best_baseline_s: Option<f64>,
    pub(super) bound_s: Option<f64>,
    pub(super) fluid_s: Option<f64>,
    /// Per method (table name), the seconds the simulator keeps the server computing its plan:
    /// what the server's measured compute is checked against.
    pub(super) server_busy_s: BTreeMap<String, f64>,
}

/// Per table entry and method, the simulated server compute of the method's plan in the
/// entry's bucket (its compute spans' union, seconds).
fn simulated_server_busy(
    table: &ScheduleTable,
    g: &lop::graph::Graph,
    robot: &Profile,
    server: &Profile,
) -> lop::Result<Vec<BTreeMap<String, f64>>> {
    let mut sim = lop::sim::Simulator::new(g, robot, server, table.spec.sim_config(0.0))?;
    let mut out = Vec::with_capacity(table.entries.len());
    for e in &table.entries {
        sim.set_config(table.spec.sim_config(e.bucket_mb_s))?;
        let mut busy = BTreeMap::new();
        for m in crate::plans::METHODS {
            // A plan infeasible in its bucket (one that uses the link, in a bucket without one)
            // has no price there.
            if let Some(r) = e.plan_of(m).and_then(|plan| sim.simulate(plan).ok()) {
                busy.insert(m.to_string(), r.server_compute.busy_s);
            }
        }
        out.push(busy);
    }
    Ok(out)
}

/// The schedule table and its entries' yardsticks.
pub(super) async fn table(cfg: &BenchConfig, worker: &Worker) -> Result<(ScheduleTable, Vec<BucketYardsticks>)> {
    let (robot, server, spec, dir) = (cfg.robot.clone(), cfg.server.clone(), cfg.spec.clone(), cfg.cache_dir.clone());
    let out = worker
        .call(move |g| -> lop::Result<(ScheduleTable, Vec<BucketYardsticks>)> {
            let (table, _, _) = lop::planner::table::load_or_build(&dir, g, &robot, &server, &spec, 1)?;
            let bounds = table.pipeline_bounds(g, &robot, &server, 1)?;
            let fluid = table.fluid_bounds(g, &robot, &server, 1)?;
            let busy = simulated_server_busy(&table, g, &robot, &server)?;
            let marks = table
                .entries
                .iter()
                .zip(bounds.into_iter().zip(fluid).zip(busy))
                .map(|(e, ((bound_s, fluid_s), server_busy_s))| BucketYardsticks {
                    best_baseline_s: e.best_baseline_s(),
                    bound_s,
                    fluid_s: fluid_s.map(|f| f.bound_s),
                    server_busy_s,
                })
                .collect();
            Ok((table, marks))
        })
        .await??;
    Ok(out)
}
