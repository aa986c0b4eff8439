//! Reading a node's inputs and attributes, shared by every converter and by constant folding:
//! required and optional inputs, inputs that must be known at import time, integer lists given
//! as an attribute (old opsets) or an input (new ones), and axis normalisation.

use super::importer::Val;
use super::node::Ctx;
use super::tensor;
use crate::error::Result;
use tch::Tensor;

/// Required input `k`.
pub(super) fn data(cx: &Ctx, ins: &[Option<Val>], k: usize) -> Result<Val> {
    ins.get(k).and_then(Option::as_ref).map(Val::dup).ok_or_else(|| cx.malformed(format!("missing input {k}")))
}

/// Optional input `k`, which must be known at import time.
pub(super) fn const_input(cx: &Ctx, ins: &[Option<Val>], k: usize, what: &str) -> Result<Option<Tensor>> {
    match ins.get(k).and_then(Option::as_ref) {
        None => Ok(None),
        Some(Val::Const(t)) => Ok(Some(t.shallow_clone())),
        Some(Val::Node(_)) => Err(cx.unsupported(format!("input {k} ({what}) must be known at import time"))),
    }
}

/// Required input `k`, which must be known at import time.
pub(super) fn weight(cx: &Ctx, ins: &[Option<Val>], k: usize, what: &str) -> Result<Tensor> {
    const_input(cx, ins, k, what)?.ok_or_else(|| cx.malformed(format!("missing input {k} ({what})")))
}

/// An integer list given as attribute `attr` (old opsets) or as constant input `k` (new ones).
pub(super) fn ints_param(cx: &Ctx, ins: &[Option<Val>], attr: &str, k: usize) -> Result<Option<Vec<i64>>> {
    if let Some(v) = cx.attr_ints(attr)? {
        return Ok(Some(v));
    }
    match const_input(cx, ins, k, attr)? {
        None => Ok(None),
        Some(t) => tensor::ints(&t).map(Some).map_err(cx.torch()),
    }
}

/// Normalises a possibly negative axis of a rank-`rank` tensor.
pub(super) fn axis(cx: &Ctx, a: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if a < -r || a >= r {
        return Err(cx.malformed(format!("axis {a} out of range for rank {rank}")));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

/// Normalised, sorted, distinct axes.
pub(super) fn axes(cx: &Ctx, v: &[i64], rank: usize) -> Result<Vec<usize>> {
    let mut out = v.iter().map(|&a| axis(cx, a, rank)).collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    if out.windows(2).any(|w| w[0] == w[1]) {
        return Err(cx.malformed(format!("repeated axes {v:?}")));
    }
    Ok(out)
}
