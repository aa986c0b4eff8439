//! What a finished run reports ([`RobotSummary`]), read from the counters once the node has
//! shut down.

use std::sync::atomic::{AtomicU64, Ordering};

use super::counters::RobotCounters;
use crate::backend::SharedRos;

/// What a finished `run` reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RobotSummary {
    /// Frames received.
    pub received: u64,
    /// Results published.
    pub answered: u64,
    /// Frames replaced while busy.
    pub dropped_busy: u64,
    /// Bad input in all: unconvertible frames, messages of the wrong type, undecodable ones.
    pub bad_input: u64,
    /// Messages of another type on the input topic (included in `bad_input`).
    pub wrong_type: u64,
    /// Input messages that failed to decode (included in `bad_input`).
    pub undecodable: u64,
    /// Fallbacks.
    pub fallbacks: u64,
    /// Mean ROS-layer time per answered frame, seconds.
    pub ros_mean_s: f64,
    /// Largest ROS-layer time, seconds.
    pub ros_max_s: f64,
}

/// After the node shut down (the edge clients and session gone with its last activation):
/// logs and returns the summary of every input's counters together.
pub(super) fn finish(counters: &[&RobotCounters], ros: &SharedRos) -> RobotSummary {
    let sum = |f: fn(&RobotCounters) -> &AtomicU64| counters.iter().map(|c| f(c).load(Ordering::Relaxed)).sum::<u64>();
    let answered = sum(|c| &c.answered);
    let faults = ros.input_faults();
    let unconvertible = sum(|c| &c.bad_input);
    let ros_max_ns = counters.iter().map(|c| c.ros_ns_max.load(Ordering::Relaxed)).max().unwrap_or(0);
    let summary = RobotSummary {
        received: sum(|c| &c.received),
        answered,
        dropped_busy: sum(|c| &c.dropped_busy),
        bad_input: unconvertible.saturating_add(faults.total()),
        wrong_type: faults.wrong_type,
        undecodable: faults.undecodable,
        fallbacks: sum(|c| &c.fallbacks),
        ros_mean_s: sum(|c| &c.ros_ns_sum).checked_div(answered).unwrap_or(0) as f64 * 1e-9,
        ros_max_s: ros_max_ns as f64 * 1e-9,
    };
    tracing::info!(?summary, "lop_robot stopped");
    summary
}
