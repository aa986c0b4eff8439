//! The in-process split run: both sides of a plan executed in one process, every row a side
//! needs but did not compute copied from the other side and counted as a transfer. Used to
//! verify that a plan reproduces the whole output, and to measure the band executor.

use super::SideExec;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::ops::Op;
use crate::plan::{Plan, Side};
use tch::Tensor;

/// Result of a split run.
#[derive(Debug)]
pub struct SplitRun {
    /// The graph outputs as assembled on the robot.
    pub outputs: Vec<Tensor>,
    /// Bytes the robot sent to the server.
    pub bytes_up: usize,
    /// Bytes the server sent to the robot.
    pub bytes_down: usize,
    /// Band messages each way (robot to server, server to robot).
    pub messages: (usize, usize),
    /// Largest number of activation bytes held at once by the two sides together.
    pub peak_bytes: usize,
}

/// Executes `plan` on `graph` with both sides in this process.
///
/// # Errors
/// [`Error::Plan`] for a plan that does not fit; [`Error::Input`] for bad inputs; libtorch
/// errors naming the node.
pub fn run_split(graph: &Graph, plan: &Plan, inputs: &[Tensor]) -> Result<SplitRun> {
    super::check_inputs(graph, inputs)?;
    plan.validate(graph)?;
    let _guard = tch::no_grad_guard();
    let mut robot = SideExec::new(graph, Side::Robot);
    let mut server = SideExec::new(graph, Side::Server);
    let mut run = SplitRun { outputs: vec![], bytes_up: 0, bytes_down: 0, messages: (0, 0), peak_bytes: 0 };
    for (&id, t) in graph.inputs().iter().zip(inputs) {
        robot.insert(id, 0..graph.nodes[id].info.rows(), t.shallow_clone())?;
    }
    let last_use = super::last_uses(graph);
    let mut peak_live = 0usize;
    for id in 0..graph.nodes.len() {
        if matches!(graph.nodes[id].op, Op::Input | Op::Constant(_)) {
            continue;
        }
        for side in [Side::Robot, Side::Server] {
            let rows = plan.rows(graph, id, side);
            if rows.is_empty() {
                continue;
            }
            let (me, other) = match side {
                Side::Robot => (&mut robot, &server),
                Side::Server => (&mut server, &robot),
            };
            fetch_missing(me, other, id, &rows, &mut run)?;
            me.compute_and_store(id, &rows, plan.chunks(id, side))?;
        }
        peak_live = peak_live.max(robot.live_bytes() + server.live_bytes());
        for &i in &graph.nodes[id].inputs {
            if last_use[i] == id {
                robot.release(i);
                server.release(i);
            }
        }
    }
    // The robot ends with every output whole.
    for &o in &graph.outputs {
        let all = 0..graph.nodes[o].info.rows();
        for piece in robot.missing(o, &all) {
            let t = server.extract(o, &piece)?;
            run.bytes_down += super::tensor_bytes(&t);
            run.messages.1 += 1;
            robot.insert(o, piece, t)?;
        }
        run.outputs.push(robot.extract(o, &all)?);
    }
    run.peak_bytes = peak_live;
    Ok(run)
}

/// Copies into `me` every input row node `id` needs for `rows` that `me` lacks.
fn fetch_missing(me: &mut SideExec<'_>, other: &SideExec<'_>, id: usize, rows: &crate::rows::Rows, run: &mut SplitRun) -> Result<()> {
    for (inp, need) in me.needs(id, rows) {
        for piece in me.missing(inp, &need) {
            let t = other.extract(inp, &piece).map_err(|e| match e {
                Error::MissingRows { .. } => Error::Plan(format!(
                    "neither side holds rows {piece:?} of '{}' needed by '{}' on the {}",
                    me.graph().nodes[inp].name,
                    me.graph().nodes[id].name,
                    me.side().name()
                )),
                e => e,
            })?;
            let bytes = super::tensor_bytes(&t);
            match me.side() {
                Side::Server => {
                    run.bytes_up += bytes;
                    run.messages.0 += 1;
                }
                Side::Robot => {
                    run.bytes_down += bytes;
                    run.messages.1 += 1;
                }
            }
            me.insert(inp, piece, t)?;
        }
    }
    Ok(())
}
