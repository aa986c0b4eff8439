//! Plans (DESIGN.md section 4): per op, the robot's unit range `[0, m)` and the server's
//! `[r, U)` with `r <= m`, and how many chunks each side computes its range in.

use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};
use crate::rng::Rng;
use crate::rows::{Rows, effective_units, unit_rows};
use sha2::{Digest, Sha256};

/// The two sides of a split inference.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The robot: holds the input, must end with the output, computes the top rows.
    Robot,
    /// The edge server: computes the bottom rows.
    Server,
}

impl Side {
    /// The other side.
    pub fn other(self) -> Side {
        match self {
            Side::Robot => Side::Server,
            Side::Server => Side::Robot,
        }
    }
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Side::Robot => "robot",
            Side::Server => "server",
        }
    }
}

/// One op's split, in units of its output rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeSplit {
    /// The robot computes units `[0, robot_end)`.
    pub robot_end: usize,
    /// The server computes units `[server_start, U)`.
    pub server_start: usize,
    /// Chunks the robot computes its range in (>= 1).
    pub robot_chunks: usize,
    /// Chunks the server computes its range in (>= 1).
    pub server_chunks: usize,
}

/// A band layout for a whole graph: one [`NodeSplit`] per node (ignored for inputs and
/// constants).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// Format version.
    pub version: u32,
    /// Units per op (the effective count of an op is capped by its rows).
    pub units: usize,
    /// Per node, indexed by [`NodeId`].
    pub splits: Vec<NodeSplit>,
    /// Under [`crate::sim::ChunkBounds::Aligned`], each op computed in fewer chunks than one
    /// of its producers puts its last cut on that producer's last, so that its last chunk
    /// holds only the rows that read the producer's last chunk, instead of spreading its cuts
    /// evenly over the producer's. The first shortens the server's work after the frame's
    /// last rows arrive (detectors' necks); the second keeps a busy server fed while they are
    /// in flight (classifiers on a slow server). The planner picks per plan. Plans written
    /// before it have it off, and it is left out of their JSON and hash when off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_cut_aligned: bool,
}

/// Current plan format version.
pub const PLAN_VERSION: u32 = 1;

impl Plan {
    fn uniform(graph: &Graph, units: usize, side: Side) -> Plan {
        let splits = graph
            .nodes
            .iter()
            .map(|n| {
                let u = effective_units(n.info.rows(), units);
                let (robot_end, server_start) = match side {
                    Side::Robot => (u, u),
                    Side::Server => (0, 0),
                };
                NodeSplit { robot_end, server_start, robot_chunks: 1, server_chunks: 1 }
            })
            .collect();
        Plan { version: PLAN_VERSION, units, splits, last_cut_aligned: false }
    }

    /// Everything on the robot, one kernel per op.
    pub fn robot_only(graph: &Graph, units: usize) -> Plan {
        Plan::uniform(graph, units, Side::Robot)
    }

    /// Everything on the server (the robot only sends the input and receives the outputs).
    pub fn server_only(graph: &Graph, units: usize) -> Plan {
        Plan::uniform(graph, units, Side::Server)
    }

    /// The top half of every local op on the robot, the bottom half on the server, global ops
    /// on the server: the plain two-way split.
    pub fn even(graph: &Graph, units: usize) -> Plan {
        let mut plan = Plan::server_only(graph, units);
        for (id, s) in plan.splits.iter_mut().enumerate() {
            if graph.locality(id).is_local() {
                let u = effective_units(graph.nodes[id].info.rows(), units);
                s.robot_end = u / 2;
                s.server_start = u / 2;
            }
        }
        plan
    }

    /// A random valid layout: uneven bands, overlaps (replication), 1-3 chunks per side, global
    /// ops on a random side, either spread of aligned chunk bounds. Deterministic for a seed.
    pub fn random(graph: &Graph, units: usize, seed: u64) -> Plan {
        let mut rng = Rng::new(seed);
        let splits = (0..graph.nodes.len())
            .map(|id| {
                let u = effective_units(graph.nodes[id].info.rows(), units);
                let (robot_end, server_start) = if graph.locality(id).is_local() {
                    let m = rng.below(u + 1);
                    // Favour some overlap, sometimes none.
                    let r = if rng.below(3) == 0 { m } else { rng.below(m + 1) };
                    (m, r)
                } else if rng.below(2) == 0 {
                    (u, u)
                } else {
                    (0, 0)
                };
                NodeSplit { robot_end, server_start, robot_chunks: 1 + rng.below(3), server_chunks: 1 + rng.below(3) }
            })
            .collect();
        Plan { version: PLAN_VERSION, units, splits, last_cut_aligned: rng.below(2) == 0 }
    }

    /// The output rows `side` computes for node `id`.
    pub fn rows(&self, graph: &Graph, id: NodeId, side: Side) -> Rows {
        let total = graph.nodes[id].info.rows();
        let u = effective_units(total, self.units);
        let s = &self.splits[id];
        match side {
            Side::Robot => unit_rows(total, u, 0..s.robot_end),
            Side::Server => unit_rows(total, u, s.server_start..u),
        }
    }

    /// Chunks `side` computes node `id` in.
    pub fn chunks(&self, id: NodeId, side: Side) -> usize {
        match side {
            Side::Robot => self.splits[id].robot_chunks,
            Side::Server => self.splits[id].server_chunks,
        }
    }

    /// Checks that the plan fits `graph`: one split per node, `r <= m <= U`, global ops on
    /// exactly one side, chunks >= 1, and so every op's rows are covered.
    ///
    /// # Errors
    /// [`Error::Plan`] naming the first offending node.
    pub fn validate(&self, graph: &Graph) -> Result<()> {
        if self.version != PLAN_VERSION {
            return Err(Error::Plan(format!("plan version {} (this build reads {PLAN_VERSION})", self.version)));
        }
        if self.units == 0 {
            return Err(Error::Plan("units must be >= 1".into()));
        }
        if self.splits.len() != graph.nodes.len() {
            return Err(Error::Plan(format!("{} splits for a graph of {} nodes", self.splits.len(), graph.nodes.len())));
        }
        for (id, s) in self.splits.iter().enumerate() {
            if !graph.is_op(id) {
                continue;
            }
            let name = &graph.nodes[id].name;
            let u = effective_units(graph.nodes[id].info.rows(), self.units);
            if s.robot_end > u || s.server_start > u {
                return Err(Error::Plan(format!(
                    "node '{name}': units [0,{}) / [{},{u}) exceed its {u} units",
                    s.robot_end, s.server_start
                )));
            }
            if s.server_start > s.robot_end {
                return Err(Error::Plan(format!(
                    "node '{name}': robot [0,{}) and server [{},{u}) leave units uncovered",
                    s.robot_end, s.server_start
                )));
            }
            if s.robot_chunks == 0 || s.server_chunks == 0 {
                return Err(Error::Plan(format!("node '{name}': chunk counts must be >= 1")));
            }
            let one_side = (s.robot_end == u && s.server_start == u) || (s.robot_end == 0 && s.server_start == 0);
            if !graph.locality(id).is_local() && !one_side {
                return Err(Error::Plan(format!("node '{name}' is global and must run whole on one side")));
            }
        }
        Ok(())
    }

    /// Content hash (sha256, hex) of the plan.
    pub fn hash(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.version.to_le_bytes());
        h.update((self.units as u64).to_le_bytes());
        for s in &self.splits {
            for v in [s.robot_end, s.server_start, s.robot_chunks, s.server_chunks] {
                h.update((v as u64).to_le_bytes());
            }
        }
        if self.last_cut_aligned {
            h.update(b"last cut aligned");
        }
        hex::encode(h.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_from_before_last_cut_alignment_read_write_and_hash_as_they_did() {
        let old = format!(
            r#"{{"version":{PLAN_VERSION},"units":8,"splits":[{{"robot_end":2,"server_start":1,"robot_chunks":1,"server_chunks":4}}]}}"#
        );
        let p: Plan = serde_json::from_str(&old).expect("a plan without the flag");
        assert!(!p.last_cut_aligned);
        assert_eq!(serde_json::to_string(&p).expect("json"), old, "the flag off must not change the JSON");
        // sha256 of version (u32 LE), units and the four split fields (u64 LE): the hash before
        // the flag existed, which tables and the wire name plans by.
        assert_eq!(p.hash(), "1c301ae7fd250aeb12a50321edd3940c66588fb5f0790ddbaeb2b5c0413e9fe6");
        let q = Plan { last_cut_aligned: true, ..p.clone() };
        assert_ne!(q.hash(), p.hash(), "plans that cut differently must not share a hash");
        let back: Plan = serde_json::from_str(&serde_json::to_string(&q).expect("json")).expect("round trip");
        assert_eq!(back, q);
    }
}
