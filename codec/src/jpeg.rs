//! JPEG bands: baseline JPEG, 4:4:4, encoded and decoded by libjpeg-turbo ([`super::turbo`]).
//!
//! **Why a band decodes to the rows of the whole frame.** Without chroma subsampling every 8x8
//! block is transformed, quantised, dequantised and inverse-transformed on its own, and colour
//! conversion is per pixel; a band that starts on a multiple of [`BLOCK`] rows holds whole blocks
//! (the frame's last band pads its last block as a whole-frame encoding would). So the frame's
//! pixels after coding do not depend on where the plan cuts its bands, and the robot, which
//! decodes its own encoding, computes on exactly what the server decodes.
//!
//! **Why the decoder's output does not depend on the CPU**: see [`super::turbo`] (the accurate
//! integer IDCT, whose SIMD and C paths give the same bits). The digest each band carries
//! ([`super::digest`]) checks it on every frame anyway.

use super::turbo::{self, EncodeOptions, Pixels};
use super::{CodecError, Image, dims, interleave, planarize};

/// Rows of a JPEG block: bands start on multiples of it.
pub const BLOCK: usize = lop_core::frame::JPEG_BLOCK_ROWS;

/// Encodes `rows` planar rows of `image` at `quality` (1-100), 4:4:4.
///
/// # Errors
/// [`CodecError::Encode`] for a band wider or taller than 65535 pixels; [`CodecError::Quality`].
pub fn encode(image: &Image, planar: &[u8], rows: usize, quality: u8) -> Result<Vec<u8>, CodecError> {
    let packed = interleave(image, planar, rows);
    let options = EncodeOptions { quality, subsampling: turbojpeg_sys::TJSAMP_TJSAMP_444, restart_rows: 0 };
    turbo::encode(&packed, image.width, rows, Pixels::of_channels(image.channels), options)
}

/// Encodes `rows` planar rows of `image` as most camera drivers write JPEG (Pillow, OpenCV,
/// libjpeg's defaults): 4:2:0 chroma at `quality`, one unit. What a passthrough frame is priced
/// on, since the camera's encoder is not this machine's.
///
/// # Errors
/// As [`encode`].
pub fn encode_as_a_camera_does(image: &Image, planar: &[u8], rows: usize, quality: u8) -> Result<Vec<u8>, CodecError> {
    let packed = interleave(image, planar, rows);
    let options = EncodeOptions { quality, subsampling: turbojpeg_sys::TJSAMP_TJSAMP_420, restart_rows: 0 };
    turbo::encode(&packed, image.width, rows, Pixels::of_channels(image.channels), options)
}

/// Decodes one JPEG that must hold `rows` rows of `image` (any JPEG: a camera's own, with
/// chroma subsampling, decodes too) into planar rows.
///
/// # Errors
/// [`CodecError::Corrupt`] for data that is not a whole JPEG (strict: a truncated scan is an
/// error, not grey rows); [`CodecError::Dimensions`] for a JPEG of another size.
pub fn decode(image: &Image, data: &[u8], rows: usize) -> Result<Vec<u8>, CodecError> {
    check_whole(data)?;
    // Headers first: the size is checked before the decoder allocates for the pixels.
    let same_size = |h: &turbo::Header| {
        if h.width == image.width && h.height == rows {
            Ok(())
        } else {
            Err(dims("JPEG", image, rows, format!("{}x{}", h.width, h.height)))
        }
    };
    turbo::decode_with(data, Pixels::of_channels(image.channels), same_size, |_, pixels| {
        if pixels.len() == image.bytes(rows) {
            Ok(planarize(image, pixels, image.channels, rows))
        } else {
            Err(dims("JPEG", image, rows, format!("{} bytes", pixels.len())))
        }
    })?
}

/// Refuses a JPEG that does not end with the end-of-image marker before it reaches the decoder
/// (which also stops at a truncated scan's warning): a cut frame is named as truncated. Some writers pad after the
/// marker with zeros; those are allowed.
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
