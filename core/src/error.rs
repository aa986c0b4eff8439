//! The error of the engine's pure parts: input that does not fit, named with its numbers.

/// What the pure parts of the engine and the fleet refuse.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// User input (a price list, a fleet's specification, a trace) that does not fit.
    #[error("bad input: {0}")]
    Input(String),
    /// A plan that does not fit its model, or is not well formed.
    #[error("invalid plan: {0}")]
    Plan(String),
}

/// Result with the pure parts' [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
