//! Shared set-up of the end-to-end tests: a small real model, synthetic profiles, a table.
#![allow(clippy::unwrap_used, dead_code)]

use std::time::Duration;

use lop::planner::table::{ScheduleTable, TableSpec};
use lop::profile::Profile;
use lop_runtime::edge::{EdgeModel, EdgeOptions, EdgeService};

pub const MODEL: &str = "zoo:resnet18";

pub struct Setup {
    pub robot: Profile,
    pub server: Profile,
    pub spec: TableSpec,
    pub table: ScheduleTable,
    pub inputs: Vec<tch::Tensor>,
    pub whole: Vec<tch::Tensor>,
}

/// Synthetic profiles: the robot 8x slower than the server, time per row proportional to the
/// op's output bytes per row; a table over a few buckets.
pub fn setup() -> Setup {
    setup_model(MODEL)
}

/// [`setup`] for another model.
pub fn setup_model(source: &str) -> Setup {
    let g = lop::model::load(source, &Default::default()).unwrap();
    let (robot, server) = lop::profile::SYNTHETIC.pair(&g).unwrap();
    let spec = TableSpec::latency(vec![0.0, 2.0, 8.0, 30.0], 0.001);
    let (table, _) = ScheduleTable::build(&g, &robot, &server, &spec, 1).unwrap();
    let inputs = lop::exec::synthetic_inputs(&g, 7).unwrap();
    let whole = lop::exec::run_whole(&g, &inputs).unwrap().outputs;
    Setup { robot, server, spec, table, inputs, whole }
}

pub async fn edge(s: &Setup, cache: &std::path::Path) -> EdgeService {
    edge_with(s, cache, vec![s.robot.clone()], Duration::from_secs(60)).await
}

/// An edge that knows `robot_profiles` up front and waits `table_wait` for a table in Hello.
pub async fn edge_with(s: &Setup, cache: &std::path::Path, robot_profiles: Vec<Profile>, table_wait: Duration) -> EdgeService {
    edge_slowed(s, cache, robot_profiles, table_wait, 1.0).await
}

/// [`edge_with`], its kernels stretched `dilation` times (a slower server).
pub async fn edge_slowed(
    s: &Setup,
    cache: &std::path::Path,
    robot_profiles: Vec<Profile>,
    table_wait: Duration,
    dilation: f64,
) -> EdgeService {
    EdgeService::start(edge_options(s, cache, robot_profiles, table_wait, dilation)).await.unwrap()
}

/// The options [`edge_slowed`] starts its edge with.
pub fn edge_options(s: &Setup, cache: &std::path::Path, robot_profiles: Vec<Profile>, table_wait: Duration, dilation: f64) -> EdgeOptions {
    EdgeOptions {
        models: vec![EdgeModel { id: "resnet18".into(), source: MODEL.into(), load: Default::default(), server_profile: s.server.clone() }],
        robot_profiles,
        profiles_dir: None,
        spec: s.spec.clone(),
        cache_dir: cache.to_path_buf(),
        replicas: 1,
        devices: vec![lop_runtime::edge::ServerDevice::only(tch::Device::Cpu)],
        limits: Default::default(),
        hello_timeout: Duration::from_secs(5),
        table_wait,
        dilation,
        memory_budget: None,
        batching: Default::default(),
    }
}

pub fn assert_exact(outputs: &[tch::Tensor], whole: &[tch::Tensor], what: &str) {
    let err = lop::exec::max_rel_err_all(outputs, whole).unwrap();
    assert!(err <= 1e-5, "{what}: relative error {err}");
}

/// A TCP port free on loopback now (for a Zenoh router's endpoint).
#[allow(unused_imports)] // not every test binary starts a router
pub use lop_runtime::ports::free_loopback_port as free_port;

/// This test's scratch folder (one per test thread; earlier runs' folders are swept).
pub fn tempdir() -> std::path::PathBuf {
    let thread = format!("{:?}", std::thread::current().id()).replace(|c: char| !c.is_ascii_alphanumeric(), "");
    lop_runtime::scratch::scratch_dir("lop-rt-test", &thread)
}

/// Polls `cond` every 10 ms for at most `limit`; the time it took, or `None`.
pub async fn within(limit: std::time::Duration, mut cond: impl FnMut() -> bool) -> Option<std::time::Duration> {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < limit {
        if cond() {
            return Some(t0.elapsed());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    None
}

/// A raw session with `svc` over an in-process link shaped as `link`: the robot's ends of it,
/// for tests that send frames the client would never send.
pub fn raw_session(svc: &EdgeService, link: lop_runtime::ShapedConfig) -> (lop_runtime::ShapedTx, lop_runtime::ShapedRx) {
    let (robot, edge_end) = lop_runtime::shaped_pair(link);
    let (etx, erx) = edge_end.into_split();
    let served = svc.clone();
    tokio::spawn(async move { served.serve(etx, erx).await });
    robot.into_split()
}

/// An edge that knows no robot profile and waits at most 1 ms for a table in Hello, a link of
/// 1000 MB/s, and a raw session with it: for tests of profiles sent in Hellos.
pub async fn edge_without_profiles(
    s: &Setup,
    cache: &std::path::Path,
) -> (EdgeService, lop_runtime::ShapedConfig, lop_runtime::ShapedTx, lop_runtime::ShapedRx) {
    let svc = edge_with(s, cache, Vec::new(), Duration::from_millis(1)).await;
    let link = lop_runtime::ShapedConfig::symmetric(lop_runtime::Trace::constant(1000.0).unwrap());
    let (tx, rx) = raw_session(&svc, link.clone());
    (svc, link, tx, rx)
}

/// A robot client `robot` of the test model that sends `profile` in its Hello (retrying every
/// 50 ms, 3 s of deadline slack), planned by `table`, over `link` to the edges of `board`.
pub async fn client_with_profile(
    board: &lop_runtime::local::Switchboard,
    link: lop_runtime::ShapedConfig,
    robot: &str,
    profile: Profile,
    table: ScheduleTable,
) -> lop_runtime::client::RobotClient<lop_runtime::local::LocalConnector> {
    let (worker, loaded) = lop_runtime::exec::Worker::spawn(robot, || lop::model::load(MODEL, &Default::default())).await.unwrap();
    let mut opts = lop_runtime::client::ClientOptions::new(robot, "resnet18");
    opts.retry_interval = Duration::from_millis(50);
    opts.deadline_slack = Duration::from_secs(3);
    opts.robot_profile = Some(profile);
    lop_runtime::client::RobotClient::new(board.connector(link), opts, worker, loaded.meta, &loaded.hash, table).await.unwrap()
}
