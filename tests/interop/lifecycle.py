"""interop.py --mode lifecycle --ros rclpy: `lop_robot` (r2r, as colcon installed it) as a ROS 2
managed node, driven by rclpy through the lifecycle_msgs services as `ros2 lifecycle` drives it.

1. With `lifecycle.autostart` at its default (true) the node activated itself: get_state says
   active, the listings are rclcpp's, and a frame is answered.
2. Transitions the state does not allow (activate, configure, cleanup by id and by label, an
   unknown label, an outcome id) get ChangeState success=false while frames stream in, and every
   frame is answered: none is lost.
3. Deactivate: success, transition_event reports deactivate then its success; the edge's
   session closes (/metrics lop_edge_sessions 0: the model and the edge session are freed); frames
   sent now are not answered, nor taken in (the input is subscribed only while active).
4. Activate: the node loads the model again, reconnects (lop_edge_sessions 1) and answers frames.
5. Shutdown by label: finalized; everything after is refused and nothing is answered.
"""

import time

def metric(port, name):
    import flood  # noqa: PLC0415 (its /metrics reader)

    return flood.metric(port, name)


def wait_until(pred, timeout, step=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return None


def as_done(sec, r):
    """A result as interop.py's main prints the first one: (frame id, message, -, -, attachment)."""
    _t, att, m = r
    return (f"lifecycle_{sec}", m, None, None, att)


def answered(h, frame, sec, check, what):
    h.send(frame, sec, f"lifecycle_{sec}")
    r = h.wait_result(sec, h.args.frame_timeout)
    check(r is not None, f"{what}: frame {sec} was not answered within {h.args.frame_timeout} s")
    check(r[2].header.frame_id == f"lifecycle_{sec}", f"{what}: frame {sec}'s result carries frame id {r[2].header.frame_id!r}")
    return as_done(sec, r)


def events_after(h, n0):
    msgs, _ = h.events.snapshot()
    return [(m.transition.id, m.start_state.label, m.goal_state.label) for _t, _w, _a, m in msgs[n0:]]


def run(h, image_frame, check, log):
    """The checks above on a started Harness (lop_edge and lop_robot up, rclpy peer made)."""
    peer = h.peer
    node = h.robot_node
    h.events = peer.subscribe(f"/{node}/transition_event", "lifecycle_msgs/msg/TransitionEvent")
    check(h.events.wait_matched(30.0), "lop_robot's transition_event publisher did not match within 30 s")
    frame = image_frame(224, 224, "rgb8", 1)
    done = []

    # 1. Autostart.
    check(peer.get_state(node) == (3, "active"), f"autostart: get_state {peer.get_state(node)}, not active")
    states = peer.available_states(node)
    check([s[0] for s in states] == [1, 2, 3, 4, 10, 11, 12, 13, 14, 15], f"get_available_states {states}")
    trans = peer.available_transitions(node)
    want = [(4, "deactivate", "active", "deactivating"), (7, "shutdown", "active", "shuttingdown")]
    check(trans == want, f"get_available_transitions while active: {trans}, not {want}")
    graph = peer.available_transitions(node, service="get_transition_graph")
    check(len(graph) == 25, f"get_transition_graph lists {len(graph)} transitions, not 25")
    done.append(answered(h, frame, 200, check, "active after autostart"))
    log("lifecycle: autostart left lop_robot active; states, transitions and graph as rclcpp lists them")

    # 2. Refused transitions while frames stream: success=false, no frame lost.
    bad = [(3, ""), (1, ""), (2, ""), (0, "configure"), (0, "cleanup"), (0, "bogus"), (10, ""), (5, "")]
    n0 = len(h.events.snapshot()[0])
    for k, (tid, label) in enumerate(bad):
        sec = 210 + k
        h.send(frame, sec, f"lifecycle_{sec}")
        ok = peer.change_state(node, tid, label)
        check(ok is False, f"change_state(id={tid}, label={label!r}) from active answered success={ok}")
        r = h.wait_result(sec, h.args.frame_timeout)
        check(r is not None, f"frame {sec}, sent beside the refused change_state(id={tid}, label={label!r}), was lost")
        done.append(as_done(sec, r))
    check(peer.get_state(node) == (3, "active"), "a refused transition moved the node")
    check(events_after(h, n0) == [], f"refused transitions published transition events: {events_after(h, n0)}")
    log(f"lifecycle: {len(bad)} transitions not allowed from active refused (success=false), all {len(bad)} frames beside them answered")

    # 3. Deactivate: the model and the edge session freed, frames not answered.
    n0 = len(h.events.snapshot()[0])
    check(metric(h.metrics_port, "lop_edge_sessions") == 1.0, "the edge has no session open while lop_robot is active")
    check(peer.change_state(node, 4) is True, "deactivate from active failed")
    check(peer.get_state(node) == (2, "inactive"), f"after deactivate: {peer.get_state(node)}")
    want = [(4, "active", "deactivating"), (40, "deactivating", "inactive")]
    check(h.events.wait_for(lambda m: len(m) >= n0 + 2, 10.0), "no transition events for deactivate")
    check(events_after(h, n0) == want, f"transition events of deactivate: {events_after(h, n0)}, not {want}")
    gone = wait_until(lambda: metric(h.metrics_port, "lop_edge_sessions") == 0.0, 30.0)
    check(gone, f"the edge still counts lop_robot's session 30 s after deactivate: lop_edge_sessions {metric(h.metrics_port, 'lop_edge_sessions')}")
    before = h.wait_diag(lambda v: v.get("lifecycle_state") == "inactive", 10.0, after=time.monotonic())
    check(before is not None, "/diagnostics does not say inactive after deactivate")
    for sec in (230, 231, 232):
        h.send(frame, sec, f"lifecycle_{sec}")
        time.sleep(0.2)
    for sec in (230, 231, 232):
        check(h.wait_result(sec, 1.0) is None, f"frame {sec}, sent while inactive, was answered")
    d = h.wait_diag(lambda v: v.get("lifecycle_state") == "inactive", 10.0, after=time.monotonic())
    check(d is not None, "/diagnostics does not say inactive")
    check(
        int(d["frames_received"]) == int(before["frames_received"]),
        f"lop_robot took in frames while inactive ({before['frames_received']} -> {d['frames_received']}): its input must be unsubscribed",
    )
    log(f"lifecycle: deactivated: edge session closed, input unsubscribed ({d['frames_received']} frames received, none while inactive), none answered")

    # 4. Activate again: the model and the session come back.
    check(peer.change_state(node, 0, "activate") is True, "activate (by label) from inactive failed")
    check(peer.get_state(node) == (3, "active"), f"after activate: {peer.get_state(node)}")
    back = wait_until(lambda: metric(h.metrics_port, "lop_edge_sessions") == 1.0, 30.0)
    check(back, "the edge has no session 30 s after activate")
    done.append(answered(h, frame, 240, check, "active again"))
    log("lifecycle: activated again: the model reloaded, the edge session back, frames answered")

    # 5. Shutdown to finalized.
    check(peer.change_state(node, 0, "shutdown") is True, "shutdown (by label) from active failed")
    check(peer.get_state(node) == (4, "finalized"), f"after shutdown: {peer.get_state(node)}")
    check(peer.available_transitions(node) == [], "finalized still lists transitions")
    for tid in (1, 3):
        check(peer.change_state(node, tid) is False, f"change_state({tid}) from finalized succeeded")
    h.send(frame, 250, "lifecycle_250")
    check(h.wait_result(250, 2.0) is None, "a frame sent once finalized was answered")
    log("lifecycle: shutdown to finalized; configure and activate refused afterwards")
    return done
