//! The simulator's and the baselines' tests (`lop_core::sim`, `lop_core::baseline`), on the
//! engine's graphs: they build models with real operators (convolutions, pools, post-processing)
//! and many compare a simulation with the executor's run.

mod baseline;
mod bounds;
mod fluid_bound;
mod model_cost;
mod pipeline_bound;

use crate::graph::NodeId;
use crate::graph::{DType, Graph, GraphBuilder};
use crate::ops::Op;
use crate::plan::NodeSplit;
use crate::plan::{Plan, Side};
use crate::profile::{Fit, Profile};
use crate::rows::Rows;
use crate::sim::*;
use lop_core::Error;
use lop_core::structure::NodeKind;
use lop_core::structure::Structure;

const EPS: f64 = 1e-12;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs()))
}

/// input u8 [1,1,rows,w] -> NormalizeU8 -> `second`, output the second op.
fn chain(rows: usize, w: usize, second: Op) -> Graph {
    let mut b = GraphBuilder::new("chain");
    let x = b.input("x", vec![1, 1, rows, w], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
    let y = b.add("second", second, &[n]).expect("second");
    b.output(y);
    b.build().expect("graph")
}

fn profiles(g: &Graph, robot: &[(f64, f64)], server: &[(f64, f64)]) -> (Profile, Profile) {
    let r = crate::profile::from_fits(g, Side::Robot, |id| Fit::new(robot[id].0, robot[id].1)).expect("robot");
    let s = crate::profile::from_fits(g, Side::Server, |id| Fit::new(server[id].0, server[id].1)).expect("server");
    (r, s)
}

fn split(m: usize, r: usize, k: usize) -> NodeSplit {
    NodeSplit { robot_end: m, server_start: r, robot_chunks: k, server_chunks: k }
}

/// A link without band headers, so that the timelines below can be computed by hand
/// (`band_headers_are_priced_per_message` covers them).
fn config(bandwidth: f64, latency_s: f64, overhead_s: f64) -> SimConfig {
    SimConfig { link: Link { bandwidth, latency_s, overhead_s }, band_headers: false, ..SimConfig::default() }
}

#[test]
fn two_op_chain_matches_a_hand_computed_timeline() {
    // norm (8 rows of 8 f32 = 256 bytes) on the robot in 10 ms, relu on the server in 2 ms,
    // link 1 MB/s, latency 1 ms, no overhead:
    //   robot norm      [0, 10]
    //   uplink 256 B    [10, 10.256], arrives 11.256
    //   server relu     [11.256, 13.256]
    //   downlink 256 B  [13.256, 13.512], arrives 14.512  => makespan 14.512 ms
    // energy: 10 ms computing, 0.512 ms transmitting, 4.0 ms idle
    //   = 13.35 * 0.010 + 4.25 * 0.000512 + 4.04 * 0.004 = 0.151836 J
    let g = chain(8, 8, Op::Unary(crate::ops::UnaryOp::Relu));
    let (rp, sp) = profiles(&g, &[(0.0, 0.0), (0.010, 0.0), (0.050, 0.0)], &[(0.0, 0.0), (0.001, 0.0), (0.002, 0.0)]);
    let sim = Simulator::new(&g, &rp, &sp, config(1e6, 0.001, 0.0)).expect("sim");
    let mut plan = Plan::robot_only(&g, 8);
    plan.splits[2] = split(0, 0, 1);
    let rep = sim.simulate(&plan).expect("simulate");
    assert!(close(rep.makespan_s, 0.014512), "makespan {}", rep.makespan_s);
    assert_eq!((rep.bytes_up, rep.bytes_down), (256, 256));
    assert_eq!((rep.messages_up, rep.messages_down), (1, 1));
    let up = rep.timeline.iter().find(|s| s.resource == Resource::Uplink).expect("uplink span");
    assert!(close(up.start, 0.010) && close(up.end, 0.010256) && close(up.arrive, 0.011256));
    let srv = rep.timeline.iter().find(|s| s.resource == Resource::ServerCompute).expect("server span");
    assert!(close(srv.start, 0.011256) && close(srv.end, 0.013256), "{srv:?}");
    assert!(close(rep.energy.joules, 0.151836), "energy {}", rep.energy.joules);
    assert!(close(rep.energy.idle_s, 0.004) && close(rep.energy.transmitting_s, 0.000512));
    assert_eq!(rep.energy.label, "modelled");
    assert!(close(rep.robot_compute.busy_s, 0.010) && close(rep.robot_compute.idle_s, 0.004512));
    assert!(rep.overlap_ratio.abs() < EPS);
    let c = sim.cost(&plan).expect("cost");
    assert!(close(c.makespan_s, rep.makespan_s) && close(c.energy_j, rep.energy.joules));

    // With 0.5 ms per-message overhead each transfer holds the link 0.756 ms:
    // up [10, 10.756] arrives 11.756, relu [11.756, 13.756], down [13.756, 14.512] arrives 15.512.
    let sim = Simulator::new(&g, &rp, &sp, config(1e6, 0.001, 0.0005)).expect("sim");
    assert!(close(sim.cost(&plan).expect("cost").makespan_s, 0.015512));
}

#[test]
fn rows_leave_as_soon_as_their_chunk_is_done_and_sending_while_computing_counts_as_computing() {
    // As above, but the robot computes norm in two chunks of 5 ms: rows 0..4 (128 B) leave at
    // 5 ms while chunk 2 runs ([5, 5.128]); rows 4..8 leave at 10 ([10, 10.128], arrive
    // 11.128); relu [11.128, 13.128]; down [13.128, 13.384], arrives 14.384.
    // Energy: 10 ms computing (the first upload is hidden under it), 0.384 ms transmitting,
    // 4.0 ms idle.
    let g = chain(8, 8, Op::Unary(crate::ops::UnaryOp::Relu));
    let (rp, sp) = profiles(&g, &[(0.0, 0.0), (0.0, 0.00125), (0.0, 0.0)], &[(0.0, 0.0), (0.0, 0.0), (0.002, 0.0)]);
    let sim = Simulator::new(&g, &rp, &sp, config(1e6, 0.001, 0.0)).expect("sim");
    let mut plan = Plan::robot_only(&g, 8);
    plan.splits[1].robot_chunks = 2;
    plan.splits[2] = split(0, 0, 1);
    let rep = sim.simulate(&plan).expect("simulate");
    assert!(close(rep.makespan_s, 0.014384), "makespan {}", rep.makespan_s);
    assert_eq!((rep.messages_up, rep.bytes_up), (2, 256));
    let ups: Vec<&Span> = rep.timeline.iter().filter(|s| s.resource == Resource::Uplink).collect();
    assert_eq!(ups[0].rows, 0..4);
    assert!(close(ups[0].start, 0.005) && close(ups[1].start, 0.010));
    assert!(close(rep.energy.computing_s, 0.010) && close(rep.energy.transmitting_s, 0.000384));
    assert!(close(rep.energy.joules, 13.35 * 0.010 + 4.25 * 0.000384 + 4.04 * 0.004));
}

#[test]
fn server_pipelining_with_two_chunks_beats_one_when_upload_dominates() {
    // Op-major order (each side strictly op by op). Server only: upload 8000 input bytes (8 rows of 1000 u8) at 1 MB/s, latency 1 ms;
    // norm 0.5 ms/row, row-wise mean over W 0.25 ms/row; 32 output bytes come back.
    // k = 1: up [0, 8] arr 9; norm [9, 13]; mean [13, 15]; down 32 B [15, 15.032] arr 16.032.
    // k = 2: up rows 0..4 [0, 4] arr 5, rows 4..8 [4, 8] arr 9; norm [5, 7], [9, 11];
    //        mean [11, 12], [12, 13]; down 16 B [12, 12.016] arr 13.016, [13, 13.016] arr 14.016.
    let g = chain(8, 1000, Op::ReduceMean { axes: vec![3], keepdims: true });
    let (rp, sp) = profiles(&g, &[(0.0, 0.0); 3], &[(0.0, 0.0), (0.0, 0.0005), (0.0, 0.00025)]);
    let cfg = SimConfig { order: ChunkOrder::OpMajor, ..config(1e6, 0.001, 0.0) };
    let sim = Simulator::new(&g, &rp, &sp, cfg).expect("sim");
    let mut plan = Plan::server_only(&g, 8);
    let one = sim.simulate(&plan).expect("k=1");
    assert!(close(one.makespan_s, 0.016032), "k=1 makespan {}", one.makespan_s);
    for s in &mut plan.splits {
        s.server_chunks = 2;
    }
    let two = sim.simulate(&plan).expect("k=2");
    assert!(close(two.makespan_s, 0.014016), "k=2 makespan {}", two.makespan_s);
    assert_eq!((two.bytes_up, two.bytes_down), (one.bytes_up, one.bytes_down));
    assert_eq!((two.messages_up, two.messages_down), (2, 2));
    assert!(one.overlap_ratio.abs() < EPS);
    // k = 2: the links are busy 8.032 ms ([0, 8], [12, 12.016], [13, 13.016]) while the server
    // computes [5, 7] and [9, 13]: 2.016 ms overlapped. The robot never computes: 8.032 ms
    // transmitting and 14.016 - 8.032 = 5.984 ms idle.
    assert!(close(two.overlap_ratio, 2.016 / 8.032), "overlap {}", two.overlap_ratio);
    assert!(close(two.energy.transmitting_s, 0.008032) && close(two.energy.idle_s, 0.005984));
    assert!(close(two.energy.joules, 4.25 * 0.008032 + 4.04 * 0.005984));
    assert!(close(two.server_compute.busy_s, 0.006) && close(two.uplink.busy_s, 0.008) && close(two.downlink.busy_s, 0.000032));

    // Wavefront order: mean's first chunk runs as soon as norm's first chunk is done, before
    // norm's second chunk (whose input is still in flight):
    //   up rows 0..4 [0, 4] arr 5, rows 4..8 [4, 8] arr 9; norm [5, 7]; mean [7, 8];
    //   down 16 B [8, 8.016] arr 9.016; norm [9, 11]; mean [11, 12]; down [12, 12.016]
    //   arr 13.016 => 13.016 ms (k = 1 is the same in both orders).
    let sim = Simulator::new(&g, &rp, &sp, config(1e6, 0.001, 0.0)).expect("sim");
    assert!(close(sim.cost(&plan).expect("wavefront").makespan_s, 0.013016));
    plan.splits.iter_mut().for_each(|s| s.server_chunks = 1);
    assert!(close(sim.cost(&plan).expect("wavefront k=1").makespan_s, 0.016032));
}

#[test]
fn wavefront_pipelines_a_three_op_chain_during_the_upload() {
    // Server only: input u8 [1,1,8,1000] -> norm (0.5 ms/row) -> relu (0.25 ms/row) -> mean
    // over W (0.25 ms/row, 4 output bytes per row); 1 MB/s, latency 1 ms; 2 chunks per op, so
    // the input crosses as rows 0..4 [0, 4] arriving at 5 and rows 4..8 [4, 8] arriving at 9.
    // Op-major: norm [5, 7], [9, 11]; relu [11, 12], [12, 13]; mean [13, 14], [14, 15];
    //   down 16 B [14, 14.016] arr 15.016, [15, 15.016] arr 16.016 => 16.016 ms.
    // Wavefront: norm [5, 7]; relu [7, 8]; mean [8, 9]; down [9, 9.016] arr 10.016;
    //   norm [9, 11]; relu [11, 12]; mean [12, 13]; down [13, 13.016] arr 14.016 => 14.016 ms.
    let mut b = GraphBuilder::new("chain3");
    let x = b.input("x", vec![1, 1, 8, 1000], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0], std: vec![1.0] }, &[x]).expect("norm");
    let r = b.add("relu", Op::Unary(crate::ops::UnaryOp::Relu), &[n]).expect("relu");
    let y = b.add("mean", Op::ReduceMean { axes: vec![3], keepdims: true }, &[r]).expect("mean");
    b.output(y);
    let g = b.build().expect("graph");
    let (rp, sp) = profiles(&g, &[(0.0, 0.0); 4], &[(0.0, 0.0), (0.0, 0.0005), (0.0, 0.00025), (0.0, 0.00025)]);
    let mut plan = Plan::server_only(&g, 8);
    plan.splits.iter_mut().for_each(|s| s.server_chunks = 2);
    let op_major = SimConfig { order: ChunkOrder::OpMajor, ..config(1e6, 0.001, 0.0) };
    let om = Simulator::new(&g, &rp, &sp, op_major).expect("sim").simulate(&plan).expect("op-major");
    assert!(close(om.makespan_s, 0.016016), "op-major makespan {}", om.makespan_s);
    let wf = Simulator::new(&g, &rp, &sp, config(1e6, 0.001, 0.0)).expect("sim").simulate(&plan).expect("wavefront");
    assert!(close(wf.makespan_s, 0.014016), "wavefront makespan {}", wf.makespan_s);
    let srv: Vec<(NodeId, f64)> = wf.timeline.iter().filter(|s| s.resource == Resource::ServerCompute).map(|s| (s.node, s.start)).collect();
    let want = [(1, 0.005), (2, 0.007), (3, 0.008), (1, 0.009), (2, 0.011), (3, 0.012)];
    assert_eq!(srv.len(), want.len());
    for ((node, start), (wn, ws)) in srv.iter().zip(want) {
        assert!(*node == wn && close(*start, ws), "server span {node} at {start}, want {wn} at {ws}");
    }
    assert_eq!((wf.bytes_up, wf.bytes_down), (om.bytes_up, om.bytes_down));
}

#[test]
fn wavefront_waits_for_halo_rows_from_the_next_chunk() {
    // Server only: input u8 [1,1,8,8] -> norm (1 ms/row) -> 1-row max pool over H with a
    // 3-row window (pad 1, stride 1) -> output; 2 chunks; infinite-ish link (1e12 B/s, no
    // latency). The pool's first chunk (rows 0..4) reads norm rows 0..5, so it must wait for
    // norm's second chunk: norm [0, 4], [4, 8]; pool [8, 12], [12, 16] in both orders.
    let g = chain(
        8,
        8,
        Op::MaxPool(crate::ops::Pool {
            kernel: vec![3, 1],
            strides: vec![1, 1],
            pads_begin: vec![1, 0],
            pads_end: vec![1, 0],
            dilations: vec![1, 1],
            ceil_mode: false,
            count_include_pad: false,
        }),
    );
    let (rp, sp) = profiles(&g, &[(0.0, 0.0); 3], &[(0.0, 0.0), (0.0, 0.001), (0.0, 0.001)]);
    let mut plan = Plan::server_only(&g, 8);
    plan.splits.iter_mut().for_each(|s| s.server_chunks = 2);
    let sim = Simulator::new(&g, &rp, &sp, config(1e12, 0.0, 0.0)).expect("sim");
    let rep = sim.simulate(&plan).expect("wavefront");
    let srv: Vec<NodeId> = rep.timeline.iter().filter(|s| s.resource == Resource::ServerCompute).map(|s| s.node).collect();
    assert_eq!(srv, vec![1, 1, 2, 2]);
    assert!(close(rep.makespan_s, 0.016), "makespan {}", rep.makespan_s);
}

#[test]
fn no_link_makes_transfers_infeasible_but_robot_only_runs() {
    let g = chain(8, 8, Op::Unary(crate::ops::UnaryOp::Relu));
    let (rp, sp) = profiles(&g, &[(0.0, 0.001); 3], &[(0.0, 0.0001); 3]);
    let sim = Simulator::new(&g, &rp, &sp, config(0.0, 0.001, 0.0)).expect("sim");
    let robot = sim.simulate(&Plan::robot_only(&g, 8)).expect("robot-only needs no link");
    assert!(close(robot.makespan_s, 0.016));
    assert!(close(robot.energy.joules, 13.35 * 0.016));
    assert!(matches!(sim.cost(&Plan::server_only(&g, 8)), Err(Error::Infeasible(_))));
}

#[test]
fn input_bytes_override_prices_the_frame_as_f32() {
    let g = chain(8, 8, Op::Unary(crate::ops::UnaryOp::Relu));
    let (rp, sp) = profiles(&g, &[(0.0, 0.0); 3], &[(0.0, 0.0); 3]);
    let mut cfg = config(1e6, 0.0, 0.0);
    let plan = Plan::server_only(&g, 8);
    let raw = Simulator::new(&g, &rp, &sp, cfg).expect("sim").cost(&plan).expect("cost");
    cfg.input_bytes_per_element = Some(4);
    let f32 = Simulator::new(&g, &rp, &sp, cfg).expect("sim").cost(&plan).expect("cost");
    assert_eq!((raw.bytes_up, f32.bytes_up), (64, 256));
    assert!(close(f32.makespan_s - raw.makespan_s, 192.0 / 1e6));
}

#[test]
fn profiles_are_checked_when_building_a_simulator() {
    let g = chain(8, 8, Op::Unary(crate::ops::UnaryOp::Relu));
    let (rp, mut sp) = profiles(&g, &[(0.0, 0.0); 3], &[(0.0, 0.0); 3]);
    assert!(matches!(Simulator::new(&g, &sp, &rp, SimConfig::default()), Err(Error::ProfileInvalid { .. })));
    sp.ops.pop();
    assert!(matches!(Simulator::new(&g, &rp, &sp, SimConfig::default()), Err(Error::ProfileMissingOp { .. })));
}

fn resnet18_sim(g: &Graph) -> (Profile, Profile) {
    // Costs roughly proportional to output size, robot 10x slower than the server.
    let r = crate::profile::from_fits(g, Side::Robot, |id| Fit::new(1e-4, g.node_info(id).bytes_of_rows(1) as f64 * 1e-8)).expect("robot");
    let s =
        crate::profile::from_fits(g, Side::Server, |id| Fit::new(2e-5, g.node_info(id).bytes_of_rows(1) as f64 * 1e-9)).expect("server");
    (r, s)
}

/// Every row a compute span reads (its footprint) was computed on its side or had arrived
/// there by the time it started.
fn assert_inputs_exist_before_each_chunk(sim: &Simulator<'_>, rep: &SimReport, what: &str) {
    let g = sim.graph();
    for c in rep.timeline.iter().filter(|s| s.kind == SpanKind::Compute) {
        let (side, link) = match c.resource {
            Resource::RobotCompute => (Side::Robot, Resource::Downlink),
            _ => (Side::Server, Resource::Uplink),
        };
        for (k, &inp) in g.node_inputs(c.node).iter().enumerate() {
            if g.node_kind(inp) == NodeKind::Constant || (g.node_is_input(inp) && side == Side::Robot) {
                continue;
            }
            let need = sim.need(c.node, k, &c.rows);
            let own = if side == Side::Robot { Resource::RobotCompute } else { Resource::ServerCompute };
            let mut have: Vec<Rows> = rep
                .timeline
                .iter()
                .filter(|s| s.node == inp && (s.resource == own || s.resource == link) && s.arrive <= c.start + EPS)
                .map(|s| s.rows.clone())
                .collect();
            have.sort_by_key(|r| r.start);
            let mut reach = need.start;
            for r in have {
                if r.start <= reach {
                    reach = reach.max(r.end);
                }
            }
            assert!(
                reach >= need.end,
                "{what}: '{}' rows {:?} started before rows {need:?} of '{}' existed",
                c.name,
                c.rows,
                g.node_name(inp)
            );
        }
    }
}

#[test]
fn bytes_each_way_equal_the_split_executor() {
    let g = crate::zoo::build("resnet18").expect("resnet18");
    let (rp, sp) = resnet18_sim(&g);
    let sim = Simulator::new(&g, &rp, &sp, config(5e6, 0.002, 1e-4)).expect("sim");
    let inputs = crate::exec::synthetic_inputs(&g, 1).expect("inputs");
    for seed in 0..3 {
        let plan = Plan::random(&g, 8, seed);
        let run = crate::exec::run_split(&g, &plan, &inputs).expect("split run");
        let rep = sim.simulate(&plan).expect("simulate");
        assert_eq!((rep.bytes_up, rep.bytes_down), (run.bytes_up, run.bytes_down), "seed {seed}");
        assert!(rep.messages_up >= run.messages.0 && rep.messages_down >= run.messages.1);
        assert!(rep.makespan_s.is_finite() && rep.makespan_s > 0.0);
        assert_inputs_exist_before_each_chunk(&sim, &rep, &format!("seed {seed}"));
        // No resource runs two things at once, and nothing starts before its inputs exist.
        for res in [Resource::RobotCompute, Resource::ServerCompute, Resource::Uplink, Resource::Downlink] {
            let spans: Vec<&Span> = rep.timeline.iter().filter(|s| s.resource == res).collect();
            for w in spans.windows(2) {
                assert!(w[1].start >= w[0].end - EPS, "{res:?} overlaps itself");
            }
        }
    }
    let om = Simulator::new(&g, &rp, &sp, SimConfig { order: ChunkOrder::OpMajor, ..config(5e6, 0.002, 1e-4) }).expect("sim");
    for seed in 0..3 {
        let rep = om.simulate(&Plan::random(&g, 8, seed)).expect("op-major");
        assert_inputs_exist_before_each_chunk(&om, &rep, &format!("op-major seed {seed}"));
    }
    for plan in [Plan::robot_only(&g, 8), Plan::server_only(&g, 8), Plan::even(&g, 8)] {
        let run = crate::exec::run_split(&g, &plan, &inputs).expect("split run");
        let c = sim.cost(&plan).expect("cost");
        assert_eq!((c.bytes_up, c.bytes_down), (run.bytes_up, run.bytes_down));
    }
}

#[test]
fn simulator_is_fast_on_a_zoo_model() {
    let g = crate::zoo::build("resnet18").expect("resnet18");
    let (rp, sp) = resnet18_sim(&g);
    let sim = Simulator::new(&g, &rp, &sp, SimConfig::default()).expect("sim");
    let plan = Plan::even(&g, 8);
    let n = 50;
    let t = std::time::Instant::now();
    for _ in 0..n {
        sim.cost(&plan).expect("cost");
    }
    let per = t.elapsed().as_secs_f64() / n as f64;
    eprintln!("resnet18 even plan: {:.1} us per simulation (this build)", per * 1e6);
    // Generous bound: unoptimised test builds are ~10x slower than release.
    assert!(per < 0.05, "{per} s per simulation");
}

/// Every band message carries its header, as the runtime's frames do: bytes each way are the
/// rows plus one header per message, and they take link time.
#[test]
fn band_headers_are_priced_per_message() {
    let g = chain(8, 8, Op::Unary(crate::ops::UnaryOp::Relu));
    let (rp, sp) = profiles(&g, &[(0.0, 0.0), (0.010, 0.0), (0.050, 0.0)], &[(0.0, 0.0), (0.001, 0.0), (0.002, 0.0)]);
    let mut plan = Plan::robot_only(&g, 8);
    plan.splits[1].robot_chunks = 4;
    plan.splits[2] = split(0, 0, 4);
    let bare = Simulator::new(&g, &rp, &sp, config(1e6, 0.001, 0.0)).expect("sim").simulate(&plan).expect("simulate");
    let with = Simulator::new(&g, &rp, &sp, SimConfig { band_headers: true, ..config(1e6, 0.001, 0.0) })
        .expect("sim")
        .simulate(&plan)
        .expect("simulate");
    let h = crate::sim::band_header_bytes(4);
    assert_eq!(h, 52);
    assert_eq!((bare.bytes_up, bare.bytes_down), (256, 256));
    assert_eq!((with.messages_up, with.messages_down), (bare.messages_up, bare.messages_down));
    assert_eq!(with.bytes_up, 256 + with.messages_up * h);
    assert_eq!(with.bytes_down, 256 + with.messages_down * h);
    assert!(with.messages_up > 1, "chunked: {} messages", with.messages_up);
    assert!(with.makespan_s > bare.makespan_s, "{} vs {}", with.makespan_s, bare.makespan_s);
}

/// A 1-channel u8 image of 20 rows x 8 through norm and a 3x3 conv-like op (relu here: local),
/// with a server-only plan cut in `k` chunks.
fn coded(codec: crate::codec::FrameCodec, ratio: f64, enc: f64, dec: f64, srv_dec: f64) -> SimConfig {
    SimConfig {
        frame: FrameWire { codec, ratio, robot_encode_s_per_row: enc, robot_decode_s_per_row: dec, server_decode_s_per_row: srv_dec },
        ..config(1e6, 0.0, 0.0)
    }
}

#[test]
fn a_coded_frame_travels_in_fewer_bytes_on_the_codecs_row_grid() {
    use crate::codec::FrameCodec;
    let g = chain(20, 8, Op::Unary(crate::ops::UnaryOp::Relu));
    let (rp, sp) = profiles(&g, &[(0.0, 0.0), (0.001, 0.0), (0.001, 0.0)], &[(0.0, 0.0), (1e-4, 0.0), (1e-4, 0.0)]);
    let mut plan = Plan::server_only(&g, 20);
    for id in 1..3 {
        plan.splits[id].server_chunks = 3;
    }
    let raw = Simulator::new(&g, &rp, &sp, config(1e6, 0.0, 0.0)).expect("raw").simulate(&plan).expect("raw run");
    let input_transfers = |sim: &Simulator<'_>| -> Vec<Rows> {
        let s = sim.schedule(&plan).expect("schedule");
        s.transfers.iter().filter(|t| t.node == 0).map(|t| t.rows.clone()).collect()
    };
    // Raw: cut where the first op's chunks end (6, 13, 20).
    let raw_sim = Simulator::new(&g, &rp, &sp, config(1e6, 0.0, 0.0)).expect("raw");
    assert_eq!(input_transfers(&raw_sim), vec![0..6, 6..13, 13..20]);
    // JPEG: on 8-row blocks, the last ending at the frame's bottom.
    let jpeg = Simulator::new(&g, &rp, &sp, coded(FrameCodec::Jpeg { quality: 90 }, 0.25, 0.0, 0.0, 0.0)).expect("jpeg");
    assert_eq!(input_transfers(&jpeg), vec![0..8, 8..16, 16..20]);
    // Passthrough: the camera's JPEG cut on its 16-row grid.
    let pass = Simulator::new(&g, &rp, &sp, coded(FrameCodec::Passthrough, 0.25, 0.0, 0.0, 0.0)).expect("pass");
    assert_eq!(input_transfers(&pass), vec![0..16, 16..20]);
    // Lossless keeps the raw cuts; a quarter of the bytes plus each band's digest.
    let lossless = Simulator::new(&g, &rp, &sp, coded(FrameCodec::Lossless, 0.25, 0.0, 0.0, 0.0)).expect("lossless");
    assert_eq!(input_transfers(&lossless), vec![0..6, 6..13, 13..20]);
    let rep = lossless.simulate(&plan).expect("lossless run");
    assert_eq!(raw.bytes_up, 160);
    assert_eq!(rep.bytes_up, 2 * 20 + 3 * CODED_BAND_EXTRA_BYTES, "ceil(8 x 0.25) bytes a row, 20 rows, 3 digests");
    assert!(rep.makespan_s < raw.makespan_s);
    // The schedule both sides derive from the table's codec cuts the frame the same way.
    let derived = Schedule::derive(&g, &plan, ChunkBounds::Even, FrameCodec::Jpeg { quality: 90 }).expect("derive");
    assert_eq!(derived.transfers.iter().filter(|t| t.node == 0).map(|t| t.rows.clone()).collect::<Vec<_>>(), input_transfers(&jpeg));
}

#[test]
fn coding_time_is_paid_where_the_runtime_pays_it() {
    use crate::codec::FrameCodec;
    let g = chain(16, 8, Op::Unary(crate::ops::UnaryOp::Relu));
    let (rp, sp) = profiles(&g, &[(0.0, 0.0), (0.001, 0.0), (0.001, 0.0)], &[(0.0, 0.0), (1e-4, 0.0), (1e-4, 0.0)]);
    let cost = |cfg: SimConfig, plan: &Plan| Simulator::new(&g, &rp, &sp, cfg).expect("sim").simulate(plan).expect("run").makespan_s;
    let free = |codec| coded(codec, 0.5, 0.0, 0.0, 0.0);
    let priced = |codec| coded(codec, 0.5, 1e-3, 2e-3, 4e-3);
    let robot_only = Plan::robot_only(&g, 16);
    let server_only = Plan::server_only(&g, 16);
    // Robot-only sends no rows: JPEG and lossless code nothing; the camera's JPEG must still
    // be decoded (16 rows x 2 ms) before the robot computes.
    for codec in [FrameCodec::Lossless, FrameCodec::Jpeg { quality: 80 }] {
        assert!(close(cost(priced(codec), &robot_only), cost(free(codec), &robot_only)), "{codec}");
    }
    let pass = FrameCodec::Passthrough;
    assert!(close(cost(priced(pass), &robot_only) - cost(free(pass), &robot_only), 16.0 * 2e-3));
    // Server-only, one message: lossless adds the robot's encode (16 x 1 ms) and the server's
    // decode (16 x 4 ms); JPEG adds the robot's decode too; the passthrough only the server's.
    for (codec, extra) in [(FrameCodec::Lossless, 16.0 * 5e-3), (FrameCodec::Jpeg { quality: 80 }, 16.0 * 7e-3), (pass, 16.0 * 4e-3)] {
        let d = cost(priced(codec), &server_only) - cost(free(codec), &server_only);
        assert!(close(d, extra), "{codec}: {d} != {extra}");
    }
    // Split, a camera's JPEG of 32 rows is rewritten once (32 x 1 ms) before its first band
    // leaves, and the server decodes each band's rows (16 x 4 ms), overlapping the second with
    // the link and its compute: more than the rewrite, less than rewrite and whole decode.
    let g32 = chain(32, 8, Op::Unary(crate::ops::UnaryOp::Relu));
    let (rp32, sp32) = profiles(&g32, &[(0.0, 0.0), (0.001, 0.0), (0.001, 0.0)], &[(0.0, 0.0), (1e-4, 0.0), (1e-4, 0.0)]);
    let cost32 =
        |cfg: SimConfig, plan: &Plan| Simulator::new(&g32, &rp32, &sp32, cfg).expect("sim").simulate(plan).expect("run").makespan_s;
    let mut split = Plan::server_only(&g32, 32);
    split.splits[1].server_chunks = 2;
    split.splits[2].server_chunks = 2;
    let s = Simulator::new(&g32, &rp32, &sp32, priced(pass)).expect("sim").schedule(&split).expect("schedule");
    let bands: Vec<Rows> = s.transfers.iter().filter(|t| t.node == 0).map(|t| t.rows.clone()).collect();
    assert_eq!(bands, vec![0..16, 16..32], "the frame crosses in two bands");
    let d = cost32(priced(pass), &split) - cost32(free(pass), &split);
    assert!(d > 32.0 * 1e-3 && d < 32.0 * 5e-3, "{d}");
    // A bad price is refused.
    let bad = SimConfig { frame: FrameWire { ratio: 0.0, ..free(FrameCodec::Lossless).frame }, ..config(1e6, 0.0, 0.0) };
    assert!(Simulator::new(&g, &rp, &sp, bad).is_err());
    // A model whose input is not an image cannot take an image codec.
    let mut b = GraphBuilder::new("float");
    let x = b.input("x", vec![1, 1, 4, 4], DType::F32);
    let y = b.add("relu", Op::Unary(crate::ops::UnaryOp::Relu), &[x]).expect("relu");
    b.output(y);
    let fg = b.build().expect("graph");
    let (fr, fs) = profiles(&fg, &[(0.0, 0.0), (0.001, 0.0)], &[(0.0, 0.0), (0.001, 0.0)]);
    assert!(matches!(Simulator::new(&fg, &fr, &fs, free(FrameCodec::Lossless)), Err(Error::Frame(_))));
}
