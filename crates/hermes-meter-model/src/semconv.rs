//! Span names and attribute names, one constant each.
//!
//! Owns: the exact strings of every name the trace exporter emits. They are
//! copied from the registry in `semconv/registry/` (rendered flat in
//! `semconv/docs/names.json`); a test in `tests/export.rs` fails when
//! a span carries a name the registry lacks for that span. Must not touch:
//! anything but names.

/// Span names (the registry's `hermes.span_name` annotations).
pub mod span {
    /// The session span: the conversation, which upstream has no
    /// operation for (it is `gen_ai.conversation.id`).
    pub const SESSION: &str = "hermes.session";
    /// The turn span: one run of the agent, upstream's agent invocation.
    pub const TURN: &str = "invoke_agent hermes";
    /// Prefix of `chat {gen_ai.request.model}`.
    pub(crate) const CHAT_PREFIX: &str = "chat";
    /// Prefix of `execute_tool {gen_ai.tool.name}`.
    pub(crate) const EXECUTE_TOOL_PREFIX: &str = "execute_tool";
    /// A tool call's wait for approval.
    pub const APPROVAL: &str = "hermes.approval";
}

/// Upstream attribute names (OpenTelemetry semantic conventions).
/// Names of the events sent as OTLP log records (`event_name`).
pub mod event {
    /// A budget or cap verdict: a notice (soft, hard), a block, a cron
    /// pause, a runaway stop.
    pub const BUDGET_VERDICT: &str = "hermes.budget.verdict";
    /// An alert raised (free model now paid, model unavailable, budget
    /// line crossed, runaway).
    pub const ALERT: &str = "hermes.alert";
    /// An approval decided.
    pub const APPROVAL: &str = "hermes.approval";
    /// A failed LLM API attempt.
    pub const API_ERROR: &str = "hermes.api.error";
    /// An LLM call's captured content (the GenAI content event), sent
    /// only with `EVENT_ONLY` or `SPAN_AND_EVENT`.
    pub const INFERENCE_DETAILS: &str = "gen_ai.client.inference.operation.details";
}

pub mod attr {
    pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
    pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
    pub(crate) const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
    pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
    pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub(crate) const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    /// Seconds to the first chunk of a streamed response (Development).
    pub const GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
    pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
    pub const GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS: &str = "gen_ai.usage.cache_write.input_tokens";
    /// The previous name of `gen_ai.usage.cache_write.input_tokens`
    /// (semconv 1.41), sent only with `gen_ai/dup`.
    pub(crate) const GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
    pub(crate) const GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
    /// Proposed (semantic-conventions-genai#443), beside hermes.usage.cost_usd.
    pub const GEN_AI_USAGE_COST_AMOUNT: &str = "gen_ai.usage.cost.amount";
    pub const GEN_AI_USAGE_COST_CURRENCY: &str = "gen_ai.usage.cost.currency";
    pub const GEN_AI_USAGE_COST_SOURCE: &str = "gen_ai.usage.cost.source";
    pub(crate) const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
    pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    pub(crate) const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
    /// Opt-in content capture only (JSON text, redacted and cut).
    pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
    pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
    pub const GEN_AI_TOOL_CALL_ARGUMENTS: &str = "gen_ai.tool.call.arguments";
    pub const GEN_AI_TOOL_CALL_RESULT: &str = "gen_ai.tool.call.result";
    pub const ERROR_TYPE: &str = "error.type";
    pub(crate) const SERVER_ADDRESS: &str = "server.address";
    pub(crate) const SERVER_PORT: &str = "server.port";
    pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
    pub(crate) const PROCESS_EXIT_CODE: &str = "process.exit.code";

    pub(crate) const HERMES_PLATFORM: &str = "hermes.platform";
    pub const HERMES_SESSION_ID: &str = "hermes.session.id";
    pub(crate) const HERMES_TURN_ID: &str = "hermes.turn.id";
    pub(crate) const HERMES_TASK_ID: &str = "hermes.task.id";
    pub const HERMES_API_REQUEST_ID: &str = "hermes.api_request.id";
    pub(crate) const HERMES_CRON_JOB_ID: &str = "hermes.cron.job_id";
    pub(crate) const HERMES_SENDER_ID: &str = "hermes.sender.id";
    pub(crate) const HERMES_PROFILE: &str = "hermes.profile";
    pub(crate) const HERMES_SESSION_STATUS: &str = "hermes.session.status";
    pub(crate) const HERMES_SESSION_CONTINUATION: &str = "hermes.session.continuation";
    pub(crate) const OPENINFERENCE_SPAN_KIND: &str = "openinference.span.kind";
    pub const HERMES_TOOL_DECISION: &str = "hermes.tool.decision";
    pub(crate) const HERMES_LLM_AUX_TASK: &str = "hermes.llm.aux_task";
    pub(crate) const HERMES_TOOL_DECISION_REASON: &str = "hermes.tool.decision_reason";
    pub const HERMES_APPROVAL_SURFACE: &str = "hermes.approval.surface";
    pub const HERMES_APPROVAL_CHOICE: &str = "hermes.approval.choice";
    pub const HERMES_APPROVAL_DECIDED_BY: &str = "hermes.approval.decided_by";
    /// The pattern that asked for the approval (log records only).
    pub const HERMES_APPROVAL_PATTERN: &str = "hermes.approval.pattern";
    pub(crate) const HERMES_TURN_OUTCOME: &str = "hermes.turn.outcome";
    pub const HERMES_SPAN_CLOSE_REASON: &str = "hermes.span.close_reason";
    pub const HERMES_USAGE_COST_USD: &str = "hermes.usage.cost_usd";
    pub const HERMES_USAGE_COST_SOURCE: &str = "hermes.usage.cost_source";
    pub(crate) const HERMES_USAGE_ESTIMATED: &str = "hermes.usage.estimated";
    pub(crate) const HERMES_USAGE_TOTAL_COST_USD: &str = "hermes.usage.total_cost_usd";
    /// What the agent was told when a budget stopped its session (on the
    /// session span's `hermes.budget.verdict` event).
    pub(crate) const HERMES_BUDGET_MESSAGE: &str = "hermes.budget.message";
    /// A session's input tokens (cache included), on the session span.
    pub const HERMES_USAGE_TOTAL_INPUT_TOKENS: &str = "hermes.usage.total_input_tokens";
    /// A session's output tokens, on the session span.
    pub const HERMES_USAGE_TOTAL_OUTPUT_TOKENS: &str = "hermes.usage.total_output_tokens";
    pub const HERMES_API_RETRY_COUNT: &str = "hermes.api.retry_count";
    pub(crate) const HERMES_API_MAX_RETRIES: &str = "hermes.api.max_retries";
    pub const HERMES_API_RETRYABLE: &str = "hermes.api.retryable";
    pub const HERMES_ERROR_REASON: &str = "hermes.error.reason";
    pub const HERMES_TOOL_OUTCOME: &str = "hermes.tool.outcome";
    pub(crate) const HERMES_TOOL_STATUS: &str = "hermes.tool.status";
    /// The previous name of a terminal call's exit code (`process.exit.code`
    /// now), sent only with `gen_ai/dup`.
    pub(crate) const HERMES_TOOL_EXIT_CODE: &str = "hermes.tool.exit_code";
    pub(crate) const HERMES_TOOL_BLOCKED: &str = "hermes.tool.blocked";
    pub(crate) const HERMES_SUBAGENT_ID: &str = "hermes.subagent.id";
    pub(crate) const HERMES_SUBAGENT_ROLE: &str = "hermes.subagent.role";
    pub(crate) const HERMES_SUBAGENT_STATUS: &str = "hermes.subagent.status";
}

/// Enum values used on spans.
pub mod value {
    pub const OPERATION_CHAT: &str = "chat";
    pub(crate) const OPERATION_INVOKE_AGENT: &str = "invoke_agent";
    pub(crate) const OPERATION_EXECUTE_TOOL: &str = "execute_tool";
    /// `gen_ai.agent.name` of the turn span.
    pub(crate) const AGENT_NAME: &str = "hermes";
    /// `gen_ai.tool.type`: Hermes tools are functions the model calls.
    pub(crate) const TOOL_TYPE_FUNCTION: &str = "function";
    /// `hermes.span.close_reason` of a span the idle closer ended.
    pub(crate) const CLOSE_REASON_IDLE_TIMEOUT: &str = "idle_timeout";
    /// `hermes.span.close_reason` of a span its process left open at exit.
    pub(crate) const CLOSE_REASON_PROCESS_EXIT: &str = "process_exit";
    /// `hermes.span.close_reason` (and `error.type`) of an LLM call a
    /// budget stopped before the provider.
    pub(crate) const CLOSE_REASON_BUDGET_STOP: &str = "budget_stop";
    /// `error.type` when nothing more specific is known.
    pub(crate) const ERROR_TYPE_OTHER: &str = "_OTHER";
    /// `openinference.span.kind` of a session.
    pub(crate) const OPENINFERENCE_KIND_CHAIN: &str = "CHAIN";
    /// `openinference.span.kind` of a turn (an agent invocation).
    pub(crate) const OPENINFERENCE_KIND_AGENT: &str = "AGENT";
    /// `openinference.span.kind` of an approval.
    pub(crate) const OPENINFERENCE_KIND_GUARDRAIL: &str = "GUARDRAIL";
    /// `hermes.tool.decision` of a denied tool call.
    pub(crate) const DECISION_DENY: &str = "deny";
    /// `hermes.tool.decision_reason` values.
    pub(crate) const DECISION_REASON_BUDGET: &str = "budget";
    pub(crate) const DECISION_REASON_USER: &str = "user";
    pub(crate) const DECISION_REASON_AUX_LLM: &str = "aux_llm";
    pub(crate) const DECISION_REASON_TIMEOUT: &str = "timeout";
}

/// Resource attribute names.
pub mod resource {
    pub const SERVICE_NAME: &str = "service.name";
}

/// Every span attribute constant, for the registry test.
pub const SPAN_ATTRIBUTES: &[&str] = &[
    attr::GEN_AI_OPERATION_NAME,
    attr::GEN_AI_PROVIDER_NAME,
    attr::GEN_AI_AGENT_NAME,
    attr::GEN_AI_CONVERSATION_ID,
    attr::GEN_AI_REQUEST_MODEL,
    attr::GEN_AI_RESPONSE_MODEL,
    attr::GEN_AI_RESPONSE_FINISH_REASONS,
    attr::GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
    attr::GEN_AI_USAGE_INPUT_TOKENS,
    attr::GEN_AI_USAGE_OUTPUT_TOKENS,
    attr::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    attr::GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
    attr::GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    attr::GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    attr::GEN_AI_USAGE_COST_AMOUNT,
    attr::GEN_AI_USAGE_COST_CURRENCY,
    attr::GEN_AI_USAGE_COST_SOURCE,
    attr::GEN_AI_TOOL_NAME,
    attr::GEN_AI_TOOL_CALL_ID,
    attr::GEN_AI_TOOL_TYPE,
    attr::GEN_AI_INPUT_MESSAGES,
    attr::GEN_AI_OUTPUT_MESSAGES,
    attr::GEN_AI_TOOL_CALL_ARGUMENTS,
    attr::GEN_AI_TOOL_CALL_RESULT,
    attr::ERROR_TYPE,
    attr::SERVER_ADDRESS,
    attr::SERVER_PORT,
    attr::HTTP_RESPONSE_STATUS_CODE,
    attr::PROCESS_EXIT_CODE,
    attr::HERMES_PLATFORM,
    attr::HERMES_SESSION_ID,
    attr::HERMES_TURN_ID,
    attr::HERMES_TASK_ID,
    attr::HERMES_API_REQUEST_ID,
    attr::HERMES_CRON_JOB_ID,
    attr::HERMES_SENDER_ID,
    attr::HERMES_PROFILE,
    attr::HERMES_SESSION_STATUS,
    attr::HERMES_SESSION_CONTINUATION,
    attr::OPENINFERENCE_SPAN_KIND,
    attr::HERMES_TOOL_DECISION,
    attr::HERMES_LLM_AUX_TASK,
    attr::HERMES_TOOL_DECISION_REASON,
    attr::HERMES_APPROVAL_SURFACE,
    attr::HERMES_APPROVAL_CHOICE,
    attr::HERMES_APPROVAL_DECIDED_BY,
    attr::HERMES_APPROVAL_PATTERN,
    attr::HERMES_TURN_OUTCOME,
    attr::HERMES_SPAN_CLOSE_REASON,
    attr::HERMES_USAGE_COST_USD,
    attr::HERMES_USAGE_COST_SOURCE,
    attr::HERMES_USAGE_ESTIMATED,
    attr::HERMES_USAGE_TOTAL_COST_USD,
    attr::HERMES_USAGE_TOTAL_INPUT_TOKENS,
    attr::HERMES_USAGE_TOTAL_OUTPUT_TOKENS,
    attr::HERMES_API_RETRY_COUNT,
    attr::HERMES_API_MAX_RETRIES,
    attr::HERMES_API_RETRYABLE,
    attr::HERMES_ERROR_REASON,
    attr::HERMES_TOOL_OUTCOME,
    attr::HERMES_TOOL_STATUS,
    attr::HERMES_TOOL_EXIT_CODE,
    attr::HERMES_TOOL_BLOCKED,
    attr::HERMES_SUBAGENT_ID,
    attr::HERMES_SUBAGENT_ROLE,
    attr::HERMES_SUBAGENT_STATUS,
];

/// Metric names (the registry's `metric_name`s), their attributes and
/// values. Instruments, units and buckets are in [`crate::metrics`].
pub mod metric {
    /// Input tokens (cache included) per call, a counter.
    pub const INPUT_TOKENS: &str = "gen_ai.client.inference.usage.input_tokens";
    /// Output tokens (reasoning included), a counter.
    pub const OUTPUT_TOKENS: &str = "gen_ai.client.inference.usage.output_tokens";
    pub const CACHE_READ_TOKENS: &str = "gen_ai.client.inference.usage.cache_read.input_tokens";
    pub const CACHE_WRITE_TOKENS: &str = "gen_ai.client.inference.usage.cache_write.input_tokens";
    pub const REASONING_TOKENS: &str = "gen_ai.client.inference.usage.reasoning.output_tokens";
    /// Input tokens per call, a histogram.
    pub const OPERATION_INPUT_TOKENS: &str = "gen_ai.client.inference.operation.input_tokens";
    /// Output tokens per call, a histogram.
    pub const OPERATION_OUTPUT_TOKENS: &str = "gen_ai.client.inference.operation.output_tokens";
    pub const INFERENCE_DURATION: &str = "gen_ai.client.inference.duration";
    pub const INFERENCE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.inference.time_to_first_chunk";
    /// Cost per call, a histogram (the draft of semantic-conventions-genai
    /// pull request 443).
    pub const OPERATION_COST: &str = "gen_ai.client.operation.cost";
    pub const HERMES_TOKEN_USAGE: &str = "hermes.token.usage";
    /// What the providers' caches saved, a counter in USD.
    pub const CACHE_SAVINGS: &str = "hermes.cache.savings";
    /// Previous names (semconv 1.41 and the de-facto cost counter), sent
    /// only with `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai/dup`.
    pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
    pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
    pub(crate) const TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";
    pub const COST: &str = "gen_ai.usage.cost";
    pub const TOOL_CALLS: &str = "hermes.tool.calls";
    pub const TOOL_DURATION: &str = "gen_ai.execute_tool.duration";
    pub const API_ERRORS: &str = "hermes.api.errors";
    pub const SESSIONS: &str = "hermes.sessions";
    pub const TURNS: &str = "hermes.turns";
    pub const BUDGET_SPEND: &str = "hermes.budget.spend";
    pub const BUDGET_LIMIT: &str = "hermes.budget.limit";
    pub const BUDGET_PROJECTED: &str = "hermes.budget.projected";
    pub(crate) const BUDGET_TOKENS: &str = "hermes.budget.tokens";
    pub(crate) const BUDGET_TOKEN_LIMIT: &str = "hermes.budget.token_limit";
    pub(crate) const BUDGET_TOKENS_PROJECTED: &str = "hermes.budget.tokens_projected";
    /// What a rate limit's span holds now, and its limit (gauges; the
    /// unit is the window's: requests, tokens or USD).
    pub(crate) const RATE_LIMIT_USED: &str = "hermes.rate_limit.used";
    pub(crate) const RATE_LIMIT_LIMIT: &str = "hermes.rate_limit.limit";
    /// Seconds since this store's last successful fleet sync (gauge).
    pub const FLEET_SYNC_LAG: &str = "hermes.fleet.sync.lag";
    pub const BUDGET_VERDICTS: &str = "hermes.budget.verdicts";
    pub const ALERTS: &str = "hermes.alerts";
    /// Hook calls that could not be recorded (gauge, from the health record).
    pub(crate) const HOOK_CALLS_LOST: &str = "hermes.hook.calls.lost";
    /// Hook calls Hermes skipped and the plugin recorded anyway (gauge).
    pub(crate) const HOOK_CALLS_SKIPPED: &str = "hermes.hook.calls.skipped";

    /// Attributes only metrics carry.
    pub mod attr {
        pub(crate) const GEN_AI_TOKEN_TYPE: &str = "gen_ai.token.type";
        pub(crate) const GEN_AI_TOKEN_MODALITY: &str = "gen_ai.token.modality";
        pub const GEN_AI_USAGE_COST_CURRENCY: &str = "gen_ai.usage.cost.currency";
        pub(crate) const HERMES_TOKEN_TYPE: &str = "hermes.token.type";
        pub(crate) const HERMES_OUTCOME: &str = "hermes.outcome";
        pub const HERMES_BUDGET_SCOPE: &str = "hermes.budget.scope";
        pub const HERMES_BUDGET_ID: &str = "hermes.budget.id";
        pub const HERMES_BUDGET_WINDOW: &str = "hermes.budget.window";
        pub const HERMES_BUDGET_VERDICT: &str = "hermes.budget.verdict";
        pub(crate) const HERMES_FLEET_HOST_ID: &str = "hermes.fleet.host.id";
        pub const HERMES_ALERT_KIND: &str = "hermes.alert.kind";
        pub(crate) const HERMES_LOSS_REASON: &str = "hermes.loss.reason";
        pub(crate) const HERMES_SKIP_RECORDED: &str = "hermes.skip.recorded";
    }

    /// `hermes.loss.reason` values.
    pub mod loss_reason {
        pub(crate) const UNSAVED: &str = "unsaved";
        pub(crate) const HERMES_SKIP: &str = "hermes_skip";
    }

    /// `gen_ai.token.modality` when the provider does not say (Hermes never
    /// breaks usage down by modality).
    pub(crate) const MODALITY_UNKNOWN: &str = "unknown";

    /// `gen_ai.token.type` and `hermes.token.type` values.
    pub mod token_type {
        pub(crate) const INPUT: &str = "input";
        pub(crate) const OUTPUT: &str = "output";
        pub(crate) const CACHE_READ: &str = "cache_read";
        pub(crate) const CACHE_WRITE: &str = "cache_write";
        pub(crate) const REASONING: &str = "reasoning";
    }
}

/// Resource attributes metrics add.
pub mod metric_resource {
    /// Stable per store (kept in its `meta` table), so short-lived Hermes
    /// processes never start new series.
    pub const SERVICE_INSTANCE_ID: &str = "service.instance.id";
}

/// The version of the OpenTelemetry semantic conventions the registry
/// follows for everything but GenAI, and the schema URL spans and metrics
/// carry. The GenAI names follow `open-telemetry/semantic-conventions-genai`
/// (see `semconv/README.md`), which publishes no schema of its own yet.
pub const SEMCONV_VERSION: &str = "1.45.0";
/// `schema_url` of the resource and scope of every span and metric batch.
pub const SCHEMA_URL: &str = "https://opentelemetry.io/schemas/1.45.0";

/// Which generation of GenAI names to emit
/// (`OTEL_SEMCONV_STABILITY_OPT_IN`, as the OpenTelemetry instrumentations
/// read it): the current ones, or the current and the previous ones side
/// by side while dashboards move.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Names {
    /// The current names only (unset, or `gen_ai_latest_experimental`).
    #[default]
    Current,
    /// The current names and the previous ones (`gen_ai/dup`): previous
    /// attributes beside the current ones, previous metrics beside the
    /// current ones. Span names are the current ones either way.
    Dup,
}

impl Names {
    /// Reads the comma-separated opt-in list: `gen_ai/dup` asks for both
    /// generations; other entries (`http`, `database/dup`,
    /// `gen_ai_latest_experimental`) leave GenAI names current.
    pub fn parse(s: &str) -> Self {
        if s.split(',').any(|i| i.trim().eq_ignore_ascii_case("gen_ai/dup")) {
            Names::Dup
        } else {
            Names::Current
        }
    }

    /// Whether the previous names are sent too.
    pub fn previous(self) -> bool {
        self == Names::Dup
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Names::Current => "current",
            Names::Dup => "gen_ai/dup",
        }
    }
}

#[cfg(test)]
mod tests {
    /// The schema URL names the version the registry says it follows.
    #[test]
    fn the_schema_url_is_the_pinned_version() {
        assert!(super::SCHEMA_URL.ends_with(&format!("/{}", super::SEMCONV_VERSION)));
    }

    use super::Names;

    #[test]
    fn only_gen_ai_dup_asks_for_the_previous_names() {
        assert_eq!(Names::parse(""), Names::Current);
        assert_eq!(Names::parse("gen_ai_latest_experimental"), Names::Current);
        assert_eq!(Names::parse("http/dup, gen_ai/dup"), Names::Dup);
        assert_eq!(Names::parse("GEN_AI/DUP"), Names::Dup);
        assert_eq!(Names::parse("http,database/dup"), Names::Current);
        assert!(Names::Dup.previous() && !Names::Current.previous());
    }
}
