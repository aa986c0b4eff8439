//! Finishing an inference on the robot alone from whatever it holds: the path taken when the
//! edge is unreachable, late or gone. Exact like every other path: each missing row is computed
//! from rows the robot holds, recomputing released values from the graph input when needed.
//! A robot past its frame's deadline races the edge: it computes the frame and takes the edge's
//! late bands as they come ([`finish_racing`]).

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use lop::exec::SideExec;
use lop::graph::NodeId;
use lop::ops::Op;
use lop::plan::Side;
use lop::sim::Schedule;
use tch::{Device, Tensor};

use super::side::Incoming;
use super::wire::GraphMeta;
use crate::error::{Error, Result};

/// Computes every row of every value the outputs depend on that `exec` does not hold (in
/// topological order, freeing each value after its last reader), then returns the outputs.
/// `exec` must hold the graph inputs whole.
///
/// # Errors
/// Engine and libtorch failures.
pub fn finish_locally(exec: &mut SideExec<'_>) -> Result<Vec<Tensor>> {
    finish(exec, 1.0, None).map(|(outputs, _)| outputs)
}

/// [`finish_locally`] for a robot emulating a slower device: each op's compute is stretched to
/// `dilation` times its measured duration by waiting, as every robot kernel is.
///
/// # Errors
/// As [`finish_locally`].
pub fn finish_dilated(exec: &mut SideExec<'_>, dilation: f64) -> Result<Vec<Tensor>> {
    finish(exec, dilation, None).map(|(outputs, _)| outputs)
}

/// Who completed the outputs of a [`finish_racing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raced {
    /// The edge's bands arrived first.
    Edge,
    /// The robot computed them.
    Robot,
}

/// The edge's side of a [`finish_racing`]: where its bands come from and how to read them.
pub struct Race<'a> {
    meta: &'a GraphMeta,
    schedule: &'a Schedule,
    device: Device,
    incoming: &'a Receiver<Incoming>,
    /// False once the edge gave up (an abort) or its channel closed.
    open: bool,
    /// Bands and bytes (whole frames) taken during the race.
    pub bands: u32,
    /// See `bands`.
    pub bytes: u64,
}

impl<'a> Race<'a> {
    /// Bands of `schedule`'s transfers towards the robot, arriving on `incoming`.
    pub fn new(meta: &'a GraphMeta, schedule: &'a Schedule, device: Device, incoming: &'a Receiver<Incoming>) -> Race<'a> {
        Race { meta, schedule, device, incoming, open: true, bands: 0, bytes: 0 }
    }

    /// Takes what arrives within `wait` (what is there already when `wait` is zero), storing
    /// the bands of values not yet reached (`next` and later, or graph outputs); the rest of
    /// `wait` is slept once the edge gave up.
    fn take(&mut self, exec: &mut SideExec<'_>, next: NodeId, wait: Duration) -> Result<()> {
        let until = Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if !self.open {
                std::thread::sleep(left);
                return Ok(());
            }
            let msg = if left.is_zero() {
                match self.incoming.try_recv() {
                    Ok(m) => m,
                    Err(TryRecvError::Empty) => return Ok(()),
                    Err(TryRecvError::Disconnected) => {
                        self.open = false;
                        continue;
                    }
                }
            } else {
                match self.incoming.recv_timeout(left) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => return Ok(()),
                    Err(RecvTimeoutError::Disconnected) => {
                        self.open = false;
                        continue;
                    }
                }
            };
            let band = match msg {
                Incoming::Abort(_) => {
                    self.open = false;
                    continue;
                }
                Incoming::Band(b) => b,
            };
            let Some(t) = self.schedule.transfers.get(band.transfer as usize) else { continue };
            if t.from() == Side::Robot || (t.node < next && !exec.graph().outputs.contains(&t.node)) {
                continue;
            }
            self.bands += 1;
            self.bytes += band.frame.len() as u64;
            let tensor = band.tensor(self.meta, t.node, &t.rows, self.device)?;
            let rows = if self.meta.info(t.node).row_axis.is_some() { t.rows.clone() } else { 0..1 };
            exec.insert(t.node, rows, tensor).map_err(Error::Engine)?;
        }
    }
}

/// [`finish_dilated`] while the edge may still answer: a robot that stopped waiting at its
/// frame's deadline computes the frame itself, and takes the edge's bands as they come (between
/// ops and through the waits that stretch its kernels). Whichever completes the outputs first
/// wins; every row either way is the unsplit model's.
///
/// # Errors
/// As [`finish_locally`], and bands that do not fit their transfer.
pub fn finish_racing(exec: &mut SideExec<'_>, dilation: f64, race: &mut Race<'_>) -> Result<(Vec<Tensor>, Raced)> {
    finish(exec, dilation, Some(race))
}

fn finish(exec: &mut SideExec<'_>, dilation: f64, mut race: Option<&mut Race<'_>>) -> Result<(Vec<Tensor>, Raced)> {
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
        if let Some(r) = race.as_deref_mut() {
            r.take(exec, id, Duration::ZERO)?;
            if graph.outputs.iter().all(|&o| exec.missing(o, &all_rows(o)).is_empty()) {
                return Ok((outputs(exec)?, Raced::Edge));
            }
        }
        let t0 = Instant::now();
        for piece in exec.missing(id, &all_rows(id)) {
            exec.compute_and_store(id, &piece, 1).map_err(Error::Engine)?;
        }
        let stretch = if dilation > 1.0 { t0.elapsed().mul_f64(dilation - 1.0) } else { Duration::ZERO };
        match race.as_deref_mut() {
            Some(r) => r.take(exec, id + 1, stretch)?,
            None => std::thread::sleep(stretch),
        }
        for &i in &node.inputs {
            if last_reader[i] == Some(id) && !graph.outputs.contains(&i) && !matches!(graph.nodes[i].op, Op::Input) {
                exec.release(i);
            }
        }
    }
    Ok((outputs(exec)?, Raced::Robot))
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
