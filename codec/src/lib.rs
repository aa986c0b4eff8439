//! Frame codecs: how a camera frame's rows cross the link (issue 48). A frame is the model's
//! uint8 image input, `[1, C, H, W]` with C = 1 or 3, held planar as the graph holds it. Each
//! input message carries one independently decodable code unit of its rows, so the server decodes
//! and computes a frame's first rows while the rest is in flight.
//!
//! The model's input is the frame *as decoded*. Both sides decode with the same decoder
//! ([`jpeg`]: libjpeg-turbo's accurate integer IDCT, the same bits on every CPU, [`turbo`];
//! [`lossless`]: QOI, exact by definition), so the robot computes its bands on the very pixels the server decodes, and a
//! split output equals the unsplit model's on that frame. [`digest`] names those pixels: each
//! coded band carries the digest of what the robot decoded, and the edge refuses a band whose
//! pixels differ.
//!
//! No I/O here: bytes in, bytes out.
#![deny(missing_docs)]

pub mod camera_scan;
mod cost;
pub mod jpeg;
pub mod lossless;
pub mod photo;
pub mod restart;
pub mod turbo;

pub use cost::{measure as measure_cost, sample_frame};
pub use lop_core::frame::{CodecCost, FrameCodec, FrameError, Image};

impl From<FrameError> for CodecError {
    fn from(e: FrameError) -> CodecError {
        match e {
            FrameError::Unknown(s) => CodecError::Unknown(s),
            FrameError::Quality(q) => CodecError::Quality(q),
            FrameError::NotImage { codec, why } => CodecError::NotImage { codec, why },
        }
    }
}

/// Why a frame or band did not encode or decode.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// A codec name that is not one of `raw`, `lossless`, `jpeg:Q`, `passthrough`.
    #[error("unknown frame codec '{0}' (expected raw, lossless, jpeg:Q with Q in 1-100, or passthrough)")]
    Unknown(String),
    /// A JPEG quality outside 1-100.
    #[error("JPEG quality {0} is outside 1-100")]
    Quality(i64),
    /// A code unit that does not decode: corrupt, truncated, or not of the codec it claims.
    #[error("{codec} data does not decode: {why}")]
    Corrupt {
        /// The codec that tried.
        codec: &'static str,
        /// What the decoder said.
        why: String,
    },
    /// A code unit that decodes to another size or channel count than the rows it carries.
    #[error("{codec} data decodes to {found}, expected {expected}")]
    Dimensions {
        /// The codec.
        codec: &'static str,
        /// What the rows must be (width x rows x channels).
        expected: String,
        /// What the data holds.
        found: String,
    },
    /// A model input that no image codec can carry.
    #[error("frame codec {codec} needs a uint8 image input [1, C, H, W] with C = 1 or 3: {why}")]
    NotImage {
        /// The codec asked for.
        codec: String,
        /// What the input is.
        why: String,
    },
    /// Pixels the encoder cannot take (too wide or too tall for its format).
    #[error("{codec} cannot encode {why}")]
    Encode {
        /// The codec.
        codec: &'static str,
        /// Why.
        why: String,
    },
}

/// Encodes `rows` planar rows (`[C, rows, W]`, as the graph holds a band) with `codec` as one
/// independently decodable unit.
///
/// # Errors
/// [`CodecError::Encode`] for rows the format cannot hold; [`CodecError::Dimensions`] when
/// `planar` is not `rows` rows of `image`; `raw` and `passthrough` are not encoders here.
pub fn encode(codec: FrameCodec, image: &Image, planar: &[u8], rows: usize) -> Result<Vec<u8>, CodecError> {
    check_len(codec, image, planar, rows)?;
    match codec {
        FrameCodec::Lossless => lossless::encode(image, planar, rows),
        FrameCodec::Jpeg { quality } => jpeg::encode(image, planar, rows, quality),
        FrameCodec::Raw | FrameCodec::Passthrough => {
            Err(CodecError::Encode { codec: "raw", why: format!("with codec {codec}: nothing to encode") })
        }
    }
}

/// Decodes one code unit of `codec` that must hold `rows` rows of `image`, into planar rows
/// (`[C, rows, W]`).
///
/// # Errors
/// [`CodecError::Corrupt`] for data that does not decode; [`CodecError::Dimensions`] for data of
/// another size or channel count.
pub fn decode(codec: FrameCodec, image: &Image, data: &[u8], rows: usize) -> Result<Vec<u8>, CodecError> {
    match codec {
        FrameCodec::Lossless => lossless::decode(image, data, rows),
        FrameCodec::Jpeg { .. } | FrameCodec::Passthrough => jpeg::decode(image, data, rows),
        FrameCodec::Raw => {
            if data.len() != image.bytes(rows) {
                return Err(dims("raw", image, rows, format!("{} bytes", data.len())));
            }
            Ok(data.to_vec())
        }
    }
}

/// The digest of decoded pixels (planar bytes): what a coded band carries so that the edge can
/// prove it decoded the robot's pixels. xxh3-64: tens of microseconds a frame; it guards against
/// a decoder that differs, not against an attacker (the link's TLS does that).
pub fn digest(planar: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(planar)
}

fn check_len(codec: FrameCodec, image: &Image, planar: &[u8], rows: usize) -> Result<(), CodecError> {
    if planar.len() != image.bytes(rows) || rows == 0 {
        let name = match codec {
            FrameCodec::Lossless => "QOI",
            _ => "JPEG",
        };
        return Err(dims(name, image, rows, format!("{} bytes", planar.len())));
    }
    Ok(())
}

fn dims(codec: &'static str, image: &Image, rows: usize, found: String) -> CodecError {
    CodecError::Dimensions { codec, expected: format!("{}x{}x{}", image.width, rows, image.channels), found }
}

/// Planar `[C, rows, W]` to interleaved `[rows, W, C]`.
fn interleave(image: &Image, planar: &[u8], rows: usize) -> Vec<u8> {
    let c = image.channels;
    if c != 3 {
        return planar.to_vec();
    }
    let plane = rows * image.width;
    let (r, rest) = planar.split_at(plane);
    let (g, b) = rest.split_at(plane);
    let mut out = vec![0u8; plane * 3];
    for (((o, &r), &g), &b) in out.chunks_exact_mut(3).zip(r).zip(g).zip(b) {
        o[0] = r;
        o[1] = g;
        o[2] = b;
    }
    out
}

/// Interleaved `[rows, W, k]` (k >= C) to planar `[C, rows, W]`, keeping the first C channels.
fn planarize(image: &Image, packed: &[u8], k: usize, rows: usize) -> Vec<u8> {
    let plane = rows * image.width;
    if image.channels == 1 && k == 1 {
        return packed[..plane].to_vec();
    }
    let mut out = vec![0u8; plane * image.channels];
    if image.channels == 3 {
        let (r, rest) = out.split_at_mut(plane);
        let (g, b) = rest.split_at_mut(plane);
        for (((p, r), g), b) in packed.chunks_exact(k).zip(r).zip(g).zip(b) {
            *r = p[0];
            *g = p[1];
            *b = p[2];
        }
    } else {
        for (p, o) in packed.chunks_exact(k).zip(out.iter_mut()) {
            *o = p[0];
        }
    }
    out
}

#[cfg(test)]
mod test_frames;
#[cfg(test)]
mod tests;
