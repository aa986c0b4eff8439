//! What the `lop_robot` end-to-end tests share: ports, camera frames, an in-process edge, the
//! publish-until-answered loop, and `lop_robot` as a process of its own ([`Node`]).
#![allow(clippy::unwrap_used, dead_code)]

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use hiroz_msgs::builtin_interfaces::Time;
use hiroz_msgs::sensor_msgs::{CompressedImage, Image};
use hiroz_msgs::std_msgs::Header;
use lop::planner::table::TableSpec;
use lop::profile::Profile;
use lop_msgs::ros::msg::InferenceResult;
use lop_runtime::edge::{EdgeModel, EdgeOptions, EdgeService};
use lop_runtime::zenoh_link::{EdgeAcceptor, ZenohConfig};
use lop_runtime::zenoh_service::serve_zenoh;

/// Writes `yaml` (`lop_robot`'s parameters) to `dir/robot.yaml` and reads it back as the node
/// will: the file's path and the configuration. Every parameter must be one the node knows.
pub fn robot_config(dir: &Path, yaml: &str) -> (PathBuf, robot_node::config::RobotConfig) {
    let path = dir.join("robot.yaml");
    std::fs::write(&path, yaml).unwrap();
    let mut params = robot_node::params::Params::from_yaml_str("lop_robot", yaml, "test").unwrap();
    let cfg = robot_node::config::RobotConfig::from_params(&mut params).unwrap();
    assert!(params.unknown().is_empty(), "{:?}", params.unknown());
    (path, cfg)
}

/// `lop_robot` running in this process on the hiroz backend (the library's `run` on a task,
/// with the embedded router its configuration asks for), and a hiroz node of the test's own on
/// the same router, to play cameras and listen to the results.
pub struct InProcess {
    /// The test's own node.
    pub peer: robot_node::backend::hiroz::HirozRos,
    /// The node's task: its summary once stopped.
    pub node: tokio::task::JoinHandle<robot_node::Result<robot_node::robot::RobotSummary>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl InProcess {
    /// Starts `lop_robot` with `cfg` (its parameters `declared`, as a backend declares them),
    /// then the test's node `peer_name`.
    pub async fn start(cfg: &robot_node::config::RobotConfig, declared: Vec<robot_node::params::Declared>, peer_name: &str) -> InProcess {
        use robot_node::backend::hiroz::HirozRos;
        let settings = cfg.ros.clone();
        let ros = tokio::task::spawn_blocking(move || HirozRos::open(&settings, "lop_robot", &[], &declared, None)).await.unwrap().unwrap();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let node = tokio::spawn(robot_node::robot::run(cfg.clone(), Arc::new(ros), async move {
            let _ = stop_rx.await;
        }));
        let peer_settings = robot_node::config::RosSettings { embedded_router: false, ..cfg.ros.clone() };
        let name = peer_name.to_string();
        let peer = tokio::task::spawn_blocking(move || HirozRos::open(&peer_settings, &name, &[], &[], None)).await.unwrap().unwrap();
        InProcess { peer, node, stop }
    }

    /// Stops the node and returns its summary (it must stop `within`).
    pub async fn stop(self, within: Duration) -> robot_node::robot::RobotSummary {
        let _ = self.stop.send(());
        tokio::time::timeout(within, self.node).await.unwrap().unwrap().unwrap()
    }
}

#[allow(unused_imports)] // not every test binary starts a router
pub use lop_runtime::ports::free_loopback_port as free_port;

/// An rgb8 frame of `w`x`h` with `step` bytes per row, pseudo-random pixels, stamped `sec`.7.
pub fn image(w: u32, h: u32, step: u32, sec: i32, seed: u32) -> Image {
    let data: Vec<u8> = (0..step * h).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8).collect();
    Image {
        header: Header { stamp: Time { sec, nanosec: 7 }, frame_id: format!("cam{sec}") },
        height: h,
        width: w,
        encoding: "rgb8".into(),
        is_bigendian: 0,
        step,
        data: data.into(),
    }
}

/// An image's bytes, gathered from its buffer's slices.
pub fn image_bytes(img: &Image) -> Vec<u8> {
    img.data.0.zslices().flat_map(|s| s.as_slice().iter().copied()).collect()
}

/// [`start_edge`] serving zoo `model` (under its zoo name, without a `@WxH` size) with synthetic
/// profiles, planning its tables with `table`: the robot's own settings, so both sides agree on
/// the table.
pub async fn start_synthetic_edge(
    endpoint: &str,
    model: &str,
    table: &lop_runtime::table_config::TableSettings,
    cache_dir: &Path,
) -> (EdgeService, impl Sized) {
    start_synthetic_edge_with(endpoint, model, table, cache_dir, |_| {}).await
}

/// [`start_synthetic_edge`] with its options changed by `tune` (batching, a slowed edge).
pub async fn start_synthetic_edge_with(
    endpoint: &str,
    model: &str,
    table: &lop_runtime::table_config::TableSettings,
    cache_dir: &Path,
    tune: impl FnOnce(&mut EdgeOptions),
) -> (EdgeService, impl Sized) {
    let (models, robot, spec) = synthetic_edge_model(model, table);
    start_edge_with(endpoint, models, vec![robot], spec, cache_dir, tune).await
}

/// What an edge serving zoo `model` with synthetic profiles needs: the model (under its zoo
/// name, without a `@WxH` size), the robot profile and the table spec of `table`.
pub fn synthetic_edge_model(model: &str, table: &lop_runtime::table_config::TableSettings) -> (Vec<EdgeModel>, Profile, TableSpec) {
    use lop::plan::Side;
    use robot_node::config::ProfileSource;
    let g = lop::model::load(model, &Default::default()).unwrap();
    let robot = ProfileSource::Synthetic.load(&g, Side::Robot).unwrap();
    let server = ProfileSource::Synthetic.load(&g, Side::Server).unwrap();
    let spec = table.spec(&g, &robot, &server).unwrap();
    let id = model.trim_start_matches("zoo:").split('@').next().unwrap_or_default().to_string();
    (vec![EdgeModel { id, source: model.into(), load: Default::default(), server_profile: server }], robot, spec)
}

/// An edge service on its own Zenoh router at `endpoint`, answering probes; the returned values
/// keep it serving.
pub async fn start_edge(
    endpoint: &str,
    models: Vec<EdgeModel>,
    robot_profiles: Vec<Profile>,
    spec: TableSpec,
    cache_dir: &Path,
) -> (EdgeService, impl Sized) {
    start_edge_with(endpoint, models, robot_profiles, spec, cache_dir, |_| {}).await
}

/// The options of an edge serving `models` on the CPU, one replica, without batching.
pub fn edge_options(models: Vec<EdgeModel>, robot_profiles: Vec<Profile>, spec: TableSpec, cache_dir: &Path) -> EdgeOptions {
    EdgeOptions {
        models,
        robot_profiles,
        profiles_dir: None,
        spec,
        cache_dir: cache_dir.to_path_buf(),
        replicas: 1,
        devices: vec![lop_runtime::edge::ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: Duration::from_secs(10),
        table_wait: Duration::from_secs(60),
        dilation: 1.0,
        memory_budget: None,
        batching: Default::default(),
    }
}

/// [`start_edge`] with its options changed by `tune`.
pub async fn start_edge_with(
    endpoint: &str,
    models: Vec<EdgeModel>,
    robot_profiles: Vec<Profile>,
    spec: TableSpec,
    cache_dir: &Path,
    tune: impl FnOnce(&mut EdgeOptions),
) -> (EdgeService, impl Sized) {
    let session = ZenohConfig::router(vec![endpoint.to_string()]).open().await.unwrap();
    let acceptor = EdgeAcceptor::new(&session).await.unwrap();
    let mut opts = edge_options(models, robot_profiles, spec, cache_dir);
    tune(&mut opts);
    let svc = EdgeService::start(opts).await.unwrap();
    let serving = serve_zenoh(svc.clone(), acceptor);
    let probes = lop_runtime::bandwidth::probe::serve_probes(&session, Default::default(), svc.probe_counts()).await.unwrap();
    (svc, (serving, probes, session))
}

/// A publisher of camera JPEGs (`sensor_msgs/CompressedImage`).
pub type CompressedPub = hiroz::pubsub::ZPub<CompressedImage, <CompressedImage as hiroz::msg::ZMessage>::Serdes>;

/// Publishes raw frame `img` (again every 300 ms, until the node has subscribed) until a result
/// with its stamp arrives.
pub fn roundtrip(
    camera: &hiroz::pubsub::ZPub<Image, <Image as hiroz::msg::ZMessage>::Serdes>,
    results: &mpsc::Receiver<InferenceResult>,
    img: &Image,
    deadline: Instant,
) -> InferenceResult {
    until_answered(|| camera.publish(img).unwrap(), img.header.stamp.sec, Duration::from_millis(300), results, deadline)
}

/// Publishes camera JPEG `m` (again every 2 s, until the node has subscribed) until a result
/// with its stamp arrives.
pub fn roundtrip_compressed(
    camera: &CompressedPub,
    results: &mpsc::Receiver<InferenceResult>,
    m: &CompressedImage,
    deadline: Instant,
) -> InferenceResult {
    until_answered(|| camera.publish(m).unwrap(), m.header.stamp.sec, Duration::from_secs(2), results, deadline)
}

/// Calls `publish` every `every` until a result stamped `stamp_sec` arrives.
fn until_answered(
    publish: impl Fn(),
    stamp_sec: i32,
    every: Duration,
    results: &mpsc::Receiver<InferenceResult>,
    deadline: Instant,
) -> InferenceResult {
    let mut last_send = None::<Instant>;
    while Instant::now() < deadline {
        if last_send.is_none_or(|t| t.elapsed() > every) {
            publish();
            last_send = Some(Instant::now());
        }
        if let Ok(r) = results.recv_timeout(Duration::from_millis(50))
            && r.header.stamp.sec == stamp_sec
        {
            return r;
        }
    }
    panic!("no result for the frame stamped {stamp_sec}");
}

/// Asserts that a published result's outputs equal `whole` (relative error <= 1e-5).
pub fn assert_outputs_equal(r: &InferenceResult, whole: &[tch::Tensor]) {
    assert_eq!(r.outputs.len(), whole.len());
    for (o, w) in r.outputs.iter().zip(whole) {
        let shape: Vec<i64> = o.shape.iter().map(|&d| i64::from(d)).collect();
        assert_eq!(shape, w.size(), "output shape");
        let got = tch::Tensor::from_slice(&o.data).reshape(&shape);
        let err = lop::exec::max_rel_err(&got, w).unwrap();
        assert!(err <= 1e-5, "output {} differs from the unsplit model: {err}", o.name);
    }
}

/// `lop_robot` started by a test as a process, its log kept (its colours removed); killed if the
/// test ends early.
pub struct Node {
    pub child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A log line without its colours.
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Node {
    /// Starts `lop_robot --config config`.
    pub fn start(config: &Path) -> Node {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lop_robot"))
            .arg("--config")
            .arg(config)
            .env("RUST_LOG", "info,zenoh=warn,hiroz=warn")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        // Its log goes to stdout (tracing's default), its errors to stderr.
        let out: [Box<dyn std::io::Read + Send>; 2] = [Box::new(child.stdout.take().unwrap()), Box::new(child.stderr.take().unwrap())];
        for stream in out {
            let lines = log.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(stream).lines().map_while(Result::ok) {
                    lines.lock().unwrap().push(plain(&l));
                }
            });
        }
        Node { child, log }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// A field of /proc/PID/status in bytes (`VmRSS`, `VmHWM`).
    pub fn status_bytes(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(&format!("{field}:"))).unwrap_or_else(|| panic!("no {field}: {status}"));
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    }

    /// Resets the process's peak resident size to its resident size now (clear_refs 5) and
    /// returns that size.
    pub fn reset_peak(&self) -> u64 {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5").unwrap();
        self.status_bytes("VmRSS")
    }
}

/// The `lop` command beside this test binary (target/release/lop: the test command builds every
/// binary of the workspace first).
pub fn lop_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(|deps| deps.parent()).map(|dir| dir.join("lop")).unwrap();
    assert!(bin.exists(), "{} is missing: build it first (cargo build --release --workspace --bins)", bin.display());
    bin
}
