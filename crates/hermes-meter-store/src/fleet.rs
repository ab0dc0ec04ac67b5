//! Fleet state in the local store (schema in `migrations/0001_initial.sql`):
//! this store's host id, what the sync pushed, and what it pulled.
//!
//! The sync (`crates/hermes-meter-runtime/src/fleet/sync.rs`) writes here after each exchange with the
//! fleet database; the budget gate reads [`Reader::fleet_share`] on the hook
//! path, one primary-key lookup per budget, never the network.

use rusqlite::{params, OptionalExtension};

use super::{Outbox, Reader};
use crate::error::Result;
use hermes_meter_model::budget::lease;
use hermes_meter_model::budget::{Budget, BudgetConfig, BudgetUnit, FleetShare, Spend, WindowUse};

/// A budget period as the sync pulled it.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetRow {
    pub scope: String,
    pub id: String,
    pub win: String,
    pub period: String,
    /// The other hosts' use in the period: settled (estimated part
    /// included) and their open reservations (the scope id's, every
    /// window), in USD and in input and output tokens.
    pub others: WindowUse,
    /// This host's spend and reservations as the fleet had it, USD.
    pub own_at_sync_usd: f64,
    /// The lease taken in USD; `None` when the budget had no USD limit then.
    pub lease_usd: Option<f64>,
    /// This host's tokens as the fleet had them, counted as the budget
    /// file's `tokens_counted` says.
    pub own_at_sync_tokens: f64,
    /// The lease taken in those tokens; `None` without a token limit.
    pub lease_tokens: Option<f64>,
}

/// A quarter-hour spend bucket of this host to push.
#[derive(Debug, Clone, PartialEq)]
pub struct PushRow {
    pub scope: String,
    pub id: String,
    pub bucket: i64,
    pub cost_usd: f64,
    pub estimated_usd: f64,
    pub calls: i64,
    /// Input tokens (cache reads and writes included) and output tokens
    /// (reasoning included), each with the part that was estimated.
    pub input_tokens: i64,
    pub estimated_input_tokens: i64,
    pub output_tokens: i64,
    pub estimated_output_tokens: i64,
}

/// This host's open reservations of one scope id.
#[derive(Debug, Clone, PartialEq)]
pub struct Reserved {
    pub scope: String,
    pub id: String,
    pub usd: f64,
    pub input_tokens: f64,
    pub output_tokens: f64,
}

/// The sync's state, for `status` and metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetStatus {
    pub host_id: String,
    pub synced_at: Option<f64>,
    pub tried_at: Option<f64>,
    pub error: Option<String>,
    pub hosts: i64,
    pub budgets_version: Option<i64>,
}

impl FleetStatus {
    /// Seconds since the last successful sync at `now`; `None` before the first.
    pub fn lag_seconds(&self, now: f64) -> Option<f64> {
        self.synced_at.map(|t| (now - t).max(0.0))
    }
}

impl Outbox {
    /// This store's host id in the fleet, made (random) on first use.
    pub fn fleet_host_id(&self) -> Result<String> {
        let read = || -> Result<Option<String>> {
            Ok(self
                .conn()
                .prepare_cached("SELECT host_id FROM fleet_state WHERE singleton = 1")?
                .query_row([], |r| r.get(0))
                .optional()?)
        };
        // Read first: an insert takes the write lock the hooks' writer needs,
        // even when it changes nothing.
        if let Some(id) = read()? {
            return Ok(id);
        }
        let made = format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..));
        self.db
            .conn()
            .prepare_cached("INSERT INTO fleet_state (singleton, host_id) VALUES (1, ?1) ON CONFLICT DO NOTHING")?
            .execute(params![made])?;
        read()?.ok_or_else(|| crate::Error::Other("fleet host id: not stored".into()))
    }
}

impl Reader {
    /// The sync's state; `None` when this store never took part in a fleet.
    pub fn fleet_status(&self) -> Result<Option<FleetStatus>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT host_id, synced_at, tried_at, error, hosts, budgets_version FROM fleet_state WHERE singleton = 1",
            )?
            .query_row([], |r| {
                Ok(FleetStatus {
                    host_id: r.get(0)?,
                    synced_at: r.get(1)?,
                    tried_at: r.get(2)?,
                    error: r.get(3)?,
                    hosts: r.get(4)?,
                    budgets_version: r.get(5)?,
                })
            })
            .optional()?)
    }

    /// Bumped by every pull: quick verdicts measured before it start over.
    pub fn fleet_view_version(&self) -> Result<i64> {
        Ok(self
            .conn()
            .prepare_cached("SELECT view_version FROM fleet_state WHERE singleton = 1")?
            .query_row([], |r| r.get(0))
            .optional()?
            .unwrap_or(0))
    }
}

impl Outbox {
    /// Up to `limit` quarter-hour buckets from `since` on whose totals
    /// changed since they were last pushed (or were never pushed).
    pub fn fleet_unpushed(&self, since: i64, limit: usize) -> Result<Vec<PushRow>> {
        let mut stmt = self.db.conn().prepare_cached(&format!(
            "SELECT s.scope, s.id, s.bucket, s.cost_usd, s.estimated_usd, s.calls, s.input_tokens,
                s.estimated_input_tokens, s.output_tokens, s.estimated_output_tokens FROM budget_spend s
             LEFT JOIN fleet_pushed p ON p.scope = s.scope AND p.id = s.id AND p.bucket = s.bucket
             WHERE s.level = 0 AND s.bucket >= ?1
               AND (p.calls IS NULL OR p.calls <> s.calls OR p.cost_usd <> s.cost_usd
                    OR p.input_tokens <> s.input_tokens OR p.output_tokens <> s.output_tokens)
             LIMIT {limit}"
        ))?;
        let rows = stmt.query_map(params![since], |r| {
            Ok(PushRow {
                scope: r.get(0)?,
                id: r.get(1)?,
                bucket: r.get(2)?,
                cost_usd: r.get(3)?,
                estimated_usd: r.get(4)?,
                calls: r.get(5)?,
                input_tokens: r.get(6)?,
                estimated_input_tokens: r.get(7)?,
                output_tokens: r.get(8)?,
                estimated_output_tokens: r.get(9)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Notes `rows` as pushed (after the fleet database committed them).
    pub fn fleet_mark_pushed(&self, rows: &[PushRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        self.in_write_tx(|conn| {
            let mut stmt = conn.prepare_cached(
                "INSERT INTO fleet_pushed (scope, id, bucket, cost_usd, calls, input_tokens, output_tokens)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (scope, id, bucket) DO UPDATE SET cost_usd = excluded.cost_usd, calls = excluded.calls,
                    input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens",
            )?;
            for r in rows {
                stmt.execute(params![
                    r.scope,
                    r.id,
                    r.bucket,
                    r.cost_usd,
                    r.calls,
                    r.input_tokens,
                    r.output_tokens
                ])?;
            }
            Ok(())
        })
    }

    /// This host's open reservations by scope id.
    pub fn fleet_reservations(&self, now: f64) -> Result<Vec<Reserved>> {
        let mut stmt = self.db.conn().prepare_cached(
            "SELECT scope, id, TOTAL(amount_usd), TOTAL(input_tokens), TOTAL(output_tokens) FROM budget_reservations
             WHERE at >= ?1 GROUP BY scope, id",
        )?;
        let rows = stmt.query_map(params![now - super::RESERVATION_TTL_SECONDS], |r| {
            Ok(Reserved {
                scope: r.get(0)?,
                id: r.get(1)?,
                usd: r.get(2)?,
                input_tokens: r.get(3)?,
                output_tokens: r.get(4)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Replaces the fleet view with a pull's `rows`, in one transaction.
    pub fn fleet_write_view(
        &self,
        rows: &[FleetRow],
        hosts: i64,
        budgets_version: Option<i64>,
        now: f64,
    ) -> Result<()> {
        self.fleet_host_id()?;
        self.in_write_tx(|conn| {
            conn.execute("DELETE FROM fleet_view", [])?;
            let mut stmt = conn.prepare_cached(
                "INSERT INTO fleet_view (scope, id, win, period, others_cost_usd, others_estimated_usd,
                    others_reserved_usd, own_at_sync_usd, lease_usd, others_input_tokens, others_estimated_input_tokens,
                    others_reserved_input_tokens, others_output_tokens, others_estimated_output_tokens,
                    others_reserved_output_tokens, own_at_sync_tokens, lease_tokens)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
            )?;
            for r in rows {
                let (usd, i, o) = (r.others.usd, r.others.input_tokens, r.others.output_tokens);
                stmt.execute(params![
                    r.scope,
                    r.id,
                    r.win,
                    r.period,
                    usd.settled,
                    usd.estimated,
                    usd.reserved,
                    r.own_at_sync_usd,
                    r.lease_usd,
                    i.settled,
                    i.estimated,
                    i.reserved,
                    o.settled,
                    o.estimated,
                    o.reserved,
                    r.own_at_sync_tokens,
                    r.lease_tokens
                ])?;
            }
            conn.prepare_cached(
                "UPDATE fleet_state SET synced_at = ?1, tried_at = ?1, error = NULL, hosts = ?2,
                    budgets_version = COALESCE(?3, budgets_version), view_version = view_version + 1 WHERE singleton = 1",
            )?
            .execute(params![now, hosts, budgets_version])?;
            Ok(())
        })
    }

    /// Records a failed sync (the view stays as it was).
    pub fn fleet_note_error(&self, error: &str, now: f64) -> Result<()> {
        self.fleet_host_id()?;
        self.db
            .conn()
            .prepare_cached("UPDATE fleet_state SET tried_at = ?1, error = ?2 WHERE singleton = 1")?
            .execute(params![now, error])?;
        Ok(())
    }
}

impl Reader {
    /// Every scope id in the fleet view (`budget list` shows them too).
    pub(crate) fn fleet_view_ids(&self, scope: &str) -> Result<Vec<String>> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT DISTINCT id FROM fleet_view WHERE scope = ?1")?;
        let rows = stmt.query_map(params![scope], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// `budget` of period `period` with `own` (this host's use now, in the
    /// budget's unit) as the fleet sees it: the other hosts' use at the last
    /// sync added, and what is left of this host's lease. `hosts` is from
    /// [`Reader::fleet_status`]; a budget the last sync did not see (new, or
    /// a new period) gets the lease of an empty period, its hard line shared
    /// by the live hosts.
    pub(crate) fn fleet_share(
        &self,
        cfg: &BudgetConfig,
        budget: &Budget,
        period: &str,
        own: Spend,
        hosts: i64,
    ) -> Result<(Spend, FleetShare)> {
        let spend = |r: &rusqlite::Row<'_>, at: usize| -> rusqlite::Result<Spend> {
            Ok(Spend {
                settled: r.get(at)?,
                estimated: r.get(at + 1)?,
                reserved: r.get(at + 2)?,
            })
        };
        let row: Option<(WindowUse, [f64; 2], [Option<f64>; 2])> = self
            .conn()
            .prepare_cached(
                "SELECT others_cost_usd, others_estimated_usd, others_reserved_usd,
                    others_input_tokens, others_estimated_input_tokens, others_reserved_input_tokens,
                    others_output_tokens, others_estimated_output_tokens, others_reserved_output_tokens,
                    own_at_sync_usd, own_at_sync_tokens, lease_usd, lease_tokens
                 FROM fleet_view WHERE scope = ?1 AND id = ?2 AND win = ?3 AND period = ?4",
            )?
            .query_row(
                params![budget.scope.as_str(), budget.id, budget.window.as_str(), period],
                |r| {
                    let others = WindowUse {
                        usd: spend(r, 0)?,
                        input_tokens: spend(r, 3)?,
                        output_tokens: spend(r, 6)?,
                    };
                    Ok((others, [r.get(9)?, r.get(10)?], [r.get(11)?, r.get(12)?]))
                },
            )
            .optional()?;
        let fresh = lease::lease(budget.limit * cfg.hard_threshold, 0.0, hosts);
        let (others, own_at_sync, lease_taken) = match row {
            None => (Spend::default(), 0.0, None),
            Some((others, [own_usd, own_tokens], [lease_usd, lease_tokens])) => {
                let others = others.spend(budget.unit, cfg.tokens_counted);
                match budget.unit {
                    BudgetUnit::Usd => (others, own_usd, lease_usd),
                    BudgetUnit::Tokens => (others, own_tokens, lease_tokens),
                }
            }
        };
        let total = Spend {
            settled: own.settled + others.settled,
            estimated: own.estimated + others.estimated,
            reserved: own.reserved + others.reserved,
        };
        let share = FleetShare {
            own: own.total(),
            lease_left: lease::lease_left(lease_taken.unwrap_or(fresh), own_at_sync, own.total()),
        };
        Ok((total, share))
    }
}

impl Outbox {
    /// Runs `f` in an immediate write transaction, committed if it succeeds.
    fn in_write_tx(&self, f: impl FnOnce(&rusqlite::Connection) -> Result<()>) -> Result<()> {
        self.db.conn().execute_batch("BEGIN IMMEDIATE")?;
        match f(self.db.conn()) {
            Ok(()) => {
                self.db.conn().execute_batch("COMMIT")?;
                Ok(())
            }
            Err(e) => {
                let _ = self.db.conn().execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }
}
