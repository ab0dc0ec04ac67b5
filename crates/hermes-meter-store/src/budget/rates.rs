//! Rate-limit buckets (`rate_spend`, `rate_calls`; schema in
//! `migrations/0003_rate_limits.sql`): what each scope id started, per 5
//! seconds and per minute, and where each open request was counted.
//!
//! Owns: counting a request when it starts, replacing its estimate with
//! its use when it ends, taking out a request a rate limit stopped, moving
//! one that waits, and reading a scope id's buckets. Must not touch: the
//! rules (`hermes_meter_model::budget::rate`), the ledger's transaction
//! (the gate counts requests as it sees them, on the writer thread).

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::Result;
use crate::{Reader, Writer};
use hermes_meter_model::budget::rate::{rate_bucket, RatePer};
use hermes_meter_model::budget::Scope;

/// How long open requests are kept when no end came (a process died):
/// the longest span, with slack.
pub const RATE_KEEP_SECONDS: f64 = 2.0 * 3600.0;

/// How long each level's buckets are kept past their span.
const KEEP_PAST_SPAN: i64 = 600;

/// What a request counts in a rate bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RateAmounts {
    pub requests: f64,
    pub usd: f64,
    pub input_tokens: f64,
    pub output_tokens: f64,
}

impl RateAmounts {
    fn scaled(self, k: f64) -> RateAmounts {
        RateAmounts {
            requests: self.requests * k,
            usd: self.usd * k,
            input_tokens: self.input_tokens * k,
            output_tokens: self.output_tokens * k,
        }
    }

    fn minus(self, o: RateAmounts) -> RateAmounts {
        RateAmounts {
            requests: self.requests - o.requests,
            usd: self.usd - o.usd,
            input_tokens: self.input_tokens - o.input_tokens,
            output_tokens: self.output_tokens - o.output_tokens,
        }
    }
}

const LEVELS: [RatePer; 2] = [RatePer::Minute, RatePer::Hour];

/// Adds `a` to the buckets holding `at`, at both levels.
fn add(conn: &Connection, scope: &str, id: &str, at: f64, a: RateAmounts) -> Result<()> {
    for per in LEVELS {
        conn.prepare_cached(
            "INSERT INTO rate_spend (scope, id, level, bucket, requests, usd, input_tokens, output_tokens)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (scope, id, level, bucket) DO UPDATE SET requests = requests + excluded.requests,
                usd = usd + excluded.usd, input_tokens = input_tokens + excluded.input_tokens,
                output_tokens = output_tokens + excluded.output_tokens",
        )?
        .execute(params![
            scope,
            id,
            per as i64,
            rate_bucket(per, at),
            a.requests.round() as i64,
            a.usd,
            a.input_tokens,
            a.output_tokens
        ])?;
    }
    Ok(())
}

/// The rows of an open request: (scope, id, at, its estimate).
fn open_rows(conn: &Connection, api_request_id: &str) -> Result<Vec<(String, String, f64, RateAmounts)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT scope, id, at, usd, input_tokens, output_tokens FROM rate_calls WHERE api_request_id = ?1",
    )?;
    let rows = stmt.query_map(params![api_request_id], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            RateAmounts {
                requests: 1.0,
                usd: r.get(3)?,
                input_tokens: r.get(4)?,
                output_tokens: r.get(5)?,
            },
        ))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

impl Writer {
    /// Runs `f` in one write transaction.
    fn in_rate_tx<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.db.conn();
        conn.execute_batch("BEGIN IMMEDIATE")?;
        match f(conn) {
            Ok(v) => {
                conn.execute_batch("COMMIT")?;
                Ok(v)
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Counts the request `api_request_id` starting at `at` against each
    /// scope id of `scopes`: one request and `estimate`'s USD and tokens
    /// (what its reservation holds). An earlier attempt of the same id
    /// still open is ended first with no use (it went to the provider: its
    /// request stays counted). Buckets and open requests past keeping are
    /// deleted on the way.
    pub fn rate_start(
        &self,
        api_request_id: &str,
        scopes: &[(Scope, &str)],
        at: f64,
        estimate: RateAmounts,
    ) -> Result<()> {
        self.in_rate_tx(|conn| {
            settle(conn, api_request_id, RateAmounts::default())?;
            let one = RateAmounts {
                requests: 1.0,
                ..estimate
            };
            for (scope, id) in scopes {
                add(conn, scope.as_str(), id, at, one)?;
                conn.prepare_cached(
                    "INSERT INTO rate_calls (api_request_id, scope, id, at, usd, input_tokens, output_tokens)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?
                .execute(params![
                    api_request_id,
                    scope.as_str(),
                    id,
                    at,
                    estimate.usd,
                    estimate.input_tokens,
                    estimate.output_tokens
                ])?;
                for per in LEVELS {
                    conn.prepare_cached(
                        "DELETE FROM rate_spend WHERE scope = ?1 AND id = ?2 AND level = ?3 AND bucket < ?4",
                    )?
                    .execute(params![
                        scope.as_str(),
                        id,
                        per as i64,
                        at as i64 - per.seconds() - KEEP_PAST_SPAN
                    ])?;
                }
            }
            conn.prepare_cached("DELETE FROM rate_calls WHERE at < ?1")?
                .execute(params![at - RATE_KEEP_SECONDS])?;
            Ok(())
        })
    }

    /// Ends the request `api_request_id`: its estimate is replaced by
    /// `used` (USD and tokens; its request stays counted) where it was
    /// counted. Nothing for a request not counted.
    pub fn rate_settle(&self, api_request_id: &str, used: RateAmounts) -> Result<()> {
        self.in_rate_tx(|conn| settle(conn, api_request_id, used))
    }

    /// Takes the request `api_request_id` out of every bucket it counted
    /// in: a rate limit stopped it before the provider.
    pub fn rate_drop(&self, api_request_id: &str) -> Result<()> {
        self.in_rate_tx(|conn| {
            for (scope, id, at, estimate) in open_rows(conn, api_request_id)? {
                add(conn, &scope, &id, at, estimate.scaled(-1.0))?;
            }
            conn.prepare_cached("DELETE FROM rate_calls WHERE api_request_id = ?1")?
                .execute(params![api_request_id])?;
            Ok(())
        })
    }

    /// Moves the request `api_request_id` to `to`: it waits for its rate
    /// limit and counts from when it goes.
    pub fn rate_move(&self, api_request_id: &str, to: f64) -> Result<()> {
        self.in_rate_tx(|conn| {
            for (scope, id, at, estimate) in open_rows(conn, api_request_id)? {
                add(conn, &scope, &id, at, estimate.scaled(-1.0))?;
                add(conn, &scope, &id, to, estimate)?;
            }
            conn.prepare_cached("UPDATE rate_calls SET at = ?2 WHERE api_request_id = ?1")?
                .execute(params![api_request_id, to])?;
            Ok(())
        })
    }
}

/// See [`Writer::rate_settle`].
fn settle(conn: &Connection, api_request_id: &str, used: RateAmounts) -> Result<()> {
    let used = RateAmounts { requests: 1.0, ..used };
    for (scope, id, at, estimate) in open_rows(conn, api_request_id)? {
        add(conn, &scope, &id, at, used.minus(estimate))?;
    }
    conn.prepare_cached("DELETE FROM rate_calls WHERE api_request_id = ?1")?
        .execute(params![api_request_id])?;
    Ok(())
}

impl Reader {
    /// One scope id's buckets for `per` from `since` (Unix seconds) on,
    /// oldest first, those ahead of now (calls that wait) included: at most
    /// a span's steps plus the waiting ones.
    pub fn rate_buckets(&self, scope: Scope, id: &str, per: RatePer, since: i64) -> Result<Vec<(i64, RateAmounts)>> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT bucket, requests, usd, input_tokens, output_tokens FROM rate_spend
             WHERE scope = ?1 AND id = ?2 AND level = ?3 AND bucket >= ?4 ORDER BY bucket",
        )?;
        let rows = stmt.query_map(params![scope.as_str(), id, per as i64, since], |r| {
            Ok((
                r.get(0)?,
                RateAmounts {
                    requests: r.get::<_, i64>(1)? as f64,
                    usd: r.get(2)?,
                    input_tokens: r.get(3)?,
                    output_tokens: r.get(4)?,
                },
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Where the open request `api_request_id` was counted and its
    /// estimate; `None` when it was not counted.
    pub fn rate_own(&self, api_request_id: &str) -> Result<Option<(f64, RateAmounts)>> {
        Ok(open_rows(self.conn(), api_request_id)?
            .into_iter()
            .next()
            .map(|(_, _, at, estimate)| {
                (
                    at,
                    RateAmounts {
                        requests: 0.0,
                        ..estimate
                    },
                )
            }))
    }

    /// What the LLM call `api_request_id` used, as the ledger recorded it:
    /// its cost, input tokens (cache reads and writes included) and output
    /// tokens; `None` when no call was recorded for it (a stand-in).
    pub fn call_use(&self, api_request_id: &str) -> Result<Option<RateAmounts>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT cost_usd, input_tokens + cache_read_tokens + cache_write_tokens, output_tokens
                 FROM llm_calls WHERE api_request_id = ?1",
            )?
            .query_row(params![api_request_id], |r| {
                Ok(RateAmounts {
                    requests: 0.0,
                    usd: r.get::<_, Option<f64>>(0)?.unwrap_or(0.0),
                    input_tokens: r.get::<_, i64>(1)? as f64,
                    output_tokens: r.get::<_, i64>(2)? as f64,
                })
            })
            .optional()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::temp_store;

    fn minute(store: &Writer) -> Vec<(i64, f64, f64)> {
        store
            .rate_buckets(Scope::Global, "", RatePer::Minute, 0)
            .expect("buckets")
            .into_iter()
            .map(|(b, a)| (b, a.requests, a.usd))
            .collect()
    }

    #[test]
    fn a_request_counts_when_it_starts_and_its_use_replaces_its_estimate() {
        let (_dir, store) = temp_store();
        let scopes = [(Scope::Global, ""), (Scope::Model, "gpt-4o")];
        let estimate = RateAmounts {
            requests: 0.0,
            usd: 0.5,
            input_tokens: 1000.0,
            output_tokens: 4096.0,
        };
        store.rate_start("r1", &scopes, 1003.0, estimate).expect("start");
        assert_eq!(minute(&store), [(1000, 1.0, 0.5)]);
        let hour = store
            .rate_buckets(Scope::Model, "gpt-4o", RatePer::Hour, 0)
            .expect("hour");
        assert_eq!(hour[0].0, 960);
        let used = RateAmounts {
            requests: 0.0,
            usd: 0.2,
            input_tokens: 900.0,
            output_tokens: 100.0,
        };
        store.rate_settle("r1", used).expect("settle");
        assert_eq!(minute(&store), [(1000, 1.0, 0.2)]);
        let hour = store
            .rate_buckets(Scope::Model, "gpt-4o", RatePer::Hour, 0)
            .expect("hour");
        assert_eq!((hour[0].1.input_tokens, hour[0].1.output_tokens), (900.0, 100.0));
        // Settled once: a second end changes nothing.
        store.rate_settle("r1", used).expect("settle again");
        assert_eq!(minute(&store), [(1000, 1.0, 0.2)]);
        // A retry of an open request counts another request, and its first
        // attempt's estimate goes.
        store.rate_start("r2", &scopes, 1010.0, estimate).expect("start");
        store.rate_start("r2", &scopes, 1012.0, estimate).expect("retry");
        assert_eq!(minute(&store), [(1000, 1.0, 0.2), (1010, 2.0, 0.5)]);
    }

    #[test]
    fn a_stopped_request_leaves_and_a_waiting_one_moves() {
        let (_dir, store) = temp_store();
        let scopes = [(Scope::Global, "")];
        let estimate = RateAmounts {
            usd: 0.1,
            ..RateAmounts::default()
        };
        store.rate_start("stop", &scopes, 100.0, estimate).expect("start");
        store.rate_drop("stop").expect("drop");
        assert_eq!(minute(&store), [(100, 0.0, 0.0)]);
        store.rate_start("wait", &scopes, 100.0, estimate).expect("start");
        store.rate_move("wait", 161.0).expect("move");
        assert_eq!(minute(&store), [(100, 0.0, 0.0), (160, 1.0, 0.1)]);
        // It ends where it went.
        store.rate_settle("wait", RateAmounts::default()).expect("settle");
        assert_eq!(minute(&store), [(100, 0.0, 0.0), (160, 1.0, 0.0)]);
        // Old buckets go as new requests come.
        store
            .rate_start("late", &scopes, 100.0 + 3600.0, estimate)
            .expect("start");
        assert_eq!(minute(&store), [(3700, 1.0, 0.1)]);
    }
}
