//! A fleet host's first sync: what the gate does before its store has ever
//! synced with the fleet database, when it knows neither the fleet's budget
//! file nor its spend.
//!
//! Owns: [`Unsynced`] (fail closed or open then), [`FIRST_SYNC_WAIT`], and
//! the state hook threads wait on ([`FirstSync`]). Must not touch: the
//! store (the gate looks at it on the writer thread and says here when the
//! store has synced), the network, Python.
//!
//! A store that synced once holds the fleet's last figures (`fleet_view`,
//! the budget file the sync wrote) and is enforced on them, so only a store
//! that never synced waits: the first gated call of the process waits for
//! the sync, at most [`FIRST_SYNC_WAIT`], on its own hook thread (never the
//! writer's, which other hooks queue behind). Every gated call of the
//! process until that deadline waits with it; none after it. Past it, a
//! store still unsynced blocks tool and LLM calls in enforce mode
//! ([`Unsynced::Closed`], the default) or lets them through under the
//! local budget file ([`Unsynced::Open`]).

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The longest the first gated call of a process waits for a never-synced
/// store's first fleet sync. A sync on a reachable database (connect,
/// schema check, one push and pull) takes tens of milliseconds; the fleet
/// thread starts with the first hook. Two seconds covers a slow network
/// and a cold PostgreSQL, and is as long as a one-shot `hermes -z` gives
/// its exit flush: longer would stall a user's first call on a dead
/// address for what a timeout already tells.
pub const FIRST_SYNC_WAIT: Duration = Duration::from_secs(2);

/// The variable that sets [`Unsynced`] (resolved in `config/fleet.rs`).
pub const UNSYNCED_ENV: &str = "HERMES_METER_FLEET_UNSYNCED";

/// What fleet budgets do on a host whose store has not synced yet, once
/// [`FIRST_SYNC_WAIT`] passed (`HERMES_METER_FLEET_UNSYNCED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unsynced {
    /// Block tool and LLM calls (enforce mode) until the first sync: the
    /// fleet may be over its hard line, and this host cannot know.
    #[default]
    Closed,
    /// Let them through, enforcing only the local budget file.
    Open,
}

impl Unsynced {
    /// `closed` or `open` (any case, spaces trimmed).
    pub fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "closed" => Some(Unsynced::Closed),
            "open" => Some(Unsynced::Open),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Unsynced::Closed => "closed",
            Unsynced::Open => "open",
        }
    }
}

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

    #[test]
    fn the_policy_reads_closed_and_open_only() {
        for (text, want) in [
            ("closed", Some(Unsynced::Closed)),
            (" Open ", Some(Unsynced::Open)),
            ("fail-open", None),
            ("", None),
        ] {
            assert_eq!(Unsynced::parse(text), want, "{text:?}");
        }
        assert_eq!(Unsynced::default(), Unsynced::Closed, "fail closed unless told");
    }

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
