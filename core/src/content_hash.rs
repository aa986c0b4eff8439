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
}
