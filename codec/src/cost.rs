//! What a codec costs on this machine and how much it shrinks frames, measured on frames the
//! caller supplies (real photographs: random pixels do not compress and would mislead every
//! price the planner sets).

use super::{CodecCost, CodecError, FrameCodec, Image, decode, encode};
use std::time::Instant;

/// Measures `codec` on `frames` (planar `[C, H, W]` frames of `image`), each cut into `bands`
/// bands of whole units as a plan cuts its input messages, `repeats` times (the fastest of each
/// is kept, as the profiler does). Passthrough is priced on a camera's JPEG (quality 90, 4:2:0,
/// [`super::jpeg::encode_as_a_camera_does`]): the camera's encoder is not this machine's, so its
/// "encode" is the rewrite with restart markers the robot makes before it sends a cut frame
/// ([`super::camera_scan`]), and its decode is the server's, band by band.
///
/// # Errors
/// [`CodecError`] from the codec; an empty frame list is a [`CodecError::Dimensions`] error.
pub fn measure(codec: FrameCodec, image: &Image, frames: &[Vec<u8>], bands: usize, repeats: usize) -> Result<CodecCost, CodecError> {
    if codec == FrameCodec::Raw {
        return Ok(CodecCost::raw());
    }
    if frames.is_empty() || frames.iter().any(|f| f.len() != image.bytes(image.height)) {
        return Err(super::dims("codec measurement", image, image.height, format!("{} frames", frames.len())));
    }
    let unit = codec.unit_rows().max(1);
    let per = image.height.div_ceil(bands.max(1)).div_ceil(unit) * unit;
    let (mut enc_s, mut dec_s, mut coded, mut raw) = (0.0, 0.0, 0usize, 0usize);
    for frame in frames {
        let plane = image.height * image.width;
        let (mut best_enc, mut best_dec) = (f64::MAX, f64::MAX);
        let mut bytes = 0;
        for _ in 0..repeats.max(1) {
            if codec == FrameCodec::Passthrough {
                let (e, d, b) = camera_costs(image, frame, per)?;
                (best_enc, best_dec, bytes) = (best_enc.min(e), best_dec.min(d), b);
                continue;
            }
            let (mut e, mut d) = (0.0, 0.0);
            bytes = 0;
            let mut start = 0;
            while start < image.height {
                let end = (start + per).min(image.height);
                let rows = end - start;
                let band: Vec<u8> = (0..image.channels)
                    .flat_map(|c| frame[c * plane + start * image.width..c * plane + end * image.width].iter().copied())
                    .collect();
                let t0 = Instant::now();
                let data = match codec {
                    // As the robot sends a band: its restart intervals, without headers.
                    FrameCodec::Jpeg { quality } => super::restart::RestartJpeg::encode(image, &band, rows, quality)?.unit(&(0..rows))?,
                    _ => encode(codec, image, &band, rows)?,
                };
                e += t0.elapsed().as_secs_f64();
                let t1 = Instant::now();
                let back = match codec {
                    FrameCodec::Jpeg { .. } => super::restart::decode_unit(image, &data, rows)?,
                    _ => decode(codec, image, &data, rows)?,
                };
                d += t1.elapsed().as_secs_f64();
                std::hint::black_box(back);
                bytes += data.len();
                start = end;
            }
            best_enc = best_enc.min(e);
            best_dec = best_dec.min(d);
        }
        enc_s += best_enc;
        dec_s += best_dec;
        coded += bytes;
        raw += image.bytes(image.height);
    }
    let rows = (frames.len() * image.height) as f64;
    Ok(CodecCost { codec, ratio: coded as f64 / raw as f64, encode_s_per_row: enc_s / rows, decode_s_per_row: dec_s / rows })
}

/// A passthrough frame's costs: seconds to rewrite a camera's JPEG of planar `frame` with
/// restart markers, seconds to decode its bands of `per` rows as the server does, and the bytes
/// of those bands.
fn camera_costs(image: &Image, frame: &[u8], per: usize) -> Result<(f64, f64, usize), CodecError> {
    let camera = super::jpeg::encode_as_a_camera_does(image, frame, image.height, 90)?;
    let t0 = Instant::now();
    let cut = super::camera_scan::CameraScan::cut(&camera, image)?;
    let encode_s = t0.elapsed().as_secs_f64();
    let (mut decode_s, mut bytes, mut header) = (0.0, 0, Vec::new());
    for start in (0..image.height).step_by(per.max(1)) {
        let rows = start..(start + per).min(image.height);
        let unit = cut.unit(&rows, start == 0)?;
        let t1 = Instant::now();
        let (carried, scan) = super::camera_scan::split_unit(&unit)?;
        if let Some(h) = carried {
            header = h.to_vec();
        }
        std::hint::black_box(super::camera_scan::decode_scan(image, &header, scan, rows.len())?);
        decode_s += t1.elapsed().as_secs_f64();
        bytes += unit.len();
    }
    Ok((encode_s, decode_s, bytes))
}

/// A photograph-like planar frame of `image` (smooth shading, a few hard edges, fine texture),
/// for a price measured where no real frame is at hand (a node whose profile lacks the
/// configured codec): it compresses about as photographs do, unlike random pixels, but the
/// measured ratio is only a start (the robot corrects it from the frames it sends).
pub fn sample_frame(image: &Image) -> Vec<u8> {
    let (w, h) = (image.width.max(1), image.height.max(1));
    let mut out = Vec::with_capacity(image.bytes(image.height));
    for c in 0..image.channels {
        for y in 0..image.height {
            for x in 0..image.width {
                let (u, v) = (x as f64 / w as f64, y as f64 / h as f64);
                // Shading, a disc and a bar with hard edges, and a faint deterministic texture.
                let shade = 60.0 + 120.0 * u * (1.0 - 0.5 * v) + 30.0 * (c as f64);
                let disc = if (u - 0.35).powi(2) + (v - 0.45).powi(2) < 0.04 { 70.0 } else { 0.0 };
                let bar = if (0.6..0.7).contains(&u) && v > 0.2 { -50.0 } else { 0.0 };
                let texture = (((x * 31 + y * 17 + c * 7) as u64).wrapping_mul(2_654_435_761) >> 28 & 7) as f64;
                out.push((shade + disc + bar + texture).clamp(0.0, 255.0) as u8);
            }
        }
    }
    out
}
