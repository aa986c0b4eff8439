#!/usr/bin/env python3
"""CDR through real ROS 2 type support (rclpy, the rosidl-built packages of scripts/ros.sh): run
under `. scripts/ros-env.sh`.

    rclpy_cdr.py decode TYPE FILE      deserialize FILE as TYPE (e.g. lop_msgs/msg/InferenceResult)
                                       with rclpy and print it as JSON
    rclpy_cdr.py encode-bandwidth FILE write a lop_msgs/msg/Bandwidth (fixed values) serialized by rclpy
"""

import importlib
import json
import sys

from rclpy.serialization import deserialize_message, serialize_message


def message_class(type_name):
    pkg, kind, name = type_name.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


def plain(v):
    """A rosidl message as JSON-ready values."""
    if hasattr(v, "get_fields_and_field_types"):
        return {k: plain(getattr(v, k)) for k in v.get_fields_and_field_types()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, bytes):
        return list(v)
    return v


def main(argv):
    if len(argv) == 3 and argv[0] == "decode":
        with open(argv[2], "rb") as f:
            msg = deserialize_message(f.read(), message_class(argv[1]))
        print(json.dumps(plain(msg)))
        return 0
    if len(argv) == 2 and argv[0] == "encode-bandwidth":
        from builtin_interfaces.msg import Time
        from lop_msgs.msg import Bandwidth

        m = Bandwidth(
            stamp=Time(sec=1_700_000_001, nanosec=42),
            estimate_mbps=87.5,
            prediction_mbps=61.25,
            samples=12,
            bucket=7,
            predictor="ewma",
        )
        with open(argv[1], "wb") as f:
            f.write(serialize_message(m))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
