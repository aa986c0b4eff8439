//! rosbag2 recordings as `--frames`: a recording in MCAP storage, written by an independent
//! writer (Python rosbags, the tests' peer), holding the project's photographs as
//! `CompressedImage` JPEGs and as raw `Image`s (rgb8, bgr8, mono8), gives the bench the same
//! frames as the same pictures in files, and the same per-method results; bad recordings get
//! one clear error each.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use lop::codec::Image;
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scratch(name: &str) -> PathBuf {
    lop_runtime::scratch::scratch_dir("lop-bag-test", name)
}

/// The venv's Python with rosbags and Pillow (`scripts/setup.sh --test-deps`, once).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let root = root();
        let status = Command::new("bash").arg(root.join("scripts/setup.sh")).arg("--test-deps").current_dir(&root).status();
        assert!(status.is_ok_and(|s| s.success()), "scripts/setup.sh --test-deps failed");
        root.join(".venv/bin/python")
    })
}

/// The project's photographs (`scripts/photos.sh`).
fn photos() -> PathBuf {
    let out = Command::new("bash").arg(root().join("scripts/photos.sh")).output().expect("scripts/photos.sh runs");
    assert!(out.status.success(), "scripts/photos.sh: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("runs");
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn lop(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lop")).args(args).output().expect("the lop binary runs")
}

/// Writes the recording `spec` describes (cli/tests/data/write_bag.py) at `dir/name`.
fn write_bag(dir: &Path, name: &str, compression: &str, topics: Value) -> PathBuf {
    let out = dir.join(name);
    let spec = dir.join(format!("{name}.json"));
    let v = json!({"out": out, "compression": compression, "topics": topics});
    std::fs::write(&spec, v.to_string()).expect("spec");
    run(Command::new(python()).arg(root().join("cli/tests/data/write_bag.py")).arg(&spec));
    out
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf8")
}

/// Three photographs as PNG files, the same in grey, and as 64x64 camera JPEGs.
struct Pictures {
    pngs: PathBuf,
    greys: PathBuf,
    jpegs: PathBuf,
}

fn pictures(dir: &Path) -> Pictures {
    let photos = photos();
    let (pngs, greys, jpegs) = (dir.join("pngs"), dir.join("greys"), dir.join("jpegs"));
    for d in [&pngs, &greys] {
        std::fs::create_dir_all(d).expect("dir");
    }
    for f in ["astronaut.png", "chelsea.png", "coffee.png"] {
        std::fs::copy(photos.join(f), pngs.join(f)).expect("copy a photograph");
        let grey = "import sys; from PIL import Image; Image.open(sys.argv[1]).convert('L').save(sys.argv[2])";
        run(Command::new(python()).args(["-c", grey]).arg(pngs.join(f)).arg(greys.join(f)));
    }
    let out = lop(&["camera-jpegs", "--frames", s(&pngs), "--size", "64x64", "--out", s(&jpegs)]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Pictures { pngs, greys, jpegs }
}

/// The files of a folder, by name.
fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).expect("dir").map(|e| e.expect("entry").path().display().to_string()).collect();
    v.sort();
    v
}

/// The recording of every kind of topic: the JPEGs, the PNGs raw in three encodings, a topic of
/// another type and an empty one; chunks compressed with zstd (rosbag2's default).
fn recording(dir: &Path, p: &Pictures) -> PathBuf {
    let topics = json!([
        {"topic": "/camera/image_raw/compressed", "kind": "jpeg", "files": files(&p.jpegs)},
        {"topic": "/camera/image_raw", "kind": "rgb8", "files": files(&p.pngs)},
        {"topic": "/camera/bgr", "kind": "bgr8", "files": files(&p.pngs)},
        {"topic": "/camera/mono", "kind": "mono8", "files": files(&p.greys)},
        {"topic": "/camera/bayer", "kind": "rgb8", "encoding": "bayer_rggb8", "files": files(&p.pngs)[..1]},
        {"topic": "/chatter", "kind": "string", "count": 2},
        {"topic": "/empty", "kind": "jpeg", "files": []},
    ]);
    write_bag(dir, "all", "zstd", topics)
}

/// Each topic's frames are the files' frames, byte for byte (fitted, and as camera JPEGs), and
/// are named by topic, place and stamp.
fn same_frames(bag: &Path, p: &Pictures) {
    let image = Image { channels: 3, width: 48, height: 40 };
    let planar = |v: Vec<(String, Vec<u8>)>| v.into_iter().map(|(_, f)| f).collect::<Vec<_>>();
    let load = |path: &Path, topic: Option<&str>| lop_cli::frames::load(path, topic, &image).expect("frames load");
    let named = load(bag, Some("/camera/image_raw/compressed"));
    assert_eq!(named[1].0, "/camera/image_raw/compressed#1@1700000000.033333333", "{:?}", named[1].0);
    assert_eq!(planar(named), planar(load(&p.jpegs, None)), "CompressedImage = the JPEG files");
    let pngs = planar(load(&p.pngs, None));
    assert_eq!(pngs.len(), 3);
    assert_eq!(planar(load(bag, Some("/camera/image_raw"))), pngs, "rgb8 = the PNG files");
    assert_eq!(planar(load(bag, Some("/camera/bgr"))), pngs, "bgr8 = the PNG files");
    assert_eq!(planar(load(bag, Some("/camera/mono"))), planar(load(&p.greys, None)), "mono8 = the grey PNG files");
    let camera = Image { channels: 3, width: 64, height: 64 };
    let cameras = |path: &Path, topic| lop_cli::camera_frames::load_camera(path, topic, &camera).expect("camera frames load");
    let (from_bag, from_files) = (cameras(bag, Some("/camera/image_raw/compressed")), cameras(&p.jpegs, None));
    assert_eq!(from_bag.len(), 3);
    for (b, f) in from_bag.iter().zip(&from_files) {
        assert!(b.jpeg == f.jpeg && b.planar == f.planar, "{} = {}", b.name, f.name);
    }
}

/// `lop bench` on `frames`, cheap: the smallest settings of bench_cli.rs, one request a frame.
fn bench(frames: &Path, cache: &Path, extra: &[&str]) -> Value {
    let trace = root().join("data/traces/indoor.csv");
    let mut args = vec!["bench", "zoo:resnet18@64x64", "--trace", s(&trace), "--requests", "3", "--json", "--synthetic-profiles"];
    args.extend(["--dilation", "8", "--buckets", "0:30:10", "--cache-dir", s(cache), "--frames", s(frames)]);
    // Outputs and bytes are compared, not latency: a loaded machine must not make a split
    // inference miss its deadline and run on the robot alone.
    args.extend(["--deadline-slack-ms", "60000"]);
    args.extend(extra);
    let out = lop(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "lop bench {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {text}"))
}

/// The same per-method results: frames, requests, exact outputs, no fallback; the bytes sent
/// by the methods whose plan the bucket does not change (server-only's depend on the frames'
/// content under lossless and passthrough).
fn same_results(bag: &Value, files: &Value) {
    assert_eq!(bag["frames"], 3, "{bag}");
    assert_eq!(bag["frames"], files["frames"]);
    assert_eq!(bag["frame_codec"], files["frame_codec"]);
    let (b, f) = (&bag["methods"], &files["methods"]);
    assert_eq!(b.as_object().map(|m| m.keys().collect::<Vec<_>>()), f.as_object().map(|m| m.keys().collect::<Vec<_>>()));
    for (name, m) in b.as_object().expect("methods") {
        for v in [m, &f[name]] {
            assert!(v["outputs_agree"] == true && v["fallbacks"] == 0 && v["requests"] == 3, "{name}: {v}");
        }
    }
    for name in ["robot-only", "server-only"] {
        for key in ["bytes_up", "bytes_down", "max_rel_err"] {
            assert_eq!(b[name][key], f[name][key], "{name}.{key}: recording {bag}\nfiles {files}");
        }
    }
    assert!(b["server-only"]["bytes_up"].as_f64() > Some(0.0), "{bag}");
}

#[test]
fn a_recording_gives_the_bench_what_its_pictures_as_files_do() {
    let dir = scratch("same");
    let p = pictures(&dir);
    let bag = recording(&dir, &p);
    same_frames(&bag, &p);
    let cache = dir.join("cache");
    let compressed = ["--frames-topic", "/camera/image_raw/compressed"];
    for codec in ["lossless", "passthrough"] {
        let from_bag = bench(&bag, &cache, &[&compressed[..], &["--frame-codec", codec]].concat());
        same_results(&from_bag, &bench(&p.jpegs, &cache, &["--frame-codec", codec]));
    }
    let raw = bench(&bag, &cache, &["--frames-topic", "/camera/image_raw", "--frame-codec", "lossless"]);
    same_results(&raw, &bench(&p.pngs, &cache, &["--frame-codec", "lossless"]));
    // A recording with one image topic with frames, chunks uncompressed: the topic may go
    // unnamed (an empty image topic and one of another type beside it are not candidates).
    let topics = json!([
        {"topic": "/cam/empty", "kind": "jpeg", "files": []},
        {"topic": "/cam", "kind": "jpeg", "files": files(&p.jpegs)},
        {"topic": "/chatter", "kind": "string", "count": 2},
    ]);
    let one = write_bag(&dir, "one", "none", topics);
    let v = bench(&one, &cache, &["--frame-codec", "passthrough", "--methods", "server-only"]);
    assert_eq!(v["frames"], 3, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_recordings_get_one_clear_error_each() {
    let dir = scratch("bad");
    let p = pictures(&dir);
    let bag = recording(&dir, &p);
    let mcap = bag.join("all.mcap");
    let bytes = std::fs::read(&mcap).expect("the recording");
    let truncated = dir.join("truncated.mcap");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("write");
    let garbage = dir.join("garbage.mcap");
    std::fs::write(&garbage, b"not an MCAP file at all").expect("write");
    let db3 = dir.join("old.db3");
    std::fs::write(&db3, b"SQLite format 3\0").expect("write");
    let trace = root().join("data/traces/indoor.csv");
    let bench = ["bench", "zoo:resnet18@64x64", "--trace", s(&trace), "--synthetic-profiles", "--requests", "1"];
    let codecs = ["codecs", "--size", "32x32", "--codecs", "lossless"];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--frames", s(&bag), "--frames-topic", "/nope"], "the recording has no topic '/nope'; its topics: /camera/bayer"),
        (vec!["--frames", s(&bag), "--frames-topic", "/nope"], "/chatter (std_msgs/msg/String, 2 messages)"),
        (
            vec!["--frames", s(&bag), "--frames-topic", "/chatter"],
            "topic '/chatter' carries std_msgs/msg/String, not sensor_msgs/msg/Image",
        ),
        (vec!["--frames", s(&bag), "--frames-topic", "/empty"], "topic '/empty' (sensor_msgs/msg/CompressedImage) holds no message"),
        (vec!["--frames", s(&truncated), "--frames-topic", "/camera/mono"], "truncated.mcap is truncated"),
        (vec!["--frames", s(&bag)], "has 5 image topics: name one with --frames-topic"),
        (vec!["--frames", s(&bag), "--frames-topic", "/camera/bayer"], "pixel encoding 'bayer_rggb8' is not read"),
        (vec!["--frames", s(&garbage)], "garbage.mcap is not a readable MCAP file"),
        (vec!["--frames", s(&db3)], "SQLite3 storage"),
        (vec!["--frames", s(&p.pngs), "--frames-topic", "/cam"], "is not one"),
    ];
    for (args, says) in &cases {
        let o = lop(&[&codecs[..], args].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.code() == Some(2) && err.contains(says) && !err.contains("panicked"), "{args:?}: {err}");
    }
    // The bench says the same; and a raw topic cannot be passed through.
    for (args, says) in [
        (vec!["--frames", s(&bag), "--frames-topic", "/empty"], "holds no message"),
        (vec!["--frames", s(&bag), "--frames-topic", "/camera/bgr", "--frame-codec", "passthrough"], "carries raw 512x512 bgr8 frames"),
    ] {
        let o = lop(&[&bench[..], &args].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.code() == Some(2) && err.contains(says) && !err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
