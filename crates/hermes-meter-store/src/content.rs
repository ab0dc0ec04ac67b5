//! Captured content, stored per span (`span_content`).
//!
//! Rows exist only for events decoded with content capture on: the decoder
//! drops content otherwise, so there is nothing to write. What arrives here
//! is already redacted and cut ([`hermes_meter_model::redact`]); this module shapes it
//! into the span attribute's JSON text ([`hermes_meter_model::content`]) and upserts it
//! in the event's transaction.

use rusqlite::{params, Transaction};

use super::log_outbox::{LogAttrs, LogPlace, NewLog, Severity};
use super::{Reader, Writer};
use crate::error::Result;
use hermes_meter_model::content;
use hermes_meter_model::hook::{DecodeOptions, Hook, HookEvent};
use hermes_meter_model::semconv::attr;

/// Which span a content row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentKind {
    /// A chat span, keyed by api_request_id.
    Llm,
    /// A tool span, keyed by tool_call_id.
    Tool,
}

impl ContentKind {
    fn as_str(self) -> &'static str {
        match self {
            ContentKind::Llm => "llm",
            ContentKind::Tool => "tool",
        }
    }
}

/// Writes the content an event carries, if any, in its transaction.
pub(super) fn record(tx: &Transaction<'_>, event: &HookEvent) -> Result<()> {
    // The decoder already cut each value to this; the semconv wrapping adds
    // a few bytes, and the attribute is cut again to stay within it.
    let max = DecodeOptions::default().max_content_bytes;
    match &event.hook {
        Hook::PreApiRequest(e) => {
            if let Some(text) = e
                .request_messages
                .as_ref()
                .and_then(|m| content::input_messages(m, max))
            {
                put(
                    tx,
                    ContentKind::Llm,
                    &e.api.session_id,
                    &e.api.api_request_id,
                    attr::GEN_AI_INPUT_MESSAGES,
                    &text,
                )?;
            }
        }
        Hook::PostApiRequest(e) => {
            if let Some(answer) = &e.assistant_content {
                let text = content::output_messages(answer, e.finish_reason.as_deref(), max);
                put(
                    tx,
                    ContentKind::Llm,
                    &e.api.session_id,
                    &e.api.api_request_id,
                    attr::GEN_AI_OUTPUT_MESSAGES,
                    &text,
                )?;
            }
            content_event(tx, e, event.at)?;
        }
        Hook::PreToolCall(e) => {
            if let Some(args) = &e.args {
                let text = content::tool_arguments(args, max);
                put(
                    tx,
                    ContentKind::Tool,
                    &e.tool.session_id,
                    &e.tool.tool_call_id,
                    attr::GEN_AI_TOOL_CALL_ARGUMENTS,
                    &text,
                )?;
            }
        }
        Hook::PostToolCall(e) => {
            let t = &e.tool;
            if let Some(args) = &e.args {
                let text = content::tool_arguments(args, max);
                put(
                    tx,
                    ContentKind::Tool,
                    &t.session_id,
                    &t.tool_call_id,
                    attr::GEN_AI_TOOL_CALL_ARGUMENTS,
                    &text,
                )?;
            }
            if let Some(result) = &e.result {
                let text = content::tool_result(result, max);
                put(
                    tx,
                    ContentKind::Tool,
                    &t.session_id,
                    &t.tool_call_id,
                    attr::GEN_AI_TOOL_CALL_RESULT,
                    &text,
                )?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The content event of an LLM call whose content was captured: a log
/// record (`gen_ai.client.inference.operation.details`) in its attempt's
/// span that carries the call's captured messages, read when it is sent,
/// and sent only when content events are on.
fn content_event(tx: &Transaction<'_>, e: &hermes_meter_model::hook::PostApiRequest, at: f64) -> Result<()> {
    let a = &e.api;
    let (captured, attempt): (bool, Option<i64>) = tx
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM span_content WHERE kind = ?1 AND session_id = ?2 AND key = ?3),
                    (SELECT attempts - 1 FROM api_requests WHERE api_request_id = ?3)",
        )?
        .query_row(
            params![ContentKind::Llm.as_str(), a.session_id, a.api_request_id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
    if !captured {
        return Ok(());
    }
    let attrs = LogAttrs::default()
        .str(
            attr::GEN_AI_OPERATION_NAME,
            Some(hermes_meter_model::semconv::value::OPERATION_CHAT),
        )
        .str(attr::GEN_AI_REQUEST_MODEL, a.model.as_deref())
        .str(attr::GEN_AI_RESPONSE_MODEL, e.response_model.as_deref())
        .str(attr::GEN_AI_PROVIDER_NAME, a.provider.as_deref())
        .str(attr::GEN_AI_CONVERSATION_ID, Some(&a.session_id));
    super::log_outbox::append(
        tx,
        &NewLog {
            at: e.ended_at.unwrap_or(at),
            event: hermes_meter_model::semconv::event::INFERENCE_DETAILS,
            severity: Severity::Info,
            place: LogPlace {
                session_id: Some(&a.session_id),
                turn_id: a.turn_id.as_deref(),
                span_id: Some(hermes_meter_model::span::attempt_span_id(
                    &a.api_request_id,
                    attempt.unwrap_or(0),
                )),
            },
            body: "",
            attrs,
            content_key: Some(&a.api_request_id),
        },
    )
}

/// Where content retention goes on from: the last (kind, session) it
/// looked at, `None` to start from the beginning.
#[derive(Debug, Clone, Default)]
pub struct ContentCursor(Option<(String, String)>);

/// Up to `?3` content rows after (`?1`, `?2`) in key order: where content
/// retention looks next.
pub(super) const CONTENT_CANDIDATES: &str = "SELECT kind, session_id FROM span_content
    WHERE (kind, session_id) > (?1, ?2) ORDER BY kind, session_id LIMIT ?3";

/// Whether session `?1`'s content may go: its run is gone, or it ended
/// before `?2` and has no span in the outbox, or its last event is before
/// `?3`. Index lookups only (runs by key, outbox by kind and session).
pub(super) const PRUNABLE_CONTENT: &str = "SELECT NOT EXISTS (SELECT 1 FROM runs WHERE session_id = ?1)
    OR EXISTS (SELECT 1 FROM runs r WHERE r.session_id = ?1 AND (r.last_event_at < ?3
        OR (r.status != ?4 AND r.ended_at < ?2
            AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.kind IN (1, 2, 3, 4, 5, 6, 7) AND o.session_id = ?1)
            AND NOT EXISTS (SELECT 1 FROM log_outbox l WHERE l.session_id = ?1 AND l.content_key IS NOT NULL))))";

fn put(tx: &Transaction<'_>, kind: ContentKind, session_id: &str, key: &str, name: &str, value: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO span_content (kind, session_id, key, attr, value) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (kind, session_id, key, attr) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![kind.as_str(), session_id, key, name, value])?;
    Ok(())
}

impl Writer {
    /// Deletes the captured content of sessions that ended before `before`
    /// and have no span left to export: it exists only to go out with its
    /// spans, and prompts are the largest rows of a store. Returns how many
    /// rows it deleted. Works through the whole table in bounded batches
    /// ([`Writer::prune_content_batch`]).
    pub fn prune_content(&mut self, before: f64) -> Result<usize> {
        let mut cursor = ContentCursor::default();
        let mut total = 0;
        loop {
            let (n, more) = self.prune_content_batch(before, f64::NEG_INFINITY, &mut cursor, 256)?;
            total += n;
            if !more {
                return Ok(total);
            }
        }
    }

    /// One step of content retention, in one transaction: looks at the
    /// sessions of up to `limit` content rows after `cursor` and deletes
    /// the content of those that ended before `ended_before` with no span
    /// left in the outbox, or whose last event is before `stale_before`
    /// (their spans, never sent, have left the outbox by then), or whose
    /// run is gone. Returns the rows deleted and whether rows remain after
    /// the cursor (it starts over from the beginning once they do not).
    pub(crate) fn prune_content_batch(
        &mut self,
        ended_before: f64,
        stale_before: f64,
        cursor: &mut ContentCursor,
        limit: usize,
    ) -> Result<(usize, bool)> {
        let tx = self
            .db
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let (kind, session) = cursor.0.clone().unwrap_or_default();
        let rows: Vec<(String, String)> = {
            let mut stmt = tx.prepare_cached(CONTENT_CANDIDATES)?;
            let rows = stmt.query_map(params![kind, session, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let more = rows.len() >= limit;
        let mut deleted = 0;
        {
            let mut prunable = tx.prepare_cached(PRUNABLE_CONTENT)?;
            let mut delete = tx.prepare_cached("DELETE FROM span_content WHERE kind = ?1 AND session_id = ?2")?;
            let mut last: Option<&(String, String)> = None;
            for row in &rows {
                if last == Some(row) {
                    continue;
                }
                last = Some(row);
                let gone: bool = prunable.query_row(
                    params![
                        row.1,
                        ended_before,
                        stale_before,
                        hermes_meter_model::rows::outcome::RUNNING
                    ],
                    |r| r.get(0),
                )?;
                if gone {
                    deleted += delete.execute(params![row.0, row.1])?;
                }
            }
        }
        super::retention::count(&tx, super::retention::pruned::CONTENT, deleted as i64)?;
        tx.commit()?;
        cursor.0 = if more { rows.last().cloned() } else { None };
        Ok((deleted, more))
    }
}

impl Reader {
    /// The captured content attributes of one span, as (attribute, JSON
    /// text), in attribute order. Empty unless capture was on.
    pub fn span_content(&self, kind: ContentKind, session_id: &str, key: &str) -> Result<Vec<(String, String)>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT attr, value FROM span_content WHERE kind = ?1 AND session_id = ?2 AND key = ?3 ORDER BY attr",
        )?;
        let rows = stmt.query_map(params![kind.as_str(), session_id, key], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }
}
