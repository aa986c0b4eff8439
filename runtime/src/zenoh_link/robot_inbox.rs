//! The robot's receiving side as its subscriber callbacks see it ([`RobotInbox`]): frames from
//! the edge go into a bounded inbox ([`ROBOT_INBOX_BYTES`]), and the edge's liveliness tells
//! when the edge is gone. Below both the receiving half that reads it and the robot link that
//! declares its subscribers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use zenoh::sample::{Sample, SampleKind};

use super::admission::{QueueShare, SESSION_QUEUE_BYTES};
use super::peer::{PeerState, TokenCount, lock};

/// Bytes a robot's receiving half may hold received and not yet taken: 128 MiB, as an edge
/// session's. Past it (the robot's inference loop stalled, or a flood on its downlink key) a
/// frame is dropped and counted; the inference missing it finishes on the robot, marked.
pub const ROBOT_INBOX_BYTES: usize = SESSION_QUEUE_BYTES;

/// State of a robot's rx shared with its subscriber callbacks.
#[derive(Debug)]
pub(super) struct RobotInbox {
    /// `None` once the edge is gone.
    pub(super) inbox: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    pub(super) edge: Mutex<TokenCount>,
    pub(super) peer: Arc<PeerState>,
    pub(super) robot_id: String,
    /// Bytes in `inbox` not yet received (at most [`ROBOT_INBOX_BYTES`]).
    pub(super) queued: QueueShare,
    /// Frames dropped past that budget.
    pub(super) dropped: AtomicU64,
}

impl RobotInbox {
    pub(super) fn on_data(&self, sample: &Sample) {
        if sample.kind() != SampleKind::Put {
            return;
        }
        let bytes = sample.payload().to_bytes().into_owned();
        let n = bytes.len();
        match lock(&self.inbox).as_ref() {
            Some(inbox) => match self.queued.charge(n) {
                Ok(()) => {
                    if inbox.send(bytes).is_err() {
                        // The rx is gone; nothing to deliver to.
                        self.queued.release(n);
                    }
                }
                Err(why) => {
                    if self.dropped.fetch_add(1, Ordering::Relaxed).is_multiple_of(100) {
                        tracing::warn!(robot = %self.robot_id, bytes = n, "frame from the edge dropped: {why}");
                    }
                }
            },
            None => tracing::debug!(robot = %self.robot_id, bytes = n, "frame from a gone edge dropped"),
        }
    }

    pub(super) fn on_edge_liveliness(&self, sample: &Sample) {
        let mut edge = lock(&self.edge);
        let gone = edge.apply(sample.kind()) && edge.seen;
        tracing::debug!(robot = %self.robot_id, kind = ?sample.kind(), alive = edge.alive, "edge liveliness");
        if gone {
            drop(edge);
            tracing::info!(robot = %self.robot_id, "edge gone (its liveliness token disappeared)");
            self.peer.set_gone();
            lock(&self.inbox).take();
        }
    }
}
