//! Spend and token reports over ledger facts. Pure: the store supplies the
//! rows, this module only adds them up.
//!
//! The JSON form is a contract scripts depend on; its schema is documented
//! in the README ("Report JSON") and versioned by [`REPORT_SCHEMA`].

use std::collections::{BTreeMap, BTreeSet};

use jiff::tz::TimeZone;
use serde::Serialize;

use crate::store::FactKind;
use crate::store::{FactRow, ProviderBilled, RunSummary};

/// Identifies the JSON layout; bumped on any incompatible change.
pub const REPORT_SCHEMA: &str = "hermes-otel.report.v1";

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
    pub sessions: i64,
}

/// Totals for one key of a grouping (`key` is null where the attribute is unknown).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Group {
    pub key: Option<String>,
    #[serde(flatten)]
    pub totals: Totals,
}

/// A whole report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
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
    pub by_session: Vec<Group>,
    /// Calls whose cost the provider reported itself (then the cost above),
    /// by model and provider, with the price table's estimate beside it:
    /// what to check against the provider's invoice. Empty when no provider
    /// reported a cost.
    pub provider_billed: Vec<ProviderBilled>,
}

#[derive(Default)]
struct Acc {
    totals: Totals,
    sessions: BTreeSet<String>,
}

impl Acc {
    fn add(&mut self, f: &FactRow) {
        let t = &mut self.totals;
        match f.kind {
            FactKind::LlmCall => {
                t.cost_usd += f.cost_usd;
                t.input_tokens += f.input_tokens;
                t.output_tokens += f.output_tokens;
                t.cache_read_tokens += f.cache_read_tokens;
                t.cache_write_tokens += f.cache_write_tokens;
                t.reasoning_tokens += f.reasoning_tokens;
                t.llm_calls += 1;
                t.estimated_llm_calls += f.estimated as i64;
                t.unpriced_llm_calls += f.unpriced as i64;
                if f.aux_task.is_some() {
                    t.aux_llm_calls += 1;
                    t.aux_cost_usd += f.cost_usd;
                }
            }
            FactKind::ApiError => t.api_errors += 1,
            FactKind::ToolCall => {
                t.tool_calls += 1;
                let outcome = f.tool_outcome.unwrap_or(crate::tool_outcome::ToolOutcome::Other);
                t.tool_failures += outcome.is_failure() as i64;
                t.tool_nonzero_exits += (outcome == crate::tool_outcome::ToolOutcome::NonzeroExit) as i64;
            }
        }
        if !self.sessions.contains(&f.session_id) {
            self.sessions.insert(f.session_id.clone());
        }
    }

    fn finish(mut self) -> Totals {
        self.totals.sessions = self.sessions.len() as i64;
        self.totals
    }
}

/// One grouping being added up: its key for a fact, and the totals so far.
struct Grouping {
    key: fn(&FactRow, &TimeZone) -> Option<String>,
    groups: BTreeMap<Option<String>, Acc>,
}

impl Grouping {
    fn new(key: fn(&FactRow, &TimeZone) -> Option<String>) -> Self {
        Grouping {
            key,
            groups: BTreeMap::new(),
        }
    }

    fn add(&mut self, f: &FactRow, tz: &TimeZone) {
        let key = (self.key)(f, tz).filter(|k| !k.is_empty());
        self.groups.entry(key).or_default().add(f);
    }

    /// Most expensive first; ties by key so output is stable.
    fn finish(self) -> Vec<Group> {
        let mut out: Vec<Group> = self
            .groups
            .into_iter()
            .map(|(key, acc)| Group {
                key,
                totals: acc.finish(),
            })
            .collect();
        out.sort_by(|a, b| b.totals.cost_usd.total_cmp(&a.totals.cost_usd).then(a.key.cmp(&b.key)));
        out
    }
}

/// A report being built one fact at a time ([`Builder::add`]): it holds
/// the groups, never the facts, so its memory follows the answer (the
/// groups it prints), not the number of calls in the window.
pub struct Builder {
    tz: TimeZone,
    since: f64,
    until: f64,
    all: Acc,
    by_day: Grouping,
    by_model: Grouping,
    by_provider: Grouping,
    by_sender: Grouping,
    by_cron_job: Grouping,
    by_session: Grouping,
}

impl Builder {
    /// A report of the window `[since, until)`, days counted in `tz`.
    pub fn new(tz: &TimeZone, since: f64, until: f64) -> Self {
        Builder {
            tz: tz.clone(),
            since,
            until,
            all: Acc::default(),
            by_day: Grouping::new(|f, tz| day_of(f.at, tz)),
            by_model: Grouping::new(|f, _| f.model.clone()),
            by_provider: Grouping::new(|f, _| f.provider.clone()),
            by_sender: Grouping::new(|f, _| f.sender_id.clone()),
            by_cron_job: Grouping::new(|f, _| f.cron_job_id.clone()),
            by_session: Grouping::new(|f, _| Some(f.session_id.clone())),
        }
    }

    /// Adds one fact to the totals and every grouping.
    pub fn add(&mut self, f: &FactRow) {
        self.all.add(f);
        for g in [
            &mut self.by_day,
            &mut self.by_model,
            &mut self.by_provider,
            &mut self.by_sender,
            &mut self.by_cron_job,
            &mut self.by_session,
        ] {
            g.add(f, &self.tz);
        }
    }

    /// Counts a session that started in the window (it counts in the
    /// totals' sessions even without a fact).
    pub fn add_session(&mut self, session_id: &str) {
        if !self.all.sessions.contains(session_id) {
            self.all.sessions.insert(session_id.to_string());
        }
    }

    /// The report.
    pub fn finish(self) -> Report {
        let mut by_day = self.by_day.finish();
        by_day.sort_by(|a, b| a.key.cmp(&b.key));
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
            totals: self.all.finish(),
            by_day,
            by_model: self.by_model.finish(),
            by_provider: self.by_provider.finish(),
            by_sender: self.by_sender.finish(),
            by_cron_job: self.by_cron_job.finish(),
            by_session: self.by_session.finish(),
            provider_billed: Vec::new(),
        }
    }
}

/// The calendar day of `at` in `tz`, as `YYYY-MM-DD`.
pub fn day_of(at: f64, tz: &TimeZone) -> Option<String> {
    let ts = jiff::Timestamp::from_microsecond((at * 1e6) as i64).ok()?;
    Some(ts.to_zoned(tz.clone()).date().to_string())
}

/// Builds the report of `facts` and the `runs` that started in the window.
pub fn build(facts: &[FactRow], runs: &[RunSummary], tz: &TimeZone, since: f64, until: f64) -> Report {
    let mut b = Builder::new(tz, since, until);
    for f in facts {
        b.add(f);
    }
    for r in runs {
        b.add_session(&r.session_id);
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

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
            tool_outcome: (kind == FactKind::ToolCall).then_some(crate::tool_outcome::ToolOutcome::NonzeroExit),
            aux_task: None,
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
        let r = build(&facts, &[], &TimeZone::UTC, 0.0, 1e9);
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
    }

    #[test]
    fn days_are_counted_in_the_given_zone() {
        let tz = TimeZone::get("Asia/Tokyo").expect("tzdb has Tokyo");
        // 1970-01-01T20:00Z is already the 2nd in Tokyo (UTC+9).
        assert_eq!(day_of(20.0 * 3600.0, &tz).as_deref(), Some("1970-01-02"));
        assert_eq!(day_of(20.0 * 3600.0, &TimeZone::UTC).as_deref(), Some("1970-01-01"));
    }
}
