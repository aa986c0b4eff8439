//! Writes the seed corpus of the frame, table, config, ros, picture, band, site and hello targets
//! into `fuzz/corpus/`: real encodings made by the project's own writers, so that the fuzzer
//! starts from valid inputs.
//! (The onnx seeds come from `scripts/fuzz_onnx_seeds.py`: torch exports small models.)
//! Run once and commit the files; existing files are overwritten with the same bytes.

use std::path::Path;

use anyhow::{Context, Result};
use hiroz::msg::ZMessage;
use hiroz_msgs::sensor_msgs::{CompressedImage, Image, PointCloud2, PointField};
use lop::codec::photo::{self, Picture};
use lop::codec::{FrameCodec, jpeg};
use lop::planner::table::{ScheduleTable, TableSpec};
use lop_msgs::Digest;
use lop_msgs::load::{EdgeLoad, ModelLoad};
use lop_msgs::protocol::{
    Band, BandHeader, Cancel, DType, Done, DoneStats, ErrorCode, ErrorFrame, Forward, Frame, Hello, Reject, RejectReason, Start, Welcome,
};
use lop_msgs::site::LoadDigest;
use lop_runtime::exec::camera::CameraSend;
use lop_runtime::exec::coded::encode_coded_band;
use lop_runtime::exec::{CameraJpeg, GraphMeta, InputWire, encode_band};
use tch::Tensor;

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
        let (table, _) = ScheduleTable::build(&g, &robot, &server, &spec, 1)?;
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
    // Several cameras on one model (`cameras`, `camera.NAME.*`), as config/robot.yaml shows them.
    let cameras = b"lop_robot:\n  ros__parameters:\n    cameras: [front, rear]\n    camera:\n      front:\n        topic: /front/image_raw\n      rear:\n        transport: compressed\n        fit: letterbox\n        frame_id: rear_optical\n";
    write("config", "robot-cameras", &tagged(1, cameras))?;
    let tls = b"model: zoo:resnet18\nzenoh:\n  listen: [\"tls/0.0.0.0:7447\"]\n  tls: {ca: ca.pem, cert: edge.pem, key: edge.key}\n  access: {robots: [r1], edges: [edge]}\n";
    write("config", "edge-tls", &tagged(0, tls))?;
    // Bucket ranges of 1e12 buckets and of more than usize holds: once an 8 TB allocation and an
    // overflow in lop::planner::table::parse_buckets (found by fuzz_config).
    for (name, range) in [("bandwidth-buckets-1e12", "0:1e12:1"), ("bandwidth-buckets-3e88", "0:3e88:1")] {
        let yaml = format!("lop_bandwidth:\n  ros__parameters:\n    table:\n      buckets: \"{range}\"\n");
        write("config", name, &tagged(1, yaml.as_bytes()))?;
    }
    Ok(())
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

/// A photograph-like planar frame of `channels` x `height` x `width`: gradients, an edge and a
/// little texture (random pixels would not compress and would decode to nothing like a camera's).
fn photo_like(channels: usize, height: usize, width: usize) -> Vec<u8> {
    (0..channels * height * width)
        .map(|i| {
            let (c, y, x) = (i / (height * width), (i / width) % height, i % width);
            ((x * 9 + y * 4 + c * 50 + if (x / 5 + y / 7) % 2 == 0 { 35 } else { 0 } + (i * 7919) % 5) % 256) as u8
        })
        .collect()
}

/// Planar `[C, H, W]` bytes interleaved, as a picture holds them.
fn interleaved(planar: &[u8], channels: usize) -> Vec<u8> {
    let plane = planar.len() / channels;
    (0..plane).flat_map(|p| (0..channels).map(move |c| planar[c * plane + p])).collect()
}

/// Compressed camera frames as `lop_robot` receives them: JPEGs (4:4:4, a camera's 4:2:0, grey)
/// and PNGs (RGB, grey, RGBA) made by lop's own encoders, in `sensor_msgs/CompressedImage` with
/// the format fields image_transport writes.
fn pictures() -> Result<()> {
    let (h, w) = (16, 24);
    let rgb = lop::codec::Image { channels: 3, width: w, height: h };
    let grey = lop::codec::Image { channels: 1, width: w, height: h };
    let colour = photo_like(3, h, w);
    let mono = photo_like(1, h, w);
    let rgba: Vec<u8> = interleaved(&colour, 3).chunks_exact(3).flat_map(|p| [p[0], p[1], p[2], 200]).collect();
    let picture = |channels, pixels| photo::encode_png(&Picture { width: w, height: h, channels, pixels });
    let seeds = [
        ("jpeg-444", "jpeg", jpeg::encode(&rgb, &colour, h, 90)?, 0x1b),
        ("jpeg-420-camera", "bgr8; jpeg compressed bgr8", jpeg::encode_as_a_camera_does(&rgb, &colour, h, 80)?, 0x9a),
        ("jpeg-grey", "mono8; jpeg compressed mono8", jpeg::encode(&grey, &mono, h, 90)?, 0x5b),
        ("png-rgb", "png", picture(3, interleaved(&colour, 3)), 0x23),
        ("png-grey", "mono8; png compressed mono8", picture(1, mono.clone()), 0xc4),
        ("png-rgba", "rgba8; png compressed rgba8", picture(4, rgba), 0x2d),
    ];
    for (name, format, data, shape) in seeds {
        let m = CompressedImage { format: format.into(), data: data.into(), ..CompressedImage::default() };
        write("picture", name, &tagged(shape, &m.serialize()))?;
    }
    Ok(())
}

/// Input bands as the robot sends them for the band target's plans (lop_fuzz::BAND_CODECS, whose
/// index is each seed's first byte; its top bit set: the digest is checked as sent): raw rows
/// (uint8, float32), QOI and JPEG bands with their digests, the camera's own JPEG of a whole
/// frame and of part of one (cut at its restart markers), and the lossless band a passthrough
/// robot without a camera JPEG sends for part of one.
fn bands() -> Result<()> {
    let g = lop_fuzz::band_graph();
    let meta = GraphMeta::of(&g);
    let (h, w, gh, gw) = (24, 16, 16, 8);
    let frame = photo_like(3, h, w);
    let grey = photo_like(1, gh, gw);
    let robot = |rgb: &[u8]| -> Result<lop::exec::SideExec<'_>> {
        let mut exec = lop::exec::SideExec::new(&g, lop::Side::Robot);
        exec.insert(0, 0..h, Tensor::from_slice(rgb).reshape([1, 3, h as i64, w as i64]))?;
        exec.insert(1, 0..gh, Tensor::from_slice(&grey).reshape([1, 1, gh as i64, gw as i64]))?;
        Ok(exec)
    };
    let exec = robot(&frame)?;
    write("band", "raw", &tagged(0, &encode_band(&meta, 7, 0, &(0..8), &exec.extract(0, &(0..8))?, InputWire::Native)?))?;
    write("band", "raw-f32-grey", &tagged(1, &encode_band(&meta, 7, 1, &(0..16), &exec.extract(1, &(0..16))?, InputWire::F32)?))?;
    for (which, name, codec, band) in [
        (2, "lossless", FrameCodec::Lossless, (0, 0..8)),
        (2, "lossless-grey", FrameCodec::Lossless, (1, 8..16)),
        (0x80 | 2, "lossless-digest-as-sent", FrameCodec::Lossless, (0, 8..24)),
        (3, "jpeg", FrameCodec::Jpeg { quality: 75 }, (0, 8..24)),
        (3, "jpeg-grey", FrameCodec::Jpeg { quality: 75 }, (1, 0..16)),
        (4, "passthrough-lossless", FrameCodec::Passthrough, (0, 0..8)),
    ] {
        let mut exec = robot(&frame)?;
        let bytes = encode_coded_band(&mut exec, &meta, 7, (band.0, &band.1), codec, None)?;
        write("band", name, &tagged(which, &bytes))?;
    }
    // The camera's 4:2:0 JPEG at the model's size: the robot computes on its decoding.
    let image = lop::codec::Image { channels: 3, width: w, height: h };
    let camera = jpeg::encode_as_a_camera_does(&image, &frame, h, 80)?;
    let decoded = lop::codec::decode(FrameCodec::Passthrough, &image, &camera, h)?;
    let mut exec = robot(&decoded)?;
    let jpeg = CameraJpeg(camera.into());
    let bytes = encode_coded_band(&mut exec, &meta, 7, (0, &(0..h)), FrameCodec::Passthrough, Some(&mut CameraSend::new(jpeg.clone())))?;
    write("band", "passthrough-camera", &tagged(4, &bytes))?;
    // Its first 16 rows, cut at its restart markers, the JPEG's header with them.
    let bytes = encode_coded_band(&mut exec, &meta, 7, (0, &(0..16)), FrameCodec::Passthrough, Some(&mut CameraSend::new(jpeg)))?;
    write("band", "passthrough-camera-scan", &tagged(4, &bytes))
}

/// Site digests as the aggregator publishes them: one shard of one, the middle shard of three
/// with two edges (one serving two models), and an empty shard.
fn sites() -> Result<()> {
    let model = |name: &str, queued_s, in_flight| ModelLoad {
        model: name.into(),
        queued_s,
        idle_goodput: 80.0,
        server_s: 0.004,
        in_flight,
        warm: true,
    };
    let load = |edge: &str, seq, models| EdgeLoad { edge: edge.into(), seq, utilisation: 0.5, gpu_free_bytes: Some(8 << 30), models };
    let digests = [
        ("one-shard", LoadDigest { shard: 0, shards: 1, seq: 1, edges: vec![(load("gpu-1", 3, vec![model("resnet18", 0.01, 1)]), 12)] }),
        (
            "two-edges",
            LoadDigest {
                shard: 1,
                shards: 3,
                seq: 9,
                edges: vec![
                    (load("gpu-1", 4, vec![model("resnet18", 0.002, 0), model("yolo_det", 0.03, 3)]), 40),
                    (EdgeLoad { gpu_free_bytes: None, ..load("gpu-2", 11, vec![model("resnet18", 0.2, 9)]) }, u16::MAX),
                ],
            },
        ),
        ("empty-shard", LoadDigest { shard: 2, shards: 3, seq: 2, edges: Vec::new() }),
    ];
    for (name, d) in digests {
        write("site", name, &d.encode()?)?;
    }
    Ok(())
}

/// Hellos carrying the robot's profile (the synthetic one of the table model, and one with the
/// lossless codec's measured cost), one without (a profile the edge knows), and the edge's profile
/// in a Welcome and in a Planning reject.
fn hellos() -> Result<()> {
    let g = lop::model::load(lop_fuzz::TABLE_MODEL, &Default::default())?;
    let (robot, server) = lop::profile::SYNTHETIC.pair(&g)?;
    let spec = lop_fuzz::hello_spec();
    let image = lop::codec::Image { channels: 3, width: 32, height: 32 };
    let mut coded = robot.clone();
    coded.set_codec_cost(lop::codec::measure_cost(FrameCodec::Lossless, &image, &[lop::codec::sample_frame(&image)], 4, 3)?);
    let hello = |p: &lop::profile::Profile, carried: bool| -> Result<Frame> {
        Ok(Frame::Hello(Hello {
            robot_id: "jetson-01".into(),
            model_id: "resnet18".into(),
            model_sha256: Digest::from_hex(&g.content_hash()?)?,
            robot_profile_hash: Digest::from_hex(&p.hash())?,
            planner_hash: Digest::from_hex(&spec.hash())?,
            input_dtype: DType::F32,
            input_shape: vec![1, 3, 32, 32],
            robot_profile: if carried { serde_json::to_vec(p)? } else { Vec::new() },
        }))
    };
    let (table, _) = ScheduleTable::build(&g, &robot, &server, &spec, 1)?;
    let server_json = serde_json::to_vec(&server)?;
    let welcome = Frame::Welcome(Welcome {
        server_profile_hash: Digest::from_hex(&server.hash())?,
        table_hash: Digest::from_hex(&table.hash)?,
        server_profile: server_json.clone(),
    });
    let planning = Frame::Reject(Reject {
        reason: RejectReason::Planning,
        text: "building the schedule table for robot profile 0123456789ab (model 'resnet18'); it was not ready within 2s: retry (run alone meanwhile)".into(),
        server_profile: server_json,
    });
    for (name, f) in [
        ("hello", hello(&robot, true)?),
        ("hello-codec-cost", hello(&coded, true)?),
        ("hello-known-profile", hello(&robot, false)?),
        ("welcome", welcome),
        ("reject-planning", planning),
    ] {
        write("hello", name, &f.encode()?)?;
    }
    Ok(())
}

fn main() -> Result<()> {
    frames()?;
    table()?;
    configs()?;
    ros()?;
    pictures()?;
    bands()?;
    sites()?;
    hellos()
}
