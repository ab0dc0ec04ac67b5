//! Unit tests of the decoder: repairs, problems, limits.

use super::*;
use serde_json::json;

fn kw(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("test kwargs are an object")
}

fn event(hook: &str, v: Value) -> (Hook, Vec<Problem>) {
    match decode(hook, &kw(v), 1.0, DecodeOptions::default()) {
        Decoded::Event(e, p) => (e.hook, p),
        other => panic!("expected an event, got {other:?}"),
    }
}

#[test]
fn unknown_kwargs_are_ignored() {
    let (hook, problems) = event(
        "on_session_start",
        json!({"session_id": "s", "platform": "cli", "telemetry_schema_version": "hermes.observer.v1", "new_thing": [1]}),
    );
    assert!(problems.is_empty());
    assert_eq!(hook.session_id(), "s");
}

#[test]
fn absurd_counts_are_cut_so_sums_cannot_overflow() {
    let (hook, problems) = event(
        "post_api_request",
        json!({"session_id": "s", "api_request_id": "a", "usage": {"input_tokens": 1e30, "output_tokens": u64::MAX}}),
    );
    let Hook::PostApiRequest(p) = hook else { unreachable!() };
    let usage = p.usage.expect("usage survives repair");
    assert_eq!((usage.input_tokens, usage.output_tokens), (MAX_COUNT, MAX_COUNT));
    assert!(problems.iter().any(|p| p.what.contains("implausibly large")));
}

#[test]
fn unknown_hooks_are_ignored() {
    assert_eq!(
        decode("transform_tool_result", &kw(json!({})), 1.0, DecodeOptions::default()),
        Decoded::Ignored
    );
}

#[test]
fn a_missing_id_makes_the_event_unusable() {
    let d = decode(
        "pre_llm_call",
        &kw(json!({"session_id": "s"})),
        1.0,
        DecodeOptions::default(),
    );
    assert!(matches!(d, Decoded::Unusable(p) if p.iter().any(|p| p.key == "turn_id")));
}

#[test]
fn wrong_types_are_repaired_and_reported() {
    let (hook, problems) = event(
        "post_api_request",
        json!({"session_id": "s", "api_request_id": "a", "usage": {"input_tokens": "12", "output_tokens": -5, "cache_read_tokens": 3.0}, "api_duration": "NaN"}),
    );
    let Hook::PostApiRequest(p) = hook else { unreachable!() };
    let usage = p.usage.expect("usage survives repair");
    assert_eq!(usage.input_tokens, 12);
    assert_eq!(usage.output_tokens, 0);
    assert_eq!(usage.cache_read_tokens, 3);
    assert_eq!(p.api_duration, None);
    let keys: Vec<_> = problems.iter().map(|p| p.key.as_str()).collect();
    assert!(keys.contains(&"usage.input_tokens"));
    assert!(keys.contains(&"usage.output_tokens"));
    assert!(keys.contains(&"api_duration"));
}

#[test]
fn content_is_dropped_unless_captured() {
    let args = json!({"session_id": "s", "turn_id": "t", "user_message": "secret plan"});
    let (hook, _) = event("pre_llm_call", args.clone());
    let Hook::PreLlmCall(p) = hook else { unreachable!() };
    assert_eq!(p.user_message, None);
    let opts = DecodeOptions {
        capture_content: true,
        ..Default::default()
    };
    let Decoded::Event(e, _) = decode("pre_llm_call", &kw(args), 1.0, opts) else {
        unreachable!()
    };
    let Hook::PreLlmCall(p) = e.hook else { unreachable!() };
    assert_eq!(p.user_message.as_deref(), Some("secret plan"));
}

#[test]
fn tool_success_follows_status_then_the_result() {
    let cases = [
        (json!({"status": "ok"}), true),
        (json!({"status": "error"}), false),
        (json!({"status": "blocked"}), false),
        (json!({"status": "cancelled"}), false),
        (json!({"status": "timeout"}), false),
        (json!({"status": "weird"}), false),
        // Hermes reports a terminal command exiting 3 with status "ok".
        (
            json!({"status": "ok", "result": "{\"exit_code\": 3, \"error\": null}"}),
            true,
        ),
        (
            json!({"result": "{\"output\": \"\", \"exit_code\": 3, \"error\": null}"}),
            false,
        ),
        (
            json!({"result": "{\"output\": \"\", \"exit_code\": 0, \"error\": null}"}),
            true,
        ),
        (json!({"result": "{\"error\": null}"}), true),
        (json!({"result": "{\"error\": \"boom\"}"}), false),
        (json!({"result": "{\"success\": false}"}), false),
        (json!({"result": "plain text"}), true),
    ];
    for (extra, ok) in cases {
        let mut args = json!({"session_id": "s", "tool_call_id": "c", "tool_name": "terminal"});
        args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (hook, _) = event("post_tool_call", args.clone());
        let Hook::PostToolCall(p) = hook else { unreachable!() };
        assert_eq!(p.ok(), ok, "{args}");
    }
}

#[test]
fn huge_ids_are_cut_at_a_char_boundary() {
    let long = "é".repeat(10_000);
    let (hook, problems) = event("on_session_start", json!({"session_id": long}));
    assert!(hook.session_id().len() <= MAX_LABEL_BYTES);
    assert!(hook.session_id().starts_with("éé"));
    assert_eq!(problems.len(), 1);
}

#[test]
fn long_ids_that_differ_only_at_the_end_stay_different_and_stable() {
    let a = format!("{}a", "x".repeat(1999));
    let b = format!("{}b", "x".repeat(1999));
    let (ha, _) = event("on_session_start", json!({"session_id": a}));
    let (hb, _) = event("on_session_start", json!({"session_id": b}));
    assert_ne!(ha.session_id(), hb.session_id());
    assert!(ha.session_id().len() <= MAX_LABEL_BYTES && ha.session_id().starts_with("xxxx"));
    // The hash is FNV-1a 64, fixed by its definition: these values hold
    // across releases, or replayed stores would give ids new identities.
    assert_eq!(super::reader::fit_label("short"), "short");
    let fitted = super::reader::fit_label(&"a".repeat(MAX_LABEL_BYTES + 1));
    assert_eq!(fitted.len(), MAX_LABEL_BYTES);
    assert!(fitted.ends_with("~6a424025ce84288c"), "{fitted}");
}
