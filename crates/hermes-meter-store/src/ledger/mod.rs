//! Applying hook events to the ledger.
//!
//! Each event is one transaction: the journal row first (its unique key
//! makes a repeated event a no-op), then the ledger rows and run totals.

use rusqlite::{params, OptionalExtension, Transaction, TransactionBehavior};

use super::budget;
use super::log_outbox::{LogAttrs, LogPlace, NewLog, Severity};
use super::outbox::{self, SpanKind};
use super::retention;
use super::row_counts::{Counted, LogTail, RowCounts};
use super::run_memo::{RunFacts, RunMemo, RunSays};
use super::{Outbox, Reader, Writer};
use crate::error::Result;
use hermes_meter_model::hook::{Hook, HookEvent};
use hermes_meter_model::rows::outcome::{ABANDONED, ERROR, INTERRUPTED, OK, RUNNING};

mod approvals;
mod calls;
use approvals::apply_approval;
use calls::{
    apply_api_error, apply_llm_call, apply_subagent_start, apply_subagent_stop, apply_tool_result,
    apply_usage_confirmed,
};

/// Where a hook call came from, for the journal.
#[derive(Debug, Clone, Default)]
pub struct EventContext {
    pub pid: Option<i64>,
    pub thread: Option<String>,
    /// The Hermes profile the call was made in, as its spool record says
    /// (the bridge and replay read it from the line), recorded on the run;
    /// `None` falls back to the store's own profile ([`Writer::set_profile`]).
    /// One process may serve several profiles (a multi-profile gateway),
    /// all into one store.
    pub profile: Option<String>,
    /// How many kwargs had to be repaired while decoding.
    pub problems: Vec<hermes_meter_model::hook::Problem>,
}

/// What applying an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The event was new and is now in the journal and the ledger.
    New,
    /// The event was already in the journal; nothing changed.
    Duplicate,
    /// The event is older than the journal's retention horizon: its key
    /// may have been pruned, so it was refused and counted, not applied
    /// (see `retention.rs`).
    TooOld,
}

/// The name of the proxy tool row a subagent_stop records on the parent.
pub(crate) const SUBAGENT_TOOL_NAME: &str = "delegate_task/subagent";

impl Writer {
    /// Applies one decoded hook event in one transaction.
    pub fn apply(&mut self, event: &HookEvent, ctx: &EventContext) -> Result<Applied> {
        let mut applied = self.apply_batch([(event, ctx)])?;
        // One result per event: the fallback is never taken.
        Ok(applied.pop().unwrap_or(Applied::Duplicate))
    }

    /// Applies several events in one transaction (replay, group commit).
    /// Returns what happened to each, in order.
    pub fn apply_batch<'a>(
        &mut self,
        events: impl IntoIterator<Item = (&'a HookEvent, &'a EventContext)>,
    ) -> Result<Vec<Applied>> {
        // Taken out for the transaction: a failed one leaves the memo empty,
        // since what it learned was rolled back.
        let mut runs = std::mem::take(&mut self.runs);
        // Immediate: the write lock first (its wait is the busy handler's),
        // so the read of data_version cannot pin a snapshot that a commit
        // of another process makes stale before our first write.
        let tx = self.db.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        runs.follow(data_version(&tx)?);
        let horizon = retention::horizon(&tx)?;
        let log = LogTail::read(&tx)?;
        let mut pending = Pending::default();
        let mut out = Vec::new();
        for (event, ctx) in events {
            // Its key may have been pruned: refused, not applied twice.
            if horizon.is_some_and(|h| event.at < h) {
                retention::count(&tx, retention::pruned::REFUSED, 1)?;
                out.push(Applied::TooOld);
                continue;
            }
            out.push(apply_in(
                &tx,
                &mut runs,
                &self.db.prices,
                self.profile.as_deref(),
                event,
                ctx,
                &mut pending,
            )?);
        }
        pending.rollup.write(&tx)?;
        log.appended(&tx, &mut pending.counts)?;
        pending.counts.write(&tx)?;
        tx.commit()?;
        self.runs = runs;
        Ok(out)
    }

    /// Closes runs idle for `idle_seconds` before `now` that never ended;
    /// see [`Outbox::close_idle_runs`]. Returns how many runs were closed.
    pub fn close_idle_runs(&mut self, now: f64, idle_seconds: f64) -> Result<usize> {
        self.db.close_idle_runs(now, idle_seconds)
    }

    /// One transaction of [`Writer::close_idle_runs`]: closes the idle
    /// sessions of at most `limit` sessions. Returns the runs closed and
    /// whether more idle sessions may remain. The writer's sweep takes one
    /// batch a step, so the hooks it commits for never wait long behind it.
    pub fn close_idle_batch(&mut self, now: f64, idle_seconds: f64, limit: usize) -> Result<(usize, bool)> {
        self.db.close_idle_batch(now, idle_seconds, limit)
    }

    /// Closes what `sessions` left open as their process exits (a
    /// background subagent cut off, a gateway stopped mid-turn), as the idle
    /// closer would but at once and with close reason `process_exit`, and
    /// enqueues it, so the exit flush can send it. Returns the runs closed.
    pub fn close_exited_runs(&mut self, sessions: &[&str], now: f64) -> Result<usize> {
        let json = serde_json::to_string(sessions).unwrap_or_else(|_| "[]".into());
        // Immediate: the closing reads before it writes, and a deferred
        // transaction another connection wrote past meanwhile could not
        // take the write lock at all (SQLITE_BUSY, no wait).
        let tx = self.db.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = close_listed(&tx, &json, "process_exit", now)?;
        tx.commit()?;
        Ok(n)
    }
}

/// The idle closer, which both the writer's sweep and the exporter (in
/// `serve`, where no Hermes process sweeps) run.
impl Reader {
    /// Closes runs with no event for `idle_seconds` before `now` that never
    /// ended (a process died, or a background subagent was cut off): their
    /// open turns and the runs become `abandoned`, ended at their last event.
    /// Open turns of idle runs that did end (a failed `hermes -z` run, which
    /// fires neither on_session_end nor on_session_finalize) are closed too.
    /// Everything closed, and the open tool calls and attempts of those runs,
    /// is enqueued for export. Returns how many runs were closed.
    ///
    /// Works in transactions of [`IDLE_CLOSE_BATCH`] sessions, so other
    /// writers get the lock between them however much is open (a store
    /// where many processes died, or one upgraded from before the sweep).
    pub(crate) fn close_idle_runs(&mut self, now: f64, idle_seconds: f64) -> Result<usize> {
        let mut closed = 0;
        loop {
            let (n, more) = self.close_idle_batch(now, idle_seconds, IDLE_CLOSE_BATCH)?;
            closed += n;
            if !more {
                return Ok(closed);
            }
        }
    }

    /// One transaction of `close_idle_runs`: closes the idle
    /// sessions of at most `limit` sessions. Returns the runs closed and
    /// whether more idle sessions may remain. The writer's sweep takes one
    /// batch a step, so the hooks it commits for never wait long behind it.
    pub(crate) fn close_idle_batch(&mut self, now: f64, idle_seconds: f64, limit: usize) -> Result<(usize, bool)> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let sessions: Vec<String> = tx
            .prepare_cached(IDLE_SESSION_BATCH)?
            .query_map(params![now - idle_seconds, limit as i64], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if sessions.is_empty() {
            return Ok((0, false));
        }
        let json = serde_json::to_string(&sessions).unwrap_or_else(|_| "[]".into());
        let n = close_listed(&tx, &json, "idle_timeout", now)?;
        tx.commit()?;
        Ok((n, sessions.len() >= limit))
    }
}

impl Outbox {
    /// Closes runs with no event for `idle_seconds` before `now` that never
    /// ended (a process died, or a background subagent was cut off): their
    /// open turns and the runs become `abandoned`, ended at their last event.
    /// Open turns of idle runs that did end (a failed `hermes -z` run, which
    /// fires neither on_session_end nor on_session_finalize) are closed too.
    /// Everything closed, and the open tool calls and attempts of those runs,
    /// is enqueued for export. Returns how many runs were closed.
    ///
    /// Works in transactions of [`IDLE_CLOSE_BATCH`] sessions, so other
    /// writers get the lock between them however much is open (a store
    /// where many processes died, or one upgraded from before the sweep).
    pub fn close_idle_runs(&mut self, now: f64, idle_seconds: f64) -> Result<usize> {
        self.db.close_idle_runs(now, idle_seconds)
    }
}

/// Sessions the idle closer closes in one transaction at most: each costs
/// a few indexed statements, so a batch holds the write lock for
/// milliseconds on a warm store. The writer's sweep sizes its batches
/// below this by how long they take (`crates/hermes-meter-runtime/src/bridge/pace.rs`): a cold
/// year's store took seconds for 32.
pub const IDLE_CLOSE_BATCH: usize = 32;

/// Up to `?2` sessions idle since `?1` with something open: running runs,
/// and runs with a turn still open. Two arms over partial indexes
/// (`runs_running`, `turns_open`), so the sweep reads what is open, not
/// every run ever recorded.
pub(super) const IDLE_SESSION_BATCH: &str = "SELECT DISTINCT session_id FROM (
       SELECT session_id FROM runs WHERE status = 'running' AND last_event_at < ?1
       UNION ALL SELECT t.session_id FROM turns t WHERE t.outcome IS NULL
         AND (SELECT r.last_event_at FROM runs r WHERE r.session_id = t.session_id) < ?1)
     LIMIT ?2";

/// Enqueues and closes what the sessions named in `json` (a JSON array)
/// left open: their open turns and running runs become `abandoned` (ended
/// at their last event) with `reason`. Returns the runs closed.
fn close_listed(tx: &Transaction<'_>, json: &str, reason: &str, now: f64) -> Result<usize> {
    let log = LogTail::read(tx)?;
    outbox::enqueue_listed(tx, json, now)?;
    tx.prepare_cached(CLOSE_LISTED_TURNS)?
        .execute(params![ABANDONED, json])?;
    let n = tx
        .prepare_cached(CLOSE_LISTED_RUNS)?
        .execute(params![ABANDONED, json, reason])?;
    // Each turn and run closed logs itself for metrics.
    let mut counts = RowCounts::default();
    log.appended(tx, &mut counts)?;
    counts.write(tx)?;
    Ok(n)
}

/// Closes the open turns of the sessions in `?2` (a JSON array) as `?1`,
/// ended at their run's last event.
pub(super) const CLOSE_LISTED_TURNS: &str =
    "UPDATE turns SET outcome = ?1, ended_at = (SELECT last_event_at FROM runs r WHERE r.session_id = turns.session_id)
      WHERE outcome IS NULL AND session_id IN (SELECT value FROM json_each(?2))";

/// Closes the running runs of the sessions in `?2` as `?1`, close reason
/// `?3`. 'running' spelled out: the partial index runs_running is chosen
/// only for the literal its WHERE names.
pub(super) const CLOSE_LISTED_RUNS: &str = "UPDATE runs SET status = ?1, ended_at = last_event_at, close_reason = ?3
      WHERE status = 'running' AND session_id IN (SELECT value FROM json_each(?2))";

/// Moves whenever another connection commits (SQLite's own counter).
fn data_version(tx: &Transaction<'_>) -> Result<i64> {
    Ok(tx.prepare_cached("PRAGMA data_version")?.query_row([], |r| r.get(0))?)
}

/// What a transaction's events add up before its commit writes it once.
#[derive(Default)]
struct Pending {
    /// Spend per budget bucket and period.
    rollup: budget::SpendRollup,
    /// Rows added per counted table (`store_counts`).
    counts: RowCounts,
}

fn apply_in(
    tx: &Transaction<'_>,
    runs: &mut RunMemo,
    prices: &hermes_meter_model::pricing::PriceTable,
    profile: Option<&str>,
    event: &HookEvent,
    ctx: &EventContext,
    pending: &mut Pending,
) -> Result<Applied> {
    // The call's own profile first: one gateway serves several profiles.
    let profile = ctx.profile.as_deref().filter(|p| !p.is_empty()).or(profile);
    let counts = &mut pending.counts;
    let hook = &event.hook;
    let at = event.at;
    // Time first, zero-padded, so keys grow with time and the unique index
    // appends at its right edge instead of splitting pages in the middle
    // (and retention finds the oldest keys first).
    let key = format!("{}|{}|{}", retention::key_prefix(at), hook.name(), hook.natural_id());
    // Captured content goes to span_content only, where its retention
    // applies; the journal keeps the event without it.
    let stripped = hook.without_content();
    let payload = serde_json::to_string(stripped.as_ref().unwrap_or(hook)).unwrap_or_else(|_| "{}".into());
    let inserted = tx
        .prepare_cached(
            "INSERT INTO journal (event_key, hook, session_id, at, recorded_at, pid, thread, problems, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (event_key) DO NOTHING",
        )?
        .execute(params![
            key,
            hook.name(),
            hook.session_id(),
            at,
            crate::unix_now(),
            ctx.pid,
            ctx.thread,
            ctx.problems.len() as i64,
            payload
        ])?;
    if inserted == 0 {
        return Ok(Applied::Duplicate);
    }
    counts.inserted(Counted::Journal, inserted);
    for p in &ctx.problems {
        tx.prepare_cached(
            "INSERT INTO decode_problems (hook, key, what, count, last_at) VALUES (?1, ?2, ?3, 1, ?4)
             ON CONFLICT (hook, key, what) DO UPDATE SET count = count + 1, last_at = excluded.last_at",
        )?
        .execute(params![hook.name(), p.key, p.what, at])?;
    }

    match hook {
        Hook::SessionStart(e) => {
            touch_run(
                tx,
                runs,
                counts,
                &e.session_id,
                at,
                e.platform.as_deref(),
                e.model.as_deref(),
                None,
                None,
            )?;
        }
        Hook::PreLlmCall(e) => {
            touch_run(
                tx,
                runs,
                counts,
                &e.session_id,
                at,
                e.platform.as_deref(),
                e.model.as_deref(),
                None,
                None,
            )?;
            if let Some(sender) = e.sender_id.as_deref().filter(|s| !s.is_empty()) {
                tx.prepare_cached("UPDATE runs SET sender_id = ?2 WHERE session_id = ?1")?
                    .execute(params![e.session_id, sender])?;
            }
            // The turn hangs under the session span being recorded now.
            let new_turn = tx
                .prepare_cached(
                    "INSERT INTO turns (turn_id, session_id, task_id, is_first_turn, model, started_at, span_n)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, COALESCE((SELECT span_n FROM runs WHERE session_id = ?2), 0))
                     ON CONFLICT (turn_id) DO NOTHING",
                )?
                .execute(params![
                    e.turn_id,
                    e.session_id,
                    e.task_id,
                    e.is_first_turn,
                    e.model,
                    at
                ])?;
            counts.inserted(Counted::Turns, new_turn);
            // A continuation (span_n > 0) starts with its first turn.
            tx.prepare_cached(
                "UPDATE runs SET turns = turns + ?2, status = ?3, ended_at = NULL,
                        span_started_at = CASE WHEN span_n > 0 AND span_started_at IS NULL THEN ?4
                                               ELSE span_started_at END
                  WHERE session_id = ?1",
            )?
            .execute(params![e.session_id, new_turn as i64, RUNNING, at])?;
            budget::note_profile(tx, &e.session_id, profile)?;
        }
        Hook::PreApiRequest(e) => {
            let a = &e.api;
            touch_run(
                tx,
                runs,
                counts,
                &a.session_id,
                at,
                a.platform.as_deref(),
                a.model.as_deref(),
                a.provider.as_deref(),
                a.base_url.as_deref(),
            )?;
            tx.prepare_cached(
                "INSERT INTO api_requests (api_request_id, session_id, turn_id, approx_input_tokens, message_count,
                    tool_count, request_char_count, first_started_at, attempt_started_at, attempts, routed_model)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1, ?10)
                 ON CONFLICT (api_request_id) DO UPDATE SET
                    approx_input_tokens = COALESCE(excluded.approx_input_tokens, approx_input_tokens),
                    attempt_started_at = excluded.attempt_started_at,
                    attempts = attempts + 1, routed_model = excluded.routed_model",
            )?
            .execute(params![
                a.api_request_id,
                a.session_id,
                a.turn_id,
                e.approx_input_tokens,
                e.message_count,
                e.tool_count,
                e.request_char_count,
                a.started_at,
                at,
                e.routed_model()
            ])?;
            budget::note_profile(tx, &a.session_id, profile)?;
            budget::on_pre_api_request(tx, prices, e, at)?;
        }
        Hook::PostApiRequest(e) => {
            let call = apply_llm_call(tx, runs, counts, prices, e, at)?;
            budget::on_post_api_request(tx, e, call, at, &mut pending.rollup)?;
        }
        Hook::ApiRequestError(e) => {
            apply_api_error(tx, runs, counts, e, at)?;
            budget::on_api_request_error(tx, e, at)?;
        }
        Hook::PreToolCall(e) => {
            let t = &e.tool;
            touch_run(tx, runs, counts, &t.session_id, at, None, None, None, None)?;
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO tool_calls (session_id, tool_call_id, tool_name, turn_id, task_id, api_request_id, started_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (session_id, tool_call_id) DO NOTHING",
                )?
                .execute(params![t.session_id, t.tool_call_id, t.tool_name, t.turn_id, t.task_id, t.api_request_id, at])?;
            counts.inserted(Counted::ToolCalls, inserted);
        }
        Hook::PostToolCall(e) => apply_tool_result(tx, runs, counts, e, at)?,
        Hook::PostLlmCall(e) => {
            touch_run(
                tx,
                runs,
                counts,
                &e.session_id,
                at,
                e.platform.as_deref(),
                e.model.as_deref(),
                None,
                None,
            )?;
        }
        Hook::SubagentStart(e) => apply_subagent_start(tx, runs, counts, e, at)?,
        Hook::SubagentStop(e) => apply_subagent_stop(tx, runs, counts, e, at)?,
        Hook::SessionEnd(e) => {
            touch_run(
                tx,
                runs,
                counts,
                &e.session_id,
                at,
                e.platform.as_deref(),
                e.model.as_deref(),
                None,
                None,
            )?;
            let outcome = if e.interrupted == Some(true) {
                INTERRUPTED
            } else if e.completed == Some(true) {
                OK
            } else {
                ERROR
            };
            // A turn whose pre_llm_call was missed still gets a row. A turn
            // hermes-meter already closed (its process exited, or it went
            // idle) takes Hermes's end in the ledger, but its span went out
            // with the close and is not sent again: a span goes out once.
            // None: no row yet, so the upsert below inserts one.
            let turn_closed: Option<bool> = tx
                .prepare_cached("SELECT outcome IS NOT NULL FROM turns WHERE turn_id = ?1")?
                .query_row(params![e.turn_id], |r| r.get(0))
                .optional()?;
            let closed_before = turn_closed.unwrap_or(false);
            tx.prepare_cached(
                "INSERT INTO turns (turn_id, session_id, task_id, model, started_at, ended_at, outcome)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)
                 ON CONFLICT (turn_id) DO UPDATE SET ended_at = excluded.ended_at, outcome = excluded.outcome",
            )?
            .execute(params![e.turn_id, e.session_id, e.task_id, e.model, at, outcome])?;
            counts.inserted(Counted::Turns, turn_closed.is_none() as usize);
            tx.prepare_cached("UPDATE runs SET status = ?2, ended_at = ?3 WHERE session_id = ?1")?
                .execute(params![e.session_id, outcome, at])?;
            if !closed_before {
                outbox::enqueue(tx, SpanKind::Turn, &e.session_id, &e.turn_id, -1, at, false)?;
            }
            outbox::enqueue_run(tx, &e.session_id, at, false)?;
        }
        Hook::ApprovalRequest(a) | Hook::ApprovalResponse(a) => {
            apply_approval(tx, a, at, matches!(hook, Hook::ApprovalResponse(_)))?;
        }
        Hook::UsageConfirmed(e) => {
            apply_usage_confirmed(tx, prices, e, &mut pending.rollup)?;
        }
        // A session this store holds nothing of (one Hermes's web
        // dashboard opened and closed with no turn) makes no run: an
        // empty session in every list.
        Hook::SessionFinalize(e) if !run_exists(tx, &e.session_id)? => {}
        Hook::SessionFinalize(e) => {
            touch_run(
                tx,
                runs,
                counts,
                &e.session_id,
                at,
                e.platform.as_deref(),
                None,
                None,
                None,
            )?;
            // Turns that never reached on_session_end failed (their last API
            // request has errors and no success) or were cut short.
            outbox::enqueue_open_turns(tx, &e.session_id, at)?;
            tx.prepare_cached(CLOSE_OPEN_TURNS)?
                .execute(params![e.session_id, at, ERROR, INTERRUPTED])?;
            // The run ends with the outcome of its last turn.
            tx.prepare_cached(
                "UPDATE runs SET finalized_at = ?2, ended_at = ?2,
                    status = COALESCE((SELECT outcome FROM turns t WHERE t.session_id = runs.session_id
                                        ORDER BY started_at DESC LIMIT 1), CASE WHEN status = ?3 THEN ?4 ELSE status END)
                 WHERE session_id = ?1",
            )?
            .execute(params![e.session_id, at, RUNNING, OK])?;
            outbox::enqueue_run(tx, &e.session_id, at, true)?;
        }
    }
    // Captured content (present only with capture on) lands with its event.
    super::content::record(tx, event)?;
    Ok(Applied::New)
}

/// Closes a finalized session's open turns: failed when an attempt of
/// theirs failed and none succeeded, else interrupted.
const CLOSE_OPEN_TURNS: &str = "UPDATE turns SET ended_at = ?2, outcome = CASE WHEN EXISTS (
        SELECT 1 FROM llm_call_errors x WHERE x.turn_id = turns.turn_id
          AND NOT EXISTS (SELECT 1 FROM llm_calls l WHERE l.api_request_id = x.api_request_id))
      THEN ?3 ELSE ?4 END
    WHERE session_id = ?1 AND outcome IS NULL";

/// Whether the store holds a run of `session_id`.
fn run_exists(tx: &Transaction<'_>, session_id: &str) -> Result<bool> {
    Ok(tx
        .prepare_cached("SELECT 1 FROM runs WHERE session_id = ?1")?
        .exists(params![session_id])?)
}

/// Makes sure the run exists (a resumed session fires no on_session_start)
/// and refreshes what the event says about it.
#[allow(clippy::too_many_arguments)]
fn touch_run(
    tx: &Transaction<'_>,
    runs: &mut RunMemo,
    counts: &mut RowCounts,
    session_id: &str,
    at: f64,
    platform: Option<&str>,
    model: Option<&str>,
    provider: Option<&str>,
    base_url: Option<&str>,
) -> Result<()> {
    let cron_job_id = if platform == Some("cron") {
        cron_job_id(session_id)
    } else {
        None
    };
    let says = RunSays {
        platform,
        cron_job_id: cron_job_id.as_deref(),
        model,
        provider,
        base_url,
        at,
    };
    let known = runs.get(session_id);
    if known.is_some_and(|run| !run.changed_by(&says)) {
        return Ok(());
    }
    if let Some(run) = known.filter(|run| run.only_later(&says)) {
        // Only the time moves on: an UPDATE naming no watched column fires
        // no trigger (report rollups, `run_hours`).
        let facts = run.with(&says);
        tx.prepare_cached("UPDATE runs SET last_event_at = MAX(last_event_at, ?2) WHERE session_id = ?1")?
            .execute(params![session_id, at])?;
        runs.put(session_id, facts);
        return Ok(());
    }
    if known.is_none() {
        let inserted = tx
            .prepare_cached(
                "INSERT INTO runs (session_id, platform, cron_job_id, model, provider, base_url, root_session_id, started_at, last_event_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?1, ?7, ?7) ON CONFLICT (session_id) DO NOTHING",
            )?
            .execute(params![session_id, platform, cron_job_id, model, provider, base_url, at])?;
        counts.inserted(Counted::Runs, inserted);
        if inserted == 1 {
            runs.put(session_id, RunFacts::new_run(&says));
            // A child run created after its subagent_start: link it to the edge.
            let parent: Option<String> = tx
                .prepare_cached("SELECT parent_session_id FROM subagent_edges WHERE child_session_id = ?1")?
                .query_row(params![session_id], |r| r.get(0))
                .optional()?;
            if let Some(parent) = parent {
                link_child(tx, session_id, &parent)?;
            }
            return Ok(());
        }
    }
    // Rewrite the row only when the event says something new: most events
    // change nothing here, and an unchanged row costs no page write.
    // last_event_at (for the idle sweep, counted in minutes) moves in steps
    // of a second for the same reason.
    tx.prepare_cached(
        "UPDATE runs SET
            platform = COALESCE(platform, ?2),
            cron_job_id = COALESCE(cron_job_id, ?3),
            model = COALESCE(?4, model),
            provider = COALESCE(?5, provider),
            base_url = COALESCE(?6, base_url),
            started_at = MIN(started_at, ?7),
            last_event_at = MAX(last_event_at, ?7)
         WHERE session_id = ?1 AND (
            (platform IS NULL AND ?2 IS NOT NULL) OR (cron_job_id IS NULL AND ?3 IS NOT NULL)
            OR model IS NOT COALESCE(?4, model) OR provider IS NOT COALESCE(?5, provider)
            OR base_url IS NOT COALESCE(?6, base_url)
            OR ?7 < started_at OR ?7 >= last_event_at + 1.0)",
    )?
    .execute(params![
        session_id,
        platform,
        cron_job_id,
        model,
        provider,
        base_url,
        at
    ])?;
    let facts = match runs.get(session_id) {
        Some(run) => run.with(&says),
        // A run this connection has not seen (written before a restart, or
        // by another process): read what it holds now.
        None => tx
            .prepare_cached(
                "SELECT platform IS NOT NULL, cron_job_id IS NOT NULL, model, provider, base_url, started_at, last_event_at
                 FROM runs WHERE session_id = ?1",
            )?
            .query_row(params![session_id], |r| {
                Ok(RunFacts {
                    has_platform: r.get(0)?,
                    has_cron_job_id: r.get(1)?,
                    model: r.get(2)?,
                    provider: r.get(3)?,
                    base_url: r.get(4)?,
                    started_at: r.get(5)?,
                    last_event_at: r.get(6)?,
                })
            })?,
    };
    runs.put(session_id, facts);
    Ok(())
}

/// Sets a child run's parent and root, and re-roots its own descendants.
fn link_child(tx: &Transaction<'_>, child: &str, parent: &str) -> Result<()> {
    let root: String = tx
        .prepare_cached("SELECT root_session_id FROM runs WHERE session_id = ?1")?
        .query_row(params![parent], |r| r.get(0))
        .optional()?
        .unwrap_or_else(|| parent.to_string());
    tx.prepare_cached("UPDATE runs SET parent_session_id = ?2, root_session_id = ?3 WHERE session_id = ?1")?
        .execute(params![child, parent, root])?;
    tx.prepare_cached("UPDATE runs SET root_session_id = ?2 WHERE root_session_id = ?1 AND session_id != ?1")?
        .execute(params![child, root])?;
    Ok(())
}

/// The job id of a cron session id `cron_{job_id}_{YYYYMMDD}_{HHMMSS}`.
pub(super) fn cron_job_id(session_id: &str) -> Option<String> {
    let rest = session_id.strip_prefix("cron_")?;
    // The job id may itself contain underscores; the stamp is the last two parts.
    let mut parts = rest.rsplitn(3, '_');
    let time = parts.next()?;
    let date = parts.next()?;
    let job = parts.next()?;
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    (digits(date, 8) && digits(time, 6) && !job.is_empty()).then(|| job.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_meter_model::hook::{decode, DecodeOptions, Decoded};

    #[test]
    fn closing_a_sessions_turns_reads_no_table_whole() {
        // Once per finalize: a scan would cost more with every error ever
        // recorded.
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("plan.db")).expect("open");
        let steps = store.query_plan(CLOSE_OPEN_TURNS, "s");
        assert!(steps.iter().any(|s| s.contains("llm_call_errors_turn")), "{steps:?}");
        assert!(!steps.iter().any(|s| s.starts_with("SCAN")), "{steps:?}");
    }

    #[test]
    fn a_run_takes_the_profile_its_call_was_made_in_else_the_stores() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = Writer::open(&dir.path().join("profiles.db")).expect("open");
        store.set_profile(Some("first".into()));
        let turn = |session: &str| {
            let kwargs = serde_json::json!({"session_id": session, "turn_id": format!("{session}:t1"), "model": "m"});
            let kwargs = kwargs.as_object().cloned().expect("an object");
            match decode("pre_llm_call", &kwargs, 10.0, DecodeOptions::default()) {
                Decoded::Event(event, _) => event,
                other => panic!("not an event: {other:?}"),
            }
        };
        let of = |profile: Option<&str>| EventContext {
            profile: profile.map(str::to_string),
            ..EventContext::default()
        };
        store.apply(&turn("s-work"), &of(Some("work"))).expect("apply");
        store.apply(&turn("s-none"), &of(None)).expect("apply");
        store.apply(&turn("s-empty"), &of(Some(""))).expect("apply");
        // A session belongs to the profile it started in.
        store.apply(&turn("s-work"), &of(Some("other"))).expect("apply");
        let mut rows: Vec<(String, Option<String>)> = store
            .conn
            .prepare("SELECT session_id, profile FROM runs ORDER BY session_id")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .map(|r| r.expect("row"))
            .collect();
        rows.sort();
        let want = [("s-empty", "first"), ("s-none", "first"), ("s-work", "work")];
        let want: Vec<(String, Option<String>)> =
            want.iter().map(|(s, p)| (s.to_string(), Some(p.to_string()))).collect();
        assert_eq!(rows, want);
    }

    #[test]
    fn cron_job_ids_come_from_the_session_id() {
        assert_eq!(
            cron_job_id("cron_01e7ae8ae880_20261130_013909").as_deref(),
            Some("01e7ae8ae880")
        );
        assert_eq!(cron_job_id("cron_my_job_20261130_013909").as_deref(), Some("my_job"));
        assert_eq!(cron_job_id("cron_x_2026_01"), None);
        assert_eq!(cron_job_id("20261130_013909_abcdef"), None);
    }
}
