//! Reading what a session and its current run used, for the per-session
//! and per-run caps (`budget/caps.rs` assesses them).
//!
//! A session's use is its root session's and every subagent's under it
//! (`runs.root_session_id`), from their run totals; a run's is what the
//! family recorded since the root session's open turn began. Each read is
//! bounded by the session: primary keys and the session prefixes of
//! `runs_root`, `llm_calls_session` and `tool_calls`, never the whole
//! ledger. Must not touch: writes (caps add none: the ledger's rows are
//! what they count).

use rusqlite::{params, OptionalExtension};

use super::spend::RESERVATION_TTL_SECONDS;
use crate::error::Result;
use crate::Reader;
use hermes_meter_model::budget::{RunSigns, Used};

/// What one session family and its current run used.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapUse {
    /// The root session, the id per-session caps are on.
    pub root: String,
    pub session: Used,
    /// The root session's open turn and what was used since it began.
    pub run: Option<(String, Used)>,
    /// The family's tool calls started at or after the asking
    /// `pre_tool_call`'s time (it included), which neither use counts.
    pub tool_calls_after: i64,
}

/// A row of (cost, input tokens, output tokens) sums as what was used.
fn used_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Used> {
    Ok(Used {
        settled_usd: r.get(0)?,
        input_tokens: r.get::<_, f64>(1)? as i64,
        output_tokens: r.get::<_, f64>(2)? as i64,
        ..Used::default()
    })
}

impl Reader {
    /// What the session family of `session_id` used, and its current run
    /// (`with_run`), now: recorded calls, tool calls started before
    /// `tool_call_at` (the asking `pre_tool_call`'s time, if one asks), and
    /// the open reservations of its calls in flight other than `exclude`.
    /// `None` for a session the store has not seen.
    pub fn cap_use(
        &self,
        session_id: &str,
        now: f64,
        exclude: Option<&str>,
        tool_call_at: Option<f64>,
        with_run: bool,
    ) -> Result<Option<CapUse>> {
        let before = tool_call_at.unwrap_or(f64::INFINITY);
        let conn = self.conn();
        let Some(root) = self.root_of(session_id)? else {
            return Ok(None);
        };
        let mut session = conn
            .prepare_cached(
                "SELECT TOTAL(cost_usd), TOTAL(input_tokens + cache_read_tokens + cache_write_tokens), TOTAL(output_tokens)
                 FROM runs WHERE root_session_id = CAST(?1 AS TEXT)",
            )?
            .query_row(params![root], used_row)?;
        session.tool_calls = self.family_tool_calls(&root, f64::NEG_INFINITY, before)?;
        // Every reservation is also held under the global scope id: the
        // family's calls in flight are those of its sessions.
        let reserved: f64 = conn
            .prepare_cached(
                "SELECT TOTAL(r.amount_usd) FROM budget_reservations r
                 JOIN api_requests a ON a.api_request_id = r.api_request_id
                 JOIN runs s ON s.session_id = a.session_id
                 WHERE r.scope = 'global' AND r.id = '' AND r.at >= ?2 AND r.api_request_id IS NOT ?3
                   AND s.root_session_id = CAST(?1 AS TEXT)",
            )?
            .query_row(params![root, now - RESERVATION_TTL_SECONDS, exclude], |r| r.get(0))?;
        session.reserved_usd = reserved;
        let run = match with_run {
            true => self.run_use(&root, reserved, before)?,
            false => None,
        };
        let tool_calls_after = match tool_call_at {
            Some(at) => self.family_tool_calls(&root, at, f64::INFINITY)?,
            None => 0,
        };
        Ok(Some(CapUse {
            root,
            session,
            run,
            tool_calls_after,
        }))
    }

    /// The root session's open turn (the newest, should an earlier process
    /// have left one open) and what its family recorded since it began.
    fn run_use(&self, root: &str, reserved: f64, before: f64) -> Result<Option<(String, Used)>> {
        let conn = self.conn();
        let Some((turn, since)) = self.open_turn(root)? else {
            return Ok(None);
        };
        let mut used = conn
            .prepare_cached(
                "SELECT TOTAL(c.cost_usd), TOTAL(c.input_tokens + c.cache_read_tokens + c.cache_write_tokens),
                        TOTAL(c.output_tokens)
                 FROM runs s JOIN llm_calls c ON c.session_id = s.session_id AND c.ended_at >= ?2
                 WHERE s.root_session_id = CAST(?1 AS TEXT)",
            )?
            .query_row(params![root, since], used_row)?;
        used.tool_calls = self.family_tool_calls(root, since, before)?;
        used.reserved_usd = reserved;
        Ok(Some((turn, used)))
    }

    /// The root session of `session_id`, if the store has seen it.
    pub(crate) fn root_of(&self, session_id: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .prepare_cached("SELECT root_session_id FROM runs WHERE session_id = CAST(?1 AS TEXT)")?
            .query_row(params![session_id], |r| r.get(0))
            .optional()?)
    }

    /// The open turn of the root session `root` (the newest, should an
    /// earlier process have left one open) and when it began.
    fn open_turn(&self, root: &str) -> Result<Option<(String, f64)>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT turn_id, started_at FROM turns WHERE session_id = CAST(?1 AS TEXT) AND outcome IS NULL
                 ORDER BY started_at DESC LIMIT 1",
            )?
            .query_row(params![root], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?)
    }

    /// The run `session_id` is part of now: its root session and the
    /// root's open turn.
    pub fn open_run(&self, session_id: &str) -> Result<Option<(String, String)>> {
        let Some(root) = self.root_of(session_id)? else {
            return Ok(None);
        };
        Ok(self.open_turn(&root)?.map(|(turn, _)| (root, turn)))
    }

    /// Tool calls the family of `root` started in `[since, before)`, not
    /// counting subagent proxies. `before` is the asking `pre_tool_call`'s
    /// time, which the ledger recorded (with any later call applied in the
    /// same batch) before the verdict is read.
    fn family_tool_calls(&self, root: &str, since: f64, before: f64) -> Result<i64> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT COUNT(*) FROM runs s JOIN tool_calls t ON t.session_id = s.session_id
                 WHERE s.root_session_id = CAST(?1 AS TEXT) AND t.proxy = 0 AND t.started_at >= ?2 AND t.started_at < ?3",
            )?
            .query_row(params![root, since, before], |r| r.get(0))?)
    }

    /// The root sessions still running, newest first, at most `limit`:
    /// whose caps `budget list` shows.
    pub(crate) fn running_root_sessions(&self, limit: usize) -> Result<Vec<String>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT session_id FROM runs WHERE status = 'running' AND session_id = root_session_id
             ORDER BY started_at DESC",
        )?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        let mut out = Vec::new();
        for row in rows.take(limit) {
            out.push(row?);
        }
        Ok(out)
    }

    /// The signs of a runaway in the run of `session_id` as of `at`: its
    /// root session, the root's open turn, the run's API calls (recorded
    /// calls and failed attempts of the family since the turn began) and
    /// tool calls, and the family's tokens in the minute before `at`
    /// without cache reads (a long cached context read again at every
    /// call is ordinary work, and costs a tenth of fresh input).
    /// `None` without a run.
    pub fn run_signs(&self, session_id: &str, at: f64) -> Result<Option<(String, String, RunSigns)>> {
        let conn = self.conn();
        let Some(root) = self.root_of(session_id)? else {
            return Ok(None);
        };
        let Some((turn, since)) = self.open_turn(&root)? else {
            return Ok(None);
        };
        let (calls, tokens): (i64, f64) = conn
            .prepare_cached(
                "SELECT COUNT(*) FILTER (WHERE c.ended_at >= ?2),
                        TOTAL(c.input_tokens + c.cache_write_tokens + c.output_tokens)
                            FILTER (WHERE c.ended_at >= ?3)
                 FROM runs s JOIN llm_calls c ON c.session_id = s.session_id AND c.ended_at >= MIN(?2, ?3)
                 WHERE s.root_session_id = CAST(?1 AS TEXT)",
            )?
            .query_row(params![root, since, at - 60.0], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let failed: i64 = conn
            .prepare_cached(
                "SELECT COUNT(*) FROM runs s JOIN llm_call_errors e ON e.session_id = s.session_id AND e.ended_at >= ?2
                 WHERE s.root_session_id = CAST(?1 AS TEXT)",
            )?
            .query_row(params![root, since], |r| r.get(0))?;
        let tools = self.family_tool_calls(&root, since, f64::INFINITY)?;
        let signs = RunSigns {
            api_calls: (calls + failed).max(0) as u64,
            tool_calls: tools.max(0) as u64,
            tokens_last_minute: tokens.max(0.0) as u64,
        };
        Ok(Some((root, turn, signs)))
    }
}
