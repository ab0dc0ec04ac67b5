//! The per-process runtime between hook calls and the store.
//!
//! Owns: the one writer thread that holds the [`Writer`], the queue hooks
//! submit to, group commit, the bound on how long a hook waits, periodic
//! WAL checkpoints and the idle-run sweep, and the extension points for the
//! exporter and for gating verdicts. Must not touch: Python (the binding in
//! `python.rs` calls in here with plain values), the network.
//!
//! This file holds the hook side (submitting, waiting); `queue.rs` the
//! queue, tickets, counters and messages between hooks and the writer;
//! `writer.rs` the writer thread; `gate.rs` what a gate is;
//! `background.rs` the exporter slot; `host_price.rs` the prices asked of
//! Hermes. Tests are in `tests.rs`.
//!
//! # How a hook call flows
//!
//! ```text
//! hook thread ──submit(event)──▶ queue ──▶ writer thread
//!      │                                     │ drains everything queued
//!      │                                     │ apply_batch: ONE transaction
//!      ◀────── ticket completed ─────────────┘ (then gating verdicts)
//! ```
//!
//! Hermes calls hooks from many threads at once and many processes share
//! one store. One transaction per event would make every hook pay for a
//! commit and fight the others for SQLite's write lock; instead the writer
//! takes whatever is queued when it wakes and commits it in one transaction
//! (group commit), so the commit cost is shared by everyone who queued
//! meanwhile.
//!
//! Before it is queued, each event is appended to this process's spool
//! ([`crate::spool`]): one `write(2)`, after which the event survives the
//! process whatever it does next (crash, `kill -9`, `os._exit`), and the next
//! process to open the store replays it. So a hook returns as soon as its
//! line is written, without waiting for the commit. Only a gating hook
//! (`pre_llm_call`, `pre_tool_call`, `pre_api_request`) while the gate has
//! something to say ([`Gate::needs`]: a budget is set, an alert waits to be
//! shown), whose verdict needs the committed state, and any hook whose
//! spool write failed, wait for the commit, up to
//! [`BridgeConfig::hook_wait`]: past that they return, the write lands
//! later, and the timeout is counted. The checkpoint, the sweep and spool
//! recovery run on the writer thread between batches, never on a hook's path.
//!
//! # Failure
//!
//! Errors on the writer thread never reach a hook; they are queued as
//! [`Message`]s the binding drains and logs from a Python thread, so no
//! thread of ours ever calls into Python.
//!
//! Writer trouble (see [`hermes_meter_store::health`]) does not stop the bridge. A store
//! that cannot be opened at start, or a commit that fails because the store
//! is locked past the busy timeout, the disk is full, the file system is
//! read-only or the file is corrupt, makes the writer keep the events (in
//! memory, in order, besides the spool), say so in ONE `Store.Fault`
//! message, and try the store again with a backoff from
//! [`BridgeConfig::store_retry_min`] to [`BridgeConfig::store_retry_max`].
//! Meanwhile hooks wait for no commit (except a gating hook on a merely
//! locked store, up to its bound). Once the store works, the kept events
//! land first and a `Store.Recovered` message says so. The writer records
//! what happened in `<store>/health.json` for `hermes-meter status`. A
//! corrupt store file is never touched: it is reopened only once the user
//! replaced it. [`Bridge::disabled_reason`] is left for what no retry can
//! fix (the writer thread could not start, the pricing file is invalid).
//!
//! Events the spool could not take either are held in memory only
//! ([`Stats::unsaved`]), with their spool lines, which each retry appends
//! to the spool once it can. The exit flush does not wait for the backoff:
//! it tries the store (and the spool) at once and every
//! [`EXIT_RETRY_PAUSE`] within its bound, then says what stays in the spool
//! for the next process and what is lost, counted in `health.json` if
//! anything can still be written ([`Bridge::flush_at_exit`]).

use crate::lock;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config;
use crate::spool::{self, Spool};
use hermes_meter_model::hook::{decode_record, DecodeOptions, Decoded, HookEvent};
use hermes_meter_model::pricing::PriceTable;
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::health::{classify, FaultKind};
use hermes_meter_store::{ContentCursor, EventContext, Writer};

mod background;
mod gate;
mod host_price;
pub mod pace;
mod queue;
mod said;
mod writer;

pub use background::Background;
use background::ExporterSlot;
pub(crate) use background::{join_until, spawn};
use host_price::HostAsk;
use queue::{Call, Job, Payload, Shared, Ticket, MAX_QUEUED, WAKE_AT_QUEUED};
pub use queue::{EXIT_EVENTS_LOST, EXIT_LEFT_IN_SPOOL};
pub use writer::retain_cutoffs;

pub use gate::GateNeeds;
pub use gate::QueuedSpend;
pub use gate::QuickGate;
pub(crate) use gate::{is_gating, NoGate, GATE_REFRESH};
pub use gate::{Gate, Verdict};
use hermes_meter_model::budget::{carries_spend, spend_bound};
use writer::{open_store, WriterThread};

/// How long `flush` waits by default at the end of a one-shot session.
pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// How often an exit flush tries a store in trouble (and the spool) again
/// within its bound: the writer's own backoff (up to
/// [`DEFAULT_STORE_RETRY_MAX`]) would outlast the exit; a try costs a
/// failed open or write, and about 20 of them fit in the 2 s default.
pub(crate) const EXIT_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The bridge's settings and their defaults, resolved in `config/bridge.rs`.
pub use crate::config::bridge::env;
pub use crate::config::{BridgeConfig, DEFAULT_STORE_RETRY_MAX};

/// What became of one submitted event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The event committed (or was already in the store); for gating hooks,
    /// with the verdict.
    Committed(Option<Verdict>),
    /// Submitted without waiting (`hook_wait` is zero).
    Queued,
    /// The wait bound passed; the write lands later.
    TimedOut,
    /// The store refused the event; the reason is in the messages.
    Failed,
    /// The bridge is disabled; nothing was recorded.
    Disabled,
}

impl Outcome {
    /// The verdict to hand Hermes, if any.
    pub fn verdict(&self) -> Option<&Verdict> {
        match self {
            Outcome::Committed(v) => v.as_ref(),
            _ => None,
        }
    }
}

/// Counters since the bridge started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub submitted: u64,
    pub committed: u64,
    pub failed: u64,
    pub timed_out: u64,
    pub dropped: u64,
    pub batches: u64,
    pub largest_batch: u64,
    pub checkpoints: u64,
    pub sweeps: u64,
    pub messages_dropped: u64,
    /// Events written to the spool.
    pub spooled: u64,
    /// Events of dead processes' spools applied to the store.
    pub recovered: u64,
    /// Hook calls whose spool write failed.
    pub spool_failures: u64,
    /// Events held in memory only, in neither the store nor the spool: what
    /// the process would lose if it ended now.
    pub unsaved: u64,
}

/// A line for the binding to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// A `Component.Event` name, e.g. `Writer.BatchFailed`.
    pub event: &'static str,
    pub text: String,
}

/// The per-process runtime. Cheap to share by reference across threads.
pub struct Bridge {
    config: BridgeConfig,
    state: State,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("store_dir", &self.config.store_dir)
            .field("disabled", &self.disabled_reason())
            .finish()
    }
}

enum State {
    Running(Box<Running>),
    Disabled(String),
}

struct Running {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// The user and built-in prices, for [`Bridge::needs_host_price`]
    /// without asking the writer.
    prices: PriceTable,
    /// Models the host was asked about: priced, or when it last had none.
    host_asked: Mutex<HashMap<String, HostAsk>>,
    exporter: Mutex<ExporterSlot>,
    /// The gate's [`Gate::needs`] and [`Gate::quick`].
    needs: Arc<GateNeeds>,
    quick: Option<Arc<dyn QuickGate>>,
}

impl Bridge {
    /// Opens the store, loads prices and starts the writer thread. Never
    /// fails: a store that cannot be opened gives a disabled bridge. A
    /// store at an older schema is opened by the writer thread, which
    /// migrates it (seconds on a year's store) while the first hooks go to
    /// the spool and wait for nothing but their bounds.
    pub fn start(config: BridgeConfig) -> Self {
        Self::start_with_gate(config, Box::new(NoGate))
    }

    /// [`Bridge::start`] with a gate for the gating hooks.
    pub fn start_with_gate(config: BridgeConfig, gate: Box<dyn Gate>) -> Self {
        match Self::open(&config, gate) {
            Ok(running) => Bridge {
                config,
                state: State::Running(Box::new(running)),
            },
            Err(e) => Bridge {
                state: State::Disabled(format!(
                    "hermes-meter is disabled: cannot open its store in {}: {e}",
                    config.store_dir.display()
                )),
                config,
            },
        }
    }

    fn open(config: &BridgeConfig, gate: Box<dyn Gate>) -> Result<Running> {
        let prices = match config::load_prices(&config.store_dir.join(config::PRICING_FILE_NAME)) {
            // An unreadable directory is store trouble, handled below; an
            // invalid pricing file is the user's to fix and disables.
            Err(Error::Io { .. }) => PriceTable::default(),
            other => other?,
        };
        let shared = Arc::new(Shared::new());
        // A store behind this build's schema is opened, and so migrated, by
        // the writer thread: the hooks meanwhile land in the spool.
        let opened = (!hermes_meter_store::migration_due(&config.store_dir)).then(|| open_store(config, &prices));
        match Spool::create(&config.store_dir) {
            Ok(spool) => {
                let _ = shared.spool.set(Arc::new(spool));
            }
            Err(e) if !matches!(opened, Some(Err(_))) => shared.message(
                "Spool.Unavailable",
                format!("cannot create the spool ({e}); hooks wait for their commits instead"),
            ),
            // The store fault below says it all.
            Err(_) => {}
        }
        let needs = gate.needs();
        let quick = gate.quick();
        let writer = WriterThread::new(config, gate, &prices, Arc::clone(&shared), opened);
        let handle = std::thread::Builder::new()
            .name("hermes-meter-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| Error::Other(format!("cannot start the writer thread: {e}")))?;
        Ok(Running {
            shared,
            writer: Mutex::new(Some(handle)),
            prices,
            host_asked: Mutex::new(HashMap::new()),
            exporter: Mutex::new(ExporterSlot::NotStarted(None)),
            needs,
            quick,
        })
    }

    /// The configuration the bridge runs with.
    pub fn config(&self) -> &BridgeConfig {
        &self.config
    }

    /// Why the bridge is disabled, if it is.
    pub fn disabled_reason(&self) -> Option<&str> {
        match &self.state {
            State::Disabled(reason) => Some(reason),
            State::Running(_) => None,
        }
    }

    /// The store fault the bridge is riding out now, if any (it retries by
    /// itself; see the module docs). One lock, no I/O.
    pub fn store_problem(&self) -> Option<String> {
        match &self.state {
            State::Running(run) => lock(&run.shared.problem).clone(),
            State::Disabled(_) => None,
        }
    }

    /// Queues `event` and waits, up to `hook_wait`, for its commit (and its
    /// verdict, for a gating hook). Without a spool record: see
    /// [`Bridge::submit_recorded`] for the hook path.
    pub fn submit(&self, event: HookEvent, ctx: EventContext) -> Outcome {
        self.submit_recorded(event, ctx, None)
    }

    /// Appends `record` (the [`write_record`](hermes_meter_model::hook::write_record)
    /// line of the same call) to the spool,
    /// queues `event`, and returns at once, unless the hook is gating or the
    /// spool write failed: then it waits, up to `hook_wait`, for the commit
    /// (and the verdict).
    pub fn submit_recorded(&self, event: HookEvent, ctx: EventContext, record: Option<&[u8]>) -> Outcome {
        self.submit_recorded_with(event, ctx, record, true)
    }

    /// [`Bridge::submit_recorded`]; a call that may not wait never waits,
    /// whatever it is.
    fn submit_recorded_with(
        &self,
        event: HookEvent,
        ctx: EventContext,
        record: Option<&[u8]>,
        may_wait: bool,
    ) -> Outcome {
        let State::Running(run) = &self.state else {
            return Outcome::Disabled;
        };
        let Some(spooled) = self.spool(run, record) else {
            return Outcome::Disabled;
        };
        let gating = run.needs.waits(&event.hook);
        if gating {
            if let Some(quick) = &run.quick {
                quick.settle(&event);
            }
        }
        let bound = run.quick.as_ref().map(|quick| {
            let bound = spend_bound(&event, &run.prices, |m| run.host_was_asked(m));
            (bound, quick)
        });
        let (bound, gating) = match bound {
            Some((bound, quick)) => {
                let tool_call = matches!(event.hook, hermes_meter_model::hook::Hook::PreToolCall(_));
                let request = matches!(event.hook, hermes_meter_model::hook::Hook::PreApiRequest(_));
                let queued = run.shared.add_spend(bound, tool_call, request);
                // The gate may know, without the commit, that it has
                // nothing to say to this event.
                (Some(bound), gating && !quick.no_verdict(&event, queued))
            }
            None => (None, gating),
        };
        // Kept for the writer to spool later, only when this write failed.
        let record = record.filter(|_| !spooled).map(<[u8]>::to_vec);
        let payload = Payload::Decoded(event);
        let call = Call {
            payload,
            ctx,
            spooled,
            record,
            bound,
        };
        self.queue_and_wait(run, call, gating, may_wait)
    }

    /// Whether a call of `hook` may be decoded on the writer thread: while
    /// no gating hook waits for a verdict the hook path needs nothing the
    /// decoder says; while one does, only a call that neither waits itself
    /// nor may carry spend (see [`spend_bound`]) can go undecoded.
    pub fn decodes_later(&self, hook: &str) -> bool {
        match &self.state {
            State::Running(run) => !run.needs.any() || !(carries_spend(hook) || run.needs.waits_named(hook)),
            State::Disabled(_) => false,
        }
    }

    /// The hook path: submits one call as its spool record `line` (a
    /// [`write_record`](hermes_meter_model::hook::write_record) line of kwargs scrubbed
    /// with this bridge's decode options).
    ///
    /// When [`Bridge::decodes_later`], the line is queued for the writer to
    /// decode, and the call never waits for a verdict (only for the commit,
    /// when the spool write failed). Otherwise the same line is decoded
    /// here, so the gate sees the event before the hook returns: see
    /// [`Bridge::submit_recorded`]. Either way, a call the decoder cannot
    /// use is counted and logged (through [`Bridge::take_messages`]).
    pub fn submit_line(&self, hook: &'static str, line: Vec<u8>, at: f64, ctx: EventContext) -> Outcome {
        self.submit_line_with(hook, line, at, ctx, true)
    }

    /// [`Bridge::submit_line`] for a call whose caller will not read its
    /// verdict and must not wait for anything: a hook call Hermes skipped,
    /// recorded from inside Hermes's dispatcher while it holds its lock.
    /// The call is spooled (or kept in memory) and committed as usual.
    pub fn record_line(&self, hook: &'static str, line: Vec<u8>, at: f64, ctx: EventContext) -> Outcome {
        self.submit_line_with(hook, line, at, ctx, false)
    }

    fn submit_line_with(
        &self,
        hook: &'static str,
        line: Vec<u8>,
        at: f64,
        ctx: EventContext,
        may_wait: bool,
    ) -> Outcome {
        let State::Running(run) = &self.state else {
            return Outcome::Disabled;
        };
        let opts = self.config.decode;
        if !self.decodes_later(hook) {
            let (decoded, profile) = decode_record(hook, &line, at, opts);
            return match decoded {
                Decoded::Event(event, problems) => {
                    let ctx = EventContext {
                        problems,
                        profile,
                        ..ctx
                    };
                    self.submit_recorded_with(event, ctx, Some(&line), may_wait)
                }
                Decoded::Unusable(problems) => {
                    run.shared.counters.submitted.fetch_add(1, Ordering::Relaxed);
                    run.shared.not_recorded(hook, &problems);
                    Outcome::Failed
                }
                Decoded::Ignored => Outcome::Committed(None),
            };
        }
        let Some(spooled) = self.spool(run, Some(&line)) else {
            return Outcome::Disabled;
        };
        // A call that may carry spend has no known bound until the writer
        // decodes it: a quick verdict meanwhile waits for the exact one.
        let bound = run.quick.as_ref().map(|_| {
            let bound = (!carries_spend(hook)).then_some(0.0);
            run.shared
                .add_spend(bound, hook == "pre_tool_call", hook == "pre_api_request");
            bound
        });
        // An unspooled line stays in the payload, and the writer keeps it.
        let payload = Payload::Line { hook, line, at, opts };
        let call = Call {
            payload,
            ctx,
            spooled,
            record: None,
            bound,
        };
        self.queue_and_wait(run, call, false, may_wait)
    }

    /// Counts a submission and appends its record to the spool. `None` when
    /// the writer is gone; else whether the record is in the spool.
    fn spool(&self, run: &Running, record: Option<&[u8]>) -> Option<bool> {
        let shared = &run.shared;
        if !shared.alive.load(Ordering::Acquire) {
            return None;
        }
        shared.counters.submitted.fetch_add(1, Ordering::Relaxed);
        let spooled = match (shared.spool.get(), record) {
            (Some(spool), Some(record)) => match spool.append(record) {
                Ok(()) => {
                    shared.counters.spooled.fetch_add(1, Ordering::Relaxed);
                    true
                }
                Err(e) => {
                    shared.counters.spool_failures.fetch_add(1, Ordering::Relaxed);
                    if !shared.spool_failed.swap(true, Ordering::AcqRel) {
                        shared.message(
                            "Spool.WriteFailed",
                            format!(
                                "cannot write {} ({e}); hooks wait for their commits until it works again",
                                spool.path().display()
                            ),
                        );
                    }
                    false
                }
            },
            _ => false,
        };
        Some(spooled)
    }

    /// Queues one hook call and waits, up to `hook_wait`, for its commit
    /// when it is `gating` or not in the spool (and `may_wait`).
    fn queue_and_wait(&self, run: &Running, call: Call, gating: bool, may_wait: bool) -> Outcome {
        let shared = &run.shared;
        let Call {
            payload,
            ctx,
            spooled,
            record,
            bound,
        } = call;
        // A store closed by a fault commits nothing until the writer
        // reopens it: waiting would only add the bound to every hook.
        let wait = if !may_wait || (spooled && !gating) || shared.store_down.load(Ordering::Acquire) {
            Duration::ZERO
        } else {
            self.config.hook_wait
        };
        let ticket = (!wait.is_zero()).then(Ticket::new);
        let job = Job::Event {
            payload,
            ctx,
            ticket: ticket.clone(),
            spooled,
            record,
            bound,
        };
        if !spooled {
            shared.unsaved.fetch_add(1, Ordering::AcqRel);
        }
        // While a budget is set, spend is committed at once, so the
        // verdicts of this and other processes see it without delay.
        let prompt = ticket.is_some() || (run.needs.any() && bound != Some(Some(0.0)));
        if !self.enqueue(run, job, prompt) {
            // Never applied: its bound no longer waits to be.
            if let Some(bound) = bound {
                shared.take_spend(bound);
            }
            if !spooled {
                // In no spool either: lost, and counted as such.
                shared.saved();
                shared.refused_unsaved.fetch_add(1, Ordering::AcqRel);
            }
            return Outcome::Failed;
        }
        let Some(ticket) = ticket else {
            return Outcome::Queued;
        };
        match ticket.wait_until(Instant::now() + wait) {
            Some(outcome) => outcome,
            None => {
                shared.counters.timed_out.fetch_add(1, Ordering::Relaxed);
                Outcome::TimedOut
            }
        }
    }

    /// Waits until everything submitted before this call is committed, or
    /// `timeout` passes. Returns whether it all committed in time.
    pub fn flush(&self, timeout: Duration) -> bool {
        // A store closed by a fault commits nothing before its retry:
        // a flush in the middle of a process does not wait for that.
        self.wait_for(Job::Flush, timeout, true)
    }

    /// [`Bridge::flush`] for a process about to exit: the session spans
    /// this process held back for their grace period (Hermes never
    /// finalizes `hermes -z`, cron or kanban sessions) are released, and
    /// what it leaves open is closed, so the exporter can send them before
    /// the process ends. A session that goes on later (`--resume`) gets a
    /// continuation span, never a second copy of this one. Returns whether
    /// everything committed in time.
    ///
    /// A store in trouble is tried again at once, and every
    /// [`EXIT_RETRY_PAUSE`] until `timeout` (the space may have come back
    /// since the last try), and so is the spool for the events it could not
    /// take. What is still unsaved then is said in one message each:
    /// `Exit.LeftInSpool` (how many events wait in the spool for the next
    /// process) and `Exit.EventsLost` (how many are in neither, lost: also
    /// written to `<store>/health.json` if it can be).
    pub fn flush_at_exit(&self, timeout: Duration) -> bool {
        let committed = self.wait_for(Job::Exit, timeout, false);
        if !committed {
            if let State::Running(run) = &self.state {
                run.shared.report_unsaved(&self.config.store_dir);
            }
        }
        committed
    }

    /// Queues the job `make` builds around a ticket and waits, up to
    /// `timeout`, until the writer has committed everything before it;
    /// at once false while the store is closed by a fault if `not_when_down`.
    fn wait_for(&self, make: fn(Arc<Ticket>) -> Job, timeout: Duration, not_when_down: bool) -> bool {
        let State::Running(run) = &self.state else {
            return true;
        };
        let down = run.shared.store_down.load(Ordering::Acquire);
        if !run.shared.alive.load(Ordering::Acquire) || (not_when_down && down) {
            return false;
        }
        let ticket = Ticket::new();
        if !self.enqueue(run, make(Arc::clone(&ticket)), true) {
            return false;
        }
        matches!(ticket.wait_until(Instant::now() + timeout), Some(Outcome::Committed(_)))
    }

    /// Queues `job`. The writer is woken only for a job someone waits for
    /// (`prompt`), or once [`WAKE_AT_QUEUED`] jobs wait; otherwise its next
    /// tick (at most [`GATE_REFRESH`] away) takes the job. Waking a sleeping
    /// thread costs the hook a futex call and, on a VM, an inter-processor
    /// interrupt: several microseconds, the largest part of a hook's cost.
    fn enqueue(&self, run: &Running, job: Job, prompt: bool) -> bool {
        let mut queue = lock(&run.shared.queue);
        if queue.jobs.len() >= MAX_QUEUED {
            drop(queue);
            run.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        queue.jobs.push(job);
        let wake = !queue.woken && (prompt || queue.jobs.len() >= WAKE_AT_QUEUED);
        queue.woken |= wake;
        drop(queue);
        if wake {
            run.shared.wake.notify_one();
        }
        true
    }

    /// Commits what is queued, checkpoints, stops the writer and the
    /// exporter. Waits at most `timeout` for each. Later submits are no-ops.
    pub fn shutdown(&self, timeout: Duration) {
        let State::Running(run) = &self.state else {
            return;
        };
        let deadline = Instant::now() + timeout;
        {
            let mut queue = lock(&run.shared.queue);
            queue.stop = true;
        }
        run.shared.wake.notify_one();
        if let Some(handle) = lock(&run.writer).take() {
            // Join only if the writer ends in time; a writer stuck on a
            // locked store is left behind rather than hanging the caller.
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
        if let ExporterSlot::Started(Some(task)) = &mut *lock(&run.exporter) {
            task.shutdown(deadline);
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.shutdown(DEFAULT_FLUSH_TIMEOUT);
    }
}

/// The message of a panic payload.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

use hermes_meter_store::unix_now;

#[cfg(test)]
mod tests;
