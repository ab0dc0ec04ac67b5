//! Bad input through the replay reader and the decoder: huge strings, deep
//! nesting, invalid UTF-8 and absurd numbers are recorded as far as
//! possible, never panic, and never make a cost or a count negative.

use std::io::Write as _;

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;

fn replay_lines(lines: &[Vec<u8>]) -> (tempfile::TempDir, Writer, ReplayStats) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bad.jsonl");
    let mut file = std::fs::File::create(&path).expect("create");
    for line in lines {
        file.write_all(line).expect("write");
        file.write_all(b"\n").expect("write");
    }
    drop(file);
    let mut store = Writer::open_dir(&dir.path().join("store")).expect("store");
    let mut stats = ReplayStats::default();
    replay_file(&mut store, &path, DecodeOptions::default(), &mut stats).expect("replay");
    (dir, store, stats)
}

fn line(v: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&v).expect("json")
}

#[test]
fn ten_megabyte_strings_are_cut_and_the_event_lands() {
    let huge = "é".repeat(5 * 1024 * 1024);
    let (_dir, store, stats) = replay_lines(&[
        line(serde_json::json!({"hook": "on_session_start", "t": 1.0,
            "kwargs": {"session_id": "s", "model": huge, "platform": huge}})),
        line(serde_json::json!({"hook": "post_tool_call", "t": 2.0,
            "kwargs": {"session_id": "s", "tool_call_id": "c", "tool_name": huge, "result": huge, "error_message": huge}})),
    ]);
    assert_eq!((stats.applied, stats.bad_lines.len()), (2, 0));
    assert!(
        store
            .query_scalar::<i64>("SELECT length(CAST(model AS BLOB)) FROM runs")
            .expect("model")
            <= 1024
    );
    assert!(
        store
            .query_scalar::<i64>("SELECT MAX(length(payload)) FROM journal")
            .expect("payload")
            < 64 * 1024
    );
    assert_eq!(
        store
            .query_scalar::<i64>("SELECT COUNT(*) FROM tool_calls")
            .expect("tools"),
        1
    );
}

#[test]
fn nesting_deeper_than_the_parser_allows_costs_only_that_value() {
    let nest = |key: &str, t: f64, sid: &str| {
        format!(
            "{{\"hook\": \"post_api_request\", \"t\": {t}, \"kwargs\": {{\"session_id\": \"{sid}\", \"api_request_id\": \"{sid}:1\", \"{key}\": {}{}}}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        )
        .into_bytes()
    };
    // A kwarg nobody reads is skipped unparsed; one the decoder reads is
    // dropped with a counted problem; both events land.
    let (_dir, store, stats) = replay_lines(&[nest("unread", 1.0, "a"), nest("usage", 2.0, "b")]);
    assert_eq!((stats.applied, stats.bad_lines.len()), (2, 0));
    assert!(stats.problems >= 1);
    assert_eq!(
        store
            .query_scalar::<i64>("SELECT COUNT(*) FROM llm_calls")
            .expect("calls"),
        2
    );
    assert_eq!(
        store
            .query_scalar::<i64>("SELECT SUM(count) FROM decode_problems WHERE key = 'usage'")
            .expect("problems"),
        1
    );
}

#[test]
fn invalid_utf8_is_replaced_and_the_record_kept() {
    let mut bad =
        b"{\"hook\": \"on_session_start\", \"t\": 1.0, \"kwargs\": {\"session_id\": \"s\", \"platform\": \"cli"
            .to_vec();
    bad.extend_from_slice(&[0xff, 0xfe]);
    bad.extend_from_slice(b"\"}}");
    let (_dir, store, stats) = replay_lines(&[bad]);
    assert_eq!((stats.applied, stats.bad_lines.len()), (1, 0));
    let platform: String = store.query_scalar("SELECT platform FROM runs").expect("platform");
    assert!(platform.starts_with("cli") && platform.contains('\u{fffd}'));
}

#[test]
fn absurd_token_counts_never_make_a_cost_negative() {
    let mut lines = Vec::new();
    for (i, usage) in [
        serde_json::json!({"input_tokens": -5, "output_tokens": -1e300}),
        serde_json::json!({"input_tokens": 1e300, "output_tokens": "NaN", "cache_read_tokens": "inf"}),
        serde_json::json!({"input_tokens": u64::MAX, "output_tokens": i64::MIN}),
        serde_json::json!({"input_tokens": "12abc", "reasoning_tokens": [1, 2], "cache_write_tokens": {"x": 1}}),
    ]
    .into_iter()
    .enumerate()
    {
        lines.push(line(
            serde_json::json!({"hook": "post_api_request", "t": 10.0 + i as f64,
            "kwargs": {"session_id": "s", "api_request_id": format!("s:api:{i}"), "model": "gpt-4o", "usage": usage}}),
        ));
    }
    let (_dir, store, stats) = replay_lines(&lines);
    assert_eq!(stats.applied, 4);
    assert!(stats.problems >= 8, "every repair is counted: {}", stats.problems);
    let q = |sql: &str| store.query_scalar::<f64>(sql).expect(sql);
    assert_eq!(
        q("SELECT COUNT(*) FROM llm_calls WHERE cost_usd < 0 OR input_tokens < 0 OR output_tokens < 0"),
        0.0
    );
    assert!(q("SELECT cost_usd FROM runs") >= 0.0);
    assert!(q("SELECT cost_usd FROM runs").is_finite());
    // The run totals still equal the rows (no overflow in the sums).
    assert_eq!(
        q("SELECT input_tokens FROM runs"),
        q("SELECT SUM(input_tokens) FROM llm_calls")
    );
}

#[test]
fn two_llm_calls_whose_long_ids_differ_only_at_the_end_are_two_calls() {
    let id = |last: char| format!("{}{last}", "r".repeat(1999));
    let call = |t: f64, request: String| {
        line(serde_json::json!({"hook": "post_api_request", "t": t,
            "kwargs": {"session_id": "s", "turn_id": "s:t", "api_request_id": request, "model": "gpt-4o",
                       "usage": {"input_tokens": 10, "output_tokens": 1}}}))
    };
    let (_dir, store, stats) = replay_lines(&[call(1.0, id('a')), call(2.0, id('b'))]);
    assert_eq!((stats.applied, stats.bad_lines.len()), (2, 0));
    assert_eq!(
        store
            .query_scalar::<i64>("SELECT COUNT(*) FROM llm_calls")
            .expect("calls"),
        2
    );
    assert_eq!(
        store
            .query_scalar::<i64>("SELECT llm_calls FROM runs WHERE session_id = 's'")
            .expect("run"),
        2
    );
}
