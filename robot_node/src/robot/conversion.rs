//! A frame to the model's input tensor (blocking work, run on the blocking pool): the sensor
//! message through [`crate::convert`], the frame's size checked where the model fits frames
//! itself, and under `passthrough` the camera's JPEG kept when it decodes to the model's input.

use std::sync::Arc;

use lop_runtime::exec::CameraJpeg;
use tch::Tensor;

use super::frame::{Converted, Frame};
use super::target::Target;
use crate::backend::CompressedIn;
use crate::convert::{self, ConvertError, ImageTarget};

/// The camera's JPEG as the model's input, unchanged (`passthrough`): when it decodes, by the
/// decoder the edge uses, to exactly the model's input (its size; RGB or grey as the model
/// takes). `None` otherwise: the frame is then converted as usual and crosses lossless.
fn passthrough_input(m: &CompressedIn, t: &ImageTarget) -> Option<(Vec<u8>, CameraJpeg)> {
    let data = (*m.data).as_ref();
    let colour_ok = t.channels == 1 || (t.channels == 3 && t.order == convert::ChannelOrder::Rgb);
    let jpeg = Some(lop::codec::photo::Format::Jpeg);
    if !colour_ok || convert::compressed::parse_format(&m.format).ok() != jpeg || lop::codec::photo::Format::sniff(data) != jpeg {
        return None;
    }
    let image = lop::codec::Image { channels: t.channels as usize, width: t.width as usize, height: t.height as usize };
    let pixels = lop::codec::decode(lop::codec::FrameCodec::Passthrough, &image, data, image.height).ok()?;
    Some((pixels, CameraJpeg(Arc::from(data))))
}

/// Converts a frame to the model's input tensor (blocking work: call it on the blocking pool);
/// under `passthrough` a compressed frame at the model's size is kept as the camera's JPEG.
pub(super) fn to_tensor(
    frame: &Frame,
    target: &Target,
    shape: &[i64],
    passthrough: bool,
    max_pixels: usize,
) -> std::result::Result<Converted, ConvertError> {
    let tensor = |r: std::result::Result<Tensor, tch::TchError>| r.map_err(|e| ConvertError::BadTarget { msg: e.to_string() });
    let plain = |input| Converted { input, size: None, camera: None };
    let frame_target;
    let target = match target {
        Target::Camera { frame: t, .. } => {
            check_camera_size(frame, t)?;
            frame_target = Target::Image(*t);
            &frame_target
        }
        t => t,
    };
    match (frame, target) {
        (Frame::Image(m, _), Target::Image(t)) => {
            let view = m.view();
            let chw = convert::image_to_chw(&view, t)?;
            tensor(Tensor::f_from_slice(&chw).and_then(|t| t.f_reshape(shape))).map(plain)
        }
        (Frame::Compressed(m, _), Target::Image(t)) => {
            let data = (*m.data).as_ref();
            let _ = convert::compressed::parse_format(&m.format)?;
            if passthrough && let Some((pixels, camera)) = passthrough_input(m, t) {
                let input = tensor(Tensor::f_from_slice(&pixels).and_then(|t| t.f_reshape(shape)))?;
                return Ok(Converted { input, size: Some((t.width, t.height)), camera: Some(camera) });
            }
            let picture = convert::compressed::decode(&m.format, data, max_pixels)?;
            let view = convert::compressed::view(&picture);
            let chw = convert::image_to_chw(&view, t)?;
            let input = tensor(Tensor::f_from_slice(&chw).and_then(|t| t.f_reshape(shape)))?;
            Ok(Converted { input, size: Some((view.width, view.height)), camera: None })
        }
        (Frame::Cloud(c, _), Target::Bev(_) | Target::Voxels(_)) => {
            let fields = c.field_views();
            let view = c.view(&fields);
            let (grid, stats) = match target {
                Target::Bev(g) => convert::cloud_to_bev_with_stats(&view, g)?,
                Target::Voxels(g) => convert::cloud_to_voxels_with_stats(&view, g)?,
                Target::Image(_) | Target::Camera { .. } => {
                    return Err(ConvertError::BadTarget { msg: "a point cloud for a camera model".into() });
                }
            };
            if stats.used == 0 {
                return Err(ConvertError::ZeroSize {
                    what: format!(
                        "no usable point ({} points, {} non-finite, {} out of range)",
                        stats.points, stats.nonfinite, stats.out_of_range
                    ),
                });
            }
            tensor(Tensor::f_from_slice(&grid).and_then(|t| t.f_reshape(shape))).map(plain)
        }
        (Frame::Image(..) | Frame::Compressed(..), _) => Err(ConvertError::BadTarget { msg: "an image for a LiDAR model".into() }),
        (Frame::Cloud(..), Target::Image(_) | Target::Camera { .. }) => {
            Err(ConvertError::BadTarget { msg: "a point cloud for a camera model".into() })
        }
    }
}

/// Refuses a camera frame of another size than `image.camera_size` (`t`'s), naming both: the
/// model was built to fit frames of that size (a compressed frame's size is read from its
/// headers, before anything is decoded).
fn check_camera_size(frame: &Frame, t: &ImageTarget) -> std::result::Result<(), ConvertError> {
    let size = match frame {
        Frame::Image(m, _) => (m.width, m.height),
        Frame::Compressed(m, _) => {
            let (w, h) = lop::codec::photo::dimensions((*m.data).as_ref()).map_err(|e| ConvertError::Compressed { msg: e.to_string() })?;
            (u32::try_from(w).unwrap_or(u32::MAX), u32::try_from(h).unwrap_or(u32::MAX))
        }
        Frame::Cloud(..) => return Ok(()),
    };
    if size == (t.width, t.height) {
        return Ok(());
    }
    Err(ConvertError::BadTarget {
        msg: format!(
            "a {}x{} frame from a camera configured as {}x{} (image.camera_size): the model fits frames of that size; set image.camera_size to the camera's",
            size.0, size.1, t.width, t.height
        ),
    })
}
