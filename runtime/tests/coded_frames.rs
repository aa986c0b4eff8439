//! Coded frames end to end (issue 48): a robot and an edge over an in-process link, the table's
//! frame codec lossless or JPEG; every inference that sends rows sends them coded, and its
//! outputs are the unsplit model's on the frame as decoded. An edge given a band whose pixels
//! differ from the robot's refuses it (Error `InputMismatch`) and counts it.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::{MODEL, Setup, assert_exact, edge, tempdir};

use std::time::Duration;

use lop::codec::{CodecCost, FrameCodec, Image};
use lop::planner::table::{ScheduleTable, TableSpec};
use lop_runtime::client::{ClientOptions, RobotClient};
use lop_runtime::exec::Worker;
use lop_runtime::local::Switchboard;
use lop_runtime::{ShapedConfig, Trace};

const IMAGE: Image = Image { channels: 3, width: 224, height: 224 };

/// A photograph-like 224x224 frame (gradients, edges, a little texture), planar.
fn frame() -> Vec<u8> {
    (0..IMAGE.bytes(224))
        .map(|i| {
            let (c, y, x) = (i / (224 * 224), (i / 224) % 224, i % 224);
            ((x + 2 * y + 60 * c + if (x / 29 + y / 17) % 2 == 0 { 40 } else { 0 } + (i * 7919) % 7) % 256) as u8
        })
        .collect()
}

/// `common::setup` with the table's frames coded by `codec` (priced as measured on `frame`),
/// and the unsplit outputs on the frame as given and as decoded.
fn setup(codec: FrameCodec) -> (Setup, Vec<tch::Tensor>) {
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let (mut robot, mut server) = lop::profile::SYNTHETIC.pair(&g).unwrap();
    let planar = frame();
    let cost: CodecCost = lop::codec::measure_cost(codec, &IMAGE, std::slice::from_ref(&planar), 8, 1).unwrap();
    robot.set_codec_cost(cost);
    server.set_codec_cost(cost);
    let spec = TableSpec::latency(vec![0.0, 2.0, 8.0, 30.0], 0.001).with_frame_codec(codec, &robot, &server).unwrap();
    let (table, _) = ScheduleTable::build(&g, &robot, &server, &spec, 1).unwrap();
    let tensor = |p: &[u8]| tch::Tensor::from_slice(p).reshape([1, 3, 224, 224]);
    let inputs = vec![tensor(&planar)];
    let whole = lop::exec::run_whole(&g, &inputs).unwrap().outputs;
    let decoded = if matches!(codec, FrameCodec::Jpeg { .. }) {
        lop::codec::decode(codec, &IMAGE, &lop::codec::encode(codec, &IMAGE, &planar, 224).unwrap(), 224).unwrap()
    } else {
        planar
    };
    let whole_decoded = lop::exec::run_whole(&g, &[tensor(&decoded)]).unwrap().outputs;
    (Setup { robot, server, spec, table, inputs, whole }, whole_decoded)
}

/// A robot client of `s`'s table over a 200 MB/s in-process link to `board`'s edge, running
/// `method`.
async fn robot_client(board: &Switchboard, s: &Setup, method: &str) -> RobotClient<lop_runtime::local::LocalConnector> {
    let link = ShapedConfig::symmetric(Trace::constant(200.0).unwrap()).with_latency(Duration::from_millis(1));
    let mut opts = ClientOptions::new("robot-1", "resnet18");
    opts.hello_timeout = Duration::from_secs(5);
    opts.deadline_slack = Duration::from_secs(3);
    opts.method = method.into();
    let (worker, loaded) = Worker::spawn("robot", || lop::model::load(MODEL, &Default::default())).await.unwrap();
    RobotClient::new(board.connector(link), opts, worker, loaded.meta, &loaded.hash, s.table.clone()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coded_frames_give_the_unsplit_output_on_the_decoded_frame() {
    // One at a time with the binary's other process-starting tests (tests/all.rs).
    let _heavy = crate::HEAVY.lock().await;
    for codec in [FrameCodec::Lossless, FrameCodec::Jpeg { quality: 85 }] {
        let (s, whole_decoded) = setup(codec);
        let dir = tempdir();
        let board = Switchboard::new();
        let edge = board.plug(edge(&s, &dir).await);
        let mut c = robot_client(&board, &s, "lop").await;
        assert!(c.connected());
        let raw_bytes = 3 * 224 * 224;
        let mut coded = 0;
        for method in ["server-only", "lop", "robot-only"] {
            c.set_method(method);
            for bw in [2.0, 8.0, 30.0] {
                let r = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), bw).await.unwrap();
                let what = format!("{codec} {method} at {bw} MB/s");
                assert!(!r.stats.fallback, "{what}: {:?}", r.stats.fallback_reason);
                // Rows crossed exactly when the frame was coded; then the robot computed on the
                // decoded frame, and so did the edge.
                assert_eq!(r.stats.frame_coded, r.stats.bytes_up > 0, "{what}");
                if r.stats.frame_coded {
                    coded += 1;
                    assert!(r.stats.bytes_up < raw_bytes as u64, "{what}: {} bytes up, raw {raw_bytes}", r.stats.bytes_up);
                    assert_exact(&r.outputs, &whole_decoded, &what);
                } else {
                    assert_exact(&r.outputs, &s.whole, &what);
                }
            }
        }
        assert!(coded >= 3, "{codec}: server-only sends the frame in every bucket ({coded} coded)");
        // The caller's frame is left as it was (the robot codes a copy).
        assert!(s.inputs[0].equal(&tch::Tensor::from_slice(&frame()).reshape([1, 3, 224, 224])), "{codec}");
        let counts = edge.service().counts();
        assert_eq!((counts.dropped.total(), counts.input_mismatches), (0, 0), "{codec}: {counts:?}");
        assert_eq!(counts.done, counts.inferences, "{codec}");
    }
}

/// An edge given a coded band whose pixels are not the robot's (its digest names others), or
/// whose unit does not decode, answers Error `InputMismatch` at once and counts it; a raw band
/// where the table codes the frame is out of plan, a coding it does not know malformed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_refuses_a_band_whose_pixels_differ() {
    let _heavy = crate::HEAVY.lock().await;
    use lop_msgs::Frame;
    use lop_msgs::protocol::{Band, BandHeader, Coding, DType, ErrorCode, Hello, Start};
    use lop_runtime::{LinkRx, LinkTx};

    let codec = FrameCodec::Lossless;
    let (s, _) = setup(codec);
    let dir = tempdir();
    let svc = edge(&s, &dir).await;
    let (robot, edge_end) = lop_runtime::shaped_pair(ShapedConfig::symmetric(Trace::constant(1000.0).unwrap()));
    let (etx, erx) = edge_end.into_split();
    let served = svc.clone();
    tokio::spawn(async move { served.serve(etx, erx).await });
    let (tx, mut rx) = robot.into_split();
    let recv = async |rx: &mut lop_runtime::ShapedRx| {
        let b = tokio::time::timeout(Duration::from_secs(20), rx.recv()).await.unwrap().unwrap().unwrap();
        lop_msgs::protocol::decode(&b).unwrap()
    };
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let hello = Hello {
        robot_id: "raw".into(),
        model_id: "resnet18".into(),
        model_sha256: lop_runtime::plans::digest(&g.content_hash().unwrap()).unwrap(),
        robot_profile_hash: lop_runtime::plans::digest(&s.robot.hash()).unwrap(),
        planner_hash: lop_runtime::plans::digest(&s.spec.hash()).unwrap(),
        input_dtype: DType::U8,
        input_shape: vec![1, 3, 224, 224],
        robot_profile: Vec::new(),
    };
    tx.send_frame(&Frame::Hello(hello)).await.unwrap();
    let Frame::Welcome(_) = recv(&mut rx).await else { panic!("expected Welcome") };
    let plan = s.table.entries.last().unwrap().plan_of("server-only").unwrap();
    let start = |id| {
        Frame::Start(Start {
            inference_id: id,
            bucket: 3,
            plan_hash: lop_runtime::plans::digest(&plan.hash()).unwrap(),
            input_stamp_ns: 0,
            deadline_ns: 5_000_000_000,
            due_ns: 0,
            path: Vec::new(),
        })
    };
    let unit = lop::codec::encode(codec, &IMAGE, &frame(), 224).unwrap();
    let digest = lop::codec::digest(&frame());
    let band = |id, coding: Coding, digest: u64, unit: &[u8]| {
        let mut payload = digest.to_le_bytes().to_vec();
        payload.extend_from_slice(unit);
        let header = BandHeader {
            inference_id: id,
            tensor_id: 0,
            row_start: 0,
            row_end: 224,
            row_axis: 2,
            dtype: DType::U8,
            shape: vec![1, 3, 224, 224],
            coding,
        };
        Frame::Band(Band { header, payload }).encode().unwrap()
    };
    let error_of = async |rx: &mut lop_runtime::ShapedRx, id: u64| loop {
        match recv(rx).await {
            Frame::Error(e) if e.inference_id == id => return e,
            Frame::Band(b) if b.header.inference_id == id => panic!("inference {id} was computed"),
            _ => {}
        }
    };
    // Pixels that differ from the digest's.
    tx.send_frame(&start(1)).await.unwrap();
    tx.send(band(1, Coding::Qoi, digest ^ 1, &unit)).await.unwrap();
    let e = error_of(&mut rx, 1).await;
    assert_eq!(e.code, ErrorCode::InputMismatch, "{}", e.text);
    assert!(e.text.contains("other pixels"), "{}", e.text);
    // A unit that does not decode.
    tx.send_frame(&start(2)).await.unwrap();
    tx.send(band(2, Coding::Qoi, digest, &unit[..unit.len() / 2])).await.unwrap();
    let e = error_of(&mut rx, 2).await;
    assert_eq!(e.code, ErrorCode::InputMismatch, "{}", e.text);
    // A JPEG where the table says QOI: out of plan; a coding byte nobody knows: malformed.
    tx.send_frame(&start(3)).await.unwrap();
    tx.send(band(3, Coding::Jpeg, digest, &unit)).await.unwrap();
    let mut unknown = band(3, Coding::Qoi, digest, &unit);
    unknown[12 + 23] = 9;
    tx.send(unknown).await.unwrap();
    // The right band is computed and answered.
    tx.send(band(3, Coding::Qoi, digest, &unit)).await.unwrap();
    loop {
        match recv(&mut rx).await {
            Frame::Done(d) if d.inference_id == 3 => break,
            Frame::Error(e) => panic!("{e:?}"),
            _ => {}
        }
    }
    let c = svc.counts();
    assert_eq!(c.input_mismatches, 2, "{c:?}");
    assert_eq!((c.dropped.out_of_plan, c.dropped.malformed), (1, 1), "{c:?}");
}

/// `passthrough`: the camera's own JPEG crosses unchanged (its bytes and a band header), and the
/// output is the unsplit model's on its decoding; a frame without a camera JPEG crosses lossless
/// (exact); a camera JPEG that is not the frame the robot holds is refused by the edge, and the
/// robot finishes that frame alone on its own pixels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_sends_the_camera_jpeg_unchanged() {
    let _heavy = crate::HEAVY.lock().await;
    use lop_runtime::exec::CameraJpeg;
    let (s, _) = setup(FrameCodec::Passthrough);
    let dir = tempdir();
    let board = Switchboard::new();
    let edge = board.plug(edge(&s, &dir).await);
    let mut c = robot_client(&board, &s, "server-only").await;
    assert!(c.connected());
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    // A camera's JPEG: 4:4:4 here, whole, no restart markers; the input is its decoding.
    let camera = lop::codec::encode(FrameCodec::Jpeg { quality: 80 }, &IMAGE, &frame(), 224).unwrap();
    let decoded = lop::codec::decode(FrameCodec::Passthrough, &IMAGE, &camera, 224).unwrap();
    let tensor = |p: &[u8]| tch::Tensor::from_slice(p).reshape([1, 3, 224, 224]);
    let whole = lop::exec::run_whole(&g, &[tensor(&decoded)]).unwrap().outputs;
    let jpeg = CameraJpeg(std::sync::Arc::from(camera.as_slice()));
    let r = c.infer_camera(vec![tensor(&decoded)], Some(jpeg.clone()), 30.0).await.unwrap();
    assert!(!r.stats.fallback, "{:?}", r.stats.fallback_reason);
    assert!(r.stats.frame_coded);
    let n = camera.len() as u64;
    assert!(r.stats.bytes_up > n && r.stats.bytes_up < n + 512, "{} bytes up for a {n}-byte JPEG", r.stats.bytes_up);
    assert_exact(&r.outputs, &whole, "passthrough");
    // No camera JPEG: lossless, exact, larger than the JPEG, smaller than raw.
    let r = c.infer(vec![tensor(&frame())], 30.0).await.unwrap();
    assert!(!r.stats.fallback, "{:?}", r.stats.fallback_reason);
    assert!(r.stats.bytes_up > n + 512 && r.stats.bytes_up < IMAGE.bytes(224) as u64, "{} bytes up", r.stats.bytes_up);
    assert_exact(&r.outputs, &s.whole, "passthrough without a camera JPEG");
    // A camera JPEG of another frame than the robot holds: refused, finished on the robot.
    let r = c.infer_camera(vec![tensor(&frame())], Some(jpeg), 30.0).await.unwrap();
    assert!(r.stats.fallback, "the edge computed on other pixels than the robot's");
    assert_exact(&r.outputs, &s.whole, "a refused passthrough frame");
    let counts = edge.service().counts();
    assert_eq!(counts.input_mismatches, 1, "{counts:?}");
}

/// `passthrough` under a plan that cuts the frame: the camera's JPEG (4:2:0, as cameras write
/// it) crosses band by band at its restart markers, the edge decodes each band as it arrives,
/// and the output is the unsplit model's on the JPEG's decoding; the bytes up are the JPEG's
/// and a few more a band.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_streams_a_cut_camera_frame() {
    let _heavy = crate::HEAVY.lock().await;
    use lop_runtime::exec::CameraJpeg;
    let (s, _) = setup(FrameCodec::Passthrough);
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    // The table's plans that send the frame in several bands.
    let cut: Vec<(f64, usize)> = s
        .table
        .entries
        .iter()
        .filter_map(|e| {
            let schedule = lop::sim::Schedule::derive(&g, &e.plan, lop::sim::ChunkBounds::Even, FrameCodec::Passthrough).ok()?;
            let bands = schedule.transfers.iter().filter(|t| t.up && t.node == 0 && t.producer.is_none()).count();
            (bands > 1).then_some((e.bandwidth_mb_s, bands))
        })
        .collect();
    assert!(!cut.is_empty(), "some bucket's plan cuts the frame: {:?}", s.table.entries.iter().map(|e| &e.method).collect::<Vec<_>>());
    let dir = tempdir();
    let board = Switchboard::new();
    let edge = board.plug(edge(&s, &dir).await);
    let mut c = robot_client(&board, &s, "lop").await;
    let camera = lop::codec::jpeg::encode_as_a_camera_does(&IMAGE, &frame(), 224, 90).unwrap();
    let decoded = lop::codec::decode(FrameCodec::Passthrough, &IMAGE, &camera, 224).unwrap();
    let tensor = |p: &[u8]| tch::Tensor::from_slice(p).reshape([1, 3, 224, 224]);
    let whole = lop::exec::run_whole(&g, &[tensor(&decoded)]).unwrap().outputs;
    let jpeg = CameraJpeg(std::sync::Arc::from(camera.as_slice()));
    for (bw, bands) in cut {
        let r = c.infer_camera(vec![tensor(&decoded)], Some(jpeg.clone()), bw).await.unwrap();
        let what = format!("lop at {bw} MB/s, {bands} input bands");
        assert!(!r.stats.fallback, "{what}: {:?}", r.stats.fallback_reason);
        assert_exact(&r.outputs, &whole, &what);
        // The JPEG (rewritten: a restart marker an MCU row), one band header and digest a band.
        let n = camera.len() as u64;
        assert!(
            r.stats.bytes_up > n && r.stats.bytes_up < n + 14 * 3 + bands as u64 * 120 + 256,
            "{what}: {} B up, JPEG {n} B",
            r.stats.bytes_up
        );
    }
    let counts = edge.service().counts();
    assert_eq!((counts.dropped.total(), counts.input_mismatches), (0, 0), "{counts:?}");
}

/// The robot reads the table at an effective bandwidth when its frames code larger than the
/// table priced them: a table priced at 1% of raw, frames that code at about half, read at the
/// lowest bucket after the first frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_coding_larger_than_priced_read_the_table_lower() {
    let _heavy = crate::HEAVY.lock().await;
    let codec = FrameCodec::Lossless;
    let g = lop::model::load(MODEL, &Default::default()).unwrap();
    let (mut robot, mut server) = lop::profile::SYNTHETIC.pair(&g).unwrap();
    let measured = lop::codec::measure_cost(codec, &IMAGE, &[frame()], 8, 1).unwrap();
    let cheap = CodecCost { ratio: 0.01, ..measured };
    robot.set_codec_cost(cheap);
    server.set_codec_cost(cheap);
    let spec = TableSpec::latency(vec![0.0, 2.0, 8.0, 30.0], 0.001).with_frame_codec(codec, &robot, &server).unwrap();
    let (table, _) = ScheduleTable::build(&g, &robot, &server, &spec, 1).unwrap();
    let inputs = vec![tch::Tensor::from_slice(&frame()).reshape([1, 3, 224, 224])];
    let whole = lop::exec::run_whole(&g, &inputs).unwrap().outputs;
    let s = Setup { robot, server, spec, table, inputs, whole };
    let dir = tempdir();
    let board = Switchboard::new();
    let _edge = board.plug(edge(&s, &dir).await);
    let mut c = robot_client(&board, &s, "server-only").await;
    let first = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
    assert_eq!(first.stats.bucket_mb_s, 30.0, "nothing seen yet: the table read at the link's bandwidth");
    let seen = first.stats.frame_ratio.expect("a coded frame went up");
    assert!(seen > 0.1, "lossless on this frame: {seen}");
    let second = c.infer(s.inputs.iter().map(|t| t.shallow_clone()).collect(), 30.0).await.unwrap();
    // 30 MB/s x 0.01 / ratio seen, bounded to 1/8: 3.75 MB/s, the 2 MB/s bucket.
    assert_eq!(second.stats.bucket_mb_s, 2.0, "frames coding {seen:.3} of raw against 0.01 priced");
    assert_exact(&second.outputs, &s.whole, "read lower");
}
