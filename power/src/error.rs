//! The power crate's error type.

/// What can go wrong reading power. Callers branch on [`Error::is_not_available`]: a source that
/// is absent is skipped by detection, one that is broken is reported.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A power source that was found but cannot be read, or whose values make no sense
    /// (non-numeric or negative contents, a rail set that changes, a clock that runs backwards).
    /// The field is not called `source` because thiserror reserves that name for a cause.
    #[error("power source '{sensor}': {msg}")]
    Power {
        /// The source, e.g. `jetson-hwmon`, and where useful the file.
        sensor: String,
        /// What is wrong, with the offending value.
        msg: String,
    },
    /// A power source that does not exist here: no such sysfs tree, library, device or binary.
    #[error("power source '{sensor}' is not available: {reason}")]
    NotAvailable {
        /// The source asked for.
        sensor: String,
        /// Why it is not available (for `auto`, every source tried and why each failed).
        reason: String,
    },
    /// A value given by the caller that does not fit (a rate, a capacity, a source name, watts).
    #[error("bad input: {0}")]
    Input(String),
}

/// The power crate's result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Whether this is [`Error::NotAvailable`]: the thing asked for is absent, not broken.
    pub fn is_not_available(&self) -> bool {
        matches!(self, Error::NotAvailable { .. })
    }
    pub(crate) fn power(sensor: impl Into<String>, msg: impl Into<String>) -> Self {
        Error::Power { sensor: sensor.into(), msg: msg.into() }
    }
    pub(crate) fn not_available(sensor: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::NotAvailable { sensor: sensor.into(), reason: reason.into() }
    }
}
