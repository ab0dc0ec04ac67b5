//! Kwargs shaped exactly as Hermes git main builds them, decoded from what
//! the binding copies ([`crate::hook::keys::copied`]), so a key the filter
//! lacks fails here as it would in Hermes.
//!
//! Read from `NousResearch/hermes-agent`:
//! `agent/auxiliary_hooks.py` at 7effdff81b7bbcdf0e441829030a7ee2d037a7f9
//! (`_AuxCallHooks`: one `post_auxiliary_call` per provider attempt, the
//! attempts of one call sharing `api_request_id`, `retry_count` telling them
//! apart; a failed attempt carries `error`/`error_type` and `usage=None`, a
//! streamed one `streaming=True` and `usage=None`; a caller outside a turn
//! has empty `session_id`, `turn_id` and `platform`);
//! `agent/turn_response_intake.py` at 47c93ff826a55e6e49479faad0ebe1b976141fa4
//! (`_fire_post_api_request_hook`, which passes
//! `first_chunk_at=getattr(agent, "_last_api_first_chunk_at", None),`
//! under the comment "First stream chunk time (epoch s); None if not
//! streamed / no chunk."; no `first_delta_at` there);
//! `agent/api_request_hooks.py` at 28a1cc9242fc1c90f37d63c03637b5ff015155fc
//! (`_invoke_api_request_error_hook`, which passes
//! `first_chunk_at=getattr(self, "_last_api_observed_chunk_at", None),` and
//! `first_delta_at=getattr(self, "_last_api_first_delta_at", None),`).

use serde_json::{json, Map, Value};

use super::*;
use crate::hook::keys::copied;

/// `post_auxiliary_call` as `_AuxCallHooks.post` fires it for attempt
/// `retry_count` of the call `aux-…`; `error` makes it a failed attempt.
fn post_auxiliary_call(session_id: &str, retry_count: i64, error: Option<&str>, streaming: bool) -> Map<String, Value> {
    let failed_or_streamed = error.is_some() || streaming;
    let usage = (!failed_or_streamed).then(|| {
        json!({"input_tokens": 1200, "output_tokens": 64, "cache_read_tokens": 300, "cache_write_tokens": 0,
               "reasoning_tokens": 0, "prompt_tokens": 1500, "total_tokens": 1564})
    });
    let v = json!({
        "session_id": session_id, "task_id": if session_id.is_empty() { "" } else { "task-1" },
        "turn_id": if session_id.is_empty() { "" } else { "turn-1" },
        "platform": if session_id.is_empty() { "" } else { "telegram" },
        "aux_task": "compression", "task": "compression", "middleware_trace": [],
        "api_request_id": "aux-5f0c2b", "retry_count": retry_count, "api_call_count": retry_count + 1,
        "model": "google/gemini-2.5-flash", "provider": "openrouter", "base_url": "https://openrouter.ai/api/v1",
        "api_mode": "chat_completions", "streaming": streaming, "started_at": 1_796_002_700.0 + retry_count as f64,
        "message_count": 14, "ended_at": 1_796_002_700.8 + retry_count as f64, "api_duration": 0.8,
        "error": error, "error_type": error.map(|e| e.split(':').next().unwrap_or(e).to_string()),
        "finish_reason": if failed_or_streamed { Value::Null } else { json!("stop") },
        "response_model": if failed_or_streamed { Value::Null } else { json!("google/gemini-2.5-flash") },
        "usage": usage, "response": null,
        "assistant_content_chars": if failed_or_streamed { 0 } else { 256 }, "assistant_tool_call_count": 0,
        "telemetry_schema_version": "hermes.observer.v1",
    });
    v.as_object().expect("object").clone()
}

/// `post_api_request` as `_fire_post_api_request_hook` fires it for a
/// streamed call whose first chunk came at `first_chunk_at` (`None`: not
/// streamed).
fn post_api_request(first_chunk_at: Option<f64>) -> Map<String, Value> {
    let v = json!({
        "task_id": "task-1", "turn_id": "turn-1", "api_request_id": "s1:turn-1:api:1", "session_id": "s1",
        "platform": "cli", "model": "anthropic/claude-sonnet-4.5", "provider": "openrouter",
        "base_url": "https://openrouter.ai/api/v1", "api_mode": "chat_completions", "api_call_count": 1,
        "api_duration": 2.5, "started_at": 1_796_002_700.0, "ended_at": 1_796_002_702.5,
        "first_chunk_at": first_chunk_at, "finish_reason": "stop", "message_count": 3,
        "response_model": "anthropic/claude-sonnet-4.5", "response": {"model": "anthropic/claude-sonnet-4.5"},
        "usage": {"input_tokens": 900, "output_tokens": 120, "cache_read_tokens": 0, "cache_write_tokens": 0,
                  "reasoning_tokens": 0, "prompt_tokens": 900, "total_tokens": 1020},
        "assistant_message": {"content": "hello"}, "assistant_content_chars": 5, "assistant_tool_call_count": 0,
        "moa_references": null, "telemetry_schema_version": "hermes.observer.v1",
    });
    v.as_object().expect("object").clone()
}

/// The hook's event, decoded from only what the binding copies of `kwargs`.
fn decoded_as(hook: &str, kwargs: &Map<String, Value>) -> Option<Hook> {
    let only = copied(hook, kwargs, false);
    match decode(hook, &only, 1_796_002_703.0, DecodeOptions::default()) {
        Decoded::Event(event, problems) => {
            assert!(problems.is_empty(), "{problems:?}");
            Some(event.hook)
        }
        _ => None,
    }
}

#[test]
fn the_first_chunk_time_of_main_reaches_the_event_through_the_key_filter() {
    let Some(Hook::PostApiRequest(e)) = decoded_as("post_api_request", &post_api_request(Some(1_796_002_700.75)))
    else {
        panic!("an LLM call")
    };
    assert_eq!(e.first_chunk_at, Some(1_796_002_700.75));
    assert_eq!(
        e.first_token_at(),
        Some(1_796_002_700.75),
        "no delta time: the first chunk"
    );
    // Not streamed: Hermes passes None, which is no time and no problem.
    let Some(Hook::PostApiRequest(e)) = decoded_as("post_api_request", &post_api_request(None)) else {
        panic!("an LLM call")
    };
    assert_eq!(e.first_token_at(), None);
}

#[test]
fn the_first_text_delta_wins_over_the_first_chunk_where_hermes_sends_both() {
    let mut kwargs = post_api_request(Some(1_796_002_700.5));
    kwargs.insert("first_delta_at".into(), json!(1_796_002_700.9));
    let Some(Hook::PostApiRequest(e)) = decoded_as("post_api_request", &kwargs) else {
        panic!("an LLM call")
    };
    assert_eq!(e.first_token_at(), Some(1_796_002_700.9));
}

#[test]
fn a_failed_attempt_of_main_keeps_both_stream_times_through_the_key_filter() {
    let v = json!({
        "task_id": "task-1", "turn_id": "turn-1", "api_request_id": "s1:turn-1:api:1", "session_id": "s1",
        "platform": "cli", "model": "gpt-5", "provider": "openai", "base_url": "https://api.openai.com/v1",
        "api_mode": "chat_completions", "api_call_count": 1, "api_duration": 3.0, "started_at": 1_796_002_700.0,
        "ended_at": 1_796_002_703.0, "first_chunk_at": 1_796_002_700.4, "first_delta_at": 1_796_002_700.6,
        "status_code": null, "retry_count": 0, "max_retries": 3, "retryable": true, "reason": "timeout",
        "error": {"type": "ReadTimeout", "message": "stream stalled"}, "request": {"method": "POST"},
    });
    let Some(Hook::ApiRequestError(e)) = decoded_as("api_request_error", v.as_object().expect("object")) else {
        panic!("a failed attempt")
    };
    assert_eq!(
        (e.first_chunk_at, e.first_delta_at),
        (Some(1_796_002_700.4), Some(1_796_002_700.6))
    );
}

fn decoded(kwargs: &Map<String, Value>) -> Option<Hook> {
    decoded_as("post_auxiliary_call", kwargs)
}

#[test]
fn a_failed_auxiliary_attempt_copied_by_the_binding_is_a_failed_attempt_not_a_call() {
    let attempt = post_auxiliary_call("s1", 0, Some("APIConnectionError: Connection error."), false);
    let Some(Hook::ApiRequestError(e)) = decoded(&attempt) else {
        panic!("a failed attempt, not an LLM call of 0 tokens")
    };
    assert_eq!((e.api.api_request_id.as_str(), e.retry_count), ("aux-5f0c2b", 0));
    assert_eq!(e.error_type.as_deref(), Some("APIConnectionError"));
}

#[test]
fn the_retry_that_succeeds_is_the_call_with_its_tokens() {
    let retry = post_auxiliary_call("s1", 1, None, false);
    let Some(Hook::PostApiRequest(e)) = decoded(&retry) else {
        panic!("an LLM call")
    };
    // Its own key: the failed attempt before it shares Hermes's id.
    assert_eq!(e.api.api_request_id, "aux-5f0c2b#1");
    let u = e.usage.expect("the usage of the attempt that answered");
    assert_eq!((u.input_tokens, u.output_tokens, u.cache_read_tokens), (1200, 64, 300));
    assert_eq!(e.aux_task.as_deref(), Some("compression"));
    // The first attempt's success keeps Hermes's id as it is.
    let Some(Hook::PostApiRequest(first)) = decoded(&post_auxiliary_call("s1", 0, None, false)) else {
        panic!("an LLM call")
    };
    assert_eq!(first.api.api_request_id, "aux-5f0c2b");
}

#[test]
fn a_streamed_auxiliary_attempt_is_a_call_estimated_from_its_output() {
    let mut streamed = post_auxiliary_call("s1", 0, None, true);
    streamed.insert("assistant_content_chars".into(), json!(400));
    let Some(Hook::PostApiRequest(e)) = decoded(&streamed) else {
        panic!("an LLM call")
    };
    assert_eq!(e.usage, None, "no usage: the ledger estimates it");
    assert_eq!(e.assistant_content_chars, Some(400));
}

#[test]
fn a_turnless_auxiliary_call_goes_to_the_days_auxiliary_session() {
    let Some(Hook::PostApiRequest(e)) = decoded(&post_auxiliary_call("", 0, None, false)) else {
        panic!("an LLM call, not dropped")
    };
    assert_eq!(e.api.session_id, "aux_20261130");
    assert_eq!(e.api.platform.as_deref(), Some(AUX_PLATFORM));
    assert_eq!(e.api.turn_id, None);
}
