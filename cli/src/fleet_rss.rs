//! `lop fleet-rss`: a fleet robot's memory with 1, 3, 10 ... edges up. A fleet robot opens a
//! session with every edge that holds its model warm, at its first frame; those sessions share
//! one model worker, so that its memory does not grow with the number of edges.
//!
//! For each edge count this process starts a Zenoh router on loopback and that many edges
//! (`edge-00`, `edge-01`, ...: one CPU replica each, synthetic profiles), then starts itself again
//! as the robot (`lop fleet-rss --child`, hidden): a [`FleetClient`] over a Zenoh client session
//! that waits until its view shows every edge, runs `--frames` inferences (each checked against
//! the unsplit run), and prints its own `VmRSS` and `VmHWM` (`/proc/self/status`) as one JSON
//! line. One fresh robot process per edge count: each measures from the same start. What the
//! robot needs is prepared once, by this process, in a scratch folder: its schedule table, the
//! model's price list, the input and the unsplit run's outputs, so that the robot itself holds
//! the model only in its worker.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use lop::planner::table::{ScheduleTable, TableSpec, load_or_build};
use lop::profile::Profile;
use lop_fleet::ModelCost;
use lop_msgs::key::SessionKeys;
use lop_runtime::client::ClientOptions;
use lop_runtime::edge::{EdgeModel, EdgeOptions, EdgeService};
use lop_runtime::fleet::{FleetClient, REPORT_PERIOD, ReporterHandle, Routed, STALE_AFTER, start_reporter};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::serve_zenoh;
use tch::Tensor;

/// The model measured without `--model`: the one the runtime's end-to-end tests use.
pub const DEFAULT_MODEL: &str = "zoo:resnet18";
/// How long the robot waits for its view to show every edge.
const VIEW_WAIT: Duration = Duration::from_secs(30);
/// How long one robot process may run besides its frames (start, view, sessions, exit).
const ROBOT_WAIT: Duration = Duration::from_secs(120);
/// How long closing one Zenoh session may take.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// The schedule table's bandwidth buckets, MB/s (the runtime tests' table).
const BUCKETS: [f64; 4] = [0.0, 2.0, 8.0, 30.0];
/// The robot's link estimate for every frame (the top bucket).
const BANDWIDTH_MB_S: f64 = 30.0;
/// Every frame's deadline: long enough for any edge, so that frames go to edges.
const DEADLINE: Duration = Duration::from_secs(30);
/// The robot's kernels stretched this many times (a robot much slower than its edges).
const ROBOT_DILATION: f64 = 20.0;
/// The tolerance against the unsplit run (the project's one rule, for one engine against itself).
const EXACT_TOL: lop::exec::Tolerance = lop::exec::Tolerance::SPLIT;
/// Most edges in one run.
const MAX_EDGES: usize = 64;
/// Seed of the synthetic input.
const INPUT_SEED: u64 = 7;
/// The prepared folder's description of itself.
const MANIFEST: &str = "manifest.json";
const TABLE: &str = "table.json";
const COST: &str = "cost.json";

/// Arguments of `lop fleet-rss`.
#[derive(Debug, clap::Args)]
pub struct FleetRssArgs {
    /// Edge counts to measure, comma separated: one fresh robot process each.
    #[arg(long, value_delimiter = ',', default_value = "1,3,10")]
    pub edges: Vec<usize>,
    /// Inferences per robot (the first opens a session with every edge up).
    #[arg(long, default_value_t = 6)]
    pub frames: usize,
    /// `zoo:NAME` or a path to an `.onnx` file (one input).
    #[arg(long, default_value = DEFAULT_MODEL)]
    pub model: String,
    /// The robot's method: `server-only` (the edge computes the whole frame) or `lop`.
    #[arg(long, default_value = "server-only")]
    pub method: String,
    /// Where schedule tables are cached (default: `lop-plan-cache` in the temp dir).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Run as the robot process (started by `lop fleet-rss` itself).
    #[arg(long, hide = true)]
    pub child: bool,
    /// The robot: the router's endpoint.
    #[arg(long, hide = true)]
    pub endpoint: Option<String>,
    /// The robot: how many edges its view must show before the first frame.
    #[arg(long, hide = true)]
    pub expect_edges: Option<usize>,
    /// The robot: the folder prepared by the parent (table, costs, input, reference outputs).
    #[arg(long, hide = true)]
    pub work_dir: Option<PathBuf>,
}

/// What the parent prepares for the robot processes.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Manifest {
    /// The model's id at the edges.
    model_id: String,
    /// Input tensors (`input-K.npy`).
    inputs: usize,
    /// The unsplit run's outputs (`whole-K.npy`).
    outputs: usize,
}

/// What one robot process measured (its one line of JSON).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RobotMemory {
    /// Edges its view showed (model warm) before the first frame.
    pub edges_seen: usize,
    /// Inferences run.
    pub frames: usize,
    /// Of them, answered by an edge.
    pub on_edges: usize,
    /// Distinct edges that answered one.
    pub edges_used: usize,
    /// Inferences the robot finished itself (an edge failed them).
    pub fallbacks: usize,
    /// Largest relative error of any output against the unsplit run.
    pub max_rel_err: f64,
    /// Seconds of the first frame (it opens the sessions).
    pub first_frame_s: f64,
    /// `VmRSS` after the last frame, KiB.
    pub vm_rss_kib: u64,
    /// `VmHWM` (peak resident set) after the last frame, KiB.
    pub vm_hwm_kib: u64,
    /// Threads of the process after the last frame.
    pub threads: u64,
}

/// One edge count's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RssRun {
    /// Edges up.
    pub edges: usize,
    /// Sessions the edges welcomed, summed over them.
    pub sessions: u64,
    /// Edges that welcomed at least one session.
    pub edges_with_session: usize,
    /// Resident set of the robot, MiB.
    pub rss_mib: f64,
    /// Peak resident set of the robot, MiB.
    pub hwm_mib: f64,
    /// `rss_mib` over the run with the fewest edges.
    pub rss_ratio: f64,
    /// `hwm_mib` over the run with the fewest edges.
    pub hwm_ratio: f64,
    /// Seconds the run took (edges up, robot, edges down).
    pub wall_s: f64,
    /// The robot's own report.
    pub robot: RobotMemory,
}

/// Runs `lop fleet-rss` (or, with `--child`, its robot process). `threads` is the global
/// `--threads`, passed on to the robot.
///
/// # Errors
/// Bad options, a model that does not load, edges or a robot that fail, a robot that sees fewer
/// edges than started or whose outputs differ from the unsplit run.
pub fn run(args: &FleetRssArgs, threads: Option<i32>) -> anyhow::Result<i32> {
    if args.child {
        return run_robot(args);
    }
    anyhow::ensure!(!args.edges.is_empty(), "--edges: give at least one edge count");
    anyhow::ensure!(args.edges.iter().all(|n| (1..=MAX_EDGES).contains(n)), "--edges: each count must be 1 to {MAX_EDGES}");
    anyhow::ensure!((1..=10_000).contains(&args.frames), "--frames must be 1 to 10000");
    anyhow::ensure!(matches!(args.method.as_str(), "server-only" | "lop"), "--method must be server-only or lop, not '{}'", args.method);
    let started = Instant::now();
    let exe = std::env::current_exe().context("locating the lop executable")?;
    let cache = args.cache_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("lop-plan-cache"));
    let work = std::env::temp_dir().join(format!("lop-fleet-rss-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let result = measure_all(args, threads, &exe, &cache, &work);
    let _ = std::fs::remove_dir_all(&work);
    let runs = result?;
    let wall = started.elapsed().as_secs_f64();
    if args.json {
        let out = serde_json::json!({
            "model": args.model,
            "method": args.method,
            "frames": args.frames,
            "base_edges": runs.iter().map(|r| r.edges).min(),
            "runs": runs,
            "wall_s": wall,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(0);
    }
    let base = runs.iter().map(|r| r.edges).min().unwrap_or(1);
    println!(
        "{:>5} {:>9} {:>10} {:>10} {:>8} {:>8} {:>10} {:>8}",
        "edges", "sessions", "VmRSS MiB", "VmHWM MiB", "threads", "on edge", "RSS ratio", "wall s"
    );
    for r in &runs {
        println!(
            "{:>5} {:>9} {:>10.1} {:>10.1} {:>8} {:>8} {:>10.3} {:>8.1}",
            r.edges,
            r.sessions,
            r.rss_mib,
            r.hwm_mib,
            r.robot.threads,
            format!("{}/{}", r.robot.on_edges, r.robot.frames),
            r.rss_ratio,
            r.wall_s
        );
    }
    if let Some(most) = runs.iter().max_by_key(|r| r.edges).filter(|r| r.edges > base) {
        println!(
            "ratios to the run with {base} edge(s); RSS with {} edges is {:.3}x (peak {:.3}x); {:.1} s wall",
            most.edges, most.rss_ratio, most.hwm_ratio, wall
        );
    }
    Ok(0)
}

/// Prepares the robot's files, then measures every edge count in turn.
fn measure_all(args: &FleetRssArgs, threads: Option<i32>, exe: &Path, cache: &Path, work: &Path) -> anyhow::Result<Vec<RssRun>> {
    eprintln!("fleet-rss: preparing {} (profiles, schedule table, input, unsplit run)", args.model);
    let t0 = Instant::now();
    let setup = prepare(&args.model, cache, work)?;
    eprintln!("fleet-rss: prepared in {:.1} s", t0.elapsed().as_secs_f64());
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting tokio")?;
    let mut runs = Vec::new();
    for &n in &args.edges {
        let t0 = Instant::now();
        let (robot, counts) =
            runtime.block_on(measure(n, args, threads, exe, work, &setup)).with_context(|| format!("the run with {n} edge(s)"))?;
        let mib = |kib: u64| kib as f64 / 1024.0;
        let run = RssRun {
            edges: n,
            sessions: counts.iter().sum(),
            edges_with_session: counts.iter().filter(|&&s| s > 0).count(),
            rss_mib: mib(robot.vm_rss_kib),
            hwm_mib: mib(robot.vm_hwm_kib),
            rss_ratio: 0.0,
            hwm_ratio: 0.0,
            wall_s: t0.elapsed().as_secs_f64(),
            robot,
        };
        eprintln!(
            "fleet-rss: {n} edge(s): {} session(s), robot VmRSS {:.1} MiB, VmHWM {:.1} MiB, {} threads ({:.1} s)",
            run.sessions, run.rss_mib, run.hwm_mib, run.robot.threads, run.wall_s
        );
        runs.push(run);
    }
    if let Some(base) = runs.iter().min_by_key(|r| r.edges).map(|r| (r.rss_mib, r.hwm_mib)) {
        for r in &mut runs {
            r.rss_ratio = r.rss_mib / base.0;
            r.hwm_ratio = r.hwm_mib / base.1;
        }
    }
    Ok(runs)
}

/// What the edges need (the robot's come from the prepared folder).
struct Setup {
    /// The model's source (`--model`).
    source: String,
    /// The schedule-table cache.
    cache: PathBuf,
    model_id: String,
    robot: Profile,
    server: Profile,
    spec: TableSpec,
}

/// Loads the model once: synthetic profiles, the schedule table (into the cache, where every
/// edge finds it), the price list, the input and the unsplit run's outputs, written to `work`.
fn prepare(model: &str, cache: &Path, work: &Path) -> anyhow::Result<Setup> {
    let g = lop::model::load(model, &Default::default()).with_context(|| format!("loading model '{model}'"))?;
    let (robot, server) = lop::profile::SYNTHETIC.pair(&g).context("synthetic profiles")?;
    let spec = TableSpec::latency(BUCKETS.to_vec(), 0.001);
    let (table, _, cache_use) =
        load_or_build(cache, &g, &robot, &server, &spec, 1).with_context(|| format!("the schedule table (cache {})", cache.display()))?;
    tracing::info!(?cache_use, "fleet-rss: schedule table");
    table.save(&work.join(TABLE))?;
    let model_id = g.name.replace(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'), "_");
    let mut cost = lop::sim::model_cost(&model_id, &g, &robot, &server, Default::default()).context("the model's price list")?;
    // The robot is dilated: its own time per frame is that much longer, so frames go to edges.
    cost.robot_s *= ROBOT_DILATION;
    std::fs::write(work.join(COST), serde_json::to_string(&cost)?).context("writing the price list")?;
    let inputs = lop::exec::synthetic_inputs(&g, INPUT_SEED)?;
    let whole = lop::exec::run_whole(&g, &inputs).context("the unsplit run")?.outputs;
    write_tensors(work, "input", &inputs)?;
    write_tensors(work, "whole", &whole)?;
    let manifest = Manifest { model_id: model_id.clone(), inputs: inputs.len(), outputs: whole.len() };
    std::fs::write(work.join(MANIFEST), serde_json::to_string(&manifest)?).context("writing the manifest")?;
    Ok(Setup { source: model.to_string(), cache: cache.to_path_buf(), model_id, robot, server, spec })
}

fn write_tensors(dir: &Path, stem: &str, tensors: &[Tensor]) -> anyhow::Result<()> {
    for (k, t) in tensors.iter().enumerate() {
        let path = dir.join(format!("{stem}-{k}.npy"));
        t.write_npy(&path).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn read_tensors(dir: &Path, stem: &str, n: usize) -> anyhow::Result<Vec<Tensor>> {
    (0..n)
        .map(|k| {
            let path = dir.join(format!("{stem}-{k}.npy"));
            Tensor::read_npy(&path).with_context(|| format!("reading {}", path.display()))
        })
        .collect()
}

/// A router and `n` edges, one robot process against them; returns the robot's report and
/// every edge's sessions.
async fn measure(
    n: usize,
    args: &FleetRssArgs,
    threads: Option<i32>,
    exe: &Path,
    work: &Path,
    setup: &Setup,
) -> anyhow::Result<(RobotMemory, Vec<u64>)> {
    let endpoint = format!("tcp/127.0.0.1:{}", lop_runtime::ports::free_loopback_port());
    eprintln!("fleet-rss: {n} edge(s): router on {endpoint}, starting the edges");
    let router =
        ZenohConfig::router(vec![endpoint.clone()]).open().await.with_context(|| format!("opening a Zenoh router on {endpoint}"))?;
    let mut edges = Vec::new();
    let outcome = async {
        let t0 = Instant::now();
        for i in 0..n {
            edges.push(start_edge(&format!("edge-{i:02}"), &endpoint, setup).await.with_context(|| format!("starting edge-{i:02}"))?);
        }
        eprintln!("fleet-rss: {n} edge(s) up in {:.1} s; starting the robot", t0.elapsed().as_secs_f64());
        let child = robot_command(exe, threads, &endpoint, n, args, work).spawn().context("starting the robot process")?;
        // Every frame may take its whole deadline.
        let limit = ROBOT_WAIT.saturating_add(DEADLINE.saturating_mul(u32::try_from(args.frames).unwrap_or(u32::MAX)));
        let out = tokio::task::spawn_blocking(move || wait_bounded(child, limit)).await.context("the robot's watcher panicked")??;
        anyhow::ensure!(
            out.status.is_some_and(|s| s.success()),
            "the robot process failed ({}); its stderr:\n{}",
            out.status.map_or_else(|| format!("killed after {} s", limit.as_secs()), |s| s.to_string()),
            out.stderr.trim_end()
        );
        let line = out.stdout.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or_default();
        let robot: RobotMemory = serde_json::from_str(line)
            .with_context(|| format!("the robot's report is not its JSON line: '{line}'; its stderr:\n{}", out.stderr.trim_end()))?;
        Ok((robot, edges.iter().map(|e| e.svc.counts().sessions).collect()))
    }
    .await;
    for Edge { svc, session, task, reports } in edges {
        drop(reports);
        svc.shutdown();
        task.abort();
        if tokio::time::timeout(CLOSE_WAIT, session.close()).await.is_err() {
            tracing::warn!("fleet-rss: an edge's session did not close in time");
        }
    }
    if tokio::time::timeout(CLOSE_WAIT, router.close()).await.is_err() {
        tracing::warn!("fleet-rss: the router did not close in time");
    }
    outcome
}

/// One edge in this process.
struct Edge {
    svc: EdgeService,
    session: zenoh::Session,
    /// Its session acceptor.
    task: tokio::task::JoinHandle<()>,
    reports: ReporterHandle,
}

/// Starts edge `id` in this process: its own Zenoh session, the model on one CPU replica, its
/// session acceptor and its load reports.
async fn start_edge(id: &str, endpoint: &str, setup: &Setup) -> anyhow::Result<Edge> {
    let session = ZenohConfig::client(vec![endpoint.to_string()]).open().await?;
    let svc = EdgeService::start(EdgeOptions {
        models: vec![EdgeModel {
            id: setup.model_id.clone(),
            source: setup.source.clone(),
            load: Default::default(),
            server_profile: setup.server.clone(),
        }],
        robot_profiles: vec![setup.robot.clone()],
        profiles_dir: None,
        spec: setup.spec.clone(),
        cache_dir: setup.cache.clone(),
        replicas: 1,
        devices: vec![lop_runtime::edge::ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: Duration::from_secs(5),
        table_wait: Duration::from_secs(60),
        dilation: 1.0,
        memory_budget: None,
        batching: Default::default(),
    })
    .await?;
    let keys = SessionKeys::fleet(id).map_err(|e| anyhow::anyhow!("edge id '{id}': {e}"))?;
    let task = serve_zenoh(svc.clone(), EdgeAcceptor::on(&session, keys).await?);
    let reports = start_reporter(&session, id, svc.clone(), REPORT_PERIOD, Box::new(|| None)).await?;
    Ok(Edge { svc, session, task, reports })
}

fn robot_command(exe: &Path, threads: Option<i32>, endpoint: &str, n: usize, args: &FleetRssArgs, work: &Path) -> Command {
    let mut cmd = Command::new(exe);
    if let Some(t) = threads {
        cmd.arg("--threads").arg(t.to_string());
    }
    cmd.args(["fleet-rss", "--child", "--endpoint", endpoint, "--expect-edges", &n.to_string(), "--frames", &args.frames.to_string()])
        .args(["--model", &args.model, "--method", &args.method])
        .arg("--work-dir")
        .arg(work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A finished (or killed) robot process.
struct RobotOutput {
    /// `None`: killed after the time limit.
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

/// Waits for `child` at most `limit` (then kills it); its stderr is echoed line by line as
/// progress, and kept.
fn wait_bounded(mut child: Child, limit: Duration) -> anyhow::Result<RobotOutput> {
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut o) = stdout {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let err = std::thread::spawn(move || {
        let mut all = String::new();
        if let Some(e) = stderr {
            for line in BufReader::new(e).lines() {
                let Ok(line) = line else { break };
                eprintln!("  {line}");
                all.push_str(&line);
                all.push('\n');
            }
        }
        all
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().context("waiting for the robot process")? {
            break Some(s);
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(RobotOutput { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() })
}

/// The robot process: waits for every edge, runs the frames, prints its memory as one JSON line.
fn run_robot(args: &FleetRssArgs) -> anyhow::Result<i32> {
    let endpoint = args.endpoint.clone().context("--child needs --endpoint")?;
    let n = args.expect_edges.context("--child needs --expect-edges")?;
    let work = args.work_dir.clone().context("--child needs --work-dir")?;
    let text = std::fs::read_to_string(work.join(MANIFEST)).with_context(|| format!("reading {}", work.join(MANIFEST).display()))?;
    let manifest: Manifest = serde_json::from_str(&text).context("parsing the manifest")?;
    let table = ScheduleTable::load(&work.join(TABLE))?;
    let text = std::fs::read_to_string(work.join(COST)).with_context(|| format!("reading {}", work.join(COST).display()))?;
    let cost: ModelCost = serde_json::from_str(&text).context("parsing the price list")?;
    let inputs = read_tensors(&work, "input", manifest.inputs)?;
    let whole = read_tensors(&work, "whole", manifest.outputs)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting tokio")?;
    let report = runtime.block_on(async {
        let session =
            ZenohConfig::client(vec![endpoint.clone()]).open().await.with_context(|| format!("connecting to the router at {endpoint}"))?;
        let mut opts = ClientOptions::new("fleet-rss-robot", &manifest.model_id);
        opts.method = args.method.clone();
        opts.dilation = ROBOT_DILATION;
        opts.hello_timeout = Duration::from_secs(10);
        opts.deadline_slack = Duration::from_secs(5);
        let source = args.model.clone();
        let loader = Arc::new(move || lop::model::load(&source, &Default::default()));
        let mut client =
            FleetClient::new(session.clone(), opts, table, cost, loader, STALE_AFTER).await.context("starting the fleet client")?;
        let report = robot_frames(&mut client, n, args.frames, &manifest.model_id, &inputs, &whole).await;
        drop(client);
        if tokio::time::timeout(CLOSE_WAIT, session.close()).await.is_err() {
            tracing::warn!("fleet-rss robot: the session did not close in time");
        }
        report
    })?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(0)
}

/// Waits for `n` edges holding the model warm, runs `frames` inferences, reads the process's
/// memory (before anything is let go).
async fn robot_frames(
    client: &mut FleetClient,
    n: usize,
    frames: usize,
    model: &str,
    inputs: &[Tensor],
    whole: &[Tensor],
) -> anyhow::Result<RobotMemory> {
    let warm = |c: &FleetClient| c.view().edges().iter().filter(|e| e.load.model(model).is_some_and(|m| m.warm)).count();
    let t0 = Instant::now();
    while warm(client) < n {
        anyhow::ensure!(
            t0.elapsed() < VIEW_WAIT,
            "the fleet view shows {} of {n} edges with '{model}' warm after {} s",
            warm(client),
            VIEW_WAIT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("fleet-rss robot: {n} edge(s) in view after {:.1} s; running {frames} frame(s)", t0.elapsed().as_secs_f64());
    let (mut on_edges, mut fallbacks, mut max_err, mut first_frame_s) = (0, 0, 0.0f64, 0.0);
    let mut used = std::collections::BTreeSet::new();
    for k in 0..frames {
        let t = Instant::now();
        let r = client
            .infer(inputs.iter().map(Tensor::shallow_clone).collect(), BANDWIDTH_MB_S, DEADLINE)
            .await
            .with_context(|| format!("frame {k}"))?;
        let took = t.elapsed().as_secs_f64();
        if k == 0 {
            first_frame_s = took;
        }
        let a = lop::exec::agree_all(&r.inference.outputs, whole, EXACT_TOL).with_context(|| format!("frame {k}: comparing outputs"))?;
        let err = a.rel_err;
        anyhow::ensure!(a.within, "frame {k}: relative error {err:e} against the unsplit run (tolerance {})", EXACT_TOL.describe());
        max_err = max_err.max(err);
        fallbacks += usize::from(r.inference.stats.fallback);
        let at = match &r.routed {
            Routed::Edge(e) => {
                on_edges += 1;
                used.insert(e.clone());
                e.clone()
            }
            Routed::Robot(why) => format!("robot ({why:?})"),
        };
        eprintln!("fleet-rss robot: frame {}/{frames} at {at}, {:.0} ms", k + 1, took * 1e3);
    }
    let (vm_rss_kib, vm_hwm_kib, threads) = own_memory()?;
    Ok(RobotMemory {
        edges_seen: warm(client),
        frames,
        on_edges,
        edges_used: used.len(),
        fallbacks,
        max_rel_err: max_err,
        first_frame_s,
        vm_rss_kib,
        vm_hwm_kib,
        threads,
    })
}

/// This process's `VmRSS` and `VmHWM` (KiB) and thread count, from `/proc/self/status`.
fn own_memory() -> anyhow::Result<(u64, u64, u64)> {
    let text = std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status (Linux only)")?;
    parse_status(&text)
}

fn parse_status(text: &str) -> anyhow::Result<(u64, u64, u64)> {
    let field = |name: &str| -> anyhow::Result<u64> {
        let line = text.lines().find_map(|l| l.strip_prefix(name)).with_context(|| format!("/proc/self/status has no {name}"))?;
        let value = line.trim_start_matches(':').split_whitespace().next().unwrap_or_default();
        value.parse().with_context(|| format!("/proc/self/status: {name} '{}'", line.trim()))
    };
    Ok((field("VmRSS")?, field("VmHWM")?, field("Threads")?))
}

#[cfg(test)]
mod tests {
    use super::parse_status;

    #[test]
    fn status_fields_parse() {
        let text = "Name:\tlop\nVmHWM:\t  345678 kB\nVmRSS:\t  300000 kB\nThreads:\t12\n";
        assert_eq!(parse_status(text).ok(), Some((300_000, 345_678, 12)));
        assert!(parse_status("Name:\tlop\n").is_err());
        assert!(parse_status("VmRSS:\tlots kB\nVmHWM:\t1 kB\nThreads:\t1\n").is_err());
    }
}
