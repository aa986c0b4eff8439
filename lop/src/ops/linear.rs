//! A linear layer with the activation folded into it ([`super::Op::Linear`]'s `act`), on oneDNN:
//! straight on its matmul where the engine opened the library ([`super::direct_linear`]), else
//! through libtorch (`mkldnn::_linear_pointwise`, by the C++ shim `csrc/pointwise.cpp`).
//!
//! libtorch's eager linear layer goes to the BLAS it ships (MKL), which on one of this project's
//! AMD CPUs ran convnext_tiny's MLP layers at half oneDNN's speed (a [1, 28, 28, 192] x
//! [768, 192] layer: 2.37 ms against 1.09 ms on one core), on another at about oneDNN's.
//!
//! **Post-op or own kernel.** oneDNN can apply the activation in the product's own pass (a
//! post-op), which saves a pass over the output. How much that pass costs depends on the CPU:
//! on an AVX2-only AMD EPYC, libtorch's oneDNN took 1.39 ms more for a [784, 192] x [768, 192]
//! layer with its exact-GELU post-op than without, while libtorch's GELU kernel over the same
//! output took 0.57 ms (SiLU 1.07 against 0.62, tanh 2.84 against 1.96; ReLU and HardSwish cost
//! nothing either way); on the CPU the fold was first measured on, the post-op was the cheaper.
//! So which is faster is measured once per activation per process, on a layer of that size,
//! the first time a layer with that activation runs ([`route`]); `LOP_LINEAR_POST_OPS=fused` or
//! `=apart` fixes it (for comparisons). Either way the values are the same function's, apart in
//! rounding: split against whole agrees under the comparison rule.

use std::collections::VecDeque;
use std::ffi::c_char;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use super::UnaryOp;
use super::direct_linear::{self, DirectLinear};
use super::packed::{available, c_string, taken};
use tch::{Kind, Tensor};
use torch_sys::C_tensor;

unsafe extern "C" {
    fn lop_reorder_linear_weight(w: *const C_tensor, batch: i64, out: *mut *mut C_tensor, err: *mut c_char, err_len: usize) -> i32;
    #[allow(clippy::too_many_arguments)]
    fn lop_linear_pointwise(
        x: *const C_tensor,
        w: *const C_tensor,
        b: *const C_tensor,
        attr: *const c_char,
        scalars: *const f64,
        nscalars: i64,
        algorithm: *const c_char,
        out: *mut *mut C_tensor,
        err: *mut c_char,
        err_len: usize,
    ) -> i32;
}

/// `act(x · weightᵀ + bias)` (a linear layer over the last axis, `weight` of `[out, in]`, `act`
/// applied to its output). For float32 CPU tensors the product is oneDNN's: straight on its
/// matmul where the engine opened the library ([`super::direct_linear`], a context kept per
/// weight), else through libtorch's oneDNN on the weight packed once for it (kept, at most
/// [`MAX_PACKED_LINEARS`]); either way with `act` as its post-op where that path has one and
/// [`route`] finds that faster, and otherwise `act`'s own kernel in place on the fresh output.
/// Elsewhere libtorch's `linear` and then the activation.
///
/// # Errors
/// The shim's message (from libtorch) as a [`tch::TchError::Torch`]; libtorch errors.
pub fn linear(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>, act: Option<&UnaryOp>) -> Result<Tensor, tch::TchError> {
    let cpu_float = |t: &Tensor| t.device() == tch::Device::Cpu && t.kind() == Kind::Float;
    if !(cpu_float(x) && cpu_float(weight) && x.dim() >= 2 && weight.dim() == 2) {
        return act_after(x.f_linear(weight, bias)?, act);
    }
    if let Some(layer) = direct_linear::for_weight(weight, bias) {
        let fused = act.and_then(|a| direct_linear::post_op(Some(a)).filter(|_| route(a) == Route::Fused));
        return match fused {
            Some(post) => layer.run(x, post),
            None => act_after(layer.run(x, NO_POST)?, act),
        };
    }
    if !available() {
        return act_after(x.f_linear(weight, bias)?, act);
    }
    let rows = x.size().iter().rev().skip(1).product::<i64>();
    let packed = prepacked(weight, rows);
    let weight = packed.as_ref().unwrap_or(weight);
    let fused = act.and_then(|a| linear_post_op(Some(a)).filter(|_| route(a) == Route::Fused));
    match fused {
        Some(post) => on_onednn(x, weight, bias, &post),
        None => act_after(on_onednn(x, weight, bias, &("none", vec![], ""))?, act),
    }
}

/// The direct path's code for no post-op ([`direct_linear::post_op`]).
const NO_POST: (std::ffi::c_int, f32, f32) = (0, 0.0, 0.0);

/// At most this many linear layers' weights are kept prepacked (the oldest entry goes first):
/// a process that loads model after model keeps a bounded number of packed copies.
pub const MAX_PACKED_LINEARS: usize = 512;

/// A weight reordered once into oneDNN's blocked format, beside the plain weight it came from.
/// The entry holds the plain weight, so no other tensor can take its memory (and so its key)
/// while the entry lives.
struct Prepacked {
    plain: Tensor,
    packed: Tensor,
}

/// Packed weights by plain weight (its memory, shape and strides), shared by every worker that
/// shares the model's weights ([`super::Op::share`]).
static PREPACKED: Mutex<VecDeque<Prepacked>> = Mutex::new(VecDeque::new());

/// `weight` prepacked for oneDNN's linear layer, made at its first use (`rows`: that call's row
/// count, oneDNN's hint; the packed weight serves any count) and kept. libtorch's route with a
/// plain weight reorders it at every call: on this project's AVX2 machine the packed one ran
/// convnext_tiny's MLP layers 4-10% faster whole and up to 45% faster on a band of a few rows
/// (`scripts/linear_routes.py`). `None` when packing fails (the plain weight is used).
fn prepacked(weight: &Tensor, rows: i64) -> Option<Tensor> {
    let same = |t: &Tensor| t.data_ptr() == weight.data_ptr() && t.size() == weight.size() && t.stride() == weight.stride();
    let mut cache = PREPACKED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(p) = cache.iter().find(|p| same(&p.plain)) {
        return Some(p.packed.shallow_clone());
    }
    let mut out: *mut C_tensor = std::ptr::null_mut();
    let mut err = [0 as c_char; 512];
    // SAFETY: a live borrowed tensor, the error buffer of its stated length, and a new handle on
    // success.
    let rc = unsafe { lop_reorder_linear_weight(weight.as_ptr(), rows.max(1), &mut out, err.as_mut_ptr(), err.len()) };
    let packed = taken(rc, out, &err, "packing a linear layer's weight")
        .inspect_err(|e| tracing::debug!(error = %e, "a linear layer runs on its plain weight"))
        .ok()?;
    if cache.len() >= MAX_PACKED_LINEARS {
        cache.pop_front();
    }
    cache.push_back(Prepacked { plain: weight.shallow_clone(), packed: packed.shallow_clone() });
    Some(packed)
}

/// How many linear weights are kept prepacked now.
pub fn prepacked_linears() -> usize {
    PREPACKED.lock().unwrap_or_else(PoisonError::into_inner).len()
}

/// oneDNN's post-op for a linear layer's activation, as libtorch's fusion map names it: the
/// attribute, its scalars and its algorithm; `None` for an activation it has no post-op for.
pub fn linear_post_op(act: Option<&UnaryOp>) -> Option<(&'static str, Vec<f64>, &'static str)> {
    Some(match act {
        None => ("none", vec![], ""),
        Some(UnaryOp::Relu) => ("relu", vec![], ""),
        Some(UnaryOp::Gelu { tanh: false }) => ("gelu", vec![], "none"),
        Some(UnaryOp::Gelu { tanh: true }) => ("gelu", vec![], "tanh"),
        Some(UnaryOp::Sigmoid) => ("sigmoid", vec![], ""),
        Some(UnaryOp::Tanh) => ("tanh", vec![], ""),
        Some(UnaryOp::Silu) => ("swish", vec![], ""),
        Some(UnaryOp::HardSwish) => ("hardswish", vec![], ""),
        Some(_) => return None,
    })
}

/// How a linear layer's activation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// As oneDNN's post-op, in the product's own pass.
    Fused,
    /// As its own kernel, in place, after the product.
    Apart,
}

/// What [`route`] measured for one activation, as `lop bench-exec` reports it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RouteChoice {
    /// The activation (`Gelu { tanh: false }`, `Silu`, ...).
    pub act: String,
    /// The measuring layer with the post-op, ms (median); `None` when fixed by the environment.
    pub fused_ms: Option<f64>,
    /// The same layer without it, then the activation's kernel, ms (median).
    pub apart_ms: Option<f64>,
    /// Whether the post-op was taken.
    pub fused: bool,
}

/// Every choice made so far in this process.
static CHOICES: Mutex<Vec<(UnaryOp, RouteChoice)>> = Mutex::new(Vec::new());

/// How `act` runs after a linear layer in this process: `LOP_LINEAR_POST_OPS` (`fused` or
/// `apart`) when set, otherwise whichever of the two was faster on a measuring layer the first
/// time it was asked (the lock is held while measuring, so it is measured once).
pub fn route(act: &UnaryOp) -> Route {
    let mut choices = CHOICES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, c)) = choices.iter().find(|(a, _)| a == act) {
        return if c.fused { Route::Fused } else { Route::Apart };
    }
    let choice = match std::env::var("LOP_LINEAR_POST_OPS").as_deref() {
        Ok("fused") => RouteChoice { act: format!("{act:?}"), fused_ms: None, apart_ms: None, fused: true },
        Ok("apart") => RouteChoice { act: format!("{act:?}"), fused_ms: None, apart_ms: None, fused: false },
        _ => measure(act),
    };
    tracing::debug!(?choice, "a linear layer's activation: post-op or own kernel");
    let fused = choice.fused;
    choices.push((act.clone(), choice));
    if fused { Route::Fused } else { Route::Apart }
}

/// The choices [`route`] has made in this process, in the order made.
pub fn route_choices() -> Vec<RouteChoice> {
    CHOICES.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|(_, c)| c.clone()).collect()
}

/// Times a [392, 192] x [768, 192] layer (a ConvNeXt MLP's first layer on a band) with `act` as
/// a post-op and as its own kernel, interleaved, and keeps the faster; a failure (no post-op,
/// a shim error) keeps the activation apart.
fn measure(act: &UnaryOp) -> RouteChoice {
    let opts = (Kind::Float, tch::Device::Cpu);
    // Constants, not random draws: a draw would move libtorch's global generator, which seeded
    // callers (tests building weights) rely on. The kernels' time does not depend on the values.
    let (x, w, b) = (Tensor::full([392, 192], 0.5, opts), Tensor::full([768, 192], 0.01, opts), Tensor::full([768], -0.25, opts));
    // Measured on the path the layers take (straight on oneDNN where it opened, else
    // libtorch's), with that path's post-op: the two have different sets.
    let direct = DirectLinear::new(&w, Some(&b)).ok().flatten();
    let unavailable = || RouteChoice { act: format!("{act:?}"), fused_ms: None, apart_ms: None, fused: false };
    let none = ("none", vec![], "");
    let product: Box<dyn Fn(bool) -> Result<Tensor, tch::TchError> + '_> = match &direct {
        Some(d) => {
            let Some(post) = direct_linear::post_op(Some(act)) else { return unavailable() };
            Box::new(move |fused| d.run(&x, if fused { post } else { NO_POST }))
        }
        None => {
            let Some(post) = linear_post_op(Some(act)) else { return unavailable() };
            Box::new(move |fused| on_onednn(&x, &w, Some(&b), if fused { &post } else { &none }))
        }
    };
    let fused = || product(true).map(drop);
    let apart = || product(false).and_then(|y| act_after(y, Some(act))).map(drop);
    let (mut f, mut a) = (Vec::new(), Vec::new());
    for k in 0..9 {
        let (tf, ta) = (timed(fused), timed(apart));
        if k >= 2 {
            f.push(tf);
            a.push(ta);
        }
    }
    let (fused_ms, apart_ms) = (median(&mut f), median(&mut a));
    let fused = matches!((fused_ms, apart_ms), (Some(f), Some(a)) if f <= a);
    RouteChoice { act: format!("{act:?}"), fused_ms, apart_ms, fused }
}

/// How long `run` took, ms; `None` when it failed.
fn timed(run: impl Fn() -> Result<(), tch::TchError>) -> Option<f64> {
    let t = Instant::now();
    run().ok().map(|()| t.elapsed().as_secs_f64() * 1e3)
}

/// The median of the timings, `None` when any failed.
fn median(v: &mut [Option<f64>]) -> Option<f64> {
    let mut ms: Vec<f64> = v.iter().copied().collect::<Option<_>>()?;
    ms.sort_by(f64::total_cmp);
    ms.get(ms.len() / 2).copied()
}

/// `act` on the fresh output `y`, in place where libtorch has the in-place kernel.
fn act_after(mut y: Tensor, act: Option<&UnaryOp>) -> Result<Tensor, tch::TchError> {
    match act {
        None => Ok(y),
        Some(UnaryOp::Relu) => y.f_relu_(),
        Some(UnaryOp::Gelu { tanh }) => y.f_gelu_(if *tanh { "tanh" } else { "none" }),
        Some(UnaryOp::Sigmoid) => y.f_sigmoid_(),
        Some(UnaryOp::Tanh) => y.f_tanh_(),
        Some(UnaryOp::Silu) => y.f_silu_(),
        Some(UnaryOp::HardSwish) => y.f_hardswish_(),
        Some(a) => a.apply(&y),
    }
}

/// oneDNN's linear layer with `post` (attribute, scalars, algorithm) through the shim.
fn on_onednn(x: &Tensor, weight: &Tensor, bias: Option<&Tensor>, post: &(&str, Vec<f64>, &str)) -> Result<Tensor, tch::TchError> {
    let x = x.f_contiguous()?;
    let mut out: *mut C_tensor = std::ptr::null_mut();
    let mut err = [0 as c_char; 512];
    let b = bias.map_or(std::ptr::null(), Tensor::as_ptr);
    let (attr, algorithm) = (c_string(post.0), c_string(post.2));
    let scalars = &post.1;
    // SAFETY: live borrowed tensors, NUL-terminated strings and a scalar slice that outlive the
    // call, the error buffer of its stated length, and a new handle on success.
    let rc = unsafe {
        lop_linear_pointwise(
            x.as_ptr(),
            weight.as_ptr(),
            b,
            attr.as_ptr(),
            scalars.as_ptr(),
            scalars.len() as i64,
            algorithm.as_ptr(),
            &mut out,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    taken(rc, out, &err, "oneDNN linear")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{Tolerance, agree};

    /// Both routes give the activation of the layer's output, for every activation with a
    /// post-op, and the route is decided once and then kept.
    #[test]
    fn both_routes_equal_the_activation_after_the_layer() {
        let opts = (Kind::Float, tch::Device::Cpu);
        let (x, w, b) = (Tensor::randn([2, 5, 7, 24], opts), Tensor::randn([40, 24], opts), Tensor::randn([40], opts));
        let acts = [
            UnaryOp::Relu,
            UnaryOp::Gelu { tanh: false },
            UnaryOp::Gelu { tanh: true },
            UnaryOp::Sigmoid,
            UnaryOp::Tanh,
            UnaryOp::Silu,
            UnaryOp::HardSwish,
        ];
        for act in acts {
            let want = act.apply(&x.linear(&w, Some(&b))).expect("apart, libtorch");
            let post = linear_post_op(Some(&act)).expect("a post-op");
            let fused = on_onednn(&x, &w, Some(&b), &post).expect("fused");
            let apart = act_after(on_onednn(&x, &w, Some(&b), &("none", vec![], "")).expect("product"), Some(&act)).expect("apart");
            let chosen = linear(&x, &w, Some(&b), Some(&act)).expect("the chosen route");
            for (route, got) in [("fused", &fused), ("apart", &apart), ("chosen", &chosen)] {
                let a = agree(got, &want, Tolerance::SPLIT).expect("same shape");
                assert!(a.within, "{act:?} {route}: {a:?}");
            }
            let first = route(&act);
            assert_eq!(route(&act), first, "{act:?}: the route changed");
            assert!(route_choices().iter().any(|c| c.act == format!("{act:?}")), "{act:?} not reported");
        }
        assert!(linear_post_op(Some(&UnaryOp::Erf)).is_none());
    }

    /// A weight is packed once, whatever the row count of later calls, and the packed weight
    /// gives libtorch's values on a whole map, on a band of one row and on a token matrix.
    #[test]
    fn a_weight_is_packed_once_and_gives_libtorchs_values() {
        let opts = (Kind::Float, tch::Device::Cpu);
        let (w, b) = (Tensor::randn([48, 32], opts), Tensor::randn([48], opts));
        drop(prepacked(&w, 64).expect("packed"));
        let entries =
            || PREPACKED.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|p| p.plain.data_ptr() == w.data_ptr()).count();
        for x in [Tensor::randn([1, 8, 8, 32], opts), Tensor::randn([1, 1, 8, 32], opts), Tensor::randn([3, 32], opts)] {
            let got = linear(&x, &w, Some(&b), None).expect("linear");
            let a = agree(&got, &x.linear(&w, Some(&b)), Tolerance::SPLIT).expect("same shape");
            assert!(a.within, "{:?}: {a:?}", x.size());
            assert_eq!(entries(), 1, "packed again for {:?}", x.size());
        }
        assert!((1..=MAX_PACKED_LINEARS).contains(&prepacked_linears()));
    }

    /// oneDNN's linear layer agrees with libtorch's on a token matrix, a channels-last view (not
    /// contiguous), one row, and without bias.
    #[test]
    fn onednn_linear_agrees_with_libtorch() {
        let w = Tensor::randn([24, 16], (Kind::Float, tch::Device::Cpu));
        let b = Tensor::randn([24], (Kind::Float, tch::Device::Cpu));
        let nhwc_view = Tensor::randn([1, 16, 5, 7], (Kind::Float, tch::Device::Cpu)).permute([0, 2, 3, 1]);
        for x in
            [Tensor::randn([9, 16], (Kind::Float, tch::Device::Cpu)), nhwc_view, Tensor::randn([1, 16], (Kind::Float, tch::Device::Cpu))]
        {
            for bias in [Some(&b), None] {
                let got = linear(&x, &w, bias, None).expect("linear");
                let want = x.linear(&w, bias);
                assert_eq!(got.size(), want.size());
                let a = agree(&got, &want, Tolerance::SPLIT).expect("same shape");
                assert!(a.within, "{:?} bias {}: {a:?}", x.size(), bias.is_some());
            }
        }
    }
}
