//! Execution: the plain whole-graph run, one side's band executor, and the in-process split
//! run that plays both sides of a plan and checks every exchange.

mod band_buffer;
mod batch;
mod compare;
mod side;
mod split;
mod whole;

pub use batch::{BatchedStats, run_batched, run_batched_stats};
pub use compare::{Agreement, Tolerance, agree, agree_all, max_rel_err, max_rel_err_all};
pub use side::{Held, Joins, SideExec, unbatchable};
pub use split::{SplitRun, run_split};
pub use whole::{WholeRun, run_banded_kernels_timed, run_whole, run_whole_seeing, run_whole_timed};

use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::value::DTypeKind;
use lop_core::structure::Structure;
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
            let hint = if t.kind() == tch::Kind::Uint8 && info.dtype == crate::graph::DType::F32 {
                format!(" (camera bytes for a float model need a preprocess stage: {})", crate::preprocess::SPEC_HELP)
            } else {
                String::new()
            };
            return Err(Error::Input(format!(
                "input '{}' must have dtype {:?}, got {:?}{hint}",
                graph.nodes[id].name,
                info.dtype,
                t.kind()
            )));
        }
    }
    Ok(())
}

/// For every node, the last node that reads it (`usize::MAX` for graph outputs and values no
/// node reads): where a run may free it.
pub(crate) fn last_uses(graph: &Graph) -> Vec<usize> {
    let mut last: Vec<usize> = graph.consumers().iter().map(|c| c.last().copied().unwrap_or(usize::MAX)).collect();
    for &o in &graph.outputs {
        last[o] = usize::MAX;
    }
    last
}

/// Bytes of a tensor's elements.
pub(crate) fn tensor_bytes(t: &Tensor) -> usize {
    t.numel() * t.kind().elt_size_in_bytes()
}

/// Deterministic pseudo-random inputs for `graph`, one per graph input, on the CPU: uniform
/// bytes for uint8 inputs (a noise frame), and for f32 inputs a sparse raster (about a quarter
/// of the cells occupied, values in `[0, 1)`), like a LiDAR grid.
///
/// # Errors
/// When an input has a dtype other than u8 or f32, or libtorch fails to build the tensor.
pub fn synthetic_inputs(graph: &Graph, seed: u64) -> Result<Vec<Tensor>> {
    let mut rng = crate::rng::Rng::new(seed);
    graph
        .inputs()
        .into_iter()
        .map(|id| {
            let info = &graph.nodes[id].info;
            let dims: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
            let n = info.numel();
            let t = match info.dtype {
                crate::graph::DType::U8 => Tensor::f_from_slice(&(0..n).map(|_| rng.below(256) as u8).collect::<Vec<u8>>()),
                crate::graph::DType::F32 => {
                    Tensor::f_from_slice(&(0..n).map(|_| if rng.below(4) == 0 { rng.unit() as f32 } else { 0.0 }).collect::<Vec<f32>>())
                }
                crate::graph::DType::I64 | crate::graph::DType::Bool => {
                    return Err(Error::Input(format!("no sample data for {:?} input '{}'", info.dtype, graph.nodes[id].name)));
                }
            };
            t.and_then(|t| t.f_reshape(dims.as_slice())).map_err(|source| Error::TorchContext {
                context: format!("building a sample for input '{}'", graph.nodes[id].name),
                source,
            })
        })
        .collect()
}
