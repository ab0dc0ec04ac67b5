//! Viewer benchmark: how long `hermes-meter ui` takes to answer its pages
//! with 100,000 sessions and 1,000,000 LLM calls in the store.
//!
//! Run: `cargo bench --bench viewer` (`-- --sessions N` for another size,
//! `-- --iters N` for more samples per page, `-- --rebuild` to build the
//! store again). Target: index and session pages p95 ≤ 100 ms.
//!
//! The store is built once and kept under `target/bench-viewer/`: one
//! session (3 turns, 10 successful LLM calls and a failed attempt, 8 tool
//! calls) is applied through the real decode and apply path, then its rows
//! (runs, turns, api_requests, llm_calls, llm_call_errors, tool_calls) are
//! copied in SQL once per session with fresh ids and times (a day holds
//! about 1,000 sessions), and platforms, models, senders, cron jobs and
//! costs varied, so the indexes and the metric triggers see the rows a
//! long-used store would have. The journal and outbox are not copied: no
//! page reads them beyond the journal's newest row.
//!
//! Requests go over loopback HTTP to the viewer running in this process,
//! one at a time, as a browser sends them.

use hermes_meter_test_support::http_get;

use std::path::{Path, PathBuf};
use std::time::Instant;

use hermes_meter::ui::{UiConfig, UiServer};
use hermes_meter_model::hook::{decode, DecodeOptions, Decoded};
use hermes_meter_model::span::SpanOptions;
use hermes_meter_store::{EventContext, Writer, DB_FILE_NAME};
use serde_json::{json, Value};

/// The template session's id; every copy replaces it in every id column.
const TEMPLATE: &str = "S0000000";
const START: f64 = 1_790_000_000.0;
/// Seconds between copies: ~1,000 sessions a day.
const SPACING: f64 = 86.4;

fn apply(store: &mut Writer, hook: &str, at: f64, kwargs: Value) {
    let map = kwargs.as_object().expect("kwargs").clone();
    let Decoded::Event(event, _) = decode(hook, &map, at, DecodeOptions::default()) else {
        panic!("{hook} did not decode");
    };
    store.apply(&event, &EventContext::default()).expect("apply");
}

/// One session through the ledger's own apply path.
fn template(store: &mut Writer) {
    let sid = TEMPLATE;
    let mut t = START;
    let mut tick = |d: f64| {
        t += d;
        t
    };
    apply(
        store,
        "on_session_start",
        tick(0.0),
        json!({"session_id": sid, "platform": "cli", "model": "gpt-4o"}),
    );
    let mut n = 0;
    for (turn, calls) in [4, 3, 3].into_iter().enumerate() {
        let turn_id = format!("{sid}:task:t{turn}");
        apply(
            store,
            "pre_llm_call",
            tick(0.1),
            json!({"session_id": sid, "turn_id": turn_id, "model": "gpt-4o", "platform": "cli", "sender_id": "u1"}),
        );
        for call in 0..calls {
            n += 1;
            let id = format!("{turn_id}:api:{n}");
            let base = json!({"session_id": sid, "turn_id": turn_id, "api_request_id": id, "model": "gpt-4o",
                              "provider": "openai", "base_url": "https://api.openai.com/v1", "platform": "cli"});
            apply(store, "pre_api_request", tick(0.05), base.clone());
            if turn == 0 && call == 0 {
                let mut err = base.clone();
                err["retry_count"] = json!(0);
                err["max_retries"] = json!(3);
                err["status_code"] = json!(429);
                err["reason"] = json!("rate_limit");
                err["retryable"] = json!(true);
                apply(store, "api_request_error", tick(0.4), err);
                apply(store, "pre_api_request", tick(1.0), base.clone());
            }
            let mut done = base.clone();
            done["usage"] = json!({"input_tokens": 1200 + 800 * n, "output_tokens": 150,
                                   "cache_read_tokens": 4000, "cache_write_tokens": 0, "reasoning_tokens": 0});
            done["finish_reason"] = json!("tool_calls");
            apply(store, "post_api_request", tick(1.2), done);
            if call + 1 < calls || turn == 0 {
                let tool = json!({"session_id": sid, "turn_id": turn_id, "tool_name": "terminal",
                                  "tool_call_id": format!("call_{n}"), "args": {}});
                apply(store, "pre_tool_call", tick(0.01), tool.clone());
                let mut result = tool;
                result["result"] = json!("{\"exit_code\": 0, \"error\": null}");
                apply(store, "post_tool_call", tick(0.3), result);
            }
        }
        apply(
            store,
            "post_llm_call",
            tick(0.01),
            json!({"session_id": sid, "turn_id": turn_id, "model": "gpt-4o", "platform": "cli"}),
        );
        apply(
            store,
            "on_session_end",
            tick(0.01),
            json!({"session_id": sid, "turn_id": turn_id, "completed": true, "platform": "cli"}),
        );
    }
}

/// Copies the template's rows of `table` `copies` times, with the template
/// id replaced in every text column, times shifted, and `overrides`
/// (column → SQL over the copy number `i`) applied.
fn replicate(conn: &rusqlite::Connection, table: &str, copies: usize, overrides: &[(&str, &str)]) {
    let mut stmt = conn
        .prepare(&format!("PRAGMA table_info({table})"))
        .expect("table info");
    let cols: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get::<_, String>(1)?, r.get::<_, String>(2)?)))
        .expect("columns")
        .collect::<Result<_, _>>()
        .expect("columns");
    let mut names = Vec::new();
    let mut exprs = Vec::new();
    for (name, ty) in &cols {
        if table == "llm_call_errors" && name == "id" {
            continue;
        }
        names.push(name.clone());
        let expr = if let Some((_, e)) = overrides.iter().find(|(c, _)| c == name) {
            e.to_string()
        } else if ty == "TEXT" {
            format!("replace({name}, '{TEMPLATE}', printf('S%07d', i))")
        } else if name.ends_with("_at") {
            format!("{name} + i * {SPACING}")
        } else {
            name.clone()
        };
        exprs.push(expr);
    }
    let sql = format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {copies})
         INSERT INTO {table} ({}) SELECT {} FROM n, {table} WHERE {table}.session_id = '{TEMPLATE}'",
        names.join(", "),
        exprs.join(", ")
    );
    conn.execute(&sql, []).unwrap_or_else(|e| panic!("{table}: {e}"));
}

fn build(dir: &Path, sessions: usize) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("dir");
    let mut store = Writer::open_dir(dir).expect("store");
    template(&mut store);
    drop(store);
    let conn = rusqlite::Connection::open(dir.join(DB_FILE_NAME)).expect("open");
    conn.execute_batch("PRAGMA synchronous = OFF; PRAGMA cache_size = -262144; BEGIN")
        .expect("begin");
    let copies = sessions - 1;
    replicate(
        &conn,
        "runs",
        copies,
        &[
            (
                "platform",
                "CASE i % 5 WHEN 0 THEN 'telegram' WHEN 1 THEN 'cron' WHEN 2 THEN 'discord' ELSE 'cli' END",
            ),
            (
                "cron_job_id",
                "CASE i % 5 WHEN 1 THEN printf('job%03d', i % 50) ELSE NULL END",
            ),
            ("sender_id", "printf('user%04d', i % 500)"),
            ("model", "printf('model-%d', i % 10)"),
            ("cost_usd", "cost_usd * (1 + (i * 7919) % 97)"),
            ("ended_at", "ended_at + i * 86.4 + (i % 13) * 5"),
        ],
    );
    for table in ["turns", "api_requests", "llm_calls", "llm_call_errors", "tool_calls"] {
        replicate(&conn, table, copies, &[]);
    }
    conn.execute_batch("COMMIT; ANALYZE; PRAGMA wal_checkpoint(TRUNCATE)")
        .expect("commit");
}

/// The path of request `k` of a page.
type PathOf = Box<dyn Fn(usize) -> String>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let sessions = arg("--sessions").unwrap_or(100_000);
    let iters = arg("--iters").unwrap_or(100);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("bench-viewer").join(format!("s{sessions}"));
    let db = dir.join(DB_FILE_NAME);
    if args.iter().any(|a| a == "--rebuild") || !db.exists() {
        let t = Instant::now();
        build(&dir, sessions);
        println!("built the store in {:.1} s", t.elapsed().as_secs_f64());
    }
    let conn = rusqlite::Connection::open(&db).expect("open");
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).expect("count") };
    let (runs, calls, turns, tools) = (
        count("SELECT COUNT(*) FROM runs"),
        count("SELECT COUNT(*) FROM llm_calls"),
        count("SELECT COUNT(*) FROM turns"),
        count("SELECT COUNT(*) FROM tool_calls"),
    );
    println!(
        "store: {runs} sessions, {calls} llm_calls, {turns} turns, {tools} tool calls, {:.0} MB",
        std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0) as f64 / 1e6
    );
    drop(conn);

    let ui = UiServer::start(UiConfig {
        listen: "127.0.0.1:0".into(),
        store_dir: dir.clone(),
        token: None,
        span_options: SpanOptions::default(),
        base: String::new(),
        hermes_home: None,
        trace_link: None,
    })
    .expect("viewer");
    let addr = ui.addr();
    let pick = move |k: usize| format!("S{:07}", (k * 7_919) % sessions);
    let day = jiff::Timestamp::from_second((START + SPACING * sessions as f64 / 2.0) as i64)
        .expect("time")
        .to_zoned(jiff::tz::TimeZone::system())
        .date()
        .to_string();
    let pages: Vec<(&str, PathOf)> = vec![
        ("index, newest first", Box::new(|_| "/".to_string())),
        ("index, page 100", Box::new(|_| "/?offset=5000".to_string())),
        ("index by cost", Box::new(|_| "/?sort=cost".to_string())),
        ("index by duration", Box::new(|_| "/?sort=duration".to_string())),
        ("index, one day", Box::new(move |_| format!("/?day={day}"))),
        (
            "index, platform + model",
            Box::new(|_| "/?platform=telegram&model=model-5".to_string()),
        ),
        ("session page", Box::new(move |k| format!("/session/{}", pick(k)))),
        (
            "session JSON",
            Box::new(move |k| format!("/api/session/{}", pick(k + 1))),
        ),
        ("data version (poll)", Box::new(|_| "/api/version".to_string())),
    ];
    println!(
        "{:<26} {:>9} {:>9} {:>9} {:>9}",
        "request", "p50 ms", "p95 ms", "max ms", "KB"
    );
    for (name, path) in &pages {
        // One warm-up request: the first read pages the file in.
        let _ = http_get::get(addr, &path(0), &[]);
        let mut ms = Vec::with_capacity(iters);
        let mut bytes = 0;
        for k in 0..iters {
            let p = path(k);
            let t = Instant::now();
            let got = http_get::get(addr, &p, &[]);
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(got.status, 200, "{p}: {}", got.body);
            bytes = got.body.len();
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "{name:<26} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            hermes_meter_test_support::percentile(&ms, 0.5),
            hermes_meter_test_support::percentile(&ms, 0.95),
            ms[ms.len() - 1],
            bytes as f64 / 1e3
        );
    }
}
