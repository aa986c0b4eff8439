use super::*;
use crate::graph::{DType, Graph, GraphBuilder};
use crate::ops::{BinaryOp, Op, Pool, UnaryOp};
use crate::plan::{Plan, Side};
use crate::profile::{Fit, Profile};
use crate::rng::Rng;
use crate::sim::{Link, Objective, SimConfig, Simulator};

/// A random DAG of relus, 3x3 max pools and adds over a `[1, 2, 16, 16]` u8 input.
fn random_dag(seed: u64, ops: usize) -> Graph {
    let mut rng = Rng::new(seed);
    let mut b = GraphBuilder::new(format!("pdag{seed}"));
    let x = b.input("x", vec![1, 2, 16, 16], DType::U8);
    let first = b.add("norm", Op::NormalizeU8 { mean: vec![0.5, 0.5], std: vec![0.25, 0.25] }, &[x]).expect("norm");
    let mut vals = vec![first];
    for i in 1..ops {
        let a = vals[vals.len() - 1 - rng.below(vals.len().min(3))];
        let (op, ins) = match rng.below(3) {
            0 => (Op::Unary(UnaryOp::Relu), vec![a]),
            1 => {
                let p = Pool::square2d(3, 1, 1);
                (Op::MaxPool(p), vec![a])
            }
            _ => (Op::Binary(BinaryOp::Add), vec![a, vals[rng.below(vals.len())]]),
        };
        vals.push(b.add(format!("op{i}"), op, &ins).expect("op"));
    }
    b.output(*vals.last().expect("value"));
    b.build().expect("graph")
}

fn profiles(g: &Graph, seed: u64, speedup: f64) -> (Profile, Profile) {
    let mut rng = Rng::new(seed ^ 0xabc);
    let t: Vec<(f64, f64)> = (0..g.nodes.len()).map(|_| (rng.unit() * 1e-3, rng.unit() * 4e-4)).collect();
    let r = crate::profile::from_fits(g, Side::Robot, |id| Fit::new(t[id].0, t[id].1)).expect("robot");
    let s = crate::profile::from_fits(g, Side::Server, |id| Fit::new(t[id].0 / speedup, t[id].1 / speedup)).expect("server");
    (r, s)
}

fn small_cfg(seed: u64) -> PlannerConfig {
    PlannerConfig { lns_evaluations: 60, groups: 6, seed, ..PlannerConfig::default() }
}

#[test]
fn never_worse_than_any_baseline_on_random_dags() {
    let mut lop_wins = 0;
    for seed in 0..8u64 {
        let g = random_dag(seed, 6 + seed as usize % 5);
        let (r, s) = profiles(&g, seed, 2.0 + seed as f64 * 3.0);
        for bw in [0.0, 2e4, 2e5, 2e6] {
            let link = Link { bandwidth: bw, latency_s: 5e-4, overhead_s: 5e-5 };
            let sim = Simulator::new(&g, &r, &s, SimConfig { link, ..SimConfig::default() }).expect("sim");
            for obj in [Objective::Latency, Objective::Energy, Objective::Weighted { lambda: 0.1 }] {
                let o = plan(&sim, obj, &small_cfg(seed)).expect("plan");
                let c = sim.cost(&o.plan).expect("the plan simulates");
                assert_eq!(Some(c), o.cost, "reported cost is the plan's");
                for b in &o.baselines {
                    if let Some(bc) = &b.cost {
                        assert!(obj.score(&c) <= obj.score(bc) + 1e-15, "seed {seed} bw {bw} {obj:?}: worse than {}", b.name);
                    }
                }
                lop_wins += usize::from(o.method == "lop");
            }
        }
    }
    assert!(lop_wins > 0, "LOSS never beat a baseline on 96 instances");
}

/// u8 input [1, 4, 64, 64] -> norm -> 4 relus, then a global mean as the output, or the last
/// relu's float rows (four times the input's bytes).
fn relu_chain(global_mean: bool) -> Graph {
    let mut b = GraphBuilder::new(if global_mean { "chain" } else { "raw-heads" });
    let x = b.input("x", vec![1, 4, 64, 64], DType::U8);
    let mut v = b.add("norm", Op::NormalizeU8 { mean: vec![0.0; 4], std: vec![1.0; 4] }, &[x]).expect("norm");
    for i in 0..4 {
        v = b.add(format!("relu{i}"), Op::Unary(UnaryOp::Relu), &[v]).expect("relu");
    }
    if global_mean {
        v = b.add("gap", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[v]).expect("gap");
    }
    b.output(v);
    b.build().expect("graph")
}

/// A very slow robot; a server whose first op (norm) is expensive and the rest nearly free.
fn relu_chain_profiles(g: &Graph) -> (Profile, Profile) {
    let r = crate::profile::from_fits(g, Side::Robot, |_| Fit::new(0.0, 1e-3)).expect("robot");
    let s = crate::profile::from_fits(g, Side::Server, |id| Fit::new(0.0, if id == 1 { 2e-4 } else { 1e-6 })).expect("server");
    (r, s)
}

#[test]
fn chunked_server_pipelining_beats_server_only_when_upload_dominates() {
    // A chain of cheap local ops over a big input: the upload dominates, the robot is very
    // slow, the server's first op is expensive: computing it in chunks while the rest of the
    // frame is in flight hides it behind the upload.
    let g = relu_chain(true);
    let (r, s) = relu_chain_profiles(&g);
    let sim = Simulator::new(&g, &r, &s, SimConfig { link: Link::mbytes(1.0, 1e-4), ..SimConfig::default() }).expect("sim");
    let o = plan(&sim, Objective::Latency, &PlannerConfig::default()).expect("plan");
    let server_only = o.baselines.iter().find(|c| c.name == "server-only").and_then(|c| c.cost).expect("server-only");
    let c = o.cost.expect("cost");
    assert_eq!(o.method, "lop");
    assert!(c.makespan_s < server_only.makespan_s * 0.95, "{} vs server-only {}", c.makespan_s, server_only.makespan_s);
    assert!(o.plan.splits.iter().any(|s| s.server_chunks > 1), "chunks must be used");
}

/// Raw float outputs four times the size of the byte input: every plan that computes them on
/// the server sends them down, so the "never send a tensor larger than the input" rule must not
/// count them. It did, and pruned every candidate: LOSS fell back to server-only, which uploads,
/// computes and downloads one after the other, where streaming the output rows down while the
/// rest of the frame is still coming up takes about the download alone.
#[test]
fn outputs_larger_than_the_input_do_not_prune_pipelining() {
    let g = relu_chain(false);
    let (r, s) = relu_chain_profiles(&g);
    let sim = Simulator::new(&g, &r, &s, SimConfig { link: Link::mbytes(1.0, 1e-4), ..SimConfig::default() }).expect("sim");
    // Pruning is off by default; this is what it must not do when turned on.
    let cfg = PlannerConfig { prune_larger_than_input: true, ..PlannerConfig::default() };
    let o = plan(&sim, Objective::Latency, &cfg).expect("plan");
    let server_only = o.baselines.iter().find(|c| c.name == "server-only").and_then(|c| c.cost).expect("server-only");
    let c = o.cost.expect("cost");
    assert_eq!(o.method, "lop");
    assert!(c.max_value_bytes <= 4 * 64 * 64, "only the output came down whole: {} bytes", c.max_value_bytes);
    assert!(c.makespan_s < server_only.makespan_s * 0.9, "{} vs server-only {}", c.makespan_s, server_only.makespan_s);
}

fn spec(buckets: Vec<f64>) -> TableSpec {
    TableSpec {
        buckets,
        bandwidth_scale: 0.05,
        latency_s: 1e-3,
        overhead_s: 0.0,
        input_bytes_per_element: None,
        objective: Objective::Latency,
        power: crate::sim::RobotPower::default(),
        planner: small_cfg(3),
        chunk_order: crate::sim::ChunkOrder::default(),
        chunk_bounds: crate::sim::ChunkBounds::default(),
        post_side: None,
        frame: Default::default(),
    }
}

#[test]
fn tables_are_deterministic_and_cached_with_corrupt_entries_rebuilt() {
    let g = random_dag(11, 9);
    let (r, s) = profiles(&g, 11, 10.0);
    let sp = spec(vec![0.0, 1.0, 2.0, 5.0, 10.0]);
    let (a, times) = ScheduleTable::build(&g, &r, &s, &sp, 1).expect("table");
    assert_eq!(times.len(), 5);
    // Planned again on three threads (workers on shared copies of the graph): the same table.
    let (b, _) = ScheduleTable::build(&g, &r, &s, &sp, 3).expect("table");
    assert_eq!(a.to_json(), b.to_json(), "same inputs and seed, same bytes");
    assert_eq!(a.entries[0].method, "robot-only", "bucket 0 has no link");
    // Each bucket's own bandwidth selects it, also a few ULPs below (`lop simulate --bandwidth`
    // divides a bucket's printed bandwidth by the scale: with the scale read one ULP off, 30 came
    // out as 29.999999999999996, and bucket 29's plan was simulated).
    for e in &a.entries {
        let just_below = e.bucket_mb_s * (1.0 - 4.0 * f64::EPSILON);
        assert_eq!(a.lookup(just_below).map(|x| x.bucket_mb_s), Some(e.bucket_mb_s));
    }
    assert_eq!(a.lookup(4.99).map(|x| x.bucket_mb_s), Some(2.0), "a real gap below a bucket is the bucket under it");
    assert_eq!(a.lookup(100.0).map(|x| x.bucket_mb_s), Some(10.0));
    // Yardsticks: LOSS is never worse than the best latency baseline; server-only is a plan the
    // server-pipelining bound covers; bucket 0 (no link) has no bound.
    let bounds = a.pipeline_bounds(&g, &r, &s, 1).expect("bounds");
    assert_eq!(bounds.len(), a.entries.len());
    // Computed on several threads, every bucket's bounds are the same numbers, in bucket order.
    assert_eq!(a.pipeline_bounds(&g, &r, &s, 3).expect("bounds"), bounds, "pipelining bounds depend on the threads");
    let fluid =
        |threads| a.fluid_bounds(&g, &r, &s, threads).expect("bounds").into_iter().map(|f| f.map(|f| f.bound_s)).collect::<Vec<_>>();
    assert_eq!(fluid(3), fluid(1), "fluid bounds depend on the threads");
    let mut no_band_checked = 0;
    assert!(bounds[0].is_none());
    for (e, bound) in a.entries.iter().zip(&bounds) {
        let best = e.best_baseline_s().expect("robot-only is always feasible");
        let each = ["robot-only", "server-only", "layer-partition"].map(|m| e.makespan_of(m).unwrap_or(f64::INFINITY));
        assert_eq!(best, each.iter().copied().fold(f64::INFINITY, f64::min));
        assert!(e.makespan_s.expect("lop") <= best + 1e-12);
        if let (Some(b), Some(so)) = (bound, e.makespan_of("server-only")) {
            assert!(*b <= so + 1e-12, "bucket {}: bound {b} above server-only {so}", e.bucket_mb_s);
            // A LOSS plan that gives the robot no rows is one of the plans the bound covers.
            if e.plan.splits.iter().all(|sp| sp.robot_end == 0) {
                no_band_checked += 1;
                assert!(e.makespan_s.expect("lop") >= b - 1e-12, "bucket {}: LOSS below the bound {b}", e.bucket_mb_s);
            }
        }
    }
    eprintln!("LOSS plans without robot rows checked against the bound: {no_band_checked}");
    let dir = std::env::temp_dir().join(format!("lop-table-cache-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    let (t1, _, u1) = load_or_build(&dir, &g, &r, &s, &sp, 1).expect("miss");
    assert_eq!(u1, CacheUse::Miss);
    let (t2, _, u2) = load_or_build(&dir, &g, &r, &s, &sp, 1).expect("hit");
    assert_eq!((u2, &t2.hash), (CacheUse::Hit, &t1.hash));
    let path = table::cache_path(&dir, &t1.key);
    let text = std::fs::read_to_string(&path).expect("read").replacen("\"lop\"", "\"xop\"", 1).replacen("robot-only", "server-only", 1);
    std::fs::write(&path, text).expect("corrupt");
    let (t3, _, u3) = load_or_build(&dir, &g, &r, &s, &sp, 1).expect("rebuilt");
    assert_eq!((u3, t3.to_json()), (CacheUse::Rebuilt, t1.to_json()));
    std::fs::write(&path, "{ not json").expect("corrupt");
    assert_eq!(load_or_build(&dir, &g, &r, &s, &sp, 1).expect("rebuilt").2, CacheUse::Rebuilt);
    // Each write went through a partial file renamed onto the table: only the table is left.
    let files: Vec<_> = std::fs::read_dir(&dir).expect("cache dir").map(|e| e.expect("entry").path()).collect();
    assert_eq!(files, vec![path.clone()]);
    std::fs::remove_dir_all(&dir).ok();
}

/// A bucket whose own plan is poor takes a better plan from a neighbouring bucket (and
/// polishes it), and no bucket ends worse than it started.
#[test]
fn a_bucket_takes_a_better_plan_from_its_neighbours() {
    let g = random_dag(11, 9);
    let (r, s) = profiles(&g, 11, 10.0);
    let sp = spec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let (planned, _) = ScheduleTable::build(&g, &r, &s, &sp, 1).expect("table");
    // Bucket 3 MB/s forgets its plan and holds robot-only, far slower with this server.
    let mut entries = planned.entries.clone();
    let poor = Plan::robot_only(&g, sp.planner.units);
    let sim_at = |b: f64| Simulator::new(&g, &r, &s, sp.sim_config(b)).expect("sim");
    let poor_s = sim_at(3.0).cost(&poor).expect("robot-only").makespan_s;
    entries[2].plan = poor.clone();
    entries[2].plan_hash = poor.hash();
    entries[2].method = "robot-only".into();
    entries[2].makespan_s = Some(poor_s);
    let before: Vec<f64> = entries.iter().map(|e| e.makespan_s.expect("feasible")).collect();
    table::lend_plans(&g, &r, &s, &sp, &mut entries).expect("lend");
    let sim = sim_at(3.0);
    let taken = &entries[2];
    let neighbours_best = [0, 1, 3, 4, 5]
        .iter()
        .map(|&j| sim.cost(&planned.entries[j].plan).expect("a neighbour's plan runs here").makespan_s)
        .fold(f64::INFINITY, f64::min);
    let got = taken.makespan_s.expect("feasible");
    assert!(got < poor_s * 0.9, "bucket 3 kept a poor plan: {got} s against robot-only {poor_s} s");
    assert!(got <= neighbours_best + 1e-12, "{got} s is worse than a neighbour's plan here ({neighbours_best} s)");
    assert_eq!(sim.cost(&taken.plan).expect("its plan").makespan_s, got, "the entry's makespan is its plan's");
    assert_eq!((taken.method.as_str(), &taken.plan_hash), ("lop", &taken.plan.hash()));
    for (i, e) in entries.iter().enumerate() {
        let now = e.makespan_s.expect("feasible");
        assert!(now <= before[i], "bucket {} got worse: {now} s against {} s", e.bucket_mb_s, before[i]);
        if e.plan != planned.entries[i].plan && i != 2 {
            assert!(now < before[i], "bucket {} changed its plan without gaining", e.bucket_mb_s);
        }
    }
}

#[test]
fn bad_inputs_are_refused() {
    let g = random_dag(1, 6);
    let other = random_dag(2, 7);
    let (r, s) = profiles(&g, 1, 5.0);
    let (ro, _) = profiles(&other, 2, 5.0);
    assert!(ScheduleTable::build(&g, &r, &s, &spec(vec![]), 1).expect_err("empty").to_string().contains("empty"));
    assert!(ScheduleTable::build(&g, &ro, &s, &spec(vec![1.0]), 1).is_err(), "a profile of another model");
    assert!(ScheduleTable::build(&g, &r, &s, &spec(vec![f64::NAN]), 1).is_err());
    let mut bad = spec(vec![1.0]);
    bad.planner.chunk_choices = vec![0];
    assert!(ScheduleTable::build(&g, &r, &s, &bad, 1).is_err());
}

#[test]
fn timeline_svg_has_four_lanes_and_a_makespan() {
    let g = random_dag(5, 8);
    let (r, s) = profiles(&g, 5, 10.0);
    let sim = Simulator::new(&g, &r, &s, SimConfig::default()).expect("sim");
    let rep = sim.simulate(&crate::plan::Plan::even(&g, 8)).expect("simulate");
    let svg = svg::timeline(&rep, "test");
    assert_eq!(svg.matches("class=\"lane\"").count(), 4);
    for (_, name) in svg::LANES {
        assert!(svg.contains(&format!("data-lane=\"{name}\"")), "{name}");
    }
    assert!(svg.contains("id=\"makespan\"") && svg.contains("makespan"));
    assert!(svg.contains(" KB") || svg.contains(" B<") || svg.contains(" B:"), "transfers carry bytes");
    let plot = svg::latency_plot(&[("lop".into(), vec![(1.0, Some(2.0)), (2.0, Some(1.0))])], "t", "MB/s");
    assert!(plot.starts_with("<svg") && plot.contains("<path"));
    // Ticks at multiples of 0.1 print as such (not 0.30000000000000004); bounds are dashed.
    let series =
        vec![("lop".to_string(), vec![(0.0, Some(1.0)), (0.55, Some(0.4))]), ("pipelining bound".to_string(), vec![(0.55, Some(0.3))])];
    let plot = svg::latency_plot(&series, "t", "MB/s");
    assert!(plot.contains(">0.3</text>") && !plot.contains("0000000"), "{plot}");
    assert_eq!(plot.matches("stroke-dasharray").count(), 2, "the bound's path and legend line");
}

#[test]
fn wavefront_lets_loss_hide_a_deep_chain_behind_the_upload() {
    // Six equally expensive element-wise ops on the server: upload 16 KB at 1 MB/s (16.4 ms),
    // 2.56 ms of server compute per op. Server-only: ~16.4 + 15.4 ms. With every op chunked
    // and wavefront order, the server runs band after band, layer after layer, during the
    // upload (~16.4 ms + one band through six ops); op by op, only the first op overlaps.
    let mut b = GraphBuilder::new("deep");
    let x = b.input("x", vec![1, 4, 64, 64], DType::U8);
    let mut v = b.add("norm", Op::NormalizeU8 { mean: vec![0.0; 4], std: vec![1.0; 4] }, &[x]).expect("norm");
    for i in 0..6 {
        v = b.add(format!("relu{i}"), Op::Unary(UnaryOp::Relu), &[v]).expect("relu");
    }
    // A row-wise mean keeps the output (which must come back) small.
    let y = b.add("mean", Op::ReduceMean { axes: vec![3], keepdims: true }, &[v]).expect("mean");
    b.output(y);
    let g = b.build().expect("graph");
    let r = crate::profile::from_fits(&g, Side::Robot, |_| Fit::new(0.0, 1e-3)).expect("robot");
    let s =
        crate::profile::from_fits(&g, Side::Server, |id| Fit::new(0.0, if (2..8).contains(&id) { 4e-5 } else { 1e-7 })).expect("server");
    let mut best = Vec::new();
    for order in [crate::sim::ChunkOrder::Wavefront, crate::sim::ChunkOrder::OpMajor] {
        let cfg = SimConfig { link: Link::mbytes(1.0, 1e-4), order, ..SimConfig::default() };
        let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
        let o = plan(&sim, Objective::Latency, &PlannerConfig::default()).expect("plan");
        let server_only = o.baselines.iter().find(|c| c.name == "server-only").and_then(|c| c.cost).expect("server-only");
        best.push(o.cost.expect("cost").makespan_s / server_only.makespan_s);
    }
    eprintln!("LOSS / server-only: wavefront {:.3}, op-major {:.3}", best[0], best[1]);
    assert!(best[0] < 0.7, "wavefront: LOSS / server-only = {}", best[0]);
    assert!(best[0] < best[1] - 0.1, "wavefront {} vs op-major {}", best[0], best[1]);
}

/// input u8 [1, 2, 64, 16] -> norm -> ten 3x3 stride-1 max pools -> a global mean.
fn pools() -> Graph {
    let mut b = GraphBuilder::new("pools");
    let x = b.input("x", vec![1, 2, 64, 16], DType::U8);
    let mut v = b.add("norm", Op::NormalizeU8 { mean: vec![0.0; 2], std: vec![1.0; 2] }, &[x]).expect("norm");
    for i in 0..10 {
        v = b.add(format!("pool{i}"), Op::MaxPool(Pool::square2d(3, 1, 1)), &[v]).expect("pool");
    }
    let y = b.add("mean", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[v]).expect("mean");
    b.output(y);
    b.build().expect("graph")
}

/// On a slow link what waits for the frame's last message is the server's work on the rows
/// that read it, so LOSS makes that message small: ten 3x3 max pools over 64 rows, 8 ms a
/// message of 8 rows, the server 0.05 ms a row per pool, a robot far slower. The plan it picks
/// tapers its last chunks, and the same plan cut evenly is slower.
#[test]
fn a_slow_link_tapers_the_last_message() {
    let g = pools();
    let r = crate::profile::from_fits(&g, Side::Robot, |_| Fit::new(0.0, 1e-2)).expect("robot");
    let s = crate::profile::from_fits(&g, Side::Server, |_| Fit::new(1e-5, 5e-5)).expect("server");
    let cfg = SimConfig { link: Link::mbytes(0.032, 1e-4), bounds: crate::sim::ChunkBounds::Aligned, ..SimConfig::default() };
    let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
    // Steps 1 to 6: release cuts (step 7) would cut every op by hand, the taper then moot.
    let o = plan(&sim, Objective::Latency, &PlannerConfig { release_cuts: false, ..PlannerConfig::default() }).expect("plan");
    assert_eq!(o.method, "lop");
    assert!(o.plan.taper.tail > 0, "{:?}", o.plan.taper);
    let tapered = o.cost.expect("cost").makespan_s;
    let even = sim.cost(&Plan { taper: crate::plan::Taper::default(), ..o.plan.clone() }).expect("even").makespan_s;
    eprintln!("slow link: LOSS {:.2} ms ({:?}), the same plan cut evenly {:.2} ms", tapered * 1e3, o.plan.taper, even * 1e3);
    assert!(tapered < even, "tapered {tapered} vs even {even}");
}

#[test]
fn release_cuts_make_server_only_plans_faster() {
    // The pools of the slow-link test, at links from slow to fast: step 7 never makes a plan
    // worse, and cuts some where the rows' releases say.
    let g = pools();
    let r = crate::profile::from_fits(&g, Side::Robot, |_| Fit::new(0.0, 1e-2)).expect("robot");
    let s = crate::profile::from_fits(&g, Side::Server, |id| Fit::new(1e-5 * (1 + id % 4) as f64, 5e-5)).expect("server");
    let mut faster = 0;
    for mbytes in [0.032, 0.1, 0.3, 1.0] {
        let cfg = SimConfig { link: Link::mbytes(mbytes, 1e-4), bounds: crate::sim::ChunkBounds::Aligned, ..SimConfig::default() };
        let sim = Simulator::new(&g, &r, &s, cfg).expect("sim");
        let without = plan(&sim, Objective::Latency, &PlannerConfig { release_cuts: false, ..PlannerConfig::default() }).expect("plan");
        let with = plan(&sim, Objective::Latency, &PlannerConfig::default()).expect("plan");
        let (w, wo) = (with.cost.expect("cost").makespan_s, without.cost.expect("cost").makespan_s);
        assert!(w <= wo, "{mbytes} MB/s: {w} s with release cuts, {wo} s without");
        if w < wo {
            faster += 1;
            assert!(!with.plan.server_cuts.is_empty(), "only release cuts change a plan after step 6");
            with.plan.validate(&g).expect("valid");
        }
        eprintln!("{mbytes} MB/s: {:.3} ms without release cuts, {:.3} ms with", wo * 1e3, w * 1e3);
    }
    assert!(faster >= 2, "release cuts made {faster} of 4 links faster");
}

/// Every zoo model, detectors and 3D grids included, plans in every bucket without a baseline
/// search failing, and neither LOSS nor any baseline beats the fluid bound. Profiles are
/// the synthetic ones ([`crate::profile::SYNTHETIC`]); the
/// occupancy grid is planned at a reduced depth to keep the test short.
#[test]
fn zoo_tables_respect_the_fluid_bound_and_never_fail() {
    for name in crate::zoo::names() {
        let model = if *name == "occupancy3d" { "occupancy3d@64x32x64".to_string() } else { name.to_string() };
        let g = crate::zoo::build(&model).expect("zoo model");
        let (r, s) = crate::profile::SYNTHETIC.pair(&g).expect("profiles");
        let mut sp = spec(vec![1.0, 5.0, 30.0]);
        sp.bandwidth_scale = 1.0;
        let (table, _) = ScheduleTable::build(&g, &r, &s, &sp, 1).expect("a table, whatever the graph");
        let fluid = table.fluid_bounds(&g, &r, &s, 1).expect("bounds");
        let pipelining = table.pipeline_bounds(&g, &r, &s, 1).expect("bounds");
        for ((e, bound), pipe) in table.entries.iter().zip(&fluid).zip(&pipelining) {
            let bound = bound.expect("a link").bound_s;
            let lop = e.makespan_s.expect("a plan");
            assert!(lop >= bound * (1.0 - 1e-9), "{model} bucket {}: plan {lop} s below the fluid bound {bound} s", e.bucket_mb_s);
            // The server-pipelining bound (kernel time shared down the dominator tree) covers
            // server-only and every LOSS plan that leaves the robot no rows, on every zoo graph.
            if let Some(pipe) = pipe {
                let covered = e.plan.splits.iter().all(|sp| sp.robot_end == 0);
                for m in [Some(lop).filter(|_| covered), e.makespan_of("server-only")].into_iter().flatten() {
                    assert!(m >= pipe * (1.0 - 1e-9), "{model} bucket {}: {m} s below the pipelining bound {pipe} s", e.bucket_mb_s);
                }
            }
            for b in &e.baselines {
                assert!(b.makespan_s.is_none_or(|m| m >= bound * (1.0 - 1e-9)), "{model}: {} beats the bound", b.name);
            }
            let layer = e.baselines.iter().find(|b| b.name == "layer-partition").expect("layer partition");
            assert_ne!(layer.search, crate::baseline::SearchStatus::Fixed, "{model}: the layer search reports how it ended");
            // Seeded by the minimum cuts, the exact search completes on every model but the
            // detectors' necks (a few hundred simulations at most); those report the budget.
            if !["yolo_det", "pose_hr"].contains(name) {
                assert_eq!(layer.search, crate::baseline::SearchStatus::Exact, "{model} bucket {}", e.bucket_mb_s);
            }
        }
    }
}

/// `yolo_det@64x64` with `task: detect`: a slow robot, a fast server and a fast link put the
/// post-processing stage on the server; pinned to the robot (what `lop plan --post-side robot`
/// prices), no plan, baseline or LOSS, computes it there, and the raw heads come down.
#[test]
fn post_processing_pinned_to_the_robot_stays_on_the_robot() {
    let g = crate::postprocess::Postprocess::parse("detect")
        .expect("spec")
        .apply(crate::zoo::build("yolo_det@64x64").expect("zoo"))
        .expect("applies");
    let post = g.nodes.iter().position(|n| matches!(n.op, Op::Post(_))).expect("a post op");
    let r = crate::profile::from_fits(&g, Side::Robot, |_| Fit::new(1e-4, 2e-4)).expect("robot");
    let s = crate::profile::from_fits(&g, Side::Server, |_| Fit::new(5e-6, 1e-5)).expect("server");
    let link = Link::mbytes(2.0, 1e-4);
    let cfg = PlannerConfig { lns_evaluations: 40, groups: 6, ..PlannerConfig::default() };
    let outcome = |post_side: Option<Side>| {
        let sim = Simulator::new(&g, &r, &s, SimConfig { link, post_side, ..SimConfig::default() }).expect("sim");
        (plan(&sim, Objective::Latency, &cfg).expect("plan"), sim.cost(&Plan::server_only(&g, 8)), sim.fluid_bound().expect("a link"))
    };
    let (free, server_only, free_fluid) = outcome(None);
    assert!(server_only.is_ok(), "unpinned, server-only is feasible");
    assert!(!free.plan.rows(&g, post, Side::Server).is_empty(), "unpinned, the post-processing runs on the server");

    let (pinned, server_only, pinned_fluid) = outcome(Some(Side::Robot));
    assert!(matches!(server_only, Err(lop_core::Error::Infeasible(_))), "{server_only:?}");
    assert!(pinned.plan.rows(&g, post, Side::Server).is_empty(), "pinned: no post-processing rows on the server");
    assert!(pinned.baselines.iter().find(|b| b.name == "server-only").is_some_and(|b| b.cost.is_none()), "server-only must be infeasible");
    for b in pinned.baselines.iter().filter(|b| b.cost.is_some()) {
        assert!(b.plan.rows(&g, post, Side::Server).is_empty(), "baseline {} computes the post-processing on the server", b.name);
    }
    let (free_c, pinned_c) = (free.cost.expect("cost"), pinned.cost.expect("cost"));
    // The heads ([1, 84, 84] floats) come down instead of the detections.
    assert!(pinned_c.bytes_down > free_c.bytes_down, "{} vs {} bytes down", pinned_c.bytes_down, free_c.bytes_down);
    assert!(pinned_c.makespan_s > free_c.makespan_s, "{} vs {}", pinned_c.makespan_s, free_c.makespan_s);
    // The fluid bound holds the pin: still below the pinned plan, above the free bound.
    assert!(pinned_fluid <= pinned_c.makespan_s + 1e-12, "fluid {pinned_fluid} vs pinned LOSS {}", pinned_c.makespan_s);
    assert!(pinned_fluid > free_fluid, "pinned fluid {pinned_fluid} vs free {free_fluid}");

    // Pinned to the server, robot-only (which runs it on the robot) is infeasible.
    let sim = Simulator::new(&g, &r, &s, SimConfig { link, post_side: Some(Side::Server), ..SimConfig::default() }).expect("sim");
    assert!(matches!(sim.cost(&Plan::robot_only(&g, 8)), Err(lop_core::Error::Infeasible(_))));
}
