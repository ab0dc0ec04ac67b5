//! The writer's retention step (see `store/retention.rs`): what it prunes
//! and folds, a bounded batch of each kind a step, off the hook path.

use super::*;

/// Rows each retention step deletes (or folds) at most, each kind in its
/// own transaction: a step holds the write lock for a few milliseconds,
/// so gating hooks and exit flushes never wait long on it.
const RETAIN_BATCH: usize = 500;

/// Metric log rows a retention step folds at most: a fold measures each
/// row and updates its series, about 15 µs a row in a release build.
const FOLD_STEP: usize = 200;

/// Free pages a store keeps to grow into (16 MiB of 4 KiB pages), and
/// the most a retention step gives back to the file system at once.
const VACUUM_KEEP_PAGES: i64 = 4096;
const VACUUM_STEP_PAGES: i64 = 512;

/// How long after a quarter hour ends its report rollup is built: calls
/// still being applied land in it meanwhile.
const ROLLUP_LAG_SECONDS: f64 = 300.0;

/// When the first retention step runs after the writer starts: not
/// before the recovery and first commits a short-lived process (`hermes
/// -z`) is there for, but soon enough that such processes still prune.
pub(super) const RETAIN_FIRST_DELAY: Duration = Duration::from_secs(2);

/// The pause between retention steps while a backlog remains (a store
/// upgraded with a year of journal, a burst): the writer handles its
/// queue between steps, and a backlog of millions of rows still clears
/// within hours.
pub(super) const RETAIN_BACKLOG_PAUSE: Duration = Duration::from_millis(200);

impl Writer {
    /// One step of retention (see `store/retention.rs`): at most
    /// [`RETAIN_BATCH`] journal rows, finished requests, expired outbox rows, outbox rows over
    /// the cap and content rows deleted, and metric log rows folded (the
    /// log is consumed by folding, which no other process may be doing:
    /// trace and metric export can both be off). Returns whether it changed
    /// anything and whether a backlog remains.
    pub(super) fn retain(&mut self) -> (bool, bool) {
        if self.retry_at.is_some() {
            return (false, false);
        }
        let Some(store) = &mut self.store else {
            return (false, false);
        };
        const DAY: f64 = 86_400.0;
        let now = unix_now();
        let r = &self.config.retention;
        let shared = &self.shared;
        // How many rows a step handled (0 after a failure, which is said).
        let handled = |what: &str, result: Result<usize>| match result {
            Ok(n) => n,
            Err(e) => {
                shared.message("Writer.RetentionFailed", format!("{what} failed: {e}"));
                0
            }
        };
        let journal = handled(
            "pruning the journal",
            store.prune_journal(now - r.journal_days.value * DAY, RETAIN_BATCH),
        );
        let (requests, requests_more) = match store.prune_finished_requests(RETAIN_BATCH) {
            Ok(step) => step,
            Err(e) => {
                shared.message(
                    "Writer.RetentionFailed",
                    format!("pruning finished requests failed: {e}"),
                );
                (0, false)
            }
        };
        let expired = handled(
            "expiring the outbox",
            store.expire_outbox(now - r.outbox_days.value * DAY, RETAIN_BATCH),
        );
        let capped = handled(
            "enforcing the outbox cap",
            store
                .outbox_enforce_cap(self.config.outbox_max_rows, RETAIN_BATCH)
                .map(|n| n as usize),
        );
        let (content, content_more) = match store.prune_content_batch(
            now - r.content_hours.value * 3600.0,
            now - r.outbox_days.value * DAY,
            &mut self.content_cursor,
            RETAIN_BATCH,
        ) {
            Ok(step) => step,
            Err(e) => {
                shared.message(
                    "Writer.RetentionFailed",
                    format!("pruning captured content failed: {e}"),
                );
                (0, false)
            }
        };
        let grace = self.config.session_grace_seconds;
        let (folded, fold_more) = match store.fold_metrics(now, now - grace, FOLD_STEP, &mut crate::metrics::measure) {
            Ok(f) => (f.rows, f.more),
            Err(e) => {
                shared.message("Writer.RetentionFailed", format!("folding the metric log failed: {e}"));
                (0, false)
            }
        };
        // Report rollups, up to five minutes ago: later quarter hours still
        // take facts (a late one moves the mark back; see store/rollup.rs).
        let rolled = match store.roll_up(now - ROLLUP_LAG_SECONDS) {
            Ok(step) => step,
            Err(e) => {
                shared.message("Writer.RetentionFailed", format!("rolling up the report failed: {e}"));
                crate::store::RollupStep::default()
            }
        };
        // What was freed goes back to the file system, a few MiB a step.
        let vacuumed = match store.vacuum_step(VACUUM_KEEP_PAGES, VACUUM_STEP_PAGES) {
            Ok(n) => n,
            Err(e) => {
                shared.message("Writer.RetentionFailed", format!("incremental vacuum failed: {e}"));
                0
            }
        };
        let worked = journal + requests + expired + capped + content + folded + rolled.buckets > 0 || vacuumed > 0;
        let more = journal == RETAIN_BATCH
            || requests_more
            || expired == RETAIN_BATCH
            || capped == RETAIN_BATCH
            || (content_more && content > 0)
            || fold_more
            || rolled.more
            || vacuumed == VACUUM_STEP_PAGES;
        (worked, more)
    }
}
