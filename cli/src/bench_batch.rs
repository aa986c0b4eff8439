//! `lop bench-batch MODEL`: what batching across robots gains on this machine's device. The
//! server side of B inferences run as one batch (every op in row bands, as an edge computes its
//! chunks) against the same B samples run one after the other, the same code with a batch of one;
//! each sample's batched output is checked against its own run. With `--robots N`, through the
//! whole edge service instead: N robots in this process against one replica, batching off and on.

use crate::ModelArgs;
use crate::bench_exec::median;
use crate::profile::DeviceArg;
use anyhow::Context;
use lop::exec::{Tolerance, agree, run_batched, synthetic_inputs};
use std::time::Instant;
use tch::Tensor;

/// Arguments of `lop bench-batch` (`--threads` is the global option).
#[derive(Debug, clap::Args)]
pub struct BenchBatchArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Batch sizes to time, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub batches: Vec<usize>,
    /// Row bands per op (a server pipelining a frame computes each op in several bands).
    #[arg(long, default_value_t = 4)]
    pub bands: usize,
    /// Where to run the kernels.
    #[arg(long, value_enum, default_value = "cpu")]
    pub device: DeviceArg,
    /// Timed runs per batch size and method (the median is kept).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Through the edge service: this many robots send frames back to back to one replica,
    /// first with batching off, then with `max_batch` the largest of `--batches`.
    #[arg(long)]
    pub robots: Option<usize>,
    /// With `--robots`: seconds per setting.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// With `--robots`: the robots' method, `server-only` or `lop`.
    #[arg(long, default_value = "server-only")]
    pub method: String,
    /// Memory layout of convolutions: nchw, channels_last, or auto (both timed as `lop profile`
    /// times them, the faster kept; not with `--robots`). With `--robots`, the edge's and the
    /// robots' layout.
    #[arg(long, default_value = "nchw")]
    pub layout: lop::profile::LayoutChoice,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn sync(device: tch::Device) {
    if let tch::Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
}

/// Times every batch size, prints per-inference milliseconds batched and one by one, and their
/// ratio (the throughput gain of batching).
///
/// # Errors
/// Bad options, a missing CUDA device, a model without a batch axis, load or execution failures,
/// a batched output that differs from its sample's own.
pub fn run(args: &BenchBatchArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(args.runs > 0, "--runs {}: must be at least 1", args.runs);
    anyhow::ensure!(args.bands > 0, "--bands {}: must be at least 1", args.bands);
    anyhow::ensure!(!args.batches.is_empty() && args.batches.iter().all(|&b| (1..=64).contains(&b)), "--batches: sizes from 1 to 64");
    if let Some(robots) = args.robots {
        return through_edge(args, robots);
    }
    let device = match args.device {
        DeviceArg::Cpu => tch::Device::Cpu,
        DeviceArg::Cuda => {
            anyhow::ensure!(tch::Cuda::is_available(), "--device cuda: libtorch sees no CUDA device");
            tch::Device::Cuda(0)
        }
    };
    let mut graph = args.model.load()?;
    if let Some(why) = lop::exec::unbatchable(&graph) {
        anyhow::bail!("model '{}' cannot run batched: {why}", graph.name);
    }
    graph.to_device(device).context("moving the model to the device")?;
    let most = args.batches.iter().copied().max().unwrap_or(1);
    let samples: Vec<Vec<Tensor>> = (0..most)
        .map(|k| -> anyhow::Result<Vec<Tensor>> {
            synthetic_inputs(&graph, 1 + k as u64)?
                .into_iter()
                .map(|t| t.f_to_device(device).context("moving an input to the device"))
                .collect()
        })
        .collect::<anyhow::Result<_>>()?;
    let kind = if device.is_cuda() { lop::profile::DeviceKind::Cuda } else { lop::profile::DeviceKind::Cpu };
    let layout = match args.layout.fixed() {
        Some(l) => {
            graph.set_layout(l).context("laying the model out")?;
            l
        }
        None => lop::profile::choose_layout(&mut graph, &samples[0], kind)?.0,
    }
    .name();
    eprintln!("bench-batch {} on {device:?}, {} threads, {} bands per op, {layout}", graph.name, tch::get_num_threads(), args.bands);
    // Warm up, and check every sample of the largest batch against its own run.
    let alone: Vec<Vec<Tensor>> =
        samples.iter().map(|s| run_batched(&graph, std::slice::from_ref(s), args.bands)).collect::<lop::Result<_>>()?;
    let together = run_batched(&graph, &samples, args.bands)?;
    let (mut worst, mut agree_all) = (0.0f64, true);
    for (k, own) in alone.iter().enumerate() {
        for (b, o) in together.iter().zip(own) {
            let a = agree(&b.narrow(0, k as i64, 1), o, Tolerance::SPLIT)?;
            worst = worst.max(a.rel_err);
            agree_all &= a.within;
        }
    }
    anyhow::ensure!(
        agree_all,
        "a batched output differs from its sample's own run: relative error {worst} (tolerance {})",
        Tolerance::SPLIT.describe()
    );
    let mut rows = Vec::new();
    for &b in &args.batches {
        let batch = &samples[..b];
        let (mut one_by_one, mut batched) = (Vec::new(), Vec::new());
        for _ in 0..args.runs {
            let t = Instant::now();
            for s in batch {
                run_batched(&graph, std::slice::from_ref(s), args.bands)?;
            }
            sync(device);
            one_by_one.push(t.elapsed().as_secs_f64() * 1e3 / b as f64);
            let t = Instant::now();
            run_batched(&graph, batch, args.bands)?;
            sync(device);
            batched.push(t.elapsed().as_secs_f64() * 1e3 / b as f64);
        }
        let (one, bat) = (median(one_by_one), median(batched));
        eprintln!("batch {b}: {one:.2} ms one by one, {bat:.2} ms batched per inference");
        rows.push(serde_json::json!({"batch": b, "one_by_one_ms": one, "batched_ms": bat, "throughput_gain": one / bat}));
    }
    if args.json {
        let v = serde_json::json!({
            "model": graph.name, "device": format!("{device:?}"), "threads": tch::get_num_threads(),
            "bands": args.bands, "layout": layout, "max_rel_err": worst, "batches": rows,
        });
        println!("{v}");
    } else {
        println!("{} on {device:?} ({} bands per op, {layout}): per inference, one by one against batched", graph.name, args.bands);
        println!("{:>6} {:>12} {:>12} {:>8}", "batch", "alone ms", "batched ms", "gain");
        for r in &rows {
            println!(
                "{:>6} {:>12.2} {:>12.2} {:>7.2}x",
                r["batch"],
                r["one_by_one_ms"].as_f64().unwrap_or(f64::NAN),
                r["batched_ms"].as_f64().unwrap_or(f64::NAN),
                r["throughput_gain"].as_f64().unwrap_or(f64::NAN)
            );
        }
        println!("every batched output equals its sample's own (max relative error {worst:.1e})");
    }
    Ok(0)
}

/// `--robots N`: the edge's frames per second with batching off and on, side by side.
fn through_edge(args: &BenchBatchArgs, robots: usize) -> anyhow::Result<i32> {
    anyhow::ensure!((1..=64).contains(&robots), "--robots must be from 1 to 64");
    anyhow::ensure!(args.seconds.is_finite() && args.seconds > 0.0, "--seconds {}: must be positive", args.seconds);
    anyhow::ensure!(matches!(args.method.as_str(), "server-only" | "lop"), "--method must be server-only or lop, not '{}'", args.method);
    anyhow::ensure!(args.device == DeviceArg::Cpu, "--robots runs the edge on the CPU; time a GPU's kernels without --robots");
    let Some(layout) = args.layout.fixed() else {
        anyhow::bail!("--layout auto is chosen per profile; with --robots give nchw or channels_last");
    };
    let most = args.batches.iter().copied().max().unwrap_or(1).max(2);
    let cfg = lop_runtime::batch_bench::EdgeBatchBench {
        source: args.model.model.clone(),
        load: lop::model::LoadOptions { layout, ..args.model.load_options() },
        robots,
        seconds: args.seconds,
        method: args.method.clone(),
        cache_dir: std::env::temp_dir().join("lop-plan-cache"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting tokio")?;
    let mut reports = Vec::new();
    for max_batch in [1, most] {
        eprintln!("bench-batch {}: {robots} robots ({}), max_batch {max_batch}, {} s", args.model.model, args.method, args.seconds);
        let r = runtime.block_on(lop_runtime::batch_bench::run_edge_batching(&cfg, max_batch)).context("the edge run")?;
        eprintln!("  {:.1} frames/s, {} batches of {} inferences, {} fallbacks", r.frames_per_s, r.batches, r.batched, r.fallbacks);
        reports.push(r);
    }
    let gain = reports[1].frames_per_s / reports[0].frames_per_s.max(1e-9);
    if args.json {
        let v = serde_json::json!({"model": args.model.model, "robots": robots, "method": args.method, "seconds": args.seconds,
            "threads": tch::get_num_threads(), "settings": reports, "throughput_gain": gain});
        println!("{v}");
    } else {
        println!("{} through the edge, {robots} robots ({}), one replica on the CPU:", args.model.model, args.method);
        for r in &reports {
            println!(
                "  max_batch {:>2}: {:>6.1} frames/s ({} frames, {} batches holding {} inferences, {} fallbacks)",
                r.max_batch, r.frames_per_s, r.frames, r.batches, r.batched, r.fallbacks
            );
        }
        println!("throughput gain {gain:.2}x; every answer equals its frame's unsplit output");
    }
    Ok(0)
}
