//! A frame's own types on its way through `lop_robot`: waiting in the mailbox ([`Frame`]),
//! converted to the model's input ([`Converted`]), and the facts kept until its result is
//! published ([`FrameMeta`]).

use std::time::Instant;

use lop_runtime::exec::CameraJpeg;
use tch::Tensor;

use crate::backend::{CloudIn, CompressedIn, ImageIn};
use crate::results::Source;

/// A frame waiting for the model, with its arrival time.
pub(super) enum Frame {
    Image(ImageIn, Instant),
    Compressed(CompressedIn, Instant),
    Cloud(CloudIn, Instant),
}

/// A frame as the model's input: the tensor, the camera frame's own size (a compressed frame's
/// is known once decoded), and under `passthrough` the camera's JPEG it is the decoding of.
pub(super) struct Converted {
    pub(super) input: Tensor,
    pub(super) size: Option<(u32, u32)>,
    pub(super) camera: Option<CameraJpeg>,
}

/// A frame's facts kept until its result is published.
pub(super) struct FrameMeta {
    pub(super) header: crate::backend::Header,
    pub(super) received: Instant,
    pub(super) kind: u8,
    pub(super) source: Source,
    pub(super) started: std::time::SystemTime,
    pub(super) mbps: f64,
    pub(super) bucket: f64,
    pub(super) convert_s: f64,
    /// The frame itself, kept only when its debug image is wanted (a subscriber at conversion).
    pub(super) debug: Option<Kept>,
}

/// A frame kept for its debug image ([`super::debug`]), with the decoding cap its conversion
/// used.
pub(super) struct Kept {
    pub(super) frame: Frame,
    pub(super) max_pixels: usize,
}
