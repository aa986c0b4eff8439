//! The error of the engine's pure parts: input that does not fit, named with its numbers.

use std::path::PathBuf;

/// What the pure parts of the engine and the fleet refuse. The engine's own error (`lop::Error`)
/// takes each of these with the same message, as its variant of the same name where it has one
/// (so this enum is exhaustive: a new variant must be given its place there).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// User input (a price list, a fleet's specification, a trace) that does not fit.
    #[error("bad input: {0}")]
    Input(String),
    /// A plan that does not fit its model, or is not well formed.
    #[error("invalid plan: {0}")]
    Plan(String),
    /// A plan that cannot run under the given conditions (a transfer without a link, a side
    /// that may not compute what the plan gives it).
    #[error("infeasible: {0}")]
    Infeasible(String),
    /// A codec a model's input cannot take, or a codec name that does not parse.
    #[error(transparent)]
    Frame(#[from] crate::frame::FrameError),
    /// A file (a profile's JSON) that does not parse.
    #[error("malformed model: {0}")]
    Malformed(String),
    /// A file that could not be read or written.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A profile measured for a different model than the one it is applied to.
    #[error("profile is for model '{profile_model}' (hash {found}), not this model (hash {expected})")]
    ProfileModel {
        /// Model name recorded in the profile.
        profile_model: String,
        /// Content hash of the model the profile is applied to.
        expected: String,
        /// Content hash recorded in the profile.
        found: String,
    },
    /// A profile that lacks timings for an op of the model.
    #[error("profile has no timings for op '{node}' (node {id})")]
    ProfileMissingOp {
        /// Node name.
        node: String,
        /// Node id.
        id: usize,
    },
    /// A profile whose contents make no sense (negative or NaN timings, wrong role, bad fields).
    #[error("bad profile entry '{node}': {msg}")]
    ProfileInvalid {
        /// The op (or field) concerned.
        node: String,
        /// What is wrong, with the value.
        msg: String,
    },
}

/// Result with the pure parts' [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
