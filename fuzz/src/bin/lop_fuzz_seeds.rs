//! Writes the seed corpus of the frame, table, config and ros targets into `fuzz/corpus/`: real
//! encodings made by the project's own writers, so that the fuzzer starts from valid inputs.
//! (The onnx seeds come from `scripts/fuzz_onnx_seeds.py`: torch exports small models.)
//! Run once and commit the files; existing files are overwritten with the same bytes.

use std::path::Path;

use anyhow::{Context, Result};
use hiroz::msg::ZMessage;
use hiroz_msgs::sensor_msgs::{Image, PointCloud2, PointField};
use lop::planner::table::{ScheduleTable, TableSpec};
use lop_msgs::Digest;
use lop_msgs::load::{EdgeLoad, ModelLoad};
use lop_msgs::protocol::{Band, BandHeader, Cancel, DType, Done, DoneStats, ErrorCode, ErrorFrame, Forward, Frame, Hello, Start, Welcome};

fn write(target: &str, name: &str, bytes: &[u8]) -> Result<()> {
    let dir = lop_fuzz::corpus_dir(target);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(name);
    std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    println!("{} ({} bytes)", path.display(), bytes.len());
    Ok(())
}

fn tagged(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(body);
    v
}

fn frames() -> Result<()> {
    let hello = Frame::Hello(Hello {
        robot_id: "jetson-01".into(),
        model_id: "resnet18".into(),
        model_sha256: Digest([1; 32]),
        robot_profile_hash: Digest([2; 32]),
        planner_hash: Digest([3; 32]),
        input_dtype: DType::U8,
        input_shape: vec![1, 3, 224, 224],
        robot_profile: br#"{"version":3,"ops":[]}"#.to_vec(),
    });
    let welcome =
        Frame::Welcome(Welcome { server_profile_hash: Digest([9; 32]), table_hash: Digest([10; 32]), server_profile: b"{}".to_vec() });
    let start = Frame::Start(Start {
        inference_id: 7,
        bucket: 2,
        plan_hash: Digest([4; 32]),
        input_stamp_ns: 1,
        deadline_ns: 2,
        due_ns: 0,
        path: vec!["gpu-1".into()],
    });
    let forward = Frame::Forward(Forward { inference_id: 7, to: "gpu-3".into(), path: vec!["gpu-1".into(), "gpu-2".into()] });
    let header = BandHeader {
        inference_id: 7,
        tensor_id: 3,
        row_start: 0,
        row_end: 2,
        row_axis: 2,
        dtype: DType::F32,
        shape: vec![1, 2, 2, 3],
        coding: Default::default(),
    };
    let band = Frame::Band(Band { header, payload: (0..48).collect() });
    // A camera frame's rows as one QOI unit, with the digest of its pixels.
    let pixels: Vec<u8> = (0..3 * 2 * 4).map(|i| (i * 11) as u8).collect();
    let image = lop::codec::Image { channels: 3, width: 4, height: 2 };
    let mut coded_payload = lop::codec::digest(&pixels).to_le_bytes().to_vec();
    coded_payload.extend(lop::codec::encode(lop::codec::FrameCodec::Lossless, &image, &pixels, 2)?);
    let coded_header = BandHeader {
        inference_id: 7,
        tensor_id: 0,
        row_start: 0,
        row_end: 2,
        row_axis: 2,
        dtype: DType::U8,
        shape: vec![1, 3, 2, 4],
        coding: lop_msgs::protocol::Coding::Qoi,
    };
    let band_coded = Frame::Band(Band { header: coded_header, payload: coded_payload });
    let done = Frame::Done(Done {
        inference_id: 7,
        stats: DoneStats { server_compute_ns: 5, bytes_sent: 9, upload_ns: 4_000_000, ..DoneStats::default() },
    });
    let error = Frame::Error(ErrorFrame { inference_id: 7, code: ErrorCode::DeadlineExceeded, text: "late".into() });
    let cancel = Frame::Cancel(Cancel { inference_id: 7 });
    let mut stream = Vec::new();
    for (name, f) in [
        ("hello", &hello),
        ("welcome", &welcome),
        ("start", &start),
        ("band", &band),
        ("band-coded", &band_coded),
        ("done", &done),
        ("error", &error),
        ("forward", &forward),
        ("cancel", &cancel),
    ] {
        let bytes = f.encode()?;
        write("frame", name, &tagged(0, &bytes))?;
        stream.extend_from_slice(&bytes);
    }
    write("frame", "band-zero-copy", &tagged(1, &band.encode()?))?;
    write("frame", "stream", &tagged(2, &stream))?;
    let load = EdgeLoad {
        edge: "gpu-1".into(),
        seq: 3,
        utilisation: 0.5,
        gpu_free_bytes: Some(1 << 30),
        models: vec![ModelLoad { model: "resnet18".into(), queued_s: 0.01, idle_goodput: 40.0, server_s: 0.004, in_flight: 2, warm: true }],
    };
    write("frame", "load", &tagged(3, &load.encode()?))?;
    write("frame", "key", &tagged(4, b"lop/v1/jetson-01/up"))?;
    Ok(())
}

fn table() -> Result<()> {
    let g = lop::model::load(lop_fuzz::TABLE_MODEL, &Default::default())?;
    let (robot, server) = lop::profile::SYNTHETIC.pair(&g)?;
    // One bucket each (a bigger table is slower to parse and reaches no new code): a slow link,
    // where plans keep work on the robot, and a fast one, where they split it.
    for (name, bucket) in [("resnet18-32-slow", 0.5), ("resnet18-32-fast", 50.0)] {
        let spec = TableSpec::latency(vec![bucket], 0.001);
        let (table, _) = ScheduleTable::build(&g, None, &robot, &server, &spec, 1)?;
        write("table", name, table.to_json().as_bytes())?;
    }
    Ok(())
}

fn configs() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("config");
    let edge = std::fs::read(root.join("edge.yaml")).context("reading config/edge.yaml")?;
    write("config", "edge", &tagged(0, &edge))?;
    let robot = std::fs::read(root.join("robot.yaml")).context("reading config/robot.yaml")?;
    write("config", "robot", &tagged(1, &robot))?;
    let tls = b"model: zoo:resnet18\nzenoh:\n  listen: [\"tls/0.0.0.0:7447\"]\n  tls: {ca: ca.pem, cert: edge.pem, key: edge.key}\n  access: {robots: [r1], edges: [edge]}\n";
    write("config", "edge-tls", &tagged(0, tls))
}

fn ros() -> Result<()> {
    let image = Image {
        height: 4,
        width: 5,
        encoding: "rgb8".into(),
        is_bigendian: 0,
        step: 15,
        data: (0..60u8).collect::<Vec<u8>>().into(),
        ..Image::default()
    };
    write("ros", "image-rgb8", &[&[0, 0x1b][..], &image.serialize()].concat())?;
    let mono = Image { encoding: "mono8".into(), step: 6, data: vec![200; 24].into(), ..image };
    write("ros", "image-mono8-letterbox", &[&[0, 0x9a][..], &mono.serialize()].concat())?;
    let field = |name: &str, offset| PointField { name: name.into(), offset, datatype: 7, count: 1 };
    let points: Vec<[f32; 4]> = vec![[0.5, -1.0, 0.2, 10.0], [3.0, 2.5, -0.5, 80.0], [f32::NAN, 0.0, 0.0, 1.0], [9.0, 0.0, 0.0, 1.0]];
    let cloud = PointCloud2 {
        height: 1,
        width: points.len() as u32,
        fields: vec![field("x", 0), field("y", 4), field("z", 8), field("intensity", 12)],
        is_bigendian: false,
        point_step: 16,
        row_step: 16 * points.len() as u32,
        data: points.iter().flatten().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>().into(),
        is_dense: false,
        ..PointCloud2::default()
    };
    write("ros", "cloud-xyzi", &[&[1, 0x23][..], &cloud.serialize()].concat())?;
    // f64 intensities past f32's range in one cell: once made the BEV mean channel infinite.
    let wide = |name: &str, offset| PointField { name: name.into(), offset, datatype: if name == "intensity" { 8 } else { 7 }, count: 1 };
    let data: Vec<u8> = [(0.5f32, 0.5f32, 0.0f32, 1e300f64), (0.6, 0.4, 0.1, 1.7e308)]
        .iter()
        .flat_map(|&(x, y, z, i)| [x.to_le_bytes(), y.to_le_bytes(), z.to_le_bytes()].concat().into_iter().chain(i.to_le_bytes()))
        .collect();
    let huge = PointCloud2 {
        width: 2,
        fields: vec![wide("x", 0), wide("y", 4), wide("z", 8), wide("intensity", 12)],
        point_step: 20,
        row_step: 40,
        data: data.into(),
        ..cloud
    };
    write("ros", "cloud-huge-intensity", &[&[1, 0x23][..], &huge.serialize()].concat())
}

fn main() -> Result<()> {
    frames()?;
    table()?;
    configs()?;
    ros()
}
