//! The YAML schema's top level: [`EdgeConfig`], one field per setting with its default (the
//! sections and the model entries it holds are [`super::sections`] and [`super::model_entry`]).

use std::path::PathBuf;

use lop_runtime::table_config::TableSettings;
use serde::{Deserialize, Serialize};

use super::model_entry::ModelEntry;
use super::sections::{GpuEnergySection, MetricsSection, SiteSection, ZenohSection, default_true};

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeConfig {
    /// This edge's id in the fleet: its liveliness token `lop/v1/edge/<id>/alive` and its load
    /// reports `lop/v1/edge/<id>/load` (default: the host name, made a valid id). Give every
    /// edge of a site its own.
    #[serde(default)]
    pub id: Option<String>,
    /// Also serve robots configured with this edge's address (the single-edge key space, whose
    /// Hello every edge on the network hears). Turn it off when several edges share a Zenoh
    /// network: fleet robots address each edge by its id.
    #[serde(default = "default_true")]
    pub serve_unaddressed: bool,
    /// Most times an inference this edge cannot serve in time may be forwarded to another edge
    /// of the fleet, this edge's forward included (EPARA's forwarding; 0: never forward, answer
    /// `Overloaded` at once). At most 8.
    #[serde(default = "default_max_forwards")]
    pub max_forwards: usize,
    /// Megabytes of model weights the warm replicas may hold (`null`: every model warm). With
    /// a budget, the models kept warm follow the robots' recent requests (EPARA's placement): a
    /// cold model is loaded when robots ask for it, unloading the least asked-for idle ones.
    #[serde(default)]
    pub memory_budget_mb: Option<f64>,
    /// The most inferences of one model and plan, from different robots, run as one batch on a
    /// replica (EPARA's batching; 1: none). Batches form only from inferences already waiting
    /// for the replica, so an idle edge adds no wait. At most 64.
    #[serde(default = "default_max_batch")]
    pub max_batch: usize,
    /// The Zenoh session.
    #[serde(default)]
    pub zenoh: ZenohSection,
    /// The model store: ONNX files the edge may serve (never anything a robot sends).
    #[serde(default = "default_model_store")]
    pub model_store: PathBuf,
    /// The models served (at least one).
    pub models: Vec<ModelEntry>,
    /// Where the server computes: `cpu`, `cuda` (GPU 0) or `cuda:N`.
    #[serde(default = "default_device")]
    pub device: String,
    /// Several devices instead of `device` (e.g. `[cuda:0, cuda:1]`): `replicas` replicas of
    /// every model on each, a server profile measured on each, and every inference sent to the
    /// replica that will finish it first. `cpu:N` names stand for groups of CPU replicas.
    #[serde(default)]
    pub devices: Vec<String>,
    /// Warm replicas per model (concurrent inferences per model).
    #[serde(default = "default_replicas")]
    pub replicas: usize,
    /// Server kernels stretched this many times: emulates a slower server (fleet tests and
    /// demos on one machine); 1 = none.
    #[serde(default = "default_dilation")]
    pub dilation: f64,
    /// libtorch intra-op threads per replica (`null`: libtorch's default).
    #[serde(default)]
    pub threads: Option<i32>,
    /// Where measured server profiles are cached.
    #[serde(default = "default_profile_cache")]
    pub profile_cache: PathBuf,
    /// The memory layout measured server profiles choose (`auto`: the faster for each model);
    /// each model runs in its server profile's layout.
    #[serde(default)]
    pub layout: lop::profile::LayoutChoice,
    /// Directory of robot profiles (`*.json`, role robot) that robots name by hash in Hello.
    #[serde(default = "default_robot_profiles")]
    pub robot_profiles: PathBuf,
    /// The schedule-table configuration; robots must use the same (Hello carries its hash).
    #[serde(default)]
    pub table: TableSettings,
    /// Where schedule tables are cached, per (model, robot profile, server profile, table).
    #[serde(default = "default_table_cache")]
    pub table_cache: PathBuf,
    /// Longest accepted frame, bytes.
    #[serde(default = "default_max_frame_bytes")]
    pub max_frame_bytes: u32,
    /// Seconds a new session may take to send Hello.
    #[serde(default = "default_hello_timeout")]
    pub hello_timeout_s: f64,
    /// Seconds a Hello waits for its schedule table (from the cache, or planned for a robot
    /// profile seen for the first time) before the robot is told to run alone and retry.
    #[serde(default = "default_table_wait")]
    pub table_wait_s: f64,
    /// Seconds to let running inferences finish after SIGTERM / Ctrl-C.
    #[serde(default = "default_grace")]
    pub shutdown_grace_s: f64,
    /// Log filter (tracing `EnvFilter` syntax); the `LOP_LOG` environment variable overrides it.
    #[serde(default = "default_log")]
    pub log: String,
    /// GPU energy per served inference through NVML.
    #[serde(default)]
    pub gpu_energy: GpuEnergySection,
    /// The operators' HTTP endpoints: Prometheus `/metrics`, `/health/live`, `/health/ready`.
    #[serde(default)]
    pub metrics: MetricsSection,
    /// How this edge reports its load to the site, and whether it runs the site's aggregator.
    #[serde(default)]
    pub site: SiteSection,
    /// The file this was read from (set by [`EdgeConfig::load`]).
    #[serde(skip)]
    pub path: PathBuf,
}

fn default_max_forwards() -> usize {
    2
}

fn default_max_batch() -> usize {
    4
}

fn default_dilation() -> f64 {
    1.0
}

fn default_model_store() -> PathBuf {
    PathBuf::from("models")
}
pub(super) fn default_device() -> String {
    "cpu".into()
}
fn default_replicas() -> usize {
    1
}
fn default_profile_cache() -> PathBuf {
    PathBuf::from("cache/profiles")
}
fn default_robot_profiles() -> PathBuf {
    PathBuf::from("robots")
}
fn default_table_cache() -> PathBuf {
    PathBuf::from("cache/tables")
}
fn default_max_frame_bytes() -> u32 {
    lop_msgs::protocol::DEFAULT_MAX_FRAME_LEN
}
fn default_hello_timeout() -> f64 {
    10.0
}
fn default_table_wait() -> f64 {
    2.0
}
fn default_grace() -> f64 {
    10.0
}
fn default_log() -> String {
    format!("info,zenoh=warn,{}", lop_runtime::security::REFUSAL_LOG_FILTER)
}
