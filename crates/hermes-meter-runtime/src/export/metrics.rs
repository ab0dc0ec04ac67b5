//! The metric exporter: folds finished ledger rows into the store's
//! cumulative series, and sends them over OTLP (or prints them).
//!
//! Owns: the metric lease and the push schedule. Receives its settings
//! resolved ([`MetricsConfig`], from `config/metrics.rs`). Shares the
//! transports, retry classification, the lease holder and the backoff
//! (`pacing.rs`) with the trace exporter. Like the trace export, the
//! metric export itself (`MetricExport`) holds no store connection: each
//! call is handed one (the export driver's, shared with the trace export);
//! [`MetricExporter`] is it with a connection of its own.
//! Must not touch: the journal, the ledger, the environment.
//!
//! # Use
//!
//! ```no_run
//! # fn main() -> hermes_meter_store::Result<()> {
//! use hermes_meter_runtime::export::{ExportOverrides, MetricExporter, MetricsConfig};
//! let config = MetricsConfig::from_env(ExportOverrides::default());
//! let mut metrics = MetricExporter::new(config, std::path::Path::new("/tmp/hermes-meter.db"))?;
//! metrics.run_once()?; // fold; push if this process holds the lease and the interval passed
//! metrics.flush(std::time::Instant::now() + std::time::Duration::from_secs(2))?; // at a one-shot's end
//! # Ok(()) }
//! ```
//!
//! The export driver ([`super::Driver`]) runs the step of
//! [`MetricExporter::run_once`] at every step of its own, beside the trace
//! step (it returns quickly when nothing is due), and `serve --drain` the
//! flush of [`MetricExporter::flush`] through it.
//!
//! # Guarantees
//!
//! - Folding is one store transaction per batch, so every finished ledger
//!   row is counted once whichever process folds (see `crates/hermes-meter-store/src/metrics.rs`).
//! - Only the holder of the `metrics` lease pushes, at most once per
//!   interval across every process sharing the store (the last accepted
//!   export time is kept in the store).
//! - Values are cumulative from the store's metric start time, so a new
//!   exporting process continues every series where the previous one
//!   left it. A failed push backs off and retries; nothing needs to be
//!   re-sent because the next push carries the totals.
//! - With `delta` (or `lowmemory`) in
//!   `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`, a push sends what
//!   each series gained since the last accepted push, starting at that
//!   push's time. The series it measured from are kept in the store
//!   (`metric_delta_base`) and replaced in the transaction
//!   that records the accepted push, so a new lease holder continues the
//!   deltas; a failed push sends nothing new to the base, so the next one
//!   covers the longer window. Unchanged series are left out.

use std::path::Path;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{ResourceMetrics, ScopeMetrics};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::pacing::{block_on_until, Lease, Pacing};
use super::transport::{Accepted, SendError, Transport};
use super::{resource_of, SCOPE_NAME};
use crate::config::export::ExportConfig;
use crate::config::metrics::MetricsConfig;
use hermes_meter_model::metrics::Temporality;
use hermes_meter_model::metrics::{self, AllowList, BudgetReading, Series};
use hermes_meter_model::semconv::Names;
use hermes_meter_store::error::Result;
use hermes_meter_store::unix_now;
use hermes_meter_store::{Folded, MetricIdentity, Outbox, Reader, METRIC_LEASE};

/// Ledger rows folded per transaction: keeps the write lock short.
const FOLD_BATCH: usize = 2_000;
/// Batches folded per `run_once` at most, so one call stays bounded.
const FOLD_BATCHES_PER_STEP: usize = 16;

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricStep {
    /// Ledger rows folded into the series.
    pub folded: usize,
    /// This process holds the metric lease.
    pub leased: bool,
    /// Data points the collector accepted (0 when no push was due).
    pub exported_points: usize,
    /// The push failed; retry no earlier than this.
    pub backing_off: Option<Duration>,
    /// The last failure, if this step failed.
    pub error: Option<String>,
}

/// The metric exporter of one store, on a connection of its own, for a
/// caller that pushes metrics alone (tests): the metric export and the
/// store it works on. The export driver ([`super::Driver`]) holds the
/// metric export alone, over the one connection it shares with the trace
/// export.
pub struct MetricExporter {
    store: Outbox,
    metrics: MetricExport,
}

impl std::fmt::Debug for MetricExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricExporter")
            .field("store", &self.store)
            .field("holder", &self.metrics.lease.holder())
            .field("transport", &self.metrics.transport)
            .finish()
    }
}

impl MetricExporter {
    /// Opens the store at `store_path` (its own connection) and builds the
    /// transport; nothing is sent yet and a collector that is down is not
    /// an error.
    pub fn new(config: MetricsConfig, store_path: &Path) -> Result<Self> {
        Self::with_store(config, Outbox::open(store_path)?)
    }

    /// Like [`MetricExporter::new`] over an open store.
    pub fn with_store(config: MetricsConfig, store: Outbox) -> Result<Self> {
        let metrics = MetricExport::new(config, &store, super::send_runtime("metric export")?)?;
        Ok(MetricExporter { store, metrics })
    }

    /// The store this exporter reads.
    pub fn store(&self) -> &Outbox {
        &self.store
    }

    /// The settings in use.
    pub fn config(&self) -> &MetricsConfig {
        &self.metrics.config
    }

    /// The store's metric start time and instance id.
    pub fn identity(&self) -> &MetricIdentity {
        &self.metrics.identity
    }

    /// Replaces the budget gauges with `readings` (see [`hermes_meter_model::metrics`]).
    pub fn set_budget_gauges(&mut self, readings: &[BudgetReading<'_>]) -> Result<()> {
        set_budget_gauges(&mut self.store, readings, unix_now())
    }

    /// Folds finished ledger rows into the series (bounded work).
    pub fn fold(&mut self) -> Result<usize> {
        self.metrics.fold(&mut self.store)
    }

    /// The series as exported now (allow-list applied).
    pub fn series(&self) -> Result<Vec<Series>> {
        self.metrics.series(&self.store)
    }

    /// One step: fold, then, when a push is due (the interval passed since
    /// the last accepted push by any process) and this process holds the
    /// lease, send every series. Does nothing more while backing off.
    pub fn run_once(&mut self) -> Result<MetricStep> {
        self.metrics.run_once(&mut self.store)
    }

    /// Folds everything and pushes now if this process holds the lease,
    /// retrying until `deadline`. For a one-shot process's last moments.
    pub fn flush(&mut self, deadline: Instant) -> Result<MetricStep> {
        self.metrics.flush(&mut self.store, deadline)
    }

    /// Gives the lease up (also done on drop, and lapses by itself).
    pub fn release(&mut self) -> Result<()> {
        self.metrics.release(&mut self.store)
    }
}

impl Drop for MetricExporter {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// The metric export of a store without the store: its settings,
/// transport, lease, backoff and the store's metric identity. Each call is
/// given the connection to work on, so the driver steps it and the trace
/// export over one connection.
#[derive(Debug)]
pub(crate) struct MetricExport {
    config: MetricsConfig,
    runtime: super::SendRuntime,
    transport: Option<Transport>,
    lease: Lease,
    pacing: Pacing,
    identity: MetricIdentity,
    resource: Resource,
}

impl MetricExport {
    /// Reads the metric identity of `store` and builds the transport,
    /// sending on `runtime` (shared with a trace export stepped by the same
    /// thread); nothing is sent yet and a collector that is down is not an
    /// error.
    pub(crate) fn new(config: MetricsConfig, store: &Reader, runtime: super::SendRuntime) -> Result<Self> {
        let transport = if config.pushes() {
            let _guard = runtime.enter();
            if config.exporters.value.otlp {
                Some(Transport::new(&config.transport)?)
            } else {
                Some(Transport::Console)
            }
        } else {
            None
        };
        let identity = store.metric_identity()?;
        let resource = metric_resource(&config.transport, &identity);
        let lease = Lease::new(METRIC_LEASE, config.transport.lease_seconds.value);
        Ok(MetricExport {
            config,
            runtime,
            transport,
            lease,
            pacing: Pacing::new("MetricExport.Failed"),
            identity,
            resource,
        })
    }

    /// [`MetricExporter::fold`] over `store`.
    pub(crate) fn fold(&self, store: &mut Outbox) -> Result<usize> {
        fold(store, self.config.transport.session_grace_seconds.value)
    }

    /// [`MetricExporter::series`] over `store`.
    pub(crate) fn series(&self, store: &Reader) -> Result<Vec<Series>> {
        snapshot(store, self.config.attributes.value, self.config.transport.names.value)
    }

    /// [`MetricExporter::run_once`] over `store`.
    pub(crate) fn run_once(&mut self, store: &mut Outbox) -> Result<MetricStep> {
        let mut step = MetricStep {
            folded: self.fold(store)?,
            ..MetricStep::default()
        };
        if !self.config.pushes() {
            return Ok(step);
        }
        let now = unix_now();
        if let Some(last) = store.metric_last_success_at()? {
            if now - last < self.config.interval.value.as_secs_f64() && now >= last {
                return Ok(step);
            }
        }
        refresh_budget_gauges(store, self.config.attributes.value);
        self.push(store, &mut step, None)?;
        Ok(step)
    }

    /// Folds the metric log until it is empty or `deadline` passes; the
    /// number of rows folded.
    fn fold_by(&mut self, store: &mut Outbox, deadline: Instant) -> Result<usize> {
        let mut folded = 0;
        loop {
            let n = self.fold(store)?;
            folded += n;
            if n == 0 || Instant::now() >= deadline {
                return Ok(folded);
            }
        }
    }

    /// [`MetricExporter::flush`] over `store`.
    pub(crate) fn flush(&mut self, store: &mut Outbox, deadline: Instant) -> Result<MetricStep> {
        let mut step = MetricStep {
            folded: self.fold_by(store, deadline)?,
            ..MetricStep::default()
        };
        if !self.config.pushes() {
            return Ok(step);
        }
        refresh_budget_gauges(store, self.config.attributes.value);
        while self.pacing.wait_to_send_by(deadline) {
            self.push(store, &mut step, Some(deadline))?;
            if !step.leased || step.error.is_none() {
                break;
            }
        }
        Ok(step)
    }

    /// A process's last push, at its exit: folds what is left and, when a
    /// series changed after the last accepted push (whoever folded it) and
    /// this process holds the lease, pushes once by `deadline` (no retry: what a refused
    /// push carried is counted in the store, and the next process or
    /// `serve` sends it at its interval). A run shorter than the export
    /// interval would otherwise leave without its series ever pushed.
    pub(crate) fn exit_push(&mut self, store: &mut Outbox, deadline: Instant) -> Result<MetricStep> {
        let mut step = MetricStep {
            folded: self.fold_by(store, deadline)?,
            ..MetricStep::default()
        };
        if !self.config.pushes() || Instant::now() >= deadline || !store.metrics_changed_since_push()? {
            return Ok(step);
        }
        if let Some(left) = self.pacing.wait_left() {
            // Backing off after a failure: this process's series wait.
            step.backing_off = Some(left);
            return Ok(step);
        }
        refresh_budget_gauges(store, self.config.attributes.value);
        self.push(store, &mut step, Some(deadline))?;
        Ok(step)
    }

    /// Gives the lease up, if this export holds it.
    pub(crate) fn release(&self, store: &mut Outbox) -> Result<()> {
        self.lease.release(store)
    }

    fn push(&mut self, store: &mut Outbox, step: &mut MetricStep, deadline: Option<Instant>) -> Result<()> {
        if let Some(left) = self.pacing.wait_left() {
            step.backing_off = Some(left);
            return Ok(());
        }
        let now = unix_now();
        step.leased = self.lease.take(store, now)?;
        if !step.leased {
            return Ok(());
        }
        let temporality = self.config.temporality_preference.value;
        let (series, start, delta_base) = match temporality {
            Temporality::Cumulative => (self.series(store)?, self.identity.start_time, None),
            Temporality::Delta => {
                // Read together: the series now, and what the last accepted
                // delta push (by any process) saw.
                let (rows, (base_rows, base_at), gauges) = store
                    .read_snapshot(|st| Ok((st.metric_series()?, st.metric_delta_base()?, st.metric_gauges()?)))?;
                let deltas = metrics::deltas(&rows, &base_rows);
                let series = metrics::project(
                    &deltas,
                    &gauges,
                    self.config.attributes.value,
                    self.config.transport.names.value,
                );
                (series, base_at.unwrap_or(self.identity.start_time), Some(rows))
            }
        };
        let metrics = metrics::otlp_metrics(&series, start, now, temporality);
        let points = metrics::data_points(&metrics);
        let request = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(self.resource.clone()),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: SCOPE_NAME.to_string(),
                        version: env!("CARGO_PKG_VERSION").to_string(),
                        ..InstrumentationScope::default()
                    }),
                    metrics,
                    schema_url: hermes_meter_model::semconv::SCHEMA_URL.to_string(),
                }],
                schema_url: hermes_meter_model::semconv::SCHEMA_URL.to_string(),
            }],
        };
        match self.send(request, deadline) {
            Ok(_) => {
                self.pacing.succeeded();
                step.error = None;
                step.backing_off = None;
                step.exported_points = points;
                let base = delta_base.as_deref().map(|rows| (rows, now));
                store.metric_export_done(points, unix_now(), base)?;
            }
            Err(e) => {
                let text = super::failure_text(super::Signal::Metrics, &self.config.transport.endpoint.value, &e);
                // A backend that does not take metrics (a trace-only one)
                // is said once, then tried again only every
                // UNSUPPORTED_RETRY: no retry storm, no log storm.
                let wait = self.pacing.failed(e.verdict, &text);
                store.metric_export_failed(&text, unix_now())?;
                step.backing_off = Some(wait);
                step.error = Some(text);
            }
        }
        Ok(())
    }

    fn send(&mut self, request: ExportMetricsServiceRequest, deadline: Option<Instant>) -> Result<Accepted, SendError> {
        let Some(transport) = self.transport.as_mut() else {
            return Ok(Accepted::default());
        };
        block_on_until(
            &self.runtime,
            transport.send_metrics(request),
            deadline,
            "metric export",
        )
    }
}

/// Folds finished ledger rows of `store` into its series, at most
/// [`FOLD_BATCHES_PER_STEP`] batches; returns the rows consumed. Sessions
/// count once they ended `session_grace_seconds` ago (or were finalized).
pub fn fold(store: &mut Outbox, session_grace_seconds: f64) -> Result<usize> {
    let mut total = 0;
    for _ in 0..FOLD_BATCHES_PER_STEP {
        let now = unix_now();
        let Folded { rows, more, .. } =
            store.fold_metrics(now, now - session_grace_seconds, FOLD_BATCH, &mut metrics::measure)?;
        total += rows;
        if !more {
            break;
        }
    }
    Ok(total)
}

/// The series of `store` as exported (allow-list and names applied),
/// gauges included.
pub fn snapshot(store: &Reader, allow: AllowList, names: Names) -> Result<Vec<Series>> {
    Ok(metrics::project(
        &store.metric_series()?,
        &store.metric_gauges()?,
        allow,
        names,
    ))
}

/// Replaces the budget gauges of `store` with every budget's state now,
/// from the budget file beside the store (see
/// `budget::budget_gauges`): before each OTLP push and each
/// Prometheus scrape, so both routes show the limits and spend of the
/// moment, a `budget set` or `budget rm` included. Without a budget file
/// there are no gauges; a file that cannot be read leaves them as they were
/// (budgets never stop an export or a scrape).
pub(crate) fn refresh_budget_gauges(store: &mut Outbox, allow: AllowList) {
    let Some(dir) = store.path().parent().map(Path::to_path_buf) else {
        return;
    };
    let gauges = if dir.join(hermes_meter_model::budget::BUDGETS_FILE_NAME).exists() {
        match crate::budget::budget_gauges(
            store,
            &dir,
            crate::config::fleet::configured(),
            allow.sender,
            unix_now(),
        ) {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(target: "Budget.GaugesFailed", "budget gauges left as they were: {e}");
                return;
            }
        }
    } else {
        Vec::new()
    };
    let readings: Vec<BudgetReading<'_>> = gauges
        .iter()
        .map(|g| BudgetReading {
            scope: g.scope,
            id: &g.id,
            window: g.window,
            tokens: g.unit == hermes_meter_model::budget::BudgetUnit::Tokens,
            spend: g.spend,
            limit: g.limit,
            projected: g.projected,
        })
        .collect();
    let mut rows = metrics::budget_gauge_rows(&readings);
    // Each rate limit's use (a sender's own only where sender ids may be
    // in metrics).
    match crate::config::load_budgets(&dir.join(hermes_meter_model::budget::BUDGETS_FILE_NAME)) {
        Ok(cfg) if cfg.has_rate_limits() => match crate::budget::rate_states(store, &cfg, unix_now()) {
            Ok(states) => {
                for s in states
                    .iter()
                    .filter(|s| allow.sender || s.scope != hermes_meter_model::budget::Scope::Sender)
                {
                    rows.extend(metrics::rate_limit_rows(
                        s.scope.as_str(),
                        &s.id,
                        s.rate.key(),
                        s.used,
                        s.limit,
                    ));
                }
            }
            Err(e) => tracing::warn!(target: "Budget.GaugesFailed", "rate limit gauges not read: {e}"),
        },
        _ => {}
    }
    // With a fleet, the sync lag from the last successful sync (none before
    // the first: there is no lag to measure, and `status` says so).
    if crate::config::fleet::configured() {
        if let Some(st) = store.fleet_status().ok().flatten() {
            rows.extend(
                st.lag_seconds(unix_now())
                    .map(|lag| metrics::fleet_lag_row(&st.host_id, lag)),
            );
        }
    }
    // What the store's health record counts of hook calls lost or skipped
    // (written by every process's writer; `status` shows the same).
    if let Ok(Some(health)) = hermes_meter_store::health::read(&dir) {
        let c = &health.counts;
        rows.extend(metrics::hook_call_rows(
            c.dropped_events,
            c.hermes_skipped_lost,
            c.hermes_skipped_recorded,
        ));
    }
    if let Err(e) = store.replace_metric_gauges(&metrics::GAUGE_METRICS, &rows, unix_now()) {
        tracing::warn!(target: "Budget.GaugesFailed", "budget gauges not updated: {e}");
    }
}

/// Replaces the budget gauges of `store` with `readings` (and the other
/// gauges with none).
pub fn set_budget_gauges(store: &mut Outbox, readings: &[BudgetReading<'_>], now: f64) -> Result<()> {
    store.replace_metric_gauges(&metrics::GAUGE_METRICS, &metrics::budget_gauge_rows(readings), now)
}

/// The trace resource plus the store's stable `service.instance.id`
/// (unless `OTEL_RESOURCE_ATTRIBUTES` sets one).
fn metric_resource(config: &ExportConfig, identity: &MetricIdentity) -> Resource {
    let mut resource = resource_of(config);
    let key = hermes_meter_model::semconv::metric_resource::SERVICE_INSTANCE_ID;
    if !resource.attributes.iter().any(|kv| kv.key == key) {
        resource.attributes.push(KeyValue {
            key: key.to_string(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(identity.instance_id.clone())),
            }),
            ..KeyValue::default()
        });
    }
    resource
}
