//! End-to-end tests of the `lop` binary: JSON contracts, exit codes, and clear errors on bad
//! input.

use std::path::PathBuf;
use std::process::{Command, Output};

fn lop(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lop")).args(args).output().expect("the lop binary runs")
}

/// `lop plan MODEL --robot-profile ROBOT --server-profile SERVER --out OUT`, then `extra`.
fn plan_args<'a>(model: &'a str, robot: &'a str, server: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["plan", model, "--robot-profile", robot, "--server-profile", server, "--out", out];
    args.extend(extra);
    args
}

fn stdout_json(out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

use lop_runtime::ports::free_loopback_port as free_port;

fn scratch(name: &str) -> PathBuf {
    lop_runtime::scratch::scratch_dir("lop-cli-test", name)
}

#[test]
fn inspect_json_counts_resnet18() {
    let out = lop(&["inspect", "zoo:resnet18", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["model"], "resnet18");
    let ops = v["ops"].as_u64().expect("ops");
    let local = v["local"].as_u64().expect("local");
    let global = v["global"].as_u64().expect("global");
    assert_eq!(ops, local + global);
    // GAP, flatten and the classifier are the only barriers.
    assert_eq!(global, 3, "{v}");
    let classes = v["classes"].as_object().expect("classes");
    let sum: u64 = classes.values().map(|c| c.as_u64().expect("count")).sum();
    assert_eq!(sum, ops);
    assert!(classes["block_wise"].as_u64().expect("block_wise") >= 20);
    // Counted before fusion (the model as it is), then what fusion does to it: the stem's and
    // each block's first convolution take their ReLU; the ReLUs after residual adds read no
    // convolution, so they are not listed.
    assert_eq!(v["kinds"]["Relu"], 17, "{v}");
    let fused = v["fusion"]["fused"].as_array().expect("fused");
    assert_eq!(fused.len(), 9, "{v}");
    assert!(fused.iter().all(|f| f["act"] == "Relu" && f["removed"].as_array().is_some_and(|r| r.len() == 1)), "{v}");
    assert_eq!(v["fusion"]["applied"], true, "{v}");
}

/// `lop inspect` prints what fusion does, and with `LOP_FUSE=off` says that it is not applied
/// (the fusion pass's reasons for what it leaves are checked in `lop::fuse`).
#[test]
fn inspect_prints_fusion_and_whether_it_applies() {
    let on = lop(&["inspect", "zoo:mobilenet_v2"]);
    assert!(on.status.success(), "{}", String::from_utf8_lossy(&on.stderr));
    let text = String::from_utf8_lossy(&on.stdout);
    assert!(text.contains("fused      35 convolutions take their activation: 35 Clip\n"), "{text}");
    let off = Command::new(env!("CARGO_BIN_EXE_lop")).args(["inspect", "zoo:resnet18"]).env("LOP_FUSE", "off").output().expect("lop runs");
    let text = String::from_utf8_lossy(&off.stdout);
    assert!(text.contains("fused      9 convolutions") && text.contains("not applied: LOP_FUSE=off"), "{text}");
}

#[test]
fn verify_json_passes_on_a_zoo_model() {
    let out = lop(&["verify", "zoo:occupancy3d@64x64x16", "--plans", "3", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["plans"], 3);
    assert_eq!(v["ok"], true);
    let err = v["max_rel_err"].as_f64().expect("max_rel_err");
    assert!((0.0..=1e-5).contains(&err), "{err}");
    // The rule is stated: an absolute floor of 8 float32 ulps at 1.0 plus 1e-5 of the scale.
    assert_eq!(v["rule"], "|a - b| <= 9.5e-7 + 1e-5 x max|b|", "{v}");
}

#[test]
fn verify_exits_non_zero_above_tolerance() {
    // A tolerance below any float rounding of a replicated conv is exceeded by some layout.
    let out = lop(&["verify", "zoo:resnet18", "--plans", "4", "--tol", "0", "--abs-tol", "0", "--json"]);
    let v = stdout_json(&out);
    assert_eq!(v["rule"], "|a - b| <= 0.0e0 + 0e0 x max|b|", "{v}");
    if v["max_rel_err"].as_f64().expect("err") > 0.0 {
        assert_eq!(out.status.code(), Some(1), "{v}");
        assert_eq!(v["ok"], false);
    } else {
        assert!(out.status.success());
    }
}

#[test]
fn run_writes_outputs_and_split_matches_whole() {
    let dir = scratch("run");
    let input = dir.join("x.npy");
    let x = tch::Tensor::randn([1, 1, 64, 64, 16], (tch::Kind::Float, tch::Device::Cpu));
    x.write_npy(&input).expect("write input");
    let whole = dir.join("whole.npy");
    let split = dir.join("split.npy");
    for (path, mode) in [(&whole, "whole"), (&split, "random:7")] {
        let out = lop(&[
            "run",
            "zoo:occupancy3d@64x64x16",
            "--input",
            input.to_str().expect("utf8"),
            "--output",
            path.to_str().expect("utf8"),
            "--split",
            mode,
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let a = tch::Tensor::read_npy(&whole).expect("whole output");
    let b = tch::Tensor::read_npy(&split).expect("split output");
    assert_eq!(a.size(), b.size());
    let err = (&a - &b).abs().max().double_value(&[]) / a.abs().max().double_value(&[]);
    assert!(err <= 1e-5, "split output differs: {err}");
}

#[test]
fn bad_inputs_give_clear_errors_not_panics() {
    let dir = scratch("bad");
    // Wrong dtype: the image models take uint8 frames.
    let f32_input = dir.join("f32.npy");
    tch::Tensor::zeros([1, 3, 224, 224], (tch::Kind::Float, tch::Device::Cpu)).write_npy(&f32_input).expect("write");
    let out =
        lop(&["run", "zoo:resnet18", "--input", f32_input.to_str().expect("utf8"), "--output", dir.join("y.npy").to_str().expect("utf8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("dtype") && !err.contains("panicked"), "{err}");
    // Wrong shape.
    let small = dir.join("small.npy");
    tch::Tensor::zeros([1, 3, 100, 100], (tch::Kind::Uint8, tch::Device::Cpu)).write_npy(&small).expect("write");
    let out =
        lop(&["run", "zoo:resnet18", "--input", small.to_str().expect("utf8"), "--output", dir.join("y.npy").to_str().expect("utf8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("[1, 3, 224, 224]"), "{err}");
    // Not an npy file at all.
    let junk = dir.join("junk.npy");
    std::fs::write(&junk, b"definitely not numpy").expect("write");
    let out = lop(&["run", "zoo:resnet18", "--input", junk.to_str().expect("utf8"), "--output", dir.join("y.npy").to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    // Unknown model and malformed ONNX.
    let out = lop(&["inspect", "zoo:nosuchnet"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("zoo:resnet50"), "lists the zoo: {err}");
    let bad_onnx = dir.join("bad.onnx");
    std::fs::write(&bad_onnx, [0xffu8, 0x13, 0x00, 0x42, 0x99]).expect("write");
    let out = lop(&["inspect", bad_onnx.to_str().expect("utf8")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // Unknown split.
    let out =
        lop(&["run", "zoo:occupancy3d@64x64x16", "--input", small.to_str().expect("utf8"), "--output", "y.npy", "--split", "sideways"]);
    assert_eq!(out.status.code(), Some(2));
    // `lop stream`: a rate that is no rate, and a table that is not there, each named.
    let stream = |fps: &str, table: &str| {
        let args = [
            "stream",
            "zoo:resnet18@32x32",
            "--connect",
            "tcp/127.0.0.1:9",
            "--robot-id",
            "r",
            "--model-id",
            "m",
            "--fps",
            fps,
            "--table",
            table,
        ];
        let out = lop(&args);
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = stream("0", "table.json");
    assert!(code == Some(2) && err.contains("--fps 0: must be in [0.01, 1000]"), "{err}");
    let missing = dir.join("no-such-table.json");
    let (code, err) = stream("30", missing.to_str().expect("utf8"));
    assert!(code == Some(2) && err.contains("reading the schedule table") && err.contains("no-such-table.json"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bench_exec_json_has_the_contract_keys() {
    let out = lop(&["bench-exec", "zoo:occupancy3d@64x64x16", "--runs", "3", "--warmup", "1", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    for key in ["model", "whole_ms", "banded_ms", "ratio", "peak_mem_ratio"] {
        assert!(!v[key].is_null(), "missing {key}: {v}");
    }
    let ratio = v["ratio"].as_f64().expect("ratio");
    assert!(ratio > 0.0 && ratio.is_finite());
}

/// `--layout`, `--bands` and `--kinds`: the layout run, the banded run's ratio, a time per op
/// kind for each of the model's kinds, with the ops of each kind counted, and the floor the
/// convolutions' and linear layers' call cost sets on the banded ratio.
#[test]
fn bench_exec_times_bands_and_op_kinds_in_a_layout() {
    let args = ["bench-exec", "zoo:resnet18@64x64", "--runs", "3", "--warmup", "1", "--bands", "4", "--kinds", "--json"];
    let out = lop(&[&args[..], &["--layout", "channels_last"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!((v["layout"].as_str(), v["bands"].as_u64()), (Some("channels_last"), Some(4)), "{v}");
    let chunked = v["chunked_ratio"].as_f64().expect("chunked_ratio");
    assert!(chunked > 0.0 && chunked.is_finite(), "{v}");
    let kinds = v["kinds"].as_array().expect("kinds");
    let names: Vec<&str> = kinds.iter().filter_map(|k| k["kind"].as_str()).collect();
    for kind in ["Conv", "MaxPool", "Relu", "Add"] {
        assert!(names.contains(&kind), "{kind} missing: {v}");
    }
    // Counts, not times: a loaded machine moves times, never how many convolutions resnet18 has
    // (9 of them take the ReLU after them: the stem's and each block's first).
    let ops_of = |kind: &str| kinds.iter().find(|k| k["kind"] == kind).and_then(|k| k["ops"].as_u64());
    assert_eq!((ops_of("Conv"), ops_of("Conv+Relu")), (Some(11), Some(9)), "{v}");
    // The call-cost floor: every one of the 20 convolutions makes 3 more calls in 4 bands, each
    // costing the measured floor, so the floor ratio is 1 + 60 x floor / whole.
    // resnet18's one linear layer (the classifier) reads a value with no row axis: not counted.
    assert_eq!((v["banded_convs"].as_u64(), v["banded_linears"].as_u64()), (Some(20), Some(0)), "{v}");
    let (call, whole) = (v["conv_call_floor_ms"].as_f64().expect("floor"), v["whole_ms"].as_f64().expect("whole"));
    assert!(call > 0.0 && call < whole, "{v}");
    assert!(v["linear_call_floor_ms"].as_f64().is_some_and(|ms| ms > 0.0 && ms < whole), "{v}");
    // How many linear layers run straight on oneDNN (0 only where it is not loaded).
    assert!(v["direct_linears"].as_u64().is_some(), "{v}");
    let floor = v["chunked_floor_ratio"].as_f64().expect("floor ratio");
    assert!((floor - (1.0 + 60.0 * call / whole)).abs() < 1e-9, "{v}");
    assert!(kinds.iter().all(|k| k["ms"].as_f64().is_some_and(|ms| ms >= 0.0 && ms.is_finite())), "{v}");
    assert!(kinds.iter().all(|k| k["banded_kernel_ms"].as_f64().is_some_and(|ms| ms >= 0.0 && ms.is_finite())), "{v}");
    // Every convolution packed; bands of new heights shared or added packings, none fell to the
    // plain path.
    let packing = &v["packing"];
    assert!(packing["formats"].as_u64().is_some_and(|f| f >= 20), "{v}");
    assert!(packing["shapes"].as_u64() >= packing["formats"].as_u64(), "{v}");
    assert_eq!(packing["plain_calls"].as_u64(), Some(0), "{v}");
    let out = lop(&[&args[..], &["--layout", "sideways"]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn bench_batch_times_batches_checked_sample_by_sample_and_refuses_bad_sizes() {
    // Channels-last batches too: each sample still equals its own run.
    let out = lop(&["bench-batch", "zoo:resnet18@64x64", "--runs", "1", "--batches", "1,3", "--layout", "channels_last", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    assert_eq!(v["layout"], "channels_last", "{v}");
    assert!(v["max_rel_err"].as_f64().expect("max_rel_err") <= 1e-5, "{v}");
    let rows = v["batches"].as_array().expect("batches");
    assert_eq!(rows.iter().map(|r| r["batch"].as_u64()).collect::<Vec<_>>(), vec![Some(1), Some(3)]);
    for r in rows {
        let gain = r["throughput_gain"].as_f64().expect("gain");
        assert!(gain > 0.0 && gain.is_finite(), "{v}");
    }
    // Through the edge service: three robots back to back on one replica, batching off then on.
    let out = lop(&[
        "bench-batch",
        "zoo:resnet18@64x64",
        "--robots",
        "3",
        "--seconds",
        "2",
        "--batches",
        "4",
        "--layout",
        "channels_last",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    let settings = v["settings"].as_array().expect("settings");
    assert_eq!(settings.iter().map(|s| s["max_batch"].as_u64()).collect::<Vec<_>>(), vec![Some(1), Some(4)], "{v}");
    for s in settings {
        assert!(s["frames"].as_u64().expect("frames") > 0 && s["fallbacks"] == 0, "{v}");
        assert!(s["max_rel_err"].as_f64().expect("error") <= 1e-5, "{v}");
    }
    assert_eq!(settings[0]["batches"], 0, "no batch forms with max_batch 1: {v}");
    assert!(settings[1]["batched"].as_u64().expect("batched") >= 2, "three robots queued on one replica were never batched: {v}");
    let out = lop(&["bench-batch", "zoo:resnet18@64x64", "--robots", "3", "--layout", "auto"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("with --robots give nchw or channels_last"));
    for bad in ["0", "65", "x"] {
        let out = lop(&["bench-batch", "zoo:resnet18@64x64", "--batches", bad]);
        assert_eq!(out.status.code(), Some(2), "--batches {bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--batches") && !err.contains("panicked"), "{err}");
    }
}

#[test]
fn profile_then_plan_json_has_the_contract_and_a_reproducible_table() {
    let dir = scratch("plan");
    let (robot, server) = (dir.join("robot.json"), dir.join("server.json"));
    for (role, dilation, out) in [("robot", "3", &robot), ("server", "1", &server)] {
        let o = lop(&["profile", "zoo:resnet18", "--role", role, "--dilation", dilation, "--out", out.to_str().expect("utf8")]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let prof: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&robot).expect("robot profile")).expect("json");
    assert_eq!(
        (prof["role"].as_str(), prof["dilation"].as_f64(), prof["dilation_waits"].as_bool()),
        (Some("robot"), Some(3.0), Some(true))
    );
    let (r, s) = (robot.to_str().expect("utf8"), server.to_str().expect("utf8"));
    let plan = |out: &str| {
        let out = dir.join(out);
        let cache = dir.join("cache");
        let extra = ["--buckets", "0:6:2", "--bandwidth-scale", "auto", "--cache-dir", cache.to_str().expect("utf8"), "--json"];
        let o = lop(&plan_args("zoo:resnet18", r, s, out.to_str().expect("utf8"), &extra));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (stdout_json(&o), std::fs::read(&out).expect("table"))
    };
    let (v, table) = plan("a.table");
    assert_eq!(v["model"], "resnet18");
    assert_eq!(v["input_wire"], "native");
    assert!(v["planning_time_s"].as_f64().is_some() && v["bandwidth_scale"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    let buckets = v["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 4);
    for b in buckets {
        let m = &b["makespan_ms"];
        let lop = m["lop"].as_f64().expect("lop");
        let baselines: Vec<f64> = ["robot-only", "server-only", "layer"].iter().filter_map(|k| m[*k].as_f64()).collect();
        assert!(m.get("energy-layer").is_some(), "{b}");
        assert!(lop <= baselines.iter().copied().fold(f64::INFINITY, f64::min) + 1e-9, "LOSS worse than a baseline: {b}");
        // Server-only is one of the plans the server-pipelining bound covers.
        if b["bucket_mb_s"].as_f64() > Some(0.0) {
            let bound = b["server_pipeline_bound_ms"].as_f64().expect("bound");
            assert!(bound <= m["server-only"].as_f64().expect("server-only") + 1e-9, "{b}");
            // No plan at all beats the fluid bound; the layer search says how it ended.
            let fluid = b["fluid_bound_ms"].as_f64().expect("fluid bound");
            assert!(fluid > 0.0 && fluid <= lop + 1e-9, "{b}");
            assert!(["exact", "budget"].contains(&b["layer_search"]["status"].as_str().unwrap_or("")), "{b}");
        } else {
            assert!(b["server_pipeline_bound_ms"].is_null() && b["fluid_bound_ms"].is_null(), "no link, no bound: {b}");
        }
    }
    // The means over the buckets with a link: LOSS / best can average no lower than the fluid
    // bound / best, and both are recomputed here from the buckets.
    let m = &v["mean_ratios"];
    let linked: Vec<&serde_json::Value> = buckets.iter().filter(|b| b["bucket_mb_s"].as_f64() > Some(0.0)).collect();
    let best = |b: &serde_json::Value| {
        ["robot-only", "server-only", "layer"].iter().filter_map(|k| b["makespan_ms"][*k].as_f64()).fold(f64::INFINITY, f64::min)
    };
    let mean = |key: &dyn Fn(&serde_json::Value) -> f64| linked.iter().map(|b| key(b) / best(b)).sum::<f64>() / linked.len() as f64;
    assert_eq!(m["buckets"], linked.len());
    let (lop_mean, fluid_mean) = (m["lop_over_best"].as_f64().expect("lop"), m["fluid_over_best"].as_f64().expect("fluid"));
    assert!((lop_mean - mean(&|b| b["makespan_ms"]["lop"].as_f64().unwrap_or(f64::NAN))).abs() < 1e-9, "{m}");
    assert!((fluid_mean - mean(&|b| b["fluid_bound_ms"].as_f64().unwrap_or(f64::NAN))).abs() < 1e-9, "{m}");
    assert!(fluid_mean > 0.0 && fluid_mean <= lop_mean && lop_mean <= 1.0 + 1e-9, "{m}");
    assert!(m["pipeline_over_best"].as_f64().is_some(), "{m}");
    let (again, table_again) = plan("b.table");
    assert_eq!(again["cache"], "hit");
    assert_eq!(table, table_again, "same inputs, byte-identical table");
    // Bad input: one clear error naming the value and what was expected.
    let out = dir.join("bad.table");
    let out = out.to_str().expect("utf8");
    for (robot_file, args, says) in [
        (r, vec!["--buckets", "5:1:1"], "empty range"),
        (r, vec!["--buckets", "-3:2:1"], ">= 0"),
        (r, vec!["--threads", "0"], "--threads 0: must be at least 1"),
        (r, vec!["--post-side", "robot"], "--post-side robot needs a --task with a post-processing stage"),
        (s, vec![], "role"),
    ] {
        let o = lop(&plan_args("zoo:resnet18", robot_file, s, out, &args));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says) && !err.contains("panicked"), "{args:?}: {err}");
    }
    let o = lop(&plan_args("zoo:resnet50", r, s, out, &[]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains("not this model"), "a profile of another model: {err}");
    let o = lop(&["profile", "zoo:resnet18", "--role", "robot", "--dilation", "0", "--out", out]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains("--dilation 0: must be a positive number"), "dilation 0: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A two-convolution ONNX model whose input height and width are dynamic (`make_dynamic_conv.py`).
fn dynamic_model() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/dynamic_conv.onnx").display().to_string()
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every command that loads a model takes `--input-shape` (clap once panicked on it in all of
/// them), fixes the dynamic dimensions with it, and without it fails with a message that names
/// the dynamic dimensions and the flag.
#[test]
fn input_shape_works_in_every_command_that_loads_a_model() {
    let m = dynamic_model();
    let dir = scratch("input-shape");
    let path = |f: &str| dir.join(f).display().to_string();
    let shape = ["--input-shape", "1,3,40,32"];

    let out = lop(&["inspect", &m, "--json", shape[0], shape[1]]);
    ok(&out);
    let v = stdout_json(&out);
    assert_eq!(v["input_shapes"], serde_json::json!([[1, 3, 40, 32]]), "{v}");
    let out = lop(&["inspect", &m]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--input-shape") && err.contains("1,3,H,W"), "{err}");
    let out = lop(&["inspect", &m, "--input-shape", "1,3,0,32"]);
    assert_eq!(out.status.code(), Some(2), "a zero dimension is refused by the parser");
    // A zoo model takes a shape as its size override (zoo:resnet18@640x640) where it can.
    let out = lop(&["inspect", "zoo:resnet18", "--json", "--input-shape", "1,3,640,640"]);
    ok(&out);
    assert_eq!(stdout_json(&out)["input_shapes"], serde_json::json!([[1, 3, 640, 640]]));
    for (bad, says) in [("1,3,100,100", "multiple of 32"), ("1,4,224,224", "which takes [1, 3, 224, 224]")] {
        let out = lop(&["inspect", "zoo:resnet18", "--input-shape", bad]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{bad}: {err}");
    }

    let out = lop(&["verify", &m, "--plans", "3", "--json", shape[0], shape[1]]);
    ok(&out);
    assert_eq!(stdout_json(&out)["ok"], true);

    let out = lop(&["bench-exec", &m, "--runs", "1", "--warmup", "0", "--json", shape[0], shape[1]]);
    ok(&out);

    let robot = path("robot.json");
    let server = path("server.json");
    for (role, out_path) in [("robot", &robot), ("server", &server)] {
        ok(&lop(&["profile", &m, "--role", role, "--runs", "5", "--warmup", "0", "--out", out_path, shape[0], shape[1]]));
    }
    let table = path("table.json");
    let setup = ["--robot-profile", robot.as_str(), "--server-profile", server.as_str(), "--input-wire", "f32", shape[0], shape[1]];
    let plan = plan_args(&m, &robot, &server, &table, &["--buckets", "0:4:2", "--json", "--input-wire", "f32", shape[0], shape[1]]);
    ok(&lop(&plan));
    let mut simulate = vec!["simulate", m.as_str(), "--bandwidth", "2MB/s", "--table", table.as_str(), "--json"];
    simulate.extend(setup);
    ok(&lop(&simulate));
    // A profile measured at another shape is for another graph.
    let mut other = plan.clone();
    let last = other.len() - 1;
    other[last] = "1,3,48,32";
    assert_eq!(lop(&other).status.code(), Some(2));

    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/traces/indoor.csv").display().to_string();
    let out = lop(&[
        "bench",
        &m,
        "--trace",
        &trace,
        "--synthetic-profiles",
        "--requests",
        "2",
        "--methods",
        "server-only,lop",
        "--buckets",
        "0:4:2",
        "--input-wire",
        "f32",
        "--bandwidth-scale",
        "1",
        "--json",
        shape[0],
        shape[1],
    ]);
    ok(&out);
}

/// `lop run` takes a dynamic model's height and width from the input array, and the output
/// follows them (two sizes, one model file).
#[test]
fn run_takes_dynamic_dimensions_from_the_input() {
    let m = dynamic_model();
    let dir = scratch("run-dynamic");
    for (h, w) in [(32, 32), (48, 40)] {
        let x = dir.join(format!("x{h}.npy"));
        tch::Tensor::randn([1, 3, h, w], (tch::Kind::Float, tch::Device::Cpu)).write_npy(&x).expect("write npy");
        let y = dir.join(format!("y{h}.npy"));
        for split in ["whole", "random:3"] {
            let out = lop(&["run", &m, "--input", &x.display().to_string(), "--output", &y.display().to_string(), "--split", split]);
            ok(&out);
            let y = tch::Tensor::read_npy(&y).expect("output written");
            assert_eq!(y.size(), vec![1, 4, h / 2, w / 2], "{split}");
        }
    }
}

/// Camera bytes for a float-input model: `--input-wire u8` without a preprocess stage is an error
/// that says how to add one; with `--preprocess unit` the frame is priced as bytes (server-only
/// gets faster at a slow link than with f32), and `lop run` on the byte frame gives exactly the
/// float model's output on `x / 255`.
#[test]
fn preprocess_stage_puts_camera_bytes_on_the_wire_for_float_models() {
    let m = dynamic_model();
    let dir = scratch("preprocess");
    let path = |f: &str| dir.join(f).display().to_string();
    let shape = ["--input-shape", "1,3,32,32"];
    let (robot, server) = (path("robot.json"), path("server.json"));
    for (role, out_path) in [("robot", &robot), ("server", &server)] {
        ok(&lop(&[
            "profile",
            &m,
            "--role",
            role,
            "--runs",
            "5",
            "--warmup",
            "0",
            "--out",
            out_path,
            shape[0],
            shape[1],
            "--preprocess",
            "unit",
        ]));
    }
    let plan = |wire: &str, extra: &[&str]| {
        let table = path(&format!("table-{wire}-{}.json", extra.len()));
        let mut args = plan_args(&m, &robot, &server, &table, &["--buckets", "1:1:1", "--json", "--input-wire", wire, shape[0], shape[1]]);
        args.extend(extra);
        lop(&args)
    };
    let out = plan("u8", &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("preprocess") && err.contains("'unit'"), "{err}");
    let server_only = |out: &Output| stdout_json(out)["buckets"][0]["makespan_ms"]["server-only"].as_f64().expect("server-only ms");
    let bytes = plan("u8", &["--preprocess", "unit"]);
    ok(&bytes);
    let floats = plan("f32", &["--preprocess", "unit"]);
    ok(&floats);
    assert!(server_only(&bytes) < server_only(&floats), "{} vs {}", server_only(&bytes), server_only(&floats));

    let frame = tch::Tensor::randint(256, [1, 3, 32, 32], (tch::Kind::Uint8, tch::Device::Cpu));
    let (x8, xf, y8, yf) = (dir.join("x8.npy"), dir.join("xf.npy"), dir.join("y8.npy"), dir.join("yf.npy"));
    frame.write_npy(&x8).expect("write");
    (frame.to_kind(tch::Kind::Float) / 255.0).write_npy(&xf).expect("write");
    ok(&lop(&[
        "run",
        &m,
        "--preprocess",
        "unit",
        "--split",
        "random:5",
        "--input",
        &x8.display().to_string(),
        "--output",
        &y8.display().to_string(),
    ]));
    ok(&lop(&["run", &m, "--input", &xf.display().to_string(), "--output", &yf.display().to_string()]));
    let out = lop(&["run", &m, "--input", &x8.display().to_string(), "--output", &yf.display().to_string()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a byte frame without the stage: {err}");
    assert!(err.contains("Uint8") && err.contains("preprocess"), "{err}");
    let (a, b) = (tch::Tensor::read_npy(&y8).expect("y8"), tch::Tensor::read_npy(&yf).expect("yf"));
    // The byte frame ran split (random:5), the float frame whole: a banded convolution may sum
    // in another order on another CPU, so the one comparison rule decides, not bits.
    let agreement = lop::exec::agree(&a, &b, lop::exec::Tolerance::SPLIT).expect("same shape");
    assert!(agreement.within, "byte frame through the stage differs from the float frame: {agreement:?}");
}

/// The issue's fleet: 1000 robots, 50 servers, 60 simulated seconds, mixed models, indoor and
/// outdoor traces, at 90% of capacity. It runs in about a second; the targets it meets are held
/// here (the 1.15x least-queue target is above the attainable bound here: see the closing note).
#[test]
fn fleet_sim_full_scale_json_and_ours_against_the_baselines() {
    let out = lop(&["fleet-sim", "--robots", "1000", "--servers", "50", "--load", "0.9", "--seconds", "60", "--seed", "1", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    let p = &v["policies"];
    for name in ["lop", "nearest", "round-robin", "least-queue"] {
        for key in ["goodput", "offered", "p99_ms", "robot_energy_j", "decision_p99_us"] {
            assert!(p[name][key].as_f64().is_some_and(f64::is_finite), "{name}.{key} in {v}");
        }
        assert!(p[name]["goodput"].as_f64() <= v["attainable"].as_f64(), "{name} above the attainable bound");
    }
    let good = |name: &str| p[name]["goodput"].as_f64().unwrap_or(0.0);
    assert!(good("lop") >= 1.5 * good("nearest"), "{v}");
    assert!(good("lop") > good("least-queue") && good("lop") > good("round-robin"), "{v}");
    assert!(good("lop") >= 0.97 * v["attainable"].as_f64().unwrap_or(f64::INFINITY), "{v}");
    assert!(p["lop"]["decision_p99_us"].as_f64().unwrap_or(f64::INFINITY) <= 1000.0, "{v}");
    assert_eq!(v["models"].as_array().map(Vec::len), Some(4), "the built-in costs: {v}");
}

#[test]
fn fleet_sim_and_fleet_cost_refuse_bad_input_clearly() {
    let dir = scratch("fleet");
    let bad = |args: &[&str], want: &str| {
        let out = lop(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    };
    bad(&["fleet-sim", "--load", "0", "--seconds", "1"], "load");
    bad(&["fleet-sim", "--servers", "0", "--seconds", "1"], "servers");
    let costs = dir.join("costs.json");
    std::fs::write(&costs, r#"[{"name":"m","input_bytes":1,"output_bytes":1,"server_s":0.1,"tail_s":0.5,"robot_s":1}]"#).expect("write");
    bad(&["fleet-sim", "--seconds", "1", "--costs", costs.to_str().expect("utf8")], "exceeds the whole work");
    std::fs::write(&costs, "{}").expect("write");
    bad(&["fleet-sim", "--seconds", "1", "--costs", costs.to_str().expect("utf8")], "not a JSON array");
    // A model cost from real profiles, added to a file, then simulated.
    let (robot, server) = (dir.join("r.json"), dir.join("s.json"));
    // The robot 16x slower: its costs stay above the server's even when a busy test machine
    // slows the server's measurement several times (seen at 4x: 0.078 s robot, 0.101 s server).
    for (role, path, extra) in [("server", &server, vec![]), ("robot", &robot, vec!["--dilation", "16"])] {
        let mut args = vec!["profile", "zoo:mobilenet_v2", "--role", role, "--runs", "5", "--out", path.to_str().expect("utf8")];
        args.extend(extra);
        let out = lop(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let list = dir.join("list.json");
    let out = lop(&[
        "fleet-cost",
        "zoo:mobilenet_v2",
        "--robot-profile",
        robot.to_str().expect("utf8"),
        "--server-profile",
        server.to_str().expect("utf8"),
        "--out",
        list.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let costs: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&list).expect("list")).expect("json");
    let entry = &costs[0];
    assert_eq!(entry["name"], "mobilenet_v2");
    assert_eq!(entry["input_bytes"].as_f64(), Some(150_528.0 + 52.0), "a 224x224 RGB u8 frame and its band header: {entry}");
    let (server_s, tail_s, robot_s) = (entry["server_s"].as_f64(), entry["tail_s"].as_f64(), entry["robot_s"].as_f64());
    assert!(tail_s < server_s && server_s < robot_s, "{entry}");
    let out = lop(&["fleet-sim", "--robots", "20", "--servers", "3", "--seconds", "5", "--json", "--costs", list.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Robots profiled as the same model against the wrong profile: refused.
    let out = lop(&[
        "fleet-cost",
        "zoo:resnet18",
        "--robot-profile",
        robot.to_str().expect("utf8"),
        "--server-profile",
        server.to_str().expect("utf8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("robot profile"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `lop fleet-watch` shows an edge it was never told about: only a router endpoint is given, the
/// edge is found by its load reports.
/// An edge service on `session` reporting its load as `watched-edge` (what fleet-watch sees).
async fn watched_edge(session: &zenoh::Session, cache: &str) -> lop_runtime::fleet::ReporterHandle {
    use lop_runtime::edge::{EdgeModel, EdgeOptions, EdgeService};
    let g = lop::model::load("zoo:resnet18", &Default::default()).expect("model");
    let server = lop::profile::synthetic_profile(&g, lop::plan::Side::Server).expect("profile");
    let spec = lop::planner::table::TableSpec::latency(vec![0.0, 8.0], 0.001);
    let svc = EdgeService::start(EdgeOptions {
        models: vec![EdgeModel { id: "resnet18".into(), source: "zoo:resnet18".into(), load: Default::default(), server_profile: server }],
        robot_profiles: Vec::new(),
        profiles_dir: None,
        spec,
        cache_dir: scratch(cache),
        replicas: 1,
        devices: vec![lop_runtime::edge::ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: std::time::Duration::from_secs(5),
        table_wait: std::time::Duration::from_secs(5),
        dilation: 1.0,
        memory_budget: None,
        batching: Default::default(),
    })
    .await
    .expect("edge");
    lop_runtime::fleet::start_reporter(session, "watched-edge", svc, lop_runtime::fleet::REPORT_PERIOD, Box::new(|| None))
        .await
        .expect("reporter")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_watch_shows_the_edges_found_by_their_reports() {
    let port = free_port();
    let endpoint = format!("tcp/127.0.0.1:{port}");
    let session = lop_runtime::zenoh_link::ZenohConfig::router(vec![endpoint.clone()]).open().await.expect("router");
    let _reports = watched_edge(&session, "watch").await;
    let out = tokio::task::spawn_blocking(move || lop(&["fleet-watch", "--connect", &endpoint, "--seconds", "2", "--json"]))
        .await
        .expect("the watcher ran");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or("")).expect("one JSON object per line");
    let edge = &last["edges"][0];
    assert_eq!(edge["edge"], "watched-edge", "{text}");
    assert_eq!(edge["models"][0]["model"], "resnet18");
    assert_eq!(edge["models"][0]["warm"], true);
    assert!(last["counts"]["reports"].as_u64().unwrap_or(0) >= 5, "about 10 reports a second: {text}");
    session.close().await.expect("close");
}

/// `lop certs` makes a site; an edge router with those certificates and access control serves
/// `lop fleet-watch` over mutual TLS with a robot's certificate; a second run never overwrites
/// the CA; bad robot ids are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certs_make_a_site_whose_robots_watch_the_fleet_over_tls() {
    let dir = scratch("certs").join("site");
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().expect("utf-8 path").to_string();
    let out = lop(&["certs", "--out", &d, "--robots", "r1,r2", "--edge-names", "gpu-1.lab,10.0.0.5", "--days", "30"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for f in ["ca.pem", "ca.key", "edge.pem", "edge.key", "robot-r1.pem", "robot-r1.key", "robot-r2.pem", "robot-r2.key"] {
        assert!(dir.join(f).is_file(), "{f} written");
    }
    let snippet = String::from_utf8_lossy(&out.stdout);
    assert!(snippet.contains("access: {robots: [r1, r2]") && snippet.contains("tls/[::]:7447"), "{snippet}");
    let again = lop(&["certs", "--out", &d, "--robots", "r1"]);
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("exists"), "the CA is made once");
    let bad = lop(&["certs", "--out", &format!("{d}-bad"), "--robots", "r 1"]);
    assert!(!bad.status.success(), "a robot id with a space is refused");

    use lop_runtime::security::{AccessPolicy, Security, TlsFiles};
    let port = free_port();
    let security = Security {
        tls: Some(TlsFiles { ca: dir.join("ca.pem"), cert: dir.join("edge.pem"), key: dir.join("edge.key") }),
        access: Some(AccessPolicy { robots: vec!["r1".into()], edges: vec!["edge".into()] }),
        ..Security::default()
    };
    let session = lop_runtime::zenoh_link::ZenohConfig::router(vec![format!("tls/127.0.0.1:{port}")])
        .with_security(security)
        .open()
        .await
        .expect("TLS router");
    let _reports = watched_edge(&session, "certs-watch").await;
    let endpoint = format!("tls/localhost:{port}");
    let tls = format!("{d}/ca.pem,{d}/robot-r1.pem,{d}/robot-r1.key");
    let out = tokio::task::spawn_blocking(move || lop(&["fleet-watch", "--connect", &endpoint, "--tls", &tls, "--seconds", "2", "--json"]))
        .await
        .expect("the watcher ran");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or("")).expect("one JSON object per line");
    assert_eq!(last["edges"][0]["edge"], "watched-edge", "r1 reads the edges' reports over TLS: {text}");
    session.close().await.expect("close");
}

/// A photograph-like JPEG file (gradients, edges, a little texture), written by the project's
/// own encoder.
fn photo(path: &std::path::Path, width: usize, height: usize) {
    let image = lop::codec::Image { channels: 3, width, height };
    let planar: Vec<u8> = (0..image.bytes(height))
        .map(|i| {
            let (c, y, x) = (i / (width * height), (i / width) % height, i % width);
            ((x * 3 + y * 2 + c * 70 + if (x / 9 + y / 7) % 2 == 0 { 40 } else { 0 } + (i * 7919) % 5) % 256) as u8
        })
        .collect();
    let jpeg = lop::codec::encode(lop::codec::FrameCodec::Jpeg { quality: 92 }, &image, &planar, height).expect("encode");
    std::fs::write(path, jpeg).expect("write photo");
}

#[test]
fn frames_and_codecs_from_photographs_to_the_plan_and_the_bench() {
    let dir = scratch("codecs");
    let pic = dir.join("photo.jpg");
    photo(&pic, 96, 80);
    let pic = pic.to_str().expect("utf8");
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/traces/indoor.csv");
    let trace = trace.to_str().expect("utf8");
    // lop codecs: every codec priced on the photograph.
    let o = lop(&["codecs", "--frames", pic, "--size", "64x48", "--json"]);
    ok(&o);
    let v = stdout_json(&o);
    let codecs = v["codecs"].as_array().expect("codecs");
    assert_eq!(codecs.len(), 4, "{v}");
    for c in codecs {
        let ratio = c["ratio"].as_f64().expect("ratio");
        assert!(ratio > 0.0 && ratio < 1.0 && c["encode_ms"].as_f64() > Some(0.0), "{c}");
    }
    // Bad input: one clear error each, exit 2.
    let corrupt = dir.join("corrupt.jpg");
    std::fs::write(&corrupt, &std::fs::read(pic).expect("read")[..200]).expect("write");
    for (args, says) in [
        (vec!["codecs", "--frames", corrupt.to_str().expect("utf8")], "decoding"),
        (vec!["codecs", "--frames", dir.join("missing.png").to_str().expect("utf8")], "reading"),
        (vec!["codecs", "--frames", pic, "--codecs", "jpeg:0"], "JPEG quality 0 is outside 1-100"),
        (vec!["codecs", "--frames", pic, "--size", "64"], "WIDTHxHEIGHT"),
        (vec!["bench", "zoo:resnet18@64x64", "--trace", trace, "--synthetic-profiles", "--frame-codec", "jpeg:90"], "needs --frames"),
        (vec!["bench", "zoo:resnet18@64x64", "--trace", trace, "--synthetic-profiles", "--frame-codec", "png"], "unknown frame codec"),
    ] {
        let o = lop(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says) && !err.contains("panicked"), "{args:?}: {err}");
    }
    // Profiles measure the codecs on the photograph; the plan prices the coded frame with them.
    let (robot, server) = (dir.join("robot.json"), dir.join("server.json"));
    for (role, out) in [("robot", &robot), ("server", &server)] {
        let o = lop(&[
            "profile",
            "zoo:resnet18@64x64",
            "--role",
            role,
            "--frames",
            pic,
            "--frame-codecs",
            "lossless,jpeg:90",
            "--out",
            out.to_str().expect("utf8"),
        ]);
        ok(&o);
    }
    let prof: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&robot).expect("robot")).expect("json");
    let names: Vec<&str> = prof["codecs"].as_array().expect("codecs").iter().filter_map(|c| c["codec"].as_str()).collect();
    assert_eq!(names, ["lossless", "jpeg:90"]);
    let (r, s, cache) = (robot.to_str().expect("utf8"), server.to_str().expect("utf8"), dir.join("cache"));
    let cache = cache.to_str().expect("utf8");
    let plan = |codec: &str| {
        let out = dir.join(format!("{codec}.table"));
        let extra = ["--buckets", "0:4:2", "--frame-codec", codec, "--cache-dir", cache];
        lop(&plan_args("zoo:resnet18@64x64", r, s, out.to_str().expect("utf8"), &extra))
    };
    ok(&plan("jpeg:90"));
    // The study of crossing activations on the photograph: each crossing value measured, each
    // bucket bounded, and a verdict.
    let out = dir.join("activations.table");
    let o = lop(&plan_args(
        "zoo:resnet18@64x64",
        r,
        s,
        out.to_str().expect("utf8"),
        &["--buckets", "0:4:2", "--cache-dir", cache, "--activations", pic, "--json"],
    ));
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let study = &v["activations"];
    assert_eq!(study["buckets"].as_array().map(Vec::len), Some(3), "{study}");
    for b in study["buckets"].as_array().expect("buckets") {
        let bound = b["saving_bound"].as_f64().expect("bound");
        assert!((0.0..1.0).contains(&bound), "{b}");
        if b["activation_bytes"].as_u64() == Some(0) {
            assert_eq!(bound, 0.0, "nothing crosses, nothing to save: {b}");
        }
    }
    for value in study["values"].as_array().expect("values") {
        let (zeros, ratio) = (value["zeros"].as_f64().expect("zeros"), value["lz4_ratio"].as_f64().expect("ratio"));
        assert!((0.0..=1.0).contains(&zeros) && ratio > 0.0 && ratio < 1.2, "{value}");
    }
    assert!(study["worth_building"].is_boolean(), "{study}");
    let table: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("jpeg:90.table")).expect("table")).expect("json");
    assert_eq!(table["spec"]["frame"]["codec"], "jpeg:90", "the codec is part of the table");
    let o = plan("jpeg:75");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.contains("has not measured frame codec jpeg:75"), "{err}");
    // The bench on the photograph, lossless: exact, and fewer bytes up than the raw frame.
    let o = lop(&[
        "bench",
        "zoo:resnet18@64x64",
        "--trace",
        trace,
        "--synthetic-profiles",
        "--frames",
        pic,
        "--frame-codec",
        "lossless",
        "--methods",
        "server-only",
        "--requests",
        "2",
        "--json",
    ]);
    ok(&o);
    let v = stdout_json(&o);
    let m = &v["methods"]["server-only"];
    // Lossless: the edge's input is the frame itself, so its output agrees with the unsplit run
    // under the one comparison rule (a lossy codec is off by percents, far outside it).
    let err = m["max_rel_err"].as_f64().expect("max_rel_err");
    assert!(err <= lop::exec::Tolerance::SPLIT.rel, "{v}");
    assert!(m["bytes_up"].as_f64().expect("bytes up") < (3 * 64 * 64) as f64, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `lop fleet-rss`: a fleet robot with ten edges up opens a session with each at its first frame,
/// and those sessions share one model worker, so that its resident set stays within 1.2x of the
/// same robot's with one edge up. Were every session to load its own copy of the model, the ten
/// edges' robot would hold nine more copies of resnet18 (about 45 MiB each) and go past the bound.
#[test]
fn fleet_rss_ten_edge_sessions_share_one_model() {
    let cache = scratch("fleet-rss-cache");
    let out = lop(&["fleet-rss", "--edges", "1,10", "--frames", "3", "--json", "--cache-dir", cache.to_str().expect("utf8")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v = stdout_json(&out);
    let runs = v["runs"].as_array().expect("runs");
    let run = |n: u64| runs.iter().find(|r| r["edges"].as_u64() == Some(n)).unwrap_or_else(|| panic!("no run with {n} edges: {v}"));
    let (one, ten) = (run(1), run(10));
    assert_eq!(one["sessions"], 1, "{v}");
    assert_eq!(ten["sessions"], 10, "one session with each edge: {v}");
    assert_eq!(ten["edges_with_session"], 10, "{v}");
    for r in [one, ten] {
        assert_eq!(r["robot"]["frames"], 3, "{v}");
        assert!(r["robot"]["max_rel_err"].as_f64().is_some_and(|e| e <= 1e-5), "{v}");
    }
    let mib = |r: &serde_json::Value| r["rss_mib"].as_f64().expect("rss_mib");
    let ratio = mib(ten) / mib(one);
    eprintln!(
        "fleet-rss: robot VmRSS {:.1} MiB with 1 edge, {:.1} MiB with 10: {ratio:.3}x (peak {:.3}x)",
        mib(one),
        mib(ten),
        ten["hwm_ratio"].as_f64().unwrap_or(f64::NAN)
    );
    assert!(ratio <= 1.2, "RSS with 10 edges is {ratio:.3}x the RSS with 1: {v}");
}

/// A libtorch of another version found at start (here the project's own libraries hard-linked
/// into a folder whose `version.py` says 2.12.1 or JetPack's 2.5.0, first in `LD_LIBRARY_PATH`)
/// is refused before any work, naming the version, where it was loaded from, and the version
/// built against or the supported range; the same folder saying 2.13.0 is accepted (so the
/// refusal comes from the version, not the folder).
#[test]
fn a_libtorch_of_another_version_is_refused_at_start_with_both_versions() {
    let loaded = lop::libtorch::loaded().or_else(|| {
        let _ = tch::Tensor::zeros([1], (tch::Kind::Float, tch::Device::Cpu));
        lop::libtorch::loaded()
    });
    let loaded = loaded.expect("this test process has libtorch_cpu.so mapped");
    let real_lib = loaded.library.parent().expect("torch/lib").to_path_buf();
    // Under the target folder, not the temp dir: hard links need the venv's file system (a CI
    // machine's /tmp may be another one).
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("other-libtorch-{}", std::process::id()));
    let lib = dir.join("torch/lib");
    let _ = std::fs::remove_dir_all(dir.join("torch"));
    std::fs::create_dir_all(&lib).expect("a scratch folder");
    for entry in std::fs::read_dir(&real_lib).expect("torch/lib lists") {
        let entry = entry.expect("an entry");
        if entry.file_type().expect("a file type").is_file() {
            // Hard links (or copies) keep the path the loader reports; a symbolic link would be
            // resolved to the real folder.
            let to = lib.join(entry.file_name());
            if std::fs::hard_link(entry.path(), &to).is_err() {
                std::fs::copy(entry.path(), &to).expect("a copy of a libtorch library");
            }
        }
    }
    // The wheel's libraries find the CUDA runtime wheels through `$ORIGIN/../../nvidia/...`.
    let nvidia = real_lib.join("../../nvidia");
    let _ = std::fs::remove_file(dir.join("nvidia"));
    if nvidia.is_dir() {
        std::os::unix::fs::symlink(&nvidia, dir.join("nvidia")).expect("a link to the CUDA runtime wheels");
    }
    let cases = [
        ("2.12.1+cu130", Some("but this build of lop was built against libtorch 2.13.")),
        ("2.5.0a0+872d972e41.nv24.08", Some("but lop supports libtorch 2.12.x to 2.13.x only")),
        ("2.13.0+cu130", None),
    ];
    for (version, refused) in cases {
        std::fs::write(dir.join("torch/version.py"), format!("__version__ = '{version}'\n")).expect("version.py");
        let path = format!("{}:{}", lib.display(), std::env::var("LD_LIBRARY_PATH").unwrap_or_default());
        let out = Command::new(env!("CARGO_BIN_EXE_lop"))
            .args(["inspect", "zoo:resnet18", "--json"])
            .env("LD_LIBRARY_PATH", path)
            .output()
            .expect("the lop binary runs");
        let err = String::from_utf8_lossy(&out.stderr);
        if let Some(reason) = refused {
            assert_eq!(out.status.code(), Some(2), "{err}");
            let want = format!("libtorch {version} is loaded ({}), {reason}", lib.join("libtorch_cpu.so").display());
            assert!(err.contains(&want), "{err}");
        } else {
            assert!(out.status.success(), "{err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
