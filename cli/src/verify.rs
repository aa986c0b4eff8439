//! `lop verify MODEL --plans N [--seed S] [--json]`.

use crate::ModelArgs;
use anyhow::Context;
use lop::exec::{max_rel_err_all, run_split, run_whole, synthetic_inputs};
use lop::plan::Plan;
use std::time::Instant;

/// Arguments of `lop verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Number of random band layouts.
    #[arg(long, default_value_t = 10)]
    pub plans: usize,
    /// Seed of the first layout (layout i uses seed + i) and of the input.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Units per op.
    #[arg(long, default_value_t = 8)]
    pub units: usize,
    /// Largest acceptable relative error.
    #[arg(long, default_value_t = 1e-5)]
    pub tol: f64,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Runs the model whole, then under `plans` random layouts, and compares. Exit code 1 when any
/// layout exceeds the tolerance.
///
/// # Errors
/// Load or execution failures.
pub fn run(args: &VerifyArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(args.units > 0, "--units {}: must be at least 1", args.units);
    let graph = args.model.load()?;
    let inputs = synthetic_inputs(&graph, args.seed)?;
    let t0 = Instant::now();
    let whole = run_whole(&graph, &inputs).context("whole run")?;
    let whole_ms = t0.elapsed().as_secs_f64() * 1e3;
    for (i, o) in whole.outputs.iter().enumerate() {
        let finite = o.isfinite().all().int64_value(&[]) != 0;
        anyhow::ensure!(finite, "output {i} of the whole run is not finite: a verify error would be meaningless");
    }
    let mut worst = 0.0f64;
    let mut per_plan = Vec::new();
    for i in 0..args.plans {
        let seed = args.seed + i as u64;
        let plan = Plan::random(&graph, args.units, seed);
        let t = Instant::now();
        let split = run_split(&graph, &plan, &inputs).with_context(|| format!("split run with layout seed {seed}"))?;
        let err = max_rel_err_all(&split.outputs, &whole.outputs)?;
        worst = worst.max(err);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        eprintln!(
            "verify {}: layout {}/{} (seed {seed}) rel err {err:.3e}, {} B up, {} B down, {ms:.0} ms",
            graph.name,
            i + 1,
            args.plans,
            split.bytes_up,
            split.bytes_down
        );
        per_plan.push(serde_json::json!({"seed": seed, "max_rel_err": err, "bytes_up": split.bytes_up, "bytes_down": split.bytes_down, "plan_hash": plan.hash()}));
    }
    let ok = worst <= args.tol;
    if args.json {
        let v = serde_json::json!({
            "model": graph.name, "plans": args.plans, "max_rel_err": worst, "ok": ok,
            "tolerance": args.tol, "units": args.units, "whole_ms": whole_ms, "layouts": per_plan,
        });
        println!("{v}");
    } else {
        println!(
            "{}: {} layouts, max relative error {worst:.3e} (tolerance {:.0e}): {}",
            graph.name,
            args.plans,
            args.tol,
            if ok { "ok" } else { "FAILED" }
        );
    }
    Ok(if ok { 0 } else { 1 })
}
