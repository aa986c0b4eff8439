//! Finishing an inference on the robot alone from whatever it holds: the path taken when the
//! edge is unreachable, late or gone. Exact like every other path: each missing row is computed
//! from rows the robot holds, recomputing released values from the graph input when needed.
//! (A robot past a binding frame deadline does not come here: it computes the bands it would
//! wait for instead, [`super::run_side_racing`].)

use std::time::Instant;

use lop::exec::SideExec;
use lop::graph::NodeId;
use lop::ops::Op;
use tch::Tensor;

use super::stretch::Stretch;
use crate::error::{Error, Result};

/// Computes every row of every value the outputs depend on that `exec` does not hold (in
/// topological order, freeing each value after its last reader), then returns the outputs.
/// `exec` must hold the graph inputs whole.
///
/// # Errors
/// Engine and libtorch failures.
pub fn finish_locally(exec: &mut SideExec<'_>) -> Result<Vec<Tensor>> {
    finish(exec, &Stretch::None)
}

/// [`finish_locally`] for a robot emulating a slower device: each kernel is stretched as every
/// robot kernel is ([`Stretch`]).
///
/// # Errors
/// As [`finish_locally`].
pub fn finish_dilated(exec: &mut SideExec<'_>, stretch: &Stretch) -> Result<Vec<Tensor>> {
    finish(exec, stretch)
}

fn finish(exec: &mut SideExec<'_>, stretch: &Stretch) -> Result<Vec<Tensor>> {
    let graph = exec.graph();
    let n = graph.nodes.len();
    let mut live = vec![false; n];
    for &o in &graph.outputs {
        live[o] = true;
    }
    for id in (0..n).rev() {
        if live[id] {
            for &i in &graph.nodes[id].inputs {
                live[i] = true;
            }
        }
    }
    let mut last_reader = vec![None; n];
    for (id, node) in graph.nodes.iter().enumerate().filter(|(id, _)| live[*id]) {
        for &i in &node.inputs {
            last_reader[i] = Some(id);
        }
    }
    let all_rows = |id: NodeId| {
        let info = &graph.nodes[id].info;
        if info.row_axis.is_some() { 0..info.rows() } else { 0..1 }
    };
    let _guard = tch::no_grad_guard();
    for (id, node) in graph.nodes.iter().enumerate() {
        if !live[id] || matches!(node.op, Op::Input | Op::Constant(_)) {
            continue;
        }
        for piece in exec.missing(id, &all_rows(id)) {
            let t0 = Instant::now();
            exec.compute_and_store(id, &piece, 1).map_err(Error::Engine)?;
            stretch.wait_after(id, piece.len(), t0.elapsed());
        }
        for &i in &node.inputs {
            if last_reader[i] == Some(id) && !graph.outputs.contains(&i) && !matches!(graph.nodes[i].op, Op::Input) {
                exec.release(i);
            }
        }
    }
    outputs(exec)
}

/// The graph outputs, whole, from `exec`.
///
/// # Errors
/// [`Error::Engine`] when an output is not held whole.
pub fn outputs(exec: &SideExec<'_>) -> Result<Vec<Tensor>> {
    let graph = exec.graph();
    graph
        .outputs
        .iter()
        .map(|&o| {
            let info = &graph.nodes[o].info;
            let all = if info.row_axis.is_some() { 0..info.rows() } else { 0..1 };
            exec.extract(o, &all).map_err(Error::Engine)
        })
        .collect()
}
