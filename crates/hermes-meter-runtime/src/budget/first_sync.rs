//! A fleet host's first sync, on the runtime's side: the state hook threads
//! wait on until the writer thread says the store has synced. The policy
//! past the wait ([`super::Unsynced`], [`FIRST_SYNC_WAIT`]) is the model's.
//!
//! Must not touch: the store (the gate looks at it on the writer thread and
//! says here when the store has synced), the network, Python.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

use hermes_meter_model::budget::FIRST_SYNC_WAIT;

/// Whether the gate can decide yet, shared by the writer thread (which
/// says so once the store has synced) and the hook threads (which wait).
#[derive(Debug)]
pub(super) struct FirstSync {
    phase: Mutex<Phase>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Phase {
    /// The store has synced with the fleet (or there is no fleet).
    ready: bool,
    /// Set by the first gated call that had to wait: the end of every wait.
    deadline: Option<Instant>,
}

impl FirstSync {
    /// Ready at once without a fleet; else once [`FirstSync::set_ready`].
    pub(super) fn new(ready: bool) -> Self {
        FirstSync {
            phase: Mutex::new(Phase { ready, deadline: None }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store has synced: releases every waiting hook.
    pub(super) fn set_ready(&self) {
        self.lock().ready = true;
        self.changed.notify_all();
    }

    /// Back to waiting (the gate learnt it is a fleet host's).
    pub(super) fn reset(&self) {
        *self.lock() = Phase::default();
    }

    pub(super) fn is_ready(&self) -> bool {
        self.lock().ready
    }

    /// On a hook thread: waits until ready, at most until
    /// [`FIRST_SYNC_WAIT`] after the first call that waited. Returns
    /// whether it is ready.
    pub(super) fn wait(&self) -> bool {
        let mut phase = self.lock();
        let deadline = *phase.deadline.get_or_insert_with(|| Instant::now() + FIRST_SYNC_WAIT);
        while !phase.ready {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            phase = self
                .changed
                .wait_timeout(phase, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        phase.ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_waiting_hook_is_released_when_the_store_syncs() {
        let first = Arc::new(FirstSync::new(false));
        let waiter = {
            let first = Arc::clone(&first);
            std::thread::spawn(move || (first.wait(), Instant::now()))
        };
        // Polled, not slept: the waiter has set the deadline once it waits.
        let deadline = Instant::now() + Duration::from_secs(10);
        while first.lock().deadline.is_none() {
            assert!(Instant::now() < deadline, "the waiter never waited");
            std::thread::yield_now();
        }
        let released = Instant::now();
        first.set_ready();
        let (ready, at) = waiter.join().expect("waiter");
        assert!(ready);
        assert!(at >= released, "released by the sync, not before");
        assert!(first.wait(), "ready stays ready");
    }

    #[test]
    fn only_calls_before_the_first_deadline_wait() {
        let first = FirstSync::new(false);
        let start = Instant::now();
        assert!(!first.wait(), "never synced");
        assert!(start.elapsed() >= FIRST_SYNC_WAIT, "the first call waited the bound");
        let again = Instant::now();
        assert!(!first.wait());
        assert!(again.elapsed() < FIRST_SYNC_WAIT / 2, "a later call does not wait");
    }
}
