//! What goes wrong in the power node's logic: [`PowerNodeError`], whether asking again may
//! succeed, and its conversions.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use lop_power::NoData;

/// What went wrong in the power node's logic.
#[derive(Debug)]
pub enum PowerNodeError {
    /// The interval ends before it starts.
    Interval {
        /// Its start.
        start: SystemTime,
        /// Its end.
        end: SystemTime,
    },
    /// The buffer does not cover the interval (empty, too early, not yet, or a gap).
    NoData(NoData),
    /// A wall-clock time too far from the anchor to map to the monotonic clock.
    Clock(String),
    /// A power source or sampler error (a rejected reading, a sampler that failed).
    Source(lop_power::Error),
    /// A file that could not be created or written.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A bad setting or input, named.
    Config(String),
}

impl PowerNodeError {
    /// Whether asking again later may succeed (the interval ends after the newest reading).
    pub fn is_retryable(&self) -> bool {
        matches!(self, PowerNodeError::NoData(NoData::EndsAfterBuffer { .. }))
    }
}

impl fmt::Display for PowerNodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PowerNodeError::Interval { start, end } => {
                let by = start.duration_since(*end).unwrap_or_default();
                write!(f, "energy interval ends {by:?} before it starts")
            }
            PowerNodeError::NoData(why) => write!(f, "no energy figure: {why}"),
            PowerNodeError::Clock(msg) => write!(f, "clock: {msg}"),
            PowerNodeError::Source(e) => write!(f, "{e}"),
            PowerNodeError::Io { path, source } => write!(f, "i/o error on {}: {source}", path.display()),
            PowerNodeError::Config(msg) => write!(f, "power node: {msg}"),
        }
    }
}

impl std::error::Error for PowerNodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PowerNodeError::Source(e) => Some(e),
            PowerNodeError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<lop_power::Error> for PowerNodeError {
    fn from(e: lop_power::Error) -> Self {
        PowerNodeError::Source(e)
    }
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PowerNodeError + '_ {
    move |source| PowerNodeError::Io { path: path.to_path_buf(), source }
}
