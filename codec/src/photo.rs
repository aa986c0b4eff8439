//! Photographs as frames: a PNG or JPEG file's bytes decoded (zune-png, libjpeg-turbo) and fitted to
//! a model's input, for benchmarks and demos that must run on real pictures (random pixels do
//! not compress and would mislead every codec figure), and for `sensor_msgs/CompressedImage`.

use super::turbo::{self, Pixels};
use super::{CodecError, Image};
use zune_core::bit_depth::BitDepth;
use zune_core::colorspace::ColorSpace;
use zune_core::options::DecoderOptions;

// zune-png is Rust: its panics on outside bytes are caught (`catch_unwind`) and reported as a
// corrupt picture. Under `panic = "abort"` they would end the process instead, so refuse to build.
#[cfg(panic = "abort")]
compile_error!("lop catches the PNG decoder's panics on outside bytes: build with panic = \"unwind\"");

/// The most pixels a picture may have (a 64-megapixel camera), checked before decoding.
pub const MAX_PIXELS: usize = 64 << 20;

/// A decoded picture: 8-bit, interleaved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Picture {
    /// Pixels per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// 1 (grey), 3 (RGB) or 4 (RGBA); grey with alpha is returned as grey.
    pub channels: usize,
    /// `height * width * channels` bytes.
    pub pixels: Vec<u8>,
}

/// Which format bytes are, from their magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// PNG (`\x89PNG`).
    Png,
    /// JPEG (`FF D8 FF`).
    Jpeg,
}

impl Format {
    /// The format of `data`, if it is one of these.
    pub fn sniff(data: &[u8]) -> Option<Format> {
        if data.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(Format::Png)
        } else if data.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(Format::Jpeg)
        } else {
            None
        }
    }
}

/// Decodes a whole PNG or JPEG picture (8- or 16-bit PNG, any JPEG a camera writes).
///
/// # Errors
/// [`CodecError::Corrupt`] for data that is neither, or does not decode; [`CodecError::Dimensions`]
/// for a picture over [`MAX_PIXELS`].
pub fn decode_picture(data: &[u8]) -> Result<Picture, CodecError> {
    decode_picture_within(data, MAX_PIXELS)
}

/// [`decode_picture`] for pictures of at most `max_pixels` (and [`MAX_PIXELS`]), checked from the
/// headers before any pixel is allocated: a receiver caps what one frame may cost by what its
/// model needs.
///
/// # Errors
/// As [`decode_picture`]; [`CodecError::Dimensions`] naming the cap for a larger picture.
pub fn decode_picture_within(data: &[u8], max_pixels: usize) -> Result<Picture, CodecError> {
    let max = max_pixels.min(MAX_PIXELS);
    match Format::sniff(data) {
        Some(Format::Png) => decode_png(data, max),
        Some(Format::Jpeg) => decode_jpeg(data, max),
        None => Err(CodecError::Corrupt { codec: "picture", why: "neither PNG nor JPEG (unknown magic bytes)".into() }),
    }
}

fn too_big(codec: &'static str, w: usize, h: usize, max: usize) -> CodecError {
    CodecError::Dimensions { codec, expected: format!("at most {max} pixels"), found: format!("{w}x{h} ({} pixels)", w.saturating_mul(h)) }
}

fn decode_png(data: &[u8], max: usize) -> Result<Picture, CodecError> {
    let corrupt = |why: String| CodecError::Corrupt { codec: "PNG", why };
    let options = DecoderOptions::default().png_set_strip_to_8bit(true).set_max_width(1 << 16).set_max_height(1 << 16);
    let decoded = std::panic::catch_unwind(|| {
        let mut dec = zune_png::PngDecoder::new_with_options(data, options);
        dec.decode_headers()?;
        let (w, h) = dec.get_dimensions().unwrap_or((0, 0));
        if w.saturating_mul(h) > max {
            return Ok(Err((w, h)));
        }
        let space = dec.get_colorspace();
        let depth = dec.get_depth();
        let pixels = dec.decode_raw()?;
        Ok::<_, zune_png::error::PngDecodeErrors>(Ok((w, h, space, depth, pixels)))
    })
    .map_err(|_| corrupt("the decoder panicked".into()))?
    .map_err(|e| corrupt(format!("{e:?}")))?;
    let (w, h, space, depth, pixels) = decoded.map_err(|(w, h)| too_big("PNG", w, h, max))?;
    if depth != Some(BitDepth::Eight) {
        return Err(corrupt(format!("bit depth {depth:?} after stripping to 8 bits")));
    }
    let channels = match space {
        Some(ColorSpace::Luma) => 1,
        Some(ColorSpace::LumaA) => 2,
        Some(ColorSpace::RGB) => 3,
        Some(ColorSpace::RGBA) => 4,
        other => return Err(corrupt(format!("colour space {other:?}"))),
    };
    if pixels.len() != w * h * channels {
        return Err(corrupt(format!("{} bytes for {w}x{h}x{channels}", pixels.len())));
    }
    if channels == 2 {
        // Grey with alpha: the grey.
        let grey = pixels.chunks_exact(2).map(|p| p[0]).collect();
        return Ok(Picture { width: w, height: h, channels: 1, pixels: grey });
    }
    Ok(Picture { width: w, height: h, channels, pixels })
}

fn decode_jpeg(data: &[u8], max: usize) -> Result<Picture, CodecError> {
    super::jpeg::check_whole(data)?;
    let within =
        |h: &turbo::Header| if h.width.saturating_mul(h.height) > max { Err(too_big("JPEG", h.width, h.height, max)) } else { Ok(()) };
    let (header, pixels) = turbo::decode(data, Pixels::Rgb, within)?;
    Ok(Picture { width: header.width, height: header.height, channels: 3, pixels })
}

/// `picture` fitted to `image`: scaled (bilinear, fixed point) to cover it, then cropped at the
/// centre, as planar `[C, H, W]` bytes; grey becomes RGB and RGB grey as needed.
pub fn fit(picture: &Picture, image: &Image) -> Vec<u8> {
    let (sw, sh, sc) = (picture.width.max(1), picture.height.max(1), picture.channels);
    let (dw, dh) = (image.width, image.height);
    // Scale so the picture covers the frame: source pixels per frame pixel, 16.16 fixed point.
    let step = ((sw << 16) / dw).min((sh << 16) / dh).max(1);
    let x0 = ((sw << 16) - step * dw) / 2;
    let y0 = ((sh << 16) - step * dh) / 2;
    let sample = |x: usize, y: usize, c: usize| -> u32 {
        let c = if sc == 1 { 0 } else { c.min(sc - 1) };
        u32::from(picture.pixels.get((y.min(sh - 1) * sw + x.min(sw - 1)) * sc + c).copied().unwrap_or(0))
    };
    let mut rgb = vec![[0u8; 3]; dw * dh];
    for y in 0..dh {
        // Source coordinates of the pixel's centre, less half a pixel: between which pixels it lies.
        let fy = (y0 + y * step + step / 2).saturating_sub(1 << 15);
        let (py, wy) = (fy >> 16, (fy & 0xFFFF) as u32);
        for x in 0..dw {
            let fx = (x0 + x * step + step / 2).saturating_sub(1 << 15);
            let (px, wx) = (fx >> 16, (fx & 0xFFFF) as u32);
            for (c, out) in rgb[y * dw + x].iter_mut().enumerate() {
                let top = sample(px, py, c) * (65536 - wx) + sample(px + 1, py, c) * wx;
                let bottom = sample(px, py + 1, c) * (65536 - wx) + sample(px + 1, py + 1, c) * wx;
                let v = ((u64::from(top) * u64::from(65536 - wy) + u64::from(bottom) * u64::from(wy)) + (1 << 31)) >> 32;
                *out = v.min(255) as u8;
            }
        }
    }
    let plane = dw * dh;
    let mut out = vec![0u8; image.channels * plane];
    for (i, p) in rgb.iter().enumerate() {
        if image.channels == 1 {
            out[i] = ((u32::from(p[0]) * 77 + u32::from(p[1]) * 150 + u32::from(p[2]) * 29 + 128) >> 8) as u8;
        } else {
            for c in 0..3 {
                out[c * plane + i] = p[c];
            }
        }
    }
    out
}

/// The width and height of a PNG or JPEG picture from its headers alone.
///
/// # Errors
/// [`CodecError::Corrupt`] for bytes that are neither, or whose headers do not decode.
pub fn dimensions(data: &[u8]) -> Result<(usize, usize), CodecError> {
    let corrupt = |codec: &'static str, why: String| CodecError::Corrupt { codec, why };
    match Format::sniff(data) {
        Some(Format::Png) => {
            // The PNG decoder is Rust: a panic in it on outside bytes is a corrupt picture.
            let found = std::panic::catch_unwind(|| {
                // The decoder's own limits (16384 a side by default) raised to what decoding takes.
                let options = DecoderOptions::default().set_max_width(1 << 16).set_max_height(1 << 16);
                let mut dec = zune_png::PngDecoder::new_with_options(data, options);
                dec.decode_headers().map_err(|e| corrupt("PNG", format!("{e:?}"))).map(|()| dec.get_dimensions())
            })
            .map_err(|_| corrupt("PNG", "the decoder panicked".into()))??;
            found.filter(|&(w, h)| w > 0 && h > 0).ok_or_else(|| corrupt("PNG", "no size in the headers".into()))
        }
        Some(Format::Jpeg) => turbo::header(data).map(|h| (h.width, h.height)),
        None => Err(corrupt("picture", "neither PNG nor JPEG (unknown magic bytes)".into())),
    }
}

/// `picture` as a PNG file (8-bit grey, RGB or RGBA): an exact compressed frame, for tests and
/// tools that publish `sensor_msgs/CompressedImage`.
pub fn encode_png(picture: &Picture) -> Vec<u8> {
    let space = match picture.channels {
        1 => ColorSpace::Luma,
        4 => ColorSpace::RGBA,
        _ => ColorSpace::RGB,
    };
    let options = zune_core::options::EncoderOptions::new(picture.width, picture.height, space, BitDepth::Eight);
    zune_png::PngEncoder::new(&picture.pixels, options).encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_picture_round_trips_through_jpeg_and_fits_any_frame() {
        // A 24x16 RGB picture, encoded by our own JPEG encoder (whole, 4:4:4).
        let img = Image { channels: 3, width: 24, height: 16 };
        let planar: Vec<u8> = (0..img.bytes(16)).map(|i| (i * 7 % 251) as u8).collect();
        let data = super::super::encode(super::super::FrameCodec::Jpeg { quality: 95 }, &img, &planar, 16).expect("encode");
        let pic = decode_picture(&data).expect("decode");
        assert_eq!((pic.width, pic.height, pic.channels), (24, 16, 3));
        // Fitting to its own size is the identity on planar order.
        let same = fit(&pic, &img);
        let back = super::super::decode(super::super::FrameCodec::Jpeg { quality: 95 }, &img, &data, 16).expect("decode");
        assert_eq!(same, back);
        // Any target size and channel count gets a frame of that size.
        for target in [Image { channels: 3, width: 40, height: 10 }, Image { channels: 1, width: 7, height: 33 }] {
            assert_eq!(fit(&pic, &target).len(), target.bytes(target.height));
        }
        assert_eq!(dimensions(&data).expect("size"), (24, 16));
        let png = encode_png(&pic);
        assert_eq!(dimensions(&png).expect("size"), (24, 16));
        assert_eq!(decode_picture(&png).expect("png"), pic, "PNG is exact");
        // Wider than zune-png's default header limit (16384), which decoding does not keep.
        let wide = Picture { width: 17_000, height: 2, channels: 1, pixels: vec![7; 34_000] };
        let wide_png = encode_png(&wide);
        assert_eq!(dimensions(&wide_png).expect("a wide PNG's size"), (17_000, 2));
        assert_eq!(decode_picture(&wide_png).expect("decodes").width, 17_000);
        assert!(dimensions(b"GIF89a....").is_err());
        assert!(decode_picture(b"GIF89a....").is_err());
        assert!(decode_picture(&data[..data.len() / 2]).is_err());
    }
}
