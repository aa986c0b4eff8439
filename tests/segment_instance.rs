//! `--task segment-instance` against a numpy reference on onnxruntime's outputs: a
//! YOLOv8-seg-style net (`scripts/yolo_seg_style.py`: seeded weights, 3 classes, 32 prototypes,
//! 160x160, legacy exporter, opset 17) is exported and run by onnxruntime (CPU, graph
//! optimisations off), and `scripts/segment_ref.py` computes the stage's detections and
//! instance-id map from onnxruntime's head and prototypes, with thresholds in wide gaps of the
//! model's scores and mask values (its margins say how far every decision was from flipping).
//! lop imports the ONNX file, runs it raw (both outputs within 1e-4 of onnxruntime's) and with
//! the stage, whole and split under random plans: the same detections (classes row by row, boxes
//! within 1e-4 relative, scores within 1e-4) and exactly the same instance map.
//!
//! Generated files go to `target/segment_instance/`. Without the Python peers
//! (`scripts/setup.sh --test-deps`), the test fails with the set-up's message; it never skips.

use lop::exec::{run_split, run_whole};
use lop::model::{LoadOptions, load};
use lop::plan::Plan;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use tch::{Kind, Tensor};
use tests::{python_test_env, rel_err, run_command, workspace_root};

/// Largest accepted relative error of the raw outputs against onnxruntime.
const TOL: f64 = 1e-4;
/// Largest accepted difference of box corners, relative to the largest corner (the heads'
/// tolerance: corners reach a few hundred pixels), and of scores (absolute).
const BOX_TOL: f64 = 1e-4;
const SCORE_TOL: f64 = 1e-4;
/// Units per op and seeds of the random plans.
const UNITS: usize = 8;
const PLAN_SEEDS: [u64; 3] = [1, 2, 3];

fn shape_of(t: &Tensor) -> Vec<usize> {
    t.size().iter().map(|&d| d as usize).collect()
}

fn npy(dir: &Path, name: &str) -> Tensor {
    let path = dir.join(format!("{name}.npy"));
    Tensor::read_npy(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

#[test]
fn segment_instance_matches_the_numpy_reference_whole_and_split() {
    let python = python_test_env().unwrap_or_else(|e| panic!("{e}"));
    let root = workspace_root();
    let dir = root.join("target/segment_instance");
    run_command(
        "preparing the YOLOv8-seg-style model and its reference (scripts/segment_ref.py)",
        Command::new(&python).arg(root.join("scripts/segment_ref.py")).arg("--out").arg(&dir).current_dir(&root),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(dir.join("manifest.json")).expect("manifest.json");
    let manifest: Value = serde_json::from_str(&text).expect("manifest");
    if let Some(problem) = manifest["problem"].as_str() {
        panic!("the numpy reference cannot be trusted: {problem}");
    }
    let spec = manifest["task"].as_str().expect("task");
    let input_shape: Vec<usize> =
        manifest["input_shape"].as_array().expect("input_shape").iter().map(|d| d.as_u64().expect("dim") as usize).collect();
    let onnx = dir.join(manifest["onnx"].as_str().expect("onnx"));
    let onnx = onnx.to_str().expect("utf-8 path");
    let inputs = [npy(&dir, "input")];
    let (head, protos, rows, ids) = (npy(&dir, "output0"), npy(&dir, "output1"), npy(&dir, "rows"), npy(&dir, "ids"));
    eprintln!("{spec}: margins {}", manifest["margins"]);

    // The raw model first: both outputs as onnxruntime's.
    let raw = load(onnx, &LoadOptions { input_shape: Some(input_shape.clone()), ..LoadOptions::default() }).expect("import");
    let out = run_whole(&raw, &inputs).expect("raw run").outputs;
    assert_eq!(out.len(), 2, "head and prototypes");
    let (e0, e1) = (rel_err(&out[0], &head), rel_err(&out[1], &protos));
    eprintln!("raw vs onnxruntime: head {e0:.2e}, prototypes {e1:.2e}");
    assert!(e0 <= TOL && e1 <= TOL, "raw outputs differ from onnxruntime's: {e0:e}, {e1:e}");

    let postprocess = Some(lop::postprocess::Postprocess::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}")));
    let graph =
        load(onnx, &LoadOptions { input_shape: Some(input_shape), postprocess, ..LoadOptions::default() }).expect("import with the stage");
    let kept = manifest["detections"].as_u64().expect("detections") as usize;
    let class_col = |t: &Tensor| Vec::<f32>::try_from(&t.select(2, 5).flatten(0, -1)).expect("class column");
    assert_eq!(class_col(&rows).iter().filter(|&&c| c >= 0.0).count(), kept, "reference rows");
    let want_ids = Vec::<u8>::try_from(ids.flatten(0, -1)).expect("reference map");
    let painted = (1..=kept).filter(|&i| want_ids.contains(&(i as u8))).count();
    assert!(kept > 1 && painted > 1, "the reference keeps {kept} detections, {painted} with pixels: it checks too little");

    let mut runs = vec![("whole".to_string(), run_whole(&graph, &inputs).expect("whole").outputs)];
    for seed in PLAN_SEEDS {
        let plan = Plan::random(&graph, UNITS, seed);
        let split = run_split(&graph, &plan, &inputs).unwrap_or_else(|e| panic!("split seed {seed}: {e}"));
        runs.push((format!("split seed {seed} ({} KB up, {} KB down)", split.bytes_up / 1000, split.bytes_down / 1000), split.outputs));
    }
    for (run, outputs) in runs {
        let [got_rows, got_ids] = &outputs[..] else { panic!("{run}: {} outputs, expected the detections and the map", outputs.len()) };
        assert_eq!(shape_of(got_rows), shape_of(&rows), "{run}: detections' shape");
        assert_eq!(class_col(got_rows), class_col(&rows), "{run}: classes row by row");
        let boxes = rel_err(&got_rows.narrow(2, 0, 4), &rows.narrow(2, 0, 4));
        let scores = (got_rows.select(2, 4) - rows.select(2, 4)).abs().max().double_value(&[]);
        assert!(boxes <= BOX_TOL && scores <= SCORE_TOL, "{run}: boxes differ from numpy's by {boxes:e} (relative), scores by {scores:e}");
        assert_eq!((shape_of(got_ids), got_ids.kind()), (shape_of(&ids), Kind::Uint8), "{run}: the map's shape and type");
        let got = Vec::<u8>::try_from(got_ids.flatten(0, -1)).expect("map");
        let wrong = got.iter().zip(&want_ids).filter(|(a, b)| a != b).count();
        assert_eq!(wrong, 0, "{run}: {wrong} of {} map pixels differ from numpy's", got.len());
        eprintln!(
            "{run}: {kept} detections (boxes {boxes:.2e} relative, scores {scores:.2e}), {painted} with pixels, map equal to numpy's"
        );
    }
}
