//! The schedule table itself: one [`BucketEntry`] per bandwidth bucket with its plan and every
//! baseline's, its content hash, lookup by bandwidth, the simulator's bounds per bucket, and
//! its JSON on disk (version and hash checked on load).

use super::TABLE_VERSION;
use super::TableModel;
use super::key::TableKey;
use super::spec::TableSpec;
use super::workers::on_shared_copies;
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::profile::Profile;
use crate::sim::Simulator;
use std::path::Path;

/// Bounds one thread computed, each with its bucket's index.
type Computed<T> = Vec<(usize, Option<T>)>;

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
    /// of the table then has the server compute everything). Computed on up to `threads`
    /// threads ([`ScheduleTable::per_bucket`]); the bounds do not depend on how many.
    ///
    /// # Errors
    /// Profiles that do not fit `graph`; a spec with a negative link or power.
    pub fn pipeline_bounds<G: TableModel>(&self, graph: &G, robot: &Profile, server: &Profile, threads: usize) -> Result<Vec<Option<f64>>> {
        let pinned_away = self.spec.post_side == Some(crate::plan::Side::Robot) && graph.has_postprocess();
        self.per_bucket(graph, robot, server, threads, |s| if pinned_away { None } else { s.server_pipeline_bound() })
    }

    /// `bound` of the simulator in each entry's bucket, on the calling thread and `threads - 1`
    /// more (each with its own simulator over a [`TableModel::share`] copy of `graph`, taking
    /// buckets from a shared counter: [`on_shared_copies`]). A bound depends only on the graph, the profiles and its
    /// bucket's configuration, so the result does not depend on the threads.
    fn per_bucket<G: TableModel, T: Send>(
        &self,
        graph: &G,
        robot: &Profile,
        server: &Profile,
        threads: usize,
        bound: impl Fn(&Simulator<'_>) -> Option<T> + Sync,
    ) -> Result<Vec<Option<T>>> {
        let n = self.entries.len();
        let parts = on_shared_copies(graph, threads, n, |g, next| -> Result<Computed<T>> {
            let mut sim = Simulator::new(g, robot, server, self.spec.sim_config(0.0))?;
            let mut done = Vec::new();
            while let Some(i) = next() {
                sim.set_config(self.spec.sim_config(self.entries[i].bucket_mb_s))?;
                done.push((i, bound(&sim)));
            }
            Ok(done)
        });
        let mut out: Vec<Option<Option<T>>> = (0..n).map(|_| None).collect();
        for part in parts {
            for (i, v) in part.unwrap_or_else(|| Err(Error::Input("a bound's thread panicked".into())))? {
                out[i] = Some(v);
            }
        }
        out.into_iter().map(|v| v.ok_or_else(|| Error::Input("a bucket's bound was not computed".into()))).collect()
    }

    /// Per entry, the fluid lower bound in its bucket ([`crate::sim::Simulator::fluid_bound`]),
    /// seconds: what no plan, robot bands included, can beat. On up to `threads` threads.
    ///
    /// # Errors
    /// As [`ScheduleTable::pipeline_bounds`].
    pub fn fluid_bounds<G: TableModel>(
        &self,
        graph: &G,
        robot: &Profile,
        server: &Profile,
        threads: usize,
    ) -> Result<Vec<Option<crate::sim::FluidBound>>> {
        self.per_bucket(graph, robot, server, threads, |s| s.fluid_bound_detail())
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
}
