//! The event-driven simulator (DESIGN.md section 5): what a plan costs under given profiles, a
//! link and a power model, without running it.
//!
//! Tasks are derived from the plan exactly as the engine's split run (`lop::exec::run_split`)
//! exchanges rows: per op and side, its chunks (compute time from the side's [`crate::fit::Fit`] at the chunk's row
//! count); per edge `u -> v` and side `S`, the rows of `u` that `S` needs for its part of `v`
//! and does not hold (computed or already received) are sent by the other side, cut at the
//! producer's chunk boundaries (a piece leaves as soon as the chunk that computed it is done)
//! and at the consumer's chunk needs (a consumer chunk waits only for the rows it reads).
//! The bytes each way therefore equal `run_split`'s; the message count may be higher.
//!
//! Four resources: robot compute, server compute, uplink, downlink. A chunk's inputs are exactly
//! the rows [`Structure::footprint`] gives for its row range: they come from specific chunks of
//! the producer on its own side and/or specific incoming transfers. How each side orders its
//! chunks is [`SimConfig::order`] ([`ChunkOrder`]):
//! - [`ChunkOrder::Wavefront`] (the default, and the rule the runtime executor follows): a list
//!   scheduler. Whenever a side's compute is free it starts, among its chunks whose inputs are
//!   all available (own chunks done, transfers arrived), the one whose rows start highest in
//!   its op (lowest `start row / op rows`), ties to the earlier op in topological order, then
//!   the upper chunk. So chunk `j` of op `v + 1` runs as soon as the rows it reads exist,
//!   before later chunks of op `v`: the server computes band after band, layer after layer,
//!   while the rest of the frame is still in flight.
//! - [`ChunkOrder::OpMajor`]: strictly in a fixed order (ops in topological order, chunks top
//!   to bottom): a chunk starts when the previous one on its side is done and every transfer
//!   it reads has arrived.
//!
//! Where each op's chunks start and end is [`SimConfig::bounds`] ([`ChunkBounds`], computed by
//! [`chunk_bounds`], which the runtime executor must use too): even splits of the op's own rows,
//! or receptive-field aligned to its producers' chunks.
//!
//! A link sends transfers one at a time in order of readiness (producer done; ties in creation
//! order); a transfer of `b` bytes holds the link for `overhead + b / bandwidth` and arrives
//! `latency` later. Graph inputs are held whole by the robot at time 0. The makespan is the time
//! the graph outputs are whole on the robot.

pub mod bounds;
mod derive;
mod engine;
pub mod fluid_bound;
pub mod model_cost;
mod objective;
pub mod pipeline_bound;
mod report;
mod schedule;

pub use crate::power::RobotPower;
pub use bounds::{ChunkBounds, chunk_bounds};
pub use fluid_bound::FluidBound;
pub use model_cost::model_cost;
pub use objective::Objective;
pub use pipeline_bound::PipelineTerms;
pub use report::{Cost, Energy, Resource, ResourceUse, SimReport, Span, SpanKind};
pub use schedule::{Schedule, ScheduledChunk, ScheduledTransfer};

use crate::error::{Error, Result};
use crate::fit::Fit;
use crate::frame::{CodecCost, FrameCodec};
use crate::plan::{Plan, Side};
use crate::profile::Profile;
use crate::rows::{Footprint, Rows};
use crate::structure::NodeId;
use crate::structure::{NodeKind, Structure};

/// Bytes every band message carries besides its rows, for a tensor of `rank` dimensions: the
/// frame header (12 bytes) and the band header (24 bytes and 4 per dimension), as `lop_msgs`
/// encodes a Band. A plan of one-row chunks sends hundreds of them: resnet18's u8 frame in 224
/// bands carried 11.6 KB of headers (8% of the frame) that the simulator once left out.
pub fn band_header_bytes(rank: usize) -> usize {
    36 + 4 * rank
}

/// The robot-edge link, the same both ways.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Link {
    /// Bytes per second; 0 means no link (any plan that transfers is infeasible).
    pub bandwidth: f64,
    /// One-way latency, seconds.
    pub latency_s: f64,
    /// Per-message overhead, seconds (holds the link like payload does).
    pub overhead_s: f64,
}

impl Link {
    /// A link of `mbytes_per_s` MB/s (10^6 bytes) with the given latency and no overhead.
    pub fn mbytes(mbytes_per_s: f64, latency_s: f64) -> Link {
        Link { bandwidth: mbytes_per_s * 1e6, latency_s, overhead_s: 0.0 }
    }
}

/// How each side orders its compute chunks (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChunkOrder {
    /// Strictly ops in topological order, chunks top to bottom.
    OpMajor,
    /// List scheduling: the ready chunk highest in its op first, then topological order.
    #[default]
    Wavefront,
}

/// Everything besides the plan and the profiles.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimConfig {
    /// The link.
    pub link: Link,
    /// Robot watts while computing, transmitting and idle.
    pub power: RobotPower,
    /// Bytes per element of graph inputs on the wire, overriding their dtype (`Some(4)` prices a
    /// raw uint8 frame as if it travelled as f32); `None` uses the dtype.
    pub input_bytes_per_element: Option<usize>,
    /// How each side orders its chunks.
    pub order: ChunkOrder,
    /// Where each op's chunks are cut ([`chunk_bounds`]).
    pub bounds: ChunkBounds,
    /// Whether every band message also carries [`band_header_bytes`], as the runtime's do
    /// (on by default; off only where a test computes a timeline by hand).
    pub band_headers: bool,
    /// Where the post-processing stage (`lop::Op::Post`) must run, whole; `None` (the default):
    /// wherever the plan puts it. A plan that computes rows of it on the other side is
    /// [`Error::Infeasible`], so planners and baselines skip it: with `Some(Side::Robot)` a
    /// table shows what placing the stage gains over keeping it on the robot, where the raw
    /// heads must come down.
    pub post_side: Option<Side>,
    /// How the frame's rows travel ([`FrameWire`]): raw by default.
    pub frame: FrameWire,
}

/// Bytes a coded input band carries besides its code unit: the digest of the decoded pixels
/// the robot computes on (`lop_codec::digest`), which the edge checks.
pub const CODED_BAND_EXTRA_BYTES: usize = 8;

/// The frame codec as the simulator prices it: the codec (which fixes where input messages may
/// be cut, [`FrameCodec::unit_rows`]), the coded bytes per raw byte, and each side's seconds per
/// row. With a codec the robot encodes each input message before it leaves (and, for JPEG,
/// decodes it and codes the rows it keeps too, so that it computes on the decoded frame; with
/// the camera's JPEG passed through it decodes the frame when it computes any of it), then
/// computes; the server decodes each message on arrival. A plan that sends no input rows codes
/// nothing.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FrameWire {
    /// The codec.
    pub codec: FrameCodec,
    /// Coded bytes over raw bytes (1 for raw).
    pub ratio: f64,
    /// The robot's seconds to encode one frame row.
    pub robot_encode_s_per_row: f64,
    /// The robot's seconds to decode one frame row.
    pub robot_decode_s_per_row: f64,
    /// The server's seconds to decode one frame row.
    pub server_decode_s_per_row: f64,
}

impl Default for FrameWire {
    fn default() -> Self {
        FrameWire::raw()
    }
}

impl FrameWire {
    /// Whether frames travel raw.
    pub fn is_raw(&self) -> bool {
        self.codec == FrameCodec::Raw
    }

    /// Raw rows: ratio 1, nothing to code.
    pub fn raw() -> FrameWire {
        FrameWire {
            codec: FrameCodec::Raw,
            ratio: 1.0,
            robot_encode_s_per_row: 0.0,
            robot_decode_s_per_row: 0.0,
            server_decode_s_per_row: 0.0,
        }
    }

    /// The codec priced by the robot's and the server's measured costs of it (the ratio is the
    /// robot's: it sees the frames).
    pub fn from_costs(robot: &CodecCost, server: &CodecCost) -> FrameWire {
        FrameWire {
            codec: robot.codec,
            ratio: robot.ratio,
            robot_encode_s_per_row: robot.encode_s_per_row,
            robot_decode_s_per_row: robot.decode_s_per_row,
            server_decode_s_per_row: server.decode_s_per_row,
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            link: Link::mbytes(10.0, 0.001),
            power: RobotPower::default(),
            input_bytes_per_element: None,
            order: ChunkOrder::Wavefront,
            bounds: ChunkBounds::Even,
            band_headers: true,
            post_side: None,
            frame: FrameWire::raw(),
        }
    }
}

/// Who holds a value before anything is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// A graph input: the robot holds it whole.
    Input,
    /// A constant: both sides hold it; never sent.
    Constant,
    /// Computed by the plan.
    Op,
}

/// A simulator for one graph and one pair of profiles, reusable across plans and links: the
/// per-graph structures (input descriptions, row sizes, fits) are built once.
#[derive(Debug)]
pub struct Simulator<'g> {
    graph: &'g dyn Structure,
    config: SimConfig,
    fits: [Vec<Fit>; 2],
    holder: Vec<Holder>,
    row_bytes: Vec<usize>,
    live: Vec<bool>,
}

fn side_ix(side: Side) -> usize {
    match side {
        Side::Robot => 0,
        Side::Server => 1,
    }
}

impl<'g> Simulator<'g> {
    /// Builds a simulator. The profiles must cover every op of `graph` (checked here, by id and
    /// name) and have the right roles; checking them against the model's content hash is
    /// [`Profile::validate`]'s job (hashing reads every weight, so it is left to the caller).
    ///
    /// # Errors
    /// [`Error::ProfileMissingOp`], [`Error::ProfileInvalid`] (bad fits, wrong role, robot and
    /// server profiles for different models), [`Error::Input`] for a negative link or power.
    pub fn new(graph: &'g dyn Structure, robot: &Profile, server: &Profile, config: SimConfig) -> Result<Self> {
        for (p, side) in [(robot, Side::Robot), (server, Side::Server)] {
            if p.role != side {
                return Err(Error::ProfileInvalid {
                    node: "role".into(),
                    msg: format!("a {} profile was given as the {} profile", p.role.name(), side.name()),
                });
            }
        }
        if robot.model_hash != server.model_hash {
            return Err(Error::ProfileModel {
                profile_model: server.model.clone(),
                expected: robot.model_hash.clone(),
                found: server.model_hash.clone(),
            });
        }
        let fits = [robot.fits(graph)?, server.fits(graph)?];
        Self::with_fits(graph, fits, config)
    }

    /// A simulator whose every op takes no time: for deriving schedules ([`Schedule::derive`]).
    pub(crate) fn untimed(graph: &'g dyn Structure, config: SimConfig) -> Result<Self> {
        let zero = vec![Fit::new(0.0, 0.0); graph.node_count()];
        Self::with_fits(graph, [zero.clone(), zero], config)
    }

    fn with_fits(graph: &'g dyn Structure, fits: [Vec<Fit>; 2], config: SimConfig) -> Result<Self> {
        let holder = (0..graph.node_count())
            .map(|id| match graph.node_kind(id) {
                NodeKind::Input => Holder::Input,
                NodeKind::Constant => Holder::Constant,
                NodeKind::Op | NodeKind::Post => Holder::Op,
            })
            .collect();
        let mut live = vec![false; graph.node_count()];
        for &o in graph.outputs() {
            live[o] = true;
        }
        for id in (0..graph.node_count()).rev() {
            if live[id] {
                for &i in graph.node_inputs(id) {
                    live[i] = true;
                }
            }
        }
        let mut sim = Simulator { graph, config, fits, holder, row_bytes: vec![], live };
        sim.set_config(config)?;
        Ok(sim)
    }

    /// Replaces the link, power model and input pricing (e.g. to sweep bandwidth buckets).
    ///
    /// # Errors
    /// [`Error::Input`] for negative or non-finite link or power numbers.
    pub fn set_config(&mut self, config: SimConfig) -> Result<()> {
        let l = config.link;
        let p = config.power;
        for (what, v) in [
            ("bandwidth", l.bandwidth),
            ("latency", l.latency_s),
            ("overhead", l.overhead_s),
            ("computing watts", p.computing_w),
            ("transmitting watts", p.transmitting_w),
            ("idle watts", p.idle_w),
            ("frame codec ratio", config.frame.ratio),
            ("robot encode seconds", config.frame.robot_encode_s_per_row),
            ("robot decode seconds", config.frame.robot_decode_s_per_row),
            ("server decode seconds", config.frame.server_decode_s_per_row),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(Error::Input(format!("{what} must be finite and >= 0, got {v}")));
            }
        }
        if config.frame.ratio <= 0.0 {
            return Err(Error::Input(format!("frame codec ratio must be > 0, got {}", config.frame.ratio)));
        }
        if config.frame.codec.is_coded() {
            for (id, h) in self.holder.iter().enumerate() {
                if *h == Holder::Input {
                    config.frame.codec.check_input(self.graph.node_info(id))?;
                }
            }
        }
        let graph = self.graph;
        self.row_bytes = (self.holder.iter().enumerate())
            .map(|(id, h)| (graph.node_info(id), h))
            .map(|(info, h)| match (h, config.input_bytes_per_element) {
                // A coded frame: its bytes per row on average, from the codec's ratio.
                (Holder::Input, _) if config.frame.codec.is_coded() => (info.bytes_of_rows(1) as f64 * config.frame.ratio).ceil() as usize,
                (Holder::Input, Some(b)) => info.numel() / info.rows().max(1) * b,
                _ => info.bytes_of_rows(1),
            })
            .collect();
        self.config = config;
        Ok(())
    }

    /// The configuration in force.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Header bytes of one band message of value `id` (0 when the configuration leaves them
    /// out); a coded frame's bands also carry their digest.
    pub fn band_header(&self, id: NodeId) -> usize {
        let coded = if self.holder[id] == Holder::Input && self.config.frame.codec.is_coded() { CODED_BAND_EXTRA_BYTES } else { 0 };
        if self.config.band_headers { band_header_bytes(self.graph.node_info(id).shape.len()) + coded } else { coded }
    }

    /// The graph simulated.
    pub fn graph(&self) -> &'g dyn Structure {
        self.graph
    }

    /// Predicted seconds for `side` to compute `rows` rows of node `id` in one kernel.
    pub fn op_time(&self, side: Side, id: NodeId, rows: usize) -> f64 {
        self.fits[side_ix(side)][id].time(rows)
    }

    /// Bytes of node `id`'s whole value on the wire (graph inputs as priced by
    /// [`SimConfig::input_bytes_per_element`]).
    pub fn value_bytes(&self, id: NodeId) -> usize {
        self.row_bytes[id] * self.graph.node_info(id).rows().max(1)
    }

    /// Whether node `id` is an ancestor of (or is) a graph output.
    pub fn is_live(&self, id: NodeId) -> bool {
        self.live[id]
    }

    /// Simulates `plan` and reports the full timeline.
    ///
    /// # Errors
    /// [`Error::Plan`] for a plan that does not fit the graph; [`Error::Infeasible`] when the
    /// plan transfers rows and the link's bandwidth is 0, or computes rows of a post-processing
    /// op away from [`SimConfig::post_side`].
    pub fn simulate(&self, plan: &Plan) -> Result<SimReport> {
        let run = self.run(plan)?;
        Ok(report::full(self, &run))
    }

    /// Simulates `plan` and returns only makespan, energy and bytes (no timeline allocation):
    /// the call a planner makes many times.
    ///
    /// # Errors
    /// As [`Simulator::simulate`].
    pub fn cost(&self, plan: &Plan) -> Result<Cost> {
        let run = self.run(plan)?;
        Ok(report::cost(self, &run))
    }

    fn run(&self, plan: &Plan) -> Result<engine::Run> {
        plan.validate(self.graph)?;
        if let Some(side) = self.config.post_side {
            let g = self.graph;
            if let Some(id) = (0..g.node_count()).find(|&id| g.node_is_post(id) && !plan.rows(g, id, side.other()).is_empty()) {
                return Err(Error::Infeasible(format!(
                    "the plan computes post-processing op '{}' on the {}, but it must run on the {}",
                    g.node_name(id),
                    side.other().name(),
                    side.name()
                )));
            }
        }
        let tasks = derive::derive(self, plan)?;
        if self.config.link.bandwidth <= 0.0
            && let Some(t) = tasks.transfers.first()
        {
            let name = self.graph.node_name(t.node);
            return Err(Error::Infeasible(format!("the plan sends rows {:?} of '{name}' but there is no link (bandwidth 0)", t.rows)));
        }
        let run = engine::execute(self, tasks);
        if !run.complete {
            return Err(Error::Plan("the plan's task graph has a cycle (a chunk never became ready)".into()));
        }
        Ok(run)
    }

    /// Each node's chunks on `side` under `plan` (as [`chunk_bounds`], without allocating per
    /// footprint).
    fn chunk_bounds(&self, plan: &Plan, side: Side) -> Vec<Vec<Rows>> {
        let g = self.graph;
        bounds::bounds_with(g, plan, side, self.config.bounds, |id, k, r| g.footprint(id, k, r))
    }

    /// Rows of input `k` of node `id` needed for output rows `rows` (as the executor reads
    /// them: the footprint, or the whole input when it has no row axis or is read whole).
    pub fn need(&self, id: NodeId, k: usize, rows: &Rows) -> Rows {
        let info = self.graph.node_info(self.graph.node_inputs(id)[k]);
        match (info.row_axis, self.graph.footprint(id, k, rows)) {
            (Some(_), Footprint::Rows(r)) => r,
            _ => 0..info.rows(),
        }
    }

    /// Rows of value `id` that `side` holds or computes under `plan` before any transfer.
    fn own(&self, plan: &Plan, id: NodeId, side: Side) -> Rows {
        let rows = self.graph.node_info(id).rows();
        match (self.holder[id], side) {
            (Holder::Input, Side::Robot) | (Holder::Constant, _) => 0..rows,
            (Holder::Input, Side::Server) => 0..0,
            (Holder::Op, _) => plan.rows(self.graph, id, side),
        }
    }
}
