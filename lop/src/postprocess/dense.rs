//! Per-pixel and per-voxel stages: class maps for segmentation and occupancy bits for 3-D grids.
//! Each output row needs only the same input row, so they split into bands like any local op.

use super::OccupancySpec;
use crate::value::{DType, ValueInfo};
use tch::{Kind, Tensor};

/// Per-pixel argmax over the class axis: `[1, C, H, W]` scores to a `[1, 1, H, W]` uint8 map.
/// Ties go to the lower class index, on any device.
#[derive(Debug, Clone)]
pub struct ClassMap {
    classes: usize,
}

impl ClassMap {
    pub(crate) fn new(head: &ValueInfo) -> Result<ClassMap, String> {
        let &[1, c, _, _] = &head.shape[..] else {
            return Err(format!("a segmentation head has shape [1, classes, H, W], not {:?}", head.shape));
        };
        if !(2..=256).contains(&c) || head.dtype != DType::F32 {
            return Err(format!("a segmentation head has 2 to 256 float32 class channels (axis 1); this one has {c} {:?}", head.dtype));
        }
        Ok(ClassMap { classes: c })
    }

    pub(super) fn infer(&self, head: &ValueInfo) -> Result<ValueInfo, String> {
        if head.shape.len() != 4 || head.shape[1] != self.classes {
            return Err(format!("the class map was built for {} classes, not a head of shape {:?}", self.classes, head.shape));
        }
        let mut shape = head.shape.clone();
        shape[1] = 1;
        Ok(ValueInfo { shape, dtype: DType::U8, row_axis: head.row_axis })
    }

    pub(super) fn compute(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        let best = x.f_amax([1i64].as_slice(), true)?;
        let index = Tensor::f_arange(self.classes as i64, (Kind::Int64, x.device()))?.f_view([1, -1, 1, 1])?;
        let at_best = x.f_eq_tensor(&best)?;
        let beyond = Tensor::f_full([1i64].as_slice(), self.classes as i64, (Kind::Int64, x.device()))?;
        index.f_where_self(&at_best, &beyond)?.f_amin([1i64].as_slice(), true)?.f_to_kind(Kind::Uint8)
    }
}

/// Occupied voxels: `[1, C, D, H, W]` logits to `[1, 1, D, H, ceil(W / 8)]` uint8 bits, the most
/// significant bit first along W (numpy's `packbits`). A voxel is occupied when its probability
/// is above the threshold: the sigmoid of a one-channel head, or the softmax over the channels
/// of the occupied class.
#[derive(Debug, Clone)]
pub struct Occupancy {
    threshold: f32,
    channels: usize,
    class: usize,
}

impl Occupancy {
    pub(crate) fn new(spec: &OccupancySpec, head: &ValueInfo) -> Result<Occupancy, String> {
        let &[1, c, _, _, _] = &head.shape[..] else {
            return Err(format!("an occupancy head has shape [1, C, D, H, W], not {:?}", head.shape));
        };
        if head.dtype != DType::F32 {
            return Err(format!("an occupancy head is float32, not {:?}", head.dtype));
        }
        let class = match (c, spec.class) {
            (1, None | Some(0)) => 0,
            (1, Some(k)) => return Err(format!("a one-channel occupancy head has class 0 only, not class={k}")),
            (_, None) => 1,
            (_, Some(k)) if k < c => k,
            (_, Some(k)) => return Err(format!("class={k} is out of range for {c} channels")),
        };
        Ok(Occupancy { threshold: spec.threshold, channels: c, class })
    }

    pub(super) fn infer(&self, head: &ValueInfo) -> Result<ValueInfo, String> {
        if head.shape.len() != 5 || head.shape[1] != self.channels {
            return Err(format!("the occupancy stage was built for {} channels, not a head of shape {:?}", self.channels, head.shape));
        }
        let mut shape = head.shape.clone();
        shape[1] = 1;
        shape[4] = head.shape[4].div_ceil(8);
        Ok(ValueInfo { shape, dtype: DType::U8, row_axis: head.row_axis })
    }

    pub(super) fn compute(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        let p = if self.channels == 1 { x.f_sigmoid()? } else { x.f_softmax(1, Kind::Float)?.f_narrow(1, self.class as i64, 1)? };
        let occupied = p.f_gt(f64::from(self.threshold))?.f_to_kind(Kind::Uint8)?;
        let w = occupied.size()[4];
        let padded = (w + 7) / 8 * 8;
        let occupied = if padded == w { occupied } else { occupied.f_constant_pad_nd([0, padded - w].as_slice())? };
        let mut shape = occupied.size();
        shape[4] = padded / 8;
        shape.push(8);
        let weights = Tensor::f_from_slice(&[128u8, 64, 32, 16, 8, 4, 2, 1])?.f_to_device(x.device())?;
        // Sums of distinct powers of two below 256: no overflow, exact in uint8.
        occupied.f_view(shape.as_slice())?.f_mul(&weights)?.f_sum_dim_intlist([-1i64].as_slice(), false, Kind::Uint8)
    }
}

/// The occupied voxels `(d, h, w)` of a bit grid `[.., D, H, ceil(W / 8)]` (row-major bytes) of a
/// grid `W` voxels wide, in row-major order.
pub fn occupied_voxels(bits: &[u8], depth: usize, rows: usize, width: usize) -> Vec<(usize, usize, usize)> {
    let bytes = width.div_ceil(8);
    let mut out = Vec::new();
    for (i, &byte) in bits.iter().enumerate().take(depth * rows * bytes) {
        if byte == 0 {
            continue;
        }
        let (line, b) = (i / bytes, i % bytes);
        for k in 0..8 {
            let w = b * 8 + k;
            if w < width && byte & (0x80 >> k) != 0 {
                out.push((line / rows, line % rows, w));
            }
        }
    }
    out
}
