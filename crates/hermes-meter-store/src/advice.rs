//! The recorded LLM calls re-pricing reads (`report --price-as`, the
//! viewer's what-if), and what `hermes-meter advise` reads: a window's
//! calls a session at a time in the order each session made them, the
//! streaks of one tool called again and again in a turn with what the turn
//! spent after each began, and what tool results added to the prompts after
//! them. The rules are the model's `advise.rs`.

use rusqlite::params;

use crate::error::Result;
use crate::Reader;
use hermes_meter_model::hook::Usage;
use hermes_meter_model::price_as::RecordedCall;

/// The columns a [`RecordedCall`] is read from (`l` the call, `r` its run):
/// its session first, and last when it ended, the time it was billed at.
const RECORDED_CALL: &str = "l.session_id, COALESCE(l.routed_model, l.model, ''), l.provider, l.input_tokens,
    l.output_tokens, l.cache_read_tokens, l.cache_write_tokens, l.reasoning_tokens, l.cost_usd, l.cost_source,
    l.estimated, CASE WHEN l.aux_task IS NOT NULL THEN 'auxiliary' WHEN r.parent_session_id IS NOT NULL THEN 'subagent'
                      ELSE COALESCE(r.platform, 'unknown') END, l.ended_at
    FROM llm_calls l LEFT JOIN runs r ON r.session_id = l.session_id";

/// A row of [`RECORDED_CALL`]: the session and the call.
fn recorded_call(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, RecordedCall)> {
    let call = RecordedCall {
        model: r.get(1)?,
        provider: r.get(2)?,
        usage: Usage {
            input_tokens: r.get(3)?,
            output_tokens: r.get(4)?,
            cache_read_tokens: r.get(5)?,
            cache_write_tokens: r.get(6)?,
            reasoning_tokens: r.get(7)?,
            ..Usage::default()
        },
        cost_usd: r.get(8)?,
        cost_source: r.get(9)?,
        estimated: r.get::<_, i64>(10)? != 0,
        kind: r.get(11)?,
        at: r.get(12)?,
    };
    Ok((r.get(0)?, call))
}

impl Reader {
    /// Each LLM call that ended in `[since, until)`, as recorded, for
    /// re-pricing (`report --price-as`); read through the calls' index on
    /// when they ended, one row at a time.
    pub fn for_each_recorded_call(&self, since: f64, until: f64, mut each: impl FnMut(&RecordedCall)) -> Result<()> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {RECORDED_CALL} WHERE l.ended_at >= ?1 AND l.ended_at < ?2"
        ))?;
        let mut rows = stmt.query(params![since, until])?;
        while let Some(r) = rows.next()? {
            each(&recorded_call(r)?.1);
        }
        Ok(())
    }

    /// Each LLM call that started in `[since, until)`, grouped by session
    /// and in the order the session made them, one row at a time.
    pub fn for_each_call_by_session(
        &self,
        since: f64,
        until: f64,
        mut each: impl FnMut(&str, &RecordedCall),
    ) -> Result<()> {
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT {RECORDED_CALL} WHERE l.started_at >= ?1 AND l.started_at < ?2 ORDER BY l.session_id, l.started_at"
        ))?;
        let mut rows = stmt.query(params![since, until])?;
        while let Some(r) = rows.next()? {
            let (session, call) = recorded_call(r)?;
            each(&session, &call);
        }
        Ok(())
    }

    /// Each run of at least `shortest` and at most `longest` calls of one
    /// tool in a row, in one turn, that started in `[since, until)`: its
    /// session, its length, and what the turn's LLM calls from its start on
    /// cost.
    pub fn tool_streaks(
        &self,
        since: f64,
        until: f64,
        (shortest, longest): (i64, i64),
        mut each: impl FnMut(&str, i64, f64),
    ) -> Result<()> {
        let mut cost_after = self.conn().prepare_cached(
            "SELECT TOTAL(cost_usd) FROM llm_calls WHERE session_id = ?1 AND turn_id IS ?2 AND started_at >= ?3",
        )?;
        let mut stmt = self.conn().prepare_cached(
            "SELECT session_id, turn_id, tool_name, started_at FROM tool_calls
              WHERE proxy = 0 AND started_at >= ?1 AND started_at < ?2
              ORDER BY session_id, turn_id, started_at",
        )?;
        let mut rows = stmt.query(params![since, until])?;
        // (session, turn, tool, length, started at)
        let mut run: Option<(String, Option<String>, String, i64, f64)> = None;
        let mut ended = |run: &(String, Option<String>, String, i64, f64)| -> Result<()> {
            if (shortest..=longest).contains(&run.3) {
                let usd: f64 = cost_after.query_row(params![run.0, run.1, run.4], |r| r.get(0))?;
                each(&run.0, run.3, usd);
            }
            Ok(())
        };
        while let Some(r) = rows.next()? {
            let (session, turn, tool, at): (String, Option<String>, String, f64) =
                (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            match &mut run {
                Some(cur) if cur.0 == session && cur.1 == turn && cur.2 == tool => cur.3 += 1,
                _ => {
                    if let Some(done) = run.take() {
                        ended(&done)?;
                    }
                    run = Some((session, turn, tool, 1, at));
                }
            }
        }
        if let Some(done) = run {
            ended(&done)?;
        }
        Ok(())
    }
}

impl Reader {
    /// Per tool, what its results added to the prompts of the LLM calls
    /// that started in `[since, until)` after them: the growth of a call's
    /// prompt over the session's call before, shared among the tools that
    /// ran between the two, and how often each call after re-sent it.
    /// Calls `each(tool, session, model, provider, at, added, calls_after)`.
    #[allow(clippy::type_complexity)]
    pub fn tool_context(
        &self,
        since: f64,
        until: f64,
        mut each: impl FnMut(&str, &str, &str, Option<&str>, f64, f64, i64),
    ) -> Result<()> {
        let mut stmt = self.conn().prepare_cached(
            "WITH calls AS (
                SELECT session_id, started_at, COALESCE(routed_model, model, '') AS model, provider,
                       input_tokens + cache_read_tokens + cache_write_tokens AS prompt,
                       LAG(input_tokens + cache_read_tokens + cache_write_tokens)
                           OVER (PARTITION BY session_id ORDER BY started_at) AS before,
                       LAG(started_at) OVER (PARTITION BY session_id ORDER BY started_at) AS before_at,
                       COUNT(*) OVER (PARTITION BY session_id ORDER BY started_at DESC) AS calls_after
                  FROM llm_calls WHERE started_at >= ?1 AND started_at < ?2 AND cost_source != 'held')
             SELECT t.tool_name, c.session_id, c.model, c.provider, c.started_at,
                    CAST(c.prompt - c.before AS REAL) / COUNT(*) OVER (PARTITION BY c.session_id, c.started_at),
                    c.calls_after
               FROM calls c JOIN tool_calls t
                 ON t.session_id = c.session_id AND t.proxy = 0
                AND t.started_at >= c.before_at AND t.started_at < c.started_at
              WHERE c.before IS NOT NULL AND c.prompt > c.before",
        )?;
        let mut rows = stmt.query(params![since, until])?;
        while let Some(r) = rows.next()? {
            let (tool, session, model): (String, String, String) = (r.get(0)?, r.get(1)?, r.get(2)?);
            let provider: Option<String> = r.get(3)?;
            each(
                &tool,
                &session,
                &model,
                provider.as_deref(),
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            );
        }
        Ok(())
    }
}
