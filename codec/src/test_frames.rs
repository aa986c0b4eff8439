//! Frames for the codecs' tests: photograph-like, deterministic.

use super::Image;

/// A photograph-like frame: smooth gradients, edges and some deterministic texture.
pub(super) fn frame(image: &Image, seed: u32) -> Vec<u8> {
    let (w, h, c) = (image.width, image.height, image.channels);
    let mut out = vec![0u8; c * h * w];
    let mut s = seed.wrapping_mul(2_654_435_761).max(1);
    for ch in 0..c {
        for y in 0..h {
            for x in 0..w {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let base = (x * 255 / w + y * 128 / h + ch * 40) as u32;
                let edge = if (x / 37 + y / 23) % 2 == 0 { 30 } else { 0 };
                out[(ch * h + y) * w + x] = ((base + edge + (s % 9)) % 256) as u8;
            }
        }
    }
    out
}

/// Rows `[a, b)` of a planar frame.
pub(super) fn rows(image: &Image, planar: &[u8], a: usize, b: usize) -> Vec<u8> {
    let plane = image.height * image.width;
    (0..image.channels).flat_map(|c| planar[c * plane + a * image.width..c * plane + b * image.width].iter().copied()).collect()
}

/// Rows `rows` of a planar frame.
pub(super) fn planar_rows(image: &Image, planar: &[u8], rows: &std::ops::Range<usize>) -> Vec<u8> {
    self::rows(image, planar, rows.start, rows.end)
}
