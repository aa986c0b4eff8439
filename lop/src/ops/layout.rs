//! Layout ops: slice, transpose, reshape, concat. They track where the row axis goes.

use super::{BandIn, Op};
use crate::rows::{Footprint, Rows};
use crate::value::ValueInfo;
use tch::Tensor;

/// One sliced axis: `start..end` with a positive `step`, already clamped to the axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceAxis {
    /// The axis.
    pub axis: usize,
    /// First index.
    pub start: usize,
    /// One past the last index considered.
    pub end: usize,
    /// Stride (> 0).
    pub step: usize,
}

impl SliceAxis {
    fn len(&self) -> usize {
        if self.end > self.start { (self.end - self.start).div_ceil(self.step) } else { 0 }
    }
}

pub(super) fn infer_slice(x: &ValueInfo, axes: &[SliceAxis]) -> Result<ValueInfo, String> {
    let mut shape = x.shape.clone();
    for s in axes {
        if s.axis >= shape.len() || s.step == 0 || s.end > x.shape[s.axis] {
            return Err(format!("slice {s:?} does not fit shape {:?}", x.shape));
        }
        shape[s.axis] = s.len();
        if shape[s.axis] == 0 {
            return Err(format!("slice {s:?} of shape {:?} is empty", x.shape));
        }
    }
    Ok(ValueInfo { shape, ..x.clone() })
}

pub(super) fn slice_footprint(x: &ValueInfo, axes: &[SliceAxis], rows: &Rows) -> Footprint {
    match x.row_axis.and_then(|ra| axes.iter().find(|s| s.axis == ra)) {
        Some(s) if !rows.is_empty() => Footprint::Rows(s.start + rows.start * s.step..s.start + (rows.end - 1) * s.step + 1),
        Some(_) => Footprint::Rows(0..0),
        None => Footprint::Rows(rows.clone()),
    }
}

pub(super) fn compute_slice(b: &BandIn<'_>, axes: &[SliceAxis], rows: &Rows) -> Result<Tensor, tch::TchError> {
    let ra = b.info.row_axis;
    let fp = match slice_footprint(b.info, axes, rows) {
        Footprint::Rows(r) => r,
        _ => 0..b.info.rows(),
    };
    let mut x = b.rows(&fp)?;
    for s in axes {
        x = if Some(s.axis) == ra {
            // The band starts at the first selected row already.
            x.f_slice(s.axis as i64, 0, fp.len() as i64, s.step as i64)?
        } else {
            x.f_slice(s.axis as i64, s.start as i64, s.end as i64, s.step as i64)?
        };
    }
    Ok(x)
}

pub(super) fn infer_transpose(x: &ValueInfo, perm: &[usize]) -> Result<ValueInfo, String> {
    let mut seen = vec![false; x.shape.len()];
    if perm.len() != x.shape.len() {
        return Err(format!("perm {perm:?} for rank {}", x.shape.len()));
    }
    for &p in perm {
        if p >= seen.len() || seen[p] {
            return Err(format!("perm {perm:?} is not a permutation of 0..{}", x.shape.len()));
        }
        seen[p] = true;
    }
    let shape = perm.iter().map(|&p| x.shape[p]).collect();
    let row_axis = x.row_axis.and_then(|ra| perm.iter().position(|&p| p == ra));
    Ok(ValueInfo { shape, dtype: x.dtype, row_axis })
}

/// Where a reshape keeps the row axis intact: an output axis with the same extent and the same
/// number of elements before it.
fn reshape_row_axis(x: &ValueInfo, shape: &[usize]) -> Option<usize> {
    let ra = x.row_axis?;
    let before: usize = x.shape[..ra].iter().product();
    let mut acc = 1usize;
    for (j, &d) in shape.iter().enumerate() {
        if acc == before && d == x.shape[ra] {
            return Some(j);
        }
        acc *= d;
        if acc > before {
            return None;
        }
    }
    None
}

pub(super) fn infer_reshape(x: &ValueInfo, shape: &[usize]) -> Result<ValueInfo, String> {
    let n: usize = shape.iter().product();
    if n != x.numel() {
        return Err(format!("cannot reshape {:?} ({} elements) to {shape:?} ({n} elements)", x.shape, x.numel()));
    }
    // Rows survive only where the reshape keeps them intact; merged or split rows (flattened
    // anchors, box bins) are no longer image rows, so the value becomes one block.
    Ok(ValueInfo { shape: shape.to_vec(), dtype: x.dtype, row_axis: reshape_row_axis(x, shape) })
}

/// Whether a transpose or reshape maps input row i to output row i.
pub(super) fn keeps_rows(op: &Op, x: &ValueInfo, out: &ValueInfo) -> bool {
    match op {
        Op::Transpose { perm } => match (x.row_axis, out.row_axis) {
            (Some(ra), Some(oa)) => perm[oa] == ra,
            _ => false,
        },
        Op::Reshape { shape } => x.row_axis.is_some() && reshape_row_axis(x, shape) == out.row_axis && out.row_axis.is_some(),
        _ => false,
    }
}

pub(super) fn infer_concat(ins: &[&ValueInfo], axis: usize) -> Result<ValueInfo, String> {
    let first = ins[0];
    if axis >= first.shape.len() {
        return Err(format!("axis {axis} out of range for rank {}", first.shape.len()));
    }
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for v in ins {
        if v.shape.len() != first.shape.len() || v.shape.iter().zip(&first.shape).enumerate().any(|(i, (a, b))| i != axis && a != b) {
            return Err(format!("cannot concatenate {:?} with {:?} along axis {axis}", first.shape, v.shape));
        }
        if v.dtype != first.dtype {
            return Err(format!("cannot concatenate {:?} with {:?}", first.dtype, v.dtype));
        }
        shape[axis] += v.shape[axis];
    }
    let row_axis = ins.iter().find_map(|v| v.row_axis).or(first.row_axis);
    Ok(ValueInfo { shape, dtype: first.dtype, row_axis })
}
