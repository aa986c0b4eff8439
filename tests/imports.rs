//! The import graph between a crate's source files, read from their `use` declarations and the
//! `crate::`/`super::` paths written in their code, and the circles in it (issue 57: "no import
//! circles"). A file imports another when one of those paths names an item of the other's
//! module: `crate::`, `super::`, `self::` and a child module's name are followed inside the
//! crate; other crates' paths are left out (cargo already refuses circles between crates).
//!
//! - A module reaching into its own submodules (`pub use child::Item`, the facade of a folder)
//!   is containment, not an import: only the child's imports from its parent count, so a
//!   folder's `mod.rs` and its files form no circle by that alone.
//! - Test code is left out: files named `tests.rs` or `*_tests.rs`, and anything after a `#[cfg(test)]` module's
//!   opening line. Comments are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside one crate (`[]` is the crate root).
type ModPath = Vec<String>;

/// The module path of a source file under `src/`, or `None` for files outside the library's tree
/// (binaries' roots and `src/bin/`).
pub fn module_of(rel: &Path) -> Option<ModPath> {
    let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let (file, dirs) = parts.split_last()?;
    if dirs.first().is_some_and(|d| d == "bin") || (dirs.is_empty() && file == "main.rs") {
        return None;
    }
    let mut path: ModPath = dirs.to_vec();
    match file.strip_suffix(".rs")? {
        "lib" if dirs.is_empty() => {}
        "mod" => {}
        stem => path.push(stem.to_string()),
    }
    Some(path)
}

/// The text of a file up to its first `#[cfg(test)]` module (the test code it holds).
fn non_test_text(text: &str) -> &str {
    let mut offset = 0;
    let mut lines = text.split_inclusive('\n').peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            let next = lines.clone().map(str::trim).find(|l| !l.starts_with("#["));
            if next.is_some_and(|l| l.starts_with("mod ") || l.starts_with("pub mod ")) {
                return &text[..offset];
            }
        }
        offset += line.len();
    }
    text
}

/// The `use` declarations of a file, each as one string without `pub`, `use` and `;`.
pub fn use_declarations(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in non_test_text(text).lines() {
        let line = line.split("//").next().unwrap_or("").trim();
        if let Some(acc) = current.as_mut() {
            acc.push_str(line);
        } else {
            let rest = line.strip_prefix("pub ").or_else(|| line.split_once(") ").filter(|(v, _)| v.starts_with("pub(")).map(|(_, r)| r));
            let rest = rest.unwrap_or(line);
            if let Some(body) = rest.strip_prefix("use ") {
                current = Some(body.to_string());
            }
        }
        if let Some(acc) = current.take_if(|acc| acc.contains(';')) {
            out.push(acc.split(';').next().unwrap_or("").trim().to_string());
        }
    }
    out
}

/// The `crate::...` and `super::...` paths written in a file's code outside `use` declarations
/// (`crate::postprocess::PostOp` in a type, say), each split at `::`.
pub fn inline_paths(text: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in non_test_text(text).lines() {
        let code = line.split("//").next().unwrap_or("");
        if code.trim_start().starts_with("use ") || code.contains("pub use ") {
            continue;
        }
        for start in ["crate::", "super::"] {
            for (at, _) in code.match_indices(start) {
                let before = code[..at].chars().next_back();
                if before.is_some_and(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '$')) {
                    continue; // `$crate::`, `my_crate::`, or a `super::` after `super::`
                }
                let path: String = code[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
                out.push(path.split("::").filter(|s| !s.is_empty()).map(String::from).collect());
            }
        }
    }
    out
}

/// The paths of one `use` tree: `a::{b, c::{d as e, self}}` gives `a::b`, `a::c::d`, `a::c`.
pub fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace() || *c == ' ').collect();
    let mut out = Vec::new();
    expand_into(&[], tree.trim(), &mut out);
    out
}

fn expand_into(prefix: &[String], tree: &str, out: &mut Vec<Vec<String>>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open].split("::").map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
        let inner = tree[open + 1..].trim_end().strip_suffix('}').unwrap_or(&tree[open + 1..]);
        let base = [prefix, &head[..]].concat();
        for part in split_top_level(inner) {
            expand_into(&base, part, out);
        }
        return;
    }
    let name = tree.split(" as ").next().unwrap_or(tree).trim();
    if name.is_empty() {
        return;
    }
    let mut path = prefix.to_vec();
    path.extend(name.split("::").map(str::trim).filter(|s| *s != "self").map(String::from));
    out.push(path);
}

/// `b, c::{d, e}, f` split at the commas outside braces.
fn split_top_level(list: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    parts.into_iter().filter(|p| !p.trim().is_empty()).collect()
}

/// The module a `use` path starting in module `from` reaches, as the longest prefix of it that
/// is one of `modules`; `None` for paths into other crates.
pub fn resolve(from: &ModPath, path: &[String], modules: &BTreeSet<ModPath>) -> Option<ModPath> {
    let (mut base, rest): (ModPath, &[String]) = match path.first().map(String::as_str) {
        Some("crate") => (Vec::new(), &path[1..]),
        Some("self") => (from.clone(), &path[1..]),
        Some("super") => {
            let supers = path.iter().take_while(|s| *s == "super").count();
            (from[..from.len().checked_sub(supers)?].to_vec(), &path[supers..])
        }
        Some(first) if modules.contains(&[&from[..], &[first.to_string()]].concat()) => (from.clone(), path),
        _ => return None,
    };
    let mut best = base.clone();
    for segment in rest {
        base.push(segment.clone());
        if modules.contains(&base) {
            best = base.clone();
        }
    }
    Some(best)
}

/// Every `.rs` file under `dir`, recursively, in a stable order.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") && !path.to_string_lossy().ends_with("tests.rs") {
            out.push(path);
        }
    }
}

/// The import graph of one crate's library: file -> files it imports from, paths relative to
/// `src`'s parent.
pub fn crate_graph(crate_dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = crate_dir.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut by_module: BTreeMap<ModPath, String> = BTreeMap::new();
    let mut texts = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src");
        let Some(module) = module_of(rel) else { continue };
        let name = Path::new("src").join(rel).display().to_string();
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        by_module.insert(module.clone(), name.clone());
        texts.push((module, name, text));
    }
    let modules: BTreeSet<ModPath> = by_module.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, name, text) in texts {
        let targets: BTreeSet<String> = use_declarations(&text)
            .iter()
            .flat_map(|decl| expand(decl))
            .chain(inline_paths(&text))
            .filter_map(|path| resolve(&module, &path, &modules))
            .filter(|target| !target.starts_with(&module)) // its own submodules: containment
            .filter_map(|target| by_module.get(&target).cloned())
            .filter(|target| *target != name)
            .collect();
        graph.insert(name, targets);
    }
    graph
}

/// The circles of a graph: its strongly connected components of more than one node (Tarjan).
pub fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, node: &'a str) {
            let i = self.index.len();
            self.index.insert(node, i);
            self.low.insert(node, i);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.to_string());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk =
        Walk { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), found: Vec::new() };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}
