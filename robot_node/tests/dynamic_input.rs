//! `lop_robot` with an exported model whose height and width are dynamic and no
//! `model.input_shape`: the node fixes the shape from the first camera frame (64x48), the edge
//! serves that shape as one of its `input_shapes`, and every answer equals the unsplit model's at
//! the frame's own size; a later frame of another size is letterboxed to it.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{assert_outputs_equal, free_port, image, image_bytes, roundtrip};
use hiroz::Builder as _;
use hiroz_msgs::sensor_msgs::Image;
use lop::model::LoadOptions;
use lop::onnx::proto::tensor_proto::DataType;
use lop::onnx::proto::tensor_shape_proto::{Dimension, dimension};
use lop::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    attribute_proto::AttributeType, type_proto,
};
use lop::plan::Side;
use lop_msgs::ros::msg::InferenceResult;
use lop_runtime::edge::EdgeModel;
use prost::Message as _;
use robot_node::config::{ProfileSource, RobotConfig};
use robot_node::convert::{ChannelOrder, Fit, ImageTarget, ImageView, image_to_chw};
use robot_node::params::{ParamValue, Params};

/// A float image model as exporters write it with dynamic axes: input `images` of shape
/// [batch, 3, height, width], two 3x3 convolutions (the second with stride 2) around a ReLU.
fn dynamic_onnx() -> Vec<u8> {
    let weights = |name: &str, dims: &[i64], seed: u32| {
        let n: i64 = dims.iter().product();
        let data: Vec<f32> =
            (0..n as u32).map(|i| ((i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 16) % 200) as f32 / 400.0 - 0.25).collect();
        TensorProto {
            name: Some(name.into()),
            dims: dims.to_vec(),
            data_type: Some(DataType::Float as i32),
            raw_data: Some(data.iter().flat_map(|x| x.to_le_bytes()).collect()),
            ..Default::default()
        }
    };
    let ints = |name: &str, v: &[i64]| AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: v.to_vec(),
        ..Default::default()
    };
    let node = |op: &str, ins: &[&str], out: &str, attribute: Vec<AttributeProto>| NodeProto {
        name: Some(format!("/{out}/{op}")),
        op_type: Some(op.into()),
        input: ins.iter().map(|s| s.to_string()).collect(),
        output: vec![out.into()],
        attribute,
        ..Default::default()
    };
    let dim = |d: &str| Dimension {
        value: Some(d.parse::<i64>().map_or_else(|_| dimension::Value::DimParam(d.into()), dimension::Value::DimValue)),
        ..Default::default()
    };
    let tensor_type = type_proto::Tensor {
        elem_type: Some(DataType::Float as i32),
        shape: Some(TensorShapeProto { dim: ["batch", "3", "height", "width"].into_iter().map(dim).collect() }),
    };
    let graph = GraphProto {
        name: Some("dynamic".into()),
        node: vec![
            node("Conv", &["images", "w1", "b1"], "c1", vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1])]),
            node("Relu", &["c1"], "r1", vec![]),
            node(
                "Conv",
                &["r1", "w2"],
                "heads",
                vec![ints("kernel_shape", &[3, 3]), ints("pads", &[1, 1, 1, 1]), ints("strides", &[2, 2])],
            ),
        ],
        initializer: vec![weights("w1", &[8, 3, 3, 3], 1), weights("b1", &[8], 2), weights("w2", &[4, 8, 3, 3], 3)],
        input: vec![ValueInfoProto {
            name: Some("images".into()),
            r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor_type)), ..Default::default() }),
            ..Default::default()
        }],
        output: vec![ValueInfoProto { name: Some("heads".into()), ..Default::default() }],
        ..Default::default()
    };
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

/// The unsplit model at `shape` on `img` fitted as the node fits it.
fn reference(path: &str, shape: [usize; 4], img: &Image, pad: u8) -> Vec<tch::Tensor> {
    let load = LoadOptions {
        input_shape: Some(shape.to_vec()),
        preprocess: Some(lop::preprocess::Preprocess::parse("unit").unwrap()),
        ..LoadOptions::default()
    };
    let g = lop::model::load(path, &load).unwrap();
    let data = image_bytes(img);
    let view =
        ImageView { width: img.width, height: img.height, encoding: &img.encoding, is_bigendian: false, step: img.step, data: &data };
    let (h, w) = (shape[2] as u32, shape[3] as u32);
    let target = ImageTarget { height: h, width: w, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad } };
    let chw = image_to_chw(&view, &target).unwrap();
    let input = tch::Tensor::from_slice(&chw).reshape([1, 3, i64::from(h), i64::from(w)]);
    lop::exec::run_whole(&g, &[input]).unwrap().outputs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dynamic_model_runs_at_the_first_frames_size() {
    // Alone on the two cores, as when this file was its own test binary (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_test_writer().try_init();
    let deadline = Instant::now() + Duration::from_secs(55);
    let dir = std::env::temp_dir().join(format!("lop-robot-dynamic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model_path = dir.join("dynamic.onnx");
    std::fs::write(&model_path, dynamic_onnx()).unwrap();
    let model = model_path.display().to_string();
    let (ros_ep, edge_ep) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));

    // No model.input_shape and no image size: the first frame fixes the shape.
    let yaml = format!(
        "lop_robot:\n  ros__parameters:\n    domain_id: 0\n    router_endpoint: \"{ros_ep}\"\n    embedded_router: true\n    \
         edge:\n      endpoint: \"{edge_ep}\"\n    model:\n      source: \"{model}\"\n      id: dynamic\n      preprocess: unit\n    \
         table:\n      buckets: \"0,2,8,30\"\n      input_wire: u8\n    cache_dir: \"{}\"\n    deadline_slack_ms: 20000.0\n",
        dir.display()
    );
    let mut params = Params::from_yaml_str("lop_robot", &yaml, "test").unwrap();
    params.set("robot_id", ParamValue::Str("dynamic-robot".into()));
    let cfg = RobotConfig::from_params(&mut params).unwrap();
    assert!(params.unknown().is_empty(), "{:?}", params.unknown());

    // The edge serves the model at two camera sizes, the frame's among them.
    let unit = Some(lop::preprocess::Preprocess::parse("unit").unwrap());
    let (mut models, mut robots, mut spec) = (Vec::new(), Vec::new(), None);
    for shape in [vec![1, 3, 32, 32], vec![1, 3, 48, 64]] {
        let load = LoadOptions { input_shape: Some(shape.clone()), preprocess: unit.clone(), ..LoadOptions::default() };
        let g = lop::model::load(&model, &load).unwrap();
        let robot = ProfileSource::Synthetic.load(&g, Side::Robot).unwrap();
        let server = ProfileSource::Synthetic.load(&g, Side::Server).unwrap();
        spec = Some(cfg.table.spec(&g, &robot, &server).unwrap());
        models.push(EdgeModel { id: "dynamic".into(), source: model.clone(), load, server_profile: server });
        robots.push(robot);
    }
    let (svc, _edge) = common::start_edge(&edge_ep, models, robots, spec.unwrap(), &dir).await;
    assert_eq!(svc.model_ids(), vec!["dynamic".to_string()], "one model, two sizes");

    let robot = common::InProcess::start(&cfg, params.declared().to_vec(), "dynamic_camera").await;
    let n = robot.peer.node();
    let camera = n.create_pub::<Image>("/camera/image_raw").build().unwrap();
    let (res_tx, results) = mpsc::channel::<InferenceResult>();
    let _rs = n.create_sub::<InferenceResult>("/lop/inference").build_with_callback(move |r| drop(res_tx.send(r))).unwrap();

    let pad = cfg.image.pad;
    let checked = tokio::task::spawn_blocking(move || {
        // The camera's own size, then a larger frame letterboxed to it.
        for (img, shape) in [(image(64, 48, 64 * 3, 200, 5), [1, 3, 48, 64]), (image(96, 80, 96 * 3, 201, 6), [1, 3, 48, 64])] {
            let r = roundtrip(&camera, &results, &img, deadline);
            assert!(!r.fallback, "frame {}x{} fell back: {}", img.width, img.height, r.fallback_reason);
            assert_eq!(r.outputs[0].shape, vec![1, 4, 24, 32], "the model ran at the first frame's size");
            assert_outputs_equal(&r, &reference(&model, shape, &img, pad));
        }
    });
    checked.await.unwrap();
    let summary = robot.stop(Duration::from_secs(10)).await;
    assert!(summary.answered >= 2 && summary.fallbacks == 0, "{summary:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
