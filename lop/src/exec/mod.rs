//! Execution: the plain whole-graph run, one side's band executor, and the in-process split
//! run that plays both sides of a plan and checks every exchange.

mod side;
mod split;
mod whole;

pub use side::{Held, SideExec};
pub use split::{SplitRun, run_split};
pub use whole::{WholeRun, run_whole};

use crate::error::{Error, Result};
use crate::graph::Graph;
use tch::Tensor;

/// Checks that `inputs` match the graph's inputs in number, shape and dtype.
///
/// # Errors
/// [`Error::Input`] naming the input and both shapes or dtypes.
pub fn check_inputs(graph: &Graph, inputs: &[Tensor]) -> Result<()> {
    let ids = graph.inputs();
    if ids.len() != inputs.len() {
        return Err(Error::Input(format!("model '{}' takes {} inputs, got {}", graph.name, ids.len(), inputs.len())));
    }
    for (&id, t) in ids.iter().zip(inputs) {
        let info = &graph.nodes[id].info;
        let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        if shape != info.shape {
            return Err(Error::Input(format!("input '{}' must have shape {:?}, got {:?}", graph.nodes[id].name, info.shape, shape)));
        }
        if t.kind() != info.dtype.kind() {
            return Err(Error::Input(format!(
                "input '{}' must have dtype {:?}, got {:?}",
                graph.nodes[id].name,
                info.dtype,
                t.kind()
            )));
        }
    }
    Ok(())
}

/// Bytes of a tensor's elements.
pub(crate) fn tensor_bytes(t: &Tensor) -> usize {
    t.numel() * t.kind().elt_size_in_bytes()
}
