//! `lop bench` end to end through the binary: the JSON contract for the in-process link, Zenoh
//! on loopback, and (where network namespaces are usable) the tc-shaped veth pair, including
//! that no namespace is left behind after a run or after an interrupted one.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The benchmarks time real inferences with deadlines: one at a time, so that parallel tests on
/// a small machine do not starve each other into deadline fallbacks.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn scratch(name: &str) -> PathBuf {
    lop_runtime::scratch::scratch_dir("lop-bench-test", name)
}

fn trace() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/traces/indoor.csv").display().to_string()
}

/// Quick settings: synthetic profiles, four buckets, a private plan cache. Three untimed
/// inferences per method: an edge's first inference costs more than the plan says (its kernels
/// prepared, its buffers allocated), and on a loaded machine it can miss its deadline; the
/// robot then takes the edge for silent and runs the next inference alone, without trying it;
/// the third tries the edge again, warm by then.
fn bench_args(cache: &str, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["bench", "zoo:resnet18", "--trace", &trace(), "--requests", "2", "--json", "--synthetic-profiles"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(["--dilation", "8", "--buckets", "0:30:10", "--warmup", "3", "--cache-dir", cache].map(String::from));
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run_lop(args: &[String]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lop")).args(args).output().expect("the lop binary runs")
}

fn json(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "lop bench failed: {}\nstderr: {}", out.status, String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

/// One request as `lop bench --verbose` prints it on stderr (`<method> #<i> <ms> ms bucket <mb/s>
/// up <B> B down <B> B robot <ms> ms [server <ms> ms] [FALLBACK]`).
#[derive(Debug)]
struct Request {
    up: f64,
    down: f64,
    /// The server's compute as the edge's Done reported it, where the robot had it.
    server_ms: Option<f64>,
    fallback: bool,
}

/// The `--verbose` lines of `method`'s requests (`layer` prints as `layer-partition`).
fn requests(stderr: &str, method: &str) -> Vec<Request> {
    let shown = if method == "layer" { "layer-partition" } else { method };
    stderr
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            if words.first() != Some(&shown) || !words.get(1).is_some_and(|w| w.starts_with('#')) {
                return None;
            }
            let after = |key: &str| {
                let i = words.iter().position(|w| *w == key)?;
                Some(words.get(i + 1)?.parse::<f64>().unwrap_or_else(|e| panic!("{key} in '{l}': {e}")))
            };
            let up = after("up").unwrap_or_else(|| panic!("no bytes up in '{l}'"));
            let down = after("down").unwrap_or_else(|| panic!("no bytes down in '{l}'"));
            Some(Request { up, down, server_ms: after("server"), fallback: words.last() == Some(&"FALLBACK") })
        })
        .collect()
}

/// Checks a `lop bench --json --verbose` run's report (`v`, from stdout) against its `stderr`,
/// which has a line per request.
fn check_report(v: &serde_json::Value, transport: &str, stderr: &str) {
    for key in ["model", "trace", "dilation", "bandwidth_scale", "input_wire", "transport", "methods"] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["transport"], transport);
    assert_eq!(v["model"], "zoo:resnet18");
    assert_eq!(v["input_wire"], "native");
    assert_eq!(v["dilation"].as_f64(), Some(8.0));
    assert!(v["bandwidth_scale"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    let methods = v["methods"].as_object().expect("methods");
    let mut names: Vec<&str> = methods.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["layer", "lop", "robot-only", "server-only"]);
    for (name, m) in methods {
        for key in ["requests", "mean_ms", "std_ms", "p50_ms", "p95_ms", "sim_mean_ms", "bytes_up", "bytes_down", "energy_j", "fallbacks"] {
            assert!(m.get(key).is_some(), "{name}: missing {key}: {m}");
        }
        assert_eq!(m["requests"], 2, "{name}");
        let lines = requests(stderr, name);
        assert_eq!(lines.len(), 2, "{name}: a --verbose line per request:\n{stderr}");
        assert_eq!(m["fallbacks"], lines.iter().filter(|r| r.fallback).count(), "{name}: {m}\n{stderr}");
        assert_eq!(m["fallbacks"], 0, "{name}: {m}\n{stderr}");
        let num = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{name}.{k} is a number: {m}"));
        assert!(num("mean_ms") > 0.0 && num("p50_ms") > 0.0 && num("p95_ms") >= num("p50_ms"), "{name}: {m}");
        assert!(num("std_ms") >= 0.0 && num("sim_mean_ms") > 0.0 && num("energy_j") > 0.0, "{name}: {m}");
        assert!(num("max_rel_err") <= 1e-5, "{name}: {m}");
    }
    let f = |m: &str, k: &str| methods[m][k].as_f64().unwrap_or(f64::NAN);
    // Yardsticks in each method's buckets: the best baseline is no worse than any baseline, LOSS
    // is no worse than the best baseline, and server-only is a plan the server-pipelining bound
    // covers (the bound is absent only when a request ran in bucket 0, no link).
    let eps = 1e-6;
    for m in ["robot-only", "server-only", "layer"] {
        assert!(f(m, "sim_best_baseline_ms") <= f(m, "sim_mean_ms") + eps, "{m}: {v}");
    }
    assert!(f("lop", "sim_mean_ms") <= f("lop", "sim_best_baseline_ms") + eps, "{v}");
    if let Some(b) = methods["server-only"]["sim_bound_ms"].as_f64() {
        assert!(b <= f("server-only", "sim_mean_ms") + eps, "{v}");
    }
    // No method's plans beat the fluid bound in their buckets.
    for m in ["server-only", "layer", "lop"] {
        if let Some(b) = methods[m]["fluid_bound_ms"].as_f64() {
            assert!(b > 0.0 && b <= f(m, "sim_mean_ms") + eps, "{m}: {v}");
        }
    }
    assert_eq!(f("robot-only", "bytes_up"), 0.0);
    assert_eq!(f("robot-only", "bytes_down"), 0.0);
    // The server's compute, measured and as the simulator priced it, for the methods that use
    // the edge (and only for them), always as a pair.
    assert!(methods["robot-only"]["server_compute_ms"].is_null() && methods["robot-only"]["sim_server_compute_ms"].is_null(), "{v}");
    for (name, m) in methods {
        assert_eq!(m["server_compute_ms"].is_null(), m["sim_server_compute_ms"].is_null(), "{name}: {v}");
    }
    // What the edge measured reaches the robot in its Done, which trails the edge's last band;
    // a robot with nothing left to compute after that band (server-only: the band is the
    // output) waits for it a moment. So every request that used the edge (none fell back) has
    // the edge's figure, and none that did not.
    for name in methods.keys() {
        for r in requests(stderr, name) {
            match r.server_ms {
                Some(ms) => assert!(r.up > 0.0 && ms > 0.0, "{name}: {r:?}\n{stderr}"),
                None => assert!(r.up == 0.0, "{name}: a request that used the edge without its figure: {r:?}\n{stderr}"),
            }
        }
    }
    // Server-only's figure is the mean of its requests'.
    let server_only = requests(stderr, "server-only");
    let got: Vec<f64> = server_only.iter().filter_map(|r| r.server_ms).collect();
    let ms = f("server-only", "server_compute_ms");
    let mean = got.iter().sum::<f64>() / got.len() as f64;
    // The lines print 0.1 ms.
    assert!(!got.is_empty() && (ms - mean).abs() <= 0.051, "{ms} ms reported, the requests had {server_only:?}: {v}");
    assert!(f("server-only", "sim_server_compute_ms") > 0.0, "{v}");
    // LOP's plans may leave the server idle in some buckets: a figure, where there is one, lies
    // among its requests'.
    if let Some(ms) = methods["lop"]["server_compute_ms"].as_f64() {
        let lop = requests(stderr, "lop");
        let (lo, hi) =
            lop.iter().filter_map(|r| r.server_ms).fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| (lo.min(x), hi.max(x)));
        assert!(ms >= lo - 0.051 && ms <= hi + 0.051 && f("lop", "sim_server_compute_ms") >= 0.0, "{ms} ms, requests {lop:?}: {v}");
    }
    // Each server-only request: the raw 224x224x3 frame as uint8 plus frame headers went up,
    // the 1000 logits came back.
    for r in &server_only {
        assert!(r.up >= 150_528.0 && r.down >= 4_000.0, "{r:?}: {v}");
    }
}

#[test]
fn bench_json_in_process() {
    let _serial = serial();
    let cache = scratch("inprocess");
    let out = run_lop(&bench_args(cache.to_str().expect("utf8"), &["--transport", "inprocess", "--verbose"]));
    check_report(&json(&out), "inprocess", &String::from_utf8_lossy(&out.stderr));
}

#[test]
fn bench_json_over_zenoh_loopback() {
    let _serial = serial();
    let cache = scratch("zenoh");
    let out = run_lop(&bench_args(cache.to_str().expect("utf8"), &["--transport", "zenoh", "--verbose"]));
    let v = json(&out);
    check_report(&v, "zenoh", &String::from_utf8_lossy(&out.stderr));
    assert!(v["link"].as_str().is_some_and(|l| l.contains("UNSHAPED")), "{v}");
    assert_eq!(v["edge_counts"]["dropped"]["malformed"], 0, "{v}");
}

fn namespaces() -> Option<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether network namespaces work here (root, iproute2); skips loudly, or fails under `CI`.
fn netns_usable() -> bool {
    lop_runtime::netns::NetnsLink::available_for_test("netns benchmark test")
}

#[test]
fn bench_json_over_netns_and_cleanup() {
    let _serial = serial();
    if !netns_usable() {
        return;
    }
    let cache = scratch("netns");
    let cache = cache.to_str().expect("utf8");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lop"))
        .args(bench_args(cache, &["--netns", "--edge-port", "7611", "--verbose"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the lop binary runs");
    let prefix = format!("lopb{}-", child.id());
    // While it runs, its namespaces exist (polled for at most 60 s).
    let t0 = Instant::now();
    let mut seen = false;
    while t0.elapsed() < Duration::from_secs(60) {
        if namespaces().is_some_and(|l| l.contains(&prefix)) {
            seen = true;
            break;
        }
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("lop bench --netns finishes");
    let v = json(&out);
    check_report(&v, "zenoh-netns", &String::from_utf8_lossy(&out.stderr));
    assert!(seen, "the run's namespaces {prefix}robot/edge existed while it ran");
    let shaping = v["netns"]["shaping"].as_array().expect("shaping stats");
    assert_eq!(shaping.len(), 4, "the trace replay restarted for every method: {v}");
    assert!(shaping.iter().all(|s| s[1]["failures"] == 0 && s[1]["updates"].as_u64().is_some_and(|u| u >= 2)), "{v}");
    let left = namespaces().expect("ip netns list");
    assert!(!left.contains(&prefix), "namespaces left behind: {left}");
}

#[test]
fn bench_netns_interrupted_cleans_up() {
    let _serial = serial();
    if !netns_usable() {
        return;
    }
    let cache = scratch("netns-int");
    let cache = cache.to_str().expect("utf8");
    // Many requests: the run is interrupted long before it ends.
    let mut args = bench_args(cache, &["--netns", "--edge-port", "7612"]);
    let n = args.iter().position(|a| a == "--requests").expect("--requests") + 1;
    args[n] = "100000".into();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lop")).args(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("runs");
    let pid = child.id();
    let prefix = format!("lopb{pid}-");
    let t0 = Instant::now();
    let mut seen = false;
    while t0.elapsed() < Duration::from_secs(60) && child.try_wait().expect("wait").is_none() {
        if namespaces().is_some_and(|l| l.contains(&format!("{prefix}robot")) && l.contains(&format!("{prefix}edge"))) {
            seen = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(seen, "the namespaces appeared");
    // Let inferences run for a moment, then interrupt as Ctrl-C would.
    std::thread::sleep(Duration::from_millis(1500));
    let killed = Command::new("kill").args(["-INT", &pid.to_string()]).status().expect("kill runs");
    assert!(killed.success());
    let t1 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(t1.elapsed() < Duration::from_secs(30), "lop bench did not stop within 30 s of SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success(), "an interrupted run fails: {stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let left = namespaces().expect("ip netns list");
    assert!(!left.contains(&prefix), "namespaces left behind after SIGINT: {left}");
    // No edge process of this run is left either.
    let ps = Command::new("ps").args(["-eo", "pid,ppid,args"]).output().expect("ps");
    let ps = String::from_utf8_lossy(&ps.stdout);
    let orphan = ps.lines().any(|l| l.contains("bench-edge") && l.contains(&format!("lopb{pid}-edge.json")));
    assert!(!orphan, "the edge process outlived the run:\n{ps}");
}

#[test]
fn bench_overhead_json() {
    let _serial = serial();
    let cache = scratch("overhead");
    let args: Vec<String> = [
        "bench",
        "zoo:resnet18",
        "--overhead",
        "--requests",
        "2",
        "--json",
        "--synthetic-profiles",
        "--cache-dir",
        cache.to_str().expect("utf8"),
    ]
    .map(String::from)
    .to_vec();
    let v = json(&run_lop(&args));
    assert_eq!(v["transport"], "zenoh");
    assert_eq!(v["requests"], 2);
    assert_eq!(v["fallbacks"], 0, "{v}");
    assert_eq!(v["input_bytes"], 3 * 224 * 224, "the raw frame as uint8: {v}");
    assert_eq!(v["output_bytes"], 4 * 1000, "{v}");
    let num = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} is a number: {v}"));
    for k in ["forward_ms", "transfer_ms", "runtime_mean_ms", "runtime_p50_ms"] {
        assert!(num(k) > 0.0, "{k}: {v}");
    }
    // Every one of (c)'s server-only inferences has the edge's compute figure from its Done.
    assert_eq!(v["server_compute_reported"], 2, "{v}");
    assert!(num("server_compute_ms") > 0.0, "{v}");
    let ratio = num("ratio");
    assert!((ratio - num("runtime_p50_ms") / (num("forward_ms") + num("transfer_ms"))).abs() < 1e-9, "{v}");
    // Loose: tests share a small machine with builds; measure the ratio with `lop bench
    // --overhead` on a quiet machine (docs/benchmarks.md).
    assert!(ratio > 0.3 && ratio < 5.0, "{v}");
    assert!(num("max_rel_err") <= 1e-5, "{v}");
}

/// `--post-side robot` pins LOP's post-processing to the robot: the runtime then brings the raw
/// heads down and decodes them there, still exactly; without `--methods lop`, or without a
/// task, it is refused.
#[test]
fn bench_post_processing_pinned_to_the_robot() {
    let _serial = serial();
    let cache = scratch("post-robot");
    let cache = cache.to_str().expect("utf8");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["bench", "zoo:yolo_det@64x64", "--trace", &trace(), "--requests", "2", "--json", "--synthetic-profiles"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(["--dilation", "8", "--buckets", "0:30:10", "--cache-dir", cache, "--post-side", "robot"].map(String::from));
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let v = json(&run_lop(&args(&["--task", "detect", "--methods", "lop"])));
    assert_eq!(v["post_side"], "robot", "{v}");
    let methods = v["methods"].as_object().expect("methods");
    assert_eq!(methods.keys().collect::<Vec<_>>(), ["lop"], "{v}");
    let lop = &methods["lop"];
    assert_eq!(lop["fallbacks"], 0, "{v}");
    assert!(lop["max_rel_err"].as_f64().is_some_and(|e| e <= 1e-5), "{v}");
    // The raw heads, [1, 84, 84] floats (28.2 kB), or the values the robot computes them from,
    // come down (bucket 0 runs robot-only: none), not detections (at most 300 x 6 floats, 7.2 kB).
    assert!(lop["bytes_down"].as_f64().is_some_and(|b| b >= 0.9 * 84.0 * 84.0 * 4.0), "{v}");
    assert!(v["lop_vs_best_other"].is_null(), "no baseline ran: {v}");
    for (extra, says) in [
        (&["--task", "detect"][..], "run it with --methods lop"),
        (&["--methods", "lop"][..], "needs a --task with a post-processing stage"),
    ] {
        let out = run_lop(&args(extra));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says) && !err.contains("panicked"), "{extra:?}: {err}");
    }
}

/// A bad `--deadline-slack-ms` is refused by name before anything loads: with a model that does
/// not exist, the error is still about the slack.
#[test]
fn bench_refuses_a_bad_deadline_slack_before_loading() {
    for bad in ["-1", "inf", "NaN", "4000000"] {
        let args = ["bench".into(), "/nonexistent/model.onnx".into(), "--trace".into(), trace(), format!("--deadline-slack-ms={bad}")];
        let out = run_lop(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--deadline-slack-ms {bad} is refused");
        assert!(stderr.contains("--deadline-slack-ms") && stderr.contains("must be in [0, 3600000]"), "{bad}: {stderr}");
        assert!(!stderr.contains("nonexistent"), "{bad}: refused before the model loads: {stderr}");
    }
}
