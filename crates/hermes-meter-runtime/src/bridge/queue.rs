//! The queue between hook threads and the writer thread, and what the
//! writer leaves for the binding.
//!
//! Owns: the jobs (a hook call decoded or as its spool line, a host price, a
//! flush), the ticket a waiting hook waits on, the counters, the messages
//! and the spend queued toward budgets, with their bounds. Must not touch:
//! the store (the writer applies the jobs), Python.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{Message, Outcome, QueuedSpend};
use crate::lock;
use crate::spool::Spool;
use hermes_meter_model::hook::{DecodeOptions, HookEvent, Problem};
use hermes_meter_model::pricing::ModelPrice;
use hermes_meter_store::health::Tracker;
use hermes_meter_store::EventContext;

/// Queued jobs that wake the writer although no one waits for them: keeps
/// batches (and the queue's memory) bounded under a burst of hooks.
pub(super) const WAKE_AT_QUEUED: usize = 256;

/// Most jobs the queue holds. Only a writer stuck far longer than any
/// busy timeout gets here; dropping (and counting) beats eating memory.
pub(super) const MAX_QUEUED: usize = 100_000;

/// The message of an exit that leaves events in the spool for the next
/// process.
pub const EXIT_LEFT_IN_SPOOL: &str = "Exit.LeftInSpool";

/// The message of an exit that loses events (in neither store nor spool).
pub const EXIT_EVENTS_LOST: &str = "Exit.EventsLost";

/// Most messages kept for the binding to log; later ones are counted only.
pub(super) const MAX_MESSAGES: usize = 64;

pub(super) struct Shared {
    pub(super) queue: Mutex<Queue>,
    /// Wakes the writer.
    pub(super) wake: Condvar,
    /// Cleared when the writer thread ended.
    pub(super) alive: AtomicBool,
    pub(super) messages: Mutex<Vec<Message>>,
    pub(super) has_messages: AtomicBool,
    pub(super) counters: Counters,
    /// Set once a spool write failed, so the failure is reported once
    /// (cleared when the store recovers from a fault).
    pub(super) spool_failed: AtomicBool,
    /// This process's spool; unset while it cannot be created (hooks then
    /// wait for commits; the writer creates it once it can).
    pub(super) spool: OnceLock<Arc<Spool>>,
    /// Set by the writer while the store is closed by a fault, so hooks do
    /// not wait for commits that cannot happen.
    pub(super) store_down: AtomicBool,
    /// The current store fault, for [`Bridge::store_problem`].
    pub(super) problem: Mutex<Option<String>>,
    /// The current fault in short (`disk_full: <error>`), why events could
    /// not be saved.
    pub(super) fault_reason: Mutex<Option<String>>,
    /// Set once the exit flush said what the process leaves unsaved.
    pub(super) exit_reported: AtomicBool,
    /// What the hooks submitted toward budgets ([`QueuedSpend`]); the
    /// writer takes applied events' unknown bounds off.
    pub(super) spend: Mutex<QueuedSpend>,
    /// Events held in memory only: in neither the store nor the spool (the
    /// spool write failed). Each leaves this count once it is committed,
    /// fails for good, reaches the spool, or is lost (and counted in
    /// [`Shared::health`]). What it says at exit is what the process loses.
    pub(super) unsaved: AtomicU64,
    /// Events in no spool that the full queue refused on the hook path, not
    /// yet noted in [`Shared::health`] (the writer and the exit flush do).
    pub(super) refused_unsaved: AtomicU64,
    /// Spooled events the writer processed (committed or failed for good):
    /// the spool's appends minus this are what it leaves the next process.
    pub(super) handled: AtomicU64,
    /// This process's part of `<store>/health.json`: kept by the writer,
    /// and by the exit flush for the events the process ends without.
    pub(super) health: Mutex<Tracker>,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) submitted: AtomicU64,
    pub(super) committed: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) timed_out: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) batches: AtomicU64,
    pub(super) largest_batch: AtomicU64,
    pub(super) checkpoints: AtomicU64,
    pub(super) sweeps: AtomicU64,
    pub(super) messages_dropped: AtomicU64,
    pub(super) spooled: AtomicU64,
    pub(super) recovered: AtomicU64,
    pub(super) spool_failures: AtomicU64,
    /// Calls Hermes skipped, recorded anyway ([`Bridge::note_hermes_skip`]).
    pub(super) hermes_skipped_recorded: AtomicU64,
    /// Calls Hermes skipped that were lost.
    pub(super) hermes_skipped_lost: AtomicU64,
    /// Of those, the calls skipped after an earlier one timed out.
    pub(super) hermes_skipped_after_timeout: AtomicU64,
    /// Calls of our hooks Hermes stopped waiting for (its hook timeout).
    pub(super) hermes_timeouts: AtomicU64,
}

#[derive(Default)]
pub(super) struct Queue {
    pub(super) jobs: Vec<Job>,
    pub(super) stop: bool,
    /// The writer was woken since it last took the jobs.
    pub(super) woken: bool,
}

/// One hook call for the writer: decoded on the hook thread, or (see
/// [`Bridge::submit_line`]) its spool record, decoded on the writer thread.
#[allow(clippy::large_enum_variant)] // as for `Job`
pub(super) enum Payload {
    Decoded(HookEvent),
    Line {
        hook: &'static str,
        line: Vec<u8>,
        at: f64,
        opts: DecodeOptions,
    },
}

/// One hook call as the hook path hands it to [`Bridge::queue_and_wait`]:
/// a [`Job::Event`] before it has a ticket.
pub(super) struct Call {
    pub(super) payload: Payload,
    pub(super) ctx: EventContext,
    pub(super) spooled: bool,
    pub(super) record: Option<Vec<u8>>,
    pub(super) bound: Option<Option<f64>>,
}

// Nearly every job is an event; boxing it would cost an allocation per
// hook to save bytes on the rare price and flush jobs.
#[allow(clippy::large_enum_variant)]
pub(super) enum Job {
    Event {
        payload: Payload,
        ctx: EventContext,
        ticket: Option<Arc<Ticket>>,
        /// The event is in this process's spool.
        spooled: bool,
        /// Its spool line when it is not in the spool (and one was made),
        /// for the writer to append once the spool can be written again.
        record: Option<Vec<u8>>,
        /// Its [`spend_bound`], when the gate keeps [`QueuedSpend`]:
        /// `Some(None)` for an unknown bound.
        bound: Option<Option<f64>>,
    },
    HostPrice(String, ModelPrice),
    Flush(Arc<Ticket>),
    /// A flush at process exit: also lets go of the session spans this
    /// process held for their grace period, so they are sent now.
    Exit(Arc<Ticket>),
}

/// Where the writer leaves one result and wakes whoever waits for it.
pub(super) struct Ticket {
    pub(super) result: Mutex<Option<Outcome>>,
    pub(super) done: Condvar,
    /// Set when the waiter gave up: its verdict would reach no one.
    pub(super) abandoned: AtomicBool,
}

impl Ticket {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Ticket {
            result: Mutex::new(None),
            done: Condvar::new(),
            abandoned: AtomicBool::new(false),
        })
    }

    /// Whether the waiter gave up (its hook returned without a verdict).
    pub(super) fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }

    pub(super) fn complete(&self, outcome: Outcome) {
        *lock(&self.result) = Some(outcome);
        self.done.notify_one();
    }

    /// The outcome, or `None` if `deadline` passed first.
    pub(super) fn wait_until(&self, deadline: Instant) -> Option<Outcome> {
        let mut guard = lock(&self.result);
        loop {
            if let Some(outcome) = guard.take() {
                return Some(outcome);
            }
            let now = Instant::now();
            if now >= deadline {
                self.abandoned.store(true, Ordering::Release);
                return None;
            }
            guard = match self.done.wait_timeout(guard, deadline - now) {
                Ok((g, _)) => g,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

impl Shared {
    pub(super) fn message(&self, event: &'static str, text: String) {
        self.push_message(event, text, false);
    }

    /// Queues a message; past [`MAX_MESSAGES`] only an `urgent` one (what
    /// a process ends without) is kept.
    fn push_message(&self, event: &'static str, text: String, urgent: bool) {
        let mut messages = lock(&self.messages);
        if messages.len() >= MAX_MESSAGES && !urgent {
            self.counters.messages_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        messages.push(Message { event, text });
        self.has_messages.store(true, Ordering::Release);
    }

    /// Counts and logs a call the decoder could not use.
    pub(super) fn not_recorded(&self, hook: &str, problems: &[Problem]) {
        self.counters.failed.fetch_add(1, Ordering::Relaxed);
        let what: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        self.message(
            "Decode.Unusable",
            format!("{hook} call not recorded: {}", what.join("; ")),
        );
    }

    /// Adds one queued event's [`spend_bound`] to [`QueuedSpend`] and
    /// returns the new total.
    /// A `tool_call` (a `pre_tool_call`) also counts in its tool calls, a
    /// `request` (a `pre_api_request`) in its requests.
    pub(super) fn add_spend(&self, bound: Option<f64>, tool_call: bool, request: bool) -> QueuedSpend {
        let mut spend = lock(&self.spend);
        match bound {
            Some(usd) => spend.usd += usd,
            None => spend.unknown += 1,
        }
        spend.tool_calls += u64::from(tool_call);
        spend.requests += u64::from(request);
        *spend
    }

    /// Takes a bound [`Shared::add_spend`] added back off.
    pub(super) fn take_spend(&self, bound: Option<f64>) {
        let mut spend = lock(&self.spend);
        match bound {
            Some(usd) => spend.usd -= usd,
            None => spend.unknown = spend.unknown.saturating_sub(1),
        }
    }

    /// Nothing queued yet, the writer alive, no spool yet.
    pub(super) fn new() -> Self {
        Shared {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            alive: AtomicBool::new(true),
            messages: Mutex::new(Vec::new()),
            has_messages: AtomicBool::new(false),
            counters: Counters::default(),
            spool_failed: AtomicBool::new(false),
            spool: OnceLock::new(),
            store_down: AtomicBool::new(false),
            problem: Mutex::new(None),
            fault_reason: Mutex::new(None),
            exit_reported: AtomicBool::new(false),
            spend: Mutex::new(QueuedSpend::default()),
            unsaved: AtomicU64::new(0),
            refused_unsaved: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            health: Mutex::new(Tracker::new(hermes_meter_store::unix_now())),
        }
    }

    /// Takes one event off [`Shared::unsaved`].
    pub(super) fn saved(&self) {
        // Never below zero: a panicking batch may have lost track.
        let _ = self
            .unsaved
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Says, once, at the end of an exit flush that did not commit
    /// everything, what the process leaves: events in the spool for the
    /// next process (`Exit.LeftInSpool`) and events in neither the store nor
    /// the spool, lost (`Exit.EventsLost`), which also go to the health
    /// record if it can be written.
    pub(super) fn report_unsaved(&self, store_dir: &Path) {
        if self.exit_reported.swap(true, Ordering::AcqRel) {
            return;
        }
        let reason = lock(&self.fault_reason)
            .clone()
            .unwrap_or_else(|| "the store did not commit them within the exit flush".into());
        if let Some(spool) = self.spool.get() {
            let left = spool.appended().saturating_sub(self.handled.load(Ordering::Acquire));
            if left > 0 {
                self.push_message(
                    EXIT_LEFT_IN_SPOOL,
                    format!(
                        "{left} hook events stay in {} for the next process to record ({reason})",
                        spool.path().display()
                    ),
                    true,
                );
            }
        }
        let now = hermes_meter_store::unix_now();
        let mut health = lock(&self.health);
        self.note_refused(&mut health);
        health.lost(self.unsaved.load(Ordering::Acquire), &reason, now);
        let lost = health.lost_count();
        if lost > 0 {
            self.push_message(
                EXIT_EVENTS_LOST,
                format!("{lost} hook events could not be saved, in the store or the spool, and are lost ({reason})"),
                true,
            );
            // With the disk still full this fails too, and the line above
            // is the only trace.
            let _ = health.write(store_dir, now);
        }
    }

    /// Notes in [`Shared::health`] the unspooled events the hook path had
    /// to refuse, with the current store fault as the reason.
    pub(super) fn note_refused(&self, health: &mut Tracker) {
        let refused = self.refused_unsaved.swap(0, Ordering::AcqRel);
        if refused > 0 {
            let reason = lock(&self.problem)
                .clone()
                .unwrap_or_else(|| "the writer's queue was full".into());
            health.lost(refused, &reason, hermes_meter_store::unix_now());
        }
    }

    /// Whether jobs wait for the writer: it then puts background work off.
    pub(super) fn has_jobs(&self) -> bool {
        !lock(&self.queue).jobs.is_empty()
    }

    pub(super) fn take_jobs(&self, wait: Duration) -> (Vec<Job>, bool) {
        let mut queue = lock(&self.queue);
        if queue.jobs.is_empty() && !queue.stop {
            queue = match self.wake.wait_timeout(queue, wait) {
                Ok((q, _)) => q,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        queue.woken = false;
        (std::mem::take(&mut queue.jobs), queue.stop)
    }
}
