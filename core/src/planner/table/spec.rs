//! [`TableSpec`]: everything about a schedule table besides the model and the profiles (buckets,
//! link, objective, power, planner, chunking, post-processing side, frame codec), its checks,
//! its hash, and the `auto` bandwidth scale.

use super::PLANNER_REVISION;
use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::planner::PlannerConfig;
use crate::profile::Profile;
use crate::sim::{ChunkBounds, ChunkOrder, FrameWire, Link, Objective, RobotPower, SimConfig, Simulator};
use crate::structure::Structure;
use sha2::{Digest, Sha256};

/// Everything about a table besides the model and the profiles.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TableSpec {
    /// Bucket values, MB/s (1 MB/s = 8 Mbit/s); 0 means no link.
    pub buckets: Vec<f64>,
    /// Bucket `b` stands for `b * bandwidth_scale` MB/s on the simulated link.
    pub bandwidth_scale: f64,
    /// One-way latency, seconds.
    pub latency_s: f64,
    /// Per-message overhead, seconds.
    pub overhead_s: f64,
    /// Wire bytes per element of the raw input (`None`: its dtype; `Some(4)`: as f32).
    pub input_bytes_per_element: Option<usize>,
    /// What is minimised.
    pub objective: Objective,
    /// The robot's power model.
    pub power: RobotPower,
    /// The planner's knobs.
    pub planner: PlannerConfig,
    /// How the simulator orders each side's chunks (the executor follows the same rule).
    #[serde(default)]
    pub chunk_order: ChunkOrder,
    /// Where the simulator cuts each op's chunks (the executor cuts the same); part of the cache
    /// key. Tables written before this field existed used even bounds.
    #[serde(default)]
    pub chunk_bounds: ChunkBounds,
    /// Where the post-processing stage must run ([`SimConfig::post_side`]); `None`, the
    /// default, lets each plan place it. Left out of the JSON (and so of the key) when `None`,
    /// so tables written before the field existed keep their keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_side: Option<crate::plan::Side>,
    /// How the frame travels, with its prices ([`crate::sim::FrameWire`], from both profiles'
    /// measured costs: [`TableSpec::with_frame_codec`]); part of the hash, so robot and edge run
    /// one codec. Left out of the JSON (and so of the key) for raw frames, so tables written
    /// before the field existed keep their keys.
    #[serde(default, skip_serializing_if = "FrameWire::is_raw")]
    pub frame: FrameWire,
}

/// Alias kept for readers looking for the table's configuration.
pub type TableConfig = TableSpec;

impl TableSpec {
    /// A latency table over `buckets` (MB/s, unscaled), `latency_s` one way, the default planner
    /// and power model, wavefront chunk order and receptive-field-aligned bounds (the runtime's):
    /// the spec of benchmarks and tests that plan a few fixed buckets.
    pub fn latency(buckets: Vec<f64>, latency_s: f64) -> TableSpec {
        TableSpec {
            buckets,
            bandwidth_scale: 1.0,
            latency_s,
            overhead_s: 0.0,
            input_bytes_per_element: None,
            objective: Objective::Latency,
            power: RobotPower::default(),
            planner: PlannerConfig::default(),
            chunk_order: ChunkOrder::Wavefront,
            chunk_bounds: ChunkBounds::Aligned,
            post_side: None,
            frame: FrameWire::raw(),
        }
    }

    /// The spec with frames coded by `codec`, priced by the robot's and the server's measured
    /// costs of it (the ratio is the robot's, which saw the frames). A server profile that has
    /// not measured the codec decodes at the robot's measured speed scaled by how much faster
    /// the server computes the model (both profiles' whole-model times): both sides derive the
    /// same price from the same two profiles, so their tables agree.
    ///
    /// # Errors
    /// [`Error::Input`] when the robot's profile has not measured the codec, naming the command
    /// that measures it.
    pub fn with_frame_codec(mut self, codec: crate::frame::FrameCodec, robot: &Profile, server: &Profile) -> Result<TableSpec> {
        let robot_cost = robot.codec_cost(codec).ok_or_else(|| {
            Error::Input(format!(
                "the robot profile of '{}' has not measured frame codec {codec} (measured: {}); measure it on real frames with `lop profile --frames PATH --frame-codecs {codec}`",
                robot.model,
                if robot.codecs.is_empty() { "none".to_string() } else { robot.codecs.iter().map(|c| c.codec.to_string()).collect::<Vec<_>>().join(", ") }
            ))
        })?;
        let server_cost = server.codec_cost(codec).unwrap_or_else(|| {
            let speed = server.whole_model_s() / robot.whole_model_s();
            let speed = if speed.is_finite() && speed > 0.0 { speed } else { 1.0 };
            crate::frame::CodecCost { decode_s_per_row: robot_cost.decode_s_per_row * speed, ..robot_cost }
        });
        self.frame = FrameWire::from_costs(&robot_cost, &server_cost);
        Ok(self)
    }

    /// Checks the buckets and link numbers and the planner configuration.
    ///
    /// # Errors
    /// [`Error::Input`].
    pub fn check(&self) -> Result<()> {
        if self.buckets.is_empty() {
            return Err(Error::Input("the bucket range is empty".into()));
        }
        if self.buckets.iter().any(|b| !b.is_finite() || *b < 0.0) {
            return Err(Error::Input("buckets must be finite and >= 0 MB/s".into()));
        }
        if !self.bandwidth_scale.is_finite() || self.bandwidth_scale <= 0.0 {
            return Err(Error::Input(format!("bandwidth scale must be positive, got {}", self.bandwidth_scale)));
        }
        self.planner.check()
    }

    /// Content hash of the spec and of the planner's revision (the table key's `config_hash`;
    /// robots send it in Hello), so that a cached table planned by an older planner is planned
    /// anew.
    ///
    /// A coded frame's prices are left out (its codec is in): they come from the two profiles'
    /// measured costs, whose hashes the table key holds, and an edge configured with the codec
    /// alone must agree with a robot whose spec carries the prices.
    pub fn hash(&self) -> String {
        let mut unpriced = self.clone();
        unpriced.frame = FrameWire { codec: self.frame.codec, ..FrameWire::raw() };
        let spec = serde_json::to_string(&unpriced).unwrap_or_default();
        hex::encode(Sha256::digest(format!("planner {PLANNER_REVISION}; {spec}").as_bytes()))
    }

    /// The simulator configuration of bucket `b` MB/s.
    pub fn sim_config(&self, b: f64) -> SimConfig {
        SimConfig {
            link: Link { bandwidth: b * self.bandwidth_scale * 1e6, latency_s: self.latency_s, overhead_s: self.overhead_s },
            power: self.power,
            input_bytes_per_element: self.input_bytes_per_element,
            order: self.chunk_order,
            bounds: self.chunk_bounds,
            band_headers: true,
            post_side: self.post_side,
            frame: self.frame,
        }
    }
}

/// The `auto` bandwidth scale: the factor F such that, at bucket 11.6 MB/s (the paper's indoor
/// mean, 93 Mbit/s), sending the raw input as float32 takes 0.44 x the robot-only compute time
/// (the paper's VGG19 indoor regime: 602 KB against 118 ms). Keeps CPU-measured profiles in the
/// paper's ratio of compute to transfer.
///
/// # Errors
/// Simulator errors; a model with no input or a zero robot-only time.
pub fn auto_bandwidth_scale(graph: &dyn Structure, robot: &Profile, server: &Profile) -> Result<f64> {
    let sim = Simulator::new(graph, robot, server, SimConfig::default())?;
    let t = sim.cost(&Plan::robot_only(graph, 8))?.makespan_s;
    let bytes: usize = (0..graph.node_count()).filter(|&i| graph.node_is_input(i)).map(|i| graph.node_info(i).numel() * 4).sum();
    if !(t > 0.0 && bytes > 0) {
        return Err(Error::Input("cannot pick a bandwidth scale: zero robot time or no input".into()));
    }
    Ok(bytes as f64 / (11.6e6 * 0.44 * t))
}
