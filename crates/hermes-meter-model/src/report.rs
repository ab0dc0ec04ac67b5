//! Spend and token reports. Pure: the store hands over facts (one LLM
//! call, failed attempt or tool call each) and rollup rows (the same sums
//! per quarter hour or day, see `crates/hermes-meter-store/src/rollup.rs`); this module only adds
//! them up.
//!
//! The JSON form is a contract scripts depend on; its schema is documented
//! in docs/cli.md ("Report JSON") and versioned by [`REPORT_SCHEMA`].
//!
//! # What `sessions` counts
//!
//! A count of sessions must add up across buckets, or a report would have
//! to read every session of its window again. So a session counts once,
//! where it began: in the totals, a day, a sender and a cron job, in the
//! window it started in; under a model or provider, in the window of its
//! first call with that model or provider. `by_session` lists the sessions
//! that started in the window, each with everything it spent.

use std::collections::BTreeMap;

use jiff::tz::TimeZone;
use serde::Serialize;

use crate::tool_outcome::ToolOutcome;

/// Identifies the JSON layout; bumped on any incompatible change.
pub(crate) const REPORT_SCHEMA: &str = "hermes-meter.report.v1";

/// What a fact row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactKind {
    /// A successful LLM API call (tokens and cost).
    LlmCall,
    /// A failed attempt of an LLM API call.
    ApiError,
    /// A tool call that finished.
    ToolCall,
}

/// One LLM call, API error or finished tool call, with the attributes a
/// report groups by. Sender and cron job are the root session's, so a
/// subagent's spend rolls up to whoever started the work.
#[derive(Debug, Clone, PartialEq)]
pub struct FactRow {
    pub kind: FactKind,
    pub at: f64,
    pub session_id: String,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub sender_id: Option<String>,
    pub cron_job_id: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    pub cost_usd: f64,
    pub estimated: bool,
    pub unpriced: bool,
    /// For tool calls: how it ended (the definition spans and metrics use).
    pub tool_outcome: Option<ToolOutcome>,
    /// For LLM calls: the auxiliary task of an auxiliary call.
    pub aux_task: Option<String>,
    /// For LLM calls the provider billed itself: the price table's
    /// estimate of the same usage (`cost_usd` is then the provider's).
    pub provider_estimate_usd: Option<f64>,
    /// When the fact's session started: a session that started in a window
    /// has no fact before it.
    pub session_started_at: f64,
}

/// The calls of one model and provider that the provider billed itself,
/// beside what the price table estimated for the same usage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProviderBilled {
    pub model: Option<String>,
    pub provider: Option<String>,
    pub llm_calls: i64,
    /// What the provider reported it billed.
    pub billed_usd: f64,
    /// What the price table gives for the same tokens.
    pub estimate_usd: f64,
}

/// A run, as `report` lists sessions.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub session_id: String,
    pub platform: Option<String>,
    pub status: String,
    pub started_at: f64,
    pub ended_at: Option<f64>,
    pub parent_session_id: Option<String>,
}

/// Sums over a set of facts. Token counts are as Hermes reports them:
/// `input_tokens` excludes cache reads and writes, reasoning is part of output.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub cost_usd: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    pub llm_calls: i64,
    pub estimated_llm_calls: i64,
    pub unpriced_llm_calls: i64,
    pub api_errors: i64,
    pub tool_calls: i64,
    /// Tool calls whose outcome is not `ok` (see [`crate::tool_outcome`]),
    /// `tool_nonzero_exits` included.
    pub tool_failures: i64,
    /// Of the failures: terminal commands that exited non-zero while Hermes
    /// reported `ok` (`hermes.tool.outcome = nonzero_exit`).
    pub tool_nonzero_exits: i64,
    /// Of the LLM calls: auxiliary ones (titles, compression, vision, ...),
    /// which Hermes makes outside a turn's own requests, and their cost.
    pub aux_llm_calls: i64,
    pub aux_cost_usd: f64,
    /// Sessions that began here (see the module docs).
    pub sessions: i64,
}

impl Totals {
    /// What one fact adds (it begins no session by itself).
    pub fn of_fact(f: &FactRow) -> Totals {
        let mut t = Totals::default();
        match f.kind {
            FactKind::LlmCall => {
                t.cost_usd = f.cost_usd;
                t.input_tokens = f.input_tokens;
                t.output_tokens = f.output_tokens;
                t.cache_read_tokens = f.cache_read_tokens;
                t.cache_write_tokens = f.cache_write_tokens;
                t.reasoning_tokens = f.reasoning_tokens;
                t.llm_calls = 1;
                t.estimated_llm_calls = f.estimated as i64;
                t.unpriced_llm_calls = f.unpriced as i64;
                if f.aux_task.is_some() {
                    t.aux_llm_calls = 1;
                    t.aux_cost_usd = f.cost_usd;
                }
            }
            FactKind::ApiError => t.api_errors = 1,
            FactKind::ToolCall => {
                t.tool_calls = 1;
                let outcome = f.tool_outcome.unwrap_or(ToolOutcome::Other);
                t.tool_failures = outcome.is_failure() as i64;
                t.tool_nonzero_exits = (outcome == ToolOutcome::NonzeroExit) as i64;
            }
        }
        t
    }

    /// One session beginning, and nothing else.
    pub fn one_session() -> Totals {
        Totals {
            sessions: 1,
            ..Totals::default()
        }
    }

    /// Adds `o` field by field.
    pub fn add(&mut self, o: &Totals) {
        self.cost_usd += o.cost_usd;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cache_read_tokens += o.cache_read_tokens;
        self.cache_write_tokens += o.cache_write_tokens;
        self.reasoning_tokens += o.reasoning_tokens;
        self.llm_calls += o.llm_calls;
        self.estimated_llm_calls += o.estimated_llm_calls;
        self.unpriced_llm_calls += o.unpriced_llm_calls;
        self.api_errors += o.api_errors;
        self.tool_calls += o.tool_calls;
        self.tool_failures += o.tool_failures;
        self.tool_nonzero_exits += o.tool_nonzero_exits;
        self.aux_llm_calls += o.aux_llm_calls;
        self.aux_cost_usd += o.aux_cost_usd;
        self.sessions += o.sessions;
    }
}

/// A grouping of a report, as rollup rows store it (`dim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dim {
    /// The whole report (totals and days); its key is always empty.
    All,
    Model,
    Provider,
    /// The root session's sender.
    Sender,
    /// The root session's cron job.
    CronJob,
    /// Calls the provider billed itself, keyed by [`billed_key`].
    Billed,
}

impl Dim {
    /// Every dimension, in code order.
    pub const ALL: [Dim; 6] = [
        Dim::All,
        Dim::Model,
        Dim::Provider,
        Dim::Sender,
        Dim::CronJob,
        Dim::Billed,
    ];

    /// Its number in the rollup table.
    pub fn code(self) -> i64 {
        self as i64
    }

    /// The dimension numbered `code`.
    pub fn of_code(code: i64) -> Option<Dim> {
        Dim::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// A fact's key in this dimension ('' where unknown, as rollups store it).
    pub fn key_of<'a>(self, f: &'a FactRow) -> std::borrow::Cow<'a, str> {
        let text = |v: &'a Option<String>| std::borrow::Cow::Borrowed(v.as_deref().unwrap_or(""));
        match self {
            Dim::All => std::borrow::Cow::Borrowed(""),
            Dim::Model => text(&f.model),
            Dim::Provider => text(&f.provider),
            Dim::Sender => text(&f.sender_id),
            Dim::CronJob => text(&f.cron_job_id),
            Dim::Billed => std::borrow::Cow::Owned(billed_key(f.model.as_deref(), f.provider.as_deref())),
        }
    }
}

/// The [`Dim::Billed`] key of a model and provider.
pub(crate) fn billed_key(model: Option<&str>, provider: Option<&str>) -> String {
    format!("{}\u{1f}{}", model.unwrap_or(""), provider.unwrap_or(""))
}

/// Totals for one key of a grouping (`key` is null where the attribute is unknown).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    pub key: Option<String>,
    #[serde(flatten)]
    pub totals: Totals,
}

/// A whole report. Its session list is a `Vec` unless a caller supplies
/// another (`report --json` writes one as it reads it: [`Report::with_sessions`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report<S = Vec<Group>> {
    pub schema: &'static str,
    /// RFC 3339 bounds of the window, `[since, until)`.
    pub since: String,
    pub until: String,
    /// The zone days are counted in.
    pub timezone: String,
    pub totals: Totals,
    pub by_day: Vec<Group>,
    pub by_model: Vec<Group>,
    pub by_provider: Vec<Group>,
    pub by_sender: Vec<Group>,
    pub by_cron_job: Vec<Group>,
    /// The sessions that started in the window, each with everything it
    /// spent, most expensive first (the human form lists the first few).
    pub by_session: S,
    /// Calls whose cost the provider reported itself (then the cost above),
    /// by model and provider, with the price table's estimate beside it:
    /// what to check against the provider's invoice. Empty when no provider
    /// reported a cost.
    pub provider_billed: Vec<ProviderBilled>,
    /// LLM calls of the window whose usage was beyond what any provider
    /// bills in one call: recorded with their figures at a cost of 0, kept
    /// out of the totals' cost and every budget.
    pub held_llm_calls: i64,
    /// How much input the providers' caches served, and what that saved
    /// ([`cache_summary`]).
    pub cache: CacheSummary,
    /// LLM calls a middleware sent to another model than the agent's (a
    /// budget `[downgrade]`), by the two models: empty when none was.
    pub downgraded: Vec<Downgraded>,
}

/// Calls of the agent's model `from` routed to `to`, and what they cost
/// (priced as `to`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Downgraded {
    pub from: Option<String>,
    pub to: String,
    pub llm_calls: i64,
    pub cost_usd: f64,
}

/// The share of input tokens served from a provider's cache, and what the
/// same calls would have cost without it, over a report (and per model
/// and per day).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CacheSummary {
    /// Cache reads over all input tokens (Hermes' input, cache reads and
    /// writes); `None` with no input.
    pub hit_rate: Option<f64>,
    /// The sum of the priced models' savings.
    pub saved_usd: f64,
    /// Models the price table does not know: their savings are not in
    /// `saved_usd`.
    pub unpriced_models: i64,
    pub by_model: Vec<CacheUse>,
    pub by_day: Vec<CacheUse>,
}

/// One model's (or day's) cache use.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheUse {
    pub key: Option<String>,
    pub hit_rate: Option<f64>,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    /// What the model's calls would have cost more had their cache reads
    /// and writes been billed as plain input, at its base rates (negative
    /// when writes cost more than reads saved). `None` for a day (its
    /// models' rates differ) and for an unpriced model.
    pub saved_usd: Option<f64>,
}

/// Cache reads over all input tokens.
fn hit_rate(t: &Totals) -> Option<f64> {
    let input = t.input_tokens + t.cache_read_tokens + t.cache_write_tokens;
    (input > 0).then(|| t.cache_read_tokens as f64 / input as f64)
}

/// The cache summary of a report's totals, models and days. `rates(model)`
/// gives the model's base prices with their cache rates resolved (USD per
/// million tokens), or `None` for an unpriced model.
pub fn cache_summary<S>(r: &Report<S>, rates: impl Fn(&str) -> Option<crate::pricing::ModelPrice>) -> CacheSummary {
    let used = |g: &Group| g.totals.cache_read_tokens + g.totals.cache_write_tokens > 0;
    let entry = |g: &Group, saved_usd: Option<f64>| CacheUse {
        key: g.key.clone(),
        hit_rate: hit_rate(&g.totals),
        cache_read_tokens: g.totals.cache_read_tokens,
        cache_write_tokens: g.totals.cache_write_tokens,
        saved_usd,
    };
    let by_model: Vec<CacheUse> =
        r.by_model
            .iter()
            .filter(|g| used(g))
            .map(|g| {
                let saved = g.key.as_deref().and_then(&rates).map(|p| {
                    crate::pricing::cache_savings_at(&p, g.totals.cache_read_tokens, g.totals.cache_write_tokens)
                });
                entry(g, saved)
            })
            .collect();
    CacheSummary {
        hit_rate: hit_rate(&r.totals),
        saved_usd: by_model.iter().filter_map(|c| c.saved_usd).sum(),
        unpriced_models: by_model.iter().filter(|c| c.saved_usd.is_none()).count() as i64,
        by_model,
        by_day: r.by_day.iter().filter(|g| used(g)).map(|g| entry(g, None)).collect(),
    }
}

impl<S> Report<S> {
    /// This report with `by_session` as its session list instead (one a
    /// caller writes as it reads it, most expensive first as
    /// [`Builder::finish`] sorts them).
    pub fn with_sessions<T>(self, by_session: T) -> Report<T> {
        Report {
            schema: self.schema,
            since: self.since,
            until: self.until,
            timezone: self.timezone,
            totals: self.totals,
            by_day: self.by_day,
            by_model: self.by_model,
            by_provider: self.by_provider,
            by_sender: self.by_sender,
            by_cron_job: self.by_cron_job,
            by_session,
            provider_billed: self.provider_billed,
            held_llm_calls: self.held_llm_calls,
            cache: self.cache,
            downgraded: self.downgraded,
        }
    }
}

/// The key as a report shows it: `None` where unknown.
fn shown(key: &str) -> Option<String> {
    (!key.is_empty()).then(|| key.to_string())
}

/// A report being built from facts and rollup rows ([`Builder::add`]): it
/// holds one sum per key it will print, never the facts, so its memory
/// follows the answer, not the number of calls in the window.
pub struct Builder {
    tz: TimeZone,
    since: f64,
    until: f64,
    totals: Totals,
    by_day: BTreeMap<String, Totals>,
    by_model: BTreeMap<String, Totals>,
    by_provider: BTreeMap<String, Totals>,
    by_sender: BTreeMap<String, Totals>,
    by_cron_job: BTreeMap<String, Totals>,
    billed: BTreeMap<String, (Totals, f64)>,
    by_session: Vec<Group>,
    held_llm_calls: i64,
    /// The day of `tz` the last whole-store row fell in: its bounds and
    /// name. Rows come mostly in time order, so a report names each day
    /// once rather than once a row.
    day: Option<(f64, f64, String)>,
}

impl Builder {
    /// A report of the window `[since, until)`, days counted in `tz`.
    pub fn new(tz: &TimeZone, since: f64, until: f64) -> Self {
        Builder {
            tz: tz.clone(),
            since,
            until,
            totals: Totals::default(),
            by_day: BTreeMap::new(),
            by_model: BTreeMap::new(),
            by_provider: BTreeMap::new(),
            by_sender: BTreeMap::new(),
            by_cron_job: BTreeMap::new(),
            billed: BTreeMap::new(),
            by_session: Vec::new(),
            held_llm_calls: 0,
            day: None,
        }
    }

    /// Adds what happened at `at` under `key` of `dim` (a rollup row, at
    /// its bucket's start, or a fact). `estimate_usd` is the price table's
    /// estimate of [`Dim::Billed`] calls and ignored elsewhere.
    pub fn add(&mut self, dim: Dim, key: &str, at: f64, totals: &Totals, estimate_usd: f64) {
        let into = |map: &mut BTreeMap<String, Totals>, key: &str| match map.get_mut(key) {
            Some(t) => t.add(totals),
            None => {
                map.insert(key.to_string(), totals.clone());
            }
        };
        match dim {
            Dim::All => {
                self.totals.add(totals);
                if !matches!(&self.day, Some((start, end, _)) if *start <= at && at < *end) {
                    self.day = day_bounds(at, &self.tz)
                        .zip(day_of(at, &self.tz))
                        .map(|((s, e), d)| (s, e, d));
                }
                if let Some((_, _, day)) = &self.day {
                    into(&mut self.by_day, day);
                }
            }
            Dim::Model => into(&mut self.by_model, key),
            Dim::Provider => into(&mut self.by_provider, key),
            Dim::Sender => into(&mut self.by_sender, key),
            Dim::CronJob => into(&mut self.by_cron_job, key),
            Dim::Billed => {
                let entry = self.billed.entry(key.to_string()).or_default();
                entry.0.add(totals);
                entry.1 += estimate_usd;
            }
        }
    }

    /// Adds one fact to every grouping it belongs to.
    #[cfg(test)]
    pub(crate) fn add_fact(&mut self, f: &FactRow) {
        let totals = Totals::of_fact(f);
        for dim in [Dim::All, Dim::Model, Dim::Provider, Dim::Sender, Dim::CronJob] {
            self.add(dim, &dim.key_of(f), f.at, &totals, 0.0);
        }
        if let Some(estimate) = f.provider_estimate_usd {
            self.add(Dim::Billed, &Dim::Billed.key_of(f), f.at, &totals, estimate);
        }
    }

    /// Lists a session that started in the window, with its totals.
    pub fn add_session(&mut self, session_id: String, totals: Totals) {
        self.by_session.push(Group {
            key: Some(session_id),
            totals,
        });
    }

    /// Notes the window's held LLM calls (see [`Report::held_llm_calls`]).
    pub fn held(&mut self, llm_calls: i64) {
        self.held_llm_calls = llm_calls;
    }

    /// The report.
    pub fn finish(self) -> Report {
        let groups = |map: BTreeMap<String, Totals>| {
            let mut out: Vec<Group> = map
                .into_iter()
                .map(|(key, totals)| Group {
                    key: shown(&key),
                    totals,
                })
                .collect();
            out.sort_by(by_cost);
            out
        };
        let by_day: Vec<Group> = self
            .by_day
            .into_iter()
            .map(|(key, totals)| Group { key: Some(key), totals })
            .collect();
        let mut by_session = self.by_session;
        by_session.sort_by(by_cost);
        let mut provider_billed: Vec<ProviderBilled> = self
            .billed
            .into_iter()
            .map(|(key, (totals, estimate_usd))| {
                let (model, provider) = key.split_once('\u{1f}').unwrap_or((key.as_str(), ""));
                ProviderBilled {
                    model: shown(model),
                    provider: shown(provider),
                    llm_calls: totals.llm_calls,
                    billed_usd: totals.cost_usd,
                    estimate_usd,
                }
            })
            .collect();
        provider_billed.sort_by(|a, b| {
            b.billed_usd
                .total_cmp(&a.billed_usd)
                .then_with(|| a.model.cmp(&b.model))
                .then_with(|| a.provider.cmp(&b.provider))
        });
        let stamp = |t: f64| {
            jiff::Timestamp::from_microsecond((t * 1e6) as i64)
                .map(|ts| ts.to_string())
                .unwrap_or_default()
        };
        Report {
            schema: REPORT_SCHEMA,
            since: stamp(self.since),
            until: stamp(self.until),
            timezone: self.tz.iana_name().unwrap_or("local").to_string(),
            totals: self.totals,
            by_day,
            by_model: groups(self.by_model),
            by_provider: groups(self.by_provider),
            by_sender: groups(self.by_sender),
            by_cron_job: groups(self.by_cron_job),
            by_session,
            provider_billed,
            held_llm_calls: self.held_llm_calls,
            cache: CacheSummary::default(),
            downgraded: Vec::new(),
        }
    }
}

/// Most expensive first; ties by key so output is stable.
fn by_cost(a: &Group, b: &Group) -> std::cmp::Ordering {
    b.totals
        .cost_usd
        .total_cmp(&a.totals.cost_usd)
        .then_with(|| a.key.cmp(&b.key))
}

/// When the day of `tz` that holds `at` begins, and when the next one
/// does (Unix seconds).
pub fn day_bounds(at: f64, tz: &TimeZone) -> Option<(f64, f64)> {
    let zoned = jiff::Timestamp::from_microsecond((at * 1e6) as i64)
        .ok()?
        .to_zoned(tz.clone());
    let seconds = |z: jiff::Zoned| z.timestamp().as_microsecond() as f64 / 1e6;
    let start = zoned.start_of_day().ok()?;
    let next = zoned.tomorrow().ok()?.start_of_day().ok()?;
    Some((seconds(start), seconds(next)))
}

/// The calendar day of `at` in `tz`, as `YYYY-MM-DD`.
pub(crate) fn day_of(at: f64, tz: &TimeZone) -> Option<String> {
    let ts = jiff::Timestamp::from_microsecond((at * 1e6) as i64).ok()?;
    Some(ts.to_zoned(tz.clone()).date().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The report of `facts` and the `runs` that started in the window: each
    /// run counts as a session and is listed with the facts given for it.
    fn build(facts: &[FactRow], runs: &[RunSummary], tz: &TimeZone, since: f64, until: f64) -> Report {
        let mut b = Builder::new(tz, since, until);
        let mut per_session: BTreeMap<&str, Totals> = BTreeMap::new();
        for f in facts {
            b.add_fact(f);
            per_session
                .entry(f.session_id.as_str())
                .or_default()
                .add(&Totals::of_fact(f));
        }
        for r in runs {
            b.add(Dim::All, "", r.started_at, &Totals::one_session(), 0.0);
            let mut totals = per_session.get(r.session_id.as_str()).cloned().unwrap_or_default();
            totals.sessions = 1;
            b.add_session(r.session_id.clone(), totals);
        }
        b.finish()
    }

    fn fact(kind: FactKind, session: &str, model: &str, cost: f64, at: f64) -> FactRow {
        FactRow {
            kind,
            at,
            session_id: session.into(),
            model: Some(model.into()),
            provider: Some("p".into()),
            sender_id: None,
            cron_job_id: None,
            input_tokens: 10,
            output_tokens: 5,
            cache_read_tokens: 1,
            cache_write_tokens: 2,
            reasoning_tokens: 0,
            cost_usd: cost,
            estimated: false,
            unpriced: false,
            tool_outcome: (kind == FactKind::ToolCall).then_some(ToolOutcome::NonzeroExit),
            aux_task: None,
            provider_estimate_usd: None,
            session_started_at: at,
        }
    }

    fn run(session: &str, at: f64) -> RunSummary {
        RunSummary {
            session_id: session.into(),
            platform: None,
            status: "ok".into(),
            started_at: at,
            ended_at: None,
            parent_session_id: None,
        }
    }

    #[test]
    fn totals_add_only_llm_calls_tokens_and_count_the_rest() {
        let facts = [
            fact(FactKind::LlmCall, "a", "m1", 1.0, 0.0),
            fact(FactKind::LlmCall, "b", "m2", 2.0, 86_400.0),
            fact(FactKind::ApiError, "b", "m2", 0.0, 86_400.0),
            fact(FactKind::ToolCall, "b", "m2", 0.0, 86_400.0),
        ];
        let r = build(&facts, &[run("a", 0.0), run("b", 86_000.0)], &TimeZone::UTC, 0.0, 1e9);
        assert_eq!(r.totals.llm_calls, 2);
        assert_eq!(r.totals.input_tokens, 20);
        assert_eq!(r.totals.api_errors, 1);
        assert_eq!((r.totals.tool_calls, r.totals.tool_failures), (1, 1));
        assert_eq!(
            r.totals.tool_nonzero_exits, 1,
            "a non-zero exit is a failure and counted by itself"
        );
        assert_eq!(r.totals.sessions, 2);
        assert_eq!(r.by_model[0].key.as_deref(), Some("m2"));
        let days: Vec<_> = r.by_day.iter().map(|g| g.key.clone().unwrap_or_default()).collect();
        assert_eq!(days, ["1970-01-01", "1970-01-02"]);
        assert_eq!(
            r.by_day.iter().map(|g| g.totals.sessions).collect::<Vec<_>>(),
            [2, 0],
            "b started on the first day: it counts there"
        );
        assert_eq!(r.by_session[0].key.as_deref(), Some("b"));
        assert_eq!(
            (r.by_session[0].totals.cost_usd, r.by_session[0].totals.llm_calls),
            (2.0, 1)
        );
    }

    #[test]
    fn rollup_rows_and_facts_add_up_alike() {
        // One fact given as a fact, the same as a rollup row per dimension.
        let mut f = fact(FactKind::LlmCall, "a", "m1", 1.5, 900.0);
        f.provider_estimate_usd = Some(1.25);
        let mut by_fact = Builder::new(&TimeZone::UTC, 0.0, 1e9);
        by_fact.add_fact(&f);
        let mut by_row = Builder::new(&TimeZone::UTC, 0.0, 1e9);
        for dim in Dim::ALL {
            let estimate = if dim == Dim::Billed { 1.25 } else { 0.0 };
            by_row.add(dim, &dim.key_of(&f), 900.0, &Totals::of_fact(&f), estimate);
        }
        let (a, b) = (by_fact.finish(), by_row.finish());
        assert_eq!(a, b);
        assert_eq!(a.provider_billed[0].estimate_usd, 1.25);
        assert_eq!(a.provider_billed[0].provider.as_deref(), Some("p"));
    }

    #[test]
    fn dims_round_trip_their_codes() {
        for dim in Dim::ALL {
            assert_eq!(Dim::of_code(dim.code()), Some(dim));
        }
        assert_eq!(Dim::of_code(6), None);
        assert_eq!(Dim::of_code(-1), None);
    }

    #[test]
    fn days_are_counted_in_the_given_zone() {
        let tz = TimeZone::get("Asia/Tokyo").expect("tzdb has Tokyo");
        // 1970-01-01T20:00Z is already the 2nd in Tokyo (UTC+9).
        assert_eq!(day_of(20.0 * 3600.0, &tz).as_deref(), Some("1970-01-02"));
        assert_eq!(day_of(20.0 * 3600.0, &TimeZone::UTC).as_deref(), Some("1970-01-01"));
        // Kathmandu (UTC+5:30 until 1986): 1970-01-01 there began at 1969-12-31T18:30Z.
        let tz = TimeZone::get("Asia/Kathmandu").expect("tzdb has Kathmandu");
        assert_eq!(day_bounds(0.0, &tz), Some((-19_800.0, 66_600.0)));
    }
}
