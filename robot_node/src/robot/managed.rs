//! The managed node's task ([`Managed`]): carries out each lifecycle transition handed to it
//! (see [`crate::lifecycle`]) and settles it.
//!
//! - configure: fixes the model's input shape (a dynamic model waits for the first frame),
//!   declares the result's publishers (each input's under its namespace) and subscribes the
//!   bandwidth predictions.
//! - activate: loads the model and its table, opens the edge session, connects the edges, and
//!   only then subscribes the inputs and answers their frames ([`Active`]) until deactivate or
//!   shutdown, which free them again. A camera driver or `lop replay` that waits for a
//!   subscriber so sees one only once frames are answered; a frame arriving while the node is
//!   not active (in the moment the subscription goes) is counted as `frames_skipped_inactive`.
//! - cleanup and shutdown: drop the subscriptions.
//!
//! With autostart the node begins configure and then activate itself; a failure there ends the
//! node with the error (as before it was managed). A caller's transition that fails is answered
//! `success = false` and the node goes back to where it was.

use lop::model::LoadOptions;
use tokio::sync::watch;

use super::active::Active;
use super::frames::Requests;
use super::input::{subscribe_bandwidth, subscribe_input};
use super::model::input_load;
use super::outlet::Outlet;
use super::shared::Shared;
use crate::backend::{SharedRos, Subscription};
use crate::config::RobotConfig;
use crate::error::Result;
use crate::input_shape::ShapeOrigin;
use crate::lifecycle::{Lifecycle, Outcome, Pending, State, Transition};

/// What configuring holds until cleanup or shutdown.
struct Configured<'a> {
    /// The model's load options with its input shape fixed.
    load: LoadOptions,
    origin: ShapeOrigin,
    /// Each input's publishers, kept across activations.
    outlets: Vec<Outlet<'a>>,
    _bandwidth: Subscription,
}

/// The node's task: its configuration, backend, shared state and lifecycle, and what
/// configuring holds.
pub(super) struct Managed<'a> {
    pub(super) cfg: &'a RobotConfig,
    pub(super) ros: &'a SharedRos,
    /// One for each input, in the order of `cfg.inputs`.
    pub(super) shared: &'a [Shared],
    pub(super) lifecycle: &'a Lifecycle,
    configured: Option<Configured<'a>>,
}

impl<'a> Managed<'a> {
    /// A node in `unconfigured`, holding nothing.
    pub(super) fn new(cfg: &'a RobotConfig, ros: &'a SharedRos, shared: &'a [Shared], lifecycle: &'a Lifecycle) -> Managed<'a> {
        Managed { cfg, ros, shared, lifecycle, configured: None }
    }

    /// Carries out transitions (with `autostart`, first configure and activate of its own)
    /// until `stop`, then shuts down (to finalized) from wherever it is.
    ///
    /// # Errors
    /// A failed autostart: the model, profile or table that does not load, topics refused.
    pub(super) async fn serve(&mut self, stop: &mut watch::Receiver<bool>, requests: &mut Requests, autostart: bool) -> Result<()> {
        let mut next = if autostart { Some(self.lifecycle.begin_local(Transition::CONFIGURE)?) } else { None };
        let served = loop {
            if *stop.borrow() {
                break Ok(());
            }
            let p = match next.take() {
                Some(p) => p,
                None => tokio::select! {
                    _ = stop.changed() => break Ok(()),
                    p = requests.recv() => match p {
                        Some(p) => p,
                        None => break Ok(()),
                    },
                },
            };
            match self.carry_out(p, stop, requests).await {
                Ok(n) => next = n,
                Err(e) => break Err(e),
            }
        };
        self.finalize(requests);
        served
    }

    /// Carries out `p` and settles it; returns the transition to carry out next (autostart's
    /// activate after its configure; the deactivate or shutdown that ended an activation).
    ///
    /// # Errors
    /// The node's own transition (autostart) that failed.
    async fn carry_out(&mut self, p: Pending, stop: &mut watch::Receiver<bool>, requests: &mut Requests) -> Result<Option<Pending>> {
        let t = p.step.transition;
        tracing::info!(transition = t.label, from = p.step.start.label(), "lifecycle transition");
        match t {
            Transition::CONFIGURE => match self.configure(stop).await {
                Ok(Some(c)) => {
                    self.configured = Some(c);
                    let local = p.is_local();
                    self.lifecycle.settle(p, Outcome::Success);
                    Ok(if local { Some(self.lifecycle.begin_local(Transition::ACTIVATE)?) } else { None })
                }
                Ok(None) => {
                    self.lifecycle.settle(p, Outcome::Failure);
                    Ok(None)
                }
                Err(e) => self.failed(p, e),
            },
            Transition::ACTIVATE => {
                let Some(c) = &mut self.configured else {
                    let e = crate::Error::Config { what: "activate without a configuration".into() };
                    return self.failed(p, e);
                };
                let active = Active::start(self.cfg, self.ros, self.shared, c.load.clone(), c.origin).await;
                // Active before the inputs are subscribed, so that no frame of a publisher that
                // waited for the subscriber is skipped; unsubscribed when the activation ends.
                let flag = &self.shared[0].active;
                flag.store(active.is_ok(), std::sync::atomic::Ordering::Relaxed);
                match active.and_then(|a| Ok((a, subscribe_inputs(self.cfg, self.ros, self.shared)?))) {
                    Ok((active, _inputs)) => {
                        self.lifecycle.settle(p, Outcome::Success);
                        Ok(active.run(&mut c.outlets, stop, requests).await)
                    }
                    Err(e) => {
                        flag.store(false, std::sync::atomic::Ordering::Relaxed);
                        self.failed(p, e)
                    }
                }
            }
            // Deactivate: the activation that returned it has freed the model and the sessions.
            Transition::DEACTIVATE => {
                self.lifecycle.settle(p, Outcome::Success);
                Ok(None)
            }
            // Cleanup and the shutdowns (an active node's activation has freed what it held).
            _ => {
                self.configured = None;
                self.lifecycle.settle(p, Outcome::Success);
                Ok(None)
            }
        }
    }

    /// Configures: the input shape fixed, the publishers declared and the bandwidth subscribed;
    /// `None` when `stop` came
    /// while a dynamic model waited for its first frame.
    ///
    /// # Errors
    /// A model whose inputs cannot be read, topics the backend refuses.
    async fn configure(&self, stop: &mut watch::Receiver<bool>) -> Result<Option<Configured<'a>>> {
        let Some((load, origin)) = input_load(self.cfg, self.ros, stop).await? else {
            return Ok(None);
        };
        // One result publisher for every input: a result names its camera in its frame id.
        let results = std::sync::Arc::new(self.ros.inference_publisher(&self.cfg.topics.inference)?);
        let outlets = self
            .cfg
            .inputs
            .iter()
            .zip(self.shared)
            .map(|(sensor, shared)| Outlet::new(self.cfg, self.ros, shared, sensor, results.clone()))
            .collect::<Result<Vec<_>>>()?;
        let _bandwidth = subscribe_bandwidth(self.cfg, self.ros, &self.shared[0])?;
        Ok(Some(Configured { load, origin, outlets, _bandwidth }))
    }

    /// A transition that failed: the node's own ends the node with `e`; a caller's is logged,
    /// answered `success = false`, and the node goes back to where it was.
    fn failed(&mut self, p: Pending, e: crate::Error) -> Result<Option<Pending>> {
        let (local, label) = (p.is_local(), p.step.transition.label);
        self.lifecycle.settle(p, Outcome::Failure);
        if local {
            return Err(e);
        }
        tracing::error!(transition = label, error = %e, "lifecycle transition failed; the node stays where it was");
        Ok(None)
    }

    /// On the way out: transitions begun but not carried out are settled as failures, and the
    /// node shuts down to finalized (reported like any transition) unless it is there.
    fn finalize(&mut self, requests: &mut Requests) {
        while let Ok(p) = requests.try_recv() {
            self.lifecycle.settle(p, Outcome::Failure);
        }
        self.configured = None;
        let shutdown = match self.lifecycle.state() {
            State::Unconfigured => Transition::UNCONFIGURED_SHUTDOWN,
            State::Inactive => Transition::INACTIVE_SHUTDOWN,
            State::Active => Transition::ACTIVE_SHUTDOWN,
            _ => return,
        };
        if let Ok(p) = self.lifecycle.begin_local(shutdown) {
            self.lifecycle.settle(p, Outcome::Success);
        }
    }
}

/// Subscribes every input of `cfg`, each into its own mailbox (`shared`, in the same order).
///
/// # Errors
/// A topic the backend refuses.
fn subscribe_inputs(cfg: &RobotConfig, ros: &SharedRos, shared: &[Shared]) -> Result<Vec<Subscription>> {
    cfg.inputs.iter().zip(shared).map(|(sensor, s)| subscribe_input(cfg, ros, s, sensor)).collect()
}
