//! The writer's retention step (see `crates/hermes-meter-store/src/retention.rs` and
//! `crates/hermes-meter-store/src/retain_step.rs`): a bounded batch of each kind a step, each in
//! its own transaction, paced and ordered here, off the hook path.

use std::time::Instant;

use super::*;
use crate::bridge::pace::BatchSize;
use hermes_meter_store::{RetainCutoffs, RetainKind};

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

/// Where retention goes on from, and each kind's batch size: at most
/// [`RetainKind::most`], sized to hold the write lock for about
/// [`crate::bridge::pace::TARGET`] (see [`BatchSize`]), so gating hooks and
/// exit flushes never wait long on it.
pub(super) struct RetainPace {
    /// The index in [`RetainKind::ALL`] of the next kind to run.
    next: usize,
    sizes: [BatchSize; 8],
}

impl Default for RetainPace {
    fn default() -> Self {
        RetainPace {
            next: 0,
            sizes: RetainKind::ALL.map(|kind| BatchSize::new(kind.most())),
        }
    }
}

/// Where retention cuts at `now` under `config` (what the writer runs;
/// the size benchmark runs the same).
pub fn retain_cutoffs(config: &BridgeConfig, now: f64) -> RetainCutoffs {
    const DAY: f64 = 86_400.0;
    let r = &config.retention;
    RetainCutoffs {
        now,
        journal_before: now - r.journal_days.value * DAY,
        outbox_before: now - r.outbox_days.value * DAY,
        content_ended_before: now - r.content_hours.value * 3600.0,
        content_stale_before: now - r.outbox_days.value * DAY,
        outbox_max_rows: config.outbox_max_rows,
        settled_before: now - config.session_grace_seconds,
        // Later quarter hours still take facts (a late one moves the
        // mark back; see crates/hermes-meter-store/src/rollup.rs).
        rollup_until: now - ROLLUP_LAG_SECONDS,
    }
}

impl WriterThread {
    /// One step of retention (see `crates/hermes-meter-store/src/retention.rs`): a batch of each
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
        let cut = retain_cutoffs(&self.config, unix_now());
        let kinds = RetainKind::ALL.len();
        let (mut worked, mut more) = (false, false);
        for i in 0..kinds {
            let at = (self.retain_pace.next + i) % kinds;
            if i > 0 && self.shared.has_jobs() {
                self.retain_pace.next = at;
                return (worked, true);
            }
            let Some(store) = &mut self.store else {
                break;
            };
            let kind = RetainKind::ALL[at];
            let size = self.retain_pace.sizes[at].get();
            let began = Instant::now();
            let done = store
                .retain_step(
                    kind,
                    size,
                    &cut,
                    &mut self.content_cursor,
                    &mut hermes_meter_model::metrics::measure,
                )
                .unwrap_or_else(|e| {
                    self.shared
                        .message("Writer.RetentionFailed", format!("{} failed: {e}", kind.doing()));
                    Default::default()
                });
            self.retain_pace.sizes[at].took(began.elapsed(), if done.more { size } else { done.handled });
            worked |= done.handled > 0;
            more |= done.more;
        }
        (worked, more)
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
        let config = BridgeConfig::new(dir.path().join("meter"));
        let prices = PriceTable::default();
        let shared = Arc::new(Shared::new());
        let opened = open_store(&config, &prices);
        let mut writer = WriterThread::new(&config, Box::new(NoGate), &prices, Arc::clone(&shared), Some(opened));
        let rolled = |w: &WriterThread| w.store.as_ref().expect("store").rolled_until().expect("mark");

        lock(&shared.queue).jobs.push(Job::Flush(Ticket::new()));
        assert_eq!(writer.retain(), (false, true));
        assert_eq!(RetainKind::ALL[writer.retain_pace.next], RetainKind::Requests);
        assert_eq!(writer.retain(), (false, true));
        assert_eq!(RetainKind::ALL[writer.retain_pace.next], RetainKind::Expired);
        // The roll-up (an empty store's moves its mark to now) has not run.
        assert_eq!(rolled(&writer), 0);

        lock(&shared.queue).jobs.clear();
        let (_, more) = writer.retain();
        assert!(!more);
        assert!(rolled(&writer) > 0);
        // A whole pass ends where it began.
        assert_eq!(RetainKind::ALL[writer.retain_pace.next], RetainKind::Expired);
    }
}
