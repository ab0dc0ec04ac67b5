//! Metric instruments, units, attributes and data points. Pure.
//!
//! Owns: the thirteen instruments of `semconv/registry/metrics.yaml` (name,
//! kind, unit, buckets, Prometheus name), turning a finished ledger row
//! ([`MetricFact`]) into series increments ([`measure`]), the attribute
//! allow-list, and rendering cumulative series as OTLP metrics
//! ([`otlp_metrics`]) or Prometheus text ([`prometheus_text`]). Must not
//! touch: I/O. The store keeps the series (`store/metrics.rs`), the
//! exporter sends them (`export/metrics.rs`).
//!
//! # What a consumer sees
//!
//! - Counters are monotonic cumulative sums and histograms cumulative
//!   explicit-bucket histograms, whose `start_time_unix_nano` is the
//!   store's metric start (the first event it knows of) for every series,
//!   in every process. The values come from the store, so when another
//!   process takes over exporting, a series continues where it was: it
//!   never goes back and never restarts.
//! - `service.instance.id` is the store's own (kept in its `meta` table):
//!   one Hermes host with one store is one instance however many short
//!   `hermes -z` or cron processes come and go.
//! - A series appears once its first measurement is folded, and stays.
//! - Gauges (`hermes.budget.spend`, `hermes.budget.limit`) are the latest
//!   values the budget code reported.
//!
//! # Budgets (for `budget/`)
//!
//! - Gauges: turn each budget's state into a [`BudgetReading`] and hand
//!   the list to [`crate::export::MetricExporter::set_budget_gauges`] (or
//!   store them with `Store::replace_metric_gauges(&GAUGE_METRICS,
//!   &budget_gauge_rows(&readings), now)`); the latest list replaces the
//!   previous one, so removed budgets disappear.
//! - Verdicts and alerts are counters kept in the store: in the transaction
//!   that records a verdict call `store::add_to_counter(tx,
//!   semconv::metric::BUDGET_VERDICTS, &verdict_attrs(scope, window,
//!   verdict), 1.0, now)`, and for an alert `store::add_to_counter(tx,
//!   semconv::metric::ALERTS, &alert_attrs(kind), 1.0, now)`. They are then
//!   exported like every other counter.

use std::collections::BTreeMap;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    Sum,
};

pub use crate::model::{
    encode_attrs, Add, ApiErrorFact, AttrValue, Attrs, GaugeRow, Increment, LlmCallFact, MetricFact, RunLabels,
    SeriesRow,
};
use crate::semconv::attr;
use crate::semconv::metric as m;
use crate::semconv::metric::attr as mattr;
use crate::semconv::metric::token_type;
use crate::semconv::value;

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
        "Alerts raised by hermes-otel itself.",
    ),
];

/// The budget gauge metrics (and the fleet sync lag), replaced together.
pub const GAUGE_METRICS: [&str; 3] = [m::BUDGET_SPEND, m::BUDGET_LIMIT, m::FLEET_SYNC_LAG];

/// The instrument named `name`.
pub fn instrument(name: &str) -> Option<&'static Instrument> {
    INSTRUMENTS.iter().find(|i| i.name == name)
}

/// Attributes added to metrics only when the user allow-lists them
/// (`HERMES_OTEL_METRIC_ATTRIBUTES=sender,profile`): they are unbounded
/// enough to matter for cardinality, so they are off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AllowList {
    /// `hermes.sender.id` on `gen_ai.usage.cost`.
    pub sender: bool,
    /// `hermes.profile` on `gen_ai.usage.cost`.
    pub profile: bool,
}

impl AllowList {
    /// Parses `sender,profile` (either, both, or `none`); attribute names
    /// (`hermes.sender.id`, `hermes.profile`) work too. `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let mut out = AllowList::default();
        for item in s
            .split(',')
            .map(|i| i.trim().to_ascii_lowercase())
            .filter(|i| !i.is_empty())
        {
            match item.as_str() {
                "sender" | "sender_id" | "hermes.sender.id" => out.sender = true,
                "profile" | "hermes.profile" => out.profile = true,
                "none" => {}
                _ => return None,
            }
        }
        Some(out)
    }

    /// The keys it lets through, for `status`.
    pub fn describe(&self) -> String {
        match (self.sender, self.profile) {
            (false, false) => "(none)".into(),
            (true, false) => "sender".into(),
            (false, true) => "profile".into(),
            (true, true) => "sender,profile".into(),
        }
    }

    fn allows(&self, key: &str) -> bool {
        match key {
            attr::HERMES_SENDER_ID => self.sender,
            attr::HERMES_PROFILE => self.profile,
            _ => true,
        }
    }
}

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

/// The increments one finished ledger row makes. Every attribute the
/// registry allows is set here, including the opt-in ones; the allow-list
/// applies when series are read ([`project`]), so it can change at any time
/// without splitting what the store counted.
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
            // Semconv input includes cached tokens; Hermes' input does not.
            let input = c.input_tokens + c.cache_read_tokens + c.cache_write_tokens;
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
            let a = base()
                .s(attr::GEN_AI_OPERATION_NAME, value::OPERATION_CHAT)
                .s(attr::HERMES_PLATFORM, platform(run));
            observe(out, m::OPERATION_DURATION, &a, c.ended_at - c.started_at);
            let a = base()
                .s(attr::HERMES_PLATFORM, platform(run))
                .opt(attr::HERMES_CRON_JOB_ID, run.cron_job_id.as_deref())
                .opt(attr::HERMES_SENDER_ID, run.sender_id.as_deref())
                .opt(attr::HERMES_PROFILE, run.profile.as_deref());
            sum(out, m::COST, &a, c.cost_usd);
        }
        MetricFact::ApiError(e, run) => {
            let (model, provider) = model_provider(e.model.as_deref(), None, e.provider.as_deref(), run);
            let error_type = e
                .error_type
                .as_deref()
                .or(e.reason.as_deref())
                .unwrap_or(value::ERROR_TYPE_OTHER);
            let a = AttrSet::new()
                .s(attr::GEN_AI_OPERATION_NAME, value::OPERATION_CHAT)
                .s(attr::GEN_AI_PROVIDER_NAME, provider)
                .s(attr::GEN_AI_REQUEST_MODEL, model)
                .s(attr::ERROR_TYPE, error_type)
                .s(attr::HERMES_PLATFORM, platform(run));
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

/// One budget's state, for the `hermes.budget.spend` / `.limit` gauges.
/// `budget::BudgetGauge` maps onto it field for field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BudgetReading<'a> {
    /// `global`, `cron`, `sender`, `profile` or `model`.
    pub scope: &'a str,
    /// The scope's id (`""` for global).
    pub id: &'a str,
    /// `daily`, `weekly` or `monthly`.
    pub window: &'a str,
    pub spend_usd: f64,
    pub limit_usd: f64,
}

/// The gauge rows `(metric, attrs, value)` of `readings`, for
/// `Store::replace_metric_gauges(&GAUGE_METRICS, ...)`.
pub fn budget_gauge_rows(readings: &[BudgetReading<'_>]) -> Vec<(&'static str, String, f64)> {
    let mut out = Vec::with_capacity(readings.len() * 2);
    for r in readings {
        let a = AttrSet::new()
            .s(mattr::HERMES_BUDGET_SCOPE, r.scope)
            .s(mattr::HERMES_BUDGET_ID, r.id)
            .s(mattr::HERMES_BUDGET_WINDOW, r.window)
            .key();
        out.push((m::BUDGET_SPEND, a.clone(), r.spend_usd));
        out.push((m::BUDGET_LIMIT, a, r.limit_usd));
    }
    out
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

/// The aggregation temporality of pushed counters and histograms
/// (`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`). Gauges are
/// gauges either way; the Prometheus endpoint is always cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Temporality {
    /// Totals since the store's metric start time.
    #[default]
    Cumulative,
    /// What changed since the last accepted push. `lowmemory` means the
    /// same here: it asks delta for synchronous counters and histograms,
    /// and every instrument with a temporality is one of those.
    Delta,
}

impl Temporality {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cumulative" => Some(Temporality::Cumulative),
            "delta" | "lowmemory" => Some(Temporality::Delta),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Temporality::Cumulative => "cumulative",
            Temporality::Delta => "delta",
        }
    }
}

/// What each of the store's series gained since `base` (the same series as
/// of the last accepted delta push): value, count and buckets minus the
/// base's. Series that did not change are left out; min and max are
/// unknown over a window, so dropped. A series that went backwards (a
/// store replaced under the exporter) counts from zero.
pub fn deltas(now: &[SeriesRow], base: &[SeriesRow]) -> Vec<SeriesRow> {
    let base: BTreeMap<(&str, &str), &SeriesRow> = base
        .iter()
        .map(|b| ((b.metric.as_str(), b.attrs.as_str()), b))
        .collect();
    let mut out = Vec::new();
    for row in now {
        let mut d = SeriesRow {
            min: None,
            max: None,
            ..row.clone()
        };
        if let Some(b) = base.get(&(row.metric.as_str(), row.attrs.as_str())) {
            if row.count < b.count || row.value < b.value {
                out.push(d);
                continue;
            }
            d.value = row.value - b.value;
            d.count = row.count - b.count;
            if let (Some(now), Some(then)) = (&row.buckets, &b.buckets) {
                if now.len() == then.len() {
                    d.buckets = Some(now.iter().zip(then).map(|(n, t)| n.saturating_sub(*t)).collect());
                }
            }
        }
        if d.count > 0 || d.value != 0.0 {
            out.push(d);
        }
    }
    out
}

/// A series as exported: its instrument, the attributes the allow-list
/// lets through, and its cumulative state (summed over the store's series
/// that differ only in left-out attributes).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub instrument: &'static Instrument,
    pub attrs: Attrs,
    pub value: f64,
    pub count: u64,
    pub buckets: Vec<u64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// Applies the allow-list to the store's series and gauges and merges
/// what became equal. Unknown metric names (from a newer build) are left
/// out. Sorted by metric, then attributes.
pub fn project(series: &[SeriesRow], gauges: &[GaugeRow], allow: AllowList) -> Vec<Series> {
    let mut out: BTreeMap<(&'static str, Attrs), Series> = BTreeMap::new();
    let rows = series
        .iter()
        .map(|s| {
            (
                s.metric.as_str(),
                s.attrs.as_str(),
                s.value,
                s.count,
                s.buckets.as_deref(),
                s.min,
                s.max,
            )
        })
        .chain(
            gauges
                .iter()
                .map(|g| (g.metric.as_str(), g.attrs.as_str(), g.value, 1, None, None, None)),
        );
    for (metric, attrs, value, count, buckets, min, max) in rows {
        let Some(instrument) = instrument(metric) else { continue };
        let attrs: Attrs = crate::model::decode_attrs(attrs)
            .into_iter()
            .filter(|(k, _)| allow.allows(k))
            .collect();
        let entry = out.entry((instrument.name, attrs.clone())).or_insert_with(|| Series {
            instrument,
            attrs,
            value: 0.0,
            count: 0,
            buckets: vec![
                0;
                if instrument.kind == Kind::Histogram {
                    instrument.buckets.len() + 1
                } else {
                    0
                }
            ],
            min: None,
            max: None,
        });
        if instrument.kind == Kind::Gauge {
            // Gauges do not add up: distinct series never merge (their
            // attributes are all kept), so this is the one value.
            entry.value = value;
            continue;
        }
        entry.value += value;
        entry.count += count;
        if let Some(b) = buckets {
            if b.len() == entry.buckets.len() {
                for (e, v) in entry.buckets.iter_mut().zip(b) {
                    *e += v;
                }
            }
        }
        entry.min = merge(entry.min, min, f64::min);
        entry.max = merge(entry.max, max, f64::max);
    }
    out.into_values().collect()
}

fn merge(a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    }
}

fn nanos(t: f64) -> u64 {
    (t.max(0.0) * 1e9) as u64
}

fn key_values(attrs: &Attrs) -> Vec<KeyValue> {
    attrs
        .iter()
        .map(|(k, v)| KeyValue {
            key: k.clone(),
            value: Some(AnyValue {
                value: Some(match v {
                    AttrValue::Str(s) => any_value::Value::StringValue(s.clone()),
                    AttrValue::Int(i) => any_value::Value::IntValue(*i),
                    AttrValue::Bool(b) => any_value::Value::BoolValue(*b),
                }),
            }),
            ..KeyValue::default()
        })
        .collect()
}

/// The OTLP metrics of `series` (from [`project`]): monotonic sums,
/// explicit-bucket histograms and gauges, one [`Metric`] per instrument
/// that has series. `start` is where the sums and histograms start (the
/// store's metric start time, or the last delta push), `now` the data
/// points' time, both Unix seconds.
pub fn otlp_metrics(series: &[Series], start: f64, now: f64, temporality: Temporality) -> Vec<Metric> {
    let temporality = match temporality {
        Temporality::Cumulative => AggregationTemporality::Cumulative,
        Temporality::Delta => AggregationTemporality::Delta,
    } as i32;
    let mut out = Vec::new();
    for instrument in INSTRUMENTS {
        let mine: Vec<&Series> = series.iter().filter(|s| s.instrument.name == instrument.name).collect();
        if mine.is_empty() {
            continue;
        }
        let number = |s: &Series| NumberDataPoint {
            attributes: key_values(&s.attrs),
            start_time_unix_nano: if instrument.kind == Kind::Gauge {
                0
            } else {
                nanos(start)
            },
            time_unix_nano: nanos(now),
            value: Some(if instrument.integer {
                number_data_point::Value::AsInt(s.value.round() as i64)
            } else {
                number_data_point::Value::AsDouble(s.value)
            }),
            ..NumberDataPoint::default()
        };
        let data = match instrument.kind {
            Kind::Counter => metric::Data::Sum(Sum {
                data_points: mine.iter().map(|s| number(s)).collect(),
                aggregation_temporality: temporality,
                is_monotonic: true,
            }),
            Kind::Gauge => metric::Data::Gauge(Gauge {
                data_points: mine.iter().map(|s| number(s)).collect(),
            }),
            Kind::Histogram => metric::Data::Histogram(Histogram {
                data_points: mine
                    .iter()
                    .map(|s| HistogramDataPoint {
                        attributes: key_values(&s.attrs),
                        start_time_unix_nano: nanos(start),
                        time_unix_nano: nanos(now),
                        count: s.count,
                        sum: Some(s.value),
                        bucket_counts: s.buckets.clone(),
                        explicit_bounds: instrument.buckets.to_vec(),
                        min: s.min,
                        max: s.max,
                        ..HistogramDataPoint::default()
                    })
                    .collect(),
                aggregation_temporality: temporality,
            }),
        };
        out.push(Metric {
            name: instrument.name.to_string(),
            description: instrument.description.to_string(),
            unit: instrument.unit.to_string(),
            data: Some(data),
            ..Metric::default()
        });
    }
    out
}

/// How many data points `metrics` holds.
pub fn data_points(metrics: &[Metric]) -> usize {
    metrics
        .iter()
        .map(|m| match &m.data {
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            Some(metric::Data::Histogram(h)) => h.data_points.len(),
            _ => 0,
        })
        .sum()
}

/// The Prometheus text exposition (format 0.0.4) of `series`, with the
/// names and labels the OTel Collector's `prometheus` exporter gives the
/// same data (see `semconv/README.md`): metric names from the registry,
/// labels are attribute names with every character outside `[a-zA-Z0-9_]`
/// turned into `_`, values as text (`true`, `404`).
pub fn prometheus_text(series: &[Series]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for instrument in INSTRUMENTS {
        let mine: Vec<&Series> = series.iter().filter(|s| s.instrument.name == instrument.name).collect();
        if mine.is_empty() {
            continue;
        }
        let name = instrument.prometheus_name;
        let kind = match instrument.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {name} {}", escape_help(instrument.description));
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for s in mine {
            let labels: Vec<(String, String)> = s.attrs.iter().map(|(k, v)| (label_name(k), v.to_label())).collect();
            match instrument.kind {
                Kind::Counter | Kind::Gauge => {
                    let _ = writeln!(out, "{name}{} {}", label_text(&labels, None), number(s.value));
                }
                Kind::Histogram => {
                    let mut cumulative = 0u64;
                    for (i, bound) in instrument.buckets.iter().enumerate() {
                        cumulative += s.buckets.get(i).copied().unwrap_or(0);
                        let le = number(*bound);
                        let _ = writeln!(out, "{name}_bucket{} {cumulative}", label_text(&labels, Some(&le)));
                    }
                    let _ = writeln!(out, "{name}_bucket{} {}", label_text(&labels, Some("+Inf")), s.count);
                    let _ = writeln!(out, "{name}_sum{} {}", label_text(&labels, None), number(s.value));
                    let _ = writeln!(out, "{name}_count{} {}", label_text(&labels, None), s.count);
                }
            }
        }
    }
    out
}

/// The Prometheus label name of an attribute key.
pub fn label_name(key: &str) -> String {
    let mut name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert_str(0, "key_");
    }
    name
}

fn label_text(labels: &[(String, String)], le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value: shortest round-trip decimal, `+Inf`/`-Inf`/`NaN`.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolRow;

    fn run() -> RunLabels {
        RunLabels {
            platform: Some("cli".into()),
            cron_job_id: None,
            model: Some("run-model".into()),
            provider: Some("openrouter".into()),
            sender_id: Some("alice".into()),
            profile: Some("work".into()),
        }
    }

    fn series_of(increments: &[Increment]) -> Vec<SeriesRow> {
        // The store's fold, in memory: one row per increment is enough here.
        increments
            .iter()
            .map(|i| {
                let (value, buckets, min, max) = match &i.add {
                    Add::Sum(v) => (*v, None, None, None),
                    Add::Observe { value, bounds } => {
                        let mut b = vec![0; bounds.len() + 1];
                        b[crate::model::bucket_index(*value, bounds)] = 1;
                        (*value, Some(b), Some(*value), Some(*value))
                    }
                };
                SeriesRow {
                    metric: i.metric.to_string(),
                    attrs: i.attrs.clone(),
                    value,
                    count: 1,
                    buckets,
                    min,
                    max,
                    updated_at: 0.0,
                }
            })
            .collect()
    }

    fn call() -> LlmCallFact {
        LlmCallFact {
            model: Some("gpt-x".into()),
            provider: Some("openai".into()),
            started_at: 10.0,
            ended_at: 11.5,
            input_tokens: 100,
            output_tokens: 20,
            cache_read_tokens: 300,
            cache_write_tokens: 4,
            reasoning_tokens: 7,
            cost_usd: 0.25,
            ..LlmCallFact::default()
        }
    }

    #[test]
    fn an_llm_call_counts_input_with_cache_on_semconv_and_without_on_hermes_tokens() {
        let mut out = Vec::new();
        measure(&MetricFact::LlmCall(call(), run()), &mut out);
        let series = project(&series_of(&out), &[], AllowList::default());
        let get = |metric: &str, key: &str, v: &str| {
            series
                .iter()
                .find(|s| {
                    s.instrument.name == metric
                        && s.attrs.iter().any(|(k, x)| k == key && *x == AttrValue::Str(v.into()))
                })
                .map(|s| s.value)
        };
        assert_eq!(get(m::TOKEN_USAGE, mattr::GEN_AI_TOKEN_TYPE, "input"), Some(404.0));
        assert_eq!(get(m::TOKEN_USAGE, mattr::GEN_AI_TOKEN_TYPE, "output"), Some(20.0));
        assert_eq!(
            get(m::HERMES_TOKEN_USAGE, mattr::HERMES_TOKEN_TYPE, "input"),
            Some(100.0)
        );
        assert_eq!(
            get(m::HERMES_TOKEN_USAGE, mattr::HERMES_TOKEN_TYPE, "cache_read"),
            Some(300.0)
        );
        assert_eq!(
            get(m::HERMES_TOKEN_USAGE, mattr::HERMES_TOKEN_TYPE, "reasoning"),
            Some(7.0)
        );
        assert_eq!(get(m::COST, attr::GEN_AI_REQUEST_MODEL, "gpt-x"), Some(0.25));
        assert_eq!(
            get(m::OPERATION_DURATION, attr::GEN_AI_REQUEST_MODEL, "gpt-x"),
            Some(1.5)
        );
    }

    #[test]
    fn sender_and_profile_reach_metrics_only_when_allow_listed() {
        let mut out = Vec::new();
        measure(&MetricFact::LlmCall(call(), run()), &mut out);
        let rows = series_of(&out);
        let keys = |allow| -> Vec<String> {
            project(&rows, &[], allow)
                .iter()
                .flat_map(|s| s.attrs.iter().map(|(k, _)| k.clone()))
                .collect()
        };
        let off = keys(AllowList::default());
        assert!(!off
            .iter()
            .any(|k| k == attr::HERMES_SENDER_ID || k == attr::HERMES_PROFILE));
        let on = keys(AllowList::parse("sender,profile").expect("parse"));
        assert!(on.iter().any(|k| k == attr::HERMES_SENDER_ID));
        assert!(on.iter().any(|k| k == attr::HERMES_PROFILE));
        assert_eq!(
            AllowList::parse("sender"),
            Some(AllowList {
                sender: true,
                profile: false
            })
        );
        assert_eq!(AllowList::parse("session_id"), None, "unknown names are refused");
        assert_eq!(AllowList::parse(""), Some(AllowList::default()));
    }

    #[test]
    fn series_that_differ_only_in_left_out_attributes_are_summed() {
        let mut out = Vec::new();
        let mut other = run();
        other.sender_id = Some("bob".into());
        measure(&MetricFact::LlmCall(call(), run()), &mut out);
        measure(&MetricFact::LlmCall(call(), other), &mut out);
        let series = project(&series_of(&out), &[], AllowList::default());
        let cost: Vec<&Series> = series.iter().filter(|s| s.instrument.name == m::COST).collect();
        assert_eq!(cost.len(), 1);
        assert_eq!(cost[0].value, 0.5);
        let hist: Vec<&Series> = series
            .iter()
            .filter(|s| s.instrument.name == m::OPERATION_DURATION)
            .collect();
        assert_eq!((hist[0].count, hist[0].buckets.iter().sum::<u64>()), (2, 2));
    }

    #[test]
    fn api_errors_carry_status_reason_and_retryable_but_no_ids() {
        let mut out = Vec::new();
        let e = ApiErrorFact {
            model: Some("m".into()),
            provider: Some("p".into()),
            started_at: 1.0,
            ended_at: 2.0,
            status_code: Some(404),
            retryable: Some(false),
            reason: Some("model_not_found".into()),
            error_type: Some("NotFoundError".into()),
        };
        measure(&MetricFact::ApiError(e, run()), &mut out);
        let errors = out.iter().find(|i| i.metric == m::API_ERRORS).expect("error counter");
        assert_eq!(
            errors.attrs,
            r#"[["error.type","NotFoundError"],["gen_ai.provider.name","p"],["gen_ai.request.model","m"],["hermes.api.retryable",false],["hermes.error.reason","model_not_found"],["http.response.status_code",404]]"#
        );
        let duration = out
            .iter()
            .find(|i| i.metric == m::OPERATION_DURATION)
            .expect("duration");
        assert!(duration.attrs.contains("NotFoundError"));
        let tokens: Vec<_> = out.iter().filter(|i| i.metric == m::TOKEN_USAGE).collect();
        assert_eq!(tokens.len(), 2, "input and output, each 0");
        for t in tokens {
            assert!(
                matches!(t.add, crate::model::Add::Observe { value, .. } if value == 0.0),
                "{:?}",
                t.add
            );
            assert!(t.attrs.contains(r#"["error.type","NotFoundError"]"#), "{}", t.attrs);
        }
    }

    #[test]
    fn tool_calls_follow_the_span_outcome() {
        let mut out = Vec::new();
        let tool = ToolRow {
            tool_name: "terminal".into(),
            started_at: 1.0,
            ended_at: Some(3.0),
            ok: Some(true),
            status: Some("ok".into()),
            exit_code: Some(2),
            ..ToolRow::default()
        };
        measure(&MetricFact::Tool(tool, None, run()), &mut out);
        assert!(
            out[0].attrs.contains(r#"["hermes.tool.outcome","nonzero_exit"]"#),
            "{:?}",
            out[0]
        );
        assert!(out[1].attrs.contains("exit_code_2"), "{:?}", out[1]);
        assert_eq!(
            out[1].add,
            Add::Observe {
                value: 2.0,
                bounds: DURATION_BUCKETS
            }
        );
    }

    #[test]
    fn prometheus_text_has_registry_names_cumulative_buckets_and_escaped_labels() {
        let series = vec![
            Series {
                instrument: instrument(m::TOOL_DURATION).expect("instrument"),
                attrs: vec![("gen_ai.tool.name".into(), AttrValue::Str("a\"b".into()))],
                value: 1.5,
                count: 3,
                buckets: {
                    let mut b = vec![0; 15];
                    b[0] = 1;
                    b[3] = 2;
                    b
                },
                min: None,
                max: None,
            },
            Series {
                instrument: instrument(m::API_ERRORS).expect("instrument"),
                attrs: vec![
                    ("http.response.status_code".into(), AttrValue::Int(404)),
                    ("hermes.api.retryable".into(), AttrValue::Bool(false)),
                ],
                value: 2.0,
                count: 2,
                buckets: Vec::new(),
                min: None,
                max: None,
            },
        ];
        let text = prometheus_text(&series);
        assert!(
            text.contains("# TYPE gen_ai_execute_tool_duration_seconds histogram\n"),
            "{text}"
        );
        assert!(
            text.contains("gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"a\\\"b\",le=\"0.01\"} 1\n")
        );
        assert!(
            text.contains("gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"a\\\"b\",le=\"0.04\"} 1\n")
        );
        assert!(
            text.contains("gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"a\\\"b\",le=\"0.08\"} 3\n")
        );
        assert!(
            text.contains("gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"a\\\"b\",le=\"+Inf\"} 3\n")
        );
        assert!(text.contains("gen_ai_execute_tool_duration_seconds_sum{gen_ai_tool_name=\"a\\\"b\"} 1.5\n"));
        assert!(text.contains("gen_ai_execute_tool_duration_seconds_count{gen_ai_tool_name=\"a\\\"b\"} 3\n"));
        assert!(text.contains("# TYPE hermes_api_errors_total counter\n"));
        assert!(text
            .contains("hermes_api_errors_total{http_response_status_code=\"404\",hermes_api_retryable=\"false\"} 2\n"));
    }

    #[test]
    fn otlp_sums_are_cumulative_monotonic_from_the_store_start() {
        let mut out = Vec::new();
        measure(&MetricFact::Turn("ok".into(), run()), &mut out);
        let series = project(&series_of(&out), &[], AllowList::default());
        let metrics = otlp_metrics(&series, 100.0, 200.0, Temporality::Cumulative);
        assert_eq!(metrics.len(), 1);
        let Some(metric::Data::Sum(s)) = &metrics[0].data else {
            panic!("a sum")
        };
        assert!(s.is_monotonic);
        assert_eq!(s.aggregation_temporality, AggregationTemporality::Cumulative as i32);
        assert_eq!(s.data_points[0].start_time_unix_nano, 100_000_000_000);
        assert_eq!(s.data_points[0].value, Some(number_data_point::Value::AsInt(1)));
        assert_eq!(data_points(&metrics), 1);
    }

    #[test]
    fn budget_gauges_and_counters_have_the_registry_attributes() {
        let rows = budget_gauge_rows(&[BudgetReading {
            scope: "global",
            id: "",
            window: "daily",
            spend_usd: 3.0,
            limit_usd: 2.0,
        }]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0, m::BUDGET_SPEND);
        assert_eq!(
            rows[0].1,
            r#"[["hermes.budget.id",""],["hermes.budget.scope","global"],["hermes.budget.window","daily"]]"#
        );
        assert!(verdict_attrs("cron", "daily", "paused").contains("hermes.budget.verdict"));
        assert_eq!(alert_attrs("budget_hard"), r#"[["hermes.alert.kind","budget_hard"]]"#);
    }

    /// Every instrument matches the registry (`semconv/docs/names.json`):
    /// kind, unit, buckets, Prometheus name; and every attribute a
    /// measurement sets is one the registry lists for that metric.
    #[test]
    fn instruments_and_attributes_match_the_semconv_registry() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/semconv/docs/names.json");
        let names: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("names.json")).expect("json");
        let defs = names["metrics"].as_array().expect("metrics");
        assert_eq!(defs.len(), INSTRUMENTS.len());
        for i in INSTRUMENTS {
            let def = defs
                .iter()
                .find(|d| d["name"] == i.name)
                .unwrap_or_else(|| panic!("{} not in the registry", i.name));
            let kind = match i.kind {
                Kind::Counter => "counter",
                Kind::Histogram => "histogram",
                Kind::Gauge => "gauge",
            };
            assert_eq!(def["instrument"], kind, "{}", i.name);
            assert_eq!(def["unit"], i.unit, "{}", i.name);
            assert_eq!(def["prometheus_name"], i.prometheus_name, "{}", i.name);
            let buckets: Vec<f64> = def["bucket_boundaries"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
                .unwrap_or_default();
            assert_eq!(buckets, i.buckets, "{}", i.name);
        }
        let mut out = Vec::new();
        let mut cron = run();
        cron.cron_job_id = Some("job".into());
        measure(&MetricFact::LlmCall(call(), cron.clone()), &mut out);
        measure(
            &MetricFact::ApiError(
                ApiErrorFact {
                    status_code: Some(500),
                    retryable: Some(true),
                    reason: Some("server_error".into()),
                    ..ApiErrorFact::default()
                },
                cron.clone(),
            ),
            &mut out,
        );
        let tool = ToolRow {
            tool_name: "t".into(),
            ended_at: Some(1.0),
            ok: Some(false),
            ..ToolRow::default()
        };
        measure(&MetricFact::Tool(tool, Some(0.5), cron.clone()), &mut out);
        measure(&MetricFact::Turn("ok".into(), cron.clone()), &mut out);
        measure(&MetricFact::Session("ok".into(), cron), &mut out);
        for (metric, attrs, _) in budget_gauge_rows(&[BudgetReading {
            scope: "global",
            id: "",
            window: "daily",
            spend_usd: 1.0,
            limit_usd: 1.0,
        }])
        .into_iter()
        .chain([fleet_lag_row("5f0c8e2a", 1.5)])
        {
            out.push(Increment {
                metric,
                attrs,
                add: Add::Sum(0.0),
            });
        }
        for (metric, attrs) in [
            (m::BUDGET_VERDICTS, verdict_attrs("global", "daily", "soft")),
            (m::ALERTS, alert_attrs("budget_soft")),
        ] {
            out.push(Increment {
                metric,
                attrs,
                add: Add::Sum(1.0),
            });
        }
        let mut seen = std::collections::HashSet::new();
        for inc in &out {
            seen.insert(inc.metric);
            let def = defs.iter().find(|d| d["name"] == inc.metric).expect("registered");
            let allowed: Vec<&str> = def["attributes"]
                .as_array()
                .expect("attributes")
                .iter()
                .filter_map(|a| a["id"].as_str())
                .collect();
            for (k, _) in crate::model::decode_attrs(&inc.attrs) {
                assert!(
                    allowed.contains(&k.as_str()),
                    "{}: {k} is not in the registry",
                    inc.metric
                );
            }
        }
        assert_eq!(seen.len(), INSTRUMENTS.len(), "every instrument is measured: {seen:?}");
    }
}
