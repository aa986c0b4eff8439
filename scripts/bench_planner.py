#!/usr/bin/env python3
"""Plans 31-bucket tables and prints each method beside both lower bounds, averaged over buckets
1-30, one row per (model, robot profile, input wire):

    python3 scripts/bench_planner.py MODEL:ROBOT.json:SERVER.json [...] [--wires native,f32]
        [--lop target/release/lop] [--extra "--bandwidth-scale auto"] [--json]

Columns (ms, means over buckets 1-30): LOSS, the best baseline, the server-pipelining bound, the
fluid bound; then LOSS / best baseline, LOSS / pipelining bound (ratios of those means); the
means over the buckets of each bucket's LOSS / best baseline and fluid bound / best baseline
(every bucket's LOSS is at least its fluid bound, so no table can bring the first mean below the
second: where a target for LOSS / best lies below it, the target is out of reach); the share of the gap
between the two bounds that LOSS closes over the buckets where the fluid bound is below the
pipelining bound, as the mean of each bucket's (pipe - lop) / (pipe - fluid) and as the sum of
pipe - lop over the sum of pipe - fluid (low buckets, where the pipelining bound is far above
every plan, weigh more); negative where LOSS is above the pipelining bound; LOSS / pipelining
bound over the buckets whose plan gives the robot no rows (the bound's own regime); the planning time
(0 on a table-cache hit); the
resource that limits the fluid bound's ideal split most often; and the buckets (of all 31) in which
LOSS is slower than the best baseline (the planner keeps a baseline's plan where it is better, so
this should read 0). With --post-robot (models with a `--task` in --extra), each table is planned
again with `--post-side robot` and one more column gives that table's LOSS over the first
table's best baseline (means over buckets 1-30): what placing the post-processing stage gains
over keeping it on the robot, where the raw heads come down. Standard library only.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile


def plan(lop: str, model: str, robot: str, server: str, wire: str, extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        table = f"{tmp}/table.json"
        cmd = [lop, "plan", model, "--robot-profile", robot, "--server-profile", server, "--input-wire", wire,
               "--buckets", "0:30:1", "--out", table, "--json", *extra]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
        v = json.loads(out.stdout)
        # Whether each bucket's plan gives the robot any rows of any op (robot bands).
        with open(table) as f:
            entries = json.load(f)["entries"]
        for b, e in zip(v["buckets"], entries):
            b["robot_bands"] = any(sp["robot_end"] > 0 for sp in e["plan"]["splits"][1:])
        return v


def stats(label: str, v: dict) -> dict:
    """The row's figures (ms and ratios over buckets 1-30), as --json writes them."""
    buckets = [b for b in v["buckets"] if 1 <= b["bucket_mb_s"] <= 30]
    def mean(key):
        vals = [key(b) for b in buckets]
        return statistics.mean(vals) if all(x is not None for x in vals) else float("nan")
    ms = lambda b, k: b["makespan_ms"][k]
    best = lambda b: min(x for x in (ms(b, "robot-only"), ms(b, "server-only"), ms(b, "layer")) if x is not None)
    lop, base = mean(lambda b: ms(b, "lop")), mean(best)
    pipe, fluid = mean(lambda b: b["server_pipeline_bound_ms"]), mean(lambda b: b["fluid_bound_ms"])
    below = [b for b in buckets if b["fluid_bound_ms"] < b["server_pipeline_bound_ms"] - 1e-9]
    gap_sum = sum(b["server_pipeline_bound_ms"] - b["fluid_bound_ms"] for b in below)
    per_bucket = [(b["server_pipeline_bound_ms"] - ms(b, "lop")) / (b["server_pipeline_bound_ms"] - b["fluid_bound_ms"]) for b in below]
    no_bands = [ms(b, "lop") / b["server_pipeline_bound_ms"] for b in buckets if not b["robot_bands"]]
    terms = [max(b["fluid_terms_ms"], key=b["fluid_terms_ms"].get) for b in buckets]
    return {
        "label": label, "lop_ms": lop, "best_ms": base, "pipe_ms": pipe, "fluid_ms": fluid,
        "lop_over_best": lop / base, "lop_over_pipe": lop / pipe,
        "lop_over_best_mean": statistics.mean(ms(b, "lop") / best(b) for b in buckets),
        "fluid_over_best_mean": statistics.mean(b["fluid_bound_ms"] / best(b) for b in buckets),
        "gap_closed_mean": statistics.mean(per_bucket) if below else None,
        "gap_closed_sum": sum(b["server_pipeline_bound_ms"] - ms(b, "lop") for b in below) / gap_sum if below else None,
        "gap_buckets": len(below),
        "no_band_lop_over_pipe": statistics.mean(no_bands) if no_bands else None, "no_band_buckets": len(no_bands),
        "planning_s": v["planning_time_s"], "limit": max(set(terms), key=terms.count),
        "slower_buckets": sum(1 for b in v["buckets"] if ms(b, "lop") > best(b) * (1 + 1e-9)),
    }


def row(x: dict) -> str:
    server_side = f"{x['no_band_lop_over_pipe']:6.3f} ({x['no_band_buckets']:2d})" if x["no_band_buckets"] else "     -     "
    gap = (f"{x['gap_closed_mean']:7.3f} {x['gap_closed_sum']:6.3f} ({x['gap_buckets']:2d})" if x["gap_buckets"]
           else "        -      -     ")
    return (f"{x['label']:<34} {x['lop_ms']:9.1f} {x['best_ms']:9.1f} {x['pipe_ms']:9.1f} {x['fluid_ms']:9.1f} "
            f"{x['lop_over_best']:6.3f} {x['lop_over_pipe']:6.3f} {x['lop_over_best_mean']:6.3f} {x['fluid_over_best_mean']:6.3f} "
            f"{gap} {server_side} {x['planning_s']:6.1f} {x['limit']} {x['slower_buckets']}")


def post_robot_ratio(free: dict, pinned: dict) -> float:
    """Mean over buckets 1-30 of the pinned table's LOSS over the mean of the free table's best
    baseline (the same buckets)."""
    ms = lambda b, k: b["makespan_ms"][k]
    best = lambda b: min(x for x in (ms(b, "robot-only"), ms(b, "server-only"), ms(b, "layer")) if x is not None)
    inside = lambda v: [b for b in v["buckets"] if 1 <= b["bucket_mb_s"] <= 30]
    return statistics.mean(ms(b, "lop") for b in inside(pinned)) / statistics.mean(best(b) for b in inside(free))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="MODEL:ROBOT_PROFILE:SERVER_PROFILE")
    ap.add_argument("--wires", default="native,f32")
    ap.add_argument("--lop", default="target/release/lop")
    ap.add_argument("--extra", default="--bandwidth-scale auto", help="more `lop plan` flags")
    ap.add_argument("--post-robot", action="store_true", help="also plan with the post-processing pinned to the robot")
    ap.add_argument("--task", action="append", default=[], metavar="MODEL=TASK",
                    help="plan MODEL with `--task TASK` (repeatable; its profiles must be of the same graph)")
    ap.add_argument("--json", action="store_true", help="print one JSON object ({\"rows\": [...]}) instead of the table")
    a = ap.parse_args()
    rows = []
    if not a.json:
        print(f"{'model / robot / wire':<34} {'lop':>9} {'best':>9} {'pipe':>9} {'fluid':>9} {'l/best':>6} {'l/pipe':>6} "
              f"{'l/b pb':>6} {'f/b pb':>6} "
              f"{'closed: mean, sum (n)':>21} {'no-band l/pipe (n)':>11} {'plan s':>6} limit worse")
    tasks = dict(t.split("=", 1) for t in a.task)
    for run in a.runs:
        model, robot, server = run.rsplit(":", 2)
        extra = a.extra.split() + (["--task", tasks[model]] if model in tasks else [])
        for wire in a.wires.split(","):
            v = plan(a.lop, model, robot, server, wire, extra)
            task = f" --task {tasks[model]}" if model in tasks else ""
            x = stats(f"{model}{task} {robot.rsplit('/', 1)[-1]} {wire}", v)
            line = row(x)
            if a.post_robot:
                pinned = plan(a.lop, model, robot, server, wire, extra + ["--post-side", "robot"])
                x["post_robot_lop_over_best"] = post_robot_ratio(v, pinned)
                line += f"  post on robot: {x['post_robot_lop_over_best']:.3f}"
            rows.append(x)
            if not a.json:
                print(line, flush=True)
    if a.json:
        print(json.dumps({"rows": rows}, indent=1))


if __name__ == "__main__":
    main()
