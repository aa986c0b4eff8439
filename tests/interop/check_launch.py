#!/usr/bin/env python3
"""Checks launch/robot.launch.py and launch/robot.launch.xml without a ROS install.

- robot.launch.py is parsed, then run against minimal stand-ins of the `launch` and `launch_ros`
  APIs it uses (DeclareLaunchArgument, LaunchConfiguration, OpaqueFunction, ExecuteProcess,
  Node) to get the command line of every process it starts.
- robot.launch.xml is parsed as XML and evaluated with the frontend's rules for what it uses:
  $(var), $(dirname), $(eval) (a Python expression), <let>, `if` conditions; only literal text
  is split into arguments.
- Both must declare the same arguments with the same defaults, and give the same command lines
  for several argument sets, and those command lines must be what the nodes accept: each
  binary exists in the workspace's build (when built), the config file exists, and every
  `-p name:=value` names a parameter that config/robot.yaml documents for that node; when the
  binaries are built, each command line is run with --print-params and every override must be in
  force.

The copy colcon installed (.ros/install/share/robot_node/launch/robot.launch.py, scripts/colcon.sh),
where present, must start the package's executables on the r2r backend with the installed
parameters file by default.

Exit status 0 when both agree, 1 otherwise (the message says where).
"""

import ast
import os
import re
import shlex
import subprocess
import sys
import types
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LAUNCH_PY = os.path.join(ROOT, "launch", "robot.launch.py")
LAUNCH_XML = os.path.join(ROOT, "launch", "robot.launch.xml")
ROBOT_YAML = os.path.join(ROOT, "config", "robot.yaml")
INSTALLED_PY = os.path.join(ROOT, ".ros", "install", "share", "robot_node", "launch", "robot.launch.py")

CASES = [
    {},
    {"edge_address": "192.168.1.10"},
    {"edge_address": "edge.local:7500", "model": "zoo:lidar_bev", "model_id": "lidar_bev", "input": "lidar", "backend": "r2r"},
    {"edge_address": "tcp/10.0.0.2:7447", "use_power": "false"},
    {"package": "robot_node", "use_bandwidth": "0", "config": "/etc/lop/robot.yaml"},
    # Two cameras on one lop_robot (config/robot.yaml's `cameras`).
    {"cameras": "front,rear"},
    {"cameras": "front,rear", "package": "robot_node", "use_power": "false"},
]


# ---------------------------------------------------------------------------------------------
# Stand-ins for the Python launch API.


class Context:
    def __init__(self, values):
        self.values = values


class LaunchConfiguration:
    def __init__(self, name):
        self.name = name

    def perform(self, context):
        return context.values[self.name]


class DeclareLaunchArgument:
    def __init__(self, name, default_value=None, description=""):
        self.name, self.default, self.description = name, default_value, description


class OpaqueFunction:
    def __init__(self, function):
        self.function = function


class ExecuteProcess:
    def __init__(self, cmd, name=None, output=None):
        self.argv, self.name = list(cmd), name


class Node:
    def __init__(self, package, executable, name=None, arguments=(), output=None):
        self.argv = [f"<{package}>/{executable}"] + list(arguments) + ["--ros-args", "-r", f"__node:={name}"]
        self.name = name


class LaunchDescription:
    def __init__(self, entities):
        self.entities = entities


def install_stubs():
    launch = types.ModuleType("launch")
    launch.LaunchDescription = LaunchDescription
    actions = types.ModuleType("launch.actions")
    actions.DeclareLaunchArgument, actions.ExecuteProcess, actions.OpaqueFunction = DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
    subs = types.ModuleType("launch.substitutions")
    subs.LaunchConfiguration = LaunchConfiguration
    launch_ros = types.ModuleType("launch_ros")
    ros_actions = types.ModuleType("launch_ros.actions")
    ros_actions.Node = Node
    modules = {"launch": launch, "launch.actions": actions, "launch.substitutions": subs}
    sys.modules.update({**modules, "launch_ros": launch_ros, "launch_ros.actions": ros_actions})


def run_py(overrides, path=LAUNCH_PY):
    with open(path, encoding="utf-8") as f:
        source = f.read()
    ast.parse(source, path)
    install_stubs()
    namespace = {"__file__": path, "__name__": "robot_launch"}
    exec(compile(source, path, "exec"), namespace)  # noqa: S102  (our own launch file)
    ld = namespace["generate_launch_description"]()
    args = {e.name: e.default for e in ld.entities if isinstance(e, DeclareLaunchArgument)}
    unknown = set(overrides) - set(args)
    if unknown:
        raise AssertionError(f"robot.launch.py has no argument {sorted(unknown)}")
    ctx = Context({**args, **overrides})
    procs = []
    for e in ld.entities:
        if isinstance(e, OpaqueFunction):
            procs += e.function(ctx)
    return args, {p.name: p.argv for p in procs}


# ---------------------------------------------------------------------------------------------
# The XML frontend's substitutions, for what robot.launch.xml uses.

SUB = re.compile(r"\$\((var|dirname|eval)\b")


def sub_end(text, start):
    """Index of the ')' closing the substitution that opens at text[start] ('$(')."""
    depth, i, quote = 0, start, None
    while i < len(text):
        if text.startswith("$(", i):
            depth += 1
            i += 2
            continue
        ch = text[i]
        if depth == 1 and quote is None and ch in "'\"":
            quote = ch  # the quoted argument of $(eval "...")
        elif depth == 1 and ch == quote:
            quote = None
        elif ch == ")" and (quote is None or depth > 1):
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise AssertionError(f"unclosed substitution in: {text}")


def evaluate(sub, scope):
    """The value of one substitution `$(...)`."""
    kind, _, rest = sub[2:-1].partition(" ")
    rest = rest.strip()
    if kind == "var":
        return scope[rest]
    if kind == "dirname":
        return os.path.dirname(LAUNCH_XML)
    if rest[0] in "'\"" and rest[-1] == rest[0]:
        rest = rest[1:-1]
    return str(eval(substitute(rest, scope), {"__builtins__": {}}, {}))  # noqa: S307  (our own launch file)


def pieces(text):
    """[('lit', text) | ('sub', '$(...)')] in order."""
    out, i = [], 0
    while True:
        m = SUB.search(text, i)
        if not m:
            out.append(("lit", text[i:]))
            return out
        out.append(("lit", text[i : m.start()]))
        j = sub_end(text, m.start())
        out.append(("sub", text[m.start() : j + 1]))
        i = j + 1


def substitute(text, scope):
    """Evaluates $(var NAME), $(dirname) and $(eval "EXPR") (nested)."""
    return "".join(v if k == "lit" else evaluate(v, scope) for k, v in pieces(text))


def split_cmdline(text, scope):
    """Only literal text is split on whitespace; a substitution's value stays inside one argument."""
    args, cur = [], None
    for kind, value in pieces(text):
        if kind == "sub":
            cur = (cur or "") + evaluate(value, scope)
            continue
        for part in re.split(r"(\s+)", value):
            if not part:
                continue
            if part.isspace():
                if cur is not None:
                    args.append(cur)
                cur = None
            else:
                cur = (cur or "") + part
    if cur is not None:
        args.append(cur)
    return args


def truth(s):
    s = s.strip().lower()
    if s in ("true", "1"):
        return True
    if s in ("false", "0"):
        return False
    raise AssertionError(f"not a launch condition value: '{s}'")


def run_xml(overrides):
    root = ET.parse(LAUNCH_XML).getroot()
    if root.tag != "launch":
        raise AssertionError("robot.launch.xml: the root element is not <launch>")
    scope, defaults, procs = {}, {}, {}
    for e in root:
        if e.tag == "arg":
            default = substitute(e.get("default", ""), scope)
            defaults[e.get("name")] = default
            scope[e.get("name")] = overrides.get(e.get("name"), default)
        elif e.tag == "let":
            scope[e.get("name")] = substitute(e.get("value"), scope)
        elif e.tag in ("executable", "node"):
            if "if" in e.attrib and not truth(substitute(e.get("if"), scope)):
                continue
            if e.tag == "executable":
                argv = split_cmdline(e.get("cmd"), scope)
            else:
                argv = [f"<{substitute(e.get('pkg'), scope)}>/{e.get('exec')}"] + split_cmdline(e.get("args", ""), scope)
                argv += ["--ros-args", "-r", f"__node:={e.get('name')}"]
            procs[e.get("name")] = argv
        else:
            raise AssertionError(f"robot.launch.xml: unexpected element <{e.tag}>")
    unknown = set(overrides) - set(defaults)
    if unknown:
        raise AssertionError(f"robot.launch.xml has no argument {sorted(unknown)}")
    return defaults, procs


def documented_parameters():
    """{node: set of dotted parameter names} from config/robot.yaml (indentation-based)."""
    params, node, stack = {}, None, []
    with open(ROBOT_YAML, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            key = line.strip().split(":", 1)[0]
            if indent == 0:
                node, stack = key, []
                params[node] = set()
                continue
            if key == "ros__parameters":
                continue
            level = indent // 2 - 2
            stack = stack[:level] + [key]
            params[node].add(".".join(stack))
    return params


def check_argv(name, argv, documented, overrides):
    """The command line is one the node accepts."""
    if "--config" not in argv or "--backend" not in argv or "--ros-args" not in argv:
        raise AssertionError(f"{name}: {argv} lacks --config, --backend or --ros-args")
    cfg = argv[argv.index("--config") + 1]
    if not overrides.get("config") and not os.path.isfile(cfg):
        raise AssertionError(f"{name}: config {cfg} does not exist")
    if argv[argv.index("--backend") + 1] not in ("hiroz", "r2r"):
        raise AssertionError(f"{name}: backend {argv[argv.index('--backend') + 1]}")
    ros = argv[argv.index("--ros-args") + 1 :]
    for i, a in enumerate(ros):
        if a == "-p":
            pname, sep, _value = ros[i + 1].partition(":=")
            if not sep or pname not in documented[name]:
                raise AssertionError(f"{name}: '-p {ros[i + 1]}' is not a parameter config/robot.yaml documents for {name}")
    if not argv[0].startswith("<"):
        path = os.path.normpath(argv[0])
        if os.path.dirname(path) != os.path.join(ROOT, "target", "release"):
            raise AssertionError(f"{name}: binary {path} is not in the workspace's target/release")


def check_with_binary(name, argv):
    """Runs the real binary with the launch file's command line plus --print-params: it must
    accept the command line and show every override in force."""
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, HERE)
    from interop import child_env  # the binaries' environment (libtorch from the venv)

    cmd = [argv[0], "--print-params"] + argv[1:]
    r = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=60, check=False)
    if r.returncode != 0:
        raise AssertionError(f"{name} refuses the launch file's command line {cmd}:\n{r.stdout}\n{r.stderr}")
    ros = argv[argv.index("--ros-args") + 1 :]
    for i, a in enumerate(ros):
        if a == "-p":
            pname, _, value = ros[i + 1].partition(":=")
            if not re.search(rf"^{re.escape(name)}\.{re.escape(pname)} = {re.escape(value)} ", r.stdout, re.M):
                raise AssertionError(f"{name}: '-p {ros[i + 1]}' is not in force:\n{r.stdout}")


def main():
    documented = documented_parameters()
    built = all(os.access(os.path.join(ROOT, "target", "release", b), os.X_OK) for b in ("lop_robot", "lop_bandwidth", "lop_power"))
    failures = 0
    for case in CASES:
        try:
            py_defaults, py_procs = run_py(case)
            xml_defaults, xml_procs = run_xml(case)
            py_defaults = {k: os.path.normpath(v) if "/" in v and not v.startswith("tcp/") else v for k, v in py_defaults.items()}
            xml_defaults = {k: os.path.normpath(v) if "/" in v and not v.startswith("tcp/") else v for k, v in xml_defaults.items()}
            if py_defaults != xml_defaults:
                raise AssertionError(f"arguments differ:\n  py  {py_defaults}\n  xml {xml_defaults}")

            def norm(procs):
                return {n: [os.path.normpath(a) if a.startswith("/") else a for a in argv] for n, argv in procs.items()}

            if norm(py_procs) != norm(xml_procs):
                raise AssertionError(f"command lines differ:\n  py  {py_procs}\n  xml {xml_procs}")
            for name, argv in py_procs.items():
                check_argv(name, argv, documented, case)
                if built and not argv[0].startswith("<") and not case.get("config"):
                    check_with_binary(name, argv)
            print(f"ok   {case or 'defaults'}: " + "; ".join(f"{n}: {shlex.join(a[1:])}" for n, a in norm(py_procs).items()))
        except AssertionError as e:
            failures += 1
            print(f"FAIL {case or 'defaults'}: {e}")
    expected = {"lop_robot", "lop_bandwidth", "lop_power"}
    _, procs = run_py({})
    if set(procs) != expected:
        failures += 1
        print(f"FAIL defaults start {sorted(procs)}, expected {sorted(expected)}")
    if os.path.isfile(INSTALLED_PY):
        args, procs = run_py({}, INSTALLED_PY)
        share = os.path.dirname(os.path.dirname(INSTALLED_PY))
        wrong = [f"{n}: {argv[0]}" for n, argv in procs.items() if argv[0] != f"<robot_node>/{n}"]
        wrong += [f"{n}: backend {argv[argv.index('--backend') + 1]}" for n, argv in procs.items() if argv[argv.index("--backend") + 1] != "r2r"]
        if args["config"] != os.path.join(share, "config", "robot.yaml") or not os.path.isfile(args["config"]):
            wrong.append(f"config {args['config']}")
        if not wrong:
            # The installed executables accept the installed launch file's command lines.
            lib = os.path.join(os.path.dirname(os.path.dirname(share)), "lib", "robot_node")
            for n, argv in procs.items():
                try:
                    check_with_binary(n, [os.path.join(lib, n)] + argv[1:])
                except AssertionError as e:
                    wrong.append(str(e))
        if set(procs) != expected or wrong:
            failures += 1
            print(f"FAIL installed {INSTALLED_PY} starts {sorted(procs)}: {'; '.join(wrong)}")
        else:
            print(f"ok   installed: {'; '.join(f'{n}: {shlex.join(a)}' for n, a in procs.items())}")
    else:
        print(f"note: {INSTALLED_PY} is missing (scripts/colcon.sh installs it), so the installed copy was not checked")
    if not built:
        print("note: target/release has no lop_robot/lop_bandwidth/lop_power, so the command lines were not run")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
