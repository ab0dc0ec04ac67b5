//! The writer's retention step (see `store/retention.rs`): what it prunes
//! and folds, a bounded batch of each kind a step, off the hook path.

use std::time::Instant;

use super::*;
use crate::bridge::pace::BatchSize;

/// Rows each retention step deletes (or folds) at most, each kind in its
/// own transaction, its batch sized to hold the write lock for about
/// [`crate::bridge::pace::TARGET`] (see [`BatchSize`]): gating hooks and exit
/// flushes never wait long on it.
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

/// The kinds of work a retention step does, each in its own transaction,
/// in this order (a step that yields to waiting hooks goes on from the
/// kind it stopped before).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Journal,
    Requests,
    Expired,
    Capped,
    Content,
    Fold,
    Rollup,
    Vacuum,
}

const KINDS: [Kind; 8] = [
    Kind::Journal,
    Kind::Requests,
    Kind::Expired,
    Kind::Capped,
    Kind::Content,
    Kind::Fold,
    Kind::Rollup,
    Kind::Vacuum,
];

/// Where retention goes on from, and each kind's batch size.
pub(super) struct RetainPace {
    /// The index in [`KINDS`] of the next kind to run.
    next: usize,
    sizes: [BatchSize; 8],
}

impl Default for RetainPace {
    fn default() -> Self {
        RetainPace {
            next: 0,
            sizes: KINDS.map(|kind| BatchSize::new(kind.most())),
        }
    }
}

impl Kind {
    /// The most a batch of this kind takes (the roll-up sizes itself by
    /// time: `Store::roll_up`).
    fn most(self) -> usize {
        match self {
            Kind::Fold => FOLD_STEP,
            Kind::Vacuum => VACUUM_STEP_PAGES as usize,
            Kind::Rollup => 1,
            _ => RETAIN_BATCH,
        }
    }
}

/// What one kind's transaction did.
struct Done {
    /// Rows (or buckets, or pages) it handled.
    handled: usize,
    /// Whether a backlog of this kind remains.
    more: bool,
}

impl Writer {
    /// One step of retention (see `store/retention.rs`): a batch of each
    /// kind, in its own transaction: journal rows, finished requests,
    /// expired outbox rows, outbox rows over the cap and content rows
    /// deleted, metric log rows folded (the log is consumed by folding,
    /// which no other process may be doing: trace and metric export can
    /// both be off), report rollups built and free pages given back. When
    /// hooks are queued between two kinds it stops there, so they wait for
    /// one batch at most, and the next step goes on from that kind.
    /// Returns whether it changed anything and whether a backlog remains.
    pub(super) fn retain(&mut self) -> (bool, bool) {
        if self.retry_at.is_some() || self.store.is_none() {
            return (false, false);
        }
        let (mut worked, mut more) = (false, false);
        for i in 0..KINDS.len() {
            let at = (self.retain_pace.next + i) % KINDS.len();
            if i > 0 && self.shared.has_jobs() {
                self.retain_pace.next = at;
                return (worked, true);
            }
            let kind = KINDS[at];
            let size = self.retain_pace.sizes[at].get();
            let began = Instant::now();
            let done = self.retain_kind(kind, size);
            self.retain_pace.sizes[at].took(began.elapsed(), if done.more { size } else { done.handled });
            worked |= done.handled > 0;
            more |= done.more;
        }
        (worked, more)
    }

    /// One transaction of `kind`, of at most `size` rows.
    fn retain_kind(&mut self, kind: Kind, size: usize) -> Done {
        const DAY: f64 = 86_400.0;
        let Some(store) = &mut self.store else {
            return Done {
                handled: 0,
                more: false,
            };
        };
        let now = unix_now();
        let r = &self.config.retention;
        // A batch of `size` that came back full may have left more.
        let counted = |n: usize| Done {
            handled: n,
            more: n >= size,
        };
        let result = match kind {
            Kind::Journal => store.prune_journal(now - r.journal_days.value * DAY, size).map(counted),
            Kind::Requests => store
                .prune_finished_requests(size)
                .map(|(handled, more)| Done { handled, more }),
            Kind::Expired => store.expire_outbox(now - r.outbox_days.value * DAY, size).map(counted),
            Kind::Capped => store
                .outbox_enforce_cap(self.config.outbox_max_rows, size)
                .map(|n| counted(n as usize)),
            Kind::Content => store
                .prune_content_batch(
                    now - r.content_hours.value * 3600.0,
                    now - r.outbox_days.value * DAY,
                    &mut self.content_cursor,
                    size,
                )
                // The cursor starts over once it passed every row: more
                // only while this pass deletes.
                .map(|(handled, more)| Done {
                    handled,
                    more: more && handled > 0,
                }),
            Kind::Fold => {
                let grace = self.config.session_grace_seconds;
                store
                    .fold_metrics(now, now - grace, size, &mut crate::metrics::measure)
                    .map(|f| Done {
                        handled: f.rows,
                        more: f.more,
                    })
            }
            // Report rollups, up to five minutes ago: later quarter hours
            // still take facts (a late one moves the mark back; see
            // store/rollup.rs).
            Kind::Rollup => store.roll_up(now - ROLLUP_LAG_SECONDS).map(|step| Done {
                handled: step.buckets,
                more: step.more,
            }),
            // What was freed goes back to the file system, a few MiB a step.
            Kind::Vacuum => store
                .vacuum_step(VACUUM_KEEP_PAGES, size as i64)
                .map(|n| counted(n as usize)),
        };
        result.unwrap_or_else(|e| {
            self.shared
                .message("Writer.RetentionFailed", format!("{} failed: {e}", kind.doing()));
            Done {
                handled: 0,
                more: false,
            }
        })
    }
}

impl Kind {
    /// What a failure message says was being done.
    fn doing(self) -> &'static str {
        match self {
            Kind::Journal => "pruning the journal",
            Kind::Requests => "pruning finished requests",
            Kind::Expired => "expiring the outbox",
            Kind::Capped => "enforcing the outbox cap",
            Kind::Content => "pruning captured content",
            Kind::Fold => "folding the metric log",
            Kind::Rollup => "rolling up the report",
            Kind::Vacuum => "incremental vacuum",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::gate::NoGate;

    /// Queued hooks stop a retention step after the kind it is in, and the
    /// next step goes on from the kind after it: the hooks wait for one
    /// batch, and every kind still gets its turn however busy the process.
    #[test]
    fn a_step_stops_for_queued_hooks_and_the_next_goes_on_from_there() {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = BridgeConfig::new(dir.path().join("otel"));
        let prices = PriceTable::default();
        let shared = Arc::new(Shared::new());
        let opened = open_store(&config, &prices);
        let mut writer = Writer::new(&config, Box::new(NoGate), &prices, Arc::clone(&shared), Some(opened));
        let rolled = |w: &Writer| w.store.as_ref().expect("store").rolled_until().expect("mark");

        lock(&shared.queue).jobs.push(Job::Flush(Ticket::new()));
        assert_eq!(writer.retain(), (false, true));
        assert_eq!(KINDS[writer.retain_pace.next], Kind::Requests);
        assert_eq!(writer.retain(), (false, true));
        assert_eq!(KINDS[writer.retain_pace.next], Kind::Expired);
        // The roll-up (an empty store's moves its mark to now) has not run.
        assert_eq!(rolled(&writer), 0);

        lock(&shared.queue).jobs.clear();
        let (_, more) = writer.retain();
        assert!(!more);
        assert!(rolled(&writer) > 0);
        // A whole pass ends where it began.
        assert_eq!(KINDS[writer.retain_pace.next], Kind::Expired);
    }
}
