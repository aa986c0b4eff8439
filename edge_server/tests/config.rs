//! Loading the edge's configuration: defaults, relative paths, and clear errors for bad input.

use std::path::{Path, PathBuf};

use edge_server::config::{Mode, ModelSource, ProfileSource};
use edge_server::{ConfigError, EdgeConfig, Error};

fn tempdir(name: &str) -> PathBuf {
    let d = lop_runtime::scratch::scratch_dir("lop-edge-config", name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn write(dir: &Path, text: &str) -> PathBuf {
    let p = dir.join("edge.yaml");
    std::fs::write(&p, text).expect("write config");
    p
}

fn load_err(dir: &Path, text: &str) -> String {
    let p = write(dir, text);
    let e = EdgeConfig::load(&p).expect_err("must be rejected");
    let msg = e.to_string();
    assert!(msg.contains(&p.display().to_string()), "the error names the file: {msg}");
    msg
}

#[test]
fn defaults_and_relative_paths() {
    let dir = tempdir("defaults");
    let p = write(&dir, "models:\n  - id: r18\n    source: zoo:resnet18\n");
    let cfg = EdgeConfig::load(&p).expect("loads");
    assert_eq!(cfg.zenoh.mode, Mode::Router);
    assert_eq!(cfg.zenoh.listen, vec!["tcp/[::]:7447".to_string()]);
    assert_eq!(cfg.models[0].server_profile, ProfileSource::Measure);
    assert_eq!(cfg.replicas, 1);
    assert_eq!((cfg.max_batch, cfg.max_forwards), (4, 2), "batching and forwarding are on by default");
    assert_eq!(cfg.layout, lop::profile::LayoutChoice::Auto, "each model's layout measured by default");
    assert_eq!(cfg.table_cache, std::path::absolute(&dir).expect("abs").join("cache/tables"));
    assert_eq!(cfg.model_source(0).expect("zoo"), ModelSource::Zoo("zoo:resnet18".into()));
    assert_eq!(cfg.device().expect("cpu"), tch::Device::Cpu);
    assert_eq!(cfg.devices().expect("one"), [("cpu".to_string(), tch::Device::Cpu)]);
    let two = EdgeConfig::load(&write(&dir, "models:\n  - id: r18\n    source: zoo:resnet18\ndevices: [cpu:0, cpu:1]\n")).expect("two");
    let names: Vec<String> = two.devices().expect("two").into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["cpu:0", "cpu:1"]);
    let spec = cfg.table_spec().expect("spec");
    assert_eq!(spec.buckets.len(), 31);
    assert_eq!(spec.input_bytes_per_element, None);
    // The fleet id: the host name made an id unless given.
    let host = cfg.edge_id();
    assert!(lop_msgs::validate_id(&host).is_ok(), "{host}");
    let named = EdgeConfig::load(&write(&dir, "id: gpu-2\nmodels:\n  - id: r18\n    source: zoo:resnet18\n")).expect("loads");
    assert_eq!(named.edge_id(), "gpu-2");
    // The printed configuration loads back to the same thing.
    let again = EdgeConfig::parse(&cfg.to_yaml().expect("yaml"), &p).expect("round trip");
    assert_eq!(again, cfg);
    // The repository's documented configuration is valid.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/edge.yaml");
    let shipped = EdgeConfig::load(&repo).expect("config/edge.yaml loads");
    assert_eq!(shipped.table_spec().expect("spec"), spec, "config/edge.yaml shows the defaults");
}

#[test]
fn unknown_fields_are_errors_naming_the_field() {
    let dir = tempdir("unknown");
    let msg = load_err(&dir, "models:\n  - id: r18\n    source: zoo:resnet18\nreplicaz: 2\n");
    assert!(msg.contains("replicaz"), "{msg}");
    let msg = load_err(&dir, "models:\n  - id: r18\n    source: zoo:resnet18\n    sha: abc\n");
    assert!(msg.contains("sha"), "{msg}");
    let msg = load_err(&dir, "models:\n  - id: r18\n    source: zoo:resnet18\ntable:\n  bucket: 0:3:1\n");
    assert!(msg.contains("bucket"), "{msg}");
}

#[test]
fn bad_values_name_their_field() {
    let dir = tempdir("values");
    let m = "models:\n  - id: r18\n    source: zoo:resnet18\n";
    for (extra, field) in [
        ("replicas: 0\n", "replicas"),
        ("device: gpu\n", "device"),
        ("device: cuda:99\n", "device"),
        ("table:\n  buckets: \"5:1:1\"\n", "table.buckets"),
        ("table:\n  objective: fastest\n", "table.objective"),
        ("table:\n  bandwidth_scale: 0\n", "table.bandwidth_scale"),
        ("log: \"[[[\"\n", "log"),
        ("zenoh:\n  mode: client\n", "zenoh.connect"),
        ("id: \"gpu/1\"\n", "id"),
        ("max_forwards: 9\n", "max_forwards"),
        ("memory_budget_mb: 0\n", "memory_budget_mb"),
        ("memory_budget_mb: -5\n", "memory_budget_mb"),
        ("max_batch: 0\n", "max_batch"),
        ("max_batch: 65\n", "max_batch"),
        ("layout: nhwc\n", "unknown layout 'nhwc' (auto, nchw, channels_last)"),
        ("metrics:\n  listen: 0.0.0.0:9464\n", "metrics.listen"),
        ("metrics:\n  listen: localhost\n", "metrics.listen"),
        ("site:\n  report_period_ms: 5\n", "site.report_period_ms"),
        ("site:\n  digest_period_ms: .nan\n", "site.digest_period_ms"),
        ("site:\n  shard_size: 0\n", "site.shard_size"),
        // A rate the sampler turns into a wait: refused here, not a panic at start.
        ("gpu_energy:\n  rate_hz: 1.0e-300\n", "gpu_energy.rate_hz"),
        ("site:\n  shard_size: 257\n", "site.shard_size"),
        ("devices: [cpu:0, cpu]\n", "devices[1]"),
        ("devices: [cpu:0, cpu]\n", "listed twice"),
        ("devices: [cpu:0, gpu]\n", "devices[1]"),
        ("devices: [cuda:7]\n", "devices[0]"),
        ("device: cuda:1\ndevices: [cpu:0]\n", "not both"),
    ] {
        let msg = load_err(&dir, &format!("{m}{extra}"));
        assert!(msg.contains(field), "{extra:?}: {msg}");
    }
    // Several input shapes: exclusive with input_shape, no duplicates, no profile file.
    let dynamic = "models:\n  - id: det\n    source: zoo:resnet18\n";
    for (extra, field) in [
        ("    input_shape: [1, 3, 64, 64]\n    input_shapes: [[1, 3, 32, 32]]\n", "models[0].input_shapes"),
        ("    input_shapes: [[1, 3, 32, 32], [1, 3, 0, 32]]\n", "models[0].input_shapes"),
        ("    input_shapes: [[1, 3, 32, 32], [1, 3, 32, 32]]\n", "models[0].input_shapes[1]"),
        ("    input_shapes: [[1, 3, 32, 32], [1, 3, 64, 64]]\n    server_profile: server.json\n", "models[0].server_profile"),
        ("    camera_fits: [\"crop@640x480\"]\n", "models[0].camera_fits[0]"),
        ("    camera_fits: [\"letterbox@64x48\", \"letterbox:114@64x48\"]\n", "models[0].camera_fits[1]"),
        ("    camera_fits: [\"letterbox@64x48\", \"resize@64x48\"]\n    server_profile: server.json\n", "models[0].server_profile"),
    ] {
        let msg = load_err(&dir, &format!("{dynamic}{extra}"));
        assert!(msg.contains(field), "{extra:?}: {msg}");
    }
    let msg = load_err(&dir, "models:\n  - id: 'bad id!'\n    source: zoo:resnet18\n");
    assert!(msg.contains("models[0].id"), "{msg}");
    // Beyond loopback only when asked for.
    let cfg = write(&dir, &format!("{m}metrics:\n  listen: 0.0.0.0:9464\n  allow_remote_metrics: true\n"));
    let loaded = edge_server::EdgeConfig::load(&cfg).expect("remote metrics allowed");
    assert_eq!(loaded.metrics_addr().expect("addr"), Some("0.0.0.0:9464".parse().expect("addr")));
    let msg = load_err(&dir, "models: []\n");
    assert!(msg.contains("models"), "{msg}");
}

#[test]
fn bad_sha256_is_a_clear_error() {
    let dir = tempdir("sha");
    // Not a sha256 at all: rejected on load.
    let msg = load_err(&dir, "models:\n  - id: r18\n    source: zoo:resnet18\n    sha256: 12345\n");
    assert!(msg.contains("models[0].sha256") && msg.contains("64 hexadecimal"), "{msg}");
    // Well-formed but not this model's: rejected when the model is loaded.
    let wrong = "ab".repeat(32);
    let p = write(
        &dir,
        &format!("models:\n  - id: r18\n    source: zoo:resnet18\n    sha256: {wrong}\n    server_profile: synthetic\nrobot_profiles: .\n"),
    );
    let cfg = EdgeConfig::load(&p).expect("well-formed");
    let e = edge_server::prepare(&cfg).expect_err("mismatch");
    assert!(matches!(e, Error::Config(ConfigError::Invalid { .. })), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("models[0].sha256") && msg.contains(&wrong) && msg.contains("content hash"), "{msg}");
    // The right content hash passes.
    let g = lop::model::load("zoo:resnet18", &Default::default()).expect("model");
    let right = g.content_hash().expect("hash");
    let p = write(
        &dir,
        &format!("models:\n  - id: r18\n    source: zoo:resnet18\n    sha256: {right}\n    server_profile: synthetic\nrobot_profiles: .\n"),
    );
    let opts = edge_server::prepare(&EdgeConfig::load(&p).expect("loads")).expect("matches");
    assert_eq!(opts.models[0].server_profile.model_hash, right);
}

#[test]
fn missing_model_files_and_escapes_are_clear_errors() {
    let dir = tempdir("missing");
    let msg = load_err(&dir, "model_store: store\nmodels:\n  - id: det\n    source: detector.onnx\n");
    assert!(msg.contains("models[0].source") && msg.contains("detector.onnx") && msg.contains("store"), "{msg}");
    let msg = load_err(&dir, "models:\n  - id: det\n    source: ../outside.onnx\n");
    assert!(msg.contains("inside the model store"), "{msg}");
    let msg = load_err(&dir, &format!("models:\n  - id: det\n    sha256: {}\n", "cd".repeat(32)));
    assert!(msg.contains(&format!("{}.onnx", "cd".repeat(32))), "{msg}");
    // A file that is there resolves to the store.
    std::fs::create_dir_all(dir.join("store")).expect("store");
    std::fs::write(dir.join("store/detector.onnx"), b"not really onnx").expect("file");
    let p = write(&dir, "model_store: store\nmodels:\n  - id: det\n    source: detector.onnx\n    server_profile: synthetic\n");
    let cfg = EdgeConfig::load(&p).expect("found");
    assert!(matches!(cfg.model_source(0).expect("file"), ModelSource::File(f) if f.ends_with("store/detector.onnx")));
    // ... and a file that is not a model is the model's error, naming it.
    let e = edge_server::prepare(&cfg).expect_err("garbage");
    assert!(e.to_string().contains("model 'det'"), "{e}");
}

#[test]
fn unreadable_file_names_the_path() {
    let dir = tempdir("io");
    let e = EdgeConfig::load(&dir.join("nope.yaml")).expect_err("missing");
    assert!(matches!(e, ConfigError::Io { .. }) && e.to_string().contains("nope.yaml"), "{e}");
}

/// `input_shapes`: one served variant per shape, each loaded and profiled at its size (a zoo
/// model takes the shape as its size override).
#[test]
fn input_shapes_serve_one_variant_per_shape() {
    let dir = tempdir("shapes");
    let p = write(
        &dir,
        "models:\n  - id: r18\n    source: zoo:resnet18\n    server_profile: synthetic\n    input_shapes: [[1, 3, 64, 64], [1, 3, 96, 128]]\n",
    );
    let cfg = EdgeConfig::load(&p).expect("loads");
    let opts = edge_server::prepare(&cfg).expect("prepares");
    let shapes: Vec<(&str, Option<Vec<usize>>)> = opts.models.iter().map(|m| (m.id.as_str(), m.load.input_shape.clone())).collect();
    assert_eq!(shapes, vec![("r18", Some(vec![1, 3, 64, 64])), ("r18", Some(vec![1, 3, 96, 128]))]);
    assert_ne!(opts.models[0].server_profile.model_hash, opts.models[1].server_profile.model_hash, "each size is its own model");
    // A size the model cannot take is refused at start-up, naming the constraint.
    let p = write(
        &dir,
        "models:\n  - id: r18\n    source: zoo:resnet18\n    server_profile: synthetic\n    input_shapes: [[1, 3, 64, 64], [1, 3, 100, 100]]\n",
    );
    let e = edge_server::prepare(&EdgeConfig::load(&p).expect("loads")).expect_err("100 is no multiple of 32").to_string();
    assert!(e.contains("multiple of 32"), "{e}");
}

/// `camera_fits`: one served variant per camera, each taking the camera's frame at its own size
/// and fitting it in the model (a 64x48 camera letterboxed into the 64x64 input).
#[test]
fn camera_fits_serve_one_variant_per_camera() {
    let dir = tempdir("cameras");
    let p = write(
        &dir,
        "models:\n  - id: r18\n    source: zoo:resnet18\n    server_profile: synthetic\n    input_shape: [1, 3, 64, 64]\n    camera_fits: [\"letterbox@64x48\", \"resize@96x96\"]\n",
    );
    let opts = edge_server::prepare(&EdgeConfig::load(&p).expect("loads")).expect("prepares");
    let fits: Vec<Option<String>> = opts.models.iter().map(|m| m.load.fit.map(|f| f.spec())).collect();
    assert_eq!(fits, vec![Some("letterbox:114@64x48".to_string()), Some("resize@96x96".to_string())]);
    assert_ne!(opts.models[0].server_profile.model_hash, opts.models[1].server_profile.model_hash, "each camera is its own model");
}

/// Secure by default: without TLS the edge listens on loopback only (and says why), refuses a
/// plain endpoint on a network address, and needs `allow_insecure` to listen on the network
/// without TLS; a tls/ endpoint needs certificates, which must exist.
#[test]
fn without_tls_the_edge_listens_on_loopback_only_unless_told_otherwise() {
    let dir = tempdir("secure-default");
    let models = "models:\n  - id: r18\n    source: zoo:resnet18\n";
    let cfg = EdgeConfig::load(&write(&dir, models)).expect("loads");
    let plan = cfg.listen_plan().expect("plan");
    assert_eq!(plan.listen, vec!["tcp/127.0.0.1:7447".to_string(), "tcp/[::1]:7447".to_string()]);
    assert!(plan.warnings.iter().any(|w| w.contains("loopback only") && w.contains("allow_insecure")), "{:?}", plan.warnings);
    assert_eq!(cfg.zenoh_config().expect("zenoh").listen, plan.listen, "the session listens where the plan says");

    let v4 = EdgeConfig::load(&write(&dir, &format!("zenoh:\n  listen: [\"tcp/0.0.0.0:7000\"]\n{models}"))).expect("loads");
    assert_eq!(v4.listen_plan().expect("plan").listen, vec!["tcp/127.0.0.1:7000".to_string()]);

    let msg = load_err(&dir, &format!("zenoh:\n  listen: [\"tcp/192.168.1.5:7447\"]\n{models}"));
    assert!(msg.contains("zenoh.listen") && msg.contains("without TLS"), "{msg}");

    let open =
        EdgeConfig::load(&write(&dir, &format!("zenoh:\n  listen: [\"tcp/[::]:7447\"]\n  allow_insecure: true\n{models}"))).expect("loads");
    let plan = open.listen_plan().expect("plan");
    assert_eq!(plan.listen, vec!["tcp/[::]:7447".to_string()]);
    assert!(plan.warnings.iter().any(|w| w.contains("insecure")), "{:?}", plan.warnings);

    let msg = load_err(&dir, &format!("zenoh:\n  listen: [\"tls/[::]:7447\"]\n{models}"));
    assert!(msg.contains("needs zenoh.tls"), "{msg}");
    let msg = load_err(
        &dir,
        &format!(
            "zenoh:\n  listen: [\"tls/[::]:7447\"]\n  tls: {{ca: nope/ca.pem, cert: c.pem, key: k.pem}}\n  access: {{robots: [r1]}}\n{models}"
        ),
    );
    assert!(msg.contains("nope/ca.pem"), "a missing certificate is named: {msg}");
    let msg = load_err(&dir, &format!("zenoh:\n  access: {{robots: [\"a/b\"]}}\n{models}"));
    assert!(msg.contains("zenoh.access"), "{msg}");
    let msg = load_err(&dir, &format!("zenoh:\n  user: edge\n{models}"));
    assert!(msg.contains("password_file"), "{msg}");

    // With certificates from `lop certs`: a TLS listener on every address. Without access
    // control the edge refuses to start, unless shared keys are allowed explicitly (then only
    // that is warned about).
    lop_runtime::security::certs::make_site_certs(
        &dir.join("certs"),
        &lop_runtime::security::certs::CertsRequest { robots: vec!["r1".into()], edge_names: vec![], days: 1 },
    )
    .expect("certs");
    let tls_zenoh = "zenoh:\n  listen: [\"tls/[::]:7447\"]\n  tls: {ca: certs/ca.pem, cert: certs/edge.pem, key: certs/edge.key}\n";
    let refused = load_err(&dir, &format!("{tls_zenoh}{models}"));
    assert!(refused.contains("zenoh.access.robots") && refused.contains("allow_shared_keys"), "{refused}");
    let confined = EdgeConfig::load(&write(&dir, &format!("{tls_zenoh}  access: {{robots: [r1]}}\n{models}"))).expect("loads");
    assert!(confined.listen_plan().expect("plan").warnings.is_empty());
    let tls = EdgeConfig::load(&write(&dir, &format!("{tls_zenoh}  allow_shared_keys: true\n{models}"))).expect("loads");
    let plan = tls.listen_plan().expect("plan");
    assert_eq!(plan.listen, vec!["tls/[::]:7447".to_string()]);
    assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
    assert!(plan.warnings[0].contains("no zenoh.access"));
    assert!(tls.zenoh_config().expect("zenoh").security.has_tls());
}
