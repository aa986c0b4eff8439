//! Encoding: frames to bytes. Encoding validates with the same rules as decoding, so every frame
//! that encodes also decodes, to an equal frame.

use super::{
    BandHeader, FRAME_MAGIC, Frame, FrameKind, HEADER_LEN, Hello, MAX_PROFILE_LEN, MAX_TEXT_LEN, PROTOCOL_VERSION, Reject, Start, rules,
};
use crate::{Digest, Error, MAX_ID_LEN, Result, validate_id, validate_robot_id};

impl Frame {
    /// Encodes the frame into a new buffer.
    ///
    /// # Errors
    /// The frame breaks a rule the decoder enforces (see [`Frame::encode_into`]).
    ///
    /// ```
    /// use lop_msgs::protocol::{decode, Done, DoneStats, Frame};
    /// let f = Frame::Done(Done { inference_id: 7, stats: DoneStats::default() });
    /// let bytes = f.encode().unwrap();
    /// assert_eq!(decode(&bytes).unwrap(), f);
    /// ```
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.encode_into(&mut buf)?;
        Ok(buf)
    }

    /// Appends the encoded frame to `buf`. On error `buf` is left as it was.
    ///
    /// # Errors
    /// - [`Error::InvalidId`] / [`Error::TextTooLong`]: a Hello id is not a valid id, or a text is
    ///   longer than [`MAX_TEXT_LEN`].
    /// - [`Error::RankTooLarge`], [`Error::RowAxis`], [`Error::EmptyRows`], [`Error::RowsMismatch`],
    ///   [`Error::ShapeOverflow`], [`Error::PayloadSize`]: an inconsistent band.
    /// - [`Error::TooLarge`]: the body would not fit the 32-bit length field.
    pub fn encode_into(&self, buf: &mut Vec<u8>) -> Result<()> {
        self.validate()?;
        let start = buf.len();
        put_header(buf, self.kind(), 0);
        match self {
            Frame::Hello(h) => put_hello(buf, h),
            Frame::Welcome(w) => {
                put_digest(buf, &w.server_profile_hash);
                put_digest(buf, &w.table_hash);
                buf.extend_from_slice(&(w.server_profile.len() as u32).to_le_bytes());
                buf.extend_from_slice(&w.server_profile);
            }
            Frame::Reject(r) => put_reject(buf, r),
            Frame::Start(s) => put_start(buf, s),
            Frame::Band(b) => {
                put_band_header(buf, &b.header);
                buf.extend_from_slice(&b.payload);
            }
            Frame::Done(d) => {
                buf.extend_from_slice(&d.inference_id.to_le_bytes());
                let s = &d.stats;
                for v in [s.server_compute_ns, s.server_wait_ns, s.bytes_received, s.bytes_sent] {
                    buf.extend_from_slice(&v.to_le_bytes());
                }
                buf.extend_from_slice(&s.bands_received.to_le_bytes());
                buf.extend_from_slice(&s.bands_sent.to_le_bytes());
                buf.extend_from_slice(&s.upload_ns.to_le_bytes());
            }
            Frame::Error(e) => {
                buf.extend_from_slice(&e.inference_id.to_le_bytes());
                buf.extend_from_slice(&(e.code as u16).to_le_bytes());
                put_str(buf, &e.text);
            }
            Frame::Forward(f) => {
                buf.extend_from_slice(&f.inference_id.to_le_bytes());
                put_str(buf, &f.to);
                put_path(buf, &f.path);
            }
            Frame::Cancel(c) => buf.extend_from_slice(&c.inference_id.to_le_bytes()),
        }
        let body_len = buf.len() - start - HEADER_LEN;
        let Ok(body_len) = u32::try_from(body_len) else {
            buf.truncate(start);
            return Err(Error::TooLarge { len: (body_len + HEADER_LEN) as u64, limit: u64::from(u32::MAX) });
        };
        buf[start + 8..start + HEADER_LEN].copy_from_slice(&body_len.to_le_bytes());
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        match self {
            Frame::Hello(h) => {
                validate_robot_id(&h.robot_id)?;
                validate_id(&h.model_id)?;
                rules::blob_len("robot_profile", &h.robot_profile, MAX_PROFILE_LEN)?;
                rules::rank("input shape", &h.input_shape)
            }
            Frame::Reject(r) => {
                rules::text_len("text", &r.text, MAX_TEXT_LEN)?;
                rules::blob_len("server_profile", &r.server_profile, MAX_PROFILE_LEN)
            }
            Frame::Error(e) => rules::text_len("text", &e.text, MAX_TEXT_LEN),
            Frame::Band(b) => rules::band_payload(&b.header, b.payload.len()),
            Frame::Welcome(w) => rules::blob_len("server_profile", &w.server_profile, MAX_PROFILE_LEN),
            Frame::Start(s) => rules::path(&s.path),
            Frame::Forward(f) => {
                validate_id(&f.to)?;
                rules::path(&f.path)?;
                if f.path.contains(&f.to) {
                    return Err(Error::ForwardLoop { to: f.to.clone() });
                }
                Ok(())
            }
            Frame::Done(_) | Frame::Cancel(_) => Ok(()),
        }
    }
}

/// Appends the frame header and the band header of a Band frame whose payload has `payload_len`
/// bytes, without the payload. Sending these bytes immediately followed by the payload bytes is
/// exactly [`Frame::Band`]'s encoding, so the runtime can hand the header and the tensor's own
/// buffer to the link as two slices (Zenoh `ZBytes` from several slices, `write_vectored`) and
/// never concatenate or copy the payload. On error `buf` is left as it was.
///
/// # Errors
/// As [`Frame::encode_into`] for a band: the header is inconsistent, `payload_len` is not
/// `product(shape) * dtype size`, or the frame would exceed the 32-bit length field.
///
/// ```
/// use lop_msgs::protocol::{decode, encode_band_header, Band, BandHeader, DType, Frame};
/// let header = BandHeader { inference_id: 1, tensor_id: 3, row_start: 4, row_end: 6, row_axis: 2, dtype: DType::U8, shape: vec![1, 1, 2, 2], coding: Default::default() };
/// let payload = [1u8, 2, 3, 4];
/// let mut wire = Vec::new();
/// encode_band_header(&header, payload.len(), &mut wire).unwrap();
/// wire.extend_from_slice(&payload); // the link would send the two slices back to back
/// assert_eq!(decode(&wire).unwrap(), Frame::Band(Band { header, payload: payload.to_vec() }));
/// ```
pub fn encode_band_header(header: &BandHeader, payload_len: usize, buf: &mut Vec<u8>) -> Result<()> {
    rules::band_payload(header, payload_len)?;
    let body_len = 24 + 4 * header.shape.len() as u64 + payload_len as u64;
    let Ok(body_len) = u32::try_from(body_len) else {
        return Err(Error::TooLarge { len: body_len + HEADER_LEN as u64, limit: u64::from(u32::MAX) });
    };
    put_header(buf, FrameKind::Band, body_len);
    put_band_header(buf, header);
    Ok(())
}

fn put_header(buf: &mut Vec<u8>, kind: FrameKind, body_len: u32) {
    buf.extend_from_slice(&FRAME_MAGIC);
    buf.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    buf.push(kind as u8);
    buf.push(0);
    buf.extend_from_slice(&body_len.to_le_bytes());
}

fn put_digest(buf: &mut Vec<u8>, d: &Digest) {
    buf.extend_from_slice(&d.0);
}

/// Callers have checked `s.len() <= MAX_TEXT_LEN` (or `MAX_ID_LEN`), both below `u16::MAX`.
fn put_str(buf: &mut Vec<u8>, s: &str) {
    const _: () = assert!(MAX_TEXT_LEN <= u16::MAX as usize);
    const _: () = assert!(MAX_ID_LEN <= u16::MAX as usize);
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&s.as_bytes()[..usize::from(len)]);
}

fn put_dims(buf: &mut Vec<u8>, dims: &[u32]) {
    for d in dims {
        buf.extend_from_slice(&d.to_le_bytes());
    }
}

fn put_hello(buf: &mut Vec<u8>, h: &Hello) {
    put_digest(buf, &h.model_sha256);
    put_digest(buf, &h.robot_profile_hash);
    put_digest(buf, &h.planner_hash);
    buf.push(h.input_dtype as u8);
    // Rank checked by `validate` (<= MAX_RANK).
    buf.push(h.input_shape.len() as u8);
    put_dims(buf, &h.input_shape);
    put_str(buf, &h.robot_id);
    put_str(buf, &h.model_id);
    // Length checked by `validate` (<= MAX_PROFILE_LEN).
    buf.extend_from_slice(&(h.robot_profile.len() as u32).to_le_bytes());
    buf.extend_from_slice(&h.robot_profile);
}

fn put_reject(buf: &mut Vec<u8>, r: &Reject) {
    buf.push(r.reason as u8);
    put_str(buf, &r.text);
    // Length checked by `validate` (<= MAX_PROFILE_LEN).
    buf.extend_from_slice(&(r.server_profile.len() as u32).to_le_bytes());
    buf.extend_from_slice(&r.server_profile);
}

fn put_start(buf: &mut Vec<u8>, s: &Start) {
    buf.extend_from_slice(&s.inference_id.to_le_bytes());
    buf.extend_from_slice(&s.input_stamp_ns.to_le_bytes());
    buf.extend_from_slice(&s.deadline_ns.to_le_bytes());
    buf.extend_from_slice(&s.due_ns.to_le_bytes());
    buf.extend_from_slice(&s.bucket.to_le_bytes());
    put_digest(buf, &s.plan_hash);
    put_path(buf, &s.path);
}

/// Callers have checked the path (`rules::path`): at most `MAX_PATH` valid ids.
fn put_path(buf: &mut Vec<u8>, path: &[String]) {
    buf.push(path.len() as u8);
    for id in path {
        put_str(buf, id);
    }
}

fn put_band_header(buf: &mut Vec<u8>, h: &BandHeader) {
    buf.extend_from_slice(&h.inference_id.to_le_bytes());
    buf.extend_from_slice(&h.tensor_id.to_le_bytes());
    buf.extend_from_slice(&h.row_start.to_le_bytes());
    buf.extend_from_slice(&h.row_end.to_le_bytes());
    buf.push(h.row_axis);
    buf.push(h.dtype as u8);
    // Rank checked by `rules::band_payload_len` (<= MAX_RANK).
    buf.push(h.shape.len() as u8);
    buf.push(h.coding as u8);
    put_dims(buf, &h.shape);
}
