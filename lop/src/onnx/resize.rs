//! Resize (opsets 10 to 19) and the older Upsample: output size from scales or sizes, the
//! interpolation and coordinate modes.

use super::args::{const_input, data};
use super::importer::{Importer, Val};
use super::node::Ctx;
use super::tensor::{floats, ints};
use crate::error::Result;
use crate::ops::{CoordMode, NearestMode, Op, Resize, ResizeMode};

/// Scales (floats) and sizes (ints) as given, each `None` when absent or empty.
type Params = (Option<Vec<f32>>, Option<Vec<i64>>);

fn params(cx: &Ctx, ins: &[Option<Val>]) -> Result<Params> {
    let t = cx.torch();
    let nonempty_f = |k: usize| -> Result<Option<Vec<f32>>> {
        Ok(const_input(cx, ins, k, "scales")?.map(|s| floats(&s)).transpose().map_err(&t)?.filter(|v| !v.is_empty()))
    };
    if cx.op == "Upsample" {
        return Ok((if cx.has("scales") { cx.attr_floats("scales")? } else { nonempty_f(1)? }, None));
    }
    if cx.opset < 11 {
        return Ok((nonempty_f(1)?, None));
    }
    let sizes = const_input(cx, ins, 3, "sizes")?.map(|s| ints(&s)).transpose().map_err(&t)?.filter(|v| !v.is_empty());
    Ok((nonempty_f(2)?, sizes))
}

/// Output shape and per-axis scales.
fn geometry(cx: &Ctx, ins: &[Option<Val>], shape: &[usize]) -> Result<(Vec<usize>, Vec<f32>)> {
    let rank = shape.len();
    let axes: Vec<usize> = match cx.attr_ints("axes")? {
        Some(a) => a.iter().map(|&a| super::args::axis(cx, a, rank)).collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    let mut out = shape.to_vec();
    let mut scales = vec![1.0f32; rank];
    match params(cx, ins)? {
        (Some(s), None) => {
            if s.len() != axes.len() {
                return Err(cx.malformed(format!("{} scales for {} axes", s.len(), axes.len())));
            }
            for (&a, &sc) in axes.iter().zip(&s) {
                if !(sc.is_finite() && sc > 0.0) {
                    return Err(cx.malformed(format!("scales {s:?}")));
                }
                scales[a] = sc;
                out[a] = (shape[a] as f32 * sc).floor() as usize;
            }
        }
        (None, Some(z)) => {
            if z.len() != axes.len() || z.iter().any(|&v| v <= 0) {
                return Err(cx.malformed(format!("sizes {z:?} for {} axes", axes.len())));
            }
            let ratio = |i: usize| z[i] as f32 / shape[axes[i]].max(1) as f32;
            let policy = cx.attr_s("keep_aspect_ratio_policy", "stretch")?;
            let common = match policy.as_str() {
                "stretch" => None,
                "not_larger" => (0..axes.len()).map(ratio).reduce(f32::min),
                "not_smaller" => (0..axes.len()).map(ratio).reduce(f32::max),
                other => return Err(cx.malformed(format!("keep_aspect_ratio_policy '{other}'"))),
            };
            for (i, &a) in axes.iter().enumerate() {
                match common {
                    None => {
                        out[a] = z[i] as usize;
                        scales[a] = ratio(i);
                    }
                    Some(s) => {
                        scales[a] = s;
                        out[a] = (s * shape[a] as f32).round() as usize;
                    }
                }
            }
        }
        (Some(_), Some(_)) => return Err(cx.malformed("both scales and sizes are given")),
        (None, None) => return Err(cx.malformed("neither scales nor sizes is given")),
    }
    if out.iter().any(|&d| d == 0 || d > super::node::MAX_EXTENT) {
        return Err(cx.malformed(format!("output shape {out:?} out of range")));
    }
    Ok((out, scales))
}

fn nearest_mode(cx: &Ctx) -> Result<NearestMode> {
    Ok(match cx.attr_s("nearest_mode", "round_prefer_floor")?.as_str() {
        "round_prefer_floor" => NearestMode::RoundPreferFloor,
        "round_prefer_ceil" => NearestMode::RoundPreferCeil,
        "floor" => NearestMode::Floor,
        "ceil" => NearestMode::Ceil,
        other => return Err(cx.malformed(format!("nearest_mode '{other}'"))),
    })
}

/// Resize and Upsample of a computed tensor.
pub(super) fn resize(imp: &mut Importer, cx: &Ctx, ins: &[Option<Val>]) -> Result<Vec<Val>> {
    let x = data(cx, ins, 0)?;
    let shape = imp.shape(&x);
    if shape.len() < 3 {
        return Err(cx.unsupported(format!("resizing a tensor of rank {}", shape.len())));
    }
    let (out_shape, scales) = geometry(cx, ins, &shape)?;
    if out_shape[..2] != shape[..2] {
        return Err(cx.unsupported(format!("resizing batch or channel axes ({shape:?} -> {out_shape:?})")));
    }
    // Upsample and Resize-10 use asymmetric coordinates; nearest takes the floor when enlarging
    // and the ceiling when shrinking.
    let legacy = cx.op == "Upsample" || cx.opset < 11;
    let up = scales.iter().any(|&s| s > 1.0);
    let down = scales.iter().any(|&s| s < 1.0);
    let mode = match cx.attr_s("mode", "nearest")?.as_str() {
        "nearest" if legacy && up && down => return Err(cx.unsupported("nearest resize enlarging some axes and shrinking others")),
        "nearest" if legacy => ResizeMode::Nearest(if down { NearestMode::Ceil } else { NearestMode::Floor }),
        "nearest" => ResizeMode::Nearest(nearest_mode(cx)?),
        "linear" | "bilinear" | "trilinear" => ResizeMode::Linear,
        other => return Err(cx.unsupported(format!("mode '{other}' (nearest and linear are supported)"))),
    };
    if mode == ResizeMode::Linear && down && cx.attr_i("antialias", 0)? != 0 {
        return Err(cx.unsupported("antialiased downsampling"));
    }
    let coord = if legacy {
        CoordMode::Asymmetric
    } else {
        match cx.attr_s("coordinate_transformation_mode", "half_pixel")?.as_str() {
            "half_pixel" => CoordMode::HalfPixel,
            "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
            "align_corners" => CoordMode::AlignCorners,
            "asymmetric" => CoordMode::Asymmetric,
            "tf_half_pixel_for_nn" => CoordMode::TfHalfPixelForNn,
            other => return Err(cx.unsupported(format!("coordinate_transformation_mode '{other}'"))),
        }
    };
    if out_shape == shape && scales.iter().all(|&s| s == 1.0) {
        return Ok(vec![x]);
    }
    Ok(vec![imp.emit(cx, "", Op::Resize(Resize { mode, coord, out_shape, scales }), &[x])?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::error::{Error, Result};
    use tch::Tensor;

    fn nearest2(x: &Tensor) -> Tensor {
        x.repeat_interleave_self_int(2, 2, None::<i64>).repeat_interleave_self_int(2, 3, None::<i64>)
    }

    #[test]
    fn resize_with_scales() -> Result<()> {
        let x = randn(&[1, 2, 5, 6], 1);
        for coord in ["asymmetric", "half_pixel"] {
            let mut m = ModelBuilder::new(13);
            m.input("x", &[1, 2, 5, 6]);
            m.init_f32("scales", &[4], &[1.0, 1.0, 2.0, 2.0]);
            m.node("Resize", &["x", "", "scales"], &["y"], vec![astr("mode", "nearest"), astr("coordinate_transformation_mode", coord)]);
            m.output("y");
            let y = run(&m.import()?, &x)?;
            assert_eq!(max_diff(&y[0], &nearest2(&x)), 0.0, "{coord}");
        }
        // Opset 11 takes roi and scales as inputs too; linear half_pixel matches libtorch.
        let mut m = ModelBuilder::new(11);
        m.input("x", &[1, 2, 5, 6]);
        m.init_f32("roi", &[0], &[]);
        m.init_f32("scales", &[4], &[1.0, 1.0, 2.0, 3.0]);
        m.node("Resize", &["x", "roi", "scales"], &["y"], vec![astr("mode", "linear")]);
        m.output("y");
        let y = run(&m.import()?, &x)?;
        let want = x.upsample_bilinear2d([10, 18], false, Some(2.0), Some(3.0));
        assert!(max_diff(&y[0], &want) < 1e-5, "{}", max_diff(&y[0], &want));
        Ok(())
    }

    #[test]
    fn resize_with_sizes() -> Result<()> {
        let x = randn(&[1, 2, 6, 5], 2);
        for (coord, align) in [("half_pixel", false), ("align_corners", true)] {
            let mut m = ModelBuilder::new(13);
            m.input("x", &[1, 2, 6, 5]);
            m.init_i64("sizes", &[4], &[1, 2, 12, 10]);
            m.node("Resize", &["x", "", "", "sizes"], &["y"], vec![astr("mode", "linear"), astr("coordinate_transformation_mode", coord)]);
            m.output("y");
            let y = run(&m.import()?, &x)?;
            let want = x.upsample_bilinear2d([12, 10], align, None::<f64>, None::<f64>);
            assert_eq!(y[0].size(), vec![1, 2, 12, 10]);
            assert!(max_diff(&y[0], &want) < 1e-5, "{coord}: {}", max_diff(&y[0], &want));
        }
        // Opset 18: sizes for the listed axes only.
        let mut m = ModelBuilder::new(18);
        m.input("x", &[1, 2, 6, 5]);
        m.init_i64("sizes", &[2], &[12, 10]);
        m.node(
            "Resize",
            &["x", "", "", "sizes"],
            &["y"],
            vec![ais("axes", &[2, 3]), astr("nearest_mode", "floor"), astr("coordinate_transformation_mode", "asymmetric")],
        );
        m.output("y");
        let y = run(&m.import()?, &x)?;
        assert_eq!(max_diff(&y[0], &nearest2(&x)), 0.0);
        // Cubic is reported.
        let mut m = ModelBuilder::new(13);
        m.input("x", &[1, 2, 6, 5]);
        m.init_i64("sizes", &[4], &[1, 2, 12, 10]);
        m.node("Resize", &["x", "", "", "sizes"], &["y"], vec![astr("mode", "cubic")]);
        m.output("y");
        assert!(matches!(m.import(), Err(Error::Unsupported { .. })));
        Ok(())
    }

    #[test]
    fn upsample_old_opsets() -> Result<()> {
        let x = randn(&[1, 2, 3, 4], 3);
        let mut m = ModelBuilder::new(9);
        m.input("x", &[1, 2, 3, 4]);
        m.init_f32("scales", &[4], &[1.0, 1.0, 2.0, 2.0]);
        m.node("Upsample", &["x", "scales"], &["y"], vec![astr("mode", "nearest")]);
        m.output("y");
        assert_eq!(max_diff(&run(&m.import()?, &x)?[0], &nearest2(&x)), 0.0);
        let mut m = ModelBuilder::new(7);
        m.input("x", &[1, 2, 3, 4]);
        m.node("Upsample", &["x"], &["y"], vec![afs("scales", &[1.0, 1.0, 2.0, 2.0])]);
        m.output("y");
        assert_eq!(max_diff(&run(&m.import()?, &x)?[0], &nearest2(&x)), 0.0);
        Ok(())
    }
}
