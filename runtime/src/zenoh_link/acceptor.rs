//! The edge's side of the Zenoh link ([`EdgeAcceptor`]): declares the edge's liveliness token
//! and the subscribers whose callbacks ([`super::edge_shared`]) turn Hellos into sessions, and
//! hands each session out as an [`EdgeConn`] with its own sending half. The top of the link's
//! files: it builds on every other one.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lop_msgs::key::{ALL_ALIVE, SessionKeys};
use tokio::sync::mpsc;
use zenoh::liveliness::LivelinessToken;
use zenoh::pubsub::Subscriber;

use super::admission::QueueShare;
use super::edge_shared::{EdgeShared, Pending};
use super::rx::ZenohRx;
use super::tx::ZenohTx;
use crate::error::{Error, Result};
use crate::link::Counters;

/// One robot session accepted by an [`EdgeAcceptor`].
#[derive(Debug)]
pub struct EdgeConn {
    /// The robot id from the Hello.
    pub robot_id: String,
    /// Publishes on `lop/v1/<robot_id>/down`.
    pub tx: ZenohTx,
    /// The session's Hello frame first, then the frames of `lop/v1/<robot_id>/up`; `Ok(None)` once
    /// the session ended (module docs).
    pub rx: ZenohRx,
}

/// Version refusals waiting to be published; more are dropped (each is one Reject frame).
const REFUSALS_QUEUED: usize = 16;

/// The edge's side of the Zenoh link: declares the edge's liveliness token, subscribes Hello
/// frames, every robot's uplink and every robot's liveliness, and turns each Hello into an
/// [`EdgeConn`] (module docs). Dropping it undeclares everything and ends every session.
pub struct EdgeAcceptor {
    session: zenoh::Session,
    keys: SessionKeys,
    /// Only the callbacks hold the [`EdgeShared`], so that when Zenoh drops them (session closed)
    /// the pending channel closes and [`accept`](EdgeAcceptor::accept) returns `None`.
    dropped: Arc<AtomicU64>,
    /// Hellos refused past a cap ([`admission`](super::admission)).
    sessions_refused: Arc<AtomicU64>,
    pending: mpsc::UnboundedReceiver<Pending>,
    /// Bytes all sessions' sending halves hold (at most [`admission::TOTAL_OUT_BYTES`](super::admission::TOTAL_OUT_BYTES)).
    out_total: Arc<AtomicUsize>,
    _subscribers: Vec<Subscriber<()>>,
    _token: LivelinessToken,
}

impl fmt::Debug for EdgeAcceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EdgeAcceptor").field("zid", &self.session.zid()).field("dropped", &self.dropped()).finish()
    }
}

impl EdgeAcceptor {
    /// Declares the subscribers, then the edge's liveliness token `lop/v1/edge/alive` (so a robot
    /// that sees the edge alive finds its subscribers in place).
    ///
    /// # Errors
    ///
    /// [`Error::Zenoh`] when a declaration fails.
    pub async fn new(session: &zenoh::Session) -> Result<EdgeAcceptor> {
        EdgeAcceptor::on(session, SessionKeys::single()).await
    }

    /// [`EdgeAcceptor::new`] in the key space `keys` (a fleet edge's: only robots that address
    /// this edge by its id reach it).
    ///
    /// # Errors
    ///
    /// [`Error::Zenoh`] when a declaration fails.
    pub async fn on(session: &zenoh::Session, keys: SessionKeys) -> Result<EdgeAcceptor> {
        let (pending_tx, pending) = mpsc::unbounded_channel();
        let dropped = Arc::new(AtomicU64::new(0));
        let token_key = keys.token();
        let (refusals, to_refuse) = mpsc::channel::<(String, Vec<u8>)>(REFUSALS_QUEUED);
        let sessions_refused = Arc::new(AtomicU64::new(0));
        let shared = Arc::new(EdgeShared {
            keys: keys.clone(),
            robots: Mutex::new(HashMap::new()),
            pending: pending_tx,
            dropped: dropped.clone(),
            refusals,
            queued_total: Arc::default(),
            sessions_refused: sessions_refused.clone(),
        });
        // Subscriber callbacks must not block: the refusals go out from a task of their own, which
        // ends with the acceptor (its sender is in the subscribers' callbacks).
        spawn_refusals(session.clone(), to_refuse);
        let subscribers = subscribe(session, shared, &keys).await?;
        let token = session
            .liveliness()
            .declare_token(token_key.clone())
            .await
            .map_err(|e| Error::Zenoh(format!("declaring liveliness token {token_key}: {e}")))?;
        tracing::debug!(zid = %session.zid(), edge = ?keys.edge(), "zenoh edge acceptor declared");
        Ok(EdgeAcceptor {
            session: session.clone(),
            keys,
            dropped,
            sessions_refused,
            pending,
            out_total: Arc::default(),
            _subscribers: subscribers,
            _token: token,
        })
    }

    /// The next robot session, started by a valid Hello; its rx yields that Hello first. `None`
    /// once the Zenoh session is closed. Cancel-safe: a session not yet returned stays queued.
    ///
    /// A session may already have ended when it is returned (a newer Hello of the same robot came
    /// first): its rx then yields its Hello and `Ok(None)`.
    pub async fn accept(&mut self) -> Option<EdgeConn> {
        loop {
            let p = self.pending.recv().await?;
            let down = match self.keys.down(&p.robot_id) {
                Ok(k) => k,
                Err(e) => {
                    // The id was validated with the Hello; this is unreachable in practice.
                    tracing::warn!(robot = %p.robot_id, "no downlink key: {e}");
                    continue;
                }
            };
            match ZenohTx::new(&self.session, (&down, None), p.peer.clone(), None, QueueShare::outbound(&self.out_total)).await {
                Ok(tx) => {
                    let up = self.keys.up(&p.robot_id).unwrap_or_default();
                    let rx = ZenohRx {
                        key: up,
                        inbox: p.inbox,
                        peer: p.peer,
                        counters: Counters::default(),
                        _subscribers: Vec::new(),
                        edge: None,
                        queued: Some(p.queued),
                    };
                    return Some(EdgeConn { robot_id: p.robot_id, tx, rx });
                }
                Err(e) => {
                    // The session is closing (or Zenoh refuses publishers): nothing can be served.
                    tracing::warn!(robot = %p.robot_id, "cannot serve the session: {e}");
                    if self.session.is_closed() {
                        return None;
                    }
                }
            }
        }
    }

    /// Messages dropped so far: garbage on the hello key and frames from robots without a session.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Where Hellos refused past a cap ([`admission`](super::admission)) are counted, for the edge's counts.
    pub fn refusal_counter(&self) -> Arc<AtomicU64> {
        self.sessions_refused.clone()
    }
}

/// Publishes the refusals the callbacks queue (downlink key, Reject frame), from a task that
/// ends once every sender (the callbacks') is gone.
fn spawn_refusals(publisher: zenoh::Session, mut to_refuse: mpsc::Receiver<(String, Vec<u8>)>) {
    tokio::spawn(async move {
        while let Some((down, bytes)) = to_refuse.recv().await {
            if let Err(e) = publisher.put(&down, bytes).await {
                tracing::debug!(key = %down, "refusal not sent: {e}");
            }
        }
    });
}

/// Declares the acceptor's subscribers, each calling into `shared`: every robot's liveliness,
/// every robot's uplink, then the Hello key (in that order, so a Hello finds the others in place).
async fn subscribe(session: &zenoh::Session, shared: Arc<EdgeShared>, keys: &SessionKeys) -> Result<Vec<Subscriber<()>>> {
    let (all_up, hello_key) = (keys.all_up(), keys.all_hello());
    let s = shared.clone();
    let live = session
        .liveliness()
        .declare_subscriber(ALL_ALIVE)
        .history(true)
        .callback(move |sample| s.on_robot_liveliness(&sample))
        .await
        .map_err(|e| Error::Zenoh(format!("subscribing liveliness {ALL_ALIVE}: {e}")))?;
    let s = shared.clone();
    let up = session
        .declare_subscriber(all_up.clone())
        .callback(move |sample| s.on_up(&sample))
        .await
        .map_err(|e| Error::Zenoh(format!("subscribing {all_up}: {e}")))?;
    let s = shared;
    let hello = session
        .declare_subscriber(hello_key.clone())
        .callback(move |sample| s.on_hello(&sample))
        .await
        .map_err(|e| Error::Zenoh(format!("subscribing {hello_key}: {e}")))?;
    Ok(vec![live, up, hello])
}
