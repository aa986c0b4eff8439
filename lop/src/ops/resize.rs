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

    /// The integer factor `k` by which nearest resizing repeats every source index along
    /// `axis` for output indices `out` (source `o / k`, as an upsampling by 2 gives), checked
    /// against the taps themselves; `None` for any other mapping.
    fn repeat_factor(&self, axis: usize, in_len: usize, out: &Rows) -> Option<usize> {
        let out_len = self.out_shape[axis];
        if !matches!(self.mode, ResizeMode::Nearest(_)) || in_len == 0 || !out_len.is_multiple_of(in_len) {
            return None;
        }
        let k = out_len / in_len;
        self.taps(axis, in_len, out).iter().zip(out.clone()).all(|(t, o)| t.i0 == o / k).then_some(k)
    }

    /// Nearest resizing of a 4-d band `x` (rows from `x_start` of the input, row axis `ra` = 2)
    /// that repeats every pixel `kh` x `kw` times, as one broadcast copy in `x`'s memory order
    /// (channels-last stays channels-last) instead of an index selection per axis: the same
    /// values, picked by the same taps. `None` where the mapping is not such a repetition.
    fn replicate(&self, x: &Tensor, info: &ValueInfo, ra: usize, rows: &Rows, x_start: usize) -> Result<Option<Tensor>, tch::TchError> {
        if info.shape.len() != 4 || ra != 2 || rows.is_empty() {
            return Ok(None);
        }
        let (Some(kh), Some(kw)) =
            (self.repeat_factor(2, info.shape[2], rows), self.repeat_factor(3, info.shape[3], &(0..self.out_shape[3])))
        else {
            return Ok(None);
        };
        let (first, last) = (rows.start / kh, (rows.end - 1) / kh);
        let src = x.f_narrow(2, (first - x_start) as i64, (last - first + 1) as i64)?;
        let s = src.size();
        let (n, c, h, w) = (s[0], s[1], s[2], s[3]);
        let (kh, kw) = (kh as i64, kw as i64);
        let channels_last = c > 1 && src.stride()[1] == 1;
        let grown = if channels_last {
            let nhwc = src.f_permute([0, 2, 3, 1])?.f_reshape([n, h, 1, w, 1, c])?;
            nhwc.f_expand([n, h, kh, w, kw, c], false)?.f_reshape([n, h * kh, w * kw, c])?.f_permute([0, 3, 1, 2])?
        } else {
            let nchw = src.f_reshape([n, c, h, 1, w, 1])?;
            nchw.f_expand([n, c, h, kh, w, kw], false)?.f_reshape([n, c, h * kh, w * kw])?
        };
        Ok(Some(grown.f_narrow(2, (rows.start - first * kh as usize) as i64, rows.len() as i64)?))
    }

    pub(super) fn compute(&self, b: &BandIn<'_>, out: &ValueInfo, rows: &Rows) -> Result<Tensor, tch::TchError> {
        let ra = b.info.row_axis.unwrap_or(2);
        let fp = match self.footprint(b.info, out, rows) {
            Footprint::Rows(r) => r,
            _ => 0..b.info.rows(),
        };
        let mut x = b.rows(&fp)?;
        if let Some(y) = self.replicate(&x, b.info, ra, rows, fp.start)? {
            return Ok(y);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    fn nearest(mode: NearestMode, coord: CoordMode, k: usize) -> Resize {
        Resize { mode: ResizeMode::Nearest(mode), coord, out_shape: vec![1, 6, 7 * k, 5 * k], scales: vec![1.0, 1.0, k as f32, k as f32] }
    }

    /// Bands of a nearest upsampling that repeats pixels (any start row, channels-last or not)
    /// are one broadcast copy with the values `o / k` picks, in the input's memory order; a
    /// mapping that is not a repetition is left to the index selection.
    #[test]
    fn repeating_upsamplings_copy_once_and_pick_the_taps_pixels() {
        let info = ValueInfo { shape: vec![1, 6, 7, 5], dtype: crate::value::DType::F32, row_axis: Some(2) };
        let nchw = Tensor::randn([1, 6, 7, 5], (Kind::Float, Device::Cpu));
        let cl = nchw.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2]);
        let cases = [
            (NearestMode::Floor, CoordMode::Asymmetric, 2),
            (NearestMode::Floor, CoordMode::Asymmetric, 3),
            (NearestMode::RoundPreferFloor, CoordMode::HalfPixel, 2),
        ];
        for (mode, coord, k) in cases {
            let r = nearest(mode, coord, k);
            let out = ValueInfo { shape: r.out_shape.clone(), ..info.clone() };
            for rows in [0..7 * k, 3..11, 1..2] {
                let want = nchw
                    .index_select(2, &Tensor::from_slice(&rows.clone().map(|o| (o / k) as i64).collect::<Vec<_>>()))
                    .index_select(3, &Tensor::from_slice(&(0..5 * k).map(|o| (o / k) as i64).collect::<Vec<_>>()));
                for x in [&nchw, &cl] {
                    let got = r.replicate(x, &info, 2, &rows, 0).expect("replicate").expect("a repetition");
                    assert!(got.equal(&want), "{mode:?} {coord:?} x{k} rows {rows:?}");
                    assert_eq!(got.stride()[1] == 1, x.stride()[1] == 1, "the input's memory order is kept");
                    let band = BandIn { tensor: x, start: 0, info: &info };
                    assert!(r.compute(&band, &out, &rows).expect("compute").equal(&want));
                }
            }
        }
        // Rounding half to even positions at x3 is not a repetition (o = 2 picks source 1).
        let r = nearest(NearestMode::RoundPreferFloor, CoordMode::Asymmetric, 3);
        assert_eq!(r.repeat_factor(2, 7, &(0..21)), None);
        assert!(r.replicate(&nchw, &info, 2, &(0..21), 0).expect("no error").is_none());
        let linear = Resize { mode: ResizeMode::Linear, ..nearest(NearestMode::Floor, CoordMode::Asymmetric, 2) };
        assert!(linear.replicate(&nchw, &info, 2, &(0..14), 0).expect("no error").is_none());
    }
}
