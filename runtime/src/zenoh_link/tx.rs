//! The sending half of a Zenoh link ([`ZenohTx`]): `send` sorts a message by its priority,
//! charges its bytes to the link's queue budget and hands it to a sender lane ([`super::lanes`]),
//! or fails at once when the peer is gone, a publication failed, or a band would pass the
//! budget. Robot and edge ends both use it.

use std::fmt;
use std::sync::{Arc, mpsc as std_mpsc};

use zenoh::liveliness::LivelinessToken;

use super::admission::QueueShare;
use super::lanes::{BULK_PRIORITY, CONTROL_PRIORITY, LaneKind, LaneMsg, LanePublishers, Lanes, declare_publisher, spawn_lane};
use super::peer::{PeerState, lock};
use crate::error::{Error, Result};
use crate::link::{Counters, LinkTx, Priority, Traffic};

/// Sending half of a Zenoh link: publishes on the peer's key (see the module docs).
pub struct ZenohTx {
    /// What this half publishes on, for logs and `Debug`.
    key: String,
    control: std_mpsc::Sender<LaneMsg>,
    bulk: std_mpsc::Sender<LaneMsg>,
    lanes: Arc<Lanes>,
    peer: Arc<PeerState>,
    counters: Counters,
    /// Bytes accepted and not yet handed to Zenoh, within their caps.
    queued: QueueShare,
}

impl fmt::Debug for ZenohTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZenohTx").field("key", &self.key).field("peer_gone", &self.peer.is_gone()).field("sent", &self.sent()).finish()
    }
}

impl ZenohTx {
    /// Declares the publishers (`hello` receives Hello frames, if given) and starts the sender
    /// threads; `token` lives until both threads have published everything. What waits in the
    /// lanes is charged to `queued`, whose caps bound the bands it accepts.
    pub(super) async fn new(
        session: &zenoh::Session,
        (key, hello): (&str, Option<&str>),
        peer: Arc<PeerState>,
        token: Option<LivelinessToken>,
        queued: QueueShare,
    ) -> Result<ZenohTx> {
        let control_main = declare_publisher(session, key, CONTROL_PRIORITY).await?;
        let hello = match hello {
            Some(h) => Some(declare_publisher(session, h, CONTROL_PRIORITY).await?),
            None => None,
        };
        let bulk_main = declare_publisher(session, key, BULK_PRIORITY).await?;
        let lanes = Arc::new(Lanes::default());
        let token = token.map(Arc::new);
        let control = spawn_lane(
            LaneKind::Control,
            format!("zenoh-tx-ctl {key}"),
            LanePublishers { main: control_main, hello },
            (lanes.clone(), queued.clone()),
            token.clone(),
        )?;
        let bulk = spawn_lane(
            LaneKind::Bulk,
            format!("zenoh-tx-bulk {key}"),
            LanePublishers { main: bulk_main, hello: None },
            (lanes.clone(), queued.clone()),
            token,
        )?;
        Ok(ZenohTx { key: key.to_string(), control, bulk, lanes, peer, counters: Counters::default(), queued })
    }

    /// The key this half publishes on (Hello frames of a robot go to `lop/v1/<robot>/hello` instead).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether the peer is known to be gone (then [`send`](LinkTx::send) fails with
    /// [`Error::Closed`]).
    pub fn peer_gone(&self) -> bool {
        self.peer.is_gone()
    }

    fn enqueue(&self, bytes: Vec<u8>) -> Result<()> {
        if self.peer.is_gone() {
            return Err(Error::Closed);
        }
        let n = bytes.len();
        let priority = Priority::of_frame_bytes(&bytes);
        let sent = {
            // Held while queueing, so that a band queued after a control frame counts it.
            let mut state = lock(&self.lanes.state);
            if let Some(what) = &state.failure {
                return Err(Error::Zenoh(what.clone()));
            }
            match priority {
                Priority::Control => {
                    self.queued.charge_always(n);
                    state.control_issued += 1;
                    self.control.send((0, bytes))
                }
                Priority::Bulk => {
                    self.queued.charge(n).map_err(|why| Error::QueueFull(format!("{}: {why}", self.key)))?;
                    self.bulk.send((state.control_issued, bytes))
                }
            }
        };
        if sent.is_err() {
            // The thread is gone with the frame: nothing will release it.
            self.queued.release(n);
            return Err(Error::Zenoh(format!("sender thread of {} stopped", self.key)));
        }
        self.counters.add(n);
        Ok(())
    }
}

impl LinkTx for ZenohTx {
    async fn send(&self, bytes: Vec<u8>) -> Result<()> {
        self.enqueue(bytes)
    }

    fn sent(&self) -> Traffic {
        self.counters.snapshot()
    }
}
