//! Logging from a Hermes process: our `tracing` events and the writer's
//! messages, passed to Python's `logging.getLogger("hermes_meter")` from a
//! thread that holds the GIL anyway, rate-limited per event.
//!
//! Owns: the queue of core events waiting for the GIL, the subscriber that
//! fills it, and the rate limit. Must not touch: the GIL from a thread of
//! ours (only a hook or `flush` drains the queue), the store.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use hermes_meter_runtime::bridge::Bridge;

/// The logger every line of ours goes to.
pub(super) const LOGGER: &str = "hermes_meter";

/// The same problem is logged at most once per this interval; the lines in
/// between are counted and the count goes with the next one.
const LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Python's `logging` levels.
pub(super) const INFO: i32 = 20;
pub(super) const WARNING: i32 = 30;
pub(super) const ERROR: i32 = 40;

/// Log events of the core (`tracing`, e.g. `Export.Failed` from the export
/// thread) waiting for a thread holding the GIL to pass them to `logging`.
/// Taking the GIL from the export thread could stall it behind Hermes, so
/// the next hook call (or `flush`) drains this instead.
static TRACING_QUEUE: Mutex<Vec<(i32, &'static str, String)>> = Mutex::new(Vec::new());

/// Most events kept in [`TRACING_QUEUE`]; later ones are dropped (the rate
/// limiter would suppress them anyway).
const TRACING_QUEUE_MAX: usize = 256;

/// Whether [`TRACING_QUEUE`] holds anything: the hook path checks this
/// instead of taking the lock.
static TRACING_WAITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The `tracing` subscriber of a Hermes process: every event at `info` or
/// above goes to Python's `logging` logger [`LOGGER`], named by its target
/// (`Export.Failed: ...`), through [`log`]'s rate limit.
struct PythonLogLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PythonLogLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                use std::fmt::Write as _;
                if field.name() == "message" {
                    let _ = write!(self.0, "{value:?}");
                } else {
                    let _ = write!(self.0, " {}={value:?}", field.name());
                }
            }
        }
        let meta = event.metadata();
        let level = match *meta.level() {
            tracing::Level::ERROR => ERROR,
            tracing::Level::WARN => WARNING,
            _ => INFO,
        };
        let mut text = Text(String::new());
        event.record(&mut text);
        let mut queue = TRACING_QUEUE.lock().unwrap_or_else(|p| p.into_inner());
        if queue.len() < TRACING_QUEUE_MAX {
            queue.push((level, meta.target(), text.0.trim().to_string()));
            TRACING_WAITING.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

/// Makes [`PythonLogLayer`] the process's subscriber, unless the host
/// already installed one (then events go there).
pub(super) fn install_log_layer() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::Layer as _;
    let subscriber =
        tracing_subscriber::registry().with(PythonLogLayer.with_filter(tracing_subscriber::filter::LevelFilter::INFO));
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Passes queued `tracing` events to `logging` (rate-limited per event).
pub(super) fn log_tracing_events(py: Python<'_>) {
    if !TRACING_WAITING.swap(false, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let events = std::mem::take(&mut *TRACING_QUEUE.lock().unwrap_or_else(|p| p.into_inner()));
    for (level, target, text) in events {
        log(py, level, target, text);
    }
}

/// Logs what the writer left for us: recoveries as warnings (worth
/// knowing, nothing to do), everything else as errors.
pub(super) fn log_messages(py: Python<'_>, bridge: &Bridge) {
    log_tracing_events(py);
    if !bridge.has_messages() {
        return;
    }
    for m in bridge.take_messages() {
        // Recoveries and calls the decoder could not use are worth knowing
        // but need nothing done; everything else is an error (events lost
        // at exit, `Exit.EventsLost`, among them).
        // Events left in the spool are recorded by the next process.
        let level = if m.event.ends_with("Recovered")
            || m.event == "Decode.Unusable"
            || m.event == hermes_meter_runtime::bridge::EXIT_LEFT_IN_SPOOL
        {
            WARNING
        } else {
            ERROR
        };
        log(py, level, m.event, m.text);
    }
}

/// Per-event rate limiting of log lines: (last logged, suppressed since).
static LOG_STATE: Mutex<Option<HashMap<&'static str, (Instant, u64)>>> = Mutex::new(None);

/// Logs `text` through `logging.getLogger("hermes_meter")`, at most once per
/// [`LOG_INTERVAL`] per event. Never raises, never panics.
pub(super) fn log(py: Python<'_>, level: i32, event: &'static str, text: String) {
    let suppressed = {
        let mut state = LOG_STATE.lock().unwrap_or_else(|p| p.into_inner());
        let map = state.get_or_insert_with(HashMap::new);
        let now = Instant::now();
        match map.get_mut(event) {
            Some((last, count)) if now.duration_since(*last) < LOG_INTERVAL => {
                *count += 1;
                return;
            }
            Some((last, count)) => {
                let n = *count;
                *last = now;
                *count = 0;
                n
            }
            None => {
                map.insert(event, (now, 0));
                0
            }
        }
    };
    let line = if suppressed > 0 {
        format!("{event}: {text} ({suppressed} similar lines suppressed)")
    } else {
        format!("{event}: {text}")
    };
    let _ = py
        .import("logging")
        .and_then(|m| m.getattr("getLogger")?.call1((LOGGER,)))
        .and_then(|logger| logger.call_method1("log", (level, line)));
}
