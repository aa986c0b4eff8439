//! One JSON line per replayed frame ([`Line`]): the recorded frame (its place, topic, header
//! stamp and frame id, when it was recorded and published) and what `lop_robot` answered, its
//! `lop_msgs/InferenceResult` ([`Answer`]), or that it did not.

use lop_msgs::ros::msg::InferenceResult;
use serde::Serialize;

/// A ROS time: seconds and nanoseconds, as `builtin_interfaces/Time` has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Stamp {
    /// Seconds.
    pub sec: i32,
    /// Nanoseconds within the second.
    pub nanosec: u32,
}

impl Stamp {
    /// The stamp of `ns` nanoseconds since the epoch (the bag reader's form).
    pub fn from_ns(ns: i64) -> Stamp {
        let sec = ns.div_euclid(1_000_000_000);
        Stamp { sec: i32::try_from(sec).unwrap_or(if sec < 0 { i32::MIN } else { i32::MAX }), nanosec: ns.rem_euclid(1_000_000_000) as u32 }
    }
}

/// One replayed frame and its answer.
#[derive(Debug, Serialize)]
pub struct Line {
    /// The frame's place on its topic in the recording, from 0.
    pub frame: usize,
    /// The recorded topic.
    pub topic: String,
    /// The frame's header stamp (which `lop_robot` copies into its result).
    pub stamp: Stamp,
    /// The same, nanoseconds since the epoch.
    pub stamp_ns: i64,
    /// The frame's header frame id.
    pub frame_id: String,
    /// When the recorder received it, nanoseconds since the epoch.
    pub log_time_ns: u64,
    /// Seconds from the replay's first publication to this frame's.
    pub published_s: f64,
    /// Whether `lop_robot` answered it within the timeout.
    pub answered: bool,
    /// Seconds from its publication to its result's arrival.
    pub answer_s: Option<f64>,
    /// The result, when it came.
    pub result: Option<Answer>,
}

/// A class of a classifier's top-k.
#[derive(Debug, Serialize)]
pub struct Class {
    /// The class index.
    pub class_id: u32,
    /// Its score.
    pub score: f32,
    /// Its label, when the node has class names.
    pub label: String,
}

/// One output tensor of the model.
#[derive(Debug, Serialize)]
pub struct Output {
    /// The output's name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<u32>,
    /// Its values, row-major (with `--outputs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Vec<f32>>,
}

/// What `lop_robot` said of the frame: its `InferenceResult`, field for field (times in
/// seconds, bandwidth in Mbit/s), its outputs' values only when asked for.
#[derive(Debug, Serialize)]
pub struct Answer {
    /// The node's inference id.
    pub inference_id: u64,
    /// The frame id the result carries.
    pub frame_id: String,
    /// The model and its sha256.
    pub model_name: String,
    /// See `model_name`.
    pub model_sha256: String,
    /// The method that ran.
    pub method: String,
    /// Whether the robot finished it alone, and why.
    pub fallback: bool,
    /// See `fallback` (none when it did not).
    pub fallback_reason: Option<String>,
    /// End to end, from the frame's arrival at the node to its result.
    pub latency_s: f64,
    /// The robot's and the edge's compute, the robot's wait, the transfers on the critical path.
    pub robot_compute_s: f64,
    /// See `robot_compute_s`.
    pub server_compute_s: f64,
    /// See `robot_compute_s`.
    pub waiting_s: f64,
    /// See `robot_compute_s`.
    pub transfer_s: f64,
    /// Bytes up to the edge and down from it.
    pub bytes_up: u64,
    /// See `bytes_up`.
    pub bytes_down: u64,
    /// The schedule table's bucket, the bandwidth prediction that chose it, and the plan.
    pub bandwidth_bucket: u32,
    /// See `bandwidth_bucket`.
    pub bandwidth_mbps: f64,
    /// See `bandwidth_bucket`.
    pub plan_hash: String,
    /// A classifier's top-k classes, best first.
    pub top_k: Vec<Class>,
    /// The model's outputs.
    pub outputs: Vec<Output>,
}

impl Answer {
    /// The answer in `r`, the outputs' values kept when `values`.
    pub fn new(r: InferenceResult, values: bool) -> Answer {
        Answer {
            inference_id: r.inference_id,
            frame_id: r.header.frame_id,
            model_name: r.model_name,
            model_sha256: r.model_sha256,
            method: r.method,
            fallback: r.fallback,
            fallback_reason: Some(r.fallback_reason).filter(|s| !s.is_empty()),
            latency_s: r.latency_s,
            robot_compute_s: r.robot_compute_s,
            server_compute_s: r.server_compute_s,
            waiting_s: r.waiting_s,
            transfer_s: r.transfer_s,
            bytes_up: r.bytes_up,
            bytes_down: r.bytes_down,
            bandwidth_bucket: r.bandwidth_bucket,
            bandwidth_mbps: r.bandwidth_mbps,
            plan_hash: r.plan_hash,
            top_k: r.top_k.into_iter().map(|c| Class { class_id: c.class_id, score: c.score, label: c.label }).collect(),
            outputs: r.outputs.into_iter().map(|o| Output { name: o.name, shape: o.shape, data: values.then_some(o.data) }).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_split_into_seconds_and_nanoseconds() {
        assert_eq!(Stamp::from_ns(1_700_000_000_033_333_333), Stamp { sec: 1_700_000_000, nanosec: 33_333_333 });
        assert_eq!(Stamp::from_ns(0), Stamp { sec: 0, nanosec: 0 });
        assert_eq!(Stamp::from_ns(-1), Stamp { sec: -1, nanosec: 999_999_999 });
    }
}
