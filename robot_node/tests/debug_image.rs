//! The annotated debug image from a real `lop_robot` process (a detector, `detect` with one box
//! a frame, alone on the robot: no edge): while nobody subscribes to `/lop/debug_image` none is
//! drawn (/diagnostics' `debug_images` stays 0); once a hiroz subscriber joins, it receives the
//! frame's debug image, of the frame's size and stamp, with the frame's own pixels inside the
//! box that `/lop/detections` carries for the same stamp and the box's colour on its edges.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common;

use common::{Node, free_port, image, image_bytes};
use hiroz::Builder as _;
use hiroz_msgs::diagnostic_msgs::DiagnosticArray;
use hiroz_msgs::sensor_msgs::Image;
use lop_msgs::ros::msg::InferenceResult;
use lop_msgs::ros::vision::Detection2DArray;
use robot_node::annotate::{box_pixels, class_colour, draw::text_size, scale_for};
use robot_node::backend::hiroz::HirozRos;

const MODEL: &str = "zoo:yolo_det@128x160";
const TASK: &str = "detect;score=0.001;max=1";
const W: u32 = 320;
const H: u32 = 200;

/// `/diagnostics`' value of `key` in the first report that has it after `after`.
fn diagnostic(diags: &mpsc::Receiver<(Instant, DiagnosticArray)>, key: &str, after: Instant, deadline: Instant) -> u64 {
    while Instant::now() < deadline {
        let Ok((at, d)) = diags.recv_timeout(Duration::from_millis(100)) else { continue };
        let v = d.status.iter().flat_map(|s| s.values.iter()).find(|kv| kv.key == key).and_then(|kv| kv.value.parse().ok());
        if let (true, Some(v)) = (at > after, v) {
            return v;
        }
    }
    panic!("no /diagnostics with {key}");
}

/// Checks the debug image `dbg` of `frame` against the box of `boxes` (one detection): the frame's
/// size and stamp, the box's colour on its outermost ring of pixels (but under the corner's caption
/// and the label's text), the frame's own pixels at the box's centre and far outside it.
fn check(dbg: &Image, frame: &Image, boxes: &Detection2DArray) {
    assert_eq!((dbg.width, dbg.height, dbg.step, dbg.encoding.as_str()), (W, H, W * 3, "rgb8"));
    assert_eq!((dbg.header.stamp.sec, dbg.header.frame_id.as_str()), (frame.header.stamp.sec, frame.header.frame_id.as_str()));
    assert_eq!(boxes.detections.len(), 1, "max=1: one box");
    let d = &boxes.detections[0];
    let class = &d.results[0].hypothesis.class_id;
    let (cx, cy, bw, bh) = (d.bbox.center.position.x, d.bbox.center.position.y, d.bbox.size_x, d.bbox.size_y);
    let [x0, y0, x1, y1] = box_pixels([cx - bw / 2.0, cy - bh / 2.0, cx + bw / 2.0, cy + bh / 2.0]);
    let (got, want) = (image_bytes(dbg), image_bytes(frame));
    let px = |b: &[u8], x: i64, y: i64| {
        let i = (y as usize * W as usize + x as usize) * 3;
        [b[i], b[i + 1], b[i + 2]]
    };
    let s = scale_for(W);
    let (_, text_h) = text_size("x", s);
    // The caption covers the top rows; a label drawn inside the box covers rows under its top.
    let label_rows = if y0 >= text_h { y0 - text_h..y0 } else { y0 + 2 * s..y0 + 2 * s + text_h };
    let ring = (x0..=x1).flat_map(|x| [(x, y0), (x, y1)]).chain((y0..=y1).flat_map(|y| [(x0, y), (x1, y)]));
    let mut checked = 0;
    for (x, y) in ring.filter(|&(x, y)| (0..i64::from(W)).contains(&x) && (text_h..i64::from(H)).contains(&y)) {
        if x == x1 && label_rows.contains(&y) {
            continue;
        }
        assert_eq!(px(&got, x, y), class_colour(class), "box edge pixel ({x}, {y}) of {:?}", [x0, y0, x1, y1]);
        checked += 1;
    }
    assert!(checked >= 4, "edge pixels checked: {checked} of {:?}", [x0, y0, x1, y1]);
    // Inside, away from the lines and the label: the frame as it came.
    let inside = ((x0 + x1) / 2, (y0 + y1) / 2);
    if x1 - x0 > 8 * s && !label_rows.contains(&inside.1) && inside.1 >= text_h && y1 - y0 > 8 * s {
        assert_eq!(px(&got, inside.0, inside.1), px(&want, inside.0, inside.1), "inside the box at {inside:?}");
    }
    // Every pixel neither on the box, its label, nor the caption is the frame's own.
    let (lw, lh) = text_size(&format!("{class} {:.2}", d.results[0].hypothesis.score), s);
    let lx = x0..x0 + lw;
    let drawn = |x: i64, y: i64| {
        (x0..=x1).contains(&x) && (y0..=y1).contains(&y)
            || lx.contains(&x) && (label_rows.start..label_rows.start + lh).contains(&y)
            || y < text_h
    };
    let same = (0..i64::from(H)).flat_map(|y| (0..i64::from(W)).map(move |x| (x, y))).filter(|&(x, y)| !drawn(x, y));
    for (x, y) in same {
        assert_eq!(px(&got, x, y), px(&want, x, y), "pixel ({x}, {y}) outside the box");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscriber_receives_the_frame_with_its_box_drawn_and_nothing_is_drawn_before() {
    let _heavy = crate::HEAVY.lock().await;
    let deadline = Instant::now() + Duration::from_secs(120);
    let dir = std::env::temp_dir().join(format!("lop-debug-image-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (ros_ep, edge_ep) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));
    // No edge listens at edge_ep: the robot answers every frame alone.
    let yaml = format!(
        "lop_robot:\n  ros__parameters:\n    robot_id: dbg-robot\n    domain_id: 0\n    router_endpoint: \"{ros_ep}\"\n    \
         edge:\n      endpoint: \"{edge_ep}\"\n    model:\n      source: \"{MODEL}\"\n      id: det\n      task: \"{TASK}\"\n    \
         method: robot-only\n    table:\n      buckets: \"0,8\"\n    image:\n      fit: letterbox\n    hello_timeout_ms: 300.0\n    \
         cache_dir: \"{}\"\n    diagnostics_period_s: 0.2\n",
        dir.display()
    );
    let (config, cfg) = common::robot_config(&dir, &yaml);
    assert_eq!(cfg.topics.debug_image, "/lop/debug_image");

    let mut peer = cfg.ros.clone();
    peer.embedded_router = true;
    let test_node = tokio::task::spawn_blocking(move || HirozRos::open(&peer, "dbg_camera", &[], &[], None)).await.unwrap().unwrap();
    let node = Node::start(&config);
    let blocking = tokio::task::spawn_blocking(move || {
        let n = test_node.node();
        let camera = n.create_pub::<Image>("/camera/image_raw").build().unwrap();
        let (res_tx, results) = mpsc::channel::<InferenceResult>();
        let _rs = n.create_sub::<InferenceResult>("/lop/inference").build_with_callback(move |r| drop(res_tx.send(r))).unwrap();
        let (det_tx, dets) = mpsc::channel::<Detection2DArray>();
        let _ds = n.create_sub::<Detection2DArray>("/lop/detections").build_with_callback(move |d| drop(det_tx.send(d))).unwrap();
        let (diag_tx, diags) = mpsc::channel();
        let _dg =
            n.create_sub::<DiagnosticArray>("/diagnostics").build_with_callback(move |d| drop(diag_tx.send((Instant::now(), d)))).unwrap();

        // No subscriber: frames answered, no debug image drawn.
        let first = common::roundtrip(&camera, &results, &image(W, H, W * 3, 100, 1), deadline);
        assert_eq!(first.method, "robot-only");
        let answered = Instant::now();
        assert_eq!(diagnostic(&diags, "debug_images", answered, deadline), 0, "{}", node.log());

        // A subscriber: frames until one's debug image arrives.
        let (dbg_tx, debug) = mpsc::channel::<Image>();
        let _sub = n.create_sub::<Image>("/lop/debug_image").build_with_callback(move |m| drop(dbg_tx.send(m))).unwrap();
        let mut frames = HashMap::new();
        let mut boxes = HashMap::new();
        let mut sec = 200;
        let got = loop {
            assert!(Instant::now() < deadline, "no debug image arrived:\n{}", node.log());
            let frame = image(W, H, W * 3, sec, sec as u32);
            camera.publish(&frame).unwrap();
            frames.insert(sec, frame);
            sec += 1;
            if let Ok(m) = debug.recv_timeout(Duration::from_millis(300)) {
                break m;
            }
        };
        let stamp = got.header.stamp.sec;
        let boxes_of = loop {
            while let Ok(d) = dets.try_recv() {
                boxes.insert(d.header.stamp.sec, d);
            }
            if let Some(b) = boxes.remove(&stamp) {
                break b;
            }
            assert!(Instant::now() < deadline, "no detections stamped {stamp}");
            std::thread::sleep(Duration::from_millis(20));
        };
        check(&got, &frames[&stamp], &boxes_of);
        let drawn = diagnostic(&diags, "debug_images", Instant::now(), deadline);
        assert!(drawn >= 1, "debug_images {drawn}");
        assert_eq!(diagnostic(&diags, "debug_image_errors", Instant::now(), deadline), 0);
        eprintln!("debug image: stamp {stamp}, box {:?}", boxes_of.detections[0].bbox);
        (node, test_node)
    });
    let (node, test_node) = blocking.await.unwrap();
    drop(node);
    drop(test_node);
    let _ = std::fs::remove_dir_all(&dir);
}
