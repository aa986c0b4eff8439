//! A raw `sensor_msgs/msg/Image` as the picture a PNG of the same pixels decodes to
//! ([`lop::codec::photo::Picture`]: rows packed, RGB, RGBA or grey), so that it is fitted to the
//! model exactly as a picture file is. The 8-bit encodings `lop_robot` reads are read: `rgb8`,
//! `bgr8`, `rgba8`, `bgra8` and `mono8`; any other is refused by name.

use lop::codec::photo::{MAX_PIXELS, Picture};

/// The encodings read.
pub const ENCODINGS: [&str; 5] = ["rgb8", "bgr8", "rgba8", "bgra8", "mono8"];

/// The fields of a raw camera frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawImage {
    /// Columns.
    pub width: u32,
    /// Rows.
    pub height: u32,
    /// The pixel encoding (`rgb8`, ...).
    pub encoding: String,
    /// Bytes per row, at least `width` times the bytes of a pixel.
    pub step: u32,
    /// The rows, `step * height` bytes or more.
    pub data: Vec<u8>,
}

/// Why a raw frame's pixels cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PixelError {
    /// An encoding not read here.
    #[error("pixel encoding '{encoding}' is not read (lop reads {})", ENCODINGS.join(", "))]
    Encoding {
        /// The message's encoding.
        encoding: String,
    },
    /// No pixel, or more than a picture may have.
    #[error("a {width}x{height} frame: {why}")]
    Size {
        /// Columns.
        width: u32,
        /// Rows.
        height: u32,
        /// What is wrong with it.
        why: &'static str,
    },
    /// Rows shorter than their pixels, or fewer bytes than the rows.
    #[error("step {step} and {len} bytes for {height} rows of {row} bytes")]
    Layout {
        /// The message's step.
        step: u32,
        /// Its data's length.
        len: usize,
        /// Its rows.
        height: u32,
        /// Bytes a row's pixels take.
        row: usize,
    },
}

/// Bytes per pixel, and whether the colour comes blue first.
fn layout(encoding: &str) -> Option<(usize, bool)> {
    Some(match encoding {
        "rgb8" => (3, false),
        "bgr8" => (3, true),
        "rgba8" => (4, false),
        "bgra8" => (4, true),
        "mono8" => (1, false),
        _ => return None,
    })
}

impl RawImage {
    /// The frame's pixels as a picture: rows packed, blue-first orders swapped to RGB(A).
    ///
    /// # Errors
    /// [`PixelError`]: another encoding, no pixel or too many, a step or data too short.
    pub fn picture(&self) -> Result<Picture, PixelError> {
        let (bpp, swap) = layout(&self.encoding).ok_or_else(|| PixelError::Encoding { encoding: self.encoding.clone() })?;
        let (width, height) = (self.width as usize, self.height as usize);
        let size = |why| PixelError::Size { width: self.width, height: self.height, why };
        if width == 0 || height == 0 {
            return Err(size("no pixel"));
        }
        if width.saturating_mul(height) > MAX_PIXELS {
            return Err(size("more pixels than a picture may have"));
        }
        let (row, step) = (width * bpp, self.step as usize);
        if step < row || self.data.len() < step.saturating_mul(height - 1).saturating_add(row) {
            return Err(PixelError::Layout { step: self.step, len: self.data.len(), height: self.height, row });
        }
        let mut pixels = Vec::with_capacity(row * height);
        for r in self.data.chunks(step).take(height) {
            pixels.extend_from_slice(&r[..row]);
        }
        if swap {
            pixels.chunks_exact_mut(bpp).for_each(|p| p.swap(0, 2));
        }
        Ok(Picture { width, height, channels: bpp, pixels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(encoding: &str, width: u32, height: u32, step: u32, data: Vec<u8>) -> RawImage {
        RawImage { width, height, encoding: encoding.into(), step, data }
    }

    #[test]
    fn every_encoding_reads_with_padded_rows() {
        // Two rows of two pixels, each row padded by one byte.
        let rgb = raw("rgb8", 2, 2, 7, vec![1, 2, 3, 4, 5, 6, 0, 7, 8, 9, 10, 11, 12, 0]);
        let p = rgb.picture().expect("rgb8");
        assert_eq!((p.width, p.height, p.channels), (2, 2, 3));
        assert_eq!(p.pixels, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        let bgr = raw("bgr8", 2, 2, 7, vec![3, 2, 1, 6, 5, 4, 0, 9, 8, 7, 12, 11, 10, 0]);
        assert_eq!(bgr.picture().expect("bgr8"), p, "bgr8 reads as the same picture");
        let bgra = raw("bgra8", 1, 1, 4, vec![3, 2, 1, 9]);
        assert_eq!(bgra.picture().expect("bgra8").pixels, [1, 2, 3, 9]);
        let mono = raw("mono8", 3, 1, 3, vec![7, 8, 9]);
        let m = mono.picture().expect("mono8");
        assert_eq!((m.channels, m.pixels.as_slice()), (1, &[7u8, 8, 9][..]));
        // The last row needs no padding after it.
        assert!(raw("rgb8", 2, 2, 7, vec![0; 13]).picture().is_ok());
    }

    #[test]
    fn bad_frames_are_refused_by_name() {
        let e = raw("bayer_rggb8", 2, 2, 2, vec![0; 4]).picture().expect_err("bayer");
        assert!(e.to_string().contains("'bayer_rggb8' is not read"), "{e}");
        assert!(raw("16UC1", 2, 2, 4, vec![0; 8]).picture().is_err());
        assert!(matches!(raw("rgb8", 0, 2, 0, vec![]).picture(), Err(PixelError::Size { .. })));
        assert!(matches!(raw("rgb8", 2, 2, 5, vec![0; 12]).picture(), Err(PixelError::Layout { .. })));
        assert!(matches!(raw("rgb8", 2, 2, 6, vec![0; 11]).picture(), Err(PixelError::Layout { .. })));
        assert!(matches!(raw("mono8", 1 << 16, 1 << 16, 1 << 16, vec![]).picture(), Err(PixelError::Size { .. })));
    }
}
