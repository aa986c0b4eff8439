//! Admitting a Start: dropped when out of place or over the session's Start budget
//! ([`start_budget`](super::start_budget): a token bucket against floods, [`MAX_STARTS_PER_S`]);
//! else it replaces the session's current inference and is answered at once (shutting down,
//! unknown plan, the model unloaded, or as [`forwarding`](super::forwarding) routes it) or queued
//! on the replica that will finish it first (see [`job`](super::job)).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use lop_msgs::Frame;
use lop_msgs::protocol::{ErrorCode, ErrorFrame, Start};

use super::replica::{Replica, finishes_first};
use super::session::Session;
use super::start_budget::{EMPTY_START_PENALTY, MAX_STARTS_PER_S};
use crate::plans::{PlanBook, Prepared};
use crate::session::Drop as Dropped;

/// The answer to a Start as an Error frame.
pub(super) fn error_frame(s: &Start, code: ErrorCode, text: String) -> Frame {
    Frame::Error(ErrorFrame { inference_id: s.inference_id, code, text })
}

/// A Start this edge serves: its plan and the replica it is queued on (in the snapshot of the
/// model's replicas it was chosen from).
pub(super) struct Admitted {
    pub(super) plan: Arc<Prepared>,
    pub(super) replicas: Arc<Vec<Replica>>,
    pub(super) replica: usize,
}

impl Session {
    /// A Start: dropped when out of place (no session yet, or stale) or over the session's
    /// Start budget; else it aborts the current inference and is either answered at once
    /// ([`Session::admit`]) or queued ([`Session::queue`]).
    pub(super) fn start(&mut self, s: Start) {
        let (Some(book), Some(mi)) = (self.book.clone(), self.model) else {
            self.svc.stats.count(Dropped::Unexpected);
            return;
        };
        if s.inference_id <= self.last_id {
            self.svc.stats.count(Dropped::Stale);
            return;
        }
        if !self.take_start() {
            return;
        }
        self.abort_current("a newer inference started");
        self.last_id = s.inference_id;
        if let Some(admitted) = self.admit(&s, &book, mi) {
            self.queue(&s, mi, admitted);
        }
    }

    /// Takes a Start from the session's budget, charging [`EMPTY_START_PENALTY`] first when
    /// the inference it replaces got no band. False for a flood: the Start is dropped without
    /// an answer (an answer per Start would amplify it) and the current inference goes on.
    fn take_start(&mut self) -> bool {
        if let Some(a) = self.current.as_mut().filter(|a| !a.charged && !a.received.iter().any(|&r| r)) {
            a.charged = true;
            self.starts.charge(EMPTY_START_PENALTY);
        }
        if self.starts.take(tokio::time::Instant::now()) {
            return true;
        }
        if self.svc.rate_limited.fetch_add(1, Ordering::Relaxed).is_multiple_of(1000) {
            tracing::warn!(robot = %self.robot_id, "Start frames over {MAX_STARTS_PER_S}/s: dropped (counted)");
        }
        false
    }

    /// Whether this edge serves the Start now, on the least busy replica of the model; when it
    /// does not, the answer is sent and `None` returned: an Error (shutting down, unknown plan,
    /// the model unloaded, or see [`Session::route`]) or a Forward.
    fn admit(&self, s: &Start, book: &PlanBook, mi: usize) -> Option<Admitted> {
        let answer = |f: Frame| -> Option<Admitted> {
            self.send(f);
            None
        };
        if self.svc.shutting_down.load(Ordering::SeqCst) {
            return answer(error_frame(s, ErrorCode::ShuttingDown, "the edge is shutting down".into()));
        }
        let Some(plan) = book.by_hash(&s.plan_hash) else {
            let text = format!("no plan {} in table {}", s.plan_hash.to_hex(), book.table_hash.to_hex());
            return answer(error_frame(s, ErrorCode::UnknownPlan, text));
        };
        let model = &self.svc.models[mi];
        model.asked();
        let replicas = model.replicas();
        let devices = &self.svc.opts.devices;
        let first =
            finishes_first(replicas.iter().map(|r| (r.queued.load(Ordering::Relaxed), devices.get(r.device).map_or(1.0, |d| d.speed))));
        let Some(replica) = first.and_then(|i| replicas.get(i)) else {
            self.svc.overloaded.fetch_add(1, Ordering::Relaxed);
            model.refusals.overloaded.fetch_add(1, Ordering::Relaxed);
            let text = format!("model '{}' was unloaded from this edge (memory budget)", model.id);
            return answer(error_frame(s, ErrorCode::Overloaded, text));
        };
        let ahead = replica.queued.load(Ordering::Relaxed);
        if let Some(f) = self.route(s, model, ahead) {
            return answer(f);
        }
        let replica = replicas.iter().position(|r| std::ptr::eq(r, replica)).unwrap_or(0);
        Some(Admitted { plan, replicas, replica })
    }
}
