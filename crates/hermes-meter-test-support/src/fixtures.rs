//! The recorded fixtures (`tests/fixtures/*.jsonl`) replayed at a price,
//! and the ledger's totals read straight from SQL to check every surface
//! against.

use std::path::{Path, PathBuf};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;

/// Every recorded fixture, in name order.
pub fn all_fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(crate::repository().join("tests/fixtures"))
        .expect("fixtures")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

/// Replays `files` with a price for the fixtures' mock model, so costs
/// are not all zero.
pub fn replay(store: &mut Writer, files: &[PathBuf]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let pricing = dir.path().join("pricing.toml");
    std::fs::write(
        &pricing,
        "[models.\"mock-model\"]\ninput = 3.0\noutput = 15.0\ncache_read = 0.3\ncache_write = 3.75\n",
    )
    .expect("pricing");
    store.set_prices(hermes_meter_runtime::config::load_prices(&pricing).expect("prices"));
    let mut stats = ReplayStats::default();
    for f in files {
        replay_file(store, f, DecodeOptions::default(), &mut stats).expect("replay");
    }
    assert!(stats.bad_lines.is_empty(), "{:?}", stats.bad_lines);
    // The fixtures were recorded hours ago: close what their processes left open.
    store
        .close_idle_runs(hermes_meter_store::unix_now(), 60.0)
        .expect("close idle");
}

/// The ledger's own totals, straight from SQL.
#[derive(Debug, Clone, PartialEq)]
pub struct Ledger {
    pub calls: i64,
    pub input: i64,
    pub cache_read: i64,
    pub cache_write: i64,
    pub output: i64,
    pub reasoning: i64,
    pub cost: f64,
    /// What cache reads and writes saved at [`replay`]'s prices.
    pub cache_saved: f64,
    pub errors: i64,
    pub tools: i64,
    pub turns: i64,
    pub sessions: i64,
}

pub fn ledger(path: &Path) -> Ledger {
    let conn = rusqlite::Connection::open(path).expect("open");
    let one = |sql: &str| -> f64 { conn.query_row(sql, [], |r| r.get::<_, f64>(0)).expect(sql) };
    Ledger {
        calls: one("SELECT COUNT(*) FROM llm_calls") as i64,
        input: one("SELECT COALESCE(SUM(input_tokens), 0) FROM llm_calls") as i64,
        cache_read: one("SELECT COALESCE(SUM(cache_read_tokens), 0) FROM llm_calls") as i64,
        cache_write: one("SELECT COALESCE(SUM(cache_write_tokens), 0) FROM llm_calls") as i64,
        output: one("SELECT COALESCE(SUM(output_tokens), 0) FROM llm_calls") as i64,
        reasoning: one("SELECT COALESCE(SUM(reasoning_tokens), 0) FROM llm_calls") as i64,
        cost: one("SELECT COALESCE(SUM(cost_usd), 0) FROM llm_calls"),
        cache_saved: one(
            "SELECT COALESCE(SUM(cache_read_tokens * (3.0 - 0.3) + cache_write_tokens * (3.0 - 3.75)), 0) / 1e6
               FROM llm_calls WHERE model = 'mock-model' AND cost_source != 'held'",
        ),
        errors: one("SELECT COUNT(*) FROM llm_call_errors") as i64,
        tools: one("SELECT COUNT(*) FROM tool_calls WHERE ended_at IS NOT NULL AND proxy = 0") as i64,
        turns: one("SELECT COUNT(*) FROM turns WHERE outcome IS NOT NULL") as i64,
        sessions: one("SELECT COUNT(*) FROM runs WHERE status != 'running'") as i64,
    }
}

/// A replay file with one LLM call of `session` made now, 1,000,000 input
/// tokens of the mock model, so $3.00 at [`replay`]'s price: spend inside
/// today's budget window (the fixtures are days old).
pub fn call_now(dir: &Path, session: &str) -> PathBuf {
    let now = hermes_meter_store::unix_now();
    let turn = format!("{session}:t");
    let lines = [
        serde_json::json!({"hook": "on_session_start", "t": now,
            "kwargs": {"session_id": session, "platform": "cli", "model": "mock-model"}}),
        serde_json::json!({"hook": "post_api_request", "t": now + 0.5,
            "kwargs": {"session_id": session, "turn_id": turn, "api_request_id": format!("{turn}:api:1"),
                       "model": "mock-model", "provider": "custom", "api_duration": 0.5,
                       "usage": {"input_tokens": 1_000_000, "output_tokens": 0}}}),
    ];
    let path = dir.join(format!("{session}.jsonl"));
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&path, text.join("\n") + "\n").expect("write the call");
    path
}

/// Two sums equal but for floating-point rounding.
pub fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}
