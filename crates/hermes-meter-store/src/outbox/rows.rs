//! The reads of ledger rows the span builder needs: a run and an approval
//! by key ([`Reader::run_row`], [`Reader::approval_row`]), and a whole export
//! batch's rows in a few statements ([`Reader::batch_rows`]). The SELECTs and
//! row mappers are shared with `trace_view.rs`.
//!
//! Must not touch: the outbox tables (`mod.rs`), span building.

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension, Row};

use super::{OutboxRow, SpanKind};
use crate::error::Result;
use crate::{ContentKind, Reader};
use hermes_meter_model::rows::{ApprovalRow, AttemptError, AttemptRow, EdgeRow, RunRow, ToolRow, TurnRow};

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
                (SELECT MAX(max_retries) FROM llm_call_errors e WHERE e.api_request_id = l.api_request_id), aux_task,
                first_token_at
           FROM llm_calls l"
    };
}

macro_rules! llm_error_select {
    () => {
        "SELECT api_request_id, session_id, turn_id, attempt, model, provider, base_url, started_at,
                ended_at, status_code, retryable, reason, error_type, max_retries, retry_count
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
pub(super) const RUN_ROW_SQL: &str =
    "SELECT session_id, platform, cron_job_id, model, provider, sender_id, profile, started_at, ended_at,
                        last_event_at, finalized_at, status, input_tokens, output_tokens, cache_read_tokens,
                        cache_write_tokens, cost_usd,
                        (SELECT error_type FROM llm_call_errors e WHERE e.session_id = runs.session_id
                          ORDER BY ended_at DESC LIMIT 1),
                        span_n, span_started_at, span_base_input, span_base_output, span_base_cost,
                        close_reason, budget_stop
                   FROM runs WHERE session_id = ?1";

/// The delegation that started a child session, with the parent's
/// `delegate_task` call it hangs under.
pub(super) const EDGE_ROW_SQL: &str =
    "SELECT e.parent_session_id, e.parent_turn_id, e.role, e.child_status, e.started_at,
                        (SELECT t.tool_call_id FROM tool_calls t
                          WHERE t.session_id = e.parent_session_id AND t.proxy = 0 AND t.tool_name = 'delegate_task'
                            AND (e.parent_turn_id IS NULL OR t.turn_id = e.parent_turn_id)
                            AND t.started_at <= e.started_at AND (t.ended_at IS NULL OR t.ended_at >= e.started_at)
                          ORDER BY t.started_at DESC LIMIT 1)
                   FROM subagent_edges e WHERE e.child_session_id = ?1";

/// The span builder's reads, for the read-only views of `trace_view.rs`
/// (which add their own WHERE and map rows with the `*_of` functions below).
pub(crate) const TURN_SELECT: &str = turn_select!();
pub(crate) const LLM_CALL_SELECT: &str = llm_call_select!();
pub(crate) const LLM_ERROR_SELECT: &str = llm_error_select!();
pub(crate) const OPEN_ATTEMPT_SELECT: &str = open_attempt_select!();
pub(crate) const OPEN_ATTEMPT_FILTER: &str = open_attempt_filter!();
pub(crate) const TOOL_SELECT: &str = tool_select!();
pub(crate) const APPROVAL_SELECT: &str =
    "SELECT session_id, key, turn_id, tool_call_id, surface, started_at, ended_at, choice, decided_by FROM approvals";

impl Reader {
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
                    budget_stop: r.get(24)?,
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

    /// The approval `key` of `session_id`.
    pub fn approval_row(&self, session_id: &str, key: &str) -> Result<Option<ApprovalRow>> {
        Ok(self
            .conn()
            .prepare_cached(&format!("{APPROVAL_SELECT} WHERE session_id = ?1 AND key = ?2"))?
            .query_row(params![session_id, key], approval_of)
            .optional()?)
    }

    /// The ledger rows and (`with_content`) captured content that `rows`
    /// name, with one query per kind of row over every key of the batch
    /// at once.
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
            // Every attempt of these requests; (api_request_id, attempt) is unique.
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

/// The ledger rows of one export batch, from [`Reader::batch_rows`].
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
    /// The turn `turn_id`.
    pub fn turn(&self, turn_id: &str) -> Option<&TurnRow> {
        self.turns.get(turn_id)
    }

    /// The successful attempt of `api_request_id`.
    pub fn llm_call(&self, api_request_id: &str) -> Option<&AttemptRow> {
        self.llm_calls.get(api_request_id)
    }

    /// The failed attempt `retry_count` of `api_request_id`.
    pub fn llm_error(&self, api_request_id: &str, retry_count: i64) -> Option<&AttemptRow> {
        self.llm_errors.get(&(api_request_id.to_string(), retry_count))
    }

    /// The attempt of `api_request_id` a dead process left open (the last
    /// pre_api_request with no result).
    pub fn open_attempt(&self, api_request_id: &str) -> Option<&AttemptRow> {
        self.open_attempts.get(api_request_id)
    }

    /// The tool call `tool_call_id` of `session_id`.
    pub fn tool(&self, session_id: &str, tool_call_id: &str) -> Option<&ToolRow> {
        self.tools.get(&(session_id.to_string(), tool_call_id.to_string()))
    }

    /// Like [`Reader::span_content`].
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

pub(crate) fn turn_of(r: &Row<'_>) -> rusqlite::Result<TurnRow> {
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

pub(crate) fn llm_call_of(r: &Row<'_>) -> rusqlite::Result<AttemptRow> {
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
        first_token_at: r.get(21)?,
        retry_count: None,
    })
}

pub(crate) fn llm_error_of(r: &Row<'_>) -> rusqlite::Result<AttemptRow> {
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
        retry_count: r.get(14)?,
        ..AttemptRow::default()
    })
}

pub(crate) fn open_attempt_of(r: &Row<'_>) -> rusqlite::Result<AttemptRow> {
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

pub(crate) fn approval_of(r: &Row<'_>) -> rusqlite::Result<ApprovalRow> {
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

pub(crate) fn tool_of(r: &Row<'_>) -> rusqlite::Result<ToolRow> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Writer;

    /// Every statement that loads a span's ledger rows reaches them through
    /// an index: exporting costs the same per span however large the store
    /// grows. Only the small json_each list of a batch's keys is
    /// scanned.
    #[test]
    fn the_export_path_reads_no_ledger_table_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("s.db")).expect("open");
        let one = |sql: &str| store.query_plan(sql, "k");
        for sql in [
            RUN_ROW_SQL.to_string(),
            EDGE_ROW_SQL.to_string(),
            concat!(turn_select!(), " WHERE turn_id = ?1").to_string(),
            concat!(turn_select!(), " WHERE turn_id IN (SELECT value FROM json_each(?1))").to_string(),
            concat!(llm_call_select!(), " WHERE api_request_id = ?1").to_string(),
            concat!(llm_error_select!(), " WHERE api_request_id = ?1 AND attempt = ?2").to_string(),
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
}
