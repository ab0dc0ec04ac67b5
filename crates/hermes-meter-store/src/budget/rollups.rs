//! What the apply transaction writes for budgets: spend rollups (quarter
//! hour, hour and day buckets per scope id), per-period totals of the
//! registered zones, reservations of calls in flight, and the run's profile.
//!
//! The ledger calls the `on_*` functions inside the transaction that applies
//! a hook event, so rollups and reservations commit with the LLM call they
//! count, exactly once, whichever process applied it. Must not touch:
//! reading spends for verdicts (`spend.rs`), alerts (`alerts.rs`, which
//! this only calls to raise one).

use std::collections::HashMap;

use rusqlite::{params, OptionalExtension, Transaction};

use super::alerts::{raise_alert, watch_free_to_paid};
use crate::error::Result;
use crate::LogPlace;
use crate::Writer;
use hermes_meter_model::budget::{
    self, alert, reservation_usage, window_bounds, Scope, ScopeKeys, Window, BUCKET_SECONDS,
};
use hermes_meter_model::hook::{ApiRequestError, PostApiRequest, PreApiRequest};
use hermes_meter_model::pricing::{PriceSource, PriceTable};

/// An LLM call the ledger just recorded (first time only).
#[derive(Debug, Clone)]
pub(crate) struct RecordedCall<'a> {
    /// The model it was priced as: the one it was routed to, else the
    /// agent's.
    pub model: std::borrow::Cow<'a, str>,
    pub cost_usd: f64,
    pub source: PriceSource,
    pub estimated: bool,
    pub ended_at: f64,
    /// Input tokens with cache reads and writes; 0 for a held call.
    pub input_tokens: i64,
    /// Output tokens, reasoning included; 0 for a held call.
    pub output_tokens: i64,
}

/// What one or more calls add to a spend row: cost, tokens, and the parts
/// of them whose usage was estimated.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Sums {
    cost: f64,
    estimated_cost: f64,
    input: i64,
    output: i64,
    estimated_input: i64,
    estimated_output: i64,
}

impl Sums {
    fn of(call: &RecordedCall<'_>) -> Sums {
        let (input, output) = (call.input_tokens, call.output_tokens);
        match call.estimated {
            true => Sums {
                cost: call.cost_usd,
                estimated_cost: call.cost_usd,
                input,
                output,
                estimated_input: input,
                estimated_output: output,
            },
            false => Sums {
                cost: call.cost_usd,
                input,
                output,
                ..Sums::default()
            },
        }
    }

    fn add(&mut self, o: &Sums) {
        self.cost += o.cost;
        self.estimated_cost += o.estimated_cost;
        self.input += o.input;
        self.output += o.output;
        self.estimated_input += o.estimated_input;
        self.estimated_output += o.estimated_output;
    }
}

/// The scope keys of `session_id`: its root session's cron job, sender and
/// profile (a subagent counts toward its root's), and `model` or, when
/// `None`, the session's model.
pub(super) fn scope_keys(conn: &rusqlite::Connection, session_id: &str, model: Option<&str>) -> Result<ScopeKeys> {
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

/// Records the profile of the event's call on a run that has none yet (a
/// session belongs to the profile it started in).
pub(crate) fn note_profile(tx: &Transaction<'_>, session_id: &str, profile: Option<&str>) -> Result<()> {
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
pub(crate) fn on_pre_api_request(tx: &Transaction<'_>, prices: &PriceTable, e: &PreApiRequest, at: f64) -> Result<()> {
    let a = &e.api;
    // A routed call is priced as the model it goes to.
    let model = e.routed_model().or(a.model.as_deref()).unwrap_or("");
    let usage = reservation_usage(e);
    let amount = prices.cost(model, a.provider.as_deref(), &usage, at).usd;
    let keys = scope_keys(tx, &a.session_id, a.model.as_deref())?;
    release(tx, &a.api_request_id)?;
    // A call reserves its tokens even when it costs nothing (token
    // budgets), and nothing when it expects neither.
    if amount <= 0.0 && usage.input_tokens + usage.output_tokens <= 0 {
        return Ok(());
    }
    for (scope, id) in keys.iter() {
        tx.prepare_cached(
            "INSERT INTO budget_reservations (scope, id, api_request_id, amount_usd, at, input_tokens, output_tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (scope, id, api_request_id) DO UPDATE SET amount_usd = excluded.amount_usd, at = excluded.at,
                input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens",
        )?
        .execute(params![
            scope.as_str(),
            id,
            a.api_request_id,
            amount.max(0.0),
            at,
            usage.input_tokens,
            usage.output_tokens
        ])?;
    }
    Ok(())
}

fn release(tx: &Transaction<'_>, api_request_id: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM budget_reservations WHERE api_request_id = ?1")?
        .execute(params![api_request_id])?;
    Ok(())
}

/// post_api_request: settle the reservation and, for a call recorded now,
/// add its cost to the rollups of every scope id it counts toward and
/// watch for a model that turned from free to paid.
pub(crate) fn on_post_api_request(
    tx: &Transaction<'_>,
    e: &PostApiRequest,
    call: Option<RecordedCall<'_>>,
    at: f64,
    rollup: &mut SpendRollup,
) -> Result<()> {
    release(tx, &e.api.api_request_id)?;
    let Some(call) = call else { return Ok(()) };
    let keys = scope_keys(
        tx,
        &e.api.session_id,
        Some(call.model.as_ref()).filter(|m| !m.is_empty()),
    )?;
    let sums = Sums::of(&call);
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
                &sums,
                1,
            );
        }
    }
    add_to_periods(tx, &keys, call.ended_at, &sums)?;
    watch_free_to_paid(tx, &call, at, api_place(&e.api, None))
}

/// Where an LLM call's alert happened: its turn, and the span of
/// `attempt` when it is known.
fn api_place(a: &hermes_meter_model::hook::ApiRequest, attempt: Option<i64>) -> LogPlace<'_> {
    LogPlace {
        session_id: Some(&a.session_id),
        turn_id: a.turn_id.as_deref(),
        span_id: attempt.map(|n| hermes_meter_model::span::attempt_span_id(&a.api_request_id, n)),
    }
}

/// Adds a held call the user confirmed to its spend buckets and periods:
/// its cost now, in the buckets of when it ended. It was counted as a call
/// (at no cost) when it was recorded, so the call counts stay.
pub(crate) fn on_usage_confirmed(
    tx: &Transaction<'_>,
    session_id: &str,
    call: &RecordedCall<'_>,
    rollup: &mut SpendRollup,
) -> Result<()> {
    let keys = scope_keys(tx, session_id, Some(call.model.as_ref()).filter(|m| !m.is_empty()))?;
    let sums = Sums::of(call);
    let t = call.ended_at as i64;
    for (scope, id) in keys.iter() {
        for (level, width) in BUCKET_SECONDS.iter().enumerate() {
            let row = (
                scope.as_str(),
                id.to_string(),
                level as i64,
                t.div_euclid(*width) * width,
            );
            rollup.add(row, &sums, 0);
        }
    }
    add_to_periods(tx, &keys, call.ended_at, &sums)
}

/// The spend bucket rows one transaction adds to, summed before they are
/// written: a batch of calls of the same sessions, model and day then
/// updates each row once instead of once per call. Nothing reads
/// `budget_spend` while events are applied; [`SpendRollup::write`] runs
/// before the transaction commits.
#[derive(Default)]
pub(crate) struct SpendRollup {
    rows: HashMap<BucketRow, (Sums, i64)>,
}

/// A `budget_spend` row's key: scope, id, level, bucket start.
type BucketRow = (&'static str, String, i64, i64);

impl SpendRollup {
    /// Adds `calls` calls' sums to `row`.
    fn add(&mut self, row: BucketRow, sums: &Sums, calls: i64) {
        let entry = self.rows.entry(row).or_default();
        entry.0.add(sums);
        entry.1 += calls;
    }

    /// Adds the sums to their rows.
    pub(crate) fn write(&mut self, tx: &Transaction<'_>) -> Result<()> {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO budget_spend (scope, id, level, bucket, cost_usd, estimated_usd, calls, input_tokens,
                output_tokens, estimated_input_tokens, estimated_output_tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (scope, id, level, bucket) DO UPDATE SET cost_usd = cost_usd + excluded.cost_usd,
                estimated_usd = estimated_usd + excluded.estimated_usd, calls = calls + excluded.calls,
                input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
                estimated_input_tokens = estimated_input_tokens + excluded.estimated_input_tokens,
                estimated_output_tokens = estimated_output_tokens + excluded.estimated_output_tokens",
        )?;
        for ((scope, id, level, bucket), (s, calls)) in self.rows.drain() {
            stmt.execute(params![
                scope,
                id,
                level,
                bucket,
                s.cost,
                s.estimated_cost,
                calls,
                s.input,
                s.output,
                s.estimated_input,
                s.estimated_output
            ])?;
        }
        Ok(())
    }
}

/// Adds a call's sums to its period of every calendar window, in every
/// registered zone (rolling windows are summed from the buckets).
fn add_to_periods(tx: &Transaction<'_>, keys: &ScopeKeys, at: f64, sums: &Sums) -> Result<()> {
    let zones: Vec<String> = {
        let mut stmt = tx.prepare_cached("SELECT zone FROM budget_zones")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let t = budget::timestamp(at);
    for zone in zones {
        let Some(tz) = zone_named(&zone) else { continue };
        for w in Window::CALENDAR {
            let period = window_bounds(w, t, &tz).0.as_second();
            for (scope, id) in keys.iter() {
                insert_period(tx, (scope.as_str(), id, &zone, w.as_str(), period), sums)?;
            }
        }
    }
    Ok(())
}

/// Adds `sums` to one `budget_period` row: (scope, id, zone, window, period).
fn insert_period(conn: &rusqlite::Connection, row: (&str, &str, &str, &str, i64), sums: &Sums) -> Result<()> {
    let (scope, id, zone, win, period) = row;
    conn.prepare_cached(
        "INSERT INTO budget_period (scope, id, zone, win, period, cost_usd, estimated_usd, input_tokens, output_tokens,
            estimated_input_tokens, estimated_output_tokens)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
         ON CONFLICT (scope, id, zone, win, period) DO UPDATE SET
            cost_usd = cost_usd + excluded.cost_usd, estimated_usd = estimated_usd + excluded.estimated_usd,
            input_tokens = input_tokens + excluded.input_tokens, output_tokens = output_tokens + excluded.output_tokens,
            estimated_input_tokens = estimated_input_tokens + excluded.estimated_input_tokens,
            estimated_output_tokens = estimated_output_tokens + excluded.estimated_output_tokens",
    )?
    .execute(params![
        scope,
        id,
        zone,
        win,
        period,
        sums.cost,
        sums.estimated_cost,
        sums.input,
        sums.output,
        sums.estimated_input,
        sums.estimated_output
    ])?;
    Ok(())
}

/// The zone of an IANA name, parsed once per process.
pub(super) fn zone_named(name: &str) -> Option<jiff::tz::TimeZone> {
    static ZONES: std::sync::Mutex<Vec<(String, jiff::tz::TimeZone)>> = std::sync::Mutex::new(Vec::new());
    let mut zones = ZONES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, tz)) = zones.iter().find(|(n, _)| n == name) {
        return Some(tz.clone());
    }
    let tz = jiff::tz::TimeZone::get(name).ok()?;
    zones.push((name.to_string(), tz.clone()));
    Some(tz)
}

/// api_request_error: release the reservation (a retry reserves again) and
/// count a 404 that is not retryable as the model being unavailable.
pub(crate) fn on_api_request_error(tx: &Transaction<'_>, e: &ApiRequestError, at: f64) -> Result<()> {
    release(tx, &e.api.api_request_id)?;
    if e.status_code == Some(404) && e.retryable == Some(false) {
        let model = e.api.model.as_deref().unwrap_or("(unknown model)");
        let provider = e.api.provider.as_deref().unwrap_or("its provider");
        let text = format!(
            "[hermes-meter alert] Model {model} is unavailable at {provider}: the API answered 404 (not retryable)."
        );
        // The attempt's span: the newest attempt of this retry_count (the
        // ledger wrote it in this transaction).
        let attempt: Option<i64> = tx
            .prepare_cached("SELECT MAX(attempt) FROM llm_call_errors WHERE api_request_id = ?1 AND retry_count = ?2")?
            .query_row(rusqlite::params![e.api.api_request_id, e.retry_count], |r| r.get(0))?;
        raise_alert(
            tx,
            alert::MODEL_UNAVAILABLE,
            model,
            &text,
            at,
            api_place(&e.api, Some(attempt.unwrap_or(e.retry_count))),
        )?;
    }
    Ok(())
}

impl Writer {
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
        if known(self.db.conn())? {
            return Ok(true);
        }
        self.db.conn().execute_batch("BEGIN IMMEDIATE")?;
        let filled = (|| -> Result<()> {
            if known(self.db.conn())? {
                return Ok(());
            }
            let t = budget::timestamp(now);
            let starts: Vec<(Window, i64)> = Window::CALENDAR
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
                let uses = self.bucket_window_spends(scope, &id, &period_starts, now, None)?;
                for ((w, period), u) in starts.iter().zip(uses) {
                    let sums = Sums {
                        cost: u.usd.settled,
                        estimated_cost: u.usd.estimated,
                        input: u.input_tokens.settled as i64,
                        output: u.output_tokens.settled as i64,
                        estimated_input: u.input_tokens.estimated as i64,
                        estimated_output: u.output_tokens.estimated as i64,
                    };
                    if sums != Sums::default() {
                        insert_period(self.db.conn(), (&scope_name, &id, zone, w.as_str(), *period), &sums)?;
                    }
                }
            }
            self.db
                .conn()
                .prepare_cached("INSERT INTO budget_zones (zone, registered_at) VALUES (?1, ?2)")?
                .execute(params![zone, now])?;
            Ok(())
        })();
        match filled {
            Ok(()) => {
                self.db.conn().execute_batch("COMMIT")?;
                Ok(true)
            }
            Err(e) => {
                let _ = self.db.conn().execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::temp_store;
    use hermes_meter_model::hook::ApiRequest;

    fn api(request: &str) -> ApiRequest {
        ApiRequest {
            session_id: "s1".into(),
            api_request_id: request.into(),
            model: Some("gpt-4o".into()),
            ..ApiRequest::default()
        }
    }

    fn reservations(store: &Writer) -> Vec<(String, String, f64)> {
        let mut stmt = store
            .conn()
            .prepare("SELECT scope, id, amount_usd FROM budget_reservations ORDER BY scope, id")
            .expect("prepare");
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("query");
        rows.collect::<rusqlite::Result<_>>().expect("rows")
    }

    fn record(store: &Writer, request: &str, cost: f64, estimated: bool, ended_at: f64) {
        let tx = store.conn().unchecked_transaction().expect("begin");
        let call = RecordedCall {
            model: "gpt-4o".into(),
            cost_usd: cost,
            source: PriceSource::Builtin,
            estimated,
            ended_at,
            input_tokens: 1000,
            output_tokens: 100,
        };
        let e = PostApiRequest {
            api: api(request),
            ..PostApiRequest::default()
        };
        let mut rollup = SpendRollup::default();
        on_post_api_request(&tx, &e, Some(call), ended_at, &mut rollup).expect("post");
        rollup.write(&tx).expect("write rollup");
        tx.commit().expect("commit");
    }

    #[test]
    fn a_request_reserves_against_every_scope_id_until_it_ends() {
        let (_dir, store) = temp_store();
        let prices = PriceTable::default();
        let e = PreApiRequest {
            api: api("r1"),
            approx_input_tokens: Some(1000),
            ..PreApiRequest::default()
        };
        let tx = store.conn().unchecked_transaction().expect("begin");
        on_pre_api_request(&tx, &prices, &e, 100.0).expect("reserve");
        // A retry of the same request replaces its reservation.
        on_pre_api_request(&tx, &prices, &e, 101.0).expect("reserve again");
        tx.commit().expect("commit");
        let expected = prices.cost("gpt-4o", None, &reservation_usage(&e), 0.0).usd;
        assert!(expected > 0.0);
        let rows = reservations(&store);
        // No run is known: global, the model, and the default profile.
        let ids: Vec<(&str, &str)> = rows.iter().map(|r| (r.0.as_str(), r.1.as_str())).collect();
        assert_eq!(ids, [("global", ""), ("model", "gpt-4o"), ("profile", "default")]);
        assert!(rows.iter().all(|r| (r.2 - expected).abs() < 1e-12), "{rows:?}");
        assert!((store.reserved_now().expect("reserved") - expected).abs() < 1e-12);

        let tx = store.conn().unchecked_transaction().expect("begin");
        let error = ApiRequestError {
            api: api("r1"),
            ..ApiRequestError::default()
        };
        on_api_request_error(&tx, &error, 102.0).expect("error");
        tx.commit().expect("commit");
        assert!(reservations(&store).is_empty());
    }

    #[test]
    fn recorded_calls_add_to_one_bucket_per_level_and_scope_id() {
        let (_dir, store) = temp_store();
        let day = 20_000 * 86_400;
        let t = (day + 3 * 3600 + 20 * 60) as f64;
        record(&store, "r1", 0.5, true, t);
        record(&store, "r2", 0.25, false, t + 60.0);
        let mut stmt = store
            .conn()
            .prepare(
                "SELECT level, bucket, cost_usd, estimated_usd, calls FROM budget_spend
                 WHERE scope = 'global' AND id = '' ORDER BY level",
            )
            .expect("prepare");
        let rows: Vec<(i64, i64, f64, f64, i64)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        let quarter = day + 3 * 3600 + 15 * 60;
        let hour = day + 3 * 3600;
        assert_eq!(
            rows,
            [
                (0, quarter, 0.75, 0.5, 2),
                (1, hour, 0.75, 0.5, 2),
                (2, day, 0.75, 0.5, 2)
            ]
        );
        let tokens: (i64, i64, i64, i64) = store
            .conn()
            .query_row(
                "SELECT input_tokens, output_tokens, estimated_input_tokens, estimated_output_tokens FROM budget_spend
                 WHERE scope = 'model' AND id = 'gpt-4o' AND level = 2",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .expect("tokens");
        assert_eq!(tokens, (2000, 200, 1000, 100), "the first call's usage was estimated");
        let all: i64 = store
            .conn()
            .query_row("SELECT COUNT(*) FROM budget_spend", [], |r| r.get(0))
            .expect("count");
        assert_eq!(all, 9, "three levels for global, model and profile");
    }

    #[test]
    fn a_registered_zone_is_filled_from_the_buckets_then_kept_by_each_call() {
        let (_dir, store) = temp_store();
        let day = 20_000 * 86_400;
        record(&store, "r1", 1.0, false, (day + 3600) as f64);
        let now = (day + 7200) as f64;
        assert!(store.ensure_budget_zone("UTC", now).expect("zone"));
        assert!(store.ensure_budget_zone("UTC", now).expect("known zone"));
        assert!(!store.ensure_budget_zone("Mars/Olympus", now).expect("unknown zone"));
        record(&store, "r2", 2.0, true, now);
        let daily = |scope: &str, id: &str| -> (f64, f64) {
            store
                .conn()
                .query_row(
                    "SELECT cost_usd, estimated_usd FROM budget_period
                     WHERE scope = ?1 AND id = ?2 AND zone = 'UTC' AND win = 'daily' AND period = ?3",
                    params![scope, id, day],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .expect("period row")
        };
        assert_eq!(daily("global", ""), (3.0, 2.0));
        assert_eq!(daily("model", "gpt-4o"), (3.0, 2.0));
        let spends = store
            .period_spends(Scope::Global, "", "UTC", &[(Window::Daily, day)], now, None)
            .expect("spends");
        assert_eq!((spends[0].usd.settled, spends[0].usd.estimated), (3.0, 2.0));
        // Tokens too: the fill from the buckets and the call after it.
        assert_eq!(
            (spends[0].input_tokens.settled, spends[0].input_tokens.estimated),
            (2000.0, 1000.0)
        );
        assert_eq!(spends[0].output_tokens.settled, 200.0);
    }
}
