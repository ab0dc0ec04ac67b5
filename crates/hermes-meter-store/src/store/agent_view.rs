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

impl Reader {
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
