//! Hook events that spend, for the budget and fleet tests: gpt-4o calls of
//! a fixed cost, decoded from the kwargs Hermes passes.

use hermes_meter_model::hook::{decode, DecodeOptions, Decoded, HookEvent};
use serde_json::{json, Value};

/// gpt-4o is $2.50 per million input tokens in the built-in table: 10,000
/// input tokens cost $0.025.
pub const CALL_USD: f64 = 0.025;

/// A hook call decoded as the binding would.
pub fn event(hook: &str, at: f64, kwargs: Value) -> HookEvent {
    let map = kwargs.as_object().expect("kwargs object").clone();
    match decode(hook, &map, at, DecodeOptions::default()) {
        Decoded::Event(e, _) => e,
        other => panic!("{hook}: {other:?}"),
    }
}

/// The `pre_api_request` of a [`CALL_USD`] call (its reservation is that much).
pub fn pre_api(session: &str, id: &str, at: f64) -> HookEvent {
    event(
        "pre_api_request",
        at,
        json!({"session_id": session, "turn_id": format!("{session}:t"), "api_request_id": id, "model": "gpt-4o",
               "platform": "cli", "approx_input_tokens": 10_000, "max_tokens": 0}),
    )
}

/// The `post_api_request` of a [`CALL_USD`] call (without usage: estimated).
pub fn post_api(session: &str, id: &str, at: f64, usage: bool) -> HookEvent {
    let usage = if usage {
        json!({"input_tokens": 10_000, "output_tokens": 0, "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0})
    } else {
        Value::Null
    };
    event(
        "post_api_request",
        at,
        json!({"session_id": session, "turn_id": format!("{session}:t"), "api_request_id": id, "model": "gpt-4o",
               "platform": "cli", "api_duration": 0.5, "ended_at": at, "usage": usage, "assistant_content_chars": 0}),
    )
}

/// A terminal `pre_tool_call`.
pub fn pre_tool(session: &str, call: &str, at: f64) -> HookEvent {
    event(
        "pre_tool_call",
        at,
        json!({"session_id": session, "tool_call_id": call, "tool_name": "terminal"}),
    )
}
