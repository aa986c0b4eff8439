//! The node's subscriptions: its input (camera frames, raw or compressed, or LiDAR sweeps) put
//! in the one-slot mailbox, and the bandwidth predictions that pick each frame's bucket.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::frame::Frame;
use super::shared::Shared;
use crate::backend::{SharedRos, Subscription};
use crate::config::{InputKind, RobotConfig, Sensor, Transport};
use crate::error::Result;
use crate::live::DropPolicy;

/// Subscribes input `sensor` (a camera or the LiDAR) into its own `shared` mailbox: the callback only counts the frame, stamps its
/// arrival and puts it in the mailbox (dropped unread while the node is not active or is
/// disabled; `drop_policy` says which
/// frame a full mailbox keeps, the other counted as dropped-busy).
///
/// # Errors
/// A topic the backend refuses.
pub(super) fn subscribe_input(cfg: &RobotConfig, ros: &SharedRos, shared: &Shared, sensor: &Sensor) -> Result<Subscription> {
    let put = {
        let (mailbox, counters, live, active) =
            (shared.mailbox.clone(), shared.counters.clone(), shared.live.clone(), shared.active.clone());
        move |f: Frame| {
            counters.received.fetch_add(1, Ordering::Relaxed);
            if !active.load(Ordering::Relaxed) {
                counters.skipped_inactive.fetch_add(1, Ordering::Relaxed);
                return;
            }
            if !live.enabled() {
                counters.skipped_disabled.fetch_add(1, Ordering::Relaxed);
                return;
            }
            let dropped = match live.drop_policy() {
                DropPolicy::Newest => mailbox.put(f),
                DropPolicy::Oldest => mailbox.put_if_empty(f),
            };
            if dropped.is_some() {
                counters.dropped_busy.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    Ok(match cfg.input {
        InputKind::Camera => {
            let topic = sensor.input_topic();
            match sensor.transport {
                Transport::Raw => ros.subscribe_images(&topic, cfg.input_qos, Box::new(move |m| put(Frame::Image(m, Instant::now()))))?,
                Transport::Compressed => {
                    ros.subscribe_compressed(&topic, cfg.input_qos, Box::new(move |m| put(Frame::Compressed(m, Instant::now()))))?
                }
            }
        }
        InputKind::Lidar => ros.subscribe_clouds(&sensor.topic, cfg.input_qos, Box::new(move |m| put(Frame::Cloud(m, Instant::now()))))?,
    })
}

/// Subscribes the bandwidth predictions: the latest one picks each frame's bucket.
///
/// # Errors
/// A topic the backend refuses.
pub(super) fn subscribe_bandwidth(cfg: &RobotConfig, ros: &SharedRos, shared: &Shared) -> Result<Subscription> {
    let latest = shared.latest_mbps.clone();
    ros.subscribe_bandwidth(
        &cfg.topics.bandwidth,
        Box::new(move |b| {
            *latest.lock().unwrap_or_else(PoisonError::into_inner) = Some(b.prediction_mbps);
        }),
    )
}
