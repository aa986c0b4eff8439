//! Schedule tables (DESIGN.md section 4): one plan per bandwidth bucket, keyed by the model,
//! both profiles and the planner configuration, built in parallel and cached on disk by
//! content hash.

use super::{PlannerConfig, plan};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::plan::Plan;
use crate::profile::Profile;
use crate::sim::{ChunkBounds, ChunkOrder, FrameWire, Link, Objective, RobotPower, SimConfig, Simulator};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Current table format version (3: aligned chunk bounds spread a consumer's cuts over its
/// producer's when their chunk counts differ, so older tables timed other chunks).
pub const TABLE_VERSION: u32 = 3;

/// Bumped when the planner's choices change for the same inputs (part of [`TableSpec::hash`]).
/// 2: graph outputs coming down are exempt from pruning, which is off by default. 3: every band
/// message's header bytes are priced. 4: plans may align ops' last cuts
/// ([`crate::plan::Plan::last_cut_aligned`]). 5: buckets lend their plans to their neighbours
/// ([`lend_plans`]). 6: the best plan's chunks may taper at either end
/// ([`crate::plan::Taper`]). 7: ops of server-only plans cut where the frame's rows release
/// them ([`crate::plan::Plan::server_cuts`]).
pub const PLANNER_REVISION: u32 = 7;

/// How many buckets on each side lend a bucket their plans ([`lend_plans`]).
const LENDING_REACH: usize = 4;

/// What a table is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableKey {
    /// [`Graph::content_hash`] of the model.
    pub model_hash: String,
    /// [`Profile::hash`] of the robot profile.
    pub robot_profile_hash: String,
    /// [`Profile::hash`] of the server profile.
    pub server_profile_hash: String,
    /// Hash of the [`TableSpec`] (planner configuration, buckets, link, objective).
    pub config_hash: String,
}

impl TableKey {
    /// The cache file name stem: sha256 of the key.
    pub fn digest(&self) -> String {
        hex::encode(Sha256::digest(serde_json::to_string(self).unwrap_or_default().as_bytes()))
    }
}

/// Everything about a table besides the model and the profiles.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TableSpec {
    /// Bucket values, MB/s (1 MB/s = 8 Mbit/s); 0 means no link.
    pub buckets: Vec<f64>,
    /// Bucket `b` stands for `b * bandwidth_scale` MB/s on the simulated link.
    pub bandwidth_scale: f64,
    /// One-way latency, seconds.
    pub latency_s: f64,
    /// Per-message overhead, seconds.
    pub overhead_s: f64,
    /// Wire bytes per element of the raw input (`None`: its dtype; `Some(4)`: as f32).
    pub input_bytes_per_element: Option<usize>,
    /// What is minimised.
    pub objective: Objective,
    /// The robot's power model.
    pub power: RobotPower,
    /// The planner's knobs.
    pub planner: PlannerConfig,
    /// How the simulator orders each side's chunks (the executor follows the same rule).
    #[serde(default)]
    pub chunk_order: ChunkOrder,
    /// Where the simulator cuts each op's chunks (the executor cuts the same); part of the cache
    /// key. Tables written before this field existed used even bounds.
    #[serde(default)]
    pub chunk_bounds: ChunkBounds,
    /// Where the post-processing stage must run ([`SimConfig::post_side`]); `None`, the
    /// default, lets each plan place it. Left out of the JSON (and so of the key) when `None`,
    /// so tables written before the field existed keep their keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_side: Option<crate::plan::Side>,
    /// How the frame travels, with its prices ([`crate::sim::FrameWire`], from both profiles'
    /// measured costs: [`TableSpec::with_frame_codec`]); part of the hash, so robot and edge run
    /// one codec. Left out of the JSON (and so of the key) for raw frames, so tables written
    /// before the field existed keep their keys.
    #[serde(default, skip_serializing_if = "FrameWire::is_raw")]
    pub frame: FrameWire,
}

/// The most buckets a range `FROM:TO:STEP` may hold (a list holds what it spells out).
pub const MAX_RANGE_BUCKETS: usize = 100_000;

/// Parses a bucket range `FROM:TO:STEP` (MB/s) or a comma-separated list (`0,2,8,30`).
///
/// # Errors
/// [`Error::Input`] for unparsable numbers, a non-positive step, an empty range, a range of more
/// than [`MAX_RANGE_BUCKETS`] buckets or negative values.
pub fn parse_buckets(s: &str) -> Result<Vec<f64>> {
    let bad = |why: &str| Error::Input(format!("buckets '{s}': {why}"));
    let sep = if s.contains(':') { ':' } else { ',' };
    let p: Vec<f64> =
        s.split(sep).map(|v| v.trim().parse::<f64>()).collect::<std::result::Result<_, _>>().map_err(|_| bad("not a number"))?;
    let values = if sep == ':' {
        let [from, to, step] = p[..] else { return Err(bad("expected FROM:TO:STEP")) };
        if !(from.is_finite() && to.is_finite() && from >= 0.0) {
            return Err(bad("FROM and TO must be finite and >= 0 MB/s"));
        }
        if !(step.is_finite() && step > 0.0) {
            return Err(bad("the step must be positive"));
        }
        if to < from {
            return Err(bad("empty range"));
        }
        // Counted as a float first: a step far below the range (`0:1e12:1`) would otherwise ask for
        // terabytes, or overflow the count.
        let steps = ((to - from) / step + 1e-9).floor();
        if steps >= MAX_RANGE_BUCKETS as f64 {
            return Err(bad(&format!("more than {MAX_RANGE_BUCKETS} buckets")));
        }
        let n = steps as usize + 1;
        (0..n).map(|i| from + i as f64 * step).collect()
    } else {
        p
    };
    if values.is_empty() || values.iter().any(|b| !b.is_finite() || *b < 0.0) {
        return Err(bad("buckets must be finite and >= 0"));
    }
    Ok(values)
}

/// The `auto` bandwidth scale: the factor F such that, at bucket 11.6 MB/s (the paper's indoor
/// mean, 93 Mbit/s), sending the raw input as float32 takes 0.44 x the robot-only compute time
/// (the paper's VGG19 indoor regime: 602 KB against 118 ms). Keeps CPU-measured profiles in the
/// paper's ratio of compute to transfer.
///
/// # Errors
/// Simulator errors; a model with no input or a zero robot-only time.
pub fn auto_bandwidth_scale(graph: &Graph, robot: &Profile, server: &Profile) -> Result<f64> {
    let sim = Simulator::new(graph, robot, server, SimConfig::default())?;
    let t = sim.cost(&Plan::robot_only(graph, 8))?.makespan_s;
    let bytes: usize = graph.inputs().iter().map(|&i| graph.nodes[i].info.numel() * 4).sum();
    if !(t > 0.0 && bytes > 0) {
        return Err(Error::Input("cannot pick a bandwidth scale: zero robot time or no input".into()));
    }
    Ok(bytes as f64 / (11.6e6 * 0.44 * t))
}

/// Alias kept for readers looking for the table's configuration.
pub type TableConfig = TableSpec;

impl TableSpec {
    /// A latency table over `buckets` (MB/s, unscaled), `latency_s` one way, the default planner
    /// and power model, wavefront chunk order and receptive-field-aligned bounds (the runtime's):
    /// the spec of benchmarks and tests that plan a few fixed buckets.
    pub fn latency(buckets: Vec<f64>, latency_s: f64) -> TableSpec {
        TableSpec {
            buckets,
            bandwidth_scale: 1.0,
            latency_s,
            overhead_s: 0.0,
            input_bytes_per_element: None,
            objective: Objective::Latency,
            power: RobotPower::default(),
            planner: PlannerConfig::default(),
            chunk_order: ChunkOrder::Wavefront,
            chunk_bounds: ChunkBounds::Aligned,
            post_side: None,
            frame: FrameWire::raw(),
        }
    }

    /// The spec with frames coded by `codec`, priced by the robot's and the server's measured
    /// costs of it (the ratio is the robot's, which saw the frames). A server profile that has
    /// not measured the codec decodes at the robot's measured speed scaled by how much faster
    /// the server computes the model (both profiles' whole-model times): both sides derive the
    /// same price from the same two profiles, so their tables agree.
    ///
    /// # Errors
    /// [`Error::Input`] when the robot's profile has not measured the codec, naming the command
    /// that measures it.
    pub fn with_frame_codec(mut self, codec: crate::codec::FrameCodec, robot: &Profile, server: &Profile) -> Result<TableSpec> {
        let robot_cost = robot.codec_cost(codec).ok_or_else(|| {
            Error::Input(format!(
                "the robot profile of '{}' has not measured frame codec {codec} (measured: {}); measure it on real frames with `lop profile --frames PATH --frame-codecs {codec}`",
                robot.model,
                if robot.codecs.is_empty() { "none".to_string() } else { robot.codecs.iter().map(|c| c.codec.to_string()).collect::<Vec<_>>().join(", ") }
            ))
        })?;
        let server_cost = server.codec_cost(codec).unwrap_or_else(|| {
            let speed = server.whole_model_s() / robot.whole_model_s();
            let speed = if speed.is_finite() && speed > 0.0 { speed } else { 1.0 };
            crate::codec::CodecCost { decode_s_per_row: robot_cost.decode_s_per_row * speed, ..robot_cost }
        });
        self.frame = FrameWire::from_costs(&robot_cost, &server_cost);
        Ok(self)
    }

    /// Checks the buckets and link numbers and the planner configuration.
    ///
    /// # Errors
    /// [`Error::Input`].
    pub fn check(&self) -> Result<()> {
        if self.buckets.is_empty() {
            return Err(Error::Input("the bucket range is empty".into()));
        }
        if self.buckets.iter().any(|b| !b.is_finite() || *b < 0.0) {
            return Err(Error::Input("buckets must be finite and >= 0 MB/s".into()));
        }
        if !self.bandwidth_scale.is_finite() || self.bandwidth_scale <= 0.0 {
            return Err(Error::Input(format!("bandwidth scale must be positive, got {}", self.bandwidth_scale)));
        }
        self.planner.check()
    }

    /// Content hash of the spec and of the planner's revision (the table key's `config_hash`;
    /// robots send it in Hello), so that a cached table planned by an older planner is planned
    /// anew.
    ///
    /// A coded frame's prices are left out (its codec is in): they come from the two profiles'
    /// measured costs, whose hashes the table key holds, and an edge configured with the codec
    /// alone must agree with a robot whose spec carries the prices.
    pub fn hash(&self) -> String {
        let mut unpriced = self.clone();
        unpriced.frame = FrameWire { codec: self.frame.codec, ..FrameWire::raw() };
        let spec = serde_json::to_string(&unpriced).unwrap_or_default();
        hex::encode(Sha256::digest(format!("planner {PLANNER_REVISION}; {spec}").as_bytes()))
    }

    /// The simulator configuration of bucket `b` MB/s.
    pub fn sim_config(&self, b: f64) -> SimConfig {
        SimConfig {
            link: Link { bandwidth: b * self.bandwidth_scale * 1e6, latency_s: self.latency_s, overhead_s: self.overhead_s },
            power: self.power,
            input_bytes_per_element: self.input_bytes_per_element,
            order: self.chunk_order,
            bounds: self.chunk_bounds,
            band_headers: true,
            post_side: self.post_side,
            frame: self.frame,
        }
    }
}

/// One baseline's result in a bucket.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BaselineCost {
    /// Its name.
    pub name: String,
    /// Makespan, seconds (`None`: infeasible).
    pub makespan_s: Option<f64>,
    /// Modelled robot energy, joules.
    pub energy_j: Option<f64>,
    /// Its plan (so that a runtime can execute every method from the one table).
    pub plan: Plan,
    /// How its search ended (a layer partition's: exact, or the budget ran out).
    #[serde(default)]
    pub search: crate::baseline::SearchStatus,
    /// Simulations its search ran.
    #[serde(default)]
    pub evaluated: usize,
}

/// One bucket of a table.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BucketEntry {
    /// The bucket, MB/s.
    pub bucket_mb_s: f64,
    /// The simulated link bandwidth, MB/s (bucket x scale).
    pub bandwidth_mb_s: f64,
    /// `"lop"` or the baseline that won.
    pub method: String,
    /// Whether the plan meets the objective.
    pub feasible: bool,
    /// Makespan of the plan, seconds.
    pub makespan_s: Option<f64>,
    /// Modelled robot energy of the plan, joules.
    pub energy_j: Option<f64>,
    /// Every baseline.
    pub baselines: Vec<BaselineCost>,
    /// Simulations LOSS ran.
    pub evaluations: usize,
    /// The plan's content hash.
    pub plan_hash: String,
    /// The plan.
    pub plan: Plan,
}

/// A schedule table.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScheduleTable {
    /// Format version.
    pub version: u32,
    /// Model name.
    pub model: String,
    /// What it is keyed by.
    pub key: TableKey,
    /// How it was built.
    pub spec: TableSpec,
    /// One entry per bucket, in bucket order.
    pub entries: Vec<BucketEntry>,
    /// sha256 of the table serialised with this field empty.
    pub hash: String,
}

impl BucketEntry {
    /// The plan of `method`: `"lop"` (this bucket's chosen plan) or a baseline's name
    /// (`"robot-only"`, `"server-only"`, `"layer-partition"`, ...).
    pub fn plan_of(&self, method: &str) -> Option<&Plan> {
        if method == "lop" {
            return Some(&self.plan);
        }
        self.baselines.iter().find(|b| b.name == method).map(|b| &b.plan)
    }

    /// The simulated makespan of `method` in this bucket, seconds.
    pub fn makespan_of(&self, method: &str) -> Option<f64> {
        if method == "lop" {
            return self.makespan_s;
        }
        self.baselines.iter().find(|b| b.name == method).and_then(|b| b.makespan_s)
    }

    /// The best simulated makespan of the latency baselines LOSS is judged against:
    /// robot-only, server-only and the layer partition (its extreme cuts included), seconds.
    pub fn best_baseline_s(&self) -> Option<f64> {
        ["robot-only", "server-only", "layer-partition"].iter().filter_map(|m| self.makespan_of(m)).reduce(f64::min)
    }
}

impl ScheduleTable {
    /// The content hash (over everything but `hash`), with every float printed to 12
    /// significant digits so that a saved-and-loaded table (JSON float parsing may move the
    /// last bit) hashes alike.
    pub fn content_hash(&self) -> String {
        let mut t = self.clone();
        t.hash.clear();
        crate::content_hash::json_content_hash(&t, 12)
    }

    /// Per entry, the simulator's server-pipelining lower bound in its bucket
    /// ([`crate::sim::Simulator::server_pipeline_bound`]), seconds: the yardstick for how much
    /// of what hiding the server's compute behind the upload could gain the plans found;
    /// `None` in every bucket when the post-processing stage is pinned to the robot (no plan
    /// of the table then has the server compute everything).
    ///
    /// # Errors
    /// Profiles that do not fit `graph`; a spec with a negative link or power.
    pub fn pipeline_bounds(&self, graph: &Graph, robot: &Profile, server: &Profile) -> Result<Vec<Option<f64>>> {
        let pinned_away = self.spec.post_side == Some(crate::plan::Side::Robot) && graph.has_postprocess();
        self.per_bucket(graph, robot, server, |s| if pinned_away { None } else { s.server_pipeline_bound() })
    }

    /// `bound` of the simulator in each entry's bucket.
    fn per_bucket<T>(
        &self,
        graph: &Graph,
        robot: &Profile,
        server: &Profile,
        bound: impl Fn(&Simulator<'_>) -> Option<T>,
    ) -> Result<Vec<Option<T>>> {
        let mut sim = Simulator::new(graph, robot, server, self.spec.sim_config(0.0))?;
        let mut out = Vec::with_capacity(self.entries.len());
        for e in &self.entries {
            sim.set_config(self.spec.sim_config(e.bucket_mb_s))?;
            out.push(bound(&sim));
        }
        Ok(out)
    }

    /// Per entry, the fluid lower bound in its bucket ([`crate::sim::Simulator::fluid_bound`]),
    /// seconds: what no plan, robot bands included, can beat.
    ///
    /// # Errors
    /// As [`ScheduleTable::pipeline_bounds`].
    pub fn fluid_bounds(&self, graph: &Graph, robot: &Profile, server: &Profile) -> Result<Vec<Option<crate::sim::FluidBound>>> {
        self.per_bucket(graph, robot, server, |s| s.fluid_bound_detail())
    }

    /// The entry for a bandwidth: the highest bucket not above `mb_s` (bucket values), or the
    /// lowest bucket. A bandwidth within a relative `1e-9` below a bucket counts as that bucket:
    /// a bucket's own bandwidth in MB/s (its value times the table's scale, as `lop plan --json`
    /// prints it) divided by the scale again can come out a rounding error below the bucket
    /// (with a scale read a ULP off, 30 came back as 29.999999999999996), and must not select the
    /// bucket under it.
    pub fn lookup(&self, mb_s: f64) -> Option<&BucketEntry> {
        let reach = mb_s + mb_s.abs() * 1e-9;
        self.entries.iter().rfind(|e| e.bucket_mb_s <= reach).or(self.entries.first())
    }

    /// Pretty JSON (deterministic: same table, same bytes).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Writes [`ScheduleTable::to_json`] to `path`.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn save(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_json()).map_err(|source| Error::Io { path: path.to_path_buf(), source })
    }

    /// Reads a table and checks its version and content hash.
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::Malformed`] for bad JSON, another version or a hash mismatch.
    pub fn load(path: &Path) -> Result<ScheduleTable> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io { path: path.to_path_buf(), source })?;
        ScheduleTable::from_json(&text, &path.display().to_string())
    }

    /// Parses a table's JSON and checks its version and content hash; `origin` names it in
    /// errors.
    ///
    /// # Errors
    /// [`Error::Malformed`] for bad JSON, another version or a hash mismatch.
    pub fn from_json(text: &str, origin: &str) -> Result<ScheduleTable> {
        let t: ScheduleTable = serde_json::from_str(text).map_err(|e| Error::Malformed(format!("table {origin}: {e}")))?;
        if t.version != TABLE_VERSION {
            return Err(Error::Malformed(format!("table {origin}: version {} (this build reads {TABLE_VERSION})", t.version)));
        }
        if t.hash != t.content_hash() {
            return Err(Error::Malformed(format!("table {origin}: content hash mismatch")));
        }
        Ok(t)
    }

    /// Plans every bucket. The calling thread plans with `graph`; `threads - 1` more workers
    /// (std::thread::scope) each plan with their own copy from `load` (libtorch weights cannot
    /// be shared between threads), taking buckets from a shared counter. Each bucket's plan
    /// depends only on its inputs and seed, so the table does not depend on the threads. Also
    /// returns the planning seconds of each bucket (not part of the table, which stays
    /// byte-identical).
    ///
    /// # Errors
    /// Profiles that do not fit the model, a bad spec, a worker copy that differs from
    /// `graph`, planner errors.
    pub fn build(
        graph: &Graph,
        load: Option<&GraphLoader<'_>>,
        robot: &Profile,
        server: &Profile,
        spec: &TableSpec,
        threads: usize,
    ) -> Result<(ScheduleTable, Vec<f64>)> {
        spec.check()?;
        let model_hash = graph.content_hash()?;
        robot.validate(graph, &model_hash)?;
        server.validate(graph, &model_hash)?;
        let key = TableKey { model_hash, robot_profile_hash: robot.hash(), server_profile_hash: server.hash(), config_hash: spec.hash() };
        let n = spec.buckets.len();
        let workers = if load.is_some() { threads.clamp(1, n) - 1 } else { 0 };
        let next = AtomicUsize::new(0);
        let slots: Mutex<Vec<Slot>> = Mutex::new((0..n).map(|_| None).collect());
        let work = |g: &Graph| {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    break;
                }
                let r = plan_bucket(g, robot, server, spec, i);
                if let Ok(mut v) = slots.lock() {
                    v[i] = Some(r);
                }
            }
        };
        let sig = structure(graph);
        let sig = &sig;
        let mut worker_errors = Vec::new();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(move || -> Result<()> {
                        let Some(load) = load else { return Ok(()) };
                        let g = load()?;
                        if structure(&g) != *sig {
                            return Err(Error::Input("a worker's copy of the model differs from the model".into()));
                        }
                        work(&g);
                        Ok(())
                    })
                })
                .collect();
            work(graph);
            for h in handles {
                match h.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => worker_errors.push(e),
                    Err(_) => worker_errors.push(Error::Input("a planning thread panicked".into())),
                }
            }
        });
        let slots = slots.into_inner().map_err(|_| Error::Input("a planning thread panicked".into()))?;
        let mut entries = Vec::with_capacity(n);
        let mut times = Vec::with_capacity(n);
        for s in slots {
            let Some(res) = s else {
                return Err(worker_errors.pop().unwrap_or_else(|| Error::Input("a bucket was not planned".into())));
            };
            let (e, t) = res?;
            entries.push(e);
            times.push(t);
        }
        for (t, lent) in times.iter_mut().zip(lend_plans(graph, robot, server, spec, &mut entries)?) {
            *t += lent;
        }
        let mut t =
            ScheduleTable { version: TABLE_VERSION, model: graph.name.clone(), key, spec: spec.clone(), entries, hash: String::new() };
        t.hash = t.content_hash();
        Ok((t, times))
    }
}

/// Tries each bucket's neighbours' plans (up to [`LENDING_REACH`] buckets away) in its own
/// simulator, and keeps the best under the objective where it beats the bucket's own plan.
///
/// Each bucket's search is local and seeded apart, so it can stop at a plan that a
/// neighbour's search, at a nearby bandwidth, got past: measured on vgg16 (u8, robot 8x),
/// bucket 13's plan ran bucket 14 in 144.7 ms against bucket 14's own 147.9. The lent plans
/// are the ones the buckets planned (not what they were lent), so the result does not depend
/// on the order, and a bucket keeps its own plan unless another is strictly better. A bucket
/// that takes a lent plan then runs its LNS from it (its own seed, its full LNS budget).
/// Returns the seconds each bucket spent on it, which count in its planning time.
///
/// # Errors
/// Profiles that do not fit the model (the simulator refuses them).
pub(super) fn lend_plans(
    graph: &Graph,
    robot: &Profile,
    server: &Profile,
    spec: &TableSpec,
    entries: &mut [BucketEntry],
) -> Result<Vec<f64>> {
    let lent: Vec<Plan> = entries.iter().map(|e| e.plan.clone()).collect();
    let mut sim = Simulator::new(graph, robot, server, spec.sim_config(0.0))?;
    let mut seconds = vec![0.0; entries.len()];
    for i in 0..entries.len() {
        let started = std::time::Instant::now();
        if entries[i].feasible {
            sim.set_config(spec.sim_config(entries[i].bucket_mb_s))?;
            lend_to(&sim, spec, &lent, i, &mut entries[i])?;
        }
        seconds[i] = started.elapsed().as_secs_f64();
    }
    Ok(seconds)
}

/// Bucket `i`'s part of [`lend_plans`], in its own simulator `sim`.
fn lend_to(sim: &Simulator<'_>, spec: &TableSpec, lent: &[Plan], i: usize, entry: &mut BucketEntry) -> Result<()> {
    let Ok(mut best) = sim.cost(&lent[i]) else { return Ok(()) };
    let mut from = None;
    let near = i.saturating_sub(LENDING_REACH)..(i + LENDING_REACH + 1).min(lent.len());
    for j in near.filter(|&j| j != i && lent[j] != lent[i]) {
        if let Ok(cost) = sim.cost(&lent[j])
            && spec.objective.better(&cost, &best)
        {
            (best, from) = (cost, Some(j));
        }
    }
    let Some(j) = from else { return Ok(()) };
    // The bucket's own search never started from the lent plan: its LNS may improve it.
    let mut plan = lent[j].clone();
    let mut cfg = spec.planner.clone();
    cfg.seed = bucket_seed(cfg.seed, i);
    let (polished, evaluations) = super::search::polish(sim, spec.objective, &cfg, plan.clone())?;
    if let Some((p, cost)) = polished
        && spec.objective.better(&cost, &best)
    {
        (plan, best) = (p, cost);
    }
    entry.evaluations += evaluations;
    entry.plan_hash = plan.hash();
    entry.plan = plan;
    entry.method = "lop".to_string();
    entry.makespan_s = Some(best.makespan_s);
    entry.energy_j = Some(best.energy_j);
    Ok(())
}

/// Builds a private copy of the model for a worker thread.
pub type GraphLoader<'a> = dyn Fn() -> Result<Graph> + Sync + 'a;

/// One bucket's result and planning seconds, once planned.
type Slot = Option<Result<(BucketEntry, f64)>>;

/// Per node (name, inputs, shape), and the outputs.
type Structure = (Vec<(String, Vec<usize>, Vec<usize>)>, Vec<usize>);

/// Names, inputs and shapes of every node, and the outputs: what a worker's copy must share.
fn structure(g: &Graph) -> Structure {
    (g.nodes.iter().map(|n| (n.name.clone(), n.inputs.clone(), n.info.shape.clone())).collect(), g.outputs.clone())
}

/// Bucket `i`'s planner seed.
fn bucket_seed(seed: u64, i: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9).wrapping_add(i as u64)
}

fn plan_bucket(graph: &Graph, robot: &Profile, server: &Profile, spec: &TableSpec, i: usize) -> Result<(BucketEntry, f64)> {
    let started = std::time::Instant::now();
    let b = spec.buckets[i];
    let sim = Simulator::new(graph, robot, server, spec.sim_config(b))?;
    let mut cfg = spec.planner.clone();
    cfg.seed = bucket_seed(cfg.seed, i);
    let o = plan(&sim, spec.objective, &cfg)?;
    let baselines = o
        .baselines
        .iter()
        .map(|c| BaselineCost {
            name: c.name.to_string(),
            makespan_s: c.cost.map(|c| c.makespan_s),
            energy_j: c.cost.map(|c| c.energy_j),
            plan: c.plan.clone(),
            search: c.status,
            evaluated: c.evaluated,
        })
        .collect();
    let entry = BucketEntry {
        bucket_mb_s: b,
        bandwidth_mb_s: b * spec.bandwidth_scale,
        method: o.method,
        feasible: o.feasible,
        makespan_s: o.cost.map(|c| c.makespan_s),
        energy_j: o.cost.map(|c| c.energy_j),
        baselines,
        evaluations: o.evaluations,
        plan_hash: o.plan.hash(),
        plan: o.plan,
    };
    Ok((entry, started.elapsed().as_secs_f64()))
}

/// Whether a table came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheUse {
    /// A valid cached table was used.
    Hit,
    /// No cached table: built and stored.
    Miss,
    /// A cached file was corrupt or did not match its key: rebuilt and overwritten.
    Rebuilt,
}

/// The cache path of a key in `dir`.
pub fn cache_path(dir: &Path, key: &TableKey) -> PathBuf {
    dir.join(format!("{}.json", key.digest()))
}

/// The table for these inputs from the cache in `dir`, or built (and stored) when absent or
/// corrupt (a cached file is trusted only if it parses, has this build's version, its content
/// hash checks, and its key matches). Per-bucket planning seconds are empty on a hit.
///
/// # Errors
/// As [`ScheduleTable::build`]; [`Error::Io`] when the cache cannot be written.
pub fn load_or_build(
    dir: &Path,
    graph: &Graph,
    load: Option<&GraphLoader<'_>>,
    robot: &Profile,
    server: &Profile,
    spec: &TableSpec,
    threads: usize,
) -> Result<(ScheduleTable, Vec<f64>, CacheUse)> {
    spec.check()?;
    let model_hash = graph.content_hash()?;
    robot.validate(graph, &model_hash)?;
    server.validate(graph, &model_hash)?;
    let key = TableKey { model_hash, robot_profile_hash: robot.hash(), server_profile_hash: server.hash(), config_hash: spec.hash() };
    let path = cache_path(dir, &key);
    let mut usage = CacheUse::Miss;
    if path.exists() {
        match ScheduleTable::load(&path) {
            Ok(t) if t.key == key => return Ok((t, Vec::new(), CacheUse::Hit)),
            _ => usage = CacheUse::Rebuilt,
        }
    }
    let (t, times) = ScheduleTable::build(graph, load, robot, server, spec, threads)?;
    std::fs::create_dir_all(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), source })?;
    // Written beside, then renamed: a `lop plan` running at the same time reads the old file or
    // the new one, never half of one.
    let partial = path.with_extension(format!("json.{}.partial", std::process::id()));
    t.save(&partial)?;
    std::fs::rename(&partial, &path).map_err(|source| Error::Io { path: path.clone(), source })?;
    Ok((t, times, usage))
}

#[cfg(test)]
mod parse_tests {
    use super::parse_buckets;

    #[test]
    fn bucket_ranges_and_lists_parse() {
        assert_eq!(parse_buckets("0:3:1").ok(), Some(vec![0.0, 1.0, 2.0, 3.0]));
        assert_eq!(parse_buckets("1:2:0.5").ok(), Some(vec![1.0, 1.5, 2.0]));
        assert_eq!(parse_buckets("0, 2,8,30").ok(), Some(vec![0.0, 2.0, 8.0, 30.0]));
        assert_eq!(parse_buckets("4").ok(), Some(vec![4.0]));
        assert_eq!(parse_buckets("0:99999:1").map(|b| b.len()).ok(), Some(super::MAX_RANGE_BUCKETS));
        // Found by fuzz_config: a range of 1e12 buckets (an 8 TB allocation), one past usize.
        for bad in ["", "3:1:1", "0:3:0", "0:3", "a,b", "-1,2", "0:nan:1", "0:100000:1", "0:1e12:1", "0:3e88:1", "0:1:1e-320"] {
            assert!(parse_buckets(bad).is_err(), "{bad} accepted");
        }
    }
}
