//! Budget state in the store: spend rollups, reservations, one-shot
//! notices and pauses, verdict counts and alerts (schema in
//! `migrations/0005_budget.sql`).
//!
//! The ledger calls the `on_*` functions inside the transaction that applies
//! a hook event, so rollups and reservations commit with the LLM call they
//! count, exactly once, whichever process applied it. The gate
//! (`budget_gate.rs`) and the CLI read through the `Store` methods; every
//! read used by a gating hook goes through a primary key or a bounded range
//! of one, never a scan of the ledger.

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension, Transaction};

use super::Store;
use crate::budget::{
    self, alert, assess, bucket_ranges, window_bounds, BudgetConfig, BudgetState, Scope, ScopeKeys, Spend, Window,
    BUCKET_SECONDS,
};
use crate::error::Result;
use crate::hook::{ApiRequestError, PostApiRequest, PreApiRequest, Usage};
use crate::pricing::{PriceSource, PriceTable};
use crate::{metrics, semconv};

/// A reservation older than this no longer counts: its process died
/// between pre_api_request and the call's end (no LLM call takes this long).
pub const RESERVATION_TTL_SECONDS: f64 = 15.0 * 60.0;

/// Output tokens a reservation assumes when the request names no
/// `max_tokens`, and the most it assumes when it does (a cap, because
/// `max_tokens` is a ceiling most replies stay far below).
pub const RESERVED_OUTPUT_TOKENS: i64 = 1024;
const MAX_RESERVED_OUTPUT_TOKENS: i64 = 4096;

/// An LLM call the ledger just recorded (first time only).
#[derive(Debug, Clone, Copy)]
pub struct RecordedCall<'a> {
    pub model: &'a str,
    pub cost_usd: f64,
    pub source: PriceSource,
    pub estimated: bool,
    pub ended_at: f64,
}

/// One alert, as `budget list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRow {
    pub kind: String,
    pub key: String,
    pub text: String,
    pub count: i64,
    pub first_at: f64,
    pub last_at: f64,
    pub delivered_at: Option<f64>,
}

/// The scope keys of `session_id`: its root session's cron job, sender and
/// profile (a subagent counts toward its root's), and `model` or, when
/// `None`, the session's model.
fn scope_keys(conn: &rusqlite::Connection, session_id: &str, model: Option<&str>) -> Result<ScopeKeys> {
    // CAST: a bare `?1` in a WHERE on `runs` is compared with the partial
    // index's `status = 'running'`, which makes SQLite (STAT4 build)
    // re-prepare the statement whenever the value changes: every call.
    type Row = (Option<String>, Option<String>, Option<String>, Option<String>);
    let row: Option<Row> = conn
        .prepare_cached(
            "SELECT r.cron_job_id, r.sender_id, r.profile, s.model FROM runs s
             JOIN runs r ON r.session_id = s.root_session_id WHERE s.session_id = CAST(?1 AS TEXT)",
        )?
        .query_row(params![session_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .optional()?;
    let (cron_job, sender, profile, run_model) = row.unwrap_or_default();
    Ok(ScopeKeys {
        cron_job,
        sender,
        profile,
        model: model.map(str::to_string).or(run_model),
    })
}

/// Records the process's profile on a run that has none yet.
pub(super) fn note_profile(tx: &Transaction<'_>, session_id: &str, profile: Option<&str>) -> Result<()> {
    if let Some(p) = profile.filter(|p| !p.is_empty()) {
        tx.prepare_cached(
            "UPDATE runs SET profile = CAST(?2 AS TEXT) WHERE session_id = CAST(?1 AS TEXT) AND profile IS NULL",
        )?
        .execute(params![session_id, p])?;
    }
    Ok(())
}

/// pre_api_request: reserve the call's estimated cost against every scope
/// id it counts toward (replacing the reservation of an earlier attempt).
pub(super) fn on_pre_api_request(tx: &Transaction<'_>, prices: &PriceTable, e: &PreApiRequest, at: f64) -> Result<()> {
    let a = &e.api;
    let model = a.model.as_deref().unwrap_or("");
    let amount = prices.cost(model, a.provider.as_deref(), &reservation_usage(e)).usd;
    let keys = scope_keys(tx, &a.session_id, a.model.as_deref())?;
    release(tx, &a.api_request_id)?;
    if amount <= 0.0 {
        return Ok(());
    }
    for (scope, id) in keys.iter() {
        tx.prepare_cached(
            "INSERT INTO budget_reservations (scope, id, api_request_id, amount_usd, at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (scope, id, api_request_id) DO UPDATE SET amount_usd = excluded.amount_usd, at = excluded.at",
        )?
        .execute(params![scope.as_str(), id, a.api_request_id, amount, at])?;
    }
    Ok(())
}

/// The usage a request's reservation is priced at: its approximate input
/// and its `max_tokens` (capped), or `RESERVED_OUTPUT_TOKENS`.
pub fn reservation_usage(e: &PreApiRequest) -> Usage {
    Usage {
        input_tokens: e.approx_input_tokens.unwrap_or(0).max(0),
        output_tokens: e
            .max_tokens
            .unwrap_or(RESERVED_OUTPUT_TOKENS)
            .clamp(0, MAX_RESERVED_OUTPUT_TOKENS),
        ..Usage::default()
    }
}

fn release(tx: &Transaction<'_>, api_request_id: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM budget_reservations WHERE api_request_id = ?1")?
        .execute(params![api_request_id])?;
    Ok(())
}

/// post_api_request: settle the reservation and, for a call recorded now,
/// add its cost to the rollups of every scope id it counts toward and
/// watch for a model that turned from free to paid.
pub(super) fn on_post_api_request(
    tx: &Transaction<'_>,
    e: &PostApiRequest,
    call: Option<RecordedCall<'_>>,
    at: f64,
    rollup: &mut SpendRollup,
) -> Result<()> {
    release(tx, &e.api.api_request_id)?;
    let Some(call) = call else { return Ok(()) };
    let keys = scope_keys(tx, &e.api.session_id, Some(call.model).filter(|m| !m.is_empty()))?;
    let estimated = if call.estimated { call.cost_usd } else { 0.0 };
    let t = call.ended_at as i64;
    for (scope, id) in keys.iter() {
        for (level, width) in BUCKET_SECONDS.iter().enumerate() {
            rollup.add(
                (
                    scope.as_str(),
                    id.to_string(),
                    level as i64,
                    t.div_euclid(*width) * width,
                ),
                call.cost_usd,
                estimated,
            );
        }
    }
    add_to_periods(tx, &keys, call.ended_at, call.cost_usd, estimated)?;
    watch_free_to_paid(tx, &call, at)
}

/// The spend bucket rows one transaction adds to, summed before they are
/// written: a batch of calls of the same sessions, model and day then
/// updates each row once instead of once per call. Nothing reads
/// `budget_spend` while events are applied; [`SpendRollup::write`] runs
/// before the transaction commits.
#[derive(Default)]
pub(super) struct SpendRollup {
    rows: HashMap<BucketRow, (f64, f64, i64)>,
}

/// A `budget_spend` row's key: scope, id, level, bucket start.
type BucketRow = (&'static str, String, i64, i64);

impl SpendRollup {
    /// Adds one call's cost (and estimated cost) to `row`.
    fn add(&mut self, row: BucketRow, cost: f64, estimated: f64) {
        let sums = self.rows.entry(row).or_default();
        sums.0 += cost;
        sums.1 += estimated;
        sums.2 += 1;
    }

    /// Adds the sums to their rows.
    pub(super) fn write(&mut self, tx: &Transaction<'_>) -> Result<()> {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO budget_spend (scope, id, level, bucket, cost_usd, estimated_usd, calls)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (scope, id, level, bucket) DO UPDATE SET cost_usd = cost_usd + excluded.cost_usd,
                estimated_usd = estimated_usd + excluded.estimated_usd, calls = calls + excluded.calls",
        )?;
        for ((scope, id, level, bucket), (cost, estimated, calls)) in self.rows.drain() {
            stmt.execute(params![scope, id, level, bucket, cost, estimated, calls])?;
        }
        Ok(())
    }
}

/// Adds a cost to its period of every window, in every registered zone.
fn add_to_periods(tx: &Transaction<'_>, keys: &ScopeKeys, at: f64, cost: f64, estimated: f64) -> Result<()> {
    let zones: Vec<String> = {
        let mut stmt = tx.prepare_cached("SELECT zone FROM budget_zones")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let t = budget::timestamp(at);
    for zone in zones {
        let Some(tz) = zone_named(&zone) else { continue };
        for w in Window::ALL {
            let period = window_bounds(w, t, &tz).0.as_second();
            for (scope, id) in keys.iter() {
                tx.prepare_cached(
                    "INSERT INTO budget_period (scope, id, zone, win, period, cost_usd, estimated_usd)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                     ON CONFLICT (scope, id, zone, win, period) DO UPDATE SET
                        cost_usd = cost_usd + excluded.cost_usd, estimated_usd = estimated_usd + excluded.estimated_usd",
                )?
                .execute(params![scope.as_str(), id, zone, w.as_str(), period, cost, estimated])?;
            }
        }
    }
    Ok(())
}

/// The zone of an IANA name, parsed once per process.
fn zone_named(name: &str) -> Option<jiff::tz::TimeZone> {
    static ZONES: std::sync::Mutex<Vec<(String, jiff::tz::TimeZone)>> = std::sync::Mutex::new(Vec::new());
    let mut zones = ZONES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, tz)) = zones.iter().find(|(n, _)| n == name) {
        return Some(tz.clone());
    }
    let tz = jiff::tz::TimeZone::get(name).ok()?;
    zones.push((name.to_string(), tz.clone()));
    Some(tz)
}

fn watch_free_to_paid(tx: &Transaction<'_>, call: &RecordedCall<'_>, at: f64) -> Result<()> {
    if call.model.is_empty() || call.source == PriceSource::Unknown {
        return Ok(());
    }
    let key = budget::paid_model_key(call.model);
    let free = call.cost_usd <= 0.0;
    let seen: Option<(Option<f64>, Option<f64>)> = tx
        .prepare_cached("SELECT free_at, paid_at FROM budget_models WHERE model = ?1")?
        .query_row(params![key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (free_at, paid_at) = seen.unwrap_or((None, None));
    if (free && free_at.is_some()) || (!free && paid_at.is_some()) {
        return Ok(());
    }
    tx.prepare_cached(
        "INSERT INTO budget_models (model, free_at, paid_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (model) DO UPDATE SET free_at = COALESCE(free_at, excluded.free_at),
            paid_at = COALESCE(paid_at, excluded.paid_at)",
    )?
    .execute(params![key, free.then_some(at), (!free).then_some(at)])?;
    if !free && free_at.is_some() {
        let text = format!(
            "[hermes-otel alert] Model {key} was free when first seen and now costs money \
             (${:.6} for a call to {}). Check the model id and its pricing.",
            call.cost_usd, call.model
        );
        raise_alert(tx, alert::FREE_TO_PAID, key, &text, at)?;
    }
    Ok(())
}

/// api_request_error: release the reservation (a retry reserves again) and
/// count a 404 that is not retryable as the model being unavailable.
pub(super) fn on_api_request_error(tx: &Transaction<'_>, e: &ApiRequestError, at: f64) -> Result<()> {
    release(tx, &e.api.api_request_id)?;
    if e.status_code == Some(404) && e.retryable == Some(false) {
        let model = e.api.model.as_deref().unwrap_or("(unknown model)");
        let provider = e.api.provider.as_deref().unwrap_or("its provider");
        let text = format!(
            "[hermes-otel alert] Model {model} is unavailable at {provider}: the API answered 404 (not retryable)."
        );
        raise_alert(tx, alert::MODEL_UNAVAILABLE, model, &text, at)?;
    }
    Ok(())
}

/// Adds an occurrence of an alert; the first one makes it pending and
/// counts in `hermes.alerts`.
fn raise_alert(conn: &rusqlite::Connection, kind: &str, key: &str, text: &str, at: f64) -> Result<()> {
    let new = conn
        .prepare_cached(
            "INSERT INTO alerts (kind, key, text, count, first_at, last_at) VALUES (?1, ?2, ?3, 1, ?4, ?4)
             ON CONFLICT (kind, key) DO NOTHING",
        )?
        .execute(params![kind, key, text, at])?;
    if new == 1 {
        count_alert(conn, kind, at)?;
    } else {
        conn.prepare_cached(
            "UPDATE alerts SET count = count + 1, last_at = MAX(last_at, ?3) WHERE kind = ?1 AND key = ?2",
        )?
        .execute(params![kind, key, at])?;
    }
    Ok(())
}

/// One more alert of `kind` in the `hermes.alerts` counter.
fn count_alert(conn: &rusqlite::Connection, kind: &str, at: f64) -> Result<()> {
    super::add_to_counter(conn, semconv::metric::ALERTS, &metrics::alert_attrs(kind), 1.0, at)
}

impl Store {
    /// Runs `f` inside one read transaction: every statement of `f` reads
    /// the same snapshot, and the WAL read lock is taken once instead of
    /// once per statement (each costs file-lock system calls). `f` must
    /// only read.
    pub fn read_snapshot<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        self.conn().prepare_cached("BEGIN")?.execute([])?;
        let out = f(self);
        // A read transaction has nothing to roll back; end it either way.
        let end = self.conn().prepare_cached("COMMIT")?.execute([]);
        let out = out?;
        end?;
        Ok(out)
    }

    /// Makes sure per-period totals are kept for the IANA zone `zone`:
    /// if it is new, registers it and fills its current periods from the
    /// spend buckets, in one write transaction (so no LLM call recorded by
    /// any process falls between the fill and the first increment). Returns
    /// whether the zone is registered. Off the hook path: once per budget
    /// file load.
    pub fn ensure_budget_zone(&self, zone: &str, now: f64) -> Result<bool> {
        let Some(tz) = zone_named(zone) else { return Ok(false) };
        let known = |conn: &rusqlite::Connection| -> Result<bool> {
            Ok(conn
                .prepare_cached("SELECT 1 FROM budget_zones WHERE zone = ?1")?
                .query_row(params![zone], |_| Ok(()))
                .optional()?
                .is_some())
        };
        if known(self.conn())? {
            return Ok(true);
        }
        self.conn().execute_batch("BEGIN IMMEDIATE")?;
        let filled = (|| -> Result<()> {
            if known(self.conn())? {
                return Ok(());
            }
            let t = budget::timestamp(now);
            let starts: Vec<(Window, i64)> = Window::ALL
                .iter()
                .map(|w| (*w, window_bounds(*w, t, &tz).0.as_second()))
                .collect();
            let since = starts.iter().map(|s| s.1).min().unwrap_or(0);
            // Every scope id that spent since the earliest current period.
            let ids: Vec<(String, String)> = {
                let mut stmt = self
                    .conn()
                    .prepare("SELECT DISTINCT scope, id FROM budget_spend WHERE level = 2 AND bucket >= ?1")?;
                let rows = stmt.query_map(params![since.div_euclid(86_400) * 86_400], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
                rows.collect::<rusqlite::Result<_>>()?
            };
            let period_starts: Vec<i64> = starts.iter().map(|s| s.1).collect();
            for (scope_name, id) in ids {
                let Some(scope) = Scope::parse(&scope_name) else {
                    continue;
                };
                let spends = self.bucket_window_spends(scope, &id, &period_starts, now, None)?;
                for ((w, period), spend) in starts.iter().zip(spends) {
                    if spend.settled_usd != 0.0 {
                        self.conn()
                            .prepare_cached(
                                "INSERT INTO budget_period (scope, id, zone, win, period, cost_usd, estimated_usd)
                                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                            )?
                            .execute(params![
                                scope_name,
                                id,
                                zone,
                                w.as_str(),
                                period,
                                spend.settled_usd,
                                spend.estimated_usd
                            ])?;
                    }
                }
            }
            self.conn()
                .prepare_cached("INSERT INTO budget_zones (zone, registered_at) VALUES (?1, ?2)")?
                .execute(params![zone, now])?;
            Ok(())
        })();
        match filled {
            Ok(()) => {
                self.conn().execute_batch("COMMIT")?;
                Ok(true)
            }
            Err(e) => {
                let _ = self.conn().execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// The spends of one scope id in the windows starting at `starts` (in
    /// `Window::ALL` order, as `budgets_for` lists them) from the per-period
    /// totals of a registered zone: at most three primary-key lookups and
    /// the id's open reservations, in one statement. The gating hooks' read.
    pub fn period_spends(
        &self,
        scope: Scope,
        id: &str,
        zone: &str,
        windows: &[(Window, i64)],
        now: f64,
        exclude: Option<&str>,
    ) -> Result<Vec<Spend>> {
        let mut period = [i64::MIN; 3];
        for (w, start) in windows {
            period[*w as usize] = *start;
        }
        let mut stmt = self.conn().prepare_cached(
            "SELECT 0, cost_usd, estimated_usd FROM budget_period WHERE scope = ?1 AND id = ?2 AND zone = ?3 AND win = 'daily' AND period = ?4
             UNION ALL SELECT 1, cost_usd, estimated_usd FROM budget_period WHERE scope = ?1 AND id = ?2 AND zone = ?3 AND win = 'weekly' AND period = ?5
             UNION ALL SELECT 2, cost_usd, estimated_usd FROM budget_period WHERE scope = ?1 AND id = ?2 AND zone = ?3 AND win = 'monthly' AND period = ?6
             UNION ALL SELECT 3, TOTAL(amount_usd), 0 FROM budget_reservations
                 WHERE scope = ?1 AND id = ?2 AND at >= ?7 AND api_request_id IS NOT ?8",
        )?;
        let mut rows = stmt.query(params![
            scope.as_str(),
            id,
            zone,
            period[0],
            period[1],
            period[2],
            now - RESERVATION_TTL_SECONDS,
            exclude
        ])?;
        let mut by_window = [Spend::default(); 3];
        let mut reserved = 0.0;
        while let Some(row) = rows.next()? {
            let which: i64 = row.get(0)?;
            let cost: f64 = row.get(1)?;
            match usize::try_from(which) {
                Ok(w) if w < 3 => {
                    by_window[w].settled_usd = cost;
                    by_window[w].estimated_usd = row.get(2)?;
                }
                _ => reserved = cost,
            }
        }
        Ok(windows
            .iter()
            .map(|(w, _)| Spend {
                reserved_usd: reserved,
                ..by_window[*w as usize]
            })
            .collect())
    }

    /// What `session_id` is accountable to (see [`ScopeKeys`]).
    pub fn budget_scope_keys(&self, session_id: &str, model: Option<&str>) -> Result<ScopeKeys> {
        scope_keys(self.conn(), session_id, model)
    }

    /// The spend of one scope id in `[start, end)` (Unix seconds): settled
    /// cost from at most 83 bucket rows, plus the reservations made after
    /// `now - RESERVATION_TTL_SECONDS`, except `exclude`'s own.
    pub fn budget_spend(
        &self,
        scope: Scope,
        id: &str,
        start: i64,
        end: i64,
        now: f64,
        exclude: Option<&str>,
    ) -> Result<Spend> {
        let mut ranges = bucket_ranges(start, end);
        // Five ranges at most; unused ones are empty.
        ranges.resize(5, (0, 0, 0));
        let r = &ranges;
        let (settled, estimated): (Option<f64>, Option<f64>) = self
            .conn()
            .prepare_cached(
                "SELECT SUM(cost_usd), SUM(estimated_usd) FROM (
                    SELECT cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = ?3 AND bucket >= ?4 AND bucket < ?5
                    UNION ALL SELECT cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = ?6 AND bucket >= ?7 AND bucket < ?8
                    UNION ALL SELECT cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = ?9 AND bucket >= ?10 AND bucket < ?11
                    UNION ALL SELECT cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = ?12 AND bucket >= ?13 AND bucket < ?14
                    UNION ALL SELECT cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = ?15 AND bucket >= ?16 AND bucket < ?17)",
            )?
            .query_row(
                params![
                    scope.as_str(),
                    id,
                    r[0].0,
                    r[0].1,
                    r[0].2,
                    r[1].0,
                    r[1].1,
                    r[1].2,
                    r[2].0,
                    r[2].1,
                    r[2].2,
                    r[3].0,
                    r[3].1,
                    r[3].2,
                    r[4].0,
                    r[4].1,
                    r[4].2
                ],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )?;
        let reserved: Option<f64> = self
            .conn()
            .prepare_cached(
                "SELECT SUM(amount_usd) FROM budget_reservations
                 WHERE scope = ?1 AND id = ?2 AND at >= ?3 AND api_request_id IS NOT ?4",
            )?
            .query_row(
                params![scope.as_str(), id, now - RESERVATION_TTL_SECONDS, exclude],
                |row| row.get(0),
            )?;
        Ok(Spend {
            settled_usd: settled.unwrap_or(0.0),
            estimated_usd: estimated.unwrap_or(0.0),
            reserved_usd: reserved.unwrap_or(0.0),
        })
    }

    /// The spends of one scope id in the windows starting at `starts` and
    /// holding `now` (see [`budget::open_ranges`]), in one statement: at
    /// most 7 short ranges of the rollup's primary key and the id's open
    /// reservations. This is the gating hooks' read.
    pub fn bucket_window_spends(
        &self,
        scope: Scope,
        id: &str,
        starts: &[i64],
        now: f64,
        exclude: Option<&str>,
    ) -> Result<Vec<Spend>> {
        let ranges: Vec<[(u8, i64, i64); 3]> = starts.iter().map(|s| budget::open_ranges(*s)).collect();
        // Distinct hour and quarter ranges (windows starting on the same
        // day share them; different days never overlap), padded to three.
        let mut hours: Vec<(i64, i64)> = Vec::new();
        let mut quarters: Vec<(i64, i64)> = Vec::new();
        for r in &ranges {
            for (list, (_, a, b)) in [(&mut quarters, r[0]), (&mut hours, r[1])] {
                if a < b && !list.contains(&(a, b)) {
                    list.push((a, b));
                }
            }
        }
        hours.resize(3, (0, 0));
        quarters.resize(3, (0, 0));
        let days_from = ranges.iter().map(|r| r[2].1).min().unwrap_or(i64::MAX);
        // Up to three windows; a missing one matches no row.
        let mut w = [(i64::MAX, i64::MAX, i64::MAX); 3];
        for (slot, r) in w.iter_mut().zip(&ranges) {
            *slot = (r[0].1, r[1].1, r[2].1);
        }
        // The sums are computed by SQLite: only one row comes back.
        let mut stmt = self.conn().prepare_cached(
            "WITH rows (level, bucket, cost, est) AS (
                SELECT 2, bucket, cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 2 AND bucket >= ?3
                UNION ALL SELECT 1, bucket, cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 1 AND bucket >= ?4 AND bucket < ?5
                UNION ALL SELECT 1, bucket, cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 1 AND bucket >= ?6 AND bucket < ?7
                UNION ALL SELECT 1, bucket, cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 1 AND bucket >= ?8 AND bucket < ?9
                UNION ALL SELECT 0, bucket, cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 0 AND bucket >= ?10 AND bucket < ?11
                UNION ALL SELECT 0, bucket, cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 0 AND bucket >= ?12 AND bucket < ?13
                UNION ALL SELECT 0, bucket, cost_usd, estimated_usd FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 0 AND bucket >= ?14 AND bucket < ?15),
             member (level, bucket, cost, est, w1, w2, w3) AS (
                SELECT level, bucket, cost, est,
                  CASE level WHEN 2 THEN bucket >= ?18 WHEN 1 THEN bucket >= ?17 AND bucket < ?18 ELSE bucket >= ?16 AND bucket < ?17 END,
                  CASE level WHEN 2 THEN bucket >= ?21 WHEN 1 THEN bucket >= ?20 AND bucket < ?21 ELSE bucket >= ?19 AND bucket < ?20 END,
                  CASE level WHEN 2 THEN bucket >= ?24 WHEN 1 THEN bucket >= ?23 AND bucket < ?24 ELSE bucket >= ?22 AND bucket < ?23 END
                FROM rows)
             SELECT TOTAL(cost * w1), TOTAL(est * w1), TOTAL(cost * w2), TOTAL(est * w2), TOTAL(cost * w3), TOTAL(est * w3),
                (SELECT TOTAL(amount_usd) FROM budget_reservations
                  WHERE scope = ?1 AND id = ?2 AND at >= ?25 AND api_request_id IS NOT ?26)
             FROM member",
        )?;
        let sums: [f64; 7] = stmt.query_row(
            params![
                scope.as_str(),
                id,
                days_from,
                hours[0].0,
                hours[0].1,
                hours[1].0,
                hours[1].1,
                hours[2].0,
                hours[2].1,
                quarters[0].0,
                quarters[0].1,
                quarters[1].0,
                quarters[1].1,
                quarters[2].0,
                quarters[2].1,
                w[0].0,
                w[0].1,
                w[0].2,
                w[1].0,
                w[1].1,
                w[1].2,
                w[2].0,
                w[2].1,
                w[2].2,
                now - RESERVATION_TTL_SECONDS,
                exclude
            ],
            |r| {
                Ok([
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ])
            },
        )?;
        let out = (0..starts.len())
            .map(|i| Spend {
                settled_usd: sums[2 * i],
                estimated_usd: sums[2 * i + 1],
                reserved_usd: sums[6],
            })
            .collect();
        Ok(out)
    }

    /// The state of every budget of a session with `keys`, now.
    pub fn budget_states_for(
        &self,
        cfg: &BudgetConfig,
        keys: &ScopeKeys,
        now: f64,
        exclude: Option<&str>,
    ) -> Result<Vec<BudgetState>> {
        let mut bounds: [Option<(i64, i64, String)>; 3] = [None, None, None];
        self.states_of(cfg, cfg.budgets_for(keys), &mut bounds, now, exclude, None)
    }

    /// [`Store::budget_states_for`] reading the per-period totals of the
    /// registered zone `zone` (see [`Store::ensure_budget_zone`]), which
    /// must be `cfg`'s zone.
    pub fn budget_states_in_zone(
        &self,
        cfg: &BudgetConfig,
        keys: &ScopeKeys,
        now: f64,
        exclude: Option<&str>,
        zone: &str,
    ) -> Result<Vec<BudgetState>> {
        let mut bounds: [Option<(i64, i64, String)>; 3] = [None, None, None];
        self.states_of(cfg, cfg.budgets_for(keys), &mut bounds, now, exclude, Some(zone))
    }

    /// Reads the spends of `budgets` (one statement per scope id) and
    /// assesses them.
    fn states_of(
        &self,
        cfg: &BudgetConfig,
        budgets: Vec<budget::Budget>,
        bounds: &mut [Option<(i64, i64, String)>; 3],
        now: f64,
        exclude: Option<&str>,
        zone: Option<&str>,
    ) -> Result<Vec<BudgetState>> {
        let mut out = Vec::with_capacity(budgets.len());
        // With a fleet, once this store synced: the live hosts then (a store
        // that never synced knows no fleet figures and counts its own).
        let fleet_hosts = match cfg.fleet && !budgets.is_empty() {
            true => self.fleet_status()?.filter(|s| s.synced_at.is_some()).map(|s| s.hosts),
            false => None,
        };
        let mut i = 0;
        while i < budgets.len() {
            // budgets_for lists each scope id's windows together.
            let j = i + budgets[i..]
                .iter()
                .take_while(|b| b.scope == budgets[i].scope && b.id == budgets[i].id)
                .count();
            let windows: Vec<(i64, i64, String)> = budgets[i..j]
                .iter()
                .map(|b| window(bounds, cfg, b.window, now))
                .collect();
            let spends = match zone {
                Some(zone) => {
                    let periods: Vec<(Window, i64)> = budgets[i..j]
                        .iter()
                        .zip(&windows)
                        .map(|(b, w)| (b.window, w.0))
                        .collect();
                    self.period_spends(budgets[i].scope, &budgets[i].id, zone, &periods, now, exclude)?
                }
                None => {
                    let starts: Vec<i64> = windows.iter().map(|w| w.0).collect();
                    self.bucket_window_spends(budgets[i].scope, &budgets[i].id, &starts, now, exclude)?
                }
            };
            for ((b, (_, end, period)), spend) in budgets[i..j].iter().zip(windows).zip(spends) {
                let (spend, fleet) = match fleet_hosts {
                    Some(hosts) => {
                        let (spend, share) = self.fleet_share(cfg, b, &period, spend, hosts)?;
                        (spend, Some(share))
                    }
                    None => (spend, None),
                };
                let (level, softened) = assess(cfg, b, spend);
                out.push(BudgetState {
                    budget: b.clone(),
                    spend,
                    level,
                    softened,
                    period,
                    window_end: end,
                    fleet,
                });
            }
            i = j;
        }
        Ok(out)
    }

    /// The state of every budget now: global, every override, and for a
    /// scope with a default, every id that spent in the window. For
    /// `budget list` and the metrics' budget gauges (not a hook path: it
    /// lists ids from the day buckets of the longest window).
    pub fn budget_states(&self, cfg: &BudgetConfig, now: f64) -> Result<Vec<BudgetState>> {
        let mut out = Vec::new();
        let mut bounds: [Option<(i64, i64, String)>; 3] = [None, None, None];
        for (scope, limits) in &cfg.scopes {
            let mut ids: std::collections::BTreeSet<String> = limits.overrides.keys().cloned().collect();
            if *scope == Scope::Global {
                ids.insert(String::new());
            } else if limits.default != budget::Limits::default() {
                let since = Window::ALL
                    .iter()
                    .filter(|w| limits.default.get(**w).is_some())
                    .map(|w| window(&mut bounds, cfg, *w, now).0)
                    .min()
                    .unwrap_or(0);
                let mut stmt = self.conn().prepare_cached(
                    "SELECT DISTINCT id FROM budget_spend WHERE scope = ?1 AND level = 2 AND bucket >= ?2",
                )?;
                let rows = stmt.query_map(params![scope.as_str(), since.div_euclid(86_400) * 86_400], |r| {
                    r.get::<_, String>(0)
                })?;
                for id in rows {
                    ids.insert(id?);
                }
                if cfg.fleet {
                    // Ids only other hosts spent under.
                    ids.extend(self.fleet_view_ids(scope.as_str())?);
                }
            }
            let mut budgets = Vec::new();
            for id in ids {
                let l = cfg.limits(*scope, &id);
                for w in Window::ALL {
                    if let Some(limit) = l.get(w) {
                        budgets.push(budget::Budget {
                            scope: *scope,
                            id: id.clone(),
                            window: w,
                            limit,
                        });
                    }
                }
            }
            out.extend(self.states_of(cfg, budgets, &mut bounds, now, None, None)?);
        }
        Ok(out)
    }

    /// Claims a once-per-period action (`kind` `pause`) for a budget state;
    /// true for the one caller, in any process, that claimed it first.
    pub fn budget_claim_once(&self, kind: &str, state: &BudgetState, at: f64, session_id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO budget_once (kind, scope, id, win, period, at, session_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                kind,
                state.budget.scope.as_str(),
                state.budget.id,
                state.budget.window.as_str(),
                state.period,
                at,
                session_id
            ])?;
        Ok(n == 1)
    }

    /// Raises and delivers at once a one-shot alert (budget soft or hard):
    /// true if this call raised it (first in any process).
    pub fn raise_alert_delivered(&self, kind: &str, key: &str, text: &str, at: f64, session_id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "INSERT INTO alerts (kind, key, text, count, first_at, last_at, delivered_at, delivered_to)
                 VALUES (?1, ?2, ?3, 1, ?4, ?4, ?4, ?5) ON CONFLICT DO NOTHING",
            )?
            .execute(params![kind, key, text, at, session_id])?;
        if n == 1 {
            count_alert(self.conn(), kind, at)?;
        }
        Ok(n == 1)
    }

    /// Up to `limit` alerts not shown yet, oldest first: `(kind, key, text)`
    /// with the occurrence count in the text. A partial index holds only
    /// these, so this is one short read however many alerts were shown.
    pub fn pending_alerts(&self, limit: usize) -> Result<Vec<(String, String, String)>> {
        // The limit is part of the text, not a parameter: a bound LIMIT makes
        // SQLite (STAT4 build) re-prepare the statement on every run.
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT kind, key, text, count FROM alerts WHERE delivered_at IS NULL ORDER BY first_at LIMIT {limit}"
        ))?;
        let rows = stmt.query_map([], |r| {
            let (kind, key, text, count): (String, String, String, i64) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
            let text = if count > 1 {
                format!("{text} Seen {count} times.")
            } else {
                text
            };
            Ok((kind, key, text))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The cost of every LLM call ever recorded, any process, from the
    /// global daily rollups (only ever added to): its growth is what was
    /// spent in between.
    pub fn spend_total(&self) -> Result<f64> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT TOTAL(cost_usd) FROM budget_spend WHERE scope = 'global' AND id = '' AND level = 2",
            )?
            .query_row([], |r| r.get(0))?)
    }

    /// What every open reservation holds, all processes (global scope,
    /// which every request reserves against; stale ones too, as an upper
    /// bound of what any scope's reservations hold).
    pub fn reserved_now(&self) -> Result<f64> {
        Ok(self
            .conn()
            .prepare_cached("SELECT TOTAL(amount_usd) FROM budget_reservations WHERE scope = 'global' AND id = ''")?
            .query_row([], |r| r.get(0))?)
    }

    /// Whether any alert waits to be shown (one probe of the partial index).
    pub fn has_pending_alerts(&self) -> Result<bool> {
        Ok(self
            .conn()
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM alerts WHERE delivered_at IS NULL)")?
            .query_row([], |r| r.get(0))?)
    }

    /// Marks a pending alert shown to `session_id`; true for the one caller,
    /// in any process, that got it (each alert is shown once).
    pub fn deliver_alert(&self, kind: &str, key: &str, at: f64, session_id: &str) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE alerts SET delivered_at = ?3, delivered_to = ?4 WHERE kind = ?1 AND key = ?2 AND delivered_at IS NULL",
            )?
            .execute(params![kind, key, at, session_id])?;
        Ok(n == 1)
    }

    /// Takes up to `limit` pending alerts for a pre_llm_call of
    /// `session_id`: each is delivered once, to one session, in any process.
    pub fn take_pending_alerts(&self, at: f64, session_id: &str, limit: usize) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for (kind, key, text) in self.pending_alerts(limit)? {
            if self.deliver_alert(&kind, &key, at, session_id)? {
                out.push(text);
            }
        }
        Ok(out)
    }

    /// Counts one verdict (see [`budget::verdict`]) on `state`'s budget,
    /// here and in the `hermes.budget.verdicts` counter.
    pub fn count_budget_verdict(&self, verdict: &str, state: &BudgetState, at: f64) -> Result<()> {
        let attrs = metrics::verdict_attrs(state.budget.scope.as_str(), state.budget.window.as_str(), verdict);
        super::add_to_counter(self.conn(), semconv::metric::BUDGET_VERDICTS, &attrs, 1.0, at)?;
        self.conn()
            .prepare_cached(
                "INSERT INTO budget_verdicts (verdict, count) VALUES (?1, 1)
                 ON CONFLICT (verdict) DO UPDATE SET count = count + 1",
            )?
            .execute(params![verdict])?;
        Ok(())
    }

    /// Verdicts given so far, by verdict (`soft`, `hard`, `blocked`,
    /// `paused`), every one of [`budget::verdict::ALL`] present: the
    /// cumulative `hermes.budget.verdicts` counter.
    pub fn budget_verdict_counts(&self) -> Result<Vec<(&'static str, i64)>> {
        let mut out = Vec::new();
        for v in budget::verdict::ALL {
            let n: Option<i64> = self
                .conn()
                .prepare_cached("SELECT count FROM budget_verdicts WHERE verdict = ?1")?
                .query_row(params![v], |r| r.get(0))
                .optional()?;
            out.push((v, n.unwrap_or(0)));
        }
        Ok(out)
    }

    /// Alerts raised so far, by kind, every one of [`budget::alert::ALL`]
    /// present: the cumulative `hermes.alerts` counter (one per alert, not
    /// per occurrence).
    pub fn alert_counts(&self) -> Result<Vec<(&'static str, i64)>> {
        let mut out = Vec::new();
        for k in budget::alert::ALL {
            let n: i64 = self
                .conn()
                .prepare_cached("SELECT COUNT(*) FROM alerts WHERE kind = ?1")?
                .query_row(params![k], |r| r.get(0))?;
            out.push((k, n));
        }
        Ok(out)
    }

    /// Every alert, newest first.
    pub fn alerts(&self) -> Result<Vec<AlertRow>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT kind, key, text, count, first_at, last_at, delivered_at FROM alerts ORDER BY last_at DESC",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(AlertRow {
                kind: r.get(0)?,
                key: r.get(1)?,
                text: r.get(2)?,
                count: r.get(3)?,
                first_at: r.get(4)?,
                last_at: r.get(5)?,
                delivered_at: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// The bounds and period name of `w` at `now`, computed once per call.
fn window(cache: &mut [Option<(i64, i64, String)>; 3], cfg: &BudgetConfig, w: Window, now: f64) -> (i64, i64, String) {
    let slot = &mut cache[w as usize];
    if slot.is_none() {
        let t = budget::timestamp(now);
        let (s, e) = window_bounds(w, t, &cfg.tz);
        let period = s.to_zoned(cfg.tz.clone()).date().to_string();
        *slot = Some((s.as_second(), e.as_second(), period));
    }
    slot.clone().unwrap_or_default()
}
