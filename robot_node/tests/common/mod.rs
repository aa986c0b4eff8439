//! What the `lop_robot` end-to-end tests share: ports, camera frames, an in-process edge, and
//! the publish-until-answered loop.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::Path;
use std::sync::mpsc;
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

/// [`start_edge`] serving zoo `model` (under its zoo name) with synthetic profiles, planning its
/// tables with `table`: the robot's own settings, so both sides agree on the table.
pub async fn start_synthetic_edge(
    endpoint: &str,
    model: &str,
    table: &lop_runtime::table_config::TableSettings,
    cache_dir: &Path,
) -> (EdgeService, impl Sized) {
    use lop::plan::Side;
    use robot_node::config::ProfileSource;
    let g = lop::model::load(model, &Default::default()).unwrap();
    let robot = ProfileSource::Synthetic.load(&g, Side::Robot).unwrap();
    let server = ProfileSource::Synthetic.load(&g, Side::Server).unwrap();
    let spec = table.spec(&g, &robot, &server).unwrap();
    let id = model.trim_start_matches("zoo:").to_string();
    let model = EdgeModel { id, source: model.into(), load: Default::default(), server_profile: server };
    start_edge(endpoint, vec![model], vec![robot], spec, cache_dir).await
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
    let session = ZenohConfig::router(vec![endpoint.to_string()]).open().await.unwrap();
    let acceptor = EdgeAcceptor::new(&session).await.unwrap();
    let svc = EdgeService::start(EdgeOptions {
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
    })
    .await
    .unwrap();
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
