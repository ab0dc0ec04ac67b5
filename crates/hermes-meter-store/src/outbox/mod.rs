//! The span outbox, export counters and the export lease.
//!
//! Owns: the `outbox`, `export_state` and `export_lease` tables,
//! and (in `rows.rs`) the reads of ledger rows the span
//! builder needs.
//! Must not touch: telemetry encoding, the network.
//!
//! # Outbox rows
//!
//! When a ledger row finishes (an LLM call, a failed attempt, a tool call, a
//! turn's end, a run's end), the transaction that finishes it also inserts
//! one small outbox row `(kind, session_id, key, n, ready_at, hold)`. That is
//! one prepared insert on the hook path. Rows name ledger rows; the span is
//! built from the ledger when it is exported, so a row enqueued by one
//! process can be exported by another.
//!
//! `(kind, session_id, key, n)` is unique: enqueueing the same span again (a session
//! that ends a second turn) moves its `ready_at` instead of adding a row.
//!
//! A session span is *held* (`hold = 1`) when its last turn ended but Hermes
//! may still start another one (on_session_end fires per turn and
//! on_session_finalize never fires for `hermes -z` or cron). The exporter
//! sends a held row only once it is older than the grace period; a new turn
//! in the meantime makes the run `running` again and the row is skipped
//! until the run ends again. on_session_finalize, subagent_stop and the idle
//! closer enqueue unheld rows.
//!
//! # Export
//!
//! The exporter reads ready rows in `seq` order, builds and sends spans, and
//! deletes the rows only after the collector accepted them (at least once
//! delivery: a crash between the two re-sends the same span ids). A row
//! whose `ready_at` moved while it was being sent is kept, so the newer
//! version of the span is sent too. The counters in `export_state`
//! (`exported`, `dropped`, `rejected`, `sampled_out`) only grow.

use rusqlite::{params, OptionalExtension, Transaction};

use super::{Outbox, Reader, Writer};
use crate::error::Result;

mod rows;

pub use rows::BatchRows;
pub(super) use rows::{
    approval_of, llm_call_of, llm_error_of, open_attempt_of, tool_of, turn_of, APPROVAL_SELECT, LLM_CALL_SELECT,
    LLM_ERROR_SELECT, OPEN_ATTEMPT_FILTER, OPEN_ATTEMPT_SELECT, TOOL_SELECT, TURN_SELECT,
};

/// What an outbox row names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpanKind {
    /// A session (`runs`), keyed by session id.
    Run = 1,
    /// A turn (`turns`), keyed by turn id.
    Turn = 2,
    /// A successful LLM call (`llm_calls`), keyed by api_request_id.
    LlmCall = 3,
    /// A failed attempt (`llm_call_errors`), keyed by api_request_id and retry_count.
    LlmError = 4,
    /// A tool call (`tool_calls`), keyed by session id and tool_call_id.
    Tool = 5,
    /// An attempt a dead process left open (`api_requests`), keyed by api_request_id.
    OpenAttempt = 6,
    /// A tool call's wait for approval (`approvals`), keyed by session id
    /// and the approval's key.
    Approval = 7,
}

impl SpanKind {
    fn from_i64(v: i64) -> Option<Self> {
        Some(match v {
            1 => SpanKind::Run,
            2 => SpanKind::Turn,
            3 => SpanKind::LlmCall,
            4 => SpanKind::LlmError,
            5 => SpanKind::Tool,
            6 => SpanKind::OpenAttempt,
            7 => SpanKind::Approval,
            _ => return None,
        })
    }
}

/// One outbox row (or, for `export --since`, one ledger row to re-send).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    /// 0 for history rows that are not in the outbox.
    pub seq: i64,
    pub kind: SpanKind,
    pub session_id: String,
    pub key: String,
    pub n: i64,
    pub ready_at: f64,
}

/// Names of the export counters.
pub mod counter {
    /// Spans the collector accepted.
    pub const EXPORTED: &str = "exported";
    /// Outbox rows deleted unsent by the retention cap.
    pub(crate) const DROPPED: &str = "dropped";
    /// Spans the collector reported as rejected in a partial success.
    pub const REJECTED: &str = "rejected";
    /// Spans of traces the sampler left out.
    pub const SAMPLED_OUT: &str = "sampled_out";
    /// Rows whose ledger row was gone or not finished.
    pub const SKIPPED: &str = "skipped";
    /// Export attempts that failed (any cause, a timeout too).
    pub(crate) const FAILED: &str = "failed_attempts";
}

/// The `export_state` keys of the attempt in flight (see
/// [`Outbox::export_attempt`]).
mod attempt {
    /// When it started (Unix seconds).
    pub(crate) const AT: &str = "attempt_at";
    /// When its timeout passes (Unix seconds).
    pub(crate) const DEADLINE: &str = "attempt_deadline";
    /// What it is shown as, if no outcome was written by then.
    pub(crate) const NO_ANSWER: &str = "attempt_no_answer";
}

/// The exporter's state, for `status`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ExportState {
    pub pending: i64,
    pub held: i64,
    pub oldest_pending_at: Option<f64>,
    pub exported: i64,
    pub dropped: i64,
    pub rejected: i64,
    pub sampled_out: i64,
    pub skipped: i64,
    pub last_success_at: Option<f64>,
    pub last_error: Option<String>,
    pub last_error_at: Option<f64>,
    /// Failed export attempts, an attempt left without an outcome past
    /// its timeout included.
    pub failed: i64,
    pub lease: Option<Lease>,
}

/// Who holds the export lease.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Lease {
    pub holder: String,
    pub pid: Option<i64>,
    pub acquired_at: f64,
    pub expires_at: f64,
}

/// Every finished span whose ledger row ended at or after `?1` (`export
/// --since`); each arm reads an index on when its rows ended, so the
/// command costs what its window holds.
pub(super) const HISTORY: &str = "
            SELECT 1, session_id, session_id, 0, COALESCE(ended_at, last_event_at) AS t FROM runs
             WHERE status != 'running' AND COALESCE(ended_at, last_event_at) >= ?1
            UNION ALL SELECT 2, session_id, turn_id, -1, ended_at FROM turns WHERE ended_at IS NOT NULL AND ended_at >= ?1
            UNION ALL SELECT 3, session_id, api_request_id, -1, ended_at FROM llm_calls WHERE ended_at >= ?1
            UNION ALL SELECT 4, session_id, api_request_id, attempt, ended_at FROM llm_call_errors WHERE ended_at >= ?1
            UNION ALL SELECT 5, session_id, tool_call_id, -1, ended_at FROM tool_calls
             WHERE proxy = 0 AND ended_at IS NOT NULL AND ended_at >= ?1
            UNION ALL SELECT 7, session_id, key, -1, ended_at FROM approvals WHERE ended_at IS NOT NULL AND ended_at >= ?1
            UNION ALL SELECT 6, a.session_id, a.api_request_id, -1, COALESCE(r.ended_at, r.last_event_at)
              FROM api_requests a JOIN runs r ON r.session_id = a.session_id
             WHERE r.status != 'running' AND COALESCE(r.ended_at, r.last_event_at) >= ?1
               AND NOT EXISTS (SELECT 1 FROM llm_calls l WHERE l.api_request_id = a.api_request_id)
               AND a.attempts > (SELECT COUNT(*) FROM llm_call_errors e WHERE e.api_request_id = a.api_request_id)
            ORDER BY t";

/// The lease name of the trace exporter.
pub const TRACE_LEASE: &str = "traces";

/// Enqueues a span of `kind` (hook path: one prepared insert).
pub(super) fn enqueue(
    tx: &Transaction<'_>,
    kind: SpanKind,
    session_id: &str,
    key: &str,
    n: i64,
    ready_at: f64,
    hold: bool,
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO outbox (kind, session_id, key, n, ready_at, hold) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (kind, session_id, key, n) DO UPDATE SET ready_at = excluded.ready_at, hold = excluded.hold",
    )?
    .execute(params![kind as i64, session_id, key, n, ready_at, hold])?;
    Ok(())
}

/// Enqueues the session span being recorded now (`runs.span_n`); held
/// unless `final_` or the run is a cron run (one turn per session, never
/// finalized). A continuation with no turn yet has nothing to say: an
/// event that only ends what was already sent (a late finalize) sends
/// nothing.
pub(super) fn enqueue_run(tx: &Transaction<'_>, session_id: &str, at: f64, final_: bool) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO outbox (kind, session_id, key, n, ready_at, hold)
         SELECT ?1, session_id, session_id, span_n, ?3, CASE WHEN ?4 OR platform = 'cron' THEN 0 ELSE 1 END
           FROM runs WHERE session_id = ?2 AND (span_n = 0 OR span_started_at IS NOT NULL)
         ON CONFLICT (kind, session_id, key, n) DO UPDATE SET ready_at = excluded.ready_at, hold = excluded.hold",
    )?
    .execute(params![SpanKind::Run as i64, session_id, at, final_])?;
    Ok(())
}

/// Enqueues the turns of `session_id` that are still open (before a
/// statement closes them).
pub(super) fn enqueue_open_turns(tx: &Transaction<'_>, session_id: &str, at: f64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO outbox (kind, session_id, key, n, ready_at, hold)
         SELECT ?1, session_id, turn_id, -1, ?3, 0 FROM turns WHERE session_id = ?2 AND outcome IS NULL
         ON CONFLICT (kind, session_id, key, n) DO UPDATE SET ready_at = excluded.ready_at, hold = 0",
    )?
    .execute(params![SpanKind::Turn as i64, session_id, at])?;
    Ok(())
}

/// The sessions named in `?2` (a JSON array) that are still open.
const LISTED_SESSIONS: &str = "SELECT session_id FROM runs
      WHERE session_id IN (SELECT value FROM json_each(?2)) AND (status = 'running'
        OR EXISTS (SELECT 1 FROM turns t WHERE t.session_id = runs.session_id AND t.outcome IS NULL))";

/// Enqueues everything about to be closed of the sessions named in
/// `sessions` (a JSON array) that are still open: their open turns, open
/// tool calls, open approvals and open attempts, and the runs themselves
/// (an idle closer's batch, or a process exiting with them open). Must
/// run before the statements that close them.
pub(super) fn enqueue_listed(tx: &Transaction<'_>, sessions: &str, now: f64) -> Result<()> {
    enqueue_closing(tx, LISTED_SESSIONS, &sessions, now)
}

/// The statements of [`enqueue_closing`], each with the span kind it
/// enqueues: `?1` the kind, `?2` the selector's parameter, `?3` now.
fn closing_statements(idle: &str) -> [(SpanKind, String); 5] {
    [
        (
            SpanKind::Turn,
            format!(
                "INSERT INTO outbox (kind, session_id, key, n, ready_at, hold)
                 SELECT ?1, session_id, turn_id, -1, ?3, 0 FROM turns WHERE outcome IS NULL AND session_id IN ({idle})
                 ON CONFLICT (kind, session_id, key, n) DO UPDATE SET ready_at = excluded.ready_at, hold = 0"
            ),
        ),
        (
            SpanKind::Tool,
            format!(
                "INSERT INTO outbox (kind, session_id, key, n, ready_at, hold)
                 SELECT ?1, session_id, tool_call_id, -1, ?3, 0 FROM tool_calls
                  WHERE ended_at IS NULL AND proxy = 0 AND session_id IN ({idle})
                 ON CONFLICT (kind, session_id, key, n) DO NOTHING"
            ),
        ),
        (
            SpanKind::Approval,
            format!(
                "INSERT INTO outbox (kind, session_id, key, n, ready_at, hold)
                 SELECT ?1, session_id, key, -1, ?3, 0 FROM approvals
                  WHERE ended_at IS NULL AND session_id IN ({idle})
                 ON CONFLICT (kind, session_id, key, n) DO NOTHING"
            ),
        ),
        // An attempt is open when its request has fewer finished attempts
        // (successes and errors) than pre_api_request calls.
        (
            SpanKind::OpenAttempt,
            format!(
                "INSERT INTO outbox (kind, session_id, key, n, ready_at, hold)
                 SELECT ?1, a.session_id, a.api_request_id, -1, ?3, 0 FROM api_requests a
                  WHERE a.session_id IN ({idle})
                    AND NOT EXISTS (SELECT 1 FROM llm_calls l WHERE l.api_request_id = a.api_request_id)
                    AND a.attempts > (SELECT COUNT(*) FROM llm_call_errors e WHERE e.api_request_id = a.api_request_id)
                    -- Not an attempt whose span already went out closed
                    -- (a budget stop, an earlier closing).
                    AND (a.closed_attempt IS NULL OR a.closed_attempt < a.attempts - 1)
                 ON CONFLICT (kind, session_id, key, n) DO NOTHING"
            ),
        ),
        (
            SpanKind::Run,
            format!(
                "INSERT INTO outbox (kind, session_id, key, n, ready_at, hold)
                 SELECT ?1, session_id, session_id, span_n, ?3, 0 FROM runs
                  WHERE session_id IN ({idle}) AND (span_n = 0 OR span_started_at IS NOT NULL)
                 ON CONFLICT (kind, session_id, key, n) DO UPDATE SET ready_at = excluded.ready_at, hold = 0"
            ),
        ),
    ]
}

/// Enqueues the open turns, tool calls, approvals and attempts of the
/// sessions `idle` selects (a query whose one parameter is `?2`, bound to
/// `scope`), and the sessions' spans.
fn enqueue_closing(tx: &Transaction<'_>, idle: &str, scope: &dyn rusqlite::ToSql, now: f64) -> Result<()> {
    for (kind, sql) in closing_statements(idle) {
        tx.execute(&sql, params![kind as i64, scope, now])?;
    }
    // Remember which attempt went out closed, so a late answer to it does
    // not send its span again (`api_requests.closed_attempt`, read by the
    // ledger where the attempt ends).
    // The selector's one parameter is `?2`; only it is bound.
    let mut mark = tx.prepare(&format!(
        "UPDATE api_requests SET closed_attempt = attempts - 1
          WHERE session_id IN ({idle})
            AND NOT EXISTS (SELECT 1 FROM llm_calls l WHERE l.api_request_id = api_requests.api_request_id)
            AND attempts > (SELECT COUNT(*) FROM llm_call_errors e WHERE e.api_request_id = api_requests.api_request_id)"
    ))?;
    mark.raw_bind_parameter(2, scope)?;
    mark.raw_execute()?;
    Ok(())
}

/// A session span the collector took (or the sampler dropped), with what
/// it reported, so the next one continues from there.
#[derive(Debug, Clone, PartialEq)]
pub struct SentSession {
    pub session_id: String,
    /// Which session span (the outbox row's `n`).
    pub n: i64,
    /// The span's end.
    pub ended_at: f64,
    /// The run's totals the span was built from: input tokens (cache
    /// included), output tokens, cost.
    pub totals: (i64, i64, f64),
}

impl Outbox {
    /// Up to `limit` outbox rows ready at `now`, in `seq` order; held rows
    /// only once `grace_seconds` old.
    pub fn outbox_ready(&self, now: f64, grace_seconds: f64, limit: usize) -> Result<Vec<OutboxRow>> {
        let mut stmt = self.db.conn().prepare_cached(
            "SELECT seq, kind, session_id, key, n, ready_at FROM outbox
              WHERE ready_at <= ?1 - hold * ?2 ORDER BY seq LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![now, grace_seconds, limit as i64], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, kind, session_id, key, n, ready_at) = row?;
            if let Some(kind) = SpanKind::from_i64(kind) {
                out.push(OutboxRow {
                    seq,
                    kind,
                    session_id,
                    key,
                    n,
                    ready_at,
                });
            }
        }
        Ok(out)
    }

    /// Deletes rows the collector accepted (or that had nothing to send) and
    /// adds to the counters, in one transaction. A row whose `ready_at`
    /// changed since it was read is kept: it names a newer span version.
    ///
    /// Each session span in `sessions` went out (or was sampled out) for
    /// good: its run moves on to the next session span, which reports only
    /// what comes after. Its row goes even if it moved meanwhile (a new
    /// turn ended while it was being sent): it then names that next span.
    pub fn outbox_done(
        &mut self,
        rows: &[OutboxRow],
        sessions: &[SentSession],
        counts: &[(&str, i64)],
        now: f64,
    ) -> Result<()> {
        let tx = self.db.conn.transaction()?;
        {
            let mut del = tx.prepare_cached("DELETE FROM outbox WHERE seq = ?1 AND ready_at = ?2")?;
            for row in rows.iter().filter(|r| r.seq > 0) {
                del.execute(params![row.seq, row.ready_at])?;
            }
            let mut next = tx.prepare_cached(
                "UPDATE runs SET span_n = ?2 + 1, span_started_at = NULL, span_base_input = ?3,
                        span_base_output = ?4, span_base_cost = ?5
                  WHERE session_id = ?1 AND span_n = ?2",
            )?;
            // The row of the next span, if any, gives way to the moved one
            // (an explicit DELETE rather than UPDATE OR REPLACE, whose
            // deletes would pass the row-count triggers by).
            let mut make_way = tx.prepare_cached(
                "DELETE FROM outbox WHERE kind = ?1 AND session_id = ?2 AND key = ?2 AND n = ?3 + 1
                   AND EXISTS (SELECT 1 FROM outbox WHERE kind = ?1 AND session_id = ?2 AND key = ?2 AND n = ?3)",
            )?;
            let mut moved = tx.prepare_cached(
                "UPDATE outbox SET n = n + 1 WHERE kind = ?1 AND session_id = ?2 AND key = ?2 AND n = ?3",
            )?;
            let mut moved_start = tx.prepare_cached(
                "UPDATE runs SET span_started_at = ?2 WHERE session_id = ?1 AND span_started_at IS NULL",
            )?;
            for s in sessions {
                let (input, output, cost) = s.totals;
                next.execute(params![s.session_id, s.n, input, output, cost])?;
                make_way.execute(params![SpanKind::Run as i64, s.session_id, s.n])?;
                if moved.execute(params![SpanKind::Run as i64, s.session_id, s.n])? > 0 {
                    moved_start.execute(params![s.session_id, s.ended_at])?;
                }
            }
        }
        for (name, by) in counts {
            bump(&tx, name, *by)?;
        }
        // A success is a span the collector took: rows that only leave
        // (a lone span refused as too large, sampled out) are none.
        if counts.iter().any(|(name, by)| *name == counter::EXPORTED && *by > 0) {
            set_state(&tx, "last_success_at", now)?;
        }
        tx.commit()?;
        Ok(())
    }
}

impl Writer {
    /// Sends now the span of the LLM call `api_request_id` a budget just
    /// stopped: Hermes answers it with the stand-in and no hook ever ends
    /// it, so nothing else would (its span is built from the open attempt,
    /// marked by the session's `budget_stop`). Its reservation is released
    /// with it: the call spends nothing, and no hook would settle it.
    pub fn enqueue_stopped_call(&self, session_id: &str, api_request_id: &str, now: f64) -> Result<()> {
        self.db
            .conn()
            .prepare_cached("DELETE FROM budget_reservations WHERE api_request_id = ?1")?
            .execute(params![api_request_id])?;
        self.db
            .conn()
            .prepare_cached(
                "INSERT INTO outbox (kind, session_id, key, n, ready_at, hold) VALUES (?1, ?2, ?3, -1, ?4, 0)
                 ON CONFLICT (kind, session_id, key, n) DO NOTHING",
            )?
            .execute(params![SpanKind::OpenAttempt as i64, session_id, api_request_id, now])?;
        // Closed: a process exit or the idle closer does not send it again.
        self.db
            .conn()
            .prepare_cached("UPDATE api_requests SET closed_attempt = attempts - 1 WHERE api_request_id = ?1")?
            .execute(params![api_request_id])?;
        Ok(())
    }

    /// Makes the held session spans of `sessions` ready now (a process
    /// exits: no later turn of it will come). Returns how many.
    pub fn release_held_sessions(&mut self, sessions: &[&str], now: f64) -> Result<usize> {
        let tx = self.db.conn.transaction()?;
        let mut n = 0;
        {
            let mut stmt = tx.prepare_cached(
                "UPDATE outbox SET hold = 0, ready_at = MIN(ready_at, ?3) WHERE kind = ?1 AND session_id = ?2 AND hold = 1",
            )?;
            for session in sessions {
                n += stmt.execute(params![SpanKind::Run as i64, session, now])?;
            }
        }
        tx.commit()?;
        Ok(n)
    }

    /// [`Writer::release_held_sessions`] for every session span held since
    /// `since` (a process that served too many sessions to name them).
    pub fn release_held_sessions_since(&mut self, since: f64, now: f64) -> Result<usize> {
        Ok(self.db.conn.execute(
            "UPDATE outbox SET hold = 0, ready_at = MIN(ready_at, ?3) WHERE kind = ?1 AND hold = 1 AND ready_at >= ?2",
            params![SpanKind::Run as i64, since, now],
        )?)
    }
}

impl Outbox {
    /// Deletes the oldest rows beyond `max_rows`, at most `limit` of them,
    /// and counts them as dropped. Returns how many were dropped.
    pub fn outbox_enforce_cap(&mut self, max_rows: u64, limit: usize) -> Result<u64> {
        self.db.outbox_enforce_cap(max_rows, limit)
    }

    /// Marks spans `export --since` re-sent (history rows) as exported: the
    /// ones still waiting in the outbox leave it and count as exported, so
    /// the export loop does not send them a second time. Returns how many
    /// were waiting.
    pub fn outbox_resent(&mut self, rows: &[OutboxRow], now: f64) -> Result<usize> {
        let tx = self.db.conn.transaction()?;
        let mut waiting = 0;
        {
            let mut del =
                tx.prepare_cached("DELETE FROM outbox WHERE kind = ?1 AND session_id = ?2 AND key = ?3 AND n = ?4")?;
            for row in rows {
                waiting += del.execute(params![row.kind as i64, row.session_id, row.key, row.n])?;
            }
        }
        bump(&tx, counter::EXPORTED, waiting as i64)?;
        set_state(&tx, "last_success_at", now)?;
        tx.commit()?;
        Ok(waiting)
    }

    /// Records a failed export attempt for `status` (the message names no secret).
    pub fn export_failed(&mut self, message: &str, now: f64) -> Result<()> {
        let tx = self.db.conn.transaction()?;
        set_state(&tx, "last_error", message)?;
        set_state(&tx, "last_error_at", now)?;
        bump(&tx, counter::FAILED, 1)?;
        tx.commit()?;
        Ok(())
    }

    /// Writes down an export attempt about to start at `now`, which times
    /// out at `deadline`, and the failure it is shown as (`no_answer`) if
    /// neither a success nor a failure is written after it by then. A
    /// hung collector holds a send until its timeout, and a Hermes process
    /// ends (`os._exit`, 2 s after the last hook) long before the default
    /// 10 s: without this its attempt would leave no trace anywhere.
    pub fn export_attempt(&mut self, no_answer: &str, now: f64, deadline: f64) -> Result<()> {
        let tx = self.db.conn.transaction()?;
        set_state(&tx, attempt::AT, now)?;
        set_state(&tx, attempt::DEADLINE, deadline)?;
        set_state(&tx, attempt::NO_ANSWER, no_answer)?;
        tx.commit()?;
        Ok(())
    }

    /// Takes or renews the lease `name` for `holder` until `now + ttl`. Returns
    /// whether `holder` holds it: it does when nobody did, when it already
    /// did, or when the previous holder let it expire (it died).
    pub fn acquire_lease(&mut self, name: &str, holder: &str, pid: i64, now: f64, ttl_seconds: f64) -> Result<bool> {
        let changed = self.db.conn().execute(
            "INSERT INTO export_lease (name, holder, pid, acquired_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (name) DO UPDATE SET
                acquired_at = CASE WHEN holder = excluded.holder THEN acquired_at ELSE excluded.acquired_at END,
                holder = excluded.holder, pid = excluded.pid, expires_at = excluded.expires_at
             WHERE holder = excluded.holder OR expires_at < ?4",
            params![name, holder, pid, now, now + ttl_seconds],
        )?;
        Ok(changed == 1)
    }

    /// Gives the lease up if `holder` has it.
    pub fn release_lease(&mut self, name: &str, holder: &str) -> Result<()> {
        self.db.conn().execute(
            "DELETE FROM export_lease WHERE name = ?1 AND holder = ?2",
            params![name, holder],
        )?;
        Ok(())
    }
}

impl Reader {
    /// The lease `name`, whoever holds it (possibly expired).
    pub fn lease(&self, name: &str) -> Result<Option<Lease>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT holder, pid, acquired_at, expires_at FROM export_lease WHERE name = ?1",
                params![name],
                |r| {
                    Ok(Lease {
                        holder: r.get(0)?,
                        pid: r.get(1)?,
                        acquired_at: r.get(2)?,
                        expires_at: r.get(3)?,
                    })
                },
            )
            .optional()?)
    }

    /// Pending rows, counters and the lease, for `status`.
    pub fn export_state(&self) -> Result<ExportState> {
        // Counters kept by triggers, and the oldest among the
        // rows waiting longest: status reads no table whole.
        let pending = self.store_count("outbox")?;
        let held = self.store_count("outbox.held")?;
        let oldest: Option<f64> = self.conn().query_row(
            "SELECT MIN(ready_at) FROM (SELECT ready_at FROM outbox ORDER BY seq LIMIT 1000)",
            [],
            |r| r.get(0),
        )?;
        let int = |k: &str| -> Result<i64> { Ok(self.state_value::<i64>(k)?.unwrap_or(0)) };
        let last_success_at: Option<f64> = self.state_value("last_success_at")?;
        let mut last_error: Option<String> = self.state_value("last_error")?;
        let mut last_error_at: Option<f64> = self.state_value("last_error_at")?;
        let mut failed = int(counter::FAILED)?;
        // An attempt with no outcome written after it, past its timeout,
        // got no answer: its process ended, or is still stuck, in the send.
        let started: Option<f64> = self.state_value(attempt::AT)?;
        let deadline: Option<f64> = self.state_value(attempt::DEADLINE)?;
        if let (Some(started), Some(deadline)) = (started, deadline) {
            let outcome_after = |t: Option<f64>| t.is_some_and(|t| t >= started);
            if deadline < crate::unix_now() && !outcome_after(last_success_at) && !outcome_after(last_error_at) {
                last_error = self.state_value(attempt::NO_ANSWER)?;
                last_error_at = Some(deadline);
                failed += 1;
            }
        }
        Ok(ExportState {
            pending,
            held,
            oldest_pending_at: oldest,
            exported: int(counter::EXPORTED)?,
            dropped: int(counter::DROPPED)?,
            rejected: int(counter::REJECTED)?,
            sampled_out: int(counter::SAMPLED_OUT)?,
            skipped: int(counter::SKIPPED)?,
            last_success_at,
            last_error,
            last_error_at,
            failed,
            lease: self.lease(TRACE_LEASE)?,
        })
    }

    pub(crate) fn state_value<T: rusqlite::types::FromSql>(&self, key: &str) -> Result<Option<T>> {
        Ok(self
            .conn()
            .query_row("SELECT value FROM export_state WHERE key = ?1", params![key], |r| {
                r.get(0)
            })
            .optional()?)
    }

    /// Every finished span whose ledger row ended at or after `since`, in
    /// time order, as rows for `export --since` (not in the outbox: `seq` 0).
    pub fn history(&self, since: f64) -> Result<Vec<OutboxRow>> {
        let sql = HISTORY;
        let mut stmt = self.conn().prepare(sql)?;
        let rows = stmt.query_map(params![since], |r| {
            Ok((r.get::<_, i64>(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (kind, session_id, key, n, t) = row?;
            if let Some(kind) = SpanKind::from_i64(kind) {
                out.push(OutboxRow {
                    seq: 0,
                    kind,
                    session_id,
                    key,
                    n,
                    ready_at: t,
                });
            }
        }
        Ok(out)
    }
}

fn bump(tx: &Transaction<'_>, key: &str, by: i64) -> Result<()> {
    if by == 0 {
        return Ok(());
    }
    tx.prepare_cached(
        "INSERT INTO export_state (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = value + excluded.value",
    )?
    .execute(params![key, by])?;
    Ok(())
}

fn set_state(tx: &Transaction<'_>, key: &str, value: impl rusqlite::ToSql) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO export_state (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value])?;
    Ok(())
}

/// Shared by the roles that keep it: the writer's retention and the
/// exporter.
impl Reader {
    /// Deletes the oldest rows beyond `max_rows`, at most `limit` of them,
    /// and counts them as dropped. Returns how many were dropped. The row
    /// count is the trigger-kept one: no scan.
    pub(crate) fn outbox_enforce_cap(&mut self, max_rows: u64, limit: usize) -> Result<u64> {
        let pending = self.store_count("outbox")?;
        let excess = (pending - max_rows.min(i64::MAX as u64) as i64).min(i64::try_from(limit).unwrap_or(i64::MAX));
        if excess <= 0 {
            return Ok(0);
        }
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let n = tx.execute(
            "DELETE FROM outbox WHERE seq IN (SELECT seq FROM outbox ORDER BY seq LIMIT ?1)",
            params![excess],
        )?;
        bump(&tx, counter::DROPPED, n as i64)?;
        tx.commit()?;
        Ok(n as u64)
    }
}

#[cfg(test)]
mod tests;
