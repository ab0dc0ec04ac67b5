//! Rules of ARCHITECTURE.md that Cargo does not enforce, checked on the
//! source: inside each crate, the top-level modules depend on each other
//! one way only (no cycles), so a crate's layers stay what the map says.
//!
//! A module's dependencies are the `crate::name` paths its code names,
//! comments and test code (`tests.rs`, and everything after a file's
//! `#[cfg(test)]` at column 0, where this project keeps its tests) aside.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source roots of the workspace's crates.
fn crate_roots() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut roots = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let src = entry.expect("entry").path().join("src");
        if src.is_dir() {
            roots.push(src);
        }
    }
    roots
}

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("read dir") {
            rust_files(&entry.expect("entry").path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
        out.push(path.to_path_buf());
    }
}

/// The names after `crate::` in the code (not comments, not tests) of `file`.
fn crate_paths(file: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(file).expect("read");
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = code.split(" //").next().unwrap_or(code);
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// Each top-level module of the crate at `src` with the others it uses.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("read src") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if name == "lib" || name == "main" || !(path.is_dir() || path.extension().is_some_and(|e| e == "rs")) {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&path, &mut files);
        let uses: BTreeSet<String> = files.iter().flat_map(|f| crate_paths(f)).collect();
        modules.insert(name, uses);
    }
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    for (name, uses) in modules.iter_mut() {
        uses.retain(|u| names.contains(u) && u != name);
    }
    modules
}

/// A cycle through `start`, if there is one.
fn cycle_from(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeSet<String>>,
        start: &str,
        at: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in &graph[at] {
            if next == start {
                path.push(next.clone());
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, start, next, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    walk(graph, start, start, &mut path, &mut BTreeSet::new()).then_some(path)
}

#[test]
fn no_crate_has_modules_that_depend_on_each_other_both_ways() {
    let mut cycles = Vec::new();
    for src in crate_roots() {
        let graph = module_graph(&src);
        assert!(graph.len() > 1, "{} has modules", src.display());
        for name in graph.keys() {
            if let Some(cycle) = cycle_from(&graph, name) {
                cycles.push(format!("{}: {}", src.display(), cycle.join(" -> ")));
                break;
            }
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

/// The check itself finds a cycle where there is one.
#[test]
fn a_cycle_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(
        cycle_from(&graph, "a"),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(cycle_from(&graph, "d"), None);
}
