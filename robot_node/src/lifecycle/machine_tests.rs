//! The state machine against rcl_lifecycle's default graph: what each state allows, what it
//! refuses, and where each outcome leads.

use super::{Machine, Outcome, State, Transition};

/// A machine brought to `state` through successful transitions.
fn at(state: State) -> Machine {
    let mut m = Machine::new();
    let path: &[Transition] = match state {
        State::Unconfigured => &[],
        State::Inactive => &[Transition::CONFIGURE],
        State::Active => &[Transition::CONFIGURE, Transition::ACTIVATE],
        State::Finalized => &[Transition::UNCONFIGURED_SHUTDOWN],
        other => panic!("not a primary state: {other:?}"),
    };
    for t in path {
        m.begin(t.id, "").expect("allowed on the way");
        m.settle(Outcome::Success).expect("a transition state settles");
    }
    assert_eq!(m.current(), state);
    m
}

#[test]
fn every_requestable_transition_is_allowed_only_from_its_own_state() {
    let allowed =
        [(State::Unconfigured, vec![1, 5]), (State::Inactive, vec![2, 3, 6]), (State::Active, vec![4, 7]), (State::Finalized, vec![])];
    for (state, ids) in allowed {
        for id in 0..=99u8 {
            let mut m = at(state);
            let r = m.begin(id, "");
            assert_eq!(r.is_ok(), ids.contains(&id), "transition {id} from {state:?}: {r:?}");
            if let Err(refused) = r {
                assert_eq!(m.current(), state, "a refused transition changed the state");
                assert_eq!(refused.state, state);
                assert!(refused.to_string().contains(state.label()), "{refused}");
            }
        }
    }
}

#[test]
fn a_transition_asked_by_label_picks_the_one_of_the_state_now() {
    // `shutdown` is three transitions (5, 6, 7), one per primary state.
    for (state, id) in [(State::Unconfigured, 5), (State::Inactive, 6), (State::Active, 7)] {
        let mut m = at(state);
        let step = m.begin(0, "shutdown").expect("shutdown by label");
        assert_eq!((step.transition.id, step.start, step.goal), (id, state, State::ShuttingDown));
    }
    // The label wins over the id, as in rclcpp (a ros2 service call leaves the id 0).
    let mut m = at(State::Inactive);
    assert_eq!(m.begin(1, "activate").map(|s| s.transition), Ok(Transition::ACTIVATE));
    assert!(at(State::Active).begin(4, "configure").is_err(), "the label 'configure' is not allowed from active");
    assert!(at(State::Inactive).begin(0, "bogus").is_err());
}

#[test]
fn nothing_is_requestable_in_the_middle_of_a_transition() {
    let mut m = at(State::Inactive);
    m.begin(Transition::ACTIVATE.id, "").expect("activate");
    assert_eq!(m.current(), State::Activating);
    for id in 1..=7 {
        assert!(m.begin(id, "").is_err(), "transition {id} begun while activating");
    }
    let outcomes: Vec<u8> = m.available().iter().map(|s| s.transition.id).collect();
    assert_eq!(outcomes, vec![30, 31, 32]);
}

#[test]
fn outcomes_lead_where_rcl_lifecycle_leads() {
    let cases = [
        (State::Unconfigured, Transition::CONFIGURE, Outcome::Success, State::Inactive),
        (State::Unconfigured, Transition::CONFIGURE, Outcome::Failure, State::Unconfigured),
        (State::Inactive, Transition::ACTIVATE, Outcome::Success, State::Active),
        (State::Inactive, Transition::ACTIVATE, Outcome::Failure, State::Inactive),
        (State::Active, Transition::DEACTIVATE, Outcome::Success, State::Inactive),
        (State::Active, Transition::DEACTIVATE, Outcome::Failure, State::Active),
        (State::Inactive, Transition::CLEANUP, Outcome::Success, State::Unconfigured),
        (State::Inactive, Transition::CLEANUP, Outcome::Failure, State::Inactive),
        (State::Active, Transition::ACTIVE_SHUTDOWN, Outcome::Success, State::Finalized),
        (State::Inactive, Transition::INACTIVE_SHUTDOWN, Outcome::Failure, State::Finalized),
        (State::Active, Transition::ACTIVATE, Outcome::Success, State::Active),
    ];
    for (from, t, outcome, to) in cases {
        let mut m = at(from);
        if m.begin(t.id, "").is_err() {
            // The last case: activate is refused from active, and nothing moves.
            assert_eq!((from, t), (State::Active, Transition::ACTIVATE));
            assert_eq!(m.settle(outcome), None, "a primary state settled");
            assert_eq!(m.current(), State::Active);
            continue;
        }
        let step = m.settle(outcome).expect("settles");
        assert_eq!((step.goal, m.current()), (to, to), "{t:?} from {from:?} with {outcome:?}");
    }
}

#[test]
fn an_error_goes_through_errorprocessing() {
    let mut m = at(State::Inactive);
    m.begin(Transition::ACTIVATE.id, "").expect("activate");
    let step = m.settle(Outcome::Error).expect("settles");
    assert_eq!((step.transition.id, step.goal), (32, State::ErrorProcessing));
    let step = m.settle(Outcome::Success).expect("error processing settles");
    assert_eq!((step.transition.id, step.goal), (60, State::Unconfigured));

    let mut m = at(State::Unconfigured);
    m.begin(Transition::CONFIGURE.id, "").expect("configure");
    m.settle(Outcome::Error);
    assert_eq!(m.settle(Outcome::Failure).map(|s| s.goal), Some(State::Finalized));
}

#[test]
fn states_and_the_graph_match_lifecycle_msgs() {
    let ids: Vec<u8> = State::ALL.iter().map(|s| s.id()).collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 10, 11, 12, 13, 14, 15]);
    assert_eq!(State::ALL.iter().filter(|s| s.is_primary()).count(), 4);
    let graph = Machine::graph();
    // 7 requestable transitions and 3 outcomes of each of the 6 transition states.
    assert_eq!(graph.len(), 7 + 18);
    for step in &graph {
        assert_eq!(step.transition.is_requestable(), step.start.is_primary(), "{step:?}");
    }
    let available: Vec<(u8, &str, &str)> =
        at(State::Unconfigured).available().iter().map(|s| (s.transition.id, s.transition.label, s.goal.label())).collect();
    assert_eq!(available, vec![(1, "configure", "configuring"), (5, "shutdown", "shuttingdown")]);
    assert!(at(State::Finalized).available().is_empty());
}
