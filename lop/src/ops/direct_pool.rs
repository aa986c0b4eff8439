//! 2-d float max pooling run straight on oneDNN's C API (`csrc/dnnl_conv.cpp`), for channels-last
//! tensors: libtorch's channels-last max pooling computes the indices it does not need, and pads
//! only symmetrically, so a band's `-inf` rows and columns were copies first. oneDNN takes the
//! band's padding (asymmetric at a frame's edges) as given and leaves padding out of every
//! maximum, as ONNX's MaxPool does. A maximum is exact, so the values are libtorch's bit for bit.

#![cfg_attr(not(lop_onednn), allow(unused_imports, unused_variables, dead_code))]

use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicU64, Ordering};
use tch::{Kind, Tensor};

use super::direct::{available, dense_nhwc, message};

#[cfg(lop_onednn)]
unsafe extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn lop_dnnl_max_pool(
        x: *const f32,
        xdims: *const i64,
        y: *mut f32,
        ydims: *const i64,
        kernel: *const i64,
        strides: *const i64,
        dilations: *const i64,
        pads: *const i64,
        threads: c_int,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

/// Poolings run on oneDNN so far in this process (tests check that the path is taken).
static CALLS: AtomicU64 = AtomicU64::new(0);

/// How many max poolings ran on oneDNN in this process.
#[cfg(test)]
pub(crate) fn calls() -> u64 {
    CALLS.load(Ordering::Relaxed)
}

/// A 2-d max pooling's window: kernel, strides and dilations (height, width).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Kernel extent per axis.
    pub kernel: [i64; 2],
    /// Stride per axis.
    pub strides: [i64; 2],
    /// Dilation per axis (1: none).
    pub dilations: [i64; 2],
}

/// The max pooling of `x` (`[N, C, H, W]`, float, CPU, dense NHWC memory) padded by `pads` (top,
/// left, bottom, right), as a channels-last tensor of `out` rows and columns; `None` where this
/// path does not apply (oneDNN not loaded, another dtype, device or memory order, or `out`
/// inconsistent with the window), so that the caller keeps libtorch's route.
///
/// # Errors
/// oneDNN's or libtorch's message.
pub fn max_pool(x: &Tensor, window: Window, pads: [i64; 4], out: [i64; 2]) -> Result<Option<Tensor>, tch::TchError> {
    let size = x.size();
    if size.len() != 4 || x.kind() != Kind::Float || x.device() != tch::Device::Cpu || !dense_nhwc(x) || !available() {
        return Ok(None);
    }
    let extent = |d: usize| (window.kernel[d] - 1) * window.dilations[d] + 1;
    let fits = |d: usize| {
        let span = size[2 + d] + pads[d] + pads[d + 2] - extent(d);
        span >= 0 && span / window.strides[d] + 1 == out[d] && pads[d] < extent(d) && pads[d + 2] < extent(d)
    };
    if !(fits(0) && fits(1)) {
        return Ok(None);
    }
    let y = Tensor::f_empty([size[0], out[0], out[1], size[1]], (Kind::Float, tch::Device::Cpu))?;
    let ydims = [size[0], size[1], out[0], out[1]];
    call(x, &size, &y, ydims, window, pads)?;
    CALLS.fetch_add(1, Ordering::Relaxed);
    y.f_permute([0, 3, 1, 2]).map(Some)
}

#[cfg(lop_onednn)]
fn call(x: &Tensor, xdims: &[i64], y: &Tensor, ydims: [i64; 4], window: Window, pads: [i64; 4]) -> Result<(), tch::TchError> {
    let mut err = [0 as c_char; 512];
    let threads = c_int::try_from(tch::get_num_threads()).unwrap_or(1);
    // SAFETY: `x` and `y` are dense NHWC float tensors of `xdims` and `ydims` (in NCHW order),
    // alive for the call; every array holds the entries the shim reads; it catches everything.
    let rc = unsafe {
        lop_dnnl_max_pool(
            x.data_ptr() as *const f32,
            xdims.as_ptr(),
            y.data_ptr() as *mut f32,
            ydims.as_ptr(),
            window.kernel.as_ptr(),
            window.strides.as_ptr(),
            window.dilations.as_ptr(),
            pads.as_ptr(),
            threads,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    if rc != 0 {
        return Err(tch::TchError::Torch(format!("oneDNN max pooling: {}", message(&err))));
    }
    Ok(())
}

#[cfg(not(lop_onednn))]
fn call(_: &Tensor, _: &[i64], _: &Tensor, _: [i64; 4], _: Window, _: [i64; 4]) -> Result<(), tch::TchError> {
    Err(tch::TchError::Torch("lop was built without oneDNN".into()))
}

#[cfg(test)]
#[path = "direct_pool_tests.rs"]
mod tests;
