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
}

/// `gen_ai.client.token.usage` buckets: powers of 4 from 1 to 67108864.
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0, 16777216.0,
    67108864.0,
];
/// Duration buckets: 0.01 s doubling to 81.92 s.
pub const DURATION_BUCKETS: &[f64] = &[
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
    }
}

/// Every instrument, in registry order.
pub const INSTRUMENTS: &[Instrument] = &[
    inst(
        m::TOKEN_USAGE,
        Kind::Histogram,
        "{token}",
        "gen_ai_client_token_usage",
        TOKEN_BUCKETS,
        true,
        "Number of input and output tokens used, per LLM API call.",
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
        m::OPERATION_DURATION,
        Kind::Histogram,
        "s",
        "gen_ai_client_operation_duration_seconds",
        DURATION_BUCKETS,
        false,
        "Duration of LLM API attempts.",
    ),
    inst(
        m::TIME_TO_FIRST_CHUNK,
        Kind::Histogram,
        "s",
        "gen_ai_client_operation_time_to_first_chunk_seconds",
        DURATION_BUCKETS,
        false,
        "Time to the first chunk of streamed LLM API calls.",
    ),
    inst(
        m::COST,
        Kind::Counter,
        "{USD}",
        "gen_ai_usage_cost_total",
        &[],
        false,
        "Cost of LLM API calls in US dollars.",
    ),
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
pub const GAUGE_METRICS: [&str; 5] = [
    m::BUDGET_SPEND,
    m::BUDGET_LIMIT,
    m::FLEET_SYNC_LAG,
    m::HOOK_CALLS_LOST,
    m::HOOK_CALLS_SKIPPED,
];

/// The instrument named `name`.
pub fn instrument(name: &str) -> Option<&'static Instrument> {
    INSTRUMENTS.iter().find(|i| i.name == name)
}
