//! Loading a model by name: `zoo:NAME` builds a zoo model, anything else is an ONNX file.

use crate::error::{Error, Result};
use crate::graph::Graph;
use std::path::Path;

/// Options for [`load`].
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Shape for every graph input whose ONNX shape is dynamic (`--input-shape`).
    pub input_shape: Option<Vec<usize>>,
    /// A front end prepended to a float-input model (`--preprocess`), so that frames enter as
    /// uint8 bytes.
    pub preprocess: Option<crate::preprocess::Preprocess>,
}

/// Loads `name`: `zoo:NAME` (see [`crate::zoo::names`]) or a path to a `.onnx` file.
///
/// # Errors
/// [`Error::UnknownModel`] for a name that is neither; import errors for bad files.
pub fn load(name: &str, opts: &LoadOptions) -> Result<Graph> {
    let graph = load_graph(name, opts)?;
    match &opts.preprocess {
        Some(p) => p.apply(graph),
        None => Ok(graph),
    }
}

fn load_graph(name: &str, opts: &LoadOptions) -> Result<Graph> {
    if let Some(zoo_name) = name.strip_prefix("zoo:") {
        let graph = crate::zoo::build(zoo_name)?;
        if let Some(given) = &opts.input_shape {
            let have: Vec<&Vec<usize>> = graph.inputs().into_iter().map(|i| &graph.nodes[i].info.shape).collect();
            if have.iter().any(|s| *s != given) {
                return Err(Error::Input(format!(
                    "input shape {given:?} does not fit {name}, whose input shape is fixed at {:?}",
                    have.first().map_or(&Vec::new(), |s| *s)
                )));
            }
        }
        return Ok(graph);
    }
    let path = Path::new(name);
    if path.exists() {
        let io = crate::onnx::ImportOptions { input_shape: opts.input_shape.clone() };
        return crate::onnx::import_file(path, &io);
    }
    Err(Error::UnknownModel { name: name.to_string(), known: crate::zoo::known_names() })
}
