//! oneDNN's own convolution with prepacked weights, `mkldnn::_convolution_pointwise` (the op
//! PyTorch's CPU compiler emits), reached through the C++ shim `csrc/pointwise.cpp` since tch does
//! not wrap it (the linear layer's call through the same shim is [`super::linear`]).
//!
//! libtorch's eager `convolution` over channels-last memory hands oneDNN the plain weight, which
//! oneDNN reorders into its blocked format at every call: for resnet18's 512-channel layers that
//! reorder costs as much as the convolution (2.6 ms against 1.15 ms on one core here), and a
//! server computing a frame in 8 bands pays it 8 times (a 3-row band of such a layer: 1.75 ms
//! eager, 0.16 ms prepacked). Packing once at load removes it. The values are oneDNN's same
//! kernel's: split against whole stays under the comparison rule, and on this CPU the prepacked
//! output equalled the eager one bit for bit.

use std::ffi::{CStr, c_char, c_int};

use tch::{Kind, Tensor};
use torch_sys::C_tensor;

unsafe extern "C" {
    fn lop_conv_pointwise_available() -> c_int;
    fn lop_mkldnn_serialized_md(w: *const C_tensor, out: *mut *mut C_tensor, err: *mut c_char, err_len: usize) -> c_int;
    #[allow(clippy::too_many_arguments)]
    fn lop_conv_pointwise(
        x: *const C_tensor,
        w: *const C_tensor,
        b: *const C_tensor,
        padding: *const i64,
        stride: *const i64,
        dilation: *const i64,
        nsp: i64,
        groups: i64,
        out: *mut *mut C_tensor,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
}

/// Whether this libtorch has both oneDNN ops (it is built with oneDNN).
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: the shim takes no arguments and catches every C++ exception.
    *AVAILABLE.get_or_init(|| unsafe { lop_conv_pointwise_available() } == 1)
}

/// Most input shapes one convolution remembers a packing decision for. A shape costs a few
/// integers; a server computing frames in chunks meets one per distinct band height and padding
/// (resnet18's demo plans: up to 8 per convolution). Past it, calls of a new shape take
/// libtorch's plain path.
pub const MAX_PACKED_SHAPES: usize = 64;

/// Most packed copies of one weight (distinct oneDNN formats) a convolution keeps. Shapes whose
/// packing has a format already kept share that copy, so memory grows with the formats oneDNN
/// picks (one or two per convolution on this project's models), not with the shapes. Past it,
/// shapes wanting another format take libtorch's plain path.
pub const MAX_PACKED_FORMATS: usize = 4;

/// A convolution's weight packed for each input shape (and padding) it runs on. oneDNN picks
/// its weight blocking by shape (a band of a few rows may get a narrower block than the whole
/// input): a weight packed for another format is reordered from one blocked format to another
/// at every call, by oneDNN's slowest reorder (6.7 ms for a 192x96x3x3 weight here, where the
/// convolution took 0.3 ms). So each new shape is packed at its first call, and the packing is
/// kept once per format: two packings with the same oneDNN memory descriptor share one copy.
/// The whole input's is made at load.
pub struct PackedWeights {
    state: std::sync::Mutex<Packings>,
}

/// The shapes met so far, the formats kept, and how often the plain path ran.
#[derive(Default)]
struct Packings {
    shapes: Vec<Packing>,
    formats: Vec<Format>,
    plain_calls: usize,
}

/// One input shape: its size and padding, and the format its calls use (`None`: the plain path,
/// every format slot being taken by others).
struct Packing {
    size: Vec<i64>,
    padding: Vec<i64>,
    format: Option<usize>,
}

/// One packed copy of the weight, with oneDNN's descriptor of its layout (`None` when this
/// libtorch cannot say it: such a packing is shared with no other).
struct Format {
    descriptor: Option<Vec<u8>>,
    weight: Tensor,
}

/// What [`PackedWeights::stats`] reports of one convolution.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PackingStats {
    /// Input shapes met (each with a packing decision).
    pub shapes: usize,
    /// Packed copies of the weight kept (distinct oneDNN formats).
    pub formats: usize,
    /// Calls that took libtorch's plain path, past [`MAX_PACKED_SHAPES`] or
    /// [`MAX_PACKED_FORMATS`]: each reorders the weight.
    pub plain_calls: usize,
}

impl PackedWeights {
    /// Packs `weight` for the whole input `input_size` with the convolution's own `pads`;
    /// `None` where the packed path does not apply: another dtype, device or rank, or a libtorch
    /// without oneDNN.
    ///
    /// # Errors
    /// libtorch failures while packing.
    pub fn new(
        weight: &Tensor,
        pads: &[usize],
        strides: &[usize],
        dilations: &[usize],
        groups: usize,
        input_size: &[usize],
    ) -> Result<Option<PackedWeights>, tch::TchError> {
        if weight.dim() != 4 || weight.kind() != Kind::Float || weight.device() != tch::Device::Cpu || !available() {
            return Ok(None);
        }
        let i64s = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<i64>>();
        let packed = PackedWeights { state: std::sync::Mutex::new(Packings::default()) };
        packed.for_shape(weight, &i64s(input_size), &i64s(pads), &i64s(strides), &i64s(dilations), groups as i64)?;
        Ok(Some(packed))
    }

    /// The weight packed for inputs of `size` with symmetric `padding`: packed now if this shape
    /// is new, and kept if its format is new and fewer than [`MAX_PACKED_FORMATS`] are kept;
    /// `None` (the plain path) past the caps.
    ///
    /// # Errors
    /// libtorch failures while packing.
    pub fn for_shape(
        &self,
        weight: &Tensor,
        size: &[i64],
        padding: &[i64],
        stride: &[i64],
        dilation: &[i64],
        groups: i64,
    ) -> Result<Option<Tensor>, tch::TchError> {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = st.shapes.iter().find(|p| p.size == size && p.padding == padding).map(|p| p.format);
        let format = match known {
            Some(format) => format,
            None if st.shapes.len() >= MAX_PACKED_SHAPES => None,
            None => {
                let w = reorder(weight, padding, stride, dilation, groups, size)?;
                let format = st.keep(w);
                st.shapes.push(Packing { size: size.to_vec(), padding: padding.to_vec(), format });
                format
            }
        };
        match format {
            Some(f) => Ok(Some(st.formats[f].weight.shallow_clone())),
            None => {
                st.plain_calls += 1;
                Ok(None)
            }
        }
    }

    /// Shapes met, formats kept and plain-path calls so far.
    pub fn stats(&self) -> PackingStats {
        let st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        PackingStats { shapes: st.shapes.len(), formats: st.formats.len(), plain_calls: st.plain_calls }
    }
}

impl Packings {
    /// The format slot for packed weight `w`: one kept already with the same descriptor, or a
    /// new one while fewer than [`MAX_PACKED_FORMATS`] are kept; `None` past that.
    fn keep(&mut self, w: Tensor) -> Option<usize> {
        let descriptor = serialized_descriptor(&w);
        if let Some(d) = &descriptor
            && let Some(i) = self.formats.iter().position(|f| f.descriptor.as_ref() == Some(d))
        {
            return Some(i);
        }
        if self.formats.len() >= MAX_PACKED_FORMATS {
            return None;
        }
        self.formats.push(Format { descriptor, weight: w });
        Some(self.formats.len() - 1)
    }
}

/// oneDNN's serialized memory descriptor of packed weight `w` (its layout), or `None` when this
/// libtorch cannot give it.
fn serialized_descriptor(w: &Tensor) -> Option<Vec<u8>> {
    let mut out: *mut C_tensor = std::ptr::null_mut();
    let mut err = [0 as c_char; 512];
    // SAFETY: a live borrowed tensor and the error buffer of its stated length; on success the
    // shim hands over a new handle.
    let rc = unsafe { lop_mkldnn_serialized_md(w.as_ptr(), &mut out, err.as_mut_ptr(), err.len()) };
    let md = taken(rc, out, &err, "oneDNN descriptor").ok()?;
    Vec::<u8>::try_from(md.f_contiguous().ok()?.f_view([-1]).ok()?).ok()
}

/// `weight` (`[C_out, C_in/groups, kh, kw]`, float32, on the CPU) packed for inputs of
/// `input_size` (NCHW) and symmetric `padding`.
fn reorder(
    weight: &Tensor,
    padding: &[i64],
    stride: &[i64],
    dilation: &[i64],
    groups: i64,
    input_size: &[i64],
) -> Result<Tensor, tch::TchError> {
    weight.f_contiguous()?.f_to_mkldnn(None)?.f_mkldnn_reorder_conv2d_weight(padding, stride, dilation, groups, Some(input_size))
}

/// The convolution of `x` (4-d, float32, CPU; channels-last is what the packing expects) with a
/// weight from [`PackedWeights::for_shape`], symmetric `padding`, and `bias`.
///
/// # Errors
/// The shim's message (from libtorch) as a [`tch::TchError::Torch`].
pub fn conv(
    x: &Tensor,
    packed: &Tensor,
    bias: Option<&Tensor>,
    padding: &[i64],
    stride: &[i64],
    dilation: &[i64],
    groups: i64,
) -> Result<Tensor, tch::TchError> {
    let nsp = padding.len();
    if stride.len() != nsp || dilation.len() != nsp {
        return Err(tch::TchError::Torch(format!("padding {padding:?}, stride {stride:?}, dilation {dilation:?}: lengths differ")));
    }
    let mut out: *mut C_tensor = std::ptr::null_mut();
    let mut err = [0 as c_char; 512];
    let b = bias.map_or(std::ptr::null(), Tensor::as_ptr);
    // SAFETY: every pointer is live for the call (tensors borrowed, slices of `nsp` entries, the
    // error buffer of its stated length); the shim catches every C++ exception, and on success
    // hands over a new tensor handle that `Tensor::from_ptr` takes ownership of.
    let rc = unsafe {
        lop_conv_pointwise(
            x.as_ptr(),
            packed.as_ptr(),
            b,
            padding.as_ptr(),
            stride.as_ptr(),
            dilation.as_ptr(),
            nsp as i64,
            groups,
            &mut out,
            err.as_mut_ptr(),
            err.len(),
        )
    };
    taken(rc, out, &err, "prepacked convolution")
}

/// `s` as a C string (the post-op names are fixed ASCII without NUL).
pub(super) fn c_string(s: &str) -> std::ffi::CString {
    std::ffi::CString::new(s).unwrap_or_default()
}

/// The shim's result: the new handle, owned from here on, or its message as an error.
pub(super) fn taken(rc: c_int, out: *mut C_tensor, err: &[c_char], what: &str) -> Result<Tensor, tch::TchError> {
    if rc != 0 || out.is_null() {
        // SAFETY: the shim always NUL-terminates within the buffer.
        let msg = unsafe { CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
        return Err(tch::TchError::Torch(format!("{what}: {msg}")));
    }
    // SAFETY: a fresh handle from the shim, owned from here on.
    Ok(unsafe { Tensor::from_ptr(out) })
}

#[cfg(test)]
mod tests {
    use crate::exec::{Tolerance, agree, run_split, run_whole};
    use crate::graph::GraphBuilder;
    use crate::ops::{Conv, Op};
    use crate::plan::Plan;
    use crate::value::LayoutTensor;
    use crate::value::{DType, Layout};
    use tch::{Device, Kind, Tensor};

    /// A stride-1 and a stride-2 convolution, prepacked in channels-last: whole and every band
    /// layout agree with libtorch's eager convolution of the same weights under the one rule, whether
    /// a band's shape has a packing of its own or runs past the cap on the plain path.
    #[test]
    fn prepacked_convolutions_agree_with_eager_ones_whole_and_banded() {
        assert!(super::available(), "this libtorch has oneDNN's prepacked convolution");
        let w1 = Tensor::randn([16, 8, 3, 3], (Kind::Float, Device::Cpu));
        let w2 = Tensor::randn([8, 16, 3, 3], (Kind::Float, Device::Cpu));
        let b2 = Tensor::randn([8], (Kind::Float, Device::Cpu));
        let conv = |w: &Tensor, b: Option<&Tensor>, s: usize| Conv {
            weight: w.copy(),
            bias: b.map(Tensor::copy),
            strides: vec![s, s],
            pads_begin: vec![1, 1],
            pads_end: vec![1, 1],
            dilations: vec![1, 1],
            output_padding: vec![0, 0],
            groups: 1,
            packed: None,
            act: None,
        };
        let mut g = GraphBuilder::new("packed");
        let x = g.input("x", vec![1, 8, 21, 17], DType::F32);
        let c1 = g.add("c1", Op::Conv(conv(&w1, None, 1)), &[x]).expect("c1");
        let c2 = g.add("c2", Op::Conv(conv(&w2, Some(&b2), 2)), &[c1]).expect("c2");
        g.output(c2);
        let mut g = g.build().expect("graph");
        let hash = g.content_hash().expect("hash");
        g.set_layout(Layout::ChannelsLast).expect("layout");
        // The layout and the packing are each side's own: the graph is the same function.
        assert_eq!(g.content_hash().expect("hash"), hash);
        assert!(g.nodes.iter().all(|n| !matches!(&n.op, Op::Conv(c) if c.packed.is_none())), "every convolution is packed");
        let input = Tensor::randn([1, 8, 21, 17], (Kind::Float, Device::Cpu));
        let eager = input.convolution(&w1, None::<&Tensor>, [1, 1], [1, 1], [1, 1], false, [0, 0], 1).convolution(
            &w2,
            Some(&b2),
            [2, 2],
            [1, 1],
            [1, 1],
            false,
            [0, 0],
            1,
        );
        let whole = run_whole(&g, std::slice::from_ref(&input)).expect("whole").outputs.remove(0);
        assert!(agree(&whole, &eager, Tolerance::SPLIT).expect("same shape").within);
        for seed in 0..8 {
            let split = run_split(&g, &Plan::random(&g, 5, seed), std::slice::from_ref(&input)).expect("split");
            let a = agree(&split.outputs[0], &eager, Tolerance::SPLIT).expect("same shape");
            assert!(a.within, "seed {seed}: {a:?}");
        }
        // Bands of new heights got packings of their own; those of one oneDNN format share a
        // copy, and none ran on the plain path.
        for n in &g.nodes {
            if let Op::Conv(c) = &n.op {
                let st = c.packed.as_ref().map(crate::ops::PreparedConv::stats).unwrap_or_default();
                assert!(st.shapes >= 2 && st.shapes <= super::MAX_PACKED_SHAPES, "{}: {st:?}", n.name);
                assert!((1..=st.shapes.min(super::MAX_PACKED_FORMATS)).contains(&st.formats), "{}: {st:?}", n.name);
                assert_eq!(st.plain_calls, 0, "{}: {st:?}", n.name);
            }
        }
        // Back to NCHW: the packed weights go.
        g.set_layout(Layout::Nchw).expect("layout");
        assert!(g.nodes.iter().all(|n| !matches!(&n.op, Op::Conv(c) if c.packed.is_some())));
    }

    /// Band heights past the shape cap take the plain path, counted; the shapes before it share
    /// packed copies by format, so that the copies kept stay at most the format cap, and each
    /// shape's packed convolution equals the plain one under the rule.
    #[test]
    fn packings_are_shared_by_format_and_capped() {
        let w = Tensor::randn([16, 8, 3, 3], (Kind::Float, Device::Cpu));
        let (pad, one) = ([0i64, 1], [1i64, 1]);
        let packed = super::PackedWeights::new(&w, &[1, 1], &[1, 1], &[1, 1], 1, &[1, 8, 80, 12]).expect("pack").expect("oneDNN");
        let extra = 3;
        for h in 3..3 + (super::MAX_PACKED_SHAPES - 1 + extra) as i64 {
            let x = Layout::ChannelsLast.apply(&Tensor::randn([1, 8, h, 12], (Kind::Float, Device::Cpu))).expect("layout");
            let plain = x.convolution(&w, None::<&Tensor>, one, pad, one, false, [0, 0], 1);
            match packed.for_shape(&w, &x.size(), &pad, &one, &one, 1).expect("for_shape") {
                Some(p) => {
                    let y = super::conv(&x, &p, None, &pad, &one, &one, 1).expect("conv");
                    assert!(agree(&y, &plain, Tolerance::SPLIT).expect("same shape").within, "height {h}");
                }
                None => assert!(h >= 3 + super::MAX_PACKED_SHAPES as i64 - 1, "height {h} should be packed"),
            }
        }
        let st = packed.stats();
        assert_eq!(st.shapes, super::MAX_PACKED_SHAPES, "{st:?}");
        assert_eq!(st.plain_calls, extra, "{st:?}");
        assert!(st.formats >= 1 && st.formats <= super::MAX_PACKED_FORMATS.min(st.shapes - 1), "shared by format: {st:?}");
    }
}
