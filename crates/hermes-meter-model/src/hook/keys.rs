//! Which kwargs the decoder reads, per hook.
//!
//! The binding copies only these out of a hook call (copying costs time
//! while Hermes waits, and content must not be copied unless capture is
//! on). A test below decodes every fixture record twice, from all its
//! kwargs and from only these, and requires the same event, so this table
//! cannot drift from the decoder.

/// The kwargs of one hook the decoder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookKeys {
    /// Always copied: ids, counts, timings, statuses.
    pub always: &'static [&'static str],
    /// Copied only with content capture on.
    pub content: &'static [&'static str],
    /// Content copied whatever capture says, only for [`super::scrub`] to
    /// write its digest (then dropped unless captured): a tool call's
    /// arguments, so a run repeating one call is seen without its content.
    pub digested: &'static [&'static str],
}

/// The kwarg [`super::scrub`] writes with the digest of a tool call's
/// arguments.
pub(crate) const ARGS_DIGEST: &str = "args_digest";

/// The kwarg [`super::scrub`] writes beside the digest of a `pre_tool_call`'s
/// arguments when they would change the meter (`super::protect::meter_change_in`).
pub(crate) const ARGS_METER: &str = "args_meter";

/// The kwarg of `post_api_request` holding the `NormalizedResponse`; the
/// binding reads only its `content` attribute, and only with capture on.
pub const ASSISTANT_MESSAGE: &str = "assistant_message";

/// The kwarg of `pre_api_request` holding the provider request
/// (`{"method", "body"}`); the binding copies only `body.model` out of it.
pub const REQUEST: &str = "request";

/// The kwarg of `post_tool_call` holding the result text. It is always
/// copied (the decoder reads exit code, error and success out of it), but
/// kept in the event only with capture on.
pub const TOOL_RESULT: &str = "result";

const API: [&str; 11] = [
    "session_id",
    "task_id",
    "turn_id",
    "api_request_id",
    "platform",
    "model",
    "provider",
    "base_url",
    "api_mode",
    "api_call_count",
    "started_at",
];

const TOOL: [&str; 6] = [
    "session_id",
    "task_id",
    "turn_id",
    "api_request_id",
    "tool_call_id",
    "tool_name",
];

const fn concat<const A: usize, const B: usize, const N: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < A {
        out[i] = a[i];
        i += 1;
    }
    while i < N {
        out[i] = b[i - A];
        i += 1;
    }
    out
}

const PRE_API: [&str; 17] = concat(
    API,
    [
        "message_count",
        "tool_count",
        "approx_input_tokens",
        "request_char_count",
        "max_tokens",
        REQUEST,
    ],
);
// Hermes main's stream timestamps (agent/turn_response_intake.py,
// agent/api_request_hooks.py); older Hermes sends neither.
const POST_API: [&str; 20] = concat(
    API,
    [
        "api_duration",
        "ended_at",
        "first_chunk_at",
        "first_delta_at",
        "finish_reason",
        "response_model",
        "usage",
        "assistant_content_chars",
        "assistant_tool_call_count",
    ],
);
const API_ERROR: [&str; 21] = concat(
    API,
    [
        "error",
        "api_duration",
        "ended_at",
        "first_chunk_at",
        "first_delta_at",
        "status_code",
        "retry_count",
        "max_retries",
        "retryable",
        "reason",
    ],
);
// Hermes main fires post_auxiliary_call once per provider attempt: which
// attempt (`retry_count`) and whether it failed (`error`, `error_type`)
// decide what it is (agent/auxiliary_hooks.py).
const POST_AUX: [&str; 24] = concat(POST_API, ["aux_task", "retry_count", "error", "error_type"]);
const APPROVAL: [&str; 5] = ["session_key", "turn_id", "tool_call_id", "surface", "pattern_key"];
const POST_APPROVAL: [&str; 7] = concat(APPROVAL, ["choice", "decided_by"]);
const POST_TOOL: [&str; 10] = concat(TOOL, ["duration_ms", "status", "error_type", TOOL_RESULT]);

/// The kwargs `hook` is decoded from, or `None` for a hook the bridge
/// does not use.
pub fn keys(hook: &str) -> Option<HookKeys> {
    let (always, content): (&'static [&'static str], &'static [&'static str]) = match hook {
        "on_session_start" => (&["session_id", "model", "platform"], &[]),
        "pre_llm_call" => (
            &[
                "session_id",
                "task_id",
                "turn_id",
                "is_first_turn",
                "model",
                "platform",
                "sender_id",
            ],
            &["user_message"],
        ),
        "pre_api_request" => (&PRE_API, &["request_messages"]),
        "post_api_request" => (&POST_API, &[ASSISTANT_MESSAGE]),
        "post_auxiliary_call" => (&POST_AUX, &[]),
        "api_request_error" => (&API_ERROR, &[]),
        "pre_tool_call" => (&TOOL, &["args"]),
        // The error message names what the tool was given ("File not found:
        // /abs/path"): content.
        "post_tool_call" => (&POST_TOOL, &["args", "error_message"]),
        "post_llm_call" => (
            &["session_id", "task_id", "turn_id", "model", "platform"],
            &["assistant_response"],
        ),
        "subagent_start" => (
            &[
                "parent_session_id",
                "parent_turn_id",
                "parent_subagent_id",
                "child_session_id",
                "child_subagent_id",
                "child_role",
            ],
            // The goal is the subagent's prompt.
            &["child_goal"],
        ),
        "subagent_stop" => (
            &[
                "parent_session_id",
                "parent_turn_id",
                "child_session_id",
                "child_role",
                "child_status",
                "duration_ms",
            ],
            &["child_summary"],
        ),
        "on_session_end" => (
            &[
                "session_id",
                "task_id",
                "turn_id",
                "completed",
                "interrupted",
                "model",
                "platform",
            ],
            &[],
        ),
        "on_session_finalize" => (&["session_id", "platform", "reason"], &[]),
        "pre_approval_request" => (&APPROVAL, &["command"]),
        "post_approval_response" => (&POST_APPROVAL, &["command"]),
        _ => return None,
    };
    let digested: &'static [&'static str] = if hook == "pre_tool_call" { &["args"] } else { &[] };
    Some(HookKeys {
        always,
        content,
        digested,
    })
}

/// The kwargs the binding copies out of one call of `hook`: only those
/// [`keys`] lists (content ones only with `capture_content`). Decoding this
/// is decoding what the binding hands the decoder.
#[cfg(test)]
pub(crate) fn copied(
    hook: &str,
    kwargs: &serde_json::Map<String, serde_json::Value>,
    capture_content: bool,
) -> serde_json::Map<String, serde_json::Value> {
    let Some(k) = keys(hook) else {
        return serde_json::Map::new();
    };
    let content: &[&str] = if capture_content { k.content } else { k.digested };
    k.always
        .iter()
        .chain(content)
        .filter_map(|key| kwargs.get(*key).map(|v| (key.to_string(), v.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{decode, DecodeOptions, Decoded, HOOK_NAMES};
    use serde_json::Value;

    #[test]
    fn every_registered_hook_has_keys_and_others_have_none() {
        for name in HOOK_NAMES {
            assert!(keys(name).is_some(), "{name}");
        }
        assert_eq!(keys("transform_tool_result"), None);
    }

    #[test]
    fn decoding_only_the_listed_keys_gives_the_same_event() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).expect("fixtures dir") {
            let path = entry.expect("entry").path();
            if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read fixture");
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let record: Value = serde_json::from_str(line).expect("fixture line is JSON");
                let hook = record["hook"].as_str().expect("hook name");
                let all = record["kwargs"].as_object().expect("kwargs").clone();
                if keys(hook).is_none() {
                    continue;
                }
                for capture_content in [false, true] {
                    let opts = DecodeOptions {
                        capture_content,
                        ..DecodeOptions::default()
                    };
                    let only = copied(hook, &all, capture_content);
                    let full = decode(hook, &all, 1.0, opts);
                    let part = decode(hook, &only, 1.0, opts);
                    assert!(matches!(full, Decoded::Event(..)), "{hook} in {path:?}");
                    assert_eq!(full, part, "{hook} in {path:?}, capture {capture_content}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 100, "only {checked} records checked");
    }
}
