//! Slice and Split: ONNX's slice parameters (attributes or inputs, negative indices, clamping),
//! shared with constant folding, and their IR form as strided slices with positive steps.

use super::args::{axes, axis, data, ints_param};
use super::importer::{Importer, Val};
use super::node::Ctx;
use crate::error::Result;
use crate::ops::{Op, SliceAxis};

/// One sliced axis with ONNX's normalisation applied: `start` and `end` clamped to the axis
/// (`end` may be -1 for negative steps), `step` non-zero.
#[derive(Debug, Clone, Copy)]
pub(super) struct RawSlice {
    pub axis: usize,
    pub start: i64,
    pub end: i64,
    pub step: i64,
}

impl RawSlice {
    /// The selected indices, in order.
    pub fn indices(&self) -> Vec<i64> {
        let (mut i, mut out) = (self.start, Vec::new());
        while (self.step > 0 && i < self.end) || (self.step < 0 && i > self.end) {
            out.push(i);
            i += self.step;
        }
        out
    }
}

/// Slice parameters from attributes (opset < 10) or constant inputs, normalised and clamped.
pub(super) fn slice_params(cx: &Ctx, ins: &[Option<Val>], shape: &[usize]) -> Result<Vec<RawSlice>> {
    let starts = ints_param(cx, ins, "starts", 1)?.ok_or_else(|| cx.malformed("missing starts"))?;
    let ends = ints_param(cx, ins, "ends", 2)?.ok_or_else(|| cx.malformed("missing ends"))?;
    let ax = ints_param(cx, ins, "axes", 3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = ints_param(cx, ins, "steps", 4)?.unwrap_or_else(|| vec![1; starts.len()]);
    if ends.len() != starts.len() || ax.len() != starts.len() || steps.len() != starts.len() {
        return Err(cx.malformed(format!("starts {starts:?}, ends {ends:?}, axes {ax:?}, steps {steps:?} differ in length")));
    }
    axes(cx, &ax, shape.len())?;
    let mut out = Vec::with_capacity(starts.len());
    for i in 0..starts.len() {
        let a = axis(cx, ax[i], shape.len())?;
        let d = shape[a] as i64;
        let step = steps[i];
        if step == 0 {
            return Err(cx.malformed("slice step 0"));
        }
        let wrap = |x: i64| if x < 0 { x.saturating_add(d) } else { x };
        let (start, end) = if d == 0 {
            (0, 0)
        } else if step > 0 {
            (wrap(starts[i]).clamp(0, d), wrap(ends[i]).clamp(0, d))
        } else {
            (wrap(starts[i]).clamp(0, d - 1), wrap(ends[i]).clamp(-1, d - 1))
        };
        out.push(RawSlice { axis: a, start, end, step });
    }
    Ok(out)
}

/// Slice parameters for the IR (positive steps only); axes that select everything are dropped.
pub(super) fn slice_axes(cx: &Ctx, ins: &[Option<Val>], shape: &[usize]) -> Result<Vec<SliceAxis>> {
    let mut out = Vec::new();
    for s in slice_params(cx, ins, shape)? {
        if s.step < 0 {
            return Err(cx.unsupported(format!("negative slice step {} on axis {} of a tensor computed at run time", s.step, s.axis)));
        }
        let (start, end, step) = (s.start as usize, s.end.max(s.start) as usize, s.step as usize);
        if !(start == 0 && end == shape[s.axis] && step == 1) {
            out.push(SliceAxis { axis: s.axis, start, end, step });
        }
    }
    Ok(out)
}

/// Split axis and part sizes.
pub(super) fn split_sizes(cx: &Ctx, ins: &[Option<Val>], shape: &[usize]) -> Result<(usize, Vec<usize>)> {
    let a = axis(cx, cx.attr_i("axis", 0)?, shape.len())?;
    let d = shape[a];
    let sizes = match ints_param(cx, ins, "split", 1)? {
        Some(v) => {
            v.iter().map(|&s| usize::try_from(s).map_err(|_| cx.malformed(format!("negative split {v:?}")))).collect::<Result<Vec<_>>>()?
        }
        None => {
            let n = cx.attr_i("num_outputs", cx.n_outputs() as i64)?;
            let n = usize::try_from(n).ok().filter(|&n| n > 0).ok_or_else(|| cx.malformed(format!("{n} outputs")))?;
            if !d.is_multiple_of(n) && !cx.has("num_outputs") {
                return Err(cx.malformed(format!("axis {a} of extent {d} does not split into {n} equal parts")));
            }
            let part = d.div_ceil(n);
            (0..n).map(|i| part.min(d.saturating_sub(i * part))).collect()
        }
    };
    if sizes.iter().sum::<usize>() != d {
        return Err(cx.malformed(format!("split {sizes:?} does not add up to extent {d} of axis {a}")));
    }
    Ok((a, sizes))
}

/// Slice with non-negative steps.
pub(super) fn slice(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let s = slice_axes(cx, ins, &imp.shape(&x))?;
    if s.is_empty() {
        return Ok(vec![x]);
    }
    Ok(vec![imp.emit(cx, "", Op::Slice(s), &[x])?])
}

/// Split into one Slice per output.
pub(super) fn split(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let (a, sizes) = split_sizes(cx, ins, &imp.shape(&x))?;
    if sizes.len() != cx.n_outputs() {
        return Err(cx.malformed(format!("{} parts for {} outputs", sizes.len(), cx.n_outputs())));
    }
    let mut out = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for (k, &n) in sizes.iter().enumerate() {
        let part = SliceAxis { axis: a, start, end: start + n, step: 1 };
        start += n;
        if !imp.is_used(cx.output(k)) {
            out.push(x.dup());
            continue;
        }
        out.push(if sizes.len() == 1 { x.dup() } else { imp.emit(cx, &format!("part{k}"), Op::Slice(vec![part]), &[x.dup()])? });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::error::{Error, Result};

    const BIG: i64 = i64::MAX;

    #[test]
    fn slice_with_inputs_and_with_attributes() -> Result<()> {
        let x = randn(&[1, 3, 8, 9], 1);
        // Inputs (opset 13), with steps: rows 1.. step 2, columns -3..-1.
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 3, 8, 9]);
        m.init_i64("starts", &[2], &[1, -3]);
        m.init_i64("ends", &[2], &[BIG, -1]);
        m.init_i64("axes", &[2], &[2, -1]);
        m.init_i64("steps", &[2], &[2, 1]);
        m.node("Slice", &["x", "starts", "ends", "axes", "steps"], &["y"], vec![]);
        m.output("y");
        let g = m.import()?;
        let want = x.slice(2, 1, 8, 2).slice(3, 6, 8, 1);
        assert_eq!(max_diff(&run(&g, &x)?[0], &want), 0.0);

        // Attributes (opset 9): no steps; ends past the extent and very negative starts clamp.
        let mut m = ModelBuilder::new(9);
        m.input("x", &[1, 3, 8, 9]);
        m.node("Slice", &["x"], &["y"], vec![ais("starts", &[1, -100]), ais("ends", &[BIG, -1]), ais("axes", &[1, 3])]);
        m.output("y");
        let g = m.import()?;
        let want = x.slice(1, 1, 3, 1).slice(3, 0, 8, 1);
        assert_eq!(max_diff(&run(&g, &x)?[0], &want), 0.0);

        // The same slice given as inputs without steps gives the same graph output.
        let mut m2 = ModelBuilder::new(13);
        m2.input("x", &[1, 3, 8, 9]);
        m2.init_i64("starts", &[2], &[1, -100]);
        m2.init_i64("ends", &[2], &[BIG, -1]);
        m2.init_i64("axes", &[2], &[1, 3]);
        m2.node("Slice", &["x", "starts", "ends", "axes"], &["y"], vec![]);
        m2.output("y");
        assert_eq!(max_diff(&run(&m2.import()?, &x)?[0], &want), 0.0);

        // Negative steps are reported, not mis-computed.
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 3, 8, 9]);
        m.init_i64("starts", &[1], &[-1]);
        m.init_i64("ends", &[1], &[-BIG]);
        m.init_i64("axes", &[1], &[2]);
        m.init_i64("steps", &[1], &[-1]);
        m.node("Slice", &["x", "starts", "ends", "axes", "steps"], &["y"], vec![]);
        m.output("y");
        assert!(matches!(m.import(), Err(Error::Unsupported { .. })));
        Ok(())
    }

    #[test]
    fn split_by_sizes_attribute_and_num_outputs() -> Result<()> {
        let x = randn(&[1, 5, 4, 4], 2);
        let check = |m: &ModelBuilder, parts: &[i64]| -> Result<()> {
            let ys = run(&m.import()?, &x)?;
            assert_eq!(ys.len(), parts.len());
            let mut start = 0;
            for (y, &n) in ys.iter().zip(parts) {
                assert_eq!(max_diff(y, &x.narrow(1, start, n)), 0.0);
                start += n;
            }
            Ok(())
        };
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 5, 4, 4]);
        m.init_i64("split", &[2], &[1, 4]);
        m.node("Split", &["x", "split"], &["a", "b"], vec![ai("axis", 1)]);
        m.output("a");
        m.output("b");
        check(&m, &[1, 4])?;

        let mut m = ModelBuilder::new(11);
        m.input("x", &[1, 5, 4, 4]);
        m.node("Split", &["x"], &["a", "b", "c"], vec![ai("axis", -3), ais("split", &[2, 2, 1])]);
        for o in ["a", "b", "c"] {
            m.output(o);
        }
        check(&m, &[2, 2, 1])?;

        let mut m = ModelBuilder::new(18);
        m.input("x", &[1, 5, 4, 4]);
        m.node("Split", &["x"], &["a", "b"], vec![ai("axis", 1), ai("num_outputs", 2)]);
        m.output("a");
        m.output("b");
        check(&m, &[3, 2])?;

        // Without sizes an uneven split is malformed before opset 18.
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 5, 4, 4]);
        m.node("Split", &["x"], &["a", "b"], vec![ai("axis", 1)]);
        m.output("a");
        m.output("b");
        assert!(matches!(m.import(), Err(Error::Malformed(_))));
        Ok(())
    }
}
