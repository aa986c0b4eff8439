//! Fuzz targets: every reader of data from outside the process, fed arbitrary bytes. Each target
//! must return (an error is fine) without panicking, hanging or allocating without bound, and
//! where a reader accepts its input, what it accepted must survive a round trip.
//!
//! The bodies live here (those of what the robot and the edge take in besides frames and files,
//! in `received.rs`), not in the libFuzzer binaries, so that `tests/corpus.rs` replays the
//! committed corpus (`fuzz/corpus/<target>/`) through them in the ordinary test run, and a crash
//! once found and added to the corpus stays fixed. `scripts/fuzz.sh` builds the binaries with
//! coverage instrumentation and runs each for a bounded time.

#![allow(clippy::missing_panics_doc)] // the panics here are the fuzz oracles

use std::path::{Path, PathBuf};

use hiroz::msg::ZMessage;
use hiroz_msgs::sensor_msgs::{Image, PointCloud2};
use lop::graph::Graph;
use lop::planner::table::ScheduleTable;
use lop::sim::Schedule;
use lop_msgs::Key;
use lop_msgs::load::EdgeLoad;
use lop_msgs::protocol::{self, Frame, Limits};
use robot_node::convert::{self, BevChannels, BevGrid, ChannelOrder, Fit, ImageTarget, VoxelGrid};

mod received;
pub use received::{
    BAND_CODECS, BAND_TRANSFERS, PICTURE_MAX_PIXELS, band, band_accepted, band_graph, hello, hello_accepted, hello_spec, picture, site,
};

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The targets, by name: the corpus folder and the binary (`fuzz_<name>`) share it.
pub const TARGETS: [(&str, Target); 9] = [
    ("frame", frame),
    ("onnx", onnx),
    ("table", table),
    ("config", config),
    ("ros", ros),
    ("picture", picture),
    ("band", band),
    ("site", site),
    ("hello", hello),
];

/// Builds what `target`'s body keeps across inputs (a model, its profiles, plans), so that the
/// libFuzzer binaries build it before fuzzing starts (their `init`) rather than within the first
/// input's timeout: with every target at once on two cores, loading the model took the hello
/// target's first input past 10 s.
pub fn prepare(target: &str) {
    once_per_process();
    match target {
        "table" => TABLE_GRAPH.with(|_| ()),
        _ => received::prepare(target),
    }
}

/// Where the committed seed corpus of `target` lives.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target)
}

/// The model the table target's plans are derived on (the seed tables were planned for it).
pub const TABLE_MODEL: &str = "zoo:resnet18@32x32";

/// Wire input: the first byte picks the reader, the rest is its input.
/// 0: a protocol frame; 1: a band frame, zero-copy; 2: a stream of frames; 3: an edge's load
/// report; 4: a session key.
pub fn frame(data: &[u8]) {
    let Some((&which, data)) = data.split_first() else { return };
    let limits = Limits { max_frame_len: 1 << 20 };
    match which % 5 {
        0 => {
            if let Ok(f) = limits.decode(data) {
                let again = f.encode().expect("a decoded frame encodes");
                assert_eq!(again, data, "a decoded frame re-encodes to the same bytes");
            }
        }
        1 => {
            if let Ok((header, payload)) = limits.decode_band(data) {
                let Ok(Frame::Band(b)) = limits.decode(data) else { panic!("decode_band accepted what decode refuses") };
                assert_eq!((b.header, b.payload.as_slice()), (header, payload), "the two band decoders disagree");
            }
        }
        2 => {
            // A stream: frames back to back; every decoded prefix must be as long as check says.
            let mut rest = data;
            for _ in 0..64 {
                let Ok((_, used)) = limits.decode_prefix(rest) else { break };
                assert_eq!(limits.check(rest).ok(), Some(used), "check and decode_prefix disagree on the length");
                assert!(used > 0, "a frame of no bytes");
                rest = &rest[used..];
            }
        }
        3 => {
            if let Ok(load) = EdgeLoad::decode(data) {
                let again = EdgeLoad::decode(&load.encode().expect("a decoded report encodes")).expect("a re-encoded report decodes");
                assert_eq!(again, load, "a load report survives a round trip");
            }
        }
        _ => {
            if let Ok(key) = std::str::from_utf8(data)
                && let Ok(k) = Key::parse(key)
            {
                assert!(k.robot().is_some_and(|r| key.contains(r)), "a parsed key's robot is in the key");
            }
        }
    }
    let _ = protocol::check(data);
}

/// ONNX model bytes, imported with a fixed input shape for dynamic dimensions.
pub fn onnx(data: &[u8]) {
    once_per_process();
    let opts = lop::onnx::ImportOptions { input_shape: Some(vec![1, 3, 16, 16]) };
    if let Ok(g) = lop::onnx::import_bytes(data, "fuzz", None, &opts) {
        assert!(!g.nodes.is_empty() || g.inputs().is_empty(), "an imported graph with inputs has nodes");
        let _ = g.content_hash();
    }
}

/// A schedule table's JSON. Its content hash is recomputed before loading (no fuzzer forges a
/// sha256), so everything past the hash check is reached: every plan of every bucket is derived
/// on [`TABLE_MODEL`], as an edge does before serving a table a robot sent.
pub fn table(data: &[u8]) {
    once_per_process();
    let Ok(mut t) = serde_json::from_slice::<ScheduleTable>(data) else { return };
    let untouched = ScheduleTable::from_json(&String::from_utf8_lossy(data), "fuzz");
    t.hash = t.content_hash();
    let Ok(t) = ScheduleTable::from_json(&t.to_json(), "fuzz") else {
        // Only the version may refuse a table whose hash is right.
        assert!(untouched.is_err(), "a table loaded as given but not once re-serialised");
        return;
    };
    assert_eq!(ScheduleTable::from_json(&t.to_json(), "fuzz").ok().as_ref(), Some(&t), "a loaded table survives a round trip");
    if t.entries.len() > 64 {
        return; // each plan derivation costs milliseconds; a bigger table adds nothing new
    }
    TABLE_GRAPH.with(|g| {
        for e in &t.entries {
            for m in ["robot-only", "server-only", "layer-partition", "lop"] {
                if let Some(p) = e.plan_of(m) {
                    let _ = p.validate(g);
                    let _ = Schedule::derive(g, p, t.spec.chunk_bounds, t.spec.frame.codec);
                }
            }
        }
        let _ = t.lookup(f64::from(data.len() as u32));
    });
}

/// A YAML config: even first byte, the edge's (`lop_edge --config`); odd, a robot node's
/// parameters file, read as `lop_robot`, `lop_bandwidth` and `lop_power` read it.
pub fn config(data: &[u8]) {
    let Some((&which, data)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(data) else { return };
    if which % 2 == 0 {
        let Ok(cfg) = edge_server::config::EdgeConfig::parse(text, Path::new("/nonexistent/edge.yaml")) else { return };
        let _ = cfg.listen_plan();
        let _ = cfg.table_spec();
        for i in 0..cfg.models.len() {
            let _ = cfg.model_source(i);
            let _ = cfg.served_variants(i);
        }
        let again = cfg.to_yaml().expect("a parsed config prints");
        assert!(
            edge_server::config::EdgeConfig::parse(&again, Path::new("/nonexistent/edge.yaml")).is_ok(),
            "a parsed config, printed, parses again:\n{again}"
        );
    } else {
        use robot_node::config::{BandwidthConfig, PowerConfig, RobotConfig};
        use robot_node::params::Params;
        for node in ["lop_robot", "lop_bandwidth", "lop_power"] {
            let Ok(mut p) = Params::from_yaml_str(node, text, "fuzz.yaml") else { return };
            match node {
                "lop_robot" => drop(RobotConfig::from_params(&mut p)),
                "lop_bandwidth" => drop(BandwidthConfig::from_params(&mut p)),
                _ => drop(PowerConfig::from_params(&mut p)),
            }
        }
    }
}

/// A ROS message as CDR bytes, as a subscription receives it: even first byte,
/// `sensor_msgs/Image` to a model input; odd, `sensor_msgs/PointCloud2` to a BEV grid and a voxel
/// grid. The second byte picks the target's shape.
pub fn ros(data: &[u8]) {
    let (Some(&which), Some(&shape)) = (data.first(), data.get(1)) else { return };
    let cdr = &data[2..];
    if which % 2 == 0 {
        let Ok(m) = Image::deserialize(cdr) else { return };
        let input = robot_node::backend::hiroz::image_in(m);
        let t = image_target(shape);
        if let Ok(chw) = convert::image_to_chw(&input.view(), &t) {
            assert_eq!(chw.len() as u64, u64::from(t.channels * t.height * t.width), "an image converts to the target's size");
        }
    } else {
        let Ok(m) = PointCloud2::deserialize(cdr) else { return };
        let input = robot_node::backend::hiroz::cloud_in(m);
        let fields = input.field_views();
        let view = input.view(&fields);
        let (rows, cols) = (u32::from(shape % 5) + 1, u32::from((shape >> 3) % 6) + 1);
        let range = ((-4.0, 4.0), (-4.0, 4.0), (-2.0, 2.0));
        let bev = BevGrid { x_range: range.0, y_range: range.1, z_range: range.2, rows, cols, channels: BevChannels::ALL };
        if let Ok(grid) = convert::cloud_to_bev(&view, &bev) {
            assert_eq!(grid.len() as u64, 4 * u64::from(rows * cols), "a cloud converts to the grid's size");
            assert!(grid.iter().all(|v| v.is_finite()), "a BEV grid holds only finite values");
        }
        let voxels = VoxelGrid { x_range: range.0, y_range: range.1, z_range: range.2, rows, cols, depth: 3 };
        if let Ok(grid) = convert::cloud_to_voxels(&view, &voxels) {
            assert_eq!(grid.len() as u64, 3 * u64::from(rows * cols), "a cloud converts to the voxel grid's size");
        }
    }
}

/// A model input's shape picked by one byte: up to 7 rows and 9 columns, RGB, BGR or grey,
/// resized or letterboxed.
fn image_target(shape: u8) -> ImageTarget {
    ImageTarget {
        height: u32::from(shape % 7) + 1,
        width: u32::from((shape >> 3) % 9) + 1,
        channels: if shape & 0x40 == 0 { 3 } else { 1 },
        order: if shape & 0x20 == 0 { ChannelOrder::Rgb } else { ChannelOrder::Bgr },
        fit: if shape & 0x80 == 0 { Fit::Resize } else { Fit::Letterbox { pad: 114 } },
    }
}

thread_local! {
    static TABLE_GRAPH: Graph = {
        once_per_process();
        lop::model::load(TABLE_MODEL, &Default::default()).expect("the table target's model builds")
    };
}

/// One libtorch thread: fuzzing runs one input at a time, and thread start-up would dominate.
fn once_per_process() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| tch::set_num_threads(1));
}
