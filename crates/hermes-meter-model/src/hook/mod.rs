//! Typed Hermes hook events.
//!
//! Owns: one variant per Hermes hook the bridge uses, and decoding those
//! variants from plain values (`decode`). Must not touch: the store, the
//! network, Python. Both `replay` (JSON lines) and the Python binding build
//! a kwargs map and go through the same decoder, so a hook means the same
//! thing whichever way it arrived.

mod decode;
mod keys;
pub mod protect;
mod record;

pub(crate) use decode::decode_kwargs;
pub use decode::{args_digest, decode, scrub, scrubbed_key, DecodeOptions, Decoded, Kwargs, Problem};
pub use keys::{keys, HookKeys, ASSISTANT_MESSAGE, REQUEST, TOOL_RESULT};
pub(crate) use keys::{ARGS_DIGEST, ARGS_METER};
pub use record::RecordMark;
pub use record::{decode_record, parse_line, utf8, write_json, write_record, Origin, Record, RecordWriter};

use serde::{Deserialize, Serialize};

/// The hooks the bridge registers, by the name Hermes gives them.
pub const HOOK_NAMES: [&str; 15] = [
    "on_session_start",
    "pre_llm_call",
    "pre_api_request",
    "post_api_request",
    "api_request_error",
    "pre_tool_call",
    "post_tool_call",
    "post_llm_call",
    "subagent_start",
    "subagent_stop",
    "on_session_end",
    "on_session_finalize",
    "pre_approval_request",
    "post_approval_response",
    // Fired by Hermes releases that have it; on 0.19.0 the package calls it
    // itself from Hermes's own auxiliary accounting (see python/hermes_meter).
    "post_auxiliary_call",
];

/// Hooks the package registers only where the running Hermes knows them
/// (feature-detected at register time); elsewhere it feeds them itself.
pub const OPTIONAL_HOOKS: [&str; 1] = ["post_auxiliary_call"];

/// One hook call, decoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookEvent {
    /// Wall-clock time of the call, in Unix seconds.
    pub at: f64,
    /// What the hook said.
    pub hook: Hook,
}

/// A decoded hook call, a variant per hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "hook", rename_all = "snake_case")]
pub enum Hook {
    SessionStart(SessionStart),
    PreLlmCall(PreLlmCall),
    PreApiRequest(PreApiRequest),
    PostApiRequest(PostApiRequest),
    ApiRequestError(ApiRequestError),
    PreToolCall(PreToolCall),
    PostToolCall(PostToolCall),
    PostLlmCall(PostLlmCall),
    SubagentStart(SubagentStart),
    SubagentStop(SubagentStop),
    SessionEnd(SessionEnd),
    SessionFinalize(SessionFinalize),
    ApprovalRequest(Approval),
    ApprovalResponse(Approval),
    /// Not a Hermes hook: the user confirmed a held call's usage
    /// (`hermes-meter held confirm`). Journaled like a hook, so a rebuild
    /// from the journal bills the call again.
    UsageConfirmed(UsageConfirmed),
}

impl Hook {
    /// The Hermes name of the hook.
    pub fn name(&self) -> &'static str {
        match self {
            Hook::SessionStart(_) => "on_session_start",
            Hook::PreLlmCall(_) => "pre_llm_call",
            Hook::PreApiRequest(_) => "pre_api_request",
            Hook::PostApiRequest(_) => "post_api_request",
            Hook::ApiRequestError(_) => "api_request_error",
            Hook::PreToolCall(_) => "pre_tool_call",
            Hook::PostToolCall(_) => "post_tool_call",
            Hook::PostLlmCall(_) => "post_llm_call",
            Hook::SubagentStart(_) => "subagent_start",
            Hook::SubagentStop(_) => "subagent_stop",
            Hook::SessionEnd(_) => "on_session_end",
            Hook::SessionFinalize(_) => "on_session_finalize",
            Hook::ApprovalRequest(_) => "pre_approval_request",
            Hook::ApprovalResponse(_) => "post_approval_response",
            Hook::UsageConfirmed(_) => "usage_confirmed",
        }
    }

    /// The session the event belongs to. For subagent hooks that is the
    /// parent's session, the one whose trace and budget the edge is part of.
    pub fn session_id(&self) -> &str {
        match self {
            Hook::SessionStart(e) => &e.session_id,
            Hook::PreLlmCall(e) => &e.session_id,
            Hook::PreApiRequest(e) => &e.api.session_id,
            Hook::PostApiRequest(e) => &e.api.session_id,
            Hook::ApiRequestError(e) => &e.api.session_id,
            Hook::PreToolCall(e) => &e.tool.session_id,
            Hook::PostToolCall(e) => &e.tool.session_id,
            Hook::PostLlmCall(e) => &e.session_id,
            Hook::SubagentStart(e) => &e.parent_session_id,
            Hook::SubagentStop(e) => &e.parent_session_id,
            Hook::SessionEnd(e) => &e.session_id,
            Hook::SessionFinalize(e) => &e.session_id,
            Hook::ApprovalRequest(e) | Hook::ApprovalResponse(e) => &e.session_id,
            Hook::UsageConfirmed(e) => &e.session_id,
        }
    }

    /// The event without its captured content (prompts, answers, tool
    /// arguments and results, commands), or `None` when it carries none.
    /// The journal keeps events this way: content lives only in
    /// `span_content`, where its retention applies.
    pub fn without_content(&self) -> Option<Hook> {
        let has = match self {
            Hook::PreLlmCall(e) => e.user_message.is_some(),
            Hook::PreApiRequest(e) => e.request_messages.is_some(),
            Hook::PostApiRequest(e) => e.assistant_content.is_some(),
            Hook::PreToolCall(e) => e.args.is_some(),
            Hook::PostToolCall(e) => e.args.is_some() || e.result.is_some(),
            Hook::PostLlmCall(e) => e.assistant_response.is_some(),
            Hook::SubagentStop(e) => e.child_summary.is_some(),
            Hook::ApprovalRequest(e) | Hook::ApprovalResponse(e) => e.command.is_some(),
            _ => false,
        };
        if !has {
            return None;
        }
        let mut hook = self.clone();
        match &mut hook {
            Hook::PreLlmCall(e) => e.user_message = None,
            Hook::PreApiRequest(e) => e.request_messages = None,
            Hook::PostApiRequest(e) => e.assistant_content = None,
            Hook::PreToolCall(e) => e.args = None,
            Hook::PostToolCall(e) => {
                e.args = None;
                e.result = None;
            }
            Hook::PostLlmCall(e) => e.assistant_response = None,
            Hook::SubagentStop(e) => e.child_summary = None,
            Hook::ApprovalRequest(e) | Hook::ApprovalResponse(e) => e.command = None,
            _ => {}
        }
        Some(hook)
    }

    /// The most specific Hermes id of the event, part of its journal key.
    pub fn natural_id(&self) -> String {
        match self {
            Hook::PreApiRequest(e) => e.api.api_request_id.clone(),
            Hook::PostApiRequest(e) => e.api.api_request_id.clone(),
            Hook::ApiRequestError(e) => format!("{}#{}", e.api.api_request_id, e.retry_count),
            Hook::PreToolCall(e) => format!("{}/{}", e.tool.session_id, e.tool.tool_call_id),
            Hook::PostToolCall(e) => format!("{}/{}", e.tool.session_id, e.tool.tool_call_id),
            Hook::PreLlmCall(e) => e.turn_id.clone(),
            Hook::PostLlmCall(e) => e.turn_id.clone(),
            Hook::SessionEnd(e) => e.turn_id.clone(),
            Hook::SubagentStart(e) => e.child_session_id.clone(),
            Hook::SubagentStop(e) => e.child_session_id.clone(),
            Hook::SessionStart(e) => e.session_id.clone(),
            Hook::SessionFinalize(e) => e.session_id.clone(),
            Hook::ApprovalRequest(e) | Hook::ApprovalResponse(e) => format!("{}/{}", e.session_id, e.key()),
            Hook::UsageConfirmed(e) => e.api_request_id.clone(),
        }
    }
}

/// A held LLM call (usage beyond what any provider bills in one call,
/// [`crate::pricing::usage_beyond_bounds`]) the user confirmed as real:
/// it is billed from its recorded usage at the price table's cost.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct UsageConfirmed {
    pub session_id: String,
    pub api_request_id: String,
}

/// `on_session_start`: a session begins (not fired for `--resume`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SessionStart {
    pub session_id: String,
    pub model: Option<String>,
    pub platform: Option<String>,
}

/// `pre_llm_call`: a turn begins.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PreLlmCall {
    pub session_id: String,
    pub task_id: Option<String>,
    pub turn_id: String,
    pub is_first_turn: Option<bool>,
    pub model: Option<String>,
    pub platform: Option<String>,
    pub sender_id: Option<String>,
    /// The user's message; only with content capture on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_message: Option<String>,
}

/// Ids and routing shared by the three API-request hooks.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ApiRequest {
    pub session_id: String,
    pub task_id: Option<String>,
    pub turn_id: Option<String>,
    pub api_request_id: String,
    pub platform: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub api_mode: Option<String>,
    pub api_call_count: Option<i64>,
    /// When the first attempt started; retries keep it.
    pub started_at: Option<f64>,
}

/// `pre_api_request`: one attempt of an LLM API call is about to be sent.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PreApiRequest {
    #[serde(flatten)]
    pub api: ApiRequest,
    pub message_count: Option<i64>,
    pub tool_count: Option<i64>,
    pub approx_input_tokens: Option<i64>,
    pub request_char_count: Option<i64>,
    pub max_tokens: Option<i64>,
    /// The request messages; only with content capture on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_messages: Option<serde_json::Value>,
    /// The model the provider is asked for (`request.body.model`), after
    /// any `llm_request` middleware; `None` where Hermes passes no request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_model: Option<String>,
}

impl PreApiRequest {
    /// The model the call was routed to when a middleware changed it (a
    /// budget downgrade): `request_model` where it differs from the
    /// agent's `model`.
    pub fn routed_model(&self) -> Option<&str> {
        self.request_model
            .as_deref()
            .filter(|m| !m.is_empty() && Some(*m) != self.api.model.as_deref())
    }
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Token usage as Hermes reports it. `input_tokens` excludes cache reads
/// and writes; `prompt_tokens` and `total_tokens` are kept for the journal
/// but never added into anything.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    /// Of `cache_write_tokens`, those the provider says it keeps an hour
    /// (Anthropic's `cache_creation.ephemeral_1h_input_tokens`; the plugin
    /// adds it beside Hermes's usage): billed at the one-hour rate.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_1h_tokens: i64,
    pub reasoning_tokens: i64,
    pub prompt_tokens: Option<i64>,
    pub total_tokens: Option<i64>,
    /// What the provider billed for the call, in USD, where its usage says
    /// (OpenRouter's `usage.cost`); it then wins over the price table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_cost_usd: Option<f64>,
    /// What the provider behind a gateway charged for the call, in USD
    /// (`usage.cost_details.upstream_inference_cost`: Nous Portal's real
    /// charge; OpenRouter's on the user's own key). See
    /// [`crate::pricing::PriceTable::bill`] for which figure wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_upstream_usd: Option<f64>,
    /// The call ran on the user's own provider key through the gateway
    /// (OpenRouter's `usage.is_byok`): the gateway's `cost` is its fee, on
    /// top of the upstream charge.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub provider_byok: bool,
}

/// `post_api_request`: an LLM API call succeeded.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PostApiRequest {
    #[serde(flatten)]
    pub api: ApiRequest,
    /// Seconds from the first attempt's start; includes failed attempts and backoff.
    pub api_duration: Option<f64>,
    pub ended_at: Option<f64>,
    /// When this attempt's first stream chunk arrived (Unix seconds), as
    /// Hermes main measures it; `None` when not streamed or older Hermes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_chunk_at: Option<f64>,
    /// When this attempt's first text delta arrived (Unix seconds), where
    /// Hermes reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_delta_at: Option<f64>,
    pub finish_reason: Option<String>,
    pub response_model: Option<String>,
    /// `None` when the provider sent no usage.
    pub usage: Option<Usage>,
    pub assistant_content_chars: Option<i64>,
    pub assistant_tool_call_count: Option<i64>,
    /// The assistant's text; only with content capture on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assistant_content: Option<String>,
    /// The auxiliary task (`title_generation`, `compression`, `vision`, ...)
    /// when this is an auxiliary LLM call (`post_auxiliary_call`), which
    /// Hermes makes outside the turn's own API requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aux_task: Option<String>,
}

impl PostApiRequest {
    /// When the first token arrived: the first text delta where Hermes
    /// reports one, else the first stream chunk. Hermes's own timestamps,
    /// taken on the thread reading the stream; main's `on_stream_*` hooks
    /// carry none and reach a plugin through a bounded queue and a
    /// background worker, so the time a plugin sees them is late.
    pub fn first_token_at(&self) -> Option<f64> {
        self.first_delta_at.or(self.first_chunk_at)
    }
}

/// `api_request_error`: one attempt of an LLM API call failed.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ApiRequestError {
    #[serde(flatten)]
    pub api: ApiRequest,
    pub api_duration: Option<f64>,
    pub ended_at: Option<f64>,
    /// As on [`PostApiRequest`]: kept in the journal, not yet on any span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_chunk_at: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_delta_at: Option<f64>,
    pub status_code: Option<i64>,
    pub retry_count: i64,
    pub max_retries: Option<i64>,
    pub retryable: Option<bool>,
    pub reason: Option<String>,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
}

/// Ids shared by the tool hooks.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolRef {
    pub session_id: String,
    pub task_id: Option<String>,
    pub turn_id: Option<String>,
    pub api_request_id: Option<String>,
    pub tool_call_id: String,
    pub tool_name: String,
}

/// `pre_tool_call`: a tool is about to run (the gating hook).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PreToolCall {
    #[serde(flatten)]
    pub tool: ToolRef,
    /// The tool arguments; only with content capture on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Value>,
    /// A digest of the arguments, kept whatever capture says, so repeated
    /// identical calls are seen (see [`args_digest`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_digest: Option<String>,
    /// What the call would change of the meter that limits the agent
    /// (`protect::meter_change`), whatever capture says: the gate
    /// refuses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meter_change: Option<String>,
}

/// `post_tool_call`: a tool finished.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PostToolCall {
    #[serde(flatten)]
    pub tool: ToolRef,
    pub duration_ms: Option<i64>,
    /// Hermes's own status ("ok", "error", "blocked", ...), when given.
    pub status: Option<String>,
    pub error_type: Option<String>,
    pub error_message: Option<String>,
    /// What the result says, read out of it whatever capture says.
    pub outcome: ToolResultFacts,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args: Option<serde_json::Value>,
    /// The result text; only with content capture on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
}

/// Facts read from a tool's JSON result text.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ToolResultFacts {
    /// `exit_code` of a terminal-style result.
    pub exit_code: Option<i64>,
    /// The result had an `error` key with a truthy value (`"error": null` is not).
    pub error_truthy: bool,
    /// The result said `"success": false`.
    pub success_false: bool,
}

impl PostToolCall {
    /// Whether the tool call succeeded. Hermes's `status` decides when it is
    /// present ("ok" is success, anything else is not); without it, a
    /// non-zero exit code, a truthy `error` or `"success": false` fails.
    pub fn ok(&self) -> bool {
        match self.status.as_deref() {
            Some(status) => status == "ok",
            None => {
                !(self.outcome.exit_code.is_some_and(|c| c != 0)
                    || self.outcome.error_truthy
                    || self.outcome.success_false)
            }
        }
    }
}

/// `post_llm_call`: a turn produced its final answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PostLlmCall {
    pub session_id: String,
    pub task_id: Option<String>,
    pub turn_id: String,
    pub model: Option<String>,
    pub platform: Option<String>,
    /// The final answer; only with content capture on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assistant_response: Option<String>,
}

/// `subagent_start`: a delegation began, on the parent's thread.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SubagentStart {
    pub parent_session_id: String,
    pub parent_turn_id: Option<String>,
    pub parent_subagent_id: Option<String>,
    pub child_session_id: String,
    pub child_subagent_id: Option<String>,
    pub child_role: Option<String>,
    pub child_goal: Option<String>,
}

/// `subagent_stop`: a delegation ended (for background delegations, later and
/// on another thread).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SubagentStop {
    pub parent_session_id: String,
    pub parent_turn_id: Option<String>,
    pub child_session_id: String,
    pub child_role: Option<String>,
    pub child_status: Option<String>,
    pub duration_ms: Option<i64>,
    /// The child's summary; only with content capture on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub child_summary: Option<String>,
}

/// `on_session_end`: fires once per turn that completed or was interrupted.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SessionEnd {
    pub session_id: String,
    pub task_id: Option<String>,
    pub turn_id: String,
    pub completed: Option<bool>,
    pub interrupted: Option<bool>,
    pub model: Option<String>,
    pub platform: Option<String>,
}

/// `on_session_finalize`: the process is done with the session. Never fires
/// for `hermes -z`, cron runs or subagents.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SessionFinalize {
    pub session_id: String,
    pub platform: Option<String>,
    pub reason: Option<String>,
}

/// `pre_approval_request` and `post_approval_response`: a command a tool
/// wants to run waits for a decision, by the user (CLI prompt, gateway
/// message) or by Hermes's auxiliary model (`surface` "smart"). Hermes
/// 0.19.0 passes no session id: it is the turn id's first part (Hermes's
/// turn ids are `{session_id}:...`), else the approval session key.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Approval {
    pub session_id: String,
    pub session_key: Option<String>,
    pub turn_id: Option<String>,
    /// The tool call waiting for the decision, when Hermes knows it.
    pub tool_call_id: Option<String>,
    /// `cli`, `gateway` or `smart`.
    pub surface: Option<String>,
    pub pattern_key: Option<String>,
    /// `post_approval_response` only: `once`, `session`, `always`, `deny`,
    /// `timeout`, `smart_approve`, `smart_deny`.
    pub choice: Option<String>,
    /// `aux_llm` when the auxiliary model decided.
    pub decided_by: Option<String>,
    /// The command (content: only with capture on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl Approval {
    /// What the approval is of: the tool call, else the turn, else the
    /// pattern that asked.
    pub fn key(&self) -> &str {
        self.tool_call_id
            .as_deref()
            .or(self.turn_id.as_deref())
            .or(self.pattern_key.as_deref())
            .unwrap_or("approval")
    }

    /// The decision `choice` stands for: `approve`, `deny`, `timeout` or
    /// `cancelled`; `None` for no decision: Hermes main's `notify_failed`
    /// (the prompt could not be shown; an answer may still follow) and a
    /// choice this build does not know (counting it as a deny would
    /// invent one).
    pub fn decision(&self) -> Option<&'static str> {
        Some(match self.choice.as_deref()? {
            "once" | "session" | "always" | "smart_approve" | "approve" => "approve",
            "deny" | "smart_deny" => "deny",
            "timeout" => "timeout",
            "cancelled" => "cancelled",
            _ => return None,
        })
    }
}
