//! Plan edits the planner tries: whole-op sides, chunk counts, and self-sufficient row bands
//! (bands whose footprints the side already holds, so that no halo has to cross the link).

use crate::plan::{Plan, Side};
use crate::rows::{Footprint, Rows, effective_units, unit_rows};
use crate::structure::NodeId;
use crate::structure::Structure;

/// Effective units of node `id` under `plan`.
pub(super) fn units_of(g: &dyn Structure, plan: &Plan, id: NodeId) -> usize {
    effective_units(g.node_info(id).rows(), plan.units)
}

/// The whole op on the server, in `k` chunks.
pub(super) fn set_server(plan: &mut Plan, id: NodeId, k: usize) {
    let s = &mut plan.splits[id];
    (s.robot_end, s.server_start, s.robot_chunks, s.server_chunks) = (0, 0, 1, k.max(1));
}

/// The whole op on the robot, in `k` chunks.
pub(super) fn set_robot(g: &dyn Structure, plan: &mut Plan, id: NodeId, k: usize) {
    let u = units_of(g, plan, id);
    let s = &mut plan.splits[id];
    (s.robot_end, s.server_start, s.robot_chunks, s.server_chunks) = (u, u, k.max(1), 1);
}

/// Rows of input `k` of `id` that output rows `rows` read (as the simulator prices them).
fn need(g: &dyn Structure, id: NodeId, k: usize, rows: &Rows) -> Rows {
    let input = g.node_info(g.node_inputs(id)[k]);
    match (input.row_axis, g.footprint(id, k, rows)) {
        (Some(_), Footprint::Rows(r)) => r,
        _ => 0..input.rows(),
    }
}

fn within(inner: &Rows, outer: &Rows) -> bool {
    inner.is_empty() || (outer.start <= inner.start && inner.end <= outer.end)
}

/// Rows of value `v` that `side` holds without any transfer (graph inputs count as held by
/// both sides: the server's are uploaded from time 0 anyway).
fn held(g: &dyn Structure, plan: &Plan, v: NodeId, side: Side) -> Rows {
    if g.node_is_op(v) { plan.rows(g, v, side) } else { 0..g.node_info(v).rows() }
}

fn reads_held(g: &dyn Structure, plan: &Plan, id: NodeId, side: Side, rows: &Rows) -> bool {
    g.node_inputs(id).iter().enumerate().all(|(k, &v)| within(&need(g, id, k, rows), &held(g, plan, v, side)))
}

/// The most robot units of `id` (at most `cap`) that read only rows the robot holds.
pub(super) fn robot_max(g: &dyn Structure, plan: &Plan, id: NodeId, cap: usize) -> usize {
    let total = g.node_info(id).rows();
    let u = units_of(g, plan, id);
    (0..=cap.min(u)).rev().find(|&m| reads_held(g, plan, id, Side::Robot, &unit_rows(total, u, 0..m))).unwrap_or(0)
}

/// Gives the robot the top band of `id`: `target` units or fewer, as many as it can compute
/// from rows it holds, and the server the rest (`server_start = robot_end`; see
/// [`replicate_back`] for overlaps). Global ops, and ops whose robot band would be empty, go
/// to the server whole (a global op the robot can compute whole goes to the robot).
pub(super) fn band(g: &dyn Structure, plan: &mut Plan, id: NodeId, target: usize) {
    let k = plan.splits[id].server_chunks;
    if !g.node_locality(id).is_local() {
        let u = units_of(g, plan, id);
        if target >= u && robot_max(g, plan, id, u) == u {
            set_robot(g, plan, id, 1);
        } else {
            set_server(plan, id, k);
        }
        return;
    }
    let m = robot_max(g, plan, id, target);
    if m == 0 {
        set_server(plan, id, k);
        return;
    }
    let s = &mut plan.splits[id];
    (s.robot_end, s.server_start) = (m, m);
}

/// Walks `ids` (ascending) backwards and lowers each op's server start until the server
/// computes every row its consumers' server bands read, so that the server never waits for
/// a halo from the (slower) robot: the overlap is computed twice instead of sent.
pub(super) fn replicate_back(g: &dyn Structure, plan: &mut Plan, ids: &[NodeId], consumers: &[Vec<NodeId>]) {
    for &id in ids.iter().rev() {
        if !g.node_locality(id).is_local() || plan.splits[id].robot_end == 0 {
            continue;
        }
        let total = g.node_info(id).rows();
        let u = units_of(g, plan, id);
        let mut first = total;
        for &c in &consumers[id] {
            let rows = plan.rows(g, c, Side::Server);
            if rows.is_empty() {
                continue;
            }
            for (k, &v) in g.node_inputs(c).iter().enumerate() {
                if v == id {
                    let n = need(g, c, k, &rows);
                    if !n.is_empty() {
                        first = first.min(n.start);
                    }
                }
            }
        }
        let unit = (0..=u).rev().find(|&i| crate::rows::unit_start(total, u, i) <= first).unwrap_or(0);
        let s = &mut plan.splits[id];
        s.server_start = s.server_start.min(unit);
    }
}

/// Chunks every op of `ids` on each side that computes part of it so that a chunk covers about
/// `rows0 / k0` rows of the frame at every depth (`ceil(k0 * rows / rows0)` chunks), capped so
/// that the side's per-kernel overhead stays within `frac` of its compute time for the op
/// (`time(rows)` is the side's predicted seconds for `rows` rows in one kernel).
pub(super) fn graded_chunks(
    g: &dyn Structure,
    plan: &mut Plan,
    ids: &[NodeId],
    k0: usize,
    frac: f64,
    time: impl Fn(Side, NodeId, usize) -> f64,
) {
    let rows0 = ids.first().map_or(1, |&i| g.node_info(i).rows().max(1));
    for &id in ids {
        for side in [Side::Robot, Side::Server] {
            let n = plan.rows(g, id, side).len();
            if n == 0 {
                continue;
            }
            let a = time(side, id, 0);
            let work = time(side, id, n) - a;
            let cap = if a > 0.0 { ((frac * work / a).floor() as usize).max(1) } else { n };
            let k = (k0 * g.node_info(id).rows()).div_ceil(rows0).clamp(1, cap.min(n));
            match side {
                Side::Robot => plan.splits[id].robot_chunks = k,
                Side::Server => plan.splits[id].server_chunks = k,
            }
        }
    }
}

/// Moves the robot's end (`robot = true`) or the server's start by `delta` units, keeping
/// `server_start <= robot_end`; a global op switches side instead.
pub(super) fn shift(g: &dyn Structure, plan: &mut Plan, id: NodeId, robot: bool, delta: isize) {
    let u = units_of(g, plan, id);
    if !g.node_locality(id).is_local() {
        let k = plan.splits[id].server_chunks;
        if plan.splits[id].robot_end == u {
            set_server(plan, id, k)
        } else {
            set_robot(g, plan, id, 1)
        }
        return;
    }
    let s = &mut plan.splits[id];
    let moved = |v: usize| (v as isize + delta).clamp(0, u as isize) as usize;
    if robot {
        s.robot_end = moved(s.robot_end);
        s.server_start = s.server_start.min(s.robot_end);
    } else {
        s.server_start = moved(s.server_start);
        s.robot_end = s.robot_end.max(s.server_start);
    }
}

/// Copies the split of `from` onto `to`, scaling units when their counts differ.
pub(super) fn copy_split(g: &dyn Structure, plan: &mut Plan, from: NodeId, to: NodeId) {
    let (uf, ut) = (units_of(g, plan, from), units_of(g, plan, to));
    let s = plan.splits[from];
    if !g.node_locality(to).is_local() {
        if s.robot_end == uf && s.server_start == uf {
            set_robot(g, plan, to, 1)
        } else {
            set_server(plan, to, s.server_chunks)
        }
        return;
    }
    let scale = |v: usize| (v * ut).div_ceil(uf.max(1)).min(ut);
    let (m, r) = (scale(s.robot_end), scale(s.server_start));
    plan.splits[to] = crate::plan::NodeSplit { robot_end: m, server_start: r.min(m), ..s };
}
