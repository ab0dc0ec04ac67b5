//! The instruments of `semconv/registry/metrics.yaml`: name, kind, unit,
//! buckets and Prometheus name. Must not touch: measurement or rendering.

use crate::semconv::metric as m;

/// How an instrument aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A monotonic sum.
    Counter,
    Histogram,
    Gauge,
}

/// One instrument of the registry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Instrument {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: &'static str,
    pub description: &'static str,
    /// The name after the OTel Collector's Prometheus translation (for
    /// histograms, the base of `_bucket`, `_sum` and `_count`).
    pub prometheus_name: &'static str,
    /// Explicit bucket boundaries (histograms only).
    pub buckets: &'static [f64],
    /// Whether the values are whole numbers (sent as integers).
    pub integer: bool,
    /// A previous name, sent only with `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai/dup`
    /// (the store counts it either way, so switching loses nothing).
    pub previous: bool,
}

/// `gen_ai.client.token.usage` buckets: powers of 4 from 1 to 67108864.
pub(crate) const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];
/// `gen_ai.client.operation.cost` buckets, in US dollars: a cent's hundredth
/// to a hundred dollars, about three per decade.
pub(crate) const COST_BUCKETS: &[f64] = &[
    0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0,
];
/// Duration buckets: 0.01 s doubling to 81.92 s.
pub(crate) const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

const fn inst(
    name: &'static str,
    kind: Kind,
    unit: &'static str,
    prometheus_name: &'static str,
    buckets: &'static [f64],
    integer: bool,
    description: &'static str,
) -> Instrument {
    Instrument {
        name,
        kind,
        unit,
        description,
        prometheus_name,
        buckets,
        integer,
        previous: false,
    }
}

/// [`inst`] of a previous name.
const fn previous(i: Instrument) -> Instrument {
    Instrument { previous: true, ..i }
}

/// Every instrument, in registry order.
pub const INSTRUMENTS: &[Instrument] = &[
    inst(
        m::INPUT_TOKENS,
        Kind::Counter,
        "{token}",
        "gen_ai_client_inference_usage_input_tokens_total",
        &[],
        true,
        "Input (prompt) tokens of LLM API calls, cached tokens included.",
    ),
    inst(
        m::OUTPUT_TOKENS,
        Kind::Counter,
        "{token}",
        "gen_ai_client_inference_usage_output_tokens_total",
        &[],
        true,
        "Output (completion) tokens of LLM API calls, reasoning tokens included.",
    ),
    inst(
        m::CACHE_READ_TOKENS,
        Kind::Counter,
        "{token}",
        "gen_ai_client_inference_usage_cache_read_input_tokens_total",
        &[],
        true,
        "Input tokens served from the provider's cache (part of the input tokens).",
    ),
    inst(
        m::CACHE_WRITE_TOKENS,
        Kind::Counter,
        "{token}",
        "gen_ai_client_inference_usage_cache_write_input_tokens_total",
        &[],
        true,
        "Input tokens written to the provider's cache (part of the input tokens).",
    ),
    inst(
        m::REASONING_TOKENS,
        Kind::Counter,
        "{token}",
        "gen_ai_client_inference_usage_reasoning_output_tokens_total",
        &[],
        true,
        "Output tokens spent on reasoning (part of the output tokens).",
    ),
    inst(
        m::OPERATION_INPUT_TOKENS,
        Kind::Histogram,
        "{token}",
        "gen_ai_client_inference_operation_input_tokens",
        TOKEN_BUCKETS,
        true,
        "Input tokens per LLM API call (0 for a failed call).",
    ),
    inst(
        m::OPERATION_OUTPUT_TOKENS,
        Kind::Histogram,
        "{token}",
        "gen_ai_client_inference_operation_output_tokens",
        TOKEN_BUCKETS,
        true,
        "Output tokens per LLM API call (0 for a failed call).",
    ),
    inst(
        m::HERMES_TOKEN_USAGE,
        Kind::Counter,
        "{token}",
        "hermes_token_usage_total",
        &[],
        true,
        "Tokens by Hermes token type, including cache reads, cache writes and reasoning.",
    ),
    inst(
        m::CACHE_SAVINGS,
        Kind::Counter,
        "{USD}",
        "hermes_cache_savings_total",
        &[],
        false,
        "What LLM calls' cache reads and writes saved over plain input, in US dollars at the price table's rates.",
    ),
    inst(
        m::INFERENCE_DURATION,
        Kind::Histogram,
        "s",
        "gen_ai_client_inference_duration_seconds",
        DURATION_BUCKETS,
        false,
        "Duration of LLM API attempts.",
    ),
    inst(
        m::INFERENCE_TIME_TO_FIRST_CHUNK,
        Kind::Histogram,
        "s",
        "gen_ai_client_inference_time_to_first_chunk_seconds",
        DURATION_BUCKETS,
        false,
        "Time to the first chunk of streamed LLM API calls.",
    ),
    inst(
        m::OPERATION_COST,
        Kind::Histogram,
        "{USD}",
        "gen_ai_client_operation_cost",
        COST_BUCKETS,
        false,
        "Cost of LLM API calls in US dollars (a held call confirmed later adds its cost as a second observation).",
    ),
    previous(inst(
        m::TOKEN_USAGE,
        Kind::Histogram,
        "{token}",
        "gen_ai_client_token_usage",
        TOKEN_BUCKETS,
        true,
        "Number of input and output tokens used, per LLM API call.",
    )),
    previous(inst(
        m::OPERATION_DURATION,
        Kind::Histogram,
        "s",
        "gen_ai_client_operation_duration_seconds",
        DURATION_BUCKETS,
        false,
        "Duration of LLM API attempts.",
    )),
    previous(inst(
        m::TIME_TO_FIRST_CHUNK,
        Kind::Histogram,
        "s",
        "gen_ai_client_operation_time_to_first_chunk_seconds",
        DURATION_BUCKETS,
        false,
        "Time to the first chunk of streamed LLM API calls.",
    )),
    previous(inst(
        m::COST,
        Kind::Counter,
        "{USD}",
        "gen_ai_usage_cost_total",
        &[],
        false,
        "Cost of LLM API calls in US dollars.",
    )),
    inst(
        m::TOOL_CALLS,
        Kind::Counter,
        "{call}",
        "hermes_tool_calls_total",
        &[],
        true,
        "Tool calls by tool and outcome.",
    ),
    inst(
        m::TOOL_DURATION,
        Kind::Histogram,
        "s",
        "gen_ai_execute_tool_duration_seconds",
        DURATION_BUCKETS,
        false,
        "Duration of tool calls.",
    ),
    inst(
        m::API_ERRORS,
        Kind::Counter,
        "{error}",
        "hermes_api_errors_total",
        &[],
        true,
        "Failed LLM API attempts (one per api_request_error).",
    ),
    inst(
        m::SESSIONS,
        Kind::Counter,
        "{session}",
        "hermes_sessions_total",
        &[],
        true,
        "Finished sessions by outcome (counted once, when the session ends).",
    ),
    inst(
        m::TURNS,
        Kind::Counter,
        "{turn}",
        "hermes_turns_total",
        &[],
        true,
        "Finished turns by outcome.",
    ),
    inst(
        m::BUDGET_SPEND,
        Kind::Gauge,
        "{USD}",
        "hermes_budget_spend",
        &[],
        false,
        "Spend so far in the budget's current window, in US dollars.",
    ),
    inst(
        m::BUDGET_LIMIT,
        Kind::Gauge,
        "{USD}",
        "hermes_budget_limit",
        &[],
        false,
        "The budget's hard limit for its window, in US dollars.",
    ),
    inst(
        m::BUDGET_PROJECTED,
        Kind::Gauge,
        "{USD}",
        "hermes_budget_projected",
        &[],
        false,
        "Spend projected to the end of the budget's window at the window's rate so far, in US dollars.",
    ),
    inst(
        m::BUDGET_TOKENS,
        Kind::Gauge,
        "{token}",
        "hermes_budget_tokens",
        &[],
        false,
        "Tokens used so far in a token budget's current window (as tokens_counted says).",
    ),
    inst(
        m::BUDGET_TOKEN_LIMIT,
        Kind::Gauge,
        "{token}",
        "hermes_budget_token_limit",
        &[],
        false,
        "A token budget's hard limit for its window.",
    ),
    inst(
        m::BUDGET_TOKENS_PROJECTED,
        Kind::Gauge,
        "{token}",
        "hermes_budget_tokens_projected",
        &[],
        false,
        "Tokens projected to the end of a token budget's window at the window's rate so far.",
    ),
    inst(
        m::RATE_LIMIT_USED,
        Kind::Gauge,
        "{amount}",
        "hermes_rate_limit_used",
        &[],
        false,
        "What a rate limit's span holds now: requests started, or their tokens or US dollars (the window, e.g. requests_per_minute, says which).",
    ),
    inst(
        m::RATE_LIMIT_LIMIT,
        Kind::Gauge,
        "{amount}",
        "hermes_rate_limit_limit",
        &[],
        false,
        "A rate limit, in its window's unit (requests, tokens or US dollars per minute or hour).",
    ),
    inst(
        m::FLEET_SYNC_LAG,
        Kind::Gauge,
        "s",
        "hermes_fleet_sync_lag_seconds",
        &[],
        false,
        "Seconds since this store last synced with the fleet database (fleet budgets only).",
    ),
    inst(
        m::HOOK_CALLS_LOST,
        Kind::Gauge,
        "{call}",
        "hermes_hook_calls_lost",
        &[],
        false,
        "Hook calls hermes-meter could not record, over every process that used the store.",
    ),
    inst(
        m::HOOK_CALLS_SKIPPED,
        Kind::Gauge,
        "{call}",
        "hermes_hook_calls_skipped",
        &[],
        false,
        "Hook calls Hermes 0.21+ skipped (another call of the same callback was running).",
    ),
    inst(
        m::BUDGET_VERDICTS,
        Kind::Counter,
        "{verdict}",
        "hermes_budget_verdicts_total",
        &[],
        true,
        "Budget verdicts returned (soft warnings, hard limits, blocks, pauses).",
    ),
    inst(
        m::ALERTS,
        Kind::Counter,
        "{alert}",
        "hermes_alerts_total",
        &[],
        true,
        "Alerts raised by hermes-meter itself.",
    ),
];

/// The gauge metrics (budgets, the fleet sync lag, the health record's
/// counts of hook calls), replaced together.
pub const GAUGE_METRICS: [&str; 11] = [
    m::BUDGET_SPEND,
    m::BUDGET_LIMIT,
    m::BUDGET_PROJECTED,
    m::BUDGET_TOKENS,
    m::BUDGET_TOKEN_LIMIT,
    m::BUDGET_TOKENS_PROJECTED,
    m::RATE_LIMIT_USED,
    m::RATE_LIMIT_LIMIT,
    m::FLEET_SYNC_LAG,
    m::HOOK_CALLS_LOST,
    m::HOOK_CALLS_SKIPPED,
];

/// The instrument named `name`.
pub(crate) fn instrument(name: &str) -> Option<&'static Instrument> {
    INSTRUMENTS.iter().find(|i| i.name == name)
}
