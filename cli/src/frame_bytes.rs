//! One picture's bytes as a frame, whatever holds them (a file, a recording's message): fitted
//! to the model's input, or checked and kept as the camera's JPEG for `--frame-codec
//! passthrough`. [`crate::frames`], [`crate::camera_frames`] and [`crate::bag_frames`] share it.

use std::sync::Arc;

use anyhow::Context;
use lop::codec::photo::{Format, decode_picture, dimensions, fit};
use lop::codec::{FrameCodec, Image};

/// A PNG or JPEG picture's bytes decoded and fitted to `image`, as [`crate::frames::load`] fits
/// every frame.
///
/// # Errors
/// Bytes that are neither, or do not decode.
pub fn fit_picture(bytes: &[u8], image: &Image) -> Result<Vec<u8>, lop::codec::CodecError> {
    Ok(fit(&decode_picture(bytes)?, image))
}

/// One camera frame: the file's name, its JPEG bytes as they are, and their decoding (planar,
/// by the decoder both sides use), which is the model's input.
pub struct CameraFrame {
    /// The file's name.
    pub name: String,
    /// The JPEG, unchanged.
    pub jpeg: Arc<[u8]>,
    /// Its decoding, planar `[C, H, W]`.
    pub planar: Vec<u8>,
}

/// One camera JPEG (`name` for errors) checked against the model's frame size and decoded.
///
/// # Errors
/// Bytes that are not a JPEG, or of another size (both sizes named, with the fit to use), or
/// that do not decode.
pub fn camera_frame(name: String, bytes: Vec<u8>, image: &Image) -> anyhow::Result<CameraFrame> {
    anyhow::ensure!(
        Format::sniff(&bytes) == Some(Format::Jpeg),
        "{name} is not a JPEG: --frame-codec passthrough sends camera JPEGs as they are (lop camera-jpegs writes some)"
    );
    let (w, h) = dimensions(&bytes).with_context(|| format!("reading {name}'s headers"))?;
    anyhow::ensure!(
        (w, h) == (image.width, image.height),
        "{name} is {w}x{h}, but the model takes {}x{} camera frames: load it with --camera-fit letterbox@{w}x{h} (or resize@{w}x{h})",
        image.width,
        image.height
    );
    let planar = lop::codec::decode(FrameCodec::Passthrough, image, &bytes, image.height).with_context(|| format!("decoding {name}"))?;
    Ok(CameraFrame { name, jpeg: Arc::from(bytes), planar })
}
