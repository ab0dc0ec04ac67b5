//! Replay files of hook calls shaped as Hermes git main makes them, for
//! what only main reports.
//!
//! `post_api_request` as `_fire_post_api_request_hook` fires it
//! (NousResearch/hermes-agent `agent/turn_response_intake.py` at
//! 47c93ff826a55e6e49479faad0ebe1b976141fa4), which passes
//! `first_chunk_at=getattr(agent, "_last_api_first_chunk_at", None),`:
//! the attempt's first stream chunk (Unix seconds), `None` when not streamed.

use std::path::{Path, PathBuf};

/// The api_request_id of the call [`streamed_call`] writes for `session`.
pub fn api_request_id(session: &str) -> String {
    format!("{session}:turn-1:api:1")
}

/// Writes a replay file of one LLM call of `session` on Hermes main: its
/// attempt starts at `started_at`, takes 2.5 s, and its first stream chunk
/// arrives at `first_chunk_at` (`None`: not streamed).
pub fn streamed_call(dir: &Path, session: &str, started_at: f64, first_chunk_at: Option<f64>) -> PathBuf {
    let turn = format!("{session}:turn-1");
    let id = api_request_id(session);
    let api = serde_json::json!({
        "task_id": "task-1", "turn_id": turn, "api_request_id": id, "session_id": session,
        "platform": "cli", "model": "mock-model", "provider": "custom", "base_url": "http://127.0.0.1:9/v1",
        "api_mode": "chat_completions", "api_call_count": 1, "started_at": started_at,
    });
    let mut pre = api.clone();
    pre.as_object_mut().expect("object").extend(
        serde_json::json!({"message_count": 2, "tool_count": 0, "approx_input_tokens": 40,
                           "request_char_count": 160, "max_tokens": null})
        .as_object()
        .expect("object")
        .clone(),
    );
    let mut post = api;
    post.as_object_mut().expect("object").extend(
        serde_json::json!({
            "api_duration": 2.5, "ended_at": started_at + 2.5, "first_chunk_at": first_chunk_at,
            "finish_reason": "stop", "message_count": 2, "response_model": "mock-model",
            "usage": {"input_tokens": 40, "output_tokens": 12, "cache_read_tokens": 0, "cache_write_tokens": 0,
                      "reasoning_tokens": 0, "prompt_tokens": 40, "total_tokens": 52},
            "assistant_content_chars": 48, "assistant_tool_call_count": 0, "moa_references": null,
            "telemetry_schema_version": "hermes.observer.v1",
        })
        .as_object()
        .expect("object")
        .clone(),
    );
    let lines = [
        serde_json::json!({"hook": "on_session_start", "t": started_at - 0.1,
            "kwargs": {"session_id": session, "platform": "cli", "model": "mock-model"}}),
        serde_json::json!({"hook": "pre_api_request", "t": started_at, "kwargs": pre}),
        serde_json::json!({"hook": "post_api_request", "t": started_at + 2.5, "kwargs": post}),
    ];
    let path = dir.join(format!("{session}.jsonl"));
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&path, text.join("\n") + "\n").expect("write the call");
    path
}
