//! The ledger rows the span builder reads: a session, its turns, LLM
//! attempts, tool calls, approvals and the delegation that started it.
//!
//! Owns: these plain row types. Must not touch: SQL (the store fills them,
//! in `crates/hermes-meter-store/src/outbox/` and `crates/hermes-meter-store/src/trace_view.rs`), span building
//! (`span.rs`).

/// A session as the span builder sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunRow {
    pub session_id: String,
    pub platform: Option<String>,
    pub cron_job_id: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub sender_id: Option<String>,
    pub profile: Option<String>,
    pub started_at: f64,
    pub ended_at: Option<f64>,
    pub last_event_at: f64,
    pub finalized_at: Option<f64>,
    pub status: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    /// The error type of the session's last failed attempt, if any.
    pub last_error_type: Option<String>,
    /// The delegation that started this session, if it is a subagent.
    pub edge: Option<EdgeRow>,
    /// The session span being recorded now (0: the root span).
    pub span_n: i64,
    /// When continuation `span_n` began, once it has a turn.
    pub span_started_at: Option<f64>,
    /// The totals when the previous session span was sent: input tokens
    /// (cache included), output tokens, cost.
    pub span_base: (i64, i64, f64),
    /// Why hermes-meter closed the run itself (`idle_timeout`,
    /// `process_exit`), if it did.
    pub close_reason: Option<String>,
    /// The session's first budget stop (a call blocked or stopped by a
    /// budget, a cap or the runaway watch): what the agent was told.
    pub budget_stop: Option<String>,
}

/// A delegation from a parent session to this one.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EdgeRow {
    pub parent_session_id: String,
    pub parent_turn_id: Option<String>,
    pub role: Option<String>,
    pub child_status: Option<String>,
    pub started_at: f64,
    /// The parent's `delegate_task` tool call whose span the child hangs under.
    pub delegate_tool_call_id: Option<String>,
}

/// A turn.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnRow {
    pub turn_id: String,
    pub session_id: String,
    pub task_id: Option<String>,
    pub started_at: f64,
    pub ended_at: Option<f64>,
    pub outcome: Option<String>,
    pub last_error_type: Option<String>,
    /// The session span it hangs under (0: the root span).
    pub span_n: i64,
}

/// A tool call's wait for approval.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApprovalRow {
    pub session_id: String,
    pub key: String,
    pub turn_id: Option<String>,
    pub tool_call_id: Option<String>,
    pub surface: Option<String>,
    pub started_at: f64,
    pub ended_at: Option<f64>,
    pub choice: Option<String>,
    pub decided_by: Option<String>,
}

/// One LLM API attempt: a success, a failure, or one left open.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttemptRow {
    pub api_request_id: String,
    pub session_id: String,
    pub turn_id: Option<String>,
    /// 0-based place among the request's attempts (the span's identity).
    pub attempt: i64,
    /// Hermes's `retry_count` where it differs from `attempt`: Hermes 0.22's
    /// recovery cycles count their retries from 0 again.
    pub retry_count: Option<i64>,
    pub model: Option<String>,
    pub response_model: Option<String>,
    pub provider: Option<String>,
    pub base_url: Option<String>,
    pub started_at: f64,
    /// `None` for an attempt left open.
    pub ended_at: Option<f64>,
    pub finish_reason: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    pub cost_usd: Option<f64>,
    pub cost_source: Option<String>,
    pub estimated: bool,
    /// Set for failed attempts.
    pub error: Option<AttemptError>,
    pub max_retries: Option<i64>,
    /// The auxiliary task of an auxiliary LLM call.
    pub aux_task: Option<String>,
    /// When a successful attempt's first token arrived, where Hermes
    /// reported it (`llm_calls.first_token_at`).
    pub first_token_at: Option<f64>,
}

impl AttemptRow {
    /// Seconds from the attempt's start to its first token, where known.
    pub(crate) fn time_to_first_token(&self) -> Option<f64> {
        time_to_first_token(self.started_at, self.first_token_at)
    }
}

/// Seconds from `started_at` to `first_token_at`. A first token stamped
/// before the start (another clock, or a start hermes-meter recorded late)
/// counts as 0: the span and the histogram must show the same value, and
/// a negative one means nothing.
pub(crate) fn time_to_first_token(started_at: f64, first_token_at: Option<f64>) -> Option<f64> {
    first_token_at.map(|t| (t - started_at).max(0.0))
}

/// What went wrong with a failed attempt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttemptError {
    pub status_code: Option<i64>,
    pub retryable: Option<bool>,
    pub reason: Option<String>,
    pub error_type: Option<String>,
}

/// A tool call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolRow {
    pub session_id: String,
    pub tool_call_id: String,
    pub tool_name: String,
    pub turn_id: Option<String>,
    pub api_request_id: Option<String>,
    pub started_at: f64,
    pub ended_at: Option<f64>,
    pub ok: Option<bool>,
    pub status: Option<String>,
    pub error_type: Option<String>,
    pub exit_code: Option<i64>,
}
