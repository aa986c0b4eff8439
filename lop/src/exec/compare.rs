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
}
