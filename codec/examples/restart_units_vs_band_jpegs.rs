//! `cargo run --release -p lop_codec --example restart_units_vs_band_jpegs [PHOTO_DIR]`: the cost of a
//! `jpeg:90` band as the restart-interval unit a robot sends (`lop_codec::restart`) against the
//! standalone band JPEG it replaced, side by side in one run, interleaved, on one core: a
//! 640x480 frame (the built-in photograph-like frame, or the first picture of PHOTO_DIR, such as
//! `scripts/photos.sh`'s) in 8 bands, the fastest of 20 repeats per round, three rounds. Prints
//! each round's encode and decode milliseconds per frame and the units' ratios and bytes.

use lop_codec::photo::{decode_picture, fit};
use lop_codec::restart::{RestartJpeg, decode_unit};
use lop_codec::{CodecError, FrameCodec, Image, decode, encode, sample_frame};
use std::time::Instant;

/// Milliseconds per frame to encode and to decode its bands, and the bytes they take.
fn time_bands(bands: &[(usize, Vec<u8>)], image: &Image, units: bool) -> Result<(f64, f64, usize), CodecError> {
    let codec = FrameCodec::Jpeg { quality: 90 };
    let (mut best_e, mut best_d, mut bytes) = (f64::MAX, f64::MAX, 0);
    for _ in 0..20 {
        let (mut e, mut d) = (0.0, 0.0);
        bytes = 0;
        for (rows, band) in bands {
            let t0 = Instant::now();
            let data =
                if units { RestartJpeg::encode(image, band, *rows, 90)?.unit(&(0..*rows))? } else { encode(codec, image, band, *rows)? };
            e += t0.elapsed().as_secs_f64();
            let t1 = Instant::now();
            let back = if units { decode_unit(image, &data, *rows)? } else { decode(codec, image, &data, *rows)? };
            d += t1.elapsed().as_secs_f64();
            std::hint::black_box(back);
            bytes += data.len();
        }
        (best_e, best_d) = (best_e.min(e), best_d.min(d));
    }
    Ok((best_e * 1e3, best_d * 1e3, bytes))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let image = Image { channels: 3, width: 640, height: 480 };
    let frame = match std::env::args().nth(1) {
        Some(dir) => {
            let mut paths: Vec<_> = std::fs::read_dir(&dir)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
            paths.sort();
            let path = paths.first().ok_or_else(|| format!("no picture in {dir}"))?;
            fit(&decode_picture(&std::fs::read(path)?)?, &image)
        }
        None => sample_frame(&image),
    };
    let plane = image.width * image.height;
    let bands: Vec<(usize, Vec<u8>)> = (0..8)
        .map(|k| (60, (0..3).flat_map(|c| frame[c * plane + k * 60 * 640..c * plane + (k + 1) * 60 * 640].iter().copied()).collect()))
        .collect();
    for round in 0..3 {
        let (ce, cd, cb) = time_bands(&bands, &image, false)?;
        let (ue, ud, ub) = time_bands(&bands, &image, true)?;
        println!(
            "round {round}: band JPEGs encode {ce:.3} ms decode {cd:.3} ms {cb} B; restart units encode {ue:.3} ms decode {ud:.3} ms {ub} B; \
             units/JPEGs encode {:.3}x decode {:.3}x bytes {:.3}x",
            ue / ce,
            ud / cd,
            ub as f64 / cb as f64
        );
    }
    Ok(())
}
