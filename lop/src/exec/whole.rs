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
pub fn run_whole_seeing(graph: &Graph, inputs: &[Tensor], see: impl FnMut(usize, &Tensor)) -> Result<WholeRun> {
    run_whole_with(graph, inputs, see, None)
}

/// [`run_whole`], also returning each node's compute time in seconds (0 for inputs and
/// constants), for a breakdown of where a run's time goes. On a device that computes
/// asynchronously (CUDA) a time is the launch's, not the kernel's.
///
/// # Errors
/// As [`run_whole`].
pub fn run_whole_timed(graph: &Graph, inputs: &[Tensor]) -> Result<(WholeRun, Vec<f64>)> {
    let mut seconds = vec![0.0; graph.nodes.len()];
    let run = run_whole_with(graph, inputs, |_, _| {}, Some(&mut seconds))?;
    Ok((run, seconds))
}

fn run_whole_with(
    graph: &Graph,
    inputs: &[Tensor],
    mut see: impl FnMut(usize, &Tensor),
    mut seconds: Option<&mut [f64]>,
) -> Result<WholeRun> {
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
                let t0 = std::time::Instant::now();
                let out = op.compute(&bands, &node.info, &(0..node.info.rows())).map_err(|source| Error::Torch {
                    node: node.name.clone(),
                    op: op.kind_name(),
                    source,
                })?;
                if let Some(s) = seconds.as_deref_mut() {
                    s[id] = t0.elapsed().as_secs_f64();
                }
                out
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
