//! The error type of the robot nodes.

use std::path::PathBuf;

/// What can go wrong in a robot node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A parameter or configuration value is invalid.
    #[error("configuration: {what}")]
    Config {
        /// What, with the offending value.
        what: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A thread of the node could not be started.
    #[error("starting thread {name}: {source}")]
    Thread {
        /// The thread's name.
        name: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The ROS backend failed (session, publisher, subscriber).
    #[error("ROS ({backend}): {what}")]
    Ros {
        /// `hiroz` or `r2r`.
        backend: &'static str,
        /// What failed, naming the topic or node.
        what: String,
    },
    /// The runtime (edge link, client, worker) failed.
    #[error(transparent)]
    Runtime(#[from] lop_runtime::Error),
    /// Energy accounting failed (power source, sampler, CSV log).
    #[error("power: {0}")]
    Power(#[from] crate::power::PowerNodeError),
    /// A power source could not be opened or read.
    #[error(transparent)]
    PowerSource(#[from] lop_power::Error),
    /// A lifecycle transition the node's state does not allow.
    #[error("lifecycle: {0}")]
    Lifecycle(#[from] crate::lifecycle::Refused),
    /// The engine (model, profile, table) failed.
    #[error(transparent)]
    Engine(#[from] lop::Error),
}

/// The engine's pure parts' refusals (the planner, the simulator, profiles) as the engine's
/// ([`lop::Error`]'s conversion keeps their variant and message).
impl From<lop::lop_core::Error> for Error {
    fn from(e: lop::lop_core::Error) -> Self {
        Error::Engine(e.into())
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;
