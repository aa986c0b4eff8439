//! The r2r backend's lifecycle interface (feature `ros2`): the `lifecycle_msgs` services of a
//! managed node and its `transition_event` topic, under the node's name as rclcpp_lifecycle
//! names them (`<node>/change_state`, ...), all answered from the node's
//! [`Lifecycle`]. `ros2 lifecycle get|set|list|nodes` and launch_ros's lifecycle events work
//! against them.

use std::sync::Arc;

use futures::StreamExt as _;
use r2r::QosProfile;
use r2r::lifecycle_msgs::{msg, srv};

use super::Subscription;
use super::r2r_shared::{AbortOnDrop, Shared};
use crate::error::{Error, Result};
use crate::lifecycle::{Lifecycle, Machine, State, Step};

fn err(what: impl std::fmt::Display) -> Error {
    Error::Ros { backend: "r2r", what: what.to_string() }
}

fn state_msg(s: State) -> msg::State {
    msg::State { id: s.id(), label: s.label().to_string() }
}

fn transition_msg(step: &Step) -> msg::Transition {
    msg::Transition { id: step.transition.id, label: step.transition.label.to_string() }
}

fn description(step: &Step) -> msg::TransitionDescription {
    msg::TransitionDescription { transition: transition_msg(step), start_state: state_msg(step.start), goal_state: state_msg(step.goal) }
}

/// Serves the lifecycle services of `node` from `lifecycle`, each on a task of `runtime`, and
/// publishes every step on `<node>/transition_event`; everything stops when the returned
/// value is dropped.
///
/// # Errors
/// [`Error::Ros`] when rcl refuses a service or the publisher.
pub(super) fn serve(node: &mut r2r::Node, runtime: &tokio::runtime::Handle, lifecycle: Arc<Lifecycle>) -> Result<Subscription> {
    let name = node.name().map_err(err)?;
    let qos = QosProfile::default;
    let events = node
        .create_publisher::<msg::TransitionEvent>(&format!("{name}/transition_event"), qos())
        .map_err(|e| err(format!("publisher {name}/transition_event: {e}")))?;
    let events = Shared(events);
    lifecycle.on_event(Box::new(move |e| {
        // The whole wrapper is captured (not its field alone, which is not Send).
        let events = &events;
        let m = msg::TransitionEvent {
            timestamp: e.timestamp_ns,
            transition: transition_msg(&e.step),
            start_state: state_msg(e.step.start),
            goal_state: state_msg(e.step.goal),
        };
        if let Err(e) = events.0.publish(&m) {
            tracing::warn!(error = %e, "r2r: publishing a transition event failed");
        }
    }));
    let service = |what: &str| format!("{name}/{what}");
    let refused = |what: &str, e: r2r::Error| err(format!("service {name}/{what}: {e}"));

    let mut change =
        node.create_service::<srv::ChangeState::Service>(&service("change_state"), qos()).map_err(|e| refused("change_state", e))?;
    let lc = lifecycle.clone();
    let change_task = runtime.spawn(async move {
        while let Some(req) = change.next().await {
            let t = &req.message.transition;
            // Refused at once when the state does not allow it; else answered once carried out.
            let success = lc.change_state(t.id, &t.label).await;
            if let Err(e) = req.respond(srv::ChangeState::Response { success }) {
                tracing::warn!(error = %e, "r2r: answering change_state failed");
            }
        }
    });

    let mut get = node.create_service::<srv::GetState::Service>(&service("get_state"), qos()).map_err(|e| refused("get_state", e))?;
    let lc = lifecycle.clone();
    let get_task = runtime.spawn(async move {
        while let Some(req) = get.next().await {
            let _ = req.respond(srv::GetState::Response { current_state: state_msg(lc.state()) });
        }
    });

    let mut states = node
        .create_service::<srv::GetAvailableStates::Service>(&service("get_available_states"), qos())
        .map_err(|e| refused("get_available_states", e))?;
    let states_task = runtime.spawn(async move {
        while let Some(req) = states.next().await {
            let _ = req.respond(srv::GetAvailableStates::Response { available_states: State::ALL.iter().map(|&s| state_msg(s)).collect() });
        }
    });

    let mut available = node
        .create_service::<srv::GetAvailableTransitions::Service>(&service("get_available_transitions"), qos())
        .map_err(|e| refused("get_available_transitions", e))?;
    let lc = lifecycle;
    let available_task = runtime.spawn(async move {
        while let Some(req) = available.next().await {
            let available_transitions = lc.available().iter().map(description).collect();
            let _ = req.respond(srv::GetAvailableTransitions::Response { available_transitions });
        }
    });

    let mut graph = node
        .create_service::<srv::GetAvailableTransitions::Service>(&service("get_transition_graph"), qos())
        .map_err(|e| refused("get_transition_graph", e))?;
    let graph_task = runtime.spawn(async move {
        while let Some(req) = graph.next().await {
            let available_transitions = Machine::graph().iter().map(description).collect();
            let _ = req.respond(srv::GetAvailableTransitions::Response { available_transitions });
        }
    });

    let tasks = [change_task, get_task, states_task, available_task, graph_task].map(AbortOnDrop);
    Ok(Subscription::new(tasks))
}
