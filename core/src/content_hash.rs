//! Content hashes of serialisable artifacts (profiles, schedule tables) that survive a JSON round
//! trip: JSON float parsing may move the last bit of an `f64`, so floats are hashed rounded.

use sha2::{Digest, Sha256};

/// sha256 (hex) of `value`'s JSON form with every float written with `digits` significant
/// digits. Serialisation failures (impossible for plain data types) hash as `null`.
pub fn json_content_hash<T: serde::Serialize>(value: &T, digits: usize) -> String {
    fn canon(v: &mut serde_json::Value, digits: usize) {
        match v {
            serde_json::Value::Number(n) if n.is_f64() => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                *v = serde_json::Value::String(format!("{f:.*e}", digits.saturating_sub(1)));
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| canon(x, digits)),
            serde_json::Value::Object(o) => o.values_mut().for_each(|x| canon(x, digits)),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(value).unwrap_or_default();
    canon(&mut v, digits);
    hex::encode(Sha256::digest(v.to_string().as_bytes()))
}

/// FNV-1a of `bytes`: a small hash that is the same on every machine, build and run (std's
/// hasher is seeded at random), for choices that must not move between restarts: a robot's
/// shards, a class's colour.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn last_bit_differences_hash_alike_real_differences_do_not() {
        let a = vec![0.1f64 + 0.2, 1.0];
        let b = vec![0.3f64, 1.0];
        assert_ne!(a[0], b[0]);
        assert_eq!(json_content_hash(&a, 12), json_content_hash(&b, 12));
        assert_ne!(json_content_hash(&a, 12), json_content_hash(&vec![0.3001f64, 1.0], 12));
    }

    /// Profiles and tables are JSON: every float must read back as it was written (serde_json's
    /// `float_roundtrip`; without it about one in ten came back a ULP off).
    #[test]
    fn floats_read_back_bitwise() {
        let mut rng = crate::rng::Rng::new(7);
        let off = (0..20_000)
            .filter(|_| {
                let x = rng.unit() * 10f64.powi(rng.below(13) as i32 - 6);
                let back: f64 = serde_json::from_str(&serde_json::to_string(&x).unwrap_or_default()).unwrap_or(f64::NAN);
                back.to_bits() != x.to_bits()
            })
            .count();
        assert_eq!(off, 0, "{off} of 20000 floats read back changed");
    }

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        // The FNV-1a 64-bit test vectors of the algorithm's authors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
