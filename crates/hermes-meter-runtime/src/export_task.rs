//! The exporter inside a Hermes process: a background thread that sends
//! what the store's outbox holds (spans) and the metric series folded from
//! the ledger, for whichever process holds each lease.
//!
//! Owns: the thread, its pacing, and the bounded flush the exit flush asks
//! for. Must not touch: Python, the hook path (a hook at most waits on a
//! condition variable, with a deadline, never on a socket).
//!
//! The thread steps the export driver ([`Driver`], shared with
//! `hermes-meter serve`): it polls the outbox every [`POLL`], sends while
//! batches are ready, closes idle runs every [`CLOSE_IDLE_EVERY`], and
//! backs off as the exporters say. [`ExportTask::flush`] (through the
//! bridge that owns the task, [`crate::bridge::Bridge::flush_exporter`])
//! lets the exit flush wait, up to a bound, for what is ready to be sent:
//! one-shot `hermes -z` and cron processes end with `os._exit` right after,
//! and what they leave stays in the outbox for the next exporter
//! (`hermes-meter serve`, or the next Hermes process). It does not wait at
//! all while the collector is failing, so a collector outage never slows
//! an exit down.

use crate::lock;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::bridge::{join_until, spawn, Background};
use crate::export::{Driver, ExportConfig, MetricsConfig};
use hermes_meter_store::error::Result;
use hermes_meter_store::DB_FILE_NAME;

/// How often the outbox is looked at when nothing was ready.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// How often runs that went idle without ending are closed.
pub const CLOSE_IDLE_EVERY: Duration = Duration::from_secs(60);

struct State {
    stop: bool,
    /// Flush requests not served yet (their deadline).
    flush_until: Option<Instant>,
    /// Bumped each time the thread finished a flush request.
    flushes_done: u64,
    /// The last send failed (the collector is down or refusing).
    failing: bool,
    /// This process holds the export lease.
    leased: bool,
    /// The last error, for status and logs.
    last_error: Option<String>,
    /// When the step running now began, if one is.
    stepping_since: Option<Instant>,
    /// A flush that gave up on a step stuck in a send was logged.
    stuck_logged: bool,
}

impl Default for State {
    fn default() -> Self {
        State {
            stop: false,
            flush_until: None,
            flushes_done: 0,
            failing: false,
            // Until the first step says otherwise: a flush asked for before
            // it must be served, not skipped.
            leased: true,
            last_error: None,
            stepping_since: None,
            stuck_logged: false,
        }
    }
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    done: Condvar,
}

/// The running export thread of this process.
pub struct ExportTask {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl ExportTask {
    /// Starts the export thread over the store in `store_dir` with the
    /// resolved settings (the bridge's: [`BridgeConfig::export`] and
    /// [`BridgeConfig::metrics`]). With both traces and metrics disabled
    /// there is no thread.
    ///
    /// [`BridgeConfig::export`]: crate::bridge::BridgeConfig::export
    /// [`BridgeConfig::metrics`]: crate::bridge::BridgeConfig::metrics
    pub fn start(
        store_dir: &Path,
        config: ExportConfig,
        metrics_config: MetricsConfig,
        logs_config: ExportConfig,
    ) -> Result<Option<Self>> {
        // Metric series are pushed by the lease holder every export
        // interval; a Prometheus endpoint is `hermes-meter serve`'s job.
        let path = store_dir.join(DB_FILE_NAME);
        let Some(driver) = Driver::open(&path, config, metrics_config, logs_config, CLOSE_IDLE_EVERY)? else {
            return Ok(None);
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let handle = spawn("hermes-meter-export", move || run(driver, &thread_shared))?;

        Ok(Some(ExportTask {
            shared,
            handle: Some(handle),
        }))
    }

    /// Asks the thread to send what is ready and waits until it did or
    /// `deadline` passes. Returns at once while the collector is failing or
    /// another process holds the lease. Returns whether the flush finished.
    pub fn flush(&self, deadline: Instant) -> bool {
        flush_shared(&self.shared, deadline)
    }
}

fn flush_shared(shared: &Shared, deadline: Instant) -> bool {
    let mut state = lock(&shared.state);
    if state.stop || state.failing || !state.leased {
        return false;
    }
    let asked_at = Instant::now();
    let target = state.flushes_done + 1;
    state.flush_until = Some(state.flush_until.map_or(deadline, |d| d.max(deadline)));
    shared.wake.notify_one();
    while state.flushes_done < target {
        let now = Instant::now();
        if now >= deadline {
            log_stuck_step(&mut state, asked_at);
            return false;
        }
        state = match shared.done.wait_timeout(state, deadline - now) {
            Ok((s, _)) => s,
            Err(p) => p.into_inner().0,
        };
    }
    true
}

/// Logs, once per process, a flush that gave up because the step begun
/// before it was asked for is still waiting: a collector that takes the
/// connection and never answers holds a send until the export timeout,
/// and the process is about to end before that. `status` shows the
/// attempt as failed once its timeout passed (`Outbox::export_attempt`).
fn log_stuck_step(state: &mut State, asked_at: Instant) {
    let Some(since) = state.stepping_since.filter(|t| *t <= asked_at) else {
        return;
    };
    if std::mem::replace(&mut state.stuck_logged, true) {
        return;
    }
    let waited_ms = since.elapsed().as_millis() as u64;
    tracing::warn!(
        target: "Export.Failed",
        waited_ms,
        "traces: an export attempt has had no answer from the collector for {waited_ms} ms: is it hung? \
         What it carried stays in the outbox for the next exporter; nothing is lost"
    );
}

fn run(mut driver: Driver, shared: &Shared) {
    let mut wait = Duration::ZERO;
    loop {
        let flush_until = {
            let mut state = lock(&shared.state);
            if !state.stop && state.flush_until.is_none() && !wait.is_zero() {
                state = match shared.wake.wait_timeout(state, wait) {
                    Ok((s, _)) => s,
                    Err(p) => p.into_inner().0,
                };
            }
            if state.stop {
                break;
            }
            state.stepping_since = Some(Instant::now());
            state.flush_until.take()
        };
        // Closing idle runs failing is retried at its next turn; metric
        // failures are shown, but only the trace send says whether the
        // collector is failing (what lets an exit flush skip waiting).
        let cycle = driver.step(flush_until);
        let mut state = lock(&shared.state);
        state.stepping_since = None;
        if let Some(e) = cycle.metric_error() {
            state.last_error = Some(e);
        }
        match cycle.traces {
            Ok(step) => {
                state.leased = step.leased;
                state.failing = step.error.is_some();
                if step.error.is_some() {
                    state.last_error = step.error;
                }
                wait = if step.more && step.backing_off.is_none() {
                    Duration::ZERO
                } else {
                    step.backing_off.unwrap_or(POLL).min(POLL * 20)
                };
            }
            Err(e) => {
                state.failing = true;
                state.last_error = Some(e.to_string());
                wait = POLL * 4;
            }
        }
        if flush_until.is_some() {
            state.flushes_done += 1;
            shared.done.notify_all();
        }
    }
    // Last chance for whatever is ready, bounded by the shutdown deadline.
    let deadline = lock(&shared.state).flush_until.take();
    let _ = driver.stop(deadline);
    let mut state = lock(&shared.state);
    state.flushes_done += 1;
    shared.done.notify_all();
}

impl Background for ExportTask {
    fn flush(&self, deadline: Instant) -> bool {
        flush_shared(&self.shared, deadline)
    }

    fn shutdown(&mut self, deadline: Instant) {
        {
            let mut state = lock(&self.shared.state);
            state.stop = true;
            state.flush_until = Some(deadline);
        }
        self.shared.wake.notify_one();
        if let Some(handle) = self.handle.take() {
            join_until(handle, deadline);
        }
    }

    /// The stop is the exit: the thread's last step sends what is ready
    /// (spans, log records, then the metric series this process counted)
    /// and gives the leases up (`Driver::stop`).
    fn exit(&mut self, deadline: Instant) -> bool {
        self.shutdown(deadline);
        true
    }
}

impl Drop for ExportTask {
    fn drop(&mut self) {
        self.shutdown(Instant::now() + Duration::from_millis(200));
    }
}

/// What runs when trace export is disabled: nothing.
#[derive(Debug)]
pub struct Disabled;

impl Background for Disabled {
    fn shutdown(&mut self, _deadline: Instant) {}
}

/// The export thread and the fleet sync thread of one process, which
/// start and stop together.
struct WithFleet {
    export: Box<dyn Background>,
    fleet: crate::fleet::task::FleetTask,
}

impl Background for WithFleet {
    /// The spans, then this process's spend to the fleet, by one deadline.
    fn flush(&self, deadline: Instant) -> bool {
        let exported = self.export.flush(deadline);
        self.fleet.flush(deadline) && exported
    }

    /// The exporter's exit, then this process's spend to the fleet.
    fn exit(&mut self, deadline: Instant) -> bool {
        let exported = self.export.exit(deadline);
        let pushed = self.fleet.flush(deadline);
        self.fleet.shutdown(deadline);
        exported && pushed
    }

    fn shutdown(&mut self, deadline: Instant) {
        self.export.shutdown(deadline);
        self.fleet.shutdown(deadline);
    }
}

/// The bridge's exporter factory: the export thread over the bridge's
/// store, and the fleet sync when `HERMES_METER_FLEET_URL` is set.
pub fn factory(config: &crate::bridge::BridgeConfig) -> Result<Box<dyn Background>> {
    let started = ExportTask::start(
        &config.store_dir,
        config.export.clone(),
        config.metrics.clone(),
        config.logs.clone(),
    )?;
    let export: Box<dyn Background> = match started {
        Some(task) => Box::new(task),
        None => Box::new(Disabled),
    };
    Ok(match crate::fleet::task::FleetTask::start_from_env(&config.store_dir) {
        Ok(Some(fleet)) => Box::new(WithFleet { export, fleet }),
        Ok(None) => export,
        Err(e) => {
            // Budgets stay local; the exporter runs regardless.
            tracing::warn!(target: "Fleet.StartFailed", "fleet budgets are off in this process: {e}");
            export
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a subscriber on this thread wrote, as text.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_flush_that_gives_up_on_a_send_with_no_answer_logs_export_failed_once() {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let asked_at = Instant::now();
            let mut state = State::default();
            log_stuck_step(&mut state, asked_at);
            assert!(!state.stuck_logged, "no step was running: nothing to say");
            state.stepping_since = Some(asked_at - Duration::from_millis(5));
            log_stuck_step(&mut state, asked_at);
            log_stuck_step(&mut state, asked_at);
        });
        let text = String::from_utf8(lock(&captured.0).clone()).expect("utf-8");
        assert_eq!(text.matches("Export.Failed").count(), 1, "{text}");
        assert!(
            text.contains("WARN") && text.contains("no answer from the collector"),
            "{text}"
        );
    }
}
