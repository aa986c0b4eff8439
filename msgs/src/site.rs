//! A site digest (DESIGN.md section 10): one shard's edge load reports gathered by the site's
//! aggregator and republished as one message per report period on `lop/v1/site/digest/<shard>`,
//! so that a robot of a large site hears one message per period instead of every edge's report.
//! Pure encode/decode.
//!
//! | bytes | field |
//! |---|---|
//! | 4 | magic `LOPD` |
//! | 2 | format version (LE), [`DIGEST_VERSION`] |
//! | 2 | this shard's index (LE) |
//! | 2 | the site's shard count (LE), at least 1 and above the index |
//! | 8 | digest number (LE), one more per period |
//! | 2 | entry count (LE), at most [`MAX_DIGEST_EDGES`] |
//! | per entry | the report's age at the aggregator, ms (u16 LE, saturated), its length (u16 LE), the edge's load report as it published it ([`crate::load`]) |
//!
//! Decoding checks every entry as a load report and refuses an edge listed twice.

use crate::load::{EdgeLoad, MAX_LOAD_LEN};
use crate::{Error, Result};

/// The first four bytes of a digest.
pub const DIGEST_MAGIC: [u8; 4] = *b"LOPD";
/// The format version this crate writes and reads.
pub const DIGEST_VERSION: u16 = 1;
/// Most edges one digest carries (a shard's size is bounded by it).
pub const MAX_DIGEST_EDGES: usize = 256;
/// Longest digest.
pub const MAX_DIGEST_LEN: usize = 20 + MAX_DIGEST_EDGES * (4 + MAX_LOAD_LEN);

/// One shard's reports.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadDigest {
    /// This shard's index.
    pub shard: u16,
    /// The site's shard count.
    pub shards: u16,
    /// Digest number; one more per period.
    pub seq: u64,
    /// Each edge's last report and its age at the aggregator, milliseconds.
    pub edges: Vec<(EdgeLoad, u16)>,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::BadLoad { reason: format!("digest: {}", reason.into()) }
}

impl LoadDigest {
    /// The digest's bytes.
    ///
    /// # Errors
    /// [`Error::BadLoad`] for a shard index out of range, too many edges or an edge listed
    /// twice; a report's own errors ([`EdgeLoad::encode`]).
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.check_shape()?;
        let mut b = Vec::with_capacity(20 + self.edges.len() * 64);
        b.extend_from_slice(&DIGEST_MAGIC);
        b.extend_from_slice(&DIGEST_VERSION.to_le_bytes());
        b.extend_from_slice(&self.shard.to_le_bytes());
        b.extend_from_slice(&self.shards.to_le_bytes());
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&(self.edges.len() as u16).to_le_bytes());
        for (load, age_ms) in &self.edges {
            let r = load.encode()?;
            b.extend_from_slice(&age_ms.to_le_bytes());
            b.extend_from_slice(&(r.len() as u16).to_le_bytes());
            b.extend_from_slice(&r);
        }
        Ok(b)
    }

    fn check_shape(&self) -> Result<()> {
        if self.shards == 0 || self.shard >= self.shards {
            return Err(bad(format!("shard {} of {} shards", self.shard, self.shards)));
        }
        if self.edges.len() > MAX_DIGEST_EDGES {
            return Err(bad(format!("{} edges, at most {MAX_DIGEST_EDGES}", self.edges.len())));
        }
        let mut ids: Vec<&str> = self.edges.iter().map(|(l, _)| l.edge.as_str()).collect();
        ids.sort_unstable();
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(bad(format!("edge '{}' listed twice", w[0])));
        }
        Ok(())
    }

    /// Reads a digest.
    ///
    /// # Errors
    /// [`Error::BadMagic`], [`Error::UnsupportedVersion`], [`Error::TooLarge`], or
    /// [`Error::BadLoad`] (truncated, trailing bytes, a bad shard, a bad or repeated report).
    pub fn decode(buf: &[u8]) -> Result<LoadDigest> {
        if buf.len() > MAX_DIGEST_LEN {
            return Err(Error::TooLarge { len: buf.len() as u64, limit: MAX_DIGEST_LEN as u64 });
        }
        let mut at = 0usize;
        let mut take = |n: usize, field: &str| -> Result<&[u8]> {
            let end = at.checked_add(n).filter(|&e| e <= buf.len()).ok_or_else(|| bad(format!("truncated inside '{field}'")))?;
            let s = &buf[at..end];
            at = end;
            Ok(s)
        };
        let u16_of = |s: &[u8]| u16::from_le_bytes([s[0], s[1]]);
        let magic = take(4, "magic")?;
        if magic != DIGEST_MAGIC {
            return Err(Error::BadMagic { found: magic.to_vec(), expected: DIGEST_MAGIC });
        }
        let version = u16_of(take(2, "version")?);
        if version != DIGEST_VERSION {
            return Err(Error::UnsupportedVersion { found: version, supported: DIGEST_VERSION });
        }
        let shard = u16_of(take(2, "shard")?);
        let shards = u16_of(take(2, "shards")?);
        let mut seq = [0u8; 8];
        seq.copy_from_slice(take(8, "seq")?);
        let n = usize::from(u16_of(take(2, "edge count")?));
        if n > MAX_DIGEST_EDGES {
            return Err(bad(format!("{n} edges, at most {MAX_DIGEST_EDGES}")));
        }
        let mut edges = Vec::with_capacity(n);
        for _ in 0..n {
            let age_ms = u16_of(take(2, "age")?);
            let len = usize::from(u16_of(take(2, "report length")?));
            let load = EdgeLoad::decode(take(len, "report")?)?;
            edges.push((load, age_ms));
        }
        if at != buf.len() {
            return Err(bad(format!("{} bytes after the last report", buf.len() - at)));
        }
        let digest = LoadDigest { shard, shards, seq: u64::from_le_bytes(seq), edges };
        digest.check_shape()?;
        Ok(digest)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use crate::load::ModelLoad;

    fn load(edge: &str, seq: u64) -> EdgeLoad {
        let m = ModelLoad { model: "resnet18".into(), queued_s: 0.01, idle_goodput: 80.0, server_s: 0.004, in_flight: 1, warm: true };
        EdgeLoad { edge: edge.into(), seq, utilisation: 0.5, gpu_free_bytes: None, models: vec![m] }
    }

    fn digest() -> LoadDigest {
        LoadDigest { shard: 1, shards: 3, seq: 7, edges: vec![(load("gpu-1", 4), 12), (load("gpu-2", 9), u16::MAX)] }
    }

    #[test]
    fn a_digest_round_trips_and_stays_small() {
        let d = digest();
        let bytes = d.encode().unwrap();
        assert_eq!(LoadDigest::decode(&bytes).unwrap(), d);
        // Fifty edges of one model: what a robot of a large site hears per period.
        let fifty = LoadDigest { shard: 0, shards: 1, seq: 1, edges: (0..50).map(|k| (load(&format!("gpu-{k:03}"), 1), 5)).collect() };
        let len = fifty.encode().unwrap().len();
        assert!(len < 4000, "{len} bytes");
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_not_a_panic() {
        let bytes = digest().encode().unwrap();
        for n in 0..bytes.len() {
            assert!(LoadDigest::decode(&bytes[..n]).is_err(), "prefix of {n} bytes");
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0xff;
            let _ = LoadDigest::decode(&b);
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(LoadDigest::decode(&longer).is_err());
        let twice = LoadDigest { edges: vec![(load("a", 1), 0), (load("a", 2), 0)], ..digest() };
        assert!(twice.encode().unwrap_err().to_string().contains("twice"));
        assert!(LoadDigest { shard: 3, ..digest() }.encode().is_err());
        assert!(LoadDigest { shards: 0, shard: 0, ..digest() }.encode().is_err());
    }
}
