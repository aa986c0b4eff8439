//! ARCHITECTURE.md's codemap held against the code: every workspace crate is listed with its
//! folder; a crate's workspace dependencies are among those it may use; and nothing it depends on,
//! directly or through others (normal dependencies, host platform, the crate's own features), is
//! a crate it must never depend on (the engine on tokio, Zenoh or NVML, say).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use tests::{run_command, workspace_root};

mod imports;

/// One row of the codemap.
#[derive(Debug)]
struct Row {
    folder: String,
    may_use: BTreeSet<String>,
    never: BTreeSet<String>,
}

/// The backticked names of a table cell.
fn names(cell: &str) -> BTreeSet<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// The rows of the table under `## Codemap`, by crate.
fn codemap(text: &str) -> Result<BTreeMap<String, Row>, String> {
    let section = text.split("\n## Codemap").nth(1).ok_or("ARCHITECTURE.md has no '## Codemap' section")?;
    let section = section.split("\n## ").next().unwrap_or(section);
    let mut rows = BTreeMap::new();
    for line in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        let [krate, folder, _concern, may_use, never] = cells[..] else {
            return Err(format!("codemap row without 5 cells: {line}"));
        };
        let krate = names(krate).into_iter().next().ok_or_else(|| format!("no crate name in: {line}"))?;
        let folder = names(folder).into_iter().next().ok_or_else(|| format!("no folder in: {line}"))?;
        let row = Row { folder: folder.trim_end_matches('/').to_string(), may_use: names(may_use), never: names(never) };
        if rows.insert(krate.clone(), row).is_some() {
            return Err(format!("crate '{krate}' is listed twice"));
        }
    }
    Ok(rows)
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

/// Package names printed by `cargo tree` (one package per line, no prefix).
fn tree(krate: &str, depth: Option<usize>) -> BTreeSet<String> {
    let mut c = cargo();
    c.args(["tree", "--offline", "--locked", "-p", krate, "-e", "normal", "--prefix", "none", "-f", "{p}"]);
    if let Some(d) = depth {
        c.args(["--depth", &d.to_string()]);
    }
    let out = run_command(&format!("cargo tree -p {krate}"), &mut c).unwrap_or_else(|e| panic!("{e}"));
    out.lines().filter_map(|l| l.split_whitespace().next()).filter(|n| *n != krate).map(str::to_string).collect()
}

/// Workspace members: package name -> folder relative to the root.
fn members() -> BTreeMap<String, String> {
    let out = run_command("cargo metadata", cargo().args(["metadata", "--offline", "--no-deps", "--format-version", "1"]))
        .unwrap_or_else(|e| panic!("{e}"));
    let meta: serde_json::Value = serde_json::from_str(&out).expect("cargo metadata prints JSON");
    let root = workspace_root();
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let manifest = std::path::Path::new(p["manifest_path"].as_str().expect("manifest_path"));
            let dir = manifest.parent().expect("manifest in a folder").strip_prefix(&root).expect("member inside the workspace");
            (p["name"].as_str().expect("name").to_string(), dir.display().to_string())
        })
        .collect()
}

#[test]
fn codemap_parser_reads_cells_and_rejects_bad_rows() {
    let text = "# A\n## Codemap\n| crate | folder | concern | may use | never |\n|---|---|---|---|---|\n\
                | `a` | `a/` | x | `b` | `tokio`, `zenoh` |\n| `b` | `b/` | y | | |\n## Invariants\n| `c` | `c/` | z | | |\n";
    let rows = codemap(text).expect("parses");
    assert_eq!(rows.keys().collect::<Vec<_>>(), ["a", "b"], "rows after the section are not the codemap's");
    assert_eq!(rows["a"].folder, "a");
    assert_eq!(rows["a"].may_use, BTreeSet::from(["b".to_string()]));
    assert_eq!(rows["a"].never, BTreeSet::from(["tokio".to_string(), "zenoh".to_string()]));
    assert!(rows["b"].never.is_empty());
    assert!(codemap("## Codemap\n| `a` | `a/` | x |\n").is_err(), "a short row is an error");
    assert!(codemap("## Codemap\n| `a` | `a/` | x | | |\n| `a` | `a/` | x | | |\n").is_err(), "a crate listed twice is an error");
    assert!(codemap("# nothing\n").is_err());
}

#[test]
fn codemap_matches_the_dependency_graph() {
    let text = std::fs::read_to_string(workspace_root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md at the root");
    let rows = codemap(&text).expect("a codemap");
    let members = members();
    let listed: BTreeSet<&String> = rows.keys().collect();
    let actual: BTreeSet<&String> = members.keys().collect();
    assert_eq!(listed, actual, "the codemap must list exactly the workspace members");
    let mut problems = Vec::new();
    for (krate, row) in &rows {
        if members[krate] != row.folder {
            problems.push(format!("{krate}: the codemap says folder '{}', the workspace has '{}'", row.folder, members[krate]));
        }
        let direct = tree(krate, Some(1));
        for dep in direct.iter().filter(|d| members.contains_key(*d)) {
            if !row.may_use.contains(dep) {
                problems.push(format!("{krate} depends on the workspace crate {dep}, which the codemap does not allow"));
            }
        }
        let all = tree(krate, None);
        assert!(all.is_superset(&direct), "{krate}: the full tree must contain the direct dependencies");
        for bad in row.never.intersection(&all) {
            problems.push(format!("{krate} depends (directly or through others) on {bad}, which the codemap forbids"));
        }
    }
    // The check sees through crates: the runtime reaches tokio and Zenoh, the robot nodes reach
    // hiroz through lop_msgs's `ros` feature.
    let runtime = tree("lop_runtime", None);
    assert!(runtime.contains("tokio") && runtime.contains("zenoh"), "{runtime:?}");
    assert!(tree("robot_node", None).contains("hiroz"));
    // The pure crates build without the torch wheel, whatever the codemap's row says: nothing
    // they depend on binds libtorch.
    for pure in ["lop_core", "lop_codec", "lop_fleet"] {
        let deps = tree(pure, None);
        let torch: Vec<&String> = deps.iter().filter(|d| d.starts_with("tch") || d.starts_with("torch")).collect();
        assert!(torch.is_empty(), "{pure} must build without libtorch, but depends on {torch:?}");
    }
    assert!(tree("lop_fleet", None).contains("lop_core"), "the check sees lop_fleet's dependencies");
    assert!(problems.is_empty(), "ARCHITECTURE.md's codemap is broken:\n{}", problems.join("\n"));
}

/// The `mod NAME;` lines of a test binary's root file.
fn declared_modules(root_file: &str) -> BTreeSet<String> {
    root_file
        .lines()
        .filter_map(|l| l.trim().strip_prefix("mod ").and_then(|rest| rest.strip_suffix(';')))
        .map(|name| name.trim().to_string())
        .collect()
}

#[test]
fn declared_modules_reads_mod_lines_only() {
    let m = declared_modules("//! mod not_this;\nmod chaos;\n  mod soak;\nmod inline {\n}\nuse crate::common;\n");
    assert_eq!(m, ["chaos", "soak"].into_iter().map(String::from).collect::<BTreeSet<_>>());
}

/// Crates with `autotests = false` build their `tests/*.rs` as modules of one binary
/// (ARCHITECTURE.md, "One integration-test binary per crate"): a file added to `tests/` and not
/// declared in that binary, nor a `[[test]]` of its own, would never be compiled or run.
#[test]
fn every_integration_test_file_is_built() {
    let out = run_command("cargo metadata", cargo().args(["metadata", "--offline", "--no-deps", "--format-version", "1"]))
        .unwrap_or_else(|e| panic!("{e}"));
    let meta: serde_json::Value = serde_json::from_str(&out).expect("cargo metadata prints JSON");
    let mut missing = Vec::new();
    let mut checked = 0;
    for p in meta["packages"].as_array().expect("packages") {
        let manifest = std::path::Path::new(p["manifest_path"].as_str().expect("manifest_path"));
        let tests_dir = manifest.parent().expect("manifest in a folder").join("tests");
        let Ok(entries) = std::fs::read_dir(&tests_dir) else { continue };
        let mut built = BTreeSet::new();
        for t in p["targets"].as_array().expect("targets") {
            if !t["kind"].as_array().expect("kind").iter().any(|k| k == "test") {
                continue;
            }
            let src = std::path::PathBuf::from(t["src_path"].as_str().expect("src_path"));
            if src.parent() == Some(tests_dir.as_path()) {
                built.insert(src.file_stem().expect("a file").to_string_lossy().to_string());
                let text = std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
                built.extend(declared_modules(&text));
            }
        }
        for e in entries {
            let path = e.expect("a readable tests/ entry").path();
            if path.extension().is_some_and(|x| x == "rs") {
                checked += 1;
                let stem = path.file_stem().expect("a file").to_string_lossy().to_string();
                if !built.contains(&stem) {
                    missing.push(path.display().to_string());
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} files under the members' tests/ folders: is this the workspace?");
    assert!(missing.is_empty(), "test files no test binary builds (declare them in tests/all.rs or as a [[test]]): {missing:?}");
}

#[test]
fn import_reader_follows_use_paths_and_finds_circles() {
    let decls = imports::use_declarations(
        "use std::fmt;\npub use crate::a::{A, b::{C as D, self}};\npub(crate) use super::x::Y;\n// use crate::not::This;\n\
         fn f() {\n    use self::inner::Z;\n}\n#[cfg(test)]\nmod tests {\n    use crate::test_only::T;\n}\n",
    );
    assert_eq!(decls, ["std::fmt", "crate::a::{A, b::{C as D, self}}", "super::x::Y", "self::inner::Z"]);
    let paths = imports::expand("crate::a::{A, b::{C as D, self}}");
    let want: Vec<Vec<String>> = [&["crate", "a", "A"][..], &["crate", "a", "b", "C"], &["crate", "a", "b"]]
        .iter()
        .map(|p| p.iter().map(|s| s.to_string()).collect())
        .collect();
    assert_eq!(paths, want);

    let m = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(imports::module_of(std::path::Path::new("lib.rs")), Some(m(&[])));
    assert_eq!(imports::module_of(std::path::Path::new("a/mod.rs")), Some(m(&["a"])));
    assert_eq!(imports::module_of(std::path::Path::new("a/b.rs")), Some(m(&["a", "b"])));
    assert_eq!(imports::module_of(std::path::Path::new("bin/tool.rs")), None);
    let modules: BTreeSet<Vec<String>> = [m(&[]), m(&["a"]), m(&["a", "b"]), m(&["c"])].into_iter().collect();
    let from = m(&["a", "b"]);
    assert_eq!(imports::resolve(&from, &m(&["super", "Item"]), &modules), Some(m(&["a"])));
    assert_eq!(imports::resolve(&from, &m(&["crate", "c", "Thing", "method"]), &modules), Some(m(&["c"])));
    assert_eq!(imports::resolve(&m(&["a"]), &m(&["b", "Item"]), &modules), Some(m(&["a", "b"])), "a child module by name");
    assert_eq!(imports::resolve(&from, &m(&["serde", "Serialize"]), &modules), None, "another crate");

    // A crate on disk: lib -> a -> b -> a is a circle of a and b; c only imports.
    let dir = std::env::temp_dir().join(format!("lop-imports-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src/b")).expect("temp dir");
    assert_eq!(
        imports::inline_paths("x: $crate::a::B, y: crate::c::D<super::super::e::F>, // crate::z\n"),
        [vec!["crate".to_string(), "c".into(), "D".into()], vec!["super".to_string(), "super".into(), "e".into(), "F".into()]]
    );
    let files = [
        ("src/lib.rs", "mod a;\nmod b;\nmod c;\npub use a::A;\n"), // containment: no edge
        ("src/b/inner.rs", "pub(crate) type Kept = crate::c::C; // crate::a::A in a comment\n"),
        ("src/a.rs", "use crate::b::{B, helper};\npub struct A;\n"),
        ("src/b/mod.rs", "pub use inner::Kept;\nuse super::a::A;\npub struct B;\n#[cfg(test)]\nmod tests {\n    use crate::c::C;\n}\n"),
        ("src/c.rs", "use crate::{a::A, b::B};\npub struct C;\n"),
    ];
    for (path, text) in files {
        std::fs::write(dir.join(path), text).expect("write");
    }
    let graph = imports::crate_graph(&dir);
    assert_eq!(graph["src/c.rs"], ["src/a.rs", "src/b/mod.rs"].into_iter().map(String::from).collect());
    assert_eq!(graph["src/b/mod.rs"], ["src/a.rs"].into_iter().map(String::from).collect(), "no edge to its child nor from tests");
    assert_eq!(graph["src/b/inner.rs"], ["src/c.rs"].into_iter().map(String::from).collect(), "an inline path, not a comment");
    assert!(graph["src/lib.rs"].is_empty(), "{graph:?}");
    assert_eq!(imports::circles(&graph), vec![vec!["src/a.rs".to_string(), "src/b/mod.rs".to_string()]]);
    std::fs::write(dir.join("src/b/mod.rs"), "pub struct B;\n").expect("write");
    assert!(imports::circles(&imports::crate_graph(&dir)).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// No two source files of a crate import from each other, directly or around a longer circle
/// (issue 57); each circle is printed with the imports that close it.
#[test]
fn no_import_circle_between_files() {
    let root = workspace_root();
    let mut problems = Vec::new();
    let mut files = 0;
    for (krate, folder) in members() {
        let graph = imports::crate_graph(&root.join(&folder));
        files += graph.len();
        for circle in imports::circles(&graph) {
            let edges: Vec<String> = circle
                .iter()
                .flat_map(|from| graph[from].iter().filter(|to| circle.contains(to)).map(move |to| format!("{from} -> {to}")))
                .collect();
            problems.push(format!("{krate}: {}", edges.join(", ")));
        }
    }
    assert!(files >= 200, "only {files} source files read: is this the workspace?");
    assert!(problems.is_empty(), "import circles between files:\n{}", problems.join("\n"));
}
