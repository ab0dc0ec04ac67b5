//! Turning a finished ledger row into series increments ([`measure`]),
//! and the attribute sets of the budget gauges, verdicts and alerts. Must
//! not touch: rendering.

use super::instruments::instrument;
use crate::rows::{
    encode_attrs, time_to_first_token, Add, AttrValue, Attrs, Increment, LlmCallFact, MetricFact, RunLabels,
};
use crate::semconv::attr;
use crate::semconv::metric as m;
use crate::semconv::metric::attr as mattr;
use crate::semconv::metric::token_type;
use crate::semconv::value;

#[derive(Clone)]
struct AttrSet(Attrs);

impl AttrSet {
    fn new() -> Self {
        AttrSet(Vec::with_capacity(6))
    }
    fn s(mut self, k: &str, v: &str) -> Self {
        self.0.push((k.to_string(), AttrValue::Str(v.to_string())));
        self
    }
    fn opt(self, k: &str, v: Option<&str>) -> Self {
        match v {
            Some(v) => self.s(k, v),
            None => self,
        }
    }
    fn int(mut self, k: &str, v: i64) -> Self {
        self.0.push((k.to_string(), AttrValue::Int(v)));
        self
    }
    fn bool(mut self, k: &str, v: bool) -> Self {
        self.0.push((k.to_string(), AttrValue::Bool(v)));
        self
    }
    fn key(&self) -> String {
        encode_attrs(&self.0)
    }
}

fn sum(out: &mut Vec<Increment>, metric: &'static str, attrs: &AttrSet, v: f64) {
    out.push(Increment {
        metric,
        attrs: attrs.key(),
        add: Add::Sum(v),
    });
}

fn observe(out: &mut Vec<Increment>, metric: &'static str, attrs: &AttrSet, v: f64) {
    let bounds = instrument(metric).map(|i| i.buckets).unwrap_or(&[]);
    out.push(Increment {
        metric,
        attrs: attrs.key(),
        add: Add::Observe {
            value: v.max(0.0),
            bounds,
        },
    });
}

fn platform(run: &RunLabels) -> &str {
    run.platform.as_deref().unwrap_or("unknown")
}

/// The model and provider labels of an attempt, as on its `chat` span.
fn model_provider<'a>(
    model: Option<&'a str>,
    response_model: Option<&'a str>,
    provider: Option<&'a str>,
    run: &'a RunLabels,
) -> (&'a str, &'a str) {
    let model = model.or(response_model).or(run.model.as_deref()).unwrap_or("unknown");
    let provider = provider.or(run.provider.as_deref()).unwrap_or(value::ERROR_TYPE_OTHER);
    (model, provider)
}

/// An LLM call's cost, labelled as its other series are: the current
/// histogram and the previous counter.
fn cost(out: &mut Vec<Increment>, c: &LlmCallFact, run: &RunLabels) {
    let (model, provider) = model_provider(
        c.model.as_deref(),
        c.response_model.as_deref(),
        c.provider.as_deref(),
        run,
    );
    let labels = |a: AttrSet| {
        a.s(attr::HERMES_PLATFORM, platform(run))
            .opt(attr::HERMES_CRON_JOB_ID, run.cron_job_id.as_deref())
            .opt(attr::HERMES_SENDER_ID, run.sender_id.as_deref())
            .opt(attr::HERMES_PROFILE, run.profile.as_deref())
    };
    let a = AttrSet::new()
        .s(attr::GEN_AI_OPERATION_NAME, value::OPERATION_CHAT)
        .s(attr::GEN_AI_PROVIDER_NAME, provider)
        .s(attr::GEN_AI_REQUEST_MODEL, model)
        .s(mattr::GEN_AI_USAGE_COST_CURRENCY, "USD");
    observe(out, m::OPERATION_COST, &labels(a), c.cost_usd);
    let a = AttrSet::new()
        .s(attr::GEN_AI_PROVIDER_NAME, provider)
        .s(attr::GEN_AI_REQUEST_MODEL, model);
    sum(out, m::COST, &labels(a), c.cost_usd);
}

/// The token counters of one call (`tokens`: input with cache, output,
/// cache read, cache write, reasoning), under `base` plus the modality
/// Hermes never reports.
fn token_counters(out: &mut Vec<Increment>, base: &AttrSet, tokens: [i64; 5]) {
    let a = base.clone().s(mattr::GEN_AI_TOKEN_MODALITY, m::MODALITY_UNKNOWN);
    let metrics = [
        m::INPUT_TOKENS,
        m::OUTPUT_TOKENS,
        m::CACHE_READ_TOKENS,
        m::CACHE_WRITE_TOKENS,
        m::REASONING_TOKENS,
    ];
    for (metric, n) in metrics.into_iter().zip(tokens) {
        sum(out, metric, &a, n as f64);
    }
}

/// The increments one finished ledger row makes. Every attribute the
/// registry allows is set here, including the opt-in ones, and every
/// metric under its current and its previous name; the allow-list and the
/// names asked for apply when series are read ([`super::project`]), so
/// either can change at any time without splitting what the store counted.
pub fn measure(fact: &MetricFact, out: &mut Vec<Increment>) {
    match fact {
        MetricFact::LlmCall(c, run) => {
            let (model, provider) = model_provider(
                c.model.as_deref(),
                c.response_model.as_deref(),
                c.provider.as_deref(),
                run,
            );
            let base = || {
                AttrSet::new()
                    .s(attr::GEN_AI_PROVIDER_NAME, provider)
                    .s(attr::GEN_AI_REQUEST_MODEL, model)
            };
            let chat = base()
                .s(attr::GEN_AI_OPERATION_NAME, value::OPERATION_CHAT)
                .s(attr::HERMES_PLATFORM, platform(run));
            // Semconv input includes cached tokens; Hermes' input does not.
            let input = c.input_tokens + c.cache_read_tokens + c.cache_write_tokens;
            token_counters(
                out,
                &chat,
                [
                    input,
                    c.output_tokens,
                    c.cache_read_tokens,
                    c.cache_write_tokens,
                    c.reasoning_tokens,
                ],
            );
            observe(out, m::OPERATION_INPUT_TOKENS, &chat, input as f64);
            observe(out, m::OPERATION_OUTPUT_TOKENS, &chat, c.output_tokens as f64);
            for (kind, n) in [(token_type::INPUT, input), (token_type::OUTPUT, c.output_tokens)] {
                let a = base()
                    .s(attr::GEN_AI_OPERATION_NAME, value::OPERATION_CHAT)
                    .s(mattr::GEN_AI_TOKEN_TYPE, kind)
                    .s(attr::HERMES_PLATFORM, platform(run));
                observe(out, m::TOKEN_USAGE, &a, n as f64);
            }
            for (kind, n) in [
                (token_type::INPUT, c.input_tokens),
                (token_type::CACHE_READ, c.cache_read_tokens),
                (token_type::CACHE_WRITE, c.cache_write_tokens),
                (token_type::OUTPUT, c.output_tokens),
                (token_type::REASONING, c.reasoning_tokens),
            ] {
                let a = base()
                    .s(mattr::HERMES_TOKEN_TYPE, kind)
                    .s(attr::HERMES_PLATFORM, platform(run));
                sum(out, m::HERMES_TOKEN_USAGE, &a, n as f64);
            }
            let duration = c.ended_at - c.started_at;
            observe(out, m::INFERENCE_DURATION, &chat, duration);
            observe(out, m::OPERATION_DURATION, &chat, duration);
            // Streamed calls only (upstream: not reported otherwise); the
            // same value as the span's gen_ai.response.time_to_first_chunk.
            if let Some(ttft) = time_to_first_token(c.started_at, c.first_token_at) {
                observe(out, m::INFERENCE_TIME_TO_FIRST_CHUNK, &chat, ttft);
                observe(out, m::TIME_TO_FIRST_CHUNK, &chat, ttft);
            }
            cost(out, c, run);
            sum(
                out,
                m::CACHE_SAVINGS,
                &base().s(attr::HERMES_PLATFORM, platform(run)),
                c.cache_saved_usd,
            );
        }
        MetricFact::ConfirmedCost(c, run) => cost(out, c, run),
        MetricFact::ApiError(e, run) => {
            let (model, provider) = model_provider(e.model.as_deref(), None, e.provider.as_deref(), run);
            let error_type = e
                .error_type
                .as_deref()
                .or(e.reason.as_deref())
                .unwrap_or(value::ERROR_TYPE_OTHER);
            let chat = AttrSet::new()
                .s(attr::GEN_AI_PROVIDER_NAME, provider)
                .s(attr::GEN_AI_REQUEST_MODEL, model)
                .s(attr::GEN_AI_OPERATION_NAME, value::OPERATION_CHAT)
                .s(attr::HERMES_PLATFORM, platform(run));
            // Upstream: the usage counters record 0 for a failed call (no
            // error.type on them), the per-call histograms 0 with it.
            token_counters(out, &chat, [0; 5]);
            let a = AttrSet::new()
                .s(attr::GEN_AI_OPERATION_NAME, value::OPERATION_CHAT)
                .s(attr::GEN_AI_PROVIDER_NAME, provider)
                .s(attr::GEN_AI_REQUEST_MODEL, model)
                .s(attr::ERROR_TYPE, error_type)
                .s(attr::HERMES_PLATFORM, platform(run));
            observe(out, m::OPERATION_INPUT_TOKENS, &a, 0.0);
            observe(out, m::OPERATION_OUTPUT_TOKENS, &a, 0.0);
            observe(out, m::INFERENCE_DURATION, &a, e.ended_at - e.started_at);
            observe(out, m::OPERATION_DURATION, &a, e.ended_at - e.started_at);
            // A failed call is a token usage observation of 0 with its
            // error.type (the GenAI conventions), so a usage histogram's
            // count is every call, and failures show by type.
            for kind in [token_type::INPUT, token_type::OUTPUT] {
                observe(out, m::TOKEN_USAGE, &a.clone().s(mattr::GEN_AI_TOKEN_TYPE, kind), 0.0);
            }
            let mut a = AttrSet::new()
                .s(attr::GEN_AI_PROVIDER_NAME, provider)
                .s(attr::GEN_AI_REQUEST_MODEL, model)
                .s(attr::ERROR_TYPE, error_type);
            if let Some(code) = e.status_code {
                a = a.int(attr::HTTP_RESPONSE_STATUS_CODE, code);
            }
            if let Some(r) = e.retryable {
                a = a.bool(attr::HERMES_API_RETRYABLE, r);
            }
            if let Some(reason) = e.reason.as_deref() {
                a = a.s(attr::HERMES_ERROR_REASON, crate::span::reason_token(reason));
            }
            sum(out, m::API_ERRORS, &a, 1.0);
        }
        MetricFact::Tool(t, latency, run) => {
            let outcome = crate::span::tool_outcome(t);
            let a = AttrSet::new()
                .s(attr::GEN_AI_TOOL_NAME, &t.tool_name)
                .s(attr::HERMES_TOOL_OUTCOME, outcome)
                .s(attr::HERMES_PLATFORM, platform(run));
            sum(out, m::TOOL_CALLS, &a, 1.0);
            let mut a = AttrSet::new()
                .s(attr::GEN_AI_TOOL_NAME, &t.tool_name)
                .s(attr::HERMES_PLATFORM, platform(run));
            if outcome != "ok" {
                a = a.s(attr::ERROR_TYPE, &crate::span::tool_error_type(t, outcome));
            }
            let duration = latency.unwrap_or_else(|| t.ended_at.unwrap_or(t.started_at) - t.started_at);
            observe(out, m::TOOL_DURATION, &a, duration);
        }
        MetricFact::Turn(outcome, run) => {
            let a = AttrSet::new()
                .s(attr::HERMES_PLATFORM, platform(run))
                .s(mattr::HERMES_OUTCOME, outcome);
            sum(out, m::TURNS, &a, 1.0);
        }
        MetricFact::Session(status, run) => {
            let a = AttrSet::new()
                .s(attr::HERMES_PLATFORM, platform(run))
                .s(mattr::HERMES_OUTCOME, status);
            sum(out, m::SESSIONS, &a, 1.0);
        }
    }
}

/// One budget's state, for the `hermes.budget.spend` / `.limit` /
/// `.projected` gauges (USD) or `hermes.budget.tokens` / `.token_limit` /
/// `.tokens_projected` (a token budget). `budget::BudgetGauge` maps onto it
/// field for field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetReading<'a> {
    /// `global`, `cron`, `sender`, `profile` or `model`.
    pub scope: &'a str,
    /// The scope's id (`""` for global).
    pub id: &'a str,
    /// `daily`, `weekly` or `monthly`.
    pub window: &'a str,
    /// Whether the figures are tokens (else USD).
    pub tokens: bool,
    pub spend: f64,
    pub limit: f64,
    pub projected: f64,
}

/// The gauge rows `(metric, attrs, value)` of `readings`, for
/// `Outbox::replace_metric_gauges(&GAUGE_METRICS, ...)`.
pub fn budget_gauge_rows(readings: &[BudgetReading<'_>]) -> Vec<(&'static str, String, f64)> {
    let mut out = Vec::with_capacity(readings.len() * 3);
    for r in readings {
        let a = AttrSet::new()
            .s(mattr::HERMES_BUDGET_SCOPE, r.scope)
            .s(mattr::HERMES_BUDGET_ID, r.id)
            .s(mattr::HERMES_BUDGET_WINDOW, r.window)
            .key();
        let [spend, limit, projected] = match r.tokens {
            false => [m::BUDGET_SPEND, m::BUDGET_LIMIT, m::BUDGET_PROJECTED],
            true => [m::BUDGET_TOKENS, m::BUDGET_TOKEN_LIMIT, m::BUDGET_TOKENS_PROJECTED],
        };
        out.push((spend, a.clone(), r.spend));
        out.push((limit, a.clone(), r.limit));
        out.push((projected, a, r.projected));
    }
    out
}

/// The `hermes.rate_limit.used` / `.limit` rows of one rate limit:
/// `scope`, `id` (`""` for global), `key` (`requests_per_minute`, the
/// window attribute), what its span holds and its limit.
pub fn rate_limit_rows(scope: &str, id: &str, key: &str, used: f64, limit: f64) -> [(&'static str, String, f64); 2] {
    let a = AttrSet::new()
        .s(mattr::HERMES_BUDGET_SCOPE, scope)
        .s(mattr::HERMES_BUDGET_ID, id)
        .s(mattr::HERMES_BUDGET_WINDOW, key)
        .key();
    [(m::RATE_LIMIT_USED, a.clone(), used), (m::RATE_LIMIT_LIMIT, a, limit)]
}

/// The `hermes.fleet.sync.lag` row of host `host_id`: seconds since its
/// last successful fleet sync.
pub fn fleet_lag_row(host_id: &str, lag_seconds: f64) -> (&'static str, String, f64) {
    (
        m::FLEET_SYNC_LAG,
        AttrSet::new().s(mattr::HERMES_FLEET_HOST_ID, host_id).key(),
        lag_seconds,
    )
}

/// The `hermes.hook.calls.lost` / `.skipped` rows of the store's health
/// record counts: `unsaved` calls (no store, no spool), calls Hermes
/// skipped that were lost, and those recorded anyway.
pub fn hook_call_rows(unsaved: u64, skipped_lost: u64, skipped_recorded: u64) -> Vec<(&'static str, String, f64)> {
    use crate::semconv::metric::loss_reason;
    let reason = |r: &str| AttrSet::new().s(mattr::HERMES_LOSS_REASON, r).key();
    vec![
        (m::HOOK_CALLS_LOST, reason(loss_reason::UNSAVED), unsaved as f64),
        (
            m::HOOK_CALLS_LOST,
            reason(loss_reason::HERMES_SKIP),
            skipped_lost as f64,
        ),
        (
            m::HOOK_CALLS_SKIPPED,
            AttrSet::new().bool(mattr::HERMES_SKIP_RECORDED, true).key(),
            skipped_recorded as f64,
        ),
        (
            m::HOOK_CALLS_SKIPPED,
            AttrSet::new().bool(mattr::HERMES_SKIP_RECORDED, false).key(),
            skipped_lost as f64,
        ),
    ]
}

/// The attribute set of a `hermes.budget.verdicts` series.
pub fn verdict_attrs(scope: &str, window: &str, verdict: &str) -> String {
    AttrSet::new()
        .s(mattr::HERMES_BUDGET_SCOPE, scope)
        .s(mattr::HERMES_BUDGET_WINDOW, window)
        .s(mattr::HERMES_BUDGET_VERDICT, verdict)
        .key()
}

/// The attribute set of a `hermes.alerts` series.
pub fn alert_attrs(kind: &str) -> String {
    AttrSet::new().s(mattr::HERMES_ALERT_KIND, kind).key()
}
