//! Compressed camera frames (`sensor_msgs/CompressedImage`, image_transport's `compressed`
//! transport) to the [`ImageView`] that [`super::image_to_chw`] reads: the `format` field parsed
//! as image_transport writes it, the bytes checked against it, and the picture decoded by the
//! engine's decoders ([`lop::codec::photo`]: libjpeg-turbo's integer IDCT, zune-png),
//! the same ones the edge decodes a passed-through frame with.

use lop::codec::photo::{self, Format, Picture};

use super::{ConvertError, ImageView};

/// The compression a `format` field names: `jpeg`/`jpg`/`png` alone (older image_transport and
/// many camera drivers), or `<source encoding>; <jpeg|png> compressed <encoding>` (Jazzy's
/// compressed_image_transport, for example `bgr8; jpeg compressed bgr8`). Case is ignored.
///
/// # Errors
/// [`ConvertError::Compressed`] for another format (image_transport's `compressedDepth`, for
/// example: depth maps are not camera frames).
pub fn parse_format(format: &str) -> Result<Format, ConvertError> {
    let lower = format.trim().to_ascii_lowercase();
    let coded = lower.split_once(';').map_or(lower.as_str(), |(_, rest)| rest).trim();
    match coded.split_whitespace().next() {
        Some("jpeg" | "jpg") => Ok(Format::Jpeg),
        Some("png") => Ok(Format::Png),
        _ => Err(ConvertError::Compressed {
            msg: format!("format '{format}' names no camera compression this node reads (jpeg or png, as image_transport writes them)"),
        }),
    }
}

/// Decodes a compressed frame whose `format` field is `format`.
///
/// # Errors
/// [`ConvertError::Compressed`]: an unknown format, bytes of another format than the field
/// says (a mislabelled frame), a picture that does not decode (corrupt, truncated), or one over
/// `max_pixels` (the message names the cap; nothing is decoded).
pub fn decode(format: &str, data: &[u8], max_pixels: usize) -> Result<Picture, ConvertError> {
    let said = parse_format(format)?;
    match Format::sniff(data) {
        Some(found) if found == said => {}
        Some(found) => {
            return Err(ConvertError::Compressed { msg: format!("mislabelled frame: format '{format}', but the bytes are {found:?}") });
        }
        None => {
            return Err(ConvertError::Compressed {
                msg: format!("format '{format}', but the {} bytes are neither JPEG nor PNG", data.len()),
            });
        }
    }
    photo::decode_picture_within(data, max_pixels).map_err(|e| {
        // The only size error here is the cap's: say which parameter sets it.
        let cap = if matches!(e, lop::codec::CodecError::Dimensions { .. }) { " (the cap is image.max_pixels)" } else { "" };
        ConvertError::Compressed { msg: format!("{e}{cap}") }
    })
}

/// The picture as an image message's fields: `mono8`, `rgb8` or `rgba8`, rows packed.
pub fn view(picture: &Picture) -> ImageView<'_> {
    let encoding = match picture.channels {
        1 => "mono8",
        4 => "rgba8",
        _ => "rgb8",
    };
    ImageView {
        width: u32::try_from(picture.width).unwrap_or(u32::MAX),
        height: u32::try_from(picture.height).unwrap_or(u32::MAX),
        encoding,
        is_bigendian: false,
        step: u32::try_from(picture.width * picture.channels).unwrap_or(u32::MAX),
        data: &picture.pixels,
    }
}

/// A compressed frame's width and height from its headers alone (no pixels decoded), for a
/// model whose input size the first frame fixes.
///
/// # Errors
/// As [`decode`], for the headers.
pub fn dimensions(format: &str, data: &[u8]) -> Result<(u32, u32), ConvertError> {
    let _ = parse_format(format)?;
    let (w, h) = photo::dimensions(data).map_err(|e| ConvertError::Compressed { msg: e.to_string() })?;
    Ok((u32::try_from(w).unwrap_or(u32::MAX), u32::try_from(h).unwrap_or(u32::MAX)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::convert::{ChannelOrder, Fit, ImageTarget, image_to_chw};
    use lop::codec::{FrameCodec, Image};

    #[test]
    fn formats_as_image_transport_writes_them() {
        for f in ["jpeg", "JPG", "bgr8; jpeg compressed bgr8", "rgb8; jpeg compressed bgr8", "mono8; jpeg compressed mono8"] {
            assert_eq!(parse_format(f).unwrap(), Format::Jpeg, "{f}");
        }
        for f in ["png", "bgr8; png compressed bgr8", "mono16; png compressed mono16"] {
            assert_eq!(parse_format(f).unwrap(), Format::Png, "{f}");
        }
        for f in ["", "16UC1; compressedDepth png", "bgr8; tiff compressed bgr8", "theora"] {
            let e = parse_format(f).unwrap_err();
            assert!(e.to_string().contains("no camera compression"), "{f}: {e}");
        }
    }

    /// A planar 3x16x24 picture-like frame.
    fn planar() -> Vec<u8> {
        (0..3 * 16 * 24).map(|i| ((i % 24) * 9 + (i / 24 % 16) * 5 + i / (16 * 24) * 60) as u8).collect()
    }

    #[test]
    fn jpeg_and_png_decode_to_the_frame_and_convert() {
        let image = Image { channels: 3, width: 24, height: 16 };
        let frame = planar();
        let interleaved: Vec<u8> = (0..16 * 24).flat_map(|p| [frame[p], frame[16 * 24 + p], frame[2 * 16 * 24 + p]]).collect();
        let png_bytes = photo::encode_png(&Picture { width: 24, height: 16, channels: 3, pixels: interleaved });
        let target = ImageTarget { height: 16, width: 24, channels: 3, order: ChannelOrder::Rgb, fit: Fit::Resize };
        // PNG is exact: the converted frame is the frame.
        let p = decode("bgr8; png compressed bgr8", &png_bytes, photo::MAX_PIXELS).unwrap();
        assert_eq!(image_to_chw(&view(&p), &target).unwrap(), planar());
        // JPEG converts to what the engine's decoder gives: the pixels the edge would decode.
        let jpeg = lop::codec::encode(FrameCodec::Jpeg { quality: 90 }, &image, &planar(), 16).unwrap();
        let p = decode("jpeg", &jpeg, photo::MAX_PIXELS).unwrap();
        let engine = lop::codec::decode(FrameCodec::Passthrough, &image, &jpeg, 16).unwrap();
        assert_eq!(image_to_chw(&view(&p), &target).unwrap(), engine);
        assert_eq!(dimensions("jpeg", &jpeg).unwrap(), (24, 16));
        assert_eq!(dimensions("png", &png_bytes).unwrap(), (24, 16));
    }

    #[test]
    fn corrupt_truncated_and_mislabelled_frames_are_refused() {
        let image = Image { channels: 3, width: 24, height: 16 };
        let jpeg = lop::codec::encode(FrameCodec::Jpeg { quality: 90 }, &image, &planar(), 16).unwrap();
        let e = decode("png", &jpeg, photo::MAX_PIXELS).unwrap_err();
        assert!(e.to_string().contains("mislabelled"), "{e}");
        let e = decode("jpeg", &jpeg[..jpeg.len() / 2], photo::MAX_PIXELS).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        let e = decode("jpeg", b"not a picture", photo::MAX_PIXELS).unwrap_err();
        assert!(e.to_string().contains("neither JPEG nor PNG"), "{e}");
        let mut garbled = jpeg.clone();
        for b in garbled.iter_mut().skip(200).take(40) {
            *b = 0xFF;
        }
        assert!(decode("jpeg", &garbled, photo::MAX_PIXELS).is_err());
    }

    /// A picture over the cap is refused from its headers, the cap named; one at the cap decodes.
    /// A 20-megapixel PNG against the default cap of a 640x640 model (a 4K frame's pixels).
    #[test]
    fn a_picture_over_the_cap_is_refused_naming_it() {
        let image = Image { channels: 3, width: 24, height: 16 };
        let jpeg = lop::codec::encode(FrameCodec::Jpeg { quality: 90 }, &image, &planar(), 16).unwrap();
        let png_bytes = photo::encode_png(&Picture { width: 24, height: 16, channels: 1, pixels: vec![7; 24 * 16] });
        for (format, data) in [("jpeg", &jpeg), ("png", &png_bytes)] {
            assert!(decode(format, data, 24 * 16).is_ok(), "{format} at the cap");
            let e = decode(format, data, 24 * 16 - 1).unwrap_err().to_string();
            assert!(e.contains("at most 383 pixels") && e.contains("24x16"), "{format}: {e}");
        }
        let settings = crate::config::ImageSettings {
            height: 0,
            width: 0,
            order: ChannelOrder::Rgb,
            fit: None,
            pad: 0,
            transport: crate::config::Transport::Compressed,
            max_pixels: 0,
            camera_size: None,
        };
        let cap = settings.max_pixels_for(640, 640);
        assert_eq!(cap, 3840 * 2160);
        assert_eq!(settings.max_pixels_for(1280, 1280), 16 * 1280 * 1280);
        assert_eq!(crate::config::ImageSettings { max_pixels: 1000, ..settings }.max_pixels_for(640, 640), 1000);
        let (w, h) = (5472, 3648);
        let big = photo::encode_png(&Picture { width: w, height: h, channels: 1, pixels: vec![0; w * h] });
        let e = decode("png", &big, cap).unwrap_err().to_string();
        assert!(e.contains(&format!("at most {cap} pixels")) && e.contains("5472x3648"), "{e}");
    }
}
