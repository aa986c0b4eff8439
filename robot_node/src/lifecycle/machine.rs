//! The ROS 2 managed-node state machine as data, with no ROS types: the states and transitions
//! of `lifecycle_msgs` (their ids and labels as rcl_lifecycle registers them), which transitions
//! a state allows, and a [`Machine`] that moves through them.
//!
//! A transition asked for from outside (configure, cleanup, activate, deactivate, shutdown)
//! moves a primary state to a transition state ([`Machine::begin`]); the node's callback then
//! settles it ([`Machine::settle`]): success to the goal, failure back to the start (shutdown
//! fails to finalized, as rcl's), error to `errorprocessing`, which a second settle leaves for
//! unconfigured (success) or finalized.

/// A lifecycle state (`lifecycle_msgs/msg/State`): its id is the message's constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Primary: nothing loaded.
    Unconfigured = 1,
    /// Primary: configured, not processing.
    Inactive = 2,
    /// Primary: processing.
    Active = 3,
    /// Primary: shut down for good.
    Finalized = 4,
    /// Transition: configuring.
    Configuring = 10,
    /// Transition: cleaning up.
    CleaningUp = 11,
    /// Transition: shutting down.
    ShuttingDown = 12,
    /// Transition: activating.
    Activating = 13,
    /// Transition: deactivating.
    Deactivating = 14,
    /// Transition: handling an error of a callback.
    ErrorProcessing = 15,
}

impl State {
    /// Every state, primary first, as `get_available_states` lists them.
    pub const ALL: [State; 10] = [
        State::Unconfigured,
        State::Inactive,
        State::Active,
        State::Finalized,
        State::Configuring,
        State::CleaningUp,
        State::ShuttingDown,
        State::Activating,
        State::Deactivating,
        State::ErrorProcessing,
    ];

    /// The id of `lifecycle_msgs/msg/State`.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// The label rcl_lifecycle gives the state.
    pub fn label(self) -> &'static str {
        match self {
            State::Unconfigured => "unconfigured",
            State::Inactive => "inactive",
            State::Active => "active",
            State::Finalized => "finalized",
            State::Configuring => "configuring",
            State::CleaningUp => "cleaningup",
            State::ShuttingDown => "shuttingdown",
            State::Activating => "activating",
            State::Deactivating => "deactivating",
            State::ErrorProcessing => "errorprocessing",
        }
    }

    /// Whether the node rests in this state (not in the middle of a transition).
    pub fn is_primary(self) -> bool {
        (self as u8) <= 4
    }
}

/// A transition (`lifecycle_msgs/msg/Transition`): id and label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Transition {
    /// The message's constant (`TRANSITION_CONFIGURE` = 1, ...).
    pub id: u8,
    /// rcl_lifecycle's label (`configure`, `shutdown`, `transition_success`, ...).
    pub label: &'static str,
}

impl Transition {
    /// unconfigured -> inactive.
    pub const CONFIGURE: Transition = Transition { id: 1, label: "configure" };
    /// inactive -> unconfigured.
    pub const CLEANUP: Transition = Transition { id: 2, label: "cleanup" };
    /// inactive -> active.
    pub const ACTIVATE: Transition = Transition { id: 3, label: "activate" };
    /// active -> inactive.
    pub const DEACTIVATE: Transition = Transition { id: 4, label: "deactivate" };
    /// unconfigured -> finalized.
    pub const UNCONFIGURED_SHUTDOWN: Transition = Transition { id: 5, label: "shutdown" };
    /// inactive -> finalized.
    pub const INACTIVE_SHUTDOWN: Transition = Transition { id: 6, label: "shutdown" };
    /// active -> finalized.
    pub const ACTIVE_SHUTDOWN: Transition = Transition { id: 7, label: "shutdown" };

    /// Whether a caller may ask for it (`change_state`): the ids 1 to 7; the others are the
    /// callbacks' outcomes.
    pub fn is_requestable(self) -> bool {
        (1..=7).contains(&self.id)
    }
}

/// A callback's outcome (rclcpp's `CallbackReturn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done: on to the goal.
    Success,
    /// Not done, nothing broken: back to where it started.
    Failure,
    /// Broken: to `errorprocessing`.
    Error,
}

/// One edge of the graph (`lifecycle_msgs/msg/TransitionDescription`), and what a transition
/// event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The transition taken.
    pub transition: Transition,
    /// Where it starts.
    pub start: State,
    /// Where it leads.
    pub goal: State,
}

/// The outcome transitions of a transition state: (state, success, failure, error) with their
/// ids and where each leads (rcl_lifecycle's default state machine).
const OUTCOMES: [(State, [(u8, State); 3]); 6] = [
    (State::Configuring, [(10, State::Inactive), (11, State::Unconfigured), (12, State::ErrorProcessing)]),
    (State::CleaningUp, [(20, State::Unconfigured), (21, State::Inactive), (22, State::ErrorProcessing)]),
    (State::Activating, [(30, State::Active), (31, State::Inactive), (32, State::ErrorProcessing)]),
    (State::Deactivating, [(40, State::Inactive), (41, State::Active), (42, State::ErrorProcessing)]),
    (State::ShuttingDown, [(50, State::Finalized), (51, State::Finalized), (52, State::ErrorProcessing)]),
    (State::ErrorProcessing, [(60, State::Unconfigured), (61, State::Finalized), (62, State::Finalized)]),
];

/// The transitions a caller may ask for, from the primary state where each is allowed to the
/// transition state it leads to.
const REQUESTABLE: [Step; 7] = [
    Step { transition: Transition::CONFIGURE, start: State::Unconfigured, goal: State::Configuring },
    Step { transition: Transition::UNCONFIGURED_SHUTDOWN, start: State::Unconfigured, goal: State::ShuttingDown },
    Step { transition: Transition::CLEANUP, start: State::Inactive, goal: State::CleaningUp },
    Step { transition: Transition::ACTIVATE, start: State::Inactive, goal: State::Activating },
    Step { transition: Transition::INACTIVE_SHUTDOWN, start: State::Inactive, goal: State::ShuttingDown },
    Step { transition: Transition::DEACTIVATE, start: State::Active, goal: State::Deactivating },
    Step { transition: Transition::ACTIVE_SHUTDOWN, start: State::Active, goal: State::ShuttingDown },
];

/// The label of an outcome transition.
fn outcome_label(o: Outcome) -> &'static str {
    match o {
        Outcome::Success => "transition_success",
        Outcome::Failure => "transition_failure",
        Outcome::Error => "transition_error",
    }
}

/// The outcome steps leaving `state` (none for a primary state).
fn outcomes_from(state: State) -> Vec<Step> {
    OUTCOMES
        .iter()
        .filter(|(s, _)| *s == state)
        .flat_map(|(s, edges)| {
            [Outcome::Success, Outcome::Failure, Outcome::Error].iter().zip(edges).map(|(&o, &(id, goal))| Step {
                transition: Transition { id, label: outcome_label(o) },
                start: *s,
                goal,
            })
        })
        .collect()
}

/// Why a transition was not begun.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("transition {} ('{}') is not allowed from state {}", .id, .label, .state.label())]
pub struct Refused {
    /// The id asked for.
    pub id: u8,
    /// The label asked for.
    pub label: String,
    /// The state the node was in.
    pub state: State,
}

/// The state machine: where the node is.
#[derive(Debug, Clone)]
pub struct Machine {
    current: State,
}

impl Default for Machine {
    fn default() -> Self {
        Machine::new()
    }
}

impl Machine {
    /// A machine in `unconfigured`, where every node starts.
    pub fn new() -> Machine {
        Machine { current: State::Unconfigured }
    }

    /// The state now.
    pub fn current(&self) -> State {
        self.current
    }

    /// The transitions that leave the state now (`get_available_transitions`): the requestable
    /// ones of a primary state, the outcomes of a transition state.
    pub fn available(&self) -> Vec<Step> {
        if self.current.is_primary() {
            REQUESTABLE.iter().copied().filter(|s| s.start == self.current).collect()
        } else {
            outcomes_from(self.current)
        }
    }

    /// Every transition of the graph (`get_transition_graph`).
    pub fn graph() -> Vec<Step> {
        let mut all = REQUESTABLE.to_vec();
        for (state, _) in OUTCOMES {
            all.extend(outcomes_from(state));
        }
        all
    }

    /// Begins the transition asked for by `label` when it is not empty (as rclcpp does: a
    /// `ros2 service call` leaves the id 0), else by `id`, if the state now allows it; the
    /// machine is then in the transition state until [`Machine::settle`].
    ///
    /// # Errors
    /// [`Refused`] when the state now has no such requestable transition (the node is in the
    /// middle of another, or the transition leaves another state); nothing changes.
    pub fn begin(&mut self, id: u8, label: &str) -> Result<Step, Refused> {
        let found = REQUESTABLE
            .iter()
            .find(|s| s.start == self.current && if label.is_empty() { s.transition.id == id } else { s.transition.label == label });
        match found {
            Some(&step) => {
                self.current = step.goal;
                Ok(step)
            }
            None => Err(Refused { id, label: label.to_string(), state: self.current }),
        }
    }

    /// Settles the transition state with the callback's `outcome`, and returns the step
    /// taken; `None` (nothing changes) when the machine rests in a primary state.
    pub fn settle(&mut self, outcome: Outcome) -> Option<Step> {
        let label = outcome_label(outcome);
        let step = outcomes_from(self.current).into_iter().find(|s| s.transition.label == label)?;
        self.current = step.goal;
        Some(step)
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
