//! The frame codec of `lop bench` (`--frame-codec`, `--frames`): the camera's JPEGs as they
//! are for `passthrough`, a lossy codec's effect on the model's output, and the codec measured
//! on the frames and priced in both profiles.

use anyhow::Context;
use lop::profile::Profile;

/// A camera JPEG's bytes, as they came.
pub type CameraBytes = std::sync::Arc<[u8]>;

/// The camera JPEGs at `path` (files, or a recording's `CompressedImage` topic `topic`) as they
/// are, with their decodings (`--frame-codec passthrough`): each must be the model's input size,
/// which a model takes at a camera's size with `--camera-fit`.
///
/// # Errors
/// No `--frames`, a model without one uint8 image input, a file that is not a JPEG of that size.
pub fn camera_frames(
    graph: &lop::Graph,
    path: Option<&std::path::Path>,
    topic: Option<&str>,
) -> anyhow::Result<(Vec<Vec<u8>>, Vec<CameraBytes>)> {
    let path = path.context(
        "--frame-codec passthrough sends camera JPEGs as they are: give --frames DIR of them (lop camera-jpegs --frames $(scripts/photos.sh) --out DIR writes some)",
    )?;
    let [input] = graph.inputs()[..] else {
        anyhow::bail!("--frames needs a model with one input; '{}' has {}", graph.name, graph.inputs().len())
    };
    let image =
        lop::codec::Image::of(&graph.nodes[input].info).map_err(|why| anyhow::anyhow!("--frames needs a uint8 image input: {why}"))?;
    let frames = crate::camera_frames::load_camera(path, topic, &image)?;
    let bytes: usize = frames.iter().map(|f| f.jpeg.len()).sum();
    eprintln!(
        "{} camera JPEG(s) from {}, {}x{}, {:.0} bytes each on average, sent unchanged",
        frames.len(),
        path.display(),
        image.width,
        image.height,
        bytes as f64 / frames.len().max(1) as f64
    );
    Ok(frames.into_iter().map(|f| (f.planar, f.jpeg)).unzip())
}

/// How much a lossy codec moves the unsplit model's output: the largest relative difference
/// ([`lop::exec::max_rel_err_all`]) between its outputs on each frame and on that frame as
/// decoded (`None` without frames or for an exact codec). A fact for users, printed beside the
/// table; it is what the codec costs in accuracy, not an error of the split.
///
/// # Errors
/// Codec or libtorch failures.
pub fn codec_effect(codec: lop::codec::FrameCodec, graph: &lop::Graph, frames: &[Vec<u8>]) -> anyhow::Result<Option<f64>> {
    if !codec.is_lossy() || frames.is_empty() || codec == lop::codec::FrameCodec::Passthrough {
        return Ok(None);
    }
    let [input] = graph.inputs()[..] else { return Ok(None) };
    let image = lop::codec::Image::of(&graph.nodes[input].info).map_err(|why| anyhow::anyhow!("{why}"))?;
    let tensor = |p: &[u8]| {
        tch::Tensor::f_from_data_size(p, &[1, image.channels as i64, image.height as i64, image.width as i64], tch::Kind::Uint8)
            .context("frame to tensor")
    };
    let mut worst = 0.0f64;
    for f in frames {
        let decoded = lop::codec::decode(codec, &image, &lop::codec::encode(codec, &image, f, image.height)?, image.height)?;
        let a = lop::exec::run_whole(graph, &[tensor(f)?])?.outputs;
        let b = lop::exec::run_whole(graph, &[tensor(&decoded)?])?.outputs;
        worst = worst.max(lop::exec::max_rel_err_all(&b, &a)?);
    }
    eprintln!("frame codec {codec} moves the unsplit model's output by at most {worst:.3e} (relative) on these frames");
    Ok(Some(worst))
}

/// Measures `codec` on `frames` (fitted to the model's one image input), cut in 8 bands, the
/// fastest of 3 runs; prints what it found.
///
/// # Errors
/// A model without one uint8 image input; codec failures.
pub fn measure_codec(codec: lop::codec::FrameCodec, graph: &lop::Graph, frames: &[Vec<u8>]) -> anyhow::Result<lop::codec::CodecCost> {
    let [input] = graph.inputs()[..] else { anyhow::bail!("frame codec {codec} needs a model with one image input") };
    let image = lop::codec::Image::of(&graph.nodes[input].info).map_err(|why| anyhow::anyhow!("frame codec {codec}: {why}"))?;
    let cost = lop::codec::measure_cost(codec, &image, frames, 8, 3)?;
    eprintln!(
        "frame codec {codec}: {:.3} of raw bytes, encode {:.2} ms, decode {:.2} ms a frame",
        cost.ratio,
        cost.encode_s_per_row * image.height as f64 * 1e3,
        cost.decode_s_per_row * image.height as f64 * 1e3
    );
    Ok(cost)
}

/// Measures `codec` on `frames` and records its cost in both profiles (robot and server share
/// this machine's CPU; the codec is not the dilated part of the emulated robot: a Jetson codes
/// frames on its CPU cores, not on the GPU the dilation stands for).
///
/// # Errors
/// A coded codec without frames, or passthrough without camera JPEGs; codec failures.
pub fn price_codec(
    codec: lop::codec::FrameCodec,
    graph: &lop::Graph,
    frames: &[Vec<u8>],
    cameras: &[std::sync::Arc<[u8]>],
    robot: &mut Profile,
    server: &mut Profile,
) -> anyhow::Result<()> {
    if !codec.is_coded() {
        return Ok(());
    }
    anyhow::ensure!(
        !frames.is_empty(),
        "--frame-codec {codec} needs --frames PATH: codecs are priced on real photographs (scripts/photos.sh prints a folder of them)"
    );
    let mut cost = measure_codec(codec, graph, frames)?;
    if !cameras.is_empty() {
        // The camera's own bytes, not a re-encoding's, are what crosses.
        let raw: usize = frames.iter().map(Vec::len).sum();
        cost.ratio = cameras.iter().map(|c| c.len()).sum::<usize>() as f64 / raw.max(1) as f64;
    }
    robot.set_codec_cost(cost);
    server.set_codec_cost(cost);
    Ok(())
}
