//! Property tests: no input makes the decoder or the replay reader panic,
//! and whatever decodes applies to a real store without error or negative
//! totals.

use hermes_meter_model::hook::parse_line;
use hermes_meter_model::hook::{decode, DecodeOptions, Decoded, HOOK_NAMES};
use hermes_meter_store::{EventContext, Writer};
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Arbitrary JSON, nested a few levels, with the keys Hermes uses mixed in
/// so that most values land on fields the decoder reads.
fn json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f)
            .map(Value::Number)
            .unwrap_or(Value::Null)),
        ".{0,40}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "session_id",
            "turn_id",
            "task_id",
            "api_request_id",
            "tool_call_id",
            "tool_name",
            "usage",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "status",
            "result",
            "retry_count",
            "max_retries",
            "retryable",
            "status_code",
            "error",
            "started_at",
            "ended_at",
            "api_duration",
            "child_session_id",
            "parent_session_id",
            "duration_ms",
            "platform",
            "model",
            "completed",
            "interrupted",
            "approx_input_tokens",
            "assistant_content_chars",
        ])
        .prop_map(str::to_string),
        "[a-z_]{1,12}",
    ]
}

fn kwargs() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(key(), json(), 0..16).prop_map(|m| m.into_iter().collect())
}

proptest! {
    // A fixed budget: PROPTEST_CASES (scripts/test.sh sets it), else 512.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(512)
    ))]

    #[test]
    fn arbitrary_kwargs_never_panic_and_apply_cleanly(
        hook in prop::sample::select(HOOK_NAMES.to_vec()),
        kw in kwargs(),
        at in any::<f64>(),
        capture in any::<bool>(),
    ) {
        let opts = DecodeOptions { capture_content: capture, ..DecodeOptions::default() };
        if let Decoded::Event(event, problems) = decode(hook, &kw, at, opts) {
            let dir = tempfile::tempdir().expect("temp dir");
            let mut store = Writer::open_dir(dir.path()).expect("open");
            store.apply(&event, &EventContext { problems, ..EventContext::default() }).expect("apply");
            let negative: i64 = store
                .query_scalar("SELECT COUNT(*) FROM runs WHERE cost_usd < 0 OR input_tokens < 0 OR output_tokens < 0 OR cache_read_tokens < 0")
                .expect("query");
            prop_assert_eq!(negative, 0);
        }
    }

    #[test]
    fn arbitrary_lines_never_panic_the_reader(line in ".{0,200}") {
        let _ = parse_line(&line, false);
    }

    #[test]
    fn arbitrary_json_lines_never_panic_the_reader(v in json()) {
        let _ = parse_line(&v.to_string(), true);
    }
}
