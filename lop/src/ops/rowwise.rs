//! Per-pixel ops over non-row axes, and reductions: reduce-mean, layer norm, linear, matmul.

use super::BandIn;
use crate::rows::{Footprint, Rows};
use crate::value::{DType, ValueInfo};
use tch::Tensor;

/// A reduction other than the mean (which has its own op, [`super::Op::ReduceMean`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceKind {
    /// Sum.
    Sum,
    /// Largest.
    Max,
    /// Smallest.
    Min,
}

impl ReduceKind {
    /// ONNX name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "ReduceSum",
            ReduceKind::Max => "ReduceMax",
            ReduceKind::Min => "ReduceMin",
        }
    }

    pub(super) fn apply(self, x: &Tensor, dims: &[i64], keepdims: bool) -> Result<Tensor, tch::TchError> {
        match self {
            ReduceKind::Sum => x.f_sum_dim_intlist(dims, keepdims, None::<tch::Kind>),
            ReduceKind::Max => x.f_amax(dims, keepdims),
            ReduceKind::Min => x.f_amin(dims, keepdims),
        }
    }
}

pub(super) fn infer_reduce(x: &ValueInfo, axes: &[usize], keepdims: bool) -> Result<ValueInfo, String> {
    if axes.is_empty() || axes.iter().any(|&a| a >= x.shape.len()) || axes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("reduce axes {axes:?} invalid for shape {:?} (sorted, unique, in range)", x.shape));
    }
    let mut shape = Vec::new();
    for (i, &d) in x.shape.iter().enumerate() {
        if !axes.contains(&i) {
            shape.push(d);
        } else if keepdims {
            shape.push(1);
        }
    }
    let row_axis = match x.row_axis {
        Some(ra) if keepdims => Some(ra),
        Some(ra) if !axes.contains(&ra) => Some(ra - axes.iter().filter(|&&a| a < ra).count()),
        _ => None,
    };
    Ok(ValueInfo { shape, dtype: DType::F32, row_axis })
}

pub(super) fn infer_layer_norm(x: &ValueInfo, axis: usize) -> Result<ValueInfo, String> {
    if axis >= x.shape.len() {
        return Err(format!("normalised axis {axis} out of range for {:?}", x.shape));
    }
    Ok(x.clone())
}

pub(super) fn infer_linear(x: &ValueInfo, weight: &Tensor) -> Result<ValueInfo, String> {
    let w = weight.size();
    let k = x.shape.last().copied().unwrap_or(0);
    if w.len() != 2 || w[1] as usize != k {
        return Err(format!("linear weight {w:?} does not fit input {:?} (last axis {k})", x.shape));
    }
    let mut shape = x.shape.clone();
    if let Some(last) = shape.last_mut() {
        *last = w[0] as usize;
    }
    Ok(ValueInfo { shape, ..x.clone() })
}

pub(super) fn infer_matmul(a: &ValueInfo, b: &ValueInfo) -> Result<ValueInfo, String> {
    if a.shape.len() < 2 || b.shape.len() < 2 {
        return Err(format!("matmul of {:?} and {:?} needs rank >= 2 operands", a.shape, b.shape));
    }
    let (m, k) = (a.shape[a.shape.len() - 2], a.shape[a.shape.len() - 1]);
    let (k2, n) = (b.shape[b.shape.len() - 2], b.shape[b.shape.len() - 1]);
    if k != k2 {
        return Err(format!("matmul inner dims differ: {:?} x {:?}", a.shape, b.shape));
    }
    let batch = super::elementwise::infer_binary(
        &ValueInfo { shape: a.shape[..a.shape.len() - 2].to_vec(), dtype: a.dtype, row_axis: None },
        &ValueInfo { shape: b.shape[..b.shape.len() - 2].to_vec(), dtype: b.dtype, row_axis: None },
    )?;
    let mut shape = batch.shape;
    shape.push(m);
    shape.push(n);
    let rank = shape.len();
    let row_axis = match a.row_axis {
        Some(ra) if ra + 1 < a.shape.len() => Some(ra + rank - a.shape.len()),
        _ if rank >= 3 => Some(rank - 2),
        _ => None,
    };
    Ok(ValueInfo { shape, dtype: DType::F32, row_axis })
}

pub(super) fn matmul_footprint(k: usize, input: &ValueInfo, out: &ValueInfo, rows: &Rows) -> Footprint {
    let rank = out.shape.len();
    match k {
        0 => match input.row_axis {
            Some(ra) if ra + 1 < input.shape.len() && Some(ra + rank - input.shape.len()) == out.row_axis => Footprint::Rows(rows.clone()),
            _ => Footprint::Whole,
        },
        _ => {
            if input.rows() <= 1 || input.row_axis.is_none() {
                Footprint::Broadcast
            } else {
                Footprint::Whole
            }
        }
    }
}

pub(super) fn compute_matmul(ins: &[BandIn<'_>], out: &ValueInfo, rows: &Rows) -> Result<Tensor, tch::TchError> {
    let b = ins[1].whole()?;
    match matmul_footprint(0, ins[0].info, out, rows) {
        Footprint::Rows(r) => ins[0].rows(&r)?.f_matmul(&b),
        _ => {
            let y = ins[0].whole()?.f_matmul(&b)?;
            match out.row_axis {
                Some(a) if rows.len() != out.rows() => y.f_narrow(a as i64, rows.start as i64, rows.len() as i64),
                _ => Ok(y),
            }
        }
    }
}
