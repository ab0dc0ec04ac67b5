//! The row counts of the ledger tables and the journal, kept in
//! `store_counts` so `status` reads them in O(1).
//!
//! Owns: counting the rows the apply path, retention and the doctor insert
//! into or delete from `journal`, `runs`, `turns`, `llm_calls`,
//! `llm_call_errors`, `tool_calls` and `subagent_edges`, and the rows the
//! metric-log triggers append to `metric_log` (see [`LogTail`]), and
//! writing each changed counter once, in the transaction that changed the
//! rows.
//! Must not touch: `outbox` and `outbox.held`, whose counters stay with the
//! row triggers of the schema (their rows are written by upserts that may
//! insert or update and by multi-row `INSERT ... SELECT`s, where no
//! statement's `changes()` says how many rows were added), nor deletes from
//! `metric_log` (the fold's, one row a statement, off the hook path), which
//! its delete trigger still counts.
//!
//! # Why not triggers
//!
//! A trigger running an `UPDATE` of `store_counts` for every row inserted
//! or deleted costs a trigger program and a b-tree update per row, which
//! was most of what replay, apply and group commit cost when counters were
//! kept that way.
//! The statements that write these tables say exactly how many rows they
//! inserted (`ON CONFLICT ... DO NOTHING`, or an existence read where an
//! upsert may update instead) or deleted, so the code that runs them adds
//! that to a [`RowCounts`] and writes the sums before `COMMIT`: exact, in
//! the same transaction, once per table and transaction.
//!
//! The rule for new code: a statement that inserts into or deletes from
//! one of [`COUNTED`] adds what it did to the transaction's `RowCounts`
//! (`crates/hermes-meter-store/tests/row_counts.rs` holds every counter to `COUNT(*)`).

use rusqlite::{params, Transaction};

use crate::error::Result;

/// A table whose row count the code keeps (not a trigger).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    Journal,
    Runs,
    Turns,
    LlmCalls,
    LlmCallErrors,
    ToolCalls,
    SubagentEdges,
    /// Appends only ([`LogTail`]); deletes are the delete trigger's.
    MetricLog,
}

/// Every counted table, in [`Counted`]'s order.
pub(super) const COUNTED: [Counted; 8] = [
    Counted::Journal,
    Counted::Runs,
    Counted::Turns,
    Counted::LlmCalls,
    Counted::LlmCallErrors,
    Counted::ToolCalls,
    Counted::SubagentEdges,
    Counted::MetricLog,
];

impl Counted {
    /// The table, which is also its `store_counts` name.
    pub(super) fn table(self) -> &'static str {
        match self {
            Counted::Journal => "journal",
            Counted::Runs => "runs",
            Counted::Turns => "turns",
            Counted::LlmCalls => "llm_calls",
            Counted::LlmCallErrors => "llm_call_errors",
            Counted::ToolCalls => "tool_calls",
            Counted::SubagentEdges => "subagent_edges",
            Counted::MetricLog => "metric_log",
        }
    }
}

/// Rows a transaction added (or, negative, removed) per counted table, not
/// written yet. Dropped with a transaction that rolls back, so it never
/// outlives the rows it counts.
#[derive(Debug, Default)]
pub(super) struct RowCounts {
    delta: [i64; COUNTED.len()],
}

impl RowCounts {
    /// Notes `n` rows inserted into `table`.
    pub(super) fn inserted(&mut self, table: Counted, n: usize) {
        self.delta[table as usize] += n as i64;
    }

    /// Notes `n` rows deleted from `table`.
    pub(super) fn deleted(&mut self, table: Counted, n: usize) {
        self.delta[table as usize] -= n as i64;
    }

    /// Adds the changes to `store_counts` inside `tx` (call it just before
    /// the commit): one statement per table that changed.
    pub(super) fn write(&mut self, tx: &Transaction<'_>) -> Result<()> {
        for table in COUNTED {
            let by = std::mem::take(&mut self.delta[table as usize]);
            if by != 0 {
                tx.prepare_cached("UPDATE store_counts SET n = n + ?2 WHERE name = ?1")?
                    .execute(params![table.table(), by])?;
            }
        }
        Ok(())
    }
}

/// Where the metric log ended when a transaction began. Its rows are
/// appended by triggers (0003: a call, error, tool call, turn or run that
/// finished), never by a statement of ours, so no `changes()` counts them.
/// But `seq` is an `INTEGER PRIMARY KEY` given by SQLite, the largest plus
/// one: a transaction that deletes no log row appended exactly as many rows
/// as its end moved. Every transaction that inserts or finishes ledger rows
/// reads it first and adds [`LogTail::appended`] before its commit.
#[derive(Debug, Clone, Copy)]
pub(super) struct LogTail(i64);

impl LogTail {
    /// The log's end now, inside `tx`.
    pub(super) fn read(tx: &Transaction<'_>) -> Result<Self> {
        Ok(LogTail(last_seq(tx)?))
    }

    /// Notes in `counts` the rows appended since [`LogTail::read`] (in a
    /// transaction that deleted no log row in between).
    pub(super) fn appended(self, tx: &Transaction<'_>, counts: &mut RowCounts) -> Result<()> {
        let n = last_seq(tx)? - self.0;
        counts.delta[Counted::MetricLog as usize] += n;
        Ok(())
    }
}

fn last_seq(tx: &Transaction<'_>) -> Result<i64> {
    Ok(tx
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM metric_log")?
        .query_row([], |r| r.get(0))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_of_counted_is_the_order_of_its_indexes() {
        for (i, table) in COUNTED.into_iter().enumerate() {
            assert_eq!(table as usize, i, "{table:?}");
        }
    }
}
