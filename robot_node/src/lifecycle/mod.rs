//! `lop_robot` as a ROS 2 managed node: the states and transitions of `lifecycle_msgs`
//! ([`machine`], pure data), and [`Lifecycle`], the handle that the backend's lifecycle
//! services and the node share.
//!
//! A backend that offers the services ([`crate::backend::Ros::serve_lifecycle`]) answers
//! `get_state` and the listings from the handle at once, and hands `change_state` to
//! [`Lifecycle::change_state`]: a transition the state now does not allow is refused at once
//! (`success = false`, as rclcpp's lifecycle node answers), any other is begun, handed to the
//! node's task as a [`Pending`], and answered once the node settled it. Each step is reported
//! to the backend's `transition_event` publisher ([`EventSink`]). The node begins transitions
//! of its own the same way ([`Lifecycle::begin_local`]: autostart, shutdown on a signal).

pub mod machine;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, oneshot};

pub use machine::{Machine, Outcome, Refused, State, Step, Transition};

/// A step taken, as `lifecycle_msgs/msg/TransitionEvent` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransitionEvent {
    /// When, in nanoseconds since the epoch (the message's `timestamp`).
    pub timestamp_ns: u64,
    /// The transition, its start and its goal.
    pub step: Step,
}

/// Receives every step the node takes (the backend publishes it on `transition_event`).
pub type EventSink = Box<dyn Fn(&TransitionEvent) + Send + Sync>;

/// A transition begun, for the node's task to carry out and settle.
#[derive(Debug)]
pub struct Pending {
    /// The transition begun.
    pub step: Step,
    /// Where the caller waits for `success`; `None` for the node's own transitions.
    reply: Option<oneshot::Sender<bool>>,
}

impl Pending {
    /// Whether the node began it itself (autostart, a signal), rather than a caller.
    pub fn is_local(&self) -> bool {
        self.reply.is_none()
    }
}

/// The lifecycle of one node: its state machine, the queue of transitions begun for its task,
/// and where its steps are reported.
pub struct Lifecycle {
    machine: Mutex<Machine>,
    to_node: mpsc::UnboundedSender<Pending>,
    sink: Mutex<Option<EventSink>>,
}

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifecycle").field("state", &self.state()).finish_non_exhaustive()
    }
}

impl Lifecycle {
    /// A node in `unconfigured`, and the receiver where its task takes the transitions begun.
    pub fn new() -> (Arc<Lifecycle>, mpsc::UnboundedReceiver<Pending>) {
        let (to_node, pending) = mpsc::unbounded_channel();
        (Arc::new(Lifecycle { machine: Mutex::new(Machine::new()), to_node, sink: Mutex::new(None) }), pending)
    }

    fn machine(&self) -> std::sync::MutexGuard<'_, Machine> {
        self.machine.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state now (`get_state`).
    pub fn state(&self) -> State {
        self.machine().current()
    }

    /// The transitions that leave the state now (`get_available_transitions`).
    pub fn available(&self) -> Vec<Step> {
        self.machine().available()
    }

    /// Reports every later step to `sink`, replacing the sink before.
    pub fn on_event(&self, sink: EventSink) {
        *self.sink.lock().unwrap_or_else(PoisonError::into_inner) = Some(sink);
    }

    fn report(&self, step: Step) {
        let timestamp_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        if let Some(sink) = self.sink.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            sink(&TransitionEvent { timestamp_ns, step });
        }
    }

    /// Begins the transition (by `label` when not empty, else by `id`) and reports the step.
    fn begin(&self, id: u8, label: &str) -> Result<Step, Refused> {
        let step = self.machine().begin(id, label)?;
        self.report(step);
        Ok(step)
    }

    /// `change_state`: refuses at once what the state now does not allow (logged at warn,
    /// `false`); begins anything else, hands it to the node's task and returns whether the
    /// node carried it out. `false` too when the node's task is gone.
    pub async fn change_state(&self, id: u8, label: &str) -> bool {
        let step = match self.begin(id, label) {
            Ok(step) => step,
            Err(refused) => {
                tracing::warn!(error = %refused, "lifecycle: change_state refused");
                return false;
            }
        };
        let (reply, answer) = oneshot::channel();
        if let Err(e) = self.to_node.send(Pending { step, reply: Some(reply) }) {
            self.settle(e.0, Outcome::Failure);
            return false;
        }
        answer.await.unwrap_or(false)
    }

    /// Begins a transition of the node's own (autostart, shutdown on a signal), to be
    /// carried out by its task and settled like a caller's.
    ///
    /// # Errors
    /// [`Refused`] as for [`Machine::begin`].
    pub fn begin_local(&self, transition: Transition) -> Result<Pending, Refused> {
        Ok(Pending { step: self.begin(transition.id, "")?, reply: None })
    }

    /// Settles `pending` with the node's `outcome` (an error is settled at once by the error
    /// processing, which the node did by freeing what it held: to unconfigured), reports the
    /// steps, answers the caller (`success` when the outcome was), and returns the state now.
    pub fn settle(&self, pending: Pending, outcome: Outcome) -> State {
        let mut steps = Vec::new();
        let state = {
            let mut m = self.machine();
            steps.extend(m.settle(outcome));
            if m.current() == State::ErrorProcessing {
                steps.extend(m.settle(Outcome::Success));
            }
            m.current()
        };
        for step in steps {
            self.report(step);
        }
        tracing::info!(transition = pending.step.transition.label, ?outcome, state = state.label(), "lifecycle transition settled");
        if let Some(reply) = pending.reply {
            let _ = reply.send(outcome == Outcome::Success);
        }
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's change_state, served by a task that settles with `outcome`: the caller's
    /// answer, the events reported, the state after.
    #[tokio::test]
    async fn change_state_is_answered_after_the_node_settles_and_every_step_is_reported() {
        let (lc, mut pending) = Lifecycle::new();
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        lc.on_event(Box::new(move |e| seen.lock().expect("events").push((e.step.transition.id, e.step.start, e.step.goal))));
        let node = tokio::spawn(async move {
            let p = pending.recv().await.expect("a pending transition");
            assert_eq!(p.step.transition, Transition::CONFIGURE);
            assert!(!p.is_local());
            (p, pending)
        });
        let lc2 = lc.clone();
        let caller = tokio::spawn(async move { lc2.change_state(1, "").await });
        let (p, mut pending) = node.await.expect("node task");
        assert_eq!(lc.state(), State::Configuring);
        // Refused at once while configuring; nothing reaches the node.
        assert!(!lc.change_state(3, "").await);
        assert!(pending.try_recv().is_err());
        assert_eq!(lc.settle(p, Outcome::Success), State::Inactive);
        assert!(caller.await.expect("caller"), "a settled success answered false");
        let want = vec![(1, State::Unconfigured, State::Configuring), (10, State::Configuring, State::Inactive)];
        assert_eq!(*events.lock().expect("events"), want);

        // A failure answers false and goes back.
        let p = lc.begin_local(Transition::ACTIVATE).expect("activate from inactive");
        assert!(p.is_local());
        assert_eq!(lc.settle(p, Outcome::Failure), State::Inactive);
        // An error is processed to unconfigured.
        let p = lc.begin_local(Transition::ACTIVATE).expect("activate from inactive");
        assert_eq!(lc.settle(p, Outcome::Error), State::Unconfigured);
        let ids: Vec<u8> = events.lock().expect("events").iter().map(|e| e.0).collect();
        assert_eq!(ids, vec![1, 10, 3, 31, 3, 32, 60]);
    }

    #[tokio::test]
    async fn change_state_fails_when_the_node_is_gone() {
        let (lc, pending) = Lifecycle::new();
        drop(pending);
        assert!(!lc.change_state(1, "configure").await);
        assert_eq!(lc.state(), State::Unconfigured, "a transition nobody carried out was left begun");
    }
}
