//! The real `lop_edge` binary: started on a temporary configuration (zoo:resnet18, synthetic
//! profiles, four buckets, a Zenoh router on a free loopback port); two robots connect over
//! Zenoh and run LOP inferences at once, whose outputs equal the unsplit model's; SIGTERM stops
//! the edge with exit status 0.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::fixture::{RobotSide, robot_side};
use common::{Edge, free_port, fresh_dir};

use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::zenoh_link::ZenohConfig;
use lop_runtime::zenoh_service::ZenohConnector;

async fn infer(
    client: &mut RobotClient<ZenohConnector>,
    inputs: &[tch::Tensor],
    bw: f64,
) -> lop_runtime::Result<lop_runtime::client::Inference> {
    client.infer(inputs.iter().map(|t| t.shallow_clone()).collect(), bw).await
}

/// The value of `key=value` in a log line (to the next space; a string's quotes removed).
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..].split(' ').next().map(|v| v.trim_matches('"'))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lop_edge_serves_exact_inferences_and_exits_cleanly_on_sigterm() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let dir = fresh_dir("lop-edge-e2e");
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let config = dir.join("edge.yaml");
    std::fs::write(
        &config,
        format!(
            "zenoh:\n  listen: [\"{endpoint}\"]\n\
             models:\n  - id: resnet18\n    source: zoo:resnet18\n    server_profile: synthetic\n\
             robot_profiles: robots\ntable_cache: tables\nprofile_cache: profiles\n\
             table:\n  buckets: [0, 2, 8, 30]\n  latency_ms: 1.0\n\
             hello_timeout_s: 60\nshutdown_grace_s: 5\nlog: info,edge_server=debug\n"
        ),
    )
    .unwrap();

    // The robot's side: the same table configuration, its profile in the edge's directory, the
    // table built once into the edge's cache (the edge then loads it).
    let RobotSide { table, inputs, whole, .. } = robot_side(&config, "zoo:resnet18", None, 3, true).unwrap();
    let whole = whole.unwrap();

    let mut edge = Edge::start(&config);

    // Two robots at once, each in its own Zenoh session and edge session.
    let mut clients = Vec::new();
    for name in ["e2e-robot-1", "e2e-robot-2"] {
        let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
        let (worker, loaded) = Worker::spawn(name, || lop::model::load("zoo:resnet18", &Default::default())).await.unwrap();
        let mut opts = ClientOptions::new(name, "resnet18");
        opts.hello_timeout = Duration::from_secs(60);
        // A loaded test machine must not turn a slow inference into a fallback.
        opts.deadline_slack = Duration::from_secs(20);
        let connector = ZenohConnector::new(session.clone(), name);
        let mut client = RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, table.clone()).await.unwrap();
        assert!(client.connected(), "{name} reached lop_edge:\n{}", edge.log.join("\n"));
        client.set_method("lop");
        clients.push((session, client));
    }
    // Split with the edge: each robot sent the edge bands and got the edge's bands back, with
    // no fallback, and has the edge's compute time from its Done (which trails the edge's last
    // band: the robot waits for it a moment when that band was the last thing it waited for).
    // The edge's own log (below) says what it computed too.
    let mut split = 0;
    for bw in [8.0, 30.0] {
        let [(_, a), (_, b)] = &mut clients[..] else { panic!("two clients") };
        let (ra, rb) = tokio::join!(infer(a, &inputs, bw), infer(b, &inputs, bw));
        for r in [ra.unwrap(), rb.unwrap()] {
            assert!(!r.stats.fallback, "lop at {bw} MB/s fell back: {:?}", r.stats.fallback_reason);
            let err = lop::exec::max_rel_err_all(&r.outputs, &whole).unwrap();
            assert!(err <= 1e-5, "lop at {bw} MB/s: relative error {err}");
            assert!(r.stats.server_compute_s.is_some_and(|s| s > 0.0), "lop at {bw} MB/s: no edge compute figure: {:?}", r.stats);
            if r.stats.bytes_up > 0 && r.stats.bytes_down > 0 {
                split += 1;
            }
        }
    }
    assert_eq!(split, 4, "inferences were split with the edge (bands up and down, no fallback)");
    // The edge answers bandwidth probes (lop_bandwidth's active measurements).
    let probe = lop_runtime::bandwidth::probe::probe(&clients[0].0, "robot", 256 << 10, Duration::from_secs(10)).await.unwrap();
    assert!(probe.up_mbps > 0.0 && probe.down_mbps > 0.0, "{probe:?}");
    for (session, client) in clients {
        drop(client);
        session.close().await.unwrap();
    }

    // SIGTERM: a clean exit with status 0, with a per-inference line and the totals logged.
    let pid = i32::try_from(edge.child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = edge.child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    edge.wait_for("\u{0}", Duration::from_secs(2));
    let log = edge.log.join("\n");
    let status = status.unwrap_or_else(|| panic!("lop_edge did not exit within 30 s of SIGTERM:\n{log}"));
    assert!(status.success(), "lop_edge exited with {status}:\n{log}");
    // The edge computed its part of each of the four: one line per inference, each done, with
    // bands in and out and its compute time.
    let served: Vec<&str> = log.lines().filter(|l| l.contains("inference served")).collect();
    assert_eq!(served.len(), 4, "{log}");
    for line in &served {
        assert_eq!(field(line, "outcome"), Some("done"), "{line}");
        for key in ["compute_ms", "bytes_in", "bytes_out"] {
            let v = field(line, key).and_then(|v| v.parse::<f64>().ok());
            assert!(v.is_some_and(|v| v > 0.0), "{key} in {line}");
        }
    }
    assert!(log.contains("lop_edge stopped") && log.contains("sessions=2") && log.contains("done=4"), "{log}");
    assert!(log.contains("GPU energy"), "GPU energy is reported or said to be unavailable:\n{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two `lop_edge` processes on one Zenoh network (the second's router connects to the first's):
/// a robot that knows one endpoint sees both by their ids and load reports; one killed with
/// SIGKILL leaves the robot's view within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_see_lop_edges_by_id_and_lose_a_killed_one_within_a_second() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let dir = fresh_dir("lop-edge-fleet");
    let (ep1, ep2) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));
    let mut edges = Vec::new();
    for (id, listen, connect) in [("gpu-1", &ep1, String::new()), ("gpu-2", &ep2, format!("\"{ep1}\""))] {
        let config = dir.join(format!("{id}.yaml"));
        std::fs::write(
            &config,
            format!(
                "id: {id}\nserve_unaddressed: false\nzenoh:\n  listen: [\"{listen}\"]\n  connect: [{connect}]\n\
                 models:\n  - id: resnet18\n    source: zoo:resnet18\n    server_profile: synthetic\n\
                 robot_profiles: robots\ntable_cache: tables-{id}\nprofile_cache: profiles\n\
                 table:\n  buckets: [0, 8]\nlog: info\n"
            ),
        )
        .unwrap();
        edges.push(Edge::start(&config));
    }
    let session = ZenohConfig::client(vec![ep1.clone()]).open().await.unwrap();
    let view = lop_runtime::fleet::FleetView::new(&session, lop_runtime::fleet::STALE_AFTER).await.unwrap();
    let ids = |v: &lop_runtime::fleet::FleetView| v.edges().into_iter().map(|e| e.load.edge).collect::<Vec<_>>();
    let t0 = Instant::now();
    while ids(&view) != ["gpu-1", "gpu-2"] && t0.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(ids(&view), ["gpu-1", "gpu-2"], "{:?}", view.counts());
    let seen = view.edges();
    assert!(seen.iter().all(|e| e.load.model("resnet18").is_some_and(|m| m.warm && m.server_s > 0.0)), "{seen:?}");

    let pid = i32::try_from(edges[1].child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    while ids(&view) != ["gpu-1"] && killed.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let gone = killed.elapsed();
    eprintln!("fleet: a SIGKILLed lop_edge left the robot's view after {gone:?}");
    assert_eq!(ids(&view), ["gpu-1"]);
    assert!(gone < Duration::from_secs(1), "the killed edge stayed {gone:?}");
    let _ = edges[1].child.wait();
    session.close().await.unwrap();
    for mut e in edges {
        let _ = e.child.kill();
        let _ = e.child.wait();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
