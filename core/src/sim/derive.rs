//! Deriving the task graph of a plan: compute chunks per op and side, transfers per missing
//! row piece, and who waits for what.

use super::{Holder, Simulator, side_ix};
use crate::error::{Error, Result};
use crate::plan::{Plan, Side};
use crate::rows::Rows;
use crate::structure::NodeId;

/// One chunk computed by one side.
#[derive(Debug, Clone)]
pub(super) struct Task {
    pub side: Side,
    pub node: NodeId,
    pub rows: Rows,
    pub dur: f64,
    /// Inputs not available yet: transfers it reads that have not arrived, and chunks of its
    /// own side it reads that are not done.
    pub pending: u32,
    /// Transfers that become ready when it ends.
    pub enables: Vec<u32>,
    /// Chunks of the same side that read rows it computes.
    pub succ: Vec<u32>,
    /// Wavefront priority: where its rows start, as a fraction of the op's rows (lower first;
    /// ties go to the lower task index, i.e. topological order, then top to bottom).
    pub key: f64,
    pub start: f64,
    pub end: f64,
}

/// Rows of one value sent from one side to the other.
#[derive(Debug, Clone)]
pub(super) struct Transfer {
    /// Robot to server.
    pub up: bool,
    pub node: NodeId,
    pub rows: Rows,
    pub bytes: usize,
    /// The chunk that computes the rows (`None`: a graph input, ready at time 0).
    pub producer: Option<u32>,
    /// Chunks that read it.
    pub waiters: Vec<u32>,
    pub start: f64,
    pub end: f64,
    pub arrive: f64,
    /// When the robot has coded it (a coded frame's band; 0 otherwise): it cannot leave before.
    pub release: f64,
    /// Seconds the server decodes it for, after its arrival (a coded frame's band).
    pub decode_s: f64,
}

/// The task graph of a plan.
#[derive(Debug, Default)]
pub(super) struct Tasks {
    pub tasks: Vec<Task>,
    pub transfers: Vec<Transfer>,
    /// Per side, its chunks in op-major order (ops in topological order, chunks top to bottom):
    /// the execution order under [`super::ChunkOrder::OpMajor`].
    pub seq: [Vec<u32>; 2],
    /// Robot chunks and transfers the outputs are assembled from.
    pub final_tasks: Vec<u32>,
    /// Transfers the outputs are assembled from.
    pub final_transfers: Vec<u32>,
    /// When the robot is done coding the frame and starts computing (0 for raw frames).
    pub robot_free_at: f64,
}

/// `need` minus `own` minus every received range.
fn missing(need: &Rows, own: &Rows, received: &[(Rows, u32)]) -> Vec<Rows> {
    let mut out = vec![need.clone()];
    for cut in std::iter::once(own).chain(received.iter().map(|(r, _)| r)) {
        if cut.is_empty() {
            continue;
        }
        let mut next = Vec::with_capacity(out.len() + 1);
        for r in out {
            if r.end <= cut.start || cut.end <= r.start {
                next.push(r);
                continue;
            }
            if r.start < cut.start {
                next.push(r.start..cut.start);
            }
            if cut.end < r.end {
                next.push(cut.end..r.end);
            }
        }
        out = next;
    }
    out.retain(|r| !r.is_empty());
    out
}

/// A coded frame's pieces and cuts moved onto the codec's unit grid
/// ([`crate::frame::FrameCodec::unit_rows`]): each piece widened to whole units, less what the
/// receiver already holds (itself on the grid), and
/// each cut moved down to the unit that holds it. The robot holds the whole frame, so it can send
/// the extra rows; the receiver's chunks wait for the units that hold what they read.
pub(super) fn align_frame(
    codec: crate::frame::FrameCodec,
    rows: usize,
    pieces: Vec<Rows>,
    cuts: &[usize],
    held: &[(Rows, u32)],
) -> (Vec<Rows>, Vec<usize>) {
    let unit = codec.unit_rows().max(1);
    if unit == 1 {
        return (pieces, cuts.to_vec());
    }
    let mut wide: Vec<Rows> = pieces.iter().map(|p| (p.start / unit * unit)..(p.end.div_ceil(unit) * unit).min(rows)).collect();
    wide.sort_by_key(|r| r.start);
    let mut merged: Vec<Rows> = Vec::new();
    for r in wide {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    let out = merged.iter().flat_map(|r| missing(r, &(0..0), held)).collect();
    let mut grid: Vec<usize> = cuts.iter().map(|&c| (c.div_ceil(unit) * unit).min(rows)).collect();
    grid.dedup();
    (out, grid)
}

fn overlaps(a: &Rows, b: &Rows) -> bool {
    a.start < b.end && b.start < a.end
}

struct Builder<'s, 'g> {
    sim: &'s Simulator<'g>,
    plan: &'s Plan,
    t: Tasks,
    /// Per node and side: first chunk task and count.
    chunks: Vec<[(u32, u32); 2]>,
    /// Per node and side: rows received, and by which transfer.
    received: Vec<[Vec<(Rows, u32)>; 2]>,
    /// Per side, each node's chunks ([`super::chunk_bounds`]).
    bounds: [Vec<Vec<Rows>>; 2],
}

impl Builder<'_, '_> {
    /// Creates the transfers that bring `pieces` of value `inp` to `side`, cut at `cuts` and at
    /// the producer's chunk boundaries.
    fn send(&mut self, inp: NodeId, side: Side, pieces: Vec<Rows>, cuts: &[usize], reader: NodeId) -> Result<()> {
        let aligned;
        let (pieces, cuts) = if self.sim.holder[inp] == Holder::Input && self.sim.config.frame.codec.is_coded() {
            let held = &self.received[inp][side_ix(side)];
            let (p, c) = align_frame(self.sim.config.frame.codec, self.sim.graph.node_info(inp).rows(), pieces, cuts, held);
            aligned = c;
            (p, &aligned[..])
        } else {
            (pieces, cuts)
        };
        let from = side.other();
        let (first, count) = self.chunks[inp][side_ix(from)];
        let own = self.sim.own(self.plan, inp, from);
        for piece in pieces {
            if piece.start < own.start || own.end < piece.end {
                let g = self.sim.graph;
                return Err(Error::Plan(format!(
                    "neither side holds rows {piece:?} of '{}' needed by '{}' on the {}",
                    g.node_name(inp),
                    g.node_name(reader),
                    side.name()
                )));
            }
            let mut bounds: Vec<usize> = cuts.iter().copied().filter(|&c| piece.start < c && c < piece.end).collect();
            for ti in first..first + count {
                let e = self.t.tasks[ti as usize].rows.end;
                if piece.start < e && e < piece.end {
                    bounds.push(e);
                }
            }
            bounds.push(piece.end);
            bounds.sort_unstable();
            bounds.dedup();
            let mut s = piece.start;
            for e in bounds {
                let sub = s..e;
                s = e;
                let producer = (first..first + count).find(|&ti| {
                    let r = &self.t.tasks[ti as usize].rows;
                    r.start <= sub.start && sub.end <= r.end
                });
                if self.sim.holder[inp] == Holder::Op && producer.is_none() {
                    return Err(Error::Plan(format!("rows {sub:?} of '{}' have no producing chunk", self.sim.graph.node_name(inp))));
                }
                let id = self.t.transfers.len() as u32;
                if let Some(p) = producer {
                    self.t.tasks[p as usize].enables.push(id);
                }
                self.t.transfers.push(Transfer {
                    up: from == Side::Robot,
                    node: inp,
                    bytes: self.sim.row_bytes[inp] * sub.len() + self.sim.band_header(inp),
                    rows: sub.clone(),
                    producer,
                    waiters: Vec::new(),
                    start: 0.0,
                    end: 0.0,
                    arrive: 0.0,
                    release: 0.0,
                    decode_s: 0.0,
                });
                self.received[inp][side_ix(side)].push((sub, id));
            }
        }
        Ok(())
    }

    /// Adds `side`'s chunks of op `id` and the transfers they need.
    fn op_side(&mut self, id: NodeId, side: Side) -> Result<()> {
        let sim = self.sim;
        let rows = self.plan.rows(sim.graph, id, side);
        if rows.is_empty() {
            return Ok(());
        }
        let pieces = std::mem::take(&mut self.bounds[side_ix(side)][id]);
        let first = self.t.tasks.len() as u32;
        let total = sim.graph.node_info(id).rows().max(1) as f64;
        for p in &pieces {
            let ix = self.t.tasks.len() as u32;
            self.t.tasks.push(Task {
                side,
                node: id,
                rows: p.clone(),
                dur: sim.op_time(side, id, p.len()),
                pending: 0,
                enables: Vec::new(),
                succ: Vec::new(),
                key: p.start as f64 / total,
                start: 0.0,
                end: 0.0,
            });
            self.t.seq[side_ix(side)].push(ix);
        }
        self.chunks[id][side_ix(side)] = (first, pieces.len() as u32);
        let s = side_ix(side);
        for (k, &inp) in sim.graph.node_inputs(id).iter().enumerate() {
            if sim.holder[inp] == Holder::Constant {
                continue;
            }
            let need_all = sim.need(id, k, &rows);
            let needs: Vec<Rows> =
                if pieces.len() == 1 { vec![need_all.clone()] } else { pieces.iter().map(|p| sim.need(id, k, p)).collect() };
            let own = sim.own(self.plan, inp, side);
            let miss = missing(&need_all, &own, &self.received[inp][s]);
            if !miss.is_empty() {
                let cuts: Vec<usize> = needs[..needs.len() - 1].iter().map(|r| r.end).collect();
                self.send(inp, side, miss, &cuts, id)?;
            }
            let (own_first, own_count) = self.chunks[inp][s];
            for (c, need) in needs.iter().enumerate() {
                let task = first + c as u32;
                for ti in own_first..own_first + own_count {
                    if overlaps(&self.t.tasks[ti as usize].rows, need) {
                        self.t.tasks[ti as usize].succ.push(task);
                        self.t.tasks[task as usize].pending += 1;
                    }
                }
                for (r, tr) in &self.received[inp][s] {
                    if overlaps(r, need) {
                        self.t.transfers[*tr as usize].waiters.push(task);
                        self.t.tasks[task as usize].pending += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Brings every output whole to the robot.
    fn outputs(&mut self) -> Result<()> {
        let sim = self.sim;
        let r = side_ix(Side::Robot);
        for &o in sim.graph.outputs() {
            if sim.holder[o] != Holder::Op {
                continue;
            }
            let all = 0..sim.graph.node_info(o).rows();
            let own = sim.own(self.plan, o, Side::Robot);
            let miss = missing(&all, &own, &self.received[o][r]);
            if !miss.is_empty() {
                self.send(o, Side::Robot, miss, &[], o)?;
            }
            let (first, count) = self.chunks[o][r];
            self.t.final_tasks.extend(first..first + count);
            self.t.final_transfers.extend(self.received[o][r].iter().map(|(_, tr)| *tr));
        }
        Ok(())
    }
}

/// The task graph of `plan` (already validated) on `sim`'s graph.
pub(super) fn derive(sim: &Simulator<'_>, plan: &Plan) -> Result<Tasks> {
    let n = sim.graph.node_count();
    let mut b = Builder {
        sim,
        plan,
        t: Tasks::default(),
        chunks: vec![[(0, 0); 2]; n],
        received: (0..n).map(|_| [Vec::new(), Vec::new()]).collect(),
        bounds: [sim.chunk_bounds(plan, Side::Robot), sim.chunk_bounds(plan, Side::Server)],
    };
    for id in 0..n {
        if sim.holder[id] != Holder::Op {
            continue;
        }
        b.op_side(id, Side::Robot)?;
        b.op_side(id, Side::Server)?;
    }
    b.outputs()?;
    price_frame(sim, &mut b.t);
    Ok(b.t)
}

/// Times a coded frame: the robot codes each input band in turn before it leaves (for JPEG it
/// decodes what it encoded, and codes the rows it keeps too, so that it computes on the decoded
/// frame; with the camera's JPEG passed through it decodes the frame when it computes any of
/// it), then computes; the server decodes each band as it arrives.
fn price_frame(sim: &Simulator<'_>, t: &mut Tasks) {
    use crate::frame::FrameCodec;
    let f = sim.config.frame;
    if !f.codec.is_coded() {
        return;
    }
    let mut clock = 0.0;
    let mut inputs = vec![0usize; sim.graph.node_count()];
    let mut cut = vec![false; sim.graph.node_count()];
    for tr in t.transfers.iter_mut().filter(|tr| tr.producer.is_none() && tr.up && sim.holder[tr.node] == Holder::Input) {
        let rows = tr.rows.len();
        inputs[tr.node] += rows;
        let frame_rows = sim.graph.node_info(tr.node).rows();
        match f.codec {
            // The camera's JPEG goes as it is when one band holds the frame; cut, it is first
            // rewritten with restart markers (once a frame: `robot_encode_s_per_row`), and the
            // server decodes each band.
            FrameCodec::Passthrough => {
                if tr.rows != (0..frame_rows) && !cut[tr.node] {
                    cut[tr.node] = true;
                    clock += f.robot_encode_s_per_row * frame_rows as f64;
                }
                tr.decode_s = f.server_decode_s_per_row * rows as f64;
            }
            FrameCodec::Jpeg { .. } => {
                clock += (f.robot_encode_s_per_row + f.robot_decode_s_per_row) * rows as f64;
                tr.decode_s = f.server_decode_s_per_row * rows as f64;
            }
            _ => {
                clock += f.robot_encode_s_per_row * rows as f64;
                tr.decode_s = f.server_decode_s_per_row * rows as f64;
            }
        }
        tr.release = clock;
    }
    let robot_computes = t.tasks.iter().any(|k| k.side == Side::Robot);
    for (id, &sent) in inputs.iter().enumerate() {
        let frame_rows = sim.graph.node_info(id).rows();
        match f.codec {
            FrameCodec::Jpeg { .. } if sent > 0 => {
                clock += (f.robot_encode_s_per_row + f.robot_decode_s_per_row) * frame_rows.saturating_sub(sent) as f64
            }
            FrameCodec::Passthrough if robot_computes && sim.holder[id] == Holder::Input => {
                clock += f.robot_decode_s_per_row * frame_rows as f64
            }
            _ => {}
        }
    }
    t.robot_free_at = clock;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_subtracts_own_and_received() {
        assert_eq!(missing(&(0..10), &(2..4), &[(6..7, 0)]), vec![0..2, 4..6, 7..10]);
        assert_eq!(missing(&(0..10), &(0..10), &[]), Vec::<Rows>::new());
        assert_eq!(missing(&(3..5), &(0..0), &[]), vec![3..5]);
    }
}
