//! What the edge counts, for its metrics and the fleet's load reports: service-wide counters
//! ([`EdgeCounts`]), each model's state and refusals ([`ModelStats`]) and load
//! ([`ModelLoadNow`]), each device's share ([`DeviceLoad`]), and Hellos refused by reason.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lop_msgs::protocol::RejectReason;

use super::state::EdgeService;
use crate::session::FrameCounts;

/// Service-wide counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct EdgeCounts {
    /// Sessions welcomed.
    pub sessions: u64,
    /// Sessions rejected.
    pub rejected: u64,
    /// Inferences started.
    pub inferences: u64,
    /// Inferences that ended with Done.
    pub done: u64,
    /// Inferences aborted or failed.
    pub aborted: u64,
    /// Inferences the robot cancelled (it computed the answer itself past the frame's
    /// deadline); each is also counted in `aborted` once its replica stops.
    pub cancelled: u64,
    /// Inferences refused at once (Error `Overloaded`): the work queued ahead of them on the
    /// model's replicas would not have let them finish before their deadline.
    pub overloaded: u64,
    /// Inferences this edge could not meet the deadline of and forwarded to another edge of the
    /// fleet (Frame `Forward`), never computed here.
    pub forwarded: u64,
    /// Forwarded inferences that arrived with too little of their deadline left (Error `Late`),
    /// answered at once, never computed.
    pub late: u64,
    /// Inferences refused because a coded input band did not decode to the robot's pixels
    /// (Error `InputMismatch`); each is also counted in `aborted`.
    pub input_mismatches: u64,
    /// Inferences given up because a band of theirs did not fit the session's send queue (its
    /// robot reads slower than the edge sends, or has stopped: `zenoh_link::admission`'s
    /// `SESSION_OUT_BYTES` and `TOTAL_OUT_BYTES`); each is also counted in `aborted`, and its
    /// robot finishes it alone.
    pub outbound_refused: u64,
    /// Batches run (two inferences of one plan or more at once, [`Batching`](super::Batching)).
    pub batches: u64,
    /// Inferences that ran in those batches.
    pub batched: u64,
    /// Start frames dropped because their session sent more than [`MAX_STARTS_PER_S`](super::MAX_STARTS_PER_S) (a
    /// flood: no answer is sent, the robot finishes such an inference alone at its deadline).
    pub rate_limited: u64,
    /// Hellos refused because they carried a robot profile the edge has not seen while
    /// [`MAX_RECEIVED_BUILDS`](super::MAX_RECEIVED_BUILDS) schedule tables were being built (the robot retries, running
    /// alone meanwhile).
    pub profiles_refused: u64,
    /// Received robot profiles forgotten, to make room for newer ones or unused for an hour
    /// ([`ReceivedProfiles`](crate::received_profiles::ReceivedProfiles)); their plan books go with them.
    pub profiles_evicted: u64,
    /// Robot profiles received in Hellos and kept now (at most
    /// [`crate::received_profiles::MAX_RECEIVED_PROFILES`]).
    pub profiles_kept: u64,
    /// Bandwidth probes answered ([`crate::bandwidth::probe::serve_probes`]).
    pub probes_answered: u64,
    /// Bandwidth probes refused: their peer, or all peers, past the probe budget
    /// ([`crate::bandwidth::probe_limit::ProbeLimits`]).
    pub probes_refused: u64,
    /// Bytes sent in answer to probes.
    pub probe_bytes: u64,
    /// Hellos refused before any session was made, past a cap of the acceptor: sessions open,
    /// robot ids tracked, or bytes queued in all sessions
    /// ([`crate::zenoh_link::admission`]); the robot is told `Busy` and runs alone.
    pub sessions_refused: u64,
    /// Frames dropped, by reason.
    pub dropped: FrameCounts,
}

/// One model's state and counts now, for metrics ([`EdgeService::model_stats`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ModelStats {
    /// The model's id.
    pub id: String,
    /// Whether its replicas are loaded.
    pub warm: bool,
    /// Its warm replicas.
    pub replicas: usize,
    /// Replicas with an inference queued or running.
    pub replicas_busy: usize,
    /// Inferences refused at once (Error `Overloaded`).
    pub overloaded: u64,
    /// Inferences forwarded to another edge.
    pub forwarded: u64,
    /// Forwarded inferences that arrived too late (Error `Late`).
    pub late: u64,
    /// Inferences the robot cancelled.
    pub cancelled: u64,
}

/// One model's load on the edge now, for the fleet's load reports.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelLoadNow {
    /// The model's id.
    pub id: String,
    /// Inferences queued or running on its replicas.
    pub in_flight: usize,
    /// Recent mean server compute seconds per inference.
    pub server_s: f64,
    /// Whether its replicas are loaded (placement may keep it cold under a memory budget).
    pub warm: bool,
}

/// One device's share of the edge's work now ([`EdgeService::device_loads`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceLoad {
    /// Its name.
    pub name: String,
    /// Its speed relative to the first device.
    pub speed: f64,
    /// Warm replicas on it, every model's.
    pub replicas: usize,
    /// Inferences queued or running on them.
    pub queued: usize,
}

impl EdgeService {
    /// Counters so far.
    pub fn counts(&self) -> EdgeCounts {
        let i = &self.inner;
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        EdgeCounts {
            sessions: l(&i.sessions),
            rejected: l(&i.rejected),
            inferences: l(&i.inferences),
            done: l(&i.done),
            aborted: l(&i.aborted),
            cancelled: l(&i.cancelled),
            overloaded: l(&i.overloaded),
            forwarded: l(&i.forwarded),
            late: l(&i.late),
            input_mismatches: l(&i.input_mismatches),
            outbound_refused: l(&i.outbound_refused),
            batches: l(&i.batch_counts.batches),
            batched: l(&i.batch_counts.batched),
            rate_limited: l(&i.rate_limited),
            profiles_refused: l(&i.profiles_refused),
            profiles_evicted: i.received.lock().map_or(0, |r| r.evicted()),
            profiles_kept: i.received.lock().map_or(0, |r| r.len() as u64),
            probes_answered: i.probes.snapshot().0,
            probes_refused: i.probes.snapshot().1,
            probe_bytes: i.probes.snapshot().2,
            sessions_refused: i.link_refusals.lock().map_or(0, |v| v.iter().map(|c| c.load(Ordering::Relaxed)).sum()),
            dropped: i.stats.snapshot(),
        }
    }

    /// Counts the Hellos an acceptor serving this service refuses past its caps in
    /// [`EdgeCounts::sessions_refused`] (`serve_zenoh` does it).
    pub fn track_link_refusals(&self, counter: Arc<AtomicU64>) {
        if let Ok(mut v) = self.inner.link_refusals.lock() {
            v.push(counter);
        }
    }

    /// Where the probe responder beside this service counts (`serve_probes`), so that
    /// [`EdgeService::counts`] reports its probes too.
    pub fn probe_counts(&self) -> Arc<crate::bandwidth::probe_limit::ProbeCounts> {
        self.inner.probes.clone()
    }

    /// Every model's load now (in-flight inferences, mean server seconds): what the fleet's load
    /// reports are made of (`crate::fleet`).
    pub fn model_loads(&self) -> Vec<ModelLoadNow> {
        self.inner
            .models
            .iter()
            .map(|m| {
                let replicas = m.replicas();
                ModelLoadNow {
                    id: m.id.clone(),
                    in_flight: replicas.iter().map(|r| r.queued.load(Ordering::Relaxed)).sum(),
                    server_s: f64::from_bits(m.server_s.load(Ordering::Relaxed)),
                    warm: !replicas.is_empty(),
                }
            })
            .collect()
    }

    /// Every device's warm replicas and the inferences queued on them now (in configuration
    /// order).
    pub fn device_loads(&self) -> Vec<DeviceLoad> {
        let mut loads: Vec<DeviceLoad> =
            self.inner.opts.devices.iter().map(|d| DeviceLoad { name: d.name.clone(), speed: d.speed, replicas: 0, queued: 0 }).collect();
        for m in &self.inner.models {
            for r in m.replicas().iter() {
                if let Some(l) = loads.get_mut(r.device) {
                    l.replicas += 1;
                    l.queued += r.queued.load(Ordering::Relaxed);
                }
            }
        }
        loads
    }

    /// Every model's state and refusals now (in configuration order).
    pub fn model_stats(&self) -> Vec<ModelStats> {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        self.inner
            .models
            .iter()
            .map(|m| {
                let replicas = m.replicas();
                ModelStats {
                    id: m.id.clone(),
                    warm: !replicas.is_empty(),
                    replicas: replicas.len(),
                    replicas_busy: replicas.iter().filter(|r| r.queued.load(Ordering::Relaxed) > 0).count(),
                    overloaded: l(&m.refusals.overloaded),
                    forwarded: l(&m.refusals.forwarded),
                    late: l(&m.refusals.late),
                    cancelled: l(&m.refusals.cancelled),
                }
            })
            .collect()
    }

    /// Hellos refused so far, by reason (every reason, zeros included).
    pub fn rejects(&self) -> Vec<(RejectReason, u64)> {
        (0..=u8::MAX)
            .filter_map(RejectReason::from_u8)
            .map(|r| (r, self.inner.rejects.get(r as usize).map_or(0, |c| c.load(Ordering::Relaxed))))
            .collect()
    }

    /// Sessions open now.
    pub fn open_sessions(&self) -> u64 {
        self.inner.open_sessions.load(Ordering::Relaxed)
    }

    /// Seconds of server compute spent on every inference so far (a monotonic counter: its
    /// growth over a period is the busy time of that period).
    pub fn busy_s(&self) -> f64 {
        self.inner.busy_ns.load(Ordering::Relaxed) as f64 * 1e-9
    }

    /// Inferences whose server part is queued or running now.
    pub fn in_flight(&self) -> u64 {
        let c = self.counts();
        c.inferences.saturating_sub(c.done + c.aborted)
    }
}
