//! Reading budget spend for verdicts, `budget list` and the gauges: the
//! spend of a scope id in a window, from the rollups or the per-period
//! totals, plus its open reservations; which ids spent; store-wide totals
//! for the quick view. `budget/states.rs` assembles these into budget
//! states.
//!
//! Every read used by a gating hook goes through a primary key or a bounded
//! range of one, never a scan of the ledger. Must not touch: writes (the
//! rollups are `rollups.rs`'s, claims and alerts `alerts.rs`'s).

use rusqlite::params;

use super::rollups::scope_keys;
use crate::error::Result;
use crate::Reader;
use hermes_meter_model::budget::{
    self, bucket_ranges, BudgetUnit, Scope, ScopeKeys, Spend, TokenCount, Window, WindowUse,
};

/// A reservation older than this no longer counts: its process died
/// between pre_api_request and the call's end (no LLM call takes this long).
pub const RESERVATION_TTL_SECONDS: f64 = 15.0 * 60.0;

/// A settled `(total, estimated part)`.
fn settled((total, estimated): (f64, f64)) -> Spend {
    Spend {
        settled: total,
        estimated,
        reserved: 0.0,
    }
}

/// Open reservations alone.
fn reservation(reserved: f64) -> Spend {
    Spend {
        reserved,
        ..Spend::default()
    }
}

/// `settled` with the reservations of `reserved` in each unit.
fn with_reserved(settled: WindowUse, reserved: &WindowUse) -> WindowUse {
    let add = |s: Spend, r: Spend| Spend {
        reserved: r.reserved,
        ..s
    };
    WindowUse {
        usd: add(settled.usd, reserved.usd),
        input_tokens: add(settled.input_tokens, reserved.input_tokens),
        output_tokens: add(settled.output_tokens, reserved.output_tokens),
    }
}

impl Reader {
    /// Runs `f` inside one read transaction: every statement of `f` reads
    /// the same snapshot, and the WAL read lock is taken once instead of
    /// once per statement (each costs file-lock system calls). `f` must
    /// only read.
    pub fn read_snapshot<T>(&self, f: impl FnOnce(&Reader) -> Result<T>) -> Result<T> {
        self.conn().prepare_cached("BEGIN")?.execute([])?;
        let out = f(self);
        // A read transaction has nothing to roll back; end it either way.
        let end = self.conn().prepare_cached("COMMIT")?.execute([]);
        let out = out?;
        end?;
        Ok(out)
    }

    /// The spends of one scope id in the calendar windows starting at
    /// `starts` (in `Window::CALENDAR` order, as `budgets_for` lists them)
    /// from the per-period totals of a registered zone: at most three
    /// primary-key lookups and the id's open reservations, in one
    /// statement. The gating hooks' read. A rolling window has no periods:
    /// it matches no row (read it with [`Reader::bucket_window_spends`]).
    pub fn period_spends(
        &self,
        scope: Scope,
        id: &str,
        zone: &str,
        windows: &[(Window, i64)],
        now: f64,
        exclude: Option<&str>,
    ) -> Result<Vec<WindowUse>> {
        let mut period = [i64::MIN; 3];
        for (w, start) in windows {
            if let Some(slot) = period.get_mut(w.index()) {
                *slot = *start;
            }
        }
        const COLUMNS: &str =
            "cost_usd, estimated_usd, input_tokens, estimated_input_tokens, output_tokens, estimated_output_tokens";
        let mut stmt = self.conn().prepare_cached(&format!(
            "SELECT 0, {COLUMNS} FROM budget_period WHERE scope = ?1 AND id = ?2 AND zone = ?3 AND win = 'daily' AND period = ?4
             UNION ALL SELECT 1, {COLUMNS} FROM budget_period WHERE scope = ?1 AND id = ?2 AND zone = ?3 AND win = 'weekly' AND period = ?5
             UNION ALL SELECT 2, {COLUMNS} FROM budget_period WHERE scope = ?1 AND id = ?2 AND zone = ?3 AND win = 'monthly' AND period = ?6
             UNION ALL SELECT 3, TOTAL(amount_usd), 0, TOTAL(input_tokens), 0, TOTAL(output_tokens), 0 FROM budget_reservations
                 WHERE scope = ?1 AND id = ?2 AND at >= ?7 AND api_request_id IS NOT ?8"
        ))?;
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
        let mut by_window = [WindowUse::default(); 3];
        let mut reserved = WindowUse::default();
        while let Some(row) = rows.next()? {
            let which: i64 = row.get(0)?;
            let pair = |i: usize| -> rusqlite::Result<(f64, f64)> { Ok((row.get(i)?, row.get(i + 1)?)) };
            let (usd, input, output) = (pair(1)?, pair(3)?, pair(5)?);
            match usize::try_from(which) {
                Ok(w) if w < 3 => {
                    by_window[w] = WindowUse {
                        usd: settled(usd),
                        input_tokens: settled(input),
                        output_tokens: settled(output),
                    }
                }
                _ => {
                    reserved = WindowUse {
                        usd: reservation(usd.0),
                        input_tokens: reservation(input.0),
                        output_tokens: reservation(output.0),
                    }
                }
            }
        }
        Ok(windows
            .iter()
            .map(|(w, _)| with_reserved(by_window.get(w.index()).copied().unwrap_or_default(), &reserved))
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
            settled: settled.unwrap_or(0.0),
            estimated: estimated.unwrap_or(0.0),
            reserved: reserved.unwrap_or(0.0),
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
    ) -> Result<Vec<WindowUse>> {
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
        const COLUMNS: &str = "bucket, cost_usd, estimated_usd, input_tokens, estimated_input_tokens, output_tokens, estimated_output_tokens";
        let mut stmt = self.conn().prepare_cached(&format!(
            "WITH rows (level, bucket, cost, est, ti, eti, tout, eto) AS (
                SELECT 2, {COLUMNS} FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 2 AND bucket >= ?3
                UNION ALL SELECT 1, {COLUMNS} FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 1 AND bucket >= ?4 AND bucket < ?5
                UNION ALL SELECT 1, {COLUMNS} FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 1 AND bucket >= ?6 AND bucket < ?7
                UNION ALL SELECT 1, {COLUMNS} FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 1 AND bucket >= ?8 AND bucket < ?9
                UNION ALL SELECT 0, {COLUMNS} FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 0 AND bucket >= ?10 AND bucket < ?11
                UNION ALL SELECT 0, {COLUMNS} FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 0 AND bucket >= ?12 AND bucket < ?13
                UNION ALL SELECT 0, {COLUMNS} FROM budget_spend WHERE scope = ?1 AND id = ?2 AND level = 0 AND bucket >= ?14 AND bucket < ?15),
             member (cost, est, ti, eti, tout, eto, w1, w2, w3) AS (
                SELECT cost, est, ti, eti, tout, eto,
                  CASE level WHEN 2 THEN bucket >= ?18 WHEN 1 THEN bucket >= ?17 AND bucket < ?18 ELSE bucket >= ?16 AND bucket < ?17 END,
                  CASE level WHEN 2 THEN bucket >= ?21 WHEN 1 THEN bucket >= ?20 AND bucket < ?21 ELSE bucket >= ?19 AND bucket < ?20 END,
                  CASE level WHEN 2 THEN bucket >= ?24 WHEN 1 THEN bucket >= ?23 AND bucket < ?24 ELSE bucket >= ?22 AND bucket < ?23 END
                FROM rows),
             res (usd, ti, tout) AS (
                SELECT TOTAL(amount_usd), TOTAL(input_tokens), TOTAL(output_tokens) FROM budget_reservations
                  WHERE scope = ?1 AND id = ?2 AND at >= ?25 AND api_request_id IS NOT ?26)
             SELECT TOTAL(cost * w1), TOTAL(est * w1), TOTAL(ti * w1), TOTAL(eti * w1), TOTAL(tout * w1), TOTAL(eto * w1),
                TOTAL(cost * w2), TOTAL(est * w2), TOTAL(ti * w2), TOTAL(eti * w2), TOTAL(tout * w2), TOTAL(eto * w2),
                TOTAL(cost * w3), TOTAL(est * w3), TOTAL(ti * w3), TOTAL(eti * w3), TOTAL(tout * w3), TOTAL(eto * w3),
                (SELECT usd FROM res), (SELECT ti FROM res), (SELECT tout FROM res)
             FROM member"
        ))?;
        let sums: [f64; 21] = stmt.query_row(
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
                let mut out = [0.0; 21];
                for (i, slot) in out.iter_mut().enumerate() {
                    *slot = r.get(i)?;
                }
                Ok(out)
            },
        )?;
        let reserved = WindowUse {
            usd: reservation(sums[18]),
            input_tokens: reservation(sums[19]),
            output_tokens: reservation(sums[20]),
        };
        let out = (0..starts.len())
            .map(|i| {
                let s = &sums[6 * i..6 * i + 6];
                let settled_use = WindowUse {
                    usd: settled((s[0], s[1])),
                    input_tokens: settled((s[2], s[3])),
                    output_tokens: settled((s[4], s[5])),
                };
                with_reserved(settled_use, &reserved)
            })
            .collect();
        Ok(out)
    }

    /// The quarter-hour buckets of one scope id from `start` on in which
    /// it used anything in `unit` (tokens counted as `counted` says),
    /// oldest first, at most `limit`: what leaves a rolling window, and
    /// when (`budget::rolling_frees_at`). Settled use only: reservations
    /// leave when their calls end, not with the window.
    pub fn rolling_rows(
        &self,
        scope: Scope,
        id: &str,
        start: i64,
        (unit, counted): (BudgetUnit, TokenCount),
        limit: usize,
    ) -> Result<Vec<(i64, f64)>> {
        let (usd, input, output) = match (unit, counted) {
            (BudgetUnit::Usd, _) => (1.0, 0.0, 0.0),
            (BudgetUnit::Tokens, TokenCount::Total) => (0.0, 1.0, 1.0),
            (BudgetUnit::Tokens, TokenCount::Input) => (0.0, 1.0, 0.0),
            (BudgetUnit::Tokens, TokenCount::Output) => (0.0, 0.0, 1.0),
        };
        let mut stmt = self.conn().prepare_cached(
            "SELECT bucket, amount FROM (
                SELECT bucket, cost_usd * ?4 + input_tokens * ?5 + output_tokens * ?6 AS amount FROM budget_spend
                WHERE scope = ?1 AND id = ?2 AND level = 0 AND bucket >= ?3)
             WHERE amount > 0 ORDER BY bucket LIMIT ?7",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt.query_map(params![scope.as_str(), id, start, usd, input, output, limit], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The ids of `scope` that spent since `since` (Unix seconds, taken
    /// from its UTC day): a read of the day buckets, for listing every id
    /// under a scope's default (`budget list`, the gauges; no hook path).
    pub(crate) fn budget_ids_spent_since(&self, scope: Scope, since: i64) -> Result<Vec<String>> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT DISTINCT id FROM budget_spend WHERE scope = ?1 AND level = 2 AND bucket >= ?2")?;
        let rows = stmt.query_map(params![scope.as_str(), since.div_euclid(86_400) * 86_400], |r| {
            r.get::<_, String>(0)
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

    /// The journal's newest row: one more per event any process recorded
    /// (retention always keeps the newest), 0 for an empty journal.
    pub fn journal_seq(&self) -> Result<i64> {
        Ok(self
            .conn()
            .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM journal")?
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

    /// The largest use of any session family ever recorded: (cost in USD,
    /// tool calls started). See `cap_peaks` in the schema.
    pub fn cap_peaks(&self) -> Result<(f64, i64)> {
        Ok(self
            .conn()
            .prepare_cached("SELECT usd, tool_calls FROM cap_peaks WHERE singleton = 1")?
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))?)
    }

    /// What the call `api_request_id` holds in reservations (0 when none
    /// is open): the part its own verdict leaves out.
    pub fn reservation_usd(&self, api_request_id: &str) -> Result<f64> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT TOTAL(amount_usd) FROM budget_reservations
                 WHERE scope = 'global' AND id = '' AND api_request_id = ?1",
            )?
            .query_row(params![api_request_id], |r| r.get(0))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::temp_store;
    use crate::Writer;
    use hermes_meter_model::budget::{BudgetConfig, Level, ScopeKeys};

    fn ts(s: &str) -> f64 {
        s.parse::<jiff::Timestamp>().expect("timestamp").as_second() as f64
    }

    /// Adds a call's cost to its bucket of each level, as the rollup does.
    fn spent(store: &Writer, scope: &str, id: &str, at: f64, cost: f64) {
        for (level, width) in hermes_meter_model::budget::BUCKET_SECONDS.iter().enumerate() {
            store
                .conn()
                .execute(
                    "INSERT INTO budget_spend (scope, id, level, bucket, cost_usd, estimated_usd, calls)
                     VALUES (?1, ?2, ?3, ?4, ?5, 0, 1)
                     ON CONFLICT (scope, id, level, bucket) DO UPDATE SET cost_usd = cost_usd + excluded.cost_usd",
                    params![scope, id, level as i64, (at as i64).div_euclid(*width) * width, cost],
                )
                .expect("insert bucket");
        }
    }

    fn reserve(store: &Writer, request: &str, usd: f64, at: f64) {
        store
            .conn()
            .execute(
                "INSERT INTO budget_reservations (scope, id, api_request_id, amount_usd, at) VALUES ('global', '', ?1, ?2, ?3)",
                params![request, usd, at],
            )
            .expect("insert reservation");
    }

    /// Tuesday 2026-11-17, 10:00 UTC: the week began on the 16th.
    const NOW: &str = "2026-11-17T10:00:00Z";

    fn sample(store: &Writer) -> f64 {
        let now = ts(NOW);
        spent(store, "global", "", ts("2026-11-17T09:40:00Z"), 1.0);
        spent(store, "global", "", ts("2026-11-16T23:50:00Z"), 2.0);
        spent(store, "global", "", ts("2026-11-10T12:00:00Z"), 4.0);
        spent(store, "global", "", ts("2026-10-31T12:00:00Z"), 8.0);
        reserve(store, "open", 0.25, now - 10.0);
        reserve(store, "stale", 0.5, now - RESERVATION_TTL_SECONDS - 1.0);
        now
    }

    #[test]
    fn window_spends_sum_the_buckets_since_each_start_and_the_open_reservations() {
        let (_dir, store) = temp_store();
        let now = sample(&store);
        let starts = [
            ts("2026-11-17T00:00:00Z"),
            ts("2026-11-16T00:00:00Z"),
            ts("2026-11-01T00:00:00Z"),
        ];
        let starts = starts.map(|s| s as i64);
        let spends = store
            .bucket_window_spends(Scope::Global, "", &starts, now, None)
            .expect("spends");
        let settled: Vec<f64> = spends.iter().map(|s| s.usd.settled).collect();
        assert_eq!(settled, [1.0, 3.0, 7.0]);
        assert!(
            spends.iter().all(|s| s.usd.reserved == 0.25),
            "stale reservations do not count"
        );
        let mine = store
            .bucket_window_spends(Scope::Global, "", &starts[..1], now, Some("open"))
            .expect("spends");
        assert_eq!(mine[0].usd.reserved, 0.0, "a call's own reservation is excluded");
        let other = store
            .bucket_window_spends(Scope::Sender, "bob", &starts, now, None)
            .expect("spends");
        assert!(other.iter().all(|s| s.usd.total() == 0.0));
    }

    #[test]
    fn a_closed_range_sums_only_its_buckets() {
        let (_dir, store) = temp_store();
        let now = sample(&store);
        let month = (ts("2026-11-01T00:00:00Z") as i64, ts("2026-12-01T00:00:00Z") as i64);
        let spend = store
            .budget_spend(Scope::Global, "", month.0, month.1, now, None)
            .expect("spend");
        assert_eq!((spend.settled, spend.reserved), (7.0, 0.25));
        let day = (ts("2026-11-16T00:00:00Z") as i64, ts("2026-11-17T00:00:00Z") as i64);
        let spend = store
            .budget_spend(Scope::Global, "", day.0, day.1, now, None)
            .expect("spend");
        assert_eq!(spend.settled, 2.0);
    }

    #[test]
    fn totals_count_every_day_bucket_and_every_reservation() {
        let (_dir, store) = temp_store();
        sample(&store);
        assert_eq!(store.spend_total().expect("total"), 15.0);
        assert_eq!(
            store.reserved_now().expect("reserved"),
            0.75,
            "stale ones too: an upper bound"
        );
    }

    #[test]
    fn budget_states_list_global_and_every_id_that_spent_under_a_default() {
        let (_dir, store) = temp_store();
        let now = sample(&store);
        spent(&store, "sender", "alice", now - 60.0, 0.5);
        let cfg = BudgetConfig::parse("timezone = \"UTC\"\n[global]\ndaily = 1.0\n[per_sender.default]\nweekly = 10")
            .expect("config");
        let states = store.budget_states(&cfg, now).expect("states");
        let seen: Vec<(String, f64, Level)> = states
            .iter()
            .map(|s| (s.budget.label(), s.spend.total(), s.level))
            .collect();
        assert_eq!(
            seen,
            [
                ("global daily".to_string(), 1.25, Level::Hard),
                ("sender alice weekly".to_string(), 0.5, Level::Ok)
            ]
        );
        assert_eq!(states[0].period, "2026-11-17");
    }

    /// A rolling window sums the last width in quarter hours, says what
    /// leaves it next, and when an exhausted one is back under its line.
    #[test]
    fn a_rolling_window_counts_its_last_hours_and_says_what_frees_when() {
        let (_dir, store) = temp_store();
        let now = ts("2026-12-07T14:07:00Z");
        spent(&store, "global", "", ts("2026-12-07T08:50:00Z"), 100.0); // 5 h 17 min ago: out
        spent(&store, "global", "", ts("2026-12-07T09:05:00Z"), 6.0); // in: its quarter began 09:00
        spent(&store, "global", "", ts("2026-12-07T11:20:00Z"), 3.0);
        spent(&store, "global", "", ts("2026-12-07T14:00:00Z"), 2.0);
        let cfg = BudgetConfig::parse("timezone = \"UTC\"\n[global]\n5h = 10\ndaily = 1000").expect("config");
        let states = store.budget_states(&cfg, now).expect("states");
        let five = states.iter().find(|s| s.budget.key() == "5h").expect("the 5h budget");
        assert_eq!(five.spend.settled, 11.0, "08:50 is out, 09:05 in");
        assert_eq!(five.level, Level::Hard);
        let frees = five.frees.expect("something frees");
        assert_eq!((frees.amount, frees.at as f64), (6.0, ts("2026-12-07T14:15:00Z")));
        // 11 - 6 = 5 < 10 once 09:00's quarter leaves: back under at 14:15.
        assert_eq!(five.window_end as f64, ts("2026-12-07T14:15:00Z"));
        let day = states.iter().find(|s| s.budget.key() == "daily").expect("daily");
        assert_eq!(
            (day.spend.settled, day.frees),
            (111.0, None),
            "the calendar day counts 08:50"
        );
        assert_eq!(five.period, "5h@2026-12-07T14:00Z");
        // At 14:15 the 09:00 quarter has left.
        let later = store.budget_states(&cfg, ts("2026-12-07T14:15:00Z")).expect("states");
        let five = later.iter().find(|s| s.budget.key() == "5h").expect("5h");
        assert_eq!((five.spend.settled, five.level), (5.0, Level::Ok));
        let frees = five.frees.expect("frees");
        assert_eq!((frees.amount, frees.at as f64), (3.0, ts("2026-12-07T16:30:00Z")));
        assert_eq!(
            five.window_end as f64,
            ts("2026-12-07T16:30:00Z"),
            "not exhausted: the next release"
        );
        // With a lower limit it takes two releases to be back under.
        let tight = BudgetConfig::parse("timezone = \"UTC\"\n[global]\n5h = 4").expect("config");
        let five = store.budget_states(&tight, now).expect("states").remove(0);
        assert_eq!(five.window_end as f64, ts("2026-12-07T16:30:00Z"), "11 - 6 - 3 = 2 < 4");
        // Tokens count the same way, and in the gate's read.
        let keys = ScopeKeys::default();
        let gate = store.budget_states_for(&cfg, &keys, now, None).expect("gate read");
        assert_eq!(gate.iter().map(|s| s.spend.settled).collect::<Vec<_>>(), [111.0, 11.0]);
        store
            .conn()
            .execute("INSERT INTO budget_zones (zone, registered_at) VALUES ('UTC', 0)", [])
            .expect("zone");
        let zoned = store
            .budget_states_in_zone(&cfg, &keys, now, None, "UTC")
            .expect("zone read");
        assert_eq!(
            zoned[1].spend.settled, 11.0,
            "a rolling window is summed from the buckets in a zone too"
        );
    }

    #[test]
    fn period_spends_read_the_registered_zones_totals() {
        let (_dir, store) = temp_store();
        let now = sample(&store);
        let day = ts("2026-11-17T00:00:00Z") as i64;
        store
            .conn()
            .execute(
                "INSERT INTO budget_period (scope, id, zone, win, period, cost_usd, estimated_usd)
                 VALUES ('global', '', 'UTC', 'daily', ?1, 1.5, 0.5)",
                params![day],
            )
            .expect("insert period");
        let spends = store
            .period_spends(
                Scope::Global,
                "",
                "UTC",
                &[(Window::Daily, day), (Window::Weekly, day)],
                now,
                None,
            )
            .expect("spends");
        assert_eq!(
            (spends[0].usd.settled, spends[0].usd.estimated, spends[0].usd.reserved),
            (1.5, 0.5, 0.25)
        );
        assert_eq!(
            (spends[1].usd.settled, spends[1].usd.reserved),
            (0.0, 0.25),
            "no weekly row yet"
        );
    }

    #[test]
    fn ids_spent_since_come_from_the_day_buckets_of_their_scope() {
        let (_dir, store) = temp_store();
        let now = ts(NOW);
        spent(&store, "sender", "alice", now - 60.0, 0.5);
        spent(&store, "sender", "bob", ts("2026-11-10T12:00:00Z"), 0.5);
        spent(&store, "profile", "carol", now - 60.0, 0.5);
        let since = |s: &str| store.budget_ids_spent_since(Scope::Sender, ts(s) as i64).expect("ids");
        assert_eq!(since("2026-11-16T00:00:00Z"), ["alice"]);
        let mut month = since("2026-11-01T00:00:00Z");
        month.sort();
        assert_eq!(month, ["alice", "bob"]);
        // A start inside a day counts that whole UTC day.
        assert_eq!(since("2026-11-10T18:00:00Z").len(), 2);
    }
}
