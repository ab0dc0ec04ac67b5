//! The log outbox: what happened that is neither a span nor a number
//! (budget verdicts, alerts, approvals' decisions, failed LLM API
//! attempts), appended by the transaction that records the fact and sent
//! as OTLP log records by the log exporter (`crates/hermes-meter-runtime/src/export/logs.rs`).
//!
//! Owns: the `log_outbox` table, the `logs.*` export counters in
//! `export_state` and the `logs` lease's name. Must not touch: encoding,
//! the network.
//!
//! Records go in `seq` order and are deleted once the collector accepted
//! them, as spans are: a crash between the two sends the same records
//! again, each with the same `log.record.uid` (its store's id and `seq`),
//! so a backend can drop the repeat. The outbox is bounded: retention
//! expires records as it expires span rows, and the exporter drops the
//! oldest past [`DEFAULT_LOG_OUTBOX_MAX_ROWS`], counting them.

use rusqlite::{params, Connection, TransactionBehavior};

use super::metrics::{bump_state, set_state};
use super::{Outbox, Reader, Writer};
use crate::error::Result;

/// The lease the log exporter sends under (one sender per store).
pub const LOG_LEASE: &str = "logs";

/// The most records the log outbox keeps by default; the oldest beyond it
/// are dropped (counted as `logs.dropped`).
pub const DEFAULT_LOG_OUTBOX_MAX_ROWS: u64 = 100_000;

/// The `export_state` counters of the log export.
pub mod log_counter {
    /// Records the collector accepted.
    pub const EXPORTED: &str = "logs.exported";
    /// Records the collector said it rejected (partial success).
    pub const REJECTED: &str = "logs.rejected";
    /// Records dropped unsent by the cap.
    pub(crate) const DROPPED: &str = "logs.dropped";
    /// Content events not sent because content events are off.
    pub const SKIPPED: &str = "logs.skipped";
    /// Sends that failed.
    pub(crate) const FAILED: &str = "logs.failed_attempts";
    pub(crate) const LAST_SUCCESS_AT: &str = "logs.last_success_at";
    pub(crate) const LAST_ERROR: &str = "logs.last_error";
    pub(crate) const LAST_ERROR_AT: &str = "logs.last_error_at";
}

/// How grave a record is: the OTLP `SeverityNumber` of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Info = 9,
    Warn = 13,
    Error = 17,
}

/// Where a record happened: the session, its turn and the span it belongs
/// to, as far as they are known.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogPlace<'a> {
    pub session_id: Option<&'a str>,
    pub turn_id: Option<&'a str>,
    pub span_id: Option<[u8; 8]>,
}

/// One record to append.
#[derive(Debug, Clone)]
pub struct NewLog<'a> {
    pub at: f64,
    /// The event name (`hermes_meter_model::semconv::event`).
    pub event: &'static str,
    pub severity: Severity,
    pub place: LogPlace<'a>,
    pub body: &'a str,
    /// Its attributes: strings, numbers and booleans.
    pub attrs: LogAttrs,
    /// A content event's api_request_id: its captured content is read
    /// when it is sent.
    pub content_key: Option<&'a str>,
}

/// A record's attributes being built; absent values are left out.
#[derive(Debug, Clone, Default)]
pub struct LogAttrs(pub serde_json::Map<String, serde_json::Value>);

impl LogAttrs {
    pub fn str(mut self, key: &str, value: Option<&str>) -> Self {
        if let Some(v) = value {
            self.0.insert(key.into(), v.into());
        }
        self
    }

    pub fn int(mut self, key: &str, value: Option<i64>) -> Self {
        if let Some(v) = value {
            self.0.insert(key.into(), v.into());
        }
        self
    }

    pub fn bool(mut self, key: &str, value: Option<bool>) -> Self {
        if let Some(v) = value {
            self.0.insert(key.into(), v.into());
        }
        self
    }
}

/// Appends `log` inside the caller's transaction.
pub(crate) fn append(conn: &Connection, log: &NewLog<'_>) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO log_outbox (at, event, severity, session_id, turn_id, span_id, body, attrs, content_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?
    .execute(params![
        log.at,
        log.event,
        log.severity as i64,
        log.place.session_id,
        log.place.turn_id,
        log.place.span_id.map(|id| id.to_vec()),
        log.body,
        serde_json::Value::Object(log.attrs.0.clone()).to_string(),
        log.content_key,
    ])?;
    Ok(())
}

/// One record waiting in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    pub seq: i64,
    pub at: f64,
    pub event: String,
    pub severity: i32,
    pub session_id: Option<String>,
    pub turn_id: Option<String>,
    /// 8 bytes.
    pub span_id: Option<Vec<u8>>,
    pub body: String,
    /// A JSON object.
    pub attrs: String,
    /// A content event's api_request_id.
    pub content_key: Option<String>,
}

/// The log export's state, for `status`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LogExportState {
    pub pending: i64,
    pub oldest_pending_at: Option<f64>,
    pub exported: i64,
    pub rejected: i64,
    pub dropped: i64,
    pub skipped: i64,
    pub failed: i64,
    pub last_success_at: Option<f64>,
    pub last_error: Option<String>,
    pub last_error_at: Option<f64>,
    pub lease: Option<super::Lease>,
}

/// Deletes, among the `?2` oldest records, those appended before `?1`,
/// and content events before `?3` (captured content is not kept past its
/// own retention in a record that waits).
pub(super) const EXPIRE_LOG_OUTBOX: &str = "DELETE FROM log_outbox WHERE seq IN (
        SELECT seq FROM (SELECT seq, at, content_key FROM log_outbox ORDER BY seq LIMIT ?2)
         WHERE at < ?1 OR (content_key IS NOT NULL AND at < ?3))";

impl Writer {
    /// Appends one record in a transaction of its own (a gate's verdict,
    /// written on the hook's connection).
    pub fn append_log(&self, log: &NewLog<'_>) -> Result<()> {
        append(self.db.conn(), log)
    }
}

impl Outbox {
    /// The oldest `limit` records, in `seq` order.
    pub fn log_outbox_ready(&self, limit: usize) -> Result<Vec<LogRow>> {
        // The limit is part of the text (see `pending_alerts`).
        let mut stmt = self.db.conn().prepare_cached(&format!(
            "SELECT seq, at, event, severity, session_id, turn_id, span_id, body, attrs, content_key
               FROM log_outbox ORDER BY seq LIMIT {limit}"
        ))?;
        let rows = stmt.query_map([], |r| {
            Ok(LogRow {
                seq: r.get(0)?,
                at: r.get(1)?,
                event: r.get(2)?,
                severity: r.get(3)?,
                session_id: r.get(4)?,
                turn_id: r.get(5)?,
                span_id: r.get(6)?,
                body: r.get(7)?,
                attrs: r.get(8)?,
                content_key: r.get(9)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The collector accepted `rows` but `skipped` of them, which were not
    /// sent (content events with content events off), and refused
    /// `rejected` by a partial success: they leave the outbox and are
    /// counted.
    pub fn log_outbox_done(&mut self, rows: &[LogRow], skipped: usize, rejected: i64, now: f64) -> Result<()> {
        let tx = self.db.conn.transaction()?;
        {
            let mut del = tx.prepare_cached("DELETE FROM log_outbox WHERE seq = ?1")?;
            for row in rows {
                del.execute(params![row.seq])?;
            }
        }
        let sent = rows.len().saturating_sub(skipped) as i64;
        let rejected = rejected.clamp(0, sent);
        bump_state(&tx, log_counter::EXPORTED, sent - rejected)?;
        bump_state(&tx, log_counter::REJECTED, rejected)?;
        bump_state(&tx, log_counter::SKIPPED, skipped as i64)?;
        // A success is a record the collector took: a lone record refused
        // as too large, counted here, is none.
        if sent - rejected > 0 {
            set_state(&tx, log_counter::LAST_SUCCESS_AT, now)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// A send failed with `message` at `now`: kept for `status`.
    pub fn log_export_failed(&mut self, message: &str, now: f64) -> Result<()> {
        let tx = self.db.conn.transaction()?;
        set_state(&tx, log_counter::LAST_ERROR, message)?;
        set_state(&tx, log_counter::LAST_ERROR_AT, now)?;
        bump_state(&tx, log_counter::FAILED, 1)?;
        tx.commit()?;
        Ok(())
    }

    /// Deletes the oldest records beyond `max_rows`, at most `limit` of
    /// them, counted as dropped. Returns how many went.
    pub fn log_outbox_enforce_cap(&mut self, max_rows: u64, limit: usize) -> Result<usize> {
        self.db.log_outbox_enforce_cap(max_rows, limit)
    }
}

impl Writer {
    /// Deletes, among the `limit` oldest records, those appended before
    /// `before` (the outbox's retention) and content events appended
    /// before `content_before` (the content's): counted as dropped.
    /// Returns how many went.
    pub fn expire_log_outbox(&mut self, before: f64, content_before: f64, limit: usize) -> Result<usize> {
        let tx = self.db.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx
            .prepare_cached(EXPIRE_LOG_OUTBOX)?
            .execute(params![before, limit as i64, content_before])?;
        bump_state(&tx, log_counter::DROPPED, n as i64)?;
        tx.commit()?;
        Ok(n)
    }
}

impl Reader {
    /// The log export's counters and what waits.
    pub fn log_export_state(&self) -> Result<LogExportState> {
        let (pending, oldest): (i64, Option<f64>) =
            self.conn()
                .query_row("SELECT COUNT(*), MIN(at) FROM log_outbox", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
        let int = |k: &str| -> Result<i64> { Ok(self.state_value::<i64>(k)?.unwrap_or(0)) };
        Ok(LogExportState {
            pending,
            oldest_pending_at: oldest,
            exported: int(log_counter::EXPORTED)?,
            rejected: int(log_counter::REJECTED)?,
            dropped: int(log_counter::DROPPED)?,
            skipped: int(log_counter::SKIPPED)?,
            failed: int(log_counter::FAILED)?,
            last_success_at: self.state_value(log_counter::LAST_SUCCESS_AT)?,
            last_error: self.state_value(log_counter::LAST_ERROR)?,
            last_error_at: self.state_value(log_counter::LAST_ERROR_AT)?,
            lease: self.lease(LOG_LEASE)?,
        })
    }
}

/// Shared by the roles that keep it: the writer's retention and the
/// exporter.
impl Reader {
    /// Deletes the oldest records beyond `max_rows`, at most `limit` of
    /// them, counted as dropped. Returns how many went.
    pub(crate) fn log_outbox_enforce_cap(&mut self, max_rows: u64, limit: usize) -> Result<usize> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let pending: i64 = tx.query_row("SELECT COUNT(*) FROM log_outbox", [], |r| r.get(0))?;
        let excess = (pending - max_rows.min(i64::MAX as u64) as i64).min(i64::try_from(limit).unwrap_or(i64::MAX));
        if excess <= 0 {
            return Ok(0);
        }
        let n = tx.execute(
            "DELETE FROM log_outbox WHERE seq IN (SELECT seq FROM log_outbox ORDER BY seq LIMIT ?1)",
            params![excess],
        )?;
        bump_state(&tx, log_counter::DROPPED, n as i64)?;
        tx.commit()?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(at: f64, body: &str) -> NewLog<'_> {
        NewLog {
            at,
            event: hermes_meter_model::semconv::event::ALERT,
            severity: Severity::Warn,
            place: LogPlace {
                session_id: Some("s1"),
                turn_id: Some("t1"),
                span_id: Some([1, 2, 3, 4, 5, 6, 7, 8]),
            },
            body,
            attrs: LogAttrs::default().str("hermes.alert.kind", Some("runaway")),
            content_key: None,
        }
    }

    #[test]
    fn records_leave_in_order_once_accepted_and_the_cap_and_retention_count_what_they_drop() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = Writer::open_dir(dir.path()).expect("store");
        for (i, body) in ["a", "b", "c", "d"].iter().enumerate() {
            store.append_log(&record(10.0 + i as f64, body)).expect("append");
        }
        let mut outbox = Outbox::open(store.path()).expect("outbox");
        let ready = outbox.log_outbox_ready(2).expect("ready");
        assert_eq!(ready.iter().map(|r| r.body.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(ready[0].span_id.as_deref(), Some(&[1, 2, 3, 4, 5, 6, 7, 8][..]));
        assert_eq!(ready[0].severity, 13);
        outbox.log_outbox_done(&ready, 0, 1, 20.0).expect("done");
        let state = store.log_export_state().expect("state");
        assert_eq!((state.pending, state.exported, state.rejected), (2, 1, 1));
        assert_eq!(state.oldest_pending_at, Some(12.0));
        assert_eq!(outbox.log_outbox_enforce_cap(1, 500).expect("cap"), 1);
        assert_eq!(store.expire_log_outbox(14.0, 0.0, 500).expect("expire"), 1);
        let state = store.log_export_state().expect("state");
        assert_eq!((state.pending, state.dropped), (0, 2));
        outbox.log_export_failed("otlp grpc: down", 30.0).expect("failed");
        let state = store.log_export_state().expect("state");
        assert_eq!(
            (state.failed, state.last_error.as_deref()),
            (1, Some("otlp grpc: down"))
        );
    }
}
