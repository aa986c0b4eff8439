//! Values as libtorch holds them. What a value is (its element type, static shape and row axis,
//! and the memory layout a side keeps its tensors in) is `lop_core::value`, re-exported here;
//! this module adds what only a side that computes needs: a dtype's libtorch kind, and a layout
//! applied to and read from a tensor. Bring [`DTypeKind`] or [`LayoutTensor`] into scope to call
//! `DType::kind`, `DType::from_kind`, `Layout::apply` or `Layout::of`.

use tch::Kind;

pub use lop_core::value::{DType, Layout, ValueInfo};

/// A [`DType`]'s libtorch kind, and back.
pub trait DTypeKind: Sized {
    /// The libtorch kind.
    fn kind(self) -> Kind;
    /// The dtype of a libtorch kind, if the engine carries it.
    fn from_kind(kind: Kind) -> Option<Self>;
}

impl DTypeKind for DType {
    fn kind(self) -> Kind {
        match self {
            DType::U8 => Kind::Uint8,
            DType::F32 => Kind::Float,
            DType::I64 => Kind::Int64,
            DType::Bool => Kind::Bool,
        }
    }

    fn from_kind(kind: Kind) -> Option<DType> {
        match kind {
            Kind::Uint8 => Some(DType::U8),
            Kind::Float => Some(DType::F32),
            Kind::Int64 => Some(DType::I64),
            Kind::Bool => Some(DType::Bool),
            _ => None,
        }
    }
}

/// A [`Layout`] applied to a libtorch tensor, and read from one.
pub trait LayoutTensor: Sized {
    /// `t` (of rank 4 or 5) with this layout's strides; other ranks unchanged.
    ///
    /// # Errors
    /// When libtorch cannot copy the tensor.
    fn apply(self, t: &tch::Tensor) -> Result<tch::Tensor, tch::TchError>;
    /// The layout of `t`'s strides: channels-last when channels are its innermost axis and it
    /// has more than one channel and spatial position; NCHW otherwise.
    fn of(t: &tch::Tensor) -> Self;
}

impl LayoutTensor for Layout {
    fn apply(self, t: &tch::Tensor) -> Result<tch::Tensor, tch::TchError> {
        let rank = t.dim();
        match self {
            Layout::Nchw => t.f_contiguous(),
            Layout::ChannelsLast if rank == 4 || rank == 5 => {
                // Permuted so that channels are last, made contiguous, permuted back: the NCHW
                // shape over NHWC memory.
                let to_last: Vec<i64> = std::iter::once(0).chain(2..rank as i64).chain(std::iter::once(1)).collect();
                let back: Vec<i64> = std::iter::once(0).chain(std::iter::once(rank as i64 - 1)).chain(1..rank as i64 - 1).collect();
                t.f_permute(to_last.as_slice())?.f_contiguous()?.f_permute(back.as_slice())
            }
            Layout::ChannelsLast => Ok(t.shallow_clone()),
        }
    }

    fn of(t: &tch::Tensor) -> Layout {
        let (size, stride) = (t.size(), t.stride());
        let rank = size.len();
        if (rank == 4 || rank == 5) && size[1] > 1 && size[2..].iter().product::<i64>() > 1 && stride[1] == 1 {
            Layout::ChannelsLast
        } else {
            Layout::Nchw
        }
    }
}
