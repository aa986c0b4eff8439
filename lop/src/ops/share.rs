//! A copy of an op whose weights share storage with the original's ([`Op::share`]): what lets
//! several threads each run a model of their own ([`crate::graph::Graph::share`]) while its
//! weights are in memory once.
//!
//! A libtorch tensor is `Send` but not `Sync`, so one graph cannot be read by two threads at
//! once; a shallow copy of each weight (`Tensor::shallow_clone`: a new handle on the same
//! storage, its reference count atomic) can be handed to another thread instead. Nothing in the
//! engine writes into a weight in place (a layout change or a device move replaces the handle),
//! so copies that share storage never see each other's changes. A convolution's prepared weight
//! ([`super::PreparedConv`]) is shared as it is: its packed copies and oneDNN primitives are
//! behind locks of their own, made for calls from several threads.

use tch::Tensor;

use super::{Conv, Op};

/// `t`'s handle on the same storage.
fn share_opt(t: &Option<Tensor>) -> Option<Tensor> {
    t.as_ref().map(Tensor::shallow_clone)
}

impl Conv {
    /// This convolution with its weight, bias and prepared weight shared.
    pub fn share(&self) -> Conv {
        Conv {
            weight: self.weight.shallow_clone(),
            bias: share_opt(&self.bias),
            strides: self.strides.clone(),
            pads_begin: self.pads_begin.clone(),
            pads_end: self.pads_end.clone(),
            dilations: self.dilations.clone(),
            output_padding: self.output_padding.clone(),
            groups: self.groups,
            packed: self.packed.clone(),
            act: self.act.clone(),
        }
    }
}

impl Op {
    /// The same op, its tensors sharing storage with this one's (no weight is copied).
    pub fn share(&self) -> Op {
        match self {
            Op::Input => Op::Input,
            Op::Constant(t) => Op::Constant(t.shallow_clone()),
            Op::NormalizeU8 { mean, std } => Op::NormalizeU8 { mean: mean.clone(), std: std.clone() },
            Op::Conv(c) => Op::Conv(c.share()),
            Op::ConvTranspose(c) => Op::ConvTranspose(c.share()),
            Op::ChannelAffine { scale, shift } => Op::ChannelAffine { scale: scale.shallow_clone(), shift: shift.shallow_clone() },
            Op::Unary(u) => Op::Unary(u.clone()),
            Op::Binary(b) => Op::Binary(*b),
            Op::Where => Op::Where,
            Op::Pad(p) => Op::Pad(p.clone()),
            Op::Concat { axis } => Op::Concat { axis: *axis },
            Op::MaxPool(p) => Op::MaxPool(p.clone()),
            Op::AvgPool(p) => Op::AvgPool(p.clone()),
            Op::ReduceMean { axes, keepdims } => Op::ReduceMean { axes: axes.clone(), keepdims: *keepdims },
            Op::Reduce { kind, axes, keepdims } => Op::Reduce { kind: *kind, axes: axes.clone(), keepdims: *keepdims },
            Op::Whole(w) => Op::Whole(w.clone()),
            Op::Resize(r) => Op::Resize(r.clone()),
            Op::Slice(s) => Op::Slice(s.clone()),
            Op::Transpose { perm } => Op::Transpose { perm: perm.clone() },
            Op::Reshape { shape } => Op::Reshape { shape: shape.clone() },
            Op::LayerNorm { axis, weight, bias, eps } => {
                Op::LayerNorm { axis: *axis, weight: share_opt(weight), bias: share_opt(bias), eps: *eps }
            }
            Op::Linear { weight, bias, act } => Op::Linear { weight: weight.shallow_clone(), bias: share_opt(bias), act: act.clone() },
            Op::MatMul => Op::MatMul,
            Op::Softmax { axis } => Op::Softmax { axis: *axis },
            Op::Post(p) => Op::Post(p.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::graph::Layout;
    use crate::ops::{Op, PreparedConv};

    /// The storage of a prepared convolution, to compare two copies' by address.
    fn prepared_addr(p: &PreparedConv) -> usize {
        match p {
            PreparedConv::Direct(d) => std::sync::Arc::as_ptr(d) as usize,
            PreparedConv::Libtorch(l) => std::sync::Arc::as_ptr(l) as usize,
        }
    }

    /// A shared copy holds no weight of its own (every weight and prepared convolution is the
    /// original's storage), hashes as the original, and two threads running the two copies at
    /// the same time each get the original's outputs, bitwise.
    #[test]
    fn a_shared_graph_reads_the_same_weights_and_runs_beside_the_original() {
        let mut g = crate::zoo::build("resnet18").unwrap();
        g.set_layout(Layout::ChannelsLast).unwrap();
        let copy = g.share();
        assert_eq!(copy.content_hash().unwrap(), g.content_hash().unwrap());
        let mut weights = 0;
        for (a, b) in g.nodes.iter().zip(&copy.nodes) {
            for (wa, wb) in a.op.weights().into_iter().zip(b.op.weights()) {
                assert_eq!(wa.data_ptr(), wb.data_ptr(), "{}: a weight copied", a.name);
                weights += 1;
            }
            if let (Op::Conv(ca), Op::Conv(cb)) = (&a.op, &b.op) {
                let (pa, pb) = (ca.packed.as_ref().map(prepared_addr), cb.packed.as_ref().map(prepared_addr));
                assert_eq!(pa, pb, "{}: a prepared convolution copied", a.name);
            }
        }
        assert!(weights > 20, "resnet18 has its weights: {weights}");
        let inputs = crate::exec::synthetic_inputs(&g, 7).unwrap();
        let alone = crate::exec::run_whole(&g, &inputs).unwrap().outputs;
        let x = inputs.iter().map(tch::Tensor::shallow_clone).collect::<Vec<_>>();
        let beside = std::thread::spawn(move || {
            let out = crate::exec::run_whole(&copy, &x).unwrap().outputs;
            out.into_iter().map(|t| Vec::<f32>::try_from(t.flatten(0, -1)).unwrap()).collect::<Vec<_>>()
        });
        let here = crate::exec::run_whole(&g, &inputs).unwrap().outputs;
        let there = beside.join().unwrap();
        for ((a, h), t) in alone.iter().zip(&here).zip(&there) {
            let a = Vec::<f32>::try_from(a.flatten(0, -1)).unwrap();
            assert_eq!(&a, &Vec::<f32>::try_from(h.flatten(0, -1)).unwrap());
            assert_eq!(&a, t, "the copy's output differs from the original's");
        }
    }
}
