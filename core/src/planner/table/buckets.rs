//! The bandwidth buckets of a table: parsed from the command line's ranges and lists (bounded,
//! so a typo cannot allocate terabytes), and each bucket's planner seed.

use crate::error::{Error, Result};

/// The most buckets a range `FROM:TO:STEP` may hold (a list holds what it spells out).
pub const MAX_RANGE_BUCKETS: usize = 100_000;

/// Parses a bucket range `FROM:TO:STEP` (MB/s) or a comma-separated list (`0,2,8,30`).
///
/// # Errors
/// [`Error::Input`] for unparsable numbers, a non-positive step, an empty range, a range of more
/// than [`MAX_RANGE_BUCKETS`] buckets or negative values.
pub fn parse_buckets(s: &str) -> Result<Vec<f64>> {
    let bad = |why: &str| Error::Input(format!("buckets '{s}': {why}"));
    let sep = if s.contains(':') { ':' } else { ',' };
    let p: Vec<f64> =
        s.split(sep).map(|v| v.trim().parse::<f64>()).collect::<std::result::Result<_, _>>().map_err(|_| bad("not a number"))?;
    let values = if sep == ':' {
        let [from, to, step] = p[..] else { return Err(bad("expected FROM:TO:STEP")) };
        if !(from.is_finite() && to.is_finite() && from >= 0.0) {
            return Err(bad("FROM and TO must be finite and >= 0 MB/s"));
        }
        if !(step.is_finite() && step > 0.0) {
            return Err(bad("the step must be positive"));
        }
        if to < from {
            return Err(bad("empty range"));
        }
        // Counted as a float first: a step far below the range (`0:1e12:1`) would otherwise ask for
        // terabytes, or overflow the count.
        let steps = ((to - from) / step + 1e-9).floor();
        if steps >= MAX_RANGE_BUCKETS as f64 {
            return Err(bad(&format!("more than {MAX_RANGE_BUCKETS} buckets")));
        }
        let n = steps as usize + 1;
        (0..n).map(|i| from + i as f64 * step).collect()
    } else {
        p
    };
    if values.is_empty() || values.iter().any(|b| !b.is_finite() || *b < 0.0) {
        return Err(bad("buckets must be finite and >= 0"));
    }
    Ok(values)
}

/// Bucket `i`'s planner seed.
pub(super) fn bucket_seed(seed: u64, i: usize) -> u64 {
    seed.wrapping_mul(0x9E37_79B9).wrapping_add(i as u64)
}

#[cfg(test)]
mod parse_tests {
    use super::parse_buckets;

    #[test]
    fn bucket_ranges_and_lists_parse() {
        assert_eq!(parse_buckets("0:3:1").ok(), Some(vec![0.0, 1.0, 2.0, 3.0]));
        assert_eq!(parse_buckets("1:2:0.5").ok(), Some(vec![1.0, 1.5, 2.0]));
        assert_eq!(parse_buckets("0, 2,8,30").ok(), Some(vec![0.0, 2.0, 8.0, 30.0]));
        assert_eq!(parse_buckets("4").ok(), Some(vec![4.0]));
        assert_eq!(parse_buckets("0:99999:1").map(|b| b.len()).ok(), Some(super::MAX_RANGE_BUCKETS));
        // Found by fuzz_config: a range of 1e12 buckets (an 8 TB allocation), one past usize.
        for bad in ["", "3:1:1", "0:3:0", "0:3", "a,b", "-1,2", "0:nan:1", "0:100000:1", "0:1e12:1", "0:3e88:1", "0:1:1e-320"] {
            assert!(parse_buckets(bad).is_err(), "{bad} accepted");
        }
    }
}
