//! Read-only queries for reports and `status`.

use rusqlite::{params, OptionalExtension};

use super::Reader;
use crate::error::Result;

/// Hands every fact in `[since, until)` to `each`, one row at a time.
pub(super) fn for_each_fact(
    conn: &rusqlite::Connection,
    since: f64,
    until: f64,
    mut each: impl FnMut(FactRow),
) -> Result<()> {
    let mut stmt = conn.prepare_cached(&FACTS)?;
    let rows = stmt.query_map(params![since, until], fact_row)?;
    for row in rows {
        each(row?);
    }
    Ok(())
}

use hermes_meter_model::report::{Builder, Dim, Report, Totals};
use hermes_meter_model::report::{FactKind, FactRow, RunSummary};

/// Runs, most expensive first, with when they started.
pub(super) const RUNS_BY_COST: &str =
    "SELECT session_id, started_at FROM runs INDEXED BY runs_cost ORDER BY cost_usd DESC";

/// A cost that sorts most expensive first.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Costlier(f64);

impl Eq for Costlier {}

impl PartialOrd for Costlier {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Costlier {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.total_cmp(&self.0)
    }
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

/// The facts each arm's condition selects (`l` an LLM call, `e` a failed
/// attempt, `t` a tool call), with the columns [`fact_row`] reads.
fn facts_sql(llm: &str, error: &str, tool: &str) -> String {
    format!(
        "SELECT 0, l.ended_at, l.session_id, l.model, l.provider, root.sender_id, root.cron_job_id,
                l.input_tokens, l.output_tokens, l.cache_read_tokens, l.cache_write_tokens, l.reasoning_tokens,
                l.cost_usd, l.estimated, l.cost_source = 'unknown', NULL, NULL, NULL, l.aux_task,
                CASE WHEN l.cost_source IN ('provider', 'provider_upstream') THEN COALESCE(l.estimate_usd, l.cost_usd) END, r.started_at
           FROM llm_calls l JOIN runs r ON r.session_id = l.session_id
           JOIN runs root ON root.session_id = r.root_session_id
          WHERE {llm}
         UNION ALL
         SELECT 1, e.ended_at, e.session_id, e.model, e.provider, root.sender_id, root.cron_job_id,
                0, 0, 0, 0, 0, 0.0, 0, 0, NULL, NULL, NULL, NULL, NULL, r.started_at
           FROM llm_call_errors e JOIN runs r ON r.session_id = e.session_id
           JOIN runs root ON root.session_id = r.root_session_id
          WHERE {error}
         UNION ALL
         SELECT 2, t.ended_at, t.session_id, r.model, r.provider, root.sender_id, root.cron_job_id,
                0, 0, 0, 0, 0, 0.0, 0, 0, t.status, t.ok, t.exit_code, NULL, NULL, r.started_at
           FROM tool_calls t JOIN runs r ON r.session_id = t.session_id
           JOIN runs root ON root.session_id = r.root_session_id
          WHERE t.ended_at IS NOT NULL AND t.proxy = 0 AND {tool}"
    )
}

/// Every fact that ended in `[?1, ?2)`; each arm reads its table's index
/// on when rows ended, so a window costs what it holds.
pub(super) static FACTS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    facts_sql(
        "l.ended_at >= ?1 AND l.ended_at < ?2",
        "e.ended_at >= ?1 AND e.ended_at < ?2",
        "t.ended_at >= ?1 AND t.ended_at < ?2",
    )
});

/// Every fact of session `?1`, through each table's session index.
pub(super) static SESSION_FACTS: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| facts_sql("l.session_id = ?1", "e.session_id = ?1", "t.session_id = ?1"));

/// The kind of a fact row (its number in column `kind`) and, for a tool
/// call, how it ended (from its status, ok and exit code in the columns
/// from `status` on).
fn kind_and_outcome(
    r: &rusqlite::Row<'_>,
    kind: usize,
    status: usize,
) -> rusqlite::Result<(FactKind, Option<hermes_meter_model::tool_outcome::ToolOutcome>)> {
    let kind = match r.get::<_, i64>(kind)? {
        0 => FactKind::LlmCall,
        1 => FactKind::ApiError,
        _ => FactKind::ToolCall,
    };
    if kind != FactKind::ToolCall {
        return Ok((kind, None));
    }
    let text = r.get_ref(status)?.as_str_or_null().map_err(rusqlite::Error::from)?;
    let outcome = hermes_meter_model::tool_outcome::ToolOutcome::of(true, text, r.get(status + 1)?, r.get(status + 2)?);
    Ok((kind, Some(outcome)))
}

/// A fact from a row of [`facts_sql`]'s columns.
pub(super) fn fact_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FactRow> {
    let (kind, tool_outcome) = kind_and_outcome(r, 0, 15)?;
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
        provider_estimate_usd: r.get(19)?,
        session_started_at: r.get(20)?,
    })
}

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

/// How many LLM calls in `[?1, ?2)` were held (see [`Reader::held_llm_calls`]).
pub(super) const HELD_CALLS: &str =
    "SELECT COUNT(*) FROM llm_calls WHERE cost_source = 'held' AND ended_at >= ?1 AND ended_at < ?2";

impl Reader {
    /// The report of `[since, until)`, days counted in `tz`, listing all
    /// sessions that started in it (`top: None`) or the `top` most
    /// expensive. Rollups answer for the buckets below their mark, the
    /// ledger for the rest (the window's first part quarter hour, and what
    /// the sweep has not rolled up yet).
    pub fn report(&self, tz: &jiff::tz::TimeZone, since: f64, until: f64, top: Option<usize>) -> Result<Report> {
        let (mut builder, sessions) = self.report_builder(tz, since, until)?;
        let Some(top) = top else {
            self.for_each_session_by_cost(since, until, |session, totals| {
                builder.add_session(session.to_string(), totals);
                Ok(())
            })?;
            return self.with_extras(builder.finish(), since, until);
        };
        // The few most expensive: a statement each, a few rows each.
        let conn = self.conn();
        for session in self.sessions_started(since, until, sessions, top)? {
            let mut totals = Totals::one_session();
            let mut stmt = conn.prepare_cached(&SESSION_FACTS)?;
            for fact in stmt.query_map(params![session], fact_row)? {
                totals.add(&Totals::of_fact(&fact?));
            }
            builder.add_session(session, totals);
        }
        self.with_extras(builder.finish(), since, until)
    }

    /// `report` with its cache summary and its downgraded calls.
    fn with_extras(&self, report: Report, since: f64, until: f64) -> Result<Report> {
        let mut report = self.with_cache(report);
        report.downgraded = self.downgraded_calls(since, until)?;
        Ok(report)
    }

    /// The LLM calls of `[since, until)` routed to another model than the
    /// agent's, by the two models. Reads the `llm_calls_routed` index,
    /// which holds those rows alone (the ledger's: calls retention removed
    /// are no longer counted here).
    pub(crate) fn downgraded_calls(
        &self,
        since: f64,
        until: f64,
    ) -> Result<Vec<hermes_meter_model::report::Downgraded>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT model, routed_model, COUNT(*), TOTAL(cost_usd) FROM llm_calls
             WHERE routed_model IS NOT NULL AND ended_at >= ?1 AND ended_at < ?2
             GROUP BY model, routed_model ORDER BY TOTAL(cost_usd) DESC",
        )?;
        let rows = stmt.query_map(params![since, until], |r| {
            Ok(hermes_meter_model::report::Downgraded {
                from: r.get(0)?,
                to: r.get(1)?,
                llm_calls: r.get(2)?,
                cost_usd: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// `report` with its cache summary, at this store's prices.
    fn with_cache(&self, mut report: Report) -> Report {
        let prices = &self.prices;
        report.cache = hermes_meter_model::report::cache_summary(&report, |model| {
            prices.lookup(model, None).0.map(|p| prices.resolved(&p))
        });
        report
    }

    /// LLM calls held for usage beyond what any provider bills in one call
    /// (`pricing::PriceSource::Held`), in `[since, until)` or, with no
    /// window, in the whole store. Reads the `llm_calls_held` index, which
    /// holds those rows alone.
    pub fn held_llm_calls(&self, window: Option<(f64, f64)>) -> Result<i64> {
        let (since, until) = window.unwrap_or((f64::MIN, f64::MAX));
        // The literal, not a parameter: only then can SQLite use the
        // partial index (`pricing::HELD` is the same word; a test holds it).
        Ok(self.conn().query_row(HELD_CALLS, params![since, until], |r| r.get(0))?)
    }

    /// The report of `[since, until)` without its session list, which
    /// `report --json` writes as [`Reader::for_each_session_by_cost`] hands
    /// it over rather than holding it.
    pub fn report_without_sessions(&self, tz: &jiff::tz::TimeZone, since: f64, until: f64) -> Result<Report<()>> {
        let (builder, _) = self.report_builder(tz, since, until)?;
        Ok(self.with_extras(builder.finish(), since, until)?.with_sessions(()))
    }

    /// Every sum of the report of `[since, until)` but its session list,
    /// and how many sessions started in it.
    fn report_builder(&self, tz: &jiff::tz::TimeZone, since: f64, until: f64) -> Result<(Builder, i64)> {
        use super::rollup::{ceil_to, floor_to, QUARTER};
        let conn = self.conn();
        let mut builder = Builder::new(tz, since, until);
        builder.held(self.held_llm_calls(Some((since, until)))?);
        // Sessions that started in the window, for choosing how to list them.
        let mut sessions = 0;
        let mut add = |bucket: i64, dim: Dim, key: &str, t: &Totals, estimate: f64| {
            if dim == Dim::All {
                sessions += t.sessions;
            }
            builder.add(dim, key, bucket as f64, t, estimate);
        };
        let rolled_from = ceil_to(since, QUARTER);
        let rolled_to = floor_to(until, QUARTER).min(super::rollup::rolled_until(conn)?);
        let mut ledger_parts = vec![(since, until)];
        if rolled_from < rolled_to {
            ledger_parts = vec![(since, rolled_from as f64), (rolled_to as f64, until)];
            super::rollup::for_each_rolled(conn, tz, rolled_from, rolled_to, &mut add)?;
        }
        for (from, to) in ledger_parts {
            if from < to {
                for (bucket, dim, key, t, estimate) in super::rollup::gather(conn, from, to)?.rows() {
                    add(bucket, dim, &key, &t, estimate);
                }
            }
        }
        Ok((builder, sessions))
    }

    /// The `top` most expensive of the sessions that started in `[since,
    /// until)` (`count` of them). For the few most expensive of a long
    /// window it walks runs by cost and keeps those of the window, which
    /// reads about `top × runs / count` rows, when that is fewer than the
    /// window's `count`.
    fn sessions_started(&self, since: f64, until: f64, count: i64, top: usize) -> Result<Vec<String>> {
        let conn = self.conn();
        if top == 0 || count == 0 {
            return Ok(Vec::new());
        }
        let runs = self.store_count("runs")?.max(1);
        let walk = i64::try_from(top).unwrap_or(i64::MAX).saturating_mul(runs) / count.max(1);
        // `top` may be any `--limit`; what is kept is at most the window's runs.
        let mut out = Vec::with_capacity(top.min(usize::try_from(count).unwrap_or(0)));
        if walk < count {
            let mut stmt = conn.prepare_cached(RUNS_BY_COST)?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let at: f64 = r.get(1)?;
                if at >= since && at < until {
                    out.push(r.get(0)?);
                    if out.len() == top {
                        break;
                    }
                }
            }
            return Ok(out);
        }
        // The window's runs, keeping the `top` most expensive (ties by id).
        let mut best: std::collections::BTreeSet<(Costlier, String)> = std::collections::BTreeSet::new();
        let mut stmt =
            conn.prepare_cached("SELECT session_id, cost_usd FROM runs WHERE started_at >= ?1 AND started_at < ?2")?;
        let mut rows = stmt.query(params![since, until])?;
        while let Some(r) = rows.next()? {
            let entry = (Costlier(r.get(1)?), r.get::<_, String>(0)?);
            if best.len() < top {
                best.insert(entry);
            } else if best.last().is_some_and(|worst| entry < *worst) {
                best.insert(entry);
                best.pop_last();
            }
        }
        out.extend(best.into_iter().map(|(_, id)| id));
        Ok(out)
    }

    /// One run by session id.
    pub fn run(&self, session_id: &str) -> Result<Option<RunSummary>> {
        let sql = format!("{RUN_SUMMARY} WHERE session_id = ?1");
        let mut stmt = self.conn().prepare_cached(&sql)?;
        Ok(stmt.query_row(params![session_id], run_summary).optional()?)
    }

    /// The session ids of the runs started in `[since, until)` (by the
    /// `started_at` index), and when the store's first run started: what
    /// `status` compares Hermes's own sessions with.
    pub fn run_ids_started(&self, since: f64, until: f64) -> Result<(std::collections::HashSet<String>, Option<f64>)> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT session_id FROM runs WHERE started_at >= ?1 AND started_at < ?2")?;
        let ids = stmt
            .query_map(params![since, until], |r| r.get::<_, String>(0))?
            .collect::<std::result::Result<_, _>>()?;
        let first = self
            .conn()
            .query_row("SELECT MIN(started_at) FROM runs", [], |r| r.get::<_, Option<f64>>(0))?;
        Ok((ids, first))
    }

    /// The failed attempts recorded for the LLM request `api_request_id`
    /// (by its unique key's index): every retry, recovery cycles included.
    pub fn failed_attempts(&self, api_request_id: &str) -> Result<i64> {
        Ok(self
            .conn()
            .prepare_cached("SELECT COUNT(*) FROM llm_call_errors WHERE api_request_id = ?1")?
            .query_row(params![api_request_id], |r| r.get(0))?)
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
    use crate::Writer;

    /// `report` over a window, `status` and `export --since` read what
    /// their window holds through indexes, never a ledger table whole:
    /// their cost follows their answer, not the store's age.
    /// Counting held calls reads the partial index of held rows alone, and
    /// the statement's literal is the spelling the pricing code stores.
    #[test]
    fn held_calls_are_counted_from_their_own_index() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("plan.db")).expect("open");
        assert!(HELD_CALLS.contains(&format!("cost_source = '{}'", hermes_meter_model::pricing::HELD)));
        let plan = store.query_plan(HELD_CALLS, "1").join("\n");
        assert!(plan.contains("llm_calls_held"), "{plan}");
    }

    #[test]
    fn reports_status_and_export_since_read_their_window_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("plan.db")).expect("open");
        let runs_started = format!("{RUN_SUMMARY} WHERE started_at >= ?1 AND started_at < ?2 ORDER BY started_at");
        for sql in [
            FACTS.as_str(),
            SESSION_FACTS.as_str(),
            runs_started.as_str(),
            super::super::outbox::HISTORY,
            "SELECT n FROM store_counts WHERE name = ?1",
        ] {
            store.assert_indexed(sql);
        }
    }
}
