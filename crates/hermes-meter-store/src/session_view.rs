//! Read-only totals for the `/meter` slash command: one session (with the
//! subagents it started) and the spend of a time range.
//!
//! Owns: those two queries. Must not touch: writes of any kind.

use rusqlite::{params, OptionalExtension};

use super::Reader;
use crate::error::Result;

/// Totals of a session and every run whose root it is (its subagents).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct SessionTotals {
    pub session_id: String,
    pub status: String,
    pub model: Option<String>,
    /// The runs counted: the session itself plus its subagents.
    pub runs: i64,
    pub turns: i64,
    pub llm_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    pub cost_usd: f64,
    /// Calls whose cost is 0 because no price was known.
    pub unpriced_llm_calls: i64,
    /// Calls whose tokens were estimated (the provider sent no usage).
    pub estimated_llm_calls: i64,
    pub api_errors: i64,
    pub tool_calls: i64,
    pub tool_failures: i64,
}

/// Spend over a time range, by when each LLM call ended.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct SpendTotals {
    pub llm_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub cost_usd: f64,
    pub sessions: i64,
}

impl Reader {
    /// The totals of `session_id` and its subagents, or `None` if the
    /// store has never seen the session.
    pub fn session_totals(&self, session_id: &str) -> Result<Option<SessionTotals>> {
        let head: Option<(String, Option<String>)> = self
            .conn()
            .query_row(
                "SELECT status, model FROM runs WHERE session_id = ?1",
                params![session_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((status, model)) = head else {
            return Ok(None);
        };
        let totals = self.conn().query_row(
            "SELECT COUNT(*), SUM(turns), SUM(llm_calls), SUM(input_tokens), SUM(output_tokens),
                    SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), SUM(cost_usd),
                    SUM(unpriced_llm_calls), SUM(estimated_llm_calls), SUM(api_errors), SUM(tool_calls),
                    SUM(tool_failures)
             FROM runs WHERE session_id = ?1 OR root_session_id = ?1",
            params![session_id],
            |r| {
                Ok(SessionTotals {
                    session_id: session_id.to_string(),
                    status,
                    model,
                    runs: r.get(0)?,
                    turns: r.get(1)?,
                    llm_calls: r.get(2)?,
                    input_tokens: r.get(3)?,
                    output_tokens: r.get(4)?,
                    cache_read_tokens: r.get(5)?,
                    cache_write_tokens: r.get(6)?,
                    reasoning_tokens: r.get(7)?,
                    cost_usd: r.get(8)?,
                    unpriced_llm_calls: r.get(9)?,
                    estimated_llm_calls: r.get(10)?,
                    api_errors: r.get(11)?,
                    tool_calls: r.get(12)?,
                    tool_failures: r.get(13)?,
                })
            },
        )?;
        Ok(Some(totals))
    }

    /// What the LLM calls that ended in `[since, until)` cost, in all sessions.
    pub fn spend_between(&self, since: f64, until: f64) -> Result<SpendTotals> {
        Ok(self.conn().query_row(
            "SELECT COUNT(*), COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0),
                    COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_write_tokens), 0),
                    COALESCE(SUM(cost_usd), 0), COUNT(DISTINCT session_id)
             FROM llm_calls WHERE ended_at >= ?1 AND ended_at < ?2",
            params![since, until],
            spend_row,
        )?)
    }
}

/// A [`SpendTotals`] from a row of calls, input and output tokens, cache
/// reads and writes, cost and sessions, in that order.
pub(super) fn spend_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SpendTotals> {
    Ok(SpendTotals {
        llm_calls: r.get(0)?,
        input_tokens: r.get(1)?,
        output_tokens: r.get(2)?,
        cache_read_tokens: r.get(3)?,
        cache_write_tokens: r.get(4)?,
        cost_usd: r.get(5)?,
        sessions: r.get(6)?,
    })
}

#[cfg(test)]
mod tests {
    use crate::{EventContext, Writer};
    use hermes_meter_model::hook::{decode, DecodeOptions, Decoded};

    fn apply(store: &mut Writer, hook: &str, at: f64, kwargs: serde_json::Value) {
        let map = kwargs.as_object().expect("object").clone();
        let Decoded::Event(event, _) = decode(hook, &map, at, DecodeOptions::default()) else {
            panic!("{hook} did not decode");
        };
        store.apply(&event, &EventContext::default()).expect("apply");
    }

    fn call(store: &mut Writer, session: &str, n: u32, at: f64) {
        apply(
            store,
            "post_api_request",
            at,
            serde_json::json!({"session_id": session, "api_request_id": format!("{session}:api:{n}"),
                "model": "gpt-4o", "usage": {"input_tokens": 1000, "output_tokens": 100}}),
        );
    }

    #[test]
    fn a_session_counts_its_subagents_and_a_day_counts_all_sessions() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = Writer::open(&dir.path().join("s.db")).expect("open");
        apply(
            &mut store,
            "on_session_start",
            100.0,
            serde_json::json!({"session_id": "p", "platform": "cli"}),
        );
        call(&mut store, "p", 1, 101.0);
        apply(
            &mut store,
            "subagent_start",
            102.0,
            serde_json::json!({"parent_session_id": "p", "child_session_id": "c"}),
        );
        call(&mut store, "c", 1, 103.0);
        call(&mut store, "other", 1, 500.0);

        let totals = store.session_totals("p").expect("query").expect("known session");
        assert_eq!((totals.runs, totals.llm_calls, totals.input_tokens), (2, 2, 2000));
        let one = (1000.0 * 2.5 + 100.0 * 10.0) / 1e6;
        assert!((totals.cost_usd - 2.0 * one).abs() < 1e-12);
        assert_eq!(store.session_totals("nope").expect("query"), None);

        let day = store.spend_between(0.0, 1000.0).expect("query");
        assert_eq!((day.llm_calls, day.sessions), (3, 3));
        assert_eq!(store.spend_between(200.0, 1000.0).expect("query").llm_calls, 1);
    }
}
