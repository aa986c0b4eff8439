//! libjpeg-turbo, through its TurboJPEG 3 API (`turbojpeg-sys`, pinned at 1.2.0: the crate builds
//! its bundled libjpeg-turbo 3.1.0 from source with cmake, SIMD required, so NASM on x86).
//!
//! Chosen over a Rust decoder for speed and for one documented output: on one core here it
//! decodes a 640x480 4:2:0 frame in about 0.8 ms and encodes one at 4:4:4 in about 1.1 ms (the
//! portable Rust decoder and encoder it replaced took 3.5 and 4.4 ms).
//!
//! **Why its pixels do not depend on the CPU.** Decoding uses the accurate integer IDCT (islow:
//! `TJPARAM_FASTDCT` off) and merged (not "fancy") chroma upsampling (`TJPARAM_FASTUPSAMPLE`),
//! both integer arithmetic. libjpeg-turbo's own regression suite holds one set of checksums for
//! them, run with its SIMD forced on and forced off (`JSIMD_FORCENONE`), so its SSE2/AVX2, NEON
//! and C paths decode to the same bits; the float IDCT, which could differ, is never used. The
//! tests compare the SIMD path with the forced-C path and with another build of libjpeg-turbo
//! (Python's simplejpeg, asked for the same upsampling), bit for bit; each coded band's digest
//! checks it at run time anyway.
//!
//! **Why merged upsampling.** Fancy upsampling blends each chroma row with the rows above and
//! below it, so the pixels of an MCU row depend on its neighbours' data. Merged upsampling reads
//! the MCU row's own chroma only, so a band of a camera's JPEG decodes on its own to exactly the
//! rows of the whole frame ([`super::camera_scan`]): what lets the server start on the first rows
//! of a frame before its last bytes are in. It costs the chroma a little smoothness, nothing the
//! digest or the exactness of the split could notice: every side decodes alike.
//!
//! **Outside bytes.** Decoding stops at the first warning (`TJPARAM_STOPONWARNING`: a truncated
//! or damaged scan is an error, not grey rows), the size is checked from the header before any
//! pixel is allocated, and progressive scans are capped (`TJPARAM_SCANLIMIT`), as libjpeg-turbo
//! advises for untrusted input. The library reports errors by return code (it is C: it does not
//! unwind), so nothing here relies on catching a panic.

use super::CodecError;
use std::cell::RefCell;
use std::ffi::CStr;
use turbojpeg_sys as tj;

/// Progressive scans a frame may have: libjpeg-turbo's advice for untrusted input is 500; a real
/// encoder writes about ten.
const SCAN_LIMIT: i32 = 500;

/// Pixel layout asked of the decoder or given to the encoder: interleaved, 8 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pixels {
    /// One byte per pixel.
    Gray,
    /// Three bytes per pixel, R G B.
    Rgb,
}

impl Pixels {
    /// For a channel count of 1 or 3 (anything but 1 is RGB).
    pub fn of_channels(channels: usize) -> Pixels {
        if channels == 1 { Pixels::Gray } else { Pixels::Rgb }
    }

    /// Bytes per pixel.
    pub fn channels(self) -> usize {
        match self {
            Pixels::Gray => 1,
            Pixels::Rgb => 3,
        }
    }

    fn format(self) -> i32 {
        match self {
            Pixels::Gray => tj::TJPF_TJPF_GRAY,
            Pixels::Rgb => tj::TJPF_TJPF_RGB,
        }
    }
}

/// What a JPEG's headers say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Pixels per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Chroma subsampling (`TJSAMP_*`; -1 when unknown).
    pub subsampling: i32,
    /// Progressive: its rows cannot be decoded before its last scan arrives.
    pub progressive: bool,
    /// Arithmetic-coded rather than Huffman-coded.
    pub arithmetic: bool,
}

/// A TurboJPEG instance; destroyed on drop.
pub(super) struct Handle(tj::tjhandle);

impl Handle {
    fn new(kind: tj::TJINIT) -> Result<Handle, CodecError> {
        // SAFETY: tj3Init has no preconditions; a null result is checked.
        let raw = unsafe { tj::tj3Init(kind as i32) };
        if raw.is_null() {
            return Err(CodecError::Encode { codec: "JPEG", why: "libjpeg-turbo could not start (out of memory)".into() });
        }
        Ok(Handle(raw))
    }

    pub(super) fn set(&mut self, param: tj::TJPARAM, value: i32) -> Result<(), CodecError> {
        // SAFETY: the handle is live; an unknown parameter is reported by the return code.
        if unsafe { tj::tj3Set(self.0, param as i32, value) } != 0 {
            return Err(CodecError::Encode { codec: "JPEG", why: format!("parameter {param}: {}", self.error()) });
        }
        Ok(())
    }

    fn get(&self, param: tj::TJPARAM) -> i32 {
        // SAFETY: the handle is live; an unknown parameter returns -1.
        unsafe { tj::tj3Get(self.0, param as i32) }
    }

    /// The library's message for the last error on this handle.
    fn error(&self) -> String {
        // SAFETY: tj3GetErrorStr returns a NUL-terminated string owned by the handle (or a static
        // one), valid until the next call on it; it is copied at once.
        unsafe {
            let msg = tj::tj3GetErrorStr(self.0);
            if msg.is_null() { "unknown error".into() } else { CStr::from_ptr(msg).to_string_lossy().into_owned() }
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed once.
        unsafe { tj::tj3Destroy(self.0) }
    }
}

thread_local! {
    static DECOMPRESSOR: RefCell<Option<Handle>> = const { RefCell::new(None) };
    static COMPRESSOR: RefCell<Option<Handle>> = const { RefCell::new(None) };
    static TRANSFORMER: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's handle of `kind`, made at first use (a handle is not shareable
/// between threads; making one per call would cost an allocation each time).
fn with_handle<T>(
    cell: &'static std::thread::LocalKey<RefCell<Option<Handle>>>,
    kind: tj::TJINIT,
    f: impl FnOnce(&mut Handle) -> Result<T, CodecError>,
) -> Result<T, CodecError> {
    cell.with(|slot| {
        let mut slot = slot.borrow_mut();
        let handle = match slot.as_mut() {
            Some(h) => h,
            None => slot.insert(Handle::new(kind)?),
        };
        f(handle)
    })
}

fn corrupt(why: String) -> CodecError {
    CodecError::Corrupt { codec: "JPEG", why }
}

/// Reads `data`'s headers into `handle` and returns them.
fn read_header(handle: &mut Handle, data: &[u8]) -> Result<Header, CodecError> {
    // SAFETY: `data` is a live slice of the length passed; the library only reads it.
    if unsafe { tj::tj3DecompressHeader(handle.0, data.as_ptr(), data.len() as tj::size_t) } != 0 {
        return Err(corrupt(handle.error()));
    }
    if handle.get(tj::TJPARAM_TJPARAM_PRECISION) != 8 {
        return Err(corrupt(format!("{}-bit samples (only 8-bit JPEG is read)", handle.get(tj::TJPARAM_TJPARAM_PRECISION))));
    }
    let dim = |p| usize::try_from(handle.get(p)).unwrap_or(0);
    let header = Header {
        width: dim(tj::TJPARAM_TJPARAM_JPEGWIDTH),
        height: dim(tj::TJPARAM_TJPARAM_JPEGHEIGHT),
        subsampling: handle.get(tj::TJPARAM_TJPARAM_SUBSAMP),
        progressive: handle.get(tj::TJPARAM_TJPARAM_PROGRESSIVE) == 1,
        arithmetic: handle.get(tj::TJPARAM_TJPARAM_ARITHMETIC) == 1,
    };
    if header.width == 0 || header.height == 0 {
        return Err(corrupt("no size in the headers".into()));
    }
    Ok(header)
}

/// The headers of `data`, without decoding any pixel.
///
/// # Errors
/// [`CodecError::Corrupt`] for headers that do not parse, or a JPEG of other than 8 bits.
pub fn header(data: &[u8]) -> Result<Header, CodecError> {
    with_handle(&DECOMPRESSOR, tj::TJINIT_TJINIT_DECOMPRESS, |h| read_header(h, data))
}

/// Decodes a whole JPEG to interleaved `pixels`, after `accept` has passed its headers (the caller
/// checks the size there, before anything is allocated).
///
/// # Errors
/// What `accept` returns; [`CodecError::Corrupt`] for data that does not decode without a warning.
pub fn decode(
    data: &[u8],
    pixels: Pixels,
    accept: impl FnOnce(&Header) -> Result<(), CodecError>,
) -> Result<(Header, Vec<u8>), CodecError> {
    let mut out = Vec::new();
    let header = decode_into(data, pixels, accept, &mut out)?;
    Ok((header, out))
}

/// Largest decoding kept in this thread's scratch buffer between calls ([`decode_with`]): a 4K
/// RGB frame.
const MAX_SCRATCH: usize = 3840 * 2160 * 3;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// [`decode`], handing the interleaved pixels to `then` from a buffer this thread reuses: a
/// caller that converts them (to planar rows) allocates only its own result, and the pages of
/// the decoder's output are not faulted in again at every frame.
///
/// # Errors
/// As [`decode`].
pub fn decode_with<T>(
    data: &[u8],
    pixels: Pixels,
    accept: impl FnOnce(&Header) -> Result<(), CodecError>,
    then: impl FnOnce(&Header, &[u8]) -> T,
) -> Result<T, CodecError> {
    let mut buf = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let result = decode_into(data, pixels, accept, &mut buf).map(|header| then(&header, &buf));
    if buf.capacity() <= MAX_SCRATCH {
        SCRATCH.with(|s| *s.borrow_mut() = buf);
    }
    result
}

/// Decodes into `out`, resized to the picture.
fn decode_into(
    data: &[u8],
    pixels: Pixels,
    accept: impl FnOnce(&Header) -> Result<(), CodecError>,
    out: &mut Vec<u8>,
) -> Result<Header, CodecError> {
    with_handle(&DECOMPRESSOR, tj::TJINIT_TJINIT_DECOMPRESS, |h| {
        let header = read_header(h, data)?;
        accept(&header)?;
        h.set(tj::TJPARAM_TJPARAM_STOPONWARNING, 1)?;
        h.set(tj::TJPARAM_TJPARAM_FASTDCT, 0)?;
        h.set(tj::TJPARAM_TJPARAM_FASTUPSAMPLE, 1)?;
        h.set(tj::TJPARAM_TJPARAM_SCANLIMIT, SCAN_LIMIT)?;
        let len = header.width.checked_mul(header.height).and_then(|n| n.checked_mul(pixels.channels()));
        let len = len.ok_or_else(|| corrupt(format!("{}x{} overflows", header.width, header.height)))?;
        out.clear();
        out.resize(len, 0);
        // SAFETY: `out` holds width x height pixels of the asked format at the default pitch
        // (pitch 0 = width x channels), which is exactly what the library writes for the header
        // it has just read from the same `data`.
        let rc = unsafe { tj::tj3Decompress8(h.0, data.as_ptr(), data.len() as tj::size_t, out.as_mut_ptr(), 0, pixels.format()) };
        if rc != 0 {
            return Err(corrupt(h.error()));
        }
        Ok(header)
    })
}

/// How [`encode`] codes: baseline Huffman JPEG, accurate integer DCT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// 1-100.
    pub quality: u8,
    /// Chroma subsampling (`TJSAMP_444`, `TJSAMP_420`, ...); grey pixels are always coded grey.
    pub subsampling: i32,
    /// A restart marker every this many MCU rows (0: none).
    pub restart_rows: u16,
}

/// Encodes `width` x `height` interleaved `pixels` as a baseline JPEG.
///
/// # Errors
/// [`CodecError::Quality`] for a quality outside 1-100; [`CodecError::Encode`] for pixels of the
/// wrong length, or a size the format cannot hold (65535 pixels a side).
pub fn encode(data: &[u8], width: usize, height: usize, pixels: Pixels, options: EncodeOptions) -> Result<Vec<u8>, CodecError> {
    encode_with(data, (width, height), pixels, options, |_| Ok(()))
}

/// [`encode`], with `also` setting more of the compressor's parameters last (the tests make
/// arithmetic-coded JPEGs with it, as some encoders write).
pub(super) fn encode_with(
    data: &[u8],
    (width, height): (usize, usize),
    pixels: Pixels,
    options: EncodeOptions,
    also: impl FnOnce(&mut Handle) -> Result<(), CodecError>,
) -> Result<Vec<u8>, CodecError> {
    if !(1..=100).contains(&options.quality) {
        return Err(CodecError::Quality(i64::from(options.quality)));
    }
    let encode_err = |why: String| CodecError::Encode { codec: "JPEG", why };
    let side = |what: &str, v: usize| {
        i32::try_from(v)
            .ok()
            .filter(|&v| (1..=65535).contains(&v))
            .ok_or_else(|| encode_err(format!("a {what} of {v} pixels (1 to 65535)")))
    };
    let (w, h) = (side("width", width)?, side("height", height)?);
    if data.len() != width * height * pixels.channels() {
        return Err(encode_err(format!("{} bytes for {width}x{height}x{}", data.len(), pixels.channels())));
    }
    let subsampling = if pixels == Pixels::Gray { tj::TJSAMP_TJSAMP_GRAY } else { options.subsampling };
    with_handle(&COMPRESSOR, tj::TJINIT_TJINIT_COMPRESS, |c| {
        c.set(tj::TJPARAM_TJPARAM_QUALITY, i32::from(options.quality))?;
        c.set(tj::TJPARAM_TJPARAM_SUBSAMP, subsampling)?;
        c.set(tj::TJPARAM_TJPARAM_FASTDCT, 0)?;
        c.set(tj::TJPARAM_TJPARAM_OPTIMIZE, 0)?;
        c.set(tj::TJPARAM_TJPARAM_PROGRESSIVE, 0)?;
        c.set(tj::TJPARAM_TJPARAM_ARITHMETIC, 0)?;
        c.set(tj::TJPARAM_TJPARAM_RESTARTROWS, i32::from(options.restart_rows))?;
        also(c)?;
        // Into a buffer of the library's worst-case size, so that it never reallocates ours.
        c.set(tj::TJPARAM_TJPARAM_NOREALLOC, 1)?;
        // SAFETY: pure arithmetic on its arguments.
        let bound = unsafe { tj::tj3JPEGBufSize(w, h, subsampling) };
        let bound =
            usize::try_from(bound).ok().filter(|&b| b > 0).ok_or_else(|| encode_err(format!("{width}x{height}: no buffer size")))?;
        let mut out = vec![0u8; bound];
        let mut buf = out.as_mut_ptr();
        let mut size = bound as tj::size_t;
        // SAFETY: `data` holds h rows of w pixels at the default pitch; `buf` points to `size`
        // writable bytes, which NOREALLOC keeps the library within.
        let rc = unsafe { tj::tj3Compress8(c.0, data.as_ptr(), w, 0, h, pixels.format(), &mut buf, &mut size) };
        if rc != 0 {
            return Err(encode_err(c.error()));
        }
        out.truncate(usize::try_from(size).unwrap_or(0).min(bound));
        Ok(out)
    })
}

/// Rows of one MCU row of a JPEG of `subsampling` (`TJSAMP_*`), as libjpeg-turbo lays it out;
/// `None` for an unknown subsampling.
pub fn mcu_height(subsampling: i32) -> Option<usize> {
    match subsampling {
        tj::TJSAMP_TJSAMP_444 | tj::TJSAMP_TJSAMP_422 | tj::TJSAMP_TJSAMP_GRAY | tj::TJSAMP_TJSAMP_411 => Some(8),
        tj::TJSAMP_TJSAMP_420 | tj::TJSAMP_TJSAMP_440 => Some(16),
        tj::TJSAMP_TJSAMP_441 => Some(32),
        _ => None,
    }
}

/// Rewrites a JPEG with a restart marker after every MCU row, without touching its quantised
/// coefficients (libjpeg-turbo's lossless transformation, what `jpegtran -restart 1` does), so
/// that it decodes to the very pixels of `data`. The result is baseline and Huffman-coded
/// whatever `data` was (a progressive or arithmetic-coded JPEG comes out sequential, so it can
/// be cut by rows too), with the standard Huffman tables, and without `data`'s application
/// markers (Exif, ICC: the server needs the pixels only).
///
/// # Errors
/// [`CodecError::Corrupt`] for data that does not read without a warning (truncated, damaged),
/// or a JPEG of other than 8 bits.
pub fn restart_every_mcu_row(data: &[u8]) -> Result<Vec<u8>, CodecError> {
    with_handle(&TRANSFORMER, tj::TJINIT_TJINIT_TRANSFORM, |h| {
        read_header(h, data)?;
        h.set(tj::TJPARAM_TJPARAM_STOPONWARNING, 1)?;
        h.set(tj::TJPARAM_TJPARAM_SCANLIMIT, SCAN_LIMIT)?;
        h.set(tj::TJPARAM_TJPARAM_OPTIMIZE, 0)?;
        h.set(tj::TJPARAM_TJPARAM_PROGRESSIVE, 0)?;
        h.set(tj::TJPARAM_TJPARAM_ARITHMETIC, 0)?;
        h.set(tj::TJPARAM_TJPARAM_RESTARTROWS, 1)?;
        h.set(tj::TJPARAM_TJPARAM_NOREALLOC, 1)?;
        // SAFETY: an all-zero tjtransform is the identity (TJXOP_NONE, no crop, no filter).
        let mut transform: tj::tjtransform = unsafe { std::mem::zeroed() };
        transform.op = tj::TJXOP_TJXOP_NONE as i32;
        transform.options = tj::TJXOPT_COPYNONE as i32;
        // SAFETY: the handle holds the header just read; the transform is a live struct.
        let bound = unsafe { tj::tj3TransformBufSize(h.0, &transform) };
        // Restart markers add two bytes and at most one byte of padding an MCU row.
        let bound = usize::try_from(bound).unwrap_or(0).max(data.len() * 2 + 4096);
        let mut out = vec![0u8; bound];
        let mut buf = out.as_mut_ptr();
        let mut size = bound as tj::size_t;
        // SAFETY: `data` is a live slice of the length passed; `buf` points to `size` writable
        // bytes, which NOREALLOC keeps the library within; one transform, one buffer.
        let rc = unsafe { tj::tj3Transform(h.0, data.as_ptr(), data.len() as tj::size_t, 1, &mut buf, &mut size, &transform) };
        if rc != 0 {
            return Err(corrupt(h.error()));
        }
        out.truncate(usize::try_from(size).unwrap_or(0).min(bound));
        Ok(out)
    })
}

#[cfg(test)]
#[path = "turbo/tests.rs"]
mod tests;
