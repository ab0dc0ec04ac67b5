//! Metric state: the log of finished ledger rows, cumulative series, gauges.
//!
//! Owns: the `metric_log`, `metric_series`, `metric_gauges` and
//! `metric_sessions` tables (see `migrations/0001_initial.sql`), the on-disk form of attribute sets, the
//! `metrics.*` keys of `meta` and `export_state`. Must not touch: metric
//! names and instruments (that is [`hermes_meter_model::metrics`]), the network.
//!
//! # Counted exactly once
//!
//! Triggers add a `metric_log` row in the very transaction that finishes a
//! ledger row (an LLM call, a failed attempt, a tool call, a turn, a
//! session leaving `running`). [`Outbox::fold_metrics`] reads log rows, turns
//! each into a [`MetricFact`] (the ledger row plus its run's labels), asks
//! the caller for the increments, adds them to `metric_series` and deletes
//! the log rows, all in one `IMMEDIATE` transaction. Any process may fold:
//! SQLite serialises the transactions and a log row is consumed once.
//! Series only grow, so every reader, in any process, sees cumulative
//! values that never go back.
//!
//! Sessions are special: a run leaves `running` at the end of every turn.
//! A session log row stays in the log until the session has *settled*
//! (finalized, abandoned, or ended longer ago than the caller's grace
//! period) and is then counted once (`metric_sessions` remembers it), with
//! the status it has then; a session that starts another turn before it
//! settles waits for its next end.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{Outbox, Reader, Writer};
use crate::error::Result;
use hermes_meter_model::hook::Usage;
use hermes_meter_model::pricing::PriceTable;
use hermes_meter_model::rows::{
    bucket_index, Add, ApiErrorFact, GaugeRow, Increment, LlmCallFact, MetricFact, RunLabels, SeriesRow, ToolRow,
};

/// `metric_log.kind` values (see the migration).
mod kind {
    pub(crate) const LLM_CALL: i64 = 1;
    pub(crate) const LLM_ERROR: i64 = 2;
    pub(super) const TOOL: i64 = 3;
    pub(super) const TURN: i64 = 4;
    pub(super) const SESSION: i64 = 5;
    /// A held call confirmed after its LLM_CALL row was folded (written
    /// by the ledger, not a trigger).
    pub(crate) const CONFIRMED_COST: i64 = 6;
}

/// The oldest `?1` session rows of the log. `kind = 5` (`kind::SESSION`)
/// spelled out: the partial index `metric_log_sessions` is chosen only for
/// the literal its WHERE names; without it, a log whose head holds many
/// other rows was read up to them at every fold.
pub(super) const FOLD_SESSIONS: &str = "SELECT seq, session_id FROM metric_log WHERE kind = 5 ORDER BY seq LIMIT ?1";

/// The lease name of the metric exporter.
pub const METRIC_LEASE: &str = "metrics";

/// What one fold did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Folded {
    /// Log rows consumed.
    pub rows: usize,
    /// Series touched.
    pub series: usize,
    /// The batch was full: more rows may be waiting.
    pub more: bool,
}

/// The store's metric identity.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MetricIdentity {
    /// The start of every cumulative series, Unix seconds.
    pub start_time: f64,
    /// The stable `service.instance.id` of this store.
    pub instance_id: String,
}

/// The metric exporter's state, for `status`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct MetricState {
    /// Finished ledger rows not folded yet (sessions wait to settle).
    pub unfolded: i64,
    pub series: i64,
    pub gauges: i64,
    /// Requests the collector accepted, and the data points in them.
    pub exports: i64,
    pub exported_points: i64,
    pub last_success_at: Option<f64>,
    pub last_error: Option<String>,
    pub last_error_at: Option<f64>,
    pub lease: Option<super::Lease>,
}

mod state_key {
    pub(crate) const EXPORTS: &str = "metrics.exports";
    pub(crate) const EXPORTED_POINTS: &str = "metrics.exported_points";
    pub(crate) const LAST_SUCCESS_AT: &str = "metrics.last_success_at";
    pub(crate) const LAST_ERROR: &str = "metrics.last_error";
    pub(crate) const LAST_ERROR_AT: &str = "metrics.last_error_at";
    pub(crate) const DELTA_AT: &str = "metrics.delta_at";
}

impl Outbox {
    /// Folds up to `limit` finished ledger rows (and every settled session)
    /// into the cumulative series, in one transaction. `measure` turns a
    /// fact into increments. The writer's retention folds too: folding is
    /// exactly once, whichever connection does it.
    pub fn fold_metrics(
        &mut self,
        now: f64,
        settled_before: f64,
        limit: usize,
        measure: &mut dyn FnMut(&MetricFact, &mut Vec<Increment>),
    ) -> Result<Folded> {
        self.db.fold_metrics(now, settled_before, limit, measure)
    }
}

impl Reader {
    /// Every series' cumulative state, by metric and attributes.
    pub fn metric_series(&self) -> Result<Vec<SeriesRow>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT metric, attrs, value, count, buckets, min, max, updated_at FROM metric_series ORDER BY metric, attrs",
        )?;
        let rows = stmt.query_map([], |r| {
            let buckets: Option<String> = r.get(4)?;
            Ok(SeriesRow {
                metric: r.get(0)?,
                attrs: r.get(1)?,
                value: r.get(2)?,
                count: r.get::<_, i64>(3)?.max(0) as u64,
                buckets: buckets.and_then(|b| serde_json::from_str(&b).ok()),
                min: r.get(5)?,
                max: r.get(6)?,
                updated_at: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every gauge's latest value.
    pub fn metric_gauges(&self) -> Result<Vec<GaugeRow>> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT metric, attrs, value, updated_at FROM metric_gauges ORDER BY metric, attrs")?;
        let rows = stmt.query_map([], |r| {
            Ok(GaugeRow {
                metric: r.get(0)?,
                attrs: r.get(1)?,
                value: r.get(2)?,
                updated_at: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

impl Outbox {
    /// Replaces every gauge of the metrics in `metrics` with `rows`
    /// (`(metric, encoded attrs, value)`), in one transaction: gauges that
    /// are no longer reported disappear.
    pub fn replace_metric_gauges(&mut self, metrics: &[&str], rows: &[(&str, String, f64)], now: f64) -> Result<()> {
        let tx = self.db.conn.transaction()?;
        for m in metrics {
            tx.execute("DELETE FROM metric_gauges WHERE metric = ?1", params![m])?;
        }
        for (metric, attrs, value) in rows {
            tx.execute(
                "INSERT INTO metric_gauges (metric, attrs, value, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (metric, attrs) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                params![metric, attrs, value, now],
            )?;
        }
        tx.commit()?;
        Ok(())
    }
}

impl Writer {
    /// Adds `by` to the counter series `(metric, attrs)` in its own
    /// transaction. Inside a transaction of your own, use
    /// [`add_to_counter`].
    pub fn add_to_metric_counter(&mut self, metric: &'static str, attrs: &str, by: f64, now: f64) -> Result<()> {
        let tx = self.db.conn.transaction()?;
        add_to_counter(&tx, metric, attrs, by, now)?;
        tx.commit()?;
        Ok(())
    }
}

impl Reader {
    /// The start time and instance id of this store's metrics.
    pub fn metric_identity(&self) -> Result<MetricIdentity> {
        let get = |key: &str| -> Result<Option<String>> {
            Ok(self
                .conn()
                .query_row("SELECT value FROM meta WHERE key = ?1", params![key], |r| r.get(0))
                .optional()?)
        };
        let start_time = get("metrics.start_time")?
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(0.0);
        let raw = get("metrics.instance_id")?.unwrap_or_default();
        let instance_id = if raw.len() == 32 {
            format!(
                "{}-{}-{}-{}-{}",
                &raw[..8],
                &raw[8..12],
                &raw[12..16],
                &raw[16..20],
                &raw[20..]
            )
        } else {
            raw
        };
        Ok(MetricIdentity {
            start_time,
            instance_id,
        })
    }
}

impl Outbox {
    /// Records an accepted metric export of `points` data points. A delta
    /// push also passes the series it measured from (`delta_base`, as
    /// [`Reader::metric_series`] read them before the push) and when it
    /// read them: the next delta push starts there.
    pub fn metric_export_done(
        &mut self,
        points: usize,
        now: f64,
        delta_base: Option<(&[SeriesRow], f64)>,
    ) -> Result<()> {
        let tx = self.db.conn.transaction()?;
        bump_state(&tx, state_key::EXPORTS, 1)?;
        bump_state(&tx, state_key::EXPORTED_POINTS, points as i64)?;
        set_state(&tx, state_key::LAST_SUCCESS_AT, now)?;
        if let Some((rows, at)) = delta_base {
            tx.execute("DELETE FROM metric_delta_base", [])?;
            let mut insert = tx.prepare_cached(
                "INSERT INTO metric_delta_base (metric, attrs, value, count, buckets) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for r in rows {
                let buckets = r.buckets.as_ref().map(|b| serde_json::to_string(b).unwrap_or_default());
                insert.execute(params![r.metric, r.attrs, r.value, r.count as i64, buckets])?;
            }
            drop(insert);
            set_state(&tx, state_key::DELTA_AT, at)?;
        }
        tx.commit()?;
        Ok(())
    }
}

impl Reader {
    /// The series as the last accepted delta push saw them, and when; no
    /// time when no delta push was accepted yet.
    pub fn metric_delta_base(&self) -> Result<(Vec<SeriesRow>, Option<f64>)> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT metric, attrs, value, count, buckets FROM metric_delta_base")?;
        let rows = stmt.query_map([], |r| {
            let buckets: Option<String> = r.get(4)?;
            Ok(SeriesRow {
                metric: r.get(0)?,
                attrs: r.get(1)?,
                value: r.get(2)?,
                count: r.get::<_, i64>(3)?.max(0) as u64,
                buckets: buckets.and_then(|b| serde_json::from_str(&b).ok()),
                min: None,
                max: None,
                updated_at: 0.0,
            })
        })?;
        let rows = rows.collect::<rusqlite::Result<_>>()?;
        Ok((rows, self.metric_state_value(state_key::DELTA_AT)?))
    }
}

impl Outbox {
    /// Records a failed metric export (the message names no secret).
    pub fn metric_export_failed(&mut self, message: &str, now: f64) -> Result<()> {
        let tx = self.db.conn.transaction()?;
        set_state(&tx, state_key::LAST_ERROR, message)?;
        set_state(&tx, state_key::LAST_ERROR_AT, now)?;
        tx.commit()?;
        Ok(())
    }
}

impl Reader {
    /// When the last metric export was accepted, by any process.
    /// Whether a series changed after the last push the collector took
    /// (whichever process folded it, and whichever pushed).
    pub fn metrics_changed_since_push(&self) -> Result<bool> {
        let newest: Option<f64> = self
            .conn()
            .query_row("SELECT MAX(updated_at) FROM metric_series", [], |r| r.get(0))?;
        Ok(match (newest, self.metric_last_success_at()?) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(newest), Some(pushed)) => newest >= pushed,
        })
    }

    pub fn metric_last_success_at(&self) -> Result<Option<f64>> {
        self.metric_state_value(state_key::LAST_SUCCESS_AT)
    }

    /// Counters, backlog and the lease, for `status`.
    pub fn metric_state(&self) -> Result<MetricState> {
        let count = |sql: &str| -> Result<i64> { Ok(self.conn().query_row(sql, [], |r| r.get(0))?) };
        Ok(MetricState {
            unfolded: self.store_count("metric_log")?,
            series: count("SELECT COUNT(*) FROM metric_series")?,
            gauges: count("SELECT COUNT(*) FROM metric_gauges")?,
            exports: self.metric_state_value(state_key::EXPORTS)?.unwrap_or(0),
            exported_points: self.metric_state_value(state_key::EXPORTED_POINTS)?.unwrap_or(0),
            last_success_at: self.metric_state_value(state_key::LAST_SUCCESS_AT)?,
            last_error: self.metric_state_value(state_key::LAST_ERROR)?,
            last_error_at: self.metric_state_value(state_key::LAST_ERROR_AT)?,
            lease: self.lease(METRIC_LEASE)?,
        })
    }

    fn metric_state_value<T: rusqlite::types::FromSql>(&self, key: &str) -> Result<Option<T>> {
        Ok(self
            .conn()
            .query_row("SELECT value FROM export_state WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()?)
    }
}

/// Adds `by` to the counter series `(metric, attrs)` inside the caller's
/// transaction: for counters whose events are recorded elsewhere in the
/// store (budget verdicts, alerts), so the count commits with the event.
pub fn add_to_counter(conn: &Connection, metric: &str, attrs: &str, by: f64, now: f64) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO metric_series (metric, attrs, value, count, updated_at) VALUES (?1, ?2, ?3, 1, ?4)
         ON CONFLICT (metric, attrs) DO UPDATE SET value = value + excluded.value, count = count + 1,
            updated_at = excluded.updated_at",
    )?
    .execute(params![metric, attrs, by, now])?;
    Ok(())
}

/// How a run ended, for settling sessions.
#[derive(Debug, Clone)]
struct RunEnd {
    status: String,
    finalized: bool,
    ended_at: f64,
}

fn run_of(
    conn: &Connection,
    cache: &mut HashMap<String, Option<(RunLabels, RunEnd)>>,
    session_id: &str,
) -> Result<Option<(RunLabels, RunEnd)>> {
    if let Some(hit) = cache.get(session_id) {
        return Ok(hit.clone());
    }
    let row = conn
        .prepare_cached(
            "SELECT platform, cron_job_id, model, provider, sender_id, profile, status, finalized_at IS NOT NULL,
                    COALESCE(ended_at, last_event_at)
               FROM runs WHERE session_id = ?1",
        )?
        .query_row(params![session_id], |r| {
            Ok((
                RunLabels {
                    platform: r.get(0)?,
                    cron_job_id: r.get(1)?,
                    model: r.get(2)?,
                    provider: r.get(3)?,
                    sender_id: r.get(4)?,
                    profile: r.get(5)?,
                },
                RunEnd {
                    status: r.get(6)?,
                    finalized: r.get(7)?,
                    ended_at: r.get(8)?,
                },
            ))
        })
        .optional()?;
    cache.insert(session_id.to_string(), row.clone());
    Ok(row)
}

fn llm_call_fact(conn: &Connection, api_request_id: &str, prices: &PriceTable) -> Result<Option<LlmCallFact>> {
    let fact = conn
        .prepare_cached(
            "SELECT model, response_model, provider, started_at, ended_at, input_tokens, output_tokens,
                    cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, first_token_at,
                    cost_source
               FROM llm_calls WHERE api_request_id = ?1",
        )?
        .query_row(params![api_request_id], |r| {
            let held = r.get::<_, Option<String>>(12)?.as_deref() == Some(hermes_meter_model::pricing::HELD);
            Ok((
                held,
                LlmCallFact {
                    model: r.get(0)?,
                    response_model: r.get(1)?,
                    provider: r.get(2)?,
                    started_at: r.get(3)?,
                    ended_at: r.get(4)?,
                    input_tokens: r.get(5)?,
                    output_tokens: r.get(6)?,
                    cache_read_tokens: r.get(7)?,
                    cache_write_tokens: r.get(8)?,
                    reasoning_tokens: r.get(9)?,
                    cost_usd: r.get(10)?,
                    first_token_at: r.get(11)?,
                    cache_saved_usd: 0.0,
                },
            ))
        })
        .optional()?;
    // A held call's usage is beyond what any provider bills: it saved nothing.
    Ok(fact.map(|(held, mut f)| {
        if held {
            return f;
        }
        let usage = Usage {
            input_tokens: f.input_tokens,
            output_tokens: f.output_tokens,
            cache_read_tokens: f.cache_read_tokens,
            cache_write_tokens: f.cache_write_tokens,
            reasoning_tokens: f.reasoning_tokens,
            ..Usage::default()
        };
        let model = f.model.as_deref().unwrap_or_default();
        f.cache_saved_usd = prices
            .cache_savings(model, f.provider.as_deref(), &usage, f.ended_at)
            .unwrap_or(0.0);
        f
    }))
}

fn api_error_fact(conn: &Connection, api_request_id: &str, retry_count: i64) -> Result<Option<ApiErrorFact>> {
    Ok(conn
        .prepare_cached(
            "SELECT model, provider, started_at, ended_at, status_code, retryable, reason, error_type
               FROM llm_call_errors WHERE api_request_id = ?1 AND attempt = ?2",
        )?
        .query_row(params![api_request_id, retry_count], |r| {
            Ok(ApiErrorFact {
                model: r.get(0)?,
                provider: r.get(1)?,
                started_at: r.get(2)?,
                ended_at: r.get(3)?,
                status_code: r.get(4)?,
                retryable: r.get(5)?,
                reason: r.get(6)?,
                error_type: r.get(7)?,
            })
        })
        .optional()?)
}

/// A finished tool call to measure. The proxy row a `subagent_stop` records
/// on the parent is no call Hermes made (its `delegate_task` call is one,
/// and has a span): like spans and the report, metrics leave it out.
fn tool_fact(conn: &Connection, session_id: &str, tool_call_id: &str) -> Result<Option<(ToolRow, Option<f64>)>> {
    Ok(conn
        .prepare_cached(
            "SELECT tool_name, turn_id, api_request_id, started_at, ended_at, ok, status, error_type, exit_code, latency_s
               FROM tool_calls WHERE session_id = ?1 AND tool_call_id = ?2 AND proxy = 0",
        )?
        .query_row(params![session_id, tool_call_id], |r| {
            Ok((
                ToolRow {
                    session_id: session_id.to_string(),
                    tool_call_id: tool_call_id.to_string(),
                    tool_name: r.get(0)?,
                    turn_id: r.get(1)?,
                    api_request_id: r.get(2)?,
                    started_at: r.get(3)?,
                    ended_at: r.get(4)?,
                    ok: r.get(5)?,
                    status: r.get(6)?,
                    error_type: r.get(7)?,
                    exit_code: r.get(8)?,
                },
                r.get(9)?,
            ))
        })
        .optional()?)
}

/// A series row as stored: value, count, buckets (JSON), min, max.
type StoredSeries = (f64, i64, Option<String>, Option<f64>, Option<f64>);

/// Adds the increments to their series; returns how many series changed.
fn add_increments(conn: &Connection, increments: &[Increment], now: f64) -> Result<usize> {
    #[derive(Default)]
    struct Acc {
        value: f64,
        count: u64,
        buckets: Option<Vec<u64>>,
        min: Option<f64>,
        max: Option<f64>,
    }
    let mut by_series: HashMap<(&'static str, &str), Acc> = HashMap::new();
    for inc in increments {
        let acc = by_series.entry((inc.metric, inc.attrs.as_str())).or_default();
        match &inc.add {
            Add::Sum(v) => {
                acc.value += v;
                acc.count += 1;
            }
            Add::Observe { value, bounds } => {
                acc.value += value;
                acc.count += 1;
                let buckets = acc.buckets.get_or_insert_with(|| vec![0; bounds.len() + 1]);
                buckets[bucket_index(*value, bounds)] += 1;
                acc.min = Some(acc.min.map_or(*value, |m| m.min(*value)));
                acc.max = Some(acc.max.map_or(*value, |m| m.max(*value)));
            }
        }
    }
    for ((metric, attrs), acc) in &by_series {
        let old: Option<StoredSeries> = conn
            .prepare_cached(
                "SELECT value, count, buckets, min, max FROM metric_series WHERE metric = ?1 AND attrs = ?2",
            )?
            .query_row(params![metric, attrs], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .optional()?;
        let (value, count, buckets, min, max) = match old {
            None => (acc.value, acc.count as i64, acc.buckets.clone(), acc.min, acc.max),
            Some((value, count, old_buckets, min, max)) => {
                let buckets = match (
                    &acc.buckets,
                    old_buckets.and_then(|b| serde_json::from_str::<Vec<u64>>(&b).ok()),
                ) {
                    (Some(new), Some(mut old)) if old.len() == new.len() => {
                        for (o, n) in old.iter_mut().zip(new) {
                            *o += n;
                        }
                        Some(old)
                    }
                    (Some(new), _) => Some(new.clone()),
                    (None, old) => old,
                };
                let pick = |a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64| match (a, b) {
                    (Some(a), Some(b)) => Some(f(a, b)),
                    (a, b) => a.or(b),
                };
                (
                    value + acc.value,
                    count + acc.count as i64,
                    buckets,
                    pick(min, acc.min, f64::min),
                    pick(max, acc.max, f64::max),
                )
            }
        };
        let buckets = buckets.map(|b| serde_json::Value::from(b).to_string());
        conn.prepare_cached(
            "INSERT INTO metric_series (metric, attrs, value, count, buckets, min, max, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (metric, attrs) DO UPDATE SET value = excluded.value, count = excluded.count,
                buckets = excluded.buckets, min = excluded.min, max = excluded.max, updated_at = excluded.updated_at",
        )?
        .execute(params![metric, attrs, value, count, buckets, min, max, now])?;
    }
    Ok(by_series.len())
}

pub(super) fn set_state(conn: &Connection, key: &str, value: impl rusqlite::ToSql) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO export_state (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value])?;
    Ok(())
}

pub(super) fn bump_state(conn: &Connection, key: &str, by: i64) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO export_state (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = COALESCE(value, 0) + excluded.value",
    )?
    .execute(params![key, by])?;
    Ok(())
}

/// Shared by the roles that keep it: the writer's retention and the
/// exporter.
impl Reader {
    /// Folds up to `limit` finished ledger rows (and every settled session)
    /// into the cumulative series, in one transaction. `measure` turns a
    /// fact into increments (see [`hermes_meter_model::metrics::measure`]). Sessions
    /// that ended at or before `settled_before` (or were finalized or
    /// abandoned) are counted; later ones wait.
    pub(crate) fn fold_metrics(
        &mut self,
        now: f64,
        settled_before: f64,
        limit: usize,
        measure: &mut dyn FnMut(&MetricFact, &mut Vec<Increment>),
    ) -> Result<Folded> {
        let tx = rusqlite::Transaction::new_unchecked(self.conn(), TransactionBehavior::Immediate)?;
        let conn: &Connection = &tx;
        let mut runs: HashMap<String, Option<(RunLabels, RunEnd)>> = HashMap::new();
        let mut increments = Vec::new();
        let mut done: Vec<i64> = Vec::new();
        let rows: Vec<(i64, i64, String, String, i64)> = {
            let mut stmt = conn.prepare_cached(
                "SELECT seq, kind, session_id, key, n FROM metric_log WHERE kind != ?1 ORDER BY seq LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![kind::SESSION, limit as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let more = rows.len() >= limit;
        for (seq, k, session_id, key, n) in &rows {
            done.push(*seq);
            let Some((labels, _)) = run_of(conn, &mut runs, session_id)? else {
                continue;
            };
            let fact = match *k {
                kind::LLM_CALL => llm_call_fact(conn, key, &self.prices)?.map(|f| MetricFact::LlmCall(f, labels)),
                kind::LLM_ERROR => api_error_fact(conn, key, *n)?.map(|f| MetricFact::ApiError(f, labels)),
                kind::TOOL => tool_fact(conn, session_id, key)?.map(|(t, l)| MetricFact::Tool(t, l, labels)),
                kind::CONFIRMED_COST => {
                    llm_call_fact(conn, key, &self.prices)?.map(|f| MetricFact::ConfirmedCost(f, labels))
                }
                kind::TURN => conn
                    .prepare_cached("SELECT outcome FROM turns WHERE turn_id = ?1")?
                    .query_row(params![key], |r| r.get::<_, Option<String>>(0))
                    .optional()?
                    .flatten()
                    .map(|o| MetricFact::Turn(o, labels)),
                _ => None,
            };
            if let Some(fact) = fact {
                measure(&fact, &mut increments);
            }
        }
        // At most `limit` sessions too: a log that was never folded (trace
        // and metric export off for a year) holds millions, and a fold is
        // one transaction holding the write lock.
        let sessions: Vec<(i64, String)> = {
            let mut stmt = conn.prepare_cached(FOLD_SESSIONS)?;
            let rows = stmt.query_map(params![limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let more = more || sessions.len() >= limit;
        for (seq, session_id) in &sessions {
            let Some((labels, end)) = run_of(conn, &mut runs, session_id)? else {
                done.push(*seq);
                continue;
            };
            if end.status == hermes_meter_model::rows::outcome::RUNNING {
                // It started another turn; its next end logs it again.
                done.push(*seq);
                continue;
            }
            let settled = end.finalized
                || end.status == hermes_meter_model::rows::outcome::ABANDONED
                || end.ended_at <= settled_before;
            if !settled {
                continue;
            }
            done.push(*seq);
            let first = conn
                .prepare_cached("INSERT INTO metric_sessions (session_id) VALUES (?1) ON CONFLICT DO NOTHING")?
                .execute(params![session_id])?;
            if first == 1 {
                measure(&MetricFact::Session(end.status.clone(), labels), &mut increments);
            }
        }
        let series = add_increments(conn, &increments, now)?;
        {
            let mut del = conn.prepare_cached("DELETE FROM metric_log WHERE seq = ?1")?;
            for seq in &done {
                del.execute(params![seq])?;
            }
        }
        tx.commit()?;
        Ok(Folded {
            rows: done.len(),
            series,
            more,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_store_has_a_metric_identity() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("s.db")).expect("open");
        let id = store.metric_identity().expect("identity");
        assert_eq!(id.instance_id.len(), 36, "{id:?}");
        assert!(id.start_time > 1.0e9, "{id:?}");
        let again = Writer::open(store.path())
            .expect("reopen")
            .metric_identity()
            .expect("identity");
        assert_eq!(again, id, "stable across opens");
    }

    #[test]
    fn counters_added_in_a_transaction_accumulate() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = Writer::open(&dir.path().join("s.db")).expect("open");
        store
            .add_to_metric_counter("hermes.alerts", "[]", 1.0, 10.0)
            .expect("add");
        store
            .add_to_metric_counter("hermes.alerts", "[]", 2.0, 11.0)
            .expect("add");
        let series = store.metric_series().expect("series");
        assert_eq!(series.len(), 1);
        assert_eq!((series[0].value, series[0].count), (3.0, 2));
    }
}
