//! `scripts/export_onnx.py`, the path from a PyTorch model to lop: it exports a torchvision model
//! by name and a `module:callable` (the YOLOv8-style detector of `scripts/yolo_style.py`, with
//! dynamic height and width and a preprocess stage, at opsets 11 to 20), runs `lop verify` and compares `lop run`
//! with onnxruntime, and prints the configuration to use. A model that does not exist is exit 2.

use std::path::Path;
use std::process::Command;
use tests::{built_binary, python_test_env, workspace_root};

fn export(args: &[&str], out: &Path) -> (Option<i32>, String) {
    let python = python_test_env().unwrap_or_else(|e| panic!("{e}"));
    let root = workspace_root();
    let output = Command::new(python)
        .arg(root.join("scripts/export_onnx.py"))
        .args(args)
        .arg("--out")
        .arg(out)
        .arg("--plans")
        .arg("3")
        .arg("--lop")
        .arg(built_binary("lop"))
        .env("PYTHONPATH", root.join("scripts"))
        .output()
        .expect("python runs");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code(), text)
}

#[test]
fn exports_a_torchvision_model_and_a_dynamic_detector_that_lop_runs_exactly() {
    let dir = std::env::temp_dir().join(format!("lop-export-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");

    let (code, text) = export(&["resnet18"], &dir.join("resnet18.onnx"));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("split layouts exact") && text.contains("input_wire: native"), "{text}");

    let (code, text) =
        export(&["yolo_style:seeded", "--input-shape", "1,3,256,320", "--dynamic", "--preprocess", "unit"], &dir.join("detector.onnx"));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("output 0 [1, 84, 1680]"), "{text}");
    assert!(text.contains("preprocess: \"unit\"") && text.contains("input_wire: u8"), "{text}");

    // What exporters write at opsets 11 to 20, dynamic height and width: shape subgraphs (Shape,
    // Gather, Range, ... feeding the anchor grids and reshapes) fold once the shape is fixed.
    for opset in ["11", "13", "16", "18", "20"] {
        let args = ["yolo_style:seeded", "--input-shape", "1,3,256,256", "--dynamic", "--preprocess", "unit", "--opset", opset];
        let (code, text) = export(&args, &dir.join(format!("detector{opset}.onnx")));
        assert_eq!(code, Some(0), "opset {opset}: {text}");
        assert!(text.contains("split layouts exact") && text.contains("output 0 [1, 84, 1344]"), "opset {opset}: {text}");
    }

    let (code, text) = export(&["torchvision_has_no_such_model"], &dir.join("none.onnx"));
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("no model 'torchvision_has_no_such_model'"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
