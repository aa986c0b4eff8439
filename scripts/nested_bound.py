#!/usr/bin/env python3
"""A research prototype behind issue 16's closing notes: the server-pipelining bound's relaxation
solved exactly with nested kernel releases, for vgg16 (a chain), at one bandwidth.

    .venv/bin/python scripts/nested_bound.py SERVER_PROFILE.json MB_PER_S [STEPS]

SERVER_PROFILE.json comes from `lop profile zoo:vgg16 --role server --out server.json`; MB_PER_S
is a bucket's real bandwidth (`bandwidth_mb_s` in `lop plan --json`, after --bandwidth-scale);
the input is 224 rows of 672 bytes (u8), 1 ms latency, a 52-byte band header per message, and
the 4044 bytes of fc8 coming down.

The relaxation (core/src/sim/pipeline_bound/mod.rs, module docs) prices a server-only plan by its
release terms: for every input row i, the arrival of i's message plus the server's work in
kernels released at or after it. For weights mu over the rows, a plan's weighted term is a sum of
interval costs: each message's header and in-message wait, and each kernel's a + b rows times
the weight of the rows it waits for. The Rust bound lets each op group its rows on its own and
shares kernel time with the ops it dominates (a convex stand-in). Here each op's kernel releases
are a subset of its producer's, and the messages are the root, as in any real plan; the least
weighted term over such nested plans is found exactly by a dynamic program over the ops, O(K n^3)
per mu. Frank-Wolfe steps raise it over mu; every value is a lower bound on every server-only
plan.

Prints, every 50 steps, the best bound so far and the least largest release term among the
exact minimisers seen. Each minimiser is a real plan: cut every op where its rows' releases
cross the kernel ends it chose (lop::plan::Plan::server_cuts), and the server, in any order
that never idles while work is ready, ends exactly at its largest term (the planner's release
cuts rest on this, lop/src/planner/release.rs, which tests it against the simulator). So the
gap between the two numbers is the Lagrangian's, not the plans'. Measured at vgg16 bucket 30
(2.955 MB/s, robot 8x): bound 93.78 (FW, 800 steps; 93.93 with multiplicative weights), least
largest term 97.06, whose plan the simulator runs in 96.91 ms; LOSS 98.56 before release cuts,
96.90 with them; the Rust bound 93.25 ms. Needs numpy (in the project's .venv with torch).
"""

import json
import sys
import time

import numpy as np

ROWS, ROW_BYTES, HEADER_BYTES, OUTPUT_BYTES, LATENCY_MS = 224, 672, 52, 4044, 1.0
INF = 1e18


def load_ops(path):
    """(name, a ms, b ms per row, output rows) per op of the server profile."""
    with open(path) as f:
        profile = json.load(f)
    return [(o["name"], o["fit"]["a_s"] * 1e3, o["fit"]["b_s_per_row"] * 1e3, o["out_rows"]) for o in profile["ops"]]


def is_global(name):
    return name == "flatten" or name.startswith("fc")


def last_input_row(names, idx, row):
    """The last input row that row `row` of op `idx` reads (vgg16: 3x3 pad-1 convs, 2x2 pools)."""
    for name in reversed(names[: idx + 1]):
        if name.startswith("conv") and not name.endswith("relu"):
            row += 1
        elif name.startswith("pool"):
            row = 2 * row + 1
    return min(row, ROWS - 1)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    ops = load_ops(sys.argv[1])
    bytes_per_ms = float(sys.argv[2]) * 1000.0
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 800
    names = [o[0] for o in ops]
    local = [i for i, o in enumerate(ops) if not is_global(o[0])]
    # Global ops wait for every row: their work counts in every term.
    fixed = LATENCY_MS + sum(a + b * r for (n, a, b, r) in ops if is_global(n)) + LATENCY_MS + OUTPUT_BYTES / bytes_per_ms
    # cum[k][e]: rows of local op k whose last input row is below e (kernel (s, e] holds cum[e] - cum[s]).
    cum = []
    for i in local:
        c = np.zeros(ROWS + 1)
        for r in range(ops[i][3]):
            c[last_input_row(names, i, r) + 1] += 1
        cum.append(np.cumsum(c))
    upper = np.triu(np.ones((ROWS + 1, ROWS + 1), bool), 1)

    def evaluate(mu):
        below = np.concatenate([[0.0], np.cumsum(mu)])  # weight of the rows a release at e waits for
        # Messages (s, e]: each row waits for the message's end; each header delays it and every later row.
        h = np.full((ROWS + 1, ROWS + 1), INF)
        for s in range(ROWS):
            e = np.arange(s + 1, ROWS + 1)
            h[s, e] = (below[e] - below[s]) * e * ROW_BYTES / bytes_per_ms + HEADER_BYTES / bytes_per_ms * (1.0 - below[s])
        back = []
        for k, i in enumerate(local):
            # p[s, e]: the least cost of cutting (s, e] into the producer's kernels (or messages).
            p = np.full((ROWS + 1, ROWS + 1), INF)
            arg = np.zeros((ROWS + 1, ROWS + 1), dtype=np.int32)
            np.fill_diagonal(p, 0.0)
            for e in range(1, ROWS + 1):
                cand = p[:, :e] + h[:e, e][None, :]
                t = cand.argmin(axis=1)
                p[:e, e] = cand[np.arange(e), t[:e]]
                arg[:e, e] = t[:e]
            back.append(arg)
            a, b = ops[i][1], ops[i][2]
            cnt = cum[k][None, :] - cum[k][:, None]
            own = np.where(cnt > 0, below[None, :] * (a + b * cnt), 0.0)
            h = np.where(upper, own + p, INF)
        value = h[0, ROWS] + fixed
        # The minimiser's release terms: walk the cuts back down to the messages.
        charge, messages = np.zeros(ROWS + 1), []

        def expand(k, s, e):
            if k < 0:
                messages.append((s, e))
                return
            i = local[k]
            rows = cum[k][e] - cum[k][s]
            if rows > 0:
                charge[e] += ops[i][1] + ops[i][2] * rows
            cuts = [e]
            while cuts[-1] != s:
                cuts.append(back[k][s, cuts[-1]])
            cuts.reverse()
            for x, y in zip(cuts, cuts[1:]):
                expand(k - 1, x, y)

        expand(len(local) - 1, 0, ROWS)
        messages.sort()
        term = np.zeros(ROWS)
        for q, (s, e) in enumerate(messages):
            term[s:e] = fixed + (e * ROW_BYTES + (q + 1) * HEADER_BYTES) / bytes_per_ms
        term += np.cumsum(charge[::-1])[::-1][1:]
        return value, term

    mu = np.zeros(ROWS)
    mu[-1] = 1.0
    best, least_max = -INF, INF
    started = time.time()
    for step in range(steps):
        value, term = evaluate(mu)
        best, least_max = max(best, value), min(least_max, term.max())
        gamma = 2.0 / (step + 2)
        mu *= 1 - gamma
        mu[int(term.argmax())] += gamma
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step}: bound {best:.3f} ms, least largest term {least_max:.3f} ms ({time.time() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
