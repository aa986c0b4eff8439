//! oneDNN's convolutions called straight ([`super::DirectConv`]) against libtorch's eager ones.

use super::{DirectConv, available};
use crate::exec::{Tolerance, agree};
use crate::ops::UnaryOp;
use crate::value::LayoutTensor;
use tch::{Device, Kind, Tensor};

fn randn(shape: &[i64]) -> Tensor {
    Tensor::randn(shape, (Kind::Float, Device::Cpu))
}

/// libtorch's eager convolution of `x` padded by (top, left, bottom, right), zeros.
fn eager(x: &Tensor, w: &Tensor, b: Option<&Tensor>, s: i64, d: i64, groups: i64, pads: [i64; 4]) -> Tensor {
    let x = x.constant_pad_nd([pads[1], pads[3], pads[0], pads[2]]);
    x.convolution(w, b, [s, s], [0, 0], [d, d], false, [0, 0], groups)
}

fn assert_agree(got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.size(), want.size(), "{what}");
    let a = agree(got, want, Tolerance::SPLIT).expect("same shape");
    assert!(a.within, "{what}: {a:?}");
}

/// One of each activation a convolution takes as oneDNN's post-op (the linear layers' tests add
/// theirs to these).
pub(in crate::ops) fn post_op_activations() -> Vec<UnaryOp> {
    vec![
        UnaryOp::Relu,
        UnaryOp::LeakyRelu(0.1),
        UnaryOp::Silu,
        UnaryOp::Sigmoid,
        UnaryOp::Clip { min: -0.5, max: 2.0 },
        UnaryOp::HardSigmoid { alpha: 0.2, beta: 0.5 },
        UnaryOp::HardSwish,
    ]
}

/// The build found oneDNN and the library opened, so the engine's convolutions take this path
/// here (as they do in every benchmark of this repository).
#[test]
fn onednn_is_loaded() {
    assert!(available(), "oneDNN did not load: run scripts/setup.sh, or see LOP_ONEDNN_LIB");
}

/// Strides, dilation, groups (depthwise too), bias or none, asymmetric padding as a band at a
/// frame's edge has, two samples, and inputs in NCHW memory or a non-dense band of a batch: each
/// equals libtorch's eager convolution under the one rule, in channels-last memory.
#[test]
fn direct_convolutions_agree_with_eager_ones() {
    let cases: [(i64, i64, i64, i64, i64, i64, bool); 6] = [
        // (in, out, kernel, stride, dilation, groups, bias)
        (8, 16, 3, 1, 1, 1, true),
        (8, 16, 3, 2, 1, 1, false),
        (16, 16, 3, 1, 2, 1, true),
        (16, 32, 3, 1, 1, 4, true),
        (16, 16, 7, 1, 1, 16, true),
        (24, 12, 1, 1, 1, 1, true),
    ];
    for (cin, cout, k, s, d, g, with_bias) in cases {
        let w = randn(&[cout, cin / g, k, k]);
        let b = with_bias.then(|| randn(&[cout]));
        let conv = DirectConv::new(&w, b.as_ref(), &[s as usize; 2], &[d as usize; 2], g as usize, None)
            .expect("context")
            .expect("oneDNN is loaded");
        let half = (k - 1) * d / 2;
        for pads in [[half; 4], [half, half, 0, half], [0, half, half, 0], [0; 4]] {
            for n in [1, 2] {
                let x = randn(&[n, cin, 13, 11]);
                let want = eager(&x, &w, b.as_ref(), s, d, g, pads);
                let got = conv.run(&x, pads).expect("run");
                assert_agree(&got, &want, &format!("{cin}->{cout} k{k} s{s} d{d} g{g} pads {pads:?} n{n}"));
                assert_eq!(got.stride()[1], 1, "the output is channels-last");
            }
        }
        // Rows 3..9 of a two-sample channels-last batch: not dense, copied before the call.
        let batch = crate::value::Layout::ChannelsLast.apply(&randn(&[2, cin, 13, 11])).expect("layout");
        let band = batch.narrow(2, 3, 6);
        let want = eager(&band, &w, b.as_ref(), s, d, g, [half; 4]);
        assert_agree(&conv.run(&band, [half; 4]).expect("band"), &want, "a band of a batch");
    }
}

/// Every activation with a post-op, fused into the convolution, equals the activation's own op
/// applied after it; one without a post-op (Tanh) is refused, so the caller keeps libtorch's
/// route.
#[test]
fn fused_activations_equal_the_activation_after_the_convolution() {
    let (w, b, x) = (randn(&[16, 8, 3, 3]), randn(&[16]), randn(&[1, 8, 9, 10]));
    let plain = eager(&x, &w, Some(&b), 1, 1, 1, [1; 4]);
    for act in post_op_activations() {
        let want = act.apply(&plain).expect("activation");
        let conv = DirectConv::new(&w, Some(&b), &[1, 1], &[1, 1], 1, Some(&act)).expect("context").expect("oneDNN");
        assert_agree(&conv.run(&x, [1; 4]).expect("run"), &want, &format!("{act:?}"));
    }
    assert!(DirectConv::new(&w, Some(&b), &[1, 1], &[1, 1], 1, Some(&UnaryOp::Tanh)).expect("no error").is_none());
}

/// Each new input shape (with its padding) keeps a primitive; its packed weight is shared with
/// the shapes of the same oneDNN format; past the shape cap a call packs for itself, counted,
/// and still computes the same values.
#[test]
fn shapes_are_kept_up_to_the_cap_and_calls_past_it_are_counted() {
    let w = randn(&[16, 8, 3, 3]);
    let conv = DirectConv::new(&w, None, &[1, 1], &[1, 1], 1, None).expect("context").expect("oneDNN");
    let extra = 3;
    for h in 3..3 + 64 + extra {
        let x = randn(&[1, 8, h, 12]);
        assert_agree(&conv.run(&x, [1, 1, 0, 1]).expect("run"), &eager(&x, &w, None, 1, 1, 1, [1, 1, 0, 1]), &format!("height {h}"));
    }
    // The same shape again reuses its primitive.
    let x = randn(&[1, 8, 3, 12]);
    drop(conv.run(&x, [1, 1, 0, 1]).expect("run"));
    let st = conv.stats();
    assert_eq!(st.shapes, 64, "{st:?}");
    assert_eq!(st.plain_calls, extra as usize, "{st:?}");
    assert!(st.formats >= 1 && st.formats <= 4, "{st:?}");
}

/// Bad input is refused by name, never computed: a padded input smaller than the kernel, or a
/// tensor of another dtype.
#[test]
fn inputs_the_kernel_cannot_take_are_refused() {
    let conv = DirectConv::new(&randn(&[4, 2, 5, 5]), None, &[1, 1], &[1, 1], 1, None).expect("context").expect("oneDNN");
    let small = conv.run(&randn(&[1, 2, 3, 8]), [0; 4]).expect_err("3 rows for a 5-row kernel");
    assert!(small.to_string().contains("smaller than the kernel"), "{small}");
    let ints = conv.run(&Tensor::zeros([1, 2, 8, 8], (Kind::Int, Device::Cpu)), [0; 4]).expect_err("int input");
    assert!(ints.to_string().contains("Int"), "{ints}");
}

/// Written into a row band of a channels-last buffer, a convolution gives bitwise its own
/// output; a destination of another shape or not dense NHWC is refused untouched.
#[test]
fn a_convolution_written_into_a_buffer_band_equals_its_own_output() {
    let conv = DirectConv::new(&randn(&[16, 8, 3, 3]), Some(&randn(&[16])), &[1, 1], &[1, 1], 1, Some(&UnaryOp::Silu))
        .expect("create")
        .expect("oneDNN is loaded");
    let x = randn(&[1, 8, 7, 12]);
    let pads = [1, 1, 0, 1];
    let own = conv.run(&x, pads).expect("run");
    assert_eq!(own.size(), [1, 16, 6, 12]);
    let buffer = Tensor::full([1, 20, 12, 16], -1.0, (Kind::Float, Device::Cpu)).permute([0, 3, 1, 2]);
    let dst = buffer.narrow(2, 5, 6);
    assert!(conv.run_into(&x, pads, &dst).expect("into"), "a band of an NHWC buffer is dense");
    assert!(dst.equal(&own), "the same kernel, the same values");
    assert!(buffer.narrow(2, 0, 5).eq(-1.0).all().int64_value(&[]) == 1, "rows above the band untouched");
    assert!(buffer.narrow(2, 11, 9).eq(-1.0).all().int64_value(&[]) == 1, "rows below the band untouched");
    let nchw = Tensor::full([1, 16, 6, 12], -1.0, (Kind::Float, Device::Cpu));
    assert!(!conv.run_into(&x, pads, &nchw).expect("refused"), "NCHW memory is not what oneDNN writes");
    assert!(!conv.run_into(&x, pads, &buffer.narrow(2, 0, 5)).expect("refused"), "another row count");
    assert!(nchw.eq(-1.0).all().int64_value(&[]) == 1);
}

/// Rows of a band read in place (no view) give bitwise what the same rows read through a view
/// give: from a channels-last value whose band starts at a row other than 0, and, read through
/// a view because their rows are not one dense block, from NCHW memory and from a batch of two.
/// Rows outside the band are refused by name.
#[test]
fn rows_read_in_place_equal_rows_read_through_a_view() {
    let conv = DirectConv::new(&randn(&[16, 8, 3, 3]), Some(&randn(&[16])), &[1, 1], &[1, 1], 1, Some(&UnaryOp::Silu))
        .expect("create")
        .expect("oneDNN is loaded");
    let pads = [0, 1, 0, 1];
    let channels_last = randn(&[1, 12, 11, 8]).permute([0, 3, 1, 2]);
    for (x, n) in [(channels_last, 1), (randn(&[1, 8, 12, 11]), 1), (randn(&[2, 12, 11, 8]).permute([0, 3, 1, 2]), 2)] {
        // The band holds rows 4..16 of its value; rows 7..12 are read, giving 3 output rows.
        let (start, take) = (4, 7..12);
        let want = Tensor::full([n, 3, 11, 16], -1.0, (Kind::Float, Device::Cpu)).permute([0, 3, 1, 2]);
        let got = want.copy();
        assert!(conv.run_into(&x.narrow(2, 3, 5), pads, &want).expect("through a view"), "{n} sample(s): written");
        assert!(conv.run_rows_into(&x, start, &take, pads, &got).expect("in place"), "{n} sample(s): written");
        assert!(got.equal(&want), "{n} sample(s): the same rows, the same values");
        // SiLU never reaches -1: no element keeps the fill.
        assert_eq!(got.eq(-1.0).any().int64_value(&[]), 0, "{n} sample(s): every element written");
    }
    let x = randn(&[1, 8, 12, 11]);
    let out = Tensor::zeros([1, 16, 3, 11], (Kind::Float, Device::Cpu));
    let far = conv.run_rows_into(&x, 4, &(14..19), pads, &out).expect_err("rows 14..19 of a band holding 4..16");
    assert!(far.to_string().contains("band holds rows 4..16"), "{far}");
}
