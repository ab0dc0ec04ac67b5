//! What a bridge says about itself: the messages its threads queued for
//! Hermes's log, its counters, and what the binding notes of Hermes (a
//! skipped or timed-out hook call, what Hermes has of its internals).

use super::*;

impl Bridge {
    /// Whether messages are waiting for [`Bridge::take_messages`]; one
    /// atomic load, cheap enough for every hook.
    pub fn has_messages(&self) -> bool {
        match &self.state {
            State::Running(run) => run.shared.has_messages.load(Ordering::Acquire),
            State::Disabled(_) => false,
        }
    }

    /// Takes the messages the writer left for the binding to log.
    pub fn take_messages(&self) -> Vec<Message> {
        match &self.state {
            State::Running(run) => {
                let mut messages = lock(&run.shared.messages);
                run.shared.has_messages.store(false, Ordering::Release);
                std::mem::take(&mut *messages)
            }
            State::Disabled(_) => Vec::new(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        let State::Running(run) = &self.state else {
            return Stats::default();
        };
        let c = &run.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            submitted: get(&c.submitted),
            committed: get(&c.committed),
            failed: get(&c.failed),
            timed_out: get(&c.timed_out),
            dropped: get(&c.dropped),
            batches: get(&c.batches),
            largest_batch: get(&c.largest_batch),
            checkpoints: get(&c.checkpoints),
            sweeps: get(&c.sweeps),
            messages_dropped: get(&c.messages_dropped),
            spooled: get(&c.spooled),
            recovered: get(&c.recovered),
            spool_failures: get(&c.spool_failures),
            unsaved: run.shared.unsaved.load(Ordering::Acquire),
        }
    }

    /// Counts one call of our hooks Hermes's dispatcher skipped: `recorded`
    /// when the plugin recorded it anyway. The writer adds the counts to
    /// the store's health record (`hermes-meter status`).
    pub fn note_hermes_skip(&self, recorded: bool, after_timeout: bool) {
        if let State::Running(run) = &self.state {
            let c = &run.shared.counters;
            let counter = if recorded {
                &c.hermes_skipped_recorded
            } else {
                &c.hermes_skipped_lost
            };
            counter.fetch_add(1, Ordering::Relaxed);
            if after_timeout {
                c.hermes_skipped_after_timeout.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts one call of our hooks Hermes stopped waiting for (its hook
    /// timeout); the call itself goes on and is recorded.
    pub fn note_hermes_timeout(&self) {
        if let State::Running(run) = &self.state {
            run.shared.counters.hermes_timeouts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Notes what this process found of its Hermes (the package's report,
    /// JSON): the writer merges it into the health record within a
    /// checkpoint interval, and at exit.
    pub fn note_hermes(&self, report: serde_json::Value) -> Result<(), String> {
        let State::Running(run) = &self.state else {
            return Err("the bridge is not running".into());
        };
        lock(&run.shared.health).hermes(report, hermes_meter_store::unix_now())
    }
}
