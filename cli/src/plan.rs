//! `lop plan MODEL --robot-profile R --server-profile S [--buckets 0:30:1] [--objective
//! latency|energy|weighted:LAMBDA|deadline:MS] [--input-dtype u8|f32] [--bandwidth-scale
//! F|auto] [--threads N] [--seed S] --out TABLE [--json] [--svg OUT.svg]`: a schedule table,
//! one LOSS plan per bandwidth bucket, cached on disk by content hash.

use crate::ModelArgs;
use anyhow::Context;
use lop::planner::{CacheUse, PlannerConfig, ScheduleTable, TableSpec, load_or_build, svg};
use lop::profile::Profile;
use lop::sim::{ChunkBounds, ChunkOrder, Objective};
use lop_runtime::table_config::InputWireSetting;
use std::path::{Path, PathBuf};

/// How each side orders its compute chunks (see `lop::sim::ChunkOrder`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Order {
    /// List scheduling: the ready chunk highest in its op first (the executor's rule).
    Wavefront,
    /// Strictly op after op, chunks top to bottom.
    OpMajor,
}

impl Order {
    /// The simulator's setting.
    pub fn chunk_order(self) -> ChunkOrder {
        match self {
            Order::Wavefront => ChunkOrder::Wavefront,
            Order::OpMajor => ChunkOrder::OpMajor,
        }
    }
}

/// Where each op's chunks are cut (see `lop::sim::ChunkBounds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Bounds {
    /// Equal splits of each op's own rows.
    Even,
    /// Aligned to the producers' chunks through the receptive field.
    Aligned,
}

impl Bounds {
    /// The simulator's setting.
    pub fn chunk_bounds(self) -> ChunkBounds {
        match self {
            Bounds::Even => ChunkBounds::Even,
            Bounds::Aligned => ChunkBounds::Aligned,
        }
    }
}

/// Where the post-processing stage of a `--task` runs (see `lop::sim::SimConfig::post_side`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PostSide {
    /// Wherever each plan puts it (the planner chooses).
    Auto,
    /// On the robot, whole: the raw heads come down (what placing the stage saves).
    Robot,
    /// On the server, whole.
    Server,
}

impl PostSide {
    /// The simulator's setting.
    pub fn side(self) -> Option<lop::plan::Side> {
        match self {
            PostSide::Auto => None,
            PostSide::Robot => Some(lop::plan::Side::Robot),
            PostSide::Server => Some(lop::plan::Side::Server),
        }
    }

    /// Refuses a pin on a model without a post-processing stage (shared by `lop plan` and
    /// `lop bench`).
    ///
    /// # Errors
    /// A pinned side on a graph with no `--task` stage, naming the flag.
    pub fn check(self, graph: &lop::Graph) -> anyhow::Result<()> {
        if let Some(side) = self.side() {
            anyhow::ensure!(
                graph.has_postprocess(),
                "--post-side {} needs a --task with a post-processing stage (detect, pose, segment or occupancy); this model has none",
                side.name()
            );
        }
        Ok(())
    }
}

/// Profiles and link options shared by `lop plan` and `lop simulate`.
#[derive(Debug, clap::Args)]
pub struct SetupArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The robot's profile (JSON from `lop profile --role robot`).
    #[arg(long)]
    pub robot_profile: PathBuf,
    /// The server's profile.
    #[arg(long)]
    pub server_profile: PathBuf,
    /// How the raw input crosses the link, for every method alike: native (the input's own
    /// dtype: bytes for models normalising inside the graph), u8 (bytes, or an error for a float
    /// model without --preprocess) or f32 (4 bytes per element, as in the paper).
    #[arg(long, alias = "input-dtype", default_value = "native")]
    pub input_wire: InputWireSetting,
    /// One-way link latency, milliseconds.
    #[arg(long, default_value_t = 1.0)]
    pub latency_ms: f64,
    /// What to minimise: latency, energy, weighted:LAMBDA (s per J), deadline:MS.
    #[arg(long, default_value = "latency", value_parser = parse_objective)]
    pub objective: Objective,
    /// How each side orders its chunks in the simulator.
    #[arg(long, value_enum, default_value = "wavefront")]
    pub chunk_order: Order,
    /// Where each op's chunks are cut in the simulator (the executor must cut the same).
    /// Aligned planned better tables than even on vgg19, convnext_tiny and resnet152.
    #[arg(long, value_enum, default_value = "aligned")]
    pub chunk_bounds: Bounds,
}

/// Parses `latency`, `energy`, `weighted:LAMBDA`, `deadline:MS` (clap value parser).
pub fn parse_objective(s: &str) -> Result<Objective, String> {
    s.parse::<Objective>().map_err(|e| e.to_string())
}

/// A loaded model and its two profiles, checked against each other.
pub struct Setup {
    /// The model.
    pub graph: lop::Graph,
    /// Robot profile.
    pub robot: Profile,
    /// Server profile.
    pub server: Profile,
}

impl SetupArgs {
    /// Loads and checks the model and both profiles.
    ///
    /// # Errors
    /// Unreadable files, profiles of another model or with bad timings.
    pub fn load(&self) -> anyhow::Result<Setup> {
        anyhow::ensure!(self.latency_ms.is_finite() && self.latency_ms >= 0.0, "--latency-ms must be >= 0");
        Setup::load(&self.model, &self.robot_profile, &self.server_profile, self.input_wire)
    }
}

impl Setup {
    /// Loads the model and both profiles, and checks them against each other and the input
    /// wire (shared by `lop plan`, `lop simulate` and `lop fleet-cost`).
    ///
    /// # Errors
    /// Unreadable files, profiles of another model or with bad timings, a wire the model
    /// cannot take.
    pub fn load(model: &ModelArgs, robot: &Path, server: &Path, wire: InputWireSetting) -> anyhow::Result<Setup> {
        let graph = model.load()?;
        wire.check(&graph)?;
        let robot_p = Profile::load(robot).with_context(|| format!("robot profile {}", robot.display()))?;
        let server_p = Profile::load(server).with_context(|| format!("server profile {}", server.display()))?;
        let hash = graph.content_hash()?;
        robot_p.validate(&graph, &hash).context("robot profile")?;
        server_p.validate(&graph, &hash).context("server profile")?;
        Ok(Setup { graph, robot: robot_p, server: server_p })
    }
}

/// Arguments of `lop plan` (`--threads` is the global option: planning threads here).
#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Model, profiles, link, objective.
    #[command(flatten)]
    pub setup: SetupArgs,
    /// Buckets FROM:TO:STEP in MB/s (1 MB/s = 8 Mbit/s; 0 = no link).
    #[arg(long, default_value = "0:30:1", allow_hyphen_values = true)]
    pub buckets: String,
    /// Bucket b stands for b x F MB/s; `auto` matches the paper's compute/transfer regime.
    #[arg(long, default_value = "1")]
    pub bandwidth_scale: String,
    /// Planner seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How the frame's rows cross the link: raw, lossless or jpeg:Q, priced by both profiles'
    /// measured costs of it (`lop profile --frames PATH --frame-codecs C`).
    #[arg(long, default_value = "raw")]
    pub frame_codec: lop::codec::FrameCodec,
    /// Search budget multiplier (LNS simulations, beam width).
    #[arg(long, default_value_t = 1)]
    pub budget: usize,
    /// Never send a tensor larger than the raw input (the LOSS paper's pruning; off by
    /// default: it found no better plan on the zoo and cost pose_hr 5%).
    #[arg(long)]
    pub prune: bool,
    /// Where the `--task` post-processing stage runs: auto (each plan places it), or pinned to
    /// the robot (the raw heads come down: what placing it gains) or to the server. Plans and
    /// baselines that put it elsewhere are infeasible; with robot, no pipelining bound.
    #[arg(long, value_enum, default_value = "auto")]
    pub post_side: PostSide,
    /// Cache directory (default: the system temp dir's lop-plan-cache).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Where to write the table (JSON).
    #[arg(long)]
    pub out: PathBuf,
    /// Print a JSON summary.
    #[arg(long)]
    pub json: bool,
    /// Draw latency against bandwidth for every method.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Also study the values that cross the link in each bucket's plan on these real frames
    /// (a picture or a folder): how they compress (LZ4) and the most coding them could save.
    #[arg(long)]
    pub activations: Option<PathBuf>,
}

/// Parses `FROM:TO:STEP` (or a comma-separated list) into bucket values.
pub fn parse_buckets(s: &str) -> anyhow::Result<Vec<f64>> {
    lop::planner::parse_buckets(s).context("--buckets")
}

/// The `auto` bandwidth scale (see [`lop::planner::auto_bandwidth_scale`]).
pub fn auto_scale(s: &Setup) -> anyhow::Result<f64> {
    lop::planner::auto_bandwidth_scale(&s.graph, &s.robot, &s.server).context("--bandwidth-scale auto")
}

/// Means over the buckets with a link (bandwidth above 0) of LOSS, the fluid bound and the
/// server-pipelining bound, each over the bucket's best baseline: since every bucket's LOSS is
/// at least its fluid bound, the second mean is the least the first can be for this model,
/// profiles and link (a target below it is out of reach). `null` where no bucket has a link;
/// a mean is `null` where some bucket lacks its value. `pipeline` and `fluid` are per entry,
/// seconds.
fn mean_ratios(entries: &[lop::planner::BucketEntry], pipeline: &[Option<f64>], fluid: &[Option<f64>]) -> serde_json::Value {
    let linked: Vec<usize> = (0..entries.len()).filter(|&i| entries[i].bucket_mb_s > 0.0).collect();
    if linked.is_empty() {
        return serde_json::Value::Null;
    }
    let mean = |value: &dyn Fn(usize) -> Option<f64>| {
        let ratios: Option<Vec<f64>> = linked.iter().map(|&i| Some(value(i)? / entries[i].best_baseline_s()?)).collect();
        ratios.map(|v| v.iter().sum::<f64>() / v.len() as f64)
    };
    serde_json::json!({
        "buckets": linked.len(),
        "lop_over_best": mean(&|i| entries[i].makespan_s),
        "fluid_over_best": mean(&|i| fluid.get(i).copied().flatten()),
        "pipeline_over_best": mean(&|i| pipeline.get(i).copied().flatten()),
    })
}

/// Builds (or loads from the cache) the table, writes it, prints the summary.
///
/// # Errors
/// Bad options or inputs, planning failures, unwritable outputs.
pub fn run(args: &PlanArgs, threads: Option<i32>) -> anyhow::Result<i32> {
    let started = std::time::Instant::now();
    let buckets = parse_buckets(&args.buckets)?;
    anyhow::ensure!(args.budget >= 1, "--budget must be >= 1");
    let setup = args.setup.load()?;
    args.post_side.check(&setup.graph)?;
    let scale = bandwidth_scale(args, &setup)?;
    let spec = table_spec(args, &setup, buckets, scale)?;
    let threads = threads.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |n| n.max(1) as usize);
    let (table, times, usage, planning) = build_table(args, &setup, &spec, threads)?;
    let bounds = table.pipeline_bounds(&setup.graph, &setup.robot, &setup.server, threads)?;
    let fluid = table.fluid_bounds(&setup.graph, &setup.robot, &setup.server, threads)?;
    let rows = bucket_rows(&table, &bounds, &fluid, &times);
    if let Some(path) = &args.svg {
        write_svg(path, &rows, &table.model, args.setup.input_wire)?;
    }
    let fluid_s: Vec<Option<f64>> = fluid.iter().map(|f| f.map(|f| f.bound_s)).collect();
    let means = mean_ratios(&table.entries, &bounds, &fluid_s);
    let activations = study_activations(args, &setup, &table)?;
    let summary = serde_json::json!({
        "model": table.model,
        "table": args.out.display().to_string(),
        "table_hash": table.hash,
        "cache": format!("{usage:?}").to_lowercase(),
        "planning_time_s": planning,
        "total_time_s": started.elapsed().as_secs_f64(),
        "threads": threads,
        "input_wire": args.setup.input_wire.name(),
        "bandwidth_scale": scale,
        "objective": spec.objective,
        "chunk_order": spec.chunk_order,
        "chunk_bounds": spec.chunk_bounds,
        "post_side": spec.post_side.map_or("auto", |s| s.name()),
        "mean_ratios": means,
        "buckets": rows,
        "activations": activations,
    });
    if args.json {
        println!("{summary}");
    } else {
        print_summary(args, scale, planning, usage, &rows, &means, activations.as_ref());
    }
    Ok(0)
}

/// `--bandwidth-scale`: a positive factor, or `auto` ([`auto_scale`]).
fn bandwidth_scale(args: &PlanArgs, setup: &Setup) -> anyhow::Result<f64> {
    Ok(match args.bandwidth_scale.as_str() {
        "auto" => auto_scale(setup)?,
        v => v
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite() && *f > 0.0)
            .with_context(|| format!("--bandwidth-scale '{v}' must be positive or auto"))?,
    })
}

/// The table's specification from the options, its frame codec priced by both profiles.
fn table_spec(args: &PlanArgs, setup: &Setup, buckets: Vec<f64>, scale: f64) -> anyhow::Result<TableSpec> {
    let planner = PlannerConfig { seed: args.seed, prune_larger_than_input: args.prune, ..PlannerConfig::default() }.scaled(args.budget);
    Ok(TableSpec {
        buckets,
        bandwidth_scale: scale,
        latency_s: args.setup.latency_ms / 1e3,
        overhead_s: 0.0,
        input_bytes_per_element: args.setup.input_wire.bytes_per_element(),
        objective: args.setup.objective,
        power: lop::sim::RobotPower::default(),
        planner,
        chunk_order: args.setup.chunk_order.chunk_order(),
        chunk_bounds: args.setup.chunk_bounds.chunk_bounds(),
        post_side: args.post_side.side(),
        frame: Default::default(),
    }
    .with_frame_codec(args.frame_codec, &setup.robot, &setup.server)?)
}

/// Loads the table from the cache (`--cache-dir`) or plans it on `threads` threads, and writes
/// it to `--out`; returns it with each bucket's planning time, whether the cache had it, and
/// the seconds it took.
fn build_table(
    args: &PlanArgs,
    setup: &Setup,
    spec: &TableSpec,
    threads: usize,
) -> anyhow::Result<(ScheduleTable, Vec<f64>, CacheUse, f64)> {
    let dir = args.cache_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("lop-plan-cache"));
    let plan_start = std::time::Instant::now();
    let (table, times, usage) = load_or_build(&dir, &setup.graph, &setup.robot, &setup.server, spec, threads)?;
    let planning = plan_start.elapsed().as_secs_f64();
    if usage == CacheUse::Hit {
        // The cached bytes, not a re-serialisation of parsed floats: byte-identical tables.
        let cached = lop::planner::table::cache_path(&dir, &table.key);
        std::fs::copy(&cached, &args.out).with_context(|| format!("copying {} to {}", cached.display(), args.out.display()))?;
    } else {
        table.save(&args.out)?;
    }
    Ok((table, times, usage, planning))
}

/// One JSON row per bucket: every method's makespan, both bounds (the fluid bound's terms too),
/// the layer search's status, the energy and the planning effort.
fn bucket_rows(
    table: &ScheduleTable,
    bounds: &[Option<f64>],
    fluid: &[Option<lop::sim::FluidBound>],
    times: &[f64],
) -> Vec<serde_json::Value> {
    let ms = |v: Option<f64>| v.map(|s| s * 1e3);
    let base = |e: &lop::planner::BucketEntry, n: &str| e.baselines.iter().find(|b| b.name == n).and_then(|b| b.makespan_s);
    let energy_name = "layer-partition-energy-deadline";
    table
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            serde_json::json!({
                "bucket_mb_s": e.bucket_mb_s,
                "bandwidth_mb_s": e.bandwidth_mb_s,
                "method": e.method,
                "makespan_ms": {
                    "robot-only": ms(base(e, "robot-only")),
                    "server-only": ms(base(e, "server-only")),
                    "layer": ms(base(e, "layer-partition")),
                    "energy-layer": ms(base(e, energy_name)),
                    "lop": ms(e.makespan_s),
                },
                "server_pipeline_bound_ms": ms(bounds[i]),
                "fluid_bound_ms": ms(fluid[i].map(|f| f.bound_s)),
                // The ideal split's time on each resource: the largest is what limits it.
                "fluid_terms_ms": fluid[i].map(|f| serde_json::json!({
                    "robot": f.robot_s * 1e3, "server": f.server_s * 1e3, "up": f.up_s * 1e3, "down": f.down_s * 1e3,
                })),
                "layer_search": e.baselines.iter().find(|b| b.name == "layer-partition").map(|b| serde_json::json!({
                    "status": b.search,
                    "evaluations": b.evaluated,
                })),
                "energy_j": e.energy_j,
                "evaluations": e.evaluations,
                "planning_time_s": times.get(i),
            })
        })
        .collect()
}

/// `--svg`: latency against bandwidth for every method and both bounds, from the rows.
fn write_svg(path: &Path, rows: &[serde_json::Value], model: &str, wire: InputWireSetting) -> anyhow::Result<()> {
    let mut series: Vec<svg::Series> = [("robot-only", "robot-only"), ("server-only", "server-only"), ("layer", "layer"), ("lop", "lop")]
        .iter()
        .map(|(label, key)| {
            let pts = rows.iter().map(|r| (r["bandwidth_mb_s"].as_f64().unwrap_or(0.0), r["makespan_ms"][key].as_f64())).collect();
            (label.to_string(), pts)
        })
        .collect();
    let bound = rows.iter().map(|r| (r["bandwidth_mb_s"].as_f64().unwrap_or(0.0), r["server_pipeline_bound_ms"].as_f64())).collect();
    series.push(("pipelining bound".to_string(), bound));
    let fluid = rows.iter().map(|r| (r["bandwidth_mb_s"].as_f64().unwrap_or(0.0), r["fluid_bound_ms"].as_f64())).collect();
    series.push(("fluid bound".to_string(), fluid));
    let title = format!("{model}: latency vs bandwidth ({} input)", wire.name());
    std::fs::write(path, svg::latency_plot(&series, &title, "link bandwidth (MB/s)"))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// `--activations`: the values that cross the link in each bucket's plan, studied on real frames.
fn study_activations(args: &PlanArgs, setup: &Setup, table: &ScheduleTable) -> anyhow::Result<Option<serde_json::Value>> {
    Ok(match &args.activations {
        Some(path) => {
            let frames = crate::frames::real_frames(&setup.graph, Some(path), None)?;
            Some(crate::activations::study(&setup.graph, table, &frames, 0.03)?)
        }
        None => None,
    })
}

/// The summary for people: each bucket's plan and bounds, the mean ratios, where the table went,
/// the activations' study, the buckets where the layer search ran out of budget.
fn print_summary(
    args: &PlanArgs,
    scale: f64,
    planning: f64,
    usage: CacheUse,
    rows: &[serde_json::Value],
    means: &serde_json::Value,
    activations: Option<&serde_json::Value>,
) {
    eprintln!("bandwidth scale {scale:.6} (bucket b = b x {scale:.6} MB/s)");
    for r in rows {
        let bound = |k: &str| r[k].as_f64().map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
        println!(
            "bucket {:>5} MB/s: {} {:.2} ms (bounds: server pipelining {} ms, fluid {} ms)",
            r["bucket_mb_s"],
            r["method"],
            r["makespan_ms"]["lop"].as_f64().unwrap_or(f64::NAN),
            bound("server_pipeline_bound_ms"),
            bound("fluid_bound_ms")
        );
    }
    if let Some(m) = means.as_object() {
        let f = |k: &str| m[k].as_f64().map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
        println!(
            "over the {} buckets with a link, LOSS / best baseline averages {}; no table can average below {} (fluid bound / \
             best), nor a plan that leaves the robot no rows below {} (server-pipelining bound / best)",
            m["buckets"],
            f("lop_over_best"),
            f("fluid_over_best"),
            f("pipeline_over_best")
        );
    }
    println!("{} buckets in {planning:.2} s ({usage:?}), written to {}", rows.len(), args.out.display());
    if let Some(study) = activations {
        crate::activations::print(study);
    }
    let budget: Vec<String> =
        rows.iter().filter(|r| r["layer_search"]["status"] == "budget").map(|r| r["bucket_mb_s"].to_string()).collect();
    if !budget.is_empty() {
        println!(
            "layer-partition search reached its budget in bucket(s) {} MB/s: that baseline is the best layer partition seen \
             (never worse than the minimum cuts), not a proven optimum",
            budget.join(", ")
        );
    }
}
