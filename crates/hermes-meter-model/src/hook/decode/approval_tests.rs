//! The approval hooks decoded from kwargs as Hermes 0.19.0 fires them.

use super::*;

/// Kwargs as Hermes 0.19.0's `tools/approval.py` fires them, the smart
/// (auxiliary model) surface included.
#[test]
fn approval_hooks_decode_with_the_session_from_the_turn_id() {
    let kwargs = serde_json::json!({
        "command": "rm -rf /tmp/x", "description": "recursive delete",
        "pattern_key": "rm_recursive", "pattern_keys": ["rm_recursive"],
        "session_key": "agent:main:telegram:dm:42", "surface": "smart",
        "choice": "smart_deny", "decided_by": "aux_llm",
        "turn_id": "20261130_013735_bf4b63:task:90cda183", "tool_call_id": "call_1",
        "telemetry_schema_version": "hermes.observer.v1",
    });
    let map = kwargs.as_object().expect("object").clone();
    let Decoded::Event(event, problems) = decode("post_approval_response", &map, 10.0, DecodeOptions::default()) else {
        panic!("decodes");
    };
    assert!(problems.is_empty(), "{problems:?}");
    let Hook::ApprovalResponse(a) = event.hook else {
        panic!("an approval response")
    };
    assert_eq!(a.session_id, "20261130_013735_bf4b63");
    assert_eq!(a.key(), "call_1");
    assert_eq!(a.decision(), Some("deny"));
    assert_eq!(a.decided_by.as_deref(), Some("aux_llm"));
    assert_eq!(a.command, None, "the command is content: kept only with capture on");
    // No turn (an approval outside a turn): the session key stands in.
    let mut map = map;
    map.remove("turn_id");
    let Decoded::Event(event, _) = decode("pre_approval_request", &map, 10.0, DecodeOptions::default()) else {
        panic!("decodes");
    };
    assert_eq!(event.hook.session_id(), "agent:main:telegram:dm:42");
    for (choice, decision) in [
        ("once", "approve"),
        ("always", "approve"),
        ("deny", "deny"),
        ("smart_deny", "deny"),
        ("timeout", "timeout"),
        // Hermes main: the request was withdrawn, not denied.
        ("cancelled", "cancelled"),
    ] {
        let a = Approval {
            choice: Some(choice.into()),
            ..Approval::default()
        };
        assert_eq!(a.decision(), Some(decision), "{choice}");
    }
    // Hermes main's failed notification, and a choice this build does not
    // know: no decision, not a deny.
    for choice in ["notify_failed", "maybe_later"] {
        let a = Approval {
            choice: Some(choice.into()),
            ..Approval::default()
        };
        assert_eq!(a.decision(), None, "{choice}");
    }
}

#[test]
fn a_failed_auxiliary_attempt_is_a_failed_attempt_and_the_moa_aggregator_no_call() {
    let call = |extra: serde_json::Value| {
        let mut kwargs = serde_json::json!({
            "session_id": "s1", "aux_task": "vision", "model": "m", "streaming": false,
            "api_request_id": "aux-1", "usage": {"input_tokens": 10, "output_tokens": 2},
        });
        for (k, v) in extra.as_object().expect("object") {
            kwargs[k] = v.clone();
        }
        let map = kwargs.as_object().expect("object").clone();
        match decode("post_auxiliary_call", &map, 1.0, DecodeOptions::default()) {
            Decoded::Event(e, _) => Some(e.hook),
            _ => None,
        }
    };
    assert!(matches!(
        call(serde_json::json!({"error": null})),
        Some(Hook::PostApiRequest(_))
    ));
    let Some(Hook::ApiRequestError(e)) = call(serde_json::json!({
        "error": "RateLimitError: slow down", "error_type": "RateLimitError", "usage": null, "retry_count": 1
    })) else {
        panic!("a failed attempt")
    };
    assert_eq!((e.api.api_request_id.as_str(), e.retry_count), ("aux-1", 1));
    assert_eq!(e.error_type.as_deref(), Some("RateLimitError"));
    assert_eq!(e.error_message, None, "the provider's text is content");
    assert_eq!(call(serde_json::json!({"aux_task": "moa_aggregator"})), None);
    assert!(
        matches!(
            call(serde_json::json!({"aux_task": "moa_reference"})),
            Some(Hook::PostApiRequest(_))
        ),
        "an advisor is a call"
    );
}

/// Kwargs shaped as newer Hermes fires `post_auxiliary_call` (those of
/// `post_api_request` plus `aux_task`; ids may be empty), and as the
/// package feeds it from Hermes 0.19.0's own accounting.
#[test]
fn an_auxiliary_call_decodes_as_an_llm_call_marked_with_its_task() {
    let kwargs = serde_json::json!({
        "session_id": "s1", "turn_id": "", "api_request_id": "", "aux_task": "compression",
        "model": "gpt-4o-mini", "provider": "openai", "api_duration": 0.4, "finish_reason": "stop",
        "usage": {"input_tokens": 900, "output_tokens": 80, "cache_read_tokens": 100},
    });
    let map = kwargs.as_object().expect("object").clone();
    let Decoded::Event(event, problems) = decode("post_auxiliary_call", &map, 12.5, DecodeOptions::default()) else {
        panic!("decodes");
    };
    assert!(problems.is_empty(), "{problems:?}");
    let Hook::PostApiRequest(e) = &event.hook else {
        panic!("an LLM call")
    };
    assert_eq!(e.aux_task.as_deref(), Some("compression"));
    assert_eq!(e.api.turn_id, None, "an empty turn id is no turn");
    assert_eq!(e.api.api_request_id, "s1:aux:compression:12.500000");
    assert_eq!(e.usage.map(|u| (u.input_tokens, u.cache_read_tokens)), Some((900, 100)));
    // No session (a caller outside any turn): that UTC day's auxiliary
    // session, never another session's.
    let mut map = map;
    map.insert("session_id".into(), serde_json::json!(""));
    let Decoded::Event(event, _) = decode("post_auxiliary_call", &map, 1_796_002_700.5, DecodeOptions::default())
    else {
        panic!("decodes");
    };
    let Hook::PostApiRequest(e) = &event.hook else {
        panic!("an LLM call")
    };
    assert_eq!(e.api.session_id, "aux_20261130");
    assert_eq!(e.api.platform.as_deref(), Some(AUX_PLATFORM));
}

#[test]
fn newer_hermes_kwargs_decode_the_provider_cost_and_child_outcome() {
    // post_api_request with the provider's billed cost in the usage.
    let kwargs = serde_json::json!({
        "session_id": "s1", "api_request_id": "s1:t:api:1", "model": "anthropic/claude-sonnet-4.5",
        "provider": "openrouter", "first_chunk_at": 1756000000.512, "moa_references": null,
        "usage": {"input_tokens": 2048, "output_tokens": 512, "cost": 0.0139},
    });
    let map = kwargs.as_object().expect("object").clone();
    let Decoded::Event(event, problems) = decode("post_api_request", &map, 1.0, DecodeOptions::default()) else {
        panic!("decodes");
    };
    assert!(problems.is_empty(), "{problems:?}");
    let Hook::PostApiRequest(e) = &event.hook else {
        panic!("an LLM call")
    };
    assert_eq!(e.usage.and_then(|u| u.provider_cost_usd), Some(0.0139));
    assert_eq!(
        e.usage.map(|u| (u.provider_upstream_usd, u.provider_byok)),
        Some((None, false))
    );
    // The upstream charge and the own-key flag the plugin adds beside it.
    let mut upstream = map.clone();
    upstream.insert(
        "usage".into(),
        serde_json::json!({"input_tokens": 2048, "output_tokens": 512, "cost": 0.95, "upstream_cost": 19, "byok": true}),
    );
    let Decoded::Event(event, problems) = decode("post_api_request", &upstream, 1.0, DecodeOptions::default()) else {
        panic!("decodes");
    };
    assert!(problems.is_empty(), "{problems:?}");
    let Hook::PostApiRequest(e) = &event.hook else {
        panic!("an LLM call")
    };
    let u = e.usage.expect("usage");
    assert_eq!(
        (u.provider_cost_usd, u.provider_upstream_usd, u.provider_byok),
        (Some(0.95), Some(19.0), true)
    );
    assert_eq!(u.cache_write_1h_tokens, 0);
    let mut one_hour = map.clone();
    one_hour.insert(
        "usage".into(),
        serde_json::json!({"input_tokens": 2095, "cache_write_tokens": 2051, "cache_write_1h_tokens": 2051}),
    );
    let Decoded::Event(event, problems) = decode("post_api_request", &one_hour, 1.0, DecodeOptions::default()) else {
        panic!("decodes");
    };
    assert!(problems.is_empty(), "{problems:?}");
    let Hook::PostApiRequest(e) = &event.hook else {
        panic!("an LLM call")
    };
    assert_eq!(
        e.usage.map(|u| (u.cache_write_tokens, u.cache_write_1h_tokens)),
        Some((2051, 2051))
    );
    // A cost that is not an amount is dropped and reported, the call kept.
    for bad in [
        serde_json::json!(-1.0),
        serde_json::json!("lots"),
        serde_json::json!(1e12),
    ] {
        let mut map = map.clone();
        map.insert("usage".into(), serde_json::json!({"input_tokens": 1, "cost": bad}));
        let Decoded::Event(event, problems) = decode("post_api_request", &map, 1.0, DecodeOptions::default()) else {
            panic!("decodes");
        };
        let Hook::PostApiRequest(e) = &event.hook else {
            panic!("an LLM call")
        };
        assert_eq!(e.usage.map(|u| (u.input_tokens, u.provider_cost_usd)), Some((1, None)));
        assert!(problems.iter().any(|p| p.key == "usage.cost"), "{problems:?}");
    }
    // subagent_stop: child_outcome where child_status is missing.
    for (outcome, want) in [
        (serde_json::json!("cancelled"), Some("cancelled")),
        (serde_json::json!({"status": "failed", "summary": "x"}), Some("failed")),
        (serde_json::json!({"other": 1}), None),
    ] {
        let kwargs = serde_json::json!({
            "parent_session_id": "p", "child_session_id": "c", "child_outcome": outcome,
        });
        let map = kwargs.as_object().expect("object").clone();
        let Decoded::Event(event, _) = decode("subagent_stop", &map, 1.0, DecodeOptions::default()) else {
            panic!("decodes");
        };
        let Hook::SubagentStop(e) = &event.hook else {
            panic!("a subagent stop")
        };
        assert_eq!(e.child_status.as_deref(), want);
    }
}
