//! ONNX import.

use crate::error::{Error, Result};
use crate::graph::Graph;
use std::path::Path;

/// Options for importing an ONNX model.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Shape used for graph inputs with dynamic dimensions.
    pub input_shape: Option<Vec<usize>>,
}

/// Imports an ONNX file (external data files are looked up next to it).
///
/// # Errors
/// Malformed or unsupported models, naming the node, op type and opset.
pub fn import_file(path: &Path, _opts: &ImportOptions) -> Result<Graph> {
    Err(Error::Malformed(format!("{}: ONNX import not built yet", path.display())))
}
