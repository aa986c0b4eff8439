//! Chaos in network namespaces (issue 20, part 2): the robot (this test process) and a
//! `lop_edge` process in two namespaces joined by a veth pair; nftables rules in the robot's
//! namespace cut the link for 3 s, flap it every 2 s, and drop 30% of its packets, while the
//! robot streams 30 fps. Every frame is answered with the unsplit model's output (split with the
//! edge, or by the robot alone and marked as a fallback), none is lost, and the robot is back on
//! split inference within 2 s of the link's return. Bounded: 30 s of frames.
//!
//! Both namespaces get `launch/90-lop-tcp.conf`, the sysctl drop-in that docs/ros2.md and
//! docs/edge.md ask robots and edges on Wi-Fi to install: after a lossy stretch, the return is bounded by TCP's
//! retransmission backoff, not by LOP (a CI run without it took 2.1 s to split again after the
//! 30% loss; 75% loss took 0.9 to 2.4 s without it, 0.01 to 0.89 s with it).
//!
//! Needs root, iproute2 and nftables (`scripts/test.sh` installs `nft`); without namespaces it
//! says so loudly and passes, as the other netns tests do. This kernel has no `netem`, so loss is
//! nftables' `numgen random`.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Edge, OneModelEdge};

use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::netns::{NetnsLink, NetnsOptions, NetnsSide};
use lop_runtime::zenoh_link::ZenohConfig;
use lop_runtime::zenoh_service::ZenohConnector;

const MODEL: &str = "zoo:resnet18@32x32";
const FPS: u32 = 30;
const PORT: u16 = 7447;
/// The robot must be back on split inference this soon after the link returns.
const BACK_WITHIN: Duration = Duration::from_secs(2);

/// What the link does from a time on (seconds from the stream's start).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Link {
    Up,
    Down,
    Lossy(u8),
}

/// The schedule: a 3 s partition, flapping every 2 s for 8 s, 30% loss for 5 s, each followed by
/// a clean stretch in which the robot must come back.
const SCHEDULE: [(f64, Link); 10] = [
    (0.0, Link::Up),
    (2.0, Link::Down),
    (5.0, Link::Up),
    (9.0, Link::Down),
    (11.0, Link::Up),
    (13.0, Link::Down),
    (15.0, Link::Up),
    (21.0, Link::Lossy(30)),
    (26.0, Link::Up),
    (30.0, Link::Up),
];
/// The returns after which the robot must be split again within [`BACK_WITHIN`]: after the
/// partition, after the flapping, after the loss.
const RETURNS: [f64; 3] = [5.0, 15.0, LOSS_RETURN];
/// When the lossy stretch ends.
const LOSS_RETURN: f64 = 26.0;

/// nftables in the robot's namespace: one table whose two chains drop what the fault says.
struct Faults<'a> {
    link: &'a NetnsLink,
    edge: String,
}

impl Faults<'_> {
    fn nft(&self, script: &str) {
        let out = self.link.command(NetnsSide::Robot, "nft").arg(script).output().unwrap();
        assert!(out.status.success(), "nft {script}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn install(&self) {
        self.nft("add table inet lopchaos");
        self.nft("add chain inet lopchaos input { type filter hook input priority 0; policy accept; }");
        self.nft("add chain inet lopchaos output { type filter hook output priority 0; policy accept; }");
    }

    fn set(&self, state: Link) {
        self.nft("flush table inet lopchaos");
        let edge = &self.edge;
        match state {
            Link::Up => {}
            Link::Down => {
                self.nft(&format!("add rule inet lopchaos input ip saddr {edge} drop"));
                self.nft(&format!("add rule inet lopchaos output ip daddr {edge} drop"));
            }
            Link::Lossy(pct) => {
                self.nft(&format!("add rule inet lopchaos input ip saddr {edge} numgen random mod 100 < {pct} drop"));
                self.nft(&format!("add rule inet lopchaos output ip daddr {edge} numgen random mod 100 < {pct} drop"));
            }
        }
    }
}

/// One answered frame.
struct Answer {
    /// When the frame was captured, and when its inference began and ended (s from the start).
    at_s: f64,
    sent_s: f64,
    done_s: f64,
    split: bool,
    why: Option<String>,
}

/// Applies `launch/90-lop-tcp.conf`, the sysctl drop-in that docs/ros2.md and docs/edge.md ask
/// robots and edges on Wi-Fi to install, in both namespaces (each has its own TCP settings), as a deployment would:
/// the return after the lossy stretch is bounded by TCP's retransmission backoff, which that file
/// caps. A key marked `-` may be missing from an older kernel; every other key must apply.
/// Returns whether every key applied (an older kernel lacks the retransmission cap).
fn apply_tcp_dropin(link: &NetnsLink) -> bool {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../launch/90-lop-tcp.conf");
    let text = std::fs::read_to_string(path).unwrap();
    let mut all = true;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (optional, setting) = line.strip_prefix('-').map_or((false, line), |rest| (true, rest));
        let (key, value) = setting.split_once('=').unwrap();
        let assignment = format!("{}={}", key.trim(), value.trim());
        for side in [NetnsSide::Robot, NetnsSide::Edge] {
            let out = link.command(side, "sysctl").args(["-w", &assignment]).output().unwrap();
            if !out.status.success() {
                assert!(optional, "sysctl -w {assignment}: {}", String::from_utf8_lossy(&out.stderr));
                eprintln!("chaos-netns: this kernel lacks {}; skipped as the drop-in allows", key.trim());
                all = false;
            }
        }
    }
    all
}

#[test]
fn partition_flapping_and_loss_lose_no_frame_and_split_resumes_within_2_s() {
    if !NetnsLink::available_for_test("chaos netns test") {
        return;
    }
    let has_nft = Command::new("nft").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(has_nft, "the chaos test needs nftables' `nft` (apt-get install nftables; scripts/test.sh installs it)");
    let prefix = format!("lopc{}", std::process::id() % 1_000_000);
    let link = NetnsLink::create(NetnsOptions::default().with_prefix(prefix).with_initial_mbit(1000.0)).unwrap();
    let edge_addr = link.address(NetnsSide::Edge);
    let faults = Faults { link: &link, edge: edge_addr.to_string() };
    faults.install();
    let rto_capped = apply_tcp_dropin(&link);

    let endpoint = format!("tcp/{edge_addr}:{PORT}");
    let OneModelEdge { dir, config, table, inputs, whole } =
        OneModelEdge::prepare("chaos-netns", MODEL, &endpoint, "  allow_insecure: true\n", "threads: 1\n", 17);
    let edge = Edge::start_with(link.command(NetnsSide::Edge, env!("CARGO_BIN_EXE_lop_edge")), &config);

    // The robot's side lives in the robot's namespace: this thread enters it before the runtime
    // (and Zenoh's threads, which this test process starts from it) exist.
    link.enter(NetnsSide::Robot).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (answers, applied) = rt.block_on(async {
        let session = ZenohConfig::client(vec![endpoint.clone()]).open().await.unwrap();
        let (worker, loaded) = Worker::spawn("chaos-robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
        let mut opts = ClientOptions::new("chaos-robot", "resnet18");
        opts.hello_timeout = Duration::from_secs(10);
        opts.retry_interval = Duration::from_millis(100);
        let connector = ZenohConnector::new(session.clone(), "chaos-robot");
        let mut client = RobotClient::new(connector, opts, worker, loaded.meta, &loaded.hash, table).await.unwrap();
        assert!(client.connected(), "the robot reached lop_edge across the veth pair");
        client.set_method("lop");

        let start = Instant::now() + Duration::from_millis(100);
        let end_s = SCHEDULE[SCHEDULE.len() - 1].0;
        let period = Duration::from_secs(1) / FPS;
        let mut answers = Vec::new();
        let mut next_change = 0;
        // When each scheduled change was applied (s from the start): a robot inside an
        // inference applies the next change when that inference ends.
        let mut applied = Vec::new();
        for k in 0.. {
            let captured = start + period * k;
            let at_s = captured.duration_since(start).as_secs_f64();
            if at_s >= end_s {
                break;
            }
            tokio::time::sleep_until(captured.into()).await;
            // The link changes between frames, on schedule (a late robot applies it late).
            while next_change < SCHEDULE.len() && SCHEDULE[next_change].0 <= start.elapsed().as_secs_f64() {
                faults.set(SCHEDULE[next_change].1);
                applied.push((SCHEDULE[next_change].0, start.elapsed().as_secs_f64()));
                next_change += 1;
            }
            let sent_s = start.elapsed().as_secs_f64();
            let r = client.infer(inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
            let err = lop::exec::max_rel_err_all(&r.outputs, &whole).unwrap();
            assert!(err <= 1e-5, "frame {k} at {at_s:.2} s: relative error {err} ({:?})", r.stats.fallback_reason);
            let done_s = start.elapsed().as_secs_f64();
            answers.push(Answer { at_s, sent_s, done_s, split: !r.stats.fallback, why: r.stats.fallback_reason });
        }
        faults.set(Link::Up);
        drop(client);
        session.close().await.unwrap();
        (answers, applied)
    });
    drop(rt);

    let state_at = |t: f64| SCHEDULE.iter().rev().find(|(s, _)| *s <= t).map_or(Link::Up, |(_, l)| *l);
    let expected = (SCHEDULE[SCHEDULE.len() - 1].0 * f64::from(FPS)).round() as usize;
    let mut report = Vec::new();
    for (name, state) in [("up", Link::Up), ("down", Link::Down), ("30% loss", Link::Lossy(30))] {
        // By the link's state when the inference began (frames queue behind a slow one).
        let of: Vec<&Answer> = answers.iter().filter(|a| state_at(a.sent_s) == state).collect();
        let split = of.iter().filter(|a| a.split).count();
        let slowest = of.iter().map(|a| a.done_s - a.at_s).fold(0.0, f64::max) * 1e3;
        let mut took: Vec<f64> = of.iter().map(|a| (a.done_s - a.sent_s) * 1e3).collect();
        took.sort_by(f64::total_cmp);
        let (p50, max) = (took.get(took.len() / 2).copied().unwrap_or(0.0), took.last().copied().unwrap_or(0.0));
        report.push(format!(
            "{name}: {} frames, {split} split, {} alone, inference p50 {p50:.0} ms max {max:.0} ms, capture to answer at most {slowest:.0} ms",
            of.len(),
            of.len() - split
        ));
    }
    // From the link's return to the first split answer among the inferences begun after it.
    // Counted from when each began, not from its frame's capture: this loop answers every frame
    // in turn, so frames captured during the loss (each that tried the edge waited ~270 ms)
    // queue up, and the first frame captured after the return may only begin seconds later
    // (`lop_robot` takes the newest frame instead and has no such backlog).
    let mut backs = Vec::new();
    for scheduled in RETURNS {
        // From the moment the rules were lifted, which may be up to one inference after the
        // scheduled time.
        let r = applied.iter().find(|(at, _)| *at == scheduled).map_or(scheduled, |(_, when)| *when);
        let back = answers.iter().find(|a| a.sent_s >= r && a.split).map(|a| a.done_s - r);
        backs.push((scheduled, r, back));
    }
    eprintln!("chaos-netns: {} of {expected} frames answered exactly; {}", answers.len(), report.join("; "));
    for (_, r, back) in &backs {
        eprintln!(
            "chaos-netns: link back at {r:.2} s: split again after {}",
            back.map_or("never".into(), |b| format!("{:.0} ms", b * 1e3))
        );
    }
    let log = {
        let mut edge = edge;
        edge.log_now()
    };
    assert!(answers.len() >= expected, "{} frames answered of {expected}", answers.len());
    let early: Vec<(f64, &Option<String>)> = answers.iter().filter(|a| a.sent_s < 2.0 && !a.split).map(|a| (a.at_s, &a.why)).collect();
    assert!(early.is_empty(), "fell back before any fault: {early:?}\n{log}");
    assert!(answers.iter().any(|a| state_at(a.sent_s) == Link::Down && !a.split), "no frame fell back while the link was cut");
    // A silent edge makes the robot run alone at once (SILENT_EDGE_RETRY): most inferences begun
    // while the link was down did not wait for a deadline (each that tries the edge waits ~270 ms).
    let down: Vec<&Answer> = answers.iter().filter(|a| state_at(a.sent_s) == Link::Down).collect();
    let at_once = down.iter().filter(|a| a.done_s - a.sent_s < 0.1).count();
    assert!(at_once * 2 > down.len(), "only {at_once} of {} inferences begun while the link was down ran alone at once", down.len());
    for (scheduled, r, back) in backs {
        let back = back.unwrap_or_else(|| panic!("never split again after the link came back at {r:.2} s:\n{log}"));
        // What each inference begun after the return did until the first split one.
        let after: Vec<String> = answers
            .iter()
            .filter(|a| a.sent_s >= r && a.sent_s - r <= back)
            .take(12)
            .map(|a| format!("{:.2}+{:.0}ms {:?}", a.sent_s, (a.done_s - a.sent_s) * 1e3, a.why))
            .collect();
        eprintln!("chaos-netns: begun since {r:.2} s: {}", after.join(", "));
        if scheduled == LOSS_RETURN && !rto_capped {
            lop_runtime::skips::may_skip(
                "chaos-netns: the return after the loss",
                "rto-cap",
                &format!("this kernel cannot cap TCP's retransmission backoff, so the return is not held to {} s", BACK_WITHIN.as_secs()),
            );
            continue;
        }
        assert!(
            back <= BACK_WITHIN.as_secs_f64(),
            "split again {back:.2} s after the link came back at {r:.2} s; inferences begun since: {}\n{log}",
            after.join(", ")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
