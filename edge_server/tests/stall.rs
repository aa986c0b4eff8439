//! A stalled robot beside streaming ones (issue 56): four robot processes (`lop stream`) send
//! 30 fps each into one `lop_edge`; one of them is stopped with SIGSTOP for 10 s, as a robot
//! whose process hangs or whose Wi-Fi freezes it, and continued. The edge must not hold the
//! stopped robot's traffic without bound, the other three must lose no frame and stay on split
//! inference as they were before the stall, and the stopped robot must be back on split
//! inference within 2 s of SIGCONT. Bounded in frames and time.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Edge, OneModelEdge, free_port, rss_bytes};

const MODEL: &str = "zoo:resnet18@32x32";
const ROBOTS: usize = 4;
const FPS: u32 = 30;
/// Each robot's stream: long enough for the others' start, the stall and the recovery after it.
const FRAMES: u32 = 25 * FPS;
const STALL: Duration = Duration::from_secs(10);
/// How soon the stopped robot must split again once continued.
const RESUME_WITHIN: Duration = Duration::from_secs(2);
/// Most growth of the edge's memory while the robot is stopped.
const MOST_EDGE_GROWTH: u64 = 64 << 20;

/// The `lop` command beside this test binary (target/release/lop: the test command builds every
/// binary of the workspace first).
fn lop_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(|deps| deps.parent()).map(|dir| dir.join("lop")).unwrap();
    assert!(bin.exists(), "{} is missing: build it first (cargo build --release -p lop_cli)", bin.display());
    bin
}

/// One answered frame as `lop stream` printed it, stamped when this test read it.
#[derive(Debug, Clone)]
struct Line {
    read: Instant,
    frame: u64,
    split: bool,
    exact: bool,
    skipped_before: u64,
}

/// A `lop stream` process and the lines read from it so far.
struct Robot {
    child: Child,
    lines: mpsc::Receiver<(Instant, String)>,
    seen: Vec<Line>,
    summary: Option<serde_json::Value>,
}

impl Robot {
    fn start(endpoint: &str, id: &str, table: &std::path::Path) -> Robot {
        let mut child = Command::new(lop_bin())
            .args(["--threads", "1", "stream", MODEL, "--connect", endpoint, "--robot-id", id, "--model-id", "resnet18"])
            .arg("--table")
            .arg(table)
            .args(["--fps", &FPS.to_string(), "--frames", &FRAMES.to_string(), "--bandwidth", "30", "--hello-timeout", "30"])
            // Its fallbacks while stopped are expected: errors only.
            .env("LOP_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((Instant::now(), l)).is_err() {
                    break;
                }
            }
        });
        Robot { child, lines, seen: Vec::new(), summary: None }
    }

    /// Takes the lines read so far.
    fn drain(&mut self) {
        while let Ok((read, text)) = self.lines.try_recv() {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not a JSON line ({e}): {text}"));
            if v["summary"].as_bool() == Some(true) {
                self.summary = Some(v);
                continue;
            }
            let field = |k: &str| v[k].as_bool().unwrap_or_else(|| panic!("no {k} in {text}"));
            let number = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {text}"));
            self.seen.push(Line {
                read,
                frame: number("frame"),
                split: field("split"),
                exact: field("exact"),
                skipped_before: number("skipped_before"),
            });
        }
    }

    fn signal(&self, sig: i32) {
        let pid = i32::try_from(self.child.id()).unwrap();
        // SAFETY: kill(2) on our own child's pid with a valid signal number.
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
    }
}

impl Drop for Robot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The share of `lines` answered by the split with the edge.
fn split_share(lines: &[&Line]) -> f64 {
    lines.iter().filter(|l| l.split).count() as f64 / lines.len().max(1) as f64
}

#[test]
fn a_robot_stopped_for_10_s_beside_three_streaming_ones_costs_them_nothing_and_resumes() {
    // Alone on the two cores (tests/all.rs).
    let _heavy = crate::HEAVY.blocking_lock();
    let endpoint = format!("tcp/127.0.0.1:{}", free_port());
    let OneModelEdge { dir, config, table, .. } = OneModelEdge::prepare("stall", MODEL, &endpoint, "", "replicas: 2\nthreads: 1\n", 13);
    let table_file = dir.join("table.json");
    table.save(&table_file).unwrap();
    let mut edge = Edge::start(&config);
    let edge_pid = edge.child.id().to_string();
    let mut robots: Vec<Robot> = (0..ROBOTS).map(|i| Robot::start(&endpoint, &format!("stall-{i}"), &table_file)).collect();

    // Every robot streaming and split with the edge before the stall (its processes load the model
    // and connect one after another on the two cores).
    let deadline = Instant::now() + Duration::from_secs(90);
    while !robots.iter_mut().all(|r| {
        r.drain();
        r.seen.iter().filter(|l| l.split).count() >= 30
    }) {
        assert!(Instant::now() < deadline, "the robots did not all split 30 frames within 90 s:\n{}", edge.log_now());
        std::thread::sleep(Duration::from_millis(50));
    }
    let rss_before = rss_bytes(&edge_pid);
    let stopped = Instant::now();
    robots[0].signal(libc::SIGSTOP);
    let mut rss_peak = rss_before;
    while stopped.elapsed() < STALL {
        std::thread::sleep(Duration::from_millis(250));
        rss_peak = rss_peak.max(rss_bytes(&edge_pid));
    }
    robots[0].signal(libc::SIGCONT);
    let continued = Instant::now();

    // Each stream ends on its own after FRAMES frames.
    for r in &mut robots {
        let end = Instant::now() + Duration::from_secs(60);
        while r.summary.is_none() {
            assert!(Instant::now() < end, "a robot did not finish its stream");
            std::thread::sleep(Duration::from_millis(50));
            r.drain();
        }
        assert!(r.child.wait().unwrap().success(), "lop stream failed");
    }
    let rss_end = rss_bytes(&edge_pid);
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "stall: lop_edge RSS {:.1} MiB at SIGSTOP, peak {:.1} MiB during the {} s stall, {:.1} MiB at the end",
        mib(rss_before),
        mib(rss_peak),
        STALL.as_secs(),
        mib(rss_end)
    );
    let stall = |l: &&Line| l.read >= stopped && l.read < continued;
    for (i, r) in robots.iter().enumerate() {
        let summary = r.summary.as_ref().unwrap();
        let (before, during): (Vec<&Line>, Vec<&Line>) =
            (r.seen.iter().filter(|l| l.read < stopped).collect(), r.seen.iter().filter(stall).collect());
        eprintln!(
            "stall: robot {i}: {} answered, {} split, {} skipped; before the stall {} frames {:.0}% split, during it {} frames {:.0}% split",
            r.seen.len(),
            r.seen.iter().filter(|l| l.split).count(),
            summary["skipped"],
            before.len(),
            100.0 * split_share(&before),
            during.len(),
            100.0 * split_share(&during)
        );
        assert!(r.seen.iter().all(|l| l.exact), "robot {i}: an answer was not the unsplit model's");
        // No frame lost: every frame of the stream answered, or replaced by a newer one before
        // the robot could take it (counted), each once and in order.
        let skipped = summary["skipped"].as_u64().unwrap();
        assert_eq!(r.seen.len() as u64 + skipped, u64::from(FRAMES), "robot {i}: frames answered and replaced do not add up to the stream");
        let at_end = summary["skipped_at_end"].as_u64().unwrap();
        assert_eq!(r.seen.iter().map(|l| l.skipped_before).sum::<u64>() + at_end, skipped, "robot {i}: replaced frames miscounted");
        // Each line's frame number follows the one before it and the frames replaced between.
        let mut next = 0;
        for l in &r.seen {
            assert_eq!(l.frame, next + l.skipped_before, "robot {i}: frame {} out of order or its replaced frames miscounted", l.frame);
            next = l.frame + 1;
        }
        assert_eq!(next + at_end, u64::from(FRAMES), "robot {i}: the frames replaced after the last answer miscounted");
    }
    for (i, r) in robots.iter().enumerate().skip(1) {
        let before: Vec<&Line> = r.seen.iter().filter(|l| l.read < stopped).collect();
        let during: Vec<&Line> = r.seen.iter().filter(stall).collect();
        // Kept up at the camera's rate (the stall's frames mostly answered, not replaced) and
        // split as before it.
        assert!(
            during.len() as f64 >= 0.8 * STALL.as_secs_f64() * f64::from(FPS),
            "robot {i}: {} frames answered during the stall",
            during.len()
        );
        assert!(
            split_share(&during) >= split_share(&before) - 0.1,
            "robot {i}: split {:.0}% during the stall against {:.0}% before",
            100.0 * split_share(&during),
            100.0 * split_share(&before)
        );
    }
    let back = robots[0].seen.iter().find(|l| l.read >= continued && l.split).map(|l| l.read.duration_since(continued));
    eprintln!("stall: the stopped robot split again {back:?} after SIGCONT");
    let back = back.expect("the stopped robot never split again after SIGCONT");
    assert!(back <= RESUME_WITHIN, "the stopped robot split again {back:?} after SIGCONT");
    assert!(rss_peak <= rss_before + MOST_EDGE_GROWTH, "lop_edge grew by {:.1} MiB while a robot was stopped", mib(rss_peak - rss_before));
    drop(robots);
    drop(edge);
    let _ = std::fs::remove_dir_all(&dir);
}
