use crate::baseline::min_cut;
use crate::baseline::*;
use crate::graph::{DType, Graph, GraphBuilder};
use crate::ops::{BinaryOp, Op, Pool, UnaryOp};
use crate::plan::Side;
use crate::profile::{Fit, Profile};
use crate::rng::Rng;
use crate::sim::{Cost, Objective, Simulator};
use crate::sim::{Link, SimConfig};
use lop_core::structure::Structure;

/// A random DAG over one `[1, 2, 8, 8]` tensor shape: relus, 3x3 max pools (halos) and adds of
/// two earlier values (skip connections); every sink is an output.
fn random_dag(seed: u64, ops: usize) -> Graph {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new(format!("dag{seed}"));
    let x = b.input("x", vec![1, 2, 8, 8], DType::U8);
    let first = b.add("norm", Op::NormalizeU8 { mean: vec![0.5, 0.5], std: vec![0.25, 0.25] }, &[x]).expect("norm");
    let mut vals = vec![first];
    for i in 1..ops {
        let a = vals[rng.below(vals.len())];
        let (op, ins) = match rng.below(3) {
            0 => (Op::Unary(UnaryOp::Relu), vec![a]),
            1 => {
                let pool = Pool::square2d(3, 1, 1);
                (Op::MaxPool(pool), vec![a])
            }
            _ => (Op::Binary(BinaryOp::Add), vec![a, vals[rng.below(vals.len())]]),
        };
        vals.push(b.add(format!("op{i}"), op, &ins).expect("op"));
    }
    let consumed: std::collections::HashSet<usize> = b.nodes().iter().flat_map(|n| n.inputs.clone()).collect();
    for &v in &vals {
        if !consumed.contains(&v) {
            b.output(v);
        }
    }
    b.build().expect("graph")
}

fn random_sim_parts(g: &Graph, seed: u64) -> (Profile, Profile, SimConfig) {
    let mut rng = Rng::new(seed ^ 0x5eed);
    let robot_times: Vec<(f64, f64)> = (0..g.node_count()).map(|_| (rng.unit() * 2e-3, rng.unit() * 1e-3)).collect();
    let speedup = 2.0 + rng.unit() * 10.0;
    let r = crate::profile::from_fits(g, Side::Robot, |id| Fit::new(robot_times[id].0, robot_times[id].1)).expect("robot");
    let s = crate::profile::from_fits(g, Side::Server, |id| Fit::new(robot_times[id].0 / speedup, robot_times[id].1 / speedup))
        .expect("server");
    // One f32 value is 512 bytes: 0.5 to 10 ms on these links.
    let bandwidth = [5e4, 2e5, 1e6][rng.below(3)];
    let link = Link { bandwidth, latency_s: rng.unit() * 2e-3, overhead_s: rng.unit() * 2e-4 };
    (r, s, SimConfig { link, ..SimConfig::default() })
}

/// Every down-closed set of ops, by enumerating all subsets.
fn brute_force(sim: &Simulator<'_>, objective: Objective) -> (Option<Cost>, usize) {
    let g = sim.graph();
    let ops: Vec<usize> = (0..g.node_count()).filter(|&id| g.node_is_op(id)).collect();
    assert!(ops.len() <= 14, "brute force over {} ops", ops.len());
    let mut best: Option<Cost> = None;
    let mut ideals = 0;
    for mask in 0u32..(1 << ops.len()) {
        let mut in_d = vec![false; g.node_count()];
        for (bit, &id) in ops.iter().enumerate() {
            in_d[id] = mask >> bit & 1 == 1;
        }
        let closed = ops.iter().all(|&id| !in_d[id] || g.node_inputs(id).iter().all(|&p| !g.node_is_op(p) || in_d[p]));
        if !closed {
            continue;
        }
        ideals += 1;
        let plan = layer_plan(sim, 8, &in_d);
        let Some(c) = evaluate(sim, &plan).expect("simulate") else { continue };
        if !objective.score(&c).is_finite() {
            continue;
        }
        if best.as_ref().is_none_or(|b| objective.score(&c) < objective.score(b)) {
            best = Some(c);
        }
    }
    (best, ideals)
}

#[test]
fn layer_partition_search_equals_brute_force_on_random_dags() {
    let mut pruned_somewhere = false;
    let mut not_a_prefix = false;
    for seed in 0..40 {
        let g = random_dag(seed, 3 + (seed as usize % 9));
        let (r, s, cfg) = random_sim_parts(&g, seed);
        let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
        let (want, ideals) = brute_force(&sim, Objective::Latency);
        let got = best_layer_partition(&sim, Objective::Latency, &SearchOptions::default()).expect("search");
        let (want, cost) = (want.expect("some partition is feasible"), got.cost.expect("found one"));
        assert_eq!(cost.makespan_s, want.makespan_s, "seed {seed}");
        // The returned plan really has that cost and is a layer partition.
        assert_eq!(sim.cost(&got.plan).expect("cost").makespan_s, cost.makespan_s);
        assert_eq!(got.status, SearchStatus::Exact, "seed {seed}");
        pruned_somewhere |= got.evaluated < ideals;
        // The optimum is not always a topological prefix of the ops.
        let robot: Vec<bool> = (0..g.node_count()).map(|id| g.node_is_op(id) && got.plan.splits[id].robot_end > 0).collect();
        let ops: Vec<usize> = (0..g.node_count()).filter(|&id| g.node_is_op(id)).collect();
        not_a_prefix |= ops.windows(2).any(|w| !robot[w[0]] && robot[w[1]]);
        for base in [robot_only(&sim, 8).expect("robot"), server_only(&sim, 8).expect("server")] {
            assert!(base.score(&Objective::Latency) >= cost.makespan_s, "seed {seed}: {} beats the optimum", base.name);
        }
    }
    assert!(pruned_somewhere, "the bound never pruned anything");
    assert!(not_a_prefix, "no optimum was a non-prefix cut; the test graphs are too easy");
}

#[test]
fn energy_under_deadline_equals_brute_force_on_random_dags() {
    let mut infeasible_seen = false;
    for seed in 100..140 {
        let g = random_dag(seed, 3 + (seed as usize % 9));
        let (r, s, cfg) = random_sim_parts(&g, seed);
        let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
        let fastest = brute_force(&sim, Objective::Latency).0.expect("feasible").makespan_s;
        let robot = robot_only(&sim, 8).expect("robot").cost.expect("robot-only runs").makespan_s;
        for factor in [0.9, 1.0, 1.2, 2.0] {
            let deadline = fastest.max(robot.min(fastest * 3.0)) * factor;
            let objective = Objective::EnergyUnderDeadline { deadline_s: deadline };
            let (want, _) = brute_force(&sim, objective);
            let got = energy_layer_partition(&sim, deadline, &SearchOptions::default()).expect("search");
            match (want, got.cost) {
                (None, None) => infeasible_seen = true,
                (Some(w), Some(c)) => {
                    assert_eq!(c.energy_j, w.energy_j, "seed {seed} deadline {deadline}");
                    assert!(c.makespan_s <= deadline);
                }
                (w, c) => panic!("seed {seed}: brute force {w:?}, search {c:?}"),
            }
        }
    }
    assert!(infeasible_seen, "a deadline below the fastest partition must be infeasible");
}

#[test]
fn search_budget_returns_the_best_plan_seen_with_its_status() {
    let g = random_dag(7, 10);
    let (r, s, cfg) = random_sim_parts(&g, 7);
    let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
    let full = best_layer_partition(&sim, Objective::Energy, &SearchOptions::default()).expect("search");
    assert_eq!(full.status, SearchStatus::Exact);
    let opts = SearchOptions { units: 8, max_evaluations: 1 };
    let cut = best_layer_partition(&sim, Objective::Energy, &opts).expect("a plan, not an error");
    assert_eq!(cut.status, SearchStatus::Budget);
    let (cut_j, full_j) = (cut.score(&Objective::Energy), full.score(&Objective::Energy));
    assert!(cut_j.is_finite() && cut_j >= full_j, "budget {cut_j} vs exact {full_j}");
    assert_eq!(sim.cost(&cut.plan).expect("cost").energy_j, cut.cost.expect("cost").energy_j);
}

/// The minimum cut is the optimum of the sequential cost model: it equals the exhaustive search
/// over every down-closed set, under random weightings and links (slow links push the cut into
/// the graph, fast ones to the input).
#[test]
fn min_cut_equals_exhaustive_search_of_the_sequential_model() {
    let mut inner_cut = false;
    for seed in 0..60 {
        let g = random_dag(seed + 300, 3 + (seed as usize % 11));
        let (r, s, cfg) = random_sim_parts(&g, seed);
        let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
        let mut rng = Rng::new(seed);
        let mut costs = min_cut::SequentialCosts::from_sim(&sim, 0.5 + rng.unit(), 0.25 + 2.0 * rng.unit());
        if seed % 2 == 1 {
            // Arbitrary terms: cheap transfers of some values, dear ones of others.
            for id in 0..g.node_count() {
                let live = costs.live[id];
                costs.robot[id] = if live { rng.unit() } else { 0.0 };
                costs.server[id] = if live { rng.unit() * 0.5 } else { 0.0 };
                costs.up[id] = rng.unit() * 2.0;
                costs.down[id] = if live && g.outputs().contains(&id) { rng.unit() * 2.0 } else { 0.0 };
            }
        }
        let cut = min_cut::min_cut_partition(&g, &costs);
        let ops: Vec<usize> = (0..g.node_count()).filter(|&id| g.node_is_op(id)).collect();
        assert!(
            ops.iter().all(|&id| !cut[id] || g.node_inputs(id).iter().all(|&p| !g.node_is_op(p) || cut[p])),
            "seed {seed}: not down-closed"
        );
        let mut best = f64::INFINITY;
        for mask in 0u32..(1 << ops.len()) {
            let mut in_d = vec![false; g.node_count()];
            for (bit, &id) in ops.iter().enumerate() {
                in_d[id] = mask >> bit & 1 == 1;
            }
            if ops.iter().all(|&id| !in_d[id] || g.node_inputs(id).iter().all(|&p| !g.node_is_op(p) || in_d[p])) {
                best = best.min(costs.cost(&g, &in_d));
            }
        }
        let got = costs.cost(&g, &cut);
        assert!((got - best).abs() <= 1e-9 * best.max(1e-12), "seed {seed}: cut {got} vs exhaustive {best}");
        let robot_ops = ops.iter().filter(|&&id| cut[id]).count();
        inner_cut |= robot_ops > 0 && robot_ops < ops.len();
    }
    assert!(inner_cut, "no optimum cut inside the graph: the instances are too easy");
}

#[test]
fn baselines_without_a_link_fall_back_to_the_robot() {
    let g = random_dag(3, 6);
    let (r, s, mut cfg) = random_sim_parts(&g, 3);
    cfg.link.bandwidth = 0.0;
    let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
    let all = all(&sim, Objective::Weighted { lambda: 0.01 }, &SearchOptions::default()).expect("baselines");
    assert_eq!(all.len(), 4);
    assert!(all[1].cost.is_none(), "server-only needs the link");
    let best = best(&all, &Objective::Latency).expect("robot-only is feasible");
    let robot = all[0].cost.expect("robot-only");
    assert_eq!(best.cost.expect("cost").makespan_s, robot.makespan_s);
    assert!(best.plan.splits.iter().enumerate().all(|(id, s)| !g.node_is_op(id) || s.server_start == s.robot_end && s.robot_end > 0));
}
