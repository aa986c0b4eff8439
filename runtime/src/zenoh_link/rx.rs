//! The receiving half of a Zenoh link ([`ZenohRx`]): what its subscriber callbacks queued,
//! through a channel, until the peer is gone and the queue is drained. On the robot it also
//! tells whether the edge has been seen alive; on the edge it is one session's uplink.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use zenoh::pubsub::Subscriber;

use super::admission::QueueShare;
use super::peer::{PeerState, lock};
use super::robot_inbox::RobotInbox;
use crate::error::Result;
use crate::link::{Counters, LinkRx, Traffic};

/// Receiving half of a Zenoh link: messages from a subscriber, through a channel.
pub struct ZenohRx {
    /// What this half receives from, for logs and `Debug`.
    pub(super) key: String,
    pub(super) inbox: mpsc::UnboundedReceiver<Vec<u8>>,
    pub(super) peer: Arc<PeerState>,
    pub(super) counters: Counters,
    /// Robot side: the data and liveliness subscribers, undeclared when the rx is dropped.
    pub(super) _subscribers: Vec<Subscriber<()>>,
    /// Robot side: what the subscribers saw of the edge's liveliness.
    pub(super) edge: Option<Arc<RobotInbox>>,
    /// The bytes queued for this rx, released as they are received.
    pub(super) queued: Option<QueueShare>,
}

impl Drop for ZenohRx {
    /// What is still queued goes with the inbox, so its bytes leave the budgets.
    fn drop(&mut self) {
        if let Some(q) = &self.queued {
            // Closed first, so that no frame arrives between the release and the drop.
            self.inbox.close();
            q.release_all();
        }
    }
}

impl fmt::Debug for ZenohRx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZenohRx")
            .field("key", &self.key)
            .field("peer_gone", &self.peer.is_gone())
            .field("received", &self.received())
            .finish()
    }
}

impl ZenohRx {
    /// The key this half receives from (an edge session's rx also yields its Hello, received on
    /// `lop/v1/<robot>/hello`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether the peer is known to be gone (messages received before may still be waiting).
    pub fn peer_gone(&self) -> bool {
        self.peer.is_gone()
    }

    /// Robot side: whether the edge's liveliness token has been seen (its subscriptions are
    /// then known to this session, so a Hello sent now reaches it). Always true on the edge side.
    pub fn edge_seen(&self) -> bool {
        self.edge.as_ref().is_none_or(|e| lock(&e.edge).seen)
    }

    /// Waits up to `limit` until [`edge_seen`](Self::edge_seen); whether it was.
    pub async fn wait_edge_seen(&self, limit: Duration) -> bool {
        let t0 = tokio::time::Instant::now();
        while !self.edge_seen() {
            if t0.elapsed() >= limit || self.peer_gone() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }
}

impl LinkRx for ZenohRx {
    /// The next message, or `Ok(None)` once the peer is gone (module docs) and everything received
    /// before has been delivered. Cancel-safe (a tokio channel). Never `Err`.
    async fn recv(&mut self) -> Result<Option<Vec<u8>>> {
        Ok(self.inbox.recv().await.inspect(|bytes| {
            self.counters.add(bytes.len());
            if let Some(q) = &self.queued {
                q.release(bytes.len());
            }
        }))
    }

    fn received(&self) -> Traffic {
        self.counters.snapshot()
    }
}
