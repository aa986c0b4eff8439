//! The tests of `lop_core::sim::bounds`, on the engine's graphs.

use crate::graph::{DType, Graph, GraphBuilder};
use crate::ops::Conv;
use crate::ops::Op;
use crate::plan::{Plan, Side};
use crate::profile::Fit;
use crate::sim::bounds::*;
use crate::sim::{Link, SimConfig, Simulator};

/// input -> norm -> `n` 3x3 stride-1 pad-1 convs over `rows` rows; output the last conv.
fn conv_chain(rows: usize, n: usize) -> Graph {
    conv_chain_then(rows, n, false)
}

/// [`conv_chain`], with a mean over the frame after it where `mean` (so that little comes
/// down).
fn conv_chain_then(rows: usize, n: usize, mean: bool) -> Graph {
    let mut b = GraphBuilder::new(if mean { "convs and a mean" } else { "convs" });
    let x = b.input("x", vec![1, 2, rows, 16], DType::U8);
    let mut v = b.add("norm", Op::NormalizeU8 { mean: vec![0.0; 2], std: vec![1.0; 2] }, &[x]).expect("norm");
    for i in 0..n {
        let c = Conv::same2d(tch::Tensor::zeros([2i64, 2, 3, 3], (tch::Kind::Float, tch::Device::Cpu)));
        v = b.add(format!("conv{i}"), Op::Conv(c), &[v]).expect("conv");
    }
    if mean {
        v = b.add("mean", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[v]).expect("mean");
    }
    b.output(v);
    b.build().expect("graph")
}

fn server_plan(g: &Graph, k: usize) -> Plan {
    let mut p = Plan::server_only(g, 8);
    for s in &mut p.splits {
        s.server_chunks = k;
    }
    p
}

#[test]
fn server_cuts_override_the_rule_on_the_server_only() {
    let g = conv_chain(16, 2);
    let mut p = server_plan(&g, 4);
    p.splits[2].server_chunks = 3;
    p.server_cuts = vec![crate::plan::OpCuts { node: 2, ends: vec![1, 10, 16] }];
    p.validate(&g).expect("valid");
    for mode in [ChunkBounds::Even, ChunkBounds::Aligned] {
        let b = chunk_bounds(&g, &p, Side::Server, mode);
        assert_eq!(b[2], vec![0..1, 1..10, 10..16], "{mode:?}: as the plan cuts it");
        // Its consumer aligns to the cuts it is given: conv1's rows [0, b) read conv0's
        // [0, b + 1), so under aligned bounds it follows them one row up.
        if mode == ChunkBounds::Aligned {
            assert_eq!(b[3], vec![0..9, 9..16], "conv1 waits for conv0's cut at 10, as aligned bounds say");
        }
    }
    // The robot's side of an op is never cut by hand.
    let mut r = p.clone();
    r.splits[2].robot_end = 8;
    r.splits[2].server_start = 0;
    r.splits[2].robot_chunks = 2;
    let robot = chunk_bounds(&g, &r, Side::Robot, ChunkBounds::Even);
    assert_eq!(robot[2], vec![0..8, 8..16]);
}

#[test]
fn aligned_bounds_of_a_conv_chain_match_hand_computation() {
    // 16 rows, 4 chunks, server only. norm (id 1) has no chunked producer: even, ends
    // 4, 8, 12, 16. Each 3x3 pad-1 conv's rows [0, b) read rows [0, b + 1) of its input,
    // so boundary j = producer boundary j - 1 (the last is the range end):
    //   conv0 (id 2): 3, 7, 11, 16;  conv1 (id 3): 2, 6, 10, 16;  conv2 (id 4): 1, 5, 9, 16.
    let g = conv_chain(16, 3);
    let p = server_plan(&g, 4);
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    let ends = |id: usize| b[id].iter().map(|r| r.end).collect::<Vec<_>>();
    assert!(b[0].is_empty());
    assert_eq!(ends(1), vec![4, 8, 12, 16]);
    assert_eq!(ends(2), vec![3, 7, 11, 16]);
    assert_eq!(ends(3), vec![2, 6, 10, 16]);
    assert_eq!(ends(4), vec![1, 5, 9, 16]);
    assert_eq!(b[4][0], 0..1);
    // Even: every op 4, 8, 12, 16; nothing on the robot.
    let e = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Even);
    assert!((1..5).all(|id| e[id].iter().map(|r| r.end).collect::<Vec<_>>() == vec![4, 8, 12, 16]));
    assert!(chunk_bounds(&g, &p, Side::Robot, ChunkBounds::Aligned).iter().all(Vec::is_empty));
    // Deep enough and the first chunks come out empty: fewer chunks, rows still covered.
    let g = conv_chain(16, 6);
    let b = chunk_bounds(&g, &server_plan(&g, 4), Side::Server, ChunkBounds::Aligned);
    // conv3 (id 5) reads rows [0, b + 1) of conv2's chunks ending 1, 5, 9: first boundary 0.
    assert_eq!(b[5], vec![0..4, 4..8, 8..16], "conv3 lost its first chunk");
    assert_eq!(b[7], vec![0..2, 2..6, 6..16]);
}

#[test]
fn aligned_bounds_spread_over_finer_producers_and_ignore_whole_ones() {
    // norm (id 1) in 4 even chunks, ends 4, 8, 12, 16; conv0 (id 2) in 2: its one boundary
    // aligns to norm's boundary ceil(1 * 4 / 2) - 1 = 1 (row 8), so rows [0, 7); conv1
    // (id 3) in 2 aligns to conv0's boundary 0 (row 7): rows [0, 6).
    let g = conv_chain(16, 2);
    let mut p = server_plan(&g, 2);
    p.splits[1].server_chunks = 4;
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    assert_eq!(b[1], vec![0..4, 4..8, 8..12, 12..16]);
    assert_eq!(b[2], vec![0..7, 7..16]);
    assert_eq!(b[3], vec![0..6, 6..16]);
    // Last cut aligned: conv0's one boundary on norm's last, ceil(1 * 3 / 1) - 1 = 2 (row
    // 12), so rows [0, 11), its last chunk what reads norm's last; conv1 on conv0's 0.
    p.last_cut_aligned = true;
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    assert_eq!(b[1], vec![0..4, 4..8, 8..12, 12..16]);
    assert_eq!(b[2], vec![0..11, 11..16]);
    assert_eq!(b[3], vec![0..10, 10..16]);
    // conv0 in 3 over norm's 4: on norm's ceil(1 * 3 / 2) - 1 = 1 (row 8) and
    // ceil(2 * 3 / 2) - 1 = 2 (row 12); evenly, on ceil(4 / 3) - 1 = 1 and ceil(8 / 3) - 1 = 2
    // too. Over 8 chunks of norm (ends 2, 4, .., 16) the two differ: 7 * (j + 1) / 2 gives
    // norm's boundaries 3 and 6 (rows 8, 14), 8 * (j + 1) / 3 gives 2 and 5 (rows 6, 12).
    p.splits[2].server_chunks = 3;
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    assert_eq!(b[2], vec![0..7, 7..11, 11..16]);
    p.splits[1].server_chunks = 8;
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    assert_eq!(b[2], vec![0..7, 7..13, 13..16]);
    p.last_cut_aligned = false;
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    assert_eq!(b[2], vec![0..5, 5..11, 11..16]);
    // A producer computed whole does not constrain: its consumer cuts evenly (and so
    // does the next one, aligned to that).
    let mut p = server_plan(&g, 4);
    p.splits[1].server_chunks = 1;
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    assert_eq!(b[1], vec![0..16]);
    assert_eq!(b[2], vec![0..4, 4..8, 8..12, 12..16]);
    assert_eq!(b[3], vec![0..3, 3..7, 7..11, 11..16]);
}

#[test]
fn aligning_last_cuts_shortens_the_tail_where_deep_rows_read_most_of_the_frame() {
    // 32 rows through 12 3x3 convs (conv j's rows read 2j + 3 rows of the frame), norm in
    // 8 chunks, every conv in 2, the upload (16 ms) longer than the server's work. Spread
    // evenly, conv j's second chunk (rows [15 - j, 32)) all waits for the last rows;
    // aligned to norm's last cut it is rows [27 - j, 32), and the first chunks, larger,
    // still end before the last rows arrive.
    // A mean over the frame follows, so that little comes down.
    let g = conv_chain_then(32, 12, true);
    let r = crate::profile::from_fits(&g, Side::Robot, |_| Fit::new(0.0, 1e-3)).expect("robot");
    let s = crate::profile::from_fits(&g, Side::Server, |_| Fit::new(1e-4, 2e-6)).expect("server");
    let mut p = server_plan(&g, 2);
    p.splits[1].server_chunks = 8;
    p.splits[14].server_chunks = 1;
    let cfg = SimConfig { link: Link::mbytes(0.064, 1e-4), bounds: ChunkBounds::Aligned, ..SimConfig::default() };
    let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
    let even = sim.cost(&p).expect("even").makespan_s;
    p.last_cut_aligned = true;
    let last = sim.cost(&p).expect("last").makespan_s;
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    assert_eq!(b[13], vec![0..16, 16..32], "conv11's last chunk should hold what reads norm's last");
    eprintln!("deep chain: even {:.3} ms, last cut aligned {:.3} ms", even * 1e3, last * 1e3);
    assert!(last < even, "last cut aligned {last} vs even {even}");
    // Under even bounds the flag changes nothing.
    let sim = Simulator::new(&g, &r, &s, SimConfig { bounds: ChunkBounds::Even, ..cfg }).expect("sim");
    let on = sim.cost(&p).expect("on").makespan_s;
    p.last_cut_aligned = false;
    assert_eq!(sim.cost(&p).expect("off").makespan_s, on);
}

#[test]
fn a_taper_sizes_the_chunks_of_ops_that_cut_their_own_rows() {
    // 16 rows, 4 chunks, head halved twice: weights 1, 2, 4, 4 of 11, so norm (id 1) ends
    // 1, 4, 10, 16; each conv aligns one row higher, as for even chunks.
    let g = conv_chain(16, 2);
    let mut p = server_plan(&g, 4);
    p.taper = crate::plan::Taper { head: 2, tail: 0 };
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    assert_eq!(b[1], vec![0..1, 1..4, 4..10, 10..16]);
    assert_eq!(b[2], vec![0..3, 3..9, 9..16], "conv0's first chunk would be empty");
    assert_eq!(b[3], vec![0..2, 2..8, 8..16]);
    // Under even bounds every op cuts its own rows: all taper alike.
    let e = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Even);
    assert!((1..4).all(|id| e[id] == vec![0..1, 1..4, 4..10, 10..16]), "{e:?}");
    // A whole producer does not constrain: its consumer tapers too.
    p.splits[1].server_chunks = 1;
    let b = chunk_bounds(&g, &p, Side::Server, ChunkBounds::Aligned);
    assert_eq!(b[2], vec![0..1, 1..4, 4..10, 10..16]);
}

#[test]
fn a_small_last_message_shortens_the_wait_on_a_slow_link() {
    // The frame's 64 rows cross in 8 messages on a slow link (each 8 rows takes 8 ms) and the
    // server needs 0.5 ms a row of each of ten convs: what waits for the last message is the
    // server's work on the rows that read it. Halving the last chunks three times leaves
    // one row's worth in the last message instead of eight. A mean over the frame follows,
    // so that little comes down.
    let g = conv_chain_then(64, 10, true);
    let r = crate::profile::from_fits(&g, Side::Robot, |_| Fit::new(0.0, 1e-3)).expect("robot");
    let s = crate::profile::from_fits(&g, Side::Server, |_| Fit::new(1e-5, 5e-5)).expect("server");
    let mut p = server_plan(&g, 8);
    p.splits[12].server_chunks = 1;
    let cfg = SimConfig { link: Link::mbytes(0.032, 1e-4), bounds: ChunkBounds::Aligned, ..SimConfig::default() };
    let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
    let even = sim.simulate(&p).expect("even");
    p.taper = crate::plan::Taper { head: 0, tail: 3 };
    let tapered = sim.simulate(&p).expect("tapered");
    let last_message = |r: &crate::sim::SimReport| {
        r.timeline.iter().filter(|e| e.resource == crate::sim::Resource::Uplink).map(|e| e.rows.len()).next_back()
    };
    assert_eq!(last_message(&even), Some(8));
    assert!(last_message(&tapered) < Some(3), "{:?}", last_message(&tapered));
    eprintln!("slow link: even {:.2} ms, tapered {:.2} ms", even.makespan_s * 1e3, tapered.makespan_s * 1e3);
    assert!(tapered.makespan_s < even.makespan_s - 1e-3, "tapered {} vs even {}", tapered.makespan_s, even.makespan_s);
}

#[test]
fn aligned_bounds_pipeline_a_deep_server_chain_faster_than_even() {
    // Ten convs on the server, upload of 64 rows dominating; all ops in 8 chunks, wavefront.
    let g = conv_chain(64, 10);
    let r = crate::profile::from_fits(&g, Side::Robot, |_| Fit::new(0.0, 1e-3)).expect("robot");
    let s = crate::profile::from_fits(&g, Side::Server, |_| Fit::new(2e-4, 2e-5)).expect("server");
    let p = server_plan(&g, 8);
    let mut t = Vec::new();
    for bounds in [ChunkBounds::Even, ChunkBounds::Aligned] {
        let cfg = SimConfig { link: Link::mbytes(0.2, 1e-4), bounds, ..SimConfig::default() };
        let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
        t.push(sim.cost(&p).expect("cost").makespan_s);
    }
    eprintln!("server chain: even {:.4} s, aligned {:.4} s", t[0], t[1]);
    assert!(t[1] < t[0], "aligned {} vs even {}", t[1], t[0]);
}
