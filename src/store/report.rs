//! Read-only queries for reports and `status`.

use rusqlite::{params, OptionalExtension};

use super::Store;
use crate::error::Result;

/// What a fact row records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactKind {
    /// A successful LLM API call (tokens and cost).
    LlmCall,
    /// A failed attempt of an LLM API call.
    ApiError,
    /// A tool call that finished.
    ToolCall,
}

/// One LLM call, API error or finished tool call, with the attributes a
/// report groups by. Sender and cron job are the root session's, so a
/// subagent's spend rolls up to whoever started the work.
#[derive(Debug, Clone, PartialEq)]
pub struct FactRow {
    pub kind: FactKind,
    pub at: f64,
    pub session_id: String,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub sender_id: Option<String>,
    pub cron_job_id: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    pub cost_usd: f64,
    pub estimated: bool,
    pub unpriced: bool,
    /// For tool calls: how it ended (the definition spans and metrics use).
    pub tool_outcome: Option<crate::tool_outcome::ToolOutcome>,
    /// For LLM calls: the auxiliary task of an auxiliary call.
    pub aux_task: Option<String>,
}

/// The calls of one model and provider that the provider billed itself,
/// beside what the price table estimated for the same usage.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProviderBilled {
    pub model: Option<String>,
    pub provider: Option<String>,
    pub llm_calls: i64,
    /// What the provider reported it billed.
    pub billed_usd: f64,
    /// What the price table gives for the same tokens.
    pub estimate_usd: f64,
}

/// A run, as `report` lists sessions.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub session_id: String,
    pub platform: Option<String>,
    pub status: String,
    pub started_at: f64,
    pub ended_at: Option<f64>,
    pub parent_session_id: Option<String>,
}

/// Row counts per table, for `status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoreCounts {
    pub journal: i64,
    pub runs: i64,
    pub turns: i64,
    pub llm_calls: i64,
    pub llm_call_errors: i64,
    pub tool_calls: i64,
    pub subagent_edges: i64,
    pub decode_problems: i64,
}

/// Every fact that ended in `[?1, ?2)`; each arm reads its table's index
/// on when rows ended, so a window costs what it holds.
pub(super) const FACTS: &str = "
            SELECT 0, l.ended_at, l.session_id, l.model, l.provider, root.sender_id, root.cron_job_id,
                   l.input_tokens, l.output_tokens, l.cache_read_tokens, l.cache_write_tokens, l.reasoning_tokens,
                   l.cost_usd, l.estimated, l.cost_source = 'unknown', NULL, NULL, NULL, l.aux_task
              FROM llm_calls l JOIN runs r ON r.session_id = l.session_id
              JOIN runs root ON root.session_id = r.root_session_id
             WHERE l.ended_at >= ?1 AND l.ended_at < ?2
            UNION ALL
            SELECT 1, e.ended_at, e.session_id, e.model, e.provider, root.sender_id, root.cron_job_id,
                   0, 0, 0, 0, 0, 0.0, 0, 0, NULL, NULL, NULL, NULL
              FROM llm_call_errors e JOIN runs r ON r.session_id = e.session_id
              JOIN runs root ON root.session_id = r.root_session_id
             WHERE e.ended_at >= ?1 AND e.ended_at < ?2
            UNION ALL
            SELECT 2, t.ended_at, t.session_id, r.model, r.provider, root.sender_id, root.cron_job_id,
                   0, 0, 0, 0, 0, 0.0, 0, 0, t.status, t.ok, t.exit_code, NULL
              FROM tool_calls t JOIN runs r ON r.session_id = t.session_id
              JOIN runs root ON root.session_id = r.root_session_id
             WHERE t.ended_at IS NOT NULL AND t.ended_at >= ?1 AND t.ended_at < ?2 AND t.proxy = 0";

/// The columns of a [`RunSummary`], in [`run_summary`]'s order.
const RUN_SUMMARY: &str = "SELECT session_id, platform, status, started_at, ended_at, parent_session_id FROM runs";

fn run_summary(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunSummary> {
    Ok(RunSummary {
        session_id: r.get(0)?,
        platform: r.get(1)?,
        status: r.get(2)?,
        started_at: r.get(3)?,
        ended_at: r.get(4)?,
        parent_session_id: r.get(5)?,
    })
}

impl Store {
    /// The calls in `[since, until)` whose cost the provider reported, by
    /// model and provider, most billed first.
    pub fn provider_billed(&self, since: f64, until: f64) -> Result<Vec<ProviderBilled>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT model, provider, COUNT(*), SUM(cost_usd), SUM(COALESCE(estimate_usd, cost_usd))
               FROM llm_calls INDEXED BY llm_calls_provider_billed
              WHERE cost_source = 'provider' AND ended_at >= ?1 AND ended_at < ?2
              GROUP BY model, provider ORDER BY 4 DESC, 1, 2",
        )?;
        let rows = stmt.query_map(params![since, until], |r| {
            Ok(ProviderBilled {
                model: r.get(0)?,
                provider: r.get(1)?,
                llm_calls: r.get(2)?,
                billed_usd: r.get(3)?,
                estimate_usd: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Every fact in `[since, until)`, by the time it ended.
    pub fn facts(&self, since: f64, until: f64) -> Result<Vec<FactRow>> {
        let mut out = Vec::new();
        self.for_each_fact(since, until, |f| out.push(f))?;
        Ok(out)
    }

    /// Hands every fact in `[since, until)` to `each`, one row at a time,
    /// holding none (`report` adds them up as they come).
    pub fn for_each_fact(&self, since: f64, until: f64, mut each: impl FnMut(FactRow)) -> Result<()> {
        let mut stmt = self.conn().prepare_cached(FACTS)?;
        let rows = stmt.query_map(params![since, until], |r| {
            let kind = match r.get::<_, i64>(0)? {
                0 => FactKind::LlmCall,
                1 => FactKind::ApiError,
                _ => FactKind::ToolCall,
            };
            let tool_outcome = if kind == FactKind::ToolCall {
                let status: Option<String> = r.get(15)?;
                Some(crate::tool_outcome::ToolOutcome::of(
                    true,
                    status.as_deref(),
                    r.get(16)?,
                    r.get(17)?,
                ))
            } else {
                None
            };
            Ok(FactRow {
                kind,
                at: r.get(1)?,
                session_id: r.get(2)?,
                model: r.get(3)?,
                provider: r.get(4)?,
                sender_id: r.get(5)?,
                cron_job_id: r.get(6)?,
                input_tokens: r.get(7)?,
                output_tokens: r.get(8)?,
                cache_read_tokens: r.get(9)?,
                cache_write_tokens: r.get(10)?,
                reasoning_tokens: r.get(11)?,
                cost_usd: r.get(12)?,
                estimated: r.get(13)?,
                unpriced: r.get(14)?,
                tool_outcome,
                aux_task: r.get(18)?,
            })
        })?;
        for row in rows {
            each(row?);
        }
        Ok(())
    }

    /// Runs that started in `[since, until)`, oldest first.
    pub fn runs_started(&self, since: f64, until: f64) -> Result<Vec<RunSummary>> {
        let sql = format!("{RUN_SUMMARY} WHERE started_at >= ?1 AND started_at < ?2 ORDER BY started_at");
        let mut stmt = self.conn().prepare_cached(&sql)?;
        let rows = stmt.query_map(params![since, until], run_summary)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Hands the id of every run that started in `[since, until)` to
    /// `each`, holding none.
    pub fn for_each_run_started(&self, since: f64, until: f64, mut each: impl FnMut(&str)) -> Result<()> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT session_id FROM runs WHERE started_at >= ?1 AND started_at < ?2")?;
        let mut rows = stmt.query(params![since, until])?;
        while let Some(row) = rows.next()? {
            each(row.get_ref(0)?.as_str().unwrap_or_default());
        }
        Ok(())
    }

    /// One run by session id.
    pub fn run(&self, session_id: &str) -> Result<Option<RunSummary>> {
        let sql = format!("{RUN_SUMMARY} WHERE session_id = ?1");
        let mut stmt = self.conn().prepare_cached(&sql)?;
        Ok(stmt.query_row(params![session_id], run_summary).optional()?)
    }

    /// Row counts per table, from the counters kept as rows are written
    /// (`store_counts`): one read each, however large the store.
    pub fn counts(&self) -> Result<StoreCounts> {
        Ok(StoreCounts {
            journal: self.store_count("journal")?,
            runs: self.store_count("runs")?,
            turns: self.store_count("turns")?,
            llm_calls: self.store_count("llm_calls")?,
            llm_call_errors: self.store_count("llm_call_errors")?,
            tool_calls: self.store_count("tool_calls")?,
            subagent_edges: self.store_count("subagent_edges")?,
            // One row per (hook, key, problem): small.
            decode_problems: self
                .conn()
                .query_row("SELECT COALESCE(SUM(count), 0) FROM decode_problems", [], |r| r.get(0))?,
        })
    }

    /// Runs a read-only query and returns the first column of the first row
    /// (tests and `status` use it for single numbers).
    pub fn query_scalar<T: rusqlite::types::FromSql>(&self, sql: &str) -> Result<T> {
        Ok(self.conn().query_row(sql, [], |r| r.get(0))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `report` over a window, `status` and `export --since` read what
    /// their window holds through indexes, never a ledger table whole
    /// (issue 18): their cost follows their answer, not the store's age.
    #[test]
    fn reports_status_and_export_since_read_their_window_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("plan.db")).expect("open");
        let runs_started = format!("{RUN_SUMMARY} WHERE started_at >= ?1 AND started_at < ?2 ORDER BY started_at");
        for sql in [
            FACTS,
            runs_started.as_str(),
            super::super::outbox::HISTORY,
            "SELECT n FROM store_counts WHERE name = ?1",
        ] {
            let steps = store.query_plan(sql, "1");
            let scans: Vec<&String> = steps
                .iter()
                .filter(|s| s.starts_with("SCAN") && s.as_str() != "SCAN CONSTANT ROW")
                .collect();
            assert!(scans.is_empty(), "{sql}\n{steps:?}");
        }
    }
}
