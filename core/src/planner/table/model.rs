//! What a schedule table needs of a model beyond its structure ([`TableModel`]).

use crate::error::Result;
use crate::structure::Structure;

/// A model schedule tables can be planned on: its structure, its name and content hash (what
/// the table's key and the profiles record), and copies for other planning threads. The
/// engine's graph (`lop::Graph`) is one: its hash reads the weights, and a copy shares them.
pub trait TableModel: Structure + Send + Sized {
    /// The model's name, recorded in its tables.
    fn model_name(&self) -> &str;

    /// The model's content hash (its structure and weights).
    ///
    /// # Errors
    /// When the weights cannot be read.
    fn content_hash(&self) -> Result<String>;

    /// A copy of the model for another thread (each planning thread plans on its own).
    fn share(&self) -> Self;

    /// Whether the model ends in a post-processing stage.
    fn has_postprocess(&self) -> bool {
        (0..self.node_count()).any(|id| self.node_is_post(id))
    }
}
