//! `lop bench`: every method over the same bandwidth trace in one run, through the real
//! runtime (executor, edge service, robot client), over one of three links:
//!
//! - `--transport inprocess` (default): the in-process shaped link replaying the trace;
//! - `--transport zenoh`: Zenoh over unshaped loopback (the trace only selects the plans);
//! - `--netns`: Zenoh between two network namespaces over a veth pair shaped by `tc` from the
//!   trace, the edge a child process (`lop bench-edge`, see [`crate::bench_edge`]).
//!
//! `--overhead` measures the runtime's own cost instead (see
//! [`lop_runtime::bench::run_overhead`]).
//!
//! The frame codec's part (`--frame-codec`, `--frames`: camera JPEGs, the codec's effect on the
//! output, its price in both profiles) lives in `bench/codec.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use lop::plan::Side;
use lop::planner::PlannerConfig;
use lop::planner::table::TableSpec;
use lop::profile::{DeviceKind, Profile, ProfileCache, ProfileOptions};
use lop_runtime::bench::{BenchConfig, MethodReport, NetnsBenchOptions, NetnsSummary, OverheadReport};
use lop_runtime::edge::EdgeCounts;
use lop_runtime::trace::Trace;

use crate::ModelArgs;
use crate::plan::{Bounds, parse_buckets};
use crate::scenario::{self, ScenarioRequest};
use lop_runtime::table_config::InputWireSetting;

mod codec;
pub use codec::{CameraBytes, camera_frames, codec_effect, measure_codec, price_codec};

/// Arguments of `lop bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// Bandwidth trace (CSV `t_s,mbps`, 0.5 s steps), e.g. data/traces/indoor.csv.
    #[arg(long, required_unless_present = "overhead")]
    pub trace: Option<PathBuf>,
    /// The link: the in-process shaped link, or Zenoh over loopback (unshaped: the trace then
    /// only selects the plans). `--netns` implies Zenoh over a shaped veth pair.
    #[arg(long, value_enum, default_value = "inprocess")]
    pub transport: Transport,
    /// Robot and edge in two network namespaces joined by a veth pair shaped with tc from the
    /// trace (root and iproute2 needed); the edge runs as a child process.
    #[arg(long)]
    pub netns: bool,
    /// The edge router's TCP port inside the edge namespace (with --netns).
    #[arg(long, default_value_t = 7447)]
    pub edge_port: u16,
    /// Measure the runtime's overhead instead: on unshaped loopback Zenoh, a bare forward, a raw
    /// ping-pong of the input and output bytes, and server-only through the runtime.
    #[arg(long)]
    pub overhead: bool,
    /// Use the synthetic profiles of the configs' `synthetic` (the robot 8x slower than the
    /// server per byte) instead of measuring: quick, for tests and smoke runs; the simulator's
    /// predictions then do not describe this machine.
    #[arg(long)]
    pub synthetic_profiles: bool,
    /// Methods, comma-separated: robot-only, server-only, layer, lop.
    #[arg(long, default_value = "robot-only,server-only,layer,lop")]
    pub methods: String,
    /// Where the `--task` post-processing stage runs in LOP's plans: auto (each plan places it),
    /// robot (the raw heads come down: what placing it gains) or server. Pinned, only `lop`
    /// runs (the baselines' plans keep their own places): compare with a run without it.
    #[arg(long, value_enum, default_value = "auto")]
    pub post_side: crate::plan::PostSide,
    /// Inferences per method.
    #[arg(long, default_value_t = 20)]
    pub requests: usize,
    /// The robot is this many times slower than this machine (kernels stretched by waiting).
    #[arg(long, default_value_t = 1.0)]
    pub dilation: f64,
    /// How a dilated robot's kernels are stretched: `profile` (each lasts what the robot profile
    /// predicts for it: the emulated robot is its profile, run after run) or `measured` ((K-1)
    /// times its measured duration: this machine's noise is multiplied by K).
    #[arg(long, value_enum, default_value = "profile")]
    pub robot_pace: RobotPace,
    /// Untimed inferences per method before the timed ones (first runs allocate and prepare
    /// kernels).
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Multiply the trace by F; `auto` makes the raw input as float32 at the trace's mean rate
    /// take 0.44 x the robot-only compute time (the paper's VGG19 indoor regime).
    #[arg(long, default_value = "auto")]
    pub bandwidth_scale: String,
    /// The realistic scenario: the server GPU's real time for the model, in milliseconds (for
    /// example 4 for YOLOv8n at 640 in PyTorch on an RTX-class card). The run is then slowed by
    /// this CPU's time over it: the trace is read as real Wi-Fi and divided by that factor,
    /// --latency-ms is real and multiplied by it, and --dilation is the robot's slowdown
    /// relative to the server (5 for TensorRT on both, 20 for a Jetson on PyTorch). Excludes
    /// --bandwidth-scale.
    #[arg(long)]
    pub server_real_ms: Option<f64>,
    /// How the raw input crosses the link, for every method alike: native, u8 (an error for a
    /// float model without --preprocess) or f32 (see `lop plan --help`).
    #[arg(long, alias = "input-dtype", default_value = "native")]
    pub input_wire: InputWireSetting,
    /// How the frame's rows cross the link, for every method alike: raw, lossless (QOI per
    /// band), jpeg:Q (the robot encodes at quality Q, 4:4:4; the model's input is the decoded
    /// frame). Needs --frames: codecs are priced on real photographs.
    #[arg(long, default_value = "raw")]
    pub frame_codec: lop::codec::FrameCodec,
    /// Real frames: a photograph (PNG or JPEG) or a folder of them (`scripts/photos.sh` prints
    /// one), or a rosbag2 recording in MCAP storage (a `.mcap` file or the recording's folder),
    /// fitted to the model's input and fed in turn; default: one synthetic input.
    #[arg(long)]
    pub frames: Option<PathBuf>,
    /// The recording's camera topic, sensor_msgs/msg/Image (rgb8, bgr8, rgba8, bgra8, mono8) or
    /// CompressedImage (a camera JPEG, as a .jpg file: passthrough sends it unchanged), read in
    /// the order recorded; optional when the recording has one image topic.
    #[arg(long, requires = "frames")]
    pub frames_topic: Option<String>,
    /// One-way link latency, milliseconds (default: 1 in-process; 0 over Zenoh, where loopback
    /// and a veth add none of their own; with --netns a delay line in userspace adds it).
    #[arg(long)]
    pub latency_ms: Option<f64>,
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
    /// Memory layout of convolutions in profiles measured here: auto (the faster per side),
    /// nchw or channels_last. Each side runs the model in its profile's layout.
    #[arg(long, default_value = "auto")]
    pub layout: lop::profile::LayoutChoice,
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

/// How `lop bench` stretches a dilated robot's kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RobotPace {
    /// Each kernel lasts what the robot profile predicts for it.
    Profile,
    /// Each kernel is followed by (K-1) times its measured duration.
    Measured,
}

/// The link of `lop bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// The in-process shaped link replaying the trace.
    Inprocess,
    /// Zenoh (router edge, client robot): over loopback, or over the veth pair with --netns.
    Zenoh,
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

/// A profile from `path`, or measured now (cached by model hash, role, dilation and threads).
fn profile(
    graph: &mut lop::Graph,
    path: Option<&Path>,
    dir: &Path,
    role: Side,
    dilation: f64,
    layout: lop::profile::LayoutChoice,
) -> anyhow::Result<Profile> {
    let hash = graph.content_hash()?;
    if let Some(p) = path {
        let prof = Profile::load(p).with_context(|| format!("{} profile {}", role.name(), p.display()))?;
        prof.validate(graph, &hash).with_context(|| format!("{} profile {}", role.name(), p.display()))?;
        // Each side runs with this process's libtorch threads: a profile measured with another
        // count predicts another speed (a two-thread server profile under-predicted the one-thread
        // edge of `lop bench` by 13%).
        let threads = usize::try_from(tch::get_num_threads()).unwrap_or(0);
        if prof.threads != threads {
            eprintln!(
                "warning: the {} profile {} was measured with {} libtorch threads, this run uses {threads}: its times will not describe this run (measure it with `lop --threads {threads} profile ...`)",
                role.name(),
                p.display(),
                prof.threads
            );
        }
        return Ok(prof);
    }
    let cache = ProfileCache::new(dir);
    let opts = ProfileOptions { role, device: DeviceKind::Cpu, dilation, runs: 5, warmup: 1, units: 8, layout };
    if let Some((p, at)) = cache.load(graph, &hash, &opts, tch::Device::Cpu) {
        eprintln!("using cached {} profile {}", role.name(), at.display());
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
    let (prof, _) = cache.measure(graph, &hash, &inputs, &opts, tch::Device::Cpu, |i, n, _| {
        if i % 20 == 0 && i < n {
            eprintln!("  [{i}/{n}]");
        }
    })?;
    Ok(prof)
}

/// Runs the benchmark and prints the results.
///
/// # Errors
/// Bad options, unreadable trace or profiles, runtime failures.
pub fn run(args: &BenchArgs, threads: Option<i32>) -> anyhow::Result<i32> {
    let (transport, latency_ms) = check_options(args)?;
    let methods: Vec<&str> = args.methods.split(',').map(method_name).collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(!methods.is_empty(), "--methods is empty");
    // Robot and server share this machine's cores: one libtorch thread each unless told otherwise.
    if threads.is_none() {
        tch::set_num_threads(1);
    }
    let trace = match &args.trace {
        Some(path) => Trace::load(path).with_context(|| format!("trace {}", path.display()))?,
        None => Trace::constant(1000.0)?,
    };
    let (cfg, scenario, scenario_line, codec_effect) = configure(args, &methods, &trace, latency_ms)?;
    let (scale, latency_ms) = (scenario.bandwidth_scale, scenario.latency_ms);
    if args.overhead {
        return measure_overhead(args, &cfg);
    }
    let mut run = Run { transport: "inprocess", link: String::new(), latency_ms, netns: None, edge: None, scenario, scenario_line };
    let reports = run_methods(args, &cfg, transport, threads, &mut run)?;
    print_report(args, &cfg, scale, &run, &reports, codec_effect)?;
    check_outputs(&reports)?;
    Ok(0)
}

/// Checks the options that need no model (requests, dilation, the link); returns the transport
/// (Zenoh with `--netns`) and the one-way latency asked for, in milliseconds.
fn check_options(args: &BenchArgs) -> anyhow::Result<(Transport, f64)> {
    anyhow::ensure!(args.requests >= 1, "--requests must be at least 1");
    anyhow::ensure!(args.dilation.is_finite() && args.dilation >= 1.0, "--dilation must be >= 1");
    let transport = if args.netns || args.transport == Transport::Zenoh { Transport::Zenoh } else { Transport::Inprocess };
    let latency_ms = args.latency_ms.unwrap_or(if transport == Transport::Inprocess && !args.overhead { 1.0 } else { 0.0 });
    anyhow::ensure!(latency_ms.is_finite() && latency_ms >= 0.0, "--latency-ms must be >= 0");
    if latency_ms > 0.0 && (args.overhead || (transport == Transport::Zenoh && !args.netns)) {
        anyhow::bail!("--latency-ms {latency_ms}: Zenoh over loopback cannot add latency (use the in-process link, or --netns)");
    }
    if args.netns {
        lop_runtime::netns::NetnsLink::is_available().map_err(|e| anyhow::anyhow!("--netns is unusable here: {e}"))?;
    }
    Ok((transport, latency_ms))
}

/// The benchmark's configuration: the model loaded and checked, its profiles, its frames and
/// their codec priced, the scenario resolved (and printed), the table's specification. Returns
/// it with the scenario, the scenario's line and the codec's effect on the output.
fn configure(
    args: &BenchArgs,
    methods: &[&str],
    trace: &Trace,
    latency_ms: f64,
) -> anyhow::Result<(BenchConfig, scenario::Scenario, String, Option<f64>)> {
    let mut graph = args.model.load()?;
    args.input_wire.check(&graph)?;
    args.post_side.check(&graph)?;
    if let Some(side) = args.post_side.side() {
        anyhow::ensure!(methods == ["lop"], "--post-side {} pins LOP's plans only: run it with --methods lop", side.name());
    }
    let (mut robot, mut server) = profiles(args, &mut graph)?;
    let (frames, cameras) = if args.frame_codec == lop::codec::FrameCodec::Passthrough {
        camera_frames(&graph, args.frames.as_deref(), args.frames_topic.as_deref())?
    } else {
        (crate::frames::real_frames(&graph, args.frames.as_deref(), args.frames_topic.as_deref())?, Vec::new())
    };
    price_codec(args.frame_codec, &graph, &frames, &cameras, &mut robot, &mut server)?;
    let codec_effect = codec_effect(args.frame_codec, &graph, &frames)?;
    let scenario = scenario::resolve(scenario_request(args)?, &graph, &robot, &server, trace, latency_ms, args.dilation)?;
    let scenario_line = scenario.describe(trace);
    eprintln!("{scenario_line}");
    let (scale, latency_ms) = (scenario.bandwidth_scale, scenario.latency_ms);
    let spec = table_spec(args, scale, latency_ms, &robot, &server)?;
    let cfg = BenchConfig {
        model_id: graph.name.replace(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'), "_"),
        source: args.model.model.clone(),
        load: args.model.load_options(),
        robot,
        server,
        spec,
        trace: trace.clone().scaled(scale)?,
        latency: Duration::from_secs_f64(latency_ms / 1e3),
        methods: methods.iter().map(|m| m.to_string()).collect(),
        requests: args.requests,
        dilation: args.dilation,
        paced: args.robot_pace == RobotPace::Profile,
        warmup: args.warmup,
        input_wire: args.input_wire.wire(),
        cache_dir: args.cache_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("lop-plan-cache")),
        power: Default::default(),
        gap: Duration::ZERO,
        frames,
        cameras,
    };
    Ok((cfg, scenario, scenario_line, codec_effect))
}

/// The robot's and the server's profiles: the synthetic pair, the files given, or measured now
/// (cached in `--profile-dir`).
fn profiles(args: &BenchArgs, graph: &mut lop::Graph) -> anyhow::Result<(Profile, Profile)> {
    let pdir = args.profile_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("lop-profiles"));
    if args.synthetic_profiles {
        anyhow::ensure!(
            args.robot_profile.is_none() && args.server_profile.is_none(),
            "--synthetic-profiles and --robot-profile/--server-profile exclude each other"
        );
        return synthetic_profiles(graph);
    }
    Ok((
        profile(graph, args.robot_profile.as_deref(), &pdir, Side::Robot, args.dilation, args.layout)?,
        profile(graph, args.server_profile.as_deref(), &pdir, Side::Server, 1.0, args.layout)?,
    ))
}

/// What `--bandwidth-scale` and `--server-real-ms` ask of the scenario (the overhead run keeps
/// the trace as it is).
fn scenario_request(args: &BenchArgs) -> anyhow::Result<ScenarioRequest> {
    Ok(match (args.bandwidth_scale.as_str(), args.server_real_ms) {
        _ if args.overhead => ScenarioRequest::Scale(1.0),
        ("auto", Some(ms)) => ScenarioRequest::Realistic { server_real_ms: ms },
        (v, Some(_)) => anyhow::bail!("--server-real-ms sets the link's scale itself: drop --bandwidth-scale {v}"),
        ("auto", None) => ScenarioRequest::Auto,
        (v, None) => ScenarioRequest::Scale(
            v.parse::<f64>().ok().filter(|f| f.is_finite() && *f > 0.0).with_context(|| format!("--bandwidth-scale '{v}'"))?,
        ),
    })
}

/// The schedule table's specification for the scenario's link (`scale`, `latency_ms`).
fn table_spec(args: &BenchArgs, scale: f64, latency_ms: f64, robot: &Profile, server: &Profile) -> anyhow::Result<TableSpec> {
    Ok(TableSpec {
        // The overhead run uses the plans of the fastest bucket only.
        buckets: match parse_buckets(&args.buckets)? {
            b if args.overhead => b.last().map(|&v| vec![v]).unwrap_or(b),
            b => b,
        },
        bandwidth_scale: scale,
        latency_s: latency_ms / 1e3,
        overhead_s: 0.0,
        input_bytes_per_element: args.input_wire.bytes_per_element(),
        objective: lop::sim::Objective::Latency,
        power: Default::default(),
        planner: PlannerConfig::default(),
        chunk_order: lop::sim::ChunkOrder::Wavefront,
        chunk_bounds: args.chunk_bounds.chunk_bounds(),
        post_side: args.post_side.side(),
        frame: Default::default(),
    }
    .with_frame_codec(args.frame_codec, robot, server)?)
}

/// `--overhead`: the runtime's own cost on unshaped loopback Zenoh, printed.
fn measure_overhead(args: &BenchArgs, cfg: &BenchConfig) -> anyhow::Result<i32> {
    let report = runtime()?.block_on(lop_runtime::bench::run_overhead(cfg)).context("overhead measurement")?;
    print_overhead(args, cfg, &report)?;
    anyhow::ensure!(
        report.outputs_agree,
        "outputs differ from the unsplit model: relative error {:e} (tolerance {})",
        report.max_rel_err,
        lop::exec::Tolerance::OTHER_RUNTIME.describe()
    );
    Ok(0)
}

/// The tokio runtime the benchmark's robot and in-process edge run on.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting tokio")
}

/// Runs every method over the link (`run` says which, and gets its description and what the
/// link reports); returns the methods' reports.
fn run_methods(
    args: &BenchArgs,
    cfg: &BenchConfig,
    transport: Transport,
    threads: Option<i32>,
    run: &mut Run,
) -> anyhow::Result<std::collections::BTreeMap<String, MethodReport>> {
    let latency_ms = run.latency_ms;
    let progress = progress_printer(args);
    let reports = if args.netns {
        run.transport = "zenoh-netns";
        run.link = format!(
            "Zenoh over a veth pair between two network namespaces, both directions shaped by tc tbf from the trace every 0.5 s; {}",
            if latency_ms > 0.0 {
                format!("a delay line in a third namespace adds {latency_ms} ms one way")
            } else {
                "no latency added (veth only)".into()
            }
        );
        eprintln!("link: {}", run.link);
        let opts = NetnsBenchOptions {
            prefix: lop_runtime::netns::process_prefix("lopb"),
            latency: Duration::from_secs_f64(latency_ms / 1e3),
            port: args.edge_port,
            edge_program: std::env::current_exe().context("locating the lop executable")?,
            edge_args: vec!["bench-edge".into(), "--config".into()],
            edge_threads: Some(threads.unwrap_or(1)),
            ready_timeout: Duration::from_secs(600),
            interrupted: Some(lop_runtime::netns::interrupt_flag()?),
        };
        let (reports, summary) = lop_runtime::bench::run_netns(cfg, &opts, progress).context("benchmark in network namespaces")?;
        run.netns = Some(summary);
        reports
    } else if transport == Transport::Zenoh {
        run.transport = "zenoh";
        run.link = "Zenoh over loopback (127.0.0.1), UNSHAPED: the trace only selects the plans".into();
        eprintln!("link: {}", run.link);
        let (reports, counts) = runtime()?.block_on(lop_runtime::bench::run_zenoh_loopback(cfg, progress))?;
        run.edge = Some(counts);
        reports
    } else {
        run.link = format!("in-process link shaped by the trace, {latency_ms} ms one way");
        runtime()?.block_on(lop_runtime::bench::run_in_process(cfg, progress))?
    };
    Ok(reports)
}

/// With `--verbose`, a line on stderr per inference: its time, bucket, bytes, each side's
/// compute and what its result holds.
fn progress_printer(args: &BenchArgs) -> impl Fn(&str, usize, &lop_runtime::client::InferenceStats, &[tch::Tensor]) {
    let verbose = args.verbose;
    let task = args.model.task.clone();
    move |m: &str, i: usize, s: &lop_runtime::client::InferenceStats, outputs: &[tch::Tensor]| {
        if verbose {
            // What the frame's result holds (detections, voxels), when the model has a task.
            let result = match (&task, outputs) {
                (Some(t), [out]) => t.summary(out, 3).map(|s| format!("  {s}")).unwrap_or_default(),
                _ => String::new(),
            };
            // Where the time went: each side's compute (the server's as the edge reports it).
            let server = s.server_compute_s.map(|c| format!("  server {:6.1} ms", c * 1e3)).unwrap_or_default();
            eprintln!(
                "{m:>15} #{i:<3} {:8.1} ms  bucket {:>4.1}  up {:>8} B  down {:>8} B  robot {:6.1} ms{server}{}{result}",
                s.total_s * 1e3,
                s.bucket_mb_s,
                s.bytes_up,
                s.bytes_down,
                s.robot_compute_s * 1e3,
                if s.fallback { "  FALLBACK" } else { "" }
            );
        }
    }
}

/// Reports the detection rows that agreed at another position, and refuses outputs that differ
/// from the unsplit model's.
fn check_outputs(reports: &std::collections::BTreeMap<String, MethodReport>) -> anyhow::Result<()> {
    let worst = reports.values().map(|r| r.max_rel_err).fold(0.0, f64::max);
    let reordered: usize = reports.values().map(|r| r.reordered_rows).sum();
    if reordered > 0 {
        eprintln!("{reordered} detection rows agreed with the unsplit model's at another position (near-tied scores)");
    }
    anyhow::ensure!(
        reports.values().all(|r| r.outputs_agree),
        "outputs differ from the unsplit model: relative error {worst:e} (tolerance {})",
        lop::exec::Tolerance::OTHER_RUNTIME.describe()
    );
    Ok(())
}

/// The configs' synthetic profiles ([`lop::profile::SYNTHETIC`]), the same the edge and the
/// robot plan with when their config says `synthetic`.
fn synthetic_profiles(graph: &lop::Graph) -> anyhow::Result<(Profile, Profile)> {
    let pair = lop::profile::SYNTHETIC.pair(graph)?;
    eprintln!(
        "synthetic profiles (the configs' `synthetic`: the robot {}x slower than the server per byte); simulated times do not describe this machine",
        lop::profile::SYNTHETIC.robot_slowdown
    );
    Ok(pair)
}

/// How a run went besides the methods' reports.
struct Run {
    transport: &'static str,
    link: String,
    latency_ms: f64,
    netns: Option<NetnsSummary>,
    edge: Option<EdgeCounts>,
    /// Which deployment the run emulated.
    scenario: scenario::Scenario,
    /// [`scenario::Scenario::describe`] of it.
    scenario_line: String,
}

fn print_overhead(args: &BenchArgs, cfg: &BenchConfig, r: &OverheadReport) -> anyhow::Result<()> {
    if args.json {
        let mut v = serde_json::to_value(r)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("model".into(), args.model.model.clone().into());
            o.insert("transport".into(), "zenoh".into());
            o.insert("link".into(), "Zenoh over loopback (127.0.0.1), unshaped".into());
            o.insert("input_wire".into(), args.input_wire.name().into());
            o.insert("threads".into(), tch::get_num_threads().into());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "{}: runtime overhead on unshaped loopback Zenoh, {} timed rounds, {} libtorch thread(s), input {} B, output {} B",
        args.model.model,
        cfg.requests,
        tch::get_num_threads(),
        r.input_bytes,
        r.output_bytes
    );
    println!("(a) bare forward (run_whole), median        {:>9.2} ms", r.forward_ms);
    println!("(b) raw transfer (ping-pong), median         {:>9.2} ms", r.transfer_ms);
    println!("(c) server-only through the runtime: median {:>9.2} ms, mean {:.2} ms", r.runtime_p50_ms, r.runtime_mean_ms);
    if let Some(ms) = r.server_compute_ms {
        println!("    edge compute inside (c), median          {ms:>9.2} ms ({} of {} reported)", r.server_compute_reported, r.requests);
    }
    println!("ratio (c) / ((a) + (b)): median {:.3}, mean {:.3}; fallbacks {}", r.ratio, r.ratio_mean, r.fallbacks);
    Ok(())
}

/// The methods' reports in table order, and how LOP compares with the baselines.
struct Comparison<'a> {
    /// Each method that ran with its report, by its JSON name: robot-only, server-only, layer,
    /// lop.
    ordered: Vec<(&'a str, &'a MethodReport)>,
    /// LOP's measured mean over the best baseline's; only when some baseline ran (`--methods
    /// lop` alone has nothing to compare with).
    lop_ratio: Option<f64>,
    /// In the lop requests' buckets, simulated: LOP's plans and the server-pipelining bound
    /// against the best baseline.
    lop_sim: Option<(f64, Option<f64>)>,
}

impl<'a> Comparison<'a> {
    /// Orders `reports` and compares LOP with the best baseline.
    fn of(reports: &'a std::collections::BTreeMap<String, MethodReport>) -> Self {
        let ordered: Vec<(&str, &MethodReport)> = ["robot-only", "server-only", "layer-partition", "lop"]
            .iter()
            .filter_map(|m| reports.get(*m).map(|r| (short_name(m), r)))
            .collect();
        let best_other = ["robot-only", "server-only", "layer"]
            .iter()
            .filter_map(|m| ordered.iter().find(|(n, _)| n == m))
            .map(|(_, r)| r.mean_ms)
            .fold(f64::INFINITY, f64::min);
        let lop_ratio = ordered
            .iter()
            .find(|(n, _)| *n == "lop")
            .filter(|_| best_other.is_finite())
            .map(|(_, r)| r.mean_ms / best_other)
            .filter(|r| r.is_finite());
        let lop_sim = ordered.iter().find(|(n, _)| *n == "lop").and_then(|(_, r)| {
            let best = r.sim_best_baseline_ms.filter(|b| *b > 0.0)?;
            Some((r.sim_mean_ms / best, r.sim_bound_ms.map(|b| b.min(best) / best)))
        });
        Comparison { ordered, lop_ratio, lop_sim }
    }
}

/// Prints the methods' results: one JSON object with `--json`, else the table and what it shows.
fn print_report(
    args: &BenchArgs,
    cfg: &BenchConfig,
    scale: f64,
    run: &Run,
    reports: &std::collections::BTreeMap<String, MethodReport>,
    codec_effect: Option<f64>,
) -> anyhow::Result<()> {
    let c = Comparison::of(reports);
    let trace = args.trace.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    if args.json {
        return print_json(args, cfg, scale, run, &c, &trace, codec_effect);
    }
    print_table(args, cfg, scale, run, &c, &trace);
    print_findings(args, run, &c);
    Ok(())
}

/// `--json`: the run and every method's report as one object.
fn print_json(
    args: &BenchArgs,
    cfg: &BenchConfig,
    scale: f64,
    run: &Run,
    c: &Comparison,
    trace: &str,
    codec_effect: Option<f64>,
) -> anyhow::Result<()> {
    let (ordered, lop_ratio, lop_sim) = (&c.ordered, c.lop_ratio, c.lop_sim);
    let methods: serde_json::Map<String, serde_json::Value> =
        ordered.iter().map(|(m, r)| Ok((m.to_string(), serde_json::to_value(r)?))).collect::<anyhow::Result<_>>()?;
    let v = serde_json::json!({
        "model": args.model.model,
        "trace": trace,
        "dilation": cfg.dilation,
        "robot_pace": if cfg.paced { "profile" } else { "measured" },
        "bandwidth_scale": scale,
        "scenario": run.scenario,
        "input_wire": args.input_wire.name(),
        "transport": run.transport,
        "link": run.link,
        "latency_ms": run.latency_ms,
        "requests": cfg.requests,
        "energy": "modelled (power model), not measured",
        "methods": methods,
        "lop_vs_best_other": lop_ratio,
        "post_side": args.post_side.side().map_or("auto", |s| s.name()),
        "lop_sim_vs_best_baseline_sim": lop_sim.map(|x| x.0),
        "bound_vs_best_baseline_sim": lop_sim.and_then(|x| x.1),
        "netns": run.netns,
        "edge_counts": run.edge,
        "frame_codec": args.frame_codec.to_string(),
        "frames": cfg.frames.len(),
        "codec_output_rel_diff": codec_effect,
    });
    println!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

/// The table: the run's lines, then a row per method.
fn print_table(args: &BenchArgs, cfg: &BenchConfig, scale: f64, run: &Run, c: &Comparison, trace: &str) {
    let ordered = &c.ordered;
    println!(
        "{} over {trace} (x{scale:.3}), dilation {}, input wire {}, {} requests per method",
        args.model.model,
        cfg.dilation,
        args.input_wire.name(),
        cfg.requests
    );
    println!("link: {} [{}]; robot energy is modelled, not measured", run.link, run.transport);
    println!("{}", run.scenario_line);
    println!(
        "{:<12} {:>9} {:>8} {:>9} {:>9} {:>9} {:>8} {:>11} {:>11} {:>9} {:>9} {:>10}",
        "method", "mean ms", "std", "p50", "p95", "sim ms", "meas/sim", "up B", "down B", "energy J", "fallback", "max err"
    );
    for (m, r) in ordered {
        // A ratio measured while the machine changed speed describes the machine: marked.
        let fidelity = r.fidelity.map_or_else(|| "-".to_string(), |f| format!("{f:.2}{}", if r.steady { "" } else { "!" }));
        println!(
            "{m:<12} {:>9.1} {:>8.1} {:>9.1} {:>9.1} {:>9.1} {:>8} {:>11.0} {:>11.0} {:>9.3} {:>9} {:>10.1e}",
            r.mean_ms,
            r.std_ms,
            r.p50_ms,
            r.p95_ms,
            r.sim_mean_ms,
            fidelity,
            r.bytes_up,
            r.bytes_down,
            r.energy_j,
            r.fallbacks,
            r.max_rel_err
        );
    }
}

/// What the table shows beyond its rows: unsteady machines, the server's compute measured
/// against simulated, LOP against the baselines, the link's shaping.
fn print_findings(args: &BenchArgs, run: &Run, c: &Comparison) {
    let (ordered, lop_ratio, lop_sim) = (&c.ordered, c.lop_ratio, c.lop_sim);
    for (m, r) in ordered.iter().filter(|(_, r)| !r.steady) {
        println!(
            "{m}: ! this machine did not hold its speed (calibration kernel {:.2} ms before, {:.2} ms after; robot kernels over their paced time: {}, {:.1} ms per request): its meas/sim describes the machine",
            r.calibration_before_ms, r.calibration_after_ms, r.overruns, r.overrun_ms
        );
    }
    for (m, r) in ordered {
        if let (Some(meas), Some(sim)) = (r.server_compute_ms, r.sim_server_compute_ms) {
            println!("{m}: server compute {meas:.1} ms measured, {sim:.1} ms simulated (meas/sim {:.2})", meas / sim.max(1e-9));
        }
    }
    if let Some(r) = lop_ratio {
        println!("lop / best of robot-only, server-only, layer: {r:.3}");
    }
    if let Some((plans, bound)) = lop_sim {
        let bound = bound.map_or_else(|| "-".to_string(), |b| format!("{b:.3}"));
        let pinned =
            args.post_side.side().map_or_else(String::new, |s| format!(" (post-processing pinned to the {}, baselines too)", s.name()));
        println!("simulated in the lop requests' buckets, / best baseline{pinned}: lop plans {plans:.3}, server-pipelining bound {bound}");
    }
    if let Some(n) = &run.netns {
        for (m, s) in &n.shaping {
            println!("tc shaping during {m}: {} steps, {} rate changes, {} failures", s.steps, s.updates, s.failures);
        }
    }
}
