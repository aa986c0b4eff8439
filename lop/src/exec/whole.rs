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
    run_whole_with(graph, inputs, see, None, 1)
}

/// [`run_whole`], also returning each node's compute time in seconds (0 for inputs and
/// constants), for a breakdown of where a run's time goes. On a device that computes
/// asynchronously (CUDA) a time is the launch's, not the kernel's.
///
/// # Errors
/// As [`run_whole`].
pub fn run_whole_timed(graph: &Graph, inputs: &[Tensor]) -> Result<(WholeRun, Vec<f64>)> {
    let mut seconds = vec![0.0; graph.nodes.len()];
    let run = run_whole_with(graph, inputs, |_, _| {}, Some(&mut seconds), 1)?;
    Ok((run, seconds))
}

/// Each op's kernel time when every op with a row axis is computed in `bands` row bands, each
/// from the whole values of its inputs (the band's own rows read as views, as a profile times
/// them), in seconds per node: what the kernels alone cost in bands, without the executor's
/// assembly of band inputs. The bands are joined (untimed) so that the next op reads whole
/// values. The outputs equal the whole run's under the comparison rule.
///
/// # Errors
/// As [`run_whole`]; [`Error::Input`] for zero bands.
pub fn run_banded_kernels_timed(graph: &Graph, inputs: &[Tensor], bands: usize) -> Result<(WholeRun, Vec<f64>)> {
    if bands == 0 {
        return Err(Error::Input("a banded run needs at least one band".into()));
    }
    let mut seconds = vec![0.0; graph.nodes.len()];
    let run = run_whole_with(graph, inputs, |_, _| {}, Some(&mut seconds), bands)?;
    Ok((run, seconds))
}

/// `node`'s value computed from `ins` in `bands` row bands (one call when it has no row axis),
/// and the seconds its kernel calls took together.
fn compute_in_bands(node: &crate::graph::Node, ins: &[BandIn<'_>], bands: usize) -> std::result::Result<(Tensor, f64), tch::TchError> {
    let all = 0..node.info.rows();
    let (Some(axis), true) = (node.info.row_axis, bands > 1) else {
        let t0 = std::time::Instant::now();
        let out = node.op.compute(ins, &node.info, &all)?;
        return Ok((out, t0.elapsed().as_secs_f64()));
    };
    let (mut parts, mut took) = (Vec::with_capacity(bands), 0.0);
    for r in crate::rows::chunks(&all, bands) {
        let t0 = std::time::Instant::now();
        parts.push(node.op.compute(ins, &node.info, &r)?);
        took += t0.elapsed().as_secs_f64();
    }
    Ok((Tensor::f_cat(&parts, axis as i64)?, took))
}

fn run_whole_with(
    graph: &Graph,
    inputs: &[Tensor],
    mut see: impl FnMut(usize, &Tensor),
    mut seconds: Option<&mut [f64]>,
    bands: usize,
) -> Result<WholeRun> {
    check_inputs(graph, inputs)?;
    let _guard = tch::no_grad_guard();
    let last_use = super::last_uses(graph);
    let mut values: Vec<Option<Tensor>> = (0..graph.nodes.len()).map(|_| None).collect();
    let (mut live, mut peak) = (0usize, 0usize);
    let mut next_input = inputs.iter();
    for (id, node) in graph.nodes.iter().enumerate() {
        let t = match &node.op {
            Op::Input => next_input.next().map(|t| t.shallow_clone()).ok_or_else(|| Error::Input("too few inputs".into()))?,
            Op::Constant(t) => t.shallow_clone(),
            op => {
                let mut ins = Vec::with_capacity(node.inputs.len());
                for &i in &node.inputs {
                    let tensor = values[i]
                        .as_ref()
                        .ok_or_else(|| Error::Malformed(format!("value '{}' used after release", graph.nodes[i].name)))?;
                    ins.push(BandIn { tensor, start: 0, info: &graph.nodes[i].info });
                }
                let (out, took) = compute_in_bands(node, &ins, bands).map_err(|source| Error::Torch {
                    node: node.name.clone(),
                    op: op.kind_name(),
                    source,
                })?;
                if let Some(s) = seconds.as_deref_mut() {
                    s[id] = took;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{Tolerance, agree};
    use crate::graph::{DType, GraphBuilder, Layout};
    use crate::ops::{Conv, Pool};
    use tch::{Device, Kind};

    /// Two convolutions and a pool, packed in channels-last: computed with every op in bands
    /// from whole inputs, the outputs agree with the whole run's under the one rule, each op's
    /// kernels are timed, and zero bands is refused.
    #[test]
    fn banded_kernels_agree_with_the_whole_run_and_are_timed() {
        let mut b = GraphBuilder::new("banded");
        let x = b.input("x", vec![1, 4, 19, 11], DType::F32);
        let c1 = b.add("c1", Op::Conv(Conv::same2d(Tensor::randn([8, 4, 3, 3], (Kind::Float, Device::Cpu)))), &[x]).expect("c1");
        let p = b.add("pool", Op::MaxPool(Pool::same_3x3()), &[c1]).expect("pool");
        let c2 = b.add("c2", Op::Conv(Conv::same2d(Tensor::randn([4, 8, 5, 5], (Kind::Float, Device::Cpu)))), &[p]).expect("c2");
        b.output(c2);
        let mut g = b.build().expect("graph");
        g.set_layout(Layout::ChannelsLast).expect("layout");
        let input = [Tensor::randn([1, 4, 19, 11], (Kind::Float, Device::Cpu))];
        let whole = run_whole(&g, &input).expect("whole").outputs.remove(0);
        for bands in [1, 3, 8, 19] {
            let (run, seconds) = run_banded_kernels_timed(&g, &input, bands).expect("banded");
            let a = agree(&run.outputs[0], &whole, Tolerance::SPLIT).expect("same shape");
            assert!(a.within, "{bands} bands: {a:?}");
            assert!([c1, p, c2].iter().all(|&id| seconds[id] > 0.0), "{bands} bands: {seconds:?}");
            assert_eq!(seconds[x], 0.0);
        }
        assert!(matches!(run_banded_kernels_timed(&g, &input, 0), Err(Error::Input(_))));
    }
}
