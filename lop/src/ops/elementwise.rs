//! Element-wise ops: normalisation of raw bytes, per-channel affine, unary and binary maps.

use super::BandIn;
use crate::rows::{Footprint, Rows};
use crate::value::DTypeKind;
use crate::value::{DType, ValueInfo};
use tch::{Kind, Tensor};

/// Element-wise functions of one tensor.
#[derive(Debug, Clone, PartialEq)]
pub enum UnaryOp {
    /// `max(x, 0)`.
    Relu,
    /// `x` if positive, else `alpha * x`.
    LeakyRelu(f32),
    /// `min(max(x, min), max)` (ReLU6 is `Clip(0, 6)`).
    Clip {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// Logistic function.
    Sigmoid,
    /// `max(0, min(1, alpha * x + beta))`.
    HardSigmoid {
        /// Slope.
        alpha: f32,
        /// Offset.
        beta: f32,
    },
    /// `x * relu6(x + 3) / 6`.
    HardSwish,
    /// `x * sigmoid(x)`.
    Silu,
    /// Gaussian error linear unit (exact, or the tanh approximation).
    Gelu {
        /// Use the tanh approximation.
        tanh: bool,
    },
    /// Error function.
    Erf,
    /// Hyperbolic tangent.
    Tanh,
    /// Exponential.
    Exp,
    /// Square root.
    Sqrt,
    /// Reciprocal.
    Reciprocal,
    /// Negation.
    Neg,
    /// Absolute value.
    Abs,
    /// No-op (kept when an ONNX Identity feeds a graph output).
    Identity,
    /// Logical negation of a boolean tensor.
    Not,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Natural logarithm.
    Log,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
    /// Conversion to another element type (floats to integers truncate; to booleans: non-zero).
    Cast(DType),
}

impl UnaryOp {
    /// Op name.
    pub fn name(&self) -> &'static str {
        match self {
            UnaryOp::Relu => "Relu",
            UnaryOp::LeakyRelu(_) => "LeakyRelu",
            UnaryOp::Clip { .. } => "Clip",
            UnaryOp::Sigmoid => "Sigmoid",
            UnaryOp::HardSigmoid { .. } => "HardSigmoid",
            UnaryOp::HardSwish => "HardSwish",
            UnaryOp::Silu => "SiLU",
            UnaryOp::Gelu { .. } => "Gelu",
            UnaryOp::Erf => "Erf",
            UnaryOp::Tanh => "Tanh",
            UnaryOp::Exp => "Exp",
            UnaryOp::Sqrt => "Sqrt",
            UnaryOp::Reciprocal => "Reciprocal",
            UnaryOp::Neg => "Neg",
            UnaryOp::Abs => "Abs",
            UnaryOp::Identity => "Identity",
            UnaryOp::Not => "Not",
            UnaryOp::Sin => "Sin",
            UnaryOp::Cos => "Cos",
            UnaryOp::Log => "Log",
            UnaryOp::Floor => "Floor",
            UnaryOp::Ceil => "Ceil",
            UnaryOp::Cast(_) => "Cast",
        }
    }

    /// The element type of the result for an input of type `x`.
    pub fn out_dtype(&self, x: DType) -> DType {
        match self {
            UnaryOp::Not => DType::Bool,
            UnaryOp::Cast(d) => *d,
            _ => x,
        }
    }

    pub(crate) fn apply(&self, x: &Tensor) -> Result<Tensor, tch::TchError> {
        match self {
            UnaryOp::Relu => x.f_relu(),
            UnaryOp::LeakyRelu(a) => {
                let neg = x.f_mul_scalar(*a as f64)?;
                x.f_where_self(&x.f_gt(0.0)?, &neg)
            }
            UnaryOp::Clip { min, max } => x.f_clamp(*min as f64, *max as f64),
            UnaryOp::Sigmoid => x.f_sigmoid(),
            UnaryOp::HardSigmoid { alpha, beta } => x.f_mul_scalar(*alpha as f64)?.f_add_scalar(*beta as f64)?.f_clamp(0.0, 1.0),
            UnaryOp::HardSwish => x.f_hardswish(),
            UnaryOp::Silu => x.f_silu(),
            UnaryOp::Gelu { tanh } => x.f_gelu(if *tanh { "tanh" } else { "none" }),
            UnaryOp::Erf => x.f_erf(),
            UnaryOp::Tanh => x.f_tanh(),
            UnaryOp::Exp => x.f_exp(),
            UnaryOp::Sqrt => x.f_sqrt(),
            UnaryOp::Reciprocal => x.f_reciprocal(),
            UnaryOp::Neg => x.f_neg(),
            UnaryOp::Abs => x.f_abs(),
            UnaryOp::Identity => Ok(x.shallow_clone()),
            UnaryOp::Not => x.f_logical_not(),
            UnaryOp::Sin => x.f_sin(),
            UnaryOp::Cos => x.f_cos(),
            UnaryOp::Log => x.f_log(),
            UnaryOp::Floor => x.f_floor(),
            UnaryOp::Ceil => x.f_ceil(),
            UnaryOp::Cast(d) => x.f_to_kind(d.kind()),
        }
    }
}

/// Element-wise functions of two tensors (numpy broadcasting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a ^ b`.
    Pow,
    /// `max(a, b)`.
    Max,
    /// `min(a, b)`.
    Min,
    /// Remainder: with the divisor's sign (`fmod` false, integers) or the dividend's (`fmod` true).
    Mod {
        /// C's `fmod` (the dividend's sign), as ONNX `fmod = 1`.
        fmod: bool,
    },
    /// `a == b`, a boolean.
    Equal,
    /// `a < b`, a boolean.
    Less,
    /// `a > b`, a boolean.
    Greater,
    /// `a <= b`, a boolean.
    LessOrEqual,
    /// `a >= b`, a boolean.
    GreaterOrEqual,
    /// Logical and of booleans.
    And,
    /// Logical or of booleans.
    Or,
    /// Logical exclusive or of booleans.
    Xor,
}

impl BinaryOp {
    /// Op name.
    pub fn name(&self) -> &'static str {
        match self {
            BinaryOp::Add => "Add",
            BinaryOp::Sub => "Sub",
            BinaryOp::Mul => "Mul",
            BinaryOp::Div => "Div",
            BinaryOp::Pow => "Pow",
            BinaryOp::Max => "Max",
            BinaryOp::Min => "Min",
            BinaryOp::Mod { .. } => "Mod",
            BinaryOp::Equal => "Equal",
            BinaryOp::Less => "Less",
            BinaryOp::Greater => "Greater",
            BinaryOp::LessOrEqual => "LessOrEqual",
            BinaryOp::GreaterOrEqual => "GreaterOrEqual",
            BinaryOp::And => "And",
            BinaryOp::Or => "Or",
            BinaryOp::Xor => "Xor",
        }
    }

    /// Whether the result is a boolean (comparisons and logic), whatever the operands.
    pub fn gives_bool(&self) -> bool {
        matches!(
            self,
            BinaryOp::Equal
                | BinaryOp::Less
                | BinaryOp::Greater
                | BinaryOp::LessOrEqual
                | BinaryOp::GreaterOrEqual
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
        )
    }

    /// Whether [`BinaryOp::apply_into`] writes this op's result into a given tensor.
    pub(crate) fn writes_into(&self) -> bool {
        matches!(self, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div)
    }

    /// [`BinaryOp::apply`] of float operands written into `out` (of the broadcast result's
    /// shape, any strides): element by element the same arithmetic, so the same values. False,
    /// writing nothing, for other ops or operands.
    pub(crate) fn apply_into(&self, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<bool, tch::TchError> {
        let float = |t: &Tensor| t.kind() == tch::Kind::Float;
        if !(self.writes_into() && float(a) && float(b) && float(out)) {
            return Ok(false);
        }
        let (sa, sb) = (a.size(), b.size());
        let shape = out.size();
        // The broadcast result must be `out`'s shape exactly: `_out` would resize it otherwise.
        let rank = shape.len();
        let fits = |s: &[i64]| s.len() <= rank && s.iter().rev().zip(shape.iter().rev()).all(|(&d, &o)| d == o || d == 1);
        let covers = (0..rank).all(|i| {
            let dim = |s: &[i64]| if i + s.len() >= rank { s[i + s.len() - rank] } else { 1 };
            dim(&sa).max(dim(&sb)) == shape[i]
        });
        if !(fits(&sa) && fits(&sb) && covers) {
            return Ok(false);
        }
        let _written = match self {
            BinaryOp::Add => a.f_add_out(out, b)?,
            BinaryOp::Sub => a.f_sub_out(out, b)?,
            BinaryOp::Mul => a.f_mul_out(out, b)?,
            _ => a.f_div_out(out, b)?,
        };
        Ok(true)
    }

    pub(crate) fn apply(&self, a: &Tensor, b: &Tensor) -> Result<Tensor, tch::TchError> {
        match self {
            BinaryOp::Add => a.f_add(b),
            BinaryOp::Sub => a.f_sub(b),
            BinaryOp::Mul => a.f_mul(b),
            // ONNX divides integers with truncation; libtorch's `div` would give floats.
            BinaryOp::Div if !a.is_floating_point() && !b.is_floating_point() => a.f_div_tensor_mode(b, "trunc"),
            BinaryOp::Div => a.f_div(b),
            BinaryOp::Pow => a.f_pow(b),
            BinaryOp::Max => a.f_maximum(b),
            BinaryOp::Min => a.f_minimum(b),
            BinaryOp::Mod { fmod: true } => a.f_fmod_tensor(b),
            BinaryOp::Mod { fmod: false } => a.f_remainder_tensor(b),
            BinaryOp::Equal => a.f_eq_tensor(b),
            BinaryOp::Less => a.f_lt_tensor(b),
            BinaryOp::Greater => a.f_gt_tensor(b),
            BinaryOp::LessOrEqual => a.f_le_tensor(b),
            BinaryOp::GreaterOrEqual => a.f_ge_tensor(b),
            BinaryOp::And => a.f_logical_and(b),
            BinaryOp::Or => a.f_logical_or(b),
            BinaryOp::Xor => a.f_logical_xor(b),
        }
    }
}

pub(super) fn infer_normalize(x: &ValueInfo, mean: &[f32], std: &[f32]) -> Result<ValueInfo, String> {
    if x.shape.len() < 3 {
        return Err(format!("expects an N,C,... image, got shape {:?}", x.shape));
    }
    let c = x.shape[1];
    if mean.len() != c || std.len() != c {
        return Err(format!("{c} channels but {} means and {} stds", mean.len(), std.len()));
    }
    if std.iter().any(|&s| s == 0.0 || !s.is_finite()) {
        return Err(format!("std must be finite and non-zero, got {std:?}"));
    }
    Ok(ValueInfo { dtype: DType::F32, ..x.clone() })
}

pub(super) fn infer_affine(x: &ValueInfo, scale: &Tensor) -> Result<ValueInfo, String> {
    let c = scale.numel();
    if x.shape.len() < 2 || x.shape[1] != c {
        return Err(format!("per-channel affine with {c} channels applied to shape {:?}", x.shape));
    }
    Ok(x.clone())
}

/// Numpy broadcasting of three operands (`Where`): the condition's shape joins the two values'.
pub(super) fn infer_where(cond: &ValueInfo, x: &ValueInfo, y: &ValueInfo) -> Result<ValueInfo, String> {
    if cond.dtype != DType::Bool {
        return Err(format!("the condition of a Where must be boolean, not {:?}", cond.dtype));
    }
    if x.dtype != y.dtype {
        return Err(format!("Where chooses between {:?} and {:?}; they must be of one type", x.dtype, y.dtype));
    }
    let values = infer_binary(x, y)?;
    let all = infer_binary(&values, cond)?;
    Ok(ValueInfo { dtype: x.dtype, ..all })
}

pub(super) fn infer_binary(a: &ValueInfo, b: &ValueInfo) -> Result<ValueInfo, String> {
    let rank = a.shape.len().max(b.shape.len());
    let mut shape = vec![0; rank];
    for (i, s) in shape.iter_mut().enumerate() {
        let da = dim_from_end(&a.shape, rank - 1 - i);
        let db = dim_from_end(&b.shape, rank - 1 - i);
        *s = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            (x, y) => return Err(format!("cannot broadcast {:?} with {:?} (axis {i}: {x} vs {y})", a.shape, b.shape)),
        };
    }
    let dtype = if a.dtype == DType::F32 || b.dtype == DType::F32 { DType::F32 } else { a.dtype };
    // The output's row axis comes from an operand that has one with a real extent.
    let aligned = |v: &ValueInfo| v.row_axis.map(|r| r + rank - v.shape.len());
    let row_axis = [a, b]
        .iter()
        .filter(|v| v.rows() > 1)
        .find_map(|v| aligned(v))
        .or_else(|| aligned(a).or_else(|| aligned(b)))
        .or(if rank >= 3 && (a.row_axis.is_some() || b.row_axis.is_some()) { Some(2) } else { None });
    Ok(ValueInfo { shape, dtype, row_axis })
}

fn dim_from_end(shape: &[usize], k: usize) -> usize {
    if k < shape.len() { shape[shape.len() - 1 - k] } else { 1 }
}

/// The axis of `input` that lines up with the output's row axis under broadcasting, if any.
fn aligned_axis(input: &ValueInfo, out: &ValueInfo) -> Option<usize> {
    let ra = out.row_axis?;
    let shift = out.shape.len() - input.shape.len();
    ra.checked_sub(shift)
}

pub(super) fn binary_footprint(input: &ValueInfo, out: &ValueInfo, rows: &Rows) -> Footprint {
    match aligned_axis(input, out) {
        None => Footprint::Broadcast,
        Some(ax) if input.shape[ax] == 1 => {
            // Broadcast along rows; if the operand has real rows on another axis it is global.
            if input.rows() > 1 { Footprint::Whole } else { Footprint::Broadcast }
        }
        Some(ax) if input.row_axis == Some(ax) || input.row_axis.is_none() => Footprint::Rows(rows.clone()),
        Some(_) => Footprint::Whole,
    }
}

/// An operand of a binary op cut to the output rows (or whole when it broadcasts).
pub(super) fn binary_operand(b: &BandIn<'_>, out: &ValueInfo, rows: &Rows) -> Result<Tensor, tch::TchError> {
    match binary_footprint(b.info, out, rows) {
        Footprint::Rows(r) => match (b.info.row_axis, aligned_axis(b.info, out)) {
            (Some(_), _) => b.rows(&r),
            (None, Some(ax)) => b.rows_on(ax, &r),
            (None, None) => Ok(b.tensor.shallow_clone()),
        },
        _ => b.whole(),
    }
}

fn channel_view(v: &Tensor, rank: usize) -> Result<Tensor, tch::TchError> {
    let mut shape = vec![1i64; rank];
    shape[1] = -1;
    v.f_view(shape.as_slice())
}

pub(super) fn normalize(x: &Tensor, mean: &[f32], std: &[f32]) -> Result<Tensor, tch::TchError> {
    let rank = x.dim();
    let dev = x.device();
    let m = channel_view(&Tensor::from_slice(mean).f_to_device(dev)?, rank)?;
    let s = channel_view(&Tensor::from_slice(std).f_to_device(dev)?, rank)?;
    x.f_to_kind(Kind::Float)?.f_div_scalar(255.0)?.f_sub(&m)?.f_div(&s)
}

pub(super) fn affine(x: &Tensor, scale: &Tensor, shift: &Tensor) -> Result<Tensor, tch::TchError> {
    let rank = x.dim();
    x.f_mul(&channel_view(scale, rank)?)?.f_add(&channel_view(shift, rank)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// Written into a channels-last band, add/sub/mul/div give bitwise what `apply` gives, with
    /// broadcasting; other ops, integer operands and results of another shape are refused with
    /// nothing written.
    #[test]
    fn arithmetic_written_into_a_band_equals_its_own_result() {
        let a = Tensor::randn([1, 6, 4, 5], (Kind::Float, Device::Cpu));
        let b = Tensor::randn([1, 6, 4, 5], (Kind::Float, Device::Cpu)).abs() + 0.5;
        let per_channel = Tensor::randn([1, 6, 1, 1], (Kind::Float, Device::Cpu));
        let buffer = Tensor::zeros([1, 9, 5, 6], (Kind::Float, Device::Cpu)).permute([0, 3, 1, 2]);
        let dst = buffer.narrow(2, 2, 4);
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
            for other in [&b, &per_channel] {
                assert!(op.apply_into(&a, other, &dst).expect("into"), "{op:?}");
                assert!(dst.equal(&op.apply(&a, other).expect("apply")), "{op:?}");
            }
        }
        assert!(buffer.narrow(2, 0, 2).eq(0.0).all().int64_value(&[]) == 1, "rows outside the band untouched");
        let before = dst.copy();
        assert!(!BinaryOp::Max.apply_into(&a, &b, &dst).expect("refused"));
        assert!(!BinaryOp::Add.apply_into(&a.to_kind(Kind::Int64), &b, &dst).expect("refused"));
        assert!(!BinaryOp::Add.apply_into(&a.narrow(2, 0, 2), &b.narrow(2, 0, 2), &dst).expect("refused"), "a smaller result");
        assert!(!BinaryOp::Add.apply_into(&per_channel, &per_channel, &dst).expect("refused"), "a broadcast smaller than dst");
        assert!(dst.equal(&before), "nothing written when refused");
    }
}
