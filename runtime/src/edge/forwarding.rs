//! Routing a Start this edge may not finish in time (EPARA's forwarding): served here, answered
//! `Late` or `Overloaded` at once, or forwarded to another edge of the fleet that can meet its
//! deadline ([`Forwarding`], set once the fleet view is up), from the work queued ahead of it
//! and the model's mean server time.

use std::sync::atomic::Ordering;

use lop_msgs::Frame;
use lop_msgs::protocol::{ErrorCode, Forward, Start};

use super::admission::error_frame;
use super::model::Model;
use super::options::Forwarding;
use super::session::Session;
use super::state::EdgeService;
use crate::error::{Error, Result};

impl EdgeService {
    /// Lets this edge forward the inferences it cannot serve in time (see [`Forwarding`]).
    /// Set once, when the edge's fleet view is up.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] when forwarding is set already, or `max_forwards` exceeds what
    /// a Start's path can carry ([`MAX_PATH`](lop_msgs::protocol::MAX_PATH)).
    pub fn set_forwarding(&self, forwarding: Forwarding) -> Result<()> {
        if forwarding.max_forwards > lop_msgs::protocol::MAX_PATH {
            return Err(Error::InvalidConfig {
                what: format!("max_forwards is {}, at most {} allowed", forwarding.max_forwards, lop_msgs::protocol::MAX_PATH),
            });
        }
        lop_msgs::validate_id(&forwarding.edge_id).map_err(|e| Error::InvalidConfig { what: e.to_string() })?;
        self.inner.forwarding.set(forwarding).map_err(|_| Error::InvalidConfig { what: "forwarding is set already".into() })
    }
}

impl Session {
    /// Where a Start goes with `ahead` inferences queued before it on the least busy replica:
    /// `None` to be served here; else the answer: Overloaded when this edge forwarded it
    /// already, Late when a forwarded one has less time left than this edge needs, a Forward
    /// to an edge that can meet the deadline, or Overloaded past the work budget.
    pub(super) fn route(&self, s: &Start, model: &Model, ahead: usize) -> Option<Frame> {
        let server_s = f64::from_bits(model.server_s.load(Ordering::Relaxed));
        let budget_s = s.deadline_ns as f64 * 1e-9;
        // The frame's own deadline (a fleet robot's); without one, the budget.
        let due_s = if s.due_ns > 0 { (s.due_ns as f64 * 1e-9).min(budget_s) } else { budget_s };
        let forwarding = self.svc.forwarding.get();
        if let Some(f) = forwarding
            && s.path.contains(&f.edge_id)
        {
            // Only a robot that ignores Forward's rules sends this: never forwarded again.
            self.svc.overloaded.fetch_add(1, Ordering::Relaxed);
            model.refusals.overloaded.fetch_add(1, Ordering::Relaxed);
            return Some(error_frame(s, ErrorCode::Overloaded, format!("edge '{}' forwarded this inference already", f.edge_id)));
        }
        // A forwarded inference whose deadline leaves less than this edge's own time is late
        // whatever the queue: answered at once, never computed.
        if !s.path.is_empty() && due_s < server_s {
            self.svc.late.fetch_add(1, Ordering::Relaxed);
            model.refusals.late.fetch_add(1, Ordering::Relaxed);
            return Some(error_frame(
                s,
                ErrorCode::Late,
                format!("forwarded by {:?} with {:.0} ms left; this edge needs about {:.0} ms", s.path, due_s * 1e3, server_s * 1e3),
            ));
        }
        // With inferences queued ahead on the least busy replica (an idle replica is always
        // tried), their mean server time says when this one would finish. Past the frame's
        // deadline: forwarded to an edge that can meet it. With nowhere to forward it, refused
        // at once (the robot finishes it alone now) if it would not finish within the work
        // budget either; otherwise served late: the robot, which stops waiting at the deadline
        // and computes the bands it would wait for, takes each from whichever side has it first.
        let finish_s = (ahead + 1) as f64 * server_s;
        if ahead > 0
            && finish_s > due_s
            && let Some(f) = forwarding
            && s.path.len() < f.max_forwards
            && let Some(forward) = self.forward(s, model, f, due_s, ahead)
        {
            return Some(forward);
        }
        if ahead > 0 && finish_s > budget_s {
            self.svc.overloaded.fetch_add(1, Ordering::Relaxed);
            model.refusals.overloaded.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(robot = %self.robot_id, ahead, server_ms = server_s * 1e3, budget_ms = budget_s * 1e3, "overloaded: inference refused");
            return Some(error_frame(
                s,
                ErrorCode::Overloaded,
                format!("{ahead} inference(s) ahead at about {:.0} ms each; the deadline is {:.0} ms away", server_s * 1e3, budget_s * 1e3),
            ));
        }
        None
    }

    /// The Forward of a Start to the edge `f` picks for it (this edge appended to its path),
    /// counted; `None` when no edge can meet its deadline, `due_s` from now.
    fn forward(&self, s: &Start, model: &Model, f: &Forwarding, due_s: f64, ahead: usize) -> Option<Frame> {
        let mut path = s.path.clone();
        path.push(f.edge_id.clone());
        let to = (f.pick)(&model.id, due_s, &path)?;
        self.svc.forwarded.fetch_add(1, Ordering::Relaxed);
        model.refusals.forwarded.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(robot = %self.robot_id, %to, ?path, ahead, due_ms = due_s * 1e3, "overloaded: inference forwarded");
        Some(Frame::Forward(Forward { inference_id: s.inference_id, to, path }))
    }
}
