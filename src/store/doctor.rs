//! Checking a store's file and rebuilding a damaged one.
//!
//! Owns: `PRAGMA integrity_check` of a store file, and rebuilding a fresh
//! store from what a damaged one still lets us read. Must not touch: the
//! damaged file's contents (it is evidence, read and never written), the
//! spool (the CLI recovers it into the rebuilt store afterwards).
//!
//! # How a rebuild works
//!
//! The journal holds every hook event the store applied, decoded, in the
//! order it was applied. A rebuild reads every journal row it can (a range
//! that fails to read is stepped through one row at a time, so one bad page
//! costs only the rows on it) and applies each event again through the
//! ordinary apply path, so the ledger, run totals, budget rollups, metric
//! log and span outbox of the fresh store are exactly what those events
//! make. Then it carries over, table by table where the damaged file still
//! reads, the state no event can rebuild:
//!
//! - `meta` (the store's instance id), export counters, the metric delta
//!   base, budget verdict counts, one-shot actions (cron pauses) and alerts
//!   with their delivery, the models' free and paid times, run profiles;
//! - what retention pruned from the journal: the ledger rows of sessions
//!   that began before the journal's horizon, and the budget rollups of
//!   buckets and periods that began before it (`carry_pruned_ledger`);
//! - what was already exported: outbox rows the damaged store no longer
//!   held were sent, so they are dropped from the rebuilt outbox (no span
//!   is sent twice); likewise metric log rows already folded, with the
//!   folded series, and captured content already pruned.
//!
//! Costs are computed again with the current prices (the user's file and
//! the built-in table); calls whose cost then differs from the damaged
//! store's are counted in the summary.

use std::path::Path;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::row_counts::{Counted, LogTail, RowCounts, COUNTED};
use super::{EventContext, Store};
use crate::error::Result;
use crate::hook::{Hook, HookEvent};

/// Journal rows read and applied per transaction.
const CHUNK: i64 = 2048;

/// Consecutive unreadable journal ids after which, when the damaged file
/// cannot say where its journal ends, the rebuild stops looking.
const GIVE_UP_AFTER: i64 = 1_000_000;

/// What `PRAGMA integrity_check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integrity {
    /// The problems SQLite listed (at most the number asked for); empty
    /// when the file is whole.
    pub problems: Vec<String>,
}

impl Integrity {
    /// Whether the file is whole.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Runs SQLite's full integrity check on the database at `path`, listing
/// at most `max` problems. Opens the file without migrating or writing it
/// (a WAL left by a dead process is read, as any reader would).
pub fn check_integrity(path: &Path, max: usize) -> Result<Integrity> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    let mut stmt = conn.prepare(&format!("PRAGMA integrity_check({})", max.max(1)))?;
    let lines: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    let problems = if lines.len() == 1 && lines[0] == "ok" {
        Vec::new()
    } else {
        lines
    };
    Ok(Integrity { problems })
}

/// What a rebuild read, applied and carried over.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Rebuilt {
    /// Journal rows read from the damaged file.
    pub journal_read: u64,
    /// Journal rows that could not be read (damaged pages).
    pub journal_unreadable: u64,
    /// Journal rows read whose event could not be decoded.
    pub undecodable: u64,
    /// Events applied to the fresh store.
    pub applied: u64,
    /// Tables whose state was carried over, with the rows it took.
    pub carried: Vec<(&'static str, u64)>,
    /// Tables that could not be read, so their state is what the events
    /// rebuilt (named with what that means).
    pub unreadable: Vec<String>,
    /// LLM calls whose cost, computed with today's prices, differs from the
    /// damaged store's; `None` when the damaged calls could not be read.
    pub cost_differs: Option<u64>,
}

impl Store {
    /// Applies to this (fresh) store every event the journal of the
    /// damaged database at `damaged` still yields, then carries over the
    /// state events cannot rebuild (see the module documentation). Runs
    /// left open longer than `idle_run_seconds` before `now` are closed as
    /// every command's sweep would, before the outbox is compared, so the
    /// spans of runs the damaged store closed are not sent again.
    pub fn rebuild_from(&mut self, damaged: &Path, idle_run_seconds: f64, now: f64) -> Result<Rebuilt> {
        let mut out = Rebuilt::default();
        let old = Connection::open_with_flags(damaged, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
        self.set_cache_size_kib(64 * 1024)?;
        let last: Option<i64> = old
            .query_row("SELECT MAX(seq) FROM journal", [], |r| r.get(0))
            .unwrap_or(None);
        let mut next = i64::MIN;
        let mut failed_in_a_row = 0;
        loop {
            match read_journal(&old, next, CHUNK) {
                Ok(rows) if rows.is_empty() => {
                    // The scan ended; if the file said the journal goes on
                    // beyond where it stopped, step over what is left.
                    match last {
                        Some(last) if next <= last && next != i64::MIN => {
                            out.journal_unreadable += 1;
                            next += 1;
                            continue;
                        }
                        _ => break,
                    }
                }
                Ok(rows) => {
                    failed_in_a_row = 0;
                    next = rows.last().map_or(next, |r| r.seq + 1);
                    self.apply_rows(rows, &mut out)?;
                }
                Err(_) => {
                    // A damaged page in this range: read it one id at a time.
                    if next == i64::MIN {
                        next = old
                            .query_row("SELECT MIN(seq) FROM journal", [], |r| r.get::<_, Option<i64>>(0))
                            .ok()
                            .flatten()
                            .unwrap_or(1);
                    }
                    match read_journal(&old, next, 1) {
                        Ok(rows) if rows.first().is_some_and(|r| r.seq == next) => {
                            failed_in_a_row = 0;
                            self.apply_rows(rows, &mut out)?;
                        }
                        _ => {
                            out.journal_unreadable += 1;
                            failed_in_a_row += 1;
                        }
                    }
                    next += 1;
                    let beyond = last.map_or(failed_in_a_row >= GIVE_UP_AFTER, |last| next > last);
                    if beyond {
                        break;
                    }
                }
            }
        }
        drop(old);
        self.close_idle_runs(now, idle_run_seconds)?;
        self.carry_over(damaged, &mut out)?;
        Ok(out)
    }

    fn apply_rows(&mut self, rows: Vec<JournalRow>, out: &mut Rebuilt) -> Result<()> {
        out.journal_read += rows.len() as u64;
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            match serde_json::from_str::<Hook>(&row.payload) {
                Ok(hook) => events.push((
                    HookEvent { at: row.at, hook },
                    EventContext {
                        pid: row.pid,
                        thread: row.thread,
                        problems: Vec::new(),
                    },
                )),
                Err(_) => out.undecodable += 1,
            }
        }
        let applied = self.apply_batch(events.iter().map(|(e, c)| (e, c)))?;
        out.applied += applied.len() as u64;
        Ok(())
    }

    /// Copies from the damaged file the state no event rebuilds, each table
    /// on its own, so one unreadable table costs only its own state.
    fn carry_over(&mut self, damaged: &Path, out: &mut Rebuilt) -> Result<()> {
        let conn = self.conn();
        conn.execute("ATTACH DATABASE ?1 AS damaged", params![damaged.to_string_lossy()])?;
        let replaced: [(&'static str, &str); 8] = [
            ("meta", "INSERT OR REPLACE INTO meta SELECT * FROM damaged.meta"),
            (
                "export_state",
                "INSERT OR REPLACE INTO export_state SELECT * FROM damaged.export_state",
            ),
            (
                "metric_delta_base",
                "INSERT OR REPLACE INTO metric_delta_base SELECT * FROM damaged.metric_delta_base",
            ),
            (
                "budget_verdicts",
                "INSERT OR REPLACE INTO budget_verdicts SELECT * FROM damaged.budget_verdicts",
            ),
            (
                "budget_once",
                "INSERT OR REPLACE INTO budget_once SELECT * FROM damaged.budget_once",
            ),
            ("alerts", "INSERT OR REPLACE INTO alerts SELECT * FROM damaged.alerts"),
            (
                "budget_models",
                "INSERT OR REPLACE INTO budget_models SELECT * FROM damaged.budget_models",
            ),
            // The fleet host id: a rebuilt store is the same host, so its
            // pushes (absolute totals) replace its old ones, never add to them.
            (
                "fleet_state",
                "INSERT OR REPLACE INTO fleet_state (singleton, host_id, budgets_version)
                 SELECT singleton, host_id, budgets_version FROM damaged.fleet_state",
            ),
        ];
        for (table, sql) in replaced {
            carry(conn, table, out, |c| Ok(c.execute(sql, [])? as u64));
        }
        carry(conn, "runs (profile)", out, |c| {
            Ok(c.execute(
                "UPDATE runs SET profile = (SELECT d.profile FROM damaged.runs d WHERE d.session_id = runs.session_id)
                  WHERE profile IS NULL",
                [],
            )? as u64)
        });
        // Spans the damaged store no longer had in its outbox were sent.
        carry(conn, "outbox", out, |c| {
            Ok(c.execute(
                "DELETE FROM outbox WHERE NOT EXISTS (SELECT 1 FROM damaged.outbox d
                   WHERE d.kind = outbox.kind AND d.session_id = outbox.session_id
                     AND d.key = outbox.key AND d.n = outbox.n)",
                [],
            )? as u64)
        });
        // What retention took out of the journal: the ledger of sessions
        // that began before its horizon, and the budget rollups before it.
        carry(conn, "ledger before the journal's horizon", out, carry_pruned_ledger);
        // Metric state moves as one: the folded series with the log rows
        // not folded yet, or (either unreadable) everything folded again
        // from the rebuilt log, which gives the ledger's totals.
        carry(conn, "metric_series", out, |c| {
            let tx = c.unchecked_transaction()?;
            tx.execute_batch(
                "CREATE TEMP TABLE pending_log AS SELECT kind, session_id, key, n FROM damaged.metric_log;
                 CREATE INDEX temp.pending_log_key ON pending_log (kind, session_id, key, n);
                 DELETE FROM metric_series;
                 INSERT INTO metric_series SELECT * FROM damaged.metric_series;
                 DELETE FROM metric_sessions;
                 INSERT INTO metric_sessions SELECT * FROM damaged.metric_sessions;
                 DELETE FROM metric_log WHERE NOT EXISTS (SELECT 1 FROM pending_log p
                   WHERE p.kind = metric_log.kind AND p.session_id = metric_log.session_id
                     AND p.key = metric_log.key AND p.n = metric_log.n);
                 DROP TABLE temp.pending_log;",
            )?;
            let n = tx.query_row("SELECT COUNT(*) FROM metric_series", [], |r| r.get::<_, i64>(0))?;
            tx.commit()?;
            Ok(n as u64)
        });
        // Content already pruned stays pruned.
        carry(conn, "span_content", out, |c| {
            Ok(c.execute(
                "DELETE FROM span_content WHERE NOT EXISTS (SELECT 1 FROM damaged.span_content d
                   WHERE d.kind = span_content.kind AND d.session_id = span_content.session_id
                     AND d.key = span_content.key AND d.attr = span_content.attr)",
                [],
            )? as u64)
        });
        out.cost_differs = conn
            .query_row(
                "SELECT COUNT(*) FROM llm_calls n JOIN damaged.llm_calls o USING (api_request_id)
                  WHERE abs(n.cost_usd - o.cost_usd) > 1e-9",
                [],
                |r| r.get::<_, i64>(0),
            )
            .ok()
            .map(|n| n as u64);
        let _ = conn.execute_batch("DETACH DATABASE damaged");
        Ok(())
    }

    /// The number of journal rows.
    pub fn journal_rows(&self) -> Result<i64> {
        Ok(self
            .conn()
            .query_row("SELECT COUNT(*) FROM journal", [], |r| r.get(0))
            .optional()?
            .unwrap_or(0))
    }
}

/// The ledger tables keyed by session, which a journal rebuild fills.
const SESSION_TABLES: [&str; 7] = [
    "runs",
    "turns",
    "api_requests",
    "llm_calls",
    "llm_call_errors",
    "tool_calls",
    "approvals",
];

/// Copies from the damaged file what its journal's pruned rows made: the
/// ledger rows of sessions that began before the horizon (every event of
/// theirs after it is in the journal too, so the damaged file's rows are
/// the whole story and replace what the rebuild made of them), and the
/// budget rollups of buckets and periods that began before it. Explicit
/// deletes, not `INSERT OR REPLACE`, whose deletes no statement reports,
/// so `store_counts` follows what each statement changed.
/// Nothing to do for a store whose journal was never pruned.
fn carry_pruned_ledger(conn: &Connection) -> Result<u64> {
    let horizon: Option<f64> = conn
        .query_row(
            "SELECT CAST(value AS REAL) FROM damaged.meta WHERE key = 'retention.journal_horizon'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let Some(h) = horizon else { return Ok(0) };
    let tx = conn.unchecked_transaction()?;
    tx.execute(
        "CREATE TEMP TABLE pruned_sessions AS SELECT session_id FROM damaged.runs WHERE started_at < ?1",
        params![h],
    )?;
    let mut n = 0;
    // What the statements below delete and insert, for `store_counts`
    // (finished rows copied in log themselves for metrics).
    let log = LogTail::read(&tx)?;
    let mut counts = RowCounts::default();
    let counted = |table: &str| COUNTED.into_iter().find(|c| c.table() == table);
    for table in SESSION_TABLES {
        let scope = "session_id IN (SELECT session_id FROM temp.pruned_sessions)";
        let deleted = tx.execute(&format!("DELETE FROM {table} WHERE {scope}"), [])?;
        // Every column but a rowid alias (`llm_call_errors.id`), which the
        // rebuilt rows may already use.
        let columns: Vec<String> = tx
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{table}') WHERE NOT (pk = 1 AND type = 'INTEGER')"
            ))?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let columns = columns.join(", ");
        let inserted = tx.execute(
            &format!("INSERT INTO {table} ({columns}) SELECT {columns} FROM damaged.{table} WHERE {scope}"),
            [],
        )?;
        if let Some(c) = counted(table) {
            counts.deleted(c, deleted);
            counts.inserted(c, inserted);
        }
        n += inserted as u64;
    }
    let edges = "parent_session_id IN (SELECT session_id FROM temp.pruned_sessions)
                 OR child_session_id IN (SELECT session_id FROM temp.pruned_sessions)";
    let deleted = tx.execute(&format!("DELETE FROM subagent_edges WHERE {edges}"), [])?;
    let inserted = tx.execute(
        &format!("INSERT INTO subagent_edges SELECT * FROM damaged.subagent_edges WHERE {edges}"),
        [],
    )?;
    counts.deleted(Counted::SubagentEdges, deleted);
    counts.inserted(Counted::SubagentEdges, inserted);
    n += inserted as u64;
    for (table, start) in [("budget_spend", "bucket"), ("budget_period", "period")] {
        tx.execute(&format!("DELETE FROM {table} WHERE {start} < ?1"), params![h])?;
        n += tx.execute(
            &format!("INSERT INTO {table} SELECT * FROM damaged.{table} WHERE {start} < ?1"),
            params![h],
        )? as u64;
    }
    tx.execute_batch("DROP TABLE temp.pruned_sessions")?;
    log.appended(&tx, &mut counts)?;
    counts.write(&tx)?;
    tx.commit()?;
    Ok(n)
}

/// Runs one carry-over step; a failure (a damaged or missing table) is
/// noted and leaves the rebuilt state as the events made it.
fn carry(conn: &Connection, table: &'static str, out: &mut Rebuilt, step: impl FnOnce(&Connection) -> Result<u64>) {
    match step(conn) {
        Ok(n) => out.carried.push((table, n)),
        Err(e) => out.unreadable.push(format!("{table} ({e})")),
    }
}

struct JournalRow {
    seq: i64,
    at: f64,
    pid: Option<i64>,
    thread: Option<String>,
    payload: String,
}

/// Up to `limit` journal rows from id `from` on, in order.
fn read_journal(conn: &Connection, from: i64, limit: i64) -> rusqlite::Result<Vec<JournalRow>> {
    let mut stmt =
        conn.prepare_cached("SELECT seq, at, pid, thread, payload FROM journal WHERE seq >= ?1 ORDER BY seq LIMIT ?2")?;
    let rows = stmt.query_map(params![from, limit], |r| {
        Ok(JournalRow {
            seq: r.get(0)?,
            at: r.get(1)?,
            pid: r.get(2)?,
            thread: r.get(3)?,
            payload: r.get(4)?,
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{decode, DecodeOptions, Decoded};

    /// Every recorded hook call decodes to an event that the journal's
    /// payload gives back unchanged: a rebuild applies what was applied.
    #[test]
    fn journal_payloads_give_back_the_event_they_were_made_of() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|x| x != "jsonl") {
                continue;
            }
            for line in std::fs::read_to_string(&path).expect("fixture").lines() {
                let Ok(Some(rec)) = crate::hook::parse_line(line, true) else {
                    continue;
                };
                let opts = DecodeOptions {
                    capture_content: true,
                    ..DecodeOptions::default()
                };
                if let Decoded::Event(event, _) = decode(&rec.hook, &rec.kwargs, rec.t.unwrap_or(0.0), opts) {
                    let payload = serde_json::to_string(&event.hook).expect("payload");
                    let back: Hook = serde_json::from_str(&payload).expect("decodes back");
                    assert_eq!(back, event.hook, "{}", path.display());
                    seen += 1;
                }
            }
        }
        assert!(seen > 150, "the fixtures hold many events ({seen})");
    }
}
