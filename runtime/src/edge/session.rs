//! One robot's session: the state a link's frames change (the model and plan book its Hello got,
//! the current inference ([`Active`]), its Start budget), and the frames that are not a Hello or a
//! Start: Cancel, bands, and anything out of place. A newer Start aborts an older inference, and so
//! does the robot's Cancel of it; frames of other inferences are stale and dropped.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use lop_msgs::Frame;
use lop_msgs::protocol::{Reject, RejectReason};
use tokio::sync::oneshot;

use super::replica::{JOB_QUEUED, JOB_RELEASED, Replica};
use super::start_budget::StartBudget;
use super::state::Inner;
use crate::exec::{Incoming, InputWire};
use crate::outbox::Outbox;
use crate::plans::{PlanBook, Prepared};
use crate::session::{Drop as Dropped, match_band};

/// A robot's session with the edge, from its link's first frame to its end.
pub(super) struct Session {
    pub(super) svc: Arc<Inner>,
    pub(super) out: Outbox,
    pub(super) model: Option<usize>,
    pub(super) book: Option<Arc<PlanBook>>,
    pub(super) input_wire: InputWire,
    pub(super) current: Option<Active>,
    pub(super) last_id: u64,
    pub(super) robot_id: String,
    pub(super) starts: StartBudget,
    /// Its Hello was refused: the session ends once the Reject is sent.
    pub(super) refused: bool,
}

/// The session's current inference, queued or running on a replica, as the session sees it: its
/// bands go here (its task, `job`'s, sees the rest).
pub(super) struct Active {
    pub(super) id: u64,
    pub(super) plan: Arc<Prepared>,
    pub(super) bands: mpsc::Sender<Incoming>,
    pub(super) received: Vec<bool>,
    /// [`JOB_QUEUED`], [`JOB_RUNNING`](super::replica::JOB_RUNNING) or [`JOB_RELEASED`].
    pub(super) state: Arc<AtomicU8>,
    /// The replicas (the snapshot it was queued on) and the one whose queue count this job
    /// holds until it ends or is released.
    pub(super) replicas: Arc<Vec<Replica>>,
    pub(super) replica: usize,
    /// Sends the job to its replica; taken by the first band.
    pub(super) go: Option<oneshot::Sender<()>>,
    /// Whether its session paid [`EMPTY_START_PENALTY`](super::EMPTY_START_PENALTY) for it.
    pub(super) charged: bool,
    /// When its Start arrived, and the last band's arrival after it (ns; 0 before any band):
    /// the upload as this edge saw it, reported in Done as `upload_ns`.
    pub(super) arrived: Instant,
    pub(super) upload_ns: Arc<AtomicU64>,
}

impl Session {
    /// A new session answering on `out`, waiting for its Hello.
    pub(super) fn new(svc: Arc<Inner>, out: Outbox) -> Session {
        Session {
            svc,
            out,
            model: None,
            book: None,
            input_wire: InputWire::Native,
            current: None,
            last_id: 0,
            robot_id: String::new(),
            starts: StartBudget::new(tokio::time::Instant::now()),
            refused: false,
        }
    }

    /// Sends a frame to the robot (an encoding failure is logged: it is a bug).
    pub(super) fn send(&self, f: Frame) {
        match f.encode() {
            Ok(b) => {
                self.out.send(b);
            }
            Err(e) => tracing::error!(error = %e, "encoding a frame"),
        }
    }

    /// Refuses the Hello with `reason` (see [`Session::reject_with`]).
    pub(super) fn reject(&mut self, reason: RejectReason, text: String) {
        self.reject_with(reason, text, Vec::new());
    }

    /// Refuses the Hello with `reason`, `text` (cut to 200 characters) and the edge's profile
    /// (empty but for `Planning`), counted by reason; the session ends once the Reject is sent.
    pub(super) fn reject_with(&mut self, reason: RejectReason, text: String, server_profile: Vec<u8>) {
        self.refused = true;
        tracing::info!(?reason, %text, "rejecting a session");
        self.svc.rejected.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.svc.rejects.get(reason as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let text: String = text.chars().take(200).collect();
        self.send(Frame::Reject(Reject { reason, text, server_profile }));
    }

    /// Stops the current inference; whether it was still queued or running (a job that ended
    /// has dropped its band channel).
    pub(super) fn abort_current(&mut self, why: &str) -> bool {
        let Some(a) = self.current.take() else { return false };
        // Not started yet: it no longer counts as queued work; the replica skips it.
        let queued = a.state.compare_exchange(JOB_QUEUED, JOB_RELEASED, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        if queued {
            a.replicas[a.replica].queued.fetch_sub(1, Ordering::Relaxed);
        }
        let running = a.bands.send(Incoming::Abort(why.to_string())).is_ok();
        queued || running
    }

    /// A control frame: Hello, Start or Cancel; any other is counted as unexpected.
    pub(super) async fn control(&mut self, f: Frame) {
        match f {
            Frame::Hello(h) => self.hello(h).await,
            Frame::Start(s) => self.start(s),
            Frame::Cancel(c) => self.cancel(c.inference_id),
            _ => self.svc.stats.count(Dropped::Unexpected),
        }
    }

    /// The robot computed this inference's answer itself (past the frame's deadline): stop
    /// working on it, so that the replica serves other frames. A Cancel of an inference that
    /// is not this session's current one (finished, replaced) is stale and changes nothing.
    fn cancel(&mut self, id: u64) {
        if self.current.as_ref().is_some_and(|a| a.id == id) && self.abort_current("cancelled by the robot") {
            tracing::debug!(inference = id, "cancelled by the robot");
            self.svc.cancelled.fetch_add(1, Ordering::Relaxed);
            if let Some(m) = self.model.and_then(|mi| self.svc.models.get(mi)) {
                m.refusals.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            self.svc.stats.count(Dropped::Stale);
        }
    }

    /// A band: given to the current inference when it is that one's and expected by its plan
    /// (the first sends the job to its replica); else counted as dropped.
    pub(super) fn band(&mut self, id: u64, frame: Vec<u8>) {
        let stats = &self.svc.stats;
        let Some(a) = self.current.as_mut().filter(|a| a.id == id) else {
            stats.count(Dropped::Stale);
            return;
        };
        if let Some(b) = match_band(&self.svc.opts.limits, &a.plan, true, frame, &mut a.received, stats) {
            a.upload_ns.store(u64::try_from(a.arrived.elapsed().as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
            let _ = a.bands.send(Incoming::Band(b));
            if let Some(go) = a.go.take() {
                let _ = go.send(());
            }
        }
    }
}
