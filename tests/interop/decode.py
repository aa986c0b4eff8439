#!/usr/bin/env python3
"""Decodes one CDR message with the independent peer's types (rosbags, from the .msg files) and
prints it as JSON, with the type's REP-2011 hash as rosbags and rep2011.py both compute it:

    decode.py TYPE FILE [--msg-dir DIR PACKAGE ...]

e.g. `decode.py vision_msgs/msg/Detection2DArray msg.cdr --msg-dir msgs/vision_msgs/msg vision_msgs`.
"""

import argparse
import json
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402


def plain(v):
    """A rosbags message as JSON-ready values."""
    if hasattr(v, "__dataclass_fields__"):
        return {k: plain(getattr(v, k)) for k in v.__dataclass_fields__ if k != "__msgtype__"}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("type")
    ap.add_argument("file")
    ap.add_argument("--msg-dir", nargs=2, action="append", default=[], metavar=("DIR", "PACKAGE"))
    args = ap.parse_args()
    dirs = [(peer.LOP_MSG_DIR, "lop_msgs")] + [(d, p) for d, p in args.msg_dir]
    types = peer.MsgTypes(msg_dirs=dirs)
    with open(args.file, "rb") as f:
        msg = types.deserialize(f.read(), args.type)
    print(json.dumps({"hash": types.type_hash(args.type), "message": plain(msg)}))


if __name__ == "__main__":
    main()
