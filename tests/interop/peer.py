#!/usr/bin/env python3
"""An independent ROS 2 peer in rmw_zenoh's wire format, without a ROS install.

It speaks what a ROS 2 node with rmw_zenoh_cpp (Jazzy) speaks on a Zenoh router, built only from
the `.msg` files, `eclipse-zenoh` and `rosbags`:

- data key expression `<domain>/<topic without the leading slash>/<pkg>::msg::dds_::<Type>_/<hash>`,
  with the type's REP-2011 hash (RIHS01) computed by `rep2011.py` from the `.msg` files (and
  cross-checked against rosbags' own RIHS01 implementation);
- payload: CDR (rosbags' serialiser, types registered from the `.msg` text) with the 4-byte
  encapsulation header `00 01 00 00` (little-endian CDR);
- attachment: 33 bytes, i64 LE sequence number, i64 LE source timestamp (ns), varint 0x10 and
  the 16-byte publisher GID (rmw_zenoh drops samples without it);
- liveliness tokens `@ros2_lv/<domain>/<zid>/<nid>/<eid>/<NN|MP|MS>/%/<ns>/<node>[/<topic>/<type>/<hash>/<qos>]`
  for the node and each of its publishers and subscriptions, so that the ROS graph sees them.

As a library: `MsgTypes` (hashes, CDR), `RosPeer` (session, publishers, subscriptions, graph).
As a command (plays `ros2 topic echo`):

    peer.py echo --router tcp/127.0.0.1:7447 /lop/inference [--count 1] [--timeout 10]
    peer.py hashes            # every lop_msgs type's RIHS01 hash from the .msg files
"""

import argparse
import hashlib
import os
import struct
import sys
import threading
import time

import numpy as np
import zenoh
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import rep2011  # noqa: E402  (the stdlib-only REP-2011 hash computer beside this file)

# The standard packages' .msg files this peer needs (copies of the Jazzy definitions), and the
# project's own interface package.
STD_INCLUDE = os.path.join(HERE, "ros_std")
LOP_MSG_DIR = os.path.join(ROOT, "msgs", "msg")

# rmw_zenoh's QoS strings (liveliness tokens): reliability:durability:history,depth:deadline:
# lifespan:liveliness; empty fields are rmw_zenoh's defaults (reliable, volatile).
QOS_DEFAULT = "::,10:,:,:,,"  # reliable, volatile, keep last 10
QOS_SENSOR_DATA = "2::,5:,:,:,,"  # best effort, volatile, keep last 5 (rclcpp::SensorDataQoS)

ADMIN_SPACE = "@ros2_lv"


class PeerError(Exception):
    """Something the ROS peer saw that a ROS 2 node would not accept."""


def mangle(name):
    """rmw_zenoh's mangling of names inside liveliness tokens ('/' -> '%')."""
    return name.replace("/", "%")


def dds_type_name(type_name):
    """`pkg/msg/Name` -> `pkg::msg::dds_::Name_` (rmw_zenoh's key expression type name)."""
    pkg, kind, name = type_name.split("/")
    return f"{pkg}::{kind}::dds_::{name}_"


def ros_type_name(dds_name):
    """`pkg::msg::dds_::Name_` -> `pkg/msg/Name`."""
    parts = dds_name.split("::")
    if len(parts) != 4 or parts[2] != "dds_" or not parts[3].endswith("_"):
        raise PeerError(f"not an rmw_zenoh type name: '{dds_name}'")
    return f"{parts[0]}/{parts[1]}/{parts[3][:-1]}"


class MsgTypes:
    """Message types from .msg files: REP-2011 hashes (rep2011.py) and CDR (rosbags)."""

    def __init__(self, include=STD_INCLUDE, msg_dirs=((LOP_MSG_DIR, "lop_msgs"),)):
        self.registry = rep2011.Registry()
        self.registry.add_include(include)
        for msg_dir, package in msg_dirs:
            self.registry.add_msg_dir(msg_dir, package)
        self.store = get_typestore(Stores.EMPTY)
        texts = {}
        for root, _dirs, files in os.walk(include):
            for f in files:
                if f.endswith(".msg"):
                    pkg = os.path.basename(os.path.dirname(root))
                    texts[f"{pkg}/msg/{f[:-4]}"] = os.path.join(root, f)
        for msg_dir, package in msg_dirs:
            for f in sorted(os.listdir(msg_dir)):
                if f.endswith(".msg"):
                    texts[f"{package}/msg/{f[:-4]}"] = os.path.join(msg_dir, f)
        types = {}
        for name, path in sorted(texts.items()):
            with open(path, encoding="utf-8") as fh:
                types.update(get_types_from_msg(fh.read(), name))
        self.store.register(types)
        self.names = sorted(texts)
        self._hashes = {}

    def type_hash(self, type_name):
        """RIHS01 hash of `pkg/msg/Name` from the .msg files (rep2011.py), cross-checked with rosbags."""
        if type_name not in self._hashes:
            ours = self.registry.type_hash(type_name)
            theirs = self.store.hash_rihs01(type_name)
            if ours != theirs:
                raise PeerError(f"{type_name}: rep2011.py says {ours}, rosbags says {theirs}")
            self._hashes[type_name] = ours
        return self._hashes[type_name]

    def check_known_hashes(self):
        """The standard types' hashes equal the Jazzy values (proves the .msg copies and the hasher)."""
        try:
            return rep2011.check_known_hashes(self.registry.types, self.type_hash)
        except rep2011.MsgError as e:
            raise PeerError(str(e)) from None

    def cls(self, type_name):
        return self.store.types[type_name]

    def serialize(self, msg, type_name):
        """CDR with the 4-byte encapsulation header (little endian: 00 01 00 00)."""
        data = bytes(self.store.serialize_cdr(msg, type_name))
        if data[:4] != b"\x00\x01\x00\x00":
            raise PeerError(f"unexpected CDR header {data[:4].hex()}")
        return data

    def deserialize(self, data, type_name):
        if bytes(data[:2]) not in (b"\x00\x01", b"\x00\x00"):
            raise PeerError(f"{type_name}: unexpected CDR encapsulation header {bytes(data[:4]).hex()}")
        return self.store.deserialize_cdr(bytes(data), type_name)

    def time(self, sec, nanosec):
        return self.cls("builtin_interfaces/msg/Time")(sec=sec, nanosec=nanosec)

    def header(self, sec, nanosec, frame_id):
        return self.cls("std_msgs/msg/Header")(stamp=self.time(sec, nanosec), frame_id=frame_id)

    def image(self, sec, nanosec, frame_id, width, height, encoding, step, data, is_bigendian=0):
        data = np.frombuffer(bytes(data), dtype=np.uint8)
        return self.cls("sensor_msgs/msg/Image")(
            header=self.header(sec, nanosec, frame_id),
            height=height,
            width=width,
            encoding=encoding,
            is_bigendian=is_bigendian,
            step=step,
            data=data,
        )

    def compressed_image(self, sec, nanosec, frame_id, fmt, data):
        return self.cls("sensor_msgs/msg/CompressedImage")(
            header=self.header(sec, nanosec, frame_id), format=fmt, data=np.frombuffer(bytes(data), dtype=np.uint8)
        )

    def point_cloud2(self, sec, nanosec, frame_id, fields, width, height, point_step, row_step, data, is_dense=True):
        """fields: [(name, offset, datatype, count)]."""
        field_cls = self.cls("sensor_msgs/msg/PointField")
        return self.cls("sensor_msgs/msg/PointCloud2")(
            header=self.header(sec, nanosec, frame_id),
            height=height,
            width=width,
            fields=[field_cls(name=n, offset=o, datatype=d, count=c) for (n, o, d, c) in fields],
            is_bigendian=False,
            point_step=point_step,
            row_step=row_step,
            data=np.frombuffer(bytes(data), dtype=np.uint8),
            is_dense=is_dense,
        )


def attachment(seq, stamp_ns, gid):
    """rmw_zenoh's 33-byte attachment: i64 LE sequence number, i64 LE source timestamp, varint
    length 16, the 16-byte GID."""
    if len(gid) != 16:
        raise PeerError("a GID is 16 bytes")
    return struct.pack("<qq", seq, stamp_ns) + b"\x10" + bytes(gid)


def parse_attachment(att):
    if att is None:
        raise PeerError("sample without an attachment (rmw_zenoh would drop it)")
    b = att.to_bytes() if hasattr(att, "to_bytes") else bytes(att)
    if len(b) != 33 or b[16] != 0x10:
        raise PeerError(f"attachment of {len(b)} bytes ({b[:20].hex()}...), rmw_zenoh's is 33 with varint 0x10 at byte 16")
    seq, stamp = struct.unpack("<qq", b[:16])
    return seq, stamp, b[17:]


def parse_liveliness(key):
    """A liveliness token's fields (None for tokens that are not rmw_zenoh entities)."""
    parts = str(key).split("/")
    if len(parts) < 9 or parts[0] != ADMIN_SPACE:
        return None
    entity = {
        "domain": int(parts[1]),
        "zid": parts[2],
        "node_id": parts[3],
        "entity_id": parts[4],
        "kind": parts[5],
        "namespace": "" if parts[7] == "%" else parts[7].replace("%", "/"),
        "node": parts[8].replace("%", "/"),
    }
    if len(parts) >= 13:
        entity.update({"topic": parts[9].replace("%", "/"), "type": parts[10], "hash": parts[11], "qos": parts[12]})
    return entity


class Subscription:
    """Samples of one topic, decoded, checked for rmw_zenoh's key and attachment."""

    def __init__(self, peer, topic, type_name, on_message=None):
        self.peer, self.topic, self.type_name = peer, topic, type_name
        self.expected_key = peer.topic_key(topic, type_name)
        self.messages = []  # (receive time, key, attachment (seq, stamp, gid), decoded message)
        self.errors = []
        self.cond = threading.Condition()
        self.on_message = on_message
        # Any type and hash on this topic: a mismatch is reported instead of silently missed.
        wildcard = f"{peer.domain}/{topic.strip('/')}/**"
        self._sub = peer.session.declare_subscriber(wildcard, self._on_sample)

    def _on_sample(self, sample):
        t = time.monotonic()
        key = str(sample.key_expr)
        try:
            if key != self.expected_key:
                raise PeerError(f"key expression '{key}', expected '{self.expected_key}'")
            att = parse_attachment(sample.attachment)
            msg = self.peer.types.deserialize(sample.payload.to_bytes(), self.type_name)
        except Exception as e:  # noqa: BLE001  (recorded and reported by the caller)
            with self.cond:
                self.errors.append(f"{self.topic}: {e}")
                self.cond.notify_all()
            return
        if self.on_message is not None:
            self.on_message(msg)
        with self.cond:
            self.messages.append((t, key, att, msg))
            self.cond.notify_all()

    def wait_for(self, predicate, timeout):
        """Waits until predicate(messages) is true (returns True) or the timeout (False)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate(self.messages):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.1))
            return True

    def snapshot(self):
        with self.cond:
            return list(self.messages), list(self.errors)

    def close(self):
        self._sub.undeclare()


class Publisher:
    """An rmw_zenoh publisher: key with type and hash, CDR payload, attachment, liveliness token."""

    def __init__(self, peer, topic, type_name, entity_id, qos, sensor_data):
        self.peer, self.topic, self.type_name = peer, topic, type_name
        self.key = peer.topic_key(topic, type_name)
        self.token_key = peer.entity_token(entity_id, "MP", topic, type_name, qos)
        # rmw_zenoh derives a GID from the entity: here the first 16 bytes of the token's sha256.
        self.gid = hashlib.sha256(self.token_key.encode()).digest()[:16]
        self.seq = 0
        if sensor_data:
            rel, cc = zenoh.Reliability.BEST_EFFORT, zenoh.CongestionControl.DROP
        else:
            rel, cc = zenoh.Reliability.RELIABLE, zenoh.CongestionControl.BLOCK
        self._pub = peer.session.declare_publisher(self.key, reliability=rel, congestion_control=cc)
        self._token = peer.session.liveliness().declare_token(self.token_key)

    def publish(self, msg):
        payload = self.peer.types.serialize(msg, self.type_name)
        self.seq += 1
        self._pub.put(payload, attachment=attachment(self.seq, time.time_ns(), self.gid))
        return len(payload)

    def close(self):
        self._token.undeclare()
        self._pub.undeclare()


class RosPeer:
    """One ROS 2 node in rmw_zenoh's format: a Zenoh client session to the robot's router."""

    def __init__(self, router, node_name, domain=0, types=None, namespace="", mode="client"):
        """mode "client": everything through the router; "peer": as rmw_zenoh's nodes, a peer
        that learns the others from the router (gossip) and exchanges data with them directly."""
        self.types = types or MsgTypes()
        self.domain = domain
        self.node_name = node_name
        self.namespace = namespace
        conf = zenoh.Config()
        conf.insert_json5("mode", f'"{mode}"')
        conf.insert_json5("connect/endpoints", f'["{router}"]')
        conf.insert_json5("scouting/multicast/enabled", "false")
        if mode == "peer":
            conf.insert_json5("listen/endpoints", '["tcp/127.0.0.1:0"]')
            conf.insert_json5("scouting/gossip/enabled", "true")
            conf.insert_json5("scouting/gossip/autoconnect_strategy", '{"peer": {"to_router": "always", "to_peer": "greater-zid"}}')
        self.session = zenoh.open(conf)
        self.zid = str(self.session.info.zid())
        self._next_id = 1
        self._node_token = self.session.liveliness().declare_token(
            f"{ADMIN_SPACE}/{domain}/{self.zid}/0/0/NN/%/{mangle(namespace) or '%'}/{node_name}"
        )
        self._entities = []

    def topic_key(self, topic, type_name):
        return f"{self.domain}/{topic.strip('/')}/{dds_type_name(type_name)}/{self.types.type_hash(type_name)}"

    def entity_token(self, entity_id, kind, topic, type_name, qos):
        return (
            f"{ADMIN_SPACE}/{self.domain}/{self.zid}/0/{entity_id}/{kind}/%/{mangle(self.namespace) or '%'}/{self.node_name}/"
            f"{mangle(topic)}/{dds_type_name(type_name)}/{self.types.type_hash(type_name)}/{qos}"
        )

    def _entity_id(self):
        self._next_id += 1
        return self._next_id - 1

    def publisher(self, topic, type_name, sensor_data=False):
        p = Publisher(self, topic, type_name, self._entity_id(), QOS_SENSOR_DATA if sensor_data else QOS_DEFAULT, sensor_data)
        self._entities.append(p)
        return p

    def subscribe(self, topic, type_name, on_message=None):
        s = Subscription(self, topic, type_name, on_message)
        s.token = self.session.liveliness().declare_token(self.entity_token(self._entity_id(), "MS", topic, type_name, QOS_DEFAULT))
        self._entities.append(s)
        return s

    def graph(self, timeout=2.0):
        """Every rmw_zenoh entity on the router (liveliness tokens), parsed."""
        out = []
        for reply in self.session.liveliness().get(f"{ADMIN_SPACE}/{self.domain}/**", timeout=timeout):
            if reply.ok is not None:
                e = parse_liveliness(reply.ok.key_expr)
                if e is not None:
                    out.append(e)
        return out

    def wait_for_entity(self, kind, topic, node, timeout):
        """Waits until the graph shows `node`'s `kind` (MP, MS) on `topic`; returns the entity."""
        deadline = time.monotonic() + timeout
        while True:
            for e in self.graph():
                if e["kind"] == kind and e.get("topic") == topic and e["node"] == node:
                    return e
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)

    def close(self):
        for e in self._entities:
            try:
                if isinstance(e, Subscription):
                    e.token.undeclare()
                e.close()
            except Exception:  # noqa: BLE001  (closing anyway)
                pass
        try:
            self._node_token.undeclare()
        finally:
            self.session.close()


def format_msg(msg, indent=0, max_items=8):
    """A rosbags message as `ros2 topic echo` prints it (YAML; long arrays shortened)."""
    pad = "  " * indent
    lines = []
    for name in msg.__dataclass_fields__:
        if name == "__msgtype__" or name.isupper():  # constants are not fields on the wire
            continue
        v = getattr(msg, name)
        if hasattr(v, "__dataclass_fields__"):
            lines.append(f"{pad}{name}:")
            lines.append(format_msg(v, indent + 1, max_items))
        elif isinstance(v, list) and v and hasattr(v[0], "__dataclass_fields__"):
            lines.append(f"{pad}{name}:")
            for item in v:
                sub = format_msg(item, indent, max_items).split("\n")
                sub = [f"{pad}- {sub[0].lstrip()}"] + [f"  {line}" for line in sub[1:]]
                lines.extend(sub)
        elif isinstance(v, (list, np.ndarray)):
            items = [float(x) if isinstance(x, (float, np.floating)) else x for x in list(v)]
            shown = ", ".join(f"{x:.7g}" if isinstance(x, float) else str(x) for x in items[:max_items])
            more = f", ... ({len(items)} values)" if len(items) > max_items else ""
            lines.append(f"{pad}{name}: [{shown}{more}]")
        elif isinstance(v, str):
            lines.append(f"{pad}{name}: '{v}'")
        elif isinstance(v, bool):
            lines.append(f"{pad}{name}: {'true' if v else 'false'}")
        elif isinstance(v, (float, np.floating)):
            lines.append(f"{pad}{name}: {float(v):.9g}")
        else:
            lines.append(f"{pad}{name}: {v}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("echo", help="subscribe to a topic and print its messages (ros2 topic echo)")
    e.add_argument("topic")
    e.add_argument("--type", default="lop_msgs/msg/InferenceResult")
    e.add_argument("--router", default="tcp/127.0.0.1:7447")
    e.add_argument("--domain", type=int, default=int(os.environ.get("ROS_DOMAIN_ID", "0")))
    e.add_argument("--count", type=int, default=1, help="messages to print before exiting")
    e.add_argument("--timeout", type=float, default=30.0, help="seconds to wait in all")
    sub.add_parser("hashes", help="print every lop_msgs type's RIHS01 hash, computed from the .msg files")
    args = ap.parse_args(argv)
    types = MsgTypes()
    if args.cmd == "hashes":
        types.check_known_hashes()
        for name in types.names:
            if name.startswith("lop_msgs/"):
                print(f"{name} {types.type_hash(name)}")
        return 0
    peer = RosPeer(args.router, "lop_echo", args.domain, types)
    try:
        s = peer.subscribe(args.topic, args.type)
        printed = 0
        deadline = time.monotonic() + args.timeout
        while printed < args.count and time.monotonic() < deadline:
            s.wait_for(lambda m, n=printed: len(m) > n, min(1.0, max(0.0, deadline - time.monotonic())))
            msgs, errors = s.snapshot()
            for err in errors:
                print(f"error: {err}", file=sys.stderr)
            if errors:
                return 1
            for _t, key, (seq, _stamp, _gid), msg in msgs[printed : args.count]:
                print(f"# key {key} seq {seq}")
                print(format_msg(msg))
                print("---")
                printed += 1
        if printed < args.count:
            print(f"echo: {printed} of {args.count} messages within {args.timeout} s", file=sys.stderr)
            return 1
        return 0
    finally:
        peer.close()


if __name__ == "__main__":
    sys.exit(main())
