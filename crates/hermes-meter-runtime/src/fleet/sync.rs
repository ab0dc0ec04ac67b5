//! One sync step: push this host's spend, pull the fleet's.
//!
//! Owns: what goes to and comes from the fleet database in a step. Must not
//! touch: the hook path (a step runs on the fleet thread, with its own store
//! connection), Python.
//!
//! Push, in one PostgreSQL transaction: the host's heartbeat; every
//! quarter-hour spend bucket whose totals changed since the last push, as
//! absolute totals (a bucket pushed twice, by a retry or after a replayed
//! spool, has the same totals; an older push never lowers a newer one,
//! since its call count is lower); the host's open reservations, replacing
//! the previous ones. Only once that committed are the buckets marked
//! pushed locally: a crash in between pushes them again, to no effect.
//!
//! Once an hour: buckets and hosts no window reaches any more are deleted,
//! so the database holds about 40 days of spend.
//!
//! Pull: the fleet's budget file (written here when it changed: the gate
//! reloads it as if edited locally), each scope id's spend in each window
//! now, split into this host's and the others', the live hosts, and from
//! those the leases (`lease.rs`), all written to `fleet_view` in one store
//! transaction.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tokio_postgres::Client;

use super::config::{pg_error, FleetConfig};
use super::schema;
use hermes_meter_model::budget::lease::{self, HOST_LIVE_SECONDS};
use hermes_meter_model::budget::{self, BudgetConfig, BudgetUnit, Scope, Spend, Window, WindowUse, BUCKET_SECONDS};
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::{FleetRow, Outbox, RESERVATION_TTL_SECONDS};

/// The longest a step may take: a database that stops answering mid-way
/// (a network partition) must not stall the sync for good; the next step
/// reconnects.
const STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Most buckets pushed in one step; more are pushed by the next, at once.
const PUSH_BATCH: usize = 5_000;

/// How far back buckets are pushed: the longest window (a month) and a day
/// of zone offset.
const PUSH_SECONDS: i64 = 32 * 86_400;

/// Buckets and hosts older than this leave the fleet database: no window
/// reaches back that far (a week of slack past the longest).
const KEEP_SECONDS: f64 = 40.0 * 86_400.0;

/// How often a host prunes them (any host may; the deletes are idempotent).
const PRUNE_EVERY_SECONDS: f64 = 3600.0;

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Synced {
    /// Buckets pushed.
    pub pushed: usize,
    /// More buckets wait: step again without pausing.
    pub more: bool,
    /// Live hosts in the fleet.
    pub hosts: i64,
    /// The fleet's budget file was written here.
    pub budgets_written: bool,
}

/// The sync of one store with the fleet database.
pub struct FleetSync {
    cfg: FleetConfig,
    budgets_path: PathBuf,
    host_name: String,
    client: Option<Client>,
    /// When this sync last pruned old rows.
    pruned_at: Option<f64>,
}

impl FleetSync {
    /// A sync for the store in `store_dir` (its budget file beside it).
    pub fn new(cfg: FleetConfig, store_dir: &Path) -> Self {
        FleetSync {
            cfg,
            budgets_path: store_dir.join(budget::BUDGETS_FILE_NAME),
            host_name: crate::process::host_name(),
            client: None,
            pruned_at: None,
        }
    }

    /// Pushes and pulls once. A failure is recorded in the store (for
    /// `status`), drops the connection (the next step reconnects) and
    /// leaves the fleet view as the last success left it.
    pub async fn step(&mut self, store: &Outbox, now: f64) -> Result<Synced> {
        let bounded = tokio::time::timeout(STEP_TIMEOUT, self.exchange(store, now)).await;
        let done = bounded.unwrap_or_else(|_| {
            Err(Error::Other(format!(
                "fleet database: no answer within {} s",
                STEP_TIMEOUT.as_secs()
            )))
        });
        match done {
            Ok(s) => Ok(s),
            Err(e) => {
                self.client = None;
                let _ = store.fleet_note_error(&e.to_string(), now);
                Err(e)
            }
        }
    }

    async fn connected(&mut self) -> Result<&mut Client> {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            let mut client = self.cfg.connect().await?;
            schema::migrate(&mut client).await?;
            self.client = Some(client);
        }
        self.client
            .as_mut()
            .ok_or_else(|| Error::Other("fleet database: not connected".into()))
    }

    async fn exchange(&mut self, store: &Outbox, now: f64) -> Result<Synced> {
        let host = store.fleet_host_id()?;
        let quarter = BUCKET_SECONDS[0];
        let since = (now as i64 - PUSH_SECONDS).div_euclid(quarter) * quarter;
        let rows = store.fleet_unpushed(since, PUSH_BATCH)?;
        let reservations = store.fleet_reservations(now)?;
        let local_text = read_optional(&self.budgets_path)?;
        let name = self.host_name.clone();
        let client = self.connected().await?;

        let tx = client.transaction().await.map_err(pg_error)?;
        tx.execute(
            "INSERT INTO hermes_fleet_hosts (host_id, name, first_seen, last_seen) VALUES ($1, $2, $3, $3)
             ON CONFLICT (host_id) DO UPDATE SET name = excluded.name,
                last_seen = GREATEST(hermes_fleet_hosts.last_seen, excluded.last_seen)",
            &[&host, &name, &now],
        )
        .await
        .map_err(pg_error)?;
        if !rows.is_empty() {
            let col = |f: fn(&hermes_meter_store::PushRow) -> String| rows.iter().map(f).collect::<Vec<_>>();
            let (scopes, ids) = (col(|r| r.scope.clone()), col(|r| r.id.clone()));
            let buckets: Vec<i64> = rows.iter().map(|r| r.bucket).collect();
            let costs: Vec<f64> = rows.iter().map(|r| r.cost_usd).collect();
            let ests: Vec<f64> = rows.iter().map(|r| r.estimated_usd).collect();
            let ints = |f: fn(&hermes_meter_store::PushRow) -> i64| rows.iter().map(f).collect::<Vec<i64>>();
            let calls = ints(|r| r.calls);
            let (ti, eti) = (ints(|r| r.input_tokens), ints(|r| r.estimated_input_tokens));
            let (to, eto) = (ints(|r| r.output_tokens), ints(|r| r.estimated_output_tokens));
            tx.execute(
                "INSERT INTO hermes_fleet_spend (scope, id, bucket, host_id, cost_usd, estimated_usd, calls,
                    input_tokens, estimated_input_tokens, output_tokens, estimated_output_tokens)
                 SELECT s, i, b, $1, c, e, n, ti, eti, tout, eto
                 FROM UNNEST($2::text[], $3::text[], $4::bigint[], $5::float8[], $6::float8[], $7::bigint[],
                    $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[]) AS t(s, i, b, c, e, n, ti, eti, tout, eto)
                 ON CONFLICT (scope, id, bucket, host_id) DO UPDATE SET cost_usd = excluded.cost_usd,
                    estimated_usd = excluded.estimated_usd, calls = excluded.calls,
                    input_tokens = excluded.input_tokens, estimated_input_tokens = excluded.estimated_input_tokens,
                    output_tokens = excluded.output_tokens, estimated_output_tokens = excluded.estimated_output_tokens
                 WHERE excluded.calls > hermes_fleet_spend.calls
                    OR (excluded.calls = hermes_fleet_spend.calls AND (excluded.cost_usd > hermes_fleet_spend.cost_usd
                        OR excluded.input_tokens + excluded.output_tokens
                           > hermes_fleet_spend.input_tokens + hermes_fleet_spend.output_tokens))",
                &[
                    &host, &scopes, &ids, &buckets, &costs, &ests, &calls, &ti, &eti, &to, &eto,
                ],
            )
            .await
            .map_err(pg_error)?;
        }
        tx.execute("DELETE FROM hermes_fleet_reserved WHERE host_id = $1", &[&host])
            .await
            .map_err(pg_error)?;
        if !reservations.is_empty() {
            let scopes: Vec<String> = reservations.iter().map(|r| r.scope.clone()).collect();
            let ids: Vec<String> = reservations.iter().map(|r| r.id.clone()).collect();
            let floats = |f: fn(&hermes_meter_store::Reserved) -> f64| reservations.iter().map(f).collect::<Vec<f64>>();
            let (amounts, ti, to) = (
                floats(|r| r.usd),
                floats(|r| r.input_tokens),
                floats(|r| r.output_tokens),
            );
            tx.execute(
                "INSERT INTO hermes_fleet_reserved (host_id, scope, id, amount_usd, at, input_tokens, output_tokens)
                 SELECT $1, s, i, a, $5, ti, tout
                 FROM UNNEST($2::text[], $3::text[], $4::float8[], $6::float8[], $7::float8[]) AS t(s, i, a, ti, tout)",
                &[&host, &scopes, &ids, &amounts, &now, &ti, &to],
            )
            .await
            .map_err(pg_error)?;
        }
        // The first host with a budget file brings it to the fleet.
        if let Some(text) = local_text.as_deref().filter(|t| BudgetConfig::parse(t).is_ok()) {
            tx.execute(
                "INSERT INTO hermes_fleet_budgets (singleton, text, version, updated_at, updated_by)
                 VALUES (1, $1, 1, $2, $3) ON CONFLICT (singleton) DO NOTHING",
                &[&text, &now, &name],
            )
            .await
            .map_err(pg_error)?;
        }
        let doc: Option<(String, i64)> = tx
            .query_opt(
                "SELECT text, version FROM hermes_fleet_budgets WHERE singleton = 1",
                &[],
            )
            .await
            .map_err(pg_error)?
            .map(|r| (r.get(0), r.get(1)));
        tx.commit().await.map_err(pg_error)?;
        store.fleet_mark_pushed(&rows)?;

        let mut synced = Synced {
            pushed: rows.len(),
            more: rows.len() == PUSH_BATCH,
            ..Synced::default()
        };
        let cfg = match &doc {
            Some((text, _)) => {
                if local_text.as_deref() != Some(text.as_str()) {
                    hermes_meter_store::write_atomically(&self.budgets_path, text.as_bytes())?;
                    synced.budgets_written = true;
                }
                BudgetConfig::parse(text).map_err(|m| Error::Other(format!("fleet budget file: {m}")))?
            }
            None => crate::config::load_budgets(&self.budgets_path)?,
        };

        let prune = self.pruned_at.is_none_or(|t| now - t >= PRUNE_EVERY_SECONDS);
        let client = self.connected().await?;
        if prune {
            let cutoff = now - KEEP_SECONDS;
            client
                .execute("DELETE FROM hermes_fleet_spend WHERE bucket < $1", &[&(cutoff as i64)])
                .await
                .map_err(pg_error)?;
            client
                .execute("DELETE FROM hermes_fleet_hosts WHERE last_seen < $1", &[&cutoff])
                .await
                .map_err(pg_error)?;
        }
        let (view, hosts) = pull(client, &cfg, &host, now).await?;
        synced.hosts = hosts;
        store.fleet_write_view(&view, hosts, doc.map(|d| d.1), now)?;
        if prune {
            self.pruned_at = Some(now);
        }
        Ok(synced)
    }
}

/// The measures of a spend bucket the pull sums: USD, input and output
/// tokens, each settled and its estimated part.
const MEASURES: [&str; 6] = [
    "cost_usd",
    "estimated_usd",
    "input_tokens",
    "estimated_input_tokens",
    "output_tokens",
    "estimated_output_tokens",
];

/// One scope id's sums: per window (as [`windows_of`] lists them), the
/// fleet's and this host's [`MEASURES`]; then the fleet's and this host's
/// open reservations (USD, input tokens, output tokens).
type IdSums = (Vec<[[f64; 6]; 2]>, [[f64; 3]; 2]);

/// A use from summed [`MEASURES`] and reservations.
fn use_of(m: &[f64; 6], reserved: &[f64; 3]) -> WindowUse {
    let spend = |settled: f64, estimated: f64, reserved: f64| Spend {
        settled,
        estimated,
        reserved,
    };
    WindowUse {
        usd: spend(m[0], m[1], reserved[0]),
        input_tokens: spend(m[2], m[3], reserved[1]),
        output_tokens: spend(m[4], m[5], reserved[2]),
    }
}

/// The windows the fleet view holds: the calendar ones, and every rolling
/// width a limit of the budget file names (its rows' period is
/// [`budget::ROLLING_FLEET_PERIOD`]: the window as of this sync).
fn windows_of(cfg: &BudgetConfig) -> Vec<Window> {
    let mut rolling: Vec<Window> = cfg
        .scopes
        .values()
        .flat_map(|s| std::iter::once(&s.default).chain(s.overrides.values()))
        .flat_map(|l| l.iter().map(|(w, _, _)| w))
        .filter(|w| w.rolling().is_some())
        .collect();
    rolling.sort();
    rolling.dedup();
    Window::CALENDAR.into_iter().chain(rolling).collect()
}

/// Every scope id's spend in each window now, the others' and this host's,
/// with the leases, and the live hosts.
async fn pull(client: &Client, cfg: &BudgetConfig, host: &str, now: f64) -> Result<(Vec<FleetRow>, i64)> {
    let t = budget::timestamp(now);
    let windows = windows_of(cfg);
    let starts: Vec<i64> = windows
        .iter()
        .map(|w| budget::window_bounds(*w, t, &cfg.tz).0.as_second())
        .collect();
    let periods: Vec<String> = windows
        .iter()
        .map(|w| match w.rolling() {
            Some(_) => budget::ROLLING_FLEET_PERIOD.to_string(),
            None => budget::period_name(*w, t, &cfg.tz),
        })
        .collect();
    let hosts: i64 = client
        .query_one(
            "SELECT COUNT(*) FROM hermes_fleet_hosts WHERE last_seen >= $1",
            &[&(now - HOST_LIVE_SECONDS)],
        )
        .await
        .map_err(pg_error)?
        .get(0);
    // Per window ($1..$n: its start), the fleet's sums then this host's ($n+1).
    let host_param = windows.len() + 1;
    let mut sums_sql = Vec::new();
    for w in 1..=windows.len() {
        for own in [String::new(), format!(" AND host_id = ${host_param}")] {
            for m in MEASURES {
                sums_sql.push(format!(
                    "COALESCE(SUM({m}) FILTER (WHERE bucket >= ${w}{own}), 0)::float8"
                ));
            }
        }
    }
    let earliest: Vec<String> = (1..=windows.len()).map(|w| format!("${w}")).collect();
    let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = starts
        .iter()
        .map(|s| s as &(dyn tokio_postgres::types::ToSql + Sync))
        .collect();
    params.push(&host);
    let mut sums: HashMap<(String, String), IdSums> = HashMap::new();
    let spend = client
        .query(
            &format!(
                "SELECT scope, id, {} FROM hermes_fleet_spend WHERE bucket >= LEAST({}) GROUP BY scope, id",
                sums_sql.join(", "),
                earliest.join(", ")
            ),
            &params,
        )
        .await
        .map_err(pg_error)?;
    let empty = || (vec![[[0.0; 6]; 2]; windows.len()], [[0.0; 3]; 2]);
    for r in spend {
        let entry = sums.entry((r.get(0), r.get(1))).or_insert_with(empty);
        for (w, window) in entry.0.iter_mut().enumerate() {
            for (k, whose) in window.iter_mut().enumerate() {
                for (m, slot) in whose.iter_mut().enumerate() {
                    *slot = r.get(2 + 12 * w + 6 * k + m);
                }
            }
        }
    }
    let reserved = client
        .query(
            "SELECT scope, id, SUM(amount_usd), SUM(input_tokens), SUM(output_tokens),
                COALESCE(SUM(amount_usd) FILTER (WHERE host_id = $1), 0),
                COALESCE(SUM(input_tokens) FILTER (WHERE host_id = $1), 0),
                COALESCE(SUM(output_tokens) FILTER (WHERE host_id = $1), 0)
             FROM hermes_fleet_reserved WHERE at >= $2 GROUP BY scope, id",
            &[&host, &(now - RESERVATION_TTL_SECONDS)],
        )
        .await
        .map_err(pg_error)?;
    for r in reserved {
        sums.entry((r.get(0), r.get(1))).or_insert_with(empty).1 =
            [[r.get(2), r.get(3), r.get(4)], [r.get(5), r.get(6), r.get(7)]];
    }
    let mut rows = Vec::with_capacity(sums.len() * windows.len());
    let counted = |u: &WindowUse| u.spend(BudgetUnit::Tokens, cfg.tokens_counted).total();
    for ((scope, id), (by_window, [fleet_reserved, own_reserved])) in sums {
        let limits = Scope::parse(&scope).map(|s| cfg.limits(s, &id)).unwrap_or_default();
        for (w, window) in windows.iter().enumerate() {
            let [fleet_sums, own_sums] = &by_window[w];
            let (fleet, own) = (use_of(fleet_sums, &fleet_reserved), use_of(own_sums, &own_reserved));
            let others: [f64; 6] = std::array::from_fn(|m| fleet_sums[m] - own_sums[m]);
            let others_reserved: [f64; 3] = std::array::from_fn(|m| fleet_reserved[m] - own_reserved[m]);
            let lease_of = |unit: BudgetUnit, fleet_used: f64| {
                limits
                    .get(*window, unit)
                    .map(|limit| lease::lease(limit * cfg.hard_threshold, fleet_used, hosts))
            };
            rows.push(FleetRow {
                scope: scope.clone(),
                id: id.clone(),
                win: window.as_str().to_string(),
                period: periods[w].clone(),
                others: use_of(&others, &others_reserved),
                own_at_sync_usd: own.usd.total(),
                lease_usd: lease_of(BudgetUnit::Usd, fleet.usd.total()),
                own_at_sync_tokens: counted(&own),
                lease_tokens: lease_of(BudgetUnit::Tokens, counted(&fleet)),
            });
        }
    }
    Ok((rows, hosts))
}

fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}
