//! The recorded Hermes stream (every fixture's hook calls), and copies of
//! it with fresh ids: what the retention tests and the size benchmark fill
//! stores with. A module of the store's test binary, which links nothing
//! but the store and the model; `hermes-meter-test-support` includes this
//! same file by its path, for the tests and benches above the store.

// Public for the support crate, which includes this file as a public module.
#![allow(unreachable_pub)]

/// The tables whose row counts `status` shows (`store_counts`), written
/// out here so a table the store forgot to count fails the tests.
pub const COUNTED_TABLES: [&str; 9] = [
    "journal",
    "runs",
    "turns",
    "llm_calls",
    "llm_call_errors",
    "tool_calls",
    "subagent_edges",
    "outbox",
    "metric_log",
];

/// Every line of every fixture, file by file in name order.
pub fn fixture_lines() -> Vec<String> {
    // The workspace's fixtures, from the root crate or a crate under crates/.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("tests/fixtures"))
        .find(|d| d.is_dir())
        .expect("tests/fixtures in the workspace");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("read fixture")
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Copy `copy` of `lines`: every id made fresh (each Hermes id embeds its
/// session id, whose date part is replaced) and every call moved `shift`
/// seconds later (negative: earlier), with the times its kwargs carry.
pub fn session_copy(lines: &[String], copy: usize, shift: f64) -> String {
    let stamp = format!("{:08}_", 10_000_000 + copy);
    let mut out = String::new();
    for line in lines {
        let mut v: serde_json::Value = serde_json::from_str(&line.replace("20261130_", &stamp)).expect("json line");
        if let Some(t) = v["t"].as_f64() {
            v["t"] = serde_json::json!(t + shift);
        }
        // The API hooks' own times move with the call.
        for key in ["started_at", "ended_at"] {
            if let Some(t) = v["kwargs"][key].as_f64() {
                v["kwargs"][key] = serde_json::json!(t + shift);
            }
        }
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out
}
