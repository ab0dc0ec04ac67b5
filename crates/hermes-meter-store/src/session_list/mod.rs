//! The viewer's index: one page of sessions under a filter, and the totals
//! of every session the filter selects.
//!
//! Owns: those reads and the statements behind them (with their plans, for
//! the test that holds them to indexes). Must not touch: writes of any
//! kind; `run_hours` is kept by the schema's triggers.
//!
//! # Proportional to the page, not the store
//!
//! - Totals read `run_hours` (per UTC hour a run started in, for the whole
//!   store and per value of each filter) for the whole hours of the window,
//!   and `runs` for the edges of a window that does not begin or end on an
//!   hour. A filter of two or more values has no row of its own: the
//!   hours of its rarest value are read from `runs` (or the whole window
//!   when those hours are most of it).
//! - A page sorted newest first walks `runs_started`; with a platform,
//!   cron job, sender or model filter it reads only the hours `run_hours`
//!   says hold that (rarest) value, newest first, until the page is full.
//! - By cost it walks `runs_cost`; by duration `runs_duration` (settled
//!   runs) merged with the running ones. A filter there is checked row by
//!   row along the index.
//!
//! # Filters match part of a value
//!
//! A platform, cron job, sender or model filter is text a person typed:
//! it selects every value that contains it, in any case. It is first
//! resolved to those values ([`Reader::filter_values`]: a seek per distinct
//! value of `run_hours`, at most [`MOST_VALUES`] kept), and the reads above
//! then run on the values (`= ?` for one, `IN` for several).

use rusqlite::types::Value;
use rusqlite::OptionalExtension;

use super::Reader;
use crate::error::Result;

/// Seconds in the buckets of `run_hours`.
mod terms;
use terms::{Query, Terms};

const HOUR: f64 = 3600.0;
/// The most rows one page holds.
const MOST_ROWS: usize = 1000;
/// The most values one filter's text selects; the rest are named as left
/// out ([`FilterValues::more`]).
pub(super) const MOST_VALUES: usize = 64;
/// The most distinct values of one dimension looked at when resolving a
/// filter (a bound on its time in a store of many senders).
const MOST_LOOKED_AT: usize = 100_000;

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

/// What the filter's texts select: per dimension it names, the values
/// that contain its text (any case), sorted.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct FilterValues {
    /// `(filter name, the text, the values it selects)`: `platform`,
    /// `cron`, `sender`, `model`.
    pub dims: Vec<(&'static str, String, Vec<String>)>,
    /// Filters whose text selects more than [`MOST_VALUES`] values (only
    /// the first are used), by name.
    pub more: Vec<&'static str>,
}

impl FilterValues {
    /// Whether some filter selects no value at all (so no session).
    pub fn selects_nothing(&self) -> bool {
        self.dims.iter().any(|(_, _, values)| values.is_empty())
    }
}

/// A dimension of the list: its `run_hours` number, `runs` column and
/// filter name.
const DIMS: [(i64, &str, &str); 4] = [
    (1, "platform", "platform"),
    (2, "cron_job_id", "cron"),
    (3, "sender_id", "sender"),
    (4, "model", "model"),
];

/// The filter's texts in [`DIMS`] order.
fn texts(filter: &SessionFilter) -> [&Option<String>; 4] {
    [&filter.platform, &filter.cron_job_id, &filter.sender_id, &filter.model]
}

/// A filter with its texts resolved to values.
struct Resolved<'a> {
    filter: &'a SessionFilter,
    /// `(dim, column, values)`, values never empty.
    dims: Vec<(i64, &'static str, Vec<String>)>,
}

/// `filter` with its texts resolved to `values`; `None` when one selects
/// nothing.
fn resolve<'a>(filter: &'a SessionFilter, values: &FilterValues) -> Option<Resolved<'a>> {
    if values.selects_nothing() {
        return None;
    }
    let dims = values
        .dims
        .iter()
        .map(|(name, _, values)| {
            let (dim, column, _) = DIMS.into_iter().find(|d| d.2 == *name).expect("a known filter");
            (dim, column, values.clone())
        })
        .collect();
    Some(Resolved { filter, dims })
}

/// What the viewer's index shows ([`Reader::session_index`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionIndex {
    pub rows: Vec<SessionListRow>,
    pub totals: SessionListTotals,
    pub values: FilterValues,
    /// Totals of each window asked for, in order.
    pub by_window: Vec<SessionListTotals>,
}

const ROW_COLUMNS: &str = "session_id, parent_session_id, platform, cron_job_id, sender_id, model, started_at,
    COALESCE(ended_at, last_event_at),
    CASE WHEN budget_stop IS NOT NULL AND status != 'running' THEN 'blocked' ELSE status END, turns, llm_calls,
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

fn add(totals: &mut SessionListTotals, part: SessionListTotals) {
    totals.sessions += part.sessions;
    totals.llm_calls += part.llm_calls;
    totals.input_tokens += part.input_tokens;
    totals.output_tokens += part.output_tokens;
    totals.cost_usd += part.cost_usd;
    totals.api_errors += part.api_errors;
}

/// A row set of `run_hours`: the whole store `(0, [""])`, or the values
/// one filter selects (1 platform, 2 cron job, 3 sender, 4 model).
type HoursKey = (i64, Vec<String>);

/// The whole store's rows of `run_hours`.
fn whole_store() -> HoursKey {
    (0, vec![String::new()])
}

/// The values each filter selects, as `run_hours` keys.
fn named(resolved: &Resolved<'_>) -> Vec<HoursKey> {
    resolved
        .dims
        .iter()
        .map(|(dim, _, values)| (*dim, values.clone()))
        .collect()
}

/// Totals of the runs the filter selects that started in `[since, until)`,
/// read from `runs` (a window's partial hours, or the hours of the rarest
/// value when the filter names two).
fn runs_totals_query(resolved: &Resolved<'_>, since: Option<f64>, until: Option<f64>) -> Query {
    let terms = Terms::dimensions(resolved).started(since, until);
    Query {
        sql: format!(
            "SELECT COUNT(*), COALESCE(SUM(llm_calls), 0),
                    COALESCE(SUM(input_tokens + cache_read_tokens + cache_write_tokens), 0),
                    COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost_usd), 0), COALESCE(SUM(api_errors), 0)
               FROM runs {}",
            terms.clause()
        ),
        args: terms.args,
    }
}

/// The `run_hours` rows of `key` whose hour starts in `[from, to)`.
fn key_terms(key: &HoursKey, from: Option<f64>, to: Option<f64>) -> Terms {
    let mut terms = Terms::default();
    terms.push("dim", "=", Value::Integer(key.0));
    terms.push_values("value", &key.1);
    if let Some(from) = from {
        terms.push("hour", ">=", Value::Integer(from.ceil() as i64));
    }
    if let Some(to) = to {
        terms.push("hour", "<", Value::Integer(to.ceil() as i64));
    }
    terms
}

/// The sums of `key`'s hours in `[from, to)`.
fn hours_totals_query(key: &HoursKey, from: Option<f64>, to: Option<f64>) -> Query {
    let terms = key_terms(key, from, to);
    Query {
        sql: format!(
            "SELECT COALESCE(SUM(sessions), 0), COALESCE(SUM(llm_calls), 0), COALESCE(SUM(input_tokens), 0),
                    COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cost_usd), 0), COALESCE(SUM(api_errors), 0)
               FROM run_hours {}",
            terms.clause()
        ),
        args: terms.args,
    }
}

/// `key`'s hours in `[from, to)` that hold runs, newest first, with how
/// many (of all its values).
fn hours_query(key: &HoursKey, from: Option<f64>, to: Option<f64>) -> Query {
    let terms = key_terms(key, from, to).and("sessions > 0");
    let sql = if key.1.len() == 1 {
        format!(
            "SELECT hour, sessions FROM run_hours {} ORDER BY hour DESC",
            terms.clause()
        )
    } else {
        format!(
            "SELECT hour, SUM(sessions) FROM run_hours {} GROUP BY hour ORDER BY hour DESC",
            terms.clause()
        )
    };
    Query { sql, args: terms.args }
}

/// The first hour of the window (`since` rounded down) and the end of it.
fn hour_span(filter: &SessionFilter) -> (Option<f64>, Option<f64>) {
    (filter.since.map(|s| (s / HOUR).floor() * HOUR), filter.until)
}

impl Reader {
    /// The values each of `filter`'s texts selects: every value of its
    /// dimension the store holds that contains the text, in any case
    /// (sorted; at most [`MOST_VALUES`]).
    pub fn filter_values(&self, filter: &SessionFilter) -> Result<FilterValues> {
        let mut out = FilterValues::default();
        for ((dim, _, name), text) in DIMS.into_iter().zip(texts(filter)) {
            let Some(text) = text.as_deref().filter(|t| !t.is_empty()) else {
                continue;
            };
            let wanted = text.to_lowercase();
            let mut values = Vec::new();
            // One seek per distinct value, in the primary key's order.
            let mut stmt = self
                .conn()
                .prepare_cached("SELECT value FROM run_hours WHERE dim = ?1 AND value > ?2 ORDER BY value LIMIT 1")?;
            let mut after = String::new();
            for _ in 0..MOST_LOOKED_AT {
                let next: Option<String> = stmt.query_row(rusqlite::params![dim, after], |r| r.get(0)).optional()?;
                let Some(value) = next else { break };
                if value.to_lowercase().contains(&wanted) {
                    if values.len() == MOST_VALUES {
                        out.more.push(name);
                        break;
                    }
                    values.push(value.clone());
                }
                after = value;
            }
            out.dims.push((name, text.to_string(), values));
        }
        Ok(out)
    }

    /// The viewer's index in one read of the filter's values: the page
    /// and totals of [`Reader::session_list`], what each text matched
    /// ([`Reader::filter_values`]), and the totals of the sessions it
    /// selects that started in each of `windows` (`[since, until)`, Unix
    /// seconds; the filter's own window aside): a spend-over-time chart.
    pub fn session_index(&self, filter: &SessionFilter, windows: &[(f64, f64)]) -> Result<SessionIndex> {
        let values = self.filter_values(filter)?;
        let Some(resolved) = resolve(filter, &values) else {
            return Ok(SessionIndex {
                rows: Vec::new(),
                totals: SessionListTotals::default(),
                values,
                by_window: vec![SessionListTotals::default(); windows.len()],
            });
        };
        let (rows, totals) = self.list_resolved(&resolved)?;
        let mut by_window = Vec::with_capacity(windows.len());
        for &(since, until) in windows {
            let window = SessionFilter {
                since: Some(since),
                until: Some(until),
                ..filter.clone()
            };
            let resolved = Resolved {
                filter: &window,
                dims: resolved.dims.clone(),
            };
            let key = self.hours_key(&resolved)?;
            by_window.push(self.list_totals(&resolved, &key)?);
        }
        Ok(SessionIndex {
            rows,
            totals,
            values,
            by_window,
        })
    }

    /// `filter` with its texts resolved; `None` when one selects nothing.
    fn resolve<'a>(&self, filter: &'a SessionFilter) -> Result<Option<Resolved<'a>>> {
        Ok(resolve(filter, &self.filter_values(filter)?))
    }

    /// One page of sessions matching `filter`, and the totals of all of them.
    pub fn session_list(&self, filter: &SessionFilter) -> Result<(Vec<SessionListRow>, SessionListTotals)> {
        match self.resolve(filter)? {
            Some(resolved) => self.list_resolved(&resolved),
            None => Ok((Vec::new(), SessionListTotals::default())),
        }
    }

    fn list_resolved(&self, resolved: &Resolved<'_>) -> Result<(Vec<SessionListRow>, SessionListTotals)> {
        let filter = resolved.filter;
        let key = self.hours_key(resolved)?;
        let totals = self.list_totals(resolved, &key)?;
        let take = filter.limit.clamp(1, MOST_ROWS);
        // Past the last session (any offset an address bar holds) the page
        // is empty: nothing to read, and no offset SQLite cannot take.
        if totals.sessions.max(0) as u64 <= filter.offset as u64 {
            return Ok((Vec::new(), totals));
        }
        let rows = if filter.sort == SessionSort::Newest && key.0 != 0 {
            self.newest_by_hours(resolved, &key, take)?
        } else {
            let terms = Terms::dimensions(resolved).started(filter.since, filter.until);
            self.list_rows(&page_query(filter, &terms, take, filter.offset))?
        };
        Ok((rows, totals))
    }

    /// The `run_hours` rows that find the filter's runs: the whole store's,
    /// the one value it names, or of two or more the one with the fewest
    /// runs in the window.
    fn hours_key(&self, resolved: &Resolved<'_>) -> Result<HoursKey> {
        let named = named(resolved);
        if named.len() < 2 {
            return Ok(named.into_iter().next().unwrap_or_else(whole_store));
        }
        let (from, to) = hour_span(resolved.filter);
        let mut rarest = None;
        for key in named {
            let n = self.sum_totals(&hours_totals_query(&key, from, to))?.sessions;
            if rarest.as_ref().is_none_or(|(least, _)| n < *least) {
                rarest = Some((n, key));
            }
        }
        Ok(rarest.map(|(_, key)| key).unwrap_or_else(whole_store))
    }

    fn list_totals(&self, resolved: &Resolved<'_>, key: &HoursKey) -> Result<SessionListTotals> {
        let filter = resolved.filter;
        // The whole hours inside the window.
        let first = filter.since.map(|s| (s / HOUR).ceil() * HOUR);
        let end = filter.until.map(|u| (u / HOUR).floor() * HOUR);
        if let (Some(first), Some(end)) = (first, end) {
            if first >= end {
                return self.sum_totals(&runs_totals_query(resolved, filter.since, filter.until));
            }
        }
        let mut totals = if named(resolved).len() < 2 {
            self.sum_totals(&hours_totals_query(key, first, end))?
        } else {
            // The rarest value's hours, and the runs of those hours that
            // match every value; one read of the window's runs instead when
            // those hours are most of the window's.
            let ranges = self.hour_ranges(key, first, end)?;
            let matched: f64 = ranges.iter().map(|(bottom, top)| (top - bottom) / HOUR).sum();
            if matched * 2.0 > self.hours_with_runs(first, end)? as f64 {
                self.sum_totals(&runs_totals_query(resolved, first, end))?
            } else {
                let mut totals = SessionListTotals::default();
                for (bottom, top) in ranges {
                    add(
                        &mut totals,
                        self.sum_totals(&runs_totals_query(resolved, Some(bottom), Some(top)))?,
                    );
                }
                totals
            }
        };
        if let (Some(since), Some(first)) = (filter.since, first) {
            if since < first {
                add(
                    &mut totals,
                    self.sum_totals(&runs_totals_query(resolved, Some(since), Some(first)))?,
                );
            }
        }
        if let (Some(end), Some(until)) = (end, filter.until) {
            if end < until {
                add(
                    &mut totals,
                    self.sum_totals(&runs_totals_query(resolved, Some(end), Some(until)))?,
                );
            }
        }
        Ok(totals)
    }

    fn sum_totals(&self, q: &Query) -> Result<SessionListTotals> {
        Ok(self
            .conn()
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
            })?)
    }

    /// How many hours in `[from, to)` hold runs.
    fn hours_with_runs(&self, from: Option<f64>, to: Option<f64>) -> Result<i64> {
        let terms = key_terms(&whole_store(), from, to).and("sessions > 0");
        Ok(self
            .conn()
            .prepare_cached(&format!("SELECT COUNT(*) FROM run_hours {}", terms.clause()))?
            .query_row(rusqlite::params_from_iter(terms.args.iter()), |r| r.get(0))?)
    }

    /// `key`'s hours in `[from, to)` that hold runs, neighbouring hours
    /// joined, as `[bottom, top)` ranges newest first.
    fn hour_ranges(&self, key: &HoursKey, from: Option<f64>, to: Option<f64>) -> Result<Vec<(f64, f64)>> {
        let q = hours_query(key, from, to);
        let mut stmt = self.conn().prepare_cached(&q.sql)?;
        let hours = stmt.query_map(rusqlite::params_from_iter(q.args.iter()), |r| r.get::<_, i64>(0))?;
        let mut ranges: Vec<(f64, f64)> = Vec::new();
        for hour in hours {
            let hour = hour? as f64;
            match ranges.last_mut() {
                Some((bottom, _)) if *bottom == hour + HOUR => *bottom = hour,
                _ => ranges.push((hour, hour + HOUR)),
            }
        }
        Ok(ranges)
    }

    /// Newest first under a platform, cron job, sender or model filter:
    /// reads only the hours holding runs of `key`, newest first (neighbouring
    /// hours as one range), until the page is full; it holds no more than
    /// the page.
    fn newest_by_hours(&self, resolved: &Resolved<'_>, key: &HoursKey, take: usize) -> Result<Vec<SessionListRow>> {
        let filter = resolved.filter;
        let (from, to) = hour_span(filter);
        let q = hours_query(key, from, to);
        let mut stmt = self.conn().prepare_cached(&q.sql)?;
        // Read lazily: the hours come newest first in the table's key order,
        // and the loop stops as soon as the page is full.
        let mut hours = stmt
            .query_map(rusqlite::params_from_iter(q.args.iter()), |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })?
            .peekable();
        // One value's counts are exact for the hours wholly in the window:
        // rows before the page are skipped by them, without reading the
        // rows (an offset from the address bar may be large). Other
        // ranges are counted.
        let exact = named(resolved).len() == 1;
        let mut skip = filter.offset;
        let mut rows = Vec::new();
        while rows.len() < take {
            let Some(first) = hours.next() else { break };
            let (top, mut matched) = first?;
            let mut bottom = top;
            // Ranges of about a page when the counts are exact (the rows
            // before it are skipped range by range, unread); else one
            // range up to the page, counted once.
            let want = take - rows.len() + if exact { 0 } else { skip };
            while (matched as usize) < want {
                match hours.peek() {
                    Some(Ok((hour, n))) if hour + HOUR as i64 == bottom => {
                        (bottom, matched) = (*hour, matched + n);
                        hours.next();
                    }
                    _ => break,
                }
            }
            let (bottom, top) = (bottom as f64, top as f64 + HOUR);
            let since = filter.since.map_or(bottom, |s| s.max(bottom));
            let until = filter.until.map_or(top, |u| u.min(top));
            let terms = Terms::dimensions(resolved).started(Some(since), Some(until));
            if skip > 0 {
                let whole = exact && since == bottom && until == top;
                let count = if whole {
                    matched
                } else {
                    self.sum_totals(&runs_totals_query(resolved, Some(since), Some(until)))?
                        .sessions
                };
                if count as usize <= skip {
                    skip -= count as usize;
                    continue;
                }
            }
            rows.extend(self.list_rows(&page_query(filter, &terms, take - rows.len(), skip))?);
            skip = 0;
        }
        Ok(rows)
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
    pub(crate) fn session_list_plans(&self, filter: &SessionFilter) -> Result<Vec<(String, String)>> {
        let mut queries = Vec::new();
        let Some(resolved) = self.resolve(filter)? else {
            return Ok(Vec::new());
        };
        let terms = Terms::dimensions(&resolved).started(filter.since, filter.until);
        for sort in [SessionSort::Newest, SessionSort::Cost, SessionSort::Duration] {
            let sorted = SessionFilter { sort, ..filter.clone() };
            queries.push((
                format!("index by {}", sort.as_str()),
                page_query(&sorted, &terms, 50, 0),
            ));
        }
        let key = self.hours_key(&resolved)?;
        let (from, to) = hour_span(filter);
        queries.push(("totals".to_string(), hours_totals_query(&key, from, to)));
        queries.push((
            "totals of a partial hour".to_string(),
            runs_totals_query(&resolved, filter.since.or(Some(0.0)), filter.until.or(Some(HOUR))),
        ));
        queries.push(("hours".to_string(), hours_query(&key, from, to)));
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
    use crate::Writer;

    /// The list as it read before `run_hours`: every run the filter
    /// selects, sorted in full. The reference the fast reads must equal.
    fn reference(store: &Writer, filter: &SessionFilter) -> (Vec<String>, SessionListTotals) {
        // A filter selects the runs whose value holds its text, any case.
        let mut terms = Terms::default();
        for ((_, column, _), text) in DIMS.into_iter().zip(texts(filter)) {
            if let Some(t) = text.as_deref().filter(|t| !t.is_empty()) {
                terms.args.push(Value::Text(t.to_string()));
                let n = terms.args.len();
                terms.terms.push(format!("instr(lower({column}), lower(?{n})) > 0"));
            }
        }
        let terms = terms.started(filter.since, filter.until);
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

    /// `run_hours` holds exactly the sums of `runs` per start hour: of
    /// the whole store and of each platform, cron job, sender and model.
    fn assert_hours_match(store: &Writer) {
        let read = |sql: &str| -> Vec<String> {
            let mut stmt = store.conn().prepare(sql).expect("prepare");
            stmt.query_map([], |r| {
                Ok(format!(
                    "{} {} {} n={} calls={} in={} out={} cost={:.9} err={}",
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, i64>(6)?,
                    r.get::<_, f64>(7)?,
                    r.get::<_, i64>(8)?
                ))
            })
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows")
        };
        // (A row whose runs all moved or went stays at zero sessions.)
        let kept = read("SELECT * FROM run_hours WHERE sessions != 0 ORDER BY 1, 2, 3");
        let summed = read(
            "SELECT dim, value, CAST(started_at / 3600 AS INTEGER) * 3600, COUNT(*), SUM(llm_calls),
                    SUM(input_tokens + cache_read_tokens + cache_write_tokens), SUM(output_tokens), SUM(cost_usd),
                    SUM(api_errors)
               FROM (SELECT 0 AS dim, '' AS value, * FROM runs
                     UNION ALL SELECT 1, platform, * FROM runs WHERE platform != ''
                     UNION ALL SELECT 2, cron_job_id, * FROM runs WHERE cron_job_id != ''
                     UNION ALL SELECT 3, sender_id, * FROM runs WHERE sender_id != ''
                     UNION ALL SELECT 4, model, * FROM runs WHERE model != '')
              GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        );
        // (Costs added and taken away may leave -0.)
        let kept: Vec<String> = kept
            .into_iter()
            .map(|r| r.replace("cost=-0.000000000", "cost=0.000000000"))
            .collect();
        let only_kept: Vec<&String> = kept.iter().filter(|r| !summed.contains(r)).collect();
        let only_summed: Vec<&String> = summed.iter().filter(|r| !kept.contains(r)).collect();
        assert!(
            only_kept.is_empty() && only_summed.is_empty(),
            "kept, not summed: {only_kept:#?}\nsummed, not kept: {only_summed:#?}"
        );
    }

    /// A store of `n` runs over four days: a few platforms, models,
    /// senders and cron jobs, unpriced runs (equal costs), running ones.
    fn store_of(n: usize) -> (tempfile::TempDir, Writer) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("s.db")).expect("open");
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
        let dims: [[Option<&str>; 4]; 10] = [
            [None, None, None, None],
            [Some("telegram"), None, None, None],
            [None, None, None, Some("claude")],
            [Some("discord"), None, Some("u3"), Some("gpt-4o")],
            [None, Some("job1"), None, None],
            [Some("slack"), None, None, None],
            // Part of a value, in another case; several values at once.
            [Some("TELE"), None, None, None],
            [Some("r"), None, None, Some("-4")],
            [None, Some("JOB"), Some("u"), None],
            [Some("i"), None, Some("U"), Some("c")],
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

    fn assert_list_matches(store: &Writer) {
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

    /// Each window of a spend chart (days of a +5:45 zone, windows off the
    /// hour) sums what reading every run of that window with the filter's
    /// texts sums.
    #[test]
    fn the_index_and_its_windows_equal_reading_every_run() {
        let (_dir, store) = store_of(1_000);
        let start = 1_790_000_000.0 - 20_700.0;
        let windows: Vec<(f64, f64)> = (0..6)
            .map(|d| (start + f64::from(d) * 86_400.0, start + f64::from(d + 1) * 86_400.0))
            .chain([(1_790_100_123.5, 1_790_100_999.0)])
            .collect();
        for filter in filters()
            .into_iter()
            .filter(|f| f.offset == 0 && f.sort == SessionSort::Newest && f.since.is_none())
        {
            let index = store.session_index(&filter, &windows).expect("index");
            // The page, totals and values of one read are those of separate ones.
            assert_eq!(
                (index.rows.clone(), index.totals.clone()),
                store.session_list(&filter).expect("list")
            );
            assert_eq!(index.values, store.filter_values(&filter).expect("values"));
            let got = index.by_window;
            assert_eq!(got.len(), windows.len());
            for (&(since, until), totals) in windows.iter().zip(&got) {
                let day = SessionFilter {
                    since: Some(since),
                    until: Some(until),
                    ..filter.clone()
                };
                let (_, want) = reference(&store, &day);
                assert_eq!(
                    (totals.sessions, totals.llm_calls, totals.input_tokens),
                    (want.sessions, want.llm_calls, want.input_tokens),
                    "{day:?}"
                );
                assert!((totals.cost_usd - want.cost_usd).abs() < 1e-9, "{day:?}");
            }
        }
        let all = store
            .session_index(&SessionFilter::default(), &windows)
            .expect("index")
            .by_window;
        assert!(
            all.iter().map(|t| t.sessions).sum::<i64>() > 0,
            "the windows hold sessions"
        );
    }

    /// An offset past the last session, as large as an address bar can
    /// hold, is an empty page with the totals, under every sort and filter.
    #[test]
    fn an_offset_past_the_end_is_an_empty_page() {
        let (_dir, store) = store_of(200);
        for filter in filters().into_iter().filter(|f| f.offset == 0) {
            let (_, totals) = store.session_list(&filter).expect("list");
            for offset in [totals.sessions as usize, i64::MAX as usize + 1, usize::MAX] {
                let past = SessionFilter {
                    offset,
                    ..filter.clone()
                };
                let (rows, again) = store.session_list(&past).expect("past the end");
                assert!(rows.is_empty(), "{past:?}");
                assert_eq!(again, totals);
            }
        }
    }

    /// Runs applied from real hook events keep `run_hours` exact.
    #[test]
    fn hook_events_keep_the_hours_exact() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store = Writer::open(&dir.path().join("s.db")).expect("open");
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
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
        crate::replay::replay_file(
            &mut store,
            &path,
            hermes_meter_model::hook::DecodeOptions::default(),
            &mut stats,
        )
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
            // A text no session has selects nothing: no statement runs.
            if store.filter_values(&filter).expect("values").selects_nothing() {
                assert!(plans.is_empty(), "{filter:?}: {plans:#?}");
                continue;
            }
            assert!(!plans.is_empty(), "{filter:?}");
            // Several values of a text are summed per hour: that grouping
            // holds at most MOST_VALUES rows per hour of the window.
            let values = store.filter_values(&filter).expect("values");
            let several = values.dims.iter().any(|(_, _, v)| v.len() > 1);
            for (query, detail) in &plans {
                let scan = detail.starts_with("SCAN")
                    && !detail.contains("USING INDEX")
                    && !detail.contains("USING COVERING INDEX")
                    && !detail.contains("USING PRIMARY KEY")
                    && !detail.starts_with("SCAN (subquery");
                assert!(!scan, "{query}: {detail}\n{plans:#?}");
                assert!(
                    !detail.contains("TEMP B-TREE")
                        || !query.starts_with("hours")
                        || (several && detail == "USE TEMP B-TREE FOR GROUP BY"),
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
            // One value's hours (or the whole store's), not every value's.
            assert!(
                uses("totals", "SEARCH run_hours USING PRIMARY KEY (dim=? AND value=?"),
                "{plans:#?}"
            );
            assert!(
                uses("hours", "SEARCH run_hours USING PRIMARY KEY (dim=? AND value=?"),
                "{plans:#?}"
            );
            assert!(uses("totals of a partial hour", "runs_started"), "{plans:#?}");
        }
    }
}
