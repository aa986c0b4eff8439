//! The real `lop_edge` with the site's security (docs/security.md) on loopback: mutual TLS with
//! certificates from `lop_runtime::security::certs` (what `lop certs` writes), passwords, and
//! access control. An authenticated robot is served exactly; a robot without a certificate, with
//! another CA's, or with a wrong password is refused and the edge logs it; an authenticated robot
//! that tries another robot's keys is denied, and the other robot keeps being served. A second
//! test puts the latency of TLS side by side with plain TCP.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::fixture::{RobotSide, robot_side};
use common::{Edge, free_port, fresh_dir};

use lop_msgs::key::SessionKeys;
use lop_msgs::protocol::{Frame, Hello};
use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::security::certs::{CertsRequest, make_site_certs};
use lop_runtime::security::{Login, Security, TlsFiles};
use lop_runtime::zenoh_link::ZenohConfig;
use lop_runtime::zenoh_service::ZenohConnector;

struct Site {
    dir: PathBuf,
    table: lop::planner::table::ScheduleTable,
    inputs: Vec<tch::Tensor>,
    whole: Vec<tch::Tensor>,
}

/// A temporary site: certificates for r1 and r2, the robot profile the edge knows, the table
/// built into the edge's cache, and `zenoh_yaml` as the edge's zenoh section.
fn site(name: &str, zenoh_yaml: &str) -> (Site, PathBuf) {
    let dir = fresh_dir(&format!("lop-edge-sec-{name}"));
    make_site_certs(&dir.join("certs"), &CertsRequest { robots: vec!["r1".into(), "r2".into()], edge_names: vec![], days: 2 }).unwrap();
    std::fs::write(dir.join("users"), "r1:pw-r1\nr2:pw-r2\n").unwrap();
    let config = dir.join("edge.yaml");
    std::fs::write(
        &config,
        format!(
            "zenoh:\n{zenoh_yaml}\
             models:\n  - id: resnet18\n    source: zoo:resnet18\n    server_profile: synthetic\n\
             robot_profiles: robots\ntable_cache: tables\nprofile_cache: profiles\n\
             table:\n  buckets: [0, 2, 8, 30]\n  latency_ms: 1.0\n\
             hello_timeout_s: 60\nshutdown_grace_s: 2\ngpu_energy:\n  enabled: false\n"
        ),
    )
    .unwrap();
    let RobotSide { table, inputs, whole, .. } = robot_side(&config, "zoo:resnet18", None, 3, true).unwrap();
    (Site { dir, table, inputs, whole: whole.unwrap() }, config)
}

fn robot_tls(dir: &Path, robot: &str) -> TlsFiles {
    let certs = dir.join("certs");
    TlsFiles { ca: certs.join("ca.pem"), cert: certs.join(format!("robot-{robot}.pem")), key: certs.join(format!("robot-{robot}.key")) }
}

fn login(robot: &str, password: &str) -> Option<Login> {
    Some(Login { user: robot.into(), password: password.into() })
}

async fn client(site: &Site, session: &zenoh::Session, robot: &str) -> RobotClient<ZenohConnector> {
    let (worker, loaded) = Worker::spawn(robot, || lop::model::load("zoo:resnet18", &Default::default())).await.unwrap();
    let mut opts = ClientOptions::new(robot, "resnet18");
    opts.hello_timeout = Duration::from_secs(60);
    opts.deadline_slack = Duration::from_secs(20);
    let connector = ZenohConnector::new(session.clone(), robot);
    let mut c = RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, site.table.clone()).await.unwrap();
    c.set_method("lop");
    c
}

/// One split inference at 30 MB/s: exact, served by `edge`; its latency. Zenoh's TLS link can
/// drop a fresh transport (a race inside zenoh-link-tls: "TX task failed: handshake not
/// complete"); the robot then finishes alone, exactly, and reconnects. So a link failure is
/// retried, a few times, and said.
async fn served(site: &Site, c: &mut RobotClient<ZenohConnector>, edge: &mut Edge, who: &str) -> Duration {
    for attempt in 0..5 {
        let t0 = Instant::now();
        let r = c.infer(site.inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
        let took = t0.elapsed();
        let err = lop::exec::max_rel_err_all(&r.outputs, &site.whole).unwrap();
        assert!(err <= 1e-5, "{who}: relative error {err}");
        if r.stats.fallback {
            eprintln!("{who}: attempt {attempt} finished on the robot alone ({:?}); retrying", r.stats.fallback_reason);
            for _ in 0..100 {
                if c.poll_connection().await {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            continue;
        }
        assert!(r.stats.bytes_up > 0 && r.stats.bytes_down > 0, "{who} was not split with the edge: {:?}\n{}", r.stats, edge.log_now());
        // The edge's Done, with its compute time, came with the answer.
        assert!(r.stats.server_compute_s.is_some_and(|s| s > 0.0), "{who}: no edge compute figure: {:?}", r.stats);
        return took;
    }
    panic!("{who} was never served by the edge:\n{}", edge.log_now());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticated_robots_are_served_strangers_refused_and_logged_and_spoofing_denied() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let port = free_port();
    let endpoint = format!("tls/localhost:{port}");
    let (site, config) = site(
        "acl",
        &format!(
            "  listen: [\"tls/127.0.0.1:{port}\"]\n  tls: {{ca: certs/ca.pem, cert: certs/edge.pem, key: certs/edge.key}}\n\
             \x20 users_file: users\n  access: {{robots: [r1, r2]}}\nlog: \"info,zenoh=debug,zenoh_link_tls=debug\"\n"
        ),
    );
    let mut edge = Edge::start(&config);
    let open = |security: Security| {
        let config = ZenohConfig::client(vec![endpoint.clone()]).with_security(security);
        async move { config.open().await }
    };

    // r1: its certificate and password. Served, exactly.
    let s1 = open(Security { tls: Some(robot_tls(&site.dir, "r1")), login: login("r1", "pw-r1"), ..Security::default() }).await.unwrap();
    let mut r1 = client(&site, &s1, "r1").await;
    served(&site, &mut r1, &mut edge, "r1").await;

    // Refused: another site's certificate (trusting our CA), no certificate, a wrong password.
    let other = site.dir.join("other-site");
    make_site_certs(&other, &CertsRequest { robots: vec!["r1".into()], edge_names: vec![], days: 2 }).unwrap();
    let foreign = TlsFiles { ca: site.dir.join("certs/ca.pem"), cert: other.join("robot-r1.pem"), key: other.join("robot-r1.key") };
    assert!(open(Security { tls: Some(foreign), login: login("r1", "pw-r1"), ..Security::default() }).await.is_err());
    assert!(edge.wait_for("invalid peer certificate", Duration::from_secs(10)), "refusal logged:\n{}", edge.log.join("\n"));
    let mut bare = ZenohConfig::client(vec![endpoint.clone()]).to_zenoh().unwrap();
    bare.insert_json5("transport/link/tls/root_ca_certificate", &format!("{:?}", site.dir.join("certs/ca.pem").to_string_lossy())).unwrap();
    assert!(zenoh::open(bare).await.is_err(), "a robot without a certificate was accepted");
    let wrong = open(Security { tls: Some(robot_tls(&site.dir, "r1")), login: login("r1", "guess"), ..Security::default() }).await;
    assert!(wrong.is_err(), "a wrong password was accepted");
    assert!(edge.wait_for("Invalid password", Duration::from_secs(10)), "wrong password logged:\n{}", edge.log.join("\n"));

    // r2, authenticated, speaks for r1: a Hello on r1's key (access control drops it), a Hello
    // naming r1 on its own key (the edge refuses it), frames on r1's uplink. Either Hello would
    // end r1's session if it got through.
    let s2 = open(Security { tls: Some(robot_tls(&site.dir, "r2")), login: login("r2", "pw-r2"), ..Security::default() }).await.unwrap();
    let hello = |robot: &str| {
        Frame::Hello(Hello {
            robot_id: robot.into(),
            model_id: "resnet18".into(),
            model_sha256: lop_msgs::Digest([0; 32]),
            robot_profile_hash: lop_msgs::Digest([0; 32]),
            planner_hash: lop_msgs::Digest([0; 32]),
            input_dtype: lop_msgs::protocol::DType::U8,
            input_shape: vec![1, 3, 224, 224],
            robot_profile: Vec::new(),
        })
        .encode()
        .unwrap()
    };
    let keys = SessionKeys::single();
    s2.put(keys.hello("r1").unwrap(), hello("r1")).congestion_control(zenoh::qos::CongestionControl::Block).await.unwrap();
    s2.put(keys.hello("r2").unwrap(), hello("r1")).congestion_control(zenoh::qos::CongestionControl::Block).await.unwrap();
    s2.put(keys.up("r1").unwrap(), vec![0u8; 64]).congestion_control(zenoh::qos::CongestionControl::Block).await.unwrap();
    assert!(edge.wait_for("hello refused", Duration::from_secs(10)), "the spoofed Hello is refused and logged:\n{}", edge.log.join("\n"));
    // r1's session is untouched: it is still served, without reconnecting.
    served(&site, &mut r1, &mut edge, "r1 after r2's attempts").await;
    let log = edge.log.join("\n");
    assert!(!log.contains("new hello ends the robot's previous session"), "r1's session was ended:\n{log}");
    // r2 itself is served under its own name.
    let mut r2 = client(&site, &s2, "r2").await;
    served(&site, &mut r2, &mut edge, "r2").await;
    drop((r1, r2));
    for s in [s1, s2] {
        s.close().await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&site.dir);
}

/// The latency cost of TLS: the same split inferences through two edges started side by side,
/// one on plain TCP and one on mutual TLS with access control, alternating. Printed as a ratio
/// (a timing: not asserted); every inference is checked exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_latency_side_by_side_with_plain_tcp() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let (plain_port, tls_port) = (free_port(), free_port());
    let (site, plain_cfg) = site("plain", &format!("  listen: [\"tcp/127.0.0.1:{plain_port}\"]\n"));
    let tls_dir_cfg = site.dir.join("edge-tls.yaml");
    let text = std::fs::read_to_string(&plain_cfg).unwrap().replace(
        &format!("  listen: [\"tcp/127.0.0.1:{plain_port}\"]\n"),
        &format!(
            "  listen: [\"tls/127.0.0.1:{tls_port}\"]\n  tls: {{ca: certs/ca.pem, cert: certs/edge.pem, key: certs/edge.key}}\n\
             \x20 access: {{robots: [r1]}}\n"
        ),
    );
    std::fs::write(&tls_dir_cfg, text).unwrap();
    let mut plain_edge = Edge::start(&plain_cfg);
    let mut tls_edge = Edge::start(&tls_dir_cfg);
    let sp = ZenohConfig::client(vec![format!("tcp/127.0.0.1:{plain_port}")]).open().await.unwrap();
    let st = ZenohConfig::client(vec![format!("tls/localhost:{tls_port}")])
        .with_security(Security { tls: Some(robot_tls(&site.dir, "r1")), ..Security::default() })
        .open()
        .await
        .unwrap();
    let (mut plain, mut tls) = (client(&site, &sp, "r1").await, client(&site, &st, "r1").await);
    served(&site, &mut plain, &mut plain_edge, "warm-up tcp").await;
    served(&site, &mut tls, &mut tls_edge, "warm-up tls").await;
    let (mut tp, mut tt) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        tp.push(served(&site, &mut plain, &mut plain_edge, "tcp").await.as_secs_f64());
        tt.push(served(&site, &mut tls, &mut tls_edge, "tls").await.as_secs_f64());
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (mp, mt) = (median(&mut tp), median(&mut tt));
    eprintln!(
        "TLS cost: median split inference {:.1} ms over TLS vs {:.1} ms over TCP: {:.3}x (10 each, alternating, loopback)",
        mt * 1e3,
        mp * 1e3,
        mt / mp
    );
    drop((plain, tls));
    for s in [sp, st] {
        s.close().await.unwrap();
    }
    let _ = std::fs::remove_dir_all(&site.dir);
}
