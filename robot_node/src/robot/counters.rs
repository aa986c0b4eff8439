//! The counters of `lop_robot` ([`RobotCounters`]): kept by every part of the node, read as
//! /diagnostics' values and the summary of a finished run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::backend::InputFaultCounts;

/// Counters of `lop_robot` (also published on /diagnostics).
#[derive(Debug, Default)]
pub struct RobotCounters {
    /// Frames the subscriptions delivered.
    pub received: AtomicU64,
    /// Results published.
    pub answered: AtomicU64,
    /// Frames dropped while the model was busy: replaced by a newer one (`drop_policy: newest`)
    /// or refused because one was waiting (`oldest`).
    pub dropped_busy: AtomicU64,
    /// Frames dropped unread while `enabled` was false.
    pub skipped_disabled: AtomicU64,
    /// Frames dropped unread while the managed node was not active (inactive, or waiting in the
    /// mailbox when it was deactivated).
    pub skipped_inactive: AtomicU64,
    /// Frames that could not be converted (encoding, step, size, empty or non-finite clouds).
    /// Messages of the wrong type and undecodable ones are the backend's
    /// ([`crate::backend::Ros::input_faults`]); /diagnostics' `frames_bad` is the sum.
    pub bad_input: AtomicU64,
    /// Results the robot finished alone.
    pub fallbacks: AtomicU64,
    /// Inferences that failed (engine errors).
    pub errors: AtomicU64,
    /// Answered frames whose task messages (detections, keypoints, occupancy, class map) could
    /// not be built or published; the frame's `InferenceResult` still went out.
    pub task_message_errors: AtomicU64,
    /// Annotated debug images published (`topics.debug_image`, either form).
    pub debug_images: AtomicU64,
    /// Debug images not published: a frame the drawer cannot read, a JPEG that would not encode,
    /// a publisher that failed (the frame's result went out all the same).
    pub debug_image_errors: AtomicU64,
    /// Frames answered while a debug image was still being drawn, which got none.
    pub debug_images_skipped: AtomicU64,
    /// Whether the edge session is up (after the last inference).
    pub connected: AtomicBool,
    /// ROS-layer time of the last frame (arrival to publication minus the inference), ns.
    pub ros_ns_last: AtomicU64,
    /// Largest ROS-layer time, ns.
    pub ros_ns_max: AtomicU64,
    /// Sum of ROS-layer times, ns (mean = sum / answered).
    pub ros_ns_sum: AtomicU64,
    /// Bucket in force (table MB/s, as f64 bits).
    pub bucket_bits: AtomicU64,
    /// Coded frames: the running estimate of their size over raw (f64 bits; 0 until one went
    /// up), which moves where the table is read when it departs from the table's price.
    pub frame_ratio_bits: AtomicU64,
    /// Frames from the edge dropped by the client (malformed, stale, ...).
    pub edge_frames_dropped: AtomicU64,
    /// Fleet mode: edges up in the robot's view at the last frame.
    pub fleet_edges_up: AtomicU64,
    /// Fleet mode: frames the router kept on the robot (no edge serves the model, none
    /// connected yet, or none could meet the deadline).
    pub fleet_on_robot: AtomicU64,
    /// Fleet mode with lanes: frames published after their deadline (a frame past its deadline
    /// does not hold the frames behind it; it is published when done).
    pub fleet_late: AtomicU64,
    /// Fleet mode: the upload rate measured to each edge, "edge=Mbit/s" comma-separated
    /// (edges measured in the last 10 s; an edge whose path is slower than the robot's own
    /// link is priced and planned at its own rate).
    pub fleet_link_mbps: std::sync::Mutex<String>,
}

impl RobotCounters {
    /// Bad input in all: frames that did not convert plus the backend's input faults.
    pub(super) fn bad_total(&self, faults: InputFaultCounts) -> u64 {
        self.bad_input.load(Ordering::Relaxed).saturating_add(faults.total())
    }

    /// Fleet mode: the per-edge upload rates for /diagnostics.
    pub(super) fn set_links(&self, links: &[(String, f64)]) {
        let text = links.iter().map(|(e, m)| format!("{e}={m:.1}")).collect::<Vec<_>>().join(",");
        *self.fleet_link_mbps.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = text;
    }

    /// The counters as /diagnostics' values (names and texts).
    pub(super) fn values(&self, faults: InputFaultCounts) -> Vec<(String, String)> {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let answered = g(&self.answered);
        let ms = |ns: u64| format!("{:.3}", ns as f64 * 1e-6);
        vec![
            ("frames_received".into(), g(&self.received).to_string()),
            ("frames_answered".into(), answered.to_string()),
            ("frames_dropped_busy".into(), g(&self.dropped_busy).to_string()),
            ("frames_skipped_disabled".into(), g(&self.skipped_disabled).to_string()),
            ("frames_skipped_inactive".into(), g(&self.skipped_inactive).to_string()),
            ("frames_bad".into(), self.bad_total(faults).to_string()),
            ("frames_unconvertible".into(), g(&self.bad_input).to_string()),
            ("wrong_type".into(), faults.wrong_type.to_string()),
            ("undecodable".into(), faults.undecodable.to_string()),
            ("fallbacks".into(), g(&self.fallbacks).to_string()),
            ("inference_errors".into(), g(&self.errors).to_string()),
            ("task_message_errors".into(), g(&self.task_message_errors).to_string()),
            ("debug_images".into(), g(&self.debug_images).to_string()),
            ("debug_image_errors".into(), g(&self.debug_image_errors).to_string()),
            ("debug_images_skipped".into(), g(&self.debug_images_skipped).to_string()),
            ("edge_connected".into(), self.connected.load(Ordering::Relaxed).to_string()),
            ("edge_frames_dropped".into(), g(&self.edge_frames_dropped).to_string()),
            ("fleet_edges_up".into(), g(&self.fleet_edges_up).to_string()),
            ("fleet_frames_on_robot".into(), g(&self.fleet_on_robot).to_string()),
            ("fleet_frames_late".into(), g(&self.fleet_late).to_string()),
            ("fleet_link_mbps".into(), self.fleet_link_mbps.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()),
            ("bucket_mb_s".into(), f64::from_bits(g(&self.bucket_bits)).to_string()),
            ("frame_ratio".into(), format!("{:.4}", f64::from_bits(g(&self.frame_ratio_bits)))),
            ("ros_latency_ms_last".into(), ms(g(&self.ros_ns_last))),
            ("ros_latency_ms_max".into(), ms(g(&self.ros_ns_max))),
            ("ros_latency_ms_mean".into(), ms(g(&self.ros_ns_sum).checked_div(answered).unwrap_or(0))),
        ]
    }
}
