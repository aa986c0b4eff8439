//! `lop verify MODEL --plans N [--seed S] [--json]`.

use crate::ModelArgs;
use anyhow::Context;
use lop::exec::{Agreement, Tolerance, agree_all, run_split, run_whole, synthetic_inputs};
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
    /// The relative part of the tolerance: outputs agree when `|a - b| <= abs-tol + tol x max|b|`.
    #[arg(long, default_value_t = Tolerance::SPLIT.rel)]
    pub tol: f64,
    /// The absolute floor of the tolerance (8 float32 ulps at 1.0 by default), for outputs far
    /// smaller than the activations they come from.
    #[arg(long, default_value_t = Tolerance::SPLIT.abs)]
    pub abs_tol: f64,
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
    anyhow::ensure!(args.tol >= 0.0 && args.abs_tol >= 0.0, "--tol {} and --abs-tol {}: must not be negative", args.tol, args.abs_tol);
    let tol = Tolerance { rel: args.tol, abs: args.abs_tol };
    let graph = args.model.load()?;
    let inputs = synthetic_inputs(&graph, args.seed)?;
    let t0 = Instant::now();
    let whole = run_whole(&graph, &inputs).context("whole run")?;
    let whole_ms = t0.elapsed().as_secs_f64() * 1e3;
    for (i, o) in whole.outputs.iter().enumerate() {
        let finite = o.isfinite().all().int64_value(&[]) != 0;
        anyhow::ensure!(finite, "output {i} of the whole run is not finite: a verify error would be meaningless");
    }
    let mut worst: Option<Agreement> = None;
    let mut per_plan = Vec::new();
    for i in 0..args.plans {
        let seed = args.seed + i as u64;
        let plan = Plan::random(&graph, args.units, seed);
        let t = Instant::now();
        let split = run_split(&graph, &plan, &inputs).with_context(|| format!("split run with layout seed {seed}"))?;
        let a = agree_all(&split.outputs, &whole.outputs, tol)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let moved = if a.reordered > 0 { format!(" ({} near-tied rows reordered)", a.reordered) } else { String::new() };
        eprintln!(
            "verify {}: layout {}/{} (seed {seed}) rel err {:.3e}, max abs diff {:.3e}{moved}, {} B up, {} B down, {ms:.0} ms",
            graph.name,
            i + 1,
            args.plans,
            a.rel_err,
            a.max_abs_diff,
            split.bytes_up,
            split.bytes_down
        );
        per_plan.push(serde_json::json!({
            "seed": seed, "max_rel_err": a.rel_err, "max_abs_diff": a.max_abs_diff, "within": a.within,
            "reordered": a.reordered, "bytes_up": split.bytes_up, "bytes_down": split.bytes_down, "plan_hash": plan.hash(),
        }));
        worst = Some(match worst {
            Some(w) if !w.within || (a.within && w.rel_err >= a.rel_err) => w,
            _ => a,
        });
    }
    let ok = worst.as_ref().is_none_or(|w| w.within);
    let (rel, abs) = worst.as_ref().map_or((0.0, 0.0), |w| (w.rel_err, w.max_abs_diff));
    if args.json {
        let v = serde_json::json!({
            "model": graph.name, "plans": args.plans, "max_rel_err": rel, "max_abs_diff": abs, "ok": ok,
            "tolerance": args.tol, "abs_tolerance": args.abs_tol, "rule": tol.describe(), "units": args.units,
            "whole_ms": whole_ms, "layouts": per_plan,
        });
        println!("{v}");
    } else {
        println!(
            "{}: {} layouts, max relative error {rel:.3e}, max abs difference {abs:.3e} (tolerance {}): {}",
            graph.name,
            args.plans,
            tol.describe(),
            if ok { "ok" } else { "FAILED" }
        );
    }
    Ok(if ok { 0 } else { 1 })
}
