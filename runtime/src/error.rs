//! The crate's error type.

use std::fmt;
use std::path::PathBuf;

/// Errors of the runtime.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bandwidth trace file could not be read.
    #[error("reading trace {path}: {source}")]
    TraceIo {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A bandwidth trace is malformed.
    #[error("trace {path}:{line}: {kind}")]
    Trace {
        /// The file (or `<samples>` for a trace built in memory).
        path: PathBuf,
        /// 1-based line (or sample index + 1) of the problem; for an empty trace, the last line.
        line: usize,
        /// What is wrong.
        kind: TraceErrorKind,
    },
    /// The peer has closed its end of the link (its receiver is gone), so nothing more can be sent.
    #[error("link closed by the peer")]
    Closed,
    /// A band past the sending half's queue budget (the peer reads slower than this side sends,
    /// or has stopped): refused, nothing queued; the inference it belongs to is given up.
    #[error("send queue full: {0}")]
    QueueFull(String),
    /// A frame could not be encoded.
    #[error("encoding a frame: {0}")]
    Frame(#[from] lop_msgs::Error),
    /// A configuration value is out of range.
    #[error("invalid configuration: {what}")]
    InvalidConfig {
        /// Which value and why.
        what: String,
    },
    /// The engine failed (a bad model or plan, or a libtorch error).
    #[error(transparent)]
    Engine(#[from] lop::Error),
    /// A coded input band that does not decode, or decodes to other pixels than the robot's
    /// (its digest differs): the edge refuses it (Error `InputMismatch`).
    #[error("input mismatch: {0}")]
    InputMismatch(String),
    /// The executor failed outside the engine (tensor conversion, worker threads).
    #[error("executor: {0}")]
    Executor(String),
    /// The peer broke the protocol or refused the session.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The edge is planning this robot's table (Reject `Planning`); `server_profile` is the
    /// edge's profile as JSON, when it sent one.
    #[error("protocol: the edge is planning: {text}")]
    EdgePlanning {
        /// The edge's words.
        text: String,
        /// The edge's profile (JSON; may be empty).
        server_profile: Vec<u8>,
    },
    /// The edge welcomed the robot with another schedule table than the robot's (planned for
    /// another server profile); `server_profile` is the edge's profile as JSON, when it sent one.
    #[error("protocol: the edge planned with table {edge} but this robot has {ours}")]
    TableMismatch {
        /// The edge's table hash (hex).
        edge: String,
        /// The robot's table hash (hex).
        ours: String,
        /// The edge's profile (JSON; empty when the edge did not send it).
        server_profile: Vec<u8>,
    },
    /// An external command (`ip`, `tc`) could not be run or exited with a failure.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Its standard error (or why it could not be started).
        stderr: String,
    },
    /// A network-namespace system call failed.
    #[error("{what}: {source}")]
    Netns {
        /// The call and its target, e.g. `setns(/var/run/netns/lop-edge, CLONE_NEWNET)`.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A Zenoh operation failed (opening a session, declaring, publishing); the text says which.
    #[error("zenoh: {0}")]
    Zenoh(String),
}

/// The engine's pure parts' refusals (the planner, the simulator, profiles) as the engine's
/// ([`lop::Error`]'s conversion keeps their variant and message).
impl From<lop::lop_core::Error> for Error {
    fn from(e: lop::lop_core::Error) -> Self {
        Error::Engine(e.into())
    }
}

impl Error {
    /// True for [`Error::Closed`]: the peer went away, the normal end of a session.
    pub fn is_closed(&self) -> bool {
        matches!(self, Error::Closed)
    }
}

/// What is wrong with a bandwidth trace.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TraceErrorKind {
    /// The first non-comment line is not the header `t_s,mbps`.
    MissingHeader {
        /// The line found instead (empty at end of file).
        found: String,
    },
    /// A line does not have exactly two comma-separated fields.
    FieldCount {
        /// How many fields it has.
        found: usize,
    },
    /// A field is not a finite number.
    NotANumber {
        /// `t_s` or `mbps`.
        field: &'static str,
        /// The text of the field.
        text: String,
    },
    /// A rate is negative.
    NegativeRate {
        /// The rate, Mbit/s.
        mbps: f64,
    },
    /// The first sample is not at `t_s = 0`.
    FirstNotAtZero {
        /// Its time, s.
        t_s: f64,
    },
    /// A time is not greater than the one before it.
    NonIncreasingTime {
        /// The previous time, s.
        previous: f64,
        /// This time, s.
        t_s: f64,
    },
    /// The trace has a header but no sample.
    Empty,
}

impl fmt::Display for TraceErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceErrorKind::MissingHeader { found } => write!(f, "expected header `t_s,mbps`, found {found:?}"),
            TraceErrorKind::FieldCount { found } => write!(f, "expected 2 fields `t_s,mbps`, found {found}"),
            TraceErrorKind::NotANumber { field, text } => write!(f, "{field} {text:?} is not a finite number"),
            TraceErrorKind::NegativeRate { mbps } => write!(f, "negative rate {mbps} Mbit/s"),
            TraceErrorKind::FirstNotAtZero { t_s } => write!(f, "first sample at t_s = {t_s}, expected 0"),
            TraceErrorKind::NonIncreasingTime { previous, t_s } => write!(f, "t_s = {t_s} does not increase (previous {previous})"),
            TraceErrorKind::Empty => write!(f, "no samples after the header"),
        }
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
