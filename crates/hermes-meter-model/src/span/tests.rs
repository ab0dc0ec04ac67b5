//! Unit tests of the span builders (table tests over hand-made rows, no I/O).

use super::*;

fn node(id: &str, platform: &str, parent_turn: Option<&str>) -> Ancestor {
    Ancestor {
        session_id: id.into(),
        platform: Some(platform.into()),
        parent_turn_id: parent_turn.map(Into::into),
    }
}

#[test]
fn ids_are_stable_and_distinct() {
    assert_eq!(session_span_id("s1"), session_span_id("s1"));
    assert_ne!(session_span_id("s1"), turn_span_id("s1"));
    assert_ne!(attempt_span_id("r", 0), attempt_span_id("r", 1));
    assert_ne!(tool_span_id("a", "call_1"), tool_span_id("b", "call_1"));
    // Part boundaries matter: ("ab", "c") is not ("a", "bc").
    assert_ne!(span_id(&["ab", "c"]), span_id(&["a", "bc"]));
    // Pinned, so a change of the hash (which would break parents across
    // versions) is noticed.
    assert_eq!(session_span_id("s1"), session_span_id(&String::from("s1")));
}

#[test]
fn trace_mode_defaults_per_platform() {
    let m = TraceMode::Auto;
    assert!(!m.per_turn(Some("cli")));
    assert!(!m.per_turn(Some("cron")));
    assert!(!m.per_turn(Some("subagent")));
    assert!(!m.per_turn(None));
    assert!(m.per_turn(Some("telegram")));
    assert!(TraceMode::Turn.per_turn(Some("cli")));
    assert!(!TraceMode::Session.per_turn(Some("telegram")));
    assert_eq!(TraceMode::parse(" Turn "), Some(TraceMode::Turn));
    assert_eq!(TraceMode::parse("x"), None);
}

#[test]
fn a_subagent_lives_in_the_trace_of_the_turn_that_delegated_it() {
    let cli = Ancestry(vec![node("child", "subagent", Some("t1")), node("root", "cli", None)]);
    assert_eq!(
        cli.trace_of_session(TraceMode::Auto),
        Ancestry(vec![node("root", "cli", None)]).trace_of_session(TraceMode::Auto)
    );
    let gw = Ancestry(vec![
        node("child", "subagent", Some("t1")),
        node("root", "telegram", None),
    ]);
    assert_eq!(gw.trace_of_session(TraceMode::Auto), trace_id(&["turn", "t1"]));
    // The child's own turns stay in that trace.
    assert_eq!(gw.trace_of_turn("ct", TraceMode::Auto), trace_id(&["turn", "t1"]));
    assert!(!gw.turns_are_roots(TraceMode::Auto));
}

fn attr_of<'a>(span: &'a Span, key: &str) -> Option<&'a AnyValue> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
}

fn text(v: Option<&AnyValue>) -> Option<&str> {
    match v?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s),
        _ => None,
    }
}

#[test]
fn a_tool_call_a_budget_blocked_carries_the_deny_decision_and_why() {
    let run = RunRow {
        session_id: "s".into(),
        ..RunRow::default()
    };
    let ancestry = Ancestry(vec![node("s", "cli", None)]);
    let blocked = ToolRow {
        session_id: "s".into(),
        tool_call_id: "c".into(),
        tool_name: "terminal".into(),
        ended_at: Some(2.0),
        status: Some("blocked".into()),
        ..ToolRow::default()
    };
    let span = tool_span(&blocked, &run, &ancestry, SpanOptions::default());
    assert_eq!(text(attr_of(&span, attr::HERMES_TOOL_DECISION)), Some("deny"));
    assert_eq!(text(attr_of(&span, attr::HERMES_TOOL_DECISION_REASON)), Some("budget"));
    let ran = ToolRow {
        status: Some("ok".into()),
        ok: Some(true),
        ..blocked
    };
    let span = tool_span(&ran, &run, &ancestry, SpanOptions::default());
    assert_eq!(attr_of(&span, attr::HERMES_TOOL_DECISION), None);
}

#[test]
fn a_continuation_hangs_under_the_root_and_reports_only_its_stretch() {
    let run = RunRow {
        session_id: "s".into(),
        started_at: 1.0,
        ended_at: Some(9.0),
        status: "ok".into(),
        input_tokens: 100,
        output_tokens: 10,
        cost_usd: 1.0,
        span_n: 1,
        span_started_at: Some(5.0),
        span_base: (60, 6, 0.25),
        ..RunRow::default()
    };
    let ancestry = Ancestry(vec![node("s", "cli", None)]);
    let root = session_span(&run, 0, &ancestry, SpanOptions::default());
    let cont = session_span(&run, 1, &ancestry, SpanOptions::default());
    assert!(root.parent_span_id.is_empty());
    assert_eq!(cont.parent_span_id, root.span_id);
    assert_ne!(cont.span_id, root.span_id);
    assert_eq!(cont.trace_id, root.trace_id);
    assert_eq!(cont.start_time_unix_nano, nanos(5.0));
    let int = |s: &Span, k| match attr_of(s, k).and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::IntValue(i)) => *i,
        _ => -1,
    };
    assert_eq!(int(&cont, attr::HERMES_USAGE_TOTAL_INPUT_TOKENS), 40);
    assert_eq!(int(&cont, attr::HERMES_USAGE_TOTAL_OUTPUT_TOKENS), 4);
    // No gen_ai.usage.* on a session span: a consumer adding them up over
    // the trace's spans would count the session's tokens twice.
    assert_eq!(int(&cont, attr::GEN_AI_USAGE_INPUT_TOKENS), -1);
    let dup = SpanOptions {
        names: Names::Dup,
        ..SpanOptions::default()
    };
    assert_eq!(
        int(&session_span(&run, 1, &ancestry, dup), attr::GEN_AI_USAGE_INPUT_TOKENS),
        40
    );
    assert_eq!(int(&cont, attr::HERMES_SESSION_CONTINUATION), 1);
    assert_eq!(int(&root, attr::HERMES_SESSION_CONTINUATION), 0);
}

#[test]
fn base_urls_give_server_address_and_port() {
    for (url, want) in [
        ("http://127.0.0.1:43117/v1", Some(("127.0.0.1", 43117))),
        ("https://api.openai.com/v1", Some(("api.openai.com", 443))),
        ("http://[::1]:8080", Some(("::1", 8080))),
        ("http://user:pw@host/x", Some(("host", 80))),
        ("not a url", None),
    ] {
        assert_eq!(server_of(url), want.map(|(h, p)| (h.to_string(), p)), "{url}");
    }
}

#[test]
fn tool_outcomes_follow_the_exit_code_over_hermes_status() {
    let base = ToolRow {
        ended_at: Some(2.0),
        ok: Some(true),
        status: Some("ok".into()),
        ..ToolRow::default()
    };
    for (row, want) in [
        (base.clone(), "ok"),
        (
            ToolRow {
                exit_code: Some(3),
                ..base.clone()
            },
            "nonzero_exit",
        ),
        (
            ToolRow {
                exit_code: Some(0),
                ..base.clone()
            },
            "ok",
        ),
        (
            ToolRow {
                status: Some("error".into()),
                ok: Some(false),
                ..base.clone()
            },
            "error",
        ),
        (
            ToolRow {
                status: Some("blocked".into()),
                ok: Some(false),
                ..base.clone()
            },
            "blocked",
        ),
        (
            ToolRow {
                ended_at: None,
                ok: None,
                status: None,
                ..base.clone()
            },
            "other",
        ),
    ] {
        assert_eq!(tool_outcome(&row), want, "{row:?}");
    }
}

#[test]
fn reasons_that_are_not_tokens_become_other() {
    assert_eq!(reason_token("server_error"), "server_error");
    assert_eq!(reason_token("Error code: 500"), "_OTHER");
    assert_eq!(reason_token(""), "_OTHER");
}

#[test]
fn a_streamed_call_carries_its_time_to_first_chunk_and_others_none() {
    let run = RunRow {
        session_id: "s".into(),
        ..RunRow::default()
    };
    let ancestry = Ancestry(vec![node("s", "cli", None)]);
    let streamed = AttemptRow {
        api_request_id: "s:t:api:1".into(),
        session_id: "s".into(),
        started_at: 100.0,
        ended_at: Some(103.0),
        first_token_at: Some(100.75),
        ..AttemptRow::default()
    };
    let double = |s: &Span| match attr_of(s, attr::GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK).and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::DoubleValue(d)) => Some(*d),
        _ => None,
    };
    let span = attempt_span(&streamed, &run, &ancestry, SpanOptions::default());
    assert_eq!(double(&span), Some(0.75));
    // A first token stamped before the start it is measured from is 0,
    // as in the histogram, never negative.
    let early = AttemptRow {
        first_token_at: Some(99.0),
        ..streamed.clone()
    };
    assert_eq!(
        double(&attempt_span(&early, &run, &ancestry, SpanOptions::default())),
        Some(0.0)
    );
    let unstreamed = AttemptRow {
        first_token_at: None,
        ..streamed
    };
    assert_eq!(
        double(&attempt_span(&unstreamed, &run, &ancestry, SpanOptions::default())),
        None
    );
}

#[test]
fn previous_attribute_names_ride_beside_the_current_ones_only_with_gen_ai_dup() {
    let run = RunRow {
        session_id: "s".into(),
        ..RunRow::default()
    };
    let ancestry = Ancestry(vec![node("s", "cli", None)]);
    let call = AttemptRow {
        api_request_id: "s:t:api:1".into(),
        session_id: "s".into(),
        started_at: 1.0,
        ended_at: Some(2.0),
        cache_write_tokens: 64,
        ..AttemptRow::default()
    };
    let tool = ToolRow {
        session_id: "s".into(),
        tool_call_id: "c".into(),
        tool_name: "terminal".into(),
        ended_at: Some(2.0),
        ok: Some(true),
        status: Some("ok".into()),
        exit_code: Some(2),
        ..ToolRow::default()
    };
    let int = |s: &Span, key: &str| match attr_of(s, key).and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::IntValue(i)) => Some(*i),
        _ => None,
    };
    for (names, previous) in [(Names::Current, None), (Names::Dup, Some(64))] {
        let opts = SpanOptions {
            names,
            ..SpanOptions::default()
        };
        let chat = attempt_span(&call, &run, &ancestry, opts);
        assert_eq!(int(&chat, attr::GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS), Some(64));
        assert_eq!(int(&chat, attr::GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS), previous);
        let span = tool_span(&tool, &run, &ancestry, opts);
        assert_eq!(int(&span, attr::PROCESS_EXIT_CODE), Some(2));
        assert_eq!(int(&span, attr::HERMES_TOOL_EXIT_CODE), previous.map(|_| 2));
        // The process conventions' error type, in both modes.
        assert_eq!(text(attr_of(&span, attr::ERROR_TYPE)), Some("2"));
    }
}
