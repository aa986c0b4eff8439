//! Real models against onnxruntime: ddddocr 1.6.1's `common_det.onnx` (a trained YOLOX-style
//! detector, at its own 416x416 and at 640x640 through a dynamic shape), rapidocr-onnxruntime
//! 1.4.4's PP-OCRv4 text detector (a trained segmenter, 640x640), torchvision 0.28's resnet18, densenet121 and convnext_tiny, and YOLOv8-style
//! detection and pose nets (`scripts/yolo_style.py`) (random seeded weights, legacy exporter,
//! opset 17). For each, lop imports the ONNX file and runs it whole
//! and split under two random plans on the same input as onnxruntime (CPU, graph optimisations
//! off); every output must be within 1e-4 relative error (max abs difference over max abs
//! reference value). The detectors run once more with the detection stage (`--task`), whole and
//! split, against a numpy reference of that stage on onnxruntime's output
//! (`scripts/postprocess_ref.py`): the same boxes, classes, scores and keypoints, in the same order.
//!
//! Set-up happens here: `scripts/setup.sh --test-deps` installs the Python peers into `.venv`,
//! then `scripts/real_models.py --out target/real_models` exports the models and writes inputs,
//! reference outputs and `manifest.json` (both skip work already done). Without access to the
//! package index on a first run, the tests fail with the set-up's message; they never skip.

use lop::exec::{Agreement, Tolerance, agree, run_batched, run_split, run_whole};
use lop::model::{LoadOptions, load};
use lop::plan::Plan;
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use tch::Tensor;
use tests::{python_test_env, rel_err, run_command, workspace_root};

/// The tolerance against onnxruntime (the project's one rule, at another runtime's level).
const TOL: Tolerance = Tolerance::OTHER_RUNTIME;
/// Units per op in the random plans.
const UNITS: usize = 8;
/// Seeds of the random plans each model is split with.
const PLAN_SEEDS: [u64; 2] = [1, 2];

/// The prepared folder and its parsed manifest, made once per test process.
fn prepared() -> &'static Result<(PathBuf, Value), String> {
    static ONCE: OnceLock<Result<(PathBuf, Value), String>> = OnceLock::new();
    ONCE.get_or_init(|| {
        let python = python_test_env()?;
        let root = workspace_root();
        let out = root.join("target/real_models");
        run_command(
            "preparing the real models (scripts/real_models.py)",
            Command::new(&python).arg(root.join("scripts/real_models.py")).arg("--out").arg(&out).current_dir(&root),
        )?;
        let manifest_path = out.join("manifest.json");
        let text = std::fs::read_to_string(&manifest_path).map_err(|e| format!("reading {}: {e}", manifest_path.display()))?;
        let manifest: Value = serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", manifest_path.display()))?;
        Ok((out, manifest))
    })
}

fn shape_of(t: &Tensor) -> Vec<usize> {
    t.size().iter().map(|&d| d as usize).collect()
}

/// Checks `outputs` against the reference tensors: same count, same shapes. Returns how each
/// output agrees under [`TOL`], or a description of the first mismatch.
fn compare(model: &str, run: &str, outputs: &[Tensor], expected: &[Tensor]) -> Result<Vec<Agreement>, String> {
    if outputs.len() != expected.len() {
        return Err(format!("{model} {run}: lop gives {} outputs, onnxruntime {}", outputs.len(), expected.len()));
    }
    let mut errs = Vec::new();
    for (k, (o, e)) in outputs.iter().zip(expected).enumerate() {
        if shape_of(o) != shape_of(e) {
            return Err(format!("{model} {run}: output {k} has shape {:?}, onnxruntime's {:?}", shape_of(o), shape_of(e)));
        }
        errs.push(agree(o, &e.to_device(o.device()), TOL).map_err(|e| format!("{model} {run}: output {k}: {e}"))?);
    }
    Ok(errs)
}

/// Whether any output fails the tolerance.
fn fails(errs: &[Agreement]) -> bool {
    errs.iter().any(|a| !a.within)
}

fn fmt_errs(errs: &[Agreement]) -> String {
    errs.iter()
        .map(|a| if a.reordered > 0 { format!("{:.3e} ({} rows reordered)", a.rel_err, a.reordered) } else { format!("{:.3e}", a.rel_err) })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Imports `name`'s ONNX file with lop, runs it whole and split, and compares with onnxruntime.
fn check_model(name: &str) {
    let (dir, manifest) = match prepared() {
        Ok(p) => p,
        Err(e) => panic!("real-model set-up failed, so {name} cannot be checked:\n{e}"),
    };
    let entry = manifest["models"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == name))
        .unwrap_or_else(|| panic!("{name} missing from {}", dir.join("manifest.json").display()));
    let file = |key: &Value| dir.join(key.as_str().unwrap_or_else(|| panic!("{name}: bad manifest entry {key}")));
    let input_shape: Vec<usize> =
        entry["input_shape"].as_array().expect("input_shape").iter().map(|d| d.as_u64().expect("input_shape dims") as usize).collect();

    let onnx_path = file(&entry["onnx"]);
    let graph =
        load(onnx_path.to_str().expect("utf-8 path"), &LoadOptions { input_shape: Some(input_shape.clone()), ..LoadOptions::default() })
            .unwrap_or_else(|e| panic!("{name}: lop could not import {}: {e}", onnx_path.display()));
    let input = Tensor::read_npy(file(&entry["input"])).unwrap_or_else(|e| panic!("{name}: reading the input: {e}"));
    assert_eq!(shape_of(&input), input_shape, "{name}: input file shape");
    let expected: Vec<Tensor> = entry["outputs"]
        .as_array()
        .expect("outputs")
        .iter()
        .map(|f| Tensor::read_npy(file(f)).unwrap_or_else(|e| panic!("{name}: reading reference {f}: {e}")))
        .collect();
    eprintln!(
        "{name}: {} nodes, input {:?}, outputs {:?}",
        graph.nodes.len(),
        input_shape,
        expected.iter().map(shape_of).collect::<Vec<_>>()
    );

    let inputs = [input];
    let whole = run_whole(&graph, &inputs).unwrap_or_else(|e| panic!("{name}: whole run failed: {e}"));
    let whole_errs = compare(name, "whole", &whole.outputs, &expected).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{name}: whole vs onnxruntime: rel err [{}] (peak {} MB)", fmt_errs(&whole_errs), whole.peak_bytes / 1_000_000);

    let mut failures = Vec::new();
    if fails(&whole_errs) {
        failures.push(format!("whole: [{}]", fmt_errs(&whole_errs)));
    }
    let plans = PLAN_SEEDS
        .iter()
        .map(|&seed| (format!("random plan, seed {seed}"), Plan::random(&graph, UNITS, seed)))
        .chain(std::iter::once(("even plan".to_string(), Plan::even(&graph, UNITS))));
    for (which, plan) in plans {
        let split = run_split(&graph, &plan, &inputs).unwrap_or_else(|e| panic!("{name}: split run ({which}) failed: {e}"));
        let errs = compare(name, &format!("split ({which})"), &split.outputs, &expected).unwrap_or_else(|e| panic!("{e}"));
        let vs_whole: Vec<f64> = split.outputs.iter().zip(&whole.outputs).map(|(s, w)| rel_err(s, w)).collect();
        let vs_whole = vs_whole.iter().map(|e| format!("{e:.3e}")).collect::<Vec<_>>().join(", ");
        eprintln!(
            "{name}: split ({which}, {} KB up, {} KB down) vs onnxruntime: rel err [{}]; vs whole: [{}]",
            split.bytes_up / 1000,
            split.bytes_down / 1000,
            fmt_errs(&errs),
            vs_whole
        );
        if fails(&errs) {
            failures.push(format!("split ({which}): [{}]", fmt_errs(&errs)));
        }
    }
    let nchw = LoadOptions { input_shape: Some(input_shape.clone()), ..LoadOptions::default() };
    failures.extend(check_unfused(name, &onnx_path, &nchw, &inputs, &whole.outputs));
    failures.extend(check_channels_last(name, &onnx_path, &input_shape, &inputs, &expected));
    // Batched with another frame (the input mirrored left to right), as an edge batches two
    // robots' inferences: each sample's outputs are its own.
    // A model that folds its batch axis into others (RT-DETR's attention heads) cannot carry a
    // batch: the edge runs it one inference at a time, and run_batched says why.
    if let Some(why) = lop::exec::unbatchable(&graph) {
        eprintln!("{name}: not batched: {why}");
        let refused = run_batched(&graph, &[vec![inputs[0].shallow_clone()], vec![inputs[0].shallow_clone()]], 3);
        assert!(refused.is_err_and(|e| e.to_string().contains(&why)), "{name}: a batched run must be refused with the reason");
        assert!(failures.is_empty(), "{name}: outside {} against onnxruntime: {}", TOL.describe(), failures.join("; "));
        return;
    }
    let mirrored = inputs[0].flip([-1]);
    let other = run_whole(&graph, std::slice::from_ref(&mirrored)).unwrap_or_else(|e| panic!("{name}: whole run, mirrored: {e}"));
    let batched = run_batched(&graph, &[vec![inputs[0].shallow_clone()], vec![mirrored]], 3)
        .unwrap_or_else(|e| panic!("{name}: batched run failed: {e}"));
    for (k, own) in [&expected, &other.outputs].into_iter().enumerate() {
        let mine: Vec<Tensor> = batched.iter().map(|t| t.narrow(0, k as i64, 1)).collect();
        let errs = compare(name, &format!("batched sample {k}"), &mine, own).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{name}: batched sample {k} vs its own reference: rel err [{}]", fmt_errs(&errs));
        if fails(&errs) {
            failures.push(format!("batched sample {k}: [{}]", fmt_errs(&errs)));
        }
    }
    assert!(failures.is_empty(), "{name}: outside {} against onnxruntime: {}", TOL.describe(), failures.join("; "));
    if !entry["post"].is_null() {
        check_post(name, entry, &input_shape, &onnx_path, &inputs, &file(&entry["post"]["output"]));
    }
}

/// The model loaded in channels-last, where every 2-d float convolution runs straight on oneDNN
/// ([`lop::ops::DirectConv`]): whole and under the even plan, against onnxruntime. Returns the
/// runs outside the tolerance.
fn check_channels_last(
    name: &str,
    onnx_path: &std::path::Path,
    input_shape: &[usize],
    inputs: &[Tensor],
    expected: &[Tensor],
) -> Vec<String> {
    let opts = LoadOptions { input_shape: Some(input_shape.to_vec()), layout: lop::graph::Layout::ChannelsLast, ..LoadOptions::default() };
    let graph = load(onnx_path.to_str().expect("utf-8 path"), &opts).unwrap_or_else(|e| panic!("{name}: loading in channels-last: {e}"));
    let direct = graph
        .nodes
        .iter()
        .filter(|n| matches!(&n.op, lop::ops::Op::Conv(c) if matches!(c.packed, Some(lop::ops::PreparedConv::Direct(_)))))
        .count();
    let convs = graph.nodes.iter().filter(|n| matches!(&n.op, lop::ops::Op::Conv(c) if c.weight.dim() == 4)).count();
    assert_eq!(direct, convs, "{name}: every 2-d convolution runs straight on oneDNN in channels-last");
    let whole = run_whole(&graph, inputs).unwrap_or_else(|e| panic!("{name}: channels-last whole run failed: {e}"));
    let split = run_split(&graph, &Plan::even(&graph, UNITS), inputs).unwrap_or_else(|e| panic!("{name}: channels-last split failed: {e}"));
    let mut failures = check_unfused(name, onnx_path, &opts, inputs, &whole.outputs);
    for (run, outputs) in [("channels-last whole", &whole.outputs), ("channels-last split (even plan)", &split.outputs)] {
        let errs = compare(name, run, outputs, expected).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{name}: {run} ({direct} convolutions on oneDNN) vs onnxruntime: rel err [{}]", fmt_errs(&errs));
        if fails(&errs) {
            failures.push(format!("{run}: [{}]", fmt_errs(&errs)));
        }
    }
    failures
}

/// The model loaded with `opts` but every activation kept a separate op (`lop::fuse` off): its
/// whole run must give the fused run's `fused` outputs under the split rule (the fused
/// convolution applies the same activation to the same values). Returns the disagreements.
fn check_unfused(name: &str, onnx_path: &std::path::Path, opts: &LoadOptions, inputs: &[Tensor], fused: &[Tensor]) -> Vec<String> {
    let unfused_opts = LoadOptions { unfused: true, ..opts.clone() };
    let unfused = load(onnx_path.to_str().expect("utf-8 path"), &unfused_opts).unwrap_or_else(|e| panic!("{name}: loading unfused: {e}"));
    let fused_graph = load(onnx_path.to_str().expect("utf-8 path"), opts).unwrap_or_else(|e| panic!("{name}: loading: {e}"));
    let folded = unfused.nodes.len() - fused_graph.nodes.len();
    let want = run_whole(&unfused, inputs).unwrap_or_else(|e| panic!("{name}: unfused whole run failed: {e}")).outputs;
    let mut failures = Vec::new();
    for (k, (f, u)) in fused.iter().zip(&want).enumerate() {
        let a = agree(f, u, Tolerance::SPLIT).unwrap_or_else(|e| panic!("{name}: output {k}: {e}"));
        eprintln!("{name} ({:?}): fused ({folded} nodes folded) vs unfused, output {k}: {a:?}", opts.layout);
        if !a.within {
            failures.push(format!("fused vs unfused ({:?}) output {k}: {a:?}", opts.layout));
        }
    }
    failures
}

/// Largest accepted absolute difference from the numpy stage: box corners and keypoints are in
/// input pixels (the heads differ from onnxruntime's by about 1e-4 there), scores in 0..1.
const POST_TOL: f64 = 1e-3;

/// The model with its detection stage, run whole and split, against the numpy stage on
/// onnxruntime's head: same shape, the same class in every row (-1 marks unused rows), every
/// value within [`POST_TOL`].
fn check_post(name: &str, entry: &Value, input_shape: &[usize], onnx_path: &std::path::Path, inputs: &[Tensor], reference: &PathBuf) {
    let spec = entry["post"]["task"].as_str().unwrap_or_else(|| panic!("{name}: post.task missing"));
    if let Some(problem) = entry["post"]["problem"].as_str() {
        panic!("{name}: the numpy reference of '{spec}' cannot be trusted: {problem}");
    }
    let postprocess = Some(lop::postprocess::Postprocess::parse(spec).unwrap_or_else(|e| panic!("{name}: task '{spec}': {e}")));
    let opts = LoadOptions { input_shape: Some(input_shape.to_vec()), postprocess, ..LoadOptions::default() };
    let graph = load(onnx_path.to_str().expect("utf-8 path"), &opts).unwrap_or_else(|e| panic!("{name}: loading with '{spec}': {e}"));
    let expected = Tensor::read_npy(reference).unwrap_or_else(|e| panic!("{name}: reading {}: {e}", reference.display()));
    let kept = entry["post"]["detections"].as_u64().expect("post.detections") as usize;
    let width = shape_of(&expected)[2];
    let class_col = |t: &Tensor| Vec::<f32>::try_from(&t.select(2, 5).flatten(0, -1)).expect("class column");
    assert_eq!(class_col(&expected).iter().filter(|&&c| c >= 0.0).count(), kept, "{name}: reference rows");
    assert!(kept > 0, "{name}: the reference keeps no detection, so it checks nothing");

    let mut runs = vec![("whole".to_string(), run_whole(&graph, inputs).unwrap_or_else(|e| panic!("{name} {spec}: whole: {e}")).outputs)];
    for seed in PLAN_SEEDS {
        let plan = Plan::random(&graph, UNITS, seed);
        let split = run_split(&graph, &plan, inputs).unwrap_or_else(|e| panic!("{name} {spec}: split seed {seed}: {e}"));
        runs.push((format!("split seed {seed}"), split.outputs));
    }
    for (run, outputs) in runs {
        let [out] = &outputs[..] else { panic!("{name} {spec} {run}: {} outputs, expected 1", outputs.len()) };
        assert_eq!(shape_of(out), shape_of(&expected), "{name} {spec} {run}: result shape");
        assert_eq!(class_col(out), class_col(&expected), "{name} {spec} {run}: classes row by row (numpy reference)");
        let diff = (out - &expected).abs().max().double_value(&[]);
        eprintln!("{name}: {spec} {run}: {kept} detections ({width} values each) as numpy's, max abs difference {diff:.2e}");
        assert!(diff <= POST_TOL, "{name} {spec} {run}: max abs difference {diff:e} from the numpy stage (tolerance {POST_TOL:e})");
    }
}

#[test]
fn common_det_matches_onnxruntime() {
    check_model("common_det");
}

/// A YOLOv8-style detector (DFL box decoding in the graph, [1, 84, 2100]): the head's flattened
/// anchors and box bins are barriers, so whole and split runs match onnxruntime.
#[test]
fn yolo_det_matches_onnxruntime() {
    check_model("yolo_det");
}

/// The same detector exported at 640x640, the size YOLO detectors are deployed at ([1, 84, 8400]).
#[test]
fn yolo_det_640_matches_onnxruntime() {
    check_model("yolo_det_640");
}

/// The YOLOv8-style pose head ([1, 56, 2100]: box, score, 17 keypoint triplets).
#[test]
fn yolo_pose_matches_onnxruntime() {
    check_model("yolo_pose");
}

/// The trained detector at camera resolution through a dynamic input shape: 640x640 instead of
/// the 416x416 it was exported at (its anchor grids follow the feature maps).
#[test]
fn common_det_at_640_matches_onnxruntime() {
    check_model("common_det_640");
    // What lop_robot reads before it fixes the shape from a frame: the exporter's named dynamic
    // height and width, fixed batch and channels.
    let Ok((dir, _)) = prepared() else { panic!("real-model set-up failed") };
    let path = dir.join("common_det_640.onnx");
    let declared = lop::model::declared_inputs(path.to_str().expect("utf-8 path")).expect("declared inputs");
    let [input] = &declared[..] else { panic!("one input: {declared:?}") };
    assert_eq!(input.dims, Some(vec![Some(1), Some(3), None, None]), "{input:?}");
    assert_eq!(input.dim_names[2..], ["height".to_string(), "width".to_string()], "{input:?}");
    assert!(input.is_dynamic());
}

/// A trained segmenter shipped in a PyPI wheel: PP-OCRv4's text detector (rapidocr-onnxruntime),
/// dynamic input run at 640x640, probability map out.
#[test]
fn ppocr_det_matches_onnxruntime() {
    check_model("ppocr_det");
}

/// An RT-DETR-style detector at 640x640 (`scripts/rtdetr_style.py`): a standalone Pad feeding a
/// convolution and a pool, an attention encoder, query selection (ReduceMax, TopK, Gather,
/// GatherElements), deformable attention (GridSample) and a post-processor (Mod, comparisons,
/// logic, Where). Its backbone and neck split; its decoder runs whole on one side.
#[test]
fn rtdetr_style_matches_onnxruntime() {
    check_model("rtdetr_style");
    let Ok((dir, _)) = prepared() else { panic!("real-model set-up failed") };
    let path = dir.join("rtdetr_style.onnx");
    let opts = LoadOptions { input_shape: Some(vec![1, 3, 640, 640]), ..LoadOptions::default() };
    let graph = load(path.to_str().expect("utf-8 path"), &opts).expect("loads");
    let kinds: Vec<&str> = graph.nodes.iter().map(|n| n.op.kind_name()).collect();
    for kind in ["Pad", "TopK", "TopKIndices", "GatherElements", "GridSample", "Where", "Mod", "ReduceMax"] {
        assert!(kinds.contains(&kind), "rtdetr_style: no {kind} node reached the IR: {kinds:?}");
    }
    let pad = graph.nodes.iter().position(|n| n.op.kind_name() == "Pad").expect("a Pad");
    assert!(graph.locality(pad).is_local(), "the stem's Pad is a local op, split by rows: {:?}", graph.locality(pad));
}

#[test]
fn resnet18_matches_onnxruntime() {
    check_model("resnet18");
}

#[test]
fn densenet121_matches_onnxruntime() {
    check_model("densenet121");
}

#[test]
fn convnext_tiny_matches_onnxruntime() {
    check_model("convnext_tiny");
}

/// Single-op graphs with the attributes exports use (`scripts/op_cases.py`): Pad in reflect,
/// edge and constant modes on rows, columns and channels, and with crops; GridSample in its
/// three modes and paddings; TopK largest and smallest with Mod, Div and Gather on its indices;
/// GatherElements with negative and computed indices; comparisons, logic, Where, Mod, Sin, Cos
/// and reductions. Each runs whole, under two random plans and an even one, against onnxruntime.
/// Pads and element-wise logic on image rows are local ops, so the plans split them by rows.
#[test]
fn op_cases_match_onnxruntime() {
    let python = python_test_env().unwrap_or_else(|e| panic!("op cases: set-up failed: {e}"));
    let root = workspace_root();
    let dir = root.join("target/op_cases");
    run_command(
        "preparing the op cases (scripts/op_cases.py)",
        Command::new(&python).arg(root.join("scripts/op_cases.py")).arg("--out").arg(&dir).current_dir(&root),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("op cases manifest");
    let manifest: Value = serde_json::from_str(&text).expect("op cases manifest parses");
    let cases = manifest["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10, "{} cases", cases.len());
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let file = |v: &Value| dir.join(v.as_str().expect("file name"));
        let graph = load(file(&case["onnx"]).to_str().expect("utf-8 path"), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name}: lop could not import it: {e}"));
        let input = Tensor::read_npy(file(&case["input"])).expect("input");
        let expected: Vec<Tensor> =
            case["outputs"].as_array().expect("outputs").iter().map(|f| Tensor::read_npy(file(f)).expect("reference")).collect();
        let as_float = |ts: Vec<Tensor>| ts.into_iter().map(|t| t.to_kind(tch::Kind::Float)).collect::<Vec<_>>();
        let inputs = [input];
        let whole = run_whole(&graph, &inputs).unwrap_or_else(|e| panic!("{name}: whole: {e}"));
        let mut runs = vec![("whole".to_string(), as_float(whole.outputs))];
        for seed in PLAN_SEEDS {
            let split =
                run_split(&graph, &Plan::random(&graph, UNITS, seed), &inputs).unwrap_or_else(|e| panic!("{name}: seed {seed}: {e}"));
            runs.push((format!("random plan {seed}"), as_float(split.outputs)));
        }
        let even = run_split(&graph, &Plan::even(&graph, 4), &inputs).unwrap_or_else(|e| panic!("{name}: even: {e}"));
        runs.push(("even plan".into(), as_float(even.outputs)));
        for (run, outputs) in runs {
            let errs = compare(name, &run, &outputs, &expected).unwrap_or_else(|e| panic!("{e}"));
            eprintln!("{name}: {run}: rel err [{}]", fmt_errs(&errs));
            if fails(&errs) {
                failures.push(format!("{name} {run}: [{}]", fmt_errs(&errs)));
            }
        }
        let global: Vec<&str> = graph
            .nodes
            .iter()
            .enumerate()
            .filter(|(id, n)| {
                // On image rows (a row axis); top-k indices and the like are single blocks.
                let on_rows = n.info.row_axis.is_some();
                on_rows && matches!(n.op.kind_name(), "Pad" | "Where" | "And" | "Mod" | "Greater") && !graph.locality(*id).is_local()
            })
            .map(|(_, n)| n.name.as_str())
            .collect();
        assert!(global.is_empty(), "{name}: pads and element-wise logic must be local ops: {global:?} are barriers");
    }
    assert!(failures.is_empty(), "outside {} against onnxruntime: {}", TOL.describe(), failures.join("; "));
}
