//! The viewer's index: one page of sessions under a filter, and the totals
//! of every session the filter selects.
//!
//! Owns: those reads and the statements behind them (with their plans, for
//! the test that holds them to indexes). Must not touch: writes of any
//! kind; `run_hours` is kept by the triggers of migration 0016.
//!
//! # Proportional to the page, not the store
//!
//! - Totals read `run_hours` (per UTC hour a run started in and per filter
//!   value) for the whole hours of the window, and `runs` for the edges of
//!   a window that does not begin or end on an hour.
//! - A page sorted newest first walks `runs_started`; with a platform,
//!   cron job, sender or model filter it reads only the hours `run_hours`
//!   says hold matching runs, newest first, until the page is full.
//! - By cost it walks `runs_cost`; by duration `runs_duration` (settled
//!   runs) merged with the running ones. A filter there is checked row by
//!   row along the index.

use rusqlite::types::Value;

use super::Store;
use crate::error::Result;

/// Seconds in the buckets of `run_hours`.
const HOUR: f64 = 3600.0;
/// The most rows one page holds.
const MOST_ROWS: usize = 1000;

/// Which sessions the index lists.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionFilter {
    /// Started in `[since, until)`, Unix seconds.
    pub since: Option<f64>,
    pub until: Option<f64>,
    pub platform: Option<String>,
    pub cron_job_id: Option<String>,
    pub sender_id: Option<String>,
    pub model: Option<String>,
    pub sort: SessionSort,
    pub limit: usize,
    pub offset: usize,
}

/// The order of the session list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SessionSort {
    /// Newest first.
    #[default]
    Newest,
    /// Most expensive first.
    Cost,
    /// Longest first.
    Duration,
}

impl SessionSort {
    /// `newest`, `cost` or `duration`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "newest" | "" => Some(SessionSort::Newest),
            "cost" => Some(SessionSort::Cost),
            "duration" => Some(SessionSort::Duration),
            _ => None,
        }
    }

    /// The name [`SessionSort::parse`] reads.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionSort::Newest => "newest",
            SessionSort::Cost => "cost",
            SessionSort::Duration => "duration",
        }
    }
}

/// One session in the list.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct SessionListRow {
    pub session_id: String,
    pub parent_session_id: Option<String>,
    pub platform: Option<String>,
    pub cron_job_id: Option<String>,
    pub sender_id: Option<String>,
    pub model: Option<String>,
    pub started_at: f64,
    /// When it ended, else its last event.
    pub last_at: f64,
    pub status: String,
    pub turns: i64,
    pub llm_calls: i64,
    /// Including cache reads and writes.
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub api_errors: i64,
    pub tool_calls: i64,
    pub tool_failures: i64,
}

/// Totals over every session a filter selects (not only the page).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct SessionListTotals {
    pub sessions: i64,
    pub llm_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: f64,
    pub api_errors: i64,
}

/// A statement and its arguments.
struct Query {
    sql: String,
    args: Vec<Value>,
}

/// The terms of a WHERE clause and their arguments, numbered as pushed.
#[derive(Default, Clone)]
struct Terms {
    terms: Vec<String>,
    args: Vec<Value>,
}

impl Terms {
    /// Adds `column op ?N` bound to `value`.
    fn push(&mut self, column: &str, op: &str, value: Value) {
        self.args.push(value);
        self.terms.push(format!("{column} {op} ?{}", self.args.len()));
    }

    /// The platform, cron job, sender and model the filter names (the
    /// same column names in `runs` and `run_hours`).
    fn dimensions(filter: &SessionFilter) -> Self {
        let mut terms = Terms::default();
        for (column, value) in [
            ("platform", &filter.platform),
            ("cron_job_id", &filter.cron_job_id),
            ("sender_id", &filter.sender_id),
            ("model", &filter.model),
        ] {
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                terms.push(column, "=", Value::Text(v.to_string()));
            }
        }
        terms
    }

    /// Runs started in `[since, until)` (either end open).
    fn started(mut self, since: Option<f64>, until: Option<f64>) -> Self {
        if let Some(since) = since {
            self.push("started_at", ">=", Value::Real(since));
        }
        if let Some(until) = until {
            self.push("started_at", "<", Value::Real(until));
        }
        self
    }

    fn and(mut self, term: &str) -> Self {
        self.terms.push(term.to_string());
        self
    }

    fn clause(&self) -> String {
        if self.terms.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.terms.join(" AND "))
        }
    }
}

const ROW_COLUMNS: &str = "session_id, parent_session_id, platform, cron_job_id, sender_id, model, started_at,
    COALESCE(ended_at, last_event_at), status, turns, llm_calls,
    input_tokens + cache_read_tokens + cache_write_tokens, output_tokens, cost_usd, api_errors,
    tool_calls, tool_failures";

const DURATION: &str = "COALESCE(ended_at, last_event_at) - started_at";

/// The page of `filter` over the runs `terms` select, `skip` rows skipped.
fn page_query(filter: &SessionFilter, terms: &Terms, take: usize, skip: usize) -> Query {
    let sql = match filter.sort {
        SessionSort::Newest => format!(
            "SELECT {ROW_COLUMNS} FROM runs {} ORDER BY started_at DESC LIMIT {take} OFFSET {skip}",
            terms.clause()
        ),
        SessionSort::Cost => format!(
            "SELECT {ROW_COLUMNS} FROM runs {} ORDER BY cost_usd DESC, started_at DESC LIMIT {take} OFFSET {skip}",
            terms.clause()
        ),
        // Settled runs from their index (no more than the page needs),
        // running ones from theirs; the union is at most a page plus the
        // runs still open.
        SessionSort::Duration => {
            let settled = terms.clone().and("status != 'running'").clause();
            let running = terms.clone().and("status = 'running'").clause();
            format!(
                "SELECT * FROM (
                   SELECT * FROM (SELECT {ROW_COLUMNS}, {DURATION} AS d FROM runs {settled}
                                   ORDER BY {DURATION} DESC, started_at DESC LIMIT {})
                   UNION ALL
                   SELECT {ROW_COLUMNS}, {DURATION} AS d FROM runs {running})
                 ORDER BY d DESC, started_at DESC LIMIT {take} OFFSET {skip}",
                take + skip
            )
        }
    };
    Query {
        sql,
        args: terms.args.clone(),
    }
}

/// The statements that total the sessions `filter` selects: whole hours
/// from `run_hours`, a window's partial hours from `runs`.
fn totals_queries(filter: &SessionFilter) -> Vec<Query> {
    let sums = "COUNT(*), COALESCE(SUM(llm_calls), 0),
                COALESCE(SUM(input_tokens + cache_read_tokens + cache_write_tokens), 0),
                COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost_usd), 0), COALESCE(SUM(api_errors), 0)";
    let runs = |since: Option<f64>, until: Option<f64>| {
        let terms = Terms::dimensions(filter).started(since, until);
        Query {
            sql: format!("SELECT {sums} FROM runs {}", terms.clause()),
            args: terms.args,
        }
    };
    // The whole hours inside the window.
    let first = filter.since.map(|s| (s / HOUR).ceil() * HOUR);
    let end = filter.until.map(|u| (u / HOUR).floor() * HOUR);
    if let (Some(first), Some(end)) = (first, end) {
        if first >= end {
            return vec![runs(filter.since, filter.until)];
        }
    }
    let mut terms = Terms::dimensions(filter);
    if let Some(first) = first {
        terms.push("hour", ">=", Value::Integer(first as i64));
    }
    if let Some(end) = end {
        terms.push("hour", "<", Value::Integer(end as i64));
    }
    let mut out = vec![Query {
        sql: format!(
            "SELECT COALESCE(SUM(sessions), 0), COALESCE(SUM(llm_calls), 0), COALESCE(SUM(input_tokens), 0),
                    COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost_usd), 0), COALESCE(SUM(api_errors), 0)
               FROM run_hours {}",
            terms.clause()
        ),
        args: terms.args,
    }];
    if let (Some(since), Some(first)) = (filter.since, first) {
        if since < first {
            out.push(runs(Some(since), Some(first)));
        }
    }
    if let (Some(end), Some(until)) = (end, filter.until) {
        if end < until {
            out.push(runs(Some(end), Some(until)));
        }
    }
    out
}

/// Matching runs per hour, newest hour first, within the filter's window.
fn hours_query(filter: &SessionFilter) -> Query {
    let mut terms = Terms::dimensions(filter);
    if let Some(since) = filter.since {
        terms.push("hour", ">=", Value::Integer(((since / HOUR).floor() * HOUR) as i64));
    }
    if let Some(until) = filter.until {
        terms.push("hour", "<", Value::Integer(until.ceil() as i64));
    }
    Query {
        sql: format!(
            "SELECT hour, SUM(sessions) FROM run_hours {} GROUP BY hour HAVING SUM(sessions) > 0 ORDER BY hour DESC",
            terms.clause()
        ),
        args: terms.args,
    }
}

/// Whether the filter names a platform, cron job, sender or model.
fn has_dimensions(filter: &SessionFilter) -> bool {
    !Terms::dimensions(filter).terms.is_empty()
}

impl Store {
    /// One page of sessions matching `filter`, and the totals of all of them.
    pub fn session_list(&self, filter: &SessionFilter) -> Result<(Vec<SessionListRow>, SessionListTotals)> {
        let totals = self.list_totals(filter)?;
        let take = filter.limit.clamp(1, MOST_ROWS);
        if totals.sessions <= filter.offset as i64 {
            return Ok((Vec::new(), totals));
        }
        let rows = if filter.sort == SessionSort::Newest && has_dimensions(filter) {
            self.newest_by_hours(filter, take)?
        } else {
            let terms = Terms::dimensions(filter).started(filter.since, filter.until);
            self.list_rows(&page_query(filter, &terms, take, filter.offset))?
        };
        Ok((rows, totals))
    }

    fn list_totals(&self, filter: &SessionFilter) -> Result<SessionListTotals> {
        let mut totals = SessionListTotals::default();
        for q in totals_queries(filter) {
            let part =
                self.conn()
                    .prepare_cached(&q.sql)?
                    .query_row(rusqlite::params_from_iter(q.args.iter()), |r| {
                        Ok(SessionListTotals {
                            sessions: r.get(0)?,
                            llm_calls: r.get(1)?,
                            input_tokens: r.get(2)?,
                            output_tokens: r.get(3)?,
                            cost_usd: r.get(4)?,
                            api_errors: r.get(5)?,
                        })
                    })?;
            totals.sessions += part.sessions;
            totals.llm_calls += part.llm_calls;
            totals.input_tokens += part.input_tokens;
            totals.output_tokens += part.output_tokens;
            totals.cost_usd += part.cost_usd;
            totals.api_errors += part.api_errors;
        }
        Ok(totals)
    }

    /// Newest first under a platform, cron job, sender or model filter:
    /// reads only the hours holding matching runs, newest first (neighbouring
    /// hours as one range), until the page and the rows before it are read.
    /// The hours' counts only group the reads; the rows decide.
    fn newest_by_hours(&self, filter: &SessionFilter, take: usize) -> Result<Vec<SessionListRow>> {
        let q = hours_query(filter);
        let mut stmt = self.conn().prepare_cached(&q.sql)?;
        // Read lazily: the hours come newest first in the table's key order,
        // and the loop stops as soon as the page is full.
        let mut hours = stmt
            .query_map(rusqlite::params_from_iter(q.args.iter()), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })?
            .peekable();
        let need = filter.offset + take;
        let mut rows = Vec::new();
        while rows.len() < need {
            let Some(first) = hours.next() else { break };
            let (top, mut matched) = first?;
            let mut bottom = top;
            while (rows.len() as i64) + matched < need as i64 {
                match hours.peek() {
                    Some(Ok((hour, n))) if hour + HOUR as i64 == bottom => {
                        (bottom, matched) = (*hour, matched + n);
                        hours.next();
                    }
                    _ => break,
                }
            }
            let since = filter.since.map_or(bottom as f64, |s| s.max(bottom as f64));
            let until = filter.until.map_or(top as f64 + HOUR, |u| u.min(top as f64 + HOUR));
            let terms = Terms::dimensions(filter).started(Some(since), Some(until));
            rows.extend(self.list_rows(&page_query(filter, &terms, need - rows.len(), 0))?);
        }
        Ok(rows.into_iter().skip(filter.offset).collect())
    }

    fn list_rows(&self, q: &Query) -> Result<Vec<SessionListRow>> {
        let mut stmt = self.conn().prepare_cached(&q.sql)?;
        let rows = stmt.query_map(rusqlite::params_from_iter(q.args.iter()), |r| {
            Ok(SessionListRow {
                session_id: r.get(0)?,
                parent_session_id: r.get(1)?,
                platform: r.get(2)?,
                cron_job_id: r.get(3)?,
                sender_id: r.get(4)?,
                model: r.get(5)?,
                started_at: r.get(6)?,
                last_at: r.get(7)?,
                status: r.get(8)?,
                turns: r.get(9)?,
                llm_calls: r.get(10)?,
                input_tokens: r.get(11)?,
                output_tokens: r.get(12)?,
                cost_usd: r.get(13)?,
                api_errors: r.get(14)?,
                tool_calls: r.get(15)?,
                tool_failures: r.get(16)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// SQLite's plan for every statement the index runs under `filter`
    /// (each sort, the totals, the hours a filtered page reads), one line
    /// per step, for the test that holds them to indexes.
    pub fn session_list_plans(&self, filter: &SessionFilter) -> Result<Vec<(String, String)>> {
        let mut queries = Vec::new();
        let terms = Terms::dimensions(filter).started(filter.since, filter.until);
        for sort in [SessionSort::Newest, SessionSort::Cost, SessionSort::Duration] {
            let sorted = SessionFilter { sort, ..filter.clone() };
            queries.push((
                format!("index by {}", sort.as_str()),
                page_query(&sorted, &terms, 50, 0),
            ));
        }
        for (i, q) in totals_queries(filter).into_iter().enumerate() {
            queries.push((format!("totals {i}"), q));
        }
        queries.push(("hours".to_string(), hours_query(filter)));
        let mut out = Vec::new();
        for (name, q) in queries {
            let mut stmt = self.conn().prepare(&format!("EXPLAIN QUERY PLAN {}", q.sql))?;
            let rows = stmt.query_map(rusqlite::params_from_iter(q.args.iter()), |r| r.get::<_, String>(3))?;
            for detail in rows {
                out.push((name.clone(), detail?));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list as it read before `run_hours`: every run the filter
    /// selects, sorted in full. The reference the fast reads must equal.
    fn reference(store: &Store, filter: &SessionFilter) -> (Vec<String>, SessionListTotals) {
        let terms = Terms::dimensions(filter).started(filter.since, filter.until);
        let order = match filter.sort {
            SessionSort::Newest => "started_at DESC".to_string(),
            SessionSort::Cost => "cost_usd DESC, started_at DESC".to_string(),
            SessionSort::Duration => format!("{DURATION} DESC, started_at DESC"),
        };
        let mut stmt = store
            .conn()
            .prepare(&format!(
                "SELECT session_id FROM runs {} ORDER BY {order} LIMIT {} OFFSET {}",
                terms.clause(),
                filter.limit,
                filter.offset
            ))
            .expect("prepare");
        let ids = stmt
            .query_map(rusqlite::params_from_iter(terms.args.iter()), |r| r.get(0))
            .expect("query")
            .collect::<rusqlite::Result<Vec<String>>>()
            .expect("rows");
        let totals = store
            .conn()
            .query_row(
                &format!(
                    "SELECT COUNT(*), COALESCE(SUM(llm_calls), 0),
                        COALESCE(SUM(input_tokens + cache_read_tokens + cache_write_tokens), 0),
                        COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost_usd), 0), COALESCE(SUM(api_errors), 0)
                       FROM runs {}",
                    terms.clause()
                ),
                rusqlite::params_from_iter(terms.args.iter()),
                |r| {
                    Ok(SessionListTotals {
                        sessions: r.get(0)?,
                        llm_calls: r.get(1)?,
                        input_tokens: r.get(2)?,
                        output_tokens: r.get(3)?,
                        cost_usd: r.get(4)?,
                        api_errors: r.get(5)?,
                    })
                },
            )
            .expect("totals");
        (ids, totals)
    }

    /// `run_hours` holds exactly the sums of `runs` by start hour and
    /// filter values.
    fn assert_hours_match(store: &Store) {
        let read = |sql: &str| -> Vec<String> {
            let mut stmt = store.conn().prepare(sql).expect("prepare");
            stmt.query_map([], |r| {
                Ok(format!(
                    "{} {} {} {} {} n={} calls={} in={} out={} cost={:.9} err={}",
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, i64>(6)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, i64>(8)?,
                    r.get::<_, f64>(9)?,
                    r.get::<_, i64>(10)?
                ))
            })
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
        };
        // (A row whose runs all moved or went stays at zero sessions.)
        let kept = read("SELECT * FROM run_hours WHERE sessions != 0 ORDER BY 1, 2, 3, 4, 5");
        let summed = read(
            "SELECT CAST(started_at / 3600 AS INTEGER) * 3600, COALESCE(platform, ''), COALESCE(cron_job_id, ''),
                    COALESCE(sender_id, ''), COALESCE(model, ''), COUNT(*), SUM(llm_calls),
                    SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens), SUM(cost_usd),
                    SUM(api_errors)
               FROM runs GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5",
        );
        assert_eq!(kept, summed);
    }

    /// A store of `n` runs over four days: a few platforms, models,
    /// senders and cron jobs, unpriced runs (equal costs), running ones.
    fn store_of(n: usize) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open(&dir.path().join("s.db")).expect("open");
        let mut insert = store
            .conn()
            .prepare(
                "INSERT INTO runs (session_id, root_session_id, platform, cron_job_id, sender_id, model, started_at,
                                   ended_at, last_event_at, status, llm_calls, input_tokens, cache_read_tokens,
                                   output_tokens, cost_usd, api_errors)
                 VALUES (?1, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
            )
            .expect("prepare");
        for i in 0..n {
            let started = 1_790_000_000.0 + (i as f64) * 4.0 * 86_400.0 / n as f64 + (i % 7) as f64 * 0.37;
            let running = i % 11 == 0;
            let last = started + ((i * 37) % 900) as f64;
            let platform = ["cli", "telegram", "discord"][i % 3];
            let cron = (i % 17 == 0).then(|| format!("job{}", i % 2));
            let sender = (platform != "cli").then(|| format!("u{}", i % 5));
            let model = (i % 13 != 0).then(|| ["gpt-4o", "claude"][i % 2]);
            let cost = if i % 4 == 0 { 0.0 } else { (i % 9) as f64 * 0.0125 };
            insert
                .execute(rusqlite::params![
                    format!("s{i:05}"),
                    platform,
                    cron,
                    sender,
                    model,
                    started,
                    (!running).then_some(last),
                    last,
                    if running { "running" } else { "ok" },
                    (i % 6) as i64,
                    (i % 6) as i64 * 1000,
                    (i % 3) as i64 * 10,
                    (i % 6) as i64 * 100,
                    cost,
                    (i % 2) as i64
                ])
                .expect("insert");
        }
        drop(insert);
        (dir, store)
    }

    /// Midnight of a date in a zone, Unix seconds.
    fn midnight(date: &str, zone: &str) -> f64 {
        let tz = jiff::tz::TimeZone::get(zone).expect("zone");
        let at = date
            .parse::<jiff::civil::Date>()
            .expect("date")
            .to_zoned(tz)
            .expect("zoned");
        at.timestamp().as_second() as f64
    }

    fn filters() -> Vec<SessionFilter> {
        let mut out = Vec::new();
        let windows = [
            (None, None),
            (Some(midnight("2026-09-22", "UTC")), Some(midnight("2026-09-23", "UTC"))),
            (
                Some(midnight("2026-09-22", "Asia/Kathmandu")),
                Some(midnight("2026-09-23", "Asia/Kathmandu")),
            ),
            (Some(midnight("2026-09-22", "Asia/Kolkata")), None),
            (Some(1_790_100_000.5), Some(1_790_101_000.25)),
        ];
        // platform, cron job, sender, model
        let dims: [[Option<&str>; 4]; 6] = [
            [None, None, None, None],
            [Some("telegram"), None, None, None],
            [None, None, None, Some("claude")],
            [Some("discord"), None, Some("u3"), Some("gpt-4o")],
            [None, Some("job1"), None, None],
            [Some("slack"), None, None, None],
        ];
        for (since, until) in windows {
            for [platform, cron, sender, model] in dims {
                for sort in [SessionSort::Newest, SessionSort::Cost, SessionSort::Duration] {
                    for (limit, offset) in [(50, 0), (7, 30), (50, 400)] {
                        out.push(SessionFilter {
                            since,
                            until,
                            platform: platform.map(str::to_string),
                            cron_job_id: cron.map(str::to_string),
                            sender_id: sender.map(str::to_string),
                            model: model.map(str::to_string),
                            sort,
                            limit,
                            offset,
                        });
                    }
                }
            }
        }
        out
    }

    fn assert_list_matches(store: &Store) {
        for filter in filters() {
            let (rows, totals) = store.session_list(&filter).expect("list");
            let (ids, want) = reference(store, &filter);
            let got: Vec<String> = rows.into_iter().map(|r| r.session_id).collect();
            assert_eq!(got, ids, "{filter:?}");
            assert_eq!(
                (
                    totals.sessions,
                    totals.llm_calls,
                    totals.input_tokens,
                    totals.output_tokens,
                    totals.api_errors
                ),
                (
                    want.sessions,
                    want.llm_calls,
                    want.input_tokens,
                    want.output_tokens,
                    want.api_errors
                ),
                "{filter:?}"
            );
            assert!(
                (totals.cost_usd - want.cost_usd).abs() < 1e-9,
                "{filter:?}: {totals:?} {want:?}"
            );
        }
    }

    /// Every filter, window (UTC days, a +5:45 zone's day, windows off the
    /// hour), sort and page reads what summing and sorting every run
    /// reads; also after runs grow, move to another hour or model, close,
    /// and are deleted.
    #[test]
    fn pages_and_totals_equal_reading_every_run() {
        let (_dir, store) = store_of(2_000);
        assert_hours_match(&store);
        assert_list_matches(&store);
        store
            .conn()
            .execute_batch(
                "UPDATE runs SET llm_calls = llm_calls + 2, cost_usd = cost_usd + 0.5, input_tokens = input_tokens + 7
                  WHERE session_id LIKE 's%3';
                 UPDATE runs SET model = 'claude', started_at = started_at - 5000 WHERE session_id LIKE 's%7';
                 UPDATE runs SET platform = NULL, api_errors = api_errors + 1 WHERE session_id LIKE 's%5';
                 UPDATE runs SET status = 'ok', ended_at = last_event_at + 60 WHERE status = 'running';
                 DELETE FROM runs WHERE session_id LIKE 's%9';",
            )
            .expect("changes");
        assert_hours_match(&store);
        assert_list_matches(&store);
    }

    /// Runs applied from real hook events keep `run_hours` exact.
    #[test]
    fn hook_events_keep_the_hours_exact() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = Store::open(&dir.path().join("s.db")).expect("open");
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut lines = String::new();
        for entry in std::fs::read_dir(fixtures).expect("fixtures") {
            let file = entry.expect("entry").path();
            if file.extension().is_some_and(|e| e == "jsonl") {
                lines.push_str(&std::fs::read_to_string(file).expect("fixture"));
            }
        }
        let path = dir.path().join("all.jsonl");
        std::fs::write(&path, lines).expect("write");
        let mut stats = crate::replay::ReplayStats::default();
        crate::replay::replay_file(&mut store, &path, crate::hook::DecodeOptions::default(), &mut stats)
            .expect("replay");
        assert!(store.counts().expect("counts").runs > 5);
        assert_hours_match(&store);
        let everything = SessionFilter {
            limit: 1000,
            ..SessionFilter::default()
        };
        let (rows, totals) = store.session_list(&everything).expect("list");
        assert_eq!(rows.len() as i64, totals.sessions);
        assert_eq!(totals.llm_calls, rows.iter().map(|r| r.llm_calls).sum::<i64>());
    }

    /// Every statement of the index reads through an index, with or
    /// without a window and filters.
    #[test]
    fn every_statement_of_the_index_uses_an_index() {
        let (_dir, store) = store_of(300);
        for filter in filters()
            .into_iter()
            .filter(|f| f.offset == 0 && f.sort == SessionSort::Newest)
        {
            let plans = store.session_list_plans(&filter).expect("plans");
            for (query, detail) in &plans {
                let scan = detail.starts_with("SCAN")
                    && !detail.contains("USING INDEX")
                    && !detail.contains("USING COVERING INDEX")
                    && !detail.contains("USING PRIMARY KEY")
                    && !detail.starts_with("SCAN (subquery");
                // `run_hours` read in its key's order: all of it for the
                // totals of all time, newest first until the page is full
                // for the hours.
                let hours_in_order = detail == "SCAN run_hours";
                assert!(!scan || hours_in_order, "{query}: {detail}\n{plans:#?}");
                assert!(
                    !detail.contains("TEMP B-TREE") || !query.starts_with("hours"),
                    "{query}: {detail}"
                );
            }
            let uses = |query: &str, index: &str| plans.iter().any(|(q, d)| q == query && d.contains(index));
            // A window's runs come from `runs_started` and are sorted (a
            // day's sessions); without one the sort walks its index.
            if filter.since.is_none() && filter.until.is_none() {
                assert!(uses("index by cost", "runs_cost"), "{plans:#?}");
                assert!(uses("index by duration", "runs_duration"), "{plans:#?}");
                // (By duration, only the page and the running runs are sorted.)
                let sorted = |q: &str| plans.iter().any(|(n, d)| n == q && d.contains("TEMP B-TREE"));
                assert!(!sorted("index by newest") && !sorted("index by cost"), "{plans:#?}");
            }
            assert!(
                uses("totals 0", "run_hours") || uses("totals 0", "runs_started"),
                "{plans:#?}"
            );
        }
    }
}
