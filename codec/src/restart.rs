//! One JPEG per frame, cut at its restart markers (issue 59): under `jpeg:Q` the frame is coded
//! as one JPEG with a restart marker after every MCU row (8 pixel rows at 4:4:4), and each input
//! band carries only the entropy-coded intervals of its rows. A restart marker resets
//! every DC predictor, so an interval decodes without the ones before it; the tables and frame
//! header are a function of the quality, width and channel count alone (baseline, libjpeg's
//! standard Huffman tables), so the server rebuilds them instead of receiving them. The frame
//! costs its one JPEG's bytes, two bytes a marker, and one byte a band: not a header per band.
//!
//! The pixels are those of [`super::jpeg`]'s bands: the same quantised coefficients (restart
//! markers change the entropy coding only), every block inverse-transformed on its own, no chroma
//! subsampling. The tests check it bitwise against the whole frame's decoding.
//!
//! A unit is `[quality u8][interval 0][FFD0][interval 1][FFD1]...[interval n-1]`: the band's
//! intervals with their markers renumbered from `RST0`, as a standalone JPEG of the band would
//! hold them. No I/O here: bytes in, bytes out.

use super::jpeg::BLOCK;
use super::turbo::{self, EncodeOptions, Pixels};
use super::{CodecError, Image, interleave};
use std::ops::Range;

/// One frame's JPEG and where each MCU row's restart interval lies in it.
#[derive(Debug, Clone)]
pub struct RestartJpeg {
    jpeg: Vec<u8>,
    intervals: Vec<Range<usize>>,
    quality: u8,
    height: usize,
}

pub(super) fn corrupt(why: impl Into<String>) -> CodecError {
    CodecError::Corrupt { codec: "JPEG restart unit", why: why.into() }
}

fn options(quality: u8) -> EncodeOptions {
    EncodeOptions { quality, subsampling: turbojpeg_sys::TJSAMP_TJSAMP_444, restart_rows: 1 }
}

impl RestartJpeg {
    /// Encodes `rows` planar rows of `image` (a frame, or a band of one starting on a multiple
    /// of [`BLOCK`]) at `quality`, 4:4:4, a restart marker after every MCU row.
    ///
    /// An interval's bytes depend on its MCU row alone (the marker before it resets the DC
    /// predictors and aligns the bits), so a band coded on its own holds the very intervals the
    /// whole frame's JPEG would: the robot codes each band as it sends it.
    ///
    /// # Errors
    /// As [`super::jpeg::encode`]; [`CodecError::Corrupt`] should libjpeg-turbo write other
    /// intervals than one per MCU row (never seen: a guard for another library version).
    pub fn encode(image: &Image, planar: &[u8], rows: usize, quality: u8) -> Result<RestartJpeg, CodecError> {
        let packed = interleave(image, planar, rows);
        let jpeg = turbo::encode(&packed, image.width, rows, Pixels::of_channels(image.channels), options(quality))?;
        let layout = Layout::of(&jpeg)?;
        let intervals =
            intervals(&jpeg[layout.scan..], End::AtEndOfImage)?.into_iter().map(|r| r.start + layout.scan..r.end + layout.scan).collect();
        let out = RestartJpeg { jpeg, intervals, quality, height: rows };
        let want = rows.div_ceil(BLOCK);
        if out.intervals.len() != want {
            return Err(corrupt(format!("the encoder wrote {} restart intervals for {want} MCU rows", out.intervals.len())));
        }
        Ok(out)
    }

    /// The rows as one standard JPEG (what the robot decodes to compute on).
    pub fn jpeg(&self) -> &[u8] {
        &self.jpeg
    }

    /// The unit of rows `rows` of those coded: they start on a multiple of [`BLOCK`] and end on
    /// one or at the bottom.
    ///
    /// # Errors
    /// [`CodecError::Dimensions`] for rows off that grid or past the frame.
    pub fn unit(&self, rows: &Range<usize>) -> Result<Vec<u8>, CodecError> {
        let on_grid = rows.start.is_multiple_of(BLOCK) && (rows.end.is_multiple_of(BLOCK) || rows.end == self.height);
        if rows.is_empty() || !on_grid || rows.end > self.height {
            return Err(CodecError::Dimensions {
                codec: "JPEG restart unit",
                expected: format!("rows on the {BLOCK}-row grid within 0..{}", self.height),
                found: format!("rows {rows:?}"),
            });
        }
        let picked = &self.intervals[rows.start / BLOCK..rows.end.div_ceil(BLOCK)];
        let mut out = Vec::with_capacity(1 + picked.iter().map(|r| r.len() + 2).sum::<usize>());
        out.push(self.quality);
        join_intervals(&self.jpeg, picked, &mut out);
        Ok(out)
    }
}

/// Appends the intervals `picked` of `jpeg` to `out` with their restart markers renumbered from
/// RST0, as a standalone JPEG of those MCU rows holds them.
pub(super) fn join_intervals(jpeg: &[u8], picked: &[Range<usize>], out: &mut Vec<u8>) {
    for (k, r) in picked.iter().enumerate() {
        if k > 0 {
            out.extend_from_slice(&[0xFF, 0xD0 + ((k - 1) % 8) as u8]);
        }
        out.extend_from_slice(&jpeg[r.clone()]);
    }
}

/// Decodes a unit holding `rows` rows of `image` into planar rows: rebuilds the band's JPEG
/// (the tables and headers of its quality and width, the height of its rows) around the unit's
/// intervals and decodes it strictly.
///
/// # Errors
/// [`CodecError::Corrupt`] for a unit that is empty, names a quality outside 1-100, holds a
/// marker other than the restart markers in sequence, holds another count of intervals than its
/// rows' MCU rows (a unit cut at a restart marker), or does not decode without a warning.
pub fn decode_unit(image: &Image, unit: &[u8], rows: usize) -> Result<Vec<u8>, CodecError> {
    let Some((&quality, scan)) = unit.split_first() else {
        return Err(corrupt("empty"));
    };
    if !(1..=100).contains(&quality) {
        return Err(corrupt(format!("quality {quality} is outside 1-100")));
    }
    let want = rows.div_ceil(BLOCK);
    let found = intervals(scan, End::AtTheLastByte)?.len();
    if found != want {
        return Err(corrupt(format!("{found} restart intervals for {rows} rows ({want} MCU rows): cut or padded")));
    }
    let mut jpeg = header(image, rows, quality)?;
    jpeg.extend_from_slice(scan);
    jpeg.extend_from_slice(&[0xFF, 0xD9]);
    super::jpeg::decode(image, &jpeg, rows)
}

/// The headers a standalone JPEG of `rows` rows of `image` at `quality` starts with, up to its
/// scan data: those libjpeg-turbo writes for a blank MCU row of the same width, quality and
/// channels (the same tables, the same restart interval), with the frame's height set to `rows`.
///
/// The last headers made are kept in this thread (an edge decodes the bands of one camera's
/// frames, all of one width and quality), so that a band costs no second encoding.
fn header(image: &Image, rows: usize, quality: u8) -> Result<Vec<u8>, CodecError> {
    let height = u16::try_from(rows).ok().filter(|&h| h > 0).ok_or_else(|| corrupt(format!("{rows} rows")))?;
    let pixels = Pixels::of_channels(image.channels);
    let key = (quality, image.width, pixels.channels());
    let kept = LAST_HEADER.with(|h| h.borrow().as_ref().filter(|(k, ..)| *k == key).map(|(_, jpeg, at)| (jpeg.clone(), *at)));
    let (mut jpeg, at) = match kept {
        Some(kept) => kept,
        None => {
            let blank = vec![0u8; image.width * BLOCK * pixels.channels()];
            let mut jpeg = turbo::encode(&blank, image.width, BLOCK, pixels, options(quality))?;
            let layout = Layout::of(&jpeg)?;
            jpeg.truncate(layout.scan);
            LAST_HEADER.with(|h| *h.borrow_mut() = Some((key, jpeg.clone(), layout.height)));
            (jpeg, layout.height)
        }
    };
    jpeg[at..at + 2].copy_from_slice(&height.to_be_bytes());
    Ok(jpeg)
}

/// Headers [`header`] made: for (quality, width, channels), the bytes and the height's offset.
type KeptHeader = ((u8, usize, usize), Vec<u8>, usize);

thread_local! {
    /// The headers [`header`] made last.
    static LAST_HEADER: std::cell::RefCell<Option<KeptHeader>> = const { std::cell::RefCell::new(None) };
}

/// Where the headers of a JPEG written by libjpeg-turbo put what this module needs.
pub(super) struct Layout {
    /// Offset of the frame header's (SOF0 or SOF1) height field.
    pub(super) height: usize,
    /// Offset of the first byte of scan data, just past the scan header (SOS).
    pub(super) scan: usize,
    /// Rows of one MCU row: 8 times the largest vertical sampling factor of the frame's
    /// components (8 for a single component, whose scan is not interleaved).
    pub(super) mcu_height: usize,
}

impl Layout {
    /// Reads the headers of `jpeg`, a sequential Huffman-coded JPEG, up to its first scan.
    pub(super) fn of(jpeg: &[u8]) -> Result<Layout, CodecError> {
        if jpeg.get(..2) != Some(&[0xFF, 0xD8][..]) {
            return Err(corrupt("no start-of-image marker"));
        }
        let (mut at, mut frame) = (2, None);
        while let Some(&[0xFF, marker, hi, lo]) = jpeg.get(at..at + 4) {
            let end = at + 2 + usize::from(u16::from_be_bytes([hi, lo]));
            match marker {
                // Sequential frame header: FF C0 (or C1), length, precision, height, width,
                // components, then 3 bytes a component (id, sampling factors, table).
                0xC0 | 0xC1 => frame = Some((at + 5, mcu_height(jpeg.get(at + 9..end.min(jpeg.len())).unwrap_or(&[])))),
                0xDA => {
                    let (height, mcu_height) = frame.ok_or_else(|| corrupt("no sequential frame header"))?;
                    return Ok(Layout { height, scan: end, mcu_height: mcu_height? });
                }
                _ => {}
            }
            at = end;
        }
        Err(corrupt("no scan header"))
    }
}

/// The MCU height of a frame header's component list (its count byte first).
fn mcu_height(components: &[u8]) -> Result<usize, CodecError> {
    let Some((&n, list)) = components.split_first() else { return Err(corrupt("a frame header without components")) };
    let list = list.get(..3 * usize::from(n)).ok_or_else(|| corrupt("a frame header cut short"))?;
    if n == 1 {
        return Ok(BLOCK);
    }
    let v = list.chunks_exact(3).map(|c| usize::from(c[1] & 0x0F)).max().unwrap_or(1);
    if !(1..=4).contains(&v) {
        return Err(corrupt(format!("vertical sampling factor {v}")));
    }
    Ok(BLOCK * v)
}

/// Where scan data ends: a whole JPEG's at its end-of-image marker, a unit's at its last byte
/// (it holds no end-of-image marker).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    AtEndOfImage,
    AtTheLastByte,
}

/// The restart intervals of scan data `scan`: the byte ranges between markers, which must be
/// RST0, RST1, ... in sequence.
pub(super) fn intervals(scan: &[u8], end: End) -> Result<Vec<Range<usize>>, CodecError> {
    let (mut out, mut start, mut from) = (Vec::new(), 0, 0);
    // Entropy-coded data holds 0xFF only as a stuffed FF00 or before a marker: jump between them.
    while let Some(k) = memchr::memchr(0xFF, &scan[from..]) {
        let i = from + k;
        from = i + 2;
        match scan.get(i + 1) {
            Some(0x00) => {}
            Some(&m @ 0xD0..=0xD7) => {
                let want = 0xD0 + (out.len() % 8) as u8;
                if m != want {
                    return Err(corrupt(format!("restart marker RST{} where RST{} belongs", m - 0xD0, want - 0xD0)));
                }
                out.push(start..i);
                start = i + 2;
            }
            Some(0xD9) if end == End::AtEndOfImage => {
                out.push(start..i);
                return Ok(out);
            }
            Some(m) => return Err(corrupt(format!("marker FF{m:02X} inside the scan"))),
            None => return Err(corrupt("ends inside a marker")),
        }
    }
    if end == End::AtEndOfImage {
        return Err(corrupt("no end-of-image marker"));
    }
    out.push(start..scan.len());
    Ok(out)
}

#[cfg(test)]
#[path = "restart/tests.rs"]
mod tests;
