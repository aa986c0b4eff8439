//! The session with the edge: opening a link and greeting the edge (an attempt, in the
//! background once the client runs), reconnecting when it is gone, and the link's two tasks: the
//! writer, and the reader, which routes the edge's frames to the inference they belong to
//! ([`Shared`]), wakes whoever waits for a Done ([`Conn::done_seen`]), and drops the others.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::Instant;

use lop_msgs::Frame;
use lop_msgs::protocol::{DoneStats, Forward, Limits, Reject, RejectReason};
use tokio::sync::{Notify, mpsc as tmpsc, oneshot};
use tokio::task::JoinHandle;

use super::{Connector, RobotClient};
use crate::bandwidth::upload;
use crate::error::{Error, Result};
use crate::exec::Incoming;
use crate::link::{LinkRx, LinkTx};
use crate::plans::Prepared;
use crate::session::{Drop as Dropped, FrameStats, Inbound, classify, match_band};

/// Where the bands of the inference in flight go, and which it has received.
pub(super) struct Route {
    pub(super) id: u64,
    pub(super) plan: Arc<Prepared>,
    pub(super) bands: mpsc::Sender<Incoming>,
    pub(super) received: Vec<bool>,
}

/// What the reader shares with the client: the route of the inference in flight and what the
/// edge said of it, the Hello's waiter, and the upload rates read from Dones.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) route: Option<Route>,
    pub(super) done: Option<(u64, DoneStats)>,
    /// The edge's Forward of the inference in `route`.
    pub(super) forward: Option<Forward>,
    /// The last inference that ended: its Done or Error may still arrive (a control frame
    /// can trail the final bands), and is not a bad frame.
    pub(super) last_ended: u64,
    pub(super) welcome: Option<oneshot::Sender<Frame>>,
    /// The last inference that ended before its Done came: its id, bytes sent and send span,
    /// to read its upload rate from a Done that trails it.
    pub(super) sent: Option<(u64, u64, f64)>,
    /// The upload rate the latest Done measured, Mbit/s ([`RobotClient::take_upload_mbps`]).
    pub(super) upload_mbps: Option<f64>,
}

/// A session with the edge: the writer's queue, the shared state, and its two tasks (aborted
/// when it is dropped).
pub(super) struct Conn {
    pub(super) out: tmpsc::UnboundedSender<Vec<u8>>,
    pub(super) shared: Arc<Mutex<Shared>>,
    pub(super) gone: Arc<AtomicBool>,
    /// Woken (all waiters) by the reader each time a Done has been taken in, and when the link
    /// ends: an inference that ended at the edge's last band waits on it for the Done that
    /// trails that band.
    pub(super) done_seen: Arc<Notify>,
    pub(super) tasks: [JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Locks the shared state (a panicked holder's state is still good).
pub(super) fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C: Connector> RobotClient<C> {
    /// Whether a session with the edge is up.
    pub fn connected(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| !c.gone.load(Ordering::SeqCst))
    }

    pub(super) fn attempt(&self) -> impl Future<Output = Result<Conn>> + Send + 'static {
        let (connector, hello, stats, limits, timeout) =
            (self.connector.clone(), self.hello.clone(), self.stats.clone(), self.opts.limits, self.opts.hello_timeout);
        let table_hash = self.book.table_hash;
        async move {
            // Connecting may wait for the edge (a Zenoh link waits for its token): within the
            // same time as the Hello's answer.
            let (tx, rx) = tokio::time::timeout(timeout, connector.connect())
                .await
                .map_err(|_| Error::Protocol(format!("no edge found within {timeout:?}")))??;
            let shared = Arc::new(Mutex::new(Shared::default()));
            let gone = Arc::new(AtomicBool::new(false));
            let done_seen = Arc::new(Notify::new());
            let (welcome_tx, welcome_rx) = oneshot::channel();
            lock(&shared).welcome = Some(welcome_tx);
            let (out, out_rx) = tmpsc::unbounded_channel();
            let writer = tokio::spawn(write_loop(tx, out_rx, gone.clone()));
            let reader = tokio::spawn(read_loop(
                rx,
                Reader { shared: shared.clone(), gone: gone.clone(), done_seen: done_seen.clone() },
                stats,
                limits,
            ));
            let conn = Conn { out, shared, gone, done_seen, tasks: [writer, reader] };
            let _ = conn.out.send(hello.encode()?);
            match tokio::time::timeout(timeout, welcome_rx).await {
                Ok(Ok(Frame::Welcome(w))) if w.table_hash == table_hash => Ok(conn),
                Ok(Ok(Frame::Welcome(w))) => {
                    Err(Error::TableMismatch { edge: w.table_hash.to_hex(), ours: table_hash.to_hex(), server_profile: w.server_profile })
                }
                Ok(Ok(Frame::Reject(r))) if r.reason == RejectReason::Planning => {
                    tracing::info!(text = %r.text, "the edge is building the schedule table for this robot; running alone until it is ready");
                    Err(Error::EdgePlanning { text: r.text, server_profile: r.server_profile })
                }
                Ok(Ok(Frame::Reject(r))) if r.reason == RejectReason::Loading => {
                    tracing::info!(text = %r.text, "the edge is loading the model; running alone until it is warm");
                    Err(Error::Protocol(format!("the edge is loading the model: {}", r.text)))
                }
                Ok(Ok(Frame::Reject(r))) => Err(Error::Protocol(format!("the edge refused: {:?}: {}", r.reason, r.text))),
                Ok(_) => Err(Error::Closed),
                Err(_) => Err(Error::Protocol(format!("no answer to Hello within {timeout:?}"))),
            }
        }
    }

    /// Moves the connection along without running an inference: takes a finished background
    /// attempt or replanned table into use, or starts a new attempt when one is due. Never
    /// waits for the edge. True if a session is up now.
    pub async fn poll_connection(&mut self) -> bool {
        self.ensure_connected().await
    }

    /// The upload rate to the edge that the latest measured inference showed, Mbit/s, once
    /// (`None` when no inference since the last call measured one: see
    /// [`crate::bandwidth::upload`]). Its Done may trail the inference, so it can come later
    /// than the inference's own stats.
    pub fn take_upload_mbps(&self) -> Option<f64> {
        self.conn.as_ref().and_then(|c| lock(&c.shared).upload_mbps.take())
    }

    /// Makes sure a session is up or being set up in the background; true if it is up now.
    pub(super) async fn ensure_connected(&mut self) -> bool {
        if self.connected() {
            return true;
        }
        self.conn = None;
        self.finish_replan().await;
        if let Some(p) = self.pending.take_if(|p| p.is_finished()) {
            let attempt = p.await;
            self.last_connect_error = match &attempt {
                Ok(Ok(_)) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(e) => Some(e.to_string()),
            };
            match attempt {
                Ok(Ok(conn)) => {
                    tracing::info!("reconnected to the edge");
                    self.conn = Some(conn);
                    return true;
                }
                Ok(Err(Error::TableMismatch { edge, ours, server_profile })) => {
                    tracing::debug!(%edge, %ours, "the edge planned another schedule table");
                    self.start_replan(&server_profile);
                }
                Ok(Err(Error::EdgePlanning { server_profile, .. })) if !server_profile.is_empty() => self.start_replan(&server_profile),
                Ok(Err(e)) => tracing::debug!(error = %e, "reconnection failed"),
                Err(e) => tracing::debug!(error = %e, "reconnection task failed"),
            }
        }
        // No new Hello while the edge's table is being planned: it would be welcomed with the
        // same table again.
        if self.replanning.is_some() {
            return false;
        }
        if self.pending.is_none() && self.last_attempt.is_none_or(|t| t.elapsed() >= self.opts.retry_interval) {
            self.last_attempt = Some(Instant::now());
            self.pending = Some(tokio::spawn(self.attempt()));
        }
        false
    }
}

/// Sends what the client queues until the link fails (the session is then gone).
async fn write_loop<T: LinkTx>(tx: T, mut out: tmpsc::UnboundedReceiver<Vec<u8>>, gone: Arc<AtomicBool>) {
    while let Some(b) = out.recv().await {
        if tx.send(b).await.is_err() {
            gone.store(true, Ordering::SeqCst);
            break;
        }
    }
}

/// What the reader writes to: the shared state, the session's end, and the Done's waiters.
struct Reader {
    shared: Arc<Mutex<Shared>>,
    gone: Arc<AtomicBool>,
    done_seen: Arc<Notify>,
}

/// Reads the edge's frames until the link ends (the session is then gone, and the inference in
/// flight is told so, as is whoever waits for a Done).
async fn read_loop<R: LinkRx>(mut rx: R, reader: Reader, stats: Arc<FrameStats>, limits: Limits) {
    let Reader { shared, gone, done_seen } = reader;
    loop {
        let bytes = match rx.recv().await {
            Ok(Some(b)) => b,
            Ok(None) | Err(_) => break,
        };
        if let Err(lop_msgs::Error::UnsupportedVersion { found, supported }) = limits.header(&bytes) {
            // An edge of another release: the header's layout is the same in every version, so
            // the robot can say which one it speaks (to the Hello's waiter, as a refusal).
            stats.count(Dropped::Malformed);
            if let Some(w) = lock(&shared).welcome.take() {
                let text = format!(
                    "the edge speaks protocol version {found}, this robot speaks {supported}; run the same lop release on robot and edge"
                );
                let _ = w.send(Frame::Reject(Reject { reason: RejectReason::UnsupportedVersion, text, server_profile: Vec::new() }));
            }
            continue;
        }
        let Some(inbound) = classify(&limits, bytes, &stats) else { continue };
        let done = matches!(inbound, Inbound::Control(Frame::Done(_)));
        take_in(&mut lock(&shared), inbound, &stats, &limits);
        if done {
            done_seen.notify_waiters();
        }
    }
    gone.store(true, Ordering::SeqCst);
    if let Some(r) = &lock(&shared).route {
        let _ = r.bands.send(Incoming::Abort("the edge went away".into()));
    }
    done_seen.notify_waiters();
}

/// Routes one frame from the edge: Welcome or Reject to the Hello's waiter, Done, Forward and
/// Error of the inference in flight (or of the last one, trailing it), bands to its executor;
/// anything else is counted as dropped.
fn take_in(sh: &mut Shared, inbound: Inbound, stats: &FrameStats, limits: &Limits) {
    match inbound {
        Inbound::Control(f @ (Frame::Welcome(_) | Frame::Reject(_))) => match sh.welcome.take() {
            Some(w) => {
                let _ = w.send(f);
            }
            None => stats.count(Dropped::Unexpected),
        },
        Inbound::Control(Frame::Done(d)) => match &sh.route {
            Some(r) if r.id == d.inference_id => sh.done = Some((d.inference_id, d.stats)),
            _ if sh.last_ended == d.inference_id => match sh.sent.take_if(|s| s.0 == d.inference_id) {
                Some((_, bytes, span)) => {
                    let up = d.stats.upload_ns as f64 * 1e-9;
                    sh.upload_mbps = upload::upload_mbps(bytes, up, span).or(sh.upload_mbps);
                }
                None => sh.done = Some((d.inference_id, d.stats)),
            },
            _ => stats.count(Dropped::Stale),
        },
        Inbound::Control(Frame::Forward(f)) => match &sh.route {
            Some(r) if r.id == f.inference_id => {
                let _ = r.bands.send(Incoming::Abort(format!("the edge forwarded it to edge '{}'", f.to)));
                sh.forward = Some(f);
            }
            _ if sh.last_ended == f.inference_id => {}
            _ => stats.count(Dropped::Stale),
        },
        Inbound::Control(Frame::Error(e)) => match &sh.route {
            Some(r) if r.id == e.inference_id => {
                let _ = r.bands.send(Incoming::Abort(format!("edge error {:?}: {}", e.code, e.text)));
            }
            _ if sh.last_ended == e.inference_id => {}
            _ => stats.count(Dropped::Stale),
        },
        Inbound::Control(_) => stats.count(Dropped::Unexpected),
        Inbound::Band(id, frame) => match sh.route.as_mut() {
            Some(r) if r.id == id => {
                if let Some(b) = match_band(limits, &r.plan, false, frame, &mut r.received, stats) {
                    let _ = r.bands.send(Incoming::Band(b));
                }
            }
            _ => stats.count(Dropped::Stale),
        },
    }
}
