//! The LOP edge server behind `lop_edge --config FILE` (DESIGN.md sections 2 and 6).
//!
//! The service itself is [`lop_runtime::edge::EdgeService`]; this crate reads the YAML
//! configuration ([`config`]), prepares the models (the store, sha256 checks, server profiles:
//! [`prepare`]), runs the service on a Zenoh session until SIGTERM or Ctrl-C ([`run`]), and
//! reports the GPU energy of every served inference through NVML when there is one ([`energy`]).
//!
//! Operators watch it through [`http`] (Prometheus `/metrics` from [`metrics`], `/health/live`,
//! `/health/ready`) and systemd through [`notify`] (`READY=1`, `STOPPING=1`, and `WATCHDOG=1`
//! while the serving runtime's heartbeat is fresh).
//!
//! Shutdown: the service refuses new sessions and inferences, running inferences get
//! `shutdown_grace_s` to finish, the Zenoh session closes, totals are logged, and [`run`] returns.
//!
//! The crate's own files: `models.rs` prepares the models ([`prepare`]), `serving.rs` runs and
//! shuts down the service ([`run`], [`serve`]), `network.rs` opens the Zenoh session, accepts
//! robots and joins the fleet, and `accounting.rs` logs every served inference with its GPU
//! energy and feeds /metrics.

mod accounting;
pub mod config;
pub mod energy;
pub mod http;
pub mod metrics;
mod models;
mod network;
pub mod notify;
mod serving;

pub use config::{ConfigError, EdgeConfig};
pub use models::prepare;
pub use serving::{HEARTBEAT_PERIOD, RunSummary, run, serve};

/// Errors of the edge server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A model could not be loaded, hashed or profiled.
    #[error("model '{id}': {source}")]
    Model {
        /// The model's id.
        id: String,
        /// The engine's error.
        source: Box<lop::Error>,
    },
    /// A file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        /// What the file is for.
        what: &'static str,
        /// The file or directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The runtime failed (Zenoh, the service).
    #[error(transparent)]
    Runtime(#[from] lop_runtime::Error),
    /// The operators' endpoints could not listen (`metrics.listen`).
    #[error("{0}")]
    Metrics(std::io::Error),
}

/// The synthetic profile (`server_profile: synthetic`; tests and demos): the same function the
/// robot's configuration uses, so both build the same table.
pub use lop::profile::synthetic_profile;
