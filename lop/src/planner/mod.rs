//! LOSS, the planner (DESIGN.md section 5), and its schedule tables: `lop_core::planner`'s,
//! re-exported here; they read models only through `lop_core::structure` and, for the tables,
//! [`TableModel`], which the engine's [`Graph`] implements here (its content hash reads the
//! weights; a copy for another planning thread shares them). The planner's tests run here, on
//! real graphs.

pub use lop_core::planner::*;
#[cfg(test)]
mod release_tests;
#[cfg(test)]
mod tests;

use crate::graph::Graph;

impl TableModel for Graph {
    fn model_name(&self) -> &str {
        &self.name
    }

    fn content_hash(&self) -> lop_core::Result<String> {
        Graph::content_hash(self).map_err(|e| lop_core::Error::Input(format!("the model's content hash: {e}")))
    }

    fn share(&self) -> Graph {
        Graph::share(self)
    }
}
