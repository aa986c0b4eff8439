//! The camera's own JPEG, cut by rows (issue 59): under `passthrough` a frame the plan splits
//! crosses as its camera's JPEG, band by band, so that the server decodes and computes on the
//! first rows before the last bytes are in.
//!
//! The robot rewrites the camera's JPEG once per frame with a restart marker after every MCU row
//! ([`super::turbo::restart_every_mcu_row`]: the quantised coefficients are untouched, so the
//! pixels are the camera's). A restart marker resets every DC predictor and aligns the bits, so
//! each MCU row's interval decodes without the ones before it. Decoding uses merged chroma
//! upsampling (see [`super::turbo`]), which reads no row of the next MCU row: a band decodes on
//! its own to exactly the rows of the whole frame. The tests check both bitwise.
//!
//! A unit is `[header length: u32 LE][header][interval 0][FFD0][interval 1]...`. The header
//! (the JPEG's bytes up to its scan data: tables, frame and scan headers) travels once per frame,
//! in the first band the robot sends; the server keeps it for the frame's later bands, whose
//! header length is 0. So the frame costs its camera's JPEG, two bytes a marker and four a band.
//!
//! Bands start on multiples of [`GRID`] rows, which every common chroma subsampling's MCU height
//! divides (8 for 4:4:4, 4:2:2 and grey, 16 for 4:2:0). A JPEG whose MCU rows are taller (4:4:1,
//! 32 rows) cannot be cut on that grid: [`CameraScan::cut`] says so, and the caller sends its
//! bands another way. No I/O here: bytes in, bytes out.

use super::restart::{End, Layout, corrupt, intervals, join_intervals};
use super::{CodecError, Image};
use std::ops::Range;

/// Rows of the grid a passthrough frame's bands are cut on.
pub const GRID: usize = lop_core::frame::CAMERA_GRID_ROWS;

/// Largest header a unit may carry: tables and frame headers take well under 2 KiB; a unit that
/// claims more is refused before anything is copied.
const MAX_HEADER: usize = 64 * 1024;

/// A camera's JPEG rewritten with a restart marker after every MCU row, and where each MCU row's
/// interval lies in it.
#[derive(Debug, Clone)]
pub struct CameraScan {
    jpeg: Vec<u8>,
    /// Where the scan data starts: `jpeg[..scan]` is the header a unit carries.
    scan: usize,
    mcu_height: usize,
    intervals: Vec<Range<usize>>,
    height: usize,
}

impl CameraScan {
    /// Rewrites `camera`, the JPEG of a frame that decodes to `image`, with a restart marker
    /// after every MCU row, and finds its intervals.
    ///
    /// # Errors
    /// [`CodecError::Dimensions`] for a JPEG of another size than `image`, or whose MCU height
    /// does not divide [`GRID`]; [`CodecError::Corrupt`] for one that does not read (truncated,
    /// damaged) or that libjpeg-turbo rewrites with other intervals than one per MCU row.
    pub fn cut(camera: &[u8], image: &Image) -> Result<CameraScan, CodecError> {
        let header = super::turbo::header(camera)?;
        if header.width != image.width || header.height != image.height {
            return Err(super::dims("camera JPEG", image, image.height, format!("{}x{}", header.width, header.height)));
        }
        let jpeg = super::turbo::restart_every_mcu_row(camera)?;
        let layout = Layout::of(&jpeg)?;
        if !GRID.is_multiple_of(layout.mcu_height) {
            return Err(CodecError::Dimensions {
                codec: "camera JPEG",
                expected: format!("MCU rows that divide the {GRID}-row grid"),
                found: format!("MCU rows of {} pixel rows", layout.mcu_height),
            });
        }
        let scan = layout.scan;
        let intervals: Vec<Range<usize>> =
            intervals(&jpeg[scan..], End::AtEndOfImage)?.into_iter().map(|r| r.start + scan..r.end + scan).collect();
        let want = image.height.div_ceil(layout.mcu_height);
        if intervals.len() != want {
            return Err(corrupt(format!("the rewrite holds {} restart intervals for {want} MCU rows", intervals.len())));
        }
        Ok(CameraScan { jpeg, scan, mcu_height: layout.mcu_height, intervals, height: image.height })
    }

    /// The rewritten JPEG, whole (what the robot's own decoding equals).
    pub fn jpeg(&self) -> &[u8] {
        &self.jpeg
    }

    /// The unit of rows `rows`, carrying the header when `with_header` (the frame's first band
    /// sent). The rows start on a multiple of [`GRID`] and end on one or at the bottom.
    ///
    /// # Errors
    /// [`CodecError::Dimensions`] for rows off that grid or past the frame.
    pub fn unit(&self, rows: &Range<usize>, with_header: bool) -> Result<Vec<u8>, CodecError> {
        let on_grid = rows.start.is_multiple_of(GRID) && (rows.end.is_multiple_of(GRID) || rows.end == self.height);
        if rows.is_empty() || !on_grid || rows.end > self.height {
            return Err(CodecError::Dimensions {
                codec: "camera JPEG unit",
                expected: format!("rows on the {GRID}-row grid within 0..{}", self.height),
                found: format!("rows {rows:?}"),
            });
        }
        let picked = &self.intervals[rows.start / self.mcu_height..rows.end.div_ceil(self.mcu_height)];
        let header = if with_header { &self.jpeg[..self.scan] } else { &[][..] };
        let mut out = Vec::with_capacity(4 + header.len() + picked.iter().map(|r| r.len() + 2).sum::<usize>());
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(header);
        join_intervals(&self.jpeg, picked, &mut out);
        Ok(out)
    }
}

/// A unit split into the header it carries (if any) and its scan data.
///
/// # Errors
/// [`CodecError::Corrupt`] for a unit too short for its length field, or whose header length
/// is past the unit or [`MAX_HEADER`].
pub fn split_unit(unit: &[u8]) -> Result<(Option<&[u8]>, &[u8]), CodecError> {
    let Some((len, rest)) = unit.split_first_chunk::<4>() else {
        return Err(corrupt("a camera unit without its header length"));
    };
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_HEADER || len > rest.len() {
        return Err(corrupt(format!("a camera unit's header of {len} bytes (the unit holds {})", rest.len())));
    }
    let (header, scan) = rest.split_at(len);
    Ok(((len > 0).then_some(header), scan))
}

/// Decodes the scan data of a unit holding `rows` rows of `image` with `header` (the frame's,
/// from its first band) into planar rows: the header with the band's height, the intervals, an
/// end-of-image marker, decoded strictly.
///
/// # Errors
/// [`CodecError::Corrupt`] for a header that does not parse, a scan that holds another count of
/// intervals than the rows' MCU rows (a unit cut at a restart marker), markers out of sequence,
/// or data that does not decode without a warning; [`CodecError::Dimensions`] for a header of
/// another width.
pub fn decode_scan(image: &Image, header: &[u8], scan: &[u8], rows: usize) -> Result<Vec<u8>, CodecError> {
    let layout = Layout::of(header)?;
    if layout.scan != header.len() {
        return Err(corrupt("a camera unit's header does not end at its scan"));
    }
    let want = rows.div_ceil(layout.mcu_height);
    let found = intervals(scan, End::AtTheLastByte)?.len();
    if found != want {
        return Err(corrupt(format!("{found} restart intervals for {rows} rows ({want} MCU rows): cut or padded")));
    }
    let height = u16::try_from(rows).ok().filter(|&h| h > 0).ok_or_else(|| corrupt(format!("{rows} rows")))?;
    let mut jpeg = Vec::with_capacity(header.len() + scan.len() + 2);
    jpeg.extend_from_slice(header);
    jpeg[layout.height..layout.height + 2].copy_from_slice(&height.to_be_bytes());
    jpeg.extend_from_slice(scan);
    jpeg.extend_from_slice(&[0xFF, 0xD9]);
    super::jpeg::decode(image, &jpeg, rows)
}

#[cfg(test)]
#[path = "camera_scan/tests.rs"]
mod tests;
