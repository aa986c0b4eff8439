"""Writes a rosbag2 recording in MCAP storage with rosbags (an independent writer: no ROS
install, not the project's code), for cli/tests/bag_cli.rs.

Usage: write_bag.py SPEC.json, where SPEC is
  {"out": FOLDER, "compression": "none" | "zstd",
   "topics": [{"topic": NAME, "kind": KIND, "files": [PICTURE, ...], "count": N}, ...]}
and KIND is
  - "jpeg": sensor_msgs/msg/CompressedImage, format "jpeg", each file's bytes as they are;
  - "rgb8", "bgr8", "rgba8", "mono8": sensor_msgs/msg/Image, each file decoded by Pillow, its rows
    padded by 4 bytes (step > width * bytes per pixel, as some drivers align rows);
  - "string": std_msgs/msg/String, N messages.
An Image topic's "encoding" (default: its kind) is what its messages say, to record pixels under an
encoding lop does not read.
A topic with no files (or N = 0) is recorded without a message. The i-th message of every topic
is stamped 1700000000 s + i * PERIOD (header and log time alike), PERIOD the spec's "period_ns"
(default 1/30 s); topics interleave. A file may be named more than once (a topic of N frames
from fewer pictures).
"""

import json
import sys

import numpy as np
from PIL import Image as Pil
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.rosbag2.enums import CompressionFormat, CompressionMode
from rosbags.typesys import Stores, get_typestore

T0 = 1_700_000_000 * 10**9
PERIOD = 10**9 // 30
PAD = 4
MODES = {"rgb8": "RGB", "bgr8": "RGB", "rgba8": "RGBA", "mono8": "L"}


def header(ts, i, period):
    stamp = T0 + i * period
    time = ts.types["builtin_interfaces/msg/Time"](sec=stamp // 10**9, nanosec=stamp % 10**9)
    return ts.types["std_msgs/msg/Header"](stamp=time, frame_id="camera")


def raw(ts, kind, path, i, encoding, period):
    pixels = np.asarray(Pil.open(path).convert(MODES[kind]), dtype=np.uint8)
    if kind == "bgr8":
        pixels = pixels[:, :, ::-1]
    height, width = pixels.shape[:2]
    rows = pixels.reshape(height, -1)
    padded = np.concatenate([rows, np.full((height, PAD), 0xEE, dtype=np.uint8)], axis=1)
    return ts.types["sensor_msgs/msg/Image"](
        header=header(ts, i, period),
        height=height,
        width=width,
        encoding=encoding,
        is_bigendian=0,
        step=padded.shape[1],
        data=np.ascontiguousarray(padded).reshape(-1),
    )


def messages(ts, spec, period):
    kind = spec["kind"]
    if kind == "string":
        for i in range(spec.get("count", 0)):
            yield i, "std_msgs/msg/String", ts.types["std_msgs/msg/String"](data=f"hello {i}")
        return
    for i, path in enumerate(spec.get("files", [])):
        if kind == "jpeg":
            data = np.frombuffer(open(path, "rb").read(), dtype=np.uint8)
            msg = ts.types["sensor_msgs/msg/CompressedImage"](header=header(ts, i, period), format="jpeg", data=data)
            yield i, "sensor_msgs/msg/CompressedImage", msg
        else:
            yield i, "sensor_msgs/msg/Image", raw(ts, kind, path, i, spec.get("encoding", kind), period)


def msgtype(kind):
    if kind == "string":
        return "std_msgs/msg/String"
    return "sensor_msgs/msg/CompressedImage" if kind == "jpeg" else "sensor_msgs/msg/Image"


def main():
    spec = json.load(open(sys.argv[1]))
    period = int(spec.get("period_ns", PERIOD))
    ts = get_typestore(Stores.ROS2_JAZZY)
    queue = []
    writer = Writer(spec["out"], version=9, storage_plugin=StoragePlugin.MCAP)
    if spec.get("compression") == "zstd":
        # Chunks compressed with zstd, as rosbag2's MCAP storage writes them by default.
        writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    with writer:
        for n, topic in enumerate(spec["topics"]):
            conn = writer.add_connection(topic["topic"], msgtype(topic["kind"]), typestore=ts)
            for i, kind, msg in messages(ts, topic, period):
                queue.append((T0 + i * period + n, conn, kind, msg))
        for stamp, conn, kind, msg in sorted(queue, key=lambda q: q[0]):
            writer.write(conn, stamp, ts.serialize_cdr(msg, kind))


if __name__ == "__main__":
    main()
