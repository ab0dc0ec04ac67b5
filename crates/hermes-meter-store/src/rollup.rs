//! Report rollups: the sums `report` prints, per quarter hour
//! and per UTC day (the whole store's per hour too), so a report reads a row per key and bucket rather than
//! every fact of its window.
//!
//! Owns: filling `report_rollups` from the ledger ([`Writer::roll_up`], a
//! few buckets a transaction from the writer's sweep, never from a hook),
//! gathering a stretch of the ledger into the same sums ([`gather`]) and
//! reading rollup rows back ([`for_each_rolled`]). Must not touch: the
//! ledger, which stays the truth: rollups are rebuilt from it.
//!
//! # Why they are never stale where they are read
//!
//! `report_rollup_state.until` marks how far the rollups hold. Triggers
//! in the schema move the mark back to the bucket of any fact or run
//! that changes before it, in the transaction that changes it, so every
//! bucket below the mark was rebuilt after the ledger's last change to it.
//! Readers use rollups below the mark only and the ledger for the rest.
//! Each day and hour row is rebuilt from its quarter-hour rows once the
//! mark has passed its end.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{Reader, Writer};
use crate::error::Result;
use hermes_meter_model::report::{Dim, Totals};

/// A quarter hour: the finest bucket. Every time zone's offset is a whole
/// number of quarter hours, so any zone's days are unions of buckets.
pub(crate) const QUARTER: i64 = 900;
/// An hour: the whole store's sums per hour (level 2) let a long report
/// tell any zone's days apart from a quarter of the rows.
pub(super) const HOUR: i64 = 3_600;
/// A UTC day: the coarse bucket.
pub(super) const DAY: i64 = 86_400;

/// How long before its session's first event a call may have ended, at
/// most, by its own clock (a call's end time comes from Hermes, the
/// session's start from the first hook of it this store saw): a session
/// that started this much after a stretch began had no call before it.
const CALL_BEFORE_ITS_SESSION: f64 = 300.0;

/// The bucket levels of `report_rollups`: quarter hours (every
/// dimension), UTC days (every dimension but the whole store's, whose days
/// depend on the zone) and hours (the whole store's only).
const LEVEL_QUARTER: i64 = 0;
const LEVEL_DAY: i64 = 1;
const LEVEL_HOUR: i64 = 2;

/// How long a roll-up step may hold the write lock, about: it stops after
/// the bucket that passes this.
const STEP_BUDGET: Duration = Duration::from_millis(4);

/// The start of the bucket of `size` seconds that holds `at` (saturating
/// at the ends of `i64`, for an unbounded window).
pub(crate) fn floor_to(at: f64, size: i64) -> i64 {
    ((at / size as f64).floor() * size as f64) as i64
}

/// The start of the first bucket of `size` seconds at or after `at`.
pub(crate) fn ceil_to(at: f64, size: i64) -> i64 {
    ((at / size as f64).ceil() * size as f64) as i64
}

/// Rollup rows' sums, by quarter hour and dimension, then key (looked up
/// by `&str`: adding a fact allocates only for a key not seen yet).
#[derive(Default)]
pub(crate) struct Gathered(BTreeMap<(i64, Dim), BTreeMap<String, (Totals, f64)>>);

impl Gathered {
    fn add(&mut self, bucket: i64, dim: Dim, key: &str, totals: &Totals, estimate: f64) {
        let keys = self.0.entry((bucket, dim)).or_default();
        match keys.get_mut(key) {
            Some(entry) => {
                entry.0.add(totals);
                entry.1 += estimate;
            }
            None => {
                keys.insert(key.to_string(), (totals.clone(), estimate));
            }
        }
    }

    /// Every row: quarter hour, dimension, key, sums, estimate.
    pub(super) fn rows(self) -> impl Iterator<Item = (i64, Dim, String, Totals, f64)> {
        self.0.into_iter().flat_map(|((bucket, dim), keys)| {
            keys.into_iter()
                .map(move |(key, (totals, estimate))| (bucket, dim, key, totals, estimate))
        })
    }
}

/// A session's first fact in a stretch with a model or provider: the
/// dimension, the key, when it ended, and whether the session started in
/// the stretch (then it is its first ever).
type FirstUse = (Dim, String, f64, bool);

/// What one [`Writer::roll_up`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RollupStep {
    /// Quarter hours rebuilt.
    pub buckets: usize,
    /// Whether buckets before the horizon are still to do.
    pub more: bool,
}

/// The sums of everything in `[since, until)`, per quarter hour and key:
/// facts by when they ended, sessions where they began (see
/// `hermes_meter_model::report`'s module docs).
pub(super) fn gather(conn: &Connection, since: f64, until: f64) -> Result<Gathered> {
    let mut out = Gathered::default();
    // The first fact of each session with a model or provider in the
    // stretch: it begins that session there unless an earlier one did,
    // which only a session that started before the stretch can have.
    // By session, then (dimension, key, when, whether it started here).
    let mut firsts: HashMap<String, Vec<FirstUse>> = HashMap::new();
    super::report::for_each_fact(conn, since, until, |f| {
        let bucket = floor_to(f.at, QUARTER);
        let totals = Totals::of_fact(&f);
        for dim in [Dim::All, Dim::Model, Dim::Provider, Dim::Sender, Dim::CronJob] {
            out.add(bucket, dim, &dim.key_of(&f), &totals, 0.0);
        }
        if let Some(estimate) = f.provider_estimate_usd {
            out.add(bucket, Dim::Billed, &Dim::Billed.key_of(&f), &totals, estimate);
        }
        let started_here = f.session_started_at - CALL_BEFORE_ITS_SESSION >= since;
        let seen = match firsts.get_mut(f.session_id.as_str()) {
            Some(seen) => seen,
            None => firsts.entry(f.session_id.clone()).or_default(),
        };
        for dim in [Dim::Model, Dim::Provider] {
            let key = dim.key_of(&f);
            match seen.iter_mut().find(|(d, k, _, _)| *d == dim && *k == key) {
                Some(first) => first.2 = first.2.min(f.at),
                None => seen.push((dim, key.into_owned(), f.at, started_here)),
            }
        }
    })?;
    // In a fixed order, so sums add up the same way every time.
    let mut firsts: Vec<(String, Vec<FirstUse>)> = firsts.into_iter().collect();
    firsts.sort_by(|a, b| a.0.cmp(&b.0));
    for (session, seen) in firsts {
        for (dim, key, at, started_here) in seen {
            if started_here || !used_before(conn, dim, &key, &session, at)? {
                out.add(floor_to(at, QUARTER), dim, &key, &Totals::one_session(), 0.0);
            }
        }
    }
    let mut stmt = conn.prepare_cached(STARTED)?;
    let mut rows = stmt.query(params![since, until])?;
    while let Some(r) = rows.next()? {
        let bucket = floor_to(r.get(0)?, QUARTER);
        let sender: Option<String> = r.get(1)?;
        let cron: Option<String> = r.get(2)?;
        let one = Totals::one_session();
        out.add(bucket, Dim::All, "", &one, 0.0);
        out.add(bucket, Dim::Sender, sender.as_deref().unwrap_or(""), &one, 0.0);
        out.add(bucket, Dim::CronJob, cron.as_deref().unwrap_or(""), &one, 0.0);
    }
    Ok(out)
}

/// Runs that started in `[?1, ?2)`, with their root's sender and cron job.
const STARTED: &str = "SELECT r.started_at, root.sender_id, root.cron_job_id
       FROM runs r JOIN runs root ON root.session_id = r.root_session_id
      WHERE r.started_at >= ?1 AND r.started_at < ?2";

/// Whether session `?2` has a fact with model (or provider) `?1` ('' for
/// none) that ended before `?3`. Tool calls count under their run's.
const USED_MODEL_BEFORE: &str = "SELECT
        EXISTS (SELECT 1 FROM llm_calls WHERE session_id = ?2 AND ended_at < ?3 AND COALESCE(model, '') = ?1)
     OR EXISTS (SELECT 1 FROM llm_call_errors WHERE session_id = ?2 AND ended_at < ?3 AND COALESCE(model, '') = ?1)
     OR EXISTS (SELECT 1 FROM tool_calls t JOIN runs r ON r.session_id = t.session_id
                 WHERE t.session_id = ?2 AND t.proxy = 0 AND t.ended_at < ?3 AND COALESCE(r.model, '') = ?1)";
const USED_PROVIDER_BEFORE: &str = "SELECT
        EXISTS (SELECT 1 FROM llm_calls WHERE session_id = ?2 AND ended_at < ?3 AND COALESCE(provider, '') = ?1)
     OR EXISTS (SELECT 1 FROM llm_call_errors WHERE session_id = ?2 AND ended_at < ?3 AND COALESCE(provider, '') = ?1)
     OR EXISTS (SELECT 1 FROM tool_calls t JOIN runs r ON r.session_id = t.session_id
                 WHERE t.session_id = ?2 AND t.proxy = 0 AND t.ended_at < ?3 AND COALESCE(r.provider, '') = ?1)";

fn used_before(conn: &Connection, dim: Dim, key: &str, session: &str, at: f64) -> Result<bool> {
    let sql = if dim == Dim::Model {
        USED_MODEL_BEFORE
    } else {
        USED_PROVIDER_BEFORE
    };
    Ok(conn
        .prepare_cached(sql)?
        .query_row(params![key, session, at], |r| r.get(0))?)
}

/// The columns of a rollup row after its key, in [`Totals`] order.
const SUMS: &str = "cost_usd, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
     llm_calls, estimated_llm_calls, unpriced_llm_calls, aux_llm_calls, aux_cost_usd, api_errors, tool_calls,
     tool_failures, tool_nonzero_exits, sessions, estimate_usd";

/// Rollup rows of `level` with buckets in `[?1, ?2)`; `?3` is 1 for the
/// whole-store dimension only, 0 for every other.
static ROLLED: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT bucket, dim, key, {SUMS} FROM report_rollups
          WHERE level = ?4 AND bucket >= ?1 AND bucket < ?2 AND (dim = 0) = (?3 = 1)"
    )
});

fn totals_at(r: &rusqlite::Row<'_>, first: usize) -> rusqlite::Result<(Totals, f64)> {
    let totals = Totals {
        cost_usd: r.get(first)?,
        input_tokens: r.get(first + 1)?,
        output_tokens: r.get(first + 2)?,
        cache_read_tokens: r.get(first + 3)?,
        cache_write_tokens: r.get(first + 4)?,
        reasoning_tokens: r.get(first + 5)?,
        llm_calls: r.get(first + 6)?,
        estimated_llm_calls: r.get(first + 7)?,
        unpriced_llm_calls: r.get(first + 8)?,
        aux_llm_calls: r.get(first + 9)?,
        aux_cost_usd: r.get(first + 10)?,
        api_errors: r.get(first + 11)?,
        tool_calls: r.get(first + 12)?,
        tool_failures: r.get(first + 13)?,
        tool_nonzero_exits: r.get(first + 14)?,
        sessions: r.get(first + 15)?,
    };
    Ok((totals, r.get(first + 16)?))
}

/// Hands every rollup row of `[since, until)` (bucket-aligned, below the
/// mark) to `each`. The whole store's rows are read by hour, and by quarter
/// hour where a day of `tz` begins inside an hour (zones off whole hours,
/// such as +5:30 or +5:45) and at the window's ends, so days of any zone
/// are told apart; the other dimensions by UTC day where whole days fit,
/// by quarter hour at the ends.
pub(super) fn for_each_rolled(
    conn: &Connection,
    tz: &jiff::tz::TimeZone,
    since: i64,
    until: i64,
    mut each: impl FnMut(i64, Dim, &str, &Totals, f64),
) -> Result<()> {
    let mut stmt = conn.prepare_cached(&ROLLED)?;
    // `skip` passes over rows of the whole store whose bucket it names,
    // keeping their buckets for a finer read.
    let mut read = |level: i64, from: i64, to: i64, whole: bool, skip: &mut dyn FnMut(i64) -> bool| -> Result<()> {
        if from >= to {
            return Ok(());
        }
        let mut rows = stmt.query(params![from, to, whole as i64, level])?;
        while let Some(r) = rows.next()? {
            let bucket = r.get(0)?;
            if whole && skip(bucket) {
                continue;
            }
            let Some(dim) = Dim::of_code(r.get(1)?) else { continue };
            let key = r.get_ref(2)?.as_str().unwrap_or_default();
            let (totals, estimate) = totals_at(r, 3)?;
            each(bucket, dim, key, &totals, estimate);
        }
        Ok(())
    };
    let mut none = |_: i64| false;
    let (hours_from, hours_to) = (ceil_to(since as f64, HOUR), floor_to(until as f64, HOUR));
    if hours_from < hours_to {
        read(LEVEL_QUARTER, since, hours_from, true, &mut none)?;
        // Hours a day of `tz` begins inside, read again by quarter hour.
        let mut split = Vec::new();
        let mut day = (0.0, 0.0);
        let mut cut = |hour: i64| {
            let at = hour as f64;
            if !(day.0 <= at && at < day.1) {
                day = hermes_meter_model::report::day_bounds(at, tz).unwrap_or((at, at + HOUR as f64));
            }
            let splits = day.1 < (hour + HOUR) as f64;
            if splits {
                split.push(hour);
            }
            splits
        };
        read(LEVEL_HOUR, hours_from, hours_to, true, &mut cut)?;
        for hour in split {
            read(LEVEL_QUARTER, hour, hour + HOUR, true, &mut none)?;
        }
        read(LEVEL_QUARTER, hours_to, until, true, &mut none)?;
    } else {
        read(LEVEL_QUARTER, since, until, true, &mut none)?;
    }
    let (days_from, days_to) = (ceil_to(since as f64, DAY), floor_to(until as f64, DAY));
    if days_from < days_to {
        read(LEVEL_QUARTER, since, days_from, false, &mut none)?;
        read(LEVEL_DAY, days_from, days_to, false, &mut none)?;
        read(LEVEL_QUARTER, days_to, until, false, &mut none)?;
    } else {
        read(LEVEL_QUARTER, since, until, false, &mut none)?;
    }
    Ok(())
}

/// How far the rollups hold (see the module docs).
pub(super) fn rolled_until(conn: &Connection) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT until FROM report_rollup_state WHERE id = 0")?
        .query_row([], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

/// The first quarter hour at or after `from` with a fact, a run's start or
/// a rollup row to replace, if any.
fn next_bucket(conn: &Connection, from: i64) -> Result<Option<i64>> {
    let at: Option<f64> = conn
        .prepare_cached(
            "SELECT MIN(t) FROM (
                SELECT MIN(ended_at) AS t FROM llm_calls WHERE ended_at >= ?1
                UNION ALL SELECT MIN(ended_at) FROM llm_call_errors WHERE ended_at >= ?1
                UNION ALL SELECT MIN(ended_at) FROM tool_calls WHERE proxy = 0 AND ended_at IS NOT NULL AND ended_at >= ?1
                UNION ALL SELECT MIN(started_at) FROM runs WHERE started_at >= ?1
                UNION ALL SELECT MIN(bucket) FROM report_rollups WHERE level = 0 AND bucket >= ?1)",
        )?
        .query_row(params![from], |r| r.get(0))?;
    Ok(at.map(|t| floor_to(t, QUARTER)))
}

/// Rebuilds the rows of `level` (buckets of `size` seconds, of the
/// dimensions `dims` selects) that lie wholly before `mark` and not wholly
/// before `start`, from their quarter hours.
fn sum_quarters(tx: &Connection, level: i64, size: i64, dims: &str, start: i64, mark: i64) -> Result<()> {
    let (from, to) = (floor_to(start as f64, size), floor_to(mark as f64, size));
    if from >= to {
        return Ok(());
    }
    tx.prepare_cached("DELETE FROM report_rollups WHERE level = ?1 AND bucket >= ?2 AND bucket < ?3")?
        .execute(params![level, from, to])?;
    tx.prepare_cached(&format!(
        "INSERT INTO report_rollups (level, bucket, dim, key, {SUMS})
         SELECT {level}, bucket - bucket % {size}, dim, key, SUM(cost_usd), SUM(input_tokens), SUM(output_tokens),
                SUM(cache_read_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens), SUM(llm_calls),
                SUM(estimated_llm_calls), SUM(unpriced_llm_calls), SUM(aux_llm_calls), SUM(aux_cost_usd),
                SUM(api_errors), SUM(tool_calls), SUM(tool_failures), SUM(tool_nonzero_exits),
                SUM(sessions), SUM(estimate_usd)
           FROM report_rollups WHERE level = 0 AND bucket >= ?1 AND bucket < ?2 AND {dims}
          GROUP BY 2, dim, key"
    ))?
    .execute(params![from, to])?;
    Ok(())
}

impl Writer {
    /// Rebuilds rollup buckets from the mark on, in one short transaction
    /// (about `STEP_BUDGET`), up to the quarter hour that holds
    /// `horizon`: later buckets still take facts. Days and hours the mark
    /// passed are summed from their quarter hours.
    pub fn roll_up(&mut self, horizon: f64) -> Result<RollupStep> {
        let end = floor_to(horizon, QUARTER);
        let tx = self.db.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let start = rolled_until(&tx)?;
        let mut mark = start;
        let mut step = RollupStep::default();
        let began = Instant::now();
        while mark < end {
            if began.elapsed() >= STEP_BUDGET {
                step.more = true;
                break;
            }
            let Some(bucket) = next_bucket(&tx, mark)?.filter(|b| *b < end) else {
                mark = end;
                break;
            };
            tx.prepare_cached("DELETE FROM report_rollups WHERE level = 0 AND bucket = ?1")?
                .execute(params![bucket])?;
            let mut insert = tx.prepare_cached(&format!(
                "INSERT INTO report_rollups (level, bucket, dim, key, {SUMS})
                 VALUES (0, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)"
            ))?;
            for (_, dim, key, t, estimate) in gather(&tx, bucket as f64, (bucket + QUARTER) as f64)?.rows() {
                insert.execute(params![
                    bucket,
                    dim.code(),
                    key,
                    t.cost_usd,
                    t.input_tokens,
                    t.output_tokens,
                    t.cache_read_tokens,
                    t.cache_write_tokens,
                    t.reasoning_tokens,
                    t.llm_calls,
                    t.estimated_llm_calls,
                    t.unpriced_llm_calls,
                    t.aux_llm_calls,
                    t.aux_cost_usd,
                    t.api_errors,
                    t.tool_calls,
                    t.tool_failures,
                    t.tool_nonzero_exits,
                    t.sessions,
                    estimate
                ])?;
            }
            step.buckets += 1;
            mark = bucket + QUARTER;
        }
        // Days and hours wholly before the mark now, and not before: their
        // sums (days of every dimension but the whole store's, hours of the
        // whole store's only).
        sum_quarters(&tx, LEVEL_DAY, DAY, "dim != 0", start, mark)?;
        sum_quarters(&tx, LEVEL_HOUR, HOUR, "dim = 0", start, mark)?;
        if mark != start {
            tx.prepare_cached("UPDATE report_rollup_state SET until = ?1 WHERE id = 0")?
                .execute(params![mark])?;
        }
        tx.commit()?;
        Ok(step)
    }
}

impl Reader {
    /// How far the report rollups hold (Unix seconds; 0 before the first
    /// roll-up): `report` reads the ledger from there on.
    pub fn rolled_until(&self) -> Result<i64> {
        rolled_until(self.conn())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_floor_and_ceil_to_their_size() {
        assert_eq!(floor_to(899.9, QUARTER), 0);
        assert_eq!(floor_to(900.0, QUARTER), 900);
        assert_eq!(ceil_to(900.0, QUARTER), 900);
        assert_eq!(ceil_to(900.5, QUARTER), 1800);
        assert_eq!(floor_to(86_399.0, DAY), 0);
    }

    /// Every statement a roll-up step or a report runs on the rollups
    /// reads through an index: its cost follows the buckets it touches.
    #[test]
    fn roll_up_statements_read_no_table_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("plan.db")).expect("open");
        for sql in [
            ROLLED.as_str(),
            STARTED,
            USED_MODEL_BEFORE,
            USED_PROVIDER_BEFORE,
            "SELECT MIN(ended_at) FROM tool_calls WHERE proxy = 0 AND ended_at IS NOT NULL AND ended_at >= ?1",
            "SELECT MIN(bucket) FROM report_rollups WHERE level = 0 AND bucket >= ?1",
        ] {
            store.assert_indexed(sql);
        }
    }

    /// The first-use lookups, taken from the statement cache in turn as a
    /// roll-up does, are compiled once: a statement whose plan SQLite ties
    /// to its bound values was parsed and planned again on every use (the
    /// cache clears bindings), which made a busy quarter hour's roll-up,
    /// write lock held, three times slower.
    #[test]
    fn first_use_lookups_are_not_compiled_again_on_every_use() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("reuse.db")).expect("open");
        for i in 0..20 {
            let session = format!("s{i}");
            used_before(store.conn(), Dim::Model, "m", &session, 1.0 + i as f64).expect("model");
            used_before(store.conn(), Dim::Provider, "p", &session, 1.0 + i as f64).expect("provider");
        }
        for sql in [USED_MODEL_BEFORE, USED_PROVIDER_BEFORE] {
            let stmt = store.conn().prepare_cached(sql).expect("cached");
            assert_eq!(stmt.get_status(rusqlite::StatementStatus::RePrepare), 0, "{sql}");
            assert_eq!(stmt.get_status(rusqlite::StatementStatus::Run), 20, "{sql}");
        }
    }
}
