//! Real frames: photographs read from files and fitted to a model's input (`--frames` on `lop
//! bench`), and `lop codecs`, which prices every frame codec on them.

use std::path::{Path, PathBuf};

use anyhow::Context;
use lop::codec::{FrameCodec, Image, measure_cost};

/// Reads the photographs at `path` (a PNG or JPEG file, or a folder: every `.png`, `.jpg` and
/// `.jpeg` in it, by name), or the frames of a rosbag2 recording's image topic (`topic`; see
/// [`crate::bag_frames`]), and fits each to `image` (scaled to cover, cropped at the centre).
/// Returns each file's (or message's) name with its planar frame.
///
/// # Errors
/// A path that cannot be read, a folder without pictures, a file that does not decode (named);
/// a topic for pictures; the recording's errors.
pub fn load(path: &Path, topic: Option<&str>, image: &Image) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    if crate::bag::is_recording(path) {
        return crate::bag_frames::fitted(path, topic, image);
    }
    crate::bag_frames::no_topic(path, topic)?;
    let files = picture_files(path)?;
    files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
            let frame = crate::frame_bytes::fit_picture(&bytes, image).with_context(|| format!("decoding {}", f.display()))?;
            let name = f.file_name().map_or_else(|| f.display().to_string(), |n| n.to_string_lossy().into_owned());
            Ok((name, frame))
        })
        .collect()
}

/// The photographs (or the recording's frames of `topic`) at `path` fitted to the model's one
/// image input (none without a path).
///
/// # Errors
/// A model without one uint8 image input; unreadable photographs.
pub fn real_frames(graph: &lop::Graph, path: Option<&std::path::Path>, topic: Option<&str>) -> anyhow::Result<Vec<Vec<u8>>> {
    let Some(path) = path else { return Ok(Vec::new()) };
    let [input] = graph.inputs()[..] else {
        anyhow::bail!("--frames needs a model with one input; '{}' has {}", graph.name, graph.inputs().len())
    };
    let image = lop::codec::Image::of(&graph.nodes[input].info).map_err(|why| {
        anyhow::anyhow!("--frames needs a uint8 image input [1, C, H, W] (C = 1 or 3; add --preprocess for a float model): {why}")
    })?;
    let frames = load(path, topic, &image)?;
    eprintln!("{} frame(s) from {}, fitted to {}x{}", frames.len(), path.display(), image.width, image.height);
    Ok(frames.into_iter().map(|(_, f)| f).collect())
}

/// The pictures at `path`: the file itself, or a folder's `.png`, `.jpg` and `.jpeg` files, by
/// name.
///
/// # Errors
/// A folder that cannot be read or holds no picture.
pub fn picture_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading folder {}", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "png" | "jpg" | "jpeg"))
        })
        .collect();
    v.sort();
    anyhow::ensure!(!v.is_empty(), "{} holds no .png, .jpg or .jpeg file", path.display());
    Ok(v)
}

/// Arguments of `lop codecs`.
#[derive(Debug, clap::Args)]
pub struct CodecsArgs {
    /// A photograph (PNG or JPEG) or a folder of them (`scripts/photos.sh` prints one), or a
    /// rosbag2 recording in MCAP storage (a `.mcap` file or the recording's folder).
    #[arg(long)]
    pub frames: PathBuf,
    /// The recording's image topic (sensor_msgs/msg/Image or CompressedImage); optional when
    /// it has one.
    #[arg(long)]
    pub frames_topic: Option<String>,
    /// Frame size the photographs are fitted to, WIDTHxHEIGHT.
    #[arg(long, default_value = "640x480")]
    pub size: String,
    /// Colour channels of the frame: 3 (RGB) or 1 (grey).
    #[arg(long, default_value_t = 3)]
    pub channels: usize,
    /// Codecs to price, comma-separated.
    #[arg(long, default_value = "lossless,jpeg:75,jpeg:90,jpeg:95")]
    pub codecs: String,
    /// Bands each frame is cut into, as a plan cuts its input messages.
    #[arg(long, default_value_t = 8)]
    pub bands: usize,
    /// Timed runs per frame (the fastest is kept).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Parses `WIDTHxHEIGHT`.
///
/// # Errors
/// Anything else.
pub fn parse_size(s: &str) -> anyhow::Result<(usize, usize)> {
    let bad = || anyhow::anyhow!("size '{s}': expected WIDTHxHEIGHT, e.g. 640x480");
    let (w, h) = s.split_once('x').ok_or_else(bad)?;
    let (w, h) = (w.trim().parse::<usize>().map_err(|_| bad())?, h.trim().parse::<usize>().map_err(|_| bad())?);
    anyhow::ensure!(w > 0 && h > 0 && w <= 65535 && h <= 65535, "size '{s}': each side must be 1-65535");
    Ok((w, h))
}

/// Prices each codec on the photographs: bytes against raw, encode and decode milliseconds per
/// frame on this machine, one core.
///
/// # Errors
/// Bad options, unreadable photographs, a codec failure.
pub fn run_codecs(args: &CodecsArgs) -> anyhow::Result<i32> {
    let (width, height) = parse_size(&args.size)?;
    anyhow::ensure!(args.channels == 1 || args.channels == 3, "--channels {}: 1 or 3", args.channels);
    let image = Image { channels: args.channels, width, height };
    let codecs: Vec<FrameCodec> = args
        .codecs
        .split(',')
        .map(|c| c.parse::<FrameCodec>().with_context(|| format!("--codecs '{}'", args.codecs)))
        .collect::<anyhow::Result<_>>()?;
    let frames = load(&args.frames, args.frames_topic.as_deref(), &image)?;
    eprintln!("{} photograph(s) from {}, fitted to {width}x{height}x{}", frames.len(), args.frames.display(), args.channels);
    let planar: Vec<Vec<u8>> = frames.iter().map(|(_, f)| f.clone()).collect();
    let mut rows = Vec::new();
    for &codec in &codecs {
        let whole = measure_cost(codec, &image, &planar, args.bands, args.repeats)?;
        // Per photograph: how far the ratio swings with the scene.
        let per: Vec<f64> = planar
            .iter()
            .map(|f| measure_cost(codec, &image, std::slice::from_ref(f), args.bands, 1).map(|c| c.ratio))
            .collect::<Result<_, _>>()?;
        let (lo, hi) = per.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        rows.push(serde_json::json!({
            "codec": codec.to_string(),
            "ratio": whole.ratio,
            "smaller_min": 1.0 / hi,
            "smaller_max": 1.0 / lo,
            "encode_ms": whole.encode_s_per_row * height as f64 * 1e3,
            "decode_ms": whole.decode_s_per_row * height as f64 * 1e3,
        }));
    }
    if args.json {
        let names: Vec<&str> = frames.iter().map(|(n, _)| n.as_str()).collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"frames": names, "size": args.size, "bands": args.bands, "codecs": rows}))?
        );
        return Ok(0);
    }
    println!("{:<12} {:>10} {:>16} {:>10} {:>10} {:>12}", "codec", "bytes/raw", "smaller (range)", "encode ms", "decode ms", "enc+dec ms");
    for r in &rows {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        println!(
            "{:<12} {:>10.3} {:>16} {:>10.2} {:>10.2} {:>12.2}",
            r["codec"].as_str().unwrap_or("?"),
            f("ratio"),
            format!("{:.1}x-{:.1}x", f("smaller_min"), f("smaller_max")),
            f("encode_ms"),
            f("decode_ms"),
            f("encode_ms") + f("decode_ms")
        );
    }
    Ok(0)
}
