//! Barriers of transformer detectors (RT-DETR's query selection and deformable attention):
//! top-k, gathers by computed indices and grid sampling. Each reads whole tensors whose rows
//! are not image rows (flattened positions, queries), so the output is one block computed on one
//! side.

use super::BandIn;
use crate::value::{DType, ValueInfo};
use tch::{Kind, Tensor};

/// How a grid sample interpolates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleMode {
    /// Bilinear (ONNX `bilinear`, `linear` from opset 20).
    Bilinear,
    /// Nearest.
    Nearest,
    /// Bicubic (ONNX `bicubic`, `cubic` from opset 20).
    Bicubic,
}

/// What a grid sample reads outside the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplePadding {
    /// Zeros.
    Zeros,
    /// The border value.
    Border,
    /// The input mirrored at its border.
    Reflection,
}

/// A barrier op of whole tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WholeOp {
    /// The `k` largest (or smallest) entries along `axis`, sorted, ties to the lower index:
    /// their values, or (`indices`) their positions as int64.
    TopK {
        /// How many.
        k: usize,
        /// The axis.
        axis: usize,
        /// Largest (true) or smallest.
        largest: bool,
        /// Return the positions instead of the values.
        indices: bool,
    },
    /// Entries of `axis` picked by an index tensor computed at run time (ONNX Gather): the
    /// output's shape is the data's with that axis replaced by the indices' shape.
    Gather {
        /// The axis indexed.
        axis: usize,
    },
    /// `out[i][j][k] = data[index[i][j][k]][j][k]` along `axis` (ONNX GatherElements; negative
    /// indices count from the end).
    GatherElements {
        /// The axis indexed.
        axis: usize,
    },
    /// Samples `[N, C, H, W]` at the normalised points of a grid `[N, Ho, Wo, 2]`.
    GridSample {
        /// Interpolation.
        mode: SampleMode,
        /// Outside the input.
        padding: SamplePadding,
        /// Whether -1 and 1 are the centres of the corner pixels (else their outer edges).
        align_corners: bool,
    },
}

impl WholeOp {
    /// Short name (errors, hashes, `lop inspect`).
    pub fn name(&self) -> &'static str {
        match self {
            WholeOp::TopK { indices: false, .. } => "TopK",
            WholeOp::TopK { indices: true, .. } => "TopKIndices",
            WholeOp::Gather { .. } => "Gather",
            WholeOp::GatherElements { .. } => "GatherElements",
            WholeOp::GridSample { .. } => "GridSample",
        }
    }

    /// How many inputs the op reads.
    pub(super) fn arity(&self) -> usize {
        match self {
            WholeOp::TopK { .. } => 1,
            WholeOp::Gather { .. } | WholeOp::GatherElements { .. } | WholeOp::GridSample { .. } => 2,
        }
    }

    /// The output: one block (no row axis).
    pub(super) fn infer(&self, ins: &[&ValueInfo]) -> Result<ValueInfo, String> {
        let x = ins[0];
        match self {
            WholeOp::TopK { k, axis, indices, .. } => {
                let n = *x.shape.get(*axis).ok_or_else(|| format!("axis {axis} out of range for shape {:?}", x.shape))?;
                if *k > n {
                    return Err(format!("k = {k} is larger than axis {axis}'s extent {n} (shape {:?}); k can be at most {n}", x.shape));
                }
                if !matches!(x.dtype, DType::F32 | DType::I64 | DType::U8) {
                    return Err(format!("top-k of {:?} values", x.dtype));
                }
                let mut shape = x.shape.clone();
                shape[*axis] = *k;
                Ok(ValueInfo { shape, dtype: if *indices { DType::I64 } else { x.dtype }, row_axis: None })
            }
            WholeOp::Gather { axis } => {
                let idx = ins[1];
                if idx.dtype != DType::I64 {
                    return Err(format!("indices must be int64, not {:?}", idx.dtype));
                }
                if *axis >= x.shape.len() {
                    return Err(format!("axis {axis} out of range for shape {:?}", x.shape));
                }
                let shape = [&x.shape[..*axis], &idx.shape[..], &x.shape[axis + 1..]].concat();
                Ok(ValueInfo { shape, dtype: x.dtype, row_axis: None })
            }
            WholeOp::GatherElements { axis } => {
                let idx = ins[1];
                if idx.dtype != DType::I64 {
                    return Err(format!("indices must be int64, not {:?}", idx.dtype));
                }
                if idx.shape.len() != x.shape.len() || *axis >= x.shape.len() {
                    return Err(format!("indices {:?} and data {:?} along axis {axis}: ranks must match", idx.shape, x.shape));
                }
                if idx.shape.iter().zip(&x.shape).enumerate().any(|(a, (i, d))| a != *axis && i > d) {
                    return Err(format!("indices {:?} exceed data {:?} off axis {axis}", idx.shape, x.shape));
                }
                Ok(ValueInfo { shape: idx.shape.clone(), dtype: x.dtype, row_axis: None })
            }
            WholeOp::GridSample { .. } => {
                let g = ins[1];
                if x.shape.len() != 4 || g.shape.len() != 4 || g.shape[3] != 2 || g.shape[0] != x.shape[0] {
                    return Err(format!(
                        "a grid sample takes an input [N, C, H, W] and a grid [N, Ho, Wo, 2]; got {:?} and {:?}",
                        x.shape, g.shape
                    ));
                }
                if x.dtype != DType::F32 || g.dtype != DType::F32 {
                    return Err(format!("a grid sample takes float32 input and grid, not {:?} and {:?}", x.dtype, g.dtype));
                }
                Ok(ValueInfo { shape: vec![x.shape[0], x.shape[1], g.shape[1], g.shape[2]], dtype: DType::F32, row_axis: None })
            }
        }
    }

    /// The whole output from whole inputs.
    pub(super) fn compute(&self, ins: &[BandIn<'_>]) -> Result<Tensor, tch::TchError> {
        let x = ins[0].whole()?;
        match self {
            WholeOp::TopK { k, axis, largest, indices } => {
                // A stable sort puts equal values in index order, as ONNX asks of TopK.
                let (values, order) = x.f_sort_stable(true, *axis as i64, *largest)?;
                let keep = if *indices { order } else { values };
                keep.f_narrow(*axis as i64, 0, *k as i64)?.f_contiguous()
            }
            WholeOp::Gather { axis } => {
                let idx = ins[1].whole()?;
                let n = x.size()[*axis];
                let wrapped = idx.f_where_self(&idx.f_ge(0)?, &idx.f_add_scalar(n)?)?.f_reshape([-1])?;
                let picked = x.f_index_select(*axis as i64, &wrapped)?;
                let dims = x.size();
                let shape = [&dims[..*axis], &idx.size()[..], &dims[axis + 1..]].concat();
                picked.f_reshape(shape.as_slice())
            }
            WholeOp::GatherElements { axis } => {
                let idx = ins[1].whole()?;
                let n = x.size()[*axis];
                let wrapped = idx.f_where_self(&idx.f_ge(0)?, &idx.f_add_scalar(n)?)?;
                x.f_gather(*axis as i64, &wrapped, false)
            }
            WholeOp::GridSample { mode, padding, align_corners } => {
                let grid = ins[1].whole()?;
                let m = match mode {
                    SampleMode::Bilinear => 0,
                    SampleMode::Nearest => 1,
                    SampleMode::Bicubic => 2,
                };
                let p = match padding {
                    SamplePadding::Zeros => 0,
                    SamplePadding::Border => 1,
                    SamplePadding::Reflection => 2,
                };
                x.f_grid_sampler(&grid.f_to_kind(Kind::Float)?, m, p, *align_corners)
            }
        }
    }
}
