//! Decoding: bytes to frames, in two steps as in mini-redis: [`Limits::check`] reads only the
//! header and says whether a whole frame is there; [`Limits::decode`] parses and validates it.
//! Nothing here panics or allocates more than the input's length implies.

use super::{
    Band, BandHeader, Cancel, Coding, DType, Done, DoneStats, ErrorCode, ErrorFrame, FRAME_MAGIC, Forward, Frame, FrameKind, HEADER_LEN,
    Hello, MAX_PATH, MAX_PROFILE_LEN, MAX_RANK, MAX_TEXT_LEN, PROTOCOL_VERSION, Reject, RejectReason, Start, Welcome, rules,
};
use crate::{Digest, Error, MAX_ID_LEN, Result, validate_id, validate_robot_id};

/// Default [`Limits::max_frame_len`]: 64 MiB, above a 64 x 224 x 224 f32 activation (12.8 MB).
pub const DEFAULT_MAX_FRAME_LEN: u32 = 64 << 20;

/// Receiver-side limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest accepted frame, header included. A header declaring more is rejected as
    /// [`Error::TooLarge`] before the body arrives.
    pub max_frame_len: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_frame_len: DEFAULT_MAX_FRAME_LEN }
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Protocol version (always [`PROTOCOL_VERSION`] once parsed).
    pub version: u16,
    /// Frame kind.
    pub kind: FrameKind,
    /// Body length in bytes (after the 12-byte header).
    pub body_len: u32,
}

impl Header {
    /// Total frame length, header included.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.body_len as usize
    }
}

/// [`Limits::decode`] with [`Limits::default`].
///
/// # Errors
/// See [`Limits::decode`].
pub fn decode(buf: &[u8]) -> Result<Frame> {
    Limits::default().decode(buf)
}

/// [`Limits::check`] with [`Limits::default`].
///
/// # Errors
/// See [`Limits::check`].
pub fn check(buf: &[u8]) -> Result<usize> {
    Limits::default().check(buf)
}

impl Limits {
    /// Parses the header at the start of `buf`. Bytes present are checked as they come: a wrong
    /// magic byte is [`Error::BadMagic`] even before the header is complete, so garbage fails fast
    /// while any prefix of a valid frame is [`Error::Incomplete`].
    ///
    /// # Errors
    /// [`Error::Incomplete`], [`Error::BadMagic`], [`Error::UnsupportedVersion`],
    /// [`Error::UnknownKind`], [`Error::Reserved`] (flags byte), [`Error::TooLarge`].
    pub fn header(&self, buf: &[u8]) -> Result<Header> {
        let n = buf.len().min(4);
        if buf[..n] != FRAME_MAGIC[..n] {
            return Err(Error::BadMagic { found: buf[..n].to_vec(), expected: FRAME_MAGIC });
        }
        let incomplete = || Error::Incomplete { needed: HEADER_LEN - buf.len() };
        let (Some(&v0), Some(&v1)) = (buf.get(4), buf.get(5)) else { return Err(incomplete()) };
        let version = u16::from_le_bytes([v0, v1]);
        if version != PROTOCOL_VERSION {
            return Err(Error::UnsupportedVersion { found: version, supported: PROTOCOL_VERSION });
        }
        let Some(&k) = buf.get(6) else { return Err(incomplete()) };
        let kind = FrameKind::from_u8(k).ok_or(Error::UnknownKind { kind: k })?;
        let Some(&flags) = buf.get(7) else { return Err(incomplete()) };
        if flags != 0 {
            return Err(Error::Reserved { field: "flags", value: flags });
        }
        let Some(len) = buf.get(8..HEADER_LEN) else { return Err(incomplete()) };
        let body_len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]);
        let total = HEADER_LEN as u64 + u64::from(body_len);
        if total > u64::from(self.max_frame_len) {
            return Err(Error::TooLarge { len: total, limit: u64::from(self.max_frame_len) });
        }
        Ok(Header { version, kind, body_len })
    }

    /// Checks whether `buf` starts with a whole frame and returns its length, without parsing the
    /// body (for stream transports: read until this succeeds, then [`Limits::decode`] that many
    /// bytes).
    ///
    /// # Errors
    /// As [`Limits::header`]; [`Error::Incomplete`] while the body is not all there.
    pub fn check(&self, buf: &[u8]) -> Result<usize> {
        let h = self.header(buf)?;
        let len = h.frame_len();
        if buf.len() < len {
            return Err(Error::Incomplete { needed: len - buf.len() });
        }
        Ok(len)
    }

    /// Decodes `buf`, which must hold exactly one frame.
    ///
    /// # Errors
    /// [`Error::Incomplete`] when `buf` is a prefix of a frame; [`Error::TrailingBytes`] when
    /// bytes follow the frame; any malformed-frame variant of [`Error`] otherwise.
    pub fn decode(&self, buf: &[u8]) -> Result<Frame> {
        let (frame, used) = self.decode_prefix(buf)?;
        if used != buf.len() {
            return Err(Error::TrailingBytes { extra: buf.len() - used });
        }
        Ok(frame)
    }

    /// Decodes the frame at the start of `buf` and returns it with its length; bytes after it are
    /// left alone (for stream transports).
    ///
    /// # Errors
    /// As [`Limits::decode`], except that trailing bytes are not an error.
    pub fn decode_prefix(&self, buf: &[u8]) -> Result<(Frame, usize)> {
        let len = self.check(buf)?;
        let h = self.header(buf)?;
        let body = &buf[HEADER_LEN..len];
        let mut r = Reader { buf: body, pos: 0, kind: h.kind };
        let frame = match h.kind {
            FrameKind::Hello => Frame::Hello(parse_hello(&mut r)?),
            FrameKind::Welcome => Frame::Welcome(Welcome {
                server_profile_hash: r.digest("server_profile_hash")?,
                table_hash: r.digest("table_hash")?,
                server_profile: r.blob32("server_profile", MAX_PROFILE_LEN)?.to_vec(),
            }),
            FrameKind::Reject => {
                let code = r.u8("reason")?;
                let reason = RejectReason::from_u8(code).ok_or(Error::UnknownRejectReason { code })?;
                let text = r.str16("text", MAX_TEXT_LEN)?;
                Frame::Reject(Reject { reason, text, server_profile: r.blob32("server_profile", MAX_PROFILE_LEN)?.to_vec() })
            }
            FrameKind::Start => Frame::Start(Start {
                inference_id: r.u64("inference_id")?,
                input_stamp_ns: r.u64("input_stamp_ns")?,
                deadline_ns: r.u64("deadline_ns")?,
                due_ns: r.u64("due_ns")?,
                bucket: r.u32("bucket")?,
                plan_hash: r.digest("plan_hash")?,
                path: r.path()?,
            }),
            FrameKind::Band => {
                let (header, payload) = parse_band(&mut r)?;
                Frame::Band(Band { header, payload: payload.to_vec() })
            }
            FrameKind::Done => Frame::Done(Done {
                inference_id: r.u64("inference_id")?,
                stats: DoneStats {
                    server_compute_ns: r.u64("server_compute_ns")?,
                    server_wait_ns: r.u64("server_wait_ns")?,
                    bytes_received: r.u64("bytes_received")?,
                    bytes_sent: r.u64("bytes_sent")?,
                    bands_received: r.u32("bands_received")?,
                    bands_sent: r.u32("bands_sent")?,
                    upload_ns: r.u64("upload_ns")?,
                },
            }),
            FrameKind::Error => {
                let inference_id = r.u64("inference_id")?;
                let v = r.u16("code")?;
                let code = ErrorCode::from_u16(v).ok_or(Error::UnknownErrorCode { code: v })?;
                Frame::Error(ErrorFrame { inference_id, code, text: r.str16("text", MAX_TEXT_LEN)? })
            }
            FrameKind::Forward => {
                let inference_id = r.u64("inference_id")?;
                let to = r.str16("to", MAX_ID_LEN)?;
                validate_id(&to)?;
                let path = r.path()?;
                if path.contains(&to) {
                    return Err(Error::ForwardLoop { to });
                }
                Frame::Forward(Forward { inference_id, to, path })
            }
            FrameKind::Cancel => Frame::Cancel(Cancel { inference_id: r.u64("inference_id")? }),
        };
        r.finish()?;
        Ok((frame, len))
    }

    /// Decodes a Band frame without copying its payload: the payload is a slice of `buf`. `buf`
    /// must hold exactly one frame.
    ///
    /// # Errors
    /// As [`Limits::decode`]; a valid frame of another kind is [`Error::UnknownKind`].
    pub fn decode_band<'a>(&self, buf: &'a [u8]) -> Result<(BandHeader, &'a [u8])> {
        let len = self.check(buf)?;
        let h = self.header(buf)?;
        if h.kind != FrameKind::Band {
            return Err(Error::UnknownKind { kind: h.kind as u8 });
        }
        if len != buf.len() {
            return Err(Error::TrailingBytes { extra: buf.len() - len });
        }
        let mut r = Reader { buf: &buf[HEADER_LEN..len], pos: 0, kind: h.kind };
        let out = parse_band(&mut r)?;
        r.finish()?;
        Ok(out)
    }
}

fn parse_hello(r: &mut Reader<'_>) -> Result<Hello> {
    let model_sha256 = r.digest("model_sha256")?;
    let robot_profile_hash = r.digest("robot_profile_hash")?;
    let planner_hash = r.digest("planner_hash")?;
    let input_dtype = r.dtype()?;
    let input_shape = r.dims("input_shape")?;
    let robot_id = r.str16("robot_id", MAX_ID_LEN)?;
    validate_robot_id(&robot_id)?;
    let model_id = r.str16("model_id", MAX_ID_LEN)?;
    validate_id(&model_id)?;
    let robot_profile = r.blob32("robot_profile", MAX_PROFILE_LEN)?.to_vec();
    Ok(Hello { robot_id, model_id, model_sha256, robot_profile_hash, planner_hash, input_dtype, input_shape, robot_profile })
}

fn parse_band<'a>(r: &mut Reader<'a>) -> Result<(BandHeader, &'a [u8])> {
    let inference_id = r.u64("inference_id")?;
    let tensor_id = r.u32("tensor_id")?;
    let row_start = r.u32("row_start")?;
    let row_end = r.u32("row_end")?;
    let row_axis = r.u8("row_axis")?;
    let dtype = r.dtype()?;
    let rank = r.u8("rank")?;
    let code = r.u8("coding")?;
    let coding = Coding::from_u8(code).ok_or(Error::UnknownCoding { code })?;
    let shape = r.dims_n("shape", rank)?;
    let header = BandHeader { inference_id, tensor_id, row_start, row_end, row_axis, dtype, shape, coding };
    let payload = r.rest();
    rules::band_payload(&header, payload.len())?;
    Ok((header, payload))
}

/// Cursor over a frame body; every read is bounds-checked against the declared body.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    kind: FrameKind,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(Error::BodyTooShort { kind: self.kind, field, body_len: self.buf.len() });
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8> {
        Ok(self.array::<1>(field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array(field)?))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(field)?))
    }

    fn u64(&mut self, field: &'static str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(field)?))
    }

    fn digest(&mut self, field: &'static str) -> Result<Digest> {
        Ok(Digest(self.array(field)?))
    }

    fn dtype(&mut self) -> Result<DType> {
        let code = self.u8("dtype")?;
        DType::from_u8(code).ok_or(Error::UnknownDType { code })
    }

    /// A rank byte followed by that many `u32` dims.
    fn dims(&mut self, field: &'static str) -> Result<Vec<u32>> {
        let rank = self.u8(field)?;
        self.dims_n(field, rank)
    }

    fn dims_n(&mut self, field: &'static str, rank: u8) -> Result<Vec<u32>> {
        let rank = usize::from(rank);
        if rank > MAX_RANK {
            return Err(Error::RankTooLarge { field, rank, max: MAX_RANK });
        }
        let bytes = self.take(4 * rank, field)?;
        Ok(bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }

    /// A `u16` byte length followed by UTF-8 text of at most `max` bytes.
    fn str16(&mut self, field: &'static str, max: usize) -> Result<String> {
        let len = usize::from(self.u16(field)?);
        if len > max {
            return Err(Error::TextTooLong { field, len, max });
        }
        let bytes = self.take(len, field)?;
        let s = std::str::from_utf8(bytes).map_err(|_| Error::NotUtf8 { field })?;
        Ok(s.to_string())
    }

    /// A `u32` byte length followed by at most `max` bytes.
    fn blob32(&mut self, field: &'static str, max: usize) -> Result<&'a [u8]> {
        let len = self.u32(field)? as usize;
        if len > max {
            return Err(Error::TextTooLong { field, len, max });
        }
        self.take(len, field)
    }

    /// A forwarding path: a u8 count, then that many str16 ids (checked by `rules::path`).
    fn path(&mut self) -> Result<Vec<String>> {
        let n = usize::from(self.u8("path length")?);
        if n > MAX_PATH {
            return Err(Error::PathTooLong { len: n, max: MAX_PATH });
        }
        let path = (0..n).map(|_| self.str16("path", MAX_ID_LEN)).collect::<Result<Vec<_>>>()?;
        rules::path(&path)?;
        Ok(path)
    }

    fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    fn finish(&self) -> Result<()> {
        if self.pos != self.buf.len() {
            return Err(Error::BodyTooLong { kind: self.kind, extra: self.buf.len() - self.pos });
        }
        Ok(())
    }
}
