"""A ROS 2 peer on rclpy and the default middleware (Fast DDS), with the interface interop.py's
Harness uses for its Zenoh peer (peer.py): typed publishers and subscriptions, the graph's
endpoints with their REP-2011 type hashes, and clients of a node's parameter and lifecycle
services.

It needs the project-local ROS 2 (`scripts/ros.sh`, then `. scripts/ros-env.sh`) and runs in
its Python (`.ros/venv/bin/python`): rclpy, the standard messages and lop_msgs / vision_msgs as
rosidl built them. The hashes it checks against come from the .msg files through rep2011.py, the
same independent computation the Zenoh peer uses.
"""

import importlib
import os
import sys
import threading
import time

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import rep2011  # noqa: E402

STD_INCLUDE = os.path.join(HERE, "ros_std")
LOP_MSG_DIR = os.path.join(ROOT, "msgs", "msg")
VISION_MSG_DIR = os.path.join(ROOT, "msgs", "vision_msgs", "msg")


class PeerError(Exception):
    """Something the peer saw that a ROS 2 node would not accept."""


def msg_class(type_name):
    """The rosidl Python class of `pkg/msg/Name`."""
    pkg, kind, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


def hash_text(h):
    """rclpy's TypeHash (or its text) as `RIHS01_<hex>`."""
    if isinstance(h, str):
        return h
    value = bytes(getattr(h, "value", b""))
    return f"RIHS{int(getattr(h, 'version', 1)):02d}_{value.hex()}"


class Types:
    """Message construction (rosidl classes) and REP-2011 hashes from the .msg files."""

    def __init__(self, msg_dirs=((LOP_MSG_DIR, "lop_msgs"),)):
        self.registry = rep2011.Registry()
        self.registry.add_include(STD_INCLUDE)
        for msg_dir, package in msg_dirs:
            self.registry.add_msg_dir(msg_dir, package)

    def type_hash(self, type_name):
        return self.registry.type_hash(type_name)

    def check_known_hashes(self):
        try:
            return rep2011.check_known_hashes(self.registry.types, self.type_hash)
        except rep2011.MsgError as e:
            raise PeerError(str(e)) from None

    def header(self, sec, nanosec, frame_id):
        h = msg_class("std_msgs/msg/Header")()
        h.stamp.sec, h.stamp.nanosec, h.frame_id = sec, nanosec, frame_id
        return h

    def image(self, sec, nanosec, frame_id, width, height, encoding, step, data, is_bigendian=0):
        m = msg_class("sensor_msgs/msg/Image")()
        m.header = self.header(sec, nanosec, frame_id)
        m.height, m.width, m.encoding, m.is_bigendian, m.step = height, width, encoding, is_bigendian, step
        m.data = bytes(data)
        return m

    def compressed_image(self, sec, nanosec, frame_id, fmt, data):
        m = msg_class("sensor_msgs/msg/CompressedImage")()
        m.header = self.header(sec, nanosec, frame_id)
        m.format, m.data = fmt, bytes(data)
        return m

    def point_cloud2(self, sec, nanosec, frame_id, fields, width, height, point_step, row_step, data, is_dense=True):
        field_cls = msg_class("sensor_msgs/msg/PointField")
        m = msg_class("sensor_msgs/msg/PointCloud2")()
        m.header = self.header(sec, nanosec, frame_id)
        m.height, m.width = height, width
        m.fields = [field_cls(name=n, offset=o, datatype=d, count=c) for (n, o, d, c) in fields]
        m.is_bigendian, m.point_step, m.row_step, m.is_dense = False, point_step, row_step, is_dense
        m.data = bytes(data)
        return m


class Subscription:
    """Every message of one topic with its receipt time: (monotonic, wall clock, (seq,), msg)."""

    def __init__(self, topic):
        self.expected_key = topic
        self.cond = threading.Condition()
        self.msgs = []

    def on_msg(self, m):
        now, wall = time.monotonic(), time.time()
        with self.cond:
            self.msgs.append((now, wall, (len(self.msgs),), m))
            self.cond.notify_all()

    def wait_for(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate(list(self.msgs)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(min(left, 0.2))
            return True

    def snapshot(self):
        with self.cond:
            return list(self.msgs), []

    def wait_matched(self, timeout):
        """Waits until a publisher matches (messages published before that are not delivered:
        volatile durability, as the nodes publish)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.handle.get_publisher_count() > 0:
                return True
            time.sleep(0.05)
        return False


class Publisher:
    def __init__(self, pub):
        self.pub = pub

    def wait_matched(self, timeout):
        """Waits until a subscription matches (discovery takes up to a few seconds on DDS)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.pub.get_subscription_count() > 0:
                return True
            time.sleep(0.05)
        return False

    def publish(self, msg):
        self.pub.publish(msg)


def dds_type_name(type_name):
    """The type name as the graph shows it (rclpy reports `pkg/msg/Name` itself)."""
    return type_name


class RclpyPeer:
    """One rclpy node spun on its own thread."""

    def __init__(self, name, domain, types):
        self.types = types
        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.node = Node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.lock = threading.Lock()
        self.stop_flag = False
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self):
        while not self.stop_flag and self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=0.05)
            except Exception as e:  # noqa: BLE001  (shutdown races)
                if not self.stop_flag:
                    print(f"rclpy peer: spin failed: {e}", flush=True)
                return

    def subscribe(self, topic, type_name):
        s = Subscription(topic)
        # Reliable, deep history: lop_robot's publishers are reliable; nothing is lost on the way.
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST)
        with self.lock:
            s.handle = self.node.create_subscription(msg_class(type_name), topic, s.on_msg, qos)
        return s

    def publisher(self, topic, type_name, sensor_data=True):
        qos = qos_profile_sensor_data if sensor_data else QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        with self.lock:
            return Publisher(self.node.create_publisher(msg_class(type_name), topic, qos))

    def endpoints(self, kind, topic):
        """The graph's publishers ("MP") or subscriptions ("MS") of `topic`."""
        with self.lock:
            infos = (self.node.get_publishers_info_by_topic if kind == "MP" else self.node.get_subscriptions_info_by_topic)(topic)
        out = []
        for i in infos:
            out.append(
                {
                    "node": i.node_name,
                    "namespace": i.node_namespace,
                    "type": i.topic_type,
                    "hash": hash_text(getattr(i, "topic_type_hash", "")),
                    "qos": f"{i.qos_profile.reliability.name.lower()}, depth {i.qos_profile.depth}",
                }
            )
        return out

    def wait_for_entity(self, kind, topic, node_name, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.endpoints(kind, topic):
                if e["node"] == node_name:
                    return e
            time.sleep(0.1)
        return None

    def graph(self):
        with self.lock:
            return self.node.get_topic_names_and_types()

    def _call(self, srv_type, service, request, timeout):
        with self.lock:
            client = self.node.create_client(srv_type, service)
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                raise PeerError(f"{service} is not offered within {timeout} s")
            future = client.call_async(request)
            deadline = time.monotonic() + timeout
            while not future.done():
                if time.monotonic() > deadline:
                    raise PeerError(f"{service} did not answer within {timeout} s")
                time.sleep(0.02)
            return future.result()
        finally:
            with self.lock:
                self.node.destroy_client(client)

    def list_parameters(self, node, timeout=10.0):
        from rcl_interfaces.srv import ListParameters

        r = self._call(ListParameters, f"/{node}/list_parameters", ListParameters.Request(), timeout)
        return list(r.result.names)

    def get_parameters(self, node, names, timeout=10.0):
        from rcl_interfaces.srv import GetParameters

        r = self._call(GetParameters, f"/{node}/get_parameters", GetParameters.Request(names=list(names)), timeout)
        return {n: Parameter.from_parameter_msg(_named(n, v)).value for n, v in zip(names, r.values)}

    def set_parameter(self, node, name, value, timeout=10.0):
        """Sets one parameter as `ros2 param set` does: (successful, reason)."""
        from rcl_interfaces.srv import SetParameters

        p = Parameter(name, value=value).to_parameter_msg()
        r = self._call(SetParameters, f"/{node}/set_parameters", SetParameters.Request(parameters=[p]), timeout)
        return r.results[0].successful, r.results[0].reason

    def change_state(self, node, transition_id=0, label="", timeout=60.0):
        """`ros2 lifecycle set`: lifecycle_msgs/srv/ChangeState on /NODE/change_state; its success."""
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        req = ChangeState.Request(transition=Transition(id=transition_id, label=label))
        return self._call(ChangeState, f"/{node}/change_state", req, timeout).success

    def get_state(self, node, timeout=10.0):
        """`ros2 lifecycle get`: (id, label) of the node's state."""
        from lifecycle_msgs.srv import GetState

        s = self._call(GetState, f"/{node}/get_state", GetState.Request(), timeout).current_state
        return s.id, s.label

    def available_states(self, node, timeout=10.0):
        from lifecycle_msgs.srv import GetAvailableStates

        r = self._call(GetAvailableStates, f"/{node}/get_available_states", GetAvailableStates.Request(), timeout)
        return [(s.id, s.label) for s in r.available_states]

    def available_transitions(self, node, service="get_available_transitions", timeout=10.0):
        """`ros2 lifecycle list`: (transition id, label, start label, goal label) of each."""
        from lifecycle_msgs.srv import GetAvailableTransitions

        r = self._call(GetAvailableTransitions, f"/{node}/{service}", GetAvailableTransitions.Request(), timeout)
        return [(d.transition.id, d.transition.label, d.start_state.label, d.goal_state.label) for d in r.available_transitions]

    def close(self):
        self.stop_flag = True
        self.thread.join(5)
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def _named(name, value):
    from rcl_interfaces.msg import Parameter as ParameterMsg

    return ParameterMsg(name=name, value=value)


def format_msg(msg, indent=0, max_items=8):
    """A rosidl message as `ros2 topic echo` prints it (YAML; long arrays shortened)."""
    pad = "  " * indent
    lines = []
    for name in msg.get_fields_and_field_types():
        v = getattr(msg, name)
        if hasattr(v, "get_fields_and_field_types"):
            lines.append(f"{pad}{name}:")
            lines.append(format_msg(v, indent + 1, max_items))
        elif isinstance(v, (list, tuple)) and v and hasattr(v[0], "get_fields_and_field_types"):
            lines.append(f"{pad}{name}:")
            for item in v:
                sub = format_msg(item, indent, max_items).split("\n")
                lines.extend([f"{pad}- {sub[0].lstrip()}"] + [f"  {line}" for line in sub[1:]])
        elif isinstance(v, str):
            lines.append(f"{pad}{name}: '{v}'")
        elif hasattr(v, "__len__") and not isinstance(v, (bytes, str)):
            items = list(v)
            shown = ", ".join(f"{x:.7g}" if isinstance(x, float) else str(x) for x in items[:max_items])
            more = f", ... ({len(items)} values)" if len(items) > max_items else ""
            lines.append(f"{pad}{name}: [{shown}{more}]")
        else:
            lines.append(f"{pad}{name}: {v}")
    return "\n".join(lines)


# The names interop.py's Harness uses for its peer module.
MsgTypes = Types


def RosPeer(_router, name, domain, types):  # noqa: N802  (peer.py's class name)
    """An rclpy peer in domain `domain` (the Zenoh router argument has no meaning on DDS)."""
    return RclpyPeer(name, domain, types)
