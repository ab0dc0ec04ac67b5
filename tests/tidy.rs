//! Rules of ARCHITECTURE.md that Cargo does not enforce, checked on the
//! source: inside each crate, the top-level modules depend on each other
//! one way only (no cycles), so a crate's layers stay what the map says;
//! and what each crate's whole dependency closure may hold (no async
//! runtime, network or SQLite under the pure model, no Python under
//! anything but the binding).
//!
//! A module's dependencies are the `crate::name` paths its code names,
//! comments and test code (`tests.rs`, and everything after a file's
//! `#[cfg(test)]` at column 0, where this project keeps its tests) aside.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The source roots of the workspace's product crates (the test-support
/// crate is test code, like `tests/`).
fn crate_roots() -> Vec<PathBuf> {
    all_crate_roots()
        .into_iter()
        .filter(|src| !src.parent().is_some_and(|c| c.ends_with("hermes-meter-test-support")))
        .collect()
}

/// The source roots of every crate of the workspace.
fn all_crate_roots() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut roots = vec![root.join("src")];
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let src = entry.expect("entry").path().join("src");
        if src.is_dir() {
            roots.push(src);
        }
    }
    roots.sort();
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

/// The packages in `krate`'s normal dependency closure (`cargo tree`,
/// offline: the lock file names them all).
fn closure(krate: &str) -> BTreeSet<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--offline", "-e", "normal", "--prefix", "none", "-p", krate])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn each_crates_dependency_closure_holds_only_what_its_layer_may() {
    let forbidden = |krate: &str, names: &[&str]| {
        let have = closure(krate);
        let found: Vec<&&str> = names.iter().filter(|n| have.contains(**n)).collect();
        assert!(found.is_empty(), "{krate} depends on {found:?}");
    };
    // The model is pure: no async runtime, no network, no SQLite, no Python.
    forbidden(
        "hermes-meter-model",
        &[
            "tokio",
            "hyper",
            "h2",
            "tonic",
            "rustls",
            "rusqlite",
            "libsqlite3-sys",
            "pyo3",
            "postgres",
        ],
    );
    // The store: SQLite, nothing that sends or runs tasks.
    forbidden(
        "hermes-meter-store",
        &["tokio", "hyper", "h2", "tonic", "rustls", "pyo3", "postgres"],
    );
    // Nothing but the binding knows Python.
    forbidden("hermes-meter-runtime", &["pyo3"]);
    forbidden("hermes-meter", &["pyo3"]);
}

/// Every file of this repository that a document or a comment names by its
/// path exists: a path names a file when it starts at one of the
/// repository's top directories and ends with a file extension, and it is
/// read from the repository's root or, in a nested project (`semconv/`),
/// from a directory on the way to the naming file. Hermes's own `tools/*.py` are
/// Hermes's files, not ours.
#[test]
fn every_path_named_in_docs_and_comments_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    const TOPS: [&str; 13] = [
        "src/",
        "crates/",
        "tests/",
        "docs/",
        "scripts/",
        "python/",
        "collector-config/",
        "benches/",
        "catalog/",
        "semconv/",
        "examples/",
        "tools/",
        ".ci/",
    ];
    const EXTENSIONS: [&str; 12] = [
        "rs", "md", "py", "sh", "yaml", "yml", "toml", "sql", "tsv", "jsonl", "json", "go",
    ];
    fn files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if path.is_dir() {
                if !matches!(name, "target" | ".git" | "node_modules" | "__pycache__") {
                    files(&path, out);
                }
            } else if ["md", "rs", "py", "sh", "toml", "yaml"]
                .iter()
                .any(|e| path.extension().is_some_and(|x| x == *e))
            {
                out.push(path);
            }
        }
    }
    let mut all = Vec::new();
    files(root, &mut all);
    let mut missing = Vec::new();
    for file in &all {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let tokens = text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c)));
        for token in tokens {
            let token = token.trim_end_matches('.');
            let Some(top) = TOPS.iter().find(|t| token.starts_with(**t)) else {
                continue;
            };
            let Some((_, ext)) = token.rsplit_once('.') else {
                continue;
            };
            if !EXTENSIONS.contains(&ext) || token.contains("..") || (*top == "tools/" && ext == "py") {
                continue;
            }
            // From the root, or from a directory on the way to the file
            // (a nested project names its own `docs/`).
            let found = file
                .ancestors()
                .skip(1)
                .take_while(|dir| dir.starts_with(root))
                .any(|dir| dir.join(token).exists());
            if !found {
                missing.push(format!(
                    "{}: {token}",
                    file.strip_prefix(root).unwrap_or(file).display()
                ));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "paths that name no file:\n{}", missing.join("\n"));
}

/// Every setting the code reads from the environment (`HERMES_METER_*`,
/// `OTEL_*` string literals) is in `docs/configuration.md`: by its name, a
/// trace setting also by its per-signal short form (`_TRACES_ENDPOINT`),
/// a metric or log setting by `OTEL_EXPORTER_OTLP_METRICS_*` /
/// `OTEL_EXPORTER_OTLP_LOGS_*`.
#[test]
fn every_setting_read_is_documented() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manual = std::fs::read_to_string(root.join("docs/configuration.md")).expect("docs/configuration.md");
    let mut sources = Vec::new();
    for dir in crate_roots() {
        rust_files(&dir, &mut sources);
    }
    for entry in std::fs::read_dir(root.join("python/hermes_meter")).expect("python/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "py") {
            sources.push(path);
        }
    }
    let mut undocumented = BTreeSet::new();
    for file in &sources {
        let text = std::fs::read_to_string(file).expect("read");
        for literal in text.split('"').skip(1).step_by(2) {
            let setting = literal.starts_with("HERMES_METER_") || literal.starts_with("OTEL_");
            if !setting
                || !literal
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                continue;
            }
            let short = ["TRACES", "METRICS", "LOGS"].iter().find_map(|signal| {
                let prefix = format!("OTEL_EXPORTER_OTLP_{signal}_");
                literal.strip_prefix(&prefix).map(|rest| (*signal, rest))
            });
            let documented = manual.contains(literal)
                || match short {
                    Some(("TRACES", rest)) => manual.contains(&format!("`_TRACES_{rest}`")),
                    Some((signal, _)) => manual.contains(&format!("OTEL_EXPORTER_OTLP_{signal}_*")),
                    None => false,
                };
            if !documented {
                undocumented.insert(format!(
                    "{literal} ({})",
                    file.strip_prefix(root).unwrap_or(file).display()
                ));
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "settings read but not in docs/configuration.md:\n{}",
        undocumented.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// Every crate takes the workspace's lints (`unreachable_pub`, no unsafe
/// code outside the reviewed blocks), so a new crate cannot opt out by
/// forgetting them.
#[test]
fn every_crate_takes_the_workspace_lints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    assert!(workspace.contains("[workspace.lints.rust]\n"), "no workspace lints");
    assert!(workspace.contains("\nunreachable_pub = \"warn\"\n") && workspace.contains("\nunsafe_code = \"deny\"\n"));
    for src in all_crate_roots() {
        let manifest = src.parent().expect("crate dir").join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).expect("manifest");
        assert!(
            text.contains("\n[lints]\nworkspace = true\n"),
            "{} does not take the workspace lints",
            manifest.display()
        );
    }
}

/// The environment is read in the runtime's `config/` only (through its
/// `process_var`, which also reads `$HERMES_HOME/.env`): everywhere else a
/// setting is a value `config/` resolved, so the command line and the
/// plugin read the same settings. Test code aside.
#[test]
fn the_environment_is_read_in_config_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = root.join("crates/hermes-meter-runtime/src/config");
    let mut files = Vec::new();
    for dir in crate_roots() {
        rust_files(&dir, &mut files);
    }
    let mut readers = Vec::new();
    for file in files
        .iter()
        .filter(|f| !f.starts_with(&config) && !f.ends_with("tests.rs"))
    {
        let text = std::fs::read_to_string(file).expect("read");
        // Code before the file's tests (at column 0, where they are kept).
        let code = text.split("\n#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or_default();
            if [
                "env::var(",
                "env::var_os(",
                "env::vars(",
                "process_var(",
                "process_var_set(",
            ]
            .iter()
            .any(|call| line.contains(call))
            {
                readers.push(format!(
                    "{}:{}",
                    file.strip_prefix(root).unwrap_or(file).display(),
                    n + 1
                ));
            }
        }
    }
    assert!(
        readers.is_empty(),
        "the environment read outside config/:\n{}",
        readers.join("\n")
    );
}

/// Paths name their crate: no crate re-exports another workspace crate's
/// items (`pub use hermes_meter_store::...`, at any visibility) or imports
/// one by glob, and none renames a workspace crate (`use hermes_meter_model
/// as model`), so `hermes_meter_store::Writer` is the only name of the
/// store's writer and a reader always sees which crate a path is in.
#[test]
fn no_crate_reexports_another_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    const CRATES: [&str; 5] = [
        "hermes_meter",
        "hermes_meter_model",
        "hermes_meter_store",
        "hermes_meter_runtime",
        "hermes_meter_python",
    ];
    let mut files = Vec::new();
    for dir in crate_roots() {
        rust_files(&dir, &mut files);
    }
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        // A `use` item, joined onto one line up to its `;`.
        let mut item = String::new();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default().trim();
            if item.is_empty()
                && !(code.starts_with("use ") || code.starts_with("pub use ") || code.starts_with("pub("))
            {
                continue;
            }
            item.push_str(code);
            item.push(' ');
            if !code.ends_with(';') {
                continue;
            }
            let text = std::mem::take(&mut item);
            let Some((vis, path)) = text.split_once("use ") else {
                continue;
            };
            let krate = path.split("::").next().unwrap_or_default().trim();
            let krate = krate
                .split(" as ")
                .next()
                .unwrap_or_default()
                .trim_end_matches(';')
                .trim();
            if !CRATES.contains(&krate) {
                continue;
            }
            let public = vis.trim_start().starts_with("pub");
            let glob = path.contains("::*");
            let renamed = path.split("::").count() == 1 && path.contains(" as ");
            if public || glob || renamed {
                found.push(format!(
                    "{}: {}",
                    file.strip_prefix(root).unwrap_or(file).display(),
                    text.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "paths through another crate's shim:\n{}",
        found.join("\n")
    );
}

/// No source file holds more than 700 lines of code (its tests, kept after
/// a `#[cfg(test)] mod tests` at column 0 or in a `tests.rs`, aside): a file
/// a newcomer can read in one sitting. The files still over it are listed
/// with the most they may hold, so the list can only shrink: one that grows
/// fails, and one that drops under the line must leave the list.
#[test]
fn no_source_file_is_over_700_lines() {
    const LIMIT: usize = 700;
    const STILL_OVER: [(&str, usize); 5] = [
        ("crates/hermes-meter-runtime/src/export/mod.rs", 1064),
        ("src/cli/budget.rs", 745),
        ("crates/hermes-meter-runtime/src/budget/gate.rs", 837),
        ("crates/hermes-meter-store/src/doctor.rs", 869),
        ("crates/hermes-meter-runtime/src/bridge/writer.rs", 828),
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in crate_roots() {
        rust_files(&dir, &mut files);
    }
    let mut wrong = Vec::new();
    for file in &files {
        let name = file.strip_prefix(root).unwrap_or(file).to_string_lossy().into_owned();
        if name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read");
        let code = text.split("\n#[cfg(test)]\nmod tests").next().unwrap_or_default();
        let lines = code.lines().count();
        match STILL_OVER.iter().find(|(path, _)| *path == name) {
            Some((_, most)) if lines > *most => wrong.push(format!("{name}: {lines} lines, listed at {most}")),
            Some(_) if lines <= LIMIT => wrong.push(format!("{name}: {lines} lines, take it off the list")),
            Some(_) => {}
            None if lines > LIMIT => wrong.push(format!("{name}: {lines} lines, over {LIMIT}")),
            None => {}
        }
    }
    for (path, _) in STILL_OVER {
        assert!(root.join(path).exists(), "{path} is listed but gone");
    }
    assert!(
        wrong.is_empty(),
        "source files over {LIMIT} lines:\n{}",
        wrong.join("\n")
    );
}

/// A path a source comment names in short (`ledger/calls.rs`, from its
/// crate's `src/`) is a file of the crate that names it; a file of another
/// crate is named from the repository's root
/// (`crates/hermes-meter-store/src/rollup.rs`), so a reader always sees which
/// crate a file is in. Documents outside the crates name short paths of
/// some crate's `src/`.
#[test]
fn a_short_path_names_a_file_of_its_own_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let roots = crate_roots();
    let mut files = Vec::new();
    for dir in &roots {
        rust_files(dir, &mut files);
    }
    let mut wrong = Vec::new();
    for file in &files {
        let own = roots.iter().find(|r| file.starts_with(r)).expect("a crate's file");
        let text = std::fs::read_to_string(file).expect("read");
        for token in text.split(|c: char| !(c.is_ascii_alphanumeric() || "_./-".contains(c))) {
            let token = token.trim_end_matches('.');
            let short = token.contains('/')
                && (token.ends_with(".rs") || token.ends_with(".sql"))
                && !token.starts_with(['.', '/'])
                && !["src/", "crates/", "tests/", "benches/", "python/", "docs/", "scripts/"]
                    .iter()
                    .any(|t| token.starts_with(t));
            if !short {
                continue;
            }
            let found = own.join(token).exists()
                || file
                    .ancestors()
                    .skip(1)
                    .take_while(|d| d.starts_with(own))
                    .any(|d| d.join(token).exists());
            if !found {
                wrong.push(format!(
                    "{}: {token}",
                    file.strip_prefix(root).unwrap_or(file).display()
                ));
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "short paths that are not the naming crate's files:\n{}",
        wrong.join("\n")
    );
}
