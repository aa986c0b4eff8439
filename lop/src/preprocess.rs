//! The model's front end (DESIGN.md section 5a): how a float-input model wants its camera frame
//! prepared (channel order, scale, mean, std), prepended to the graph as local ops so that the
//! frame crosses the link as uint8 bytes for any model, and every band of it is computed exactly
//! as the whole frame would be.
//!
//! Exporters write float inputs and leave `x / 255` or `(x / 255 - mean) / std` to the caller.
//! [`Preprocess::apply`] gives the graph a uint8 input of the same shape and computes, in this
//! order and in float32 like the usual numpy code: the channel reorder (on the bytes), the cast,
//! `/ 255`, `- mean[c]`, `/ std[c]` (steps that do nothing are left out).

use crate::error::{Error, Result};
use crate::graph::{DType, Graph, GraphBuilder, NodeId};
use crate::ops::{BinaryOp, Op, SliceAxis};
use tch::Tensor;

/// How the camera frame becomes the model's float input.
#[derive(Debug, Clone, PartialEq)]
pub struct Preprocess {
    /// Divide by 255 after the cast (pixels on the 0..1 scale), or keep 0..255.
    pub unit_scale: bool,
    /// Per-channel mean subtracted after scaling (empty: none).
    pub mean: Vec<f32>,
    /// Per-channel standard deviation divided by last (empty: none).
    pub std: Vec<f32>,
    /// The model wants BGR while frames arrive as RGB: reverse the channels first.
    pub bgr: bool,
}

/// The forms [`Preprocess::parse`] accepts, for messages.
pub const SPEC_HELP: &str = "'unit' (x/255), 'raw' (0..255 as floats), 'imagenet' ((x/255 - mean) / std with ImageNet's \
                             values), or 'mean=R,G,B;std=R,G,B' on the 0..1 scale; add ';bgr' for models trained on BGR";

impl Preprocess {
    /// Parses `unit`, `raw`, `imagenet` or `mean=..;std=..`, each optionally followed by `;bgr`
    /// (`;rgb` is the default and may be written).
    ///
    /// # Errors
    /// [`Error::Input`] naming the part that does not parse and the accepted forms.
    pub fn parse(spec: &str) -> Result<Preprocess> {
        let bad = |what: String| Error::Input(format!("preprocess '{spec}': {what}; expected {SPEC_HELP}"));
        let mut p = Preprocess { unit_scale: true, mean: Vec::new(), std: Vec::new(), bgr: false };
        let mut preset = false;
        for part in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let numbers = |v: &str| -> Result<Vec<f32>> {
                v.split(',')
                    .map(|x| x.trim().parse::<f32>().ok().filter(|x| x.is_finite()))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad(format!("'{v}' is not a list of numbers")))
            };
            match part {
                "unit" | "raw" | "imagenet" if !preset => {
                    preset = true;
                    p.unit_scale = part != "raw";
                    if part == "imagenet" {
                        p.mean = vec![0.485, 0.456, 0.406];
                        p.std = vec![0.229, 0.224, 0.225];
                    }
                }
                "bgr" => p.bgr = true,
                "rgb" => p.bgr = false,
                _ => match part.split_once('=') {
                    Some(("mean", v)) => p.mean = numbers(v)?,
                    Some(("std", v)) => p.std = numbers(v)?,
                    _ => return Err(bad(format!("unknown part '{part}'"))),
                },
            }
        }
        if !preset && p.mean.is_empty() && p.std.is_empty() {
            return Err(bad("no scale, mean or std given".into()));
        }
        if p.std.contains(&0.0) {
            return Err(bad("a std of 0".into()));
        }
        Ok(p)
    }

    /// The spec [`Preprocess::parse`] reads back as this stage (for configuration files and
    /// child processes).
    pub fn spec(&self) -> String {
        let list = |v: &[f32]| v.iter().map(f32::to_string).collect::<Vec<_>>().join(",");
        let mut parts = vec![if self.unit_scale { "unit" } else { "raw" }.to_string()];
        if !self.mean.is_empty() {
            parts.push(format!("mean={}", list(&self.mean)));
        }
        if !self.std.is_empty() {
            parts.push(format!("std={}", list(&self.std)));
        }
        if self.bgr {
            parts.push("bgr".into());
        }
        parts.join(";")
    }

    /// `graph` with a uint8 input in place of its float input, preceded by this stage.
    ///
    /// # Errors
    /// [`Error::Input`] when the graph does not have exactly one float32 NCHW input, or when the
    /// mean, std or channel reorder do not fit its channel count.
    pub fn apply(&self, graph: Graph) -> Result<Graph> {
        let inputs = graph.inputs();
        let [input] = inputs[..] else {
            return Err(Error::Input(format!("a preprocess stage needs a model with one input; '{}' has {}", graph.name, inputs.len())));
        };
        let info = graph.nodes[input].info.clone();
        if info.dtype != DType::F32 {
            return Err(Error::Input(format!(
                "'{}' already takes {:?} input; a preprocess stage applies to float32 inputs only",
                graph.name, info.dtype
            )));
        }
        let &[_, c, _, _] = &info.shape[..] else {
            return Err(Error::Input(format!("a preprocess stage needs an N,C,H,W input; '{}' has shape {:?}", graph.name, info.shape)));
        };
        for (what, v) in [("mean", &self.mean), ("std", &self.std)] {
            if !v.is_empty() && v.len() != c {
                return Err(Error::Input(format!("preprocess {what} has {} values but '{}' has {c} input channels", v.len(), graph.name)));
            }
        }
        if self.bgr && c != 3 {
            return Err(Error::Input(format!("bgr channel order needs 3 input channels; '{}' has {c}", graph.name)));
        }
        let name = graph.nodes[input].name.clone();
        graph.with_front(input, |b| {
            let x = b.input(name, info.shape.clone(), DType::U8);
            self.stage(b, x, c)
        })
    }

    /// Adds the stage's ops after the uint8 input `x`; returns the float value the model reads.
    fn stage(&self, b: &mut GraphBuilder, x: NodeId, c: usize) -> Result<NodeId> {
        let constant = |b: &mut GraphBuilder, name: &str, t: Tensor| b.add(format!("preprocess/{name}"), Op::Constant(t), &[]);
        let per_channel = |v: &[f32]| Tensor::from_slice(v).view([1, c as i64, 1, 1]);
        let mut v = x;
        if self.bgr {
            let channel = |k: usize| Op::Slice(vec![SliceAxis { axis: 1, start: k, end: k + 1, step: 1 }]);
            let parts = (0..3).rev().map(|k| b.add(format!("preprocess/channel{k}"), channel(k), &[v])).collect::<Result<Vec<_>>>()?;
            v = b.add("preprocess/bgr", Op::Concat { axis: 1 }, &parts)?;
        }
        let one = constant(b, "one", Tensor::from(1.0f32))?;
        v = b.add("preprocess/cast", Op::Binary(BinaryOp::Mul), &[v, one])?;
        if self.unit_scale {
            let k = constant(b, "255", Tensor::from(255.0f32))?;
            v = b.add("preprocess/scale", Op::Binary(BinaryOp::Div), &[v, k])?;
        }
        if self.mean.iter().any(|&m| m != 0.0) {
            let m = constant(b, "mean", per_channel(&self.mean))?;
            v = b.add("preprocess/mean", Op::Binary(BinaryOp::Sub), &[v, m])?;
        }
        if self.std.iter().any(|&s| s != 1.0) {
            let s = constant(b, "std", per_channel(&self.std))?;
            v = b.add("preprocess/std", Op::Binary(BinaryOp::Div), &[v, s])?;
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{run_split, run_whole};
    use crate::ops::UnaryOp;
    use crate::plan::Plan;
    use tch::{Device, Kind};

    fn float_model() -> Graph {
        let mut b = GraphBuilder::new("float");
        let x = b.input("images", vec![1, 3, 12, 10], DType::F32);
        let y = b.add("relu", Op::Unary(UnaryOp::Relu), &[x]).expect("relu");
        b.output(y);
        b.build().expect("graph")
    }

    #[test]
    fn parses_presets_and_custom_values_and_rejects_the_rest() {
        let p = Preprocess::parse("imagenet;bgr").expect("parses");
        assert!(p.unit_scale && p.bgr && p.mean.len() == 3 && p.std.len() == 3);
        assert_eq!(Preprocess::parse("raw").expect("raw"), Preprocess { unit_scale: false, mean: vec![], std: vec![], bgr: false });
        let p = Preprocess::parse("mean=0.5,0.5,0.5; std=0.25,0.25,0.25").expect("custom");
        assert_eq!((p.mean, p.std, p.unit_scale), (vec![0.5; 3], vec![0.25; 3], true));
        for spec in ["imagenet;bgr", "raw", "unit;mean=0.5,0.25,0.125", "mean=0.1;std=0.3"] {
            let p = Preprocess::parse(spec).expect("parses");
            assert_eq!(Preprocess::parse(&p.spec()).expect("spec parses"), p, "{spec} -> {}", p.spec());
        }
        for bad in ["", "bgr", "unit;raw", "mean=a,b", "std=0,1,1", "scale=2"] {
            let e = Preprocess::parse(bad).expect_err(bad).to_string();
            assert!(e.contains("expected 'unit'"), "{bad}: {e}");
        }
    }

    /// The stage computes what numpy code computes on the float frame, bit for bit, and every
    /// band layout of the prepared graph gives the whole result; the frame travels as bytes.
    #[test]
    fn stage_matches_the_float_reference_exactly_under_any_split() {
        let frame = Tensor::randint(256, [1, 3, 12, 10], (Kind::Uint8, Device::Cpu));
        let f = frame.to_kind(Kind::Float);
        let cases = [
            ("unit", f.shallow_clone() / 255.0),
            ("raw;bgr", f.flip([1])),
            (
                "imagenet;bgr",
                (f.flip([1]) / 255.0 - Tensor::from_slice(&[0.485f32, 0.456, 0.406]).view([1, 3, 1, 1]))
                    / Tensor::from_slice(&[0.229f32, 0.224, 0.225]).view([1, 3, 1, 1]),
            ),
        ];
        for (spec, reference) in cases {
            let g = Preprocess::parse(spec).expect("spec").apply(float_model()).expect("applies");
            assert_eq!(g.nodes[g.inputs()[0]].info.dtype, DType::U8);
            let whole = run_whole(&g, std::slice::from_ref(&frame)).expect("whole").outputs.remove(0);
            assert!(whole.equal(&reference.relu()), "{spec}: differs from the float reference");
            for seed in 0..6 {
                let split = run_split(&g, &Plan::random(&g, 4, seed), std::slice::from_ref(&frame)).expect("split");
                assert!(split.outputs[0].equal(&whole), "{spec} seed {seed}");
            }
        }
    }

    #[test]
    fn stage_refuses_models_it_does_not_fit() {
        let p = Preprocess::parse("unit").expect("unit");
        let u8_model = p.apply(float_model()).expect("once");
        assert!(p.apply(u8_model).expect_err("twice").to_string().contains("already takes"));
        let two = Preprocess::parse("mean=0.5,0.5;std=1,1").expect("two channels");
        assert!(two.apply(float_model()).expect_err("3 channels").to_string().contains("2 values"));
    }
}
