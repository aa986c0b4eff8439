//! Sliding-window ops: convolution, transposed convolution, max and average pooling.
//!
//! Bands are computed by taking exactly the input rows the window touches and padding only the
//! rows that lie outside the real tensor (zeros for conv and average pooling, -inf for max
//! pooling), so every band sees the same numbers the whole computation sees.

use super::BandIn;
use crate::rows::{Footprint, Rows, clamp_rows, window_rows};
use crate::value::LayoutTensor;
use crate::value::{Layout, ValueInfo};
use tch::{Kind, Tensor};

/// Convolution attributes and weights (also used for transposed convolution).
pub struct Conv {
    /// `[C_out, C_in/groups, k...]` (conv) or `[C_in, C_out/groups, k...]` (transposed).
    pub weight: Tensor,
    /// `[C_out]`.
    pub bias: Option<Tensor>,
    /// Per spatial dim.
    pub strides: Vec<usize>,
    /// Leading pads per spatial dim.
    pub pads_begin: Vec<usize>,
    /// Trailing pads per spatial dim.
    pub pads_end: Vec<usize>,
    /// Per spatial dim.
    pub dilations: Vec<usize>,
    /// Extra trailing output rows (transposed convolution only).
    pub output_padding: Vec<usize>,
    /// Channel groups.
    pub groups: usize,
    /// The weight made ready for oneDNN's channels-last convolution (a 2-d float convolution on
    /// the CPU in [`crate::value::Layout::ChannelsLast`]): run straight on oneDNN where it is
    /// loaded ([`super::DirectConv`]), else prepacked for libtorch's route. Without it libtorch
    /// reorders the weight into oneDNN's blocked format at every call, which costs as much as
    /// the convolution for wide layers and is paid again by every band. `None`: the plain path.
    /// Set by [`crate::graph::Graph::set_layout`]; `weight` stays the reference.
    pub packed: Option<super::PreparedConv>,
    /// An activation applied to the output in the same call ([`crate::fuse`] folds one that
    /// only this convolution feeds): oneDNN's post-op on the direct path, the activation's own
    /// kernel on the output elsewhere. `None` as imported.
    pub act: Option<super::UnaryOp>,
}

/// Every field but [`Conv::packed`], as the derived form printed them before it existed: the
/// content hash reads an op's `Debug` form (so hashes of existing models stay), and a packed
/// weight is each side's private layout choice, which must not change what the graph is. A
/// fused activation is printed (and so hashed) only where there is one.
impl std::fmt::Debug for Conv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Conv");
        d.field("weight", &self.weight)
            .field("bias", &self.bias)
            .field("strides", &self.strides)
            .field("pads_begin", &self.pads_begin)
            .field("pads_end", &self.pads_end)
            .field("dilations", &self.dilations)
            .field("output_padding", &self.output_padding)
            .field("groups", &self.groups);
        if let Some(act) = &self.act {
            d.field("act", act);
        }
        d.finish()
    }
}

/// Pooling attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// Window per spatial dim.
    pub kernel: Vec<usize>,
    /// Per spatial dim.
    pub strides: Vec<usize>,
    /// Leading pads per spatial dim.
    pub pads_begin: Vec<usize>,
    /// Trailing pads per spatial dim.
    pub pads_end: Vec<usize>,
    /// Per spatial dim (max pooling only).
    pub dilations: Vec<usize>,
    /// Round the output size up (the last window may hang over the padded input).
    pub ceil_mode: bool,
    /// Average pooling: count padding cells in the divisor.
    pub count_include_pad: bool,
}

#[cfg(test)]
impl Pool {
    /// A 3x3 window, stride 1, padding 1 (output rows = input rows; each reads one row of halo
    /// on either side): the smallest op with a halo, for tests.
    pub(crate) fn same_3x3() -> Pool {
        Pool {
            kernel: vec![3, 3],
            strides: vec![1, 1],
            pads_begin: vec![1, 1],
            pads_end: vec![1, 1],
            dilations: vec![1, 1],
            ceil_mode: false,
            count_include_pad: false,
        }
    }
}

fn i64s(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

/// Zero-or-value padding of the row axis (axis 2): `top` rows before, `bottom` after.
fn pad_rows(x: &Tensor, top: usize, bottom: usize, value: f64) -> Result<Tensor, tch::TchError> {
    if top == 0 && bottom == 0 {
        return Ok(x.shallow_clone());
    }
    let nsp = x.dim() - 2;
    let mut pad = vec![0i64; 2 * nsp];
    pad[2 * nsp - 2] = top as i64;
    pad[2 * nsp - 1] = bottom as i64;
    x.f_pad(pad.as_slice(), "constant", value)
}

/// Pads the non-row spatial dims whose pads are asymmetric (libtorch pads symmetrically only);
/// returns the padded tensor and the symmetric pads left for the kernel to apply.
fn pad_asymmetric_cols(x: &Tensor, begin: &[usize], end: &[usize], value: f64) -> Result<(Tensor, Vec<i64>), tch::TchError> {
    let nsp = begin.len();
    let mut native = vec![0i64; nsp];
    let mut pad = vec![0i64; 2 * nsp];
    let mut any = false;
    for d in 1..nsp {
        if begin[d] == end[d] {
            native[d] = begin[d] as i64;
        } else {
            // F.pad lists the last dim first.
            let k = nsp - 1 - d;
            pad[2 * k] = begin[d] as i64;
            pad[2 * k + 1] = end[d] as i64;
            any = true;
        }
    }
    let x = if any { x.f_pad(pad.as_slice(), "constant", value)? } else { x.shallow_clone() };
    Ok((x, native))
}

/// Input rows a window op needs for output rows `rows`, and the virtual pad rows on each side.
struct RowWindow {
    take: Rows,
    top: usize,
    bottom: usize,
}

fn row_window(rows: &Rows, kernel_extent: usize, stride: usize, pad_begin: usize, in_rows: usize) -> RowWindow {
    let (s, e) = window_rows(rows, kernel_extent, stride, pad_begin);
    let take = clamp_rows(s, e, in_rows);
    let top = (take.start as i64 - s).max(0) as usize;
    let bottom = (e - take.end as i64).max(0) as usize;
    RowWindow { take, top, bottom }
}

fn spatial_out(len: usize, pb: usize, pe: usize, extent: usize, stride: usize, ceil: bool) -> Result<usize, String> {
    let padded = len + pb + pe;
    if padded < extent || stride == 0 {
        return Err(format!("window extent {extent} larger than padded input {padded} (or stride 0)"));
    }
    let span = padded - extent;
    let mut n = if ceil { span.div_ceil(stride) } else { span / stride } + 1;
    // The last window must start inside the input or its leading pad.
    if ceil && (n - 1) * stride >= len + pb {
        n -= 1;
    }
    Ok(n)
}

fn check_lens(nsp: usize, fields: &[(&str, usize)]) -> Result<(), String> {
    for (name, len) in fields {
        if *len != nsp {
            return Err(format!("{name} has {len} entries for {nsp} spatial dims"));
        }
    }
    Ok(())
}

impl Conv {
    /// A 2-d convolution of `weight` (`[C_out, C_in, k, k]`, k odd), stride 1, no bias, padded
    /// so that output rows equal input rows: the plain "same" convolution.
    pub fn same2d(weight: Tensor) -> Conv {
        let pad = usize::try_from(weight.size().last().copied().unwrap_or(1).max(1) / 2).unwrap_or(0);
        Conv {
            weight,
            bias: None,
            strides: vec![1, 1],
            pads_begin: vec![pad; 2],
            pads_end: vec![pad; 2],
            dilations: vec![1, 1],
            output_padding: vec![0, 0],
            groups: 1,
            packed: None,
            act: None,
        }
    }

    /// `y` with the fused activation applied ([`Conv::act`]), where oneDNN did not apply it.
    fn activate(&self, y: Tensor) -> Result<Tensor, tch::TchError> {
        match &self.act {
            Some(act) => act.apply(&y),
            None => Ok(y),
        }
    }

    fn nsp(&self) -> usize {
        self.weight.dim().saturating_sub(2)
    }

    /// The weight made ready for inputs of `input_size` ([`Conv::packed`]): straight on oneDNN
    /// where it is loaded; else prepacked for libtorch's route where that applies (symmetric
    /// pads: libtorch's kernel pads symmetrically, and bands pad rows themselves).
    pub(crate) fn pack(&self, input_size: &[usize]) -> Result<Option<super::PreparedConv>, tch::TchError> {
        if input_size.len() != 4 {
            return Ok(None);
        }
        let direct =
            super::DirectConv::new(&self.weight, self.bias.as_ref(), &self.strides, &self.dilations, self.groups, self.act.as_ref())?;
        if let Some(d) = direct {
            return Ok(Some(super::PreparedConv::Direct(std::sync::Arc::new(d))));
        }
        if self.pads_begin != self.pads_end {
            return Ok(None);
        }
        let packed = super::PackedWeights::new(&self.weight, &self.pads_begin, &self.strides, &self.dilations, self.groups, input_size)?;
        Ok(packed.map(|p| super::PreparedConv::Libtorch(std::sync::Arc::new(p))))
    }
    fn kernel(&self) -> Vec<usize> {
        self.weight.size()[2..].iter().map(|&k| k as usize).collect()
    }
    fn extent(&self, d: usize) -> usize {
        (self.kernel()[d] - 1) * self.dilations[d] + 1
    }
    fn check(&self, x: &ValueInfo) -> Result<(), String> {
        let nsp = self.nsp();
        if nsp == 0 || x.shape.len() != nsp + 2 {
            return Err(format!("weight {:?} does not fit input {:?}", self.weight.size(), x.shape));
        }
        check_lens(
            nsp,
            &[
                ("strides", self.strides.len()),
                ("pads_begin", self.pads_begin.len()),
                ("pads_end", self.pads_end.len()),
                ("dilations", self.dilations.len()),
                ("output_padding", self.output_padding.len()),
            ],
        )?;
        if self.groups == 0 || self.strides.contains(&0) || self.dilations.contains(&0) {
            return Err("groups, strides and dilations must be positive".into());
        }
        Ok(())
    }

    pub(super) fn infer_conv(&self, x: &ValueInfo) -> Result<ValueInfo, String> {
        self.check(x)?;
        let w = self.weight.size();
        let cin = w[1] as usize * self.groups;
        if x.shape[1] != cin {
            return Err(format!("input has {} channels, weight {:?} with {} groups expects {cin}", x.shape[1], w, self.groups));
        }
        if !(w[0] as usize).is_multiple_of(self.groups) {
            return Err(format!("{} output channels are not divisible into {} groups", w[0], self.groups));
        }
        let mut shape = vec![x.shape[0], w[0] as usize];
        for d in 0..self.nsp() {
            shape.push(spatial_out(x.shape[2 + d], self.pads_begin[d], self.pads_end[d], self.extent(d), self.strides[d], false)?);
        }
        Ok(ValueInfo { shape, dtype: x.dtype, row_axis: Some(2) })
    }

    pub(super) fn infer_conv_transpose(&self, x: &ValueInfo) -> Result<ValueInfo, String> {
        self.check(x)?;
        let w = self.weight.size();
        if x.shape[1] != w[0] as usize || !(w[0] as usize).is_multiple_of(self.groups) {
            return Err(format!("input has {} channels, transposed weight {:?} expects {}", x.shape[1], w, w[0]));
        }
        let mut shape = vec![x.shape[0], w[1] as usize * self.groups];
        for d in 0..self.nsp() {
            let full = (x.shape[2 + d] - 1) * self.strides[d] + self.extent(d) + self.output_padding[d];
            let pads = self.pads_begin[d] + self.pads_end[d];
            if full <= pads {
                return Err(format!("pads {pads} remove the whole output along spatial dim {d}"));
            }
            shape.push(full - pads);
        }
        Ok(ValueInfo { shape, dtype: x.dtype, row_axis: Some(2) })
    }

    pub(super) fn conv_footprint(&self, x: &ValueInfo, rows: &Rows) -> Footprint {
        if x.row_axis != Some(2) {
            return Footprint::Whole;
        }
        let w = row_window(rows, self.extent(0), self.strides[0], self.pads_begin[0], x.shape[2]);
        Footprint::Rows(w.take)
    }

    /// Input rows `[lo, hi)` contributing to output rows `rows` of a transposed convolution.
    fn transpose_inputs(&self, rows: &Rows, in_rows: usize) -> Rows {
        let s = self.strides[0] as i64;
        let ext = self.extent(0) as i64;
        let pb = self.pads_begin[0] as i64;
        // Output row o (unpadded coordinate y = o + pb) receives input i when i*s <= y < i*s + ext.
        let lo = (rows.start as i64 + pb - ext + 1).div_euclid(s) + i64::from((rows.start as i64 + pb - ext + 1).rem_euclid(s) != 0);
        let hi = (rows.end as i64 - 1 + pb).div_euclid(s) + 1;
        clamp_rows(lo, hi, in_rows)
    }

    pub(super) fn conv_transpose_footprint(&self, x: &ValueInfo, rows: &Rows) -> Footprint {
        if x.row_axis != Some(2) {
            return Footprint::Whole;
        }
        Footprint::Rows(self.transpose_inputs(rows, x.shape[2]))
    }

    /// [`Conv::compute_conv`] written into `dst` (see [`super::DirectConv::run_into`]) where the
    /// convolution runs on oneDNN directly; false, writing nothing, where it does not.
    pub(super) fn compute_conv_into(&self, b: &BandIn<'_>, rows: &Rows, dst: &Tensor) -> Result<bool, tch::TchError> {
        let Some(super::PreparedConv::Direct(d)) = &self.packed else { return Ok(false) };
        let w = row_window(rows, self.extent(0), self.strides[0], self.pads_begin[0], b.info.shape[2]);
        let pads = [w.top as i64, self.pads_begin[1] as i64, w.bottom as i64, self.pads_end[1] as i64];
        if b.info.row_axis == Some(2) && b.tensor.dim() == 4 && !w.take.is_empty() {
            // The band's rows are read in place, without a view.
            return d.run_rows_into(b.tensor, b.start, &w.take, pads, dst);
        }
        let x = b.rows(&w.take)?;
        if x.device() != tch::Device::Cpu || x.kind() != Kind::Float || x.dim() != 4 {
            return Ok(false);
        }
        d.run_into(&x, pads, dst)
    }

    pub(super) fn compute_conv(&self, b: &BandIn<'_>, rows: &Rows) -> Result<Tensor, tch::TchError> {
        let w = row_window(rows, self.extent(0), self.strides[0], self.pads_begin[0], b.info.shape[2]);
        let x = b.rows(&w.take)?;
        if let Some(super::PreparedConv::Direct(d)) = &self.packed
            && x.device() == tch::Device::Cpu
            && x.kind() == Kind::Float
            && x.dim() == 4
        {
            // The band's own padding, asymmetric where it meets the frame's edge, is oneDNN's.
            let pads = [w.top as i64, self.pads_begin[1] as i64, w.bottom as i64, self.pads_end[1] as i64];
            let y = d.run(&x, pads)?;
            return if y.size()[2] as usize > rows.len() { y.f_narrow(2, 0, rows.len() as i64) } else { Ok(y) };
        }
        let (x, mut native) = pad_asymmetric_cols(&x, &self.pads_begin, &self.pads_end, 0.0)?;
        // libtorch pads symmetrically: when the band needs at least as much padding on top as
        // at the bottom, symmetric padding only adds trailing windows, which are cut off.
        let x = if w.top >= w.bottom {
            native[0] = w.top as i64;
            x
        } else {
            pad_rows(&x, w.top, w.bottom, 0.0)?
        };
        let zeros = vec![0i64; self.nsp()];
        let (strides, dilations) = (i64s(&self.strides), i64s(&self.dilations));
        let packed = match &self.packed {
            Some(super::PreparedConv::Libtorch(p)) if x.device() == tch::Device::Cpu && x.kind() == Kind::Float && x.dim() == 4 => {
                p.for_shape(&self.weight, &x.size(), &native, &strides, &dilations, self.groups as i64)?
            }
            _ => None,
        };
        let y = if let Some(packed) = packed {
            let x = Layout::ChannelsLast.apply(&x)?;
            super::packed::conv(&x, &packed, self.bias.as_ref(), &native, &strides, &dilations, self.groups as i64)?
        } else if mkldnn_3d(&x) {
            x.f_mkldnn_convolution(
                &self.weight,
                self.bias.as_ref(),
                native.as_slice(),
                i64s(&self.strides).as_slice(),
                i64s(&self.dilations).as_slice(),
                self.groups as i64,
            )?
        } else {
            x.f_convolution(
                &self.weight,
                self.bias.as_ref(),
                i64s(&self.strides).as_slice(),
                native.as_slice(),
                i64s(&self.dilations).as_slice(),
                false,
                zeros.as_slice(),
                self.groups as i64,
            )?
        };
        let y = if y.size()[2] as usize > rows.len() { y.f_narrow(2, 0, rows.len() as i64)? } else { y };
        self.activate(y)
    }

    pub(super) fn compute_conv_transpose(&self, b: &BandIn<'_>, out: &ValueInfo, rows: &Rows) -> Result<Tensor, tch::TchError> {
        let nsp = self.nsp();
        let take = self.transpose_inputs(rows, b.info.shape[2]);
        // Columns: libtorch handles symmetric pads; asymmetric ones are cropped afterwards.
        let mut native = vec![0i64; nsp];
        let mut outpad = vec![0i64; nsp];
        for d in 1..nsp {
            if self.pads_begin[d] == self.pads_end[d] {
                native[d] = self.pads_begin[d] as i64;
                outpad[d] = self.output_padding[d] as i64;
            }
        }
        let mut shape = out.shape.iter().map(|&d| d as i64).collect::<Vec<_>>();
        shape[2] = rows.len() as i64;
        let y = if take.is_empty() {
            Tensor::f_zeros(shape.as_slice(), (b.tensor.kind(), b.tensor.device()))?
        } else {
            let x = b.rows(&take)?;
            let no_bias: Option<&Tensor> = None;
            let mut y = x.f_convolution(
                &self.weight,
                no_bias,
                i64s(&self.strides).as_slice(),
                native.as_slice(),
                i64s(&self.dilations).as_slice(),
                true,
                outpad.as_slice(),
                self.groups as i64,
            )?;
            for d in 1..nsp {
                if self.pads_begin[d] != self.pads_end[d] {
                    let keep = out.shape[2 + d] as i64;
                    y = y.f_narrow(2 + d as i64, self.pads_begin[d] as i64, keep)?;
                }
            }
            // y's first row is unpadded coordinate take.start * stride; we want rows.start + pb.
            let y0 = (take.start * self.strides[0]) as i64;
            let want0 = (rows.start + self.pads_begin[0]) as i64;
            let want1 = want0 + rows.len() as i64;
            let have1 = y0 + y.size()[2];
            let lo = want0.max(y0);
            let hi = want1.min(have1);
            let mid = if hi > lo { y.f_narrow(2, lo - y0, hi - lo)? } else { y.f_narrow(2, 0, 0)? };
            let top = (lo - want0).clamp(0, rows.len() as i64) as usize;
            let bottom = rows.len() - top - mid.size()[2] as usize;
            pad_rows(&mid, top, bottom, 0.0)?
        };
        let y = match &self.bias {
            Some(bias) => {
                let mut v = vec![1i64; nsp + 2];
                v[1] = -1;
                y.f_add(&bias.f_view(v.as_slice())?)?
            }
            None => y,
        };
        self.activate(y)
    }
}

/// Whether a convolution over `x` goes to oneDNN directly: 3-d convolutions of float tensors on
/// the CPU, where libtorch builds have it. libtorch's own choice counts batch, channels, depth
/// and height against a threshold meant for 2-d inputs (20480) and leaves out the width, so a
/// band of a voxel grid (16 channels, 40 of 256 rows, 32 x 256) fell to its reference kernel,
/// 17-22x slower than oneDNN (600 ms against 28-34 ms for 34 rows here), while the whole grid
/// took oneDNN: bands cost ten times their share, and the planner rightly refused to cut them.
/// Going to oneDNN for every band and the whole alike also makes both round alike.
pub(super) fn mkldnn_3d(x: &Tensor) -> bool {
    x.dim() == 5 && x.device() == tch::Device::Cpu && x.kind() == Kind::Float && tch::utils::has_mkldnn()
}

impl Pool {
    /// A square 2-d window with symmetric padding, no dilation, floor rounding and padding
    /// excluded from averages: the common pooling layer.
    pub fn square2d(kernel: usize, stride: usize, pad: usize) -> Pool {
        Pool {
            kernel: vec![kernel; 2],
            strides: vec![stride; 2],
            pads_begin: vec![pad; 2],
            pads_end: vec![pad; 2],
            dilations: vec![1; 2],
            ceil_mode: false,
            count_include_pad: false,
        }
    }

    fn nsp(&self) -> usize {
        self.kernel.len()
    }
    fn extent(&self, d: usize) -> usize {
        (self.kernel[d] - 1) * self.dilations[d] + 1
    }

    pub(super) fn infer(&self, x: &ValueInfo) -> Result<ValueInfo, String> {
        let nsp = self.nsp();
        if !(2..=3).contains(&nsp) || x.shape.len() != nsp + 2 {
            return Err(format!("{nsp}-d pooling on input {:?} (2-d and 3-d pooling are supported)", x.shape));
        }
        check_lens(
            nsp,
            &[
                ("strides", self.strides.len()),
                ("pads_begin", self.pads_begin.len()),
                ("pads_end", self.pads_end.len()),
                ("dilations", self.dilations.len()),
            ],
        )?;
        if self.kernel.contains(&0) || self.strides.contains(&0) || self.dilations.contains(&0) {
            return Err("kernel, strides and dilations must be positive".into());
        }
        let mut shape = x.shape[..2].to_vec();
        for d in 0..nsp {
            shape.push(spatial_out(x.shape[2 + d], self.pads_begin[d], self.pads_end[d], self.extent(d), self.strides[d], self.ceil_mode)?);
        }
        Ok(ValueInfo { shape, dtype: x.dtype, row_axis: Some(2) })
    }

    pub(super) fn footprint(&self, x: &ValueInfo, rows: &Rows) -> Footprint {
        if x.row_axis != Some(2) {
            return Footprint::Whole;
        }
        Footprint::Rows(row_window(rows, self.extent(0), self.strides[0], self.pads_begin[0], x.shape[2]).take)
    }

    /// Pads every non-row spatial dim explicitly to exactly the extent the windows cover
    /// (including ceil-mode overhang), so the kernel runs with no padding of its own.
    fn pad_cols_exact(&self, x: &Tensor, info: &ValueInfo, out: &[usize], value: f64) -> Result<Tensor, tch::TchError> {
        let nsp = self.nsp();
        let mut pad = vec![0i64; 2 * nsp];
        for (d, &n_out) in out.iter().enumerate().skip(1) {
            let len = info.shape[2 + d];
            let need = (n_out - 1) * self.strides[d] + self.extent(d);
            let end = need.saturating_sub(len + self.pads_begin[d]);
            let k = nsp - 1 - d;
            pad[2 * k] = self.pads_begin[d] as i64;
            pad[2 * k + 1] = end as i64;
        }
        if pad.iter().all(|&p| p == 0) { Ok(x.shallow_clone()) } else { x.f_pad(pad.as_slice(), "constant", value) }
    }

    fn out_cols(&self, info: &ValueInfo) -> Vec<usize> {
        (0..self.nsp())
            .map(|d| {
                spatial_out(info.shape[2 + d], self.pads_begin[d], self.pads_end[d], self.extent(d), self.strides[d], self.ceil_mode)
                    .unwrap_or(1)
            })
            .collect()
    }

    fn run(&self, x: &Tensor, max: bool, divisor_override: Option<i64>) -> Result<Tensor, tch::TchError> {
        let k = i64s(&self.kernel);
        let s = i64s(&self.strides);
        let zeros = vec![0i64; self.nsp()];
        match (max, self.nsp()) {
            (true, 2) => x.f_max_pool2d(k.as_slice(), s.as_slice(), zeros.as_slice(), i64s(&self.dilations).as_slice(), false),
            (true, _) => x.f_max_pool3d(k.as_slice(), s.as_slice(), zeros.as_slice(), i64s(&self.dilations).as_slice(), false),
            (false, 2) => x.f_avg_pool2d(k.as_slice(), s.as_slice(), zeros.as_slice(), false, true, divisor_override),
            (false, _) => x.f_avg_pool3d(k.as_slice(), s.as_slice(), zeros.as_slice(), false, true, divisor_override),
        }
    }

    pub(super) fn compute_max(&self, b: &BandIn<'_>, rows: &Rows) -> Result<Tensor, tch::TchError> {
        let w = row_window(rows, self.extent(0), self.strides[0], self.pads_begin[0], b.info.shape[2]);
        let x = b.rows(&w.take)?;
        let out = self.out_cols(b.info);
        if let Some(y) = self.max_on_onednn(&x, b.info, &w, rows, &out)? {
            return Ok(y);
        }
        let x = self.pad_cols_exact(&x, b.info, &out, f64::NEG_INFINITY)?;
        let x = pad_rows(&x, w.top, w.bottom, f64::NEG_INFINITY)?;
        self.run(&x, true, None)
    }

    /// [`Pool::compute_max`] of a 2-d channels-last band on oneDNN, with the band's padding given
    /// rather than copied in ([`super::direct_pool`]); `None` where that path does not apply.
    fn max_on_onednn(
        &self,
        x: &Tensor,
        info: &ValueInfo,
        w: &RowWindow,
        rows: &Rows,
        out: &[usize],
    ) -> Result<Option<Tensor>, tch::TchError> {
        if self.nsp() != 2 {
            return Ok(None);
        }
        let i = |v: usize| v as i64;
        // The right pad covers the windows exactly (ceil mode's overhang included), as
        // `pad_cols_exact` pads.
        let need = (out[1] - 1) * self.strides[1] + self.extent(1);
        let right = need.saturating_sub(info.shape[3] + self.pads_begin[1]);
        let window = super::direct_pool::Window {
            kernel: [i(self.kernel[0]), i(self.kernel[1])],
            strides: [i(self.strides[0]), i(self.strides[1])],
            dilations: [i(self.dilations[0]), i(self.dilations[1])],
        };
        let pads = [i(w.top), i(self.pads_begin[1]), i(w.bottom), i(right)];
        super::direct_pool::max_pool(x, window, pads, [i(rows.len()), i(out[1])])
    }

    /// Number of cells each window of one spatial dim divides by.
    fn divisors(&self, d: usize, len: usize, out: &Rows) -> Vec<f32> {
        out.clone()
            .map(|o| {
                let start = (o * self.strides[d]) as i64 - self.pads_begin[d] as i64;
                let end = start + self.kernel[d] as i64;
                let n = if self.count_include_pad {
                    end.min((len + self.pads_end[d]) as i64) - start
                } else {
                    end.min(len as i64) - start.max(0)
                };
                n.max(1) as f32
            })
            .collect()
    }

    pub(super) fn compute_avg(&self, b: &BandIn<'_>, rows: &Rows) -> Result<Tensor, tch::TchError> {
        let w = row_window(rows, self.extent(0), self.strides[0], self.pads_begin[0], b.info.shape[2]);
        let x = b.rows(&w.take)?;
        let out = self.out_cols(b.info);
        let x = self.pad_cols_exact(&x, b.info, &out, 0.0)?;
        let x = pad_rows(&x, w.top, w.bottom, 0.0)?;
        let sums = self.run(&x, false, Some(1))?;
        // Divisor per output cell: the product of per-dim counts.
        let nsp = self.nsp();
        let mut div: Option<Tensor> = None;
        for d in 0..nsp {
            let range = if d == 0 { rows.clone() } else { 0..out[d] };
            let v = Tensor::from_slice(&self.divisors(d, b.info.shape[2 + d], &range)).f_to_device(x.device())?;
            let mut shape = vec![1i64; nsp + 2];
            shape[2 + d] = -1;
            let v = v.f_view(shape.as_slice())?;
            div = Some(match div {
                None => v,
                Some(acc) => acc.f_mul(&v)?,
            });
        }
        match div {
            Some(div) => sums.f_div(&div.f_to_kind(Kind::Float)?),
            None => Ok(sums),
        }
    }
}
