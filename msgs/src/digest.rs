//! 32-byte content hashes (sha256) as they travel on the wire.

use std::fmt;

use crate::{Error, Result};

/// A sha256 digest: model hashes, profile hashes, plan and table hashes. The engine prints them
/// as 64 lowercase hex digits; the wire carries the 32 raw bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// Parses 64 hex digits (either case).
    ///
    /// # Errors
    /// [`Error::InvalidHex`] when `hex` is not exactly 64 hex digits.
    ///
    /// ```
    /// let d = lop_msgs::Digest::from_hex(&"ab".repeat(32)).unwrap();
    /// assert_eq!(d.0, [0xab; 32]);
    /// assert_eq!(d.to_hex(), "ab".repeat(32));
    /// ```
    pub fn from_hex(hex: &str) -> Result<Digest> {
        let bad = || Error::InvalidHex { hex: hex.chars().take(80).collect() };
        let bytes = hex.as_bytes();
        if bytes.len() != 64 {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (o, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
            let hi = nibble(pair[0]).ok_or_else(bad)?;
            let lo = nibble(pair[1]).ok_or_else(bad)?;
            *o = (hi << 4) | lo;
        }
        Ok(Digest(out))
    }

    /// The 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut s = String::with_capacity(64);
        for b in self.0 {
            s.push(HEX[usize::from(b >> 4)] as char);
            s.push(HEX[usize::from(b & 15)] as char);
        }
        s
    }
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl From<[u8; 32]> for Digest {
    fn from(b: [u8; 32]) -> Digest {
        Digest(b)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_rejects() {
        let h = "00ff10AbcdEF".to_string() + &"0".repeat(52);
        let d = Digest::from_hex(&h).unwrap();
        assert_eq!(d.to_hex(), h.to_lowercase());
        for bad in ["", "0", &"0".repeat(63), &"0".repeat(65), &("g".to_string() + &"0".repeat(63)), &"é".repeat(32)] {
            assert!(matches!(Digest::from_hex(bad), Err(Error::InvalidHex { .. })), "{bad}");
        }
    }
}
