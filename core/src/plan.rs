//! Plans (DESIGN.md section 4): per op, the robot's unit range `[0, m)` and the server's
//! `[r, U)` with `r <= m`, and how many chunks each side computes its range in.

use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::rows::{Rows, effective_units, unit_rows};
use crate::structure::{NodeId, Structure};
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
    /// Under the simulator's `ChunkBounds::Aligned` (`lop::sim`), each op computed in fewer chunks than one
    /// of its producers puts its last cut on that producer's last, so that its last chunk
    /// holds only the rows that read the producer's last chunk, instead of spreading its cuts
    /// evenly over the producer's. The first shortens the server's work after the frame's
    /// last rows arrive (detectors' necks); the second keeps a busy server fed while they are
    /// in flight (classifiers on a slow server). The planner picks per plan. Plans written
    /// before it have it off, and it is left out of their JSON and hash when off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub last_cut_aligned: bool,
    /// How ops that cut their own rows size their chunks ([`Taper`]): evenly, or smaller at the
    /// top so the server starts on the frame's first rows sooner, or smaller at the bottom so
    /// less is left after its last rows arrive. Plans written before it are even, and it is
    /// left out of their JSON and hash when even.
    #[serde(default, skip_serializing_if = "Taper::is_even")]
    pub taper: Taper,
    /// Server chunks cut where the plan says rather than by a rule: for each op listed, the
    /// end row of each of its server chunks. The planner cuts each op where the rows it
    /// follows are released (an op's cuts on the rows its producers' cuts let it start), so
    /// that the server's kernels wait for the input rows that a min-max over release times
    /// wants, not for those a count and a spread give. Plans written before it have none, and
    /// it is left out of their JSON and hash when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_cuts: Vec<OpCuts>,
}

/// One op's server chunks, by their end rows ([`Plan::server_cuts`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct OpCuts {
    /// The op.
    pub node: NodeId,
    /// The end row of each chunk, increasing; the last is the end of the op's server rows.
    pub ends: Vec<usize>,
}

/// Chunk sizes that shrink toward an op's first or last rows: the first `head` chunks halve
/// toward the top (chunk 0 is `2^-head` of a full chunk, chunk 1 `2^-(head-1)`, ...), the last
/// `tail` toward the bottom, and the rest share what is left evenly. An op cut on its own rows
/// (see the simulator's `ChunkBounds`, `lop::sim`) cuts this way, and so do the input's messages, which follow
/// the first op's chunks: a small first message lets a busy server start sooner; a small last
/// one leaves less work for after the frame's last rows arrive, which is what a slow link
/// waits on. At most [`Taper::MAX`] halvings a side: a chunk of 1/16 is already a row or two
/// of a camera frame cut in 16.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Taper {
    /// Chunks at the top that halve toward it.
    pub head: u8,
    /// Chunks at the bottom that halve toward it.
    pub tail: u8,
}

impl Taper {
    /// The most halvings at either end.
    pub const MAX: u8 = 4;

    /// Every chunk the same size (the default).
    pub fn is_even(&self) -> bool {
        self.head == 0 && self.tail == 0
    }

    /// Cuts `rows` into `k` contiguous chunks sized as described on [`Taper`] (nearly equal
    /// when even, exactly as [`crate::rows::chunks`]); fewer where some would be empty.
    pub fn chunks(&self, rows: &Rows, k: usize) -> Vec<Rows> {
        if self.is_even() {
            return crate::rows::chunks(rows, k);
        }
        let n = rows.len();
        let k = k.clamp(1, n.max(1));
        let (head, tail) = (u32::from(self.head.min(Self::MAX)), u32::from(self.tail.min(Self::MAX)));
        // Integer weights, a full chunk weighing 2^(head + tail), so that every machine cuts
        // the same rows.
        let weight = |j: usize| -> u64 {
            let top = head.saturating_sub(j as u32);
            let bottom = tail.saturating_sub((k - 1 - j) as u32);
            1u64 << (head + tail - top - bottom)
        };
        let total: u64 = (0..k).map(weight).sum();
        let mut out = Vec::with_capacity(k);
        let (mut start, mut acc) = (rows.start, 0u64);
        for j in 0..k {
            acc += weight(j);
            let end = rows.start + (n as u64 * acc / total) as usize;
            if end > start {
                out.push(start..end);
                start = end;
            }
        }
        out
    }
}

/// Current plan format version.
pub const PLAN_VERSION: u32 = 1;

impl Plan {
    fn uniform(graph: &(impl Structure + ?Sized), units: usize, side: Side) -> Plan {
        let splits = (0..graph.node_count())
            .map(|id| {
                let u = effective_units(graph.node_info(id).rows(), units);
                let (robot_end, server_start) = match side {
                    Side::Robot => (u, u),
                    Side::Server => (0, 0),
                };
                NodeSplit { robot_end, server_start, robot_chunks: 1, server_chunks: 1 }
            })
            .collect();
        Plan { version: PLAN_VERSION, units, splits, last_cut_aligned: false, taper: Taper::default(), server_cuts: Vec::new() }
    }

    /// Everything on the robot, one kernel per op.
    pub fn robot_only(graph: &(impl Structure + ?Sized), units: usize) -> Plan {
        Plan::uniform(graph, units, Side::Robot)
    }

    /// Everything on the server (the robot only sends the input and receives the outputs).
    pub fn server_only(graph: &(impl Structure + ?Sized), units: usize) -> Plan {
        Plan::uniform(graph, units, Side::Server)
    }

    /// The top half of every local op on the robot, the bottom half on the server, global ops
    /// on the server: the plain two-way split.
    pub fn even(graph: &(impl Structure + ?Sized), units: usize) -> Plan {
        let mut plan = Plan::server_only(graph, units);
        for (id, s) in plan.splits.iter_mut().enumerate() {
            if graph.node_locality(id).is_local() {
                let u = effective_units(graph.node_info(id).rows(), units);
                s.robot_end = u / 2;
                s.server_start = u / 2;
            }
        }
        plan
    }

    /// A random valid layout: uneven bands, overlaps (replication), 1-3 chunks per side, global
    /// ops on a random side, either spread of aligned chunk bounds, a taper of up to two
    /// halvings at each end. Deterministic for a seed.
    pub fn random(graph: &(impl Structure + ?Sized), units: usize, seed: u64) -> Plan {
        let mut rng = Rng::new(seed);
        let splits = (0..graph.node_count())
            .map(|id| {
                let u = effective_units(graph.node_info(id).rows(), units);
                let (robot_end, server_start) = if graph.node_locality(id).is_local() {
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
        let last_cut_aligned = rng.below(2) == 0;
        let taper = Taper { head: rng.below(3) as u8, tail: rng.below(3) as u8 };
        Plan { version: PLAN_VERSION, units, splits, last_cut_aligned, taper, server_cuts: Vec::new() }
    }

    /// The output rows `side` computes for node `id`.
    pub fn rows(&self, graph: &(impl Structure + ?Sized), id: NodeId, side: Side) -> Rows {
        let total = graph.node_info(id).rows();
        let u = effective_units(total, self.units);
        let s = &self.splits[id];
        match side {
            Side::Robot => unit_rows(total, u, 0..s.robot_end),
            Side::Server => unit_rows(total, u, s.server_start..u),
        }
    }

    /// The explicit server chunk ends of node `id`, if the plan cuts it by hand
    /// ([`Plan::server_cuts`]).
    pub fn server_cuts_of(&self, id: NodeId) -> Option<&[usize]> {
        self.server_cuts.iter().find(|c| c.node == id).map(|c| &c.ends[..])
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
    pub fn validate(&self, graph: &(impl Structure + ?Sized)) -> Result<()> {
        if self.version != PLAN_VERSION {
            return Err(Error::Plan(format!("plan version {} (this build reads {PLAN_VERSION})", self.version)));
        }
        if self.units == 0 {
            return Err(Error::Plan("units must be >= 1".into()));
        }
        if self.taper.head > Taper::MAX || self.taper.tail > Taper::MAX {
            return Err(Error::Plan(format!(
                "taper head {} / tail {}: at most {} halvings at either end",
                self.taper.head,
                self.taper.tail,
                Taper::MAX
            )));
        }
        if self.splits.len() != graph.node_count() {
            return Err(Error::Plan(format!("{} splits for a graph of {} nodes", self.splits.len(), graph.node_count())));
        }
        for (id, s) in self.splits.iter().enumerate() {
            if !graph.node_is_op(id) {
                continue;
            }
            let name = graph.node_name(id);
            let u = effective_units(graph.node_info(id).rows(), self.units);
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
            if !graph.node_locality(id).is_local() && !one_side {
                return Err(Error::Plan(format!("node '{name}' is global and must run whole on one side")));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for c in &self.server_cuts {
            if c.node >= graph.node_count() || !graph.node_is_op(c.node) {
                return Err(Error::Plan(format!("server cuts for node {}, which is not an op of the graph", c.node)));
            }
            let name = graph.node_name(c.node);
            if !seen.insert(c.node) {
                return Err(Error::Plan(format!("node '{name}': server cuts given twice")));
            }
            let rows = self.rows(graph, c.node, Side::Server);
            if c.ends.len() != self.splits[c.node].server_chunks {
                return Err(Error::Plan(format!(
                    "node '{name}': {} server cut ends for {} server chunks",
                    c.ends.len(),
                    self.splits[c.node].server_chunks
                )));
            }
            let increasing = c.ends.iter().scan(rows.start, |prev, &e| {
                let ok = e > *prev;
                *prev = e;
                Some(ok)
            });
            if c.ends.last() != Some(&rows.end) || !increasing.into_iter().all(|ok| ok) {
                return Err(Error::Plan(format!(
                    "node '{name}': server cut ends {:?} must increase within rows {}..{} and end at {}",
                    c.ends, rows.start, rows.end, rows.end
                )));
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
        if !self.taper.is_even() {
            h.update(b"taper");
            h.update([self.taper.head, self.taper.tail]);
        }
        for c in &self.server_cuts {
            h.update(b"server cuts");
            h.update((c.node as u64).to_le_bytes());
            h.update((c.ends.len() as u64).to_le_bytes());
            for &e in &c.ends {
                h.update((e as u64).to_le_bytes());
            }
        }
        hex::encode(h.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structure::{Listed, ListedNode, NodeKind, OpClass};
    use crate::value::{DType, ValueInfo};

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
        let t = Plan { taper: Taper { head: 1, tail: 0 }, ..p.clone() };
        assert_ne!(t.hash(), p.hash(), "a taper cuts other chunks: another hash");
        assert_ne!(t.hash(), Plan { taper: Taper { head: 0, tail: 1 }, ..p.clone() }.hash());
        let back: Plan = serde_json::from_str(&serde_json::to_string(&t).expect("json")).expect("round trip");
        assert_eq!(back, t);
    }

    /// input `x` u8 [1, 1, 16, 4] -> norm `n` (element-wise, f32): the structure and both ids.
    fn norm_graph() -> (Listed, NodeId, NodeId) {
        let shape = vec![1, 1, 16, 4];
        let node = |name: &str, dtype, inputs, kind, class| ListedNode {
            name: name.into(),
            info: ValueInfo::new(shape.clone(), dtype),
            inputs,
            kind,
            class,
        };
        let nodes = vec![
            node("x", DType::U8, vec![], NodeKind::Input, OpClass::Source),
            node("norm", DType::F32, vec![0], NodeKind::Op, OpClass::ElementWise),
        ];
        (Listed { nodes, outputs: vec![1] }, 0, 1)
    }

    #[test]
    fn server_cuts_are_checked_and_hashed() {
        let (g, x, n) = norm_graph();
        let mut p = Plan::server_only(&g, 4);
        let plain = p.hash();
        p.splits[n].server_chunks = 3;
        p.server_cuts = vec![OpCuts { node: n, ends: vec![2, 9, 16] }];
        p.validate(&g).expect("cuts that increase and end at the op's last row");
        assert_ne!(p.hash(), plain, "cut by hand: another plan");
        let moved = Plan { server_cuts: vec![OpCuts { node: n, ends: vec![3, 9, 16] }], ..p.clone() };
        assert_ne!(moved.hash(), p.hash());
        let back: Plan = serde_json::from_str(&serde_json::to_string(&p).expect("json")).expect("round trip");
        assert_eq!(back, p);
        for (ends, chunks, what) in [
            (vec![2, 9], 2, "end at 16"),
            (vec![9, 2, 16], 3, "must increase"),
            (vec![0, 9, 16], 3, "must increase"),
            (vec![2, 9, 16], 4, "3 server cut ends for 4 server chunks"),
        ] {
            let mut q = p.clone();
            q.splits[n].server_chunks = chunks;
            q.server_cuts = vec![OpCuts { node: n, ends }];
            let e = q.validate(&g).expect_err(what).to_string();
            assert!(e.contains("'norm'") && e.contains(what), "{e}");
        }
        let mut q = p.clone();
        q.server_cuts.push(q.server_cuts[0].clone());
        assert!(q.validate(&g).expect_err("twice").to_string().contains("given twice"));
        q.server_cuts = vec![OpCuts { node: x, ends: vec![16] }];
        assert!(q.validate(&g).expect_err("the input").to_string().contains("not an op"));
    }

    #[test]
    fn a_taper_halves_the_end_chunks() {
        let even = Taper::default();
        for (rows, k) in [(0..16, 4), (3..13, 3), (0..2, 5), (4..4, 3)] {
            assert_eq!(even.chunks(&rows, k), crate::rows::chunks(&rows, k), "even is rows::chunks");
        }
        // Weights 1, 2, 4, 4 (of 11): the top chunk a quarter of a full one, the next a half.
        assert_eq!(Taper { head: 2, tail: 0 }.chunks(&(0..16), 4), vec![0..1, 1..4, 4..10, 10..16]);
        // Mirrored at the bottom, offset by the range's start.
        assert_eq!(Taper { head: 0, tail: 2 }.chunks(&(10..26), 4), vec![10..15, 15..21, 21..24, 24..26]);
        // Both ends: weights 1, 2, 2, 1 (of 6) scaled by a full chunk of 2.
        assert_eq!(Taper { head: 1, tail: 1 }.chunks(&(0..12), 4), vec![0..2, 2..6, 6..10, 10..12]);
        // Too few rows for the smallest chunk: it is dropped, the rest still cover the range.
        let c = Taper { head: 3, tail: 0 }.chunks(&(0..5), 4);
        assert_eq!(c.first().map(|r| r.start), Some(0));
        assert_eq!(c.last().map(|r| r.end), Some(5));
        assert!(c.len() < 4 && c.windows(2).all(|w| w[0].end == w[1].start && !w[1].is_empty()), "{c:?}");
        // One chunk is the whole range whatever the taper.
        assert_eq!(Taper { head: 3, tail: 3 }.chunks(&(2..9), 1), vec![2..9]);
    }

    #[test]
    fn a_taper_past_the_most_halvings_is_refused() {
        let (g, _, _) = norm_graph();
        let mut p = Plan::server_only(&g, 4);
        p.taper = Taper { head: Taper::MAX, tail: Taper::MAX };
        p.validate(&g).expect("the most halvings");
        p.taper.tail = Taper::MAX + 1;
        let e = p.validate(&g).expect_err("one halving too many").to_string();
        assert!(e.contains("tail 5") && e.contains("at most 4"), "{e}");
    }
}
