//! The tests of `lop_core::planner::release`, on the engine's graphs.

use crate::graph::{DType, Graph, GraphBuilder};
use crate::ops::{BinaryOp, Conv, Op, Pool};
use crate::plan::{Plan, Side};
use crate::planner::release::*;
use crate::profile::Fit;
use crate::rng::Rng;
use crate::sim::Simulator;
use crate::sim::{ChunkBounds, Link, Objective, SimConfig};

/// norm -> conv -> pool (stride 2) -> conv -> add (a skip over the conv) -> conv -> mean:
/// halos, a stride and a join, over `rows` rows.
fn net(rows: usize) -> Graph {
    let mut b = GraphBuilder::new("release");
    let x = b.input("x", vec![1, 2, rows, 8], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.0; 2], std: vec![1.0; 2] }, &[x]).expect("norm");
    let conv = || Op::Conv(Conv::same2d(tch::Tensor::ones([2i64, 2, 3, 3], (tch::Kind::Float, tch::Device::Cpu)) * 0.1));
    let c0 = b.add("c0", conv(), &[n]).expect("c0");
    let p = b.add("pool", Op::MaxPool(Pool::square2d(2, 2, 0)), &[c0]).expect("pool");
    let c1 = b.add("c1", conv(), &[p]).expect("c1");
    let s = b.add("skip", Op::Binary(BinaryOp::Add), &[c1, p]).expect("add");
    let c2 = b.add("c2", conv(), &[s]).expect("c2");
    let m = b.add("mean", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[c2]).expect("mean");
    b.output(m);
    b.build().expect("graph")
}

fn sim_of(g: &Graph, mbytes: f64) -> Simulator<'_> {
    let r = crate::profile::from_fits(g, Side::Robot, |_| Fit::new(1e-3, 1e-3)).expect("robot");
    let s = crate::profile::from_fits(g, Side::Server, |id| Fit::new(2e-4 * (1 + id % 3) as f64, 4e-5)).expect("server");
    let cfg = SimConfig { link: Link::mbytes(mbytes, 1e-3), bounds: ChunkBounds::Aligned, ..SimConfig::default() };
    Simulator::new(g, &r, &s, cfg).expect("sim")
}

fn random_state(m: &Model<'_, '_>, rng: &mut Rng) -> State {
    let mut ends: Vec<usize> = (0..1 + rng.below(8)).map(|_| m.ends[rng.below(m.ends.len())]).collect();
    ends.push(m.rows);
    ends.sort_unstable();
    ends.dedup();
    let depth = ends.iter().map(|_| 1 + rng.below(m.ops.len())).collect();
    State { ends, depth }
}

#[test]
fn every_depth_at_once_matches_each_depth_alone() {
    let g = net(32);
    let sim = sim_of(&g, 0.05);
    let plan = Plan::server_only(&g, 8);
    let m = Model::new(&sim, &plan).expect("a server-only plan");
    assert_eq!(m.ops.len(), 6, "norm, c0, pool, c1, skip and c2 are cut; the mean waits for the frame");
    let mut rng = Rng::new(7);
    for _ in 0..50 {
        let s = random_state(&m, &mut rng);
        for i in 0..s.ends.len() - 1 {
            let mut all = Vec::new();
            m.visit_depth_terms(&s, i, |d, t| all.push((d, t.to_vec())));
            assert_eq!(all.len(), m.ops.len(), "every depth is visited once");
            for (k, (d, terms)) in all.into_iter().enumerate() {
                assert_eq!(d, k + 1, "depths in order");
                let mut one = s.clone();
                one.depth[i] = d;
                let direct = m.terms(&one);
                for (a, b) in terms.iter().zip(&direct) {
                    assert!((a - b).abs() < 1e-12, "{s:?} message {i} depth {d}: {a} vs {b}");
                }
            }
        }
    }
}

#[test]
fn the_best_depth_is_the_first_least_smooth_maximum_of_every_depth() {
    // `best_depth` skips depths without their exponentials; it must pick what a full scan
    // of every depth's smooth maximum picks.
    let g = net(32);
    let sim = sim_of(&g, 0.05);
    let m = Model::new(&sim, &Plan::server_only(&g, 8)).expect("a server-only plan");
    let mut rng = Rng::new(5);
    for _ in 0..50 {
        let s = random_state(&m, &mut rng);
        let tau = (hard_max(&m.terms(&s)) * 2e-3).max(1e-9);
        for i in 0..s.ends.len() - 1 {
            let mut all = Vec::new();
            m.visit_depth_terms(&s, i, |d, t| all.push((d, soft_max(t, tau), t.to_vec())));
            let want = all.iter().min_by(|a, b| a.1.total_cmp(&b.1)).expect("depths");
            let mut evals = 0;
            let (d, terms) = m.best_depth(&s, i, tau, &mut evals).expect("ops");
            assert_eq!((d, &terms), (want.0, &want.2), "{s:?} message {i}");
            assert_eq!(evals, all.len(), "every depth counted");
        }
    }
}

#[test]
fn the_largest_term_is_when_the_simulated_server_ends() {
    // The model's claim: with nested release cuts, the server's last kernel ends at the
    // largest term, under the simulator's own order. Its download follows.
    let g = net(32);
    let mut rng = Rng::new(11);
    for mbytes in [0.005, 0.05, 5.0] {
        let sim = sim_of(&g, mbytes);
        let base = Plan::server_only(&g, 8);
        let m = Model::new(&sim, &base).expect("model");
        for _ in 0..30 {
            let s = random_state(&m, &mut rng);
            let plan = m.plan(&base, &s);
            plan.validate(&g).expect("a valid plan");
            let report = sim.simulate(&plan).expect("simulates");
            let server_end =
                report.timeline.iter().filter(|e| e.resource == crate::sim::Resource::ServerCompute).map(|e| e.end).fold(0.0, f64::max);
            let largest = hard_max(&m.terms(&s));
            assert!((server_end - largest).abs() < 1e-9, "{mbytes} MB/s {s:?}: simulated {server_end} vs {largest}");
        }
    }
}

#[test]
fn release_cuts_beat_the_searched_plan_or_leave_it() {
    let g = net(64);
    let mut faster = 0;
    for mbytes in [0.01, 0.1, 1.0] {
        let sim = sim_of(&g, mbytes);
        let mut p = Plan::server_only(&g, 8);
        for s in &mut p.splits {
            s.server_chunks = 4;
        }
        let c = sim.cost(&p).expect("cost");
        let (cut, evals) = release_cuts(&sim, Objective::Latency, &(p.clone(), c)).expect("search");
        assert!(evals > 0);
        if let Some((q, qc)) = cut {
            assert!(qc.makespan_s < c.makespan_s, "{mbytes} MB/s: kept only when strictly better");
            assert_eq!(sim.cost(&q).expect("cost"), qc, "the reported cost is the plan's");
            assert!(!q.server_cuts.is_empty());
            faster += 1;
        }
    }
    assert!(faster > 0, "four even chunks everywhere are not the best cut on any link");
}
