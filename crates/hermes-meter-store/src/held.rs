//! Held LLM calls: those whose usage is beyond what any provider bills in
//! one call (`pricing::usage_beyond_bounds`), recorded at no cost and kept
//! out of budgets until the user confirms them.
//!
//! Owns: listing held calls and confirming them. A confirmation is a
//! journaled event ([`hermes_meter_model::hook::UsageConfirmed`]), applied by the ledger
//! like a hook, so `doctor --rebuild` bills the call again. Must not touch:
//! how a confirmed call is billed (that is the ledger's apply).

use rusqlite::{params, OptionalExtension};

use super::ledger::{Applied, EventContext};
use super::{Reader, Writer};
use crate::error::Result;
use hermes_meter_model::hook::{Hook, HookEvent, UsageConfirmed};

/// One held LLM call, as `held list` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HeldCall {
    pub api_request_id: String,
    pub session_id: String,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub ended_at: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    /// What the price table makes of its usage: what confirming bills.
    pub estimate_usd: Option<f64>,
}

/// What confirming one call did.
#[derive(Debug, Clone, PartialEq)]
pub enum Confirmation {
    /// Billed now at this cost, USD.
    Billed(f64),
    /// The call is recorded but not held (confirmed before, or never held).
    NotHeld,
    /// No LLM call has this id.
    Unknown,
}

impl Reader {
    /// Held calls, the newest first, at most `limit`.
    pub fn held_calls(&self, limit: usize) -> Result<Vec<HeldCall>> {
        // The literal 'held': only then can SQLite use the partial index.
        let mut stmt = self.conn().prepare_cached(
            "SELECT api_request_id, session_id, COALESCE(model, response_model), provider, ended_at, input_tokens,
                    output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, estimate_usd
               FROM llm_calls WHERE cost_source = 'held' ORDER BY ended_at DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map(params![limit as i64], |r| {
            Ok(HeldCall {
                api_request_id: r.get(0)?,
                session_id: r.get(1)?,
                model: r.get(2)?,
                provider: r.get(3)?,
                ended_at: r.get(4)?,
                input_tokens: r.get(5)?,
                output_tokens: r.get(6)?,
                cache_read_tokens: r.get(7)?,
                cache_write_tokens: r.get(8)?,
                reasoning_tokens: r.get(9)?,
                estimate_usd: r.get(10)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

impl Writer {
    /// Confirms the held call `api_request_id` at `now`: it is billed from
    /// its recorded usage, in its run, budgets, report and cost metric.
    pub fn confirm_held(&mut self, api_request_id: &str, now: f64) -> Result<Confirmation> {
        let found: Option<(String, String)> = self
            .conn()
            .prepare_cached("SELECT session_id, cost_source FROM llm_calls WHERE api_request_id = ?1")?
            .query_row(params![api_request_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((session_id, source)) = found else {
            return Ok(Confirmation::Unknown);
        };
        if source != hermes_meter_model::pricing::HELD {
            return Ok(Confirmation::NotHeld);
        }
        let event = HookEvent {
            at: now,
            hook: Hook::UsageConfirmed(UsageConfirmed {
                session_id,
                api_request_id: api_request_id.to_string(),
            }),
        };
        let ctx = EventContext {
            pid: Some(std::process::id() as i64),
            ..EventContext::default()
        };
        if self.apply(&event, &ctx)? != Applied::New {
            return Ok(Confirmation::NotHeld);
        }
        let cost: f64 = self
            .conn()
            .prepare_cached("SELECT cost_usd FROM llm_calls WHERE api_request_id = ?1")?
            .query_row(params![api_request_id], |r| r.get(0))?;
        Ok(Confirmation::Billed(cost))
    }
}
