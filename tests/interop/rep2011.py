#!/usr/bin/env python3
"""REP-2011 type hashes (RIHS01) of ROS 2 .msg types, computed from the .msg files alone.

An independent implementation (standard library only) of what rosidl_generator_type_description
does at build time in ROS 2 Jazzy and later:

1. Parse each .msg file (fields in order; constants and default values do not enter the hash).
2. Build the type description: the type's fields, each with a type id (rosidl's FieldType
   constants: 1 nested, 2..22 primitives and strings, +48 fixed array, +96 bounded sequence,
   +144 unbounded sequence), capacity (array size or sequence bound, else 0), string capacity
   (bound of a bounded string, else 0) and nested type name ("pkg/msg/Type", else ""); plus the
   descriptions of every type it references, directly or transitively, each once, sorted by name.
   A message without fields gets rosidl's single `uint8 structure_needs_at_least_one_member`.
3. Serialise {"type_description": ..., "referenced_type_descriptions": [...]} with Python's
   json.dumps(separators=(', ', ': ')) in that key order, and hash the UTF-8 bytes with sha256:
   the hash is "RIHS01_" + the hex digest.

Usage:
  rep2011.py --include DIR [--include DIR ...] [--msg-dir PKG/msg ...] --type pkg/msg/Name [...]
  rep2011.py --include DIR --msg-dir msgs/msg --all [--json]
  rep2011.py --include DIR --self-test
  rep2011.py ... --type pkg/msg/Name --describe     # print the hashed JSON text

--include DIR: a directory of packages (DIR/<pkg>/msg/*.msg, e.g. hiroz-codegen's assets/jazzy)
or one package directory (DIR/msg/*.msg). --msg-dir DIR: a msg directory whose package is named by
DIR/../package.xml (or --package). --all: every type of the --msg-dir packages (or of all loaded
packages when no --msg-dir is given).
"""

import argparse
import hashlib
import json
import os
import re
import sys

# rosidl's type_description_interfaces/FieldType ids, keyed by .msg primitive type.
# .msg `char` is IDL uint8 and .msg `byte` is IDL octet (rosidl_adapter's mapping).
PRIMITIVE_TYPE_IDS = {
    "int8": 2,
    "uint8": 3,
    "char": 3,
    "int16": 4,
    "uint16": 5,
    "int32": 6,
    "uint32": 7,
    "int64": 8,
    "uint64": 9,
    "float32": 10,
    "float64": 11,
    "bool": 15,
    "byte": 16,
    "string": 17,
    "wstring": 18,
}
NESTED_TYPE = 1
BOUNDED_STRING = 21
BOUNDED_WSTRING = 22
ARRAY_OFFSET = 48
BOUNDED_SEQUENCE_OFFSET = 96
UNBOUNDED_SEQUENCE_OFFSET = 144

# Jazzy hashes this implementation must reproduce (--self-test).
KNOWN_JAZZY_HASHES = {
    "sensor_msgs/msg/Image": "RIHS01_d31d41a9a4c4bc8eae9be757b0beed306564f7526c88ea6a4588fb9582527d47",
    "sensor_msgs/msg/CompressedImage": "RIHS01_15640771531571185e2efc8a100baf923961a4d15d5569652e6cb6691e8e371a",
    "sensor_msgs/msg/PointCloud2": "RIHS01_9198cabf7da3796ae6fe19c4cb3bdd3525492988c70522628af5daa124bae2b5",
    "std_msgs/msg/Header": "RIHS01_f49fb3ae2cf070f793645ff749683ac6b06203e41c891e17701b1cb597ce6a01",
    "std_msgs/msg/String": "RIHS01_df668c740482bbd48fb39d76a70dfd4bd59db1288021743503259e948f6b1a18",
    "builtin_interfaces/msg/Time": "RIHS01_b106235e25a4c5ed35098aa0a61a3ee9c9b18d197f398b0e4206cea9acf9c197",
}

NAME_RE = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]*$")
TYPE_RE = re.compile(
    r"^(?P<base>[A-Za-z][A-Za-z0-9_]*(?:/[A-Za-z][A-Za-z0-9_]*)?)"
    r"(?:<=(?P<strbound>[0-9]+))?"
    r"(?:\[(?P<array>(?:<=)?[0-9]*)\])?$"
)


class MsgError(Exception):
    """A .msg file or a type reference that cannot be understood."""


def strip_comment(line):
    """Remove a trailing comment, keeping '#' inside quoted string values."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def parse_type(type_str, package, where):
    """Parse a .msg field type into a field-type description dict (and the nested type, if any)."""
    m = TYPE_RE.match(type_str)
    if not m:
        raise MsgError(f"{where}: cannot parse type '{type_str}'")
    base = m.group("base")
    str_bound = m.group("strbound")
    array = m.group("array")

    nested_name = ""
    if base in PRIMITIVE_TYPE_IDS:
        if str_bound is not None:
            if base == "string":
                type_id = BOUNDED_STRING
            elif base == "wstring":
                type_id = BOUNDED_WSTRING
            else:
                raise MsgError(f"{where}: only strings take a bound: '{type_str}'")
        else:
            type_id = PRIMITIVE_TYPE_IDS[base]
    else:
        if str_bound is not None:
            raise MsgError(f"{where}: only strings take a bound: '{type_str}'")
        if "/" in base:
            pkg, name = base.split("/", 1)
        elif base == "Header":
            pkg, name = "std_msgs", "Header"
        elif base == "time":
            pkg, name = "builtin_interfaces", "Time"
        elif base == "duration":
            pkg, name = "builtin_interfaces", "Duration"
        else:
            pkg, name = package, base
        nested_name = f"{pkg}/msg/{name}"
        type_id = NESTED_TYPE

    capacity = 0
    if array is not None:
        if array == "":
            type_id += UNBOUNDED_SEQUENCE_OFFSET
        elif array.startswith("<="):
            type_id += BOUNDED_SEQUENCE_OFFSET
            capacity = int(array[2:])
        else:
            type_id += ARRAY_OFFSET
            capacity = int(array)
    return {
        "type_id": type_id,
        "capacity": capacity,
        "string_capacity": int(str_bound) if str_bound is not None else 0,
        "nested_type_name": nested_name,
    }


def parse_msg(text, package, name, where):
    """Parse .msg text into a type description {"type_name", "fields"} (constants dropped)."""
    fields = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = strip_comment(raw).strip()
        if not line:
            continue
        here = f"{where}:{lineno}"
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise MsgError(f"{here}: expected 'TYPE NAME', got '{line}'")
        type_str, rest = parts
        rest = rest.strip()
        # A constant is `TYPE NAME=VALUE` (the '=' comes right after the name, spaces allowed).
        const = re.match(r"^([A-Za-z][A-Za-z0-9_]*)\s*=", rest)
        if const:
            continue
        field_name = rest.split(None, 1)[0]  # anything after the name is a default value
        if not NAME_RE.match(field_name):
            raise MsgError(f"{here}: bad field name '{field_name}'")
        fields.append({"name": field_name, "type": parse_type(type_str, package, here)})
    if not fields:
        fields.append(
            {
                "name": "structure_needs_at_least_one_member",
                "type": {"type_id": PRIMITIVE_TYPE_IDS["uint8"], "capacity": 0, "string_capacity": 0, "nested_type_name": ""},
            }
        )
    return {"type_name": f"{package}/msg/{name}", "fields": fields}


def package_name_of(pkg_dir):
    """The package name from pkg_dir/package.xml, else the directory's name."""
    xml = os.path.join(pkg_dir, "package.xml")
    if os.path.isfile(xml):
        with open(xml, encoding="utf-8") as f:
            m = re.search(r"<name>\s*([^<\s]+)\s*</name>", f.read())
        if m:
            return m.group(1)
    return os.path.basename(os.path.normpath(pkg_dir))


class Registry:
    """All known message types, by "pkg/msg/Name", as parsed type descriptions."""

    def __init__(self):
        self.types = {}
        self.packages = {}

    def add_msg_dir(self, msg_dir, package):
        if not os.path.isdir(msg_dir):
            raise MsgError(f"not a directory: {msg_dir}")
        names = []
        for fname in sorted(os.listdir(msg_dir)):
            if not fname.endswith(".msg"):
                continue
            name = fname[: -len(".msg")]
            path = os.path.join(msg_dir, fname)
            with open(path, encoding="utf-8") as f:
                desc = parse_msg(f.read(), package, name, path)
            self.types[desc["type_name"]] = desc
            names.append(desc["type_name"])
        self.packages.setdefault(package, []).extend(names)
        return names

    def add_include(self, directory):
        """A package directory (with msg/) or a directory of package directories."""
        if os.path.isdir(os.path.join(directory, "msg")):
            self.add_msg_dir(os.path.join(directory, "msg"), package_name_of(directory))
            return
        if not os.path.isdir(directory):
            raise MsgError(f"not a directory: {directory}")
        for entry in sorted(os.listdir(directory)):
            pkg_dir = os.path.join(directory, entry)
            if os.path.isdir(os.path.join(pkg_dir, "msg")):
                self.add_msg_dir(os.path.join(pkg_dir, "msg"), package_name_of(pkg_dir))

    def hashable(self, type_name):
        """The dict that is serialised and hashed for type_name."""
        if type_name not in self.types:
            raise MsgError(f"unknown type {type_name} (missing --include?)")
        referenced = {}
        stack = [type_name]
        while stack:
            desc = self.types[stack.pop()]
            for field in desc["fields"]:
                nested = field["type"]["nested_type_name"]
                if nested and nested not in referenced:
                    if nested not in self.types:
                        raise MsgError(f"{desc['type_name']}.{field['name']}: unknown type {nested} (missing --include?)")
                    referenced[nested] = self.types[nested]
                    stack.append(nested)
        return {
            "type_description": self.types[type_name],
            "referenced_type_descriptions": [referenced[k] for k in sorted(referenced)],
        }

    def hashable_json(self, type_name):
        return json.dumps(self.hashable(type_name), ensure_ascii=True, allow_nan=False, separators=(", ", ": "))

    def type_hash(self, type_name):
        return "RIHS01_" + hashlib.sha256(self.hashable_json(type_name).encode("utf-8")).hexdigest()


def check_known_hashes(registered, type_hash):
    """Compares the hash `type_hash(name)` of every registered standard type with its Jazzy value
    (proving the .msg copies and the hasher); returns the names checked, raises MsgError on the
    first difference."""
    checked = []
    for name, want in KNOWN_JAZZY_HASHES.items():
        if name in registered:
            got = type_hash(name)
            if got != want:
                raise MsgError(f"{name}: computed {got}, Jazzy has {want}")
            checked.append(name)
    return checked


def normalise_type_name(name):
    """Accept pkg/msg/Name, pkg/Name and pkg::msg::Name."""
    name = name.replace("::", "/")
    parts = name.split("/")
    if len(parts) == 2:
        return f"{parts[0]}/msg/{parts[1]}"
    return name


def main(argv=None):
    parser = argparse.ArgumentParser(description="Compute REP-2011 RIHS01 type hashes from .msg files.")
    parser.add_argument("--include", action="append", default=[], help="package dir or dir of package dirs (repeatable)")
    parser.add_argument("--msg-dir", action="append", default=[], help="a package's msg/ directory (repeatable)")
    parser.add_argument("--package", help="package name for --msg-dir (default: from ../package.xml or the parent's name)")
    parser.add_argument("--type", action="append", default=[], help="type to hash, e.g. lop_msgs/msg/InferenceResult")
    parser.add_argument("--all", action="store_true", help="hash every type of the --msg-dir packages")
    parser.add_argument("--json", action="store_true", help="print a JSON object {type name: hash}")
    parser.add_argument("--describe", action="store_true", help="print the hashed JSON text instead of the hash")
    parser.add_argument("--self-test", action="store_true", help="check known Jazzy hashes (needs the standard packages)")
    args = parser.parse_args(argv)

    reg = Registry()
    try:
        for inc in args.include:
            reg.add_include(inc)
        own = []
        for msg_dir in args.msg_dir:
            pkg_dir = os.path.dirname(os.path.abspath(msg_dir))
            own += reg.add_msg_dir(msg_dir, args.package or package_name_of(pkg_dir))

        if args.self_test:
            bad = 0
            for name, want in KNOWN_JAZZY_HASHES.items():
                got = reg.type_hash(name)
                ok = got == want
                bad += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {name} {got}" + ("" if ok else f" (want {want})"))
            return 1 if bad else 0

        names = [normalise_type_name(t) for t in args.type]
        if args.all:
            names += sorted(own) if args.msg_dir else sorted(reg.types)
        if not names:
            parser.error("nothing to do: give --type, --all or --self-test")

        if args.describe:
            for name in names:
                print(reg.hashable_json(name))
        elif args.json:
            print(json.dumps({name: reg.type_hash(name) for name in names}, indent=2, sort_keys=True))
        elif len(names) == 1:
            print(reg.type_hash(names[0]))
        else:
            for name in names:
                print(f"{name} {reg.type_hash(name)}")
    except (MsgError, OSError) as e:
        print(f"rep2011.py: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
