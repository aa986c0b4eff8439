//! Seeded weights and a small graph-builder wrapper with the layer helpers the zoo models share.
//!
//! Weights are drawn from [`crate::Rng`] (never from libtorch's generator), so a model name always
//! yields bitwise the same weights on every machine. The draws are uniform with the standard
//! deviation of He initialisation, `gain * sqrt(2 / fan_in)`: the same second moment as He-normal
//! at a fraction of the cost, which matters for VGG's 100M-weight classifier. Residual branches
//! end in a conv scaled by [`RES_GAIN`], so activations stay of order one through 150 layers.
//!
//! Inference-mode batch norm right after a conv is folded into that conv: the conv gets a bias
//! and the builder counts the folded channels, so that `params + folded` reproduces torchvision's
//! parameter count (torchvision counts a BN's weight and bias, the folded conv one bias).

use crate::error::{Error, Result};
use crate::graph::{DType, Graph, GraphBuilder, NodeId};
use crate::ops::{BinaryOp, Conv, Op, Pool, UnaryOp};
use crate::rng::Rng;
use tch::Tensor;

/// Gain of the last conv of a residual branch.
pub(crate) const RES_GAIN: f64 = 0.2;

/// Standard deviation of random biases.
const BIAS_STD: f64 = 0.02;

/// ImageNet channel means (0..1 scale), as torchvision normalises.
const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet channel standard deviations (0..1 scale).
const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

/// What follows a conv's weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bias {
    /// No bias (torchvision `bias=False` with no batch norm after it).
    None,
    /// A bias of the conv itself.
    Plain,
    /// A batch norm folded into the conv: a bias, counted as a folded BN.
    FoldedBn,
}

/// Convolution settings; the same value for every spatial dim.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConvCfg {
    out: usize,
    k: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
    groups: usize,
    nsp: usize,
    bias: Bias,
    gain: f64,
}

impl ConvCfg {
    /// A 2-d `k x k` conv to `out` channels, stride 1, "same" padding, followed by a folded BN.
    pub(crate) fn new(out: usize, k: usize) -> Self {
        ConvCfg { out, k, stride: 1, pad: k / 2, dilation: 1, groups: 1, nsp: 2, bias: Bias::FoldedBn, gain: 1.0 }
    }
    /// Stride.
    pub(crate) fn stride(mut self, s: usize) -> Self {
        self.stride = s;
        self
    }
    /// Padding on every side.
    pub(crate) fn pad(mut self, p: usize) -> Self {
        self.pad = p;
        self
    }
    /// Dilation (padding is updated to keep "same" size).
    pub(crate) fn dilation(mut self, d: usize) -> Self {
        self.dilation = d;
        self.pad = d * (self.k - 1) / 2;
        self
    }
    /// Channel groups.
    pub(crate) fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }
    /// 3-d convolution.
    pub(crate) fn three_d(mut self) -> Self {
        self.nsp = 3;
        self
    }
    /// Bias kind.
    pub(crate) fn bias(mut self, b: Bias) -> Self {
        self.bias = b;
        self
    }
    /// Weight scale relative to He initialisation.
    pub(crate) fn gain(mut self, g: f64) -> Self {
        self.gain = g;
        self
    }
}

fn torch_err(context: String) -> impl FnOnce(tch::TchError) -> Error {
    move |source| Error::TorchContext { context, source }
}

/// A [`GraphBuilder`] with a seeded weight generator and layer helpers.
#[derive(Debug)]
pub(crate) struct Zb {
    g: GraphBuilder,
    rng: Rng,
    folded: usize,
}

impl Zb {
    /// A builder for model `name` drawing weights from `seed`.
    pub(crate) fn new(name: &str, seed: u64) -> Self {
        Zb { g: GraphBuilder::new(name), rng: Rng::new(seed), folded: 0 }
    }

    /// Channels (axis 1) of node `x`.
    pub(crate) fn ch(&self, x: NodeId) -> usize {
        self.g.info(x).shape[1]
    }

    /// Shape of node `x`.
    pub(crate) fn shape(&self, x: NodeId) -> Vec<usize> {
        self.g.info(x).shape.clone()
    }

    /// A tensor of `shape` with uniform entries of mean `mean` and standard deviation `std`.
    pub(crate) fn tensor(&mut self, shape: &[usize], mean: f64, std: f64) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let half = 3f64.sqrt() * std;
        let mut v = Vec::with_capacity(n);
        // Two 32-bit uniforms per 64 random bits.
        while v.len() < n {
            let r = self.rng.next_u64();
            for u in [r >> 32, r & 0xFFFF_FFFF] {
                if v.len() < n {
                    let unit = u as f64 / 4_294_967_296.0;
                    v.push((mean + half * (2.0 * unit - 1.0)) as f32);
                }
            }
        }
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        Tensor::f_from_slice(&v).and_then(|t| t.f_reshape(dims.as_slice())).map_err(torch_err(format!("creating a {shape:?} weight")))
    }

    /// The raw image input `[1, 3, H, W]` u8 (`size` = `[H, W]`) and its ImageNet normalisation.
    pub(crate) fn image_input(&mut self, size: &[usize]) -> Result<NodeId> {
        let x = self.g.input("image", vec![1, 3, size[0], size[1]], DType::U8);
        self.g.add("normalize", Op::NormalizeU8 { mean: IMAGENET_MEAN.to_vec(), std: IMAGENET_STD.to_vec() }, &[x])
    }

    /// A u8 graph input (camera bytes).
    pub(crate) fn input_u8(&mut self, name: &str, shape: Vec<usize>) -> NodeId {
        self.g.input(name, shape, DType::U8)
    }

    /// An f32 graph input.
    pub(crate) fn input_f32(&mut self, name: &str, shape: Vec<usize>) -> NodeId {
        self.g.input(name, shape, DType::F32)
    }

    fn bias_for(&mut self, bias: Bias, c: usize) -> Result<Option<Tensor>> {
        match bias {
            Bias::None => Ok(None),
            Bias::Plain => Ok(Some(self.tensor(&[c], 0.0, BIAS_STD)?)),
            Bias::FoldedBn => {
                self.folded += c;
                Ok(Some(self.tensor(&[c], 0.0, BIAS_STD)?))
            }
        }
    }

    /// A convolution of `x`.
    pub(crate) fn conv(&mut self, name: &str, x: NodeId, c: ConvCfg) -> Result<NodeId> {
        let cin = self.ch(x);
        let per_group = cin / c.groups.max(1);
        let mut shape = vec![c.out, per_group];
        shape.extend(std::iter::repeat_n(c.k, c.nsp));
        let fan_in = per_group * c.k.pow(c.nsp as u32);
        let weight = self.tensor(&shape, 0.0, c.gain * (2.0 / fan_in as f64).sqrt())?;
        let bias = self.bias_for(c.bias, c.out)?;
        let v = |x: usize| vec![x; c.nsp];
        let conv = Conv {
            weight,
            bias,
            strides: v(c.stride),
            pads_begin: v(c.pad),
            pads_end: v(c.pad),
            dilations: v(c.dilation),
            output_padding: v(0),
            groups: c.groups,
            packed: None,
            act: None,
        };
        self.g.add(name, Op::Conv(conv), &[x])
    }

    /// A transposed convolution with kernel `k` = stride `k` (an exact `k`-fold upsampling), a
    /// bias or a folded BN, over `nsp` spatial dims.
    pub(crate) fn conv_up(&mut self, name: &str, x: NodeId, out: usize, k: usize, nsp: usize, bias: Bias) -> Result<NodeId> {
        let cin = self.ch(x);
        let mut shape = vec![cin, out];
        shape.extend(std::iter::repeat_n(k, nsp));
        // Each output cell sees every input channel through exactly one tap.
        let weight = self.tensor(&shape, 0.0, (2.0 / cin as f64).sqrt())?;
        let bias = self.bias_for(bias, out)?;
        let v = |x: usize| vec![x; nsp];
        let conv = Conv {
            weight,
            bias,
            strides: v(k),
            pads_begin: v(0),
            pads_end: v(0),
            dilations: v(1),
            output_padding: v(0),
            groups: 1,
            packed: None,
            act: None,
        };
        self.g.add(name, Op::ConvTranspose(conv), &[x])
    }

    /// A conv followed by a ReLU, named `name` and `name.relu`.
    pub(crate) fn conv_relu(&mut self, name: &str, x: NodeId, c: ConvCfg) -> Result<NodeId> {
        let y = self.conv(name, x, c)?;
        self.relu(&format!("{name}.relu"), y)
    }

    /// An element-wise function.
    pub(crate) fn unary(&mut self, name: &str, x: NodeId, op: UnaryOp) -> Result<NodeId> {
        self.g.add(name, Op::Unary(op), &[x])
    }

    /// ReLU.
    pub(crate) fn relu(&mut self, name: &str, x: NodeId) -> Result<NodeId> {
        self.unary(name, x, UnaryOp::Relu)
    }

    /// An element-wise binary op.
    pub(crate) fn binary(&mut self, name: &str, op: BinaryOp, a: NodeId, b: NodeId) -> Result<NodeId> {
        self.g.add(name, Op::Binary(op), &[a, b])
    }

    /// Concatenation along `axis`.
    pub(crate) fn concat(&mut self, name: &str, xs: &[NodeId], axis: usize) -> Result<NodeId> {
        self.g.add(name, Op::Concat { axis }, xs)
    }

    /// Max pooling with window `k`, stride `s`, padding `p` over `nsp` spatial dims.
    pub(crate) fn max_pool(&mut self, name: &str, x: NodeId, k: usize, s: usize, p: usize, nsp: usize) -> Result<NodeId> {
        self.g.add(name, Op::MaxPool(pool(k, s, p, nsp)), &[x])
    }

    /// Average pooling (2-d, count_include_pad as torchvision's default).
    pub(crate) fn avg_pool(&mut self, name: &str, x: NodeId, k: usize, s: usize) -> Result<NodeId> {
        self.g.add(name, Op::AvgPool(pool(k, s, 0, 2)), &[x])
    }

    /// A batch norm that cannot be folded (pre-activation): a per-channel affine map.
    pub(crate) fn affine(&mut self, name: &str, x: NodeId) -> Result<NodeId> {
        let c = self.ch(x);
        let scale = self.tensor(&[c], 1.0, 0.1)?;
        let shift = self.tensor(&[c], 0.0, 0.1)?;
        self.g.add(name, Op::ChannelAffine { scale, shift }, &[x])
    }

    /// Layer norm over axes `[axis, rank)` with a learned scale and offset.
    pub(crate) fn layer_norm(&mut self, name: &str, x: NodeId, axis: usize, eps: f64) -> Result<NodeId> {
        let norm: Vec<usize> = self.shape(x)[axis..].to_vec();
        let weight = Some(self.tensor(&norm, 1.0, 0.1)?);
        let bias = Some(self.tensor(&norm, 0.0, 0.05)?);
        self.g.add(name, Op::LayerNorm { axis, weight, bias, eps }, &[x])
    }

    /// A linear layer over the last axis to `out` features, weights `gain` times He.
    pub(crate) fn linear(&mut self, name: &str, x: NodeId, out: usize, gain: f64) -> Result<NodeId> {
        let fan_in = self.shape(x).last().copied().unwrap_or(1);
        let weight = self.tensor(&[out, fan_in], 0.0, gain * (2.0 / fan_in as f64).sqrt())?;
        let bias = Some(self.tensor(&[out], 0.0, BIAS_STD)?);
        self.g.add(name, Op::Linear { weight, bias, act: None }, &[x])
    }

    /// A constant node.
    pub(crate) fn constant(&mut self, name: &str, t: Tensor) -> Result<NodeId> {
        self.g.add(name, Op::Constant(t), &[])
    }

    /// Axis permutation.
    pub(crate) fn transpose(&mut self, name: &str, x: NodeId, perm: &[usize]) -> Result<NodeId> {
        self.g.add(name, Op::Transpose { perm: perm.to_vec() }, &[x])
    }

    /// Static reshape.
    pub(crate) fn reshape(&mut self, name: &str, x: NodeId, shape: Vec<usize>) -> Result<NodeId> {
        self.g.add(name, Op::Reshape { shape }, &[x])
    }

    /// Any op.
    pub(crate) fn op(&mut self, name: &str, op: Op, xs: &[NodeId]) -> Result<NodeId> {
        self.g.add(name, op, xs)
    }

    /// LayerNorm2d as torchvision's ConvNeXt does it on NCHW: to NHWC, normalise the channels,
    /// back to NCHW.
    pub(crate) fn layer_norm_2d(&mut self, name: &str, x: NodeId, eps: f64) -> Result<NodeId> {
        let t = self.transpose(&format!("{name}.to_nhwc"), x, &[0, 2, 3, 1])?;
        let n = self.layer_norm(name, t, 3, eps)?;
        self.transpose(&format!("{name}.to_nchw"), n, &[0, 3, 1, 2])
    }

    /// The classifier head: global average pool, flatten, linear to `classes`.
    pub(crate) fn gap_classifier(&mut self, x: NodeId, classes: usize, fc: &str) -> Result<NodeId> {
        let c = self.ch(x);
        let p = self.g.add("avgpool", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[x])?;
        let f = self.reshape("flatten", p, vec![1, c])?;
        self.linear(fc, f, classes, 0.5)
    }

    /// Finishes the graph with `outputs`; also returns the number of folded BN channels.
    pub(crate) fn finish(mut self, outputs: &[NodeId]) -> Result<(Graph, usize)> {
        for &o in outputs {
            self.g.output(o);
        }
        Ok((self.g.build()?, self.folded))
    }
}

fn pool(k: usize, s: usize, p: usize, nsp: usize) -> Pool {
    Pool {
        kernel: vec![k; nsp],
        strides: vec![s; nsp],
        pads_begin: vec![p; nsp],
        pads_end: vec![p; nsp],
        dilations: vec![1; nsp],
        ceil_mode: false,
        count_include_pad: true,
    }
}
