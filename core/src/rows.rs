//! Row ranges, units and footprints: the vocabulary of splitting along the row axis.

use std::ops::Range;

/// A half-open range of rows along a tensor's row axis.
pub type Rows = Range<usize>;

/// Which rows of one input an output row band depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Footprint {
    /// Exactly these input rows (already clamped to the input's extent).
    Rows(Rows),
    /// The whole input, independent of which output rows are asked for, without making the op
    /// global: the input has no extent along the output's rows (a broadcast `[1,C,1,1]` scale,
    /// a weight-like operand).
    Broadcast,
    /// The whole input, because every output row depends on every input row (a global op).
    Whole,
}

/// The first row of unit `i` when `total` rows are cut into `units` units (`i` may equal
/// `units`, giving `total`). Units are as even as integer division allows.
pub fn unit_start(total: usize, units: usize, i: usize) -> usize {
    if units == 0 {
        return 0;
    }
    i.min(units) * total / units
}

/// The rows covered by units `[u.start, u.end)`.
pub fn unit_rows(total: usize, units: usize, u: Range<usize>) -> Rows {
    unit_start(total, units, u.start)..unit_start(total, units, u.end)
}

/// The number of units an op with `total` output rows is cut into: `units`, but never more than
/// the rows (and at least one).
pub fn effective_units(total: usize, units: usize) -> usize {
    units.min(total).max(1)
}

/// Cuts `rows` into `k` nearly equal contiguous chunks (fewer if there are fewer rows).
pub fn chunks(rows: &Rows, k: usize) -> Vec<Rows> {
    let n = rows.len();
    let k = k.clamp(1, n.max(1));
    (0..k).map(|i| rows.start + i * n / k..rows.start + (i + 1) * n / k).filter(|r| !r.is_empty()).collect()
}

/// Input rows `[start, end)` (unclamped, may be negative or past the end) that a sliding window
/// op needs for output rows `out`: window `kernel` (dilated extent), `stride`, leading pad.
pub fn window_rows(out: &Rows, kernel_extent: usize, stride: usize, pad_begin: usize) -> (i64, i64) {
    let start = out.start as i64 * stride as i64 - pad_begin as i64;
    let end = (out.end as i64 - 1) * stride as i64 - pad_begin as i64 + kernel_extent as i64;
    (start, end)
}

/// Clamps a signed range to `[0, total)`.
pub fn clamp_rows(start: i64, end: i64, total: usize) -> Rows {
    let s = start.clamp(0, total as i64) as usize;
    let e = end.clamp(0, total as i64) as usize;
    s..e.max(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_cover_rows_exactly() {
        for total in 1..40 {
            for units in 1..10 {
                let u = effective_units(total, units);
                assert!(u <= total);
                let mut next = 0;
                for i in 0..u {
                    let r = unit_rows(total, u, i..i + 1);
                    assert_eq!(r.start, next);
                    assert!(!r.is_empty(), "unit {i} of {u} over {total} rows is empty");
                    next = r.end;
                }
                assert_eq!(next, total);
            }
        }
    }

    #[test]
    fn chunks_partition_the_range() {
        let c = chunks(&(3..13), 3);
        assert_eq!(c, vec![3..6, 6..9, 9..13]);
        assert_eq!(chunks(&(0..2), 5), vec![0..1, 1..2]);
        assert_eq!(chunks(&(4..4), 3), Vec::<Rows>::new());
    }

    #[test]
    fn window_rows_of_strided_conv() {
        // 3x3, stride 2, pad 1: output rows 0..2 read input rows -1..4.
        assert_eq!(window_rows(&(0..2), 3, 2, 1), (-1, 4));
        assert_eq!(clamp_rows(-1, 4, 3), 0..3);
    }
}
