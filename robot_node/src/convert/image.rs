//! Camera frames (`sensor_msgs/Image`) to CHW `u8` tensors.
//!
//! - Encodings read: `rgb8`, `bgr8`, `rgba8`, `bgra8` (alpha dropped) and `mono8`; any `step` at
//!   least `width * bytes per pixel` (padding bytes at the end of a row are skipped). `is_bigendian`
//!   does not matter for 8-bit channels.
//! - Colour to grey uses the ITU-R BT.601 luma weights `Y = 0.299 R + 0.587 G + 0.114 B` (as
//!   OpenCV's `cvtColor(..., RGB2GRAY)`), rounded to nearest; grey to colour repeats the value.
//! - [`Fit::Resize`] stretches the frame to the target; [`Fit::Letterbox`] keeps the aspect ratio:
//!   the frame is scaled by `s = min(W / w, H / h)` to `round(w s) x round(h s)`, centred (the
//!   left/top margin is `floor` of half the spare pixels) and the rest is filled with `pad`.
//! - Resampling is bilinear with half-pixel centres (`src = (dst + 0.5) * scale - 0.5`, clamped to
//!   the edge; OpenCV's `INTER_LINEAR`), rounded to nearest. A same-size conversion is an exact
//!   copy, and a constant image stays constant.

use super::{ConvertError, MAX_OUTPUT_ELEMENTS};

/// The encodings [`image_to_chw`] reads.
pub const ENCODINGS: [&str; 5] = ["rgb8", "bgr8", "rgba8", "bgra8", "mono8"];

/// BT.601 luma weights for R, G, B.
pub const GREY_WEIGHTS: [f32; 3] = [0.299, 0.587, 0.114];

/// The fields of a `sensor_msgs/Image` that matter here.
#[derive(Debug, Clone, Copy)]
pub struct ImageView<'a> {
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// `rgb8`, `bgr8`, `rgba8`, `bgra8` or `mono8`.
    pub encoding: &'a str,
    /// Byte order of multi-byte channels (irrelevant for the 8-bit encodings read here).
    pub is_bigendian: bool,
    /// Bytes per row, at least `width * bytes per pixel`.
    pub step: u32,
    /// Row-major pixels, at least `step * height` bytes.
    pub data: &'a [u8],
}

/// Channel order of a three-channel output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelOrder {
    /// Channel 0 red, 1 green, 2 blue.
    Rgb,
    /// Channel 0 blue, 1 green, 2 red.
    Bgr,
}

/// How the frame is fitted to the target size: the engine's, which also fits frames inside a
/// model (`image.camera_size`), so both fit alike.
pub use lop::fit::{Fit, Placement};

/// What the model takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageTarget {
    /// Output rows.
    pub height: u32,
    /// Output columns.
    pub width: u32,
    /// 1 (grey) or 3 (colour).
    pub channels: u32,
    /// Order of a colour output (ignored for grey).
    pub order: ChannelOrder,
    /// Resize or letterbox.
    pub fit: Fit,
}

/// The placement of a `w x h` frame in `t` (see the module docs): [`lop::fit::placement`].
pub fn placement(w: u32, h: u32, t: &ImageTarget) -> Placement {
    lop::fit::placement(t.fit, w, h, t.width, t.height)
}

/// Bytes per pixel and the byte offsets of R, G, B (`None`: grey) of the encodings the node
/// converts ([`ENCODINGS`]); the debug image draws on the same ones.
pub(crate) fn layout(encoding: &str) -> Option<(usize, Option<[usize; 3]>)> {
    Some(match encoding {
        "rgb8" => (3, Some([0, 1, 2])),
        "bgr8" => (3, Some([2, 1, 0])),
        "rgba8" => (4, Some([0, 1, 2])),
        "bgra8" => (4, Some([2, 1, 0])),
        "mono8" => (1, None),
        _ => return None,
    })
}

/// Source taps along one axis for `n_out` outputs from `n_in` inputs: (first index, second
/// index, weight of the second).
fn taps(n_in: u32, n_out: u32) -> Vec<(usize, usize, f32)> {
    let scale = f64::from(n_in) / f64::from(n_out);
    let last = f64::from(n_in - 1);
    (0..n_out)
        .map(|o| {
            let s = ((f64::from(o) + 0.5) * scale - 0.5).clamp(0.0, last);
            let i0 = s.floor();
            let i1 = (i0 + 1.0).min(last);
            (i0 as usize, i1 as usize, (s - i0) as f32)
        })
        .collect()
}

#[inline(always)]
fn round_u8(v: f32) -> u8 {
    (v + 0.5) as u8
}

/// Converts a frame to a CHW `u8` tensor of `t.channels * t.height * t.width` elements.
///
/// # Errors
/// [`ConvertError::UnknownEncoding`], [`ConvertError::ZeroSize`] (frame or target),
/// [`ConvertError::StepTooSmall`], [`ConvertError::DataTooShort`] (less than `step * height`),
/// [`ConvertError::BadTarget`] (channels other than 1 or 3, absurd size).
pub fn image_to_chw(img: &ImageView, t: &ImageTarget) -> Result<Vec<u8>, ConvertError> {
    let Some((bpp, rgb)) = layout(img.encoding) else {
        return Err(ConvertError::UnknownEncoding { encoding: img.encoding.to_string() });
    };
    if img.width == 0 || img.height == 0 {
        return Err(ConvertError::ZeroSize { what: format!("image {}x{}", img.width, img.height) });
    }
    if t.width == 0 || t.height == 0 {
        return Err(ConvertError::ZeroSize { what: format!("target {}x{}", t.width, t.height) });
    }
    if t.channels != 1 && t.channels != 3 {
        return Err(ConvertError::BadTarget { msg: format!("{} channels (1 or 3 supported)", t.channels) });
    }
    let plane = u64::from(t.width) * u64::from(t.height);
    if plane * u64::from(t.channels) > MAX_OUTPUT_ELEMENTS {
        return Err(ConvertError::BadTarget { msg: format!("{}x{}x{} is too large", t.channels, t.height, t.width) });
    }
    let row_bytes = u64::from(img.width) * bpp as u64;
    if u64::from(img.step) < row_bytes {
        return Err(ConvertError::StepTooSmall { step: u64::from(img.step), need: row_bytes });
    }
    let need = u64::from(img.step) * u64::from(img.height);
    if (img.data.len() as u64) < need {
        return Err(ConvertError::DataTooShort { len: img.data.len() as u64, need });
    }
    let pad = match t.fit {
        Fit::Resize => 0,
        Fit::Letterbox { pad } => pad,
    };
    let plane = plane as usize;
    let mut out = vec![pad; plane * t.channels as usize];
    let p = placement(img.width, img.height, t);
    let xs: Vec<(usize, usize, f32)> = taps(img.width, p.width).into_iter().map(|(a, b, f)| (a * bpp, b * bpp, f)).collect();
    let ys = taps(img.height, p.height);
    let step = img.step as usize;
    let row_bytes = row_bytes as usize;
    let row = |y: usize| img.data.get(y * step..y * step + row_bytes).unwrap_or(&[]);
    let out_w = t.width as usize;
    // Output channel k reads source byte offset `src[k]` (colour) or converts (grey).
    let (c0, c1, c2) = {
        let (a, rest) = out.split_at_mut(plane);
        let (b, c) = rest.split_at_mut(if t.channels == 3 { plane } else { 0 });
        (a, b, c)
    };
    for (yi, &(y0, y1, fy)) in ys.iter().enumerate() {
        let (r0, r1) = (row(y0), row(y1));
        if r0.len() < row_bytes || r1.len() < row_bytes {
            // Unreachable after the length check above; never read out of bounds.
            return Err(ConvertError::DataTooShort { len: img.data.len() as u64, need });
        }
        let base = (p.top as usize + yi) * out_w + p.left as usize;
        let lerp = |a: usize, b: usize, fx: f32| {
            let top = f32::from(r0[a]) + (f32::from(r0[b]) - f32::from(r0[a])) * fx;
            let bot = f32::from(r1[a]) + (f32::from(r1[b]) - f32::from(r1[a])) * fx;
            top + (bot - top) * fy
        };
        match (rgb, t.channels) {
            (None, 1) => {
                for (xi, &(a, b, fx)) in xs.iter().enumerate() {
                    c0[base + xi] = round_u8(lerp(a, b, fx));
                }
            }
            (None, _) => {
                for (xi, &(a, b, fx)) in xs.iter().enumerate() {
                    let v = round_u8(lerp(a, b, fx));
                    (c0[base + xi], c1[base + xi], c2[base + xi]) = (v, v, v);
                }
            }
            (Some([ro, go, bo]), 1) => {
                for (xi, &(a, b, fx)) in xs.iter().enumerate() {
                    let (r, g, bl) = (lerp(a + ro, b + ro, fx), lerp(a + go, b + go, fx), lerp(a + bo, b + bo, fx));
                    c0[base + xi] = round_u8(GREY_WEIGHTS[0] * r + GREY_WEIGHTS[1] * g + GREY_WEIGHTS[2] * bl);
                }
            }
            (Some([ro, go, bo]), _) => {
                let [k0, k1, k2] = match t.order {
                    ChannelOrder::Rgb => [ro, go, bo],
                    ChannelOrder::Bgr => [bo, go, ro],
                };
                for (xi, &(a, b, fx)) in xs.iter().enumerate() {
                    c0[base + xi] = round_u8(lerp(a + k0, b + k0, fx));
                    c1[base + xi] = round_u8(lerp(a + k1, b + k1, fx));
                    c2[base + xi] = round_u8(lerp(a + k2, b + k2, fx));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(w: u32, h: u32, enc: &'a str, step: u32, data: &'a [u8]) -> ImageView<'a> {
        ImageView { width: w, height: h, encoding: enc, is_bigendian: false, step, data }
    }
    fn target(h: u32, w: u32, channels: u32, order: ChannelOrder, fit: Fit) -> ImageTarget {
        ImageTarget { height: h, width: w, channels, order, fit }
    }

    /// A 2x2 frame: red, green / blue, white, as (r, g, b).
    const PIX: [[u8; 3]; 4] = [[200, 10, 20], [30, 220, 40], [50, 60, 230], [255, 255, 255]];

    fn encode(enc: &str, step_pad: usize) -> Vec<u8> {
        let mut d = Vec::new();
        for row in PIX.chunks(2) {
            for &[r, g, b] in row {
                match enc {
                    "rgb8" => d.extend([r, g, b]),
                    "bgr8" => d.extend([b, g, r]),
                    "rgba8" => d.extend([r, g, b, 7]),
                    "bgra8" => d.extend([b, g, r, 7]),
                    _ => d.push(r),
                }
            }
            d.extend(std::iter::repeat_n(0xEE, step_pad));
        }
        d
    }

    #[test]
    fn image_2x2_every_encoding_and_order() {
        for (enc, bpp) in [("rgb8", 3), ("bgr8", 3), ("rgba8", 4), ("bgra8", 4)] {
            for pad in [0, 3] {
                let data = encode(enc, pad);
                let v = view(2, 2, enc, 2 * bpp + pad as u32, &data);
                let rgb = image_to_chw(&v, &target(2, 2, 3, ChannelOrder::Rgb, Fit::Resize)).expect("converts");
                let planes: Vec<Vec<u8>> = (0..3).map(|c| PIX.iter().map(|p| p[c]).collect()).collect();
                assert_eq!(rgb, planes.concat(), "{enc} pad {pad}");
                let bgr = image_to_chw(&v, &target(2, 2, 3, ChannelOrder::Bgr, Fit::Resize)).expect("converts");
                assert_eq!(bgr, [planes[2].clone(), planes[1].clone(), planes[0].clone()].concat(), "{enc}");
                let grey = image_to_chw(&v, &target(2, 2, 1, ChannelOrder::Rgb, Fit::Resize)).expect("converts");
                // 0.299 R + 0.587 G + 0.114 B, rounded: (200,10,20) -> 67.95 -> 68, (50,60,230) -> 76.39 -> 76.
                assert_eq!(grey, vec![68, 143, 76, 255], "{enc}");
            }
        }
        let mono = [9u8, 8, 0xEE, 7, 6, 0xEE];
        let v = view(2, 2, "mono8", 3, &mono);
        assert_eq!(image_to_chw(&v, &target(2, 2, 1, ChannelOrder::Rgb, Fit::Resize)).expect("ok"), vec![9, 8, 7, 6]);
        let c = image_to_chw(&v, &target(2, 2, 3, ChannelOrder::Bgr, Fit::Resize)).expect("ok");
        assert_eq!(c, [9, 8, 7, 6].repeat(3));
    }

    #[test]
    fn image_constant_stays_constant_and_resize_interpolates() {
        let data = [17u8, 99, 3].repeat(37 * 23);
        let v = view(37, 23, "rgb8", 37 * 3, &data);
        for (h, w) in [(5, 7), (64, 80), (23, 37), (1, 1)] {
            let out = image_to_chw(&v, &target(h, w, 3, ChannelOrder::Rgb, Fit::Resize)).expect("ok");
            let n = (h * w) as usize;
            assert_eq!(out.len(), 3 * n);
            assert!(out[..n].iter().all(|&x| x == 17) && out[n..2 * n].iter().all(|&x| x == 99) && out[2 * n..].iter().all(|&x| x == 3));
        }
        // A horizontal ramp 0, 100 upscaled to 4 columns: half-pixel centres give 0, 25, 75, 100.
        let v = view(2, 1, "mono8", 2, &[0, 100]);
        let out = image_to_chw(&v, &target(1, 4, 1, ChannelOrder::Rgb, Fit::Resize)).expect("ok");
        assert_eq!(out, vec![0, 25, 75, 100]);
        // Downscaling 4 -> 2 samples between the pairs.
        let v = view(4, 1, "mono8", 4, &[0, 100, 200, 40]);
        assert_eq!(image_to_chw(&v, &target(1, 2, 1, ChannelOrder::Rgb, Fit::Resize)).expect("ok"), vec![50, 120]);
    }

    #[test]
    fn image_letterbox_geometry() {
        // 8x4 into 6x6: scale 0.75 -> 6x3, centred rows 1..4 (top margin floor(3/2) = 1).
        let data = vec![200u8; 8 * 4];
        let v = view(8, 4, "mono8", 8, &data);
        let t = target(6, 6, 1, ChannelOrder::Rgb, Fit::Letterbox { pad: 114 });
        assert_eq!(placement(8, 4, &t), Placement { left: 0, top: 1, width: 6, height: 3 });
        let out = image_to_chw(&v, &t).expect("ok");
        for (y, row) in out.chunks(6).enumerate() {
            let expect = if (1..4).contains(&y) { 200 } else { 114 };
            assert!(row.iter().all(|&x| x == expect), "row {y}: {row:?}");
        }
        // Tall frame into a wide target: columns padded on both sides, three channels.
        let data = vec![50u8; 2 * 4 * 3];
        let v = view(2, 4, "rgb8", 6, &data);
        let t = target(4, 5, 3, ChannelOrder::Rgb, Fit::Letterbox { pad: 0 });
        assert_eq!(placement(2, 4, &t), Placement { left: 1, top: 0, width: 2, height: 4 });
        let out = image_to_chw(&v, &t).expect("ok");
        for plane in out.chunks(20) {
            for row in plane.chunks(5) {
                assert_eq!(row, [0, 50, 50, 0, 0]);
            }
        }
    }

    #[test]
    fn image_errors_name_the_problem() {
        let t = target(2, 2, 3, ChannelOrder::Rgb, Fit::Resize);
        let d = [0u8; 64];
        let cases: Vec<(ImageView, &str)> = vec![
            (view(2, 2, "yuv422", 4, &d), "unknown image encoding 'yuv422'"),
            (view(0, 2, "rgb8", 6, &d), "zero size"),
            (view(2, 2, "rgb8", 5, &d), "step 5 is smaller"),
            (view(4, 4, "rgb8", 12, &d[..40]), "40 bytes, the header implies 48"),
        ];
        for (v, what) in cases {
            let e = image_to_chw(&v, &t).expect_err(what).to_string();
            assert!(e.contains(what), "{e}");
        }
        let v = view(2, 2, "rgb8", 6, &d);
        assert!(image_to_chw(&v, &target(2, 2, 2, ChannelOrder::Rgb, Fit::Resize)).is_err());
        assert!(image_to_chw(&v, &target(0, 2, 3, ChannelOrder::Rgb, Fit::Resize)).is_err());
    }

    /// Times one 640x480 rgb8 -> 3x224x224 conversion (printed; no assertion on the time).
    #[test]
    fn image_conversion_time_640x480_to_224() {
        let data: Vec<u8> = (0..640 * 480 * 3).map(|i| (i * 7 % 251) as u8).collect();
        let v = view(640, 480, "rgb8", 640 * 3, &data);
        for fit in [Fit::Resize, Fit::Letterbox { pad: 114 }] {
            let t = target(224, 224, 3, ChannelOrder::Rgb, fit);
            let mut best = f64::INFINITY;
            let mut total = 0.0;
            let runs = 20;
            for _ in 0..runs {
                let t0 = std::time::Instant::now();
                let out = image_to_chw(&v, &t).expect("ok");
                let dt = t0.elapsed().as_secs_f64() * 1e3;
                assert_eq!(out.len(), 3 * 224 * 224);
                best = best.min(dt);
                total += dt;
            }
            eprintln!("640x480 rgb8 -> 3x224x224 {fit:?}: best {best:.3} ms, mean {:.3} ms over {runs}", total / runs as f64);
        }
    }
}
