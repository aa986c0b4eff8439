//! JPEG bands: baseline JPEG, 4:4:4, encoded by `jpeg-encoder` and decoded by `zune-jpeg`.
//!
//! **Why a band decodes to the rows of the whole frame.** Without chroma subsampling every 8x8
//! block is transformed, quantised, dequantised and inverse-transformed on its own, and colour
//! conversion is per pixel; a band that starts on a multiple of [`BLOCK`] rows holds whole blocks
//! (the frame's last band pads its last block as a whole-frame encoding would). So the frame's
//! pixels after coding do not depend on where the plan cuts its bands, and the robot, which
//! decodes its own encoding, computes on exactly what the server decodes.
//!
//! **Why the decoder's output does not depend on the CPU.** `zune-jpeg` is built without its
//! `x86` and `neon` features, so it runs its portable scalar code on every machine: an integer
//! IDCT (fixed-point constants, shifts, clamps; no floating point at run time) and integer
//! YCbCr-to-RGB conversion. Integer arithmetic gives the same bits on x86 and ARM. The digest
//! each band carries ([`super::digest`]) checks it on every frame anyway.

use super::{CodecError, Image, dims, interleave, planarize};
use zune_jpeg::JpegDecoder;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;

/// Rows of a JPEG block: bands start on multiples of it.
pub const BLOCK: usize = 8;

/// Encodes `rows` planar rows of `image` at `quality` (1-100), 4:4:4.
///
/// # Errors
/// [`CodecError::Encode`] for a band wider or taller than 65535 pixels, or a bad quality.
pub fn encode(image: &Image, planar: &[u8], rows: usize, quality: u8) -> Result<Vec<u8>, CodecError> {
    if !(1..=100).contains(&quality) {
        return Err(CodecError::Quality(i64::from(quality)));
    }
    let too_big = |what: &str, v: usize| CodecError::Encode { codec: "JPEG", why: format!("a {what} of {v} pixels (at most 65535)") };
    let w = u16::try_from(image.width).map_err(|_| too_big("width", image.width))?;
    let h = u16::try_from(rows).map_err(|_| too_big("height", rows))?;
    let packed = interleave(image, planar, rows);
    let mut out = Vec::with_capacity(image.bytes(rows) / 8 + 1024);
    let mut enc = jpeg_encoder::Encoder::new(&mut out, quality);
    enc.set_sampling_factor(jpeg_encoder::SamplingFactor::R_4_4_4);
    let color = if image.channels == 1 { jpeg_encoder::ColorType::Luma } else { jpeg_encoder::ColorType::Rgb };
    enc.encode(&packed, w, h, color).map_err(|e| CodecError::Encode { codec: "JPEG", why: e.to_string() })?;
    Ok(out)
}

/// Decodes one JPEG that must hold `rows` rows of `image` (any JPEG: a camera's own, with
/// chroma subsampling, decodes too) into planar rows.
///
/// # Errors
/// [`CodecError::Corrupt`] for data that is not a whole JPEG (strict: a truncated scan is an
/// error, not grey rows); [`CodecError::Dimensions`] for a JPEG of another size.
pub fn decode(image: &Image, data: &[u8], rows: usize) -> Result<Vec<u8>, CodecError> {
    let corrupt = |why: String| CodecError::Corrupt { codec: "JPEG", why };
    let out_space = if image.channels == 1 { ColorSpace::Luma } else { ColorSpace::RGB };
    check_whole(data)?;
    // Headers first: the size is checked before the decoder allocates for the pixels.
    let options = DecoderOptions::default().jpeg_set_out_colorspace(out_space).set_strict_mode(true);
    // The decoder reads outside data: a panic in it is a corrupt frame, not a dead robot.
    let decoded = std::panic::catch_unwind(|| {
        let mut dec = JpegDecoder::new_with_options(data, options);
        dec.decode_headers()?;
        let Some(info) = dec.info() else { return Ok(None) };
        let (w, h) = (usize::from(info.width), usize::from(info.height));
        if w != image.width || h != rows {
            return Ok(Some(Err(format!("{w}x{h}"))));
        }
        Ok::<_, zune_jpeg::errors::DecodeErrors>(Some(Ok(dec.decode()?)))
    })
    .map_err(|_| corrupt("the decoder panicked".into()))?;
    let pixels = match decoded.map_err(|e| corrupt(format!("{e:?}")))? {
        None => return Err(corrupt("no frame header".into())),
        Some(Err(size)) => return Err(dims("JPEG", image, rows, size)),
        Some(Ok(pixels)) => pixels,
    };
    if pixels.len() != image.bytes(rows) {
        return Err(dims("JPEG", image, rows, format!("{} bytes", pixels.len())));
    }
    Ok(planarize(image, &pixels, image.channels, rows))
}

/// Refuses a JPEG that does not end with the end-of-image marker: zune-jpeg forgives a scan that
/// ends a few dozen bytes early (it pads with zeros), which would pass a truncated frame off as
/// grey rows. Some writers pad after the marker with zeros; those are allowed.
///
/// # Errors
/// [`CodecError::Corrupt`].
pub fn check_whole(data: &[u8]) -> Result<(), CodecError> {
    let end = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    if end < 4 || data[end - 2..end] != [0xFF, 0xD9] {
        return Err(CodecError::Corrupt { codec: "JPEG", why: "truncated: no end-of-image marker".into() });
    }
    Ok(())
}
