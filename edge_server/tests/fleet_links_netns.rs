//! Per-edge link estimates across a real shaped link (issue 19, part 2: "bandwidth is estimated
//! per server"): two `lop_edge` processes on one Zenoh network, `edge-near` in the robot's
//! network namespace and `edge-far` in another one behind a veth pair shaped to 2 Mbit/s. The
//! robot (this test process) believes its own link is fast (30 MB/s), as its Wi-Fi estimate
//! would say; only its uploads to each edge show that `edge-far`'s path is slow. After a few
//! frames sent to both, the robot's estimate of `edge-far` is the shaped rate, and EPARA's routing
//! sends no frame there that could not come back by its deadline.
//!
//! Needs root and iproute2; without namespaces it says so loudly and passes, as the other netns
//! tests do. Bounded: 16 frames.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Edge;
use lop::plan::Side;
use lop_fleet::Policy;
use lop_runtime::client::ClientOptions;
use lop_runtime::fleet::{FleetClient, Routed, STALE_AFTER};
use lop_runtime::netns::{NetnsLink, NetnsOptions, NetnsSide};
use lop_runtime::zenoh_link::ZenohConfig;

/// u8 input of 160 x 160 x 3 = 76.8 KB, above the 64 KiB an upload needs to be read as a rate.
const MODEL: &str = "zoo:resnet18@160x160";
const PORT: u16 = 7447;
/// The far edge's path, Mbit/s: the frame takes about 0.3 s to go up.
const SLOW_MBIT: f64 = 2.0;
/// What the robot believes of its own link, MB/s (table units, scale 1).
const ROBOT_MB_S: f64 = 30.0;
/// The frames' deadline: the near edge makes it; a frame up the slow path cannot.
const DEADLINE: Duration = Duration::from_millis(250);

#[test]
fn a_fleet_robot_measures_each_edges_path_and_routes_around_the_slow_one() {
    if !NetnsLink::available_for_test("fleet links netns test") {
        return;
    }
    let prefix = format!("lopl{}", std::process::id() % 1_000_000);
    let link = NetnsLink::create(NetnsOptions::default().with_prefix(prefix).with_initial_mbit(SLOW_MBIT)).unwrap();
    let (robot_addr, far_addr) = (link.address(NetnsSide::Robot), link.address(NetnsSide::Edge));
    let near_ep = format!("tcp/{robot_addr}:{PORT}");
    let far_ep = format!("tcp/{far_addr}:{PORT}");

    let dir = std::env::temp_dir().join(format!("lop-fleet-links-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("robots")).unwrap();
    let mut configs = Vec::new();
    for (id, listen, connect) in [("edge-near", &near_ep, String::new()), ("edge-far", &far_ep, format!("\"{near_ep}\""))] {
        let config = dir.join(format!("{id}.yaml"));
        std::fs::write(
            &config,
            format!(
                "id: {id}\nserve_unaddressed: false\nthreads: 1\nzenoh:\n  listen: [\"{listen}\"]\n  connect: [{connect}]\n  allow_insecure: true\n\
                 models:\n  - id: resnet18\n    source: \"{MODEL}\"\n    server_profile: synthetic\n\
                 robot_profiles: robots\ntable_cache: tables\nprofile_cache: profiles\n\
                 table:\n  buckets: [0, 8, 30]\nhello_timeout_s: 60\ntable_wait_s: 60\nlog: \"warn,edge_server=info\"\n"
            ),
        )
        .unwrap();
        configs.push(config);
    }
    // The robot's table, built once into the edges' shared cache; its profile where they find it.
    let cfg = edge_server::EdgeConfig::load(&configs[0]).unwrap();
    let spec = cfg.table_spec().unwrap();
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let robot_profile = edge_server::synthetic_profile(&g, Side::Robot).unwrap();
    let server_profile = edge_server::synthetic_profile(&g, Side::Server).unwrap();
    robot_profile.save(&dir.join("robots/resnet18.json")).unwrap();
    let (table, _, _) = lop::planner::table::load_or_build(&cfg.table_cache, &g, &robot_profile, &server_profile, &spec, 1).unwrap();
    let mut cost = lop::sim::model_cost("resnet18", &g, &robot_profile, &server_profile, Default::default()).unwrap();
    let inputs = lop::exec::synthetic_inputs(&g, 11).unwrap();
    let t0 = Instant::now();
    let whole = lop::exec::run_whole(&g, &inputs).unwrap().outputs;
    // A robot 20x slower than this machine (dilated below): its own time per frame as measured.
    cost.robot_s = t0.elapsed().as_secs_f64() * 20.0;

    let near = Edge::start_with(link.command(NetnsSide::Robot, env!("CARGO_BIN_EXE_lop_edge")), &configs[0]);
    let far = Edge::start_with(link.command(NetnsSide::Edge, env!("CARGO_BIN_EXE_lop_edge")), &configs[1]);

    // The robot lives in the robot's namespace: this thread enters it before the runtime (and
    // Zenoh's threads, which this process starts from it) exist.
    link.enter(NetnsSide::Robot).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (warm, routed, far_mbps, near_mbps) = rt.block_on(async {
        let session = ZenohConfig::client(vec![near_ep.clone()]).open().await.unwrap();
        let mut opts = ClientOptions::new("links-robot", "resnet18");
        opts.hello_timeout = Duration::from_secs(30);
        opts.retry_interval = Duration::from_millis(100);
        // The client's own budget must not cut the slow uploads short: their Done measures them.
        opts.deadline_slack = Duration::from_secs(5);
        opts.dilation = 20.0;
        let loader = Arc::new(|| lop::model::load(MODEL, &Default::default()));
        let mut robot = FleetClient::new(session.clone(), opts, table, cost, loader, STALE_AFTER).await.unwrap();
        let t0 = Instant::now();
        while robot.view().edges().len() < 2 && t0.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(robot.view().edges().len(), 2, "the robot sees both edges: {:?}", robot.view().counts());
        let frame = || inputs.iter().map(tch::Tensor::shallow_clone).collect::<Vec<_>>();
        let check = |r: &lop_runtime::fleet::FleetInference, what: &str| {
            let err = lop::exec::max_rel_err_all(&r.inference.outputs, &whole).unwrap();
            assert!(err <= 1e-5, "{what}: relative error {err}");
        };
        // Round-robin opens a session with each edge (the first frames wait for it) and sends
        // frames to both: each upload to an edge measures its path.
        robot.set_policy(Policy::RoundRobin, None);
        let mut warm = Vec::new();
        let t0 = Instant::now();
        while warm.len() < 6 && t0.elapsed() < Duration::from_secs(60) {
            let started = Instant::now();
            let r = robot.infer(frame(), ROBOT_MB_S, DEADLINE).await.unwrap();
            check(&r, "warm-up");
            if let Routed::Edge(e) = &r.routed
                && !r.inference.stats.fallback
                && r.inference.stats.method != "robot-only"
            {
                warm.push((e.clone(), started.elapsed().as_secs_f64()));
            }
        }
        let far_mbps = robot.link_mbps("edge-far");
        let near_mbps = robot.link_mbps("edge-near");
        // EPARA's rule, now pricing each edge by its own path.
        robot.set_policy(Policy::Lop, None);
        let mut routed = Vec::new();
        for _ in 0..10 {
            let started = Instant::now();
            let r = robot.infer(frame(), ROBOT_MB_S, DEADLINE).await.unwrap();
            check(&r, "routed");
            routed.push((r.routed.clone(), r.inference.stats.fallback, started.elapsed().as_secs_f64()));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(robot);
        session.close().await.unwrap();
        (warm, routed, far_mbps, near_mbps)
    });
    drop(rt);
    let logs = format!("edge-near:\n{}\nedge-far:\n{}", { near }.log_now(), { far }.log_now());
    eprintln!(
        "fleet links: warm-up (edge, s) {warm:?}; estimates: edge-far {far_mbps:?} Mbit/s (shaped {SLOW_MBIT}), edge-near {near_mbps:?}; routed {routed:?}"
    );
    let slow: Vec<f64> = warm.iter().filter(|(e, _)| e == "edge-far").map(|(_, s)| *s).collect();
    assert!(!slow.is_empty(), "no warm-up frame went through edge-far: {warm:?}\n{logs}");
    assert!(
        slow.iter().all(|s| *s > DEADLINE.as_secs_f64()),
        "a frame through the slow path came back within the deadline, so this test shows nothing: {slow:?}"
    );
    let far_mbps = far_mbps.unwrap_or_else(|| panic!("no upload rate measured to edge-far\n{logs}"));
    assert!(
        (0.5 * SLOW_MBIT..=1.6 * SLOW_MBIT).contains(&far_mbps),
        "edge-far's path measured {far_mbps:.2} Mbit/s, shaped to {SLOW_MBIT}"
    );
    if let Some(n) = near_mbps {
        assert!(n > 5.0 * SLOW_MBIT, "edge-near's path (no shaping) measured only {n:.2} Mbit/s");
    }
    let to_far = routed.iter().filter(|(r, _, _)| *r == Routed::Edge("edge-far".into())).count();
    assert_eq!(to_far, 0, "frames routed up the slow path: {routed:?}");
    let split_near = routed.iter().filter(|(r, fb, _)| *r == Routed::Edge("edge-near".into()) && !fb).count();
    assert!(split_near >= 8, "only {split_near} of 10 frames split with edge-near: {routed:?}\n{logs}");
    let _ = std::fs::remove_dir_all(&dir);
}
