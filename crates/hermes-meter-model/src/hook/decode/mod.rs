//! Decoding hook kwargs (plain JSON values) into [`HookEvent`]s.
//!
//! Hermes passes different kwargs at different call sites of one hook, and a
//! future Hermes may change types. So nothing here fails on a surprise: an
//! unknown kwarg is ignored, a wrong type is converted where the meaning is
//! plain (a numeric string, an integral float) and otherwise dropped, and
//! every such repair is reported as a [`Problem`] for the caller to count
//! and log. Only an event without the id it is keyed by is unusable.

use serde_json::{Map, Value};

use super::*;

mod reader;
mod scrub;

pub use reader::Kwargs;
#[cfg(test)]
use reader::MAX_COUNT;
use reader::{Reader, MISSING_ID};
pub use scrub::{args_digest, scrub, scrubbed_key};

/// The auxiliary task of a mixture-of-agents aggregator: the turn's own
/// response, reported by `post_api_request`.
const MOA_AGGREGATOR: &str = "moa_aggregator";

/// Longest id or label kept. Ids from Hermes are under 100 bytes; anything
/// near this is garbage, but it is still someone's id: a longer value keeps
/// a prefix and its tail is replaced by a hash of the whole value
/// ([`reader::fit_label`]), so two long ids that differ only at the end
/// stay two ids (two LLM calls are not merged into one).
pub(super) const MAX_LABEL_BYTES: usize = 1024;

/// The platform of the session turn-less auxiliary calls are counted in.
pub(crate) const AUX_PLATFORM: &str = "auxiliary";

/// The session an auxiliary call made outside any turn is counted in: one
/// per UTC day (`aux_YYYYMMDD`), like Hermes's own cron session ids, so the
/// spend is in every total and budget but in no user's session.
fn turnless_aux_session(at: f64) -> String {
    let day = jiff::Timestamp::from_second(at.floor() as i64)
        .map(|t| t.strftime("%Y%m%d").to_string())
        .unwrap_or_else(|_| "00000000".into());
    format!("aux_{day}")
}

/// The key of a successful auxiliary attempt after the first: every attempt
/// shares Hermes's `api_request_id`, and each one that got an answer was
/// billed, so each is an LLM call of its own.
fn aux_attempt_id(api_request_id: &str, retry_count: i64) -> String {
    format!("{api_request_id}#{retry_count}")
}

/// How to decode.
#[derive(Debug, Clone, Copy)]
pub struct DecodeOptions {
    /// Keep prompts, responses, tool arguments and results.
    pub capture_content: bool,
    /// Largest content string kept when capturing, in bytes.
    pub max_content_bytes: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            capture_content: false,
            max_content_bytes: 64 * 1024,
        }
    }
}

/// Something that was wrong with the kwargs and how it was handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The kwarg concerned.
    pub key: String,
    /// What was wrong, e.g. "expected an integer, got a string".
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.what)
    }
}

/// The result of decoding one hook call.
// Returned once and consumed at once; boxing the event would cost an
// allocation per hook for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A hook the bridge does not use; nothing to do.
    Ignored,
    /// The event, with what had to be repaired on the way.
    Event(HookEvent, Vec<Problem>),
    /// The id the event is keyed by is missing, so it cannot be applied.
    Unusable(Vec<Problem>),
}

/// Decodes the kwargs of one call of `hook`, made at `at` (Unix seconds).
pub fn decode(hook: &str, kwargs: &Map<String, Value>, at: f64, opts: DecodeOptions) -> Decoded {
    decode_kwargs(hook, Kwargs::Parsed(kwargs), at, opts)
}

/// [`decode`] over kwargs parsed or still raw ([`Kwargs`]): the same event
/// either way.
pub(crate) fn decode_kwargs(hook: &str, kwargs: Kwargs<'_>, at: f64, opts: DecodeOptions) -> Decoded {
    let mut r = Reader {
        kw: kwargs,
        problems: Vec::new(),
        opts,
    };
    let hook = match hook {
        "on_session_start" => Hook::SessionStart(SessionStart {
            session_id: r.id("session_id"),
            model: r.label("model"),
            platform: r.label("platform"),
        }),
        "pre_llm_call" => Hook::PreLlmCall(PreLlmCall {
            session_id: r.id("session_id"),
            task_id: r.label("task_id"),
            turn_id: r.id("turn_id"),
            is_first_turn: r.bool("is_first_turn"),
            model: r.label("model"),
            platform: r.label("platform"),
            sender_id: r.label("sender_id"),
            user_message: r.content_str("user_message"),
        }),
        "pre_api_request" => Hook::PreApiRequest(PreApiRequest {
            api: r.api_request(),
            message_count: r.count("message_count"),
            tool_count: r.count("tool_count"),
            approx_input_tokens: r.count("approx_input_tokens"),
            request_char_count: r.count("request_char_count"),
            max_tokens: r.count("max_tokens"),
            request_messages: r.content_value("request_messages"),
            request_model: r.request_model(),
        }),
        "post_api_request" => Hook::PostApiRequest(PostApiRequest {
            api: r.api_request(),
            api_duration: r.seconds("api_duration"),
            ended_at: r.seconds("ended_at"),
            first_chunk_at: r.seconds("first_chunk_at"),
            first_delta_at: r.seconds("first_delta_at"),
            finish_reason: r.label("finish_reason"),
            response_model: r.label("response_model"),
            usage: r.usage(),
            assistant_content_chars: r.count("assistant_content_chars"),
            assistant_tool_call_count: r.count("assistant_tool_call_count"),
            assistant_content: r.assistant_content(),
            aux_task: None,
        }),
        // An auxiliary LLM call (titles, compression, vision, ...): an LLM
        // call like any other, marked with its task. Hermes main fires it
        // once per provider attempt, every attempt of one call with the same
        // `api_request_id` and its own `retry_count` (agent/auxiliary_hooks.py):
        // a failed attempt (`error` set, no usage) is a failed attempt like
        // api_request_error's, and a later attempt that succeeds is a call of
        // its own, billed, so it is keyed by its attempt. A caller outside
        // any turn (cron, gateway idle work) leaves the session empty: its
        // spend goes to that day's auxiliary session, never to whichever
        // session happened to run last.
        "post_auxiliary_call" => {
            let aux_task = r.label("aux_task").unwrap_or_else(|| "auxiliary".into());
            // The mixture-of-agents aggregator is the turn's own call, which
            // post_api_request reports: counting it would add spend nobody
            // was billed.
            if aux_task == MOA_AGGREGATOR {
                return Decoded::Ignored;
            }
            let (session_id, platform) = match r.label("session_id").filter(|s| !s.is_empty()) {
                Some(session) => (session, r.label("platform").filter(|s| !s.is_empty())),
                None => (turnless_aux_session(at), Some(AUX_PLATFORM.to_string())),
            };
            let retry_count = r.count("retry_count").unwrap_or(0);
            let base_id = r
                .label("api_request_id")
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("{session_id}:aux:{aux_task}:{at:.6}"));
            let mut api = ApiRequest {
                session_id,
                task_id: r.label("task_id").filter(|s| !s.is_empty()),
                turn_id: r.label("turn_id").filter(|s| !s.is_empty()),
                api_request_id: base_id,
                platform,
                model: r.label("model"),
                provider: r.label("provider"),
                base_url: r.url("base_url"),
                api_mode: r.label("api_mode"),
                api_call_count: r.count("api_call_count"),
                started_at: r.seconds("started_at"),
            };
            if r.present("error").is_some() {
                Hook::ApiRequestError(ApiRequestError {
                    api,
                    api_duration: r.seconds("api_duration"),
                    ended_at: r.seconds("ended_at"),
                    // Auxiliary attempts carry no stream timestamps.
                    first_chunk_at: None,
                    first_delta_at: None,
                    status_code: r.int("status_code"),
                    retry_count,
                    max_retries: None,
                    retryable: None,
                    reason: None,
                    error_type: r.label("error_type"),
                    error_message: r.content_str("error"),
                })
            } else {
                if retry_count > 0 {
                    api.api_request_id = aux_attempt_id(&api.api_request_id, retry_count);
                }
                Hook::PostApiRequest(PostApiRequest {
                    api,
                    api_duration: r.seconds("api_duration"),
                    ended_at: r.seconds("ended_at"),
                    first_chunk_at: None,
                    first_delta_at: None,
                    finish_reason: r.label("finish_reason"),
                    response_model: r.label("response_model"),
                    usage: r.usage(),
                    // What a streamed attempt's output is estimated from (it
                    // reports no usage).
                    assistant_content_chars: r.count("assistant_content_chars"),
                    assistant_tool_call_count: None,
                    assistant_content: None,
                    aux_task: Some(aux_task),
                })
            }
        }
        "api_request_error" => {
            let api = r.api_request();
            let (error_type, error_message) = r.error_object();
            Hook::ApiRequestError(ApiRequestError {
                api,
                api_duration: r.seconds("api_duration"),
                ended_at: r.seconds("ended_at"),
                first_chunk_at: r.seconds("first_chunk_at"),
                first_delta_at: r.seconds("first_delta_at"),
                status_code: r.int("status_code"),
                retry_count: r.count("retry_count").unwrap_or(0),
                max_retries: r.count("max_retries"),
                retryable: r.bool("retryable"),
                reason: r.label("reason"),
                error_type,
                error_message,
            })
        }
        "pre_tool_call" => {
            let tool = r.tool_ref();
            let meter_change = r.meter_change(&tool.tool_name);
            Hook::PreToolCall(PreToolCall {
                args_digest: r.args_digest(),
                meter_change,
                args: r.content_value("args"),
                tool,
            })
        }
        "post_tool_call" => {
            let tool = r.tool_ref();
            let outcome = r.tool_result_facts();
            Hook::PostToolCall(PostToolCall {
                tool,
                duration_ms: r.count("duration_ms"),
                status: r.label("status"),
                error_type: r.label("error_type"),
                error_message: r.content_str("error_message"),
                outcome,
                args: r.content_value("args"),
                result: r.content_str("result"),
            })
        }
        "post_llm_call" => Hook::PostLlmCall(PostLlmCall {
            session_id: r.id("session_id"),
            task_id: r.label("task_id"),
            turn_id: r.id("turn_id"),
            model: r.label("model"),
            platform: r.label("platform"),
            assistant_response: r.content_str("assistant_response"),
        }),
        "subagent_start" => Hook::SubagentStart(SubagentStart {
            parent_session_id: r.id("parent_session_id"),
            parent_turn_id: r.label("parent_turn_id"),
            parent_subagent_id: r.label("parent_subagent_id"),
            child_session_id: r.id("child_session_id"),
            child_subagent_id: r.label("child_subagent_id"),
            child_role: r.label("child_role"),
            child_goal: r.content_str("child_goal"),
        }),
        "subagent_stop" => Hook::SubagentStop(SubagentStop {
            parent_session_id: r.id("parent_session_id"),
            parent_turn_id: r.label("parent_turn_id"),
            child_session_id: r.id("child_session_id"),
            child_role: r.label("child_role"),
            child_status: match r.label("child_status") {
                Some(status) => Some(status),
                None => r.child_outcome(),
            },
            duration_ms: r.count("duration_ms"),
            child_summary: r.content_str("child_summary"),
        }),
        "on_session_end" => Hook::SessionEnd(SessionEnd {
            session_id: r.id("session_id"),
            task_id: r.label("task_id"),
            turn_id: r.id("turn_id"),
            completed: r.bool("completed"),
            interrupted: r.bool("interrupted"),
            model: r.label("model"),
            platform: r.label("platform"),
        }),
        "on_session_finalize" => Hook::SessionFinalize(SessionFinalize {
            session_id: r.id("session_id"),
            platform: r.label("platform"),
            reason: r.label("reason"),
        }),
        "pre_approval_request" | "post_approval_response" => {
            let turn_id = r.label("turn_id");
            let session_key = r.label("session_key");
            let session_id = turn_id
                .as_deref()
                .and_then(|t| t.split(':').next())
                .or(session_key.as_deref())
                .unwrap_or_default()
                .to_string();
            let approval = Approval {
                session_id,
                session_key,
                turn_id,
                tool_call_id: r.label("tool_call_id"),
                surface: r.label("surface"),
                pattern_key: r.label("pattern_key"),
                choice: r.label("choice"),
                decided_by: r.label("decided_by"),
                command: r.content_str("command"),
            };
            if approval.session_id.is_empty() {
                return Decoded::Unusable(vec![Problem {
                    key: "turn_id".into(),
                    what: MISSING_ID.into(),
                }]);
            }
            if hook == "pre_approval_request" {
                Hook::ApprovalRequest(approval)
            } else {
                Hook::ApprovalResponse(approval)
            }
        }
        _ => return Decoded::Ignored,
    };
    if r.problems.iter().any(|p| p.what == MISSING_ID) {
        return Decoded::Unusable(r.problems);
    }
    let at = if at.is_finite() && at > 0.0 { at } else { 0.0 };
    Decoded::Event(HookEvent { at, hook }, r.problems)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod approval_tests;
#[cfg(test)]
mod hermes_main_tests;
