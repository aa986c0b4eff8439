use super::measure::band_sizes;
use super::*;
use crate::graph::{DType, GraphBuilder};
use crate::ops::{Op, Pool, UnaryOp};

fn small_graph(name: &str) -> Graph {
    let mut b = GraphBuilder::new(name);
    let x = b.input("x", vec![1, 3, 32, 32], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.5; 3], std: vec![0.25; 3] }, &[x]).expect("norm");
    let pool = Pool::square2d(3, 1, 1);
    let p = b.add("pool", Op::MaxPool(pool), &[n]).expect("pool");
    let r = b.add("relu", Op::Unary(UnaryOp::Relu), &[p]).expect("relu");
    let m = b.add("gap", Op::ReduceMean { axes: vec![2, 3], keepdims: true }, &[r]).expect("gap");
    b.output(m);
    b.build().expect("graph")
}

#[test]
fn band_sizes_are_distinct_and_at_least_four_where_rows_allow() {
    assert_eq!(band_sizes(56, 8, true), vec![7, 14, 28, 42, 56]);
    assert_eq!(band_sizes(7, 8, true), vec![1, 3, 5, 7]);
    assert_eq!(band_sizes(2, 8, true), vec![1, 2]);
    assert_eq!(band_sizes(224, 8, false), vec![224]);
}

#[test]
fn measured_profile_round_trips_and_validates() {
    let mut g = small_graph("small");
    let inputs = crate::exec::synthetic_inputs(&g, 0).expect("inputs");
    let opts = ProfileOptions { dilation: 3.0, ..ProfileOptions::default() };
    let mut calls = 0;
    let t0 = std::time::Instant::now();
    let p = profile_graph(&mut g, &inputs, &opts, |_, _, _| calls += 1).expect("profile");
    // No convolution: the layout changes nothing, so nothing was timed for it.
    assert_eq!((p.layout, p.layout_trials.len()), (crate::graph::Layout::Nchw, 0));
    let took = t0.elapsed().as_secs_f64();
    assert_eq!(calls, 5);
    assert_eq!(p.ops.len(), 4);
    assert_eq!(p.role, Side::Robot);
    assert_eq!(p.dilation, 3.0);
    assert!(p.dilation_waits, "a dilated profile waits after every run, as the dilated runtime does");
    // Every warm-up and timed run is followed by a wait of twice its duration: profiling takes
    // about 3.6x the timed runs' kernel time (about 1.2x without the waits).
    let raw: f64 = p.ops.iter().flat_map(|o| &o.samples).map(|s| s.raw_median_s * s.runs as f64).sum();
    assert!(took >= 2.5 * raw, "profiling took {took} s for {raw} s of kernels at dilation 3");
    for op in &p.ops {
        assert!(op.samples.iter().all(|s| s.runs == 5 && (s.median_s - 3.0 * s.raw_median_s).abs() <= 1e-15));
        assert!(op.fit.a_s >= 0.0 && op.fit.b_s_per_row >= 0.0);
        let want = if op.local { 5 } else { 1 };
        assert_eq!(op.samples.len(), want, "{}", op.name);
    }
    let hash = g.content_hash().expect("hash");
    p.validate(&g, &hash).expect("valid");
    let dir = std::env::temp_dir().join(format!("lop-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("p.json");
    p.save(&path).expect("save");
    let q = Profile::load(&path).expect("load");
    // JSON float parsing may move the last bit; everything else is identical.
    assert_eq!((&p.model_hash, p.ops.len(), &p.hardware), (&q.model_hash, q.ops.len(), &q.hardware));
    for (a, b) in p.ops.iter().zip(&q.ops) {
        assert_eq!((a.id, &a.name, a.samples.len()), (b.id, &b.name, b.samples.len()));
        assert!((a.fit.a_s - b.fit.a_s).abs() <= 1e-15 * a.fit.a_s.abs().max(1e-300) * 4.0 + 1e-300);
    }
    assert_eq!(p.hash(), q.hash());
    let mut r = q.clone();
    r.ops[0].fit.a_s += 1e-3;
    assert_ne!(r.hash(), q.hash());
    // Corrupt a timing on disk: a negative median is a typed error on load.
    let text = std::fs::read_to_string(&path).expect("read");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
    v["ops"][1]["samples"][0]["median_s"] = serde_json::json!(-0.5);
    std::fs::write(&path, v.to_string()).expect("write");
    assert!(matches!(Profile::load(&path), Err(lop_core::Error::ProfileInvalid { node, .. }) if node == "pool"));
    v["ops"][1]["samples"][0]["median_s"] = serde_json::Value::Null;
    std::fs::write(&path, v.to_string()).expect("write");
    assert!(matches!(Profile::load(&path), Err(lop_core::Error::Malformed(_))));
    std::fs::remove_dir_all(&dir).ok();
    assert!(matches!(profile_graph(&mut g, &inputs, &ProfileOptions { runs: 3, ..opts }, |_, _, _| {}), Err(Error::Input(_))));
}

fn conv_graph() -> Graph {
    use crate::ops::Conv;
    let mut b = GraphBuilder::new("convs");
    let x = b.input("x", vec![1, 8, 24, 16], DType::F32);
    let conv = |seed: i64| {
        tch::manual_seed(seed);
        Conv::same2d(tch::Tensor::randn([8, 8, 3, 3], (tch::Kind::Float, tch::Device::Cpu)) * 0.2)
    };
    let c1 = b.add("c1", Op::Conv(conv(1)), &[x]).expect("c1");
    let r = b.add("relu", Op::Unary(UnaryOp::Relu), &[c1]).expect("relu");
    let c2 = b.add("c2", Op::Conv(conv(2)), &[r]).expect("c2");
    b.output(c2);
    b.build().expect("graph")
}

#[test]
fn the_layout_is_chosen_by_measurement_or_as_told_and_recorded() {
    use crate::graph::Layout;
    let mut g = conv_graph();
    let hash = g.content_hash().expect("hash");
    let inputs = crate::exec::synthetic_inputs(&g, 0).expect("inputs");
    let whole = crate::exec::run_whole(&g, &inputs).expect("whole").outputs;
    let p = profile_graph(&mut g, &inputs, &ProfileOptions::default(), |_, _, _| {}).expect("profile");
    // Both layouts timed; the faster kept, recorded, and left on the graph.
    assert_eq!(p.layout_trials.iter().map(|t| t.layout).collect::<Vec<_>>(), Layout::ALL.to_vec());
    assert!(p.layout_trials.iter().all(|t| t.whole_s > 0.0 && t.bands_s > 0.0));
    let best = p.layout_trials.iter().min_by(|a, b| a.score().total_cmp(&b.score())).expect("trials").layout;
    assert_eq!((p.layout, g.layout()), (best, best));
    // The layout changes neither the content hash nor (beyond rounding) the values.
    assert_eq!(g.content_hash().expect("hash"), hash);
    p.validate(&g, &hash).expect("valid");
    for layout in Layout::ALL {
        let opts = ProfileOptions { layout: LayoutChoice::Fixed(layout), ..ProfileOptions::default() };
        let q = profile_graph(&mut g, &inputs, &opts, |_, _, _| {}).expect("profile");
        assert_eq!((q.layout, g.layout(), q.layout_trials.len()), (layout, layout, 0), "{layout:?} as told");
        let out = crate::exec::run_whole(&g, &inputs).expect("whole").outputs;
        let e = (&out[0] - &whole[0]).abs().max().double_value(&[]) / whole[0].abs().max().double_value(&[]);
        assert!(e <= 1e-5, "{layout:?}: relative error {e}");
    }
    // Written and read back; a profile without the field is NCHW.
    let mut v = serde_json::to_value(&p).expect("json");
    assert_eq!(v["layout"], serde_json::json!(p.layout.name()));
    v.as_object_mut().expect("object").remove("layout");
    assert_eq!(serde_json::from_value::<Profile>(v).expect("old profile").layout, Layout::Nchw);
    // Names as configs and the command line write them.
    assert_eq!("channels-last".parse::<LayoutChoice>(), Ok(LayoutChoice::Fixed(Layout::ChannelsLast)));
    assert_eq!("auto".parse::<LayoutChoice>(), Ok(LayoutChoice::Auto));
    assert!("nhwc".parse::<LayoutChoice>().expect_err("unknown").contains("unknown layout 'nhwc' (auto, nchw, channels_last)"));
}

/// The checks themselves are `lop_core::profile`'s tests; here, that another model's profile
/// is refused because the engine's content hash tells the two models apart.
#[test]
fn validation_rejects_another_models_profile() {
    let g = small_graph("small");
    let hash = g.content_hash().expect("hash");
    let p = crate::profile::from_fits(&g, Side::Server, |_| Fit::new(1e-3, 1e-4)).expect("profile");
    p.validate(&g, &hash).expect("valid");
    let mut b = GraphBuilder::new("other");
    let x = b.input("x", vec![1, 3, 16, 16], DType::U8);
    let n = b.add("norm", Op::NormalizeU8 { mean: vec![0.5; 3], std: vec![0.25; 3] }, &[x]).expect("norm");
    b.output(n);
    let other = b.build().expect("graph");
    let other_hash = other.content_hash().expect("hash");
    assert_ne!(hash, other_hash);
    assert!(matches!(p.validate(&other, &other_hash), Err(lop_core::Error::ProfileModel { .. })));
    let ops: Vec<&str> = p.ops.iter().map(|o| o.kind.as_str()).collect();
    assert_eq!(ops[0], "NormalizeU8", "the entries name each op's kind: {ops:?}");
}
