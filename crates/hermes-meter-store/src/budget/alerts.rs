//! Alerts and one-shot budget actions in the store: raising an alert
//! (free→paid, model unavailable, budget soft or hard), delivering each
//! pending one once to one session, claiming a once-per-period action (a
//! cron pause), and counting verdicts and alerts for `hermes.budget.verdicts`
//! and `hermes.alerts`.
//!
//! Must not touch: spend (`rollups.rs`, `spend.rs`); the texts are made by
//! the caller or `crates/hermes-meter-model/src/budget/text.rs`, except the two alert texts raised here.

use rusqlite::{params, OptionalExtension, Transaction};

use super::rollups::RecordedCall;
use crate::error::Result;
use crate::log_outbox::{self, LogAttrs, LogPlace, NewLog, Severity};
use crate::{Outbox, Reader, Writer};
use hermes_meter_model::budget::{self, alert, BudgetState};
use hermes_meter_model::pricing::PriceSource;
use hermes_meter_model::{metrics, semconv};

/// Where alerts are sent to a person, each with its own state in `alerts`
/// (what it took, its tries, when it may try again, its last error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertSink {
    /// The webhook of `HERMES_METER_ALERT_WEBHOOK` (`crates/hermes-meter-runtime/src/export/webhook.rs`).
    Webhook,
    /// A message through Hermes's own sender (`HERMES_METER_ALERT_DELIVER`,
    /// the plugin's `_deliver.py`).
    Hermes,
}

/// The `alerts` columns of one sink.
struct SinkColumns {
    sent: &'static str,
    attempts: &'static str,
    after: &'static str,
    error: &'static str,
}

impl AlertSink {
    fn columns(self) -> SinkColumns {
        match self {
            AlertSink::Webhook => SinkColumns {
                sent: "pushed_at",
                attempts: "push_attempts",
                after: "push_after",
                error: "push_error",
            },
            AlertSink::Hermes => SinkColumns {
                sent: "hermes_sent_at",
                attempts: "hermes_attempts",
                after: "hermes_after",
                error: "hermes_error",
            },
        }
    }
}

/// One alert, as `budget list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRow {
    pub kind: String,
    pub key: String,
    pub text: String,
    pub count: i64,
    pub first_at: f64,
    pub last_at: f64,
    pub delivered_at: Option<f64>,
}

pub(super) fn watch_free_to_paid(
    tx: &Transaction<'_>,
    call: &RecordedCall<'_>,
    at: f64,
    place: LogPlace<'_>,
) -> Result<()> {
    if call.model.is_empty() || call.source == PriceSource::Unknown {
        return Ok(());
    }
    let key = budget::paid_model_key(&call.model);
    let free = call.cost_usd <= 0.0;
    let seen: Option<(Option<f64>, Option<f64>)> = tx
        .prepare_cached("SELECT free_at, paid_at FROM budget_models WHERE model = ?1")?
        .query_row(params![key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (free_at, paid_at) = seen.unwrap_or((None, None));
    if (free && free_at.is_some()) || (!free && paid_at.is_some()) {
        return Ok(());
    }
    tx.prepare_cached(
        "INSERT INTO budget_models (model, free_at, paid_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (model) DO UPDATE SET free_at = COALESCE(free_at, excluded.free_at),
            paid_at = COALESCE(paid_at, excluded.paid_at)",
    )?
    .execute(params![key, free.then_some(at), (!free).then_some(at)])?;
    if !free && free_at.is_some() {
        let text = format!(
            "[hermes-meter alert] Model {key} was free when first seen and now costs money \
             (${:.6} for a call to {}). Check the model id and its pricing.",
            call.cost_usd, call.model
        );
        raise_alert(tx, alert::FREE_TO_PAID, key, &text, at, place)?;
    }
    Ok(())
}

/// Adds an occurrence of an alert; the first one makes it pending and
/// counts in `hermes.alerts`.
pub(super) fn raise_alert(
    conn: &rusqlite::Connection,
    kind: &str,
    key: &str,
    text: &str,
    at: f64,
    place: LogPlace<'_>,
) -> Result<()> {
    let new = conn
        .prepare_cached(
            "INSERT INTO alerts (kind, key, text, count, first_at, last_at) VALUES (?1, ?2, ?3, 1, ?4, ?4)
             ON CONFLICT (kind, key) DO NOTHING",
        )?
        .execute(params![kind, key, text, at])?;
    if new == 1 {
        count_alert(conn, kind, at)?;
        log_alert(conn, kind, text, at, place)?;
    } else {
        conn.prepare_cached(
            "UPDATE alerts SET count = count + 1, last_at = MAX(last_at, ?3) WHERE kind = ?1 AND key = ?2",
        )?
        .execute(params![kind, key, at])?;
    }
    Ok(())
}

/// The log record of an alert raised.
fn log_alert(conn: &rusqlite::Connection, kind: &str, text: &str, at: f64, place: LogPlace<'_>) -> Result<()> {
    let attrs = LogAttrs::default()
        .str(semconv::metric::attr::HERMES_ALERT_KIND, Some(kind))
        .str(semconv::attr::HERMES_SESSION_ID, place.session_id);
    log_outbox::append(
        conn,
        &NewLog {
            at,
            event: semconv::event::ALERT,
            severity: Severity::Warn,
            place,
            body: text,
            attrs,
            content_key: None,
        },
    )
}

/// The severity of a verdict's log record: a notice (a runaway's alert
/// too) warns, a block or a pause is an error.
fn verdict_severity(verdict: &str) -> Severity {
    match verdict {
        budget::verdict::SOFT | budget::verdict::HARD | budget::verdict::RUNAWAY => Severity::Warn,
        _ => Severity::Error,
    }
}

/// One more alert of `kind` in the `hermes.alerts` counter.
fn count_alert(conn: &rusqlite::Connection, kind: &str, at: f64) -> Result<()> {
    crate::add_to_counter(conn, semconv::metric::ALERTS, &metrics::alert_attrs(kind), 1.0, at)
}

impl Writer {
    /// Claims a once-per-period action (`kind` `pause`) for a budget state;
    /// true for the one caller, in any process, that claimed it first.
    pub fn budget_claim_once(&self, kind: &str, state: &BudgetState, at: f64, session_id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO budget_once (kind, scope, id, win, period, at, session_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                kind,
                state.budget.scope.as_str(),
                state.budget.id,
                state.budget.key(),
                state.period,
                at,
                session_id
            ])?;
        Ok(n == 1)
    }

    /// Raises and delivers at once a one-shot alert (budget soft or hard):
    /// true if this call raised it (first in any process).
    pub fn raise_alert_delivered(&self, kind: &str, key: &str, text: &str, at: f64, session_id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO alerts (kind, key, text, count, first_at, last_at, delivered_at, delivered_to)
                 VALUES (?1, ?2, ?3, 1, ?4, ?4, ?4, ?5) ON CONFLICT DO NOTHING",
            )?
            .execute(params![kind, key, text, at, session_id])?;
        if n == 1 {
            count_alert(self.db.conn(), kind, at)?;
        }
        Ok(n == 1)
    }

    /// Writes the log record of an alert this caller raised through
    /// [`Writer::raise_alert_delivered`] that no verdict stands for (an
    /// alert threshold crossed).
    pub fn log_alert(&self, kind: &str, text: &str, at: f64, place: LogPlace<'_>) -> Result<()> {
        log_alert(self.db.conn(), kind, text, at, place)
    }

    /// Raises a one-shot alert to be shown at the next `pre_llm_call` (a
    /// runaway): true if this call raised it (first in any process).
    pub fn raise_pending_alert(&self, kind: &str, key: &str, text: &str, at: f64) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO alerts (kind, key, text, count, first_at, last_at) VALUES (?1, ?2, ?3, 1, ?4, ?4)
                 ON CONFLICT (kind, key) DO NOTHING",
            )?
            .execute(params![kind, key, text, at])?;
        if n == 1 {
            count_alert(self.db.conn(), kind, at)?;
        }
        Ok(n == 1)
    }
}

impl Reader {
    /// Up to `limit` alerts not shown yet, oldest first: `(kind, key, text)`
    /// with the occurrence count in the text. A partial index holds only
    /// these, so this is one short read however many alerts were shown.
    pub fn pending_alerts(&self, limit: usize) -> Result<Vec<(String, String, String)>> {
        // The limit is part of the text, not a parameter: a bound LIMIT makes
        // SQLite (STAT4 build) re-prepare the statement on every run.
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT kind, key, text, count FROM alerts WHERE delivered_at IS NULL ORDER BY first_at LIMIT {limit}"
        ))?;
        let rows = stmt.query_map([], |r| {
            let (kind, key, text, count): (String, String, String, i64) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let text = if count > 1 {
                format!("{text} Seen {count} times.")
            } else {
                text
            };
            Ok((kind, key, text))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Whether any alert waits to be shown (one probe of the partial index).
    pub fn has_pending_alerts(&self) -> Result<bool> {
        Ok(self
            .conn()
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM alerts WHERE delivered_at IS NULL)")?
            .query_row([], |r| r.get(0))?)
    }
}

impl Writer {
    /// Marks a pending alert shown to `session_id`; true for the one caller,
    /// in any process, that got it (each alert is shown once).
    pub fn deliver_alert(&self, kind: &str, key: &str, at: f64, session_id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE alerts SET delivered_at = ?3, delivered_to = ?4 WHERE kind = ?1 AND key = ?2 AND delivered_at IS NULL",
            )?
            .execute(params![kind, key, at, session_id])?;
        Ok(n == 1)
    }

    /// Takes up to `limit` pending alerts for a pre_llm_call of
    /// `session_id`: each is delivered once, to one session, in any process
    /// (the gate's way with [`Reader::pending_alerts`] and
    /// [`Writer::deliver_alert`], in one call for the tests).
    #[cfg(test)]
    pub(crate) fn take_pending_alerts(&self, at: f64, session_id: &str, limit: usize) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for (kind, key, text) in self.pending_alerts(limit)? {
            if self.deliver_alert(&kind, &key, at, session_id)? {
                out.push(text);
            }
        }
        Ok(out)
    }

    /// Counts one verdict (see [`budget::verdict`]) on `state`'s budget,
    /// here and in the `hermes.budget.verdicts` counter.
    pub fn count_budget_verdict(
        &self,
        verdict: &str,
        state: &BudgetState,
        at: f64,
        place: LogPlace<'_>,
        text: &str,
    ) -> Result<()> {
        let scope = state.budget.scope.as_str();
        let id = Some(state.budget.id.as_str()).filter(|id| !id.is_empty());
        self.count_verdict_of(verdict, scope, id, state.budget.window.as_str(), at, place, text)
    }

    /// Counts one verdict on a budget or cap of `scope` over `window` (a
    /// cap's is [`budget::LIFETIME`]).
    /// Writes its log record (`text` is what the agent or user was told),
    /// in `place`.
    pub fn count_verdict(
        &self,
        verdict: &str,
        scope: &str,
        window: &str,
        at: f64,
        place: LogPlace<'_>,
        text: &str,
    ) -> Result<()> {
        self.count_verdict_of(verdict, scope, None, window, at, place, text)
    }

    #[allow(clippy::too_many_arguments)]
    fn count_verdict_of(
        &self,
        verdict: &str,
        scope: &str,
        id: Option<&str>,
        window: &str,
        at: f64,
        place: LogPlace<'_>,
        text: &str,
    ) -> Result<()> {
        let metric_attrs = metrics::verdict_attrs(scope, window, verdict);
        crate::add_to_counter(self.db.conn(), semconv::metric::BUDGET_VERDICTS, &metric_attrs, 1.0, at)?;
        use semconv::metric::attr;
        let attrs = LogAttrs::default()
            .str(attr::HERMES_BUDGET_VERDICT, Some(verdict))
            .str(attr::HERMES_BUDGET_SCOPE, Some(scope))
            .str(attr::HERMES_BUDGET_ID, id)
            .str(attr::HERMES_BUDGET_WINDOW, Some(window))
            .str(semconv::attr::HERMES_SESSION_ID, place.session_id);
        log_outbox::append(
            self.db.conn(),
            &NewLog {
                at,
                event: semconv::event::BUDGET_VERDICT,
                severity: verdict_severity(verdict),
                place,
                body: text,
                attrs,
                content_key: None,
            },
        )?;
        self.db
            .conn()
            .prepare_cached(
                "INSERT INTO budget_verdicts (verdict, count) VALUES (?1, 1)
                 ON CONFLICT (verdict) DO UPDATE SET count = count + 1",
            )?
            .execute(params![verdict])?;
        if let (budget::verdict::BLOCKED, Some(session)) = (verdict, place.session_id) {
            // The session's first stop marks it (its span, `trace`, the viewer).
            self.db
                .conn()
                .prepare_cached("UPDATE runs SET budget_stop = ?2 WHERE session_id = ?1 AND budget_stop IS NULL")?
                .execute(params![session, text])?;
        }
        Ok(())
    }
}

impl Reader {
    /// Verdicts given so far, by verdict (`soft`, `hard`, `blocked`,
    /// `paused`), every one of [`budget::verdict::ALL`] present: the
    /// cumulative `hermes.budget.verdicts` counter.
    pub fn budget_verdict_counts(&self) -> Result<Vec<(&'static str, i64)>> {
        let mut out = Vec::new();
        for v in budget::verdict::ALL {
            let n: Option<i64> = self
                .conn()
                .prepare_cached("SELECT count FROM budget_verdicts WHERE verdict = ?1")?
                .query_row(params![v], |r| r.get(0))
                .optional()?;
            out.push((v, n.unwrap_or(0)));
        }
        Ok(out)
    }

    /// Alerts raised so far, by kind, every one of [`budget::alert::ALL`]
    /// present: the cumulative `hermes.alerts` counter (one per alert, not
    /// per occurrence).
    pub fn alert_counts(&self) -> Result<Vec<(&'static str, i64)>> {
        let mut out = Vec::new();
        for k in budget::alert::ALL {
            let n: i64 = self
                .conn()
                .prepare_cached("SELECT COUNT(*) FROM alerts WHERE kind = ?1")?
                .query_row(params![k], |r| r.get(0))?;
            out.push((k, n));
        }
        Ok(out)
    }
}

impl Outbox {
    /// Up to `limit` alerts `sink` has not taken yet, due now (their retry
    /// time passed), raised at or after `since`, oldest first.
    pub fn alerts_to_push(&self, sink: AlertSink, now: f64, since: f64, limit: usize) -> Result<Vec<AlertRow>> {
        let c = sink.columns();
        let mut stmt = self.db.conn().prepare_cached(&format!(
            "SELECT kind, key, text, count, first_at, last_at, delivered_at FROM alerts
             WHERE {sent} IS NULL AND {after} <= ?1 AND first_at >= ?2 ORDER BY first_at LIMIT {limit}",
            sent = c.sent,
            after = c.after,
        ))?;
        let rows = stmt.query_map(params![now, since], alert_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Claims an alert for one try of `sink` until `until`: true for the
    /// one process, of any, that claimed it (it was still due and untaken).
    pub fn claim_alert_push(&self, sink: AlertSink, kind: &str, key: &str, now: f64, until: f64) -> Result<bool> {
        let c = sink.columns();
        let n = self
            .conn()
            .prepare_cached(&format!(
                "UPDATE alerts SET {after} = ?4, {attempts} = {attempts} + 1
                 WHERE kind = ?1 AND key = ?2 AND {sent} IS NULL AND {after} <= ?3",
                after = c.after,
                attempts = c.attempts,
                sent = c.sent,
            ))?
            .execute(params![kind, key, now, until])?;
        Ok(n == 1)
    }

    /// Tries of the alert by `sink` so far.
    pub fn alert_push_attempts(&self, sink: AlertSink, kind: &str, key: &str) -> Result<i64> {
        let c = sink.columns();
        Ok(self
            .conn()
            .prepare_cached(&format!(
                "SELECT {} FROM alerts WHERE kind = ?1 AND key = ?2",
                c.attempts
            ))?
            .query_row(params![kind, key], |r| r.get(0))?)
    }

    /// `sink` took the alert.
    pub fn alert_pushed(&self, sink: AlertSink, kind: &str, key: &str, at: f64) -> Result<()> {
        let c = sink.columns();
        self.db
            .conn()
            .prepare_cached(&format!(
                "UPDATE alerts SET {} = ?3, {} = NULL WHERE kind = ?1 AND key = ?2",
                c.sent, c.error
            ))?
            .execute(params![kind, key, at])?;
        Ok(())
    }

    /// A try of the alert by `sink` failed: it is due again at `retry_at`.
    pub fn alert_push_failed(&self, sink: AlertSink, kind: &str, key: &str, error: &str, retry_at: f64) -> Result<()> {
        let c = sink.columns();
        self.db
            .conn()
            .prepare_cached(&format!(
                "UPDATE alerts SET {} = ?4, {} = ?3 WHERE kind = ?1 AND key = ?2",
                c.after, c.error
            ))?
            .execute(params![kind, key, error, retry_at])?;
        Ok(())
    }
}

impl Reader {
    /// `(taken, waiting, last error)`: alerts `sink` took, those it has not
    /// yet, and the last error of one that failed, for `status`.
    pub fn alert_push_status(&self, sink: AlertSink) -> Result<(i64, i64, Option<String>)> {
        let c = sink.columns();
        Ok(self
            .conn()
            .prepare_cached(&format!(
                "SELECT COUNT({sent}), COUNT(*) - COUNT({sent}),
                    (SELECT {error} FROM alerts WHERE {sent} IS NULL AND {error} IS NOT NULL
                     ORDER BY {after} DESC LIMIT 1)
                 FROM alerts",
                sent = c.sent,
                error = c.error,
                after = c.after,
            ))?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?)
    }

    /// Every alert, newest first.
    pub fn alerts(&self) -> Result<Vec<AlertRow>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT kind, key, text, count, first_at, last_at, delivered_at FROM alerts ORDER BY last_at DESC",
        )?;
        let rows = stmt.query_map([], alert_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// An alert raised lately, with where it went: for `status`.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentAlert {
    pub alert: AlertRow,
    /// The session whose `pre_llm_call` showed it to the agent.
    pub delivered_to: Option<String>,
    /// The alert webhook: when it took it, else its last error.
    pub pushed_at: Option<f64>,
    pub push_error: Option<String>,
    /// The delivery through Hermes: when it was sent, else its last error.
    pub hermes_sent_at: Option<f64>,
    pub hermes_error: Option<String>,
}

impl Reader {
    /// The alerts raised or raised again since `since`, newest first, at
    /// most `limit`, with where each was delivered or why not.
    pub fn recent_alerts(&self, since: f64, limit: usize) -> Result<Vec<RecentAlert>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT kind, key, text, count, first_at, last_at, delivered_at, delivered_to, pushed_at, push_error,
                    hermes_sent_at, hermes_error
             FROM alerts WHERE last_at >= ?1 ORDER BY last_at DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![since, limit as i64], |r| {
            Ok(RecentAlert {
                alert: alert_row(r)?,
                delivered_to: r.get(7)?,
                pushed_at: r.get(8)?,
                push_error: r.get(9)?,
                hermes_sent_at: r.get(10)?,
                hermes_error: r.get(11)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// A row of `SELECT kind, key, text, count, first_at, last_at, delivered_at`.
fn alert_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AlertRow> {
    Ok(AlertRow {
        kind: r.get(0)?,
        key: r.get(1)?,
        text: r.get(2)?,
        count: r.get(3)?,
        first_at: r.get(4)?,
        last_at: r.get(5)?,
        delivered_at: r.get(6)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> LogPlace<'static> {
        LogPlace {
            session_id: Some("s1"),
            turn_id: Some("t1"),
            span_id: None,
        }
    }
    use crate::budget::temp_store;
    use hermes_meter_model::budget::{Budget, BudgetUnit, Level, Scope, Spend, Window};

    fn state(period: &str) -> BudgetState {
        BudgetState {
            budget: Budget {
                scope: Scope::CronJob,
                id: "job".into(),
                window: Window::Daily,
                unit: BudgetUnit::Usd,
                limit: 1.0,
            },
            spend: Spend::default(),
            level: Level::Hard,
            softened: false,
            period: period.into(),
            window_end: 0,
            frees: None,
            fleet: None,
        }
    }

    fn call(model: &str, cost_usd: f64) -> RecordedCall<'_> {
        RecordedCall {
            model: model.into(),
            cost_usd,
            source: PriceSource::Builtin,
            estimated: false,
            ended_at: 0.0,
            input_tokens: 0,
            output_tokens: 0,
        }
    }

    #[test]
    fn an_alert_is_pending_until_delivered_once_and_counts_its_occurrences() {
        let (_dir, store) = temp_store();
        assert!(!store.has_pending_alerts().expect("pending"));
        raise_alert(
            store.conn(),
            alert::MODEL_UNAVAILABLE,
            "m",
            "Model m is gone.",
            10.0,
            LogPlace::default(),
        )
        .expect("raise");
        raise_alert(
            store.conn(),
            alert::MODEL_UNAVAILABLE,
            "m",
            "Model m is gone.",
            12.0,
            LogPlace::default(),
        )
        .expect("raise");
        assert!(store.has_pending_alerts().expect("pending"));
        let pending = store.pending_alerts(5).expect("pending");
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].2, "Model m is gone. Seen 2 times.");
        assert!(store
            .deliver_alert(alert::MODEL_UNAVAILABLE, "m", 13.0, "s1")
            .expect("deliver"));
        assert!(!store
            .deliver_alert(alert::MODEL_UNAVAILABLE, "m", 14.0, "s2")
            .expect("again"));
        assert!(!store.has_pending_alerts().expect("pending"));
        let rows = store.alerts().expect("alerts");
        assert_eq!(
            (rows[0].count, rows[0].last_at, rows[0].delivered_at),
            (2, 12.0, Some(13.0))
        );
        let counts = store.alert_counts().expect("counts");
        assert!(
            counts.contains(&(alert::MODEL_UNAVAILABLE, 1)),
            "one alert, not one per occurrence"
        );
        assert!(counts.contains(&(alert::FREE_TO_PAID, 0)));
    }

    #[test]
    fn taking_pending_alerts_delivers_each_once() {
        let (_dir, store) = temp_store();
        for key in ["a", "b", "c"] {
            raise_alert(
                store.conn(),
                alert::MODEL_UNAVAILABLE,
                key,
                key,
                1.0,
                LogPlace::default(),
            )
            .expect("raise");
        }
        assert_eq!(store.take_pending_alerts(2.0, "s1", 2).expect("take"), ["a", "b"]);
        assert_eq!(store.take_pending_alerts(3.0, "s2", 5).expect("take"), ["c"]);
        assert!(store.take_pending_alerts(4.0, "s3", 5).expect("take").is_empty());
    }

    #[test]
    fn budget_notices_and_claims_happen_once_per_period() {
        let (_dir, store) = temp_store();
        assert!(store
            .raise_alert_delivered(alert::BUDGET_HARD, "k", "text", 1.0, "s1")
            .expect("raise"));
        assert!(!store
            .raise_alert_delivered(alert::BUDGET_HARD, "k", "text", 2.0, "s2")
            .expect("raise again"));
        assert!(!store.has_pending_alerts().expect("pending"), "raised as delivered");
        let today = state("2026-11-30");
        assert!(store.budget_claim_once("pause", &today, 1.0, "s1").expect("claim"));
        assert!(!store
            .budget_claim_once("pause", &today, 2.0, "s2")
            .expect("claim again"));
        assert!(store
            .budget_claim_once("pause", &state("2026-12-01"), 3.0, "s3")
            .expect("next period"));
    }

    #[test]
    fn verdicts_are_counted_by_kind() {
        let (_dir, store) = temp_store();
        for _ in 0..2 {
            store
                .count_budget_verdict(budget::verdict::BLOCKED, &state("p"), 1.0, place(), "Blocked.")
                .expect("count");
        }
        let counts = store.budget_verdict_counts().expect("counts");
        assert_eq!(
            counts,
            [
                ("soft", 0),
                ("hard", 0),
                ("blocked", 2),
                ("paused", 0),
                ("runaway", 0),
                ("waited", 0)
            ]
        );
        // Each verdict is also a log record, in the turn it was given in.
        let logs = Outbox::open(store.path())
            .expect("outbox")
            .log_outbox_ready(10)
            .expect("logs");
        assert_eq!(logs.len(), 2);
        assert_eq!(logs[0].event, semconv::event::BUDGET_VERDICT);
        assert_eq!(
            (logs[0].body.as_str(), logs[0].severity),
            ("Blocked.", Severity::Error as i32)
        );
        assert_eq!(logs[0].turn_id.as_deref(), Some("t1"));
        let attrs: serde_json::Value = serde_json::from_str(&logs[0].attrs).expect("json");
        assert_eq!(attrs["hermes.budget.verdict"], "blocked");
        assert_eq!(attrs["hermes.budget.scope"], "cron");
        assert_eq!(attrs["hermes.budget.id"], "job");
    }

    #[test]
    fn a_model_first_seen_free_raises_an_alert_when_it_costs() {
        let (_dir, store) = temp_store();
        let tx = store.conn().unchecked_transaction().expect("begin");
        watch_free_to_paid(&tx, &call("x:free", 0.0), 1.0, LogPlace::default()).expect("free");
        watch_free_to_paid(&tx, &call("x", 0.1), 2.0, LogPlace::default()).expect("paid");
        watch_free_to_paid(&tx, &call("x", 0.2), 3.0, LogPlace::default()).expect("paid again");
        watch_free_to_paid(&tx, &call("y", 0.2), 4.0, LogPlace::default()).expect("paid from the start");
        tx.commit().expect("commit");
        let rows = store.alerts().expect("alerts");
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(
            (rows[0].kind.as_str(), rows[0].key.as_str()),
            (alert::FREE_TO_PAID, "x")
        );
    }
}
