//! What the subscriptions, the diagnostics task and the frame loop share ([`Shared`]): the
//! counters, the live settings, recent times, the one-slot mailbox and the latest bandwidth;
//! one for each input (camera), the live settings, bandwidth and activity common to all.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use super::counters::RobotCounters;
use super::frame::Frame;
use crate::config::RobotConfig;
use crate::live::LiveSettings;
use crate::mailbox::Mailbox;
use crate::window::Recent;

/// (inference latency, ROS-layer time, plan hash) of recent frames, for /diagnostics'
/// percentiles.
pub(super) type RecentTimes = Mutex<(Recent, Recent, String)>;

/// What the subscriptions, the diagnostics task and the frame loop share.
pub(super) struct Shared {
    pub(super) counters: Arc<RobotCounters>,
    pub(super) live: Arc<LiveSettings>,
    pub(super) recent: Arc<RecentTimes>,
    /// The frame waiting for the model (one slot).
    pub(super) mailbox: Arc<Mailbox<Frame>>,
    /// The latest bandwidth prediction, Mbit/s.
    pub(super) latest_mbps: Arc<Mutex<Option<f64>>>,
    /// Whether the managed node is active: frames arriving otherwise are counted as skipped
    /// and dropped.
    pub(super) active: Arc<AtomicBool>,
}

impl Shared {
    /// Fresh counters and recent times, the live settings at their configured values, an empty
    /// mailbox, no bandwidth yet.
    pub(super) fn new(cfg: &RobotConfig) -> Shared {
        Shared {
            counters: Arc::new(RobotCounters::default()),
            live: Arc::new(LiveSettings::new(cfg.enabled, &cfg.method, cfg.drop_policy)),
            recent: Arc::default(),
            mailbox: Arc::new(Mailbox::new()),
            latest_mbps: Arc::new(Mutex::new(None)),
            active: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What another input of the node (a second camera) keeps: counters, recent times and a
    /// mailbox of its own, so that no camera's frame replaces another's; the live settings,
    /// the bandwidth and the lifecycle's activity shared with `self`.
    pub(super) fn sibling(&self) -> Shared {
        Shared {
            counters: Arc::new(RobotCounters::default()),
            live: self.live.clone(),
            recent: Arc::default(),
            mailbox: Arc::new(Mailbox::new()),
            latest_mbps: self.latest_mbps.clone(),
            active: self.active.clone(),
        }
    }

    /// One for each of the node's inputs (`cfg.inputs`, at least one), sharing what
    /// [`Shared::sibling`] says.
    pub(super) fn for_inputs(cfg: &RobotConfig) -> Vec<Shared> {
        let first = Shared::new(cfg);
        let mut all: Vec<Shared> = (1..cfg.inputs.len()).map(|_| first.sibling()).collect();
        all.insert(0, first);
        all
    }
}
