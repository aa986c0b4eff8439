//! Loopback tests: the edge is a router on `tcp/127.0.0.1:<free port>`, robots are clients.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc as std_mpsc};
use std::time::Duration;

use lop_msgs::key::SessionKeys;
use lop_msgs::protocol::{Band, BandHeader, DType, Hello, Start, Welcome, decode};
use lop_msgs::{Digest, Frame};
use tokio::time::{Instant, timeout};

use super::peer::{PeerState, lock};
use super::*;
use crate::error::Error;
use crate::link::{LinkRx, LinkTx};

/// Bound of every wait in these tests.
const LIMIT: Duration = Duration::from_secs(15);

use crate::ports::free_loopback_port as free_port;

fn endpoint(port: u16) -> String {
    format!("tcp/127.0.0.1:{port}")
}

async fn edge(port: u16) -> (zenoh::Session, EdgeAcceptor) {
    let session = ZenohConfig::router(vec![endpoint(port)]).open().await.unwrap();
    let acceptor = EdgeAcceptor::new(&session).await.unwrap();
    (session, acceptor)
}

async fn robot(port: u16) -> zenoh::Session {
    ZenohConfig::client(vec![endpoint(port)]).open().await.unwrap()
}

fn hello(robot_id: &str) -> Vec<u8> {
    Frame::Hello(Hello {
        robot_id: robot_id.to_string(),
        model_id: "resnet18".to_string(),
        model_sha256: Digest([1; 32]),
        robot_profile_hash: Digest([2; 32]),
        robot_profile: Vec::new(),
        planner_hash: Digest([3; 32]),
        input_dtype: DType::U8,
        input_shape: vec![1, 3, 224, 224],
    })
    .encode()
    .unwrap()
}

/// A band of inference `id` with rows `row..row + 1` of a 3x1x`width` u8 tensor, bytes `fill`.
fn band(id: u64, row: u32, width: u32, fill: u8) -> Vec<u8> {
    let header = BandHeader {
        inference_id: id,
        tensor_id: 7,
        row_start: row,
        row_end: row + 1,
        row_axis: 1,
        dtype: DType::U8,
        shape: vec![3, 1, width],
        coding: Default::default(),
    };
    Frame::Band(Band { header, payload: vec![fill; 3 * width as usize] }).encode().unwrap()
}

fn welcome() -> Vec<u8> {
    Frame::Welcome(Welcome { server_profile_hash: Digest([4; 32]), table_hash: Digest([5; 32]), server_profile: Vec::new() })
        .encode()
        .unwrap()
}

async fn recv(rx: &mut ZenohRx) -> Option<Vec<u8>> {
    timeout(LIMIT, rx.recv()).await.expect("recv timed out").unwrap()
}

async fn accept(acceptor: &mut EdgeAcceptor) -> EdgeConn {
    timeout(LIMIT, acceptor.accept()).await.expect("accept timed out").expect("acceptor closed")
}

/// Waits until `f` holds, polling.
async fn eventually(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < LIMIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Robot and edge that completed Hello / Welcome.
async fn connected(port: u16, acceptor: &mut EdgeAcceptor, robot_id: &str) -> (zenoh::Session, ZenohTx, ZenohRx, EdgeConn) {
    let session = robot(port).await;
    let (tx, mut rx) = robot_link(&session, robot_id).await.unwrap();
    tx.send(hello(robot_id)).await.unwrap();
    let mut conn = accept(acceptor).await;
    assert_eq!(conn.robot_id, robot_id);
    assert_eq!(recv(&mut conn.rx).await.unwrap(), hello(robot_id));
    conn.tx.send(welcome()).await.unwrap();
    assert_eq!(recv(&mut rx).await.unwrap(), welcome());
    (session, tx, rx, conn)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_robot_id_is_refused() {
    let port = free_port();
    let (_edge_session, _acceptor) = edge(port).await;
    let session = robot(port).await;
    for bad in ["edge", "a/b", "*", ""] {
        assert!(matches!(robot_link(&session, bad).await, Err(Error::InvalidConfig { .. })), "{bad:?}");
    }
}

/// (a) Hello then 1000 band-sized frames arrive in order, and frames edge -> robot arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_and_bands_both_ways() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let t0 = Instant::now();
    let session = robot(port).await;
    let (tx, mut rx) = robot_link(&session, "r1").await.unwrap();
    tx.send(hello("r1")).await.unwrap();
    const N: u32 = 1000;
    const WIDTH: u32 = 4096; // 12 KiB payload per band
    let start = start_frame(1, 9);
    tx.send(start.clone()).await.unwrap();
    for i in 0..N {
        tx.send(band(1, i, WIDTH, i as u8)).await.unwrap();
    }
    let mut conn = accept(&mut acceptor).await;
    eprintln!("accepted after {:?}", t0.elapsed());
    assert_eq!(conn.robot_id, "r1");
    assert_eq!(recv(&mut conn.rx).await.unwrap(), hello("r1"));
    assert_eq!(recv(&mut conn.rx).await.unwrap(), start);
    for i in 0..N {
        let got = recv(&mut conn.rx).await.unwrap();
        assert_eq!(got, band(1, i, WIDTH, i as u8), "band {i}");
    }
    let all_up = tx.sent();
    assert_eq!(all_up.messages, u64::from(N) + 2);
    assert_eq!(conn.rx.received(), all_up);
    eprintln!("uplink of {} bytes done after {:?}", all_up.bytes, t0.elapsed());

    conn.tx.send(welcome()).await.unwrap();
    for i in 0..100 {
        conn.tx.send(band(1, i, 1024, 7)).await.unwrap();
    }
    assert_eq!(recv(&mut rx).await.unwrap(), welcome());
    for i in 0..100 {
        assert_eq!(decode(&recv(&mut rx).await.unwrap()).unwrap(), decode(&band(1, i, 1024, 7)).unwrap());
    }
    assert_eq!(rx.received(), conn.tx.sent());
    assert_eq!(acceptor.dropped(), 0);
}

/// (b) Two robots at once get isolated sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_robots_are_isolated() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let (_s1, tx1, mut rx1, mut c1) = connected(port, &mut acceptor, "r1").await;
    let (_s2, tx2, mut rx2, mut c2) = connected(port, &mut acceptor, "r2").await;
    for i in 0..50 {
        tx1.send(band(1, i, 64, 1)).await.unwrap();
        tx2.send(band(2, i, 64, 2)).await.unwrap();
        c1.tx.send(band(10, i, 32, 10)).await.unwrap();
        c2.tx.send(band(20, i, 32, 20)).await.unwrap();
    }
    for i in 0..50 {
        assert_eq!(recv(&mut c1.rx).await.unwrap(), band(1, i, 64, 1));
        assert_eq!(recv(&mut c2.rx).await.unwrap(), band(2, i, 64, 2));
        assert_eq!(recv(&mut rx1).await.unwrap(), band(10, i, 32, 10));
        assert_eq!(recv(&mut rx2).await.unwrap(), band(20, i, 32, 20));
    }
    // Nothing more is waiting anywhere: no cross-talk.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for rx in [&mut c1.rx, &mut c2.rx, &mut rx1, &mut rx2] {
        assert!(timeout(Duration::from_millis(10), rx.recv()).await.is_err());
    }
    assert_eq!(acceptor.dropped(), 0);
}

/// (c) Frames from a robot without a session are dropped and counted; a Hello then starts one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_without_hello_are_dropped() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let session = robot(port).await;
    let (tx, _rx) = robot_link(&session, "ghost").await.unwrap();
    for i in 0..5 {
        tx.send(band(1, i, 16, 0)).await.unwrap();
    }
    eventually("5 dropped frames", || acceptor.dropped() == 5).await;
    assert!(timeout(Duration::from_millis(100), acceptor.accept()).await.is_err(), "no session without hello");
    tx.send(hello("ghost")).await.unwrap();
    let mut conn = accept(&mut acceptor).await;
    tx.send(band(2, 0, 16, 0)).await.unwrap();
    assert_eq!(recv(&mut conn.rx).await.unwrap(), hello("ghost"));
    assert_eq!(recv(&mut conn.rx).await.unwrap(), band(2, 0, 16, 0));
    assert_eq!(acceptor.dropped(), 5);
}

/// A second Hello of the same robot ends the old session and starts a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_hello_replaces_the_session() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let (_s, tx, _rx, mut old) = connected(port, &mut acceptor, "r1").await;
    tokio::time::sleep(HELLO_MIN_INTERVAL).await;
    tx.send(hello("r1")).await.unwrap();
    let mut new = accept(&mut acceptor).await;
    assert_eq!(recv(&mut old.rx).await, None);
    assert!(matches!(old.tx.send(welcome()).await, Err(Error::Closed)));
    assert_eq!(recv(&mut new.rx).await.unwrap(), hello("r1"));
    tx.send(band(3, 0, 8, 3)).await.unwrap();
    assert_eq!(recv(&mut new.rx).await.unwrap(), band(3, 0, 8, 3));
}

/// A flood of Hellos: the first starts a session, those sooner than [`HELLO_MIN_INTERVAL`] after
/// it are dropped and counted, unparsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_flood_starts_one_session() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let session = robot(port).await;
    let (tx, _rx) = robot_link(&session, "r9").await.unwrap();
    let t0 = std::time::Instant::now();
    for _ in 0..20 {
        tx.send(hello("r9")).await.unwrap();
    }
    let sent_in = t0.elapsed();
    assert!(sent_in < HELLO_MIN_INTERVAL / 2, "queued 20 Hellos in {sent_in:?}: too slow a machine for this test");
    let mut conn = accept(&mut acceptor).await;
    eventually("19 dropped", || acceptor.dropped() == 19).await;
    assert!(timeout(Duration::from_millis(50), acceptor.accept()).await.is_err(), "one session only");
    assert_eq!(recv(&mut conn.rx).await.unwrap(), hello("r9"));
}

/// A robot that sends faster than its edge session takes: past [`SESSION_QUEUE_BYTES`] queued,
/// its frames are dropped and counted; what was queued is delivered, and the queue refills as
/// the session takes from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_queue_is_bounded_in_bytes() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let (_s, tx, _rx, mut conn) = connected(port, &mut acceptor, "r1").await;
    // 4 MiB bands (3 rows of 1.4 MB), 48 of them: 192 MiB against a 128 MiB queue, unread.
    let width = (4 << 20) / 3;
    let one = band(1, 0, width, 9);
    let n = 48;
    for i in 0..n {
        tx.send(band(1, i, width, 9)).await.unwrap();
    }
    let fit = SESSION_QUEUE_BYTES / one.len();
    eventually("the excess dropped", || acceptor.dropped() as usize == n as usize - fit).await;
    let mut taken = 0;
    while let Ok(Some(b)) = timeout(Duration::from_millis(500), conn.rx.recv()).await.map(|r| r.unwrap()) {
        taken += b.len();
    }
    assert_eq!(taken, fit * one.len(), "everything queued is delivered");
    // Taken: room again.
    tx.send(band(2, 0, 16, 1)).await.unwrap();
    assert_eq!(recv(&mut conn.rx).await.unwrap(), band(2, 0, 16, 1));
    assert_eq!(acceptor.dropped() as usize, n as usize - fit);
}

/// (d) Closing the edge makes the robot's pending recv return `Ok(None)` promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_gone_ends_the_robot_rx() {
    let port = free_port();
    let (edge_session, mut acceptor) = edge(port).await;
    let (_s, tx, mut rx, conn) = connected(port, &mut acceptor, "r1").await;
    let pending = tokio::spawn(async move {
        let r = rx.recv().await;
        (r, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = Instant::now();
    drop(conn);
    drop(acceptor);
    edge_session.close().await.unwrap();
    let (r, at) = timeout(LIMIT, pending).await.unwrap().unwrap();
    assert_eq!(r.unwrap(), None);
    let delay = at.saturating_duration_since(t0);
    eprintln!("robot saw the edge gone after {delay:?}");
    assert!(delay < Duration::from_secs(2), "took {delay:?}");
    assert!(tx.peer_gone());
    assert!(matches!(tx.send(band(1, 0, 8, 0)).await, Err(Error::Closed)));
}

/// (d') An edge session closed without dropping the acceptor first (as when the process ends)
/// is also seen as gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edge_session_close_ends_the_robot_rx() {
    let port = free_port();
    let (edge_session, mut acceptor) = edge(port).await;
    let (_s, _tx, mut rx, _conn) = connected(port, &mut acceptor, "r1").await;
    let t0 = Instant::now();
    edge_session.close().await.unwrap();
    assert_eq!(timeout(Duration::from_secs(5), rx.recv()).await.expect("robot rx did not end").unwrap(), None);
    eprintln!("robot saw the edge session close after {:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?}", t0.elapsed());
    // Closing the session dropped the acceptor's subscriptions.
    assert!(timeout(LIMIT, acceptor.accept()).await.unwrap().is_none());
}

/// (e) A robot that closes its session ends its edge session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robot_gone_ends_the_edge_session() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let (robot_session, tx, rx, mut conn) = connected(port, &mut acceptor, "r1").await;
    let t0 = Instant::now();
    drop((tx, rx));
    robot_session.close().await.unwrap();
    assert_eq!(recv(&mut conn.rx).await, None);
    eprintln!("edge saw the robot gone after {:?}", t0.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?}", t0.elapsed());
    assert!(matches!(conn.tx.send(welcome()).await, Err(Error::Closed)));
}

/// (e') A robot session closed with its link still held also ends the edge session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robot_session_close_ends_the_edge_session() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let (robot_session, _tx, _rx, mut conn) = connected(port, &mut acceptor, "r1").await;
    let t0 = Instant::now();
    robot_session.close().await.unwrap();
    assert_eq!(recv(&mut conn.rx).await, None);
    assert!(t0.elapsed() < Duration::from_secs(2), "took {:?}", t0.elapsed());
}

/// (f) Garbage on the hello key, and a Hello naming another robot than its key, are counted and
/// start no session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_hello_is_dropped() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let session = robot(port).await;
    let start = start_frame(1, 0);
    let mut truncated = hello("r1");
    truncated.truncate(20);
    let mut bad_id = hello("r1");
    // Turn the id "r1" into "r/": a frame that no longer decodes or names no valid robot.
    if let Some(p) = bad_id.windows(2).position(|w| w == b"r1") {
        bad_id[p + 1] = b'/';
    }
    // A well-formed Hello of another robot on r1's key: r1 speaking for r2 (it would end r2's session).
    let spoofed = hello("r2");
    let garbage: Vec<Vec<u8>> = vec![b"garbage".to_vec(), Vec::new(), vec![0xff; 10_000], start, truncated, bad_id, spoofed];
    let n = garbage.len() as u64;
    let hello_key = SessionKeys::single().hello("r1").unwrap();
    for g in garbage {
        session.put(&hello_key, g).await.unwrap();
    }
    session.delete(&hello_key).await.unwrap();
    eventually("garbage counted", || acceptor.dropped() == n + 1).await;
    assert!(timeout(Duration::from_millis(100), acceptor.accept()).await.is_err());
    // The edge still works.
    let (_s, _tx, _rx, _conn) = connected(port, &mut acceptor, "r1").await;
    assert_eq!(acceptor.dropped(), n + 1);
}

/// A Hello of another protocol version starts no session and is answered on the robot's downlink
/// with a Reject that names both versions (in this edge's version: the header layout is the same
/// in every version, so the robot can read which one the edge speaks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_of_another_protocol_version_is_refused_with_both_versions_named() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let session = robot(port).await;
    let keys = SessionKeys::single();
    let answers = session.declare_subscriber(keys.down("r1").unwrap()).await.unwrap();
    let mut future_hello = hello("r1");
    future_hello[4..6].copy_from_slice(&(lop_msgs::protocol::PROTOCOL_VERSION + 1).to_le_bytes());
    // Sent until the edge's subscription is in place and the answer is back (Hellos closer than
    // HELLO_MIN_INTERVAL are dropped before they are read).
    let t0 = Instant::now();
    let answer = loop {
        session.put(keys.hello("r1").unwrap(), future_hello.clone()).await.unwrap();
        if let Ok(Ok(sample)) = timeout(Duration::from_millis(300), answers.recv_async()).await {
            break sample.payload().to_bytes().into_owned();
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no answer to a Hello of another version");
    };
    let Frame::Reject(r) = decode(&answer).unwrap() else { panic!("not a Reject: {:?}", decode(&answer)) };
    assert_eq!(r.reason, lop_msgs::protocol::RejectReason::UnsupportedVersion);
    let (theirs, ours) = (lop_msgs::protocol::PROTOCOL_VERSION + 1, lop_msgs::protocol::PROTOCOL_VERSION);
    assert!(
        r.text.contains(&format!("protocol version {theirs} refused")) && r.text.contains(&format!("speaks protocol version {ours}")),
        "{}",
        r.text
    );
    assert!(acceptor.dropped() >= 1);
    assert!(timeout(Duration::from_millis(100), acceptor.accept()).await.is_err(), "a session was started");
    // A robot of this version is still served.
    let (_s, _tx, _rx, _conn) = connected(port, &mut acceptor, "r2").await;
}

/// Dropping the acceptor ends its sessions and removes the edge token; the Zenoh session lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_acceptor_ends_sessions() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let (_s, _tx, mut rx, mut conn) = connected(port, &mut acceptor, "r1").await;
    drop(acceptor);
    assert_eq!(recv(&mut conn.rx).await, None);
    assert_eq!(recv(&mut rx).await, None);
}

/// A band never arrives before a control frame sent before it (the lanes are ordered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bands_never_overtake_earlier_control_frames() {
    let port = free_port();
    let (_edge_session, mut acceptor) = edge(port).await;
    let (_s, tx, _rx, mut conn) = connected(port, &mut acceptor, "r1").await;
    const INFERENCES: u64 = 50;
    for id in 1..=INFERENCES {
        tx.send(start_frame(id, 0)).await.unwrap();
        for row in 0..10 {
            tx.send(band(id, row, 2048, 1)).await.unwrap();
        }
    }
    let mut started = 0;
    let mut rows = 0;
    for _ in 0..INFERENCES * 11 {
        match decode(&recv(&mut conn.rx).await.unwrap()).unwrap() {
            Frame::Start(s) => {
                assert_eq!(s.inference_id, started + 1);
                started = s.inference_id;
            }
            Frame::Band(b) => {
                assert!(b.header.inference_id <= started, "band of {} before its start", b.header.inference_id);
                assert_eq!(u64::from(b.header.row_start) + 10 * (b.header.inference_id - 1), rows);
                rows += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The bytes of a first try's Start of inference `id` for a plan whose hash is `hash` repeated.
fn start_frame(id: u64, hash: u8) -> Vec<u8> {
    let start = Start {
        inference_id: id,
        bucket: 0,
        plan_hash: Digest([hash; 32]),
        input_stamp_ns: 0,
        deadline_ns: 1,
        due_ns: 0,
        path: Vec::new(),
    };
    Frame::Start(start).encode().unwrap()
}

/// A reader that stops reading (its session's callback blocks, as a stopped robot's process
/// does) backs a sending half up to its budget and no further: past it bands are refused with
/// `QueueFull`, control frames still pass, and once the reader resumes the queue drains to
/// nothing and bands are taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_backs_a_sender_up_to_its_budget() {
    let port = free_port();
    let (edge_session, _acceptor) = edge(port).await;
    let reader = robot(port).await;
    let key = "lop/test/stalled";
    let (release, stalled) = std_mpsc::channel::<()>();
    let stalled = Mutex::new(stalled);
    let got = Arc::new(AtomicUsize::new(0));
    let counted = got.clone();
    let _sub = reader
        .declare_subscriber(key)
        .callback(move |_| {
            // The first sample blocks the reader's session until the test releases it.
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                let _ = lock(&stalled).recv_timeout(LIMIT);
            }
        })
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cap = 8 << 20;
    let queued = admission::QueueShare::with_caps(&Arc::default(), cap, cap, ("TEST_OWN", "TEST_TOTAL"));
    let tx = ZenohTx::new(&edge_session, (key, None), Arc::new(PeerState::default()), None, queued.clone()).await.unwrap();
    let one = band(1, 0, (1 << 20) / 3, 5);
    let mut refused = None;
    for i in 0..400 {
        match tx.send(band(1, i, (1 << 20) / 3, 5)).await {
            Ok(()) => {}
            Err(e) => {
                refused = Some((i, e));
                break;
            }
        }
    }
    let (sent, e) = refused.expect("400 MiB to a stalled reader were all taken");
    assert!(matches!(&e, Error::QueueFull(why) if why.contains("TEST_OWN")), "{e}");
    assert!(queued.held() <= cap && queued.held() + one.len() > cap, "{} bytes held after {sent} bands", queued.held());
    tx.send(welcome()).await.expect("a control frame passes a full queue");
    release.send(()).unwrap();
    eventually("the queue drained", || queued.held() == 0).await;
    tx.send(band(2, 0, 16, 1)).await.expect("room again");
    eventually("everything delivered", || got.load(Ordering::SeqCst) == sent as usize + 2).await;
}
