//! Resize (nearest and linear) with ONNX coordinate transformation modes.
//!
//! Implemented as index selection with per-axis source tables, so a band reads exactly the
//! source rows the whole computation reads and produces bitwise the same values.

use super::BandIn;
use crate::rows::{Footprint, Rows};
use crate::value::ValueInfo;
use tch::{Kind, Tensor};

/// Interpolation mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeMode {
    /// Nearest neighbour with a rounding rule.
    Nearest(NearestMode),
    /// Linear (bilinear / trilinear, separably).
    Linear,
}

/// ONNX `nearest_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NearestMode {
    /// Round half down.
    RoundPreferFloor,
    /// Round half up.
    RoundPreferCeil,
    /// Floor.
    Floor,
    /// Ceil.
    Ceil,
}

/// ONNX `coordinate_transformation_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoordMode {
    /// `(x + 0.5) / scale - 0.5`.
    HalfPixel,
    /// Like half_pixel, but 0 when the output has one element.
    PytorchHalfPixel,
    /// `x * (in - 1) / (out - 1)`.
    AlignCorners,
    /// `x / scale`.
    Asymmetric,
    /// `(x + 0.5) / scale` (nearest only).
    TfHalfPixelForNn,
}

/// Resize attributes: the output shape and the scale per axis (as given or derived from sizes).
#[derive(Debug, Clone, PartialEq)]
pub struct Resize {
    /// Interpolation.
    pub mode: ResizeMode,
    /// Coordinate mapping.
    pub coord: CoordMode,
    /// Full output shape (same rank as the input; N and C unchanged).
    pub out_shape: Vec<usize>,
    /// Scale per axis (`out / in` when sizes were given).
    pub scales: Vec<f32>,
}

/// Source taps for one output index along one axis.
#[derive(Debug, Clone, Copy)]
struct Tap {
    i0: usize,
    i1: usize,
    w: f32,
}

impl Resize {
    pub(super) fn infer(&self, x: &ValueInfo) -> Result<ValueInfo, String> {
        if self.out_shape.len() != x.shape.len() || self.scales.len() != x.shape.len() {
            return Err(format!("output shape {:?} / scales {:?} do not match input {:?}", self.out_shape, self.scales, x.shape));
        }
        if self.out_shape[..2] != x.shape[..2] {
            return Err(format!("resizing batch or channel axes ({:?} -> {:?}) is not supported", x.shape, self.out_shape));
        }
        if self.out_shape.contains(&0) || self.scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(format!("empty output {:?} or invalid scales {:?}", self.out_shape, self.scales));
        }
        Ok(ValueInfo { shape: self.out_shape.clone(), dtype: x.dtype, row_axis: x.row_axis })
    }

    fn taps(&self, axis: usize, in_len: usize, out: &Rows) -> Vec<Tap> {
        let out_len = self.out_shape[axis];
        let scale = self.scales[axis];
        out.clone()
            .map(|o| {
                let xo = o as f32;
                let x = match self.coord {
                    CoordMode::HalfPixel => (xo + 0.5) / scale - 0.5,
                    CoordMode::PytorchHalfPixel => {
                        if out_len > 1 {
                            (xo + 0.5) / scale - 0.5
                        } else {
                            0.0
                        }
                    }
                    CoordMode::AlignCorners => {
                        if out_len == 1 {
                            0.0
                        } else {
                            xo * (in_len as f32 - 1.0) / (out_len as f32 - 1.0)
                        }
                    }
                    CoordMode::Asymmetric => xo / scale,
                    CoordMode::TfHalfPixelForNn => (xo + 0.5) / scale,
                };
                let last = in_len as f32 - 1.0;
                match self.mode {
                    ResizeMode::Nearest(m) => {
                        let r = match m {
                            NearestMode::RoundPreferFloor => {
                                if x.fract() == 0.5 {
                                    x.floor()
                                } else {
                                    x.round()
                                }
                            }
                            NearestMode::RoundPreferCeil => {
                                if x.fract() == 0.5 {
                                    x.ceil()
                                } else {
                                    x.round()
                                }
                            }
                            NearestMode::Floor => x.floor(),
                            NearestMode::Ceil => x.ceil(),
                        };
                        let i = r.clamp(0.0, last) as usize;
                        Tap { i0: i, i1: i, w: 0.0 }
                    }
                    ResizeMode::Linear => {
                        let x = x.clamp(0.0, last);
                        let i0 = x.floor() as usize;
                        let i1 = (i0 + 1).min(in_len - 1);
                        Tap { i0, i1, w: x - i0 as f32 }
                    }
                }
            })
            .collect()
    }

    pub(super) fn footprint(&self, x: &ValueInfo, out: &ValueInfo, rows: &Rows) -> Footprint {
        let Some(ra) = x.row_axis else { return Footprint::Whole };
        if out.row_axis != Some(ra) || rows.is_empty() {
            return Footprint::Rows(0..0);
        }
        let taps = self.taps(ra, x.shape[ra], rows);
        let lo = taps.iter().map(|t| t.i0.min(t.i1)).min().unwrap_or(0);
        let hi = taps.iter().map(|t| t.i0.max(t.i1)).max().map_or(0, |m| m + 1);
        Footprint::Rows(lo..hi)
    }

    pub(super) fn compute(&self, b: &BandIn<'_>, out: &ValueInfo, rows: &Rows) -> Result<Tensor, tch::TchError> {
        let ra = b.info.row_axis.unwrap_or(2);
        let fp = match self.footprint(b.info, out, rows) {
            Footprint::Rows(r) => r,
            _ => 0..b.info.rows(),
        };
        let mut x = b.rows(&fp)?;
        let dev = x.device();
        for axis in 2..self.out_shape.len() {
            let in_len = b.info.shape[axis];
            let out_rows = if axis == ra { rows.clone() } else { 0..self.out_shape[axis] };
            if axis != ra && in_len == self.out_shape[axis] && self.scales[axis] == 1.0 {
                continue;
            }
            let offset = if axis == ra { fp.start } else { 0 };
            let taps = self.taps(axis, in_len, &out_rows);
            let i0: Vec<i64> = taps.iter().map(|t| (t.i0 - offset) as i64).collect();
            let g0 = x.f_index_select(axis as i64, &Tensor::from_slice(&i0).f_to_device(dev)?)?;
            x = match self.mode {
                ResizeMode::Nearest(_) => g0,
                ResizeMode::Linear => {
                    let i1: Vec<i64> = taps.iter().map(|t| (t.i1 - offset) as i64).collect();
                    let w: Vec<f32> = taps.iter().map(|t| t.w).collect();
                    let g1 = x.f_index_select(axis as i64, &Tensor::from_slice(&i1).f_to_device(dev)?)?;
                    let mut shape = vec![1i64; self.out_shape.len()];
                    shape[axis] = -1;
                    let w = Tensor::from_slice(&w).f_to_device(dev)?.f_to_kind(Kind::Float)?.f_view(shape.as_slice())?;
                    // g0 + (g1 - g0) * w, the same formula for every band.
                    g0.f_add(&g1.f_sub(&g0)?.f_mul(&w)?)?
                }
            };
        }
        Ok(x)
    }
}
