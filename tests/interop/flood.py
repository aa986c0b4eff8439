"""interop.py --mode flood: a hostile Zenoh peer floods the real lop_edge with Hellos.

The attacker is this script, with `eclipse-zenoh` only: it speaks the frame format from its
specification (msgs/src/protocol/mod.rs, "Wire format") and computes profile content hashes as
lop_edge checks them (lop/src/content_hash.rs: sha256 of the JSON with sorted keys and every
float written with 9 significant digits), both written here anew. It learns what it needs as
any peer on the site could: the model's hash from a robot profile of the model, the planner
configuration's hash from the edge's own refusal of a probe Hello.

Then, against lop_edge with no robot profile known up front:

1. it sends FLOOD_HELLOS Hellos within FLOOD_S seconds, each from a made-up robot id with a
   made-up profile of its own (a valid profile of the model, one coefficient nudged, its content
   hash correct), and goes on at that rate until the robot has split (so that the flood outlasts
   the robot's connection however loaded the machine is), and reads every reply;
2. lop_robot (a legitimate robot with a profile the edge has never seen, 20x slower than this
   machine so that its plans use the edge) says its first Hello during the flood, and is sent
   camera frames one after another, through the flood and after it.

It checks that every frame is answered and equals the unsplit model's output; that the robot
connects and splits (bytes up and down, computed on both sides, no fallback) both before the
flood ends and after it; that every made-up Hello is answered, refused as `Planning` (or, for
the few whose table the edge planned, welcomed), none with another reason (which would mean this
script's encoding or hashing is wrong); that the edge's anonymous resident memory (RssAnon: its
heap and stacks, where a flood would pile up) grows by at most MAX_RSS_GROWTH_MIB over the flood;
and that the refusals are counted in /metrics (`lop_edge_robot_profiles_refused_total`).

The pages of mapped files (RssFile) are reported, not capped: they are libtorch's code, paged in
as the robot's first split runs kernels the edge had not run yet (about 30 MiB on this machine),
bounded by the libraries' size and given back under memory pressure, whatever the flood does.
"""

import hashlib
import json
import re
import struct
import threading
import time
import urllib.request

import zenoh

FLOOD_HELLOS = 1000
FLOOD_S = 10.0
# The flood goes on, at the same rate, until the robot has split during it (at most this long).
MAX_FLOOD_S = 60.0
MAX_FLOOD_HELLOS = 7000
MAX_RSS_GROWTH_MIB = 64
# The frame format (msgs/src/protocol/mod.rs).
MAGIC, VERSION = b"LOPF", 7
KIND_HELLO, KIND_WELCOME, KIND_REJECT = 0x01, 0x02, 0x03
DTYPE_U8, DTYPE_F32 = 1, 4
REASONS = {1: "UnsupportedVersion", 2: "UnknownModel", 3: "BadInput", 4: "NoTable", 5: "Busy", 6: "ShuttingDown", 7: "Planning", 8: "Loading", 255: "Other"}


class Flood:
    """The attacker's Zenoh session (a client of the edge's router) and what it has heard."""

    def __init__(self, endpoint):
        conf = zenoh.Config()
        conf.insert_json5("mode", '"client"')
        conf.insert_json5("connect/endpoints", f'["{endpoint}"]')
        conf.insert_json5("scouting/multicast/enabled", "false")
        self.session = zenoh.open(conf)
        self.cond = threading.Condition()
        self.replies = {}  # robot id -> [(kind name, reason name or None, text)]
        self.malformed = []
        self._sub = self.session.declare_subscriber("lop/v1/*/down", self._on_down)

    def _on_down(self, sample):
        robot = str(sample.key_expr).split("/")[2]
        if not robot.startswith(("fake", "probe")):
            return  # the legitimate robot's downlink (readable here: plaintext, no access control)
        try:
            reply = decode_reply(bytes(sample.payload.to_bytes()))
        except ValueError as e:
            reply = None
            with self.cond:
                self.malformed.append(f"{robot}: {e}")
        if reply is not None:
            with self.cond:
                self.replies.setdefault(robot, []).append(reply)
                self.cond.notify_all()

    def hello(self, robot_id, body_fields):
        # Blocking congestion control, as lop's own links publish: Zenoh's default (drop) may
        # drop a Hello under the flood's own load, and every one must be answered.
        self.session.put(f"lop/v1/{robot_id}/hello", encode_hello(robot_id=robot_id, **body_fields), congestion_control=zenoh.CongestionControl.BLOCK)

    def wait_replies(self, robots, timeout):
        """Waits until every robot id in `robots` has at least one reply; returns those without."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                missing = [r for r in robots if r not in self.replies]
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                self.cond.wait(min(left, 0.2))

    def close(self):
        self._sub.undeclare()
        self.session.close()


def str16(s):
    b = s.encode("utf-8")
    return struct.pack("<H", len(b)) + b


def encode_hello(model_sha256, profile_hash, planner_hash, dtype, shape, robot_id, model_id, profile):
    body = model_sha256 + profile_hash + planner_hash + struct.pack("<BB", dtype, len(shape))
    body += b"".join(struct.pack("<I", d) for d in shape)
    body += str16(robot_id) + str16(model_id) + struct.pack("<I", len(profile)) + profile
    return MAGIC + struct.pack("<HBBI", VERSION, KIND_HELLO, 0, len(body)) + body


def decode_reply(b):
    """(kind, reason, text) of a Welcome or Reject frame; ValueError for anything else."""
    if len(b) < 12 or b[:4] != MAGIC:
        raise ValueError(f"not a frame ({len(b)} B)")
    version, kind, flags, n = struct.unpack("<HBBI", b[4:12])
    if version != VERSION or flags != 0 or n != len(b) - 12:
        raise ValueError(f"bad header: version {version}, flags {flags}, body {n} of {len(b) - 12} B")
    body = b[12:]
    if kind == KIND_WELCOME:
        return ("Welcome", None, "")
    if kind == KIND_REJECT:
        if len(body) < 3:
            raise ValueError(f"a Reject body of {len(body)} B")
        (tn,) = struct.unpack("<H", body[1:3])
        return ("Reject", REASONS.get(body[0], f"code {body[0]}"), body[3 : 3 + tn].decode("utf-8", "replace"))
    raise ValueError(f"frame kind {kind}")


def canon(v):
    """lop's canonical form of a profile for its content hash: floats as 9-digit strings in
    Rust's `{:.8e}` format (no '+', no leading zeros in the exponent)."""
    if isinstance(v, float):
        mantissa, exp = f"{v:.8e}".split("e")
        return f"{mantissa}e{int(exp)}"
    if isinstance(v, list):
        return [canon(x) for x in v]
    if isinstance(v, dict):
        return {k: canon(x) for k, x in v.items()}
    return v


def content_hash(profile):
    text = json.dumps(canon(profile), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def made_up(profile, k):
    """The profile with its first op's slope nudged: valid, with a content hash of its own."""
    p = json.loads(json.dumps(profile))
    p["ops"][0]["fit"]["b_s_per_row"] *= 1.0 + 1e-6 * (k + 1)
    return p


def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode("utf-8")
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def learn_hello_fields(fl, h, profile, check):
    """The fields a made-up Hello needs, learnt as any peer could: the model hash from the robot
    profile, the input dtype and the planner hash from the edge's refusals of probe Hellos."""
    shape = [1, 3, h.size, h.size]
    fields = dict(model_sha256=bytes.fromhex(profile["model_hash"]), profile_hash=b"\0" * 32, planner_hash=b"\0" * 32, shape=shape, model_id=h.model_id, profile=b"")
    for n, dtype in enumerate((DTYPE_U8, DTYPE_F32)):
        probe = f"probe{n}"
        fl.hello(probe, dict(fields, dtype=dtype))
        check(not fl.wait_replies([probe], 20.0), f"lop_edge did not answer the probe Hello {probe} within 20 s")
        kind, reason, text = fl.replies[probe][0]
        m = re.search(r"differs from the edge's ([0-9a-f]{64})", text)
        if reason == "NoTable" and m:
            return dict(fields, dtype=dtype, planner_hash=bytes.fromhex(m.group(1)))
        check(reason == "BadInput" and "dtype" in text, f"probe Hello {probe}: {kind} {reason} '{text}', expected a refusal naming the planner hash")
    check(False, "lop_edge refused the probe Hellos' input dtype, uint8 and float32 both")
    return None


def rss_kib(proc):
    """(RssAnon, RssFile) of the process in KiB, or None once it has gone."""
    anon, file = proc.rss_kib("RssAnon"), proc.rss_kib("RssFile")
    return None if anon is None or file is None else (anon, file)


def rss_sampler(proc, stop, out):
    while not stop.is_set():
        v = rss_kib(proc)
        if v is not None:
            out.append(v)
        stop.wait(0.1)


def send_flood(fl, fields, profile, timing, enough):
    """Sends made-up Hellos at FLOOD_HELLOS per 0.9 FLOOD_S: at least FLOOD_HELLOS, and on until
    `enough` is set (the robot has split during the flood), so that the flood outlasts the
    robot's connection on a loaded machine too (bounded: MAX_FLOOD_S, MAX_FLOOD_HELLOS)."""
    first = timing.pop("first")
    t0 = time.monotonic()
    timing["start"] = t0
    gap = 0.9 * FLOOD_S / FLOOD_HELLOS
    sent = timing["sent"]
    for k in range(MAX_FLOOD_HELLOS):
        if k >= FLOOD_HELLOS and (enough.is_set() or time.monotonic() - t0 > MAX_FLOOD_S):
            break
        robot = f"fake{k}"
        # The first FLOOD_HELLOS made up beforehand, so that their rate holds on a loaded machine.
        body, digest = first[k] if k < len(first) else made_up_wire(profile, k)
        wait = t0 + k * gap - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        fl.hello(robot, dict(fields, profile_hash=digest, profile=body))
        sent.append(robot)
        if k + 1 == FLOOD_HELLOS:
            timing["first_s"] = time.monotonic() - t0
    timing["end"] = time.monotonic()


def check_fake_replies(fl, robots, check, log):
    missing = fl.wait_replies(robots, 60.0)
    check(not missing, f"{len(missing)} made-up Hellos got no reply within 60 s of the flood (first: {missing[:3]})")
    check(not fl.malformed, f"replies this script cannot decode: {fl.malformed[:3]}")
    kinds = {}
    for r in robots:
        kind, reason, text = fl.replies[r][0]
        key = reason or kind
        kinds[key] = kinds.get(key, 0) + 1
        check(key in ("Planning", "Welcome"), f"Hello of {r}: {kind} {reason} '{text}' (a made-up profile is a valid one: only Planning or Welcome are right)")
    log(f"flood: {len(robots)} made-up Hellos answered: {kinds}")
    return kinds


def run(h, image_frame, image_to_chw, check, log):
    """The scenario of the module docs; returns the frames' summaries as exact_frames does."""
    h.start_edge()
    with open(h.robot_profile(), encoding="utf-8") as f:
        profile = json.load(f)
    fl = Flood(f"tcp/127.0.0.1:{h.edge_port}")
    try:
        fields = learn_hello_fields(fl, h, profile, check)
        rss, stop, enough = [], threading.Event(), threading.Event()
        rss_before = rss_kib(h.edge)
        check(rss_before is not None, "lop_edge's /proc/PID/status has no RssAnon and RssFile")
        sampler = threading.Thread(target=rss_sampler, args=(h.edge, stop, rss), daemon=True)
        sampler.start()
        timing = {"sent": [], "first": [made_up_wire(profile, k) for k in range(FLOOD_HELLOS)]}
        sender = threading.Thread(target=send_flood, args=(fl, fields, profile, timing, enough), daemon=True)
        # The flood starts as lop_robot's process is up (libtorch loaded) and about to plan its
        # table, so that its first Hello meets the flood.
        h.start_robot(connected=False, on_start=sender.start)
        check(h.robot.grep(r"the edge is building the schedule table for this robot"), "lop_robot's first Hello did not meet the flood")
        done = stream_through(h, image_frame, image_to_chw, sender, timing, enough, check, log)
        sent = timing["sent"]
        log(f"flood: {len(sent)} made-up Hellos in {timing['end'] - timing['start']:.1f} s, the first {FLOOD_HELLOS} in {timing['first_s']:.1f} s")
        check(timing["first_s"] <= FLOOD_S, f"the first {FLOOD_HELLOS} Hellos took {timing['first_s']:.1f} s (> {FLOOD_S} s)")
        kinds = check_fake_replies(fl, sent, check, log)
        stop.set()
        sampler.join(5)
        check_rss(rss_before, rss, check, log)
        refused = metric(h.metrics_port, "lop_edge_robot_profiles_refused_total")
        check(refused is not None and refused >= kinds.get("Planning", 0), f"/metrics lop_edge_robot_profiles_refused_total {refused}, {kinds.get('Planning', 0)} refusals seen")
        log(f"flood: /metrics lop_edge_robot_profiles_refused_total {refused:.0f}")
        return done
    finally:
        fl.close()


def check_rss(before, samples, check, log):
    """Logs the edge's anonymous and file-backed resident memory before the flood and at most
    during it, and checks the anonymous part's growth against MAX_RSS_GROWTH_MIB."""
    anon, file = (max(s[i] for s in samples) / 1024.0 for i in (0, 1))
    grown = anon - before[0] / 1024.0
    log(
        f"flood: lop_edge RssAnon {before[0] / 1024:.1f} MiB before, at most {anon:.1f} MiB after (+{grown:.1f} MiB; cap {MAX_RSS_GROWTH_MIB}); "
        f"RssFile {before[1] / 1024:.1f} MiB before, at most {file:.1f} MiB (libtorch's code paged in; not capped)"
    )
    check(grown <= MAX_RSS_GROWTH_MIB, f"lop_edge's anonymous resident memory grew by {grown:.1f} MiB over the flood (> {MAX_RSS_GROWTH_MIB} MiB)")


def made_up_wire(profile, k):
    p = made_up(profile, k)
    return json.dumps(p).encode("utf-8"), bytes.fromhex(content_hash(p))


def stream_through(h, image_frame, image_to_chw, sender, timing, enough, check, log):
    """Camera frames one after another through the flood and after it, each answered and exact,
    until the robot has split one after the flood (bounded: 60 s past the flood, 3,000 frames);
    `enough` is set once it has split during the flood."""
    frame = image_frame(h.size, h.size, "rgb8", 1)
    ref = h.reference(image_to_chw(frame["width"], frame["height"], frame["encoding"], frame["step"], frame["data"], h.size, h.size))
    done, split_during, split_after, alone = [], 0, 0, 0
    for i in range(3000):
        sec = 300 + i
        t0 = h.send(frame, sec, f"flood_{i}")
        r = h.wait_result(sec, h.args.frame_timeout)
        check(r is not None, f"no /lop/inference for frame flood_{i} within {h.args.frame_timeout} s:\n{h.robot.tail()}")
        t1, att, m = r
        err = h.check_outputs(m, ref, f"flood_{i}")
        done.append((f"flood_{i}", m, err, t1 - t0, att))
        split = not m.fallback and m.bytes_up > 0 and m.bytes_down > 0
        during = sender.is_alive()
        if split and during:
            split_during += 1
            enough.set()
        elif split:
            split_after += 1
        else:
            alone += 1
        if split and ((during and split_during == 1) or (not during and split_after == 1)):
            when = "during" if during else "after"
            log(f"flood: frame flood_{i} split {when} the flood: method {m.method}, {m.bytes_up} B up / {m.bytes_down} B down, max rel err {err:.2e}")
        if not during and split_after >= 3:
            break
        check(during or time.monotonic() - timing["end"] < 60.0, f"lop_robot split no frame within 60 s after the flood:\n{h.robot.tail()}")
    log(f"flood: {len(done)} frames answered and exact: {split_during} split during the flood, {split_after} after, {alone} alone or fallen back")
    check(split_during > 0, f"lop_robot split no frame while the flood lasted ({alone} frames alone):\n{h.robot.tail()}")
    return done
