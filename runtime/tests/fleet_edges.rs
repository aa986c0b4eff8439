//! The edge side of a fleet over Zenoh on loopback (EPARA's forwarding and placement).
//!
//! Forwarding: an edge that cannot meet an inference's deadline forwards it to an edge of its
//! own view that can, the robot sends it there with the path, and the answer is the unsplit
//! model's. The path keeps forwarding finite (no loops, at most `max_forwards`), and a forwarded
//! inference arriving with too little of its deadline left is answered `Late` at once and never
//! computed.
//!
//! Placement under a memory budget: an edge whose budget holds one of its two models preloads
//! the first and reports the second cold; a fleet robot asking for the cold one runs alone, has
//! the edge load it (unloading the idle one), and is then served split and exactly. A model
//! larger than the whole budget is a start-up error.
//!
//! The two tests share one binary (one link in the test command) and run one after the other
//! (the forwarding test's budgets are measured on an otherwise idle machine).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MODEL, Setup, assert_exact, edge_slowed, free_port, setup, setup_model, tempdir};
use lop_fleet::Policy;
use lop_msgs::key::SessionKeys;
use lop_runtime::client::{ClientOptions, Hop, Hopped, RobotClient};
use lop_runtime::edge::{EdgeModel, EdgeOptions, EdgeService};
use lop_runtime::exec::Worker;
use lop_runtime::fleet::{AloneWhy, FleetClient, REPORT_PERIOD, Routed, STALE_AFTER, forwarding, start_reporter};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::{ZenohConnector, serve_zenoh};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_edge_forwards_within_the_path_rules_and_late_hops_are_never_computed() {
    // One at a time with the crate's other heavy tests (each runs a node, edges and routers).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let _router = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
    // edge-a is 30x slower than this machine: one inference holds its one replica for a second
    // or so. edge-b runs at full speed.
    let mut edges = Vec::new();
    for (id, dilation) in [("edge-a", 30.0), ("edge-b", 1.0)] {
        let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
        let svc = edge_slowed(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), dilation).await;
        let acceptor = EdgeAcceptor::on(&session, SessionKeys::fleet(id).unwrap()).await.unwrap();
        let task = serve_zenoh(svc.clone(), acceptor);
        let reports = start_reporter(&session, id, svc.clone(), REPORT_PERIOD, Box::new(|| None)).await.unwrap();
        svc.set_forwarding(forwarding(&session, id, 2, STALE_AFTER).await.unwrap()).unwrap();
        edges.push((session, svc, task, reports));
    }
    let (a, b) = (edges[0].1.clone(), edges[1].1.clone());

    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let cost = lop::sim::model_cost("resnet18", &g, &s.robot, &s.server, Default::default()).unwrap();
    let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let fleet_robot = async |id: &str, slack: Duration| {
        let mut opts = ClientOptions::new(id, "resnet18");
        opts.hello_timeout = Duration::from_secs(10);
        opts.deadline_factor = 1.0;
        opts.deadline_slack = slack;
        opts.method = "server-only".into();
        let loader = Arc::new(|| lop::model::load(MODEL, &Default::default()));
        let r = FleetClient::new(session.clone(), opts, s.table.clone(), cost.clone(), loader, STALE_AFTER).await.unwrap();
        let t0 = Instant::now();
        while r.view().edges().len() < 2 && t0.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(r.view().edges().len(), 2, "{id}: {:?}", r.view().counts());
        r
    };
    let inputs = || s.inputs.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
    let deadline = Duration::from_secs(60);

    // The patient robot's first frame measures the slowed edge (its mean server time replaces
    // the profile's); the hurried robot's first frame opens its sessions with both edges.
    let mut patient = fleet_robot("patient", Duration::from_secs(60)).await;
    patient.set_policy(Policy::Nearest, Some("edge-a"));
    let first = patient.infer(inputs(), 30.0, deadline).await.unwrap();
    assert_eq!(first.routed, Routed::Edge("edge-a".into()));
    // Budgets between one and two of edge-a's measured inferences: enough on an idle replica,
    // not behind the patient robot's frame.
    let server_s = a.model_loads()[0].server_s;
    let budget = Duration::from_secs_f64(1.3 * server_s);
    let mut hurried = fleet_robot("hurried", budget).await;
    hurried.set_policy(Policy::Nearest, Some("edge-b"));
    let warm = hurried.infer(inputs(), 30.0, deadline).await.unwrap();
    assert_eq!(warm.routed, Routed::Edge("edge-b".into()));
    assert!(hurried.connected());
    let b_before = b.counts().inferences;

    // Raw hops to edge-a, for the path rules.
    let hop_robot = async |id: &str| {
        let (worker, loaded) = Worker::spawn(id, || lop::model::load(MODEL, &Default::default())).await.unwrap();
        let connector = ZenohConnector::to_edge(session.clone(), id, SessionKeys::fleet("edge-a").unwrap());
        let mut opts = ClientOptions::new(id, "resnet18");
        opts.hello_timeout = Duration::from_secs(10);
        opts.method = "server-only".into();
        let c = RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, s.table.clone()).await.unwrap();
        assert!(c.connected(), "{id}: {:?}", c.last_connect_error());
        c
    };
    let mut long_path = hop_robot("long-path").await;
    let mut looped = hop_robot("looped").await;
    let mut due = hop_robot("due").await;

    // While edge-a serves the patient robot, the hurried robot's frame cannot make its deadline
    // there: edge-a forwards it to edge-b, and the robot gets edge-b's exact answer.
    hurried.set_policy(Policy::Nearest, Some("edge-a"));
    let (busy, (fwd, full, again, bound)) = tokio::join!(patient.infer(inputs(), 30.0, deadline), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        let fwd = hurried.infer(inputs(), 30.0, deadline).await.unwrap();
        let took = t0.elapsed();
        // A path already max_forwards (2) long is not forwarded again: Overloaded at once.
        let two = Hop { path: vec!["edge-x".into(), "edge-y".into()], budget: Some(budget), due: None };
        let full = long_path.infer_hop(inputs(), 30.0, &two).await.unwrap();
        // Nor is a request whose path names edge-a itself.
        let back = Hop { path: vec!["edge-a".into()], budget: Some(budget), due: None };
        let again = looped.infer_hop(inputs(), 30.0, &back).await.unwrap();
        // A binding deadline as tight, with a work budget that would let edge-a serve it late:
        // forwarded by the deadline, not served late.
        let bound = Hop { path: Vec::new(), budget: Some(deadline), due: Some(budget) };
        let bound = due.infer_hop(inputs(), 30.0, &bound).await.unwrap();
        ((fwd, took), full, again, bound)
    });
    let busy = busy.unwrap();
    assert_eq!(busy.routed, Routed::Edge("edge-a".into()));
    assert!(!busy.inference.stats.fallback, "{:?}", busy.inference.stats.fallback_reason);
    let (fwd, took) = fwd;
    assert_eq!(fwd.routed, Routed::Edge("edge-b".into()), "{:?}", fwd.inference.stats.fallback_reason);
    assert_eq!(fwd.path, vec!["edge-a".to_string()]);
    assert!(!fwd.inference.stats.fallback, "{:?}", fwd.inference.stats.fallback_reason);
    assert_exact(&fwd.inference.outputs, &s.whole, "forwarded to edge-b");
    assert!(took < Duration::from_secs_f64(busy.inference.stats.total_s), "forwarded after {took:?}");
    for (what, h) in [("a path of max_forwards", full), ("a path through edge-a", again)] {
        let Hopped::Done(inf) = h else { panic!("{what}: forwarded again") };
        let why = inf.stats.fallback_reason.clone().unwrap_or_default();
        assert!(inf.stats.fallback && why.contains("Overloaded"), "{what}: {why}");
        assert_exact(&inf.outputs, &s.whole, what);
    }
    let Hopped::Forwarded { to, path, .. } = bound else { panic!("a frame that cannot make its binding deadline was not forwarded") };
    assert_eq!((to.as_str(), path), ("edge-b", vec!["edge-a".to_string()]));
    let ca = a.counts();
    assert_eq!((ca.forwarded, ca.overloaded), (2, 2), "{ca:?}");
    assert_eq!(ca.inferences, 2, "edge-a computed only the patient robot's frames: {ca:?}");
    assert_eq!(b.counts().inferences, b_before + 1, "edge-b served the forwarded frame");

    // A forwarded inference whose deadline leaves edge-b less than its own time: Late at once,
    // never computed; the robot finishes it.
    let (worker, loaded) = Worker::spawn("late", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let connector = ZenohConnector::to_edge(session.clone(), "late", SessionKeys::fleet("edge-b").unwrap());
    let mut opts = ClientOptions::new("late", "resnet18");
    opts.hello_timeout = Duration::from_secs(10);
    opts.method = "server-only".into();
    let mut late = RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, s.table.clone()).await.unwrap();
    let before = b.counts();
    let hop = Hop { path: vec!["edge-a".into()], budget: Some(Duration::from_micros(100)), due: None };
    let Hopped::Done(inf) = late.infer_hop(inputs(), 30.0, &hop).await.unwrap() else { panic!("a late hop was forwarded") };
    assert!(inf.stats.fallback);
    assert_exact(&inf.outputs, &s.whole, "the late hop, finished by the robot");
    let t0 = Instant::now();
    while b.counts().late == before.late && t0.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = b.counts();
    assert_eq!(after.late, before.late + 1, "{after:?}");
    assert_eq!(after.inferences, before.inferences, "a late hop is not computed: {after:?}");
}

const SMALL: &str = "zoo:mobilenet_v2";

fn options(big: &Setup, small: &Setup, cache: &std::path::Path, budget: u64) -> EdgeOptions {
    let model = |id: &str, source: &str, s: &Setup| EdgeModel {
        id: id.into(),
        source: source.into(),
        load: Default::default(),
        server_profile: s.server.clone(),
    };
    EdgeOptions {
        models: vec![model("resnet18", MODEL, big), model("mobilenet_v2", SMALL, small)],
        robot_profiles: vec![big.robot.clone(), small.robot.clone()],
        profiles_dir: None,
        spec: big.spec.clone(),
        cache_dir: cache.to_path_buf(),
        replicas: 1,
        devices: vec![lop_runtime::edge::ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: Duration::from_secs(5),
        table_wait: Duration::from_secs(60),
        dilation: 1.0,
        memory_budget: Some(budget),
        batching: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_model_is_loaded_when_robots_ask_and_the_idle_one_makes_room() {
    // One at a time with the crate's other heavy tests (each runs a node, edges and routers).
    let _heavy = crate::HEAVY.lock().await;
    let (big, small) = (setup_model(MODEL), setup_model(SMALL));
    let dir = tempdir();
    // resnet18 holds 46.8 MB of weights, mobilenet_v2 14.0 MB: 50 MB holds either, not both.
    let mb = 1_000_000;
    let too_small = EdgeService::start(options(&big, &small, &dir, 20 * mb)).await.unwrap_err().to_string();
    assert!(too_small.contains("resnet18") && too_small.contains("more than the memory budget"), "{too_small}");
    let svc = EdgeService::start(options(&big, &small, &dir, 50 * mb)).await.unwrap();
    let warm = |svc: &EdgeService| svc.model_loads().iter().map(|m| (m.id.clone(), m.warm)).collect::<Vec<_>>();
    assert_eq!(warm(&svc), [("resnet18".to_string(), true), ("mobilenet_v2".to_string(), false)], "preloaded in order");

    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let _router = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
    let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let _task = serve_zenoh(svc.clone(), EdgeAcceptor::on(&session, SessionKeys::fleet("edge-a").unwrap()).await.unwrap());
    let _reports = start_reporter(&session, "edge-a", svc.clone(), REPORT_PERIOD, Box::new(|| None)).await.unwrap();

    let g = lop::model::load(SMALL, &Default::default()).unwrap();
    let cost = lop::sim::model_cost("mobilenet_v2", &g, &small.robot, &small.server, Default::default()).unwrap();
    let robot_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let mut opts = ClientOptions::new("placement-robot", "mobilenet_v2");
    opts.hello_timeout = Duration::from_secs(5);
    opts.retry_interval = Duration::from_millis(100);
    opts.deadline_slack = Duration::from_secs(3);
    let loader = Arc::new(|| lop::model::load(SMALL, &Default::default()));
    let mut robot = FleetClient::new(robot_session, opts, small.table.clone(), cost, loader, STALE_AFTER).await.unwrap();
    let t0 = Instant::now();
    while robot.view().edges().is_empty() && t0.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(robot.view().edges().len(), 1);

    // Frames run on the robot, exactly, until the edge has loaded the model; then split there.
    let inputs = || small.inputs.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
    let deadline = Duration::from_secs(10);
    let asked = Instant::now();
    let (mut alone, mut served) = (0, None);
    while asked.elapsed() < Duration::from_secs(30) {
        let r = robot.infer(inputs(), 30.0, deadline).await.unwrap();
        assert_exact(&r.inference.outputs, &small.whole, &format!("frame routed {:?}", r.routed));
        match r.routed {
            Routed::Robot(why) => {
                // Cold on the only edge, then warm but its session not yet welcomed.
                assert!(matches!(why, AloneWhy::NoEdgeServes | AloneWhy::NotConnected), "{why:?}");
                alone += 1;
            }
            Routed::Edge(e) => {
                assert_eq!(e, "edge-a");
                assert!(!r.inference.stats.fallback, "{:?}", r.inference.stats.fallback_reason);
                served = Some(asked.elapsed());
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let served = served.unwrap_or_else(|| panic!("never served at the edge; warm: {:?}", warm(&svc)));
    eprintln!("placement: split at the edge {:.2} s after the first request ({alone} frames ran alone meanwhile)", served.as_secs_f64());
    assert!(alone >= 1, "the first frame cannot have been split: the model was cold");
    assert_eq!(warm(&svc), [("resnet18".to_string(), false), ("mobilenet_v2".to_string(), true)], "the idle model made room");
    assert!(svc.counts().rejected >= 1, "{:?}", svc.counts());
}
