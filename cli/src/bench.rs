//! `lop bench`: every method over the same bandwidth trace in one run, through the real
//! runtime (executor, edge service, robot client) on an in-process link that replays the trace.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use lop::plan::Side;
use lop::planner::PlannerConfig;
use lop::planner::table::TableSpec;
use lop::profile::{DeviceKind, Profile, ProfileOptions, profile_graph};
use lop::sim::{SimConfig, Simulator};
use lop_runtime::bench::{BenchConfig, MethodReport};
use lop_runtime::exec::InputWire;
use lop_runtime::trace::Trace;

use crate::ModelArgs;
use crate::plan::{Bounds, InputDtype, parse_buckets};

/// Arguments of `lop bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Bandwidth trace (CSV `t_s,mbps`, 0.5 s steps), e.g. data/traces/indoor.csv.
    #[arg(long)]
    pub trace: PathBuf,
    /// Methods, comma-separated: robot-only, server-only, layer, lop.
    #[arg(long, default_value = "robot-only,server-only,layer,lop")]
    pub methods: String,
    /// Inferences per method.
    #[arg(long, default_value_t = 20)]
    pub requests: usize,
    /// The robot is this many times slower than this machine (kernels stretched by waiting).
    #[arg(long, default_value_t = 1.0)]
    pub dilation: f64,
    /// Multiply the trace by F; `auto` makes the raw input as float32 at the trace's mean rate
    /// take 0.44 x the robot-only compute time (the paper's VGG19 indoor regime).
    #[arg(long, default_value = "auto")]
    pub bandwidth_scale: String,
    /// How the raw input crosses the link, for every method alike.
    #[arg(long, value_enum, default_value = "u8")]
    pub input_dtype: InputDtype,
    /// One-way link latency, milliseconds.
    #[arg(long, default_value_t = 1.0)]
    pub latency_ms: f64,
    /// Schedule table buckets FROM:TO:STEP (MB/s before scaling).
    #[arg(long, default_value = "0:30:1")]
    pub buckets: String,
    /// Where chunks are cut (planner and executor alike).
    #[arg(long, value_enum, default_value = "aligned")]
    pub chunk_bounds: Bounds,
    /// Robot profile (default: measured now with --dilation, cached in --profile-dir).
    #[arg(long)]
    pub robot_profile: Option<PathBuf>,
    /// Server profile (default: measured now, cached in --profile-dir).
    #[arg(long)]
    pub server_profile: Option<PathBuf>,
    /// Where measured profiles are cached (default: the temp dir's lop-profiles).
    #[arg(long)]
    pub profile_dir: Option<PathBuf>,
    /// Schedule table cache (default: the temp dir's lop-plan-cache).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print a line per inference (stderr).
    #[arg(long)]
    pub verbose: bool,
}

/// The table name of a method given on the command line.
fn method_name(m: &str) -> anyhow::Result<&'static str> {
    Ok(match m.trim() {
        "robot-only" => "robot-only",
        "server-only" => "server-only",
        "layer" | "layer-partition" => "layer-partition",
        "lop" => "lop",
        other => anyhow::bail!("unknown method '{other}' (robot-only, server-only, layer, lop)"),
    })
}

/// The JSON name of a method.
fn short_name(m: &str) -> &str {
    if m == "layer-partition" { "layer" } else { m }
}

/// A profile from `path`, or measured now (cached by model hash, role and dilation).
fn profile(graph: &lop::Graph, path: Option<&Path>, dir: &Path, role: Side, dilation: f64) -> anyhow::Result<Profile> {
    let hash = graph.content_hash()?;
    if let Some(p) = path {
        let prof = Profile::load(p).with_context(|| format!("{} profile {}", role.name(), p.display()))?;
        prof.validate(graph, &hash).with_context(|| format!("{} profile {}", role.name(), p.display()))?;
        return Ok(prof);
    }
    let cached = dir.join(format!("{}.{}.d{dilation}.{}.json", graph.name, role.name(), &hash[..12]));
    if let Ok(p) = Profile::load(&cached)
        && p.validate(graph, &hash).is_ok()
        && p.role == role
    {
        eprintln!("using cached {} profile {}", role.name(), cached.display());
        return Ok(p);
    }
    eprintln!(
        "profiling {} as {} (dilation {dilation}, {} threads); cached in {}",
        graph.name,
        role.name(),
        tch::get_num_threads(),
        dir.display()
    );
    let inputs = lop::exec::synthetic_inputs(graph, 0)?;
    let opts = ProfileOptions { role, device: DeviceKind::Cpu, dilation, runs: 5, warmup: 1, units: 8 };
    let prof = profile_graph(graph, &inputs, &opts, |i, n, _| {
        if i % 20 == 0 && i < n {
            eprintln!("  [{i}/{n}]");
        }
    })?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    prof.save(&cached)?;
    Ok(prof)
}

/// Runs the benchmark and prints the results.
///
/// # Errors
/// Bad options, unreadable trace or profiles, runtime failures.
pub fn run(args: &BenchArgs, threads: Option<i32>) -> anyhow::Result<i32> {
    anyhow::ensure!(args.requests >= 1, "--requests must be at least 1");
    anyhow::ensure!(args.dilation.is_finite() && args.dilation >= 1.0, "--dilation must be >= 1");
    anyhow::ensure!(args.latency_ms.is_finite() && args.latency_ms >= 0.0, "--latency-ms must be >= 0");
    let methods: Vec<&str> = args.methods.split(',').map(method_name).collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(!methods.is_empty(), "--methods is empty");
    // Robot and server share this machine's cores: one libtorch thread each unless told otherwise.
    if threads.is_none() {
        tch::set_num_threads(1);
    }
    let trace = Trace::load(&args.trace).with_context(|| format!("trace {}", args.trace.display()))?;
    let graph = args.model.load()?;
    let tmp = std::env::temp_dir();
    let pdir = args.profile_dir.clone().unwrap_or_else(|| tmp.join("lop-profiles"));
    let robot = profile(&graph, args.robot_profile.as_deref(), &pdir, Side::Robot, args.dilation)?;
    let server = profile(&graph, args.server_profile.as_deref(), &pdir, Side::Server, 1.0)?;
    let scale = match args.bandwidth_scale.as_str() {
        "auto" => {
            let sim = Simulator::new(&graph, &robot, &server, SimConfig::default())?;
            let t = sim.cost(&lop::Plan::robot_only(&graph, 8))?.makespan_s;
            let bytes: usize = graph.inputs().iter().map(|&i| graph.nodes[i].info.numel() * 4).sum();
            anyhow::ensure!(t > 0.0 && bytes > 0 && trace.mean_mbps() > 0.0, "cannot pick a bandwidth scale");
            bytes as f64 * 8.0 / (trace.mean_mbps() * 1e6 * 0.44 * t)
        }
        v => v.parse::<f64>().ok().filter(|f| f.is_finite() && *f > 0.0).with_context(|| format!("--bandwidth-scale '{v}'"))?,
    };
    eprintln!("bandwidth scale {scale:.4} (trace mean {:.1} Mbit/s -> {:.1} Mbit/s)", trace.mean_mbps(), trace.mean_mbps() * scale);
    let spec = TableSpec {
        buckets: parse_buckets(&args.buckets)?,
        bandwidth_scale: scale,
        latency_s: args.latency_ms / 1e3,
        overhead_s: 0.0,
        input_bytes_per_element: args.input_dtype.bytes_per_element(),
        objective: lop::sim::Objective::Latency,
        power: Default::default(),
        planner: PlannerConfig::default(),
        chunk_order: lop::sim::ChunkOrder::Wavefront,
        chunk_bounds: args.chunk_bounds.chunk_bounds(),
    };
    let cfg = BenchConfig {
        model_id: graph.name.replace(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'), "_"),
        source: args.model.model.clone(),
        load: lop::model::LoadOptions { input_shape: args.model.input_shape.clone() },
        robot,
        server,
        spec,
        trace: trace.clone().scaled(scale)?,
        latency: Duration::from_secs_f64(args.latency_ms / 1e3),
        methods: methods.iter().map(|m| m.to_string()).collect(),
        requests: args.requests,
        dilation: args.dilation,
        input_wire: match args.input_dtype {
            InputDtype::U8 => InputWire::Native,
            InputDtype::F32 => InputWire::F32,
        },
        cache_dir: args.cache_dir.clone().unwrap_or_else(|| tmp.join("lop-plan-cache")),
        power: Default::default(),
        gap: Duration::ZERO,
    };
    drop(graph);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting tokio")?;
    let verbose = args.verbose;
    let reports = rt.block_on(lop_runtime::bench::run_in_process(&cfg, |m, i, s| {
        if verbose {
            eprintln!(
                "{m:>15} #{i:<3} {:8.1} ms  bucket {:>4.1}  up {:>8} B  down {:>8} B{}",
                s.total_s * 1e3,
                s.bucket_mb_s,
                s.bytes_up,
                s.bytes_down,
                if s.fallback { "  FALLBACK" } else { "" }
            );
        }
    }))?;
    print_report(args, &cfg, scale, &reports)?;
    let worst = reports.values().map(|r| r.max_rel_err).fold(0.0, f64::max);
    anyhow::ensure!(worst <= 1e-4, "outputs differ from the unsplit model: relative error {worst:e}");
    Ok(0)
}

fn print_report(
    args: &BenchArgs,
    cfg: &BenchConfig,
    scale: f64,
    reports: &std::collections::BTreeMap<String, MethodReport>,
) -> anyhow::Result<()> {
    let ordered: Vec<(&str, &MethodReport)> = ["robot-only", "server-only", "layer-partition", "lop"]
        .iter()
        .filter_map(|m| reports.get(*m).map(|r| (short_name(m), r)))
        .collect();
    if args.json {
        let methods: serde_json::Map<String, serde_json::Value> =
            ordered.iter().map(|(m, r)| Ok((m.to_string(), serde_json::to_value(r)?))).collect::<anyhow::Result<_>>()?;
        let v = serde_json::json!({
            "model": args.model.model,
            "trace": args.trace.display().to_string(),
            "dilation": cfg.dilation,
            "bandwidth_scale": scale,
            "input_dtype": match args.input_dtype { InputDtype::U8 => "u8", InputDtype::F32 => "f32" },
            "transport": "in-process shaped link",
            "requests": cfg.requests,
            "methods": methods,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{} over {} (x{scale:.3}), dilation {}, input {:?}, {} requests per method",
        args.model.model,
        args.trace.display(),
        cfg.dilation,
        args.input_dtype,
        cfg.requests
    );
    println!(
        "{:<12} {:>9} {:>8} {:>9} {:>9} {:>9} {:>11} {:>11} {:>9} {:>9} {:>10}",
        "method", "mean ms", "std", "p50", "p95", "sim ms", "up B", "down B", "energy J", "fallback", "max err"
    );
    let best_layer = ["robot-only", "server-only", "layer"]
        .iter()
        .filter_map(|m| ordered.iter().find(|(n, _)| n == m))
        .map(|(_, r)| r.mean_ms)
        .fold(f64::INFINITY, f64::min);
    for (m, r) in &ordered {
        println!(
            "{m:<12} {:>9.1} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>11.0} {:>11.0} {:>9.3} {:>9} {:>10.1e}",
            r.mean_ms, r.std_ms, r.p50_ms, r.p95_ms, r.sim_mean_ms, r.bytes_up, r.bytes_down, r.energy_j, r.fallbacks, r.max_rel_err
        );
    }
    if let Some((_, lop)) = ordered.iter().find(|(n, _)| *n == "lop")
        && best_layer.is_finite()
    {
        println!("lop / best of robot-only, server-only, layer: {:.3}", lop.mean_ms / best_layer);
    }
    Ok(())
}
