//! The guide's measured tables against the committed results: every table between
//! `<!-- results:NAME -->` markers in docs/ must equal what scripts/render_results.py renders
//! from docs/results/NAME.json (written by scripts/bench_report.sh), so no figure in the guide is
//! typed by hand or drifts from the run that produced it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs the renderer with `--check` on the checkout at `at`: (success, stderr).
fn check(at: &Path) -> (bool, String) {
    let out = Command::new("python3")
        .arg(root().join("scripts/render_results.py"))
        .args(["--check", "--root"])
        .arg(at)
        .output()
        .expect("python3 runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A copy of docs/ (pages and results) under a fresh folder.
fn copy_docs(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lop-figures-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for sub in ["docs", "docs/results"] {
        std::fs::create_dir_all(dir.join(sub)).expect("scratch folder");
        for e in std::fs::read_dir(root().join(sub)).expect("docs folder") {
            let p = e.expect("entry").path();
            if p.is_file() {
                std::fs::copy(&p, dir.join(sub).join(p.file_name().expect("name"))).expect("copy");
            }
        }
    }
    dir
}

#[test]
fn the_guides_tables_are_rendered_from_the_committed_results() {
    let results: Vec<String> = std::fs::read_dir(root().join("docs/results"))
        .expect("docs/results")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".json"))
        .collect();
    for name in ["demo.json", "demo-detector.json", "planner.json", "fleet.json"] {
        assert!(results.iter().any(|r| r == name), "docs/results/{name} is missing (scripts/bench_report.sh writes it)");
    }
    let (ok, why) = check(&root());
    assert!(ok, "the guide's tables differ from the committed results:\n{why}");
}

#[test]
fn a_table_edited_by_hand_or_a_result_without_its_table_is_caught() {
    // A figure typed into a rendered table.
    let dir = copy_docs("edited");
    let page = dir.join("docs/benchmarks.md");
    let text = std::fs::read_to_string(&page).expect("benchmarks.md");
    let start = text.find("<!-- results:demo -->").expect("the demo's marker");
    let row = start + text[start..].find("| `").expect("a method row");
    let edited = format!("{}| `hand-typed` | 1.0 |\n{}", &text[..row], &text[row..]);
    std::fs::write(&page, edited).expect("write");
    let (ok, why) = check(&dir);
    assert!(!ok && why.contains("docs/benchmarks.md"), "an edited table passed: {why}");
    // A result whose marker was removed.
    std::fs::write(&page, text.replace("<!-- results:demo -->", "")).expect("write");
    let (ok, why) = check(&dir);
    assert!(!ok && why.contains("no page has a results:demo marker"), "an orphaned result passed: {why}");
    let _ = std::fs::remove_dir_all(&dir);
}
