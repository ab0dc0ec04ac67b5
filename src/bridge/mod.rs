//! The per-process runtime between hook calls and the store.
//!
//! Owns: the one writer thread that holds the [`Store`], the queue hooks
//! submit to, group commit, the bound on how long a hook waits, periodic
//! WAL checkpoints and the idle-run sweep, and the extension points for the
//! exporter and for gating verdicts. Must not touch: Python (the binding in
//! `python.rs` calls in here with plain values), the network.
//!
//! This file holds the hook side (submitting, the queue, waiting);
//! `writer.rs` the writer thread; `gate.rs` what a gate is.
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
//! Store trouble (see [`crate::health`]) does not stop the bridge. A store
//! that cannot be opened at start, or a commit that fails because the store
//! is locked past the busy timeout, the disk is full, the file system is
//! read-only or the file is corrupt, makes the writer keep the events (in
//! memory, in order, besides the spool), say so in ONE `Store.Fault`
//! message, and try the store again with a backoff from
//! [`BridgeConfig::store_retry_min`] to [`BridgeConfig::store_retry_max`].
//! Meanwhile hooks wait for no commit (except a gating hook on a merely
//! locked store, up to its bound). Once the store works, the kept events
//! land first and a `Store.Recovered` message says so. The writer records
//! what happened in `<store>/health.json` for `hermes-otel status`. A
//! corrupt store file is never touched: it is reopened only once the user
//! replaced it. [`Bridge::disabled_reason`] is left for what no retry can
//! fix (the writer thread could not start, the pricing file is invalid).

use crate::lock;
use std::collections::HashMap;
use std::ffi::OsString;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::config;
use crate::error::{Error, Result};
use crate::health::{classify, FaultKind, Tracker};
use crate::hook::{decode, DecodeOptions, Decoded, HookEvent};
use crate::pricing::{ModelPrice, PriceTable};
use crate::spool::{self, Spool};
use crate::store::{ContentCursor, EventContext, Store};

/// Environment variables the bridge reads.
pub mod env {
    /// How long a hook waits for its commit, in milliseconds (0: never wait).
    pub const HOOK_WAIT_MS: &str = "HERMES_OTEL_HOOK_WAIT_MS";
    /// `enforce` (the default) or `observe`: whether budgets may block.
    pub const BUDGET_MODE: &str = "HERMES_OTEL_BUDGET_MODE";
    /// Test-only: the name of a hook whose Rust path panics (`*`: every hook).
    pub const TEST_PANIC: &str = "HERMES_OTEL_TEST_PANIC";
}

mod gate;
mod writer;

pub use gate::{
    carries_spend, is_gating, spend_bound, Gate, GateNeeds, NoGate, QueuedSpend, QuickGate, Verdict, GATE_REFRESH,
};
use writer::{open_store, Writer};

/// Queued jobs that wake the writer although no one waits for them: keeps
/// batches (and the queue's memory) bounded under a burst of hooks.
const WAKE_AT_QUEUED: usize = 256;

/// How long a hook waits for its commit by default. Commits take tens of
/// microseconds; a wait this long means the store is locked by another
/// process, and Hermes must not stall on that.
pub const DEFAULT_HOOK_WAIT: Duration = Duration::from_millis(100);

/// How long `flush` waits by default at the end of a one-shot session.
pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// How often the writer checkpoints the WAL when there were writes. A
/// passive checkpoint of a second's worth of events is a few milliseconds
/// and keeps the WAL (which every reader scans) small.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// How often the writer closes runs that went idle without ending.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// How long before the host is asked again for a price it did not have.
pub const HOST_PRICE_RETRY: Duration = Duration::from_secs(60);

/// Most models [`Bridge::needs_host_price`] remembers; past this it starts
/// over (a model is then looked up or asked about again), so a gateway
/// that meets ever new model names keeps a bounded map.
const MAX_HOST_ASKED: usize = 1024;

/// The first wait before the store is tried again after a fault.
pub const DEFAULT_STORE_RETRY_MIN: Duration = Duration::from_millis(250);

/// The longest wait between tries of a store in trouble: a fault that
/// lasts costs one open attempt this often, on the writer thread.
pub const DEFAULT_STORE_RETRY_MAX: Duration = Duration::from_secs(30);

/// Most jobs the queue holds. Only a writer stuck far longer than any
/// busy timeout gets here; dropping (and counting) beats eating memory.
const MAX_QUEUED: usize = 100_000;

/// Most messages kept for the binding to log; later ones are counted only.
const MAX_MESSAGES: usize = 64;

/// Whether budgets may block calls (defined with the budgets).
pub use crate::budget::BudgetMode;

/// Everything the bridge needs, resolved once.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The store directory.
    pub store_dir: PathBuf,
    /// How long a hook waits for its commit; zero means never.
    pub hook_wait: Duration,
    /// How decoding treats content.
    pub decode: DecodeOptions,
    /// Whether gating hooks are registered and may block.
    pub budget_mode: BudgetMode,
    /// Between WAL checkpoints.
    pub checkpoint_interval: Duration,
    /// Between idle-run sweeps.
    pub sweep_interval: Duration,
    /// A run with no event for this long is closed as abandoned.
    pub idle_run_seconds: f64,
    /// The hook whose Rust path panics (tests only).
    pub test_panic_hook: Option<String>,
    /// What was wrong with the environment, for the binding to log once.
    pub warnings: Vec<String>,
    /// The first wait before a store in trouble is tried again.
    pub store_retry_min: Duration,
    /// The longest wait between tries (the wait doubles up to this).
    pub store_retry_max: Duration,
    /// The Hermes profile of this process (`ctx.profile_name`), recorded on
    /// runs for per-profile budgets; `None` when unknown.
    pub profile: Option<String>,
    /// What the writer's sweep prunes, and when.
    pub retention: config::Retention,
    /// The outbox cap (`HERMES_OTEL_OUTBOX_MAX_ROWS`), enforced by the
    /// sweep too, so it holds with trace export off.
    pub outbox_max_rows: u64,
    /// How long after its end a session counts as settled for metrics
    /// (`HERMES_OTEL_SESSION_GRACE_SECONDS`), for the sweep's fold.
    pub session_grace_seconds: f64,
}

impl BridgeConfig {
    /// The configuration for `store_dir` with every other setting at its default.
    pub fn new(store_dir: PathBuf) -> Self {
        BridgeConfig {
            store_dir,
            hook_wait: DEFAULT_HOOK_WAIT,
            decode: DecodeOptions::default(),
            budget_mode: BudgetMode::Enforce,
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
            idle_run_seconds: crate::config::DEFAULT_IDLE_TIMEOUT_SECONDS,
            test_panic_hook: None,
            warnings: Vec::new(),
            store_retry_min: DEFAULT_STORE_RETRY_MIN,
            store_retry_max: DEFAULT_STORE_RETRY_MAX,
            profile: None,
            retention: config::Retention::defaults(),
            outbox_max_rows: 0,
            session_grace_seconds: 0.0,
        }
        .with_export_settings(|_| None)
    }

    /// Takes the outbox cap and the session grace from the export
    /// settings' own resolver (one place resolves them).
    fn with_export_settings(mut self, var: impl Fn(&str) -> Option<String>) -> Self {
        let export = crate::export::ExportConfig::resolve(crate::export::ExportOverrides::default(), var);
        self.outbox_max_rows = export.outbox_max_rows.value;
        self.session_grace_seconds = export.session_grace_seconds.value;
        self
    }

    /// Resolves the configuration from the process environment.
    pub fn from_env() -> Self {
        Self::from_vars(|name| std::env::var_os(name).filter(|v| !v.is_empty()))
    }

    /// Resolves the configuration from any environment (tests pass a map).
    /// Each setting: its variable if set and valid, else the default; an
    /// invalid value is reported in `warnings` and the default used.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> Self {
        let mut cfg = BridgeConfig::new(config::store_dir_from(None, &var).value);
        cfg.decode.capture_content = config::capture_content_from(&var).value;
        if let Some(v) = var(env::HOOK_WAIT_MS) {
            match v.to_string_lossy().trim().parse::<u64>() {
                Ok(ms) => cfg.hook_wait = Duration::from_millis(ms),
                Err(_) => cfg.warnings.push(format!(
                    "{}={:?} is not a number of milliseconds; using {} ms",
                    env::HOOK_WAIT_MS,
                    v,
                    DEFAULT_HOOK_WAIT.as_millis()
                )),
            }
        }
        if let Some(v) = var(env::BUDGET_MODE) {
            match BudgetMode::parse(&v.to_string_lossy()) {
                Some(mode) => cfg.budget_mode = mode,
                None => cfg.warnings.push(format!(
                    "{}={:?} is neither observe nor enforce; using enforce",
                    env::BUDGET_MODE,
                    v
                )),
            }
        }
        // The writer's idle sweep and the exporter's close runs after the
        // same idle time: one setting, one parser.
        let idle = crate::export::config::env::IDLE_TIMEOUT_SECONDS;
        if let Some(v) = var(idle) {
            match crate::export::config::parse_seconds(&v.to_string_lossy()) {
                Some(seconds) => cfg.idle_run_seconds = seconds,
                None => cfg.warnings.push(format!(
                    "{idle}={v:?} is not a number of seconds; using {}",
                    crate::config::DEFAULT_IDLE_TIMEOUT_SECONDS
                )),
            }
        }
        cfg.test_panic_hook = var(env::TEST_PANIC).map(|v| v.to_string_lossy().into_owned());
        cfg.retention = config::Retention::from_vars(&var, &mut cfg.warnings);
        cfg.with_export_settings(|name| var(name).map(|v| v.to_string_lossy().into_owned()))
    }
}

/// A background task the bridge owns besides the writer (the OTLP exporter).
pub trait Background: Send {
    /// Asks the task to finish what it can before `deadline` and stop.
    fn shutdown(&mut self, deadline: Instant);

    /// Asks the task to send what is ready now and waits for it until
    /// `deadline`; returns whether it finished. The default has nothing to
    /// send.
    fn flush(&self, _deadline: Instant) -> bool {
        true
    }
}

/// Starts the exporter; see [`Bridge::start_exporter`].
pub type ExporterFactory = Box<dyn FnOnce(&BridgeConfig) -> Result<Box<dyn Background>> + Send>;

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

enum HostAsk {
    /// The user's file or the built-in table prices it: never asked.
    Known,
    Priced,
    Asked(Instant),
}

impl Running {
    /// Whether the host was asked for `model`'s price (so the writer may
    /// price it with an answer the hook thread has not seen).
    fn host_was_asked(&self, model: &str) -> bool {
        matches!(
            lock(&self.host_asked).get(model),
            Some(HostAsk::Priced | HostAsk::Asked(_))
        )
    }
}

enum ExporterSlot {
    NotStarted(Option<ExporterFactory>),
    Started(Option<Box<dyn Background>>),
}

struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the writer.
    wake: Condvar,
    /// Cleared when the writer thread ended.
    alive: AtomicBool,
    messages: Mutex<Vec<Message>>,
    has_messages: AtomicBool,
    counters: Counters,
    /// Set once a spool write failed, so the failure is reported once
    /// (cleared when the store recovers from a fault).
    spool_failed: AtomicBool,
    /// This process's spool; unset while it cannot be created (hooks then
    /// wait for commits; the writer creates it once it can).
    spool: OnceLock<Arc<Spool>>,
    /// Set by the writer while the store is closed by a fault, so hooks do
    /// not wait for commits that cannot happen.
    store_down: AtomicBool,
    /// The current store fault, for [`Bridge::store_problem`].
    problem: Mutex<Option<String>>,
    /// What the hooks submitted toward budgets ([`QueuedSpend`]); the
    /// writer takes applied events' unknown bounds off.
    spend: Mutex<QueuedSpend>,
}

#[derive(Default)]
struct Counters {
    submitted: AtomicU64,
    committed: AtomicU64,
    failed: AtomicU64,
    timed_out: AtomicU64,
    dropped: AtomicU64,
    batches: AtomicU64,
    largest_batch: AtomicU64,
    checkpoints: AtomicU64,
    sweeps: AtomicU64,
    messages_dropped: AtomicU64,
    spooled: AtomicU64,
    recovered: AtomicU64,
    spool_failures: AtomicU64,
}

#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    stop: bool,
    /// The writer was woken since it last took the jobs.
    woken: bool,
}

/// One hook call for the writer: decoded on the hook thread, or (see
/// [`Bridge::submit_line`]) its spool record, decoded on the writer thread.
#[allow(clippy::large_enum_variant)] // as for `Job`
enum Payload {
    Decoded(HookEvent),
    Line {
        hook: &'static str,
        line: Vec<u8>,
        at: f64,
        opts: DecodeOptions,
    },
}

// Nearly every job is an event; boxing it would cost an allocation per
// hook to save bytes on the rare price and flush jobs.
#[allow(clippy::large_enum_variant)]
enum Job {
    Event {
        payload: Payload,
        ctx: EventContext,
        ticket: Option<Arc<Ticket>>,
        /// The event is in this process's spool.
        spooled: bool,
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
struct Ticket {
    result: Mutex<Option<Outcome>>,
    done: Condvar,
    /// Set when the waiter gave up: its verdict would reach no one.
    abandoned: AtomicBool,
}

impl Ticket {
    fn new() -> Arc<Self> {
        Arc::new(Ticket {
            result: Mutex::new(None),
            done: Condvar::new(),
            abandoned: AtomicBool::new(false),
        })
    }

    /// Whether the waiter gave up (its hook returned without a verdict).
    fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Acquire)
    }

    fn complete(&self, outcome: Outcome) {
        *lock(&self.result) = Some(outcome);
        self.done.notify_one();
    }

    /// The outcome, or `None` if `deadline` passed first.
    fn wait_until(&self, deadline: Instant) -> Option<Outcome> {
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

impl Bridge {
    /// Opens the store, loads prices and starts the writer thread. Never
    /// fails: a store that cannot be opened gives a disabled bridge.
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
                    "hermes-otel is disabled: cannot open its store in {}: {e}",
                    config.store_dir.display()
                )),
                config,
            },
        }
    }

    fn open(config: &BridgeConfig, gate: Box<dyn Gate>) -> Result<Running> {
        let prices = match PriceTable::load(&config.store_dir.join(config::PRICING_FILE_NAME)) {
            // An unreadable directory is store trouble, handled below; an
            // invalid pricing file is the user's to fix and disables.
            Err(Error::Io { .. }) => PriceTable::default(),
            other => other?,
        };
        let shared = Arc::new(Shared {
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
            spend: Mutex::new(QueuedSpend::default()),
        });
        let opened = open_store(config, &prices);
        match Spool::create(&config.store_dir) {
            Ok(spool) => {
                let _ = shared.spool.set(Arc::new(spool));
            }
            Err(e) if opened.is_ok() => shared.message(
                "Spool.Unavailable",
                format!("cannot create the spool ({e}); hooks wait for their commits instead"),
            ),
            // The store fault below says it all.
            Err(_) => {}
        }
        let needs = gate.needs();
        let quick = gate.quick();
        let writer = Writer::new(config, gate, &prices, Arc::clone(&shared), opened);
        let handle = std::thread::Builder::new()
            .name("hermes-otel-writer".into())
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

    /// Appends `record` (a [`spool::record`] of the same call) to the spool,
    /// queues `event`, and returns at once, unless the hook is gating or the
    /// spool write failed: then it waits, up to `hook_wait`, for the commit
    /// (and the verdict).
    pub fn submit_recorded(&self, event: HookEvent, ctx: EventContext, record: Option<&[u8]>) -> Outcome {
        let State::Running(run) = &self.state else {
            return Outcome::Disabled;
        };
        let Some(spooled) = self.spool(run, record) else {
            return Outcome::Disabled;
        };
        let gating = run.needs.waits(&event.hook);
        let bound = run.quick.as_ref().map(|quick| {
            let bound = spend_bound(&event, &run.prices, |m| run.host_was_asked(m));
            (bound, quick)
        });
        let (bound, gating) = match bound {
            Some((bound, quick)) => {
                let queued = run.shared.add_spend(bound);
                // The gate may know, without the commit, that it has
                // nothing to say to this event.
                (Some(bound), gating && !quick.no_verdict(&event, queued))
            }
            None => (None, gating),
        };
        self.queue_and_wait(run, Payload::Decoded(event), ctx, spooled, gating, bound)
    }

    /// Whether a call of `hook` may be decoded on the writer thread
    /// ([`Bridge::submit_line`]): while no gating hook waits for a verdict
    /// the hook path needs nothing the decoder says; while one does, only a
    /// call that neither waits itself nor may carry spend (see
    /// [`spend_bound`]) can go undecoded.
    pub fn decodes_later(&self, hook: &str) -> bool {
        match &self.state {
            State::Running(run) => !run.needs.any() || !(carries_spend(hook) || run.needs.waits_named(hook)),
            State::Disabled(_) => false,
        }
    }

    /// [`Bridge::submit_recorded`] for a call the writer decodes from its
    /// spool record `line` (a [`spool::record`] line of scrubbed kwargs),
    /// when [`Bridge::decodes_later`] said so. It never waits for a
    /// verdict; it waits for the commit only when the spool write failed. A
    /// call the decoder cannot use is counted and logged by the writer.
    pub fn submit_line(&self, hook: &'static str, line: Vec<u8>, at: f64, ctx: EventContext) -> Outcome {
        let State::Running(run) = &self.state else {
            return Outcome::Disabled;
        };
        let Some(spooled) = self.spool(run, Some(&line)) else {
            return Outcome::Disabled;
        };
        // A call that may carry spend has no known bound until the writer
        // decodes it: a quick verdict meanwhile waits for the exact one.
        let bound = run.quick.as_ref().map(|_| {
            let bound = (!carries_spend(hook)).then_some(0.0);
            run.shared.add_spend(bound);
            bound
        });
        let opts = self.config.decode;
        let payload = Payload::Line { hook, line, at, opts };
        self.queue_and_wait(run, payload, ctx, spooled, false, bound)
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
    /// when it is `gating` or not in the spool.
    fn queue_and_wait(
        &self,
        run: &Running,
        payload: Payload,
        ctx: EventContext,
        spooled: bool,
        gating: bool,
        bound: Option<Option<f64>>,
    ) -> Outcome {
        let shared = &run.shared;
        // A store closed by a fault commits nothing until the writer
        // reopens it: waiting would only add the bound to every hook.
        let wait = if (spooled && !gating) || shared.store_down.load(Ordering::Acquire) {
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
            bound,
        };
        // While a budget is set, spend is committed at once, so the
        // verdicts of this and other processes see it without delay.
        let prompt = ticket.is_some() || (run.needs.any() && bound != Some(Some(0.0)));
        if !self.enqueue(run, job, prompt) {
            // Never applied: its bound no longer waits to be.
            if let Some(bound) = bound {
                shared.take_spend(bound);
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
        self.wait_for(Job::Flush, timeout)
    }

    /// [`Bridge::flush`] for a process about to exit: the session spans
    /// this process held back for their grace period (Hermes never
    /// finalizes `hermes -z`, cron or kanban sessions) are released, and
    /// what it leaves open is closed, so the exporter can send them before
    /// the process ends. A session that goes on later (`--resume`) gets a
    /// continuation span, never a second copy of this one. Returns whether
    /// everything committed in time.
    pub fn flush_at_exit(&self, timeout: Duration) -> bool {
        self.wait_for(Job::Exit, timeout)
    }

    /// Queues the job `make` builds around a ticket and waits, up to
    /// `timeout`, until the writer has committed everything before it.
    fn wait_for(&self, make: fn(Arc<Ticket>) -> Job, timeout: Duration) -> bool {
        let State::Running(run) = &self.state else {
            return true;
        };
        if !run.shared.alive.load(Ordering::Acquire) || run.shared.store_down.load(Ordering::Acquire) {
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

    /// Whether the host should be asked for `model`'s price: neither the
    /// user's file nor the built-in table knows it, the host has not priced
    /// it yet, and it was not asked in the last [`HOST_PRICE_RETRY`] (Hermes
    /// may learn prices later, but asking on every call would cost every
    /// call).
    pub fn needs_host_price(&self, model: &str) -> bool {
        let State::Running(run) = &self.state else {
            return false;
        };
        if model.is_empty() {
            return false;
        }
        let mut asked = lock(&run.host_asked);
        if asked.len() >= MAX_HOST_ASKED && !asked.contains_key(model) {
            asked.clear();
        }
        let now = Instant::now();
        match asked.get(model) {
            // The tables' answer is remembered: looking a model up is a
            // scan of every entry, and this runs on every LLM call.
            Some(HostAsk::Known | HostAsk::Priced) => false,
            None if run.prices.knows(model, None) => {
                asked.insert(model.to_string(), HostAsk::Known);
                false
            }
            Some(HostAsk::Asked(at)) if now.duration_since(*at) < HOST_PRICE_RETRY => false,
            _ => {
                asked.insert(model.to_string(), HostAsk::Asked(now));
                true
            }
        }
    }

    /// Records the price Hermes knows for `model`; events submitted after
    /// this call are costed with it (provenance `host`) unless the user's
    /// file or the built-in table knows the model.
    pub fn set_host_price(&self, model: &str, price: ModelPrice) {
        if let State::Running(run) = &self.state {
            lock(&run.host_asked).insert(model.to_string(), HostAsk::Priced);
            self.enqueue(run, Job::HostPrice(model.to_string(), price), false);
        }
    }

    /// Installs the function that starts the exporter. Called once, before
    /// the first hook; [`Bridge::start_exporter`] runs it lazily.
    pub fn set_exporter_factory(&self, factory: ExporterFactory) {
        if let State::Running(run) = &self.state {
            let mut slot = lock(&run.exporter);
            if let ExporterSlot::NotStarted(f) = &mut *slot {
                *f = Some(factory);
            }
        }
    }

    /// Starts the exporter thread if it is not running yet: the extension
    /// point for the OTLP exporter. The binding calls this on the first hook
    /// (not at import, so a plugin that is loaded but never used costs no
    /// thread). Without a factory installed this only marks it started.
    /// Returns whether a factory ran now.
    pub fn start_exporter(&self) -> bool {
        let State::Running(run) = &self.state else {
            return false;
        };
        let mut slot = lock(&run.exporter);
        let ExporterSlot::NotStarted(factory) = &mut *slot else {
            return false;
        };
        let factory = factory.take();
        let started = match factory {
            None => None,
            Some(f) => match f(&self.config) {
                Ok(task) => Some(task),
                Err(e) => {
                    run.shared
                        .message("Exporter.StartFailed", format!("cannot start the exporter: {e}"));
                    None
                }
            },
        };
        let ran = started.is_some();
        *slot = ExporterSlot::Started(started);
        ran
    }

    /// Asks this bridge's exporter (if it started) to send what is ready,
    /// waiting until `deadline` at most: the second half of an exit flush.
    /// The exporter lock is held meanwhile, so a concurrent start waits.
    pub fn flush_exporter(&self, deadline: Instant) -> bool {
        let State::Running(run) = &self.state else {
            return true;
        };
        match &*lock(&run.exporter) {
            ExporterSlot::Started(Some(task)) => task.flush(deadline),
            _ => true,
        }
    }

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
        }
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

impl Shared {
    fn message(&self, event: &'static str, text: String) {
        let mut messages = lock(&self.messages);
        if messages.len() >= MAX_MESSAGES {
            self.counters.messages_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        messages.push(Message { event, text });
        self.has_messages.store(true, Ordering::Release);
    }

    /// Adds one queued event's [`spend_bound`] to [`QueuedSpend`] and
    /// returns the new total.
    fn add_spend(&self, bound: Option<f64>) -> QueuedSpend {
        let mut spend = lock(&self.spend);
        match bound {
            Some(usd) => spend.usd += usd,
            None => spend.unknown += 1,
        }
        *spend
    }

    /// Takes a bound [`Shared::add_spend`] added back off.
    fn take_spend(&self, bound: Option<f64>) {
        let mut spend = lock(&self.spend);
        match bound {
            Some(usd) => spend.usd -= usd,
            None => spend.unknown = spend.unknown.saturating_sub(1),
        }
    }

    fn take_jobs(&self, wait: Duration) -> (Vec<Job>, bool) {
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

pub use crate::unix_now;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::{decode, Decoded, Hook};
    use serde_json::{json, Value};

    fn event(hook: &str, kwargs: Value) -> HookEvent {
        let map = kwargs.as_object().expect("kwargs object").clone();
        match decode(hook, &map, unix_now(), DecodeOptions::default()) {
            Decoded::Event(e, _) => e,
            other => panic!("{hook}: {other:?}"),
        }
    }

    fn llm_call(session: &str, n: usize, model: &str) -> HookEvent {
        event(
            "post_api_request",
            json!({
                "session_id": session, "turn_id": format!("{session}:t"),
                "api_request_id": format!("{session}:t:api:{n}"), "model": model,
                "api_duration": 0.01,
                "usage": {"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 0,
                          "cache_write_tokens": 0, "reasoning_tokens": 0},
            }),
        )
    }

    fn config(dir: &std::path::Path) -> BridgeConfig {
        BridgeConfig::new(dir.join("otel"))
    }

    fn reader(dir: &std::path::Path) -> Store {
        Store::open_dir(&dir.join("otel")).expect("reader opens the store")
    }

    fn scalar<T: rusqlite::types::FromSql>(store: &Store, sql: &str) -> T {
        store.query_scalar(sql).expect(sql)
    }

    /// Holds SQLite's write lock on the store from another connection
    /// until dropped, as another process in a write would.
    struct WriteLock(rusqlite::Connection);

    impl WriteLock {
        fn take(dir: &std::path::Path) -> Self {
            let conn = rusqlite::Connection::open(dir.join("otel").join(crate::store::DB_FILE_NAME)).expect("open");
            conn.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
            WriteLock(conn)
        }
    }

    impl Drop for WriteLock {
        fn drop(&mut self) {
            let _ = self.0.execute_batch("ROLLBACK");
        }
    }

    /// A long-lived gateway meeting ever new model names keeps a bounded
    /// map of the models it asked Hermes about.
    #[test]
    fn the_models_asked_about_stay_bounded() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bridge = Bridge::start(config(dir.path()));
        for i in 0..3 * MAX_HOST_ASKED {
            assert!(bridge.needs_host_price(&format!("unknown-model-{i}")));
        }
        let State::Running(run) = &bridge.state else {
            panic!("the bridge runs");
        };
        let kept = lock(&run.host_asked).len();
        assert!(kept > 0 && kept <= MAX_HOST_ASKED, "{kept}");
    }

    #[test]
    fn a_submitted_event_is_committed_when_submit_returns() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bridge = Bridge::start(config(dir.path()));
        assert_eq!(bridge.disabled_reason(), None);
        let outcome = bridge.submit(llm_call("s1", 1, "gpt-4o"), EventContext::default());
        assert_eq!(outcome, Outcome::Committed(None));
        let store = reader(dir.path());
        assert_eq!(
            scalar::<i64>(&store, "SELECT llm_calls FROM runs WHERE session_id = 's1'"),
            1
        );
    }

    /// Submits `kwargs` the way the binding does while no gate waits: as
    /// its spool record, for the writer to decode.
    fn undecoded(bridge: &Bridge, hook: &'static str, kwargs: Value) -> Outcome {
        let kwargs = kwargs.as_object().expect("kwargs object").clone();
        let at = unix_now();
        let line = spool::record(hook, at, Some(1), Some("t"), &kwargs, false);
        let ctx = EventContext {
            pid: Some(1),
            thread: Some("t".into()),
            problems: Vec::new(),
        };
        bridge.submit_line(hook, line, at, ctx)
    }

    #[test]
    fn a_call_decoded_on_the_writer_lands_as_a_decoded_one_does() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bridge = Bridge::start(config(dir.path()));
        assert!(
            bridge.decodes_later("post_api_request"),
            "no gate wants anything: the writer decodes"
        );
        let kwargs = json!({
            "session_id": "s1", "turn_id": "s1:t", "api_request_id": "s1:t:api:1",
            "model": "gpt-4o", "api_duration": 0.01,
            "usage": {"input_tokens": 1000, "output_tokens": 100, "cache_read_tokens": 0,
                      "cache_write_tokens": 0, "reasoning_tokens": 0},
        });
        assert_eq!(undecoded(&bridge, "post_api_request", kwargs.clone()), Outcome::Queued);
        // The same call again, decoded on this thread, is a duplicate.
        let mut again = kwargs;
        again["api_request_id"] = json!("s1:t:api:2");
        assert_eq!(
            bridge.submit(event("post_api_request", again), EventContext::default()),
            Outcome::Committed(None)
        );
        assert!(bridge.flush(Duration::from_secs(5)));
        let store = reader(dir.path());
        let (calls, cost): (i64, f64) = (
            scalar(&store, "SELECT llm_calls FROM runs WHERE session_id = 's1'"),
            scalar(&store, "SELECT cost_usd FROM runs WHERE session_id = 's1'"),
        );
        assert_eq!(calls, 2);
        // gpt-4o: $2.50 in, $10 out per million; both calls cost the same.
        assert!(
            (cost - 2.0 * (1000.0 * 2.5 + 100.0 * 10.0) / 1e6).abs() < 1e-12,
            "{cost}"
        );
        let thread: String = scalar(
            &store,
            "SELECT thread FROM journal WHERE hook = 'post_api_request' ORDER BY seq LIMIT 1",
        );
        assert_eq!(thread, "t");
    }

    #[test]
    fn only_the_hooks_said_to_carry_spend_have_a_bound_above_zero() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let prices = PriceTable::default();
        let mut checked = 0;
        for file in std::fs::read_dir(dir).expect("fixtures") {
            let path = file.expect("entry").path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            for line in std::fs::read_to_string(&path).expect("read").lines() {
                let Ok(Some(rec)) = crate::replay::parse_line(line, false) else {
                    continue;
                };
                let Decoded::Event(e, _) = decode(&rec.hook, &rec.kwargs, 1.0, DecodeOptions::default()) else {
                    continue;
                };
                if !carries_spend(e.hook.name()) {
                    assert_eq!(spend_bound(&e, &prices, |_| true), Some(0.0), "{}", e.hook.name());
                    checked += 1;
                }
            }
        }
        assert!(checked > 100, "{checked}");
    }

    #[test]
    fn a_call_the_writer_cannot_decode_is_counted_and_logged() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bridge = Bridge::start(config(dir.path()));
        // No session id: nothing to key the event by.
        undecoded(&bridge, "post_api_request", json!({"model": "gpt-4o"}));
        assert!(bridge.flush(Duration::from_secs(5)));
        let stats = bridge.stats();
        assert_eq!((stats.committed, stats.failed), (0, 1));
        let messages = bridge.take_messages();
        assert!(
            messages
                .iter()
                .any(|m| m.event == "Decode.Unusable" && m.text.starts_with("post_api_request call not recorded")),
            "{messages:?}"
        );
        // It was handled: a clean stop leaves no spool to replay.
        let State::Running(run) = &bridge.state else {
            panic!("disabled")
        };
        let spool = run.shared.spool.get().expect("spool").path().to_path_buf();
        drop(bridge);
        assert!(!spool.exists(), "{} left behind", spool.display());
    }

    #[test]
    fn an_event_no_one_waits_for_commits_without_waking_the_writer() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bridge = Bridge::start(config(dir.path()));
        let kwargs = json!({"session_id": "quiet", "model": "gpt-4o", "platform": "cli"});
        assert_eq!(undecoded(&bridge, "on_session_start", kwargs), Outcome::Queued);
        // No flush, no waiter: the writer's own tick must take it.
        let deadline = Instant::now() + 10 * GATE_REFRESH;
        while bridge.stats().committed < 1 {
            assert!(
                Instant::now() < deadline,
                "not committed within {:?}",
                10 * GATE_REFRESH
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            scalar::<i64>(
                &reader(dir.path()),
                "SELECT count(*) FROM runs WHERE session_id = 'quiet'"
            ),
            1
        );
    }

    #[test]
    fn events_queued_while_the_writer_is_busy_commit_in_one_transaction() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cfg = config(dir.path());
        cfg.hook_wait = Duration::ZERO;
        let bridge = Bridge::start(cfg);
        // The first event keeps the writer waiting on the lock while the
        // rest queue up behind it.
        let lock = WriteLock::take(dir.path());
        assert_eq!(
            bridge.submit(llm_call("g", 0, "gpt-4o"), EventContext::default()),
            Outcome::Queued
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while bridge.stats().batches == 0 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        for n in 1..=50 {
            bridge.submit(llm_call("g", n, "gpt-4o"), EventContext::default());
        }
        drop(lock);
        assert!(bridge.flush(Duration::from_secs(10)), "flush in time");
        let stats = bridge.stats();
        assert_eq!(stats.committed, 51);
        assert_eq!(stats.batches, 2, "{stats:?}");
        assert_eq!(stats.largest_batch, 50);
        let store = reader(dir.path());
        assert_eq!(
            scalar::<i64>(&store, "SELECT llm_calls FROM runs WHERE session_id = 'g'"),
            51
        );
    }

    #[test]
    fn a_hook_waits_no_longer_than_the_bound_and_its_write_lands_later() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cfg = config(dir.path());
        cfg.hook_wait = Duration::from_millis(20);
        let bridge = Bridge::start(cfg);
        let lock = WriteLock::take(dir.path());
        let started = Instant::now();
        let outcome = bridge.submit(llm_call("w", 1, "gpt-4o"), EventContext::default());
        let waited = started.elapsed();
        assert_eq!(outcome, Outcome::TimedOut);
        assert!(waited >= Duration::from_millis(20), "{waited:?}");
        assert!(waited < Duration::from_millis(1000), "{waited:?}");
        assert_eq!(bridge.stats().timed_out, 1);
        drop(lock);
        assert!(bridge.flush(Duration::from_secs(10)));
        let store = reader(dir.path());
        assert_eq!(
            scalar::<i64>(&store, "SELECT llm_calls FROM runs WHERE session_id = 'w'"),
            1
        );
    }

    /// Counts the verdicts it was asked for.
    struct CountingGate(Arc<AtomicU64>);

    impl Gate for CountingGate {
        fn verdict(&mut self, _store: &Store, _event: &HookEvent) -> Option<Verdict> {
            self.0.fetch_add(1, Ordering::SeqCst);
            None
        }
    }

    #[test]
    fn a_gating_hook_that_gave_up_gets_no_verdict_later() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cfg = config(dir.path());
        cfg.hook_wait = Duration::from_millis(20);
        let asked = Arc::new(AtomicU64::new(0));
        let bridge = Bridge::start_with_gate(cfg, Box::new(CountingGate(Arc::clone(&asked))));
        let gating = |turn: &str| event("pre_llm_call", json!({"session_id": "g", "turn_id": turn}));
        assert!(matches!(
            bridge.submit(gating("g:0"), EventContext::default()),
            Outcome::Committed(None)
        ));
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        let lock = WriteLock::take(dir.path());
        assert_eq!(bridge.submit(gating("g:1"), EventContext::default()), Outcome::TimedOut);
        drop(lock);
        assert!(bridge.flush(Duration::from_secs(30)));
        let store = reader(dir.path());
        assert_eq!(
            scalar::<i64>(&store, "SELECT COUNT(*) FROM journal WHERE session_id = 'g'"),
            2,
            "the event itself lands"
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1, "no verdict for the hook that gave up");
    }

    #[test]
    fn a_store_that_cannot_be_opened_is_retried_and_hooks_do_not_wait_meanwhile() {
        let dir = tempfile::tempdir().expect("temp dir");
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"x").expect("write");
        let mut cfg = BridgeConfig::new(not_a_dir.join("otel"));
        cfg.store_retry_min = Duration::from_millis(10);
        cfg.store_retry_max = Duration::from_millis(20);
        let bridge = Bridge::start(cfg);
        assert_eq!(bridge.disabled_reason(), None, "store trouble does not disable");
        let problem = bridge.store_problem().expect("a store problem");
        assert!(problem.contains(&not_a_dir.display().to_string()), "{problem}");
        let started = Instant::now();
        assert_eq!(
            bridge.submit(llm_call("d", 1, "gpt-4o"), EventContext::default()),
            Outcome::Queued
        );
        assert!(!bridge.flush(Duration::from_secs(5)), "nothing can commit");
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        // The store comes back: the kept event lands, without a new submit.
        std::fs::remove_file(&not_a_dir).expect("clear the fault");
        let deadline = Instant::now() + Duration::from_secs(10);
        while bridge.store_problem().is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(bridge.store_problem(), None);
        assert!(bridge.flush(Duration::from_secs(5)));
        let store = Store::open_dir(&not_a_dir.join("otel")).expect("open");
        assert_eq!(
            scalar::<i64>(&store, "SELECT llm_calls FROM runs WHERE session_id = 'd'"),
            1
        );
        let messages = bridge.take_messages();
        let events: Vec<&str> = messages.iter().map(|m| m.event).collect();
        assert_eq!(events.iter().filter(|e| **e == "Store.Fault").count(), 1, "{events:?}");
        assert!(events.contains(&"Store.Recovered"), "{events:?}");
    }

    #[test]
    fn many_threads_submitting_at_once_give_exact_totals() {
        const THREADS: usize = 8;
        const EACH: usize = 250;
        let dir = tempfile::tempdir().expect("temp dir");
        let bridge = Bridge::start(config(dir.path()));
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let bridge = &bridge;
                s.spawn(move || {
                    let session = format!("c{}", t % 3);
                    for n in 0..EACH {
                        let outcome =
                            bridge.submit(llm_call(&session, t * EACH + n, "gpt-4o"), EventContext::default());
                        assert!(
                            matches!(outcome, Outcome::Committed(None) | Outcome::TimedOut),
                            "{outcome:?}"
                        );
                    }
                });
            }
        });
        assert!(bridge.flush(Duration::from_secs(10)));
        let stats = bridge.stats();
        assert_eq!(stats.committed, (THREADS * EACH) as u64);
        assert!(stats.batches < stats.committed, "group commit happened: {stats:?}");
        let store = reader(dir.path());
        let total = (THREADS * EACH) as i64;
        assert_eq!(scalar::<i64>(&store, "SELECT SUM(llm_calls) FROM runs"), total);
        assert_eq!(scalar::<i64>(&store, "SELECT SUM(input_tokens) FROM runs"), total * 100);
        assert_eq!(scalar::<i64>(&store, "SELECT COUNT(*) FROM llm_calls"), total);
        let cost: f64 = scalar(&store, "SELECT SUM(cost_usd) FROM runs");
        let expected = total as f64 * (100.0 * 2.5 + 10.0 * 10.0) / 1e6;
        assert!((cost - expected).abs() < 1e-9, "{cost} vs {expected}");
    }

    struct BlockTools;

    impl Gate for BlockTools {
        fn verdict(&mut self, store: &Store, event: &HookEvent) -> Option<Verdict> {
            let Hook::PreToolCall(e) = &event.hook else { return None };
            // The gate sees the store including the event itself.
            let n: i64 = store.query_scalar("SELECT COUNT(*) FROM journal").ok()?;
            Some(Verdict::Block {
                message: format!("{} blocked after {n} events", e.tool.tool_name),
            })
        }
    }

    #[test]
    fn a_gate_gives_verdicts_for_gating_hooks_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bridge = Bridge::start_with_gate(config(dir.path()), Box::new(BlockTools));
        let pre = event(
            "pre_tool_call",
            json!({"session_id": "v", "tool_call_id": "c1", "tool_name": "terminal"}),
        );
        let outcome = bridge.submit(pre, EventContext::default());
        assert_eq!(
            outcome.verdict(),
            Some(&Verdict::Block {
                message: "terminal blocked after 1 events".into()
            })
        );
        let outcome = bridge.submit(llm_call("v", 1, "gpt-4o"), EventContext::default());
        assert_eq!(outcome, Outcome::Committed(None));
    }

    struct PanickingGate;

    impl Gate for PanickingGate {
        fn verdict(&mut self, _store: &Store, _event: &HookEvent) -> Option<Verdict> {
            panic!("gate panicked on purpose")
        }
    }

    #[test]
    fn a_panic_on_the_writer_fails_the_batch_and_the_writer_goes_on() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cfg = config(dir.path());
        // Printing the panic's backtrace can take longer than the default bound.
        cfg.hook_wait = Duration::from_secs(30);
        let bridge = Bridge::start_with_gate(cfg, Box::new(PanickingGate));
        let pre = event("pre_llm_call", json!({"session_id": "p", "turn_id": "p:t"}));
        assert_eq!(bridge.submit(pre, EventContext::default()), Outcome::Failed);
        assert!(bridge.has_messages());
        let messages = bridge.take_messages();
        assert_eq!(messages[0].event, "Writer.Panicked");
        assert!(messages[0].text.contains("gate panicked on purpose"), "{messages:?}");
        assert!(!bridge.has_messages());
        assert_eq!(
            bridge.submit(llm_call("p", 1, "gpt-4o"), EventContext::default()),
            Outcome::Committed(None)
        );
    }

    #[test]
    fn a_host_price_costs_models_no_table_knows() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bridge = Bridge::start(config(dir.path()));
        assert!(!bridge.needs_host_price("gpt-4o"), "the built-in table knows it");
        assert!(bridge.needs_host_price("mock-model"));
        assert!(!bridge.needs_host_price("mock-model"), "asked once per retry interval");
        bridge.set_host_price(
            "mock-model",
            ModelPrice {
                cache_read: Some(0.5),
                cache_write: Some(2.5),
                ..ModelPrice::flat(2.0, 8.0)
            },
        );
        assert!(!bridge.needs_host_price("mock-model"));
        assert_eq!(
            bridge.submit(llm_call("h", 1, "mock-model"), EventContext::default()),
            Outcome::Committed(None)
        );
        let store = reader(dir.path());
        let source: String = scalar(&store, "SELECT cost_source FROM llm_calls");
        let cost: f64 = scalar(&store, "SELECT cost_usd FROM llm_calls");
        assert_eq!(source, "host");
        assert!((cost - (100.0 * 2.0 + 10.0 * 8.0) / 1e6).abs() < 1e-12, "{cost}");
    }

    struct Flag(Arc<AtomicBool>);

    impl Background for Flag {
        fn shutdown(&mut self, _deadline: Instant) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_exporter_starts_once_and_stops_with_the_bridge() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bridge = Bridge::start(config(dir.path()));
        let stopped = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stopped);
        bridge.set_exporter_factory(Box::new(move |_cfg| Ok(Box::new(Flag(flag)) as Box<dyn Background>)));
        assert!(bridge.start_exporter());
        assert!(!bridge.start_exporter(), "started only once");
        bridge.shutdown(Duration::from_secs(5));
        assert!(stopped.load(Ordering::SeqCst));
        assert_eq!(
            bridge.submit(llm_call("x", 1, "gpt-4o"), EventContext::default()),
            Outcome::Disabled
        );
    }

    #[test]
    fn settings_come_from_the_environment_with_defaults() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| OsString::from(v))
        };
        let cfg = BridgeConfig::from_vars(vars(&[("HERMES_OTEL_HOME", "/s")]));
        assert_eq!(cfg.store_dir, PathBuf::from("/s"));
        assert_eq!(cfg.hook_wait, DEFAULT_HOOK_WAIT);
        assert_eq!(cfg.budget_mode, BudgetMode::Enforce);
        assert!(cfg.warnings.is_empty());
        let cfg = BridgeConfig::from_vars(vars(&[
            ("HERMES_OTEL_HOOK_WAIT_MS", "5"),
            ("HERMES_OTEL_BUDGET_MODE", "Observe"),
            ("HERMES_OTEL_TEST_PANIC", "post_tool_call"),
        ]));
        assert_eq!(cfg.hook_wait, Duration::from_millis(5));
        assert_eq!(cfg.budget_mode, BudgetMode::Observe);
        assert_eq!(cfg.test_panic_hook.as_deref(), Some("post_tool_call"));
        let cfg = BridgeConfig::from_vars(vars(&[
            ("HERMES_OTEL_HOOK_WAIT_MS", "soon"),
            ("HERMES_OTEL_BUDGET_MODE", "strict"),
        ]));
        assert_eq!(cfg.hook_wait, DEFAULT_HOOK_WAIT);
        assert_eq!(cfg.budget_mode, BudgetMode::Enforce);
        assert_eq!(cfg.warnings.len(), 2);
    }

    #[test]
    fn the_writer_closes_idle_runs_after_the_idle_time_the_exporter_uses() {
        // Both read HERMES_OTEL_IDLE_TIMEOUT_SECONDS; the writer used to keep
        // 900 s whatever it said, closing a run the exporter still waited on.
        for (value, want, warnings) in [
            ("3600", 3600.0, 0),
            ("later", crate::config::DEFAULT_IDLE_TIMEOUT_SECONDS, 1),
        ] {
            let var = |k: &str| (k == "HERMES_OTEL_IDLE_TIMEOUT_SECONDS").then(|| value.to_string());
            let bridge = BridgeConfig::from_vars(|k| var(k).map(OsString::from));
            let export = crate::export::config::ExportConfig::resolve(Default::default(), var);
            assert_eq!(bridge.idle_run_seconds, want, "{value}");
            assert_eq!(export.idle_timeout_seconds.value, want, "{value}");
            assert_eq!(bridge.warnings.len(), warnings, "{value}");
        }
    }
}
