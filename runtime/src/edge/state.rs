//! The state the edge service's rooms share: [`EdgeService`] (cheap to clone) over `Inner`, which
//! holds the options, the model store, the plan books ([`BookSlot`], by [`BookKey`]), robot
//! profiles, the counters and the channel of [`Served`] reports. Sessions, jobs and background
//! tasks hold it; the rooms that read or change it add their methods where they live.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Instant;

use lop::profile::Profile;
use tokio::sync::{broadcast, watch};

use super::batch::BatchCounts;
use super::model::Model;
use super::options::{EdgeOptions, Forwarding};
use super::served::{SERVED_CHANNEL_CAPACITY, Served};
use crate::build_turns::BuildTurns;
use crate::exec::InputWire;
use crate::plans::PlanBook;
use crate::received_profiles::ReceivedProfiles;
use crate::session::FrameStats;

/// A plan book's key: model index, robot profile hash, input wire.
pub(super) type BookKey = (usize, String, InputWire);

/// What a plan book build ends with (errors as text: they go into a Reject).
pub(super) type BookResult = std::result::Result<Arc<PlanBook>, String>;

/// A plan book, ready or being built (its result arrives on the channel).
pub(super) enum BookSlot {
    Ready(Arc<PlanBook>),
    /// Being loaded or planned since the instant.
    Building(watch::Receiver<Option<BookResult>>, Instant),
}

/// The edge service. Cheap to clone (shared state).
#[derive(Clone)]
pub struct EdgeService {
    pub(super) inner: Arc<Inner>,
}

/// The service's state, shared by its sessions, jobs and background tasks.
pub(super) struct Inner {
    pub(super) opts: EdgeOptions,
    pub(super) models: Vec<Model>,
    pub(super) robot_profiles: std::sync::Mutex<Vec<Profile>>,
    pub(super) books: std::sync::Mutex<HashMap<BookKey, BookSlot>>,
    pub(super) stats: FrameStats,
    pub(super) sessions: AtomicU64,
    /// Sessions open now (links served, welcomed or not).
    pub(super) open_sessions: AtomicU64,
    /// Hellos refused, by [`RejectReason`](lop_msgs::protocol::RejectReason) code.
    pub(super) rejects: [AtomicU64; 256],
    pub(super) rejected: AtomicU64,
    pub(super) inferences: AtomicU64,
    pub(super) done: AtomicU64,
    pub(super) aborted: AtomicU64,
    pub(super) cancelled: AtomicU64,
    pub(super) overloaded: AtomicU64,
    pub(super) forwarded: AtomicU64,
    pub(super) late: AtomicU64,
    pub(super) input_mismatches: AtomicU64,
    pub(super) outbound_refused: Arc<AtomicU64>,
    /// Shared with the replicas' worker threads.
    pub(super) batch_counts: Arc<BatchCounts>,
    pub(super) rate_limited: AtomicU64,
    pub(super) profiles_refused: AtomicU64,
    /// The probe responder's counts (the responder runs beside the service, on its session).
    pub(super) probes: Arc<crate::bandwidth::probe_limit::ProbeCounts>,
    /// Hellos its acceptors refused past their session caps (`zenoh_link::admission`).
    pub(super) link_refusals: std::sync::Mutex<Vec<Arc<AtomicU64>>>,
    /// Where inferences this edge cannot serve in time go (set once the fleet view is up).
    pub(super) forwarding: std::sync::OnceLock<Forwarding>,
    /// Robot profiles received in Hellos and remembered, bounded ([`ReceivedProfiles`]).
    pub(super) received: std::sync::Mutex<ReceivedProfiles>,
    /// New profiles refused for want of a build slot, waiting their turn ([`BuildTurns`]).
    pub(super) turns: std::sync::Mutex<BuildTurns>,
    pub(super) shutting_down: AtomicBool,
    pub(super) served: broadcast::Sender<Served>,
    /// Server compute time of every inference so far, nanoseconds.
    pub(super) busy_ns: AtomicU64,
    /// Wakes placement at once (a Hello for a cold model).
    pub(super) place_now: tokio::sync::Notify,
}

impl std::fmt::Debug for EdgeService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeService").field("models", &self.inner.models.iter().map(|m| &m.id).collect::<Vec<_>>()).finish()
    }
}

impl Inner {
    /// The service's state for `opts` and its loaded models: every counter at zero, no
    /// schedule table yet, no forwarding.
    pub(super) fn new(opts: EdgeOptions, models: Vec<Model>) -> Inner {
        let robot_profiles = std::sync::Mutex::new(opts.robot_profiles.clone());
        Inner {
            place_now: tokio::sync::Notify::new(),
            opts,
            models,
            robot_profiles,
            books: std::sync::Mutex::new(HashMap::new()),
            stats: FrameStats::default(),
            sessions: AtomicU64::new(0),
            open_sessions: AtomicU64::new(0),
            rejects: std::array::from_fn(|_| AtomicU64::new(0)),
            rejected: AtomicU64::new(0),
            inferences: AtomicU64::new(0),
            done: AtomicU64::new(0),
            aborted: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            overloaded: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            late: AtomicU64::new(0),
            input_mismatches: AtomicU64::new(0),
            outbound_refused: Arc::default(),
            batch_counts: Arc::default(),
            forwarding: std::sync::OnceLock::new(),
            rate_limited: AtomicU64::new(0),
            profiles_refused: AtomicU64::new(0),
            probes: Arc::default(),
            link_refusals: std::sync::Mutex::default(),
            received: std::sync::Mutex::new(ReceivedProfiles::default()),
            turns: std::sync::Mutex::default(),
            shutting_down: AtomicBool::new(false),
            served: broadcast::channel(SERVED_CHANNEL_CAPACITY).0,
            busy_ns: AtomicU64::new(0),
        }
    }
}
