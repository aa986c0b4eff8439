//! The YAML schema's sections: the Zenoh session and its security (`zenoh`, `tls`, `access`),
//! GPU energy (`gpu_energy`), the operators' endpoints (`metrics`) and the site (`site`), each
//! with its defaults.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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

fn default_mode() -> Mode {
    Mode::Router
}
fn default_listen() -> Vec<String> {
    vec!["tcp/[::]:7447".into()]
}
pub(super) fn default_true() -> bool {
    true
}
fn default_rate() -> f64 {
    100.0
}
