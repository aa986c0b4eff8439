//! Validity rules shared by the encoder and the decoder, so that whatever encodes also decodes.

use super::{BandHeader, Coding, DType, MAX_PATH, MAX_RANK};
use crate::{Error, Result, validate_id};

/// Checks a forwarding path: at most [`MAX_PATH`] edges, each a valid id, none twice.
pub(super) fn path(path: &[String]) -> Result<()> {
    if path.len() > MAX_PATH {
        return Err(Error::PathTooLong { len: path.len(), max: MAX_PATH });
    }
    for (i, id) in path.iter().enumerate() {
        validate_id(id)?;
        if path[..i].contains(id) {
            return Err(Error::ForwardLoop { to: id.clone() });
        }
    }
    Ok(())
}

/// Checks a text field's length (bytes).
pub(super) fn text_len(field: &'static str, s: &str, max: usize) -> Result<()> {
    if s.len() > max {
        return Err(Error::TextTooLong { field, len: s.len(), max });
    }
    Ok(())
}

/// Checks a byte field's length.
pub(super) fn blob_len(field: &'static str, b: &[u8], max: usize) -> Result<()> {
    if b.len() > max {
        return Err(Error::TextTooLong { field, len: b.len(), max });
    }
    Ok(())
}

/// Checks a shape's rank.
pub(super) fn rank(field: &'static str, shape: &[u32]) -> Result<()> {
    if shape.len() > MAX_RANK {
        return Err(Error::RankTooLarge { field, rank: shape.len(), max: MAX_RANK });
    }
    Ok(())
}

/// Validates a band header and returns the payload length it implies: the rank is at most
/// [`MAX_RANK`], `row_axis < rank`, `row_start < row_end` (zero-row bands are rejected) and
/// `row_end - row_start == shape[row_axis]`; `product(shape) * dtype size` must fit in `u64`.
pub(super) fn band_payload_len(h: &BandHeader) -> Result<u64> {
    rank("band shape", &h.shape)?;
    let Some(&shape_rows) = h.shape.get(usize::from(h.row_axis)) else {
        return Err(Error::RowAxis { row_axis: h.row_axis, shape: h.shape.clone() });
    };
    if h.row_start >= h.row_end {
        return Err(Error::EmptyRows { start: h.row_start, end: h.row_end });
    }
    if h.row_end - h.row_start != shape_rows {
        return Err(Error::RowsMismatch { start: h.row_start, end: h.row_end, row_axis: h.row_axis, shape: h.shape.clone(), shape_rows });
    }
    h.shape
        .iter()
        .try_fold(h.dtype.size(), |acc, &d| acc.checked_mul(u64::from(d)))
        .ok_or_else(|| Error::ShapeOverflow { shape: h.shape.clone() })
}

/// Bytes of a coded band's payload before its code unit: the digest.
pub const CODED_DIGEST_LEN: usize = 8;

/// Checks that a payload has the length the header implies: exactly `product(shape) * dtype
/// size` for raw rows; for coded rows (uint8 only) the digest and at least one byte.
pub(super) fn band_payload(h: &BandHeader, payload_len: usize) -> Result<()> {
    let expected = band_payload_len(h)?;
    let found = payload_len as u64;
    if h.coding != Coding::Raw {
        if h.dtype != DType::U8 {
            return Err(Error::CodedDtype { dtype: h.dtype as u8 });
        }
        if payload_len <= CODED_DIGEST_LEN {
            return Err(Error::PayloadSize { expected: CODED_DIGEST_LEN as u64 + 1, found, shape: h.shape.clone() });
        }
        return Ok(());
    }
    if expected != found {
        return Err(Error::PayloadSize { expected, found, shape: h.shape.clone() });
    }
    Ok(())
}
