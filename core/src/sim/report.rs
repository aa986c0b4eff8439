//! What a simulation reports: timeline, bytes, resource use, overlap and modelled energy.

use super::Simulator;
use super::engine::Run;
use crate::rows::Rows;
use crate::structure::NodeId;

/// The four simulated resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// The robot's compute.
    RobotCompute,
    /// The server's compute.
    ServerCompute,
    /// Robot to server.
    Uplink,
    /// Server to robot.
    Downlink,
}

/// What a timeline entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// A chunk of an op computed.
    Compute,
    /// Rows of a value sent.
    Transfer,
}

/// One entry of a resource's timeline.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Span {
    /// The resource it occupies.
    pub resource: Resource,
    /// Compute or transfer.
    pub kind: SpanKind,
    /// The op computed, or whose value is sent.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// Output rows computed, or rows sent.
    pub rows: Rows,
    /// Seconds from the start of the inference.
    pub start: f64,
    /// When the resource is free again.
    pub end: f64,
    /// Transfers: when the rows arrive (end + latency); compute: equals `end`.
    pub arrive: f64,
    /// Bytes sent (0 for compute).
    pub bytes: usize,
}

/// Busy and idle seconds of one resource over `[0, makespan]`.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct ResourceUse {
    /// Seconds occupied.
    pub busy_s: f64,
    /// `makespan - busy`, at least 0.
    pub idle_s: f64,
}

/// The robot's energy from the power model over `[0, makespan]`. Always modelled, never
/// measured.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Energy {
    /// Joules.
    pub joules: f64,
    /// Seconds the robot computes.
    pub computing_s: f64,
    /// Seconds a link is busy while the robot does not compute.
    pub transmitting_s: f64,
    /// The rest.
    pub idle_s: f64,
    /// Always `"modelled"`.
    pub label: &'static str,
}

/// The short result a planner needs.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Cost {
    /// Seconds until the outputs are whole on the robot.
    pub makespan_s: f64,
    /// Modelled robot joules over the makespan.
    pub energy_j: f64,
    /// Bytes robot to server.
    pub bytes_up: usize,
    /// Bytes server to robot.
    pub bytes_down: usize,
    /// The most bytes of any one value sent in one direction (all its pieces together), graph
    /// outputs coming down excepted: what the planner's "never send a tensor larger than the raw
    /// input" rule checks. Outputs are exempt because every plan in which the server computes
    /// output rows must send them down, server-only included; counting them pruned every such
    /// plan of a model whose raw heads outweigh its input (yolo_det's float heads against its
    /// byte frame), leaving LOSS no better than server-only.
    pub max_value_bytes: usize,
}

/// The full result of a simulation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimReport {
    /// Seconds until the outputs are whole on the robot.
    pub makespan_s: f64,
    /// Every compute chunk and transfer, ordered by resource then start.
    pub timeline: Vec<Span>,
    /// Bytes robot to server.
    pub bytes_up: usize,
    /// Bytes server to robot.
    pub bytes_down: usize,
    /// Messages robot to server.
    pub messages_up: usize,
    /// Messages server to robot.
    pub messages_down: usize,
    /// Robot compute use.
    pub robot_compute: ResourceUse,
    /// Server compute use.
    pub server_compute: ResourceUse,
    /// Uplink use.
    pub uplink: ResourceUse,
    /// Downlink use.
    pub downlink: ResourceUse,
    /// Fraction of link-busy time during which some compute (either side) runs; 0 without
    /// transfers.
    pub overlap_ratio: f64,
    /// Modelled robot energy.
    pub energy: Energy,
}

/// Total length of the union of intervals (sorted in place).
fn union_len(iv: &mut [(f64, f64)]) -> f64 {
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for &(s, e) in iv.iter() {
        if e <= s {
            continue;
        }
        cur = match cur {
            Some((cs, ce)) if s <= ce => Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                Some((s, e))
            }
            None => Some((s, e)),
        };
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total
}

struct Intervals {
    robot: Vec<(f64, f64)>,
    server: Vec<(f64, f64)>,
    up: Vec<(f64, f64)>,
    down: Vec<(f64, f64)>,
}

fn intervals(run: &Run) -> Intervals {
    let mut iv = Intervals { robot: vec![], server: vec![], up: vec![], down: vec![] };
    for t in &run.t.tasks {
        match t.side {
            crate::plan::Side::Robot => iv.robot.push((t.start, t.end)),
            crate::plan::Side::Server => iv.server.push((t.start, t.end)),
        }
    }
    for t in &run.t.transfers {
        if t.up { iv.up.push((t.start, t.end)) } else { iv.down.push((t.start, t.end)) }
    }
    iv
}

fn clip(v: &[(f64, f64)], horizon: f64) -> Vec<(f64, f64)> {
    v.iter().map(|&(s, e)| (s.min(horizon), e.min(horizon))).collect()
}

fn energy(sim: &Simulator<'_>, iv: &Intervals, makespan: f64) -> Energy {
    let p = sim.config.power;
    let mut c = clip(&iv.robot, makespan);
    let computing = union_len(&mut c);
    let mut all = c;
    all.extend(clip(&iv.up, makespan));
    all.extend(clip(&iv.down, makespan));
    let active = union_len(&mut all);
    let transmitting = (active - computing).max(0.0);
    let idle = (makespan - active).max(0.0);
    Energy {
        joules: p.computing_w * computing + p.transmitting_w * transmitting + p.idle_w * idle,
        computing_s: computing,
        transmitting_s: transmitting,
        idle_s: idle,
        label: "modelled",
    }
}

/// Makespan, energy and bytes.
pub(super) fn cost(sim: &Simulator<'_>, run: &Run) -> Cost {
    let iv = intervals(run);
    let (mut up, mut down) = (0, 0);
    let mut per_value = vec![0usize; 2 * sim.graph.node_count()];
    for t in &run.t.transfers {
        if t.up {
            up += t.bytes
        } else {
            down += t.bytes
        }
        // A graph output the server computed must come down whatever the plan: not counted.
        if t.up || !sim.graph.outputs().contains(&t.node) {
            per_value[2 * t.node + usize::from(t.up)] += t.bytes;
        }
    }
    let max_value_bytes = per_value.iter().copied().max().unwrap_or(0);
    Cost { makespan_s: run.makespan, energy_j: energy(sim, &iv, run.makespan).joules, bytes_up: up, bytes_down: down, max_value_bytes }
}

fn usage(v: &[(f64, f64)], makespan: f64) -> ResourceUse {
    let busy: f64 = v.iter().map(|(s, e)| e - s).sum();
    ResourceUse { busy_s: busy, idle_s: (makespan - busy).max(0.0) }
}

/// The full report.
pub(super) fn full(sim: &Simulator<'_>, run: &Run) -> SimReport {
    let g = sim.graph;
    let iv = intervals(run);
    let ms = run.makespan;
    let mut timeline = Vec::with_capacity(run.t.tasks.len() + run.t.transfers.len());
    for t in &run.t.tasks {
        let resource = match t.side {
            crate::plan::Side::Robot => Resource::RobotCompute,
            crate::plan::Side::Server => Resource::ServerCompute,
        };
        timeline.push(Span {
            resource,
            kind: SpanKind::Compute,
            node: t.node,
            name: g.node_name(t.node).to_string(),
            rows: t.rows.clone(),
            start: t.start,
            end: t.end,
            arrive: t.end,
            bytes: 0,
        });
    }
    let (mut bytes_up, mut bytes_down, mut messages_up, mut messages_down) = (0, 0, 0, 0);
    for t in &run.t.transfers {
        if t.up {
            bytes_up += t.bytes;
            messages_up += 1;
        } else {
            bytes_down += t.bytes;
            messages_down += 1;
        }
        timeline.push(Span {
            resource: if t.up { Resource::Uplink } else { Resource::Downlink },
            kind: SpanKind::Transfer,
            node: t.node,
            name: g.node_name(t.node).to_string(),
            rows: t.rows.clone(),
            start: t.start,
            end: t.end,
            arrive: t.arrive,
            bytes: t.bytes,
        });
    }
    timeline.sort_by(|a, b| (a.resource as u8).cmp(&(b.resource as u8)).then(a.start.total_cmp(&b.start)));
    // Overlap: per link, the part of its busy time during which either side computes.
    let mut comp: Vec<(f64, f64)> = iv.robot.iter().chain(&iv.server).copied().collect();
    let comp_len = union_len(&mut comp);
    let mut overlapped = 0.0;
    let mut link_total = 0.0;
    for l in [&iv.up, &iv.down] {
        let mut a = l.clone();
        let len = union_len(&mut a);
        let mut both = comp.clone();
        both.extend(l.iter().copied());
        overlapped += len + comp_len - union_len(&mut both);
        link_total += len;
    }
    SimReport {
        makespan_s: ms,
        timeline,
        bytes_up,
        bytes_down,
        messages_up,
        messages_down,
        robot_compute: usage(&iv.robot, ms),
        server_compute: usage(&iv.server, ms),
        uplink: usage(&iv.up, ms),
        downlink: usage(&iv.down, ms),
        overlap_ratio: if link_total > 0.0 { (overlapped / link_total).clamp(0.0, 1.0) } else { 0.0 },
        energy: energy(sim, &iv, ms),
    }
}
