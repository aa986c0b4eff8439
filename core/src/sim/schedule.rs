//! The task graph of a plan as a runtime executor follows it: which chunks each side computes,
//! which row pieces cross the link, and who waits for what. The same derivation the simulator
//! times ([`super::Simulator`]), so a real run exchanges exactly the simulated transfers.

use super::{ChunkBounds, SimConfig, Simulator};
use crate::error::Result;
use crate::plan::{Plan, Side};
use crate::rows::Rows;
use crate::structure::NodeId;
use crate::structure::Structure;

/// One chunk one side computes: output rows `rows` of op `node` in one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledChunk {
    /// The side computing it.
    pub side: Side,
    /// The op.
    pub node: NodeId,
    /// Its output rows.
    pub rows: Rows,
    /// Wavefront priority: among ready chunks a side runs the lowest key first (ties: the
    /// lower chunk index), where the key is the chunk's first row as a fraction of the op's rows.
    pub key: f64,
    /// How many inputs it waits for: chunks of its own side it reads, plus transfers it reads.
    pub inputs: u32,
    /// Transfers that can be sent once it is done (indices into [`Schedule::transfers`]).
    pub enables: Vec<u32>,
    /// Chunks of the same side that read rows it computes.
    pub successors: Vec<u32>,
}

/// Rows of one value that one side sends to the other.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduledTransfer {
    /// Robot to server (else server to robot).
    pub up: bool,
    /// The value.
    pub node: NodeId,
    /// Its rows.
    pub rows: Rows,
    /// Bytes as priced by the schedule's configuration.
    pub bytes: usize,
    /// The chunk that computes the rows; `None` for a graph input, sendable at once.
    pub producer: Option<u32>,
    /// Chunks that read it on the receiving side.
    pub waiters: Vec<u32>,
}

impl ScheduledTransfer {
    /// The side that sends it.
    pub fn from(&self) -> Side {
        if self.up { Side::Robot } else { Side::Server }
    }
}

/// The task graph of a plan.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schedule {
    /// Every chunk of both sides, ops in topological order, robot before server, top to bottom.
    pub chunks: Vec<ScheduledChunk>,
    /// Every transfer, in creation order.
    pub transfers: Vec<ScheduledTransfer>,
    /// Robot chunks the graph outputs are assembled from.
    pub final_chunks: Vec<u32>,
    /// Transfers the graph outputs are assembled from (server to robot).
    pub final_transfers: Vec<u32>,
}

impl Schedule {
    /// Derives the schedule of `plan` on `graph` with chunks cut by `bounds` (the table's
    /// [`ChunkBounds`]) and the frame's messages on `codec`'s unit grid (the table's codec);
    /// no profiles are needed.
    ///
    /// # Errors
    /// [`crate::Error::Plan`] when the plan does not fit the graph; [`crate::Error::Frame`] when
    /// the codec cannot carry the graph's input.
    pub fn derive(graph: &dyn Structure, plan: &Plan, bounds: ChunkBounds, codec: crate::frame::FrameCodec) -> Result<Schedule> {
        let frame = super::FrameWire { codec, ..super::FrameWire::raw() };
        let config = SimConfig { bounds, frame, ..SimConfig::default() };
        Simulator::untimed(graph, config)?.schedule(plan)
    }

    /// The chunks of `side`, in index order.
    pub fn side_chunks(&self, side: Side) -> impl Iterator<Item = (u32, &ScheduledChunk)> {
        self.chunks.iter().enumerate().filter(move |(_, c)| c.side == side).map(|(i, c)| (i as u32, c))
    }

    /// Bytes each way, `(up, down)`.
    pub fn bytes(&self) -> (usize, usize) {
        let up = self.transfers.iter().filter(|t| t.up).map(|t| t.bytes).sum();
        let down = self.transfers.iter().filter(|t| !t.up).map(|t| t.bytes).sum();
        (up, down)
    }
}

impl Simulator<'_> {
    /// The task graph of `plan` under this simulator's chunk bounds and input pricing.
    ///
    /// # Errors
    /// [`crate::Error::Plan`] when the plan does not fit the graph.
    pub fn schedule(&self, plan: &Plan) -> Result<Schedule> {
        plan.validate(self.graph)?;
        let t = super::derive::derive(self, plan)?;
        let chunks = t
            .tasks
            .into_iter()
            .map(|k| ScheduledChunk {
                side: k.side,
                node: k.node,
                rows: k.rows,
                key: k.key,
                inputs: k.pending,
                enables: k.enables,
                successors: k.succ,
            })
            .collect();
        let transfers = t
            .transfers
            .into_iter()
            .map(|x| ScheduledTransfer { up: x.up, node: x.node, rows: x.rows, bytes: x.bytes, producer: x.producer, waiters: x.waiters })
            .collect();
        Ok(Schedule { chunks, transfers, final_chunks: t.final_tasks, final_transfers: t.final_transfers })
    }
}
