//! `lop fleet-sim` (many robots and servers, every routing policy side by side on the same
//! generated fleet) and `lop fleet-cost` (one model's fleet price list from measured profiles).

use crate::ModelArgs;
use anyhow::Context;
use lop_fleet::{BandwidthTrace, Fleet, FleetSpec, Hearing, ModelCost, Policy, PolicyReport};
use lop_runtime::table_config::InputWireSetting;
use lop_runtime::trace::Trace;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The model costs `lop fleet-sim` uses without `--costs`: written by `scripts/fleet-costs.sh`
/// from profiles measured with `lop profile` (server: this project's CI machine; robot: the same
/// dilated 20x).
pub const DEFAULT_COSTS: &str = include_str!("../../config/fleet/models.json");
/// The bandwidth traces used without `--trace`.
const DEFAULT_TRACES: [(&str, &str); 2] =
    [("indoor", include_str!("../../data/traces/indoor.csv")), ("outdoor", include_str!("../../data/traces/outdoor.csv"))];

/// Arguments of `lop fleet-sim`.
#[derive(Debug, clap::Args)]
pub struct FleetSimArgs {
    /// Robots.
    #[arg(long, default_value_t = 1000)]
    pub robots: usize,
    /// Edge servers.
    #[arg(long, default_value_t = 50)]
    pub servers: usize,
    /// Offered load as a fraction of the fleet's aggregate server capacity.
    #[arg(long, default_value_t = 0.9)]
    pub load: f64,
    /// Simulated seconds.
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// Seed of the generated fleet and of every random draw.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Model costs (a JSON array from `lop fleet-cost`); default: the built-in zoo costs.
    #[arg(long)]
    pub costs: Option<PathBuf>,
    /// Bandwidth traces (CSV `t_s,mbps`), robots take them in turn; default: the indoor and
    /// outdoor traces of data/traces.
    #[arg(long = "trace")]
    pub traces: Vec<PathBuf>,
    /// One-way latency robot to server, milliseconds.
    #[arg(long, default_value_t = 2.0)]
    pub latency_ms: f64,
    /// Seconds between a server's load reports (10 Hz in the runtime).
    #[arg(long, default_value_t = 0.1)]
    pub report_period_s: f64,
    /// What each robot hears of the servers' load: `every` server's report (the runtime's
    /// `direct` view), or the `site` aggregate's digests of its shards (`fleet.hear: site`).
    #[arg(long, default_value = "every", value_parser = ["every", "site"])]
    pub hear: String,
    /// With `--hear site`: servers per shard, at most.
    #[arg(long, default_value_t = 50)]
    pub shard_size: usize,
    /// With `--hear site`: shards each robot hears.
    #[arg(long, default_value_t = 1)]
    pub shards_heard: usize,
    /// With `--hear site`: seconds between the aggregator's digests.
    #[arg(long, default_value_t = 0.05)]
    pub digest_period_s: f64,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also sweep the offered load and draw goodput against it for every policy.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// The loads of the sweep, FROM:TO:STEP.
    #[arg(long, default_value = "0.2:1.2:0.1")]
    pub svg_loads: String,
}

/// Arguments of `lop fleet-cost`.
#[derive(Debug, clap::Args)]
pub struct FleetCostArgs {
    /// The model.
    #[command(flatten)]
    pub model: ModelArgs,
    /// The robot's profile (`lop profile --role robot`).
    #[arg(long)]
    pub robot_profile: PathBuf,
    /// The server's profile (`lop profile --role server`).
    #[arg(long)]
    pub server_profile: PathBuf,
    /// How the frame crosses the link (native, u8 or f32).
    #[arg(long, alias = "input-dtype", default_value = "native")]
    pub input_wire: InputWireSetting,
    /// The name robots ask for (default: the model argument).
    #[arg(long)]
    pub name: Option<String>,
    /// A costs file to add the entry to (replacing one of the same name); default: print it.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Parses a costs file's text.
///
/// # Errors
/// Bad JSON, an empty list, duplicate names or a bad figure.
pub fn parse_costs(text: &str, origin: &str) -> anyhow::Result<Vec<ModelCost>> {
    let costs = parse_cost_list(text, origin)?;
    anyhow::ensure!(!costs.is_empty(), "model costs {origin}: empty");
    Ok(costs)
}

/// [`parse_costs`], an empty list allowed (a file `lop fleet-cost --out` starts from).
fn parse_cost_list(text: &str, origin: &str) -> anyhow::Result<Vec<ModelCost>> {
    let costs: Vec<ModelCost> = serde_json::from_str(text).with_context(|| format!("model costs {origin}: not a JSON array of costs"))?;
    let mut seen = std::collections::HashSet::new();
    for c in &costs {
        c.check().with_context(|| format!("model costs {origin}"))?;
        anyhow::ensure!(seen.insert(c.name.clone()), "model costs {origin}: '{}' appears twice", c.name);
    }
    Ok(costs)
}

fn sim_trace(name: &str, t: &Trace) -> anyhow::Result<BandwidthTrace> {
    let n = t.len().max(1);
    let period = t.period().as_secs_f64();
    let step = if period > 0.0 { period / n as f64 } else { 1.0 };
    let rates = (0..n).map(|k| t.rate_mbps(std::time::Duration::from_secs_f64(k as f64 * step)) * 1e6 / 8.0).collect();
    BandwidthTrace::new(name, step, rates).map_err(Into::into)
}

fn traces(paths: &[PathBuf]) -> anyhow::Result<Vec<BandwidthTrace>> {
    if paths.is_empty() {
        return DEFAULT_TRACES
            .iter()
            .map(|(name, text)| {
                let t = Trace::parse(text, Path::new(name)).with_context(|| format!("built-in trace {name}"))?;
                sim_trace(name, &t)
            })
            .collect();
    }
    paths
        .iter()
        .map(|p| {
            let t = Trace::load(p).with_context(|| format!("trace {}", p.display()))?;
            sim_trace(&p.display().to_string(), &t)
        })
        .collect()
}

/// Every policy on one fleet, the policies run in parallel (each its own thread).
fn run_policies(fleet: &Fleet) -> BTreeMap<&'static str, PolicyReport> {
    std::thread::scope(|s| {
        let handles: Vec<_> = Policy::ALL.iter().map(|&p| (p.name(), s.spawn(move || fleet.run(p)))).collect();
        handles.into_iter().map(|(name, h)| (name, h.join().expect("a policy's simulation panicked"))).collect()
    })
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then_some(a / b)
}

/// Runs `lop fleet-sim`.
///
/// # Errors
/// Bad options, unreadable costs or traces.
pub fn run_sim(args: &FleetSimArgs) -> anyhow::Result<i32> {
    anyhow::ensure!(args.latency_ms.is_finite() && args.latency_ms >= 0.0, "--latency-ms must be >= 0");
    let costs = match &args.costs {
        Some(p) => parse_costs(&std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?, &p.display().to_string())?,
        None => parse_costs(DEFAULT_COSTS, "(built in)")?,
    };
    let traces = traces(&args.traces)?;
    let hearing = match args.hear.as_str() {
        "site" => Hearing::Site { shard_size: args.shard_size, shards: args.shards_heard, digest_period_s: args.digest_period_s },
        _ => Hearing::Every,
    };
    let spec = |load: f64| FleetSpec {
        robots: args.robots,
        servers: args.servers,
        load,
        seconds: args.seconds,
        seed: args.seed,
        latency_s: args.latency_ms / 1e3,
        report_period_s: args.report_period_s,
        power: lop::sim::RobotPower::default(),
        hearing,
    };
    let started = Instant::now();
    let fleet = Fleet::generate(spec(args.load), costs.clone(), traces.clone()).context("generating the fleet")?;
    eprintln!(
        "fleet-sim: {} robots, {} servers, {} models, load {:.2}, {} s simulated, {} frames per policy; each robot hears {:.0} servers, {:.0} load messages/s",
        args.robots,
        args.servers,
        costs.len(),
        args.load,
        args.seconds,
        (fleet.offered() * args.seconds).round(),
        fleet.servers_heard(),
        fleet.messages_per_robot_s()
    );
    let attainable = fleet.attainable();
    let reports = run_policies(&fleet);
    let wall = started.elapsed().as_secs_f64();
    let lop = &reports["lop"];
    let ratios = serde_json::json!({
        "lop_over_nearest": ratio(lop.goodput, reports["nearest"].goodput),
        "lop_over_least_queue": ratio(lop.goodput, reports["least-queue"].goodput),
        "lop_over_round_robin": ratio(lop.goodput, reports["round-robin"].goodput),
        "lop_over_attainable": ratio(lop.goodput, attainable),
    });
    if let Some(path) = &args.svg {
        sweep_svg(args, path, &costs, &traces, &spec)?;
    }
    if args.json {
        let out = serde_json::json!({
            "robots": args.robots,
            "servers": args.servers,
            "load": args.load,
            "seconds": args.seconds,
            "seed": args.seed,
            "hearing": hearing,
            "report_period_s": args.report_period_s,
            "servers_heard": fleet.servers_heard(),
            "report_msgs_per_robot_s": fleet.messages_per_robot_s(),
            "models": costs.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            "attainable": attainable,
            "policies": reports,
            "ratios": ratios,
            "wall_s": wall,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(0);
    }
    println!(
        "{:<12} {:>10} {:>10} {:>7} {:>9} {:>12} {:>12} {:>10} {:>9}",
        "policy", "goodput/s", "offered/s", "ratio", "p99 ms", "robot kJ", "decide p99", "robot-only", "late"
    );
    for p in Policy::ALL {
        let r = &reports[p.name()];
        println!(
            "{:<12} {:>10.1} {:>10.1} {:>7.4} {:>9.1} {:>12.1} {:>9.2} us {:>10} {:>9}",
            p.name(),
            r.goodput,
            r.offered,
            r.goodput_ratio,
            r.p99_ms,
            r.robot_energy_j / 1e3,
            r.decision_p99_us,
            r.robot_only_frames,
            r.late_frames
        );
    }
    println!("attainable (each frame alone on the fastest server or its robot): {attainable:.1}/s");
    println!(
        "each robot hears {:.0} servers: {:.0} load messages per second ({})",
        fleet.servers_heard(),
        fleet.messages_per_robot_s(),
        match hearing {
            Hearing::Every => "every server's report".to_string(),
            Hearing::Site { shard_size, shards, digest_period_s } => {
                format!("site digests every {:.0} ms: {shards} of shards of at most {shard_size}", digest_period_s * 1e3)
            }
        }
    );
    let show = |k: &str| ratios[k].as_f64().map_or("-".into(), |v| format!("{v:.3}"));
    println!(
        "lop / nearest {}, lop / least-queue {}, lop / round-robin {}, lop / attainable {}; {:.1} s wall",
        show("lop_over_nearest"),
        show("lop_over_least_queue"),
        show("lop_over_round_robin"),
        show("lop_over_attainable"),
        wall
    );
    Ok(0)
}

fn sweep_svg(
    args: &FleetSimArgs,
    path: &Path,
    costs: &[ModelCost],
    traces: &[BandwidthTrace],
    spec: &dyn Fn(f64) -> FleetSpec,
) -> anyhow::Result<()> {
    let loads = lop::planner::parse_buckets(&args.svg_loads).context("--svg-loads")?;
    anyhow::ensure!(loads.iter().all(|l| *l > 0.0), "--svg-loads must be positive");
    let mut series: BTreeMap<String, Vec<(f64, Option<f64>)>> = BTreeMap::new();
    for (k, &load) in loads.iter().enumerate() {
        eprintln!("fleet-sim: sweep {}/{}: load {load:.2}", k + 1, loads.len());
        let fleet = Fleet::generate(spec(load), costs.to_vec(), traces.to_vec())?;
        // Goodput as a fraction of the fleet's capacity (offered / load).
        let capacity = fleet.offered() / load;
        for (name, r) in run_policies(&fleet) {
            series.entry(name.to_string()).or_default().push((load, Some(r.goodput / capacity)));
        }
        series.entry("attainable bound".into()).or_default().push((load, Some(fleet.attainable() / capacity)));
    }
    // Baselines, then the bound, then ours last (drawn on top).
    let mut all: Vec<lop::planner::svg::Series> = series.into_iter().collect();
    all.sort_by_key(|(n, _)| (n == "lop", n.contains("bound")));
    let title = format!("goodput against offered load: {} robots, {} servers, {} s", args.robots, args.servers, args.seconds);
    let svg = lop::planner::svg::line_plot(&all, &title, "offered load (fraction of capacity)", "goodput (fraction of capacity)");
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("fleet-sim: wrote {}", path.display());
    Ok(())
}

/// Runs `lop fleet-cost`.
///
/// # Errors
/// Unreadable model or profiles, profiles of another model, an unwritable costs file.
pub fn run_cost(args: &FleetCostArgs) -> anyhow::Result<i32> {
    let crate::plan::Setup { graph, robot, server } =
        crate::plan::Setup::load(&args.model, &args.robot_profile, &args.server_profile, args.input_wire)?;
    let config = lop::sim::SimConfig { input_bytes_per_element: args.input_wire.bytes_per_element(), ..lop::sim::SimConfig::default() };
    let name = args.name.clone().unwrap_or_else(|| args.model.model.trim_start_matches("zoo:").to_string());
    let cost = lop::sim::model_cost(&name, &graph, &robot, &server, config)?;
    let Some(out) = &args.out else {
        println!("{}", serde_json::to_string_pretty(&cost)?);
        return Ok(0);
    };
    let mut costs = match std::fs::read_to_string(out) {
        Ok(text) => parse_cost_list(&text, &out.display().to_string())?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", out.display())),
    };
    costs.retain(|c| c.name != cost.name);
    costs.push(cost);
    std::fs::write(out, serde_json::to_string_pretty(&costs)? + "\n").with_context(|| format!("writing {}", out.display()))?;
    eprintln!("fleet-cost: '{name}' written to {} ({} models)", out.display(), costs.len());
    Ok(0)
}

/// Arguments of `lop fleet-watch`.
#[derive(Debug, clap::Args)]
pub struct FleetWatchArgs {
    /// A Zenoh endpoint of the site (any edge's router), e.g. `tcp/10.0.0.2:7447`.
    #[arg(long)]
    pub connect: String,
    /// Seconds to watch (one view per second).
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// One JSON object per second instead of the table.
    #[arg(long)]
    pub json: bool,
    /// For a `tls/` endpoint: the site's CA, and a certificate and key the edges accept (a
    /// robot's, from `lop certs`), comma-separated: `ca.pem,robot-r1.pem,robot-r1.key`.
    #[arg(long, value_delimiter = ',')]
    pub tls: Vec<PathBuf>,
}

/// Runs `lop fleet-watch`: the fleet as a robot sees it, once a second.
///
/// # Errors
/// A malformed endpoint; a Zenoh session that does not open.
pub fn run_watch(args: &FleetWatchArgs) -> anyhow::Result<i32> {
    anyhow::ensure!((1..=86_400).contains(&args.seconds), "--seconds must be 1 to 86400");
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting tokio")?;
    runtime.block_on(async {
        let tls = match &args.tls[..] {
            [] => None,
            [ca, cert, key] => Some(lop_runtime::security::TlsFiles { ca: ca.clone(), cert: cert.clone(), key: key.clone() }),
            _ => anyhow::bail!("--tls takes ca,cert,key"),
        };
        let session = lop_runtime::zenoh_link::ZenohConfig::client(vec![args.connect.clone()])
            .with_security(lop_runtime::security::Security { tls, ..Default::default() })
            .open()
            .await
            .with_context(|| format!("connecting to {}", args.connect))?;
        let view = lop_runtime::fleet::FleetView::new(&session, lop_runtime::fleet::STALE_AFTER).await?;
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        tick.tick().await;
        for _ in 0..args.seconds {
            tick.tick().await;
            let edges = view.edges();
            if args.json {
                let list: Vec<_> = edges
                    .iter()
                    .map(|e| {
                        let models: Vec<_> = e
                            .load
                            .models
                            .iter()
                            .map(|m| {
                                serde_json::json!({
                                    "model": m.model, "queued_ms": f64::from(m.queued_s) * 1e3, "idle_goodput": m.idle_goodput,
                                    "server_ms": f64::from(m.server_s) * 1e3, "in_flight": m.in_flight, "warm": m.warm,
                                })
                            })
                            .collect();
                        serde_json::json!({
                            "edge": e.load.edge, "age_ms": e.age.as_secs_f64() * 1e3, "seq": e.load.seq,
                            "utilisation": e.load.utilisation, "gpu_free_bytes": e.load.gpu_free_bytes, "models": models,
                        })
                    })
                    .collect();
                println!("{}", serde_json::json!({ "edges": list, "counts": view.counts() }));
                continue;
            }
            println!("{} edge(s) up; reports {:?}", edges.len(), view.counts());
            for e in &edges {
                let gpu = e.load.gpu_free_bytes.map_or("-".to_string(), |b| format!("{:.1} GB free", b as f64 / 1e9));
                println!("  {:<20} util {:>5.1}%  {gpu}  (report {} ms old)", e.load.edge, e.load.utilisation * 100.0, e.age.as_millis());
                for m in &e.load.models {
                    println!(
                        "    {:<18} {:>4} in flight, {:>7.1} ms queued, {:>7.1} ms each, {:>8.1}/s spare{}",
                        m.model,
                        m.in_flight,
                        f64::from(m.queued_s) * 1e3,
                        f64::from(m.server_s) * 1e3,
                        m.idle_goodput,
                        if m.warm { "" } else { ", cold" }
                    );
                }
            }
        }
        session.close().await.map_err(|e| anyhow::anyhow!("closing the Zenoh session: {e}"))?;
        Ok(0)
    })
}
