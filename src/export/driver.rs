//! The one export driver: the trace and the metric exporter of one store,
//! stepped and flushed the same way for every caller (the export thread in
//! a Hermes process, `export_task.rs`, and `hermes-otel serve`).
//!
//! Owns: what one step of the export loop does and in which order (close
//! runs that went idle when that is due, fold metrics and push them when
//! the interval is due, send one batch of spans or flush them), the flush
//! of a stopping exporter, and giving both leases up. Must not touch: how a
//! caller waits between steps (the export thread's condition variable,
//! `serve`'s signals and `--drain`), Python, the journal.
//!
//! Each signal keeps its lease and its backoff in its own exporter
//! ([`Exporter`], [`MetricExporter`], through `pacing.rs`): the collector
//! may take one signal and refuse the other, and a trace batch must not
//! wait out a metric push's backoff. Until issue 14 both callers wrote this
//! loop out, each its own way.

use std::time::{Duration, Instant};

use super::{ExportConfig, Exporter, MetricExporter, MetricStep, MetricsConfig, Step};
use crate::error::Result;
use crate::store::Store;

/// The exporters of one store and the idle closer's schedule.
#[derive(Debug)]
pub struct Driver {
    traces: Option<Exporter>,
    metrics: Option<MetricExporter>,
    close_idle_every: Duration,
    last_idle_check: Option<Instant>,
}

/// What one [`Driver::step`] did, each part's outcome kept apart: the
/// export thread tells a failing trace send from the rest, `serve` stops
/// at the first error ([`Cycle::into_result`]).
#[derive(Debug)]
pub struct Cycle {
    /// Runs closed for going idle, when that was due this step.
    pub closed_idle: Option<Result<usize>>,
    /// The metric step, with a metric exporter.
    pub metrics: Option<Result<MetricStep>>,
    /// The trace step. Without a trace exporter, an empty step whose
    /// `leased` is the metric lease's, so a flush is still served or
    /// skipped by who holds a lease.
    pub traces: Result<Step>,
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
    pub fn metric_error(&self) -> Option<String> {
        match &self.metrics {
            Some(Err(e)) => Some(e.to_string()),
            Some(Ok(step)) => step.error.clone(),
            None => None,
        }
    }
}

impl Driver {
    /// Drives `traces` and `metrics` (either may be absent), closing idle
    /// runs at most every `close_idle_every`.
    pub fn new(traces: Option<Exporter>, metrics: Option<MetricExporter>, close_idle_every: Duration) -> Self {
        Driver {
            traces,
            metrics,
            close_idle_every,
            last_idle_check: None,
        }
    }

    /// The exporters a Hermes process runs over the store at `store_path`,
    /// each on its own connection and both on one runtime: traces when
    /// trace export is enabled, metrics when they are pushed (serving
    /// Prometheus is `serve`'s job). `None` when neither is.
    pub fn open(
        store_path: &std::path::Path,
        traces: ExportConfig,
        metrics: MetricsConfig,
        close_idle_every: Duration,
    ) -> Result<Option<Self>> {
        if !traces.enabled() && !metrics.pushes() {
            return Ok(None);
        }
        let runtime = super::send_runtime("export")?;
        let traces = match traces.enabled() {
            true => Some(Exporter::with_store_on(
                traces,
                Store::open(store_path)?,
                runtime.clone(),
            )?),
            false => None,
        };
        let metrics = match metrics.pushes() {
            true => Some(MetricExporter::with_store_on(
                metrics,
                Store::open(store_path)?,
                runtime,
            )?),
            false => None,
        };
        Ok((traces.is_some() || metrics.is_some()).then(|| Driver::new(traces, metrics, close_idle_every)))
    }

    /// The trace exporter, if there is one.
    pub fn traces(&self) -> Option<&Exporter> {
        self.traces.as_ref()
    }

    /// One step of the export loop: close idle runs when due, fold metrics
    /// (and push them when their interval is due, flush or not: a session
    /// end every turn must not mean a push every turn), then send one batch
    /// of spans, or, with `flush`, every ready batch until that deadline.
    pub fn step(&mut self, flush: Option<Instant>) -> Cycle {
        let closed_idle = match self.traces.as_mut() {
            Some(e)
                if self
                    .last_idle_check
                    .is_none_or(|t| t.elapsed() >= self.close_idle_every) =>
            {
                self.last_idle_check = Some(Instant::now());
                Some(e.close_idle())
            }
            _ => None,
        };
        let metrics = self.metrics.as_mut().map(|m| m.run_once());
        let traces = match (self.traces.as_mut(), flush) {
            (Some(e), Some(deadline)) => e.flush(deadline),
            (Some(e), None) => e.run_once(),
            (None, _) => Ok(Step {
                leased: metrics.as_ref().is_some_and(|s| s.as_ref().is_ok_and(|s| s.leased)),
                ..Step::default()
            }),
        };
        Cycle {
            closed_idle,
            metrics,
            traces,
        }
    }

    /// Folds every metric and pushes now if this process holds the metric
    /// lease, retrying until `deadline` (`serve --drain`'s last push).
    pub fn flush_metrics(&mut self, deadline: Instant) -> Result<()> {
        match self.metrics.as_mut() {
            Some(m) => m.flush(deadline).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Stops: with `flush`, sends the spans that are ready until that
    /// deadline (a stopping process's last chance; what is left stays in
    /// the outbox for the next exporter), then gives both leases up, so
    /// another process takes over at once. Returns the first error, having
    /// tried every part.
    pub fn stop(&mut self, flush: Option<Instant>) -> Result<()> {
        let flushed = match (flush, self.traces.as_mut()) {
            (Some(deadline), Some(e)) => e.flush(deadline).map(|_| ()),
            _ => Ok(()),
        };
        let metrics = self.metrics.as_mut().map_or(Ok(()), MetricExporter::release);
        let traces = self.traces.as_mut().map_or(Ok(()), Exporter::release);
        flushed.and(metrics).and(traces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn a_cycle_fails_with_its_first_error_in_the_order_the_parts_ran() {
        fn failed<T>(what: &str) -> Result<T> {
            Err(Error::Other(what.into()))
        }
        let cycle = Cycle {
            closed_idle: Some(failed("idle")),
            metrics: Some(failed("metrics")),
            traces: failed("traces"),
        };
        assert_eq!(cycle.into_result().map_err(|e| e.to_string()), Err("idle".into()));
        let cycle = Cycle {
            closed_idle: Some(Ok(0)),
            metrics: Some(failed("metrics")),
            traces: Ok(Step::default()),
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
        };
        assert_eq!(cycle.metric_error().as_deref(), Some("refused"));
        assert_eq!(cycle.into_result().map_err(|e| e.to_string()), Ok(Step::default()));
    }
}
