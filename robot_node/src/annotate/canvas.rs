//! The picture the debug image is drawn on ([`Canvas`]): the camera frame copied into packed
//! `rgb8` rows (whatever its encoding), so that every drawing routine writes one layout and the
//! result goes out as `rgb8` and as a JPEG without another conversion.

use crate::convert::{ConvertError, ImageView};

/// A packed `rgb8` picture: `width * height` pixels, rows top to bottom, 3 bytes a pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Canvas {
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// `width * height * 3` bytes, R G B.
    pub rgb: Vec<u8>,
}

impl Canvas {
    /// A `width x height` canvas of one colour.
    pub fn filled(width: u32, height: u32, colour: [u8; 3]) -> Canvas {
        let n = width as usize * height as usize;
        Canvas { width, height, rgb: colour.repeat(n) }
    }

    /// The frame `view` copied into `rgb8` (grey repeated in the three channels, alpha dropped,
    /// row padding skipped).
    ///
    /// # Errors
    /// [`ConvertError::UnknownEncoding`] for an encoding other than `rgb8`, `bgr8`, `rgba8`,
    /// `bgra8` and `mono8` (16-bit, Bayer, YUV...); [`ConvertError::ZeroSize`],
    /// [`ConvertError::StepTooSmall`] and [`ConvertError::DataTooShort`] for a frame whose
    /// header and data disagree.
    pub fn from_view(view: &ImageView<'_>) -> Result<Canvas, ConvertError> {
        let (bpp, rgb) = crate::convert::image::layout(view.encoding)
            .ok_or_else(|| ConvertError::UnknownEncoding { encoding: view.encoding.to_string() })?;
        let (w, h, step) = (view.width as usize, view.height as usize, view.step as usize);
        if w == 0 || h == 0 {
            return Err(ConvertError::ZeroSize { what: format!("a {w}x{h} frame") });
        }
        if step < w * bpp {
            return Err(ConvertError::StepTooSmall { step: step as u64, need: (w * bpp) as u64 });
        }
        let need = step * (h - 1) + w * bpp;
        if view.data.len() < need {
            return Err(ConvertError::DataTooShort { len: view.data.len() as u64, need: need as u64 });
        }
        let mut out = Vec::with_capacity(w * h * 3);
        for row in view.data.chunks(step).take(h) {
            let row = &row[..w * bpp];
            match rgb {
                Some([0, 1, 2]) if bpp == 3 => out.extend_from_slice(row),
                Some([r, g, b]) => row.chunks_exact(bpp).for_each(|p| out.extend_from_slice(&[p[r], p[g], p[b]])),
                None => row.iter().for_each(|&v| out.extend_from_slice(&[v, v, v])),
            }
        }
        Ok(Canvas { width: view.width, height: view.height, rgb: out })
    }

    /// The pixel at column `x`, row `y` (`None` outside).
    pub fn pixel(&self, x: u32, y: u32) -> Option<[u8; 3]> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let i = (y as usize * self.width as usize + x as usize) * 3;
        Some([self.rgb[i], self.rgb[i + 1], self.rgb[i + 2]])
    }

    /// Paints the pixels of columns `x0..x1`, rows `y0..y1` (clipped to the canvas; nothing for
    /// an empty range) `colour`, mixed `alpha` of 256 over what is there (256: opaque).
    pub fn fill(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), colour: [u8; 3], alpha: u16) {
        let (w, h) = (i64::from(self.width), i64::from(self.height));
        let (x0, x1, y0, y1) = (x0.clamp(0, w) as usize, x1.clamp(0, w) as usize, y0.clamp(0, h) as usize, y1.clamp(0, h) as usize);
        if x0 >= x1 {
            return;
        }
        let stride = self.width as usize * 3;
        for y in y0..y1 {
            let row = &mut self.rgb[y * stride + x0 * 3..y * stride + x1 * 3];
            if alpha >= 256 {
                row.chunks_exact_mut(3).for_each(|p| p.copy_from_slice(&colour));
            } else {
                row.chunks_exact_mut(3).for_each(|p| blend(p, colour, alpha));
            }
        }
    }

    /// The canvas as a baseline JPEG at `quality` (1 to 100), 4:2:0 as cameras and
    /// image_transport write them (libjpeg-turbo, [`lop::codec::turbo`]).
    ///
    /// # Errors
    /// [`lop::codec::CodecError`] for a quality outside 1 to 100 or a side past 65535 pixels.
    pub fn to_jpeg(&self, quality: u8) -> Result<Vec<u8>, lop::codec::CodecError> {
        use lop::codec::turbo::{EncodeOptions, Pixels, encode};
        let options = EncodeOptions { quality, subsampling: turbojpeg_sys::TJSAMP_TJSAMP_420, restart_rows: 0 };
        encode(&self.rgb, self.width as usize, self.height as usize, Pixels::Rgb, options)
    }

    /// Mixes `colour` at `alpha` of 256 into the pixel at `index` (a pixel's number, row-major).
    pub fn blend_at(&mut self, index: usize, colour: [u8; 3], alpha: u16) {
        if let Some(p) = self.rgb.get_mut(index * 3..index * 3 + 3) {
            blend(p, colour, alpha);
        }
    }
}

/// `p = p + (c - p) * alpha / 256`, per channel.
fn blend(p: &mut [u8], c: [u8; 3], alpha: u16) {
    let a = u32::from(alpha.min(256));
    for (v, c) in p.iter_mut().zip(c) {
        *v = ((u32::from(*v) * (256 - a) + u32::from(c) * a) / 256) as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view<'a>(encoding: &'a str, w: u32, h: u32, step: u32, data: &'a [u8]) -> ImageView<'a> {
        ImageView { width: w, height: h, encoding, is_bigendian: false, step, data }
    }

    #[test]
    fn every_drawable_encoding_becomes_rgb_and_others_are_refused() {
        // One pixel R=10 G=20 B=30 in each layout, with a padding byte per row.
        let cases: [(&str, &[u8]); 4] = [
            ("rgb8", &[10, 20, 30, 99]),
            ("bgr8", &[30, 20, 10, 99]),
            ("rgba8", &[10, 20, 30, 255, 99]),
            ("bgra8", &[30, 20, 10, 255, 99]),
        ];
        for (enc, data) in cases {
            let c = Canvas::from_view(&view(enc, 1, 1, data.len() as u32, data)).expect(enc);
            assert_eq!(c.pixel(0, 0), Some([10, 20, 30]), "{enc}");
        }
        let grey = Canvas::from_view(&view("mono8", 2, 2, 3, &[1, 2, 0, 3, 4])).expect("mono8");
        assert_eq!(grey.rgb, [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]);
        let bad = Canvas::from_view(&view("16UC1", 1, 1, 2, &[0, 0])).expect_err("16-bit");
        assert_eq!(bad, ConvertError::UnknownEncoding { encoding: "16UC1".into() });
        assert!(matches!(Canvas::from_view(&view("rgb8", 2, 2, 6, &[0; 11])), Err(ConvertError::DataTooShort { len: 11, need: 12 })));
        assert!(matches!(Canvas::from_view(&view("rgb8", 2, 1, 5, &[0; 6])), Err(ConvertError::StepTooSmall { .. })));
    }

    #[test]
    fn fill_clips_and_blends() {
        let mut c = Canvas::filled(4, 3, [0, 0, 0]);
        c.fill((-5, 2), (2, 9), [200, 100, 0], 256);
        c.fill((3, 0), (9, 1), [200, 200, 200], 128);
        assert_eq!(c.pixel(0, 2), Some([200, 100, 0]));
        assert_eq!(c.pixel(1, 2), Some([200, 100, 0]));
        assert_eq!(c.pixel(2, 2), Some([0, 0, 0]));
        assert_eq!(c.pixel(0, 1), Some([0, 0, 0]));
        assert_eq!(c.pixel(3, 0), Some([100, 100, 100]));
        assert_eq!(c.pixel(4, 0), None);
    }
}
