//! `lop simulate MODEL --robot-profile R --server-profile S --bandwidth 8MB/s [--method
//! lop|layer|robot-only|server-only] [--table TABLE] [--svg OUT.svg] [--json]`: simulates one
//! method's plan on one link and draws its timeline.

use crate::plan::SetupArgs;
use anyhow::Context;
use lop::planner::{PlannerConfig, ScheduleTable, plan, svg};
use lop::sim::{Link, SimConfig, Simulator};
use std::path::PathBuf;

/// Which plan to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Method {
    /// LOSS (from `--table`, else planned now).
    Lop,
    /// The exact best layer partition.
    Layer,
    /// Everything on the robot.
    RobotOnly,
    /// Everything on the server.
    ServerOnly,
}

/// Arguments of `lop simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Model, profiles, link, objective.
    #[command(flatten)]
    pub setup: SetupArgs,
    /// Link bandwidth: `8MB/s`, `64Mbit/s` or a number of MB/s.
    #[arg(long, value_parser = parse_bandwidth)]
    pub bandwidth: f64,
    /// The method whose plan is simulated.
    #[arg(long, value_enum, default_value = "lop")]
    pub method: Method,
    /// A schedule table to take the LOSS plan from (the bucket of `bandwidth / scale`).
    #[arg(long)]
    pub table: Option<PathBuf>,
    /// Where to draw the timeline.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Print the full report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Parses `8MB/s`, `64Mbit/s`, `8` (MB/s) into MB/s.
pub fn parse_bandwidth(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let (num, div) = if let Some(v) = t.strip_suffix("MB/s") {
        (v, 1.0)
    } else if let Some(v) = t.strip_suffix("Mbit/s") {
        (v, 8.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v / div),
        _ => Err(format!("'{s}' is not a bandwidth like 8MB/s or 64Mbit/s")),
    }
}

/// Simulates and reports.
///
/// # Errors
/// Bad inputs, a table for another model, infeasible plans, unwritable outputs.
pub fn run(args: &SimulateArgs) -> anyhow::Result<i32> {
    let s = args.setup.load()?;
    let config = SimConfig {
        link: Link::mbytes(args.bandwidth, args.setup.latency_ms / 1e3),
        input_bytes_per_element: args.setup.input_wire.bytes_per_element(),
        order: args.setup.chunk_order.chunk_order(),
        bounds: args.setup.chunk_bounds.chunk_bounds(),
        ..SimConfig::default()
    };
    let sim = Simulator::new(&s.graph, &s.robot, &s.server, config)?;
    let opts = lop::baseline::SearchOptions::default();
    let p = match (args.method, &args.table) {
        (Method::RobotOnly, _) => lop::Plan::robot_only(&s.graph, opts.units),
        (Method::ServerOnly, _) => lop::Plan::server_only(&s.graph, opts.units),
        (Method::Layer, _) => lop::baseline::best_layer_partition(&sim, args.setup.objective, &opts)?.plan,
        (Method::Lop, Some(path)) => {
            let t = ScheduleTable::load(path).with_context(|| format!("table {}", path.display()))?;
            anyhow::ensure!(
                t.key.model_hash == s.graph.content_hash()?,
                "table {} is for model '{}', not this one",
                path.display(),
                t.model
            );
            if t.spec.chunk_order != config.order {
                eprintln!(
                    "warning: table {} was planned with chunk order {:?}, simulating with {:?}",
                    path.display(),
                    t.spec.chunk_order,
                    config.order
                );
            }
            if t.spec.chunk_bounds != config.bounds {
                eprintln!(
                    "warning: table {} was planned with chunk bounds {:?}, simulating with {:?}",
                    path.display(),
                    t.spec.chunk_bounds,
                    config.bounds
                );
            }
            let bucket = args.bandwidth / t.spec.bandwidth_scale;
            t.lookup(bucket).with_context(|| format!("table {} has no buckets", path.display()))?.plan.clone()
        }
        (Method::Lop, None) => plan(&sim, args.setup.objective, &PlannerConfig::default())?.plan,
    };
    let report = sim.simulate(&p)?;
    if let Some(path) = &args.svg {
        let title = format!("{} {:?} at {:.4} MB/s", s.graph.name, args.method, args.bandwidth);
        std::fs::write(path, svg::timeline(&report, &title)).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "{} {:?}: makespan {:.3} ms, up {} B, down {} B, overlap {:.2}, energy {:.3} J (modelled)",
            s.graph.name,
            args.method,
            report.makespan_s * 1e3,
            report.bytes_up,
            report.bytes_down,
            report.overlap_ratio,
            report.energy.joules
        );
    }
    Ok(0)
}
