//! Instance masks of YOLOv8-seg-style heads (`segment-instance`): the detections' masks from the
//! prototypes, as one instance-id map at the model input's resolution.
//!
//! The rules are those of ultralytics' `process_mask` (sigmoid form), written so that the map is
//! a pure function of the head and prototype values:
//! - the detections are those of the detection stage on the head (score threshold, class-wise
//!   NMS, at most `max`, best first), reading only the box and class channels;
//! - detection `i`'s mask at the prototypes' resolution `mh x mw` is
//!   `sigmoid(coefficients_i . prototypes[:, r, c])` (the dot product over the `nm` prototype
//!   channels, accumulated in f64) inside its box scaled to that resolution (column `c` is inside
//!   when `x1 * mw / W <= c < x2 * mw / W`, rows likewise: ultralytics' `crop_mask`) and 0 outside;
//! - it is upsampled to the input's `H x W` bilinearly with `align_corners = False` (PyTorch's
//!   rule: source `(dst + 0.5) * in / out - 0.5`, clamped at 0, its floor and the next index, at
//!   most the last), in f32, and a pixel is on when the value is `> mask` (0.5 by default);
//! - the map holds, per pixel, `i + 1` for the first (best) detection whose mask is on there, 0
//!   for none: a later, lower-scoring detection never overwrites an earlier one.
//!
//! It runs on the CPU in plain Rust on a copy of the head and prototypes, so it gives the same
//! map on either side of the link and on any device.

use super::detect::Detect;
use crate::value::{DType, ValueInfo};
use tch::{Device, Kind, Tensor};

/// The largest `max` of `segment-instance`: ids `1..=max` are bytes of a `mono8` image.
pub const MAX_INSTANCES: usize = 255;

/// The instance-map stage of one model: the detection stage over its head, the prototypes' shape
/// and the input's size. It reads one value, the head and the prototypes flattened and
/// concatenated (`[1, C * A + nm * mh * mw]`, built in the graph by [`super::Postprocess::apply`]).
#[derive(Debug, Clone)]
pub struct Instances {
    detect: Detect,
    /// Values of the head (`C * A`) at the front of the packed input.
    head_len: usize,
    /// Prototype channels, rows and columns.
    protos: (usize, usize, usize),
    /// The model input's rows and columns (the map's size).
    input_hw: (usize, usize),
    /// A mask pixel is on above this.
    mask: f32,
}

impl Instances {
    /// The stage for a head read by `detect` (built with its coefficients) and prototypes of
    /// shape `protos` (`[1, nm, mh, mw]`), on a model whose image input is `input_hw`.
    pub(crate) fn new(
        detect: Detect,
        head: &ValueInfo,
        protos: &ValueInfo,
        input_hw: (usize, usize),
        mask: f32,
    ) -> Result<Instances, String> {
        let &[1, nm, mh, mw] = &protos.shape[..] else {
            return Err(format!("the prototypes have shape [1, mask coefficients, H / 4, W / 4], not {:?}", protos.shape));
        };
        if protos.dtype != DType::F32 {
            return Err(format!("the prototypes are float32, not {:?}", protos.dtype));
        }
        if nm != detect.coefficients() || nm == 0 || mh == 0 || mw == 0 {
            return Err(format!("prototypes {:?} do not fit a head of {} mask coefficients", protos.shape, detect.coefficients()));
        }
        let (h, w) = input_hw;
        if h == 0 || w == 0 {
            return Err(format!("an instance map has the input's size; the input is {h}x{w}"));
        }
        Ok(Instances { detect, head_len: head.numel(), protos: (nm, mh, mw), input_hw, mask })
    }

    /// The packed input's description: `[1, C * A + nm * mh * mw]` float32.
    pub(super) fn packed_len(&self) -> usize {
        let (nm, mh, mw) = self.protos;
        self.head_len + nm * mh * mw
    }

    /// The result's description: `[1, 1, H, W]` uint8, one block.
    pub(super) fn infer(&self, packed: &ValueInfo) -> Result<ValueInfo, String> {
        if packed.shape != [1, self.packed_len()] || packed.dtype != DType::F32 {
            return Err(format!(
                "the instance stage was built for a packed head and prototypes of shape [1, {}] float32, not {:?} {:?}",
                self.packed_len(),
                packed.shape,
                packed.dtype
            ));
        }
        let (h, w) = self.input_hw;
        Ok(ValueInfo { shape: vec![1, 1, h, w], dtype: DType::U8, row_axis: None })
    }

    /// The instance map for one whole packed input.
    pub(super) fn compute(&self, packed: &Tensor) -> Result<Tensor, tch::TchError> {
        let flat = packed.f_to_device(Device::Cpu)?.f_to_kind(Kind::Float)?.f_contiguous()?.f_view([-1])?;
        let values = Vec::<f32>::try_from(&flat)?;
        if values.len() != self.packed_len() {
            return Err(tch::TchError::Shape(format!("the instance stage reads {} values, got {}", self.packed_len(), values.len())));
        }
        let (h, w) = self.input_hw;
        Tensor::f_from_slice(&self.map(&values))?.f_view([1, 1, h as i64, w as i64])
    }

    /// The map (`H * W` bytes, row-major) for the packed values.
    pub(super) fn map(&self, packed: &[f32]) -> Vec<u8> {
        let (head, protos) = packed.split_at(self.head_len.min(packed.len()));
        let (nm, mh, mw) = self.protos;
        let (h, w) = self.input_hw;
        let (anchors, first_coeff) = (self.detect.anchors(), 4 + self.detect.classes());
        let (row_taps, col_taps) = (taps(mh, h), taps(mw, w));
        let (sy, sx) = (mh as f32 / h as f32, mw as f32 / w as f32);
        let mut ids = vec![0u8; h * w];
        let mut prob = vec![0f32; mh * mw];
        for (i, k) in self.detect.kept(head).iter().enumerate().take(MAX_INSTANCES) {
            let id = (i + 1) as u8;
            let coeff: Vec<f64> = (0..nm).map(|j| f64::from(head[(first_coeff + j) * anchors + k.anchor])).collect();
            // The crop at the prototypes' resolution: lo <= index < hi.
            let span = |a: f32, b: f32, scale: f32, n: usize| (first_at_least(a * scale, n), first_at_least(b * scale, n));
            let (c0, c1) = span(k.bbox[0], k.bbox[2], sx, mw);
            let (r0, r1) = span(k.bbox[1], k.bbox[3], sy, mh);
            if c0 >= c1 || r0 >= r1 {
                continue;
            }
            prob.fill(0.0);
            for r in r0..r1 {
                for c in c0..c1 {
                    let at = r * mw + c;
                    let logit: f64 = coeff.iter().enumerate().map(|(j, a)| a * f64::from(protos[j * mh * mw + at])).sum();
                    prob[at] = (1.0 / (1.0 + (-logit).exp())) as f32;
                }
            }
            for (y, &(y0, y1, hy0, hy1)) in row_taps.iter().enumerate() {
                if y1 < r0 || y0 >= r1 {
                    continue;
                }
                let line = &mut ids[y * w..][..w];
                for (x, &(x0, x1, wx0, wx1)) in col_taps.iter().enumerate() {
                    if x1 < c0 || x0 >= c1 || line[x] != 0 {
                        continue;
                    }
                    let p = |r: usize, c: usize| prob[r * mw + c];
                    let v = hy0 * (wx0 * p(y0, x0) + wx1 * p(y0, x1)) + hy1 * (wx0 * p(y1, x0) + wx1 * p(y1, x1));
                    if v > self.mask {
                        line[x] = id;
                    }
                }
            }
        }
        ids
    }
}

/// The first index `i` in `0..=n` with `i as f32 >= v` (`n` when none; 0 for NaN).
fn first_at_least(v: f32, n: usize) -> usize {
    if v.is_nan() || v <= 0.0 {
        return 0;
    }
    let c = v.ceil();
    if c >= n as f32 { n } else { c as usize }
}

/// PyTorch's bilinear taps (`align_corners = False`) along one axis, `n_in` to `n_out`: per
/// output index the two source indices and their weights, in f32.
fn taps(n_in: usize, n_out: usize) -> Vec<(usize, usize, f32, f32)> {
    let scale = n_in as f32 / n_out as f32;
    (0..n_out)
        .map(|o| {
            let src = (scale * (o as f32 + 0.5) - 0.5).max(0.0);
            let i0 = (src as usize).min(n_in - 1);
            let i1 = if i0 + 1 < n_in { i0 + 1 } else { i0 };
            let l1 = (src - i0 as f32).clamp(0.0, 1.0);
            (i0, i1, 1.0 - l1, l1)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taps_follow_pytorch_align_corners_false() {
        // 4 -> 16: source (o + 0.5) / 4 - 0.5, clamped at 0; the last index repeats past the end.
        let t = taps(4, 16);
        assert_eq!(t[0], (0, 1, 1.0, 0.0));
        assert_eq!(t[3], (0, 1, 0.625, 0.375));
        assert_eq!(t[4], (0, 1, 0.375, 0.625));
        assert_eq!(t[15], (3, 3, 0.625, 0.375));
        assert_eq!(first_at_least(2.0, 4), 2);
        assert_eq!(first_at_least(2.25, 4), 3);
        assert_eq!(first_at_least(-1.0, 4), 0);
        assert_eq!(first_at_least(9.0, 4), 4);
        assert_eq!(first_at_least(f32::NAN, 4), 0);
    }
}
