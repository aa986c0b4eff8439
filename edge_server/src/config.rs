//! The edge server's YAML configuration (`lop_edge --config FILE`; `config/edge.yaml` documents
//! every field with its default).
//!
//! [`EdgeConfig::load`] parses the file (unknown fields are errors), checks every value and
//! resolves relative paths against the file's directory. Errors name the file and the field.
//! Nothing is loaded or measured here: [`crate::prepare`] does that.

use std::path::{Component, Path, PathBuf};

use lop::planner::table::TableSpec;
use lop_runtime::security::{AccessPolicy, Login, Security, TlsFiles, endpoint_protocol, is_loopback_endpoint};
use lop_runtime::table_config::TableSettings;
use lop_runtime::zenoh_link::{ZenohConfig, ZenohMode};
use serde::{Deserialize, Serialize};

/// A configuration that could not be read or is invalid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid YAML for the configuration (syntax, an unknown field, a wrong type);
    /// the message names the field and the line.
    #[error("{path}: {msg}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the YAML parser said.
        msg: String,
    },
    /// A value is out of range or points at something missing.
    #[error("{path}: {field}: {msg}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field, e.g. `models[0].sha256`.
        field: String,
        /// What is wrong.
        msg: String,
    },
}

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

/// The Zenoh session.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ZenohSection {
    /// `router` (default), `peer` or `client`.
    #[serde(default = "default_mode")]
    pub mode: Mode,
    /// Endpoints to listen on.
    #[serde(default = "default_listen")]
    pub listen: Vec<String>,
    /// Endpoints to connect to (another router, for instance).
    #[serde(default)]
    pub connect: Vec<String>,
    /// UDP multicast scouting.
    #[serde(default)]
    pub multicast_scouting: bool,
    /// Mutual TLS on `tls/` endpoints (`lop certs` makes the files).
    #[serde(default)]
    pub tls: Option<TlsSection>,
    /// A file of `user:password` lines that robots (and other edges) must present.
    #[serde(default)]
    pub users_file: Option<PathBuf>,
    /// This edge's own user name, for connecting to an edge whose `users_file` asks for one.
    #[serde(default)]
    pub user: Option<String>,
    /// The file holding this edge's password (first line).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Zenoh access control: each listed robot confined to its own keys.
    #[serde(default)]
    pub access: Option<AccessSection>,
    /// Listen beyond loopback without TLS (anyone on the network may then reach this edge).
    #[serde(default)]
    pub allow_insecure: bool,
    /// With authentication on and no `access`: let every authenticated robot use every robot's
    /// keys (otherwise the edge refuses to start, so that access control is the default).
    #[serde(default)]
    pub allow_shared_keys: bool,
}

impl Default for ZenohSection {
    fn default() -> Self {
        ZenohSection {
            mode: default_mode(),
            listen: default_listen(),
            connect: Vec::new(),
            multicast_scouting: false,
            tls: None,
            users_file: None,
            user: None,
            password_file: None,
            access: None,
            allow_insecure: false,
            allow_shared_keys: false,
        }
    }
}

/// TLS files (PEM), relative to the configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The site's CA certificate (`ca.pem`).
    pub ca: PathBuf,
    /// This edge's certificate (`edge.pem`).
    pub cert: PathBuf,
    /// This edge's private key (`edge.key`).
    pub key: PathBuf,
}

/// Who may use which keys (Zenoh access control, everything else denied).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AccessSection {
    /// Robot ids (their certificates' common names or user names), each confined to
    /// `lop/v1/<robot>/**` plus reading the edges' public keys.
    #[serde(default)]
    pub robots: Vec<String>,
    /// Identities trusted as edges (everything allowed): the other edges of a fleet.
    #[serde(default = "default_edge_identities")]
    pub edges: Vec<String>,
}

fn default_edge_identities() -> Vec<String> {
    vec![lop_runtime::security::EDGE_IDENTITY.to_string()]
}

/// A Zenoh session's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Accepts clients and peers and routes between them.
    Router,
    /// Connects to and accepts peers.
    Peer,
    /// Connects to one router.
    Client,
}

/// One model served.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// The id robots name in Hello (letters, digits, `_`, `-`, `.`).
    pub id: String,
    /// `zoo:NAME`, or an ONNX file name relative to the model store. Absent: the store's
    /// `<sha256>.onnx`.
    #[serde(default)]
    pub source: Option<String>,
    /// Expected sha256 (64 hex digits): the ONNX file's `sha256sum` or the model's content hash
    /// (what robots send in Hello). Checked at start-up; a mismatch is an error.
    #[serde(default)]
    pub sha256: Option<String>,
    /// Input shape for ONNX models with dynamic input dimensions, e.g. `[1, 3, 416, 416]`.
    #[serde(default)]
    pub input_shape: Option<Vec<usize>>,
    /// Several input shapes for one model with dynamic dimensions, each served (and profiled) as
    /// its own variant: the camera resolutions of the robots that send frames at their own size
    /// (`lop_robot` without `model.input_shape`). Exclusive with `input_shape`.
    #[serde(default)]
    pub input_shapes: Vec<Vec<usize>>,
    /// The robots' cameras, for models that fit the camera's frame themselves (`lop_robot`'s
    /// `image.camera_size`): each `letterbox@WxH`, `letterbox:PAD@WxH` or `resize@WxH` is
    /// served as its own variant, taking frames of that size, so that a camera's JPEG crosses
    /// unchanged whatever its size. Robots must use the same fit, since it is part of the model.
    #[serde(default)]
    pub camera_fits: Vec<String>,
    /// A front end for a float-input model so that frames arrive as bytes (`unit`, `raw`,
    /// `imagenet`, `mean=R,G,B;std=R,G,B`, each with an optional `;bgr`); robots must use the
    /// same, since it is part of the model.
    #[serde(default)]
    pub preprocess: Option<String>,
    /// A back end after the model's output (`detect`, `pose`, `segment`, `occupancy`, `raw`,
    /// with `;key=value` options, e.g. `detect;score=0.3`), so that results rather than raw heads
    /// return to the robot; robots must use the same `model.task`, since it is part of the model.
    #[serde(default)]
    pub task: Option<String>,
    /// The edge's profile of this model: a profile JSON path, `measure` (at start-up, cached in
    /// `profile_cache`) or `synthetic` (tests).
    #[serde(default)]
    pub server_profile: ProfileSource,
}

/// Where a server profile comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(from = "String", into = "String")]
pub enum ProfileSource {
    /// Measured at start-up on the configured device (cached).
    #[default]
    Measure,
    /// [`crate::synthetic_profile`]: for tests and demos only.
    Synthetic,
    /// A profile JSON (from `lop profile --role server`).
    File(PathBuf),
}

impl From<String> for ProfileSource {
    fn from(s: String) -> Self {
        match s.as_str() {
            "measure" => ProfileSource::Measure,
            "synthetic" => ProfileSource::Synthetic,
            _ => ProfileSource::File(PathBuf::from(s)),
        }
    }
}

impl From<ProfileSource> for String {
    fn from(p: ProfileSource) -> String {
        match p {
            ProfileSource::Measure => "measure".into(),
            ProfileSource::Synthetic => "synthetic".into(),
            ProfileSource::File(p) => p.display().to_string(),
        }
    }
}

/// GPU energy through NVML.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GpuEnergySection {
    /// Try NVML (when the device is a GPU).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// NVML device index (`null`: the CUDA ordinal of `device`).
    #[serde(default)]
    pub nvml_index: Option<u32>,
    /// Power readings per second.
    #[serde(default = "default_rate")]
    pub rate_hz: f64,
}

/// The operators' HTTP endpoints ([`crate::http`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// Serve them.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Address and port (loopback by default: a local Prometheus or agent scrapes it).
    #[serde(default = "default_metrics_listen")]
    pub listen: String,
    /// Listen beyond loopback (the endpoints carry no authentication).
    #[serde(default)]
    pub allow_remote_metrics: bool,
}

/// The site's hearing ([`lop_runtime::fleet::site`]).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SiteSection {
    /// Milliseconds between this edge's load reports (10 to 1000). Robots hearing every edge
    /// take each one; at a large site only the aggregator does, and faster reports make its
    /// digests fresher.
    #[serde(default = "default_report_period_ms")]
    pub report_period_ms: f64,
    /// Run the site's aggregator here: every edge's reports republished as one digest per shard
    /// of edges for robots with `edge.hear: site`. One edge of the site (or two, for redundancy).
    #[serde(default)]
    pub aggregate: bool,
    /// Edges per shard, at most (1 to 256).
    #[serde(default = "default_shard_size")]
    pub shard_size: usize,
    /// Milliseconds between digests (10 to 1000): what each robot hears per shard.
    #[serde(default = "default_digest_period_ms")]
    pub digest_period_ms: f64,
}

impl Default for SiteSection {
    fn default() -> Self {
        SiteSection {
            report_period_ms: default_report_period_ms(),
            aggregate: false,
            shard_size: default_shard_size(),
            digest_period_ms: default_digest_period_ms(),
        }
    }
}

fn default_report_period_ms() -> f64 {
    lop_runtime::fleet::REPORT_PERIOD.as_secs_f64() * 1e3
}

fn default_shard_size() -> usize {
    lop_runtime::fleet::DEFAULT_SHARD_SIZE
}

fn default_digest_period_ms() -> f64 {
    50.0
}

impl Default for MetricsSection {
    fn default() -> Self {
        MetricsSection { enabled: true, listen: default_metrics_listen(), allow_remote_metrics: false }
    }
}

fn default_metrics_listen() -> String {
    "127.0.0.1:9464".into()
}

impl Default for GpuEnergySection {
    fn default() -> Self {
        GpuEnergySection { enabled: true, nvml_index: None, rate_hz: default_rate() }
    }
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

fn default_mode() -> Mode {
    Mode::Router
}
fn default_listen() -> Vec<String> {
    vec!["tcp/[::]:7447".into()]
}
fn default_model_store() -> PathBuf {
    PathBuf::from("models")
}
fn default_device() -> String {
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
fn default_true() -> bool {
    true
}
fn default_rate() -> f64 {
    100.0
}

/// Where a model's graph comes from, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A zoo model, `zoo:NAME`.
    Zoo(String),
    /// An ONNX file in the store (absolute path).
    File(PathBuf),
}

impl ModelSource {
    /// What [`lop::model::load`] takes.
    pub fn load_name(&self) -> String {
        match self {
            ModelSource::Zoo(s) => s.clone(),
            ModelSource::File(p) => p.display().to_string(),
        }
    }
}

/// The endpoints an edge listens on and the warnings to log at start-up about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenPlan {
    /// The endpoints listened on.
    pub listen: Vec<String>,
    /// What start-up says (loopback only, insecure, no access control).
    pub warnings: Vec<String>,
}

/// The loopback endpoints replacing one on every address (`tcp/[::]:P`, `tcp/0.0.0.0:P`).
fn loopback_of_unspecified(endpoint: &str) -> Option<Vec<String>> {
    let (proto, rest) = endpoint.split_once('/')?;
    let (addr, tail) = match rest.find(['?', '#']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let (host, port) = addr.rsplit_once(':')?;
    let ip: std::net::IpAddr = host.trim_start_matches('[').trim_end_matches(']').parse().ok()?;
    if !ip.is_unspecified() {
        return None;
    }
    Some(if ip.is_ipv4() {
        vec![format!("{proto}/127.0.0.1:{port}{tail}")]
    } else {
        vec![format!("{proto}/127.0.0.1:{port}{tail}"), format!("{proto}/[::1]:{port}{tail}")]
    })
}

impl EdgeConfig {
    /// Reads, checks and resolves `path`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and the field.
    pub fn load(path: &Path) -> Result<EdgeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        Self::parse(&text, path)
    }

    /// Parses `text` as if read from `path` (relative paths resolve against its directory).
    ///
    /// # Errors
    /// As [`EdgeConfig::load`].
    pub fn parse(text: &str, path: &Path) -> Result<EdgeConfig, ConfigError> {
        let mut cfg: EdgeConfig =
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Parse { path: path.to_path_buf(), msg: e.to_string() })?;
        cfg.path = path.to_path_buf();
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = if base.as_os_str().is_empty() { PathBuf::from(".") } else { base };
        let base = std::path::absolute(&base).unwrap_or(base);
        for p in [&mut cfg.model_store, &mut cfg.profile_cache, &mut cfg.robot_profiles, &mut cfg.table_cache] {
            *p = base.join(&*p);
        }
        for m in &mut cfg.models {
            if let ProfileSource::File(p) = &mut m.server_profile {
                *p = base.join(&*p);
            }
        }
        let z = &mut cfg.zenoh;
        for p in z.tls.iter_mut().flat_map(|t| [&mut t.ca, &mut t.cert, &mut t.key]).chain(&mut z.users_file).chain(&mut z.password_file) {
            *p = base.join(&*p);
        }
        cfg.check()?;
        Ok(cfg)
    }

    fn invalid(&self, field: impl Into<String>, msg: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { path: self.path.clone(), field: field.into(), msg: msg.into() }
    }

    /// This edge's fleet id: `id`, or the host name made a valid id (letters, digits, `_`, `-`
    /// and `.` kept, anything else `-`, at most 64 bytes), or `edge` when there is none.
    pub fn edge_id(&self) -> String {
        if let Some(id) = &self.id {
            return id.clone();
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let id: String = host
            .trim()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '-' })
            .take(lop_msgs::MAX_ID_LEN)
            .collect();
        if lop_msgs::validate_id(&id).is_ok() { id } else { "edge".to_string() }
    }

    /// The memory budget in bytes (`memory_budget_mb`), if any.
    pub fn memory_budget(&self) -> Option<u64> {
        self.memory_budget_mb.map(|mb| (mb * 1e6) as u64)
    }

    fn check(&self) -> Result<(), ConfigError> {
        if let Some(id) = &self.id {
            lop_msgs::validate_id(id).map_err(|e| self.invalid("id", format!("'{id}': {e}")))?;
        }
        if !(self.dilation.is_finite() && self.dilation >= 1.0) {
            return Err(self.invalid("dilation", format!("{} must be >= 1", self.dilation)));
        }
        if let Some(mb) = self.memory_budget_mb
            && !(mb.is_finite() && mb > 0.0)
        {
            return Err(self.invalid("memory_budget_mb", format!("{mb} must be a number of megabytes above 0 (null: every model warm)")));
        }
        if !(1..=lop_runtime::edge::Batching::MAX).contains(&self.max_batch) {
            return Err(self.invalid(
                "max_batch",
                format!("{} must be a count from 1 (no batching) to {}", self.max_batch, lop_runtime::edge::Batching::MAX),
            ));
        }
        if self.max_forwards > lop_msgs::protocol::MAX_PATH {
            return Err(self.invalid(
                "max_forwards",
                format!("{} is more than the {} a request's path can carry", self.max_forwards, lop_msgs::protocol::MAX_PATH),
            ));
        }
        if self.zenoh.mode != Mode::Client && self.zenoh.listen.is_empty() {
            return Err(self.invalid("zenoh.listen", "a router or peer needs at least one endpoint to listen on"));
        }
        if self.zenoh.mode == Mode::Client && self.zenoh.connect.is_empty() {
            return Err(self.invalid("zenoh.connect", "a client needs at least one endpoint to connect to"));
        }
        self.zenoh_config()?.to_zenoh().map_err(|e| self.invalid("zenoh", e.to_string()))?;
        if self.models.is_empty() {
            return Err(self.invalid("models", "no model to serve"));
        }
        for (i, m) in self.models.iter().enumerate() {
            let field = |f: &str| format!("models[{i}].{f}");
            lop_msgs::validate_id(&m.id).map_err(|e| self.invalid(field("id"), format!("'{}': {e}", m.id)))?;
            if self.models[..i].iter().any(|o| o.id == m.id) {
                return Err(self.invalid(field("id"), format!("'{}' is listed twice", m.id)));
            }
            if let Some(h) = &m.sha256
                && !(h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            {
                return Err(self.invalid(field("sha256"), format!("'{h}' is not 64 hexadecimal digits")));
            }
            if m.source.is_none() && m.sha256.is_none() {
                return Err(self.invalid(field("source"), "give a source (zoo:NAME or a file in the store), or a sha256"));
            }
            if m.input_shape.is_some() && !m.input_shapes.is_empty() {
                return Err(self.invalid(field("input_shapes"), "give input_shape or input_shapes, not both"));
            }
            for (name, shape) in m.input_shape.iter().map(|s| ("input_shape", s)).chain(m.input_shapes.iter().map(|s| ("input_shapes", s)))
            {
                if shape.is_empty() || shape.contains(&0) {
                    return Err(self.invalid(field(name), format!("{shape:?} is not a shape of positive dimensions")));
                }
            }
            if let Some((j, dup)) = m.input_shapes.iter().enumerate().find(|(j, s)| m.input_shapes[..*j].contains(s)) {
                return Err(self.invalid(format!("models[{i}].input_shapes[{j}]"), format!("{dup:?} is listed twice")));
            }
            for (j, spec) in m.camera_fits.iter().enumerate() {
                let fit =
                    lop::fit::FrameFit::parse(spec).map_err(|e| self.invalid(format!("models[{i}].camera_fits[{j}]"), e.to_string()))?;
                if m.camera_fits[..j].iter().any(|s| lop::fit::FrameFit::parse(s).ok() == Some(fit)) {
                    return Err(self.invalid(format!("models[{i}].camera_fits[{j}]"), format!("{spec} is listed twice")));
                }
            }
            if m.input_shapes.len().max(1) * m.camera_fits.len().max(1) > 1 && matches!(m.server_profile, ProfileSource::File(_)) {
                return Err(self.invalid(
                    field("server_profile"),
                    "a profile file fits one input shape; with several input_shapes or camera_fits use measure (each variant is profiled and cached)",
                ));
            }
            if let Some(spec) = &m.preprocess {
                lop::preprocess::Preprocess::parse(spec).map_err(|e| self.invalid(field("preprocess"), e.to_string()))?;
            }
            if let Some(spec) = &m.task {
                lop::postprocess::Postprocess::parse(spec).map_err(|e| self.invalid(field("task"), e.to_string()))?;
            }
            self.model_source(i)?;
        }
        self.device()?;
        if self.replicas == 0 {
            return Err(self.invalid("replicas", "must be at least 1"));
        }
        if let Some(t) = self.threads
            && t < 1
        {
            return Err(self.invalid("threads", format!("{t} must be at least 1")));
        }
        if self.max_frame_bytes < 1024 {
            return Err(self.invalid("max_frame_bytes", format!("{} is too small (at least 1024)", self.max_frame_bytes)));
        }
        for (name, v) in
            [("hello_timeout_s", self.hello_timeout_s), ("table_wait_s", self.table_wait_s), ("shutdown_grace_s", self.shutdown_grace_s)]
        {
            if !(v.is_finite() && (0.0..=86_400.0).contains(&v)) {
                return Err(self.invalid(name, format!("{v} is not a number of seconds in [0, 86400]")));
            }
        }
        tracing_subscriber::EnvFilter::try_new(&self.log).map_err(|e| self.invalid("log", format!("'{}': {e}", self.log)))?;
        let g = &self.gpu_energy;
        if !(g.rate_hz.is_finite() && g.rate_hz > 0.0 && g.rate_hz <= 10_000.0) {
            return Err(self.invalid("gpu_energy.rate_hz", format!("{} is not in (0, 10000]", g.rate_hz)));
        }
        self.metrics_addr()?;
        let site = &self.site;
        for (name, v) in [("site.report_period_ms", site.report_period_ms), ("site.digest_period_ms", site.digest_period_ms)] {
            if !(v.is_finite() && (10.0..=1000.0).contains(&v)) {
                return Err(self.invalid(name, format!("{v} is not a number of milliseconds in [10, 1000]")));
            }
        }
        if !(1..=lop_msgs::site::MAX_DIGEST_EDGES).contains(&site.shard_size) {
            return Err(self.invalid("site.shard_size", format!("{} is not in [1, {}]", site.shard_size, lop_msgs::site::MAX_DIGEST_EDGES)));
        }
        self.table_spec()?;
        Ok(())
    }

    /// Where the operators' endpoints listen (`None`: turned off).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `metrics.listen` for an address that does not parse, or
    /// one beyond loopback without `metrics.allow_remote_metrics`.
    pub fn metrics_addr(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        let m = &self.metrics;
        if !m.enabled {
            return Ok(None);
        }
        let addr: std::net::SocketAddr =
            m.listen.parse().map_err(|e| self.invalid("metrics.listen", format!("'{}' is not an address:port ({e})", m.listen)))?;
        if !addr.ip().is_loopback() && !m.allow_remote_metrics {
            return Err(self.invalid(
                "metrics.listen",
                format!(
                    "{addr} is beyond loopback and the endpoints carry no authentication: set metrics.allow_remote_metrics: true to serve them there"
                ),
            ));
        }
        Ok(Some(addr))
    }

    /// The input shapes model `i` is served at: `[None]` (its own static shape), its
    /// `input_shape`, or each of its `input_shapes`.
    pub fn served_shapes(&self, i: usize) -> Vec<Option<Vec<usize>>> {
        match self.models.get(i) {
            Some(m) if !m.input_shapes.is_empty() => m.input_shapes.iter().cloned().map(Some).collect(),
            Some(m) => vec![m.input_shape.clone()],
            None => Vec::new(),
        }
    }

    /// The variants model `i` is served as: each of [`EdgeConfig::served_shapes`], fitting
    /// each of its `camera_fits` (or none). Call after validation (specs that do not parse are
    /// left out).
    pub fn served_variants(&self, i: usize) -> Vec<(Option<Vec<usize>>, Option<lop::fit::FrameFit>)> {
        let fits: Vec<Option<lop::fit::FrameFit>> = match self.models.get(i) {
            Some(m) if !m.camera_fits.is_empty() => {
                m.camera_fits.iter().filter_map(|s| lop::fit::FrameFit::parse(s).ok()).map(Some).collect()
            }
            _ => vec![None],
        };
        self.served_shapes(i).into_iter().flat_map(|shape| fits.iter().map(move |&fit| (shape.clone(), fit))).collect()
    }

    /// Model `i`'s source: a zoo name, or a file inside the store (which must exist).
    ///
    /// # Errors
    /// A path leaving the store, or a file that is not there.
    pub fn model_source(&self, i: usize) -> Result<ModelSource, ConfigError> {
        let field = format!("models[{i}].source");
        let m = self.models.get(i).ok_or_else(|| self.invalid("models", format!("no model {i}")))?;
        let name = match (&m.source, &m.sha256) {
            (Some(s), _) => s.clone(),
            (None, Some(h)) => format!("{}.onnx", h.to_ascii_lowercase()),
            (None, None) => return Err(self.invalid(field, "missing")),
        };
        if name.starts_with("zoo:") {
            return Ok(ModelSource::Zoo(name));
        }
        let rel = Path::new(&name);
        if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(self.invalid(field, format!("'{name}' must be a file name inside the model store (no absolute path, no ..)")));
        }
        let path = self.model_store.join(rel);
        if !path.is_file() {
            return Err(self.invalid(field, format!("model file '{name}' not found in the model store {}", self.model_store.display())));
        }
        Ok(ModelSource::File(path))
    }

    /// The libtorch device.
    ///
    /// # Errors
    /// A bad name, or CUDA (that GPU) not available.
    pub fn device(&self) -> Result<tch::Device, ConfigError> {
        Ok(self.devices()?[0].1)
    }

    /// Every device the edge computes on, with its name: `device`, or each of `devices`
    /// (`cuda` read as `cuda:0`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming `device` or `devices[i]` for a name that is not a device,
    /// a CUDA device that is not there, a device listed twice, or both fields set.
    pub fn devices(&self) -> Result<Vec<(String, tch::Device)>, ConfigError> {
        if self.devices.is_empty() {
            let d = self.parse_device("device", &self.device)?;
            return Ok(vec![(self.device.trim().to_string(), d)]);
        }
        if self.device != default_device() {
            return Err(self.invalid("devices", format!("set device ('{}') or devices, not both", self.device)));
        }
        let mut out: Vec<(String, tch::Device)> = Vec::new();
        for (i, name) in self.devices.iter().enumerate() {
            let field = format!("devices[{i}]");
            let d = self.parse_device(&field, name)?;
            let name = match name.trim() {
                "cuda" => "cuda:0".to_string(),
                "cpu" => "cpu:0".to_string(),
                n => n.to_string(),
            };
            if out.iter().any(|(n, _)| *n == name) {
                return Err(self.invalid(field, format!("'{name}' is listed twice")));
            }
            out.push((name, d));
        }
        Ok(out)
    }

    fn parse_device(&self, field: &str, name: &str) -> Result<tch::Device, ConfigError> {
        let d = name.trim();
        let ordinal = match d {
            "cpu" => return Ok(tch::Device::Cpu),
            "cuda" => 0,
            _ if d.strip_prefix("cpu:").is_some_and(|n| n.parse::<usize>().is_ok()) => return Ok(tch::Device::Cpu),
            _ => match d.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => n,
                _ => return Err(self.invalid(field, format!("'{d}' is not cpu, cpu:N, cuda or cuda:N"))),
            },
        };
        if !tch::Cuda::is_available() {
            return Err(self.invalid(field, format!("'{d}': CUDA is not available (no GPU, driver or CUDA-enabled libtorch)")));
        }
        let count = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
        if ordinal >= count {
            return Err(self.invalid(field, format!("'{d}': no CUDA device {ordinal} ({count} present)")));
        }
        Ok(tch::Device::Cuda(ordinal))
    }

    /// The Zenoh session configuration: the endpoints actually listened on
    /// ([`listen_plan`](Self::listen_plan)) and the security settings.
    ///
    /// # Errors
    /// A listen endpoint refused by [`listen_plan`](Self::listen_plan); an unreadable password
    /// file; `user` without `password_file` or the reverse.
    pub fn zenoh_config(&self) -> Result<ZenohConfig, ConfigError> {
        let mode = match self.zenoh.mode {
            Mode::Router => ZenohMode::Router,
            Mode::Peer => ZenohMode::Peer,
            Mode::Client => ZenohMode::Client,
        };
        Ok(ZenohConfig {
            mode,
            listen: self.listen_plan()?.listen,
            connect: self.zenoh.connect.clone(),
            multicast_scouting: self.zenoh.multicast_scouting,
            security: self.security()?,
            // A frame's header plus Zenoh's own framing: anything longer is a lie about its length.
            max_message_bytes: Some(self.max_frame_bytes as usize + 4096),
        })
    }

    /// The security settings of the edge's Zenoh session.
    ///
    /// # Errors
    /// `user` without `password_file` (or the reverse), an unreadable password file, an invalid
    /// robot id in `access.robots`.
    pub fn security(&self) -> Result<Security, ConfigError> {
        let z = &self.zenoh;
        let login = match (&z.user, &z.password_file) {
            (Some(user), Some(file)) => Some(Login::from_file(user, file).map_err(|e| self.invalid("zenoh.password_file", e.to_string()))?),
            (None, None) => None,
            _ => return Err(self.invalid("zenoh.user", "give both user and password_file, or neither")),
        };
        let access = z.access.as_ref().map(|a| AccessPolicy { robots: a.robots.clone(), edges: a.edges.clone() });
        if let Some(a) = &access {
            a.to_json().map_err(|e| self.invalid("zenoh.access", e.to_string()))?;
        }
        Ok(Security {
            tls: z.tls.as_ref().map(|t| TlsFiles { ca: t.ca.clone(), cert: t.cert.clone(), key: t.key.clone() }),
            login,
            users_file: z.users_file.clone(),
            access,
        })
    }

    /// Where the edge listens, and what to say about it at start-up. Secure by default: without
    /// TLS, an endpoint on every address (`tcp/[::]:7447`) becomes loopback only, and one on a
    /// network address is refused, unless `allow_insecure` is set.
    ///
    /// # Errors
    /// A `tls/` endpoint without `zenoh.tls`; a non-TLS endpoint on a network address without
    /// `allow_insecure`.
    pub fn listen_plan(&self) -> Result<ListenPlan, ConfigError> {
        let z = &self.zenoh;
        let mut plan = ListenPlan { listen: Vec::new(), warnings: Vec::new() };
        for ep in &z.listen {
            let proto = endpoint_protocol(ep);
            if matches!(proto, "tls" | "quic") {
                if z.tls.is_none() {
                    return Err(self.invalid("zenoh.listen", format!("{ep} needs zenoh.tls (ca, cert, key; `lop certs` makes them)")));
                }
                plan.listen.push(ep.clone());
            } else if is_loopback_endpoint(ep) || z.allow_insecure {
                if !is_loopback_endpoint(ep) {
                    plan.warnings.push(format!(
                        "insecure: listening on {ep} without TLS (allow_insecure): anyone on the network can send frames to this edge"
                    ));
                }
                plan.listen.push(ep.clone());
            } else if let Some(local) = loopback_of_unspecified(ep) {
                plan.warnings.push(format!(
                    "listening on {} instead of {ep}: loopback only, since this endpoint has no TLS. Robots on other hosts \
                     cannot connect: give zenoh.tls and a tls/ endpoint (`lop certs`), or set zenoh.allow_insecure: true",
                    local.join(" and ")
                ));
                plan.listen.extend(local);
            } else {
                return Err(self.invalid(
                    "zenoh.listen",
                    format!("{ep} is reachable from the network without TLS: use a tls/ endpoint with zenoh.tls, or set zenoh.allow_insecure: true"),
                ));
            }
        }
        let security = self.security()?;
        if security.authenticates() && z.access.is_none() {
            if !z.allow_shared_keys {
                return Err(self.invalid(
                    "zenoh.access",
                    "authentication is on but no robot is confined to its own keys: list the robots in zenoh.access.robots \
                     (each may then use only lop/v1/<robot>/), or set zenoh.allow_shared_keys: true to let every \
                     authenticated robot use every robot's keys",
                ));
            }
            plan.warnings.push("no zenoh.access (allow_shared_keys): every authenticated robot may use every robot's keys".into());
        }
        Ok(plan)
    }

    /// The schedule-table specification (robots must build theirs from the same values).
    ///
    /// # Errors
    /// Bad buckets, objective, link numbers or planner budget, naming the `table.*` field.
    pub fn table_spec(&self) -> Result<TableSpec, ConfigError> {
        self.table.fixed_spec().map_err(|e| self.invalid("table", e.to_string()))
    }

    /// The resolved configuration as YAML (defaults filled in, paths absolute).
    ///
    /// # Errors
    /// Never in practice (plain data); a serialiser failure is reported as [`ConfigError::Parse`].
    pub fn to_yaml(&self) -> Result<String, ConfigError> {
        serde_yaml_ng::to_string(self).map_err(|e| ConfigError::Parse { path: self.path.clone(), msg: e.to_string() })
    }
}
