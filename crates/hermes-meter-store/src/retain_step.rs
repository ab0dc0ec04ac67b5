//! One kind of retention work, one transaction: the list of
//! what a retention step does, in order, and what each kind calls, so the
//! writer (`crates/hermes-meter-runtime/src/bridge/writer/retain.rs`, which paces and orders the steps)
//! and the size benchmark run the same steps.
//!
//! Owns: that list and its cutoffs. Must not touch: how often steps run or
//! how large their batches are (the writer's, `crates/hermes-meter-runtime/src/bridge/pace.rs`).

use super::{ContentCursor, Writer};
use crate::error::Result;
use hermes_meter_model::rows::{Increment, MetricFact};

/// The kinds of work a retention step does, each in its own transaction,
/// in [`RetainKind::ALL`]'s order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetainKind {
    /// Journal rows past the journal's retention.
    Journal,
    /// Finished requests' state past the journal's horizon.
    Requests,
    /// Outbox rows (spans and log records) no collector accepted within
    /// the outbox's retention.
    Expired,
    /// Outbox rows (spans and log records) past their cap, oldest first.
    Capped,
    /// Captured content past its retention.
    Content,
    /// Metric log rows folded into their series.
    Fold,
    /// Report rollups built up to the cutoff.
    Rollup,
    /// Free pages given back to the file system.
    Vacuum,
}

/// Free pages a store keeps to grow into (16 MiB of 4 KiB pages).
const VACUUM_KEEP_PAGES: i64 = 4096;

impl RetainKind {
    pub const ALL: [RetainKind; 8] = [
        RetainKind::Journal,
        RetainKind::Requests,
        RetainKind::Expired,
        RetainKind::Capped,
        RetainKind::Content,
        RetainKind::Fold,
        RetainKind::Rollup,
        RetainKind::Vacuum,
    ];

    /// The most a transaction of this kind takes: rows, folded log rows
    /// (about 15 µs each in a release build) or pages (2 MiB). A roll-up
    /// sizes itself by time ([`Writer::roll_up`]).
    pub fn most(self) -> usize {
        match self {
            RetainKind::Fold => 200,
            RetainKind::Vacuum => 512,
            RetainKind::Rollup => 1,
            _ => 500,
        }
    }

    /// What a failure message says was being done.
    pub fn doing(self) -> &'static str {
        match self {
            RetainKind::Journal => "pruning the journal",
            RetainKind::Requests => "pruning finished requests",
            RetainKind::Expired => "expiring the outbox",
            RetainKind::Capped => "enforcing the outbox cap",
            RetainKind::Content => "pruning captured content",
            RetainKind::Fold => "folding the metric log",
            RetainKind::Rollup => "rolling up the report",
            RetainKind::Vacuum => "incremental vacuum",
        }
    }
}

/// Where retention cuts, as of one moment (Unix seconds).
#[derive(Debug, Clone, Copy)]
pub struct RetainCutoffs {
    pub now: f64,
    /// Journal rows of events before this go.
    pub journal_before: f64,
    /// Outbox rows enqueued before this go, sent or not.
    pub outbox_before: f64,
    /// Content of sessions that ended before this (and were sent) goes.
    pub content_ended_before: f64,
    /// Content of sessions whose last event is before this goes.
    pub content_stale_before: f64,
    /// The outbox's cap, in rows.
    pub outbox_max_rows: u64,
    /// Sessions that ended before this are settled for the metric fold.
    pub settled_before: f64,
    /// Report rollups are built up to the quarter hour holding this.
    pub rollup_until: f64,
}

/// What one kind's transaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetainDone {
    /// Rows (or buckets, or pages) it handled.
    pub handled: usize,
    /// Whether a backlog of this kind remains.
    pub more: bool,
}

impl Writer {
    /// One transaction of `kind`, of at most `size` rows, cutting where
    /// `cut` says. `content` is where content retention goes on from;
    /// `measure` turns a metric fact into increments (the fold's).
    pub fn retain_step(
        &mut self,
        kind: RetainKind,
        size: usize,
        cut: &RetainCutoffs,
        content: &mut ContentCursor,
        measure: &mut dyn FnMut(&MetricFact, &mut Vec<Increment>),
    ) -> Result<RetainDone> {
        // A batch of `size` that came back full may have left more.
        let counted = |handled: usize| RetainDone {
            handled,
            more: handled >= size,
        };
        let both = |(handled, more): (usize, bool)| RetainDone { handled, more };
        Ok(match kind {
            RetainKind::Journal => counted(self.prune_journal(cut.journal_before, size)?),
            RetainKind::Requests => both(self.prune_finished_requests(size)?),
            RetainKind::Expired => {
                let spans = self.expire_outbox(cut.outbox_before, size)?;
                let logs = self.expire_log_outbox(cut.outbox_before, cut.content_ended_before, size)?;
                counted(spans.max(logs))
            }
            RetainKind::Capped => {
                let spans = self.db.outbox_enforce_cap(cut.outbox_max_rows, size)? as usize;
                let logs = self
                    .db
                    .log_outbox_enforce_cap(super::DEFAULT_LOG_OUTBOX_MAX_ROWS, size)?;
                counted(spans.max(logs))
            }
            RetainKind::Content => {
                let (handled, more) =
                    self.prune_content_batch(cut.content_ended_before, cut.content_stale_before, content, size)?;
                // The cursor starts over once it passed every row: more
                // only while this pass deletes.
                both((handled, more && handled > 0))
            }
            RetainKind::Fold => {
                let folded = self.db.fold_metrics(cut.now, cut.settled_before, size, measure)?;
                both((folded.rows, folded.more))
            }
            RetainKind::Rollup => {
                let step = self.roll_up(cut.rollup_until)?;
                both((step.buckets, step.more))
            }
            RetainKind::Vacuum => counted(self.vacuum_step(VACUUM_KEEP_PAGES, size as i64)? as usize),
        })
    }
}
