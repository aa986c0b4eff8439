//! A rosbag2 recording's camera frames given as `--frames` ([`crate::bag`] reads them), turned
//! into what picture files turn into, so that the bench treats both alike:
//!
//! - a `CompressedImage` is the camera's JPEG (or PNG) file: fitted to the model as
//!   [`crate::frames::load`] fits a file, or, under `--frame-codec passthrough`, sent as it is
//!   ([`crate::frame_bytes::camera_frame`], the check a `.jpg` file passes);
//! - an `Image` is raw pixels: the picture a PNG of them decodes to, fitted the same way.
//!
//! Frames are named `TOPIC#INDEX@STAMP` (the header stamp, seconds).

use std::path::Path;

use anyhow::Context;
use lop::codec::Image;
use lop::codec::photo::{Format, fit};

use crate::bag::{self, COMPRESSED_IMAGE, Frame, Payload, Recording};
use crate::frame_bytes::{CameraFrame, camera_frame, fit_picture};

/// Refuses `--frames-topic` with frames that are picture files.
///
/// # Errors
/// A topic for a path that is not a recording.
pub fn no_topic(path: &Path, topic: Option<&str>) -> anyhow::Result<()> {
    match topic {
        Some(t) => anyhow::bail!(
            "--frames-topic {t} names a topic of a rosbag2 recording, but {} is not one (a .mcap file or a recording's folder)",
            path.display()
        ),
        None => Ok(()),
    }
}

/// The frame's name: topic, place and stamp.
fn name(f: &Frame) -> String {
    format!("{}#{}@{}.{:09}", f.topic, f.index, f.stamp_ns.div_euclid(1_000_000_000), f.stamp_ns.rem_euclid(1_000_000_000))
}

/// Reads the recording, handing each frame with its name to `each`; prints what it read.
fn read(path: &Path, topic: Option<&str>, mut each: impl FnMut(String, Payload) -> anyhow::Result<()>) -> anyhow::Result<Recording> {
    let recording = bag::read_frames(path, topic, |f: Frame| -> anyhow::Result<()> {
        let name = name(&f);
        each(name.clone(), f.payload).with_context(|| format!("frame {name}"))
    })
    .with_context(|| format!("reading the recording {}", path.display()))?;
    eprintln!("{}: {}", path.display(), recording.describe());
    if recording.out_of_order > 0 {
        eprintln!(
            "warning: {} frame(s) of {} were recorded after a later one (log times go backwards); they are used in file order",
            recording.out_of_order, recording.topic.topic
        );
    }
    Ok(recording)
}

/// Checks a `CompressedImage`'s `format` field against its bytes: a depth map
/// (`compressedDepth`) or a picture of another format than the field says is refused.
///
/// # Errors
/// As above.
fn check_format(format: &str, data: &[u8]) -> anyhow::Result<()> {
    let lower = format.to_ascii_lowercase();
    anyhow::ensure!(!lower.contains("compresseddepth"), "format '{format}' is a depth map (compressedDepth), not a camera frame");
    let said = match lower.split_once(';').map_or(lower.as_str(), |(_, coded)| coded).split_whitespace().next() {
        Some("jpeg" | "jpg") => Some(Format::Jpeg),
        Some("png") => Some(Format::Png),
        _ => None,
    };
    let found = Format::sniff(data);
    anyhow::ensure!(found.is_some(), "format '{format}', but the {} bytes are neither JPEG nor PNG", data.len());
    anyhow::ensure!(said.is_none() || said == found, "format '{format}', but the bytes are {found:?}");
    Ok(())
}

/// The recording's frames of `topic` fitted to `image`, named, in order (see
/// [`crate::frames::load`]).
///
/// # Errors
/// The recording's errors; a frame that does not decode, or of a pixel encoding not read.
pub fn fitted(path: &Path, topic: Option<&str>, image: &Image) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut frames = Vec::new();
    read(path, topic, |name, payload| {
        let planar = match payload {
            Payload::Compressed { format, data } => {
                check_format(&format, &data)?;
                fit_picture(&data, image)?
            }
            Payload::Raw(raw) => fit(&raw.picture()?, image),
        };
        frames.push((name, planar));
        Ok(())
    })?;
    Ok(frames)
}

/// The recording's `CompressedImage` JPEGs of `topic` as camera frames, sent unchanged under
/// `--frame-codec passthrough` (see [`crate::camera_frames::load_camera`]).
///
/// # Errors
/// The recording's errors; a topic of raw frames; a frame that is not a JPEG of the model's
/// frame size.
pub fn cameras(path: &Path, topic: Option<&str>, image: &Image) -> anyhow::Result<Vec<CameraFrame>> {
    let mut frames = Vec::new();
    read(path, topic, |name, payload| {
        match payload {
            Payload::Compressed { format, data } => {
                check_format(&format, &data)?;
                frames.push(camera_frame(name, data, image)?);
            }
            Payload::Raw(raw) => anyhow::bail!(
                "--frame-codec passthrough sends camera JPEGs as they are, but this topic carries raw {}x{} {} frames (sensor_msgs/msg/Image): use another frame codec, or the camera's {COMPRESSED_IMAGE} topic",
                raw.width,
                raw.height,
                raw.encoding
            ),
        }
        Ok(())
    })?;
    Ok(frames)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_checked_against_the_bytes() {
        let jpeg = [0xFF, 0xD8, 0xFF, 0xE0];
        let png = *b"\x89PNG\r\n\x1a\n";
        assert!(check_format("jpeg", &jpeg).is_ok());
        assert!(check_format("bgr8; jpeg compressed bgr8", &jpeg).is_ok());
        assert!(check_format("", &png).is_ok(), "an empty format: the bytes say");
        assert!(check_format("png", &jpeg).is_err());
        assert!(check_format("16UC1; compressedDepth png", &png).is_err());
        assert!(check_format("jpeg", b"GIF89a").is_err());
    }
}
