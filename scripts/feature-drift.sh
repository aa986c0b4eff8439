#!/usr/bin/env bash
# Checks that the test command's builds compile every dependency once: the r2r nodes (colcon's
# build of robot_node, scripts/colcon.sh: `--manifest-path robot_node/Cargo.toml --features
# ros2`), then the workspace binaries, the tests (with dev-dependencies)
# and the fuzz targets (scripts/fuzz.sh, which reuses the release build's dependencies). A
# dependency that one build resolves with other features than the builds before it is compiled
# again, and every crate above it: a feature r2r turned on in `rand` and `crossbeam-deque`
# rebuilt zenoh and the engine, and the tests' `tokio/test-util` did it again, about 20 minutes
# of the test command on 2 cores.
#
# It reads cargo's unit graph (each unit to compile: crate, target, profile, features, host or
# target, and its dependencies), which stable cargo prints with RUSTC_BOOTSTRAP=1; nothing is
# compiled, no ROS is needed, it takes seconds. Exit status 1 names each dependency that would be
# compiled again and how it differs; turn its features on for every build (the `unify-*`
# dependencies of robot_node/Cargo.toml, or the workspace's dependency table).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
graph() {
  local name=$1
  shift
  RUSTC_BOOTSTRAP=1 cargo "$@" --release --locked -Z unstable-options --unit-graph >"$out/$name.json"
}
graph r2r build --manifest-path robot_node/Cargo.toml --features ros2
graph plain build --workspace --bins
graph tests test --workspace --no-run
# scripts/fuzz.sh builds only the fuzz_* binaries; the others add no dependency of their own.
graph fuzz build --workspace --bins --features lop_fuzz/libfuzzer
python3 - "$out" <<'EOF'
import hashlib, json, pathlib, sys

out = pathlib.Path(sys.argv[1])
ORDER = ["r2r", "plain", "tests", "fuzz"]
# Crates these builds compile differently on purpose: robot_node with or without r2r, the fuzz
# crate with libFuzzer, and the test harnesses.
CHOSEN = ("robot_node", "r2r", "r2r_actions", "r2r_common", "r2r_msg_gen", "r2r_rcl", "lop_fuzz")


def name_of(unit):
    # `registry+...#rand@0.8.8`, `path+file:///.../robot_node#0.1.0` or `...#robot_node@0.1.0`
    source, _, fragment = unit["pkg_id"].rpartition("#")
    return fragment.split("@")[0] if "@" in fragment else source.rstrip("/").rsplit("/", 1)[-1]


def load(build):
    graph = json.loads((out / f"{build}.json").read_text())
    if graph.get("version") != 1:
        sys.exit(f"feature-drift: cargo's unit graph has version {graph.get('version')}, this script reads version 1")
    units = graph["units"]
    keys = [None] * len(units)
    chosen = [False] * len(units)

    def key(i):
        # A unit's identity: what it is and how it is built, and the identities of its deps.
        if keys[i] is None:
            u = units[i]
            deps = [key(d["index"]) for d in u["dependencies"]]
            chosen[i] = name_of(u) in CHOSEN or u["mode"] == "test" or any(chosen[d["index"]] for d in u["dependencies"])
            own = json.dumps([u["pkg_id"], u["target"]["name"], u["target"]["kind"], u["profile"], u["platform"], u["mode"], u["features"]], sort_keys=True)
            keys[i] = hashlib.sha256((own + "".join(sorted(deps))).encode()).hexdigest()
        return keys[i]

    for i in range(len(units)):
        key(i)
    return units, keys, chosen


seen = {}  # identity -> unit, over the builds so far
drift = []
for build in ORDER:
    units, keys, chosen = load(build)
    if build == "fuzz":
        # The fuzz build instruments the project's own crates; only its dependencies are reused.
        chosen = [c or u["pkg_id"].startswith("path+") for c, u in zip(chosen, units)]
    new = [i for i in range(len(units)) if keys[i] not in seen and not chosen[i]]
    new_keys = {keys[i] for i in new}
    for i in new:
        u = units[i]
        # Report only where the difference starts: units whose own dependencies are all reused.
        if any(keys[d["index"]] in new_keys for d in u["dependencies"]):
            continue
        # A crate no earlier build has is compiled once here: not a drift.
        same = [v for v in seen.values() if v["pkg_id"] == u["pkg_id"] and v["target"]["name"] == u["target"]["name"] and v["mode"] == u["mode"]]
        if same:
            # The nearest earlier variant: what this build lacks of it, and what it adds.
            mine = set(u["features"])
            near = min(same, key=lambda v: (v["profile"] != u["profile"], len(mine ^ set(v["features"]))))
            lacks, adds = sorted(set(near["features"]) - mine), sorted(mine - set(near["features"]))
            diff = ", ".join(x for x in [f"lacks {lacks}" if lacks else "", f"adds {adds}" if adds else ""] if x) or "its dependencies differ"
            what = "build script" if "custom-build" in u["target"]["kind"] else "for build scripts and macros" if u["profile"]["opt_level"] == "0" else "in the binaries"
            drift.append(f"{build}: {name_of(u)} ({what}) {diff} against an earlier build")
    for i in range(len(units)):
        seen.setdefault(keys[i], units[i])
if drift:
    print("feature-drift: these dependencies would be compiled again, with every crate above them:", file=sys.stderr)
    for d in drift:
        print("  " + d, file=sys.stderr)
    sys.exit(1)
print(f"feature-drift: {len(seen)} units over {len(ORDER)} builds, no dependency compiled twice")
EOF
