//! Compressed camera frames (`sensor_msgs/CompressedImage`, image_transport's `compressed`
//! transport) to the [`ImageView`] that [`super::image_to_chw`] reads: the `format` field parsed
//! as image_transport writes it, the bytes checked against it, and the picture decoded by the
//! engine's decoders ([`lop::codec::photo`]: zune-jpeg built for integer arithmetic, zune-png),
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
/// says (a mislabelled frame), or a picture that does not decode (corrupt, truncated).
pub fn decode(format: &str, data: &[u8]) -> Result<Picture, ConvertError> {
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
    photo::decode_picture(data).map_err(|e| ConvertError::Compressed { msg: e.to_string() })
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
        let p = decode("bgr8; png compressed bgr8", &png_bytes).unwrap();
        assert_eq!(image_to_chw(&view(&p), &target).unwrap(), planar());
        // JPEG converts to what the engine's decoder gives: the pixels the edge would decode.
        let jpeg = lop::codec::encode(FrameCodec::Jpeg { quality: 90 }, &image, &planar(), 16).unwrap();
        let p = decode("jpeg", &jpeg).unwrap();
        let engine = lop::codec::decode(FrameCodec::Passthrough, &image, &jpeg, 16).unwrap();
        assert_eq!(image_to_chw(&view(&p), &target).unwrap(), engine);
        assert_eq!(dimensions("jpeg", &jpeg).unwrap(), (24, 16));
        assert_eq!(dimensions("png", &png_bytes).unwrap(), (24, 16));
    }

    #[test]
    fn corrupt_truncated_and_mislabelled_frames_are_refused() {
        let image = Image { channels: 3, width: 24, height: 16 };
        let jpeg = lop::codec::encode(FrameCodec::Jpeg { quality: 90 }, &image, &planar(), 16).unwrap();
        let e = decode("png", &jpeg).unwrap_err();
        assert!(e.to_string().contains("mislabelled"), "{e}");
        let e = decode("jpeg", &jpeg[..jpeg.len() / 2]).unwrap_err();
        assert!(e.to_string().contains("truncated"), "{e}");
        let e = decode("jpeg", b"not a picture").unwrap_err();
        assert!(e.to_string().contains("neither JPEG nor PNG"), "{e}");
        let mut garbled = jpeg.clone();
        for b in garbled.iter_mut().skip(200).take(40) {
            *b = 0xFF;
        }
        assert!(decode("jpeg", &garbled).is_err());
    }
}
