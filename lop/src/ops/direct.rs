//! 2-d float convolutions run straight on oneDNN's C API (`csrc/dnnl_conv.cpp`), each keeping
//! its primitive and packed weight per input shape.
//!
//! libtorch reaches the same oneDNN kernels through `mkldnn::_convolution_pointwise`
//! ([`super::packed`]), but spends about 25 us of set-up on every call before oneDNN's primitive
//! cache; the kernel itself is the same speed. A whole yolo_det makes 63 such calls, and a server
//! computing each layer in 8 bands makes 8 times as many, so the set-up alone put a floor of
//! 1.25-1.44x the whole run under the banded run (stop 66). Called directly a call costs about
//! 1 us beyond its kernel, and a band's padding (asymmetric at a frame's edges) is given to
//! oneDNN instead of being copied in.
//!
//! oneDNN comes from the pinned `onednn-cpu-gomp` wheel `scripts/setup.sh` installs into the
//! venv (x86_64): GNU OpenMP, the runtime the torch wheel also loads, so both share one thread
//! pool. The library is opened at the first convolution ([`available`]); where it is missing
//! (another machine, aarch64) or `LOP_ONEDNN=off`, convolutions keep libtorch's route, with
//! the same results under the comparison rule.

// Built without oneDNN's headers, the module only answers that it is not available: its calls
// into the shim are compiled out, which leaves some of what feeds them unused.
#![cfg_attr(not(lop_onednn), allow(unused_imports, unused_mut, dead_code))]

use std::ffi::{CStr, c_char, c_int, c_void};
use tch::{Kind, Tensor};

use super::UnaryOp;
use super::packed::PackingStats;
use crate::rows::Rows;

#[cfg(lop_onednn)]
unsafe extern "C" {
    fn lop_dnnl_load(path: *const c_char, err: *mut c_char, err_len: usize) -> c_int;
    #[allow(clippy::too_many_arguments)]
    fn lop_dnnl_conv_new(
        w: *const f32,
        wdims: *const i64,
        groups: i64,
        bias: *const f32,
        strides: *const i64,
        dilations: *const i64,
        post: c_int,
        alpha: f32,
        beta: f32,
        err: *mut c_char,
        err_len: usize,
    ) -> *mut c_void;
    #[allow(clippy::too_many_arguments)]
    fn lop_dnnl_conv_run(
        ctx: *mut c_void,
        x: *const f32,
        xdims: *const i64,
        pads: *const i64,
        y: *mut f32,
        ydims: *const i64,
        threads: c_int,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn lop_dnnl_conv_stats(ctx: *mut c_void, shapes: *mut i64, formats: *mut i64, uncached: *mut i64);
    fn lop_dnnl_conv_free(ctx: *mut c_void);
}

/// Where oneDNN is looked for: `LOP_ONEDNN_LIB` at run time, else the venv's copy the build saw,
/// else the loader's own search path.
#[cfg(lop_onednn)]
fn library_candidates() -> Vec<String> {
    let mut c = Vec::new();
    if let Ok(p) = std::env::var("LOP_ONEDNN_LIB") {
        c.push(p);
    }
    c.push(env!("LOP_ONEDNN_LIB_BUILT").to_string());
    c.push("libdnnl.so.3".to_string());
    c
}

/// Whether convolutions run straight on oneDNN: the build found its headers, `LOP_ONEDNN` is
/// not `off`, and the library opened (tried once; the reason it did not is logged once).
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| match load() {
        Ok(()) => true,
        Err(why) => {
            tracing::info!(%why, "convolutions take libtorch's route");
            false
        }
    })
}

#[cfg(lop_onednn)]
fn load() -> Result<(), String> {
    if std::env::var("LOP_ONEDNN").is_ok_and(|v| v == "off") {
        return Err("LOP_ONEDNN=off".into());
    }
    let mut whys = Vec::new();
    for path in library_candidates() {
        let Ok(c) = std::ffi::CString::new(path.clone()) else { continue };
        let mut err = [0 as c_char; 512];
        // SAFETY: a NUL-terminated path and an error buffer of its stated length; the shim
        // catches everything and loads at most once.
        if unsafe { lop_dnnl_load(c.as_ptr(), err.as_mut_ptr(), err.len()) } == 0 {
            return Ok(());
        }
        whys.push(message(&err));
    }
    Err(whys.join("; "))
}

#[cfg(not(lop_onednn))]
fn load() -> Result<(), String> {
    Err("lop was built without oneDNN's headers (scripts/setup.sh installs them on x86_64)".into())
}

/// The shim's NUL-terminated message.
pub(super) fn message(err: &[c_char]) -> String {
    // SAFETY: the shim always NUL-terminates within the buffer (zeroed before the call).
    unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned()
}

/// oneDNN's post-op for `act` applied to a convolution's output in the same pass: the shim's
/// code (1 ReLU with a negative slope, 2 swish, 3 logistic, 4 clip, 5 hard sigmoid, 6 hard
/// swish) and its two parameters.
/// `None` for an activation without one (the convolution then runs without oneDNN here).
pub fn post_op(act: Option<&UnaryOp>) -> Option<(c_int, f32, f32)> {
    match act {
        None => Some((0, 0.0, 0.0)),
        Some(UnaryOp::Relu) => Some((1, 0.0, 0.0)),
        Some(UnaryOp::LeakyRelu(alpha)) => Some((1, *alpha, 0.0)),
        Some(UnaryOp::Silu) => Some((2, 1.0, 0.0)),
        Some(UnaryOp::Sigmoid) => Some((3, 0.0, 0.0)),
        Some(UnaryOp::Clip { min, max }) => Some((4, *min, *max)),
        Some(UnaryOp::HardSigmoid { alpha, beta }) => Some((5, *alpha, *beta)),
        Some(UnaryOp::HardSwish) => Some((6, 1.0 / 6.0, 0.5)),
        Some(_) => None,
    }
}

/// A convolution's oneDNN context (its weight copy, primitives and packings); freed on drop.
pub struct DirectConv {
    ctx: *mut c_void,
    kernel: [i64; 2],
    strides: [i64; 2],
    dilations: [i64; 2],
    out_channels: i64,
}

// SAFETY: the context is only touched through the shim, which holds its own lock for each call.
unsafe impl Send for DirectConv {}
// SAFETY: as above.
unsafe impl Sync for DirectConv {}

impl DirectConv {
    /// The context for a 2-d float CPU convolution of `weight` (`[C_out, C_in/groups, kh, kw]`),
    /// `bias`, `strides`, `dilations` and `groups`, with `act` applied to its output; `None`
    /// where this path does not apply (another dtype, device or rank, an activation without a
    /// post-op ([`post_op`]), or no oneDNN).
    ///
    /// # Errors
    /// libtorch failures copying the weight; the shim's message.
    pub fn new(
        weight: &Tensor,
        bias: Option<&Tensor>,
        strides: &[usize],
        dilations: &[usize],
        groups: usize,
        act: Option<&UnaryOp>,
    ) -> Result<Option<DirectConv>, tch::TchError> {
        let cpu_float = |t: &Tensor| t.device() == tch::Device::Cpu && t.kind() == Kind::Float;
        if weight.dim() != 4 || strides.len() != 2 || dilations.len() != 2 || !cpu_float(weight) || !bias.is_none_or(cpu_float) {
            return Ok(None);
        }
        let Some(post) = post_op(act) else { return Ok(None) };
        if !available() {
            return Ok(None);
        }
        Self::create(weight, bias, strides, dilations, groups, post).map(Some)
    }

    #[cfg(lop_onednn)]
    fn create(
        weight: &Tensor,
        bias: Option<&Tensor>,
        strides: &[usize],
        dilations: &[usize],
        groups: usize,
        post: (c_int, f32, f32),
    ) -> Result<DirectConv, tch::TchError> {
        let w = weight.f_contiguous()?;
        let b = bias.map(Tensor::f_contiguous).transpose()?;
        let wdims = w.size();
        let i64s = |v: &[usize]| [v[0] as i64, v[1] as i64];
        let (strides, dilations) = (i64s(strides), i64s(dilations));
        let mut err = [0 as c_char; 512];
        let bias_ptr = b.as_ref().map_or(std::ptr::null(), |b| b.data_ptr() as *const f32);
        // SAFETY: `w` is a contiguous float tensor of `wdims` and `b` one of `wdims[0]` floats,
        // alive for the call (the shim copies both); the small arrays hold the stated entries.
        let ctx = unsafe {
            lop_dnnl_conv_new(
                w.data_ptr() as *const f32,
                wdims.as_ptr(),
                groups as i64,
                bias_ptr,
                strides.as_ptr(),
                dilations.as_ptr(),
                post.0,
                post.1,
                post.2,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if ctx.is_null() {
            return Err(tch::TchError::Torch(format!("oneDNN convolution: {}", message(&err))));
        }
        Ok(DirectConv { ctx, kernel: [wdims[2], wdims[3]], strides, dilations, out_channels: wdims[0] })
    }

    #[cfg(not(lop_onednn))]
    fn create(
        _: &Tensor,
        _: Option<&Tensor>,
        _: &[usize],
        _: &[usize],
        _: usize,
        _: (c_int, f32, f32),
    ) -> Result<DirectConv, tch::TchError> {
        Err(tch::TchError::Torch("lop was built without oneDNN".into()))
    }

    /// The convolution of `x` (`[N, C, H, W]`, float, CPU, any strides) padded by `pads` (top,
    /// left, bottom, right), as a channels-last tensor.
    ///
    /// # Errors
    /// A padded input smaller than the kernel; oneDNN's or libtorch's message.
    pub fn run(&self, x: &Tensor, pads: [i64; 4]) -> Result<Tensor, tch::TchError> {
        let (size, [oh, ow]) = self.out_size(x, pads)?;
        let nhwc = dense(x)?;
        let y = Tensor::f_empty([size[0], oh, ow, self.out_channels], (Kind::Float, tch::Device::Cpu))?;
        self.call(nhwc.data_ptr() as *const f32, &size, pads, y.data_ptr() as *mut f32, [size[0], self.out_channels, oh, ow])?;
        y.f_permute([0, 3, 1, 2])
    }

    /// [`DirectConv::run`] written into `dst` (`[N, C_out, OH, OW]` over dense NHWC memory, as
    /// a row band of a channels-last value of one sample is), so that a value computed in
    /// chunks is one block of memory without joining them. Returns false, writing nothing, when
    /// `dst` is not such a tensor of the output's shape.
    ///
    /// # Errors
    /// As [`DirectConv::run`].
    pub fn run_into(&self, x: &Tensor, pads: [i64; 4], dst: &Tensor) -> Result<bool, tch::TchError> {
        let (size, [oh, ow]) = self.out_size(x, pads)?;
        let ydims = [size[0], self.out_channels, oh, ow];
        if !writable(dst, ydims) {
            return Ok(false);
        }
        let nhwc = dense(x)?;
        self.call(nhwc.data_ptr() as *const f32, &size, pads, dst.data_ptr() as *mut f32, ydims)?;
        Ok(true)
    }

    /// [`DirectConv::run_into`] on rows `take` of `x` (a band whose first row is row `start` of
    /// its value), read in place when those rows lie in dense NHWC memory, as a band of a
    /// channels-last value of one sample does: no view is made. A libtorch view costs about a
    /// microsecond, and a server computing every layer in 8 bands would make one per band of
    /// every convolution. Other inputs are read through a view, as [`DirectConv::run_into`] does.
    ///
    /// # Errors
    /// Rows outside the band; as [`DirectConv::run`].
    pub fn run_rows_into(&self, x: &Tensor, start: usize, take: &Rows, pads: [i64; 4], dst: &Tensor) -> Result<bool, tch::TchError> {
        let (size, stride) = (x.size(), x.stride());
        let have = size.get(2).map_or(0, |&h| h as usize);
        if size.len() != 4 || take.start < start || take.end > start + have || take.is_empty() {
            return Err(tch::TchError::Shape(format!(
                "band holds rows {start}..{} of {size:?}; rows {take:?} were asked for",
                start + have
            )));
        }
        let band = [size[0], size[1], take.len() as i64, size[3]];
        if x.kind() != Kind::Float || x.device() != tch::Device::Cpu {
            return Ok(false);
        }
        if !dense_nhwc_dims(&band, &stride) {
            let view = x.f_narrow(2, (take.start - start) as i64, take.len() as i64)?;
            return self.run_into(&view, pads, dst);
        }
        let [oh, ow] = self.out_dims(&band, pads)?;
        let ydims = [band[0], self.out_channels, oh, ow];
        if !writable(dst, ydims) {
            return Ok(false);
        }
        let offset = (take.start - start) * stride[2] as usize;
        // SAFETY: rows `take` lie within `x` (checked above), so the offset of the first one
        // stays inside `x`'s memory, which is alive for the call.
        let first = unsafe { (x.data_ptr() as *const f32).add(offset) };
        self.call(first, &band, pads, dst.data_ptr() as *mut f32, ydims)?;
        Ok(true)
    }

    /// `x`'s size, checked to be a float CPU 4-d tensor, and the output's height and width
    /// under `pads`.
    fn out_size(&self, x: &Tensor, pads: [i64; 4]) -> Result<(Vec<i64>, [i64; 2]), tch::TchError> {
        let size = x.size();
        if size.len() != 4 || x.kind() != Kind::Float || x.device() != tch::Device::Cpu {
            return Err(tch::TchError::Shape(format!("oneDNN convolution of a {:?} {:?} tensor", x.kind(), size)));
        }
        let out = self.out_dims(&size, pads)?;
        Ok((size, out))
    }

    /// The output's height and width for an input of `size` (`[N, C, H, W]`) under `pads`.
    fn out_dims(&self, size: &[i64], pads: [i64; 4]) -> Result<[i64; 2], tch::TchError> {
        let out = |d: usize, pad: i64| (size[2 + d] + pad - ((self.kernel[d] - 1) * self.dilations[d] + 1)) / self.strides[d] + 1;
        let (oh, ow) = (out(0, pads[0] + pads[2]), out(1, pads[1] + pads[3]));
        if oh <= 0 || ow <= 0 {
            return Err(tch::TchError::Shape(format!("input {size:?} with pads {pads:?} is smaller than the kernel {:?}", self.kernel)));
        }
        Ok([oh, ow])
    }

    #[cfg(lop_onednn)]
    fn call(&self, x: *const f32, xdims: &[i64], pads: [i64; 4], y: *mut f32, ydims: [i64; 4]) -> Result<(), tch::TchError> {
        let mut err = [0 as c_char; 512];
        let threads = c_int::try_from(tch::get_num_threads()).unwrap_or(1);
        // SAFETY: `x` and `y` point at dense NHWC float arrays of `xdims` and `ydims` (in NCHW
        // order), alive for the call (the callers' tensors); the arrays hold 4 entries; the shim
        // catches everything.
        let rc = unsafe {
            lop_dnnl_conv_run(self.ctx, x, xdims.as_ptr(), pads.as_ptr(), y, ydims.as_ptr(), threads, err.as_mut_ptr(), err.len())
        };
        if rc != 0 {
            return Err(tch::TchError::Torch(format!("oneDNN convolution: {}", message(&err))));
        }
        Ok(())
    }

    #[cfg(not(lop_onednn))]
    fn call(&self, _: *const f32, _: &[i64], _: [i64; 4], _: *mut f32, _: [i64; 4]) -> Result<(), tch::TchError> {
        Err(tch::TchError::Torch("lop was built without oneDNN".into()))
    }

    /// Input shapes kept, packed copies of the weight kept, and calls past the caps (each packed
    /// the weight for itself).
    pub fn stats(&self) -> PackingStats {
        let (mut shapes, mut formats, mut uncached) = (0i64, 0i64, 0i64);
        #[cfg(lop_onednn)]
        // SAFETY: a live context and three out-parameters.
        unsafe {
            lop_dnnl_conv_stats(self.ctx, &mut shapes, &mut formats, &mut uncached);
        }
        PackingStats { shapes: shapes as usize, formats: formats as usize, plain_calls: uncached as usize }
    }
}

/// `x` (`[N, C, H, W]`) over dense NHWC memory, as oneDNN reads it: `x` itself when it already
/// is (a band of one sample of a channels-last value is; checked from its strides, without a
/// libtorch call, which costs a microsecond per band), else a channels-last copy.
fn dense(x: &Tensor) -> Result<Tensor, tch::TchError> {
    if dense_nhwc(x) {
        return Ok(x.shallow_clone());
    }
    x.f_permute([0, 2, 3, 1])?.f_contiguous()?.f_permute([0, 3, 1, 2])
}

/// Whether `dst` can take an output of `ydims` (`[N, C, H, W]`): a float CPU tensor of that
/// shape over dense NHWC memory, as oneDNN writes.
fn writable(dst: &Tensor, ydims: [i64; 4]) -> bool {
    dst.size() == ydims && dst.kind() == Kind::Float && dst.device() == tch::Device::Cpu && dense_nhwc(dst)
}

/// Whether `t` (`[N, C, H, W]`) lies in memory as a dense NHWC array: what oneDNN is handed.
/// Axes of extent 1 may have any stride.
pub(super) fn dense_nhwc(t: &Tensor) -> bool {
    dense_nhwc_dims(&t.size(), &t.stride())
}

/// [`dense_nhwc`] for a tensor of `size` with `stride`.
fn dense_nhwc_dims(size: &[i64], stride: &[i64]) -> bool {
    if size.len() != 4 || stride.len() != 4 {
        return false;
    }
    let mut expect = 1i64;
    for axis in [1usize, 3, 2, 0] {
        if size[axis] != 1 && stride[axis] != expect {
            return false;
        }
        expect *= size[axis];
    }
    true
}

impl Drop for DirectConv {
    fn drop(&mut self) {
        #[cfg(lop_onednn)]
        // SAFETY: the context was made by `lop_dnnl_conv_new` and is freed once, here.
        unsafe {
            lop_dnnl_conv_free(self.ctx);
        }
    }
}

/// A convolution's weight made ready for the CPU in channels-last ([`super::Conv::packed`]):
/// straight on oneDNN where it is loaded, else prepacked for libtorch's oneDNN route. Clones
/// share it (copies of a graph that share its weights, [`crate::graph::Graph::share`], share its
/// packed copies too; both kinds take calls from several threads).
#[derive(Clone)]
pub enum PreparedConv {
    /// Run by [`DirectConv`].
    Direct(std::sync::Arc<DirectConv>),
    /// Run by libtorch's `mkldnn::_convolution_pointwise` with [`super::PackedWeights`].
    Libtorch(std::sync::Arc<super::PackedWeights>),
}

impl PreparedConv {
    /// Shapes, packed copies and calls past the caps, as [`PackingStats`] counts them.
    pub fn stats(&self) -> PackingStats {
        match self {
            PreparedConv::Direct(d) => d.stats(),
            PreparedConv::Libtorch(p) => p.stats(),
        }
    }
}

#[cfg(test)]
#[path = "direct_tests.rs"]
pub(super) mod tests;
