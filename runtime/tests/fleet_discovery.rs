//! Fleet discovery over Zenoh on loopback (DESIGN.md section 10): two edges report their load at
//! 10 Hz under their own ids; a robot that knows only the router's endpoint sees both, sees the
//! load of the one serving it, and loses each within a second of its going: one that leaves
//! cleanly (token withdrawn) and one that stops reporting without a word (reports gone stale).
//! Malformed reports and reports from edges without a token are counted and ignored.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{MODEL, edge, free_port, setup, tempdir, within};
use lop_msgs::load::{EdgeLoad, ModelLoad};
use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::fleet::{FleetView, LoadReporter, REPORT_PERIOD, STALE_AFTER, start_reporter};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::{ZenohConnector, serve_zenoh};

fn ids(view: &FleetView) -> Vec<String> {
    view.edges().into_iter().map(|e| e.load.edge).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_find_edges_by_their_reports_and_lose_them_within_a_second() {
    // Alone on the two cores, as when this file was its own test binary (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    // Edge A: the router, serving robots and reporting. Edge B: a peer of the router, reporting.
    let a_session = ZenohConfig::router(vec![endpoint.clone()]).open().await.unwrap();
    let a = edge(&s, &dir).await;
    let a_task = serve_zenoh(a.clone(), EdgeAcceptor::new(&a_session).await.unwrap());
    let a_reports = start_reporter(&a_session, "edge-a", a.clone(), REPORT_PERIOD, Box::new(|| None)).await.unwrap();
    let b_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let b = edge(&s, &dir).await;
    let b_reports = start_reporter(&b_session, "edge-b", b.clone(), REPORT_PERIOD, Box::new(|| Some(123))).await.unwrap();

    // The robot knows the endpoint only.
    let robot_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let view = FleetView::new(&robot_session, STALE_AFTER).await.unwrap();
    let found = within(Duration::from_secs(10), || ids(&view) == ["edge-a", "edge-b"]).await;
    assert!(found.is_some(), "both edges found: {:?}, {:?}", ids(&view), view.counts());
    // About 10 reports per second from each.
    let before = view.counts().reports;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rate = (view.counts().reports - before) as f64 / 2.0;
    assert!((14.0..=26.0).contains(&rate), "{rate} reports/s from two edges at 10 Hz");
    let seen = view.edges();
    assert_eq!(seen[1].load.gpu_free_bytes, Some(123));
    let m = seen[0].load.model("resnet18").expect("edge-a reports its model");
    assert!(m.warm && m.server_s > 0.0 && m.idle_goodput > 0.0, "{m:?}");

    // Inferences through edge A show up in its reports: busy time, and the measured mean.
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let mut opts = ClientOptions::new("fleet-robot", "resnet18");
    opts.hello_timeout = Duration::from_secs(10);
    opts.deadline_slack = Duration::from_secs(3);
    let mut c = RobotClient::new(
        ZenohConnector::new(robot_session.clone(), "fleet-robot"),
        opts,
        worker,
        loaded.meta,
        &loaded.hash,
        s.table.clone(),
    )
    .await
    .unwrap();
    assert!(c.connected());
    c.set_method("server-only");
    let mut busiest = 0.0f32;
    for _ in 0..8 {
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
        assert!(!r.stats.fallback, "{:?}", r.stats.fallback_reason);
        busiest = busiest.max(view.edges()[0].load.utilisation);
    }
    tokio::time::sleep(REPORT_PERIOD * 2).await;
    busiest = busiest.max(view.edges()[0].load.utilisation);
    assert!(busiest > 0.0, "edge-a reported no busy time while serving 8 inferences");
    let served = a.model_loads()[0].server_s;
    let profiled = b.model_loads()[0].server_s;
    assert!(served != profiled, "edge-a's mean server seconds moved from the profile's {profiled} with measurements");

    // B leaves cleanly: its token goes with its reporter.
    drop(b_reports);
    let gone = within(Duration::from_secs(3), || ids(&view) == ["edge-a"]).await;
    assert!(gone.is_some_and(|d| d < Duration::from_secs(1)), "edge-b left the view after {gone:?}");

    // A silent edge: a token and two reports, then nothing (a hung process keeps its TCP link
    // and its token until Zenoh's lease runs out; its reports stop at once).
    let c_session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let _token = c_session.liveliness().declare_token("lop/v1/edge/edge-c/alive").await.unwrap();
    let publisher =
        c_session.declare_publisher("lop/v1/edge/edge-c/load").congestion_control(zenoh::qos::CongestionControl::Block).await.unwrap();
    let mut reporter = LoadReporter::new("edge-c", &b).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..2 {
        publisher.put(reporter.report(&b, Instant::now(), None).encode().unwrap()).await.unwrap();
        tokio::time::sleep(REPORT_PERIOD).await;
    }
    assert!(within(Duration::from_secs(2), || ids(&view).contains(&"edge-c".to_string())).await.is_some(), "{:?}", view.counts());
    let silent_at = Instant::now();
    let gone = within(Duration::from_secs(3), || !ids(&view).contains(&"edge-c".to_string())).await;
    assert!(gone.is_some(), "a silent edge stays in the view");
    assert!(silent_at.elapsed() < Duration::from_secs(1), "a silent edge left after {:?}", silent_at.elapsed());

    // Hostile or confused reports: counted, never taken.
    let before = view.counts();
    publisher.put(b"not a report".to_vec()).await.unwrap();
    let stranger = EdgeLoad {
        edge: "edge-x".into(),
        seq: 1,
        utilisation: 0.0,
        gpu_free_bytes: None,
        models: vec![ModelLoad { model: "resnet18".into(), queued_s: 0.0, idle_goodput: 1e6, server_s: 1e-3, in_flight: 0, warm: true }],
    };
    c_session
        .put("lop/v1/edge/edge-x/load", stranger.encode().unwrap())
        .congestion_control(zenoh::qos::CongestionControl::Block)
        .await
        .unwrap();
    c_session
        .put("lop/v1/edge/edge-a/load", stranger.encode().unwrap())
        .congestion_control(zenoh::qos::CongestionControl::Block)
        .await
        .unwrap();
    let counted = within(Duration::from_secs(3), || {
        let n = view.counts();
        n.malformed >= before.malformed + 2 && n.unknown > before.unknown
    })
    .await;
    assert!(counted.is_some(), "{before:?} -> {:?}", view.counts());
    assert_eq!(ids(&view), ["edge-a"], "no report made up an edge");

    drop(a_reports);
    a_task.abort();
    for sess in [c_session, robot_session, b_session, a_session] {
        sess.close().await.unwrap();
    }
}
