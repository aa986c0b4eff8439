//! A peer floods one edge with Hellos carrying made-up robot profiles (issue 56): the edge
//! refuses new profiles while a table is being built, keeps at most its cap of received
//! profiles, and a legitimate robot with a profile of its own, arriving after the flood, is
//! planned for and splits exactly. (An edge used to refuse every new profile for good once 32
//! had been received.) Each refused session ends at once, as soon as its Reject is out.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::{MODEL, assert_exact, setup, tempdir};
use lop_msgs::Frame;
use lop_msgs::protocol::{DType, Hello, RejectReason};
use lop_runtime::local::Switchboard;
use lop_runtime::received_profiles::MAX_RECEIVED_PROFILES;
use lop_runtime::{LinkRx, LinkTx};

/// The process's resident memory, bytes (Linux).
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// The robot profile with its first op's slope nudged by `k`: a valid profile of the model
/// with a content hash of its own.
fn made_up(base: &lop::profile::Profile, k: usize) -> lop::profile::Profile {
    let mut p = base.clone();
    p.ops[0].fit.b_s_per_row *= 1.0 + 1e-6 * (k as f64 + 1.0);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_made_up_profiles_locks_no_robot_out() {
    let _heavy = crate::HEAVY.lock().await;
    let s = setup();
    let dir = tempdir();
    // No robot profile known up front; a Hello waits at most 1 ms for its table.
    let (svc, link, tx, rx) = common::edge_without_profiles(&s, &dir).await;
    drop((tx, rx));
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let (model_sha256, planner_hash) =
        (lop_runtime::plans::digest(&g.content_hash().unwrap()).unwrap(), lop_runtime::plans::digest(&s.spec.hash()).unwrap());

    // 1,000 Hellos from distinct made-up robot ids, each with a profile of its own and on a
    // session of its own (as each Hello over Zenoh is), one reply each; bounded in count and in
    // time.
    let rss_before = rss_bytes();
    let (flood, t0) = (1000, Instant::now());
    let mut planning = 0;
    for k in 0..flood {
        let p = made_up(&s.robot, k);
        let hello = Hello {
            robot_id: format!("fake{k}"),
            model_id: "resnet18".into(),
            model_sha256,
            robot_profile_hash: lop_runtime::plans::digest(&p.hash()).unwrap(),
            planner_hash,
            input_dtype: DType::U8,
            input_shape: vec![1, 3, 224, 224],
            robot_profile: serde_json::to_vec(&p).unwrap(),
        };
        let (tx, mut rx) = common::raw_session(&svc, link.clone());
        tx.send_frame(&Frame::Hello(hello)).await.unwrap();
        let b = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.unwrap().unwrap().unwrap();
        match lop_msgs::protocol::decode(&b).unwrap() {
            Frame::Reject(r) if r.reason == RejectReason::Planning => planning += 1,
            f => panic!("Hello {k}: expected a Planning refusal, got {f:?}"),
        }
        // The refused session ends at once (not at the Hello timeout, 5 s here): the edge closes it.
        let closed = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await;
        assert!(matches!(closed, Ok(Ok(None))), "Hello {k}: the refused session stayed open: {closed:?}");
        assert!(t0.elapsed() < Duration::from_secs(120), "the flood took over 120 s at Hello {k}");
    }
    let flood_s = t0.elapsed().as_secs_f64();
    // What the flood cost the edge's process (measured before the legitimate robot loads its
    // own model into this same process; every test of this binary holds HEAVY, so no other
    // test allocates in it meanwhile).
    let grown = rss_bytes().saturating_sub(rss_before);
    assert!(grown < 64 << 20, "the edge's process grew {grown} B during the flood");
    let counts = svc.counts();
    let gone = Instant::now();
    while svc.open_sessions() > 0 && gone.elapsed() < Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(svc.open_sessions(), 0, "every refused session is gone");
    // Refused while a table was being built, counted; never more kept than the cap.
    assert_eq!(planning, flood);
    assert!(counts.profiles_refused > 0, "{counts:?}");
    assert!(counts.profiles_kept >= 1 && counts.profiles_kept <= MAX_RECEIVED_PROFILES as u64, "{counts:?}");
    assert_eq!(counts.profiles_kept + counts.profiles_refused, flood as u64 - counts.profiles_evicted, "{counts:?}");

    // A legitimate robot with a new profile: alone while the edge plans, then split, exact.
    let board = Switchboard::new();
    let _edge = board.plug(svc.clone());
    let legit = made_up(&s.robot, flood + 1);
    let (table, _) = lop::planner::table::ScheduleTable::build(&g, &legit, &s.server, &s.spec, 1).unwrap();
    let mut c = common::client_with_profile(&board, link, "legit", legit, table).await;
    let started = Instant::now();
    let mut split = 0;
    for i in 0..2000 {
        let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 8.0).await.unwrap();
        assert_exact(&r.outputs, &s.whole, &format!("inference {i}"));
        if r.stats.bytes_up > 0 {
            split += 1;
            if split == 3 {
                break;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(180), "no split inference within 180 s of the flood: {:?}", svc.counts());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(split, 3);
    let counts = svc.counts();
    eprintln!(
        "profile flood: {flood} Hellos in {flood_s:.1} s, all refused as Planning; the legitimate robot split {:.1} s after; \
         RSS grew {:.1} MiB during the flood; {counts:?}",
        started.elapsed().as_secs_f64(),
        grown as f64 / (1 << 20) as f64
    );
}
