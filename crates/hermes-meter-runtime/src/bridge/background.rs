//! The background task the bridge owns besides the writer (the exporter):
//! installed as a factory, started lazily by the first hook, flushed at
//! exit, stopped with the bridge.
//!
//! Owns: the exporter slot. Must not touch: what the task does (see
//! `export_task.rs`), Python.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Bridge, BridgeConfig, State};
use crate::lock;
use hermes_meter_store::error::{Error, Result};

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

    /// The process is ending: send what is left by `deadline` and give up
    /// what the task holds for the store (its leases), so the next process
    /// takes over at once. Returns whether it finished in time.
    fn exit(&mut self, deadline: Instant) -> bool {
        let flushed = self.flush(deadline);
        self.shutdown(deadline);
        flushed
    }
}

/// Starts the background thread `name` (export, fleet sync).
pub(crate) fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .map_err(|e| Error::Other(format!("cannot start the thread {name}: {e}")))
}

/// Joins a background thread that was told to stop, if it ends by
/// `deadline`; else leaves it (it holds nothing a later process needs).
pub(crate) fn join_until(handle: JoinHandle<()>, deadline: Instant) {
    while !handle.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    if handle.is_finished() {
        let _ = handle.join();
    }
}

/// Starts the exporter; see [`Bridge::start_exporter`].
pub(crate) type ExporterFactory = Box<dyn FnOnce(&BridgeConfig) -> Result<Box<dyn Background>> + Send>;

pub(super) enum ExporterSlot {
    NotStarted(Option<ExporterFactory>),
    Started(Option<Box<dyn Background>>),
}

impl Bridge {
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

    /// The exporter's part of a process exit: what is ready leaves by
    /// `deadline` (spans, log records, the metric series this process
    /// counted), then the exporter stops and gives its leases up, so the
    /// next process (a cron job's next run, `--resume`) exports at once.
    /// Hooks after this record but export nothing more in this process.
    pub fn exit_exporter(&self, deadline: Instant) -> bool {
        let State::Running(run) = &self.state else {
            return true;
        };
        let mut slot = lock(&run.exporter);
        let ExporterSlot::Started(started) = &mut *slot else {
            return true;
        };
        match started.take() {
            Some(mut task) => task.exit(deadline),
            None => true,
        }
    }
}
