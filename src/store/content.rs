//! Captured content, stored per span (`span_content`, schema version 5).
//!
//! Rows exist only for events decoded with content capture on: the decoder
//! drops content otherwise, so there is nothing to write. What arrives here
//! is already redacted and cut ([`crate::redact`]); this module shapes it
//! into the span attribute's JSON text ([`crate::content`]) and upserts it
//! in the event's transaction.

use rusqlite::{params, OptionalExtension, Transaction};

use super::Store;
use crate::content;
use crate::error::Result;
use crate::hook::{DecodeOptions, Hook, HookEvent};
use crate::semconv::attr;

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

fn put(tx: &Transaction<'_>, kind: ContentKind, session_id: &str, key: &str, name: &str, value: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO span_content (kind, session_id, key, attr, value) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (kind, session_id, key, attr) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![kind.as_str(), session_id, key, name, value])?;
    Ok(())
}

impl Store {
    /// Deletes the captured content of sessions that ended before `before`
    /// and have no span left to export: it exists only to go out with its
    /// spans, and prompts are the largest rows of a store. Returns how many
    /// rows it deleted.
    pub fn prune_content(&mut self, before: f64) -> Result<usize> {
        // With capture off (the default) there is nothing to look for.
        let any: Option<i64> = self
            .conn()
            .prepare_cached("SELECT 1 FROM span_content LIMIT 1")?
            .query_row([], |r| r.get(0))
            .optional()?;
        if any.is_none() {
            return Ok(0);
        }
        Ok(self
            .conn()
            .prepare_cached(
                "DELETE FROM span_content
                  WHERE session_id IN (SELECT session_id FROM runs WHERE status != ?1 AND ended_at < ?2)
                    AND session_id NOT IN (SELECT session_id FROM outbox)",
            )?
            .execute(params![super::RUNNING, before])?)
    }

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
