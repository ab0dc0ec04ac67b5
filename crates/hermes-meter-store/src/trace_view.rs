//! Read-only queries for `hermes-meter trace` and the viewer: every ledger
//! row of one session and its subagents (the rows the span builder turns
//! into spans). The viewer's list of sessions is [`super::session_list`].
//!
//! Owns: those queries and the read-only connection the viewer opens per
//! request. Must not touch: writes of any kind, span building (that is
//! [`hermes_meter_model::span`], fed with these rows by [`crate::trace`]).
//!
//! # Finding a session's rows
//!
//! Each ledger table is read through an index on the session
//! (`llm_calls_session`, which `report` needs too), not a key range of
//! Hermes's `api_request_id`, whose shape nothing promises.

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension};

use super::outbox::{
    approval_of, llm_call_of, llm_error_of, open_attempt_of, tool_of, turn_of, APPROVAL_SELECT, LLM_CALL_SELECT,
    LLM_ERROR_SELECT, OPEN_ATTEMPT_FILTER, OPEN_ATTEMPT_SELECT, TOOL_SELECT, TURN_SELECT,
};
use super::{Reader, SessionFilter};
use crate::error::Result;
use hermes_meter_model::rows::{ApprovalRow, AttemptRow, RunRow, ToolRow, TurnRow};

/// How deep subagents of subagents are followed (a guard against cycles).
const MAX_DEPTH: usize = 32;

/// Every ledger row of a session and the subagents it started (at any depth).
#[derive(Debug, Clone, Default)]
pub struct TraceRows {
    /// The session first, then its subagents, parents before children.
    pub runs: Vec<RunRow>,
    pub turns: Vec<TurnRow>,
    /// Successful, failed and open attempts.
    pub attempts: Vec<AttemptRow>,
    /// Tool calls (not the proxy rows a `subagent_stop` records).
    pub tools: Vec<ToolRow>,
    /// Waits for a human's approval of a tool call.
    pub approvals: Vec<ApprovalRow>,
    /// What the failed attempts said, by `(api_request_id, retry_count)`.
    pub error_messages: HashMap<(String, i64), String>,
    /// Captured content by `(kind, session_id, key)`: `(attribute, JSON text)`
    /// pairs; empty unless content capture was on.
    pub content: HashMap<(String, String, String), Vec<(String, String)>>,
}

impl Reader {
    /// The newest root session (not a subagent), if any.
    pub fn last_session_id(&self) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT session_id FROM runs WHERE parent_session_id IS NULL ORDER BY started_at DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The rows of `session_id` and its subagents, or `None` if the store
    /// has never seen the session. Read in one snapshot.
    pub fn trace_rows(&self, session_id: &str) -> Result<Option<TraceRows>> {
        self.read_snapshot(|store| store.trace_rows_now(session_id))
    }

    fn trace_rows_now(&self, session_id: &str) -> Result<Option<TraceRows>> {
        let Some(run) = self.run_row(session_id)? else {
            return Ok(None);
        };
        let mut out = TraceRows::default();
        let mut queue = vec![(run, 0usize)];
        let mut seen = std::collections::HashSet::new();
        while let Some((run, depth)) = queue.pop() {
            if !seen.insert(run.session_id.clone()) {
                continue;
            }
            if depth < MAX_DEPTH {
                for child in self.child_session_ids(&run.session_id)? {
                    if let Some(c) = self.run_row(&child)? {
                        queue.push((c, depth + 1));
                    }
                }
            }
            self.session_rows(&run, &mut out)?;
            out.runs.push(run);
        }
        Ok(Some(out))
    }

    fn child_session_ids(&self, parent: &str) -> Result<Vec<String>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT child_session_id FROM subagent_edges WHERE parent_session_id = ?1 ORDER BY started_at",
        )?;
        let rows = stmt.query_map(params![parent], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Adds the turns, attempts, tool calls and content of `run` to `out`.
    fn session_rows(&self, run: &RunRow, out: &mut TraceRows) -> Result<()> {
        let conn = self.conn();
        let sid = run.session_id.as_str();
        let mut stmt = conn.prepare_cached(&format!("{TURN_SELECT} WHERE session_id = ?1 ORDER BY started_at"))?;
        for t in stmt.query_map(params![sid], turn_of)? {
            out.turns.push(t?);
        }

        // Successful calls, through `llm_calls_session`.
        let mut calls = Vec::new();
        let mut stmt = conn.prepare_cached(&format!("{LLM_CALL_SELECT} WHERE l.session_id = ?1"))?;
        for a in stmt.query_map(params![sid], llm_call_of)? {
            calls.push(a?);
        }
        out.attempts.extend(calls);

        // Failed attempts: by turn (indexed); a scan if that missed some
        // (attempts outside any turn).
        let errors_sql = |filter: &str| {
            format!(
                "SELECT e.*, (SELECT error_message FROM llm_call_errors m
                               WHERE m.api_request_id = e.api_request_id AND m.attempt = e.attempt)
                   FROM ({LLM_ERROR_SELECT} WHERE {filter}) e"
            )
        };
        let error_of = |r: &rusqlite::Row<'_>| Ok((llm_error_of(r)?, r.get::<_, Option<String>>(15)?));
        let mut stmt = conn.prepare_cached(&errors_sql(
            "turn_id IN (SELECT turn_id FROM turns WHERE session_id = ?1) AND session_id = ?1",
        ))?;
        let mut errors = stmt
            .query_map(params![sid], error_of)?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let api_errors: i64 =
            conn.query_row("SELECT api_errors FROM runs WHERE session_id = ?1", params![sid], |r| {
                r.get(0)
            })?;
        if (errors.len() as i64) < api_errors {
            let mut stmt = conn.prepare_cached(&errors_sql("session_id = ?1"))?;
            errors = stmt
                .query_map(params![sid], error_of)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
        }
        for (attempt, message) in errors {
            if let Some(m) = message {
                out.error_messages
                    .insert((attempt.api_request_id.clone(), attempt.attempt), m);
            }
            out.attempts.push(attempt);
        }

        // Attempts begun and never answered (in flight, or left by a dead
        // process): more pre_api_request calls than results.
        let open_sql = format!(
            "{OPEN_ATTEMPT_SELECT} WHERE a.session_id = ?1
             {OPEN_ATTEMPT_FILTER}
               AND a.attempts > (SELECT COUNT(*) FROM llm_call_errors e WHERE e.api_request_id = a.api_request_id)"
        );
        let mut stmt = conn.prepare_cached(&open_sql)?;
        for a in stmt.query_map(params![sid], open_attempt_of)? {
            out.attempts.push(a?);
        }

        let mut stmt = conn.prepare_cached(&format!("{TOOL_SELECT} WHERE session_id = ?1 AND proxy = 0"))?;
        for t in stmt.query_map(params![sid], tool_of)? {
            out.tools.push(t?);
        }

        let mut stmt = conn.prepare_cached(&format!("{APPROVAL_SELECT} WHERE session_id = ?1 ORDER BY started_at"))?;
        for a in stmt.query_map(params![sid], approval_of)? {
            out.approvals.push(a?);
        }

        let mut stmt = conn.prepare_cached(
            "SELECT kind, key, attr, value FROM span_content WHERE kind IN ('llm', 'tool') AND session_id = ?1
              ORDER BY kind, key, attr",
        )?;
        let rows = stmt.query_map(params![sid], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get(2)?, r.get(3)?))
        })?;
        for row in rows {
            let (kind, key, attr, value) = row?;
            out.content
                .entry((kind, sid.to_string(), key))
                .or_default()
                .push((attr, value));
        }
        Ok(())
    }

    /// SQLite's plan for the session list of `filter` and for one
    /// session's reads, one line per step, for the test that holds them to
    /// indexes.
    pub fn trace_query_plans(&self, filter: &SessionFilter) -> Result<Vec<(String, String)>> {
        let mut out = self.session_list_plans(filter)?;
        let mut plan = |name: &str, sql: &str, args: &[rusqlite::types::Value]| -> Result<()> {
            let mut stmt = self.conn().prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
            let rows = stmt.query_map(rusqlite::params_from_iter(args.iter()), |r| r.get::<_, String>(3))?;
            for detail in rows {
                out.push((name.to_string(), detail?));
            }
            Ok(())
        };
        let text = |s: &str| rusqlite::types::Value::Text(s.to_string());
        let sid = [text("s")];
        plan(
            "turns",
            &format!("{TURN_SELECT} WHERE session_id = ?1 ORDER BY started_at"),
            &sid,
        )?;
        plan("llm_calls", &format!("{LLM_CALL_SELECT} WHERE l.session_id = ?1"), &sid)?;
        plan(
            "errors",
            &format!("{LLM_ERROR_SELECT} WHERE turn_id IN (SELECT turn_id FROM turns WHERE session_id = ?1)"),
            &sid,
        )?;
        plan(
            "tools",
            &format!("{TOOL_SELECT} WHERE session_id = ?1 AND proxy = 0"),
            &sid,
        )?;
        plan(
            "open attempts",
            &format!("{OPEN_ATTEMPT_SELECT} WHERE a.session_id = ?1 {OPEN_ATTEMPT_FILTER}"),
            &sid,
        )?;
        plan(
            "children",
            "SELECT child_session_id FROM subagent_edges WHERE parent_session_id = ?1",
            &sid,
        )?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `trace` and `ui` read with a read-only connection; a store no
    /// process has opened yet (an empty file) gets its schema first instead
    /// of failing on a missing table.
    #[test]
    fn an_empty_store_file_gets_its_schema_before_it_is_read() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("new.db");
        std::fs::write(&path, b"").expect("an empty file");
        let store = Reader::open(&path).expect("open read-only");
        assert_eq!(store.schema_version().expect("version"), super::super::SCHEMA_VERSION);
        assert!(store.trace_rows("s").expect("read").is_none(), "no such session");
    }
}
