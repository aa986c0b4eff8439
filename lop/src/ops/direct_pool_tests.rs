//! Max pooling on oneDNN against libtorch's: bit for bit (a maximum is exact), whole and in
//! random bands, for the windows models use (SPP's 5, 9 and 13 at stride 1, stride 2 with ceil
//! mode, asymmetric and dilated windows).

use super::*;
use crate::exec::{Tolerance, agree, run_split, run_whole};
use crate::graph::{GraphBuilder, Layout};
use crate::ops::{Op, Pool};
use crate::plan::Plan;
use crate::value::DType;

/// (kernel, stride, pads begin, pads end, dilation, ceil mode)
type Case = (usize, usize, [usize; 2], [usize; 2], usize, bool);

const CASES: [Case; 7] = [
    (5, 1, [2, 2], [2, 2], 1, false),
    (9, 1, [4, 4], [4, 4], 1, false),
    (13, 1, [6, 6], [6, 6], 1, false),
    (3, 2, [1, 1], [1, 1], 1, true),
    (2, 2, [0, 0], [0, 0], 1, true),
    (3, 2, [0, 1], [1, 0], 1, false),
    (3, 1, [2, 2], [2, 2], 2, false),
];

fn pool((k, s, pb, pe, d, ceil): Case) -> Pool {
    Pool {
        kernel: vec![k, k],
        strides: vec![s, s],
        pads_begin: pb.to_vec(),
        pads_end: pe.to_vec(),
        dilations: vec![d, d],
        ceil_mode: ceil,
        count_include_pad: false,
    }
}

/// libtorch's max pooling of `x` after padding it with `-inf` as `case` says.
fn reference(x: &Tensor, (k, s, pb, pe, d, ceil): Case) -> Tensor {
    let inf = f64::NEG_INFINITY;
    let padded = x.constant_pad_nd([pb[1] as i64, pe[1] as i64, pb[0] as i64, pe[0] as i64]);
    let mask = x.ones_like().constant_pad_nd([pb[1] as i64, pe[1] as i64, pb[0] as i64, pe[0] as i64]);
    let padded = padded.where_scalarother(&mask.gt(0.5), inf);
    padded.max_pool2d([k as i64; 2], [s as i64; 2], [0, 0], [d as i64; 2], ceil)
}

#[test]
fn max_pooling_on_onednn_equals_libtorch_bitwise_whole_and_banded() {
    tch::manual_seed(31);
    // In channels-last memory, as a convolution before the pool leaves it.
    let x = Tensor::randn([1, 17, 15, 6], (Kind::Float, tch::Device::Cpu)).permute([0, 3, 1, 2]);
    for case in CASES {
        let mut b = GraphBuilder::new("pool");
        let i = b.input("x", vec![1, 6, 17, 15], DType::F32);
        let y = b.add("pool", Op::MaxPool(pool(case)), &[i]).expect("pool fits");
        b.output(y);
        let mut g = b.build().expect("graph");
        g.set_layout(Layout::ChannelsLast).expect("layout");
        let want = reference(&x, case);
        let before = calls();
        let whole = run_whole(&g, &[x.shallow_clone()]).expect("whole").outputs.remove(0);
        assert_eq!(whole.size(), want.size(), "{case:?}");
        assert!(whole.equal(&want), "{case:?}: whole differs from libtorch");
        for (units, seed) in [(2, 1), (3, 2), (8, 3), (17, 4)] {
            let split = run_split(&g, &Plan::random(&g, units, seed), &[x.shallow_clone()]).expect("split").outputs.remove(0);
            let a = agree(&split, &want, Tolerance::SPLIT).expect("same shape");
            assert_eq!(a.max_abs_diff, 0.0, "{case:?} units {units}: {a:?}");
        }
        // The whole run and each split run pooled on oneDNN where it is loaded.
        let runs = 1 + 4;
        assert!(!available() || calls() - before >= runs, "{case:?}: {} poolings on oneDNN in {runs} runs", calls() - before);
    }
}

/// The path is taken where oneDNN is loaded (channels-last input), and refused, for libtorch's
/// route, on NCHW memory and on an output size the window does not give.
#[test]
fn onednn_takes_channels_last_and_refuses_what_it_cannot_pool() {
    let x = Tensor::randn([1, 4, 9, 9], (Kind::Float, tch::Device::Cpu));
    let nhwc = x.contiguous().permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2]);
    let window = Window { kernel: [3, 3], strides: [1, 1], dilations: [1, 1] };
    let got = max_pool(&nhwc, window, [1, 1, 1, 1], [9, 9]).expect("runs");
    assert_eq!(got.is_some(), available(), "taken exactly where oneDNN is loaded");
    if let Some(y) = got {
        assert!(y.equal(&x.max_pool2d([3, 3], [1, 1], [1, 1], [1, 1], false)));
    }
    assert!(max_pool(&x, window, [1, 1, 1, 1], [9, 9]).expect("runs").is_none(), "NCHW memory");
    assert!(max_pool(&nhwc, window, [1, 1, 1, 1], [8, 9]).expect("runs").is_none(), "inconsistent size");
}
