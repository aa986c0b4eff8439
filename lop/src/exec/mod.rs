//! Execution: the plain whole-graph run, one side's band executor, and the in-process split
//! run that plays both sides of a plan and checks every exchange.

mod compare;
mod side;
mod split;
mod whole;

pub use compare::{max_rel_err, max_rel_err_all};
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

/// Deterministic pseudo-random inputs for every graph input: uniform bytes for uint8 inputs
/// (a stand-in camera frame), standard normal values for float inputs.
///
/// # Errors
/// libtorch errors (none expected on CPU).
pub fn synthetic_inputs(graph: &Graph, seed: u64) -> Result<Vec<Tensor>> {
    let mut rng = crate::rng::Rng::new(seed);
    graph
        .inputs()
        .iter()
        .map(|&id| {
            let info = &graph.nodes[id].info;
            let shape: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
            let n = info.numel();
            let t = match info.dtype {
                crate::graph::DType::U8 => Tensor::from_slice(&(0..n).map(|_| rng.below(256) as u8).collect::<Vec<_>>()),
                crate::graph::DType::F32 => Tensor::from_slice(&(0..n).map(|_| rng.normal() as f32).collect::<Vec<_>>()),
                crate::graph::DType::I64 => Tensor::from_slice(&(0..n).map(|_| rng.below(16) as i64).collect::<Vec<_>>()),
            };
            t.f_view(shape.as_slice()).map_err(Error::torch("building synthetic inputs"))
        })
        .collect()
}
