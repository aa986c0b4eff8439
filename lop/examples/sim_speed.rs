//! Simulator speed on a zoo model:
//! `cargo run --release -p lop --example sim_speed [MODEL] [LINK_MB_PER_S]`.
//! Prints microseconds per simulation for a few plans and the time of the exact layer
//! partition searches.

use lop::baseline::{SearchOptions, best_layer_partition, energy_layer_partition};
use lop::plan::{Plan, Side};
use lop::profile::{Fit, Profile};
use lop::sim::{Link, Objective, SimConfig, Simulator};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args().nth(1).unwrap_or_else(|| "resnet50".into());
    let g = lop::zoo::build(&name)?;
    let per_row = |id: usize| g.nodes[id].info.bytes_of_rows(1) as f64;
    let robot = Profile::synthetic(&g, Side::Robot, |id| Fit::new(1e-4, per_row(id) * 2e-9))?;
    let server = Profile::synthetic(&g, Side::Server, |id| Fit::new(3e-5, per_row(id) * 1e-10))?;
    let mbps: f64 = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(10.0);
    let cfg = SimConfig { link: Link { bandwidth: mbps * 1e6, latency_s: 0.002, overhead_s: 1e-4 }, ..SimConfig::default() };
    let sim = Simulator::new(&g, &robot, &server, cfg)?;
    let ops = (0..g.nodes.len()).filter(|&i| g.is_op(i)).count();
    println!("{name}: {} nodes, {ops} ops, link {mbps} MB/s", g.nodes.len());
    let mut random3 = Plan::random(&g, 8, 7);
    for s in &mut random3.splits {
        s.robot_chunks = 1;
        s.server_chunks = 1;
    }
    let plans = [
        ("robot-only", Plan::robot_only(&g, 8)),
        ("server-only", Plan::server_only(&g, 8)),
        ("even (1 chunk/op)", Plan::even(&g, 8)),
        ("random (1 chunk/op)", random3),
        ("random (1-3 chunks/op)", Plan::random(&g, 8, 7)),
    ];
    for (label, plan) in &plans {
        let n = 2000;
        let mut ms = 0.0;
        let t = Instant::now();
        for _ in 0..n {
            ms += sim.cost(plan)?.makespan_s;
        }
        let us = t.elapsed().as_secs_f64() / n as f64 * 1e6;
        println!("  {label:<24} {us:8.1} us/simulation   makespan {:.2} ms", ms / n as f64 * 1e3);
    }
    let opts = SearchOptions::default();
    let t = Instant::now();
    let lat = best_layer_partition(&sim, Objective::Latency, &opts)?;
    let lat_ms = lat.cost.map_or(f64::INFINITY, |c| c.makespan_s * 1e3);
    println!(
        "  layer partition (latency): {lat_ms:.2} ms, {} simulations, {:.1} ms search",
        lat.evaluated,
        t.elapsed().as_secs_f64() * 1e3
    );
    let t = Instant::now();
    let en = energy_layer_partition(&sim, lat_ms * 1.5e-3, &opts)?;
    println!(
        "  energy layer partition (deadline 1.5x): {:?} J, {} simulations, {:.1} ms search",
        en.cost.map(|c| c.energy_j),
        en.evaluated,
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
