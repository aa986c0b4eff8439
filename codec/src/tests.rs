use super::test_frames::{frame, rows};
use super::*;

/// Stacks planar bands back into a frame.
fn stack(image: &Image, bands: &[(usize, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![0u8; image.bytes(image.height)];
    let plane = image.height * image.width;
    let mut a = 0;
    for (n, band) in bands {
        for c in 0..image.channels {
            let src = &band[c * n * image.width..(c + 1) * n * image.width];
            out[c * plane + a * image.width..c * plane + (a + n) * image.width].copy_from_slice(src);
        }
        a += n;
    }
    out
}

const RGB: Image = Image { channels: 3, width: 64, height: 44 };
const GREY: Image = Image { channels: 1, width: 40, height: 20 };

#[test]
fn lossless_bands_are_exact() {
    for image in [RGB, GREY] {
        let f = frame(&image, 3);
        for (a, b) in [(0, image.height), (0, 1), (5, 17), (17, image.height)] {
            let band = rows(&image, &f, a, b);
            let data = encode(FrameCodec::Lossless, &image, &band, b - a).expect("encode");
            assert_eq!(decode(FrameCodec::Lossless, &image, &data, b - a).expect("decode"), band);
        }
    }
}

#[test]
fn jpeg_bands_on_block_rows_decode_to_the_whole_frames_pixels() {
    let q = FrameCodec::Jpeg { quality: 80 };
    for image in [RGB, GREY] {
        let f = frame(&image, 7);
        let whole = decode(q, &image, &encode(q, &image, &f, image.height).expect("encode"), image.height).expect("decode");
        assert_ne!(whole, f, "JPEG is lossy on this frame");
        // Bands cut on 8-row blocks, the last ending at the frame's bottom (not a multiple of 8).
        let cuts = [0, 8, 16, image.height];
        let bands: Vec<(usize, Vec<u8>)> = cuts
            .windows(2)
            .map(|w| {
                let n = w[1] - w[0];
                let data = encode(q, &image, &rows(&image, &f, w[0], w[1]), n).expect("band");
                (n, decode(q, &image, &data, n).expect("band decode"))
            })
            .collect();
        assert_eq!(stack(&image, &bands), whole, "{image:?}");
        // A band off the block grid decodes to other pixels: the alignment is what makes it exact.
        let off = decode(q, &image, &encode(q, &image, &rows(&image, &f, 4, 20), 16).expect("off"), 16).expect("off decode");
        assert_ne!(off, rows(&image, &whole, 4, 20));
    }
}

#[test]
fn bad_data_is_an_error_not_a_panic() {
    let image = RGB;
    let f = frame(&image, 11);
    for codec in [FrameCodec::Lossless, FrameCodec::Jpeg { quality: 90 }] {
        let data = encode(codec, &image, &f, image.height).expect("encode");
        // Wrong size: fewer rows expected than the data holds.
        assert!(matches!(decode(codec, &image, &data, 8), Err(CodecError::Dimensions { .. })), "{codec}");
        let narrow = Image { width: 32, ..image };
        assert!(matches!(decode(codec, &narrow, &data, image.height), Err(CodecError::Dimensions { .. })), "{codec}");
        // Truncated at many points, and bytes flipped: an error or (for a flip inside entropy
        // data) other pixels, never a panic.
        for cut in (0..data.len()).step_by(data.len() / 40 + 1) {
            assert!(decode(codec, &image, &data[..cut], image.height).is_err(), "{codec} truncated at {cut}");
        }
        for at in (0..data.len()).step_by(data.len() / 60 + 1) {
            let mut bad = data.clone();
            bad[at] ^= 0x5a;
            let _ = decode(codec, &image, &bad, image.height);
        }
        assert!(decode(codec, &image, b"not an image at all", image.height).is_err());
    }
    // A QOI image handed to the JPEG decoder (a mislabelled band) is refused.
    let qoi = encode(FrameCodec::Lossless, &image, &f, image.height).expect("qoi");
    assert!(matches!(decode(FrameCodec::Jpeg { quality: 90 }, &image, &qoi, image.height), Err(CodecError::Corrupt { .. })));
    // Rows that do not match the geometry are refused before encoding.
    assert!(matches!(encode(FrameCodec::Lossless, &image, &f[1..], image.height), Err(CodecError::Dimensions { .. })));
}

#[test]
fn digest_tells_one_byte_apart() {
    let f = frame(&RGB, 1);
    let mut g = f.clone();
    g[100] ^= 1;
    assert_ne!(digest(&f), digest(&g));
    assert_eq!(digest(&f), digest(&f.clone()));
}

#[test]
fn measured_costs_price_the_bytes_that_travel() {
    let image = Image { channels: 3, width: 96, height: 64 };
    let frames = vec![frame(&image, 2), frame(&image, 5)];
    let jpeg = measure_cost(FrameCodec::Jpeg { quality: 90 }, &image, &frames, 4, 1).expect("jpeg");
    let lossless = measure_cost(FrameCodec::Lossless, &image, &frames, 4, 1).expect("lossless");
    assert!(jpeg.is_valid() && lossless.is_valid());
    assert!(jpeg.ratio < lossless.ratio && lossless.ratio < 1.0, "{jpeg:?} {lossless:?}");
    assert!(jpeg.encode_s_per_row > 0.0 && jpeg.decode_s_per_row > 0.0);
    assert_eq!(measure_cost(FrameCodec::Raw, &image, &[], 4, 1).expect("raw"), CodecCost::raw());
    assert!(measure_cost(FrameCodec::Lossless, &image, &[], 4, 1).is_err());
}
