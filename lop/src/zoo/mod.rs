//! Built-in models with seeded weights.

use crate::error::{Error, Result};
use crate::graph::Graph;

/// Names of the zoo models.
pub fn names() -> &'static [&'static str] {
    &[]
}

/// Builds zoo model `name`.
///
/// # Errors
/// [`Error::UnknownModel`] for an unknown name.
pub fn build(name: &str) -> Result<Graph> {
    Err(Error::UnknownModel { name: format!("zoo:{name}"), known: names().join(", ") })
}
