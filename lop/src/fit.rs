//! Fitting the camera's frame to the model's input, as the model's own front end (issue 59).
//!
//! A detector takes 640x640 while the camera writes 640x480. When the robot letterboxes the
//! frame before it crosses, what crosses is the robot's fitted frame, not the camera's JPEG. With
//! [`FrameFit::apply`] the model takes the camera's frame at the camera's size and fits it
//! itself, as local ops on rows that both sides compute like any other: a bilinear resize (only
//! when the size changes) and a constant pad (letterbox margins). So the camera's own JPEG can
//! cross unchanged at any size, and a split output still equals the unsplit model's on the
//! decoded frame.
//!
//! The geometry is [`placement`]'s, the same the robot's image conversion uses: scale by
//! `s = min(W / w, H / h)` to `round(w s) x round(h s)`, centre (left and top margins are the
//! floor of half the spare pixels), fill the rest with the pad value. Resampling is bilinear
//! with half-pixel centres, clamped at the edges, computed in float32 and rounded to the
//! nearest byte, so the model still reads bytes.

use crate::error::{Error, Result};
use crate::graph::{DType, Graph, GraphBuilder, NodeId};
use crate::ops::{BinaryOp, CoordMode, Op, Pad, PadMode, Resize, ResizeMode, UnaryOp};
use tch::Tensor;

/// How a frame is fitted to the model's input size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fit {
    /// Stretch to the input (aspect ratio not kept).
    Resize,
    /// Keep the aspect ratio, centre, fill the margins with `pad`.
    Letterbox {
        /// The fill value of every channel.
        pad: u8,
    },
}

/// Where a frame lands in the model's input: its margins and its scaled size, in input pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// First input column of the frame.
    pub left: u32,
    /// First input row of the frame.
    pub top: u32,
    /// Input columns the frame covers.
    pub width: u32,
    /// Input rows the frame covers.
    pub height: u32,
}

/// The placement of a `w x h` frame in a `target_w x target_h` input under `fit`.
pub fn placement(fit: Fit, w: u32, h: u32, target_w: u32, target_h: u32) -> Placement {
    match fit {
        Fit::Resize => Placement { left: 0, top: 0, width: target_w, height: target_h },
        Fit::Letterbox { .. } => {
            let s = (f64::from(target_w) / f64::from(w.max(1))).min(f64::from(target_h) / f64::from(h.max(1)));
            let rw = ((f64::from(w) * s).round() as u32).clamp(1, target_w.max(1));
            let rh = ((f64::from(h) * s).round() as u32).clamp(1, target_h.max(1));
            Placement { left: (target_w - rw) / 2, top: (target_h - rh) / 2, width: rw, height: rh }
        }
    }
}

/// The names of the fit's last ops: the pad, or the resize's rounding back to bytes.
const PAD_NODE: &str = "fit/pad";
const BYTES_NODE: &str = "fit/bytes";

/// The shape the model reads after a [`FrameFit`] of its input (the input's own shape in a graph
/// without one): what the results of a fitted frame are in the coordinates of.
pub fn fitted_shape(graph: &Graph) -> Vec<usize> {
    let by_name = |name: &str| graph.nodes.iter().find(|n| n.name == name).map(|n| n.info.shape.clone());
    by_name(PAD_NODE)
        .or_else(|| by_name(BYTES_NODE))
        .or_else(|| graph.inputs().first().map(|&i| graph.nodes[i].info.shape.clone()))
        .unwrap_or_default()
}

/// The largest camera side accepted: JPEG's own limit.
const MAX_SIDE: usize = 65_535;

/// Letterbox margins' default fill: the grey YOLO exporters train with.
pub const DEFAULT_PAD: u8 = 114;

/// The camera's frame size and how the model fits it: the model then takes `[1, C, height,
/// width]` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameFit {
    /// How.
    pub fit: Fit,
    /// The camera frame's columns.
    pub width: usize,
    /// The camera frame's rows.
    pub height: usize,
}

/// The forms [`FrameFit::parse`] accepts, for messages.
pub const SPEC_HELP: &str = "'letterbox@WxH', 'letterbox:PAD@WxH' or 'resize@WxH' (the camera's width and height, e.g. letterbox@640x480)";

impl FrameFit {
    /// Parses `letterbox@WxH`, `letterbox:PAD@WxH` or `resize@WxH`.
    ///
    /// # Errors
    /// [`Error::Input`] naming what does not parse and the accepted forms.
    pub fn parse(spec: &str) -> Result<FrameFit> {
        let bad = |what: &str| Error::Input(format!("frame fit '{spec}': {what}; expected {SPEC_HELP}"));
        let (how, size) = spec.trim().split_once('@').ok_or_else(|| bad("no '@WxH'"))?;
        let fit = match how.trim().split_once(':') {
            None if how.trim() == "resize" => Fit::Resize,
            None if how.trim() == "letterbox" => Fit::Letterbox { pad: DEFAULT_PAD },
            Some(("letterbox", pad)) => Fit::Letterbox { pad: pad.trim().parse().map_err(|_| bad("a pad that is not 0-255"))? },
            _ => return Err(bad("not letterbox or resize")),
        };
        let (w, h) = size.trim().split_once('x').ok_or_else(|| bad("a size that is not WxH"))?;
        let dim = |v: &str| v.trim().parse::<usize>().ok().filter(|&d| (1..=MAX_SIDE).contains(&d));
        let (Some(width), Some(height)) = (dim(w), dim(h)) else {
            return Err(bad(&format!("a width and height of 1-{} pixels", MAX_SIDE)));
        };
        Ok(FrameFit { fit, width, height })
    }

    /// The spec [`FrameFit::parse`] reads back (configuration files, child processes).
    pub fn spec(&self) -> String {
        let how = match self.fit {
            Fit::Resize => "resize".to_string(),
            Fit::Letterbox { pad } => format!("letterbox:{pad}"),
        };
        format!("{how}@{}x{}", self.width, self.height)
    }

    /// `graph`, taking the camera's frame: its one uint8 `[1, C, H, W]` input becomes `[1, C,
    /// height, width]`, fitted to `H x W` by resize and pad ops in front of the model.
    ///
    /// # Errors
    /// [`Error::Input`] for a graph without exactly one uint8 image input.
    pub fn apply(&self, graph: Graph) -> Result<Graph> {
        let inputs = graph.inputs();
        let [input] = inputs[..] else {
            return Err(Error::Input(format!("a frame fit needs a model with one input; '{}' has {}", graph.name, inputs.len())));
        };
        let info = graph.nodes[input].info.clone();
        let &[n, c, th, tw] = &info.shape[..] else {
            return Err(Error::Input(format!("a frame fit needs an N,C,H,W input; '{}' has shape {:?}", graph.name, info.shape)));
        };
        if info.dtype != DType::U8 {
            return Err(Error::Input(format!(
                "a frame fit needs a uint8 image input; '{}' takes {:?} (add a preprocess stage)",
                graph.name, info.dtype
            )));
        }
        if (self.width, self.height) == (tw, th) && self.fit == Fit::Resize {
            return Ok(graph);
        }
        let side = |v: usize| u32::try_from(v).map_err(|_| Error::Input(format!("a side of {v} pixels")));
        let p = placement(self.fit, side(self.width)?, side(self.height)?, side(tw)?, side(th)?);
        let name = graph.nodes[input].name.clone();
        graph.with_front(input, |b| {
            let x = b.input(name, vec![n, c, self.height, self.width], DType::U8);
            let scaled = self.resize(b, x, [n, c, p.height as usize, p.width as usize])?;
            let (bottom, right) = (th - (p.top + p.height) as usize, tw - (p.left + p.width) as usize);
            if (p.top, p.left, bottom, right) == (0, 0, 0, 0) {
                return Ok(scaled);
            }
            let pad = match self.fit {
                Fit::Letterbox { pad } => pad,
                Fit::Resize => 0,
            };
            let op = Pad {
                begin: vec![0, 0, p.top as usize, p.left as usize],
                end: vec![0, 0, bottom, right],
                mode: PadMode::Constant(f32::from(pad)),
            };
            b.add(PAD_NODE, Op::Pad(op), &[scaled])
        })
    }

    /// Bilinear resize of the bytes `x` to `shape`, rounded back to bytes (nothing when the
    /// size does not change).
    fn resize(&self, b: &mut GraphBuilder, x: NodeId, shape: [usize; 4]) -> Result<NodeId> {
        if shape[2] == self.height && shape[3] == self.width {
            return Ok(x);
        }
        let constant = |b: &mut GraphBuilder, name: &str, v: f32| b.add(format!("fit/{name}"), Op::Constant(Tensor::from(v)), &[]);
        let one = constant(b, "one", 1.0)?;
        let v = b.add("fit/cast", Op::Binary(BinaryOp::Mul), &[x, one])?;
        let scales = vec![1.0, 1.0, shape[2] as f32 / self.height as f32, shape[3] as f32 / self.width as f32];
        let op = Resize { mode: ResizeMode::Linear, coord: CoordMode::HalfPixel, out_shape: shape.to_vec(), scales };
        let v = b.add("fit/resize", Op::Resize(op), &[v])?;
        let half = constant(b, "half", 0.5)?;
        let v = b.add("fit/round", Op::Binary(BinaryOp::Add), &[v, half])?;
        let v = b.add("fit/floor", Op::Unary(UnaryOp::Floor), &[v])?;
        b.add(BYTES_NODE, Op::Unary(UnaryOp::Cast(DType::U8)), &[v])
    }
}

#[cfg(test)]
mod tests;
