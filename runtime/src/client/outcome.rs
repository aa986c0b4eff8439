//! What an inference returns: its outputs and statistics ([`Inference`], [`InferenceStats`]), or,
//! for one try of it in a fleet ([`Hop`]), the edge's forwarding of it ([`Hopped`]).

use std::time::Duration;

use tch::Tensor;

use crate::bandwidth::upload;

/// What one inference did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct InferenceStats {
    /// Inference id (increasing).
    pub id: u64,
    /// The method whose plan ran.
    pub method: String,
    /// Bucket index and value (MB/s) in force.
    pub bucket: u32,
    /// See `bucket`.
    pub bucket_mb_s: f64,
    /// The plan's content hash (hex).
    pub plan_hash: String,
    /// Whether the robot finished the inference alone after the edge failed it.
    pub fallback: bool,
    /// Why, for a fallback.
    pub fallback_reason: Option<String>,
    /// Seconds from the call to the outputs.
    pub total_s: f64,
    /// Seconds the robot computed (dilation included).
    pub robot_compute_s: f64,
    /// Robot kernels that took longer than their paced duration ([`ClientOptions::paced`](super::ClientOptions::paced)).
    pub robot_overruns: u32,
    /// Seconds those kernels took beyond their paced durations, all together.
    pub robot_overrun_s: f64,
    /// Seconds the robot spent coding its frame for the link (0: raw frames, or no input row
    /// crossed): under a lossy codec the outputs are then the model's on the decoded frame.
    pub robot_coding_s: f64,
    /// Whether the frame crossed coded (so the robot computed on its decoding under a lossy
    /// codec).
    pub frame_coded: bool,
    /// The running estimate of the coded frames' size over their raw size, after this frame
    /// ([`crate::frame_ratio::FrameRatio`]; `None` until a coded frame went up).
    pub frame_ratio: Option<f64>,
    /// Seconds the robot waited for bands.
    pub robot_wait_s: f64,
    /// Seconds the edge computed (from its Done, when it arrived in time).
    pub server_compute_s: Option<f64>,
    /// Bytes sent to the edge (whole frames).
    pub bytes_up: u64,
    /// Bytes received from the edge (whole frames).
    pub bytes_down: u64,
    /// The simulator's makespan for the plan, seconds.
    pub predicted_s: Option<f64>,
    /// Seconds the upload took as the edge saw it (from its Done: the Start's arrival to the
    /// last band's), when the edge finished its part and received bands.
    pub upload_s: Option<f64>,
    /// Seconds from sending the Start to handing the last band to the link, when bands went up.
    pub send_span_s: Option<f64>,
}

impl InferenceStats {
    /// The upload rate to the edge this inference measured, Mbit/s, where the link limited the
    /// upload ([`crate::bandwidth::upload::upload_mbps`]).
    pub fn upload_mbps(&self) -> Option<f64> {
        upload::upload_mbps(self.bytes_up, self.upload_s?, self.send_span_s?)
    }
}

/// How one try of an inference at this client's edge is sent: the path of edges that forwarded
/// it here, what is left of its budget (`None`: a first try, budgeted by its plan) and of the
/// frame's deadline.
#[derive(Debug, Clone, Default)]
pub struct Hop {
    /// The edges that forwarded the inference, in order (from the last [`Hopped::Forwarded`]).
    pub path: Vec<String>,
    /// What is left of the inference's budget: how long the edge may work on it.
    pub budget: Option<Duration>,
    /// What is left of the frame's deadline (`None`: the budget is the deadline). The edge
    /// forwards what its queue cannot finish by then; the robot stops waiting then and computes
    /// the edge's bands itself, taking each from the edge if it still comes first
    /// ([`crate::exec::run_side_racing`]).
    pub due: Option<Duration>,
}

/// How a try of an inference ended: answered (split, or finished by the robot), or forwarded by
/// the edge to another edge of the fleet, for the caller to send there.
#[derive(Debug)]
pub enum Hopped {
    /// The inference, done.
    Done(Inference),
    /// The edge cannot meet the deadline and forwards the inference to `to`; nothing was
    /// computed for it on the robot meanwhile.
    Forwarded {
        /// The fleet id of the edge to send it to.
        to: String,
        /// The path for the next Start (the forwarding edge included).
        path: Vec<String>,
        /// What is left of the budget.
        budget_left: Duration,
        /// The inputs, to send there.
        inputs: Vec<Tensor>,
    },
}

/// The result of one inference.
#[derive(Debug)]
pub struct Inference {
    /// The model's outputs (exactly the unsplit model's).
    pub outputs: Vec<Tensor>,
    /// What happened.
    pub stats: InferenceStats,
}
