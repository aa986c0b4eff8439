//! The plain whole-graph run: every op computed once on its whole input, values freed after
//! their last use. This is "the unsplit model" every split run is compared with.

use super::{check_inputs, tensor_bytes};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::ops::{BandIn, Op};
use tch::Tensor;

/// Result of a whole run.
#[derive(Debug)]
pub struct WholeRun {
    /// The graph outputs, in order.
    pub outputs: Vec<Tensor>,
    /// Largest number of activation bytes alive at once.
    pub peak_bytes: usize,
}

/// Runs `graph` whole on `inputs` (one tensor per graph input, on the graph's device).
///
/// # Errors
/// [`Error::Input`] for inputs that do not match; libtorch errors naming the node.
pub fn run_whole(graph: &Graph, inputs: &[Tensor]) -> Result<WholeRun> {
    run_whole_seeing(graph, inputs, |_, _| {})
}

/// [`run_whole`], showing `see` every value as it is computed (inputs included), before it is
/// released: for studies of what the values hold (how the ones that cross the link compress).
///
/// # Errors
/// As [`run_whole`].
pub fn run_whole_seeing(graph: &Graph, inputs: &[Tensor], mut see: impl FnMut(usize, &Tensor)) -> Result<WholeRun> {
    check_inputs(graph, inputs)?;
    let _guard = tch::no_grad_guard();
    let consumers = graph.consumers();
    let mut last_use = vec![0usize; graph.nodes.len()];
    for (id, cs) in consumers.iter().enumerate() {
        last_use[id] = cs.last().copied().unwrap_or(usize::MAX);
    }
    for &o in &graph.outputs {
        last_use[o] = usize::MAX;
    }
    let mut values: Vec<Option<Tensor>> = (0..graph.nodes.len()).map(|_| None).collect();
    let (mut live, mut peak) = (0usize, 0usize);
    let mut next_input = inputs.iter();
    for (id, node) in graph.nodes.iter().enumerate() {
        let t = match &node.op {
            Op::Input => next_input.next().map(|t| t.shallow_clone()).ok_or_else(|| Error::Input("too few inputs".into()))?,
            Op::Constant(t) => t.shallow_clone(),
            op => {
                let mut bands = Vec::with_capacity(node.inputs.len());
                for &i in &node.inputs {
                    let tensor = values[i]
                        .as_ref()
                        .ok_or_else(|| Error::Malformed(format!("value '{}' used after release", graph.nodes[i].name)))?;
                    bands.push(BandIn { tensor, start: 0, info: &graph.nodes[i].info });
                }
                op.compute(&bands, &node.info, &(0..node.info.rows())).map_err(|source| Error::Torch {
                    node: node.name.clone(),
                    op: op.kind_name(),
                    source,
                })?
            }
        };
        if !matches!(node.op, Op::Constant(_)) {
            live += tensor_bytes(&t);
            see(id, &t);
        }
        values[id] = Some(t);
        peak = peak.max(live);
        for &i in &node.inputs {
            if last_use[i] == id
                && let Some(t) = values[i].take()
                && !matches!(graph.nodes[i].op, Op::Constant(_))
            {
                live -= tensor_bytes(&t);
            }
        }
    }
    let outputs = graph
        .outputs
        .iter()
        .map(|&o| {
            values[o]
                .as_ref()
                .map(|t| t.shallow_clone())
                .ok_or_else(|| Error::Malformed(format!("output '{}' missing", graph.nodes[o].name)))
        })
        .collect::<Result<_>>()?;
    Ok(WholeRun { outputs, peak_bytes: peak })
}
