//! Zenoh sessions with the project's security settings (docs/security.md), on loopback: mutual
//! TLS with a site's certificates, passwords, and access control that confines each robot to its
//! own keys. Raw Zenoh sessions play the robots, so that a robot can try what lop_robot never
//! would (another robot's keys).
#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lop_runtime::security::certs::{CertsRequest, make_site_certs};
use lop_runtime::security::{AccessPolicy, Login, Security, TlsFiles};
use lop_runtime::zenoh_link::ZenohConfig;
use zenoh::qos::CongestionControl;

fn site(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    make_site_certs(dir, &CertsRequest { robots: vec!["r1".into(), "r2".into()], edge_names: vec![], days: 2 }).unwrap();
    dir.to_path_buf()
}

fn files(dir: &Path, who: &str) -> TlsFiles {
    TlsFiles { ca: dir.join("ca.pem"), cert: dir.join(format!("{who}.pem")), key: dir.join(format!("{who}.key")) }
}

async fn edge_router(port: u16, security: Security) -> zenoh::Session {
    ZenohConfig::router(vec![format!("tls/127.0.0.1:{port}")]).with_security(security).open().await.unwrap()
}

async fn robot(port: u16, security: Security) -> lop_runtime::Result<zenoh::Session> {
    ZenohConfig::client(vec![format!("tls/localhost:{port}")]).with_security(security).open().await
}

/// Collects the keys a subscriber receives samples on.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<String>>>);

impl Heard {
    async fn on(&self, session: &zenoh::Session, key: &str) -> zenoh::pubsub::Subscriber<()> {
        let me = self.clone();
        session.declare_subscriber(key.to_string()).callback(move |s| me.0.lock().unwrap().push(s.key_expr().to_string())).await.unwrap()
    }

    fn keys(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// One byte on `key`. Blocking congestion control, as the runtime's own frames use: Zenoh's
/// default (drop) may discard a put on a busy machine, which would read as a denial here.
async fn put(session: &zenoh::Session, key: &str, byte: u8) {
    session.put(key, vec![byte]).congestion_control(CongestionControl::Block).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authenticated_robot_reaches_only_its_own_keys_and_the_edges_public_ones() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let dir = site(&common::tempdir().join("site-acl"));
    let port = common::free_port();
    let access = AccessPolicy { robots: vec!["r1".into(), "r2".into()], edges: vec!["edge".into()] };
    let edge = edge_router(port, Security { tls: Some(files(&dir, "edge")), access: Some(access), ..Security::default() }).await;
    let r1 = robot(port, Security { tls: Some(files(&dir, "robot-r1")), ..Security::default() }).await.unwrap();
    let r2 = robot(port, Security { tls: Some(files(&dir, "robot-r2")), ..Security::default() }).await.unwrap();

    let at_edge = Heard::default();
    let _s0 = at_edge.on(&edge, "lop/v1/**").await;
    let (r1_own, r1_spying, r2_own) = (Heard::default(), Heard::default(), Heard::default());
    let _s1 = r1_own.on(&r1, "lop/v1/r1/down").await;
    let _s2 = r1_spying.on(&r1, "lop/v1/r2/down").await;
    let _s3 = r2_own.on(&r2, "lop/v1/r2/down").await;
    // (r1's own session also delivers r1's own publications to it: only the edge's count here.)
    let r1_loads = Heard::default();
    let _s4 = r1_loads.on(&r1, "lop/v1/edge/*/load").await;
    // r1 also tries to hold r2's liveliness token, and its own.
    let _t_spoof = r1.liveliness().declare_token("lop/v1/r2/alive").await.unwrap();
    let _t_own = r1.liveliness().declare_token("lop/v1/r1/alive").await.unwrap();
    // Routes are declared asynchronously (and a TLS link may reconnect once at start), so one put
    // proves nothing: first every allowed route is warmed until it carries a message.
    let t0 = Instant::now();
    loop {
        put(&r1, "lop/v1/r1/up", 0).await;
        put(&edge, "lop/v1/r1/down", 0).await;
        put(&edge, "lop/v1/r2/down", 0).await;
        put(&edge, "lop/v1/edge/gpu-1/load", 0).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let heard = |h: &Heard, key: &str| h.keys().iter().any(|k| k == key);
        if heard(&at_edge, "lop/v1/r1/up")
            && heard(&r1_own, "lop/v1/r1/down")
            && heard(&r2_own, "lop/v1/r2/down")
            && heard(&r1_loads, "lop/v1/edge/gpu-1/load")
        {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "the allowed routes never carried a message");
    }
    let count = |h: &Heard, key: &str| h.keys().iter().filter(|k| *k == key).count();
    let (up0, loads0, r2_0) =
        (count(&at_edge, "lop/v1/r1/up"), count(&r1_loads, "lop/v1/edge/gpu-1/load"), count(&r2_own, "lop/v1/r2/down"));

    // Each denied put goes out before an allowed one on the same session and priority, so once
    // the allowed ones have arrived, a denied one that got through would have arrived too. Rounds
    // repeat until 5 of each allowed put have arrived: a link that reconnects after the warm-up
    // (seen once in CI: r1 heard none of one round's load reports) loses a round, not the test.
    let arrived = || {
        (
            count(&at_edge, "lop/v1/r1/up") - up0,
            count(&r2_own, "lop/v1/r2/down") - r2_0,
            count(&r1_loads, "lop/v1/edge/gpu-1/load") - loads0,
        )
    };
    let t0 = Instant::now();
    let mut rounds = 0u32;
    while rounds < 200 && t0.elapsed() < Duration::from_secs(20) {
        let i = rounds as u8; // rounds < 200
        put(&r1, "lop/v1/r2/up", i).await; // another robot's uplink
        put(&r1, "lop/v1/r2/hello", i).await; // a Hello in another robot's name
        put(&r1, "lop/v1/edge/e1/load", i).await; // posing as an edge
        put(&r1, "lop/v1/r1/up", i).await;
        put(&edge, "lop/v1/r2/down", i).await; // r1 listens here too
        put(&edge, "lop/v1/edge/gpu-1/load", i).await;
        rounds += 1;
        if rounds >= 5 {
            let a = arrived();
            if a.0 >= 5 && a.1 >= 5 && a.2 >= 5 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let a = arrived();
    assert!(
        a.0 >= 5 && a.1 >= 5 && a.2 >= 5,
        "r1's own traffic: after {rounds} rounds, arrived (r1/up at the edge, r2/down at r2, load at r1) = {a:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let edge_heard = at_edge.keys();
    for denied in ["lop/v1/r2/up", "lop/v1/r2/hello", "lop/v1/edge/e1/load"] {
        assert!(!edge_heard.iter().any(|k| k == denied), "the edge heard r1 on {denied}: {edge_heard:?}");
    }
    assert!(r1_spying.keys().is_empty(), "r1 read r2's keys: {:?}", r1_spying.keys());

    // Tokens propagate asynchronously too: wait for r1's own before checking that only it is held.
    let t0 = Instant::now();
    let tokens = loop {
        let tokens: Vec<String> = edge
            .liveliness()
            .get("lop/v1/*/alive")
            .await
            .unwrap()
            .into_iter()
            .filter_map(|r| r.into_result().ok())
            .map(|s| s.key_expr().to_string())
            .collect();
        if tokens.iter().any(|t| t == "lop/v1/r1/alive") || t0.elapsed() > Duration::from_secs(10) {
            break tokens;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(tokens, vec!["lop/v1/r1/alive".to_string()], "r1 may hold only its own token");
    for s in [r1, r2, edge] {
        s.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_without_a_valid_certificate_or_password_are_refused() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let root = common::tempdir();
    let dir = site(&root.join("site-refuse"));
    let stranger = site(&root.join("site-other")); // another site's CA and certificates
    let users = root.join("users");
    std::fs::write(&users, "r1:right-password\nedge:edge-password\n").unwrap();
    let port = common::free_port();
    let edge = edge_router(port, Security { tls: Some(files(&dir, "edge")), users_file: Some(users), ..Security::default() }).await;
    let login = |password: &str| Some(Login { user: "r1".into(), password: password.into() });

    // Served: this site's certificate and the right password.
    let ok = robot(port, Security { tls: Some(files(&dir, "robot-r1")), login: login("right-password"), ..Security::default() }).await;
    let ok = ok.expect("an authenticated robot is served");

    // A certificate another CA signed (the key matches it: only the signature is wrong).
    let wrong_cert = TlsFiles { ca: dir.join("ca.pem"), ..files(&stranger, "robot-r1") };
    let refused = robot(port, Security { tls: Some(wrong_cert), login: login("right-password"), ..Security::default() }).await;
    assert!(refused.is_err(), "a certificate of another CA was accepted");

    // The right certificate, the wrong password.
    let refused = robot(port, Security { tls: Some(files(&dir, "robot-r1")), login: login("guess"), ..Security::default() }).await;
    assert!(refused.is_err(), "a wrong password was accepted");

    // No certificate at all: TLS that trusts the site's CA, but presents nothing.
    let mut bare = ZenohConfig::client(vec![format!("tls/localhost:{port}")]).to_zenoh().unwrap();
    bare.insert_json5("transport/link/tls/root_ca_certificate", &format!("{:?}", dir.join("ca.pem").to_string_lossy())).unwrap();
    bare.insert_json5("transport/auth/usrpwd/user", "\"r1\"").unwrap();
    bare.insert_json5("transport/auth/usrpwd/password", "\"right-password\"").unwrap();
    assert!(zenoh::open(bare).await.is_err(), "a robot without a certificate was accepted");

    // Plain TCP to the TLS port.
    assert!(ZenohConfig::client(vec![format!("tcp/127.0.0.1:{port}")]).open().await.is_err(), "plain TCP was accepted");

    // The authenticated session still works after the refusals.
    let heard = Heard::default();
    let _s = heard.on(&edge, "lop/v1/r1/up").await;
    let t0 = Instant::now();
    while heard.keys().is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(20), "the served robot's message never arrived");
        put(&ok, "lop/v1/r1/up", 1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ok.close().await.unwrap();
    edge.close().await.unwrap();
}
