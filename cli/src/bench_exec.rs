//! `lop bench-exec MODEL`: the band executor running the model as one band against a plain
//! whole-graph run of the same IR, and the peak activation memory of a split run.

use crate::ModelArgs;
use lop::exec::{run_split, run_whole, synthetic_inputs};
use lop::plan::Plan;
use std::time::Instant;

/// Arguments of `lop bench-exec`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Timed runs per method (median reported).
    #[arg(long, default_value_t = 20)]
    pub runs: usize,
    /// Untimed warm-up runs per method.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Units per op for the split run measured for memory.
    #[arg(long, default_value_t = 8)]
    pub units: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The median of `v` (NaN when empty).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// Measures and prints the overhead ratio (band executor / whole run) and the memory ratio.
///
/// # Errors
/// Load or execution failures.
pub fn run(args: &BenchArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(args.runs > 0, "--runs {}: must be at least 1", args.runs);
    let graph = args.model.load()?;
    let inputs = synthetic_inputs(&graph, 0)?;
    let one_band = Plan::robot_only(&graph, args.units);
    for _ in 0..args.warmup {
        run_whole(&graph, &inputs)?;
        run_split(&graph, &one_band, &inputs)?;
    }
    // Interleave the two methods so drift in machine load hits both alike.
    let (mut whole, mut banded) = (Vec::new(), Vec::new());
    for i in 0..args.runs {
        let t = Instant::now();
        let w = run_whole(&graph, &inputs)?;
        whole.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let b = run_split(&graph, &one_band, &inputs)?;
        banded.push(t.elapsed().as_secs_f64() * 1e3);
        drop((w, b));
        if (i + 1) % 5 == 0 {
            eprintln!("bench-exec {}: {}/{} runs", graph.name, i + 1, args.runs);
        }
    }
    let whole_ms = median(whole);
    let banded_ms = median(banded);
    let whole_run = run_whole(&graph, &inputs)?;
    let even = run_split(&graph, &Plan::even(&graph, args.units), &inputs)?;
    let random = run_split(&graph, &Plan::random(&graph, args.units, 1), &inputs)?;
    let peak_mem_ratio = even.peak_bytes as f64 / whole_run.peak_bytes.max(1) as f64;
    let random_ratio = random.peak_bytes as f64 / whole_run.peak_bytes.max(1) as f64;
    let ratio = banded_ms / whole_ms;
    if args.json {
        let v = serde_json::json!({
            "model": graph.name, "whole_ms": whole_ms, "banded_ms": banded_ms, "ratio": ratio,
            "peak_mem_ratio": peak_mem_ratio, "peak_mem_ratio_random_layout": random_ratio,
            "whole_peak_bytes": whole_run.peak_bytes, "split_peak_bytes": even.peak_bytes,
            "runs": args.runs, "threads": tch::get_num_threads(),
        });
        println!("{v}");
    } else {
        println!("{}: whole {whole_ms:.2} ms, one-band executor {banded_ms:.2} ms, ratio {ratio:.3}", graph.name);
        println!(
            "peak activation memory: whole {} B, even split (both sides) {} B, ratio {peak_mem_ratio:.2}; random layout ratio {random_ratio:.2}",
            whole_run.peak_bytes, even.peak_bytes
        );
    }
    Ok(0)
}
