//! The pipelining bound's tests.

use crate::baseline;
use crate::graph::NodeId;
use crate::graph::{DType, Graph, GraphBuilder};
use crate::ops::{Op, Pool};
use crate::plan::{Plan, Side};
use crate::profile::Fit;
use crate::sim::Simulator;
use crate::sim::pipeline_bound::kernels::SHARE_ROUNDS;
use crate::sim::pipeline_bound::kernels::group_rows;
use crate::sim::pipeline_bound::reach::Trace;
use crate::sim::pipeline_bound::reach::{Cones, Reach, dependent_rows};
use crate::sim::pipeline_bound::*;
use crate::sim::{Link, SimConfig};

/// input u8 [1,1,16,4] -> norm -> 3x3 max pool (pad 1) -> 3x3 max pool (pad 1).
fn chain() -> Graph {
    chain_then(false)
}

/// [`chain`], with a global mean after it where `mean` (so that little comes down).
fn chain_then(mean: bool) -> Graph {
    let pool = || Op::MaxPool(Pool::same_3x3());
    let mut b = GraphBuilder::new("chain");
    let x = b.input("x", vec![1, 1, 16, 4], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
    let p1 = b.add("pool1", pool(), &[n]).expect("pool1");
    let mut out = b.add("pool2", pool(), &[p1]).expect("pool2");
    if mean {
        out = b.add("mean", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[out]).expect("mean");
    }
    b.output(out);
    b.build().expect("graph")
}

/// A simulator over `g` whose server takes `server` per op, the robot 1 ms a kernel and a
/// row, on `link`, band headers priced or not.
fn server_sim<'g>(g: &'g Graph, server: impl FnMut(NodeId) -> Fit, link: Link, band_headers: bool) -> Simulator<'g> {
    let robot = crate::profile::from_fits(g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
    let server = crate::profile::from_fits(g, Side::Server, server).expect("server");
    Simulator::new(g, &robot, &server, SimConfig { link, band_headers, ..SimConfig::default() }).expect("sim")
}

/// Server-only plans with every op in each of `chunks` chunks never beat `bound`.
fn no_chunking_beats(sim: &Simulator<'_>, g: &Graph, bound: f64, chunks: &[usize]) {
    for &k in chunks {
        let mut plan = Plan::server_only(g, 16);
        for id in 1..g.nodes.len() {
            plan.splits[id].server_chunks = k;
        }
        let cost = sim.cost(&plan).expect("chunked");
        assert!(cost.makespan_s >= bound - 1e-12, "{k} chunks: {} < bound {bound}", cost.makespan_s);
    }
}

#[test]
fn the_bound_counts_the_rows_that_read_the_last_input_row() {
    let g = chain();
    // Kernels with a high fixed cost (8 ms), so that the tail, and the choice between more
    // kernels and late rows, outweigh the rest.
    let sim = server_sim(&g, |_| Fit::new(8e-3, 1e-4), Link { bandwidth: 1e4, latency_s: 2e-3, overhead_s: 1e-4 }, false);
    let dep = dependent_rows(&sim, 0, 15).expect("suffixes");
    // The last input row reaches norm's last row, pool1's last 2 rows and pool2's last 3.
    assert_eq!(&dep[1..], &[1, 2, 3]);
    let reach = Reach::new(&sim, 0).expect("suffixes");
    for from in 0..16 {
        assert_eq!(reach.dependent_rows(&sim, 0, from), dependent_rows(&sim, 0, from).expect("suffixes"), "from row {from}");
    }
    // Band headers are left out here (see `headers_cut_the_input_into_few_messages`).
    // The last row: upload 64 bytes, server tail (1+2+3 rows), one row of pool2 (16 bytes)
    // down: 36.8 ms. A row released earlier arrives 0.4 ms sooner a row and adds only 0.3 ms
    // of work (35.0 ms for row 0: the whole work after the first row).
    let last = (1e-4 + 64.0 / 1e4 + 2e-3) + (3.0 * 8e-3 + 6.0 * 1e-4) + (1e-4 + 16.0 / 1e4 + 2e-3);
    let rel = sim.releases().expect("releases");
    let arrival = |i: usize| 1e-4 + (i + 1) as f64 * 4.0 / 1e4 + 2e-3;
    let tail_of_last = rel.from[15].work_s + (1e-4 + 16.0 / 1e4 + 2e-3);
    assert!((arrival(15) + tail_of_last - last).abs() < 1e-12, "{} vs {last}", arrival(15) + tail_of_last);
    // Every output byte depends on row 2 and comes down after it; the output leaves in
    // row order, and its first row reads input rows 0-2 through norm's rows 0-2 and
    // pool1's rows 0-1, so after row 2 arrives (3.3 ms) norm's row 2, pool1's row 1 and
    // pool2's row 0 take a kernel each (24.3 ms) before the first of the 256 bytes may
    // leave (27.7 ms): 55.3 ms, where the download counted from row 2's arrival gave 31.0.
    let want = arrival(2) + 3.0 * (8e-3 + 1e-4) + (1e-4 + 256.0 / 1e4 + 2e-3);
    assert!((rel.from[2].first_output_s - 3.0 * (8e-3 + 1e-4)).abs() < 1e-12, "{:?}", rel.from[2]);
    let parts = sim.pipeline_parts(SHARE_ROUNDS).expect("bound");
    assert!((parts.per_row - want).abs() < 1e-12, "{parts:?} vs {want}");
    // The tail alone holds only the rows that read the last row, as if the others were
    // done before at no cost; each op's other rows need a kernel of their own (8 ms)
    // before it, or wait for the end. Weighing row 0 (at about 1/6) with the last row
    // charges that choice (40.5 ms), still below the download's term here.
    assert!(parts.mixture > 40e-3 && parts.mixture < want, "{parts:?}");
    let got = sim.server_pipeline_bound().expect("bound");
    assert!((got - want).abs() < 1e-12, "{parts:?}");
    // No server-side plan beats it, however finely chunked.
    let whole = baseline::server_only(&sim, 16).expect("server-only").cost.expect("feasible");
    assert!(whole.makespan_s > got);
    no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8, 16]);
}

/// Cones are exact: a 3x3 pool reads a run of rows (traced as one range), a 1x1 stride-2
/// pool every other row (traced row by row, never the hull, which would charge rows no
/// plan computes). input u8 [1,1,16,4] -> norm -> 1x1 stride-2 max pool (8 rows) -> 3x3
/// max pool (pad 1).
#[test]
fn cones_trace_exactly_the_rows_an_output_row_reads() {
    let mut b = GraphBuilder::new("strided");
    let x = b.input("x", vec![1, 1, 16, 4], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
    let skip = Pool { kernel: vec![1, 1], strides: vec![2, 2], pads_begin: vec![0, 0], pads_end: vec![0, 0], ..Pool::same_3x3() };
    let p1 = b.add("skip", Op::MaxPool(skip), &[n]).expect("skip");
    let p2 = b.add("pool", Op::MaxPool(Pool::same_3x3()), &[p1]).expect("pool");
    b.output(p2);
    let g = b.build().expect("graph");
    let cones = Cones::new(&g);
    assert!(matches!(&cones.traces[p1][0], Trace::Rows { gapless: false, .. }));
    assert!(matches!(&cones.traces[p2][0], Trace::Rows { gapless: true, .. }));
    // Row 3 of the 3x3 pool reads rows 2-4 of the strided pool, which read norm's rows 4,
    // 6 and 8, which read the same input rows.
    let cone = cones.of(&g, p2, 3);
    assert_eq!(cone[p2], vec![3..4]);
    assert_eq!(cone[p1], vec![2..5]);
    assert_eq!(cone[n], vec![4..5, 6..7, 8..9]);
    assert_eq!(cone[x], vec![4..5, 6..7, 8..9]);
    // The bound built on them still holds for every chunking of a server-only plan.
    let sim = server_sim(&g, |_| Fit::new(2e-3, 1e-4), Link { bandwidth: 2e3, latency_s: 1e-3, overhead_s: 1e-4 }, false);
    let got = sim.server_pipeline_bound().expect("bound");
    no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8]);
}

/// A server much slower than the link: the compute term binds, and no server-side plan,
/// however chunked, beats it.
#[test]
fn a_compute_bound_server_is_bound_by_its_whole_work() {
    let g = chain();
    let sim = server_sim(&g, |_| Fit::new(1e-4, 1e-3), Link { bandwidth: 1e7, latency_s: 1e-4, overhead_s: 1e-5 }, false);
    // One input row (4 bytes) up, 3 ops of 16 rows, one output row (16 bytes) down.
    let want = (1e-5 + 4.0 / 1e7 + 1e-4) + 3.0 * (1e-4 + 16.0 * 1e-3) + (1e-5 + 16.0 / 1e7 + 1e-4);
    let parts = sim.pipeline_parts(SHARE_ROUNDS).expect("bound");
    assert!((parts.per_row - want).abs() < 1e-12, "{parts:?} vs {want}");
    let got = sim.server_pipeline_bound().expect("bound");
    assert!(got >= want && got < want * 1.0001, "{got} vs {want}");
    let t = sim.server_pipeline_terms().expect("terms");
    assert!(got > 1.5 * (t.input_bytes / 1e7 + t.tail_s + t.output_bytes / 1e7), "the compute term binds");
    no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8, 16]);
}

/// Outputs far larger than the input: every output byte comes down after the input row
/// that all of them depend on went up.
#[test]
fn large_outputs_bound_by_their_download() {
    let g = chain();
    let sim = server_sim(&g, |_| Fit::new(0.0, 0.0), Link { bandwidth: 1e4, latency_s: 2e-3, overhead_s: 1e-4 }, false);
    // The input is 64 bytes, the float output 256. Every output row depends on input row 2
    // (pool2's row 0 reads pool1's row 1, which reads norm's row 2): three 4-byte rows up,
    // then 256 bytes down.
    let want = (1e-4 + 12.0 / 1e4 + 2e-3) + (1e-4 + 256.0 / 1e4 + 2e-3);
    let got = sim.server_pipeline_bound().expect("bound");
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    no_chunking_beats(&sim, &g, got, &[1, 4, 16]);
}

/// The rows that arrive first can bind: input u8 [1,1,16,4] -> norm -> 2x2 stride-2 max
/// pool (8 rows) -> 3x3 max pool (pad 1), with only the last op costly (10 ms a row). Its
/// first row reads pool1's rows 0-1, which read input rows 0-3, so all of its work waits
/// for row 3; at 1 ms a row up, the last row releases only 2 of its rows.
#[test]
fn work_released_by_early_rows_binds_between_the_ends() {
    let mut b = GraphBuilder::new("stride");
    let x = b.input("x", vec![1, 1, 16, 4], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
    let half = Pool { kernel: vec![2, 2], strides: vec![2, 2], pads_begin: vec![0, 0], pads_end: vec![0, 0], ..Pool::same_3x3() };
    let p1 = b.add("pool1", Op::MaxPool(half), &[n]).expect("pool1");
    let p2 = b.add("pool2", Op::MaxPool(Pool::same_3x3()), &[p1]).expect("pool2");
    b.output(p2);
    let g = b.build().expect("graph");
    let sim = server_sim(
        &g,
        |id| Fit::new(0.0, if id == 3 { 1e-2 } else { 0.0 }),
        Link { bandwidth: 4e3, latency_s: 0.0, overhead_s: 0.0 },
        false,
    );
    // Rows 0-3 up (4 ms), pool2's 8 rows (80 ms), one 8-byte row down (2 ms): 86 ms. Row 0
    // alone gives 83 ms (the whole work after the first row), the last row 38 ms (2 rows
    // of pool2 after the whole input).
    let want = 16.0 / 4e3 + 8.0 * 1e-2 + 8.0 / 4e3;
    let got = sim.server_pipeline_bound().expect("bound");
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    let first_row = 4.0 / 4e3 + 8.0 * 1e-2 + 8.0 / 4e3;
    assert!(got > first_row + 2e-3, "tighter than the whole work after the first row");
    no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8]);
}

/// Every way of cutting `tails.len()` rows into messages, top to bottom: the least of their
/// makespans (each message's arrival, then its first row's tail; the largest over messages).
fn every_cut(tails: &[f64], row_bytes: f64, header_bytes: f64, link: &Link) -> f64 {
    let n = tails.len();
    (0..1u32 << (n - 1))
        .map(|mask| {
            let (mut start, mut messages, mut worst) = (0, 0, 0.0f64);
            for end in 1..=n {
                if end == n || mask & (1 << (end - 1)) != 0 {
                    messages += 1;
                    let bytes = end as f64 * row_bytes + messages as f64 * header_bytes;
                    worst = worst.max(link.overhead_s + bytes / link.bandwidth + link.latency_s + tails[start]);
                    start = end;
                }
            }
            worst
        })
        .fold(f64::INFINITY, f64::min)
}

/// The best cut into messages, found by bisection with a greedy test, equals the least over
/// every cut, on random tails, rows, headers and links.
#[test]
fn the_best_message_cut_is_the_least_over_every_cut() {
    let mut rng = crate::rng::Rng::new(7);
    for case in 0..300 {
        let n = 1 + rng.below(11);
        let mut tails: Vec<f64> = (0..n).map(|_| rng.unit() * 2e-2).collect();
        tails.sort_by(|a, b| b.total_cmp(a));
        let link = Link { bandwidth: [1e3, 1e4, 1e5][rng.below(3)], latency_s: rng.unit() * 1e-3, overhead_s: rng.unit() * 1e-4 };
        let (row_bytes, header_bytes) = (1.0 + rng.unit() * 40.0, rng.unit() * 60.0);
        let want = every_cut(&tails, row_bytes, header_bytes, &link);
        let got = best_message_cut(&tails, row_bytes, header_bytes, &link, 0.0);
        assert!(got <= want * (1.0 + 1e-12) && got >= want * (1.0 - 1e-9), "case {case}: {got} vs {want}");
    }
}

/// With band headers priced, each message the input is cut into costs one: the bound
/// charges the cut that serves the tail best, above the one header of the row-by-row
/// relaxation, and no chunking beats it.
#[test]
fn headers_cut_the_input_into_few_messages() {
    let g = chain();
    let link = Link { bandwidth: 1e4, latency_s: 2e-3, overhead_s: 1e-4 };
    let bound = |band_headers: bool| {
        let sim = server_sim(&g, |_| Fit::new(1e-3, 1e-3), link, band_headers);
        (sim.pipeline_parts(SHARE_ROUNDS).expect("bound"), sim)
    };
    let (bare, _) = bound(false);
    let (parts, sim) = bound(true);
    let header = crate::sim::band_header_bytes(4) as f64;
    // The input's header and the output's: what the row-by-row relaxation adds.
    assert!((parts.per_row - bare.per_row - 2.0 * header / 1e4).abs() < 1e-12, "{parts:?} vs {bare:?}");
    // Headers left out, single rows are free messages: the cut is the row-by-row bound.
    assert!((bare.message_cut - bare.per_row).abs() < 1e-12, "{bare:?}");
    assert!(parts.message_cut > parts.per_row + 1e-4, "{parts:?}");
    let got = sim.server_pipeline_bound().expect("bound");
    no_chunking_beats(&sim, &g, got, &[1, 2, 4, 8, 16]);
}

/// Kernels cost a fixed time each, so an op either computes its rows as they arrive, in
/// more kernels, or late in one: input u8 [1,1,2,1] (10 ms a row up) -> norm (10 ms a
/// kernel and 10 ms a row) -> global mean (free, 4 bytes down in 40 ms). Row 0 alone: 10 +
/// 30 + 40 ms; row 1 alone: 20 + 20 + 40 ms. Weighed half and half, norm's row 0 costs
/// either 10 ms more in the late kernel or a 10 ms kernel of its own at half weight: 85 ms.
/// Every plan takes 90.
#[test]
fn weighing_two_rows_charges_the_kernels_between_them() {
    let mut b = GraphBuilder::new("two");
    let x = b.input("x", vec![1, 1, 2, 1], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
    let m = b.add("mean", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[n]).expect("mean");
    b.output(m);
    let g = b.build().expect("graph");
    let sim = server_sim(
        &g,
        |id| if id == 1 { Fit::new(1e-2, 1e-2) } else { Fit::new(0.0, 0.0) },
        Link { bandwidth: 100.0, latency_s: 0.0, overhead_s: 0.0 },
        false,
    );
    let parts = sim.pipeline_parts(SHARE_ROUNDS).expect("bound");
    assert!((parts.per_row - 0.08).abs() < 1e-12, "{parts:?}");
    assert!((parts.mixture - 0.085).abs() < 1e-12, "{parts:?}");
    assert!((sim.server_pipeline_bound().expect("bound") - 0.085).abs() < 1e-12);
    no_chunking_beats(&sim, &g, 0.085, &[1, 2]);
    let whole = baseline::server_only(&sim, 2).expect("server-only").cost.expect("feasible");
    assert!((whole.makespan_s - 0.09).abs() < 1e-9, "{}", whole.makespan_s);
}

/// An op pays its kernels' `a` for the ops it dominates: norm costs 3 ms a kernel and
/// nothing per row, the pools nothing a kernel and 1 ms a row, and the 16 input rows take
/// 32 ms to come. Unshared, the bound lets norm run in one kernel while the pools run row by
/// row as the rows come (44 ms); every plan that cuts the pools finely cuts norm as finely.
/// Shared, the bound rises (50.8 ms), and no server-only plan in any chunk counts (either
/// chunk bounds; the best takes 55 ms) beats it.
#[test]
fn an_op_pays_its_kernels_for_the_ops_it_dominates() {
    let g = chain_then(true);
    let fit = |id: NodeId| match id {
        1 => Fit::new(3e-3, 0.0),
        2 | 3 => Fit::new(0.0, 1e-3),
        _ => Fit::new(0.0, 0.0),
    };
    let link = Link { bandwidth: 2000.0, latency_s: 1e-3, overhead_s: 0.0 };
    let sim = server_sim(&g, fit, link, false);
    let shared = sim.server_pipeline_bound().expect("bound");
    let parts = |rounds| sim.pipeline_parts(rounds).expect("bound");
    let unshared = parts(0);
    let unshared = unshared.per_row.max(unshared.message_cut).max(unshared.mixture);
    assert!(shared > unshared * 1.02, "shared {shared} s, unshared {unshared} s");
    assert_eq!(parts(SHARE_ROUNDS).mixture.max(unshared), shared.max(unshared));
    let mut least = f64::INFINITY;
    for bounds in [crate::sim::ChunkBounds::Even, crate::sim::ChunkBounds::Aligned] {
        let robot = crate::profile::from_fits(&g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
        let server = crate::profile::from_fits(&g, Side::Server, fit).expect("server");
        let sim =
            Simulator::new(&g, &robot, &server, SimConfig { link, band_headers: false, bounds, ..SimConfig::default() }).expect("sim");
        for k in 0..16 * 16 * 16 {
            let mut plan = Plan::server_only(&g, 16);
            for (id, c) in [(1, k % 16), (2, k / 16 % 16), (3, k / 256)] {
                plan.splits[id].server_chunks = 1 + c;
            }
            let cost = sim.cost(&plan).expect("server-side");
            assert!(cost.makespan_s >= shared - 1e-12, "chunks {k}: {} s below the bound {shared} s", cost.makespan_s);
            least = least.min(cost.makespan_s);
        }
    }
    eprintln!("unshared {unshared} s, shared {shared} s, best plan {least} s");
}

/// The convex-hull sweep finds the least grouping of an op's rows into kernels, and the
/// charges it returns are that grouping's: checked against every grouping of random rows.
#[test]
fn grouping_rows_into_kernels_is_the_least_over_every_grouping() {
    let mut rng = crate::rng::Rng::new(11);
    for case in 0..400 {
        let m = 1 + rng.below(10);
        let n = 1 + rng.below(8);
        let mut last: Vec<usize> = (0..m).map(|_| rng.below(n)).collect();
        last.sort_unstable();
        let mut below: Vec<f64> = (0..n).map(|_| if rng.below(4) == 0 { 0.0 } else { rng.unit() }).collect();
        below.sort_by(f64::total_cmp);
        let (a, b) = (rng.unit() * 1e-2 * (rng.below(3) as f64), rng.unit() * 1e-2 * (rng.below(3) as f64));
        let want = (0..1u32 << (m - 1))
            .map(|mask| {
                let (mut start, mut total) = (0, 0.0);
                for end in 1..=m {
                    if end == m || mask & (1 << (end - 1)) != 0 {
                        total += (a + b * (end - start) as f64) * below[last[end - 1]];
                        start = end;
                    }
                }
                total
            })
            .fold(f64::INFINITY, f64::min);
        let mut charge = vec![0.0; n + 1];
        let (got, _) = group_rows(a, b, &last, &below, &mut charge);
        assert!((got - want).abs() <= 1e-12 + 1e-9 * want, "case {case}: {got} vs {want}");
        let charged: f64 = charge.iter().zip(&below).map(|(c, w)| c * w).sum();
        assert!((charged - got).abs() <= 1e-12 + 1e-9 * got, "case {case}: charges {charged} vs {got}");
    }
}
