//! The span outbox, export counters and the export lease.
//!
//! Owns: the `outbox`, `export_state` and `export_lease` tables (schema
//! version 2), and the reads of ledger rows the span builder needs.
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

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension, Row, Transaction};

use super::{ContentKind, Store};
use crate::error::Result;
use crate::model::{ApprovalRow, AttemptError, AttemptRow, EdgeRow, RunRow, ToolRow, TurnRow};

// The reads of ledger rows the span builder needs, shared by the one-row
// lookups and the per-batch loads (which add their own WHERE).
macro_rules! turn_select {
    () => {
        "SELECT turn_id, session_id, task_id, started_at, ended_at, outcome,
                (SELECT error_type FROM llm_call_errors e WHERE e.turn_id = turns.turn_id
                  ORDER BY ended_at DESC LIMIT 1), span_n
           FROM turns"
    };
}

macro_rules! llm_call_select {
    () => {
        "SELECT api_request_id, session_id, turn_id, attempts - 1, model, response_model, provider, base_url,
                started_at, ended_at, finish_reason, input_tokens, output_tokens, cache_read_tokens,
                cache_write_tokens, reasoning_tokens, cost_usd, cost_source, estimated,
                (SELECT MAX(max_retries) FROM llm_call_errors e WHERE e.api_request_id = l.api_request_id), aux_task
           FROM llm_calls l"
    };
}

macro_rules! llm_error_select {
    () => {
        "SELECT api_request_id, session_id, turn_id, retry_count, model, provider, base_url, started_at,
                ended_at, status_code, retryable, reason, error_type, max_retries
           FROM llm_call_errors"
    };
}

macro_rules! open_attempt_select {
    () => {
        "SELECT a.api_request_id, a.session_id, a.turn_id, a.attempts - 1, r.model, r.provider, r.base_url,
                a.attempt_started_at
           FROM api_requests a JOIN runs r ON r.session_id = a.session_id"
    };
}

macro_rules! open_attempt_filter {
    () => {
        " AND NOT EXISTS (SELECT 1 FROM llm_calls l WHERE l.api_request_id = a.api_request_id)"
    };
}

macro_rules! tool_select {
    () => {
        "SELECT session_id, tool_call_id, tool_name, turn_id, api_request_id, started_at, ended_at, ok, status,
                error_type, exit_code
           FROM tool_calls"
    };
}

/// A run with what its session span needs, by session id.
const RUN_ROW_SQL: &str =
    "SELECT session_id, platform, cron_job_id, model, provider, sender_id, profile, started_at, ended_at,
                        last_event_at, finalized_at, status, input_tokens, output_tokens, cache_read_tokens,
                        cache_write_tokens, cost_usd,
                        (SELECT error_type FROM llm_call_errors e WHERE e.session_id = runs.session_id
                          ORDER BY ended_at DESC LIMIT 1),
                        span_n, span_started_at, span_base_input, span_base_output, span_base_cost,
                        close_reason
                   FROM runs WHERE session_id = ?1";

/// The delegation that started a child session, with the parent's
/// `delegate_task` call it hangs under.
const EDGE_ROW_SQL: &str = "SELECT e.parent_session_id, e.parent_turn_id, e.role, e.child_status, e.started_at,
                        (SELECT t.tool_call_id FROM tool_calls t
                          WHERE t.session_id = e.parent_session_id AND t.proxy = 0 AND t.tool_name = 'delegate_task'
                            AND (e.parent_turn_id IS NULL OR t.turn_id = e.parent_turn_id)
                            AND t.started_at <= e.started_at AND (t.ended_at IS NULL OR t.ended_at >= e.started_at)
                          ORDER BY t.started_at DESC LIMIT 1)
                   FROM subagent_edges e WHERE e.child_session_id = ?1";

/// The span builder's reads, for the read-only views of `trace_view.rs`
/// (which add their own WHERE and map rows with the `*_of` functions below).
pub(super) const TURN_SELECT: &str = turn_select!();
pub(super) const LLM_CALL_SELECT: &str = llm_call_select!();
pub(super) const LLM_ERROR_SELECT: &str = llm_error_select!();
pub(super) const OPEN_ATTEMPT_SELECT: &str = open_attempt_select!();
pub(super) const OPEN_ATTEMPT_FILTER: &str = open_attempt_filter!();
pub(super) const TOOL_SELECT: &str = tool_select!();
pub(super) const APPROVAL_SELECT: &str =
    "SELECT session_id, key, turn_id, tool_call_id, surface, started_at, ended_at, choice, decided_by FROM approvals";

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
    pub const DROPPED: &str = "dropped";
    /// Spans the collector reported as rejected in a partial success.
    pub const REJECTED: &str = "rejected";
    /// Spans of traces the sampler left out.
    pub const SAMPLED_OUT: &str = "sampled_out";
    /// Rows whose ledger row was gone or not finished.
    pub const SKIPPED: &str = "skipped";
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
            UNION ALL SELECT 4, session_id, api_request_id, retry_count, ended_at FROM llm_call_errors WHERE ended_at >= ?1
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

/// The sessions the idle closer closes: running ones, and ones with a turn
/// still open, idle since `?2`. Written as two arms over partial indexes
/// (`runs_running`, `turns_open`) so the sweep reads what is open, not
/// every run ever recorded.
const IDLE_SESSIONS: &str = "SELECT session_id FROM runs WHERE status = 'running' AND last_event_at < ?2
     UNION ALL SELECT t.session_id FROM turns t WHERE t.outcome IS NULL
       AND (SELECT r.last_event_at FROM runs r WHERE r.session_id = t.session_id) < ?2";

/// The sessions named in `?2` (a JSON array) that are still open.
const EXITED_SESSIONS: &str = "SELECT session_id FROM runs
      WHERE session_id IN (SELECT value FROM json_each(?2)) AND (status = 'running'
        OR EXISTS (SELECT 1 FROM turns t WHERE t.session_id = runs.session_id AND t.outcome IS NULL))";

/// Enqueues everything the idle closer is about to close: the open turns,
/// open tool calls and open attempts of runs idle since `cutoff`, and the
/// runs themselves. Must run before the statements that close them.
pub(super) fn enqueue_idle(tx: &Transaction<'_>, cutoff: f64, now: f64) -> Result<()> {
    enqueue_closing(tx, IDLE_SESSIONS, &cutoff, now)
}

/// [`enqueue_idle`] for the sessions named in `sessions` (a JSON array)
/// that are still open: a process exits with them open.
pub(super) fn enqueue_exited(tx: &Transaction<'_>, sessions: &str, now: f64) -> Result<()> {
    enqueue_closing(tx, EXITED_SESSIONS, &sessions, now)
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

impl Store {
    /// Up to `limit` outbox rows ready at `now`, in `seq` order; held rows
    /// only once `grace_seconds` old.
    pub fn outbox_ready(&self, now: f64, grace_seconds: f64, limit: usize) -> Result<Vec<OutboxRow>> {
        let mut stmt = self.conn().prepare_cached(
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
        let tx = self.conn.transaction()?;
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
        set_state(&tx, "last_success_at", now)?;
        tx.commit()?;
        Ok(())
    }

    /// Makes the held session spans of `sessions` ready now (a process
    /// exits: no later turn of it will come). Returns how many.
    pub fn release_held_sessions(&mut self, sessions: &[&str], now: f64) -> Result<usize> {
        let tx = self.conn.transaction()?;
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

    /// [`Store::release_held_sessions`] for every session span held since
    /// `since` (a process that served too many sessions to name them).
    pub fn release_held_sessions_since(&mut self, since: f64, now: f64) -> Result<usize> {
        Ok(self.conn.execute(
            "UPDATE outbox SET hold = 0, ready_at = MIN(ready_at, ?3) WHERE kind = ?1 AND hold = 1 AND ready_at >= ?2",
            params![SpanKind::Run as i64, since, now],
        )?)
    }

    /// Deletes the oldest rows beyond `max_rows`, at most `limit` of them,
    /// and counts them as dropped. Returns how many were dropped. The row
    /// count is the trigger-kept one: no scan.
    pub fn outbox_enforce_cap(&mut self, max_rows: u64, limit: usize) -> Result<u64> {
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

    /// Marks spans `export --since` re-sent (history rows) as exported: the
    /// ones still waiting in the outbox leave it and count as exported, so
    /// the export loop does not send them a second time. Returns how many
    /// were waiting.
    pub fn outbox_resent(&mut self, rows: &[OutboxRow], now: f64) -> Result<usize> {
        let tx = self.conn.transaction()?;
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
        let tx = self.conn.transaction()?;
        set_state(&tx, "last_error", message)?;
        set_state(&tx, "last_error_at", now)?;
        tx.commit()?;
        Ok(())
    }

    /// Takes or renews the lease `name` for `holder` until `now + ttl`. Returns
    /// whether `holder` holds it: it does when nobody did, when it already
    /// did, or when the previous holder let it expire (it died).
    pub fn acquire_lease(&mut self, name: &str, holder: &str, pid: i64, now: f64, ttl_seconds: f64) -> Result<bool> {
        let changed = self.conn().execute(
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
        self.conn().execute(
            "DELETE FROM export_lease WHERE name = ?1 AND holder = ?2",
            params![name, holder],
        )?;
        Ok(())
    }

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
        // Counters kept by triggers (migration 9), and the oldest among the
        // rows waiting longest: status reads no table whole.
        let pending = self.store_count("outbox")?;
        let held = self.store_count("outbox.held")?;
        let oldest: Option<f64> = self.conn().query_row(
            "SELECT MIN(ready_at) FROM (SELECT ready_at FROM outbox ORDER BY seq LIMIT 1000)",
            [],
            |r| r.get(0),
        )?;
        let int = |k: &str| -> Result<i64> { Ok(self.state_value::<i64>(k)?.unwrap_or(0)) };
        Ok(ExportState {
            pending,
            held,
            oldest_pending_at: oldest,
            exported: int(counter::EXPORTED)?,
            dropped: int(counter::DROPPED)?,
            rejected: int(counter::REJECTED)?,
            sampled_out: int(counter::SAMPLED_OUT)?,
            skipped: int(counter::SKIPPED)?,
            last_success_at: self.state_value("last_success_at")?,
            last_error: self.state_value("last_error")?,
            last_error_at: self.state_value("last_error_at")?,
            lease: self.lease(TRACE_LEASE)?,
        })
    }

    fn state_value<T: rusqlite::types::FromSql>(&self, key: &str) -> Result<Option<T>> {
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

    /// The run `session_id` with its delegation edge, if any.
    pub fn run_row(&self, session_id: &str) -> Result<Option<RunRow>> {
        let run = self
            .conn()
            .prepare_cached(RUN_ROW_SQL)?
            .query_row(params![session_id], |r| {
                Ok(RunRow {
                    session_id: r.get(0)?,
                    platform: r.get(1)?,
                    cron_job_id: r.get(2)?,
                    model: r.get(3)?,
                    provider: r.get(4)?,
                    sender_id: r.get(5)?,
                    profile: r.get(6)?,
                    started_at: r.get(7)?,
                    ended_at: r.get(8)?,
                    last_event_at: r.get(9)?,
                    finalized_at: r.get(10)?,
                    status: r.get(11)?,
                    input_tokens: r.get(12)?,
                    output_tokens: r.get(13)?,
                    cache_read_tokens: r.get(14)?,
                    cache_write_tokens: r.get(15)?,
                    cost_usd: r.get(16)?,
                    last_error_type: r.get(17)?,
                    edge: None,
                    span_n: r.get(18)?,
                    span_started_at: r.get(19)?,
                    span_base: (r.get(20)?, r.get(21)?, r.get(22)?),
                    close_reason: r.get(23)?,
                })
            })
            .optional()?;
        let Some(mut run) = run else { return Ok(None) };
        run.edge = self.edge_row(session_id)?;
        Ok(Some(run))
    }

    /// The delegation that started `child`, with the parent's matching
    /// `delegate_task` tool call: the latest one of the parent turn that had
    /// started by the delegation's start and had not ended before it.
    fn edge_row(&self, child: &str) -> Result<Option<EdgeRow>> {
        Ok(self
            .conn()
            .prepare_cached(EDGE_ROW_SQL)?
            .query_row(params![child], |r| {
                Ok(EdgeRow {
                    parent_session_id: r.get(0)?,
                    parent_turn_id: r.get(1)?,
                    role: r.get(2)?,
                    child_status: r.get(3)?,
                    started_at: r.get(4)?,
                    delegate_tool_call_id: r.get(5)?,
                })
            })
            .optional()?)
    }

    /// The turn `turn_id`.
    pub fn turn_row(&self, turn_id: &str) -> Result<Option<TurnRow>> {
        Ok(self
            .conn()
            .prepare_cached(concat!(turn_select!(), " WHERE turn_id = ?1"))?
            .query_row(params![turn_id], turn_of)
            .optional()?)
    }

    /// The successful attempt of `api_request_id`.
    pub fn llm_call_row(&self, api_request_id: &str) -> Result<Option<AttemptRow>> {
        Ok(self
            .conn()
            .prepare_cached(concat!(llm_call_select!(), " WHERE api_request_id = ?1"))?
            .query_row(params![api_request_id], llm_call_of)
            .optional()?)
    }

    /// The failed attempt `retry_count` of `api_request_id`.
    pub fn llm_error_row(&self, api_request_id: &str, retry_count: i64) -> Result<Option<AttemptRow>> {
        Ok(self
            .conn()
            .prepare_cached(concat!(
                llm_error_select!(),
                " WHERE api_request_id = ?1 AND retry_count = ?2"
            ))?
            .query_row(params![api_request_id, retry_count], llm_error_of)
            .optional()?)
    }

    /// The attempt of `api_request_id` a dead process left open (the last
    /// pre_api_request with no result).
    pub fn open_attempt_row(&self, api_request_id: &str) -> Result<Option<AttemptRow>> {
        Ok(self
            .conn()
            .prepare_cached(concat!(
                open_attempt_select!(),
                " WHERE a.api_request_id = ?1",
                open_attempt_filter!()
            ))?
            .query_row(params![api_request_id], open_attempt_of)
            .optional()?)
    }

    /// The approval `key` of `session_id`.
    pub fn approval_row(&self, session_id: &str, key: &str) -> Result<Option<ApprovalRow>> {
        Ok(self
            .conn()
            .prepare_cached(&format!("{APPROVAL_SELECT} WHERE session_id = ?1 AND key = ?2"))?
            .query_row(params![session_id, key], approval_of)
            .optional()?)
    }

    /// The tool call `tool_call_id` of `session_id`.
    pub fn tool_row(&self, session_id: &str, tool_call_id: &str) -> Result<Option<ToolRow>> {
        Ok(self
            .conn()
            .prepare_cached(concat!(tool_select!(), " WHERE session_id = ?1 AND tool_call_id = ?2"))?
            .query_row(params![session_id, tool_call_id], tool_of)
            .optional()?)
    }

    /// The ledger rows and (`with_content`) captured content that `rows`
    /// name, with one query per kind of row (the same queries as
    /// [`Store::turn_row`] and its siblings, over every key of the batch at
    /// once).
    pub fn batch_rows(&self, rows: &[OutboxRow], with_content: bool) -> Result<BatchRows> {
        let mut keys: [Vec<&str>; 6] = Default::default();
        let mut tools: Vec<[&str; 2]> = Vec::new();
        let mut content: Vec<[&str; 3]> = Vec::new();
        for row in rows {
            match row.kind {
                // Read one by one: sessions through the batch's session
                // cache, approvals (rare) with their own query.
                SpanKind::Run | SpanKind::Approval => {}
                SpanKind::Tool => {
                    tools.push([row.session_id.as_str(), row.key.as_str()]);
                    content.push([content_kind(ContentKind::Tool), &row.session_id, &row.key]);
                }
                kind => {
                    keys[kind as usize - 1].push(row.key.as_str());
                    if kind != SpanKind::Turn {
                        content.push([content_kind(ContentKind::Llm), &row.session_id, &row.key]);
                    }
                }
            }
        }
        let mut out = BatchRows::default();
        let conn = self.conn();
        let turns = &keys[SpanKind::Turn as usize - 1];
        if !turns.is_empty() {
            let mut stmt = conn.prepare_cached(concat!(
                turn_select!(),
                " WHERE turn_id IN (SELECT value FROM json_each(?1))"
            ))?;
            for t in stmt.query_map(params![json_array(turns)], turn_of)? {
                let t = t?;
                out.turns.insert(t.turn_id.clone(), t);
            }
        }
        let calls = &keys[SpanKind::LlmCall as usize - 1];
        if !calls.is_empty() {
            let mut stmt = conn.prepare_cached(concat!(
                llm_call_select!(),
                " WHERE api_request_id IN (SELECT value FROM json_each(?1))"
            ))?;
            for a in stmt.query_map(params![json_array(calls)], llm_call_of)? {
                let a = a?;
                out.llm_calls.insert(a.api_request_id.clone(), a);
            }
        }
        let errors = &keys[SpanKind::LlmError as usize - 1];
        if !errors.is_empty() {
            // Every attempt of these requests; (api_request_id, retry_count) is unique.
            let mut stmt = conn.prepare_cached(concat!(
                llm_error_select!(),
                " WHERE api_request_id IN (SELECT value FROM json_each(?1))"
            ))?;
            for a in stmt.query_map(params![json_array(errors)], llm_error_of)? {
                let a = a?;
                out.llm_errors.insert((a.api_request_id.clone(), a.attempt), a);
            }
        }
        let open = &keys[SpanKind::OpenAttempt as usize - 1];
        if !open.is_empty() {
            let mut stmt = conn.prepare_cached(concat!(
                open_attempt_select!(),
                " WHERE a.api_request_id IN (SELECT value FROM json_each(?1))",
                open_attempt_filter!()
            ))?;
            for a in stmt.query_map(params![json_array(open)], open_attempt_of)? {
                let a = a?;
                out.open_attempts.insert(a.api_request_id.clone(), a);
            }
        }
        if !tools.is_empty() {
            let mut stmt = conn.prepare_cached(concat!(
                tool_select!(),
                " WHERE (session_id, tool_call_id) IN
                   (SELECT value ->> 0, value ->> 1 FROM json_each(?1))"
            ))?;
            for t in stmt.query_map(params![json_array(&tools)], tool_of)? {
                let t = t?;
                out.tools.insert((t.session_id.clone(), t.tool_call_id.clone()), t);
            }
        }
        if with_content && !content.is_empty() {
            let mut stmt = conn.prepare_cached(
                "SELECT kind, session_id, key, attr, value FROM span_content
                  WHERE (kind, session_id, key) IN (SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?1))
                  ORDER BY kind, session_id, key, attr",
            )?;
            let rows = stmt.query_map(params![json_array(&content)], |r| {
                Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?;
            for row in rows {
                let (kind, session_id, key, attr, value) = row?;
                out.content
                    .entry((kind, session_id, key))
                    .or_default()
                    .push((attr, value));
            }
        }
        Ok(out)
    }
}

/// The ledger rows of one export batch, from [`Store::batch_rows`].
#[derive(Debug, Default)]
pub struct BatchRows {
    turns: HashMap<String, TurnRow>,
    llm_calls: HashMap<String, AttemptRow>,
    llm_errors: HashMap<(String, i64), AttemptRow>,
    open_attempts: HashMap<String, AttemptRow>,
    tools: HashMap<(String, String), ToolRow>,
    content: HashMap<(String, String, String), Vec<(String, String)>>,
}

impl BatchRows {
    /// Like [`Store::turn_row`].
    pub fn turn(&self, turn_id: &str) -> Option<&TurnRow> {
        self.turns.get(turn_id)
    }

    /// Like [`Store::llm_call_row`].
    pub fn llm_call(&self, api_request_id: &str) -> Option<&AttemptRow> {
        self.llm_calls.get(api_request_id)
    }

    /// Like [`Store::llm_error_row`].
    pub fn llm_error(&self, api_request_id: &str, retry_count: i64) -> Option<&AttemptRow> {
        self.llm_errors.get(&(api_request_id.to_string(), retry_count))
    }

    /// Like [`Store::open_attempt_row`].
    pub fn open_attempt(&self, api_request_id: &str) -> Option<&AttemptRow> {
        self.open_attempts.get(api_request_id)
    }

    /// Like [`Store::tool_row`].
    pub fn tool(&self, session_id: &str, tool_call_id: &str) -> Option<&ToolRow> {
        self.tools.get(&(session_id.to_string(), tool_call_id.to_string()))
    }

    /// Like [`Store::span_content`].
    pub fn content(&self, kind: ContentKind, session_id: &str, key: &str) -> Vec<(String, String)> {
        if self.content.is_empty() {
            return Vec::new();
        }
        self.content
            .get(&(content_kind(kind).to_string(), session_id.to_string(), key.to_string()))
            .cloned()
            .unwrap_or_default()
    }
}

pub(super) fn turn_of(r: &Row<'_>) -> rusqlite::Result<TurnRow> {
    Ok(TurnRow {
        turn_id: r.get(0)?,
        session_id: r.get(1)?,
        task_id: r.get(2)?,
        started_at: r.get(3)?,
        ended_at: r.get(4)?,
        outcome: r.get(5)?,
        last_error_type: r.get(6)?,
        span_n: r.get(7)?,
    })
}

pub(super) fn llm_call_of(r: &Row<'_>) -> rusqlite::Result<AttemptRow> {
    Ok(AttemptRow {
        api_request_id: r.get(0)?,
        session_id: r.get(1)?,
        turn_id: r.get(2)?,
        attempt: r.get(3)?,
        model: r.get(4)?,
        response_model: r.get(5)?,
        provider: r.get(6)?,
        base_url: r.get(7)?,
        started_at: r.get(8)?,
        ended_at: r.get(9)?,
        finish_reason: r.get(10)?,
        input_tokens: r.get(11)?,
        output_tokens: r.get(12)?,
        cache_read_tokens: r.get(13)?,
        cache_write_tokens: r.get(14)?,
        reasoning_tokens: r.get(15)?,
        cost_usd: r.get(16)?,
        cost_source: r.get(17)?,
        estimated: r.get(18)?,
        error: None,
        max_retries: r.get(19)?,
        aux_task: r.get(20)?,
    })
}

pub(super) fn llm_error_of(r: &Row<'_>) -> rusqlite::Result<AttemptRow> {
    Ok(AttemptRow {
        api_request_id: r.get(0)?,
        session_id: r.get(1)?,
        turn_id: r.get(2)?,
        attempt: r.get(3)?,
        model: r.get(4)?,
        provider: r.get(5)?,
        base_url: r.get(6)?,
        started_at: r.get(7)?,
        ended_at: r.get(8)?,
        error: Some(AttemptError {
            status_code: r.get(9)?,
            retryable: r.get(10)?,
            reason: r.get(11)?,
            error_type: r.get(12)?,
        }),
        max_retries: r.get(13)?,
        ..AttemptRow::default()
    })
}

pub(super) fn open_attempt_of(r: &Row<'_>) -> rusqlite::Result<AttemptRow> {
    Ok(AttemptRow {
        api_request_id: r.get(0)?,
        session_id: r.get(1)?,
        turn_id: r.get(2)?,
        attempt: r.get(3)?,
        model: r.get(4)?,
        provider: r.get(5)?,
        base_url: r.get(6)?,
        started_at: r.get(7)?,
        ..AttemptRow::default()
    })
}

pub(super) fn approval_of(r: &Row<'_>) -> rusqlite::Result<ApprovalRow> {
    Ok(ApprovalRow {
        session_id: r.get(0)?,
        key: r.get(1)?,
        turn_id: r.get(2)?,
        tool_call_id: r.get(3)?,
        surface: r.get(4)?,
        started_at: r.get(5)?,
        ended_at: r.get(6)?,
        choice: r.get(7)?,
        decided_by: r.get(8)?,
    })
}

pub(super) fn tool_of(r: &Row<'_>) -> rusqlite::Result<ToolRow> {
    Ok(ToolRow {
        session_id: r.get(0)?,
        tool_call_id: r.get(1)?,
        tool_name: r.get(2)?,
        turn_id: r.get(3)?,
        api_request_id: r.get(4)?,
        started_at: r.get(5)?,
        ended_at: r.get(6)?,
        ok: r.get(7)?,
        status: r.get(8)?,
        error_type: r.get(9)?,
        exit_code: r.get(10)?,
    })
}

/// `span_content.kind` of a content kind.
fn content_kind(kind: ContentKind) -> &'static str {
    match kind {
        ContentKind::Llm => "llm",
        ContentKind::Tool => "tool",
    }
}

/// A JSON array for `json_each` (of strings: cannot fail).
fn json_array<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The idle sweep, every minute in every Hermes process, reads what is
    /// open, not every row ever recorded (issue 18): no statement of it
    /// scans a ledger table.
    #[test]
    fn the_idle_sweep_reads_only_what_is_open() {
        let (_dir, store) = store();
        let mut statements: Vec<String> = closing_statements(IDLE_SESSIONS).into_iter().map(|(_, s)| s).collect();
        statements.extend(closing_statements(EXITED_SESSIONS).into_iter().map(|(_, s)| s));
        statements.push(super::super::ledger::CLOSE_IDLE_TURNS.to_string());
        statements.push(super::super::ledger::CLOSE_IDLE_RUNS.to_string());
        for sql in statements {
            let steps = store.query_plan(&sql, "1");
            let scans: Vec<&String> = steps
                .iter()
                .filter(|s| s.starts_with("SCAN") && !s.contains("json_each") && !s.contains("USING INDEX turns_open"))
                .collect();
            assert!(scans.is_empty(), "{sql}\n{steps:?}");
        }
    }

    /// Every statement that loads a span's ledger rows reaches them through
    /// an index: exporting costs the same per span however large the store
    /// grows (issue 18). Only the small json_each list of a batch's keys is
    /// scanned.
    #[test]
    fn the_export_path_reads_no_ledger_table_whole() {
        let (_dir, store) = store();
        let one = |sql: &str| store.query_plan(sql, "k");
        for sql in [
            RUN_ROW_SQL.to_string(),
            EDGE_ROW_SQL.to_string(),
            concat!(turn_select!(), " WHERE turn_id = ?1").to_string(),
            concat!(turn_select!(), " WHERE turn_id IN (SELECT value FROM json_each(?1))").to_string(),
            concat!(llm_call_select!(), " WHERE api_request_id = ?1").to_string(),
            concat!(llm_error_select!(), " WHERE api_request_id = ?1 AND retry_count = ?2").to_string(),
            concat!(tool_select!(), " WHERE session_id = ?1 AND tool_call_id = ?2").to_string(),
            concat!(
                open_attempt_select!(),
                " WHERE a.api_request_id = ?1",
                open_attempt_filter!()
            )
            .to_string(),
            "SELECT session_id, key, turn_id FROM approvals WHERE session_id = ?1 AND key = ?2".to_string(),
        ] {
            let steps = one(&sql);
            let scans: Vec<&String> = steps
                .iter()
                .filter(|s| s.starts_with("SCAN") && !s.contains("json_each"))
                .collect();
            assert!(scans.is_empty(), "{sql}\n{steps:?}");
        }
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("s.db")).expect("open");
        (dir, store)
    }

    #[test]
    fn a_lease_is_held_by_one_holder_until_it_expires() {
        let (_dir, mut store) = store();
        assert!(store.acquire_lease(TRACE_LEASE, "a", 1, 100.0, 10.0).expect("a"));
        assert!(!store.acquire_lease(TRACE_LEASE, "b", 2, 105.0, 10.0).expect("b"));
        assert!(store.acquire_lease(TRACE_LEASE, "a", 1, 105.0, 10.0).expect("a renews"));
        assert!(!store.acquire_lease(TRACE_LEASE, "b", 2, 114.0, 10.0).expect("b early"));
        assert!(store
            .acquire_lease(TRACE_LEASE, "b", 2, 115.5, 10.0)
            .expect("b after expiry"));
        assert_eq!(store.lease(TRACE_LEASE).expect("lease").expect("held").holder, "b");
        store.release_lease(TRACE_LEASE, "a").expect("not a's");
        assert!(store.lease(TRACE_LEASE).expect("lease").is_some());
        store.release_lease(TRACE_LEASE, "b").expect("release");
        assert!(store.acquire_lease(TRACE_LEASE, "a", 1, 116.0, 10.0).expect("a again"));
    }

    #[test]
    fn the_retention_cap_drops_the_oldest_rows_and_counts_them() {
        let (_dir, mut store) = store();
        let tx = store.conn.transaction().expect("tx");
        for i in 0..10 {
            enqueue(&tx, SpanKind::Tool, "s", &format!("t{i}"), -1, i as f64, false).expect("enqueue");
        }
        tx.commit().expect("commit");
        assert_eq!(
            store.outbox_enforce_cap(7, 2).expect("cap"),
            2,
            "at most the limit at once"
        );
        assert_eq!(store.outbox_enforce_cap(7, 100).expect("cap"), 1);
        let ready = store.outbox_ready(100.0, 0.0, 100).expect("ready");
        assert_eq!(ready.first().map(|r| r.key.as_str()), Some("t3"));
        let state = store.export_state().expect("state");
        assert_eq!((state.pending, state.dropped), (7, 3));
    }

    #[test]
    fn a_row_that_moved_while_being_sent_is_kept() {
        let (_dir, mut store) = store();
        let tx = store.conn.transaction().expect("tx");
        enqueue(&tx, SpanKind::Run, "s", "s", -1, 1.0, true).expect("enqueue");
        tx.commit().expect("commit");
        assert!(store.outbox_ready(50.0, 60.0, 10).expect("held").is_empty());
        let rows = store.outbox_ready(100.0, 60.0, 10).expect("ready");
        assert_eq!(rows.len(), 1);
        let tx = store.conn.transaction().expect("tx");
        enqueue(&tx, SpanKind::Run, "s", "s", -1, 2.0, false).expect("re-enqueue");
        tx.commit().expect("commit");
        store
            .outbox_done(&rows, &[], &[(counter::EXPORTED, 1)], 100.0)
            .expect("done");
        assert_eq!(store.export_state().expect("state").pending, 1);
        let rows = store.outbox_ready(100.0, 60.0, 10).expect("ready");
        store
            .outbox_done(&rows, &[], &[(counter::EXPORTED, 1)], 100.0)
            .expect("done");
        let state = store.export_state().expect("state");
        assert_eq!((state.pending, state.exported), (0, 2));
    }
}
