//! The one export driver: the trace, metric and log export of one store,
//! over one connection to it, stepped and flushed the same way for every
//! caller (the export thread in a Hermes process, `export_task.rs`, and
//! `hermes-meter serve`).
//!
//! Owns: the store connection both signals work on (they are stepped by
//! one thread, one after the other, so one connection serves both), what
//! one step of the export loop does and in which order (close runs that
//! went idle when that is due, fold metrics and push them when the interval
//! is due, send one batch of spans or flush them), the flush of a stopping
//! exporter, and giving both leases up (on drop too). Must not touch: how a
//! caller waits between steps (the export thread's condition variable,
//! `serve`'s signals and `--drain`), Python, the journal.
//!
//! Each signal keeps its lease and its backoff in its own export (the
//! trace export of `mod.rs`, the metric export of `metrics.rs`, through
//! `pacing.rs`): the collector may take one signal and refuse the other,
//! and a trace batch must not wait out a metric push's backoff. One loop
//! for both, over one connection.

use std::time::{Duration, Instant};

use super::alert_thread::AlertThread;
use super::logs::{LogExport, LogStep};
use super::webhook::AlertPush;
use super::{ExportConfig, MetricExport, MetricStep, MetricsConfig, Step, TraceExport};
use crate::config::webhook::WebhookConfig;
use hermes_meter_model::digest::Every;
use hermes_meter_store::error::Result;
use hermes_meter_store::Outbox;

/// The most a flush keeps back from the span send for the log records and
/// the metric push after it (each gets a quarter of the flush's time, at
/// most this).
const FLUSH_RESERVE: Duration = Duration::from_millis(400);

/// A flush's deadlines for the spans and the log records: each leaves the
/// next a quarter of the time left (at most [`FLUSH_RESERVE`]), the metric
/// push coming last, by `flush` itself.
fn shares(flush: Option<Instant>) -> (Option<Instant>, Option<Instant>) {
    match flush {
        Some(deadline) => {
            let reserve = deadline
                .saturating_duration_since(Instant::now())
                .min(FLUSH_RESERVE * 4)
                / 4;
            (Some(deadline - reserve * 2), Some(deadline - reserve))
        }
        None => (None, None),
    }
}

/// The one store connection of an export loop, the trace and the metric
/// export stepped over it, and the idle closer's schedule.
#[derive(Debug)]
pub struct Driver {
    store: Outbox,
    traces: Option<TraceExport>,
    metrics: Option<MetricExport>,
    logs: Option<LogExport>,
    /// The alert webhook's thread, when `HERMES_METER_ALERT_WEBHOOK` is
    /// set: posts never hold up the signals (`alert_thread.rs`).
    alerts: Option<AlertThread>,
    /// The scheduled digests (`HERMES_METER_DIGEST`) and when they were
    /// last looked at.
    digests: Vec<Every>,
    last_digest_check: Option<Instant>,
    close_idle_every: Duration,
    last_idle_check: Option<Instant>,
}

/// How often a driver looks for a digest due: a period's digest leaves
/// within a minute of its end (or of the first process after it).
const DIGEST_CHECK_EVERY: Duration = Duration::from_secs(60);

/// The scheduled digests of the environment; a bad setting is logged once
/// and sends none.
fn digests() -> Vec<Every> {
    crate::config::digest::from_env().unwrap_or_else(|e| {
        tracing::warn!(target: "Digest.Config", "{e}: no digest is sent");
        Vec::new()
    })
}

/// What one [`Driver::step`] did, each part's outcome kept apart: the
/// export thread tells a failing trace send from the rest, `serve` stops
/// at the first error ([`Cycle::into_result`]).
#[derive(Debug)]
pub struct Cycle {
    /// Runs closed for going idle, when that was due this step.
    pub closed_idle: Option<Result<usize>>,
    /// The metric step, with a metric export.
    pub metrics: Option<Result<MetricStep>>,
    /// The trace step. Without a trace export, an empty step whose
    /// `leased` is the metric lease's, so a flush is still served or
    /// skipped by who holds a lease.
    pub traces: Result<Step>,
    /// The log step, with a log export (its failures never stop `serve`:
    /// the records wait in the store, and `status` shows the failure).
    pub logs: Option<Result<LogStep>>,
}

impl Cycle {
    /// The trace step, or the first error in the order the parts ran.
    pub fn into_result(self) -> Result<Step> {
        if let Some(Err(e)) = self.closed_idle {
            return Err(e);
        }
        if let Some(Err(e)) = self.metrics {
            return Err(e);
        }
        self.traces
    }

    /// The metric failure of this step, if any: an error of the store, or
    /// a push the collector did not accept.
    pub(crate) fn metric_error(&self) -> Option<String> {
        match &self.metrics {
            Some(Err(e)) => Some(e.to_string()),
            Some(Ok(step)) => step.error.clone(),
            None => None,
        }
    }
}

/// The alert webhook of the environment, if one is set; a bad setting is
/// logged once and posts nothing.
fn alert_push() -> Option<AlertPush> {
    match WebhookConfig::from_env() {
        Ok(config) => config.map(AlertPush::new),
        Err(e) => {
            tracing::warn!(target: "AlertPush.Config", "{e}: no alert is posted");
            None
        }
    }
}

impl Driver {
    /// Drives the trace export with `traces`, the metric export with
    /// `metrics` and the log export with `logs` (any may be absent) over
    /// `store`, all sending on one runtime, closing idle runs at most every
    /// `close_idle_every`.
    pub fn new(
        store: Outbox,
        traces: Option<ExportConfig>,
        metrics: Option<MetricsConfig>,
        logs: Option<ExportConfig>,
        close_idle_every: Duration,
    ) -> Result<Self> {
        let runtime = super::send_runtime("export")?;
        let traces = traces
            .map(|config| TraceExport::new(config, runtime.clone()))
            .transpose()?;
        let logs = logs.map(|config| LogExport::new(config, runtime.clone())).transpose()?;
        let metrics = metrics
            .map(|config| MetricExport::new(config, &store, runtime))
            .transpose()?;
        let alerts = alert_push().and_then(|push| AlertThread::start(push, store.path().to_path_buf()));
        Ok(Driver {
            store,
            traces,
            metrics,
            logs,
            alerts,
            digests: digests(),
            last_digest_check: None,
            close_idle_every,
            last_idle_check: None,
        })
    }

    /// The driver a Hermes process runs over the store at `store_path`, on
    /// a connection of its own: traces when trace export is enabled,
    /// metrics when they are pushed (serving Prometheus is `serve`'s job),
    /// logs when they are sent. `None` when none is (and no alert webhook
    /// is set).
    pub fn open(
        store_path: &std::path::Path,
        traces: ExportConfig,
        metrics: MetricsConfig,
        logs: ExportConfig,
        close_idle_every: Duration,
    ) -> Result<Option<Self>> {
        if !traces.enabled()
            && !metrics.pushes()
            && !logs.enabled()
            && !matches!(WebhookConfig::from_env(), Ok(Some(_)))
            // A bad setting is said once, by the driver that reads it.
            && !crate::config::digest::from_env().is_ok_and(|d| !d.is_empty())
        {
            return Ok(None);
        }
        let traces = traces.enabled().then_some(traces);
        let metrics = metrics.pushes().then_some(metrics);
        let logs = logs.enabled().then_some(logs);
        Driver::new(Outbox::open(store_path)?, traces, metrics, logs, close_idle_every).map(Some)
    }

    /// The store both exports work on.
    pub fn store(&self) -> &Outbox {
        &self.store
    }

    /// One step of the export loop: close idle runs when due, fold metrics
    /// and push them when their interval is due, then send one batch of
    /// spans; or, with `flush` (a process ending, or a caller waiting for
    /// what it recorded to leave), every ready batch of spans and log
    /// records, then the metric series folded since the last push, by that
    /// deadline.
    pub fn step(&mut self, flush: Option<Instant>) -> Cycle {
        if flush.is_none() {
            self.raise_digests();
        }
        let store = &mut self.store;
        let closed_idle = match self.traces.as_ref() {
            Some(e)
                if self
                    .last_idle_check
                    .is_none_or(|t| t.elapsed() >= self.close_idle_every) =>
            {
                self.last_idle_check = Some(Instant::now());
                Some(e.close_idle(store))
            }
            _ => None,
        };
        // A flush (a process's exit) sends the spans, then the log
        // records, then pushes the metric series this process counted, each
        // leaving the next its share of the time: a run shorter than the
        // metric interval must not end with its series unsent.
        let (span_deadline, log_deadline) = shares(flush);
        let metrics = match flush {
            Some(_) => None,
            None => self.metrics.as_mut().map(|m| m.run_once(store)),
        };
        let traces = match (self.traces.as_mut(), span_deadline) {
            (Some(e), Some(deadline)) => e.flush(store, deadline),
            (Some(e), None) => e.run_once(store),
            (None, _) => Ok(Step {
                leased: metrics.as_ref().is_some_and(|s| s.as_ref().is_ok_and(|s| s.leased)),
                ..Step::default()
            }),
        };
        let logs = match (self.logs.as_mut(), log_deadline) {
            (Some(l), Some(deadline)) => Some(l.flush(store, deadline)),
            (Some(l), None) => Some(l.run_once(store)),
            (None, _) => None,
        };
        let metrics = match flush {
            Some(deadline) => self.metrics.as_mut().map(|m| m.exit_push(store, deadline)),
            None => metrics,
        };
        Cycle {
            closed_idle,
            metrics,
            traces,
            logs,
        }
    }

    /// Raises the scheduled digests due, at most once a minute; a failure
    /// is logged and tried again at the next check (nothing is raised
    /// twice: each period is claimed in the store).
    fn raise_digests(&mut self) {
        if self.digests.is_empty() || self.last_digest_check.is_some_and(|t| t.elapsed() < DIGEST_CHECK_EVERY) {
            return;
        }
        self.last_digest_check = Some(Instant::now());
        let dir = self
            .store
            .path()
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .to_path_buf();
        if let Err(e) = crate::digest::raise_due(&self.store, &dir, &self.digests, hermes_meter_store::unix_now()) {
            tracing::warn!(target: "Digest.Failed", "the scheduled digest was not raised: {e}");
        }
    }

    /// Folds every metric and pushes now if this process holds the metric
    /// lease, retrying until `deadline` (`serve --drain`'s last push).
    pub fn flush_metrics(&mut self, deadline: Instant) -> Result<()> {
        match self.metrics.as_mut() {
            Some(m) => m.flush(&mut self.store, deadline).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Stops: with `flush`, sends the spans, then the log records, that
    /// are ready until that deadline (a stopping process's last chance;
    /// what is left stays in the store for the next exporter), then gives
    /// every lease up, so another process takes over at once. Returns the
    /// first error, having tried every part.
    pub fn stop(&mut self, flush: Option<Instant>) -> Result<()> {
        let (span_deadline, log_deadline) = shares(flush);
        let flushed = match (span_deadline, self.traces.as_mut()) {
            (Some(deadline), Some(e)) => e.flush(&mut self.store, deadline).map(|_| ()),
            _ => Ok(()),
        };
        let logs = match (log_deadline, self.logs.as_mut()) {
            (Some(deadline), Some(l)) => l.flush(&mut self.store, deadline).map(|_| ()),
            _ => Ok(()),
        };
        let metrics = match (flush, self.metrics.as_mut()) {
            (Some(deadline), Some(m)) => m.exit_push(&mut self.store, deadline).map(|_| ()),
            _ => Ok(()),
        };
        // The alerts this process raised go to the webhook before it ends,
        // with the time the signals left (their thread posts them).
        if let Some(a) = self.alerts.as_mut() {
            a.stop(flush);
        }
        flushed.and(logs).and(metrics).and(self.release())
    }

    /// Gives every lease up (also done on drop), the metric lease first.
    /// Returns the first error, having tried each.
    fn release(&mut self) -> Result<()> {
        let store = &mut self.store;
        let metrics = self.metrics.as_ref().map_or(Ok(()), |m| m.release(store));
        let traces = self.traces.as_ref().map_or(Ok(()), |e| e.release(store));
        let logs = self.logs.as_ref().map_or(Ok(()), |l| l.release(store));
        metrics.and(traces).and(logs)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::export::env;
    use hermes_meter_store::error::Error;
    use hermes_meter_store::{LOG_LEASE, METRIC_LEASE, TRACE_LEASE};

    /// Trace, metric and log settings with every signal sent as `exporter`
    /// (`console`, `none`), and nothing else set.
    fn settings(exporter: &str) -> (ExportConfig, MetricsConfig, ExportConfig) {
        let var = |name: &str| {
            [env::TRACES_EXPORTER, env::METRICS_EXPORTER, env::LOGS_EXPORTER]
                .contains(&name)
                .then(|| exporter.into())
        };
        (
            ExportConfig::resolve(Default::default(), var),
            MetricsConfig::resolve(Default::default(), Default::default(), var),
            ExportConfig::resolve_logs(Default::default(), var),
        )
    }

    #[test]
    fn a_driver_steps_every_signal_and_gives_every_lease_up_when_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(hermes_meter_store::DB_FILE_NAME);
        let (traces, metrics, logs) = settings("console");
        let mut driver = Driver::open(&path, traces, metrics, logs, Duration::from_secs(60))
            .expect("open")
            .expect("every signal is sent");
        let cycle = driver.step(None);
        assert!(cycle.closed_idle.is_some_and(|closed| closed.is_ok()));
        assert!(cycle.metrics.is_some_and(|m| m.is_ok_and(|m| m.leased)));
        assert!(cycle.traces.is_ok_and(|t| t.leased));
        assert!(cycle.logs.is_some_and(|l| l.is_ok_and(|l| l.leased)));
        let other = Outbox::open(&path).expect("another connection");
        for lease in [TRACE_LEASE, METRIC_LEASE, LOG_LEASE] {
            assert!(other.lease(lease).expect("lease").is_some(), "{lease} is held");
        }
        drop(driver);
        for lease in [TRACE_LEASE, METRIC_LEASE, LOG_LEASE] {
            assert!(other.lease(lease).expect("lease").is_none(), "{lease} is given up");
        }
    }

    #[test]
    fn no_driver_runs_when_neither_signal_is_sent() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (traces, metrics, logs) = settings("none");
        let path = dir.path().join(hermes_meter_store::DB_FILE_NAME);
        let driver = Driver::open(&path, traces, metrics, logs, Duration::from_secs(60)).expect("open");
        assert!(driver.is_none());
        assert!(!path.exists(), "no store is opened for nothing to send");
    }

    #[test]
    fn a_cycle_fails_with_its_first_error_in_the_order_the_parts_ran() {
        fn failed<T>(what: &str) -> Result<T> {
            Err(Error::Other(what.into()))
        }
        let cycle = Cycle {
            closed_idle: Some(failed("idle")),
            metrics: Some(failed("metrics")),
            traces: failed("traces"),
            logs: Some(failed("logs")),
        };
        assert_eq!(cycle.into_result().map_err(|e| e.to_string()), Err("idle".into()));
        let cycle = Cycle {
            closed_idle: Some(Ok(0)),
            metrics: Some(failed("metrics")),
            traces: Ok(Step::default()),
            logs: None,
        };
        assert_eq!(cycle.metric_error().as_deref(), Some("metrics"));
        assert_eq!(cycle.into_result().map_err(|e| e.to_string()), Err("metrics".into()));
        let cycle = Cycle {
            closed_idle: None,
            metrics: Some(Ok(MetricStep {
                error: Some("refused".into()),
                ..MetricStep::default()
            })),
            traces: Ok(Step::default()),
            logs: None,
        };
        assert_eq!(cycle.metric_error().as_deref(), Some("refused"));
        assert_eq!(cycle.into_result().map_err(|e| e.to_string()), Ok(Step::default()));
    }
}
