//! Operating `lop_edge` as a service: a real Prometheus (Debian's `prometheus`, installed by
//! `scripts/setup.sh --test-deps`) scrapes its `/metrics` every second while robots send frames,
//! and its HTTP API then shows the counters and histograms moved; `promtool check metrics`
//! accepts the exposition; the health endpoints answer; systemd's notifications arrive on a
//! `NOTIFY_SOCKET` the test reads (`READY=1`, `WATCHDOG=1` at the period `WATCHDOG_USEC` asks,
//! none while the process is stopped, `STOPPING=1` on SIGTERM).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::fixture::{RobotSide, robot_side};
use common::{Edge, free_port, fresh_dir};

use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::zenoh_link::ZenohConfig;
use lop_runtime::zenoh_service::ZenohConnector;

/// `GET path` on `port`: status line and body.
fn get(port: u16, path: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    (head.lines().next().unwrap_or("").to_string(), body.to_string())
}

/// The notifications received so far on `sock` (non-blocking reads).
fn drain(sock: &UnixDatagram, into: &mut Vec<(Instant, String)>) {
    let mut buf = [0u8; 512];
    while let Ok(n) = sock.recv(&mut buf) {
        into.push((Instant::now(), String::from_utf8_lossy(&buf[..n]).into_owned()));
    }
}

/// A Prometheus server scraping `target` every second, its data in `dir`, its API on `port`.
struct Prometheus(Child);

impl Prometheus {
    fn start(dir: &std::path::Path, target: u16, port: u16) -> Prometheus {
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: lop_edge\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian's package; scripts/setup.sh --test-deps installs it)");
        Prometheus(child)
    }

    /// The value of instant query `q` (the first series), if any.
    fn query(port: u16, q: &str) -> Option<f64> {
        let enc: String =
            q.bytes().map(|b| if b.is_ascii_alphanumeric() || b == b'_' { (b as char).to_string() } else { format!("%{b:02X}") }).collect();
        let (status, body) = get(port, &format!("/api/v1/query?query={enc}"));
        if !status.contains("200") {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_edge_and_systemd_hears_it() {
    let _heavy = crate::HEAVY.lock().await;
    let dir = fresh_dir("lop-edge-ops");
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let (metrics_port, prom_port) = (free_port(), free_port());
    let config = dir.join("edge.yaml");
    std::fs::write(
        &config,
        format!(
            "zenoh:\n  listen: [\"{endpoint}\"]\n\
             models:\n  - id: resnet18\n    source: zoo:resnet18\n    server_profile: synthetic\n\
             robot_profiles: robots\ntable_cache: tables\nprofile_cache: profiles\n\
             table:\n  buckets: [0, 2, 8, 30]\n  latency_ms: 1.0\n\
             metrics:\n  listen: 127.0.0.1:{metrics_port}\n\
             hello_timeout_s: 60\nshutdown_grace_s: 2\nlog: info\n"
        ),
    )
    .unwrap();
    // The robot's profile in the edge's folder: the edge plans its table before it is ready.
    let RobotSide { table, inputs, .. } = robot_side(&config, "zoo:resnet18", Some(&dir.join("robot-tables")), 3, false).unwrap();

    // systemd's side: a datagram socket, a watchdog of 600 ms.
    let sock_path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_nonblocking(true).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lop_edge"));
    cmd.env("NOTIFY_SOCKET", &sock_path).env("WATCHDOG_USEC", "600000");
    let mut edge = Edge::start_with(cmd, &config);
    let pid = edge.child.id() as i32;
    let mut notes = Vec::new();
    drain(&sock, &mut notes);
    assert!(notes.iter().any(|(_, n)| n == "READY=1"), "no READY=1: {notes:?}\n{}", edge.log_now());
    assert_eq!(get(metrics_port, "/health/ready").0, "HTTP/1.1 200 OK");
    assert_eq!(get(metrics_port, "/health/live").0, "HTTP/1.1 200 OK");
    // A second edge on the same metrics port: a clear start-up error naming the field.
    let second = Command::new(env!("CARGO_BIN_EXE_lop_edge")).arg("--config").arg(&config).env_remove("LOP_LOG").output().unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success() && err.contains("metrics.listen") && err.contains(&metrics_port.to_string()), "{err}");

    // The watchdog: pings at about half its period; none while the process is stopped.
    std::thread::sleep(Duration::from_millis(1500));
    drain(&sock, &mut notes);
    let pings = notes.iter().filter(|(_, n)| n == "WATCHDOG=1").count();
    assert!(pings >= 3, "{pings} WATCHDOG=1 in 1.5 s with a 600 ms watchdog: {notes:?}");
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    notes.clear();
    drain(&sock, &mut Vec::new());
    std::thread::sleep(Duration::from_millis(1500));
    drain(&sock, &mut notes);
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(notes.iter().all(|(_, n)| n != "WATCHDOG=1"), "a stopped edge pinged the watchdog: {notes:?}");
    std::thread::sleep(Duration::from_millis(1000));
    drain(&sock, &mut notes);
    assert!(notes.iter().any(|(_, n)| n == "WATCHDOG=1"), "no WATCHDOG=1 after the edge went on: {notes:?}");

    // Prometheus scrapes while a robot sends frames.
    let _prom = Prometheus::start(&dir, metrics_port, prom_port);
    let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
    let (worker, loaded) = Worker::spawn("ops-robot", || lop::model::load("zoo:resnet18", &Default::default())).await.unwrap();
    let mut opts = ClientOptions::new("ops-robot", "resnet18");
    opts.hello_timeout = Duration::from_secs(60);
    opts.deadline_slack = Duration::from_secs(20);
    opts.method = "server-only".into();
    let connector = ZenohConnector::new(session.clone(), "ops-robot");
    let mut client = RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, table).await.unwrap();
    assert!(client.connected(), "{}", edge.log_now());
    let frames = 6;
    for _ in 0..frames {
        let r = client.infer(inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
        assert!(!r.stats.fallback, "{:?}", r.stats.fallback_reason);
    }
    let q = |query: &str| Prometheus::query(prom_port, query);
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let v = q("lop_edge_inferences_total{model=\"resnet18\",outcome=\"done\"}");
        if v.is_some_and(|v| v >= frames as f64) || Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(done, Some(frames as f64), "Prometheus's view of the answered inferences");
    assert_eq!(q("lop_edge_inference_seconds_count{model=\"resnet18\"}"), Some(frames as f64));
    // One robot, one frame at a time: every inference ran alone, in a batch of one.
    assert_eq!(q("lop_edge_batch_size_bucket{model=\"resnet18\",le=\"1.0\"}"), Some(frames as f64));
    assert_eq!(q("lop_edge_batch_size_sum{model=\"resnet18\"}"), Some(frames as f64));
    // Every inference sent its result bands: a download span each.
    assert_eq!(q("lop_edge_download_seconds_count{model=\"resnet18\"}"), Some(frames as f64));
    // The one device, named as configured, computed them all.
    assert_eq!(q("lop_edge_device_inferences_total{device=\"cpu\"}"), Some(frames as f64));
    assert_eq!(q("lop_edge_device_replicas{device=\"cpu\"}"), q("sum(lop_edge_replicas)"));
    let sum = q("lop_edge_compute_seconds_sum{model=\"resnet18\"}").unwrap_or(0.0);
    assert!(sum > 0.0, "compute seconds {sum}");
    let received = q("lop_edge_received_bytes_total{model=\"resnet18\"}").unwrap_or(0.0);
    assert!(received >= frames as f64 * 150_000.0, "{received} bytes received for {frames} frames up");
    assert_eq!(q("lop_edge_model_warm{model=\"resnet18\"}"), Some(1.0));
    assert_eq!(q("lop_edge_sessions"), Some(1.0), "one robot session open");
    // The robot's profile was configured: none received, none refused or forgotten.
    assert_eq!(q("lop_edge_robot_profiles_refused_total"), Some(0.0));
    assert_eq!(q("lop_edge_robot_profiles_evicted_total"), Some(0.0));
    // The probe responder's counters are exported (nothing probed here).
    assert_eq!(q("lop_edge_probes_refused_total"), Some(0.0));
    assert_eq!(q("lop_edge_probes_answered_total"), Some(0.0));
    assert_eq!(q("lop_edge_sessions_refused_total"), Some(0.0));
    assert_eq!(q("lop_edge_outbound_refused_total"), Some(0.0));
    assert_eq!(q("up{job=\"lop_edge\"}"), Some(1.0));

    // promtool accepts the exposition as scraped.
    let (_, text) = get(metrics_port, "/metrics");
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // SIGTERM: STOPPING=1, then a clean exit.
    drop(client);
    session.close().await.unwrap();
    // systemd reads its socket all along; this test reads it now (a full socket drops what
    // the edge sends: it never blocks on it).
    drain(&sock, &mut Vec::new());
    notes.clear();
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let status = edge.child.wait().unwrap();
    drain(&sock, &mut notes);
    assert!(status.success(), "{status:?}\n{}", edge.log_now());
    assert!(notes.iter().any(|(_, n)| n == "STOPPING=1"), "no STOPPING=1: {notes:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
