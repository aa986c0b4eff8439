//! A decompression bomb on the camera topic through the real `lop_robot` process (issue 56): a
//! 20-megapixel PNG of a few hundred kilobytes (80 MB as RGBA once decoded) arrives as a
//! `sensor_msgs/CompressedImage` between camera frames. The node refuses it from its headers
//! (`image.max_pixels`, by default a 4K frame for a 224x224 classifier), with one log line that
//! names the cap and the picture's size, counts it (/diagnostics' `frames_unconvertible`, the
//! summary's `bad`), and answers the frames before and after it exactly. Its peak memory (VmHWM,
//! reset just before) grows by a few megabytes at most, where a picture at the cap, decoded
//! right after, raises it by tens: the probe sees a decode when there is one.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common;

use common::{Node, assert_outputs_equal, free_port};
use hiroz::Builder as _;
use hiroz_msgs::diagnostic_msgs::DiagnosticArray;
use hiroz_msgs::ros::builtin_interfaces::Time;
use hiroz_msgs::sensor_msgs::CompressedImage;
use hiroz_msgs::std_msgs::Header;
use lop::codec::Image;
use lop::codec::photo::{self, Picture};
use lop_msgs::ros::msg::InferenceResult;
use robot_node::backend::hiroz::HirozRos;
use robot_node::convert::{ChannelOrder, Fit, ImageTarget, image_to_chw};

const MODEL: &str = "zoo:resnet18";
/// The bomb: a 20-megapixel camera's frame size.
const BOMB: (usize, usize) = (5472, 3648);
/// What the bomb would cost decoded (RGBA), which the node's peak memory must not see.
const BOMB_DECODED: u64 = (BOMB.0 * BOMB.1 * 4) as u64;

// ---- A PNG written here: scanlines filtered to almost all zeros, deflated with fixed codes ----

/// CRC-32 (PNG's, of a chunk's type and data).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// A DEFLATE stream of one block with the fixed Huffman codes, coding runs of a repeated byte
/// as matches at distance 1 (zlib's `Z_RLE`), with the zlib header and Adler-32 around it.
struct Rle {
    out: Vec<u8>,
    acc: u64,
    nbits: u32,
    prev: Option<u8>,
    run: usize,
    adler: (u32, u32),
}

impl Rle {
    fn new() -> Rle {
        // zlib header (deflate, 32 KiB window, no dictionary), then BFINAL = 1, BTYPE = 01.
        let mut z = Rle { out: vec![0x78, 0x01], acc: 0, nbits: 0, prev: None, run: 0, adler: (1, 0) };
        z.bits(1, 1);
        z.bits(1, 2);
        z
    }

    /// `n` bits of `v`, least significant first.
    fn bits(&mut self, v: u32, n: u32) {
        self.acc |= u64::from(v) << self.nbits;
        self.nbits += n;
        while self.nbits >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.nbits -= 8;
        }
    }

    /// A Huffman code of `n` bits, most significant first.
    fn code(&mut self, c: u32, n: u32) {
        for i in (0..n).rev() {
            self.bits((c >> i) & 1, 1);
        }
    }

    /// Literal/length symbol `s` in the fixed code.
    fn symbol(&mut self, s: u32) {
        match s {
            0..=143 => self.code(0x30 + s, 8),
            144..=255 => self.code(0x190 + s - 144, 9),
            256..=279 => self.code(s - 256, 7),
            _ => self.code(0xC0 + s - 280, 8),
        }
    }

    /// A copy of the previous byte, `len` (3..=258) times.
    fn repeat(&mut self, len: usize) {
        const BASE: [usize; 29] =
            [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258];
        const EXTRA: [u32; 29] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
        // 258 has a code of its own (285); 284 covers 227..=257.
        let i = if len == 258 { 28 } else { BASE[..28].iter().rposition(|&b| b <= len).unwrap() };
        self.symbol(257 + i as u32);
        self.bits((len - BASE[i]) as u32, EXTRA[i]);
        // Distance 1: distance code 0, five bits, no extra bits.
        self.code(0, 5);
    }

    fn flush_run(&mut self) {
        match (self.run, self.prev) {
            (0, _) | (_, None) => {}
            (1 | 2, Some(b)) => (0..self.run).for_each(|_| self.symbol(u32::from(b))),
            (n, _) => self.repeat(n),
        }
        self.run = 0;
    }

    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            let (a, s) = self.adler;
            let a = (a + u32::from(b)) % 65_521;
            self.adler = (a, (s + a) % 65_521);
            if self.prev == Some(b) {
                self.run += 1;
                if self.run == 258 {
                    self.flush_run();
                }
            } else {
                self.flush_run();
                self.symbol(u32::from(b));
                self.prev = Some(b);
            }
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.flush_run();
        self.symbol(256);
        if self.nbits > 0 {
            self.bits(0, 8 - self.nbits);
        }
        let (a, s) = self.adler;
        self.out.extend_from_slice(&((s << 16) | a).to_be_bytes());
        self.out
    }
}

/// The colour of block (`bx`, `by`): opaque, from a hash.
fn colour(bx: usize, by: usize, seed: u32) -> [u8; 4] {
    let v = (bx as u32).wrapping_mul(0x9E37_79B1) ^ (by as u32).wrapping_mul(0x85EB_CA77) ^ seed.wrapping_mul(0xC2B2_AE3D);
    let v = v ^ (v >> 15);
    [v as u8, (v >> 8) as u8, (v >> 16) as u8, 255]
}

/// A `w` x `h` RGBA picture of `block`-pixel squares of one colour each.
fn blocks(w: usize, h: usize, block: usize, seed: u32) -> Picture {
    let mut pixels = Vec::with_capacity(w * h * 4);
    for y in 0..h {
        for x in 0..w {
            pixels.extend_from_slice(&colour(x / block, y / block, seed));
        }
    }
    Picture { width: w, height: h, channels: 4, pixels }
}

/// [`blocks`] as a PNG, without the picture ever in memory: a block row's first scanline is
/// filtered `Sub` (each pixel less the one on its left: zeros but at the blocks' edges), the
/// others `Up` (less the scanline above: all zeros), so the deflated stream is mostly runs.
fn blocks_png(w: usize, h: usize, block: usize, seed: u32) -> Vec<u8> {
    let mut z = Rle::new();
    let mut line = vec![0u8; 1 + 4 * w];
    for y in 0..h {
        line.fill(0);
        if y % block == 0 {
            line[0] = 1;
            let mut left = [0u8; 4];
            for (x, px) in line[1..].chunks_exact_mut(4).enumerate() {
                let c = colour(x / block, y / block, seed);
                for ((out, now), before) in px.iter_mut().zip(c).zip(left) {
                    *out = now.wrapping_sub(before);
                }
                left = c;
            }
        } else {
            line[0] = 2;
        }
        z.push(&line);
    }
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&u32::try_from(w).unwrap().to_be_bytes());
    ihdr.extend_from_slice(&u32::try_from(h).unwrap().to_be_bytes());
    // 8 bits, RGBA, deflate, adaptive filtering, no interlace.
    ihdr.extend_from_slice(&[8, 6, 0, 0, 0]);
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    for (kind, data) in [(&b"IHDR"[..], ihdr), (b"IDAT", z.finish()), (b"IEND", Vec::new())] {
        png.extend_from_slice(&u32::try_from(data.len()).unwrap().to_be_bytes());
        let start = png.len();
        png.extend_from_slice(kind);
        png.extend_from_slice(&data);
        let crc = crc32(&png[start..]);
        png.extend_from_slice(&crc.to_be_bytes());
    }
    png
}

// ---- The frames ----

fn message(format: &str, data: &[u8], sec: i32) -> CompressedImage {
    CompressedImage {
        header: Header { stamp: Time { sec, nanosec: 7 }, frame_id: format!("cam{sec}") },
        format: format.into(),
        data: data.to_vec().into(),
    }
}

/// The unsplit model's outputs on a compressed frame converted as the node converts it.
fn reference(g: &lop::graph::Graph, format: &str, data: &[u8]) -> Vec<tch::Tensor> {
    let picture = robot_node::convert::compressed::decode(format, data, photo::MAX_PIXELS).unwrap();
    let view = robot_node::convert::compressed::view(&picture);
    let target = ImageTarget { height: 224, width: 224, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Letterbox { pad: 0 } };
    let chw = image_to_chw(&view, &target).unwrap();
    lop::exec::run_whole(g, &[tch::Tensor::from_slice(&chw).reshape([1, 3, 224, 224])]).unwrap().outputs
}

/// /diagnostics' counters of the node's frames (received, answered, dropped busy or skipped
/// while the node was not active yet, unconvertible), from the next report published after
/// `after`.
fn counters(diags: &mpsc::Receiver<(Instant, DiagnosticArray)>, after: Instant, deadline: Instant) -> [u64; 4] {
    while Instant::now() < deadline {
        let Ok((at, d)) = diags.recv_timeout(Duration::from_millis(100)) else { continue };
        let value =
            |key: &str| d.status.iter().flat_map(|s| s.values.iter()).find(|kv| kv.key == key).and_then(|kv| kv.value.parse::<u64>().ok());
        let skipped = value("frames_skipped_inactive");
        if at > after
            && let (Some(r), Some(a), Some(b), Some(s), Some(u)) =
                (value("frames_received"), value("frames_answered"), value("frames_dropped_busy"), skipped, value("frames_unconvertible"))
        {
            return [r, a, b + s, u];
        }
    }
    panic!("no /diagnostics from lop_robot");
}

/// Waits until the node has dealt with every frame it received (a copy of a frame published
/// again may have come after its result), twice in a row; returns the counters.
fn settled(diags: &mpsc::Receiver<(Instant, DiagnosticArray)>, deadline: Instant) -> [u64; 4] {
    let mut last = None;
    loop {
        let c = counters(diags, Instant::now(), deadline);
        let idle = c[0] == c[1] + c[2] + c[3];
        if idle && last == Some(c) {
            return c;
        }
        last = idle.then_some(c);
        assert!(Instant::now() < deadline, "lop_robot did not settle: {c:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_20_megapixel_png_is_refused_from_its_headers_named_and_counted() {
    let _heavy = crate::HEAVY.lock().await;
    let _ = tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).with_test_writer().try_init();
    let deadline = Instant::now() + Duration::from_secs(240);
    let dir = std::env::temp_dir().join(format!("lop-decode-cap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The frames: a camera's JPEG, the bomb, and a PNG at the cap (a 4K frame).
    let jpeg = {
        let image = Image { channels: 3, width: 640, height: 480 };
        lop::codec::jpeg::encode_as_a_camera_does(&image, &lop::codec::sample_frame(&image), 480, 90).unwrap()
    };
    let bomb = blocks_png(BOMB.0, BOMB.1, 64, 1);
    let at_cap = blocks_png(3840, 2160, 64, 2);
    // The bomb is what it claims: a small file that decodes to 20 megapixels, 80 MB (here, once).
    assert!(bomb.len() < 1 << 20, "{} B", bomb.len());
    let decoded = photo::decode_picture(&bomb).unwrap();
    assert_eq!((decoded.width, decoded.height, decoded.pixels.len() as u64), (BOMB.0, BOMB.1, BOMB_DECODED));
    assert!(decoded.pixels[..64 * 4].chunks(4).all(|p| p == colour(0, 0, 1)) && decoded.pixels[64 * 4..64 * 4 + 4] == colour(1, 0, 1));
    drop(decoded);
    assert_eq!(photo::decode_picture(&blocks_png(200, 130, 64, 3)).unwrap(), blocks(200, 130, 64, 3), "the PNG writer is exact");
    eprintln!("decode cap: a {}x{} PNG of {} B ({} B decoded)", BOMB.0, BOMB.1, bomb.len(), BOMB_DECODED);

    // The node's parameters, as a file; the test's own node runs the ROS router.
    let (ros_ep, edge_ep) = (format!("tcp/127.0.0.1:{}", free_port()), format!("tcp/127.0.0.1:{}", free_port()));
    let yaml = format!(
        "lop_robot:\n  ros__parameters:\n    robot_id: cap-robot\n    domain_id: 0\n    router_endpoint: \"{ros_ep}\"\n    embedded_router: false\n    \
         edge:\n      endpoint: \"{edge_ep}\"\n    model:\n      source: \"{MODEL}\"\n      id: resnet18\n    \
         table:\n      buckets: \"0,2,8,30\"\n    image:\n      fit: letterbox\n      transport: compressed\n    \
         cache_dir: \"{}\"\n    diagnostics_period_s: 0.2\n    deadline_slack_ms: 60000.0\n",
        dir.display()
    );
    let (config, cfg) = common::robot_config(&dir, &yaml);
    // The default cap for a 224x224 model: a 4K frame (image.max_pixels: 0).
    let cap = cfg.image.max_pixels_for(224, 224);
    assert_eq!(cap, 3840 * 2160);
    assert!(BOMB.0 * BOMB.1 > cap);

    // The edge, in this process, with the same table settings and profiles.
    let (_svc, _edge) = common::start_synthetic_edge(&edge_ep, MODEL, &cfg.table, &dir).await;

    let mut peer = cfg.ros.clone();
    peer.embedded_router = true;
    let test_node = tokio::task::spawn_blocking(move || HirozRos::open(&peer, "cap_camera", &[], &[], None)).await.unwrap().unwrap();
    let node = Node::start(&config);
    let n = test_node.node();
    let camera = n.create_pub::<CompressedImage>("/camera/image_raw/compressed").build().unwrap();
    let (res_tx, results) = mpsc::channel();
    let _rs = n.create_sub::<InferenceResult>("/lop/inference").build_with_callback(move |r| drop(res_tx.send(r))).unwrap();
    let (diag_tx, diags) = mpsc::channel();
    let _ds =
        n.create_sub::<DiagnosticArray>("/diagnostics").build_with_callback(move |d| drop(diag_tx.send((Instant::now(), d)))).unwrap();

    let node = tokio::task::spawn_blocking(move || {
        let g = lop::model::load(MODEL, &Default::default()).unwrap();
        let (jpeg_ref, cap_ref) = (reference(&g, "jpeg", &jpeg), reference(&g, "png", &at_cap));
        // A camera frame, answered exactly.
        let before = common::roundtrip_compressed(&camera, &results, &message("jpeg", &jpeg, 200), deadline);
        assert!(!before.fallback, "{}", before.fallback_reason);
        assert_outputs_equal(&before, &jpeg_ref);
        let [_, _, _, bad] = settled(&diags, deadline);
        assert_eq!(bad, 0, "{}", node.log());

        // The bomb: counted as unconvertible, decoded never.
        let rss = node.reset_peak();
        camera.publish(&message("png", &bomb, 201)).unwrap();
        let sent = Instant::now();
        let counted = loop {
            let c = counters(&diags, sent, deadline);
            if let Ok(r) = results.try_recv() {
                assert_ne!(r.header.stamp.sec, 201, "the 20 MP PNG was answered:\n{}", node.log());
            }
            if c[3] > 0 {
                break c;
            }
        };
        let bomb_peak = node.status_bytes("VmHWM").saturating_sub(rss);
        assert_eq!(counted[3], 1, "{counted:?}");

        // A frame at the cap: answered exactly, and decoded (the probe sees what a decode costs).
        let rss = node.reset_peak();
        let after = common::roundtrip_compressed(&camera, &results, &message("png", &at_cap, 202), deadline);
        let cap_peak = node.status_bytes("VmHWM").saturating_sub(rss);
        assert!(!after.fallback, "{}", after.fallback_reason);
        assert_outputs_equal(&after, &cap_ref);
        let end = settled(&diags, deadline);
        assert_eq!(end[3], 1, "only the bomb is unconvertible: {end:?}");
        (node, bomb_peak, cap_peak, rss)
    });
    let (mut node, bomb_peak, cap_peak, rss) = node.await.unwrap();
    let mb = |b: u64| b as f64 / f64::from(1 << 20);
    eprintln!(
        "decode cap: lop_robot at {:.1} MiB; peak growth {:.1} MiB for the 20 MP PNG, {:.1} MiB for the 4K PNG",
        mb(rss),
        mb(bomb_peak),
        mb(cap_peak)
    );
    // The 4K frame decodes to 33 MB of RGBA (its scanlines inflated first, as many again).
    assert!(cap_peak >= (3840 * 2160 * 4) as u64, "the peak rose by {cap_peak} B for a 4K PNG: is VmHWM reset?");
    assert!(bomb_peak < BOMB_DECODED / 8, "the peak rose by {bomb_peak} B for the 20 MP PNG");

    // One log line names the picture's size and the cap.
    let log = node.log();
    let named: Vec<&str> = log.lines().filter(|l| l.contains(&format!("{}x{}", BOMB.0, BOMB.1))).collect();
    assert_eq!(named.len(), 1, "{log}");
    let line = named[0];
    for says in [
        "bad input frame dropped",
        &format!("({} pixels)", BOMB.0 * BOMB.1),
        &format!("at most {cap} pixels"),
        "(the cap is image.max_pixels)",
        "cam201",
    ] {
        assert!(line.contains(says), "'{says}' not in: {line}");
    }
    eprintln!("decode cap: {line}");

    // SIGINT: the node stops and its summary counts the one bad frame.
    let pid = node.child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = node.child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(30), "lop_robot did not stop within 30 s of SIGINT:\n{}", node.log());
        std::thread::sleep(Duration::from_millis(50));
    };
    // The log readers' last lines.
    let t1 = Instant::now();
    while !node.log().contains("bye") && t1.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = node.log();
    assert!(status.success(), "lop_robot exited with {status}:\n{log}");
    let bye = log.lines().find(|l| l.contains("bye")).unwrap_or_else(|| panic!("no summary:\n{log}"));
    assert!(bye.contains("bad=1"), "{bye}");
    drop(test_node);
    let _ = std::fs::remove_dir_all(&dir);
}
