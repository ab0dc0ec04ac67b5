//! Read-only answers for the agent's `meter_spend` tool: the spend of a
//! time range, the costliest recent sessions and the most used tools, each
//! for every user or for one gateway user (the sender of a session's root).
//!
//! Owns: those queries. Must not touch: writes, and content of any kind
//! (ids, names, counts and costs only).

use rusqlite::{params, OptionalExtension};

use super::Reader;
use super::SpendTotals;
use crate::error::Result;

/// A recent session, by its own cost.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CostlySession {
    pub session_id: String,
    pub platform: Option<String>,
    pub started_at: f64,
    pub llm_calls: i64,
    pub cost_usd: f64,
}

/// A tool's use over a time range.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolUse {
    pub tool: String,
    pub calls: i64,
    pub failures: i64,
    pub seconds: f64,
}

/// A session found by a tool it ran or by its failures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FoundSession {
    pub session_id: String,
    pub platform: Option<String>,
    pub model: Option<String>,
    pub started_at: f64,
    pub llm_calls: i64,
    pub cost_usd: f64,
    pub api_errors: i64,
    pub tool_failures: i64,
}

impl Reader {
    /// The newest `limit` sessions started in `[since, until)` that ran a
    /// tool whose name contains `tool` (any case) and, with `failed`, had
    /// an API error or a failed tool call. Reads the window's runs through
    /// `runs_started`, and each one's tool calls through their key.
    pub fn sessions_by_tool_or_failure(
        &self,
        since: f64,
        until: f64,
        tool: Option<&str>,
        failed: bool,
        limit: usize,
    ) -> Result<Vec<FoundSession>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT r.session_id, r.platform, r.model, r.started_at, r.llm_calls, r.cost_usd, r.api_errors,
                    r.tool_failures
               FROM runs r
              WHERE r.started_at >= ?1 AND r.started_at < ?2
                AND (?4 = 0 OR r.api_errors > 0 OR r.tool_failures > 0)
                AND (?3 IS NULL OR EXISTS (SELECT 1 FROM tool_calls t WHERE t.session_id = r.session_id
                                              AND instr(lower(t.tool_name), lower(?3)) > 0))
              ORDER BY r.started_at DESC LIMIT ?5",
        )?;
        let rows = stmt.query_map(params![since, until, tool, failed, limit as i64], |r| {
            Ok(FoundSession {
                session_id: r.get(0)?,
                platform: r.get(1)?,
                model: r.get(2)?,
                started_at: r.get(3)?,
                llm_calls: r.get(4)?,
                cost_usd: r.get(5)?,
                api_errors: r.get(6)?,
                tool_failures: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The gateway user a session belongs to: its root session's sender.
    pub fn sender_of(&self, session_id: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row(
                "SELECT root.sender_id FROM runs r JOIN runs root ON root.session_id = r.root_session_id
                  WHERE r.session_id = ?1",
                params![session_id],
                |r| r.get(0),
            )
            .optional()?
            .flatten())
    }

    /// What the LLM calls that ended in `[since, until)` cost: of every
    /// session, or of `sender`'s sessions only (their subagents included).
    pub fn spend_of(&self, since: f64, until: f64, sender: Option<&str>) -> Result<SpendTotals> {
        let Some(sender) = sender else {
            return self.spend_between(since, until);
        };
        Ok(self.conn().query_row(
            "SELECT COUNT(*), COALESCE(SUM(l.input_tokens), 0), COALESCE(SUM(l.output_tokens), 0),
                    COALESCE(SUM(l.cache_read_tokens), 0), COALESCE(SUM(l.cache_write_tokens), 0),
                    COALESCE(SUM(l.cost_usd), 0), COUNT(DISTINCT l.session_id)
               FROM llm_calls l JOIN runs r ON r.session_id = l.session_id
               JOIN runs root ON root.session_id = r.root_session_id
              WHERE l.ended_at >= ?1 AND l.ended_at < ?2 AND root.sender_id = ?3",
            params![since, until, sender],
            super::session_view::spend_row,
        )?)
    }

    /// The `limit` costliest sessions (subagents apart) started since
    /// `since`, of everyone or of `sender`.
    pub fn costliest_sessions(&self, since: f64, sender: Option<&str>, limit: usize) -> Result<Vec<CostlySession>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT session_id, platform, started_at, llm_calls, cost_usd FROM runs
              WHERE started_at >= ?1 AND parent_session_id IS NULL AND (?2 IS NULL OR sender_id = ?2)
              ORDER BY cost_usd DESC, started_at DESC LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![since, sender, limit as i64], |r| {
            Ok(CostlySession {
                session_id: r.get(0)?,
                platform: r.get(1)?,
                started_at: r.get(2)?,
                llm_calls: r.get(3)?,
                cost_usd: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The `limit` most called tools among the calls that ended since
    /// `since`, of everyone or of `sender`'s sessions.
    pub fn most_used_tools(&self, since: f64, sender: Option<&str>, limit: usize) -> Result<Vec<ToolUse>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT t.tool_name, COUNT(*), TOTAL(CASE WHEN t.ok = 0 THEN 1 ELSE 0 END),
                    TOTAL(t.ended_at - t.started_at)
               FROM tool_calls t JOIN runs r ON r.session_id = t.session_id
               JOIN runs root ON root.session_id = r.root_session_id
              WHERE t.ended_at >= ?1 AND t.ended_at IS NOT NULL AND t.proxy = 0
                AND (?2 IS NULL OR root.sender_id = ?2)
              GROUP BY t.tool_name ORDER BY COUNT(*) DESC, t.tool_name LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![since, sender, limit as i64], |r| {
            Ok(ToolUse {
                tool: r.get(0)?,
                calls: r.get(1)?,
                failures: r.get::<_, f64>(2)? as i64,
                seconds: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::replay::{replay_file, ReplayStats};
    use crate::Writer;
    use hermes_meter_model::hook::DecodeOptions;

    const FAILONCE: &str = "20261130_013817_88dc56";
    const READFILE: &str = "20261130_013735_bf4b63";
    const TERMINAL_FAIL: &str = "20261130_013807_e42101";
    const MULTI_TURN: &str = "20261130_013856_a599de";

    #[test]
    fn sessions_are_found_by_a_tool_they_ran_and_by_their_failures() {
        let dir = tempfile::tempdir().expect("dir");
        let mut store = Writer::open_dir(dir.path()).expect("store");
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut stats = ReplayStats::default();
        for name in ["failonce", "readfile", "terminal_fail", "multi_turn"] {
            let file = fixtures.join(format!("{name}.jsonl"));
            replay_file(&mut store, &file, DecodeOptions::default(), &mut stats).expect("replay");
        }
        let ids = |tool: Option<&str>, failed: bool, limit: usize| -> Vec<String> {
            let mut ids: Vec<String> = store
                .sessions_by_tool_or_failure(0.0, 4e9, tool, failed, limit)
                .expect("query")
                .into_iter()
                .map(|s| s.session_id)
                .collect();
            ids.sort();
            ids
        };
        // A text the tool's name contains, in any case.
        assert_eq!(ids(Some("READ_F"), false, 10), [READFILE, MULTI_TURN]);
        assert_eq!(ids(Some("termin"), false, 10), [TERMINAL_FAIL]);
        // A failed attempt or a failed tool call.
        assert_eq!(ids(None, true, 10), [TERMINAL_FAIL, FAILONCE]);
        assert_eq!(ids(Some("read_file"), true, 10), Vec::<String>::new());
        assert_eq!(ids(None, false, 2).len(), 2, "the limit holds");
        // Outside the window: nothing.
        let none = store
            .sessions_by_tool_or_failure(0.0, 1.0, None, false, 10)
            .expect("query");
        assert!(none.is_empty());
    }
}
