//! Comparing outputs: the error measure every exactness check in the project uses.

use crate::error::{Error, Result};
use tch::{Kind, Tensor};

/// Maximum absolute difference divided by the reference's largest magnitude:
/// `max|a - b| / max|b|` (relative to the output's scale, so near-zero elements do not blow up).
/// Equal elements count as no difference, infinities of the same sign included (an untrained
/// detector's boxes overflow to them, in the split and the unsplit run alike); the scale is over
/// the reference's finite elements; any other non-finite difference (a NaN, an infinity against
/// a number) is an infinite error.
///
/// # Errors
/// [`Error::Input`] when shapes differ; libtorch errors.
pub fn max_rel_err(actual: &Tensor, reference: &Tensor) -> Result<f64> {
    if actual.size() != reference.size() {
        return Err(Error::Input(format!("shapes differ: {:?} vs reference {:?}", actual.size(), reference.size())));
    }
    let torch = Error::torch("comparing outputs");
    let a = actual.f_to_kind(Kind::Double).map_err(Error::torch("comparing outputs"))?;
    let b = reference.f_to_kind(Kind::Double).map_err(Error::torch("comparing outputs"))?;
    if a.numel() == 0 {
        return Ok(0.0);
    }
    let same = a.f_eq_tensor(&b).map_err(Error::torch("comparing outputs"))?;
    let diff = a
        .f_sub(&b)
        .and_then(|d| d.f_abs())
        .and_then(|d| d.f_masked_fill(&same, 0.0))
        .and_then(|d| d.f_max())
        .map(|d| d.double_value(&[]))
        .map_err(torch)?;
    let scale = b
        .f_isfinite()
        .and_then(|finite| finite.f_logical_not())
        .and_then(|off| b.f_abs().and_then(|m| m.f_masked_fill(&off, 0.0)))
        .and_then(|d| d.f_max())
        .map(|d| d.double_value(&[]))
        .map_err(Error::torch("comparing outputs"))?;
    if !diff.is_finite() {
        return Ok(f64::INFINITY);
    }
    Ok(if scale > 0.0 { diff / scale } else { diff })
}

/// The largest [`max_rel_err`] over pairs of outputs.
///
/// # Errors
/// As [`max_rel_err`], or when the output counts differ.
pub fn max_rel_err_all(actual: &[Tensor], reference: &[Tensor]) -> Result<f64> {
    if actual.len() != reference.len() {
        return Err(Error::Input(format!("{} outputs vs {} reference outputs", actual.len(), reference.len())));
    }
    actual.iter().zip(reference).try_fold(0.0f64, |m, (a, b)| Ok(m.max(max_rel_err(a, b)?)))
}

/// The rule every exactness check uses: an output agrees with its reference when
/// `max|a - b| <= abs + rel x max|b|`. The relative part follows the output's scale; the
/// absolute floor covers outputs far smaller than the unit-scale activations they are computed
/// from (a sigmoid's tail, a probability map of an empty scene), whose float32 rounding is
/// absolute, not relative to the output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// The part relative to the reference's largest magnitude.
    pub rel: f64,
    /// The absolute floor.
    pub abs: f64,
}

impl Tolerance {
    /// One engine against itself (split against unsplit, batched against alone): only the
    /// order of float32 sums differs. Relative 1e-5; floor 8 float32 ulps at 1.0 (9.5e-7).
    pub const SPLIT: Tolerance = Tolerance { rel: 1e-5, abs: 8.0 * f32::EPSILON as f64 };
    /// lop against another runtime (onnxruntime): other kernels and summation orders.
    pub const OTHER_RUNTIME: Tolerance = Tolerance { rel: 1e-4, abs: 1e-5 };

    /// The largest difference allowed for a reference whose largest magnitude is `scale`.
    pub fn bound(&self, scale: f64) -> f64 {
        self.abs + self.rel * scale
    }

    /// The rule in words, for command output.
    pub fn describe(&self) -> String {
        format!("|a - b| <= {:.1e} + {:.0e} x max|b|", self.abs, self.rel)
    }
}

/// How one output compares with its reference under a [`Tolerance`].
#[derive(Debug, Clone, PartialEq)]
pub struct Agreement {
    /// Largest absolute difference (equal elements, equal infinities included, count 0).
    pub max_abs_diff: f64,
    /// The reference's largest finite magnitude.
    pub scale: f64,
    /// `max_abs_diff / scale` (the project's relative error; `max_abs_diff` when the scale is 0).
    pub rel_err: f64,
    /// The difference the tolerance allows at this scale.
    pub bound: f64,
    /// Whether the output agrees: element by element, or as a ranked list whose near-tied rows
    /// changed places ([`Agreement::reordered`]).
    pub within: bool,
    /// Rows of a ranked list (detections sorted by score) that agree only at another position,
    /// or that a near-tie decided the other way; 0 when the output agrees element by element.
    pub reordered: usize,
}

impl Agreement {
    fn exact() -> Agreement {
        Agreement { max_abs_diff: 0.0, scale: 0.0, rel_err: 0.0, bound: 0.0, within: true, reordered: 0 }
    }

    /// The worse of two agreements (the first that fails, else the larger error).
    fn worse(self, other: Agreement) -> Agreement {
        match (self.within, other.within) {
            (true, false) => other,
            (false, true) => self,
            _ if other.rel_err > self.rel_err => Agreement { reordered: self.reordered + other.reordered, ..other },
            _ => Agreement { reordered: self.reordered + other.reordered, ..self },
        }
    }
}

/// Compares `actual` with `reference` under `tol`. An output that fails element by element is
/// read as a ranked list when it is one: rows `[.., K, F]` sorted by a column of the reference
/// (detections by score). It then agrees when every row of each side is within the tolerance of
/// a row of the other (column by column, each column at its own scale), rows moving only among
/// rows whose sort key is within the tolerance of theirs; a row without a partner must have a
/// key within the tolerance of an unpartnered row of the other side (a near-tie that a
/// suppression or a top-k cut decided the other way). For detection
/// rows (`x1, y1, x2, y2, score, class`) a lone box that overlaps such a box of its class is
/// explained too: the suppression the near-tie decided decides the boxes it reached in turn.
///
/// # Errors
/// [`Error::Input`] when shapes differ; libtorch errors.
pub fn agree(actual: &Tensor, reference: &Tensor, tol: Tolerance) -> Result<Agreement> {
    let rel_err = max_rel_err(actual, reference)?;
    let scale = finite_scale(reference)?;
    let max_abs_diff = if scale > 0.0 && rel_err.is_finite() { rel_err * scale } else { rel_err };
    let bound = tol.bound(scale);
    let mut out = Agreement { max_abs_diff, scale, rel_err, bound, within: max_abs_diff <= bound, reordered: 0 };
    if !out.within
        && let Some(moved) = ranked_agreement(actual, reference, tol)?
    {
        out.within = true;
        out.reordered = moved;
    }
    Ok(out)
}

/// [`agree`] over pairs of outputs: the worst pair.
///
/// # Errors
/// As [`agree`], or when the output counts differ.
pub fn agree_all(actual: &[Tensor], reference: &[Tensor], tol: Tolerance) -> Result<Agreement> {
    if actual.len() != reference.len() {
        return Err(Error::Input(format!("{} outputs vs {} reference outputs", actual.len(), reference.len())));
    }
    actual.iter().zip(reference).try_fold(Agreement::exact(), |acc, (a, b)| Ok(acc.worse(agree(a, b, tol)?)))
}

/// The largest finite magnitude of `t` (0 when none).
fn finite_scale(t: &Tensor) -> Result<f64> {
    let b = t.f_to_kind(Kind::Double).map_err(Error::torch("comparing outputs"))?;
    if b.numel() == 0 {
        return Ok(0.0);
    }
    b.f_isfinite()
        .and_then(|finite| finite.f_logical_not())
        .and_then(|off| b.f_abs().and_then(|m| m.f_masked_fill(&off, 0.0)))
        .and_then(|d| d.f_max())
        .map(|d| d.double_value(&[]))
        .map_err(Error::torch("comparing outputs"))
}

/// Largest number of fields a row of a ranked list may have.
const MAX_RANKED_FIELDS: i64 = 512;

/// The rows of `t` as `[lists][rows][fields]` of f64.
fn rows_of(t: &Tensor) -> Result<Vec<Vec<Vec<f64>>>> {
    let size = t.size();
    let (k, f) = (size[size.len() - 2], size[size.len() - 1]);
    let flat =
        t.f_to_kind(Kind::Double).and_then(|d| d.f_contiguous()).and_then(|d| d.f_view([-1])).map_err(Error::torch("comparing outputs"))?;
    let v = Vec::<f64>::try_from(&flat).map_err(Error::torch("comparing outputs"))?;
    let (k, f) = (k as usize, f as usize);
    Ok(v.chunks(k * f).map(|list| list.chunks(f).map(<[f64]>::to_vec).collect()).collect())
}

/// Some(rows that moved or were decided the other way) when `actual` agrees with `reference`
/// as ranked lists, None when it does not or is not a ranked list.
fn ranked_agreement(actual: &Tensor, reference: &Tensor, tol: Tolerance) -> Result<Option<usize>> {
    let size = reference.size();
    if size.len() < 2 || size[size.len() - 1] > MAX_RANKED_FIELDS || size[size.len() - 2] < 2 || !reference.is_floating_point() {
        return Ok(None);
    }
    let (got, want) = (rows_of(actual)?, rows_of(reference)?);
    let mut moved = 0;
    for (a, b) in got.iter().zip(&want) {
        match ranked_list(a, b, tol) {
            Some(m) => moved += m,
            None => return Ok(None),
        }
    }
    Ok(Some(moved))
}

/// One list: see [`agree`].
fn ranked_list(a: &[Vec<f64>], b: &[Vec<f64>], tol: Tolerance) -> Option<usize> {
    let fields = b.first()?.len();
    let non_increasing = |rows: &[Vec<f64>], c: usize| rows.windows(2).all(|w| w[1][c] <= w[0][c]);
    // The sort key: a column both lists are ranked by that is not constant.
    let (first, last_row) = (b.first()?, b.last()?);
    let key = (0..fields).find(|&c| non_increasing(b, c) && non_increasing(a, c) && first[c] != last_row[c])?;
    let scales: Vec<f64> =
        (0..fields).map(|c| b.iter().map(|r| r[c]).filter(|x| x.is_finite()).fold(0.0f64, |m, x| m.max(x.abs()))).collect();
    let close = |x: f64, y: f64, c: usize| x == y || (x - y).abs() <= tol.bound(scales[c]);
    let same_row = |x: &[f64], y: &[f64]| (0..fields).all(|c| close(x[c], y[c], c));
    let mut partner: Vec<Option<usize>> = vec![None; a.len()];
    let mut taken = vec![false; b.len()];
    // Rows in place first, then the nearest free row whose key ties with this row's.
    for (i, row) in a.iter().enumerate() {
        if same_row(row, &b[i]) {
            partner[i] = Some(i);
            taken[i] = true;
        }
    }
    let mut moved = 0;
    for (i, row) in a.iter().enumerate() {
        if partner[i].is_some() {
            continue;
        }
        let found =
            (0..b.len()).filter(|&j| !taken[j] && close(row[key], b[j][key], key) && same_row(row, &b[j])).min_by_key(|&j| j.abs_diff(i));
        if let Some(j) = found {
            partner[i] = Some(j);
            taken[j] = true;
            moved += 1;
        }
    }
    // Rows without a partner, from both sides.
    let lone: Vec<(bool, &Vec<f64>)> = a
        .iter()
        .zip(&partner)
        .filter(|(_, p)| p.is_none())
        .map(|(r, _)| (true, r))
        .chain(b.iter().zip(&taken).filter(|(_, t)| !**t).map(|(r, _)| (false, r)))
        .collect();
    // Decided by a near-tie: a key within the tolerance of a lone row's of the other side (a
    // suppression or a top-k cut that went the other way between the two).
    let mut explained: Vec<bool> =
        lone.iter().map(|(side, r)| lone.iter().any(|(other, o)| other != side && close(r[key], o[key], key))).collect();
    // Detection rows (x1, y1, x2, y2, score, class): a suppression decided by a near-tie decides
    // the boxes it overlapped in turn, so a lone box overlapping an explained lone box of its
    // class is explained too.
    if key == DETECTION_SCORE && fields > DETECTION_CLASS {
        let overlaps = |p: &[f64], q: &[f64]| {
            p[DETECTION_CLASS] == q[DETECTION_CLASS] && p[0].max(q[0]) < p[2].min(q[2]) && p[1].max(q[1]) < p[3].min(q[3])
        };
        // An unused slot (class -1) holds no detection: one run found fewer boxes.
        for (e, (_, r)) in explained.iter_mut().zip(&lone) {
            *e |= r[DETECTION_CLASS] < 0.0;
        }
        let mut grew = true;
        while grew {
            grew = false;
            for i in 0..lone.len() {
                if !explained[i] && (0..lone.len()).any(|j| explained[j] && overlaps(lone[i].1, lone[j].1)) {
                    explained[i] = true;
                    grew = true;
                }
            }
        }
    }
    explained.iter().all(|&e| e).then_some(moved + lone.iter().filter(|(side, _)| *side).count())
}

/// The score column of a detection row (`x1, y1, x2, y2, score, class`, as lop's detection
/// stage writes them).
const DETECTION_SCORE: usize = 4;
/// The class column of a detection row.
const DETECTION_CLASS: usize = 5;

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn relative_to_the_reference_scale() {
        let b = Tensor::from_slice(&[1.0f32, -4.0, 0.0]);
        let a = Tensor::from_slice(&[1.0f32, -4.0, 0.002]);
        assert!((max_rel_err(&a, &b).expect("same shape") - 0.0005).abs() < 1e-9);
        assert!(max_rel_err(&a, &Tensor::from_slice(&[1.0f32])).is_err());
        let nan = Tensor::from_slice(&[f32::NAN, 0.0, 0.0]);
        assert!(max_rel_err(&nan, &b).expect("same shape").is_infinite());
        assert!(max_rel_err(&nan, &nan).expect("same shape").is_infinite(), "a NaN is never equal");
        // Equal infinities are no difference; the scale is over the finite elements.
        let inf = Tensor::from_slice(&[f32::INFINITY, f32::NEG_INFINITY, 2.0]);
        assert_eq!(max_rel_err(&inf, &inf).expect("same shape"), 0.0);
        let off = Tensor::from_slice(&[f32::INFINITY, f32::NEG_INFINITY, 2.5]);
        assert!((max_rel_err(&off, &inf).expect("same shape") - 0.25).abs() < 1e-12);
        let flipped = Tensor::from_slice(&[f32::NEG_INFINITY, f32::NEG_INFINITY, 2.0]);
        assert!(max_rel_err(&flipped, &inf).expect("same shape").is_infinite(), "opposite infinities");
        assert!(
            max_rel_err(&Tensor::from_slice(&[1.0f32, -4.0, 0.0]), &inf).expect("same shape").is_infinite(),
            "a number against an infinity"
        );
        let empty = Tensor::from_slice::<f32>(&[]);
        assert_eq!(max_rel_err(&empty, &empty).expect("same shape"), 0.0);
    }

    #[test]
    fn the_floor_covers_outputs_far_below_unit_scale() {
        // A probability map of about 1e-6 whose split differs by 1e-7: float32 rounding of the
        // unit-scale logits, not a wrong split.
        let b = Tensor::from_slice(&[1.0e-6f32, 2.0e-6, 8.0e-3]);
        let a = Tensor::from_slice(&[1.1e-6f32, 2.0e-6, 8.0e-3]);
        let agreement = agree(&a, &b, Tolerance::SPLIT).expect("same shape");
        assert!(agreement.rel_err > 1e-5, "the relative measure alone would fail: {agreement:?}");
        assert!(agreement.within, "{agreement:?}");
        // Ten times the floor is a real difference.
        let far = Tensor::from_slice(&[1.0e-5f32, 2.0e-6, 8.0e-3]);
        assert!(!agree(&far, &b, Tolerance::SPLIT).expect("same shape").within);
        assert!(Tolerance::SPLIT.describe().contains("9.5e-7"), "{}", Tolerance::SPLIT.describe());
    }

    /// Detections `[1, rows, 6]`: x1, y1, x2, y2, score, class.
    fn dets(rows: &[[f32; 6]]) -> Tensor {
        Tensor::from_slice(&rows.concat()).view([1, rows.len() as i64, 6])
    }

    #[test]
    fn near_tied_rows_of_a_ranked_list_may_change_places() {
        let b = dets(&[[0.0, 0.0, 10.0, 10.0, 0.9, 1.0], [5.0, 5.0, 9.0, 9.0, 0.53, 2.0], [50.0, 50.0, 60.0, 60.0, 0.53, 3.0]]);
        // The two boxes at 0.53 swapped: element by element far apart, as a ranked list equal.
        let a = dets(&[[0.0, 0.0, 10.0, 10.0, 0.9, 1.0], [50.0, 50.0, 60.0, 60.0, 0.53, 3.0], [5.0, 5.0, 9.0, 9.0, 0.53, 2.0]]);
        let agreement = agree(&a, &b, Tolerance::SPLIT).expect("same shape");
        assert!(agreement.rel_err > 0.5);
        assert!(agreement.within && agreement.reordered == 2, "{agreement:?}");
        // Rows that swap across a real score gap do not agree.
        let c = dets(&[[5.0, 5.0, 9.0, 9.0, 0.53, 2.0], [0.0, 0.0, 10.0, 10.0, 0.9, 1.0], [50.0, 50.0, 60.0, 60.0, 0.53, 3.0]]);
        assert!(!agree(&c, &b, Tolerance::SPLIT).expect("same shape").within);
        // A box that a near-tie suppressed in one run and kept in the other: the same score.
        let d = dets(&[[0.0, 0.0, 10.0, 10.0, 0.9, 1.0], [5.0, 5.0, 9.0, 9.0, 0.53, 2.0], [51.0, 50.0, 61.0, 60.0, 0.53, 3.0]]);
        assert!(agree(&d, &b, Tolerance::SPLIT).expect("same shape").within);
        // A different box with another score is a wrong result.
        let e = dets(&[[0.0, 0.0, 10.0, 10.0, 0.9, 1.0], [5.0, 5.0, 9.0, 9.0, 0.53, 2.0], [51.0, 50.0, 61.0, 60.0, 0.4, 3.0]]);
        assert!(!agree(&e, &b, Tolerance::SPLIT).expect("same shape").within);
        // Rows of an image (no column ranks them) never change places.
        let img = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([1, 1, 2, 2]);
        let swapped = Tensor::from_slice(&[3.0f32, 4.0, 1.0, 2.0]).view([1, 1, 2, 2]);
        assert!(!agree(&swapped, &img, Tolerance::SPLIT).expect("same shape").within);
    }

    #[test]
    fn a_suppression_decided_by_a_near_tie_may_decide_the_boxes_it_reached() {
        // Run b kept box B (0.53) over its twin A (0.53), and B suppressed C; run a kept A,
        // which does not reach C, so C survived. D is the same in both.
        let a_box = [0.0, 0.0, 10.0, 10.0, 0.530_000_1, 1.0];
        let b_box = [8.0, 0.0, 18.0, 10.0, 0.53, 1.0];
        let c_box = [16.0, 0.0, 26.0, 10.0, 0.4, 1.0];
        let d_box = [100.0, 100.0, 110.0, 110.0, 0.3, 1.0];
        let none = [0.0, 0.0, 0.0, 0.0, 0.0, -1.0];
        let a = dets(&[a_box, c_box, d_box]);
        let b = dets(&[b_box, d_box, none]);
        let agreement = agree(&a, &b, Tolerance::SPLIT).expect("same shape");
        assert!(agreement.within, "{agreement:?}");
        // A C far from every tied box is a wrong result.
        let far = [60.0, 60.0, 70.0, 70.0, 0.4, 1.0];
        assert!(!agree(&dets(&[a_box, far, d_box]), &b, Tolerance::SPLIT).expect("same shape").within);
        // So is a C of another class, which class-wise suppression never reaches.
        let other = [16.0, 0.0, 26.0, 10.0, 0.4, 2.0];
        assert!(!agree(&dets(&[a_box, other, d_box]), &b, Tolerance::SPLIT).expect("same shape").within);
    }
}
