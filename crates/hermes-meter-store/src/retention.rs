//! Retention: what the store forgets, and when.
//!
//! Owns: deleting journal rows, outbox rows, captured content and finished
//! requests' state past their retention, in small batches (one short
//! transaction each, called from the writer's sweep, never from a hook),
//! and the journal's horizon. Must not touch: the ledger (runs, turns,
//! calls, errors, tool calls, edges, approvals) and the budget rollups,
//! which reports, budgets and `export --since` read for as long as the
//! store lives.
//!
//! # Finished requests
//!
//! `api_requests` holds what `pre_api_request` said of a request until its
//! call ends: the attempt's start, the estimator's input, whether an exit
//! closed the attempt. Once the call is in `llm_calls` only a later event of
//! the same request reads it, and once the call ended before the horizon
//! no such event can be applied (it is a duplicate by its key, or refused).
//! So those rows go too, the oldest calls first: about a fifth of what a
//! hook call leaves in the store for good. Requests that never got an
//! answer stay (the exit and `export --since` send their open attempts).
//!
//! # The journal's horizon
//!
//! A journal row is an event's idempotence key: applying the same event
//! again finds it and changes nothing. Once keys are deleted, an event that
//! came back (a replayed file, a spool recovered late) could be applied a
//! second time. So deleting keys moves a horizon (`meta`
//! `retention.journal_horizon`): every key of an event at or after it is
//! still present, and an event before it is refused and counted
//! (`refused.too_old`) rather than applied, since the store can no longer
//! tell whether it has it. Keys start with the event's time, zero-padded
//! (see `ledger.rs`), so the oldest keys are the first entries of the
//! journal's unique index and a batch reads only what it deletes.

use rusqlite::{params, OptionalExtension, Transaction, TransactionBehavior};

use super::row_counts::{Counted, RowCounts};
use super::{Reader, Writer};
use crate::error::Result;

/// The `meta` key of the journal's horizon (Unix seconds).
const HORIZON_KEY: &str = "retention.journal_horizon";

/// The `store_counts` names of what retention removed or refused.
pub mod pruned {
    /// Journal rows (events' keys and payloads) deleted.
    pub const JOURNAL: &str = "pruned.journal";
    /// Outbox rows whose spans were not accepted within the retention.
    pub const OUTBOX: &str = "pruned.outbox";
    /// Captured content rows deleted.
    pub const CONTENT: &str = "pruned.content";
    /// Events refused because they are older than the journal's horizon.
    pub const REFUSED: &str = "refused.too_old";
    /// Finished requests' `api_requests` rows deleted.
    pub const REQUESTS: &str = "pruned.requests";
}

/// The `meta` key of the end time up to which finished requests were
/// deleted.
const REQUESTS_MARK_KEY: &str = "retention.requests_through";

/// The journal key prefix of time `at`: keys of events before `at` sort
/// before it. Must match the key format of `ledger.rs`.
pub(super) fn key_prefix(at: f64) -> String {
    format!("{at:017.6}")
}

/// The journal's horizon inside a transaction: events before it are refused.
pub(super) fn horizon(tx: &Transaction<'_>) -> Result<Option<f64>> {
    meta_f64(tx, HORIZON_KEY)
}

/// Adds `by` to the counter `name` of `store_counts`.
pub(super) fn count(tx: &Transaction<'_>, name: &str, by: i64) -> Result<()> {
    if by == 0 {
        return Ok(());
    }
    tx.prepare_cached(
        "INSERT INTO store_counts (name, n) VALUES (?1, ?2) ON CONFLICT (name) DO UPDATE SET n = n + excluded.n",
    )?
    .execute(params![name, by])?;
    Ok(())
}

/// Deletes the oldest journal rows before `?1` (a key prefix), at most
/// `?2`. The newest row is always kept, so `seq` never goes back.
pub(super) const PRUNE_JOURNAL: &str = "DELETE FROM journal WHERE seq IN (
        SELECT seq FROM journal WHERE event_key < ?1 ORDER BY event_key LIMIT ?2)
      AND seq < (SELECT MAX(seq) FROM journal)";

/// Deletes, among the `?2` oldest outbox rows, those ready before `?1`.
/// Reads a bounded head of the table whatever it holds.
pub(super) const EXPIRE_OUTBOX: &str = "DELETE FROM outbox WHERE seq IN (
        SELECT seq FROM (SELECT seq, ready_at FROM outbox ORDER BY seq LIMIT ?2) WHERE ready_at < ?1)";

/// LLM calls that ended in `[?1, ?2)`, oldest first, at most `?3`: their
/// requests are finished (see the module docs).
pub(super) const FINISHED_REQUESTS: &str = "SELECT api_request_id, ended_at FROM llm_calls
      WHERE ended_at >= ?1 AND ended_at < ?2 ORDER BY ended_at LIMIT ?3";

fn set_meta(tx: &Transaction<'_>, key: &str, value: f64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO meta (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute(params![key, value.to_string()])?;
    Ok(())
}

fn meta_f64(tx: &Transaction<'_>, key: &str) -> Result<Option<f64>> {
    let text: Option<String> = tx
        .prepare_cached("SELECT value FROM meta WHERE key = ?1")?
        .query_row(params![key], |r| r.get(0))
        .optional()?;
    Ok(text.and_then(|t| t.parse().ok()))
}

impl Writer {
    /// Deletes the `api_requests` rows of up to `limit` calls that ended
    /// before the journal's horizon, oldest first, in one transaction (see
    /// the module docs). Returns how many rows went and whether older
    /// calls may remain.
    pub fn prune_finished_requests(&mut self, limit: usize) -> Result<(usize, bool)> {
        let tx = self.db.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let Some(horizon) = horizon(&tx)? else {
            return Ok((0, false));
        };
        let from = meta_f64(&tx, REQUESTS_MARK_KEY)?.unwrap_or(0.0);
        let calls: Vec<(String, f64)> = tx
            .prepare_cached(FINISHED_REQUESTS)?
            .query_map(params![from, horizon, limit as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut deleted = 0;
        {
            let mut delete = tx.prepare_cached("DELETE FROM api_requests WHERE api_request_id = ?1")?;
            for (id, _) in &calls {
                deleted += delete.execute(params![id])?;
            }
        }
        let more = calls.len() == limit;
        if let Some(&(_, last)) = calls.last() {
            // The next batch starts at the last end time (calls ending then
            // are read again, and find nothing), or just past it when a
            // whole batch ended at the same moment.
            let mark = if more && last <= from { last.next_up() } else { last };
            set_meta(&tx, REQUESTS_MARK_KEY, mark)?;
        }
        count(&tx, pruned::REQUESTS, deleted as i64)?;
        tx.commit()?;
        Ok((deleted, more))
    }

    /// Deletes up to `limit` journal rows of events before `before`, in one
    /// transaction, and moves the horizon to `before` if any went. Returns
    /// how many were deleted.
    pub fn prune_journal(&mut self, before: f64, limit: usize) -> Result<usize> {
        let tx = self.db.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx
            .prepare_cached(PRUNE_JOURNAL)?
            .execute(params![key_prefix(before), limit as i64])?;
        if n > 0 {
            let moved = horizon(&tx)?.map_or(before, |h| h.max(before));
            set_meta(&tx, HORIZON_KEY, moved)?;
            count(&tx, pruned::JOURNAL, n as i64)?;
            let mut counts = RowCounts::default();
            counts.deleted(Counted::Journal, n);
            counts.write(&tx)?;
        }
        tx.commit()?;
        Ok(n)
    }

    /// Deletes, among the `limit` oldest outbox rows, those ready before
    /// `before`: spans nobody accepted within the retention. They count as
    /// pruned (`status`); `export --since` can still send them from the
    /// ledger. Returns how many went.
    pub fn expire_outbox(&mut self, before: f64, limit: usize) -> Result<usize> {
        let tx = self.db.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx
            .prepare_cached(EXPIRE_OUTBOX)?
            .execute(params![before, limit as i64])?;
        count(&tx, pruned::OUTBOX, n as i64)?;
        tx.commit()?;
        Ok(n)
    }

    /// Gives up to `pages` free pages back to the file system (incremental
    /// vacuum, one short transaction) once more than `keep` pages are free:
    /// a store keeps some free pages to grow into rather than giving them
    /// back and taking them again. Returns the pages given back (0 on a
    /// store without incremental auto-vacuum: see `hermes-meter compact`).
    pub fn vacuum_step(&mut self, keep: i64, pages: i64) -> Result<i64> {
        let free: i64 = self.db.conn().query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
        let mode: i64 = self.db.conn().query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
        // 2: incremental.
        if mode != 2 || free <= keep {
            return Ok(0);
        }
        let n = pages.min(free - keep);
        // The pragma frees one page per step of its statement: run it to
        // the end, or it gives back a single page.
        let mut stmt = self.db.conn().prepare(&format!("PRAGMA incremental_vacuum({n})"))?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        let left: i64 = self.db.conn().query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
        Ok(free - left)
    }

    /// Rewrites the whole file (`VACUUM`), which also turns on incremental
    /// auto-vacuum for a store created before it was the default. Holds
    /// the write lock throughout: writers meanwhile keep their events in
    /// their spools. Returns the file's size before and after, in bytes.
    pub fn compact(&mut self) -> Result<(i64, i64)> {
        let size = |s: &Self| -> Result<i64> {
            let pages: i64 = s.conn().query_row("PRAGMA page_count", [], |r| r.get(0))?;
            let page: i64 = s.conn().query_row("PRAGMA page_size", [], |r| r.get(0))?;
            Ok(pages * page)
        };
        let before = size(self)?;
        self.db
            .conn()
            .execute_batch("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;")?;
        self.checkpoint_truncate()?;
        Ok((before, size(self)?))
    }

    /// A checkpoint that empties the WAL file (after a compaction, whose
    /// rewrite went through it, and a rebuild's new store), waiting for
    /// readers.
    pub fn checkpoint_truncate(&self) -> Result<()> {
        self.db
            .conn()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }
}

impl Reader {
    /// The journal's horizon: events before it are refused (see the module
    /// docs). `None` while nothing was ever pruned.
    pub fn journal_horizon(&self) -> Result<Option<f64>> {
        let text: Option<String> = self
            .conn()
            .query_row("SELECT value FROM meta WHERE key = ?1", params![HORIZON_KEY], |r| {
                r.get(0)
            })
            .optional()?;
        Ok(text.and_then(|t| t.parse().ok()))
    }

    /// A counter of `store_counts` (0 when absent).
    pub fn store_count(&self, name: &str) -> Result<i64> {
        Ok(self
            .conn()
            .prepare_cached("SELECT n FROM store_counts WHERE name = ?1")?
            .query_row(params![name], |r| r.get(0))
            .optional()?
            .unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every retention statement reads what it deletes (or a bounded head
    /// of a table) through an index: a step costs the same whatever the
    /// store's size.
    #[test]
    fn retention_reads_no_table_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open(&dir.path().join("plan.db")).expect("open");
        for sql in [
            PRUNE_JOURNAL,
            EXPIRE_OUTBOX,
            FINISHED_REQUESTS,
            super::super::content::PRUNABLE_CONTENT,
            super::super::content::CONTENT_CANDIDATES,
            super::super::metrics::FOLD_SESSIONS,
        ] {
            let steps = store.query_plan(sql, "1");
            // The outbox head is read in seq order with a LIMIT: a bounded
            // walk of the primary key, which SQLite calls a SCAN.
            let scans: Vec<&String> = steps
                .iter()
                .filter(|s| {
                    s.starts_with("SCAN")
                        && s.as_str() != "SCAN CONSTANT ROW"
                        // A partial index of session rows only, read in order
                        // up to the LIMIT.
                        && !s.contains("USING INDEX metric_log_sessions")
                        && !(sql == EXPIRE_OUTBOX && (s.as_str() == "SCAN outbox" || s.starts_with("SCAN (subquery")))
                })
                .collect();
            assert!(scans.is_empty(), "{sql}\n{steps:?}");
        }
    }
}
