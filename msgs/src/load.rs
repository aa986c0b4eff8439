//! An edge server's load report (DESIGN.md section 10): what a robot needs to route a frame to
//! a server of the fleet. Published at 10 Hz on `lop/v1/edge/<edge>/load`; pure encode/decode.
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `LOPL` |
//! | 2 | format version (LE), [`LOAD_VERSION`] |
//! | 2 | reserved, 0 |
//! | 1 + n | edge id (length byte, ASCII id) |
//! | 8 | sequence number (LE), one more per report |
//! | 4 | utilisation over the last report period, f32 in [0, 1] |
//! | 8 | GPU memory free, bytes (`u64::MAX`: unknown, a CPU server) |
//! | 1 | model count (at most [`MAX_MODELS`]) |
//! | per model | id (length byte, ASCII id), queued compute seconds (f32), idle goodput per second (f32), server seconds per inference (f32), in-flight inferences (u16), warm (u8: 0 or 1) |
//!
//! Decoding checks everything (ids, finite non-negative numbers, no trailing bytes), so a
//! robot can count and ignore a malformed report.

use crate::{Error, Result, validate_id};

/// The first four bytes of a load report.
pub const LOAD_MAGIC: [u8; 4] = *b"LOPL";
/// The format version this crate writes and reads.
pub const LOAD_VERSION: u16 = 1;
/// Most models one report describes.
pub const MAX_MODELS: usize = 64;
/// Longest report: the fixed part plus [`MAX_MODELS`] entries with 64-byte ids.
pub const MAX_LOAD_LEN: usize = 4 + 2 + 2 + 65 + 8 + 4 + 8 + 1 + MAX_MODELS * (65 + 4 + 4 + 4 + 2 + 1);

/// One model's load on an edge.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelLoad {
    /// The model id robots ask for.
    pub model: String,
    /// Seconds of compute queued for this model (in-flight inferences' remaining work).
    pub queued_s: f32,
    /// Further inferences per second the server could take for this model now.
    pub idle_goodput: f32,
    /// Measured server seconds per inference (its recent mean).
    pub server_s: f32,
    /// Inferences in flight.
    pub in_flight: u16,
    /// Whether the model is loaded and ready.
    pub warm: bool,
}

/// An edge server's load report.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeLoad {
    /// The edge's id (also the key's chunk).
    pub edge: String,
    /// Report number; a robot ignores reports older than the last it saw.
    pub seq: u64,
    /// Busy share of the last report period, 0 to 1.
    pub utilisation: f32,
    /// GPU memory free, bytes; `None` when unknown.
    pub gpu_free_bytes: Option<u64>,
    /// Per model served.
    pub models: Vec<ModelLoad>,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::BadLoad { reason: reason.into() }
}

fn check_number(field: &str, v: f32) -> Result<()> {
    if v.is_finite() && v >= 0.0 { Ok(()) } else { Err(bad(format!("{field} = {v} must be finite and >= 0"))) }
}

impl EdgeLoad {
    /// Checks ids, counts and numbers.
    ///
    /// # Errors
    /// [`Error::InvalidId`] or [`Error::BadLoad`].
    pub fn validate(&self) -> Result<()> {
        validate_id(&self.edge)?;
        if self.models.len() > MAX_MODELS {
            return Err(bad(format!("{} models, at most {MAX_MODELS}", self.models.len())));
        }
        check_number("utilisation", self.utilisation)?;
        if self.utilisation > 1.0 {
            return Err(bad(format!("utilisation {} above 1", self.utilisation)));
        }
        for m in &self.models {
            validate_id(&m.model)?;
            check_number("queued_s", m.queued_s)?;
            check_number("idle_goodput", m.idle_goodput)?;
            check_number("server_s", m.server_s)?;
        }
        Ok(())
    }

    /// The report's bytes.
    ///
    /// # Errors
    /// As [`EdgeLoad::validate`].
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.validate()?;
        let mut b = Vec::with_capacity(64 + self.models.len() * 40);
        b.extend_from_slice(&LOAD_MAGIC);
        b.extend_from_slice(&LOAD_VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        put_id(&mut b, &self.edge);
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&self.utilisation.to_le_bytes());
        b.extend_from_slice(&self.gpu_free_bytes.unwrap_or(u64::MAX).to_le_bytes());
        b.push(self.models.len() as u8);
        for m in &self.models {
            put_id(&mut b, &m.model);
            for v in [m.queued_s, m.idle_goodput, m.server_s] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&m.in_flight.to_le_bytes());
            b.push(u8::from(m.warm));
        }
        Ok(b)
    }

    /// Reads a report.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::TooLarge`],
    /// [`Error::InvalidId`] or [`Error::BadLoad`] (truncated, trailing bytes, bad numbers).
    pub fn decode(buf: &[u8]) -> Result<EdgeLoad> {
        if buf.len() > MAX_LOAD_LEN {
            return Err(Error::TooLarge { len: buf.len() as u64, limit: MAX_LOAD_LEN as u64 });
        }
        let mut r = Cursor { buf, at: 0 };
        let magic: [u8; 4] = r.array("magic")?;
        if magic != LOAD_MAGIC {
            return Err(Error::BadMagic { found: magic.to_vec(), expected: LOAD_MAGIC });
        }
        let version = u16::from_le_bytes(r.array("version")?);
        if version != LOAD_VERSION {
            return Err(Error::UnsupportedVersion { found: version, supported: LOAD_VERSION });
        }
        if u16::from_le_bytes(r.array("reserved")?) != 0 {
            return Err(bad("reserved bytes are not 0"));
        }
        let edge = r.id("edge")?;
        let seq = u64::from_le_bytes(r.array("seq")?);
        let utilisation = f32::from_le_bytes(r.array("utilisation")?);
        let gpu = u64::from_le_bytes(r.array("gpu_free_bytes")?);
        let n = r.array::<1>("model count")?[0] as usize;
        if n > MAX_MODELS {
            return Err(bad(format!("{n} models, at most {MAX_MODELS}")));
        }
        let mut models = Vec::with_capacity(n);
        for _ in 0..n {
            let model = r.id("model")?;
            let queued_s = f32::from_le_bytes(r.array("queued_s")?);
            let idle_goodput = f32::from_le_bytes(r.array("idle_goodput")?);
            let server_s = f32::from_le_bytes(r.array("server_s")?);
            let in_flight = u16::from_le_bytes(r.array("in_flight")?);
            let warm = match r.array::<1>("warm")?[0] {
                0 => false,
                1 => true,
                v => return Err(bad(format!("warm byte {v}, must be 0 or 1"))),
            };
            models.push(ModelLoad { model, queued_s, idle_goodput, server_s, in_flight, warm });
        }
        if r.at != buf.len() {
            return Err(bad(format!("{} bytes after the last model", buf.len() - r.at)));
        }
        let load = EdgeLoad { edge, seq, utilisation, gpu_free_bytes: (gpu != u64::MAX).then_some(gpu), models };
        load.validate()?;
        Ok(load)
    }

    /// The entry of `model`, if the edge serves it.
    pub fn model(&self, model: &str) -> Option<&ModelLoad> {
        self.models.iter().find(|m| m.model == model)
    }
}

fn put_id(b: &mut Vec<u8>, id: &str) {
    b.push(id.len() as u8);
    b.extend_from_slice(id.as_bytes());
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn array<const N: usize>(&mut self, field: &str) -> Result<[u8; N]> {
        let end = self.at.checked_add(N).filter(|&e| e <= self.buf.len()).ok_or_else(|| bad(format!("truncated inside '{field}'")))?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.buf[self.at..end]);
        self.at = end;
        Ok(out)
    }

    fn id(&mut self, field: &str) -> Result<String> {
        let len = self.array::<1>(field)?[0] as usize;
        let end = self.at.checked_add(len).filter(|&e| e <= self.buf.len()).ok_or_else(|| bad(format!("truncated inside '{field}'")))?;
        let s = std::str::from_utf8(&self.buf[self.at..end]).map_err(|_| bad(format!("'{field}' is not UTF-8")))?;
        self.at = end;
        validate_id(s)?;
        Ok(s.to_string())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    fn report() -> EdgeLoad {
        EdgeLoad {
            edge: "gpu-1".into(),
            seq: 42,
            utilisation: 0.25,
            gpu_free_bytes: Some(8 << 30),
            models: vec![
                ModelLoad { model: "resnet18".into(), queued_s: 0.012, idle_goodput: 310.5, server_s: 0.0031, in_flight: 3, warm: true },
                ModelLoad { model: "yolo_det".into(), queued_s: 0.0, idle_goodput: 0.0, server_s: 0.0, in_flight: 0, warm: false },
            ],
        }
    }

    #[test]
    fn a_report_round_trips() {
        let r = report();
        let bytes = r.encode().unwrap();
        assert!(bytes.len() <= MAX_LOAD_LEN);
        assert_eq!(EdgeLoad::decode(&bytes).unwrap(), r);
        let cpu = EdgeLoad { gpu_free_bytes: None, models: vec![], ..report() };
        assert_eq!(EdgeLoad::decode(&cpu.encode().unwrap()).unwrap(), cpu);
        assert_eq!(r.model("resnet18").unwrap().in_flight, 3);
        assert!(r.model("vgg").is_none());
    }

    #[test]
    fn every_truncation_and_every_corruption_is_an_error_not_a_panic() {
        let bytes = report().encode().unwrap();
        for n in 0..bytes.len() {
            assert!(EdgeLoad::decode(&bytes[..n]).is_err(), "prefix of {n} bytes");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(EdgeLoad::decode(&longer).unwrap_err().to_string().contains("after the last model"));
        // Flip each byte: decoding either fails or yields a valid report (never panics).
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            if let Ok(l) = EdgeLoad::decode(&b) {
                l.validate().unwrap();
            }
        }
        let mut nan = report();
        nan.models[0].queued_s = f32::NAN;
        assert!(nan.encode().unwrap_err().to_string().contains("queued_s"));
        let mut over = report();
        over.utilisation = 1.5;
        assert!(over.encode().is_err());
        let mut bad_id = report();
        bad_id.edge = "a/b".into();
        assert!(matches!(bad_id.encode(), Err(Error::InvalidId { .. })));
        assert!(matches!(EdgeLoad::decode(&vec![0; MAX_LOAD_LEN + 1]), Err(Error::TooLarge { .. })));
        assert!(matches!(EdgeLoad::decode(b"LOPX\x01\x00\x00\x00"), Err(Error::BadMagic { .. })));
        assert!(matches!(EdgeLoad::decode(b"LOPL\x02\x00\x00\x00"), Err(Error::UnsupportedVersion { found: 2, .. })));
    }
}
