//! End to end in one process: an edge service and a robot client over shaped in-process links,
//! real models, every method; outputs compared with the unsplit model; the edge killed and
//! restarted under a stream of inferences.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{MODEL, Setup, assert_exact, edge, edge_slowed, setup, tempdir};

use std::time::Duration;

use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::local::Switchboard;
use lop_runtime::{ShapedConfig, Trace};

async fn client(s: &Setup, board: &Switchboard, mbps: f64) -> RobotClient<lop_runtime::local::LocalConnector> {
    let link = ShapedConfig::symmetric(Trace::constant(mbps).unwrap()).with_latency(Duration::from_millis(1));
    let mut opts = ClientOptions::new("robot-1", "resnet18");
    opts.retry_interval = Duration::from_millis(50);
    opts.hello_timeout = Duration::from_secs(5);
    // Exactness and reconnection must not hinge on timing: under CI load the real run can take
    // several times the synthetic profiles' prediction, so the deadline gets generous slack.
    opts.deadline_slack = Duration::from_secs(3);
    client_with(s, board, link, opts).await
}

/// A robot client of `MODEL` over `link` with `opts`.
async fn client_with(
    s: &Setup,
    board: &Switchboard,
    link: ShapedConfig,
    opts: ClientOptions,
) -> RobotClient<lop_runtime::local::LocalConnector> {
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    RobotClient::new(board.connector(link), opts, worker, loaded.meta, &loaded.hash, s.table.clone()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_and_bucket_gives_the_unsplit_output() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let board = Switchboard::new();
    let edge = board.plug(edge(&s, &dir).await);
    let mut c = client(&s, &board, 200.0).await;
    assert!(c.connected());
    let mut remote = 0;
    for method in ["lop", "server-only", "layer-partition", "robot-only"] {
        c.set_method(method);
        for bw in [2.0, 8.0, 30.0] {
            let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), bw).await.unwrap();
            assert!(!r.stats.fallback, "{method} at {bw}: {:?}", r.stats.fallback_reason);
            assert_exact(&r.outputs, &s.whole, &format!("{method} at {bw} MB/s"));
            if r.stats.bytes_up > 0 {
                remote += 1;
                assert!(r.stats.bytes_down > 0, "{method}: outputs come back");
            }
        }
    }
    assert!(remote >= 6, "server-only and lop used the link: {remote}");
    let counts = edge.service().counts();
    assert_eq!(counts.dropped.total(), 0, "{counts:?}");
    assert_eq!(counts.done, counts.inferences);
    assert_eq!(c.dropped().total(), 0);
}

/// The memory layout is each side's own: a robot and an edge in different layouts (their
/// profiles' choices) still give the unsplit output, bands crossing as NCHW bytes both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robot_and_edge_in_different_memory_layouts_give_the_unsplit_output() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    use lop::graph::Layout;
    let s = setup();
    for (robot_layout, edge_layout) in [(Layout::Nchw, Layout::ChannelsLast), (Layout::ChannelsLast, Layout::Nchw)] {
        let dir = tempdir().join(edge_layout.name());
        let board = Switchboard::new();
        let mut opts = common::edge_options(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), 1.0);
        opts.models[0].load.layout = edge_layout;
        let edge = board.plug(lop_runtime::edge::EdgeService::start(opts).await.unwrap());
        let load = lop::model::LoadOptions { layout: robot_layout, ..Default::default() };
        let (worker, loaded) = Worker::spawn("robot", move || lop::model::load(MODEL, &load)).await.unwrap();
        assert_eq!(worker.call(|g| g.layout()).await.unwrap(), robot_layout, "the robot's model loads in its layout");
        let link = ShapedConfig::symmetric(Trace::constant(200.0).unwrap()).with_latency(Duration::from_millis(1));
        let mut copts = ClientOptions::new("robot-1", "resnet18");
        copts.deadline_slack = Duration::from_secs(3);
        let mut c = RobotClient::new(board.connector(link), copts, worker, loaded.meta, &loaded.hash, s.table.clone()).await.unwrap();
        for (method, bw) in [("lop", 2.0), ("lop", 8.0), ("server-only", 8.0)] {
            c.set_method(method);
            let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), bw).await.unwrap();
            let what = format!("robot {robot_layout:?}, edge {edge_layout:?}, {method} at {bw} MB/s");
            assert!(!r.stats.fallback && r.stats.bytes_up > 0 && r.stats.bytes_down > 0, "{what}: {:?}", r.stats.fallback_reason);
            assert_exact(&r.outputs, &s.whole, &what);
        }
        assert_eq!(edge.service().counts().done, 3);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_killed_and_restarted_loses_nothing() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let board = Switchboard::new();
    let first = board.plug(edge(&s, &dir).await);
    let mut c = client(&s, &board, 200.0).await;
    c.set_method("server-only");
    let mut fallbacks = 0;
    let mut after_restart_remote = 0;
    let mut current = Some(first);
    for i in 0..24 {
        if i == 6 {
            current.take().unwrap().kill();
        }
        if i == 14 {
            current = Some(board.plug(edge(&s, &dir).await));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
        assert_exact(&r.outputs, &s.whole, &format!("inference {i}"));
        fallbacks += usize::from(r.stats.fallback);
        if (6..14).contains(&i) {
            assert!(r.stats.fallback, "inference {i} ran while the edge was down");
        }
        if i >= 18 && !r.stats.fallback {
            after_restart_remote += 1;
        }
    }
    assert!(fallbacks >= 8, "{fallbacks}");
    assert!(after_restart_remote >= 4, "reconnected after the restart: {after_restart_remote}");
}

/// First contact with nothing copied: an edge that has never seen this robot gets its profile in
/// Hello. A profile that is not JSON, not a robot's, of another model or under another hash is
/// refused with the reason (and the edge keeps serving); the good one makes the edge build the
/// table in the background (Reject `Planning` meanwhile), the robot runs alone, marked as such,
/// and switches to split inference once the table is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_robot_sends_its_profile_and_is_planned_for() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    use lop_msgs::Frame;
    use lop_msgs::protocol::{DType, Hello, RejectReason};
    use lop_runtime::{LinkRx, LinkTx};

    let s = setup();
    let dir = tempdir();
    // No robot profile known; a Hello waits at most 1 ms for its table. Raw Hellos with bad
    // profiles: each refused with its reason, its session then ended by the edge.
    let (svc, link, tx, rx) = common::edge_without_profiles(&s, &dir).await;
    drop((tx, rx));
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let hello = |profile: Vec<u8>, hash: &str| Hello {
        robot_id: "raw".into(),
        model_id: "resnet18".into(),
        model_sha256: lop_runtime::plans::digest(&g.content_hash().unwrap()).unwrap(),
        robot_profile_hash: lop_runtime::plans::digest(hash).unwrap(),
        planner_hash: lop_runtime::plans::digest(&s.spec.hash()).unwrap(),
        input_dtype: DType::U8,
        input_shape: vec![1, 3, 224, 224],
        robot_profile: profile,
    };
    let json = |p: &lop::profile::Profile| serde_json::to_vec(p).unwrap();
    let mut other_model = s.robot.clone();
    other_model.model_hash = "0".repeat(64);
    let cases = [
        (hello(Vec::new(), &s.robot.hash()), RejectReason::NoTable, "carries none"),
        (hello(b"{\"version\": oops".to_vec(), &s.robot.hash()), RejectReason::BadInput, "not a profile"),
        (hello(json(&s.server), &s.server.hash()), RejectReason::BadInput, "not a robot's"),
        (hello(json(&other_model), &other_model.hash()), RejectReason::BadInput, "not of this model"),
        (hello(json(&s.robot), &s.server.hash()), RejectReason::BadInput, "the Hello names"),
    ];
    for (h, reason, words) in cases {
        let (tx, mut rx) = common::raw_session(&svc, link.clone());
        tx.send_frame(&Frame::Hello(h)).await.unwrap();
        let b = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.unwrap().unwrap().unwrap();
        match lop_msgs::protocol::decode(&b).unwrap() {
            Frame::Reject(r) => assert!(r.reason == reason && r.text.contains(words), "expected {reason:?} '{words}': {r:?}"),
            f => panic!("expected Reject, got {f:?}"),
        }
        let closed = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await;
        assert!(matches!(closed, Ok(Ok(None))), "a refused session ends at once: {closed:?}");
    }

    // A real client with its profile: alone first, split once the edge has planned.
    let board = Switchboard::new();
    let _edge = board.plug(svc.clone());
    let t_hello = std::time::Instant::now();
    let mut c = common::client_with_profile(&board, link, "robot-new", s.robot.clone(), s.table.clone()).await;
    let first_hello = t_hello.elapsed();
    assert!(!c.connected(), "the first Hello cannot find a table ready within 1 ms");
    let (mut alone, mut split) = (0, 0);
    let started = std::time::Instant::now();
    for i in 0..400 {
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 8.0).await.unwrap();
        assert_exact(&r.outputs, &s.whole, &format!("inference {i}"));
        if r.stats.bytes_up > 0 {
            assert!(!r.stats.fallback, "{:?}", r.stats.fallback_reason);
            split += 1;
            if split == 3 {
                break;
            }
        } else {
            assert!(split == 0, "inference {i} ran alone after split inference had started");
            assert!(r.stats.fallback && r.stats.fallback_reason.is_some(), "running alone is marked: {:?}", r.stats);
            alone += 1;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "no split inference within 120 s ({alone} alone)");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(alone >= 1 && split == 3, "alone {alone}, split {split}");
    let counts = svc.counts();
    assert!(counts.sessions >= 1 && counts.rejected >= 6, "{counts:?}");
    eprintln!(
        "first contact: {alone} inferences alone while the edge planned, split inference {:.2} s after the first Hello; {counts:?}",
        started.elapsed().as_secs_f64() + first_hello.as_secs_f64()
    );
}

/// A robot configured with another server profile than the edge's (the synthetic default
/// against an edge that measured its own): Welcome names the edge's table and carries its
/// server profile; the robot runs alone, marked, while it plans that table, then connects and
/// runs split inference exactly. Without a planner it stays alone (never a wrong plan).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_robot_with_another_server_profile_plans_the_edges_table() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let svc = edge(&s, &dir).await;
    let board = Switchboard::new();
    let _edge = board.plug(svc.clone());
    let link = ShapedConfig::symmetric(Trace::constant(1000.0).unwrap());
    // The robot's own idea of the server: 3x slower than the edge's profile says.
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let slower =
        lop::profile::SyntheticCosts { server_s_per_byte: 3.0 * lop::profile::SYNTHETIC.server_s_per_byte, ..lop::profile::SYNTHETIC };
    let guessed = slower.profile(&g, lop::plan::Side::Server).unwrap();
    let (own_table, _) = lop::planner::table::ScheduleTable::build(&g, &s.robot, &guessed, &s.spec, 1).unwrap();
    assert_ne!(own_table.hash, s.table.hash, "the two tables must differ for this test");

    // Without a planner: alone, every time.
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let mut opts = ClientOptions::new("robot-guess", "resnet18");
    opts.retry_interval = Duration::from_millis(50);
    opts.robot_profile = Some(s.robot.clone());
    let mut c =
        RobotClient::new(board.connector(link.clone()), opts.clone(), worker, loaded.meta, &loaded.hash, own_table.clone()).await.unwrap();
    for i in 0..5 {
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 8.0).await.unwrap();
        assert_exact(&r.outputs, &s.whole, &format!("alone {i}"));
        assert!(r.stats.bytes_up == 0 && r.stats.fallback, "without a planner the robot stays alone: {:?}", r.stats);
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    drop(c);

    // With one: alone while it plans, then split on the edge's table.
    let (robot, spec, planned) = (s.robot.clone(), s.spec.clone(), std::sync::Arc::new(std::sync::Mutex::new(Vec::new())));
    let seen = planned.clone();
    opts.replan = Some(lop_runtime::client::Replanner(std::sync::Arc::new(move |server: lop::profile::Profile| {
        seen.lock().unwrap().push(server.hash());
        let g = lop::model::load(MODEL, &Default::default())?;
        Ok(lop::planner::table::ScheduleTable::build(&g, &robot, &server, &spec, 1)?.0)
    })));
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let mut c = RobotClient::new(board.connector(link), opts, worker, loaded.meta, &loaded.hash, own_table).await.unwrap();
    assert!(!c.connected(), "the tables differ at first");
    let (mut alone, mut split) = (0, 0);
    let started = std::time::Instant::now();
    while split < 3 {
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 8.0).await.unwrap();
        assert_exact(&r.outputs, &s.whole, &format!("inference {}", alone + split));
        if r.stats.bytes_up > 0 {
            assert!(!r.stats.fallback, "{:?}", r.stats.fallback_reason);
            split += 1;
        } else {
            assert!(split == 0 && r.stats.fallback, "alone only before the switch, and marked: {:?}", r.stats);
            alone += 1;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "no split inference within 120 s ({alone} alone)");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(c.book().table_hash.to_hex(), s.table.hash, "the robot runs the edge's table");
    assert_eq!(*planned.lock().unwrap(), vec![s.server.hash()], "planned once, for the edge's server profile");
    eprintln!("replanned for the edge: {alone} inferences alone, split {:.2} s after the first Hello", started.elapsed().as_secs_f64());
}

/// Raw frames at the edge: a bad Hello is rejected with its reason; malformed, truncated,
/// oversized, duplicated, stale and out-of-plan frames are dropped and counted; the session and
/// a real client keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_are_dropped_and_counted() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    use lop_msgs::Frame;
    use lop_msgs::protocol::{Band, BandHeader, Cancel, DType, Hello, Start};
    use lop_runtime::{LinkRx, LinkTx};

    let s = setup();
    let dir = tempdir();
    let svc = edge(&s, &dir).await;
    let link = ShapedConfig::symmetric(Trace::constant(1000.0).unwrap());
    // A refused Hello ends its session: each refused one gets a session of its own.
    let (tx, mut rx) = common::raw_session(&svc, link.clone());
    let recv = async |rx: &mut lop_runtime::ShapedRx| {
        let b = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.unwrap().unwrap().unwrap();
        lop_msgs::protocol::decode(&b).unwrap()
    };

    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let hash = lop_runtime::plans::digest(&g.content_hash().unwrap()).unwrap();
    let mut hello = Hello {
        robot_id: "raw".into(),
        model_id: "resnet18".into(),
        model_sha256: lop_msgs::Digest([7; 32]),
        robot_profile_hash: lop_runtime::plans::digest(&s.robot.hash()).unwrap(),
        planner_hash: lop_runtime::plans::digest(&s.spec.hash()).unwrap(),
        input_dtype: DType::U8,
        input_shape: vec![1, 3, 320, 320],
        robot_profile: Vec::new(),
    };
    // The served model at a size it is not served at: the reject says which sizes are.
    tx.send_frame(&Frame::Hello(hello.clone())).await.unwrap();
    match recv(&mut rx).await {
        Frame::Reject(r) => {
            assert_eq!(r.reason, lop_msgs::protocol::RejectReason::UnknownModel, "{}", r.text);
            assert!(r.text.contains("[[1, 3, 224, 224]]") && r.text.contains("input_shapes"), "{}", r.text);
        }
        f => panic!("expected Reject, got {f:?}"),
    }
    hello.input_shape = vec![1, 3, 224, 224];
    let (tx, mut rx) = common::raw_session(&svc, link.clone());
    tx.send_frame(&Frame::Hello(hello.clone())).await.unwrap();
    match recv(&mut rx).await {
        Frame::Reject(r) => {
            assert_eq!(r.reason, lop_msgs::protocol::RejectReason::UnknownModel, "{}", r.text);
            assert!(!r.text.contains("input_shapes"), "the size is served: no size hint: {}", r.text);
        }
        f => panic!("expected Reject, got {f:?}"),
    }
    hello.model_sha256 = hash;
    let (tx, mut rx) = common::raw_session(&svc, link);
    tx.send_frame(&Frame::Hello(hello)).await.unwrap();
    let Frame::Welcome(w) = recv(&mut rx).await else { panic!("expected Welcome") };
    assert_eq!(w.table_hash, lop_runtime::plans::digest(&s.table.hash).unwrap());

    // A server-only plan: the robot sends the input, rows 0..224 of node 0.
    let entry = s.table.entries.last().unwrap();
    let plan = entry.plan_of("server-only").unwrap();
    let start = |id| {
        Frame::Start(Start {
            inference_id: id,
            bucket: 3,
            plan_hash: lop_runtime::plans::digest(&plan.hash()).unwrap(),
            input_stamp_ns: 0,
            deadline_ns: 2_000_000_000,
            due_ns: 0,
            path: Vec::new(),
        })
    };
    let band = |id, rows: std::ops::Range<u32>| {
        let n = rows.len();
        Frame::Band(Band {
            header: BandHeader {
                inference_id: id,
                tensor_id: 0,
                row_start: rows.start,
                row_end: rows.end,
                row_axis: 2,
                dtype: DType::U8,
                shape: vec![1, 3, n as u32, 224],
                coding: Default::default(),
            },
            payload: vec![0; 3 * n * 224],
        })
    };
    tx.send_frame(&start(5)).await.unwrap();
    tx.send(b"not a frame at all".to_vec()).await.unwrap(); // malformed
    let mut truncated = band(5, 0..10).encode().unwrap();
    truncated.truncate(40);
    tx.send(truncated).await.unwrap(); // malformed (truncated)
    let mut oversized = band(5, 0..10).encode().unwrap();
    oversized[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    tx.send(oversized).await.unwrap(); // oversized
    tx.send_frame(&band(5, 0..10)).await.unwrap(); // out of plan (the plan sends 0..224)
    tx.send_frame(&band(4, 0..224)).await.unwrap(); // stale inference
    tx.send_frame(&start(3)).await.unwrap(); // stale Start
    tx.send_frame(&Frame::Cancel(Cancel { inference_id: 4 })).await.unwrap(); // stale Cancel: not the current inference
    tx.send_frame(&band(5, 0..224)).await.unwrap(); // the real one
    tx.send_frame(&band(5, 0..224)).await.unwrap(); // duplicate
    // The edge computes the whole model and sends the output back, then Done.
    let mut got_output = false;
    let mut got_done = false;
    while !(got_output && got_done) {
        match recv(&mut rx).await {
            Frame::Band(b) => got_output |= b.header.inference_id == 5,
            Frame::Done(d) => got_done |= d.inference_id == 5,
            f => panic!("unexpected {f:?}"),
        }
    }
    let c = svc.counts().dropped;
    assert_eq!((c.malformed, c.oversized, c.out_of_plan, c.stale, c.duplicate), (2, 1, 1, 3, 1), "{c:?}");
    assert_eq!(svc.counts().cancelled, 0, "a Cancel of another inference stops nothing");
}

/// An edge whose replica is busy with an inference whose measured time leaves a second one no
/// chance to make its deadline refuses that one at once (Error `Overloaded`): its robot finishes
/// it alone, exactly, without waiting for the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overloaded_edge_refuses_at_once_and_the_robot_finishes_alone() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let board = Switchboard::new();
    // 30x slower than this machine: each inference holds the replica for a few hundred ms.
    let edge = board.plug(edge_slowed(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), 30.0).await);
    let robot = async |id: &str, slack: Duration| {
        let (worker, loaded) = Worker::spawn(id, || lop::model::load(MODEL, &Default::default())).await.unwrap();
        let link = ShapedConfig::symmetric(Trace::constant(200.0).unwrap()).with_latency(Duration::from_millis(1));
        let mut opts = ClientOptions::new(id, "resnet18");
        opts.hello_timeout = Duration::from_secs(5);
        opts.deadline_factor = 1.0;
        opts.deadline_slack = slack;
        opts.method = "server-only".into();
        RobotClient::new(board.connector(link), opts, worker, loaded.meta, &loaded.hash, s.table.clone()).await.unwrap()
    };
    let mut patient = robot("patient", Duration::from_secs(30)).await;
    let mut hurried = robot("hurried", Duration::from_millis(150)).await;
    let inputs = || s.inputs.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
    // One inference measures the slowed server (its mean server time replaces the profile's).
    let first = patient.infer(inputs(), 30.0).await.unwrap();
    assert!(!first.stats.fallback, "{:?}", first.stats.fallback_reason);
    let (a, b) = tokio::join!(patient.infer(inputs(), 30.0), async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let t0 = std::time::Instant::now();
        (hurried.infer(inputs(), 30.0).await.unwrap(), t0.elapsed())
    });
    let (a, (b, b_took)) = (a.unwrap(), b);
    assert!(!a.stats.fallback, "the inference already running finishes on the edge: {:?}", a.stats.fallback_reason);
    assert_exact(&a.outputs, &s.whole, "the patient robot");
    assert!(b.stats.fallback, "the hurried robot's inference was not refused");
    let reason = b.stats.fallback_reason.clone().unwrap_or_default();
    assert!(reason.contains("Overloaded") && reason.contains("ahead"), "{reason}");
    assert_exact(&b.outputs, &s.whole, "the refused inference, finished by the robot");
    assert!(b_took < Duration::from_secs_f64(a.stats.total_s), "refused after {b_took:?}, the edge's took {} s", a.stats.total_s);
    let counts = edge.service().counts();
    assert_eq!(counts.overloaded, 1, "{counts:?}");
    assert_eq!(counts.inferences, 2, "a refused inference is not started: {counts:?}");
}

/// Four robots with different frames queue behind a busy replica of an edge that batches: their
/// inferences run as one batch, and each robot gets its own frame's unsplit output, for
/// server-only plans and for split plans (bands both ways while the batch runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inferences_of_several_robots_run_as_one_batch_each_exact() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    let board = Switchboard::new();
    let mut opts = common::edge_options(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), 8.0);
    // A generous straggler wait: on a loaded 2-core machine one robot's bands can come seconds
    // after the others', and this test is about each member's exact output, not about dropping
    // stragglers (`lop_runtime::exec::batch`'s own test drops one).
    opts.batching = lop_runtime::edge::Batching { max: 4, straggler_wait: Duration::from_secs(10) };
    let edge = board.plug(lop_runtime::edge::EdgeService::start(opts).await.unwrap());
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let frames: Vec<Vec<tch::Tensor>> = (0..5).map(|k| lop::exec::synthetic_inputs(&g, 100 + k).unwrap()).collect();
    let wholes: Vec<Vec<tch::Tensor>> = frames.iter().map(|f| lop::exec::run_whole(&g, f).unwrap().outputs).collect();
    let mut robots = Vec::new();
    for k in 0..5 {
        let id = format!("robot-{k}");
        let (worker, loaded) = Worker::spawn(&id, || lop::model::load(MODEL, &Default::default())).await.unwrap();
        let link = ShapedConfig::symmetric(Trace::constant(200.0).unwrap()).with_latency(Duration::from_millis(1));
        let mut o = ClientOptions::new(&id, "resnet18");
        o.hello_timeout = Duration::from_secs(5);
        o.deadline_slack = Duration::from_secs(30);
        robots.push(RobotClient::new(board.connector(link), o, worker, loaded.meta, &loaded.hash, s.table.clone()).await.unwrap());
    }
    let mut batched_before = 0;
    for method in ["server-only", "lop"] {
        for r in &mut robots {
            r.set_method(method);
        }
        let [r0, r1, r2, r3, r4] = robots.as_mut_slice() else { unreachable!() };
        let frame = |k: usize| frames[k].iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
        // Robot 0 holds the replica; robots 1-4 start meanwhile and wait for it together.
        let (a, (b, c, d, e)) = tokio::join!(r0.infer(frame(0), 30.0), async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tokio::join!(r1.infer(frame(1), 30.0), r2.infer(frame(2), 30.0), r3.infer(frame(3), 30.0), r4.infer(frame(4), 30.0))
        });
        for (k, r) in [a, b, c, d, e].into_iter().enumerate() {
            let r = r.unwrap();
            assert!(!r.stats.fallback, "{method}, robot {k}: {:?}", r.stats.fallback_reason);
            assert_exact(&r.outputs, &wholes[k], &format!("{method}, robot {k}"));
        }
        let counts = edge.service().counts();
        assert!(counts.batches >= 1 && counts.batched - batched_before >= 3, "{method}: the waiting robots were not batched: {counts:?}");
        assert_eq!(counts.done, counts.inferences, "{counts:?}");
        batched_before = counts.batched;
    }
}

/// The edge's Done says how long the upload took as the edge saw it; where the robot sent its
/// bands at once that is the link's rate (what a fleet robot keeps per edge), queueing on the edge
/// excluded: here the edge is 10x slowed, so the robot's own wait says nothing of the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upload_the_edge_saw_reads_as_the_links_rate() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    // u8 input of 150 KB: above the 64 KiB an upload needs to be read as a rate.
    let s = setup();
    let dir = tempdir();
    let board = Switchboard::new();
    let _edge = board.plug(edge_slowed(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), 10.0).await);
    let mbps = 16.0;
    let link = ShapedConfig::symmetric(Trace::constant(mbps).unwrap()).with_latency(Duration::from_millis(5));
    let mut opts = ClientOptions::new("robot-1", "resnet18");
    opts.hello_timeout = Duration::from_secs(5);
    opts.deadline_slack = Duration::from_secs(10);
    let mut c = client_with(&s, &board, link, opts).await;
    c.set_method("server-only");
    let mut rates = Vec::new();
    for _ in 0..3 {
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 2.0).await.unwrap();
        assert!(!r.stats.fallback, "{:?}", r.stats.fallback_reason);
        assert_exact(&r.outputs, &s.whole, "server-only");
        let wait_mbps = r.stats.bytes_up as f64 * 8.0 / r.stats.robot_wait_s / 1e6;
        // The Done trails the last band; the inference waited for it, so the rate is there.
        let rate = c.take_upload_mbps().unwrap_or_else(|| panic!("no upload rate measured: {:?}", r.stats));
        eprintln!("upload rate: {rate:.2} Mbit/s (link {mbps}); bytes over the robot's wait: {wait_mbps:.2}");
        rates.push(rate);
        assert!(wait_mbps < 0.8 * mbps, "the slowed edge's compute should show in the robot's wait: {wait_mbps:.2}");
    }
    for rate in rates {
        assert!((0.7 * mbps..=1.3 * mbps).contains(&rate), "measured {rate:.2} Mbit/s on a {mbps} Mbit/s link");
    }
    assert_eq!(c.take_upload_mbps(), None, "each measurement is taken once");
}

/// A frame's deadline binds the robot's wait, not the answer: past it the robot computes the
/// edge's bands itself rather than wait for them, while the edge goes on, and each band comes
/// from whichever side has it first. An edge 1x or 3x slowed still answers a robot slowed 20x
/// (the robot keeps its own planned part going, so the edge is not starved); a 40x slowed edge
/// loses to an undilated robot. Exact either way, server-only and LOP plans alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_deadline_the_robot_races_the_edge_and_the_first_answer_wins() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    use lop_runtime::client::{Hop, Hopped};
    let s = setup();
    let frame = || s.inputs.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
    let due = Duration::from_millis(5);
    for method in ["server-only", "lop"] {
        // (edge dilation, robot dilation, whether the edge should answer)
        for (edge_dilation, robot_dilation, edge_wins) in [(1.0, 20.0, true), (3.0, 20.0, true), (40.0, 1.0, false)] {
            let dir = tempdir();
            let board = Switchboard::new();
            let edge = board.plug(edge_slowed(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), edge_dilation).await);
            let link = ShapedConfig::symmetric(Trace::constant(1000.0).unwrap()).with_latency(Duration::from_millis(1));
            let mut opts = ClientOptions::new("robot-1", "resnet18");
            opts.hello_timeout = Duration::from_secs(5);
            opts.deadline_slack = Duration::from_secs(20);
            opts.dilation = robot_dilation;
            let mut c = client_with(&s, &board, link, opts).await;
            c.set_method(method);
            // Warm both sides up (first runs are slow: a 40x edge's first frame can take tens of
            // seconds beside other tests), waiting for the edge as long as it takes, then the
            // timed frame.
            let warm = Hop { budget: Some(Duration::from_secs(300)), ..Hop::default() };
            let Hopped::Done(w) = c.infer_hop(frame(), 30.0, &warm).await.unwrap() else { panic!("forwarded by a lone edge") };
            // The race below is only a race if the robot still waits for the edge: a warm-up
            // that outlived its budget would leave the edge marked silent, and the timed frame
            // would run on the robot without trying the edge.
            assert!(
                !w.stats.fallback && c.edge_silent_for().is_none(),
                "precondition: the warm-up frame must be answered by the edge, and the edge not marked silent \
                 (fallback: {:?}, silent for {:?}, took {:.1} s)",
                w.stats.fallback_reason,
                c.edge_silent_for(),
                w.stats.total_s
            );
            let hop = Hop { due: Some(due), ..Hop::default() };
            let Hopped::Done(r) = c.infer_hop(frame(), 30.0, &hop).await.unwrap() else { panic!("forwarded by a lone edge") };
            let what = format!("{method}: edge {edge_dilation}x, robot {robot_dilation}x");
            assert_exact(&r.outputs, &s.whole, &what);
            let took = r.stats.total_s;
            eprintln!("race: {what}: {took:.3} s, {:?}", r.stats.fallback_reason);
            assert!(took > due.as_secs_f64(), "{what}: answered before the deadline: the race was not run ({took:.3} s)");
            if edge_wins {
                assert!(!r.stats.fallback, "{what}: the edge's late answer should win: {:?}", r.stats.fallback_reason);
                assert!(took < 1.0, "{what}: the edge was held up ({took:.3} s)");
            } else {
                let why = r.stats.fallback_reason.clone().unwrap_or_default();
                assert!(r.stats.fallback && why.contains("computed on the robot"), "{what}: the robot should win ({took:.3} s): {why}");
            }
            // The edge was told the frame's deadline apart from its budget: it served the frame
            // (nothing queued ahead) rather than refusing it.
            assert_eq!(edge.service().counts().overloaded, 0, "{what}");
            // A robot that won the race cancels the frame, and the edge stops computing it
            // rather than finish a frame nobody waits for (its replica serves others sooner).
            let waited = std::time::Instant::now();
            let counts = loop {
                let c = edge.service().counts();
                if c.done + c.aborted >= 2 || waited.elapsed() > Duration::from_secs(10) {
                    break c;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            if edge_wins {
                assert_eq!((counts.cancelled, counts.done), (0, 2), "{what}: {counts:?}");
            } else {
                assert_eq!((counts.cancelled, counts.aborted, counts.done), (1, 1, 1), "{what}: {counts:?}");
                eprintln!("race: {what}: cancelled {:.3} s after the robot's answer", waited.elapsed().as_secs_f64());
            }
        }
    }
}

/// Plans that line each op's last cut up with its producer's ([`lop::plan::Plan::last_cut_aligned`])
/// and taper their chunks ([`lop::plan::Plan::taper`]) cut their chunks alike on both sides:
/// random band layouts with both set, in place of the table's LOSS plans (robot bands,
/// overlaps, 1-3 chunks a side), give the unsplit output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_with_last_cuts_aligned_and_tapered_chunks_give_the_unsplit_output() {
    let _heavy = crate::HEAVY.lock().await;
    let mut s = setup();
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    for (b, e) in s.table.entries.iter_mut().enumerate().filter(|(_, e)| e.bucket_mb_s > 0.0) {
        let mut p = lop::plan::Plan::random(&g, s.table.spec.planner.units, 300 + b as u64);
        p.last_cut_aligned = true;
        p.taper = lop::plan::Taper { head: 1 + b as u8 % 3, tail: 1 + (b as u8 + 1) % 3 };
        e.plan_hash = p.hash();
        e.plan = p;
        e.method = "lop".into();
    }
    serve_edited_table(&mut s, "last cuts aligned, chunks tapered").await;
}

/// Serves `s.table`, its plans edited, from the edge's plan cache, and checks that LOP at 2, 8
/// and 30 MB/s gives the unsplit output, with something sent up and no frame dropped.
async fn serve_edited_table(s: &mut Setup, what: &str) {
    s.table.hash = s.table.content_hash();
    // The edge takes the same table from its plan cache.
    let dir = tempdir();
    std::fs::create_dir_all(&dir).unwrap();
    s.table.save(&lop::planner::table::cache_path(&dir, &s.table.key)).unwrap();
    let board = Switchboard::new();
    let edge = board.plug(edge(s, &dir).await);
    let mut c = client(s, &board, 200.0).await;
    assert!(c.connected(), "the edge should serve the same table");
    c.set_method("lop");
    for bw in [2.0, 8.0, 30.0] {
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), bw).await.unwrap();
        assert!(!r.stats.fallback, "at {bw}: {:?}", r.stats.fallback_reason);
        assert!(r.stats.bytes_up > 0, "at {bw}: something goes up");
        assert_exact(&r.outputs, &s.whole, &format!("{what}, at {bw} MB/s"));
    }
    assert_eq!(edge.service().counts().dropped.total(), 0);
}

/// Plans whose ops are cut by hand ([`lop::plan::Plan::server_cuts`], what the planner's
/// release cuts write) cut their chunks alike on both sides: server-only plans with every local
/// op cut at random rows, in place of the table's LOSS plans, give the unsplit output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_with_ops_cut_by_hand_give_the_unsplit_output() {
    let _heavy = crate::HEAVY.lock().await;
    let mut s = setup();
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let mut rng = lop::Rng::new(1);
    let mut cut = 0;
    for e in s.table.entries.iter_mut().filter(|e| e.bucket_mb_s > 0.0) {
        let mut p = lop::plan::Plan::server_only(&g, s.table.spec.planner.units);
        for id in (0..g.nodes.len()).filter(|&id| g.is_op(id) && g.locality(id).is_local()) {
            let rows = g.nodes[id].info.rows();
            if rows < 2 {
                continue;
            }
            let mut ends: Vec<usize> = (0..rng.below(4)).map(|_| 1 + rng.below(rows - 1)).collect();
            ends.push(rows);
            ends.sort_unstable();
            ends.dedup();
            p.splits[id].server_chunks = ends.len();
            cut += usize::from(ends.len() > 1);
            p.server_cuts.push(lop::plan::OpCuts { node: id, ends });
        }
        p.validate(&g).unwrap();
        e.plan_hash = p.hash();
        e.plan = p;
        e.method = "lop".into();
    }
    assert!(cut > 0, "some op is cut in two or more chunks");
    serve_edited_table(&mut s, "ops cut by hand").await;
}

/// A table whose plan does not fit the model is refused by the robot before it connects, and
/// the error names the bucket and method that use the plan and what is wrong with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_does_not_fit_is_refused_naming_its_bucket() {
    // Light, but it loads models: not beside a test that measures this process's memory
    // (profile_flood.rs).
    let _heavy = crate::HEAVY.lock().await;
    let mut s = setup();
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let units = s.table.spec.planner.units;
    let (bucket, e) = s.table.entries.iter_mut().enumerate().find(|(_, e)| e.bucket_mb_s > 0.0).unwrap();
    let id = (0..g.nodes.len()).find(|&id| g.is_op(id) && g.nodes[id].info.rows() > 4).unwrap();
    let mut p = lop::plan::Plan::server_only(&g, units);
    // Two chunk ends for an op the plan computes in one chunk.
    p.server_cuts = vec![lop::plan::OpCuts { node: id, ends: vec![2, g.nodes[id].info.rows()] }];
    e.plan_hash = p.hash();
    e.plan = p;
    e.method = "lop".into();
    s.table.hash = s.table.content_hash();
    let board = Switchboard::new();
    let link = ShapedConfig::symmetric(Trace::constant(8.0).unwrap());
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let opts = ClientOptions::new("robot-1", "resnet18");
    let err = match RobotClient::new(board.connector(link), opts, worker, loaded.meta, &loaded.hash, s.table.clone()).await {
        Ok(_) => panic!("a plan that does not fit must be refused"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains(&format!("bucket {bucket} (")) && err.contains("lop") && err.contains("2 server cut ends for 1"), "{err}");
}

/// A paced robot ([`ClientOptions::paced`]) makes every kernel last what its robot profile
/// predicts, scaled to the dilation: robot-only against a profile of 4 ms kernels at 2x takes at
/// least twice the profile's whole-model time (stretching measured kernels 2x would take about
/// twice this machine's compute, far less), and the outputs stay the unsplit model's. Pacing
/// without a robot profile is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_robot_runs_as_slow_as_its_profile_says() {
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let board = Switchboard::new();
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let slow = lop::profile::SyntheticCosts { kernel_s: 4e-3, ..lop::profile::SYNTHETIC };
    let profile = slow.profile(&g, lop::plan::Side::Robot).unwrap();
    let fits = profile.fits(&g).unwrap();
    let least_s: f64 = (0..g.nodes.len()).filter(|&i| g.is_op(i)).map(|i| 2.0 * fits[i].time(g.nodes[i].info.rows())).sum();
    let link = ShapedConfig::symmetric(Trace::constant(1000.0).unwrap());
    let mut opts = ClientOptions::new("robot-paced", "resnet18");
    opts.method = "robot-only".into();
    opts.dilation = 2.0;
    opts.paced = true;
    opts.robot_profile = Some(profile);
    // The robot's table must be planned from the profile it is paced by.
    let (table, _) = lop::planner::table::ScheduleTable::build(&g, opts.robot_profile.as_ref().unwrap(), &s.server, &s.spec, 1).unwrap();
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let mut c =
        RobotClient::new(board.connector(link.clone()), opts.clone(), worker, loaded.meta, &loaded.hash, table.clone()).await.unwrap();
    let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 8.0).await.unwrap();
    assert_exact(&r.outputs, &s.whole, "paced robot-only");
    assert!(r.stats.total_s >= least_s, "paced: {:.3} s, the profile says at least {least_s:.3} s", r.stats.total_s);

    opts.robot_profile = None;
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let err = RobotClient::new(board.connector(link), opts, worker, loaded.meta, &loaded.hash, table).await.err();
    assert!(err.is_some_and(|e| e.to_string().contains("needs its robot profile")), "pacing without a profile must be refused");
}

/// One edge, two devices (CPU replica groups standing in for GPUs): every model has a replica on
/// each, and an inference goes to the one that will finish it first. Of equal speed, concurrent
/// robots spread over both; with the second four times faster, two at once both go to it (the
/// second would wait one inference there, a quarter of one on the first). Every output exact;
/// a device listed twice or of no speed is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_with_two_devices_sends_each_inference_where_it_finishes_first() {
    let _heavy = crate::HEAVY.lock().await;
    use lop_runtime::edge::{EdgeService, ServerDevice};
    let s = setup();
    let dir = tempdir();
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let frames: Vec<Vec<tch::Tensor>> = (0..2).map(|k| lop::exec::synthetic_inputs(&g, 300 + k).unwrap()).collect();
    let wholes: Vec<Vec<tch::Tensor>> = frames.iter().map(|f| lop::exec::run_whole(&g, f).unwrap().outputs).collect();
    let cpu = |name: &str, speed: f64| ServerDevice { name: name.into(), device: tch::Device::Cpu, speed };
    for (speeds, expect) in [([1.0, 1.0], ["cpu:0", "cpu:1"]), ([1.0, 4.0], ["cpu:1", "cpu:1"])] {
        let board = Switchboard::new();
        let mut opts = common::edge_options(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), 6.0);
        opts.devices = vec![cpu("cpu:0", speeds[0]), cpu("cpu:1", speeds[1])];
        let edge = board.plug(EdgeService::start(opts).await.unwrap());
        let loads = edge.service().device_loads();
        assert_eq!(loads.iter().map(|d| (d.name.as_str(), d.replicas)).collect::<Vec<_>>(), [("cpu:0", 1), ("cpu:1", 1)]);
        let mut served = edge.service().served();
        let mut robots = Vec::new();
        for k in 0..2 {
            let id = format!("robot-{k}");
            let (worker, loaded) = Worker::spawn(&id, || lop::model::load(MODEL, &Default::default())).await.unwrap();
            let mut o = ClientOptions::new(&id, "resnet18");
            o.hello_timeout = Duration::from_secs(5);
            o.deadline_slack = Duration::from_secs(30);
            o.method = "server-only".into();
            let link = ShapedConfig::symmetric(Trace::constant(200.0).unwrap());
            robots.push(RobotClient::new(board.connector(link), o, worker, loaded.meta, &loaded.hash, s.table.clone()).await.unwrap());
        }
        let [r0, r1] = robots.as_mut_slice() else { unreachable!() };
        let frame = |k: usize| frames[k].iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
        let (a, b) = tokio::join!(r0.infer(frame(0), 30.0), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            r1.infer(frame(1), 30.0).await
        });
        for (k, r) in [a, b].into_iter().enumerate() {
            let r = r.unwrap();
            assert!(!r.stats.fallback, "robot {k}: {:?}", r.stats.fallback_reason);
            assert_exact(&r.outputs, &wholes[k], &format!("speeds {speeds:?}, robot {k}"));
        }
        let mut devices: Vec<String> = Vec::new();
        while let Ok(x) = served.try_recv() {
            devices.push(x.device);
        }
        devices.sort();
        assert_eq!(devices, expect, "speeds {speeds:?}");
    }
    let mut twice = common::edge_options(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), 1.0);
    twice.devices = vec![cpu("cpu:0", 1.0), cpu("cpu:0", 1.0)];
    assert!(EdgeService::start(twice).await.unwrap_err().to_string().contains("listed twice"));
    let mut slow = common::edge_options(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), 1.0);
    slow.devices = vec![cpu("cpu:0", 0.0)];
    assert!(EdgeService::start(slow).await.unwrap_err().to_string().contains("speed"));
}

/// A robot whose edge let a deadline pass with no band back marks it silent, and inferences run
/// alone for a while; `forget_silence`, which a benchmark calls after its untimed warm-up (the
/// first runs of a plan prepare kernels, and on a loaded machine can outlast the deadline), makes
/// the next inference try the edge at once: it waits out its deadline on the edge again, rather
/// than run alone because the edge is silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgotten_silence_sends_the_next_frame_to_the_edge() {
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let frame = || s.inputs.iter().map(|t| t.shallow_clone()).collect::<Vec<_>>();
    let dir = tempdir();
    let board = Switchboard::new();
    // An edge 40x slowed never sends a band within the robot's 1 ms deadline.
    let _edge = board.plug(edge_slowed(&s, &dir, vec![s.robot.clone()], Duration::from_secs(60), 40.0).await);
    let link = ShapedConfig::symmetric(Trace::constant(1000.0).unwrap()).with_latency(Duration::from_millis(1));
    let mut opts = ClientOptions::new("robot-1", "resnet18");
    opts.hello_timeout = Duration::from_secs(5);
    opts.deadline_factor = 0.0;
    opts.deadline_slack = Duration::from_millis(1);
    let mut c = client_with(&s, &board, link, opts).await;
    c.set_method("server-only");
    let first = c.infer(frame(), 30.0).await.unwrap();
    assert_exact(&first.outputs, &s.whole, "the robot's own answer");
    assert!(
        first.stats.fallback_reason.as_deref() == Some("deadline exceeded") && c.edge_silent_for().is_some(),
        "precondition: the first frame ran out its deadline with no band back ({:?}), the edge marked silent",
        first.stats.fallback_reason
    );
    c.forget_silence();
    assert_eq!(c.edge_silent_for(), None);
    let next = c.infer(frame(), 30.0).await.unwrap();
    assert_exact(&next.outputs, &s.whole, "the robot's own answer");
    assert_eq!(next.stats.fallback_reason.as_deref(), Some("deadline exceeded"), "the edge was tried again, not skipped as silent");
}
