//! The operators of the IR. Each answers three questions (DESIGN.md section 3): its output
//! shape ([`Op::infer`]), which input rows an output row band needs ([`Op::footprint`]), and how
//! to compute an output row band from input bands ([`Op::compute`]), padding only at the true
//! tensor border so that any split reproduces the whole output.

pub(crate) mod band;
mod direct;
mod direct_linear;
mod direct_pool;
mod elementwise;
mod layout;
mod linear;
mod packed;
mod pad;
mod resize;
mod rowwise;
mod share;
mod whole;
mod window;

pub use band::BandIn;
pub use direct::{DirectConv, PreparedConv, post_op};
pub use direct_linear::{DirectLinear, MAX_DIRECT_LINEARS, kept_linears};
pub use elementwise::{BinaryOp, UnaryOp};
pub use layout::SliceAxis;
pub use linear::{MAX_PACKED_LINEARS, Route, RouteChoice, linear, linear_post_op, prepacked_linears, route_choices};
pub use lop_core::structure::{Locality, OpClass};
pub use packed::{MAX_PACKED_FORMATS, MAX_PACKED_SHAPES, PackedWeights, PackingStats};
pub use pad::{Pad, PadMode};
pub use resize::{CoordMode, NearestMode, Resize, ResizeMode};
pub use rowwise::ReduceKind;
pub use whole::{SampleMode, SamplePadding, WholeOp};
pub use window::{Conv, Pool};

use crate::error::{Error, Result};
use crate::rows::{Footprint, Rows};
use crate::value::DTypeKind;
use crate::value::ValueInfo;
use sha2::Digest;
use tch::{Device, Tensor};

/// An operator with its attributes and weights.
#[derive(Debug)]
pub enum Op {
    /// A graph input (the robot holds it whole).
    Input,
    /// A constant tensor; both sides hold it, it never crosses the link.
    Constant(Tensor),
    /// uint8 NCHW image to float: `(x / 255 - mean[c]) / std[c]`, so raw frames travel as bytes.
    NormalizeU8 {
        /// Per-channel mean (on the 0..1 scale).
        mean: Vec<f32>,
        /// Per-channel standard deviation (on the 0..1 scale).
        std: Vec<f32>,
    },
    /// N-d convolution (1, 2 or 3 spatial dims).
    Conv(Conv),
    /// N-d transposed convolution.
    ConvTranspose(Conv),
    /// Per-channel affine map on axis 1 (inference-mode batch norm that could not be folded).
    ChannelAffine {
        /// Per-channel multiplier, shape `[C]`.
        scale: Tensor,
        /// Per-channel offset, shape `[C]`.
        shift: Tensor,
    },
    /// Element-wise function of one input.
    Unary(UnaryOp),
    /// Element-wise function of two inputs with numpy broadcasting.
    Binary(BinaryOp),
    /// `cond ? x : y` element-wise with numpy broadcasting; inputs `cond`, `x`, `y`.
    Where,
    /// Padding with a constant, a mirror or the border, on any axes (a halo on the row axis).
    Pad(Pad),
    /// Concatenation along an axis.
    Concat {
        /// The axis.
        axis: usize,
    },
    /// Max pooling (2-d or 3-d).
    MaxPool(Pool),
    /// Average pooling (2-d or 3-d).
    AvgPool(Pool),
    /// Mean over axes (global average pooling when the axes are spatial).
    ReduceMean {
        /// Axes reduced, sorted.
        axes: Vec<usize>,
        /// Whether reduced axes stay with extent 1.
        keepdims: bool,
    },
    /// Sum, max or min over axes.
    Reduce {
        /// Which reduction.
        kind: ReduceKind,
        /// Axes reduced, sorted.
        axes: Vec<usize>,
        /// Whether reduced axes stay with extent 1.
        keepdims: bool,
    },
    /// A barrier of whole tensors (top-k, gather by computed indices, grid sampling).
    Whole(WholeOp),
    /// Nearest or linear resize.
    Resize(Resize),
    /// Strided slice on any axes (steps > 0).
    Slice(Vec<SliceAxis>),
    /// Axis permutation.
    Transpose {
        /// `out.shape[i] = in.shape[perm[i]]`.
        perm: Vec<usize>,
    },
    /// Static reshape (flatten included).
    Reshape {
        /// The output shape.
        shape: Vec<usize>,
    },
    /// Layer normalisation over axes `[axis, rank)`.
    LayerNorm {
        /// First normalised axis.
        axis: usize,
        /// Scale over the normalised shape.
        weight: Option<Tensor>,
        /// Offset over the normalised shape.
        bias: Option<Tensor>,
        /// Epsilon.
        eps: f64,
    },
    /// `x @ weight^T + bias` over the last axis (MatMul with a constant, Gemm).
    Linear {
        /// `[out_features, in_features]`.
        weight: Tensor,
        /// `[out_features]`.
        bias: Option<Tensor>,
        /// An activation applied in the same pass ([`crate::fuse`] folds it in), or `None`.
        act: Option<UnaryOp>,
    },
    /// Matrix product of two computed tensors (numpy semantics).
    MatMul,
    /// Softmax along an axis.
    Softmax {
        /// The axis.
        axis: usize,
    },
    /// The model's back end (detections, class maps, occupancy bits): see [`crate::postprocess`].
    Post(crate::postprocess::PostOp),
}

impl Op {
    /// Short name of the op kind (used in errors, hashes and `lop inspect`).
    pub fn kind_name(&self) -> &'static str {
        match self {
            Op::Input => "Input",
            Op::Constant(_) => "Constant",
            Op::NormalizeU8 { .. } => "NormalizeU8",
            Op::Conv(c) => match &c.act {
                None => "Conv",
                Some(UnaryOp::Relu) => "Conv+Relu",
                Some(UnaryOp::LeakyRelu(_)) => "Conv+LeakyRelu",
                Some(UnaryOp::Silu) => "Conv+SiLU",
                Some(UnaryOp::Sigmoid) => "Conv+Sigmoid",
                Some(UnaryOp::Clip { .. }) => "Conv+Clip",
                Some(UnaryOp::HardSigmoid { .. }) => "Conv+HardSigmoid",
                Some(UnaryOp::HardSwish) => "Conv+HardSwish",
                Some(_) => "Conv+Activation",
            },
            Op::ConvTranspose(_) => "ConvTranspose",
            Op::ChannelAffine { .. } => "BatchNorm",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Where => "Where",
            Op::Pad(_) => "Pad",
            Op::Reduce { kind, .. } => kind.name(),
            Op::Whole(w) => w.name(),
            Op::Concat { .. } => "Concat",
            Op::MaxPool(_) => "MaxPool",
            Op::AvgPool(_) => "AveragePool",
            Op::ReduceMean { .. } => "ReduceMean",
            Op::Resize(_) => "Resize",
            Op::Slice(_) => "Slice",
            Op::Transpose { .. } => "Transpose",
            Op::Reshape { .. } => "Reshape",
            Op::LayerNorm { .. } => "LayerNormalization",
            Op::Linear { act: None, .. } => "Linear",
            Op::Linear { act: Some(UnaryOp::Gelu { .. }), .. } => "Linear+Gelu",
            Op::Linear { act: Some(_), .. } => "Linear+Activation",
            Op::MatMul => "MatMul",
            Op::Softmax { .. } => "Softmax",
            Op::Post(p) => p.kind_name(),
        }
    }

    fn arity(&self) -> Option<usize> {
        match self {
            Op::Input | Op::Constant(_) => Some(0),
            Op::Binary(_) | Op::MatMul => Some(2),
            Op::Where => Some(3),
            Op::Whole(w) => Some(w.arity()),
            Op::Concat { .. } => None,
            _ => Some(1),
        }
    }

    /// Output description for the given inputs.
    ///
    /// # Errors
    /// [`Error::Shape`] when the inputs do not fit the op.
    pub fn infer(&self, node: &str, ins: &[&ValueInfo]) -> Result<ValueInfo> {
        let mut out = self.infer_shape(node, ins)?;
        if !self.keeps_image_rows(ins) {
            out.row_axis = None;
        }
        Ok(out)
    }

    /// Whether the output's rows can be rows of the image: some input has a row axis, and ops
    /// that slide a window over axis 2 (convolutions, pools) read rows there. Otherwise (a
    /// convolution over box bins, arithmetic on flattened anchors) the output is one block and
    /// the op a barrier, computed whole on one side.
    fn keeps_image_rows(&self, ins: &[&ValueInfo]) -> bool {
        match self {
            Op::Input | Op::Constant(_) => true,
            Op::Conv(_) | Op::ConvTranspose(_) | Op::MaxPool(_) | Op::AvgPool(_) => ins[0].row_axis == Some(2),
            Op::Post(p) => p.keeps_rows(ins[0]),
            _ => ins.iter().any(|v| v.row_axis.is_some()),
        }
    }

    /// The output shape and dtype, with the row axis each op's own rule gives.
    fn infer_shape(&self, node: &str, ins: &[&ValueInfo]) -> Result<ValueInfo> {
        let bad = |msg: String| Error::shape(node, self.kind_name(), msg);
        match self.arity() {
            Some(n) if ins.len() != n => return Err(bad(format!("expects {n} inputs, got {}", ins.len()))),
            None if ins.is_empty() => return Err(bad("expects at least one input".into())),
            _ => {}
        }
        match self {
            Op::Input => Err(bad("inputs are created with GraphBuilder::input".into())),
            Op::Constant(t) => {
                let dtype =
                    crate::value::DType::from_kind(t.kind()).ok_or_else(|| bad(format!("constant of unsupported kind {:?}", t.kind())))?;
                let shape = t.size().iter().map(|&d| d as usize).collect();
                Ok(ValueInfo { shape, dtype, row_axis: None })
            }
            Op::NormalizeU8 { mean, std } => elementwise::infer_normalize(ins[0], mean, std).map_err(bad),
            Op::ChannelAffine { scale, .. } => elementwise::infer_affine(ins[0], scale).map_err(bad),
            Op::Unary(u) => Ok(ValueInfo { dtype: u.out_dtype(ins[0].dtype), ..ins[0].clone() }),
            Op::Binary(b) => {
                let out = elementwise::infer_binary(ins[0], ins[1]).map_err(bad)?;
                Ok(if b.gives_bool() { ValueInfo { dtype: crate::value::DType::Bool, ..out } } else { out })
            }
            Op::Where => elementwise::infer_where(ins[0], ins[1], ins[2]).map_err(bad),
            Op::Pad(p) => p.infer(ins[0]).map_err(bad),
            Op::Reduce { axes, keepdims, .. } => {
                rowwise::infer_reduce(ins[0], axes, *keepdims).map(|v| ValueInfo { dtype: ins[0].dtype, ..v }).map_err(bad)
            }
            Op::Whole(w) => w.infer(ins).map_err(bad),
            Op::Conv(c) => c.infer_conv(ins[0]).map_err(bad),
            Op::ConvTranspose(c) => c.infer_conv_transpose(ins[0]).map_err(bad),
            Op::MaxPool(p) | Op::AvgPool(p) => p.infer(ins[0]).map_err(bad),
            Op::Resize(r) => r.infer(ins[0]).map_err(bad),
            Op::Concat { axis } => layout::infer_concat(ins, *axis).map_err(bad),
            Op::Slice(axes) => layout::infer_slice(ins[0], axes).map_err(bad),
            Op::Transpose { perm } => layout::infer_transpose(ins[0], perm).map_err(bad),
            Op::Reshape { shape } => layout::infer_reshape(ins[0], shape).map_err(bad),
            Op::ReduceMean { axes, keepdims } => rowwise::infer_reduce(ins[0], axes, *keepdims).map_err(bad),
            Op::LayerNorm { axis, .. } => rowwise::infer_layer_norm(ins[0], *axis).map_err(bad),
            Op::Linear { weight, .. } => rowwise::infer_linear(ins[0], weight).map_err(bad),
            Op::MatMul => rowwise::infer_matmul(ins[0], ins[1]).map_err(bad),
            Op::Softmax { axis } => {
                if *axis >= ins[0].shape.len() {
                    return Err(bad(format!("axis {axis} out of range for rank {}", ins[0].shape.len())));
                }
                Ok(ins[0].clone())
            }
            Op::Post(p) => p.infer(ins[0]).map_err(bad),
        }
    }

    /// Which rows of input `k`, whose value is `input`, output rows `rows` (of the value `out`)
    /// need.
    pub fn footprint(&self, k: usize, rows: &Rows, input: &ValueInfo, out: &ValueInfo) -> Footprint {
        // Values without a row axis, or outputs without one, carry no row structure.
        if out.row_axis.is_none() {
            return if input.row_axis.is_none() || input.rows() <= 1 { Footprint::Broadcast } else { Footprint::Whole };
        }
        match self {
            Op::Input | Op::Constant(_) => Footprint::Broadcast,
            Op::NormalizeU8 { .. } | Op::ChannelAffine { .. } | Op::Unary(_) => same_rows(input, out, rows),
            Op::Binary(_) | Op::Where => elementwise::binary_footprint(input, out, rows),
            Op::Pad(p) => p.footprint(input, rows),
            Op::Whole(_) => Footprint::Whole,
            Op::Conv(c) => c.conv_footprint(input, rows),
            Op::ConvTranspose(c) => c.conv_transpose_footprint(input, rows),
            Op::MaxPool(p) | Op::AvgPool(p) => p.footprint(input, rows),
            Op::Resize(r) => r.footprint(input, out, rows),
            Op::Concat { axis } => {
                if Some(*axis) == out.row_axis {
                    Footprint::Whole
                } else {
                    same_rows(input, out, rows)
                }
            }
            Op::Slice(axes) => layout::slice_footprint(input, axes, rows),
            Op::Transpose { .. } | Op::Reshape { .. } => {
                if layout::keeps_rows(self, input, out) {
                    same_rows(input, out, rows)
                } else {
                    Footprint::Whole
                }
            }
            Op::ReduceMean { axes, .. } | Op::Reduce { axes, .. } => match input.row_axis {
                Some(a) if axes.contains(&a) => Footprint::Whole,
                _ => same_rows(input, out, rows),
            },
            Op::LayerNorm { axis, .. } => match input.row_axis {
                Some(a) if a < *axis => Footprint::Rows(rows.clone()),
                _ => Footprint::Whole,
            },
            Op::Linear { .. } => match input.row_axis {
                Some(a) if a + 1 < input.shape.len() => Footprint::Rows(rows.clone()),
                _ => Footprint::Whole,
            },
            Op::MatMul => rowwise::matmul_footprint(k, input, out, rows),
            Op::Softmax { axis } => match input.row_axis {
                Some(a) if a != *axis => Footprint::Rows(rows.clone()),
                _ => Footprint::Whole,
            },
            Op::Post(p) => p.footprint(rows),
        }
    }

    /// Locality class for these input and output shapes: the op's own class, or
    /// [`OpClass::Global`] when any input footprint is the whole tensor.
    pub fn locality(&self, ins: &[&ValueInfo], out: &ValueInfo) -> OpClass {
        if matches!(self, Op::Input | Op::Constant(_)) {
            return OpClass::Source;
        }
        if out.row_axis.is_none() {
            return OpClass::Global;
        }
        let all = 0..out.rows();
        if ins.iter().enumerate().any(|(k, input)| self.footprint(k, &all, input, out) == Footprint::Whole) {
            return OpClass::Global;
        }
        match self {
            Op::NormalizeU8 { .. }
            | Op::ChannelAffine { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Where
            | Op::Concat { .. }
            | Op::Post(_) => OpClass::ElementWise,
            Op::Conv(_) | Op::ConvTranspose(_) | Op::MaxPool(_) | Op::AvgPool(_) | Op::Resize(_) | Op::Pad(_) => OpClass::BlockWise,
            Op::Whole(_) => OpClass::Global,
            Op::Slice(axes) => {
                if axes.iter().any(|s| Some(s.axis) == ins[0].row_axis) {
                    OpClass::BlockWise
                } else {
                    OpClass::ElementWise
                }
            }
            _ => OpClass::RowWise,
        }
    }

    /// Computes output rows `rows` from input bands that hold at least the footprint.
    /// Returns a tensor with exactly `rows.len()` rows along the output row axis (the whole
    /// output for values without one).
    ///
    /// # Errors
    /// When libtorch fails or a band does not hold the rows needed.
    pub fn compute(&self, ins: &[BandIn<'_>], out: &ValueInfo, rows: &Rows) -> Result<Tensor, tch::TchError> {
        if out.row_axis.is_none()
            && let Some(t) = self.compute_unbanded(ins)?
        {
            return Ok(t);
        }
        let whole_out = out.row_axis.is_none() || (rows.start == 0 && rows.end == out.rows());
        match self {
            Op::Input => Err(tch::TchError::Kind("graph inputs are not computed".into())),
            Op::Constant(t) => Ok(t.shallow_clone()),
            Op::NormalizeU8 { mean, std } => elementwise::normalize(&ins[0].rows(rows)?, mean, std),
            Op::ChannelAffine { scale, shift } => elementwise::affine(&ins[0].rows(rows)?, scale, shift),
            Op::Unary(u) => u.apply(&ins[0].rows(rows)?),
            Op::Binary(b) => {
                let x = elementwise::binary_operand(&ins[0], out, rows)?;
                let y = elementwise::binary_operand(&ins[1], out, rows)?;
                b.apply(&x, &y)
            }
            Op::Where => {
                let c = elementwise::binary_operand(&ins[0], out, rows)?;
                let x = elementwise::binary_operand(&ins[1], out, rows)?;
                let y = elementwise::binary_operand(&ins[2], out, rows)?;
                x.f_where_self(&c, &y)
            }
            Op::Pad(p) => p.compute(&ins[0], rows),
            Op::Whole(w) => w.compute(ins),
            Op::Reduce { kind, axes, keepdims } => {
                let global = matches!(ins[0].info.row_axis, Some(a) if axes.contains(&a));
                let x = if global { ins[0].whole()? } else { ins[0].rows(rows)? };
                let dims: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
                narrow_out(kind.apply(&x, &dims, *keepdims)?, out, rows, global && !whole_out)
            }
            Op::Conv(c) => c.compute_conv(&ins[0], rows),
            Op::ConvTranspose(c) => c.compute_conv_transpose(&ins[0], out, rows),
            Op::MaxPool(p) => p.compute_max(&ins[0], rows),
            Op::AvgPool(p) => p.compute_avg(&ins[0], rows),
            Op::Resize(r) => r.compute(&ins[0], out, rows),
            Op::Slice(axes) => layout::compute_slice(&ins[0], axes, rows),
            Op::Concat { axis } => {
                let parts: Vec<Tensor> = if whole_out || Some(*axis) == out.row_axis {
                    ins.iter().map(|b| b.whole()).collect::<Result<_, _>>()?
                } else {
                    ins.iter().map(|b| elementwise::binary_operand(b, out, rows)).collect::<Result<_, _>>()?
                };
                let t = Tensor::f_cat(&parts, *axis as i64)?;
                narrow_out(t, out, rows, Some(*axis) == out.row_axis && !whole_out)
            }
            Op::Transpose { perm } => {
                let global = !layout::keeps_rows(self, ins[0].info, out);
                let x = if global { ins[0].whole()? } else { ins[0].rows(rows)? };
                let perm: Vec<i64> = perm.iter().map(|&p| p as i64).collect();
                narrow_out(x.f_permute(perm.as_slice())?, out, rows, global && !whole_out)
            }
            Op::Reshape { shape } => {
                let global = !layout::keeps_rows(self, ins[0].info, out);
                let x = if global { ins[0].whole()? } else { ins[0].rows(rows)? };
                let mut s: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                if let (false, Some(a)) = (global, out.row_axis) {
                    s[a] = rows.len() as i64;
                }
                narrow_out(x.f_reshape(s.as_slice())?, out, rows, global && !whole_out)
            }
            Op::ReduceMean { axes, keepdims } => {
                let global = matches!(ins[0].info.row_axis, Some(a) if axes.contains(&a));
                let x = if global { ins[0].whole()? } else { ins[0].rows(rows)? };
                let dims: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
                let t = x.f_mean_dim(dims.as_slice(), *keepdims, tch::Kind::Float)?;
                narrow_out(t, out, rows, global && !whole_out)
            }
            Op::LayerNorm { axis, weight, bias, eps } => {
                let x = ins[0].rows(rows)?;
                let shape: Vec<i64> = x.size()[*axis..].to_vec();
                x.f_layer_norm(shape.as_slice(), weight.as_ref(), bias.as_ref(), *eps, false)
            }
            Op::Linear { weight, bias, act } => linear::linear(&ins[0].rows(rows)?, weight, bias.as_ref(), act.as_ref()),
            Op::MatMul => rowwise::compute_matmul(ins, out, rows),
            Op::Softmax { axis } => {
                let global = ins[0].info.row_axis == Some(*axis);
                let x = if global { ins[0].whole()? } else { ins[0].rows(rows)? };
                narrow_out(x.f_softmax(*axis as i64, tch::Kind::Float)?, out, rows, global && !whole_out)
            }
            Op::Post(p) => p.compute(&ins[0], rows),
        }
    }

    /// [`Op::compute`] written into `dst`, a tensor of exactly the output rows' shape (a row
    /// band of a buffer holding the whole value, so that chunks computed one by one need no
    /// joining). Returns false, writing nothing, for ops and inputs that cannot write into it
    /// (today: convolutions on the direct oneDNN path and float element-wise arithmetic do);
    /// the caller then calls
    /// [`Op::compute`].
    ///
    /// # Errors
    /// As [`Op::compute`].
    pub fn compute_into(&self, ins: &[BandIn<'_>], out: &ValueInfo, rows: &Rows, dst: &Tensor) -> Result<bool, tch::TchError> {
        match self {
            Op::Conv(c) => c.compute_conv_into(&ins[0], rows, dst),
            Op::Binary(b) if b.writes_into() => {
                let x = elementwise::binary_operand(&ins[0], out, rows)?;
                let y = elementwise::binary_operand(&ins[1], out, rows)?;
                b.apply_into(&x, &y, dst)
            }
            _ => Ok(false),
        }
    }

    /// Whether [`Op::compute_into`] may write this op's output: worth a buffer for the value.
    /// A convolution on the direct oneDNN path writes channels-last whatever the graph's
    /// layout; element-wise arithmetic follows its operands' layout, so `channels_last` says
    /// whether the graph is laid out so.
    pub fn computes_into(&self, channels_last: bool) -> bool {
        match self {
            Op::Conv(c) => matches!(c.packed, Some(PreparedConv::Direct(_))),
            Op::Binary(b) => channels_last && b.writes_into(),
            _ => false,
        }
    }

    /// A barrier whose output is one block (no row axis), computed from whole inputs: every
    /// value is read with the conventional row axis (axis 2 for rank >= 3) and every row is
    /// computed, which is the plain op. `None` when that reading gives no row axis either (vectors,
    /// matrices), for which the band code already computes whole values.
    fn compute_unbanded(&self, ins: &[BandIn<'_>]) -> Result<Option<Tensor>, tch::TchError> {
        if matches!(self, Op::Input | Op::Constant(_) | Op::Post(_) | Op::Whole(_)) {
            return Ok(None);
        }
        let infos: Vec<ValueInfo> = ins.iter().map(|b| ValueInfo::new(b.info.shape.clone(), b.info.dtype)).collect();
        let refs: Vec<&ValueInfo> = infos.iter().collect();
        // An op that has no such reading is left to the band code, as before.
        let Ok(out) = self.infer("", &refs) else { return Ok(None) };
        // Under that reading the op must be local: a row-wise op over the conventional row axis
        // itself (a linear map of [N, L, C] along C) would ask its input for the output's rows.
        if out.row_axis.is_none() || !self.locality(&refs, &out).is_local() {
            return Ok(None);
        }
        let whole: Vec<Tensor> = ins.iter().map(BandIn::whole).collect::<Result<_, _>>()?;
        let bands: Vec<BandIn<'_>> = whole.iter().zip(&infos).map(|(tensor, info)| BandIn { tensor, start: 0, info }).collect();
        self.compute(&bands, &out, &(0..out.rows())).map(Some)
    }

    /// Moves weights to `device`.
    pub(crate) fn move_to(&mut self, device: Device) -> Result<(), tch::TchError> {
        let mv = |t: &mut Tensor| -> Result<(), tch::TchError> {
            *t = t.f_to_device(device)?;
            Ok(())
        };
        match self {
            Op::Constant(t) => mv(t),
            Op::Conv(c) | Op::ConvTranspose(c) => {
                // A packed weight is oneDNN's CPU format: packed again where it applies.
                c.packed = None;
                mv(&mut c.weight)?;
                c.bias.as_mut().map(mv).transpose().map(|_| ())
            }
            Op::ChannelAffine { scale, shift } => {
                mv(scale)?;
                mv(shift)
            }
            Op::LayerNorm { weight, bias, .. } => {
                weight.as_mut().map(mv).transpose()?;
                bias.as_mut().map(mv).transpose().map(|_| ())
            }
            Op::Linear { weight, bias, .. } => {
                mv(weight)?;
                bias.as_mut().map(mv).transpose().map(|_| ())
            }
            _ => Ok(()),
        }
    }

    /// Feeds attributes and weight bytes into a hash.
    pub(crate) fn hash_into(&self, h: &mut sha2::Sha256) -> Result<(), tch::TchError> {
        let text = match self {
            // As the variant printed before it had `act`: a linear layer with nothing folded in
            // keeps its hash, so plans, profiles and recorded hellos of unfused models stay valid
            // (a `Conv` prints its `act` only when set, for the same reason).
            Op::Linear { weight, bias, act: None } => format!("Linear {{ weight: {weight:?}, bias: {bias:?} }}"),
            _ => format!("{self:?}"),
        };
        h.update(text.as_bytes());
        for t in self.weights() {
            let flat = t.f_to_kind(tch::Kind::Float)?.f_contiguous()?.f_view([-1])?.f_to_device(Device::Cpu)?;
            let v = Vec::<f32>::try_from(&flat)?;
            for x in v {
                h.update(x.to_le_bytes());
            }
        }
        Ok(())
    }

    /// The weight tensors the op holds.
    pub fn weights(&self) -> Vec<&Tensor> {
        match self {
            Op::Constant(t) => vec![t],
            Op::Conv(c) | Op::ConvTranspose(c) => std::iter::once(&c.weight).chain(c.bias.as_ref()).collect(),
            Op::ChannelAffine { scale, shift } => vec![scale, shift],
            Op::LayerNorm { weight, bias, .. } => weight.iter().chain(bias.iter()).collect(),
            Op::Linear { weight, bias, .. } => std::iter::once(weight).chain(bias.as_ref()).collect(),
            _ => vec![],
        }
    }
}

/// Footprint of an op whose output row i needs input row i.
fn same_rows(input: &ValueInfo, out: &ValueInfo, rows: &Rows) -> Footprint {
    match input.row_axis {
        Some(_) if input.rows() == out.rows() => Footprint::Rows(rows.clone()),
        Some(_) if input.rows() == 1 => Footprint::Broadcast,
        None => Footprint::Broadcast,
        Some(_) => Footprint::Whole,
    }
}

/// After computing a global op whole, keeps only the requested rows.
fn narrow_out(t: Tensor, out: &ValueInfo, rows: &Rows, narrow: bool) -> Result<Tensor, tch::TchError> {
    match (narrow, out.row_axis) {
        (true, Some(a)) => t.f_narrow(a as i64, rows.start as i64, rows.len() as i64),
        _ => Ok(t),
    }
}

#[cfg(test)]
mod tests;
