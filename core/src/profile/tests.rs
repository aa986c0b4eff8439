use super::*;
use crate::structure::{Listed, ListedNode, NodeKind, OpClass};
use crate::value::{DType, ValueInfo};

/// input `x` [1, 3, 16, 16] -> `norm` -> `conv` -> `relu` -> `pool` (global): four ops, the
/// last one a barrier.
fn chain() -> Listed {
    let node = |name: &str, rows, inputs: Vec<NodeId>, kind, class| ListedNode {
        name: name.into(),
        info: ValueInfo::new(vec![1, 3, rows, 16], DType::F32),
        inputs,
        kind,
        class,
    };
    Listed {
        nodes: vec![
            node("x", 16, vec![], NodeKind::Input, OpClass::Source),
            node("norm", 16, vec![0], NodeKind::Op, OpClass::ElementWise),
            node("conv", 16, vec![1], NodeKind::Op, OpClass::BlockWise),
            node("relu", 16, vec![2], NodeKind::Op, OpClass::ElementWise),
            node("pool", 1, vec![3], NodeKind::Op, OpClass::Global),
        ],
        outputs: vec![4],
    }
}

fn profile_of(g: &Listed, hash: &str) -> Profile {
    let ops =
        (0..g.node_count()).filter(|&id| g.node_is_op(id)).map(|id| OpProfile::unmeasured(g, id, "Op", Fit::new(1e-3, 1e-4))).collect();
    Profile::synthetic("chain", hash.to_string(), Side::Server, ops)
}

#[test]
fn unmeasured_entries_describe_the_node() {
    let g = chain();
    let p = profile_of(&g, "h");
    let names: Vec<&str> = p.ops.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["norm", "conv", "relu", "pool"]);
    let pool = &p.ops[3];
    assert_eq!((pool.id, pool.out_rows, pool.out_bytes_per_row, pool.local), (4, 1, 3 * 16 * 4, false));
    assert!(p.ops[1].local);
    // Every op at its full rows: 4 intercepts, 16 + 16 + 16 + 1 rows at the slope.
    assert!((p.whole_model_s() - (4e-3 + 49.0 * 1e-4)).abs() < 1e-12, "{}", p.whole_model_s());
}

#[test]
fn validation_rejects_other_models_missing_ops_and_bad_timings() {
    let g = chain();
    let p = profile_of(&g, "hash-a");
    p.validate(&g, "hash-a").expect("valid");
    let fits = p.fits(&g).expect("fits");
    assert_eq!(fits[0], Fit::new(0.0, 0.0), "an input costs nothing");
    assert_eq!(fits[2], Fit::new(1e-3, 1e-4));
    assert!(
        matches!(p.validate(&g, "hash-b"), Err(Error::ProfileModel { expected, found, .. }) if expected == "hash-b" && found == "hash-a")
    );
    let mut missing = profile_of(&g, "hash-a");
    missing.ops.retain(|o| o.name != "relu");
    assert!(matches!(missing.validate(&g, "hash-a"), Err(Error::ProfileMissingOp { node, id: 3 }) if node == "relu"));
    let mut renamed = profile_of(&g, "hash-a");
    renamed.ops[0].name = "not-norm".into();
    assert!(matches!(renamed.validate(&g, "hash-a"), Err(Error::ProfileMissingOp { id: 1, .. })));
    let mut nan = profile_of(&g, "hash-a");
    nan.ops[2].fit.b_s_per_row = f64::NAN;
    assert!(matches!(nan.validate(&g, "hash-a"), Err(Error::ProfileInvalid { node, .. }) if node == "relu"));
    let mut neg = profile_of(&g, "hash-a");
    neg.ops[0].samples = vec![Sample { rows: 4, median_s: -1.0, raw_median_s: 1.0, runs: 3, retakes: 0 }];
    assert!(matches!(neg.check(), Err(Error::ProfileInvalid { node, .. }) if node == "norm"));
    let mut dil = profile_of(&g, "hash-a");
    dil.dilation = 0.0;
    assert!(matches!(dil.check(), Err(Error::ProfileInvalid { node, .. }) if node == "dilation"));
    let mut old = profile_of(&g, "hash-a");
    old.version = PROFILE_VERSION + 1;
    assert!(matches!(old.check(), Err(Error::ProfileInvalid { node, .. }) if node == "version"));
}

#[test]
fn bands_slower_than_larger_bands_are_named_worst_pair_per_op() {
    let g = chain();
    let mut p = profile_of(&g, "h");
    let sample = |rows: usize, s: f64| Sample { rows, median_s: s * 3.0, raw_median_s: s, runs: 5, retakes: 0 };
    // A straight line, then the 3-d convolution's cliff (ms: 796 at 32 rows, 103 at 64), then
    // a sub-millisecond op whose noise is below the floor.
    p.ops[0].samples = vec![sample(8, 0.002), sample(16, 0.003), sample(32, 0.005)];
    p.ops[1].samples = vec![sample(32, 0.7965), sample(64, 0.103), sample(128, 0.1957), sample(256, 0.4099)];
    p.ops[2].samples = vec![sample(8, 3e-4), sample(16, 1e-4)];
    let slow = p.slow_bands();
    assert_eq!(slow.len(), 1, "{slow:?}");
    let s = &slow[0];
    assert_eq!((s.op.as_str(), s.rows, s.more_rows), ("conv", 32, 64), "the worst pair, in raw seconds: {s:?}");
    assert!((s.seconds - 0.7965).abs() < 1e-12 && (s.more_seconds - 0.103).abs() < 1e-12);
    // Just under the factor: not slow.
    p.ops[1].samples = vec![sample(32, 0.0149), sample(64, 0.010)];
    assert!(p.slow_bands().is_empty());
}

#[test]
fn saved_profiles_load_with_the_same_hash_and_bad_files_are_named() {
    let dir = std::env::temp_dir().join(format!("lop-core-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let g = chain();
    let mut p = profile_of(&g, "h");
    p.ops[1].fit = Fit::new(1.0 / 3.0, 2.0 / 7.0);
    p.set_codec_cost(CodecCost { codec: FrameCodec::Lossless, ..CodecCost::raw() });
    let path = dir.join("p.json");
    p.save(&path).expect("save");
    let back = Profile::load(&path).expect("load");
    assert_eq!(back.hash(), p.hash(), "a saved-and-loaded profile keys the same tables");
    assert_eq!(back.codec_cost(FrameCodec::Lossless).map(|c| c.codec), Some(FrameCodec::Lossless));
    assert_eq!(back.codec_cost(FrameCodec::Raw), Some(CodecCost::raw()), "raw frames cost nothing, measured or not");
    std::fs::write(&path, "{ not json").expect("write");
    assert!(matches!(Profile::load(&path), Err(Error::Malformed(msg)) if msg.contains("p.json")));
    assert!(matches!(Profile::load(&dir.join("absent.json")), Err(Error::Io { .. })));
    let _ = std::fs::remove_dir_all(&dir);
}
