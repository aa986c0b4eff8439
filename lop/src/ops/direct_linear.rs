//! Float linear layers run straight on oneDNN's matmul (`csrc/dnnl_linear.cpp`), each keeping its
//! primitive, memory objects and packed weight per row count.
//!
//! libtorch's route to the same library (`mkldnn::_linear_pointwise`, [`super::linear`]) spends
//! about 18 us of set-up on every call (`lop bench-exec`'s fixed cost of a 16x16 layer on one
//! row: 20 us that way, 1.8 us here). A ConvNeXt-T has 36 linear layers; a server computing each
//! of them in 8 bands pays that set-up 288 times a frame. The library is the one the direct convolutions open
//! ([`super::direct::available`]); without it linear layers keep libtorch's route.

#![cfg_attr(not(lop_onednn), allow(unused_imports, unused_mut, dead_code))]

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex, PoisonError};

use tch::{Kind, Tensor};

use super::UnaryOp;
use super::direct::{available, message};

#[cfg(lop_onednn)]
unsafe extern "C" {
    fn lop_dnnl_linear_new(w: *const f32, n: i64, k: i64, bias: *const f32, err: *mut c_char, err_len: usize) -> *mut c_void;
    #[allow(clippy::too_many_arguments)]
    fn lop_dnnl_linear_run(
        ctx: *mut c_void,
        x: *const f32,
        m: i64,
        y: *mut f32,
        post: c_int,
        alpha: f32,
        beta: f32,
        threads: c_int,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn lop_dnnl_linear_stats(ctx: *mut c_void, entries: *mut i64, formats: *mut i64, uncached: *mut i64);
    fn lop_dnnl_linear_free(ctx: *mut c_void);
}

/// oneDNN's post-op for `act` on a linear layer's output (the shim's code and two parameters):
/// the convolutions' codes ([`super::direct::post_op`]) and 7 exact GELU, 8 tanh GELU, 9 tanh.
/// `None` for an activation without one.
pub fn post_op(act: Option<&UnaryOp>) -> Option<(c_int, f32, f32)> {
    match act {
        Some(UnaryOp::Gelu { tanh: false }) => Some((7, 0.0, 0.0)),
        Some(UnaryOp::Gelu { tanh: true }) => Some((8, 0.0, 0.0)),
        Some(UnaryOp::Tanh) => Some((9, 0.0, 0.0)),
        other => super::direct::post_op(other),
    }
}

/// A linear layer's oneDNN context (its weight copy, primitives and packings); freed on drop.
pub struct DirectLinear {
    ctx: *mut c_void,
    out_features: i64,
    in_features: i64,
}

// SAFETY: the context is only touched through the shim, which holds its own lock for each call.
unsafe impl Send for DirectLinear {}
// SAFETY: as above.
unsafe impl Sync for DirectLinear {}

impl DirectLinear {
    /// The context for `weight` (`[out, in]`, float, CPU) and `bias` (`[out]`); `None` where this
    /// path does not apply (another dtype, device or rank, or no oneDNN).
    ///
    /// # Errors
    /// libtorch failures copying the weight; the shim's message.
    pub fn new(weight: &Tensor, bias: Option<&Tensor>) -> Result<Option<DirectLinear>, tch::TchError> {
        let cpu_float = |t: &Tensor| t.device() == tch::Device::Cpu && t.kind() == Kind::Float;
        if weight.dim() != 2 || !cpu_float(weight) || !bias.is_none_or(|b| cpu_float(b) && b.numel() == weight.size()[0] as usize) {
            return Ok(None);
        }
        if !available() {
            return Ok(None);
        }
        Self::create(weight, bias).map(Some)
    }

    #[cfg(lop_onednn)]
    fn create(weight: &Tensor, bias: Option<&Tensor>) -> Result<DirectLinear, tch::TchError> {
        let w = weight.f_contiguous()?;
        let b = bias.map(Tensor::f_contiguous).transpose()?;
        let (n, k) = (w.size()[0], w.size()[1]);
        let bias_ptr = b.as_ref().map_or(std::ptr::null(), |b| b.data_ptr() as *const f32);
        let mut err = [0 as c_char; 512];
        // SAFETY: `w` holds n*k contiguous floats and `b` n, alive for the call (the shim copies
        // both); the error buffer has its stated length.
        let ctx = unsafe { lop_dnnl_linear_new(w.data_ptr() as *const f32, n, k, bias_ptr, err.as_mut_ptr(), err.len()) };
        if ctx.is_null() {
            return Err(tch::TchError::Torch(format!("oneDNN linear layer: {}", message(&err))));
        }
        Ok(DirectLinear { ctx, out_features: n, in_features: k })
    }

    #[cfg(not(lop_onednn))]
    fn create(_: &Tensor, _: Option<&Tensor>) -> Result<DirectLinear, tch::TchError> {
        Err(tch::TchError::Torch("lop was built without oneDNN".into()))
    }

    /// The layer on `x` (`[..., in]`, float, CPU, any strides) with post-op `post`
    /// ([`post_op`]), as a new contiguous `[..., out]` tensor.
    ///
    /// # Errors
    /// An input whose last axis is not the layer's input features; oneDNN's or libtorch's message.
    pub fn run(&self, x: &Tensor, post: (c_int, f32, f32)) -> Result<Tensor, tch::TchError> {
        let mut size = x.size();
        if size.last() != Some(&self.in_features) || x.kind() != Kind::Float || x.device() != tch::Device::Cpu {
            return Err(tch::TchError::Shape(format!(
                "a linear layer of {} input features on a {:?} {size:?} tensor",
                self.in_features,
                x.kind()
            )));
        }
        let x = x.f_contiguous()?;
        let rows: i64 = size[..size.len() - 1].iter().product();
        if let Some(last) = size.last_mut() {
            *last = self.out_features;
        }
        let y = Tensor::f_empty(size.as_slice(), (Kind::Float, tch::Device::Cpu))?;
        if rows > 0 {
            self.call(x.data_ptr() as *const f32, rows, y.data_ptr() as *mut f32, post)?;
        }
        Ok(y)
    }

    #[cfg(lop_onednn)]
    fn call(&self, x: *const f32, rows: i64, y: *mut f32, post: (c_int, f32, f32)) -> Result<(), tch::TchError> {
        let mut err = [0 as c_char; 512];
        let threads = c_int::try_from(tch::get_num_threads()).unwrap_or(1);
        // SAFETY: `x` points at `rows` x in and `y` at `rows` x out dense floats, alive for the
        // call (the caller's tensors); the shim catches everything.
        let rc = unsafe { lop_dnnl_linear_run(self.ctx, x, rows, y, post.0, post.1, post.2, threads, err.as_mut_ptr(), err.len()) };
        if rc != 0 {
            return Err(tch::TchError::Torch(format!("oneDNN linear layer: {}", message(&err))));
        }
        Ok(())
    }

    #[cfg(not(lop_onednn))]
    fn call(&self, _: *const f32, _: i64, _: *mut f32, _: (c_int, f32, f32)) -> Result<(), tch::TchError> {
        Err(tch::TchError::Torch("lop was built without oneDNN".into()))
    }

    /// Row counts kept, packed formats kept, and calls past the caps.
    pub fn stats(&self) -> (i64, i64, i64) {
        let (mut entries, mut formats, mut uncached) = (0, 0, 0);
        #[cfg(lop_onednn)]
        // SAFETY: a live context and three writable integers.
        unsafe {
            lop_dnnl_linear_stats(self.ctx, &mut entries, &mut formats, &mut uncached)
        };
        (entries, formats, uncached)
    }
}

impl Drop for DirectLinear {
    fn drop(&mut self) {
        #[cfg(lop_onednn)]
        // SAFETY: the context was made by lop_dnnl_linear_new and is freed once, here.
        unsafe {
            lop_dnnl_linear_free(self.ctx)
        };
    }
}

/// At most this many linear layers keep a context (the oldest goes first): a process that loads
/// model after model keeps a bounded number of weight copies.
pub const MAX_DIRECT_LINEARS: usize = 512;

/// A kept context beside the weight and bias it was made from: they hold their memory, so no
/// other tensor can take the addresses that key the entry while it lives.
struct Kept {
    weight: Tensor,
    bias: Option<Tensor>,
    layer: Arc<DirectLinear>,
    made: u64,
}

/// Contexts by the addresses of weight and bias, shared by every worker that shares the model's
/// weights ([`super::Op::share`]).
static KEPT: Mutex<Option<HashMap<(usize, usize), Kept>>> = Mutex::new(None);

/// The context for `weight` and `bias`, made at their first use and kept; `None` where the
/// direct path does not apply or making it failed (logged; libtorch's route is taken).
pub fn for_weight(weight: &Tensor, bias: Option<&Tensor>) -> Option<Arc<DirectLinear>> {
    let key = (weight.data_ptr() as usize, bias.map_or(0, |b| b.data_ptr() as usize));
    let mut guard = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    let kept = guard.get_or_insert_with(HashMap::new);
    if let Some(k) = kept.get(&key)
        && k.weight.size() == weight.size()
        && k.weight.stride() == weight.stride()
        && k.bias.as_ref().map(Tensor::size) == bias.map(Tensor::size)
    {
        return Some(k.layer.clone());
    }
    let layer = match DirectLinear::new(weight, bias) {
        Ok(Some(l)) => Arc::new(l),
        Ok(None) => return None,
        Err(e) => {
            tracing::debug!(error = %e, "a linear layer takes libtorch's route");
            return None;
        }
    };
    if kept.len() >= MAX_DIRECT_LINEARS
        && let Some(oldest) = kept.iter().min_by_key(|(_, k)| k.made).map(|(key, _)| *key)
    {
        kept.remove(&oldest);
    }
    let made = kept.values().map(|k| k.made + 1).max().unwrap_or(0);
    kept.insert(key, Kept { weight: weight.shallow_clone(), bias: bias.map(Tensor::shallow_clone), layer: layer.clone(), made });
    Some(layer)
}

/// How many linear layers keep a direct context now.
pub fn kept_linears() -> usize {
    KEPT.lock().unwrap_or_else(PoisonError::into_inner).as_ref().map_or(0, HashMap::len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{Tolerance, agree};

    fn randn(shape: &[i64]) -> Tensor {
        Tensor::randn(shape, (Kind::Float, tch::Device::Cpu))
    }

    /// libtorch's values on a token matrix, a channels-last view (not contiguous), one row and
    /// a batch of maps, with and without bias, and with every post-op against the activation
    /// applied after libtorch's layer.
    #[test]
    fn direct_layers_give_libtorchs_values() {
        let (w, b) = (randn(&[24, 16]), randn(&[24]));
        // oneDNN must have opened here, as `direct`'s `onednn_is_loaded` asserts too.
        let layer = DirectLinear::new(&w, Some(&b)).expect("made").expect("oneDNN is loaded: run scripts/setup.sh");
        let plain = DirectLinear::new(&w, None).expect("made").expect("available");
        let nhwc_view = randn(&[1, 16, 5, 7]).permute([0, 2, 3, 1]);
        for x in [randn(&[9, 16]), nhwc_view, randn(&[1, 16]), randn(&[2, 3, 4, 16])] {
            for (l, bias) in [(&layer, Some(&b)), (&plain, None)] {
                let got = l.run(&x, (0, 0.0, 0.0)).expect("run");
                let a = agree(&got, &x.linear(&w, bias), Tolerance::SPLIT).expect("same shape");
                assert!(a.within, "{:?} bias {}: {a:?}", x.size(), bias.is_some());
            }
        }
        let x = randn(&[6, 16]);
        let mut acts = super::super::direct::tests::post_op_activations();
        acts.extend([UnaryOp::Gelu { tanh: false }, UnaryOp::Gelu { tanh: true }, UnaryOp::Tanh]);
        for act in acts {
            let post = post_op(Some(&act)).expect("a post-op");
            let got = layer.run(&x, post).expect("run");
            let want = act.apply(&x.linear(&w, Some(&b))).expect("libtorch");
            let a = agree(&got, &want, Tolerance::SPLIT).expect("same shape");
            assert!(a.within, "{act:?}: {a:?}");
        }
        assert!(post_op(Some(&UnaryOp::Erf)).is_none());
        // A primitive per row count and post-op; the weight packed at most a few ways.
        let (entries, formats, uncached) = layer.stats();
        assert!(entries >= 4 && (1..=4).contains(&formats) && uncached == 0, "{entries} {formats} {uncached}");
    }

    /// Each row count keeps a primitive up to the cap (64); past it a call packs the weight for
    /// itself, counted, and still gives libtorch's values.
    #[test]
    fn row_counts_are_kept_up_to_the_cap_and_calls_past_it_are_counted() {
        let (w, b) = (randn(&[12, 8]), randn(&[12]));
        let layer = DirectLinear::new(&w, Some(&b)).expect("made").expect("oneDNN is loaded: run scripts/setup.sh");
        let extra = 3;
        for rows in 1..=(64 + extra) {
            let x = randn(&[rows, 8]);
            let a = agree(&layer.run(&x, (0, 0.0, 0.0)).expect("run"), &x.linear(&w, Some(&b)), Tolerance::SPLIT).expect("shape");
            assert!(a.within, "{rows} rows: {a:?}");
        }
        let (entries, formats, uncached) = layer.stats();
        assert_eq!((entries, uncached), (64, extra), "{formats} formats");
        // A kept row count is served from its entry again, not counted.
        drop(layer.run(&randn(&[5, 8]), (0, 0.0, 0.0)).expect("run"));
        assert_eq!(layer.stats().2, extra);
    }

    /// Inputs that are not the layer's are refused by name; a context is kept once per weight.
    #[test]
    fn bad_inputs_are_refused_and_contexts_kept_once() {
        let w = randn(&[8, 4]);
        let layer = for_weight(&w, None).expect("oneDNN is loaded: run scripts/setup.sh");
        let e = layer.run(&randn(&[3, 5]), (0, 0.0, 0.0)).expect_err("5 features into a layer of 4");
        assert!(e.to_string().contains("4 input features"), "{e}");
        let ints = Tensor::zeros([3, 4], (Kind::Int, tch::Device::Cpu));
        assert!(layer.run(&ints, (0, 0.0, 0.0)).is_err());
        assert!(Arc::ptr_eq(&layer, &for_weight(&w, None).expect("kept")), "a second context for the same weight");
        let double = Tensor::zeros([8, 4], (Kind::Double, tch::Device::Cpu));
        assert!(for_weight(&double, None).is_none(), "a double weight takes libtorch's route");
        assert!((1..=MAX_DIRECT_LINEARS).contains(&kept_linears()));
    }
}
