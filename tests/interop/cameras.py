"""interop.py --mode cameras: two cameras on one `lop_robot` (`cameras: [front, rear]`), fed by
the peer (rclpy on the r2r backend, or the Zenoh peer on hiroz) as two camera drivers would.

1. One model, two sessions: lop_robot is ready with both camera topics; the edge holds one
   session per camera (/metrics lop_edge_sessions 2).
2. Each camera's frames come back exact: the unsplit model (`lop run`) on the frame converted
   at that camera's own fit (front: letterbox, rear: resize), and every result names its camera
   in header.frame_id (front: the camera's name when the frame has none, the frame's own
   otherwise; rear: camera.rear.frame_id).
3. Both cameras' frames sent together are all answered: each camera has its own mailbox.
4. A bad rear frame is counted on the rear camera's /diagnostics status only; front frames sent
   beside it are answered.
5. The front camera's debug image comes out under its namespace (/front/lop/debug_image).
6. A camera list naming one topic twice: lop_robot exits at start with one error naming the
   topic and both cameras.
"""

import os
import subprocess
import time

REAR_TOPIC = "/rear/image_raw"


def camera_params(front_topic):
    """The lines interop.py's robot.yaml gets for two cameras (under ros__parameters)."""
    return (
        "    cameras: [front, rear]\n"
        "    camera:\n"
        f'      front:\n        topic: "{front_topic}"\n'
        f'      rear:\n        topic: "{REAR_TOPIC}"\n        fit: "resize"\n        frame_id: "rear_optical"\n'
    )


def send(h, pub, frame, sec, frame_id):
    msg = h.types.image(sec, 7, frame_id, frame["width"], frame["height"], frame["encoding"], frame["step"], frame["data"])
    h.sent_at[sec] = time.monotonic()
    pub.publish(msg)


def answered(h, sends, check, what):
    """Sends every (publisher, frame, sec, frame_id) (again each second, until answered) and
    returns {sec: result}."""
    got = {}
    deadline = time.monotonic() + h.args.frame_timeout
    while len(got) < len(sends) and time.monotonic() < deadline:
        for pub, frame, sec, frame_id in sends:
            if sec not in got:
                send(h, pub, frame, sec, frame_id)
        for _pub, _frame, sec, _fid in sends:
            if sec not in got:
                r = h.wait_result(sec, 1.0 / len(sends))
                if r is not None:
                    got[sec] = r
    missing = [s for _p, _f, s, _i in sends if s not in got]
    check(not missing, f"{what}: frames {missing} were not answered within {h.args.frame_timeout} s:\n{h.robot.tail()}")
    return got


def status(h, camera, predicate, timeout):
    """The first /diagnostics values of `camera`'s status satisfying predicate."""
    return h.wait_diag(lambda v: v.get("camera") == camera and predicate(v), timeout, after=time.monotonic() - 0.5)


def exact(h, tools, r, frame, letterbox, what):
    conv = tools.image_to_chw(frame["width"], frame["height"], frame["encoding"], frame["step"], frame["data"], 224, 224, letterbox=letterbox)
    return h.check_outputs(r[2], h.reference(conv), what)


def twice_refused(h, tools, check, log):
    """6: a topic named twice stops lop_robot at start with one error."""
    path = os.path.join(h.work, "twice.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write("lop_robot:\n  ros__parameters:\n" + h.ros_session + f"    cameras: [front, rear]\n    camera:\n      rear:\n        topic: /front/image_raw\n")
    backend = ["--backend", "r2r"] if h.rclpy else []
    r = subprocess.run([os.path.join(h.node_bin, "lop_robot"), *backend, "--config", path], env=tools.child_env({"NO_COLOR": "1"}), capture_output=True, text=True, timeout=60, check=False)
    out = r.stdout + r.stderr
    says = "'front' and 'rear' both subscribe /front/image_raw"
    check(r.returncode != 0, f"lop_robot started with one topic named twice:\n{out}")
    check(out.count(says) == 1, f"lop_robot's start-up error does not say once that {says}:\n{out}")
    log(f"cameras: a topic named twice refused at start (exit {r.returncode}): {says}")


def run(h, tools, check, log):
    """The checks above; `h` is a Harness not started yet; `tools` holds interop.py's
    image_frame, image_to_chw and child_env."""
    image_frame = tools.image_frame
    h.start_edge()
    with open(h.robot_yaml, "a", encoding="utf-8") as f:
        f.write(camera_params(h.input_topic))
    h.start_robot()
    import flood  # noqa: PLC0415 (its /metrics reader)

    peer = h.peer
    rear = peer.publisher(REAR_TOPIC, "sensor_msgs/msg/Image", sensor_data=True)
    debug = peer.subscribe("/front/lop/debug_image", "sensor_msgs/msg/Image")
    if h.rclpy:
        check(rear.wait_matched(30.0), "lop_robot's rear camera subscription did not match within 30 s")
        check(debug.wait_matched(30.0), "no publisher of /front/lop/debug_image matched within 30 s")
    line = h.robot.grep(r"robot_node::robot: ready\b.*inputs=2")
    check(line, f"lop_robot is not ready with two inputs:\n{h.robot.tail()}")
    for topic in (h.input_topic, REAR_TOPIC):
        check(topic in line[0].string, f"lop_robot's ready line does not name {topic}: {line[0].string}")
    deadline = time.monotonic() + 10.0
    while flood.metric(h.metrics_port, "lop_edge_sessions") != 2.0 and time.monotonic() < deadline:
        time.sleep(0.2)
    sessions = flood.metric(h.metrics_port, "lop_edge_sessions")
    check(sessions == 2.0, f"the edge holds {sessions} sessions for two cameras, not 2")
    log("cameras: lop_robot ready with /front and /rear on one model; the edge holds one session per camera")

    front = h.input
    f1, r1 = image_frame(640, 480, "rgb8", 11), image_frame(640, 480, "rgb8", 12)
    done = []
    # 2. One at a time, each exact at its own fit and named after its camera.
    r = answered(h, [(front, f1, 301, "")], check, "front")[301]
    check(r[2].header.frame_id == "front", f"a front frame without a frame id came back named {r[2].header.frame_id!r}")
    err = exact(h, tools, r, f1, True, "front 301")
    done.append(("front_301", r[2], err, 0.0, r[1]))
    r = answered(h, [(rear, r1, 302, "rear_driver")], check, "rear")[302]
    check(r[2].header.frame_id == "rear_optical", f"a rear frame came back named {r[2].header.frame_id!r}, not camera.rear.frame_id")
    done.append(("rear_302", r[2], exact(h, tools, r, r1, False, "rear 302"), 0.0, r[1]))
    log("cameras: each camera's frame exact at its own fit (front letterbox, rear resize), named after its camera")

    # 3. Together: neither camera's frame replaces the other's.
    for k in range(3):
        fs, rs = 310 + 2 * k, 311 + 2 * k
        got = answered(h, [(front, f1, fs, "front_optical"), (rear, r1, rs, "")], check, "both cameras at once")
        check(got[fs][2].header.frame_id == "front_optical", f"front frame {fs} named {got[fs][2].header.frame_id!r}")
        check(got[rs][2].header.frame_id == "rear_optical", f"rear frame {rs} named {got[rs][2].header.frame_id!r}")
        exact(h, tools, got[fs], f1, True, f"front {fs}")
        exact(h, tools, got[rs], r1, False, f"rear {rs}")
    # Reported, not checked: each camera's inference runs on a worker of its own, so frames of
    # both cameras are at the edge together; whether it batches them depends on its max_batch
    # and on whether they wait for a busy replica (robot_node/tests/cameras_together.rs checks it).
    runs, inferences = (flood.metric(h.metrics_port, f"lop_edge_batch_size_{k}") for k in ("count", "sum"))
    log(f"cameras: frames of both cameras sent together all answered, each exact; the edge ran {inferences} inferences in {runs} runs")

    # 4. A bad rear frame: counted on the rear status only; the front camera goes on.
    bad = dict(image_frame(64, 48, "rgb8", 13))
    bad["step"] = 10
    send(h, rear, bad, 320, "rear_bad")
    got = answered(h, [(front, f1, 321, "")], check, "front beside the bad rear frame")
    exact(h, tools, got[321], f1, True, "front 321")
    rv = status(h, "rear", lambda v: int(v["frames_unconvertible"]) >= 1, 10.0)
    check(rv is not None, "the bad rear frame is not counted on the rear camera's /diagnostics status")
    fv = status(h, "front", lambda v: int(v["frames_answered"]) >= 5, 10.0)
    check(fv is not None, "the front camera's status does not count its 5 answered frames")
    check(fv["frames_unconvertible"] == "0", f"the rear camera's bad frame was counted on the front status: {fv['frames_unconvertible']}")
    check((fv["edge_session_id"], rv["edge_session_id"]) == ("interop-robot", "interop-robot.lane1"), f"edge session ids {fv['edge_session_id']}, {rv['edge_session_id']}")
    log(f"cameras: /diagnostics per camera: front answered {fv['frames_answered']}, rear bad {rv['frames_unconvertible']}; sessions {fv['edge_session_id']}, {rv['edge_session_id']}")

    # 5. The front camera's debug image, under its namespace.
    ok = debug.wait_for(lambda msgs: any(m[3].header.frame_id in ("front", "front_optical") for m in msgs), 10.0)
    check(ok, "no debug image of the front camera on /front/lop/debug_image")
    log(f"cameras: debug image on /front/lop/debug_image; lop_robot's RSS {h.robot.rss_kib()} KiB")

    twice_refused(h, tools, check, log)
    return done
