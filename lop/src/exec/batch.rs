//! A whole model run on one side for several samples at once, every local op in row bands: what
//! an edge does when it batches the inferences of several robots ([`SideExec::batched`]), without
//! a link. `lop bench-batch` times it against the same samples one by one, and `lop bench-exec`
//! times it with one sample against a whole run.

use super::SideExec;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::ops::Op;
use crate::plan::Side;
use tch::Tensor;

/// Runs `graph` on `samples` (each one list of graph inputs) as one batch, every op with a row
/// axis computed in `bands` row bands (as a server computes its chunks), and returns the graph's
/// outputs with the samples stacked on axis 0 in order.
///
/// # Errors
/// [`Error::Input`] for no samples, zero bands, inputs that do not fit the graph, or a graph
/// that cannot carry a batch; libtorch errors naming the node.
pub fn run_batched(graph: &Graph, samples: &[Vec<Tensor>], bands: usize) -> Result<Vec<Tensor>> {
    run_batched_stats(graph, samples, bands, true).map(|(outputs, _)| outputs)
}

/// What a batched run cost beside its kernels.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchedStats {
    /// The largest number of activation bytes held at once.
    pub peak_bytes: usize,
    /// Bands copied together from several blocks.
    pub joins: super::side::Joins,
}

/// [`run_batched`], also returning what it held and copied ([`BatchedStats`]); `buffers`
/// false keeps every band its own block ([`SideExec::set_buffers`]), to compare.
///
/// # Errors
/// As [`run_batched`].
pub fn run_batched_stats(graph: &Graph, samples: &[Vec<Tensor>], bands: usize, buffers: bool) -> Result<(Vec<Tensor>, BatchedStats)> {
    if samples.is_empty() || bands == 0 {
        return Err(Error::Input(format!("a batched run needs samples and bands (got {} and {bands})", samples.len())));
    }
    for s in samples {
        super::check_inputs(graph, s)?;
    }
    let _guard = tch::no_grad_guard();
    let mut side = SideExec::batched(graph, Side::Server, samples.len())?;
    side.set_buffers(buffers && side.buffers());
    for (k, &id) in graph.inputs().iter().enumerate() {
        let parts: Vec<Tensor> = samples.iter().map(|s| s[k].shallow_clone()).collect();
        let stacked = Tensor::f_cat(&parts, 0)
            .map_err(|source| Error::TorchContext { context: format!("stacking input '{}'", graph.nodes[id].name), source })?;
        side.insert(id, 0..graph.nodes[id].info.rows(), stacked)?;
    }
    let last_use = super::last_uses(graph);
    for (id, n) in graph.nodes.iter().enumerate() {
        if matches!(n.op, Op::Input | Op::Constant(_)) {
            continue;
        }
        match n.info.row_axis {
            Some(_) => {
                side.expect_rows(id, 0..n.info.rows());
                for r in crate::rows::chunks(&(0..n.info.rows()), bands) {
                    side.compute_and_store(id, &r, 1)?;
                }
            }
            None => side.compute_and_store(id, &(0..1), 1)?,
        }
        // Freed after their last reader, as a whole run and the runtime's sides free them: held
        // to the end, every output would land in memory fresh from the system.
        for &i in &n.inputs {
            if last_use[i] == id {
                side.release(i);
            }
        }
    }
    let outputs = graph.outputs.iter().map(|&o| side.extract(o, &(0..graph.nodes[o].info.rows().max(1)))).collect::<Result<_>>()?;
    Ok((outputs, BatchedStats { peak_bytes: side.peak_bytes(), joins: side.joins() }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, GraphBuilder};
    use crate::ops::Conv;
    use tch::{Device, Kind};

    /// A chain of four convolutions computed in bands holds at most two values at once (the one
    /// read and the one written), as a whole run does, not the five it computes; and it still
    /// equals the whole run.
    #[test]
    fn a_banded_run_frees_each_value_after_its_last_reader() {
        let mut b = GraphBuilder::new("chain");
        let mut v = b.input("x", vec![1, 4, 16, 16], DType::F32);
        for k in 0..4 {
            let w = Tensor::randn([4, 4, 3, 3], (Kind::Float, Device::Cpu));
            v = b.add(format!("c{k}"), Op::Conv(Conv::same2d(w)), &[v]).expect("conv");
        }
        b.output(v);
        let g = b.build().expect("graph");
        let input = vec![Tensor::randn([1, 4, 16, 16], (Kind::Float, Device::Cpu))];
        let (outputs, stats) = run_batched_stats(&g, std::slice::from_ref(&input), 4, true).expect("banded run");
        let peak = stats.peak_bytes;
        let value_bytes = 4 * 16 * 16 * 4;
        assert!(peak >= value_bytes && peak <= 2 * value_bytes, "peak {peak} B, one value {value_bytes} B");
        let whole = crate::exec::run_whole(&g, &input).expect("whole").outputs;
        let a = crate::exec::agree(&outputs[0], &whole[0], crate::exec::Tolerance::SPLIT).expect("same shape");
        assert!(a.within, "{a:?}");
    }
}
