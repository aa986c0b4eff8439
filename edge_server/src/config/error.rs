//! The configuration's one error type, [`ConfigError`], and how a check names the field it
//! refuses ([`EdgeConfig::invalid`]).

use std::path::PathBuf;

use super::schema::EdgeConfig;

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

impl EdgeConfig {
    /// A [`ConfigError::Invalid`] naming this configuration's file and `field`.
    pub(super) fn invalid(&self, field: impl Into<String>, msg: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { path: self.path.clone(), field: field.into(), msg: msg.into() }
    }
}
