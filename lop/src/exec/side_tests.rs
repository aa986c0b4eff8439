//! Tests of [`super::SideExec`]: blocks, gathering, batches, chunked compute.

use super::*;
use crate::graph::{DType, GraphBuilder};
use crate::ops::Pool;

/// input f32 [1,2,12,5] -> 3x3 max pool (stride 1, pad 1): output row r reads rows r-1..r+1.
fn pool_graph() -> Graph {
    let mut b = GraphBuilder::new("pool");
    let x = b.input("x", vec![1, 2, 12, 5], DType::F32);
    let y = b.add("pool", Op::MaxPool(Pool::same_3x3()), &[x]).expect("pool");
    b.output(y);
    b.build().expect("graph")
}

fn input() -> Tensor {
    Tensor::randn([1, 2, 12, 5], (tch::Kind::Float, tch::Device::Cpu))
}

#[test]
fn bands_stored_in_pieces_read_back_across_their_boundaries() {
    let g = pool_graph();
    let x = input();
    let mut side = SideExec::new(&g, Side::Server);
    // Rows 0..4, 4..7 and an overlapping 6..12 (rows 6 already held must keep their values).
    side.insert(0, 0..4, x.narrow(2, 0, 4)).expect("0..4");
    side.insert(0, 4..7, x.narrow(2, 4, 3)).expect("4..7");
    let overlap = x.narrow(2, 6, 6).copy();
    let _ = overlap.narrow(2, 0, 1).fill_(1e6);
    side.insert(0, 6..12, overlap).expect("6..12");
    assert!(side.missing(0, &(0..12)).is_empty());
    let whole = side.extract(0, &(0..12)).expect("whole");
    assert!(whole.equal(&x), "rows read back across three blocks must equal the input");
    let band = side.extract(0, &(3..9)).expect("band");
    assert!(band.equal(&x.narrow(2, 3, 6)));
    // A pool band whose halo spans all three blocks equals the same rows of the whole pool.
    let out = side.compute(1, &(3..8)).expect("pool band");
    let reference = side.compute(1, &(0..12)).expect("pool whole");
    assert!(out.equal(&reference.narrow(2, 3, 5)));
}

#[test]
fn a_batch_gives_every_sample_its_own_unsplit_output() {
    let detect = crate::model::LoadOptions {
        postprocess: Some(crate::postprocess::Postprocess::parse("detect;score=0.05").expect("spec")),
        ..Default::default()
    };
    for (source, opts) in [("zoo:resnet18@64x96", Default::default()), ("zoo:yolo_det@96x128", detect)] {
        let g = crate::model::load(source, &opts).expect("model");
        assert!(unbatchable(&g).is_none(), "{source}");
        let samples: Vec<Vec<Tensor>> = (0..3).map(|s| crate::exec::synthetic_inputs(&g, 11 + s).expect("inputs")).collect();
        let outs = crate::exec::run_batched(&g, &samples, 2).expect("batched run");
        for (s, inputs) in samples.iter().enumerate() {
            let whole = crate::exec::run_whole(&g, inputs).expect("whole").outputs;
            for (o, w) in outs.iter().zip(&whole) {
                let mine = o.narrow(0, s as i64, 1);
                assert_eq!(mine.size(), w.size(), "{source} sample {s}");
                let err = crate::exec::max_rel_err(&mine, w).expect("compare");
                assert!(err <= 1e-5, "{source} sample {s}: relative error {err}");
            }
        }
        // Different inputs give different outputs: the batch did not serve one sample thrice.
        assert!(!outs[0].narrow(0, 0, 1).equal(&outs[0].narrow(0, 1, 1)), "{source}");
    }
}

#[test]
fn a_batch_refuses_tensors_without_every_sample_and_graphs_without_a_batch_axis() {
    let g = pool_graph();
    let mut side = SideExec::batched(&g, Side::Server, 2).expect("batch of 2");
    assert!(matches!(side.insert(0, 0..12, input()), Err(Error::Input(_))), "one sample where two are due");
    side.insert(0, 0..12, Tensor::cat(&[input(), input()], 0)).expect("two samples");
    assert!(SideExec::batched(&g, Side::Server, 0).is_err());
    let mut b = GraphBuilder::new("no batch axis");
    let x = b.input("x", vec![2, 3, 8, 8], DType::F32);
    let y = b.add("pool", Op::MaxPool(Pool::same_3x3()), &[x]).expect("pool");
    b.output(y);
    let g = b.build().expect("graph");
    let err = SideExec::batched(&g, Side::Server, 2).expect_err("axis 0 is 2");
    assert!(err.to_string().contains("[2, 3, 8, 8]"), "{err}");
    assert!(SideExec::batched(&g, Side::Server, 1).is_ok(), "one sample needs no batch axis");
}

#[test]
fn reading_rows_across_a_gap_names_the_missing_rows() {
    let g = pool_graph();
    let x = input();
    let mut side = SideExec::new(&g, Side::Robot);
    side.insert(0, 0..4, x.narrow(2, 0, 4)).expect("0..4");
    side.insert(0, 6..12, x.narrow(2, 6, 6)).expect("6..12");
    assert_eq!(side.missing(0, &(0..12)), vec![4..6]);
    assert!(matches!(side.extract(0, &(2..8)), Err(Error::MissingRows { .. })));
    assert!(matches!(side.compute(1, &(0..4)), Err(Error::MissingRows { .. })), "row 3 needs input row 4");
    assert!(side.compute(1, &(0..3)).is_ok());
}

#[test]
fn chunked_compute_stores_pieces_that_read_back_whole() {
    let g = pool_graph();
    let x = input();
    let mut side = SideExec::new(&g, Side::Server);
    side.insert(0, 0..12, x.shallow_clone()).expect("input");
    for r in [0..3, 3..5, 5..9, 9..12] {
        side.compute_and_store(1, &r, 1).expect("chunk");
    }
    let reference = side.compute(1, &(0..12)).expect("whole");
    assert!(side.extract(1, &(0..12)).expect("read").equal(&reference));
    let before = side.live_bytes();
    side.insert(1, 2..10, reference.narrow(2, 2, 8)).expect("held already");
    assert_eq!(side.live_bytes(), before, "rows held already are not stored twice");
}

/// x -> a = conv3x3(x) -> b = conv3x3(a) -> s = a + b -> c = conv3x3(s), channels-last (the
/// convolutions on oneDNN directly): every op can write its chunks into a buffer.
fn conv_add_graph() -> Graph {
    use crate::ops::{BinaryOp, Conv};
    let w = |seed: i64| {
        tch::manual_seed(seed);
        Tensor::randn([8, 8, 3, 3], (tch::Kind::Float, tch::Device::Cpu)) * 0.2
    };
    let mut b = GraphBuilder::new("conv add");
    let x = b.input("x", vec![1, 8, 24, 16], DType::F32);
    let a = b.add("a", Op::Conv(Conv::same2d(w(1))), &[x]).expect("a");
    let c1 = b.add("b", Op::Conv(Conv::same2d(w(2))), &[a]).expect("b");
    let s = b.add("s", Op::Binary(BinaryOp::Add), &[a, c1]).expect("s");
    let c = b.add("c", Op::Conv(Conv::same2d(w(3))), &[s]).expect("c");
    b.output(c);
    let mut g = b.build().expect("graph");
    g.set_layout(crate::graph::Layout::ChannelsLast).expect("layout");
    g
}

/// Chunks computed out of order into one buffer per value: every band read across chunks is a
/// view (no join copied), the values equal the whole run and the unbuffered chunks bitwise. Built
/// with oneDNN only, as x86 builds are: without it no convolution writes into a buffer.
#[cfg(lop_onednn)]
#[test]
fn chunks_written_into_one_buffer_are_read_across_as_views_and_equal_the_unbanded_values() {
    let g = conv_add_graph();
    assert!(g.nodes.iter().any(|n| n.op.computes_into(true)), "channels-last convolutions run on oneDNN directly");
    let x = Tensor::randn([1, 8, 24, 16], (tch::Kind::Float, tch::Device::Cpu));
    let reference = crate::exec::run_whole(&g, std::slice::from_ref(&x)).expect("whole").outputs;
    // Chunks in a scrambled order, as bands arriving out of order would be computed.
    let mut side = SideExec::new(&g, Side::Server);
    side.insert(0, 0..24, x.shallow_clone()).expect("input");
    for id in 1..g.nodes.len() {
        side.expect_rows(id, 0..24);
        for r in [8..13, 0..3, 3..8, 13..24] {
            side.compute_and_store(id, &r, 1).expect("chunk");
        }
    }
    assert_eq!(side.joins(), Joins::default(), "every band read across chunks is a view of one buffer");
    let out = side.extract(4, &(0..24)).expect("output");
    let a = crate::exec::agree(&out, &reference[0], crate::exec::Tolerance::SPLIT).expect("shape");
    assert!(a.within, "{a:?}");
    // Without the rows declared, each chunk is its own block and halos are copied together.
    let mut plain = SideExec::new(&g, Side::Server);
    plain.insert(0, 0..24, x.shallow_clone()).expect("input");
    for id in 1..g.nodes.len() {
        for r in [0..3, 3..8, 8..13, 13..24] {
            plain.compute_and_store(id, &r, 1).expect("chunk");
        }
    }
    assert!(plain.joins().copies > 0);
    assert!(plain.extract(4, &(0..24)).expect("output").equal(&out), "buffered and plain chunks give the same values");
}

#[test]
fn a_chunk_whose_rows_are_partly_held_is_computed_apart_and_keeps_the_held_rows() {
    let g = conv_add_graph();
    let x = Tensor::randn([1, 8, 24, 16], (tch::Kind::Float, tch::Device::Cpu));
    let mut side = SideExec::new(&g, Side::Server);
    side.insert(0, 0..24, x.shallow_clone()).expect("input");
    side.expect_rows(1, 0..24);
    // Rows 4..8 of `a` arrive from the peer (here: marked values) before the chunk 0..12 runs.
    let received = Tensor::full([1, 8, 4, 16], 7.0, (tch::Kind::Float, tch::Device::Cpu));
    side.insert(1, 4..8, received).expect("received");
    side.compute_and_store(1, &(0..12), 1).expect("chunk over held rows");
    let rows = side.extract(1, &(4..8)).expect("held rows");
    assert!(rows.equal(&Tensor::full([1, 8, 4, 16], 7.0, (tch::Kind::Float, tch::Device::Cpu))), "rows held are kept");
    side.compute_and_store(1, &(12..24), 1).expect("the rest, into the buffer");
    assert!(side.missing(1, &(0..24)).is_empty());
}
