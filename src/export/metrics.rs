//! The metric exporter: folds finished ledger rows into the store's
//! cumulative series, and sends them over OTLP (or prints them).
//!
//! Owns: the metric settings (`OTEL_METRICS_EXPORTER`,
//! `OTEL_METRIC_EXPORT_INTERVAL`, the temporality preference, the
//! attribute allow-list, the Prometheus address), the metric lease and the
//! push schedule. Shares the transports, retry classification and backoff
//! with the trace exporter. Must not touch: the journal, the ledger.
//!
//! # Use
//!
//! ```no_run
//! # fn main() -> hermes_otel::Result<()> {
//! use hermes_otel::export::{ExportOverrides, MetricExporter, MetricsConfig};
//! let config = MetricsConfig::from_env(ExportOverrides::default());
//! let mut metrics = MetricExporter::new(config, std::path::Path::new("/tmp/hermes-otel.db"))?;
//! metrics.run_once()?; // fold; push if this process holds the lease and the interval passed
//! metrics.flush(std::time::Instant::now() + std::time::Duration::from_secs(2))?; // at a one-shot's end
//! # Ok(()) }
//! ```
//!
//! Call [`MetricExporter::run_once`] from the same background loop as the
//! trace exporter's `run_once` (it returns quickly when nothing is due),
//! and [`MetricExporter::flush`] beside its `flush`.
//!
//! # Guarantees
//!
//! - Folding is one store transaction per batch, so every finished ledger
//!   row is counted once whichever process folds (see `store/metrics.rs`).
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
//!   (`metric_delta_base`, migration 0006) and replaced in the transaction
//!   that records the accepted push, so a new lease holder continues the
//!   deltas; a failed push sends nothing new to the base, so the next one
//!   covers the longer window. Unchanged series are left out.

use std::path::Path;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{ResourceMetrics, ScopeMetrics};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::config::{env, ExportConfig, ExportOverrides, Resolver, Signal, TracesExporter};
use super::retry::{self, Backoff};
use super::transport::{Accepted, SendError, Transport};
use super::{resource_of, unix_now, SCOPE_NAME};
use crate::config::{Resolved, Source};
use crate::error::Result;
pub use crate::metrics::Temporality;
use crate::metrics::{self, AllowList, BudgetReading, Series};
use crate::store::{Folded, MetricIdentity, Store, METRIC_LEASE};

/// Ledger rows folded per transaction: keeps the write lock short.
const FOLD_BATCH: usize = 2_000;
/// Batches folded per `run_once` at most, so one call stays bounded.
const FOLD_BATCHES_PER_STEP: usize = 16;

/// Where metrics go (`OTEL_METRICS_EXPORTER`, a comma list).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetricsExporters {
    /// Push OTLP to the collector.
    pub otlp: bool,
    /// Serve `/metrics` (only `hermes-otel serve` can: it is the one
    /// long-running process).
    pub prometheus: bool,
    /// One JSON line per data point on stdout at each push.
    pub console: bool,
}

impl MetricsExporters {
    fn parse(s: &str) -> Option<Self> {
        let mut out = MetricsExporters::default();
        for item in s.split(',').map(|i| i.trim().to_ascii_lowercase()) {
            match item.as_str() {
                "otlp" => out.otlp = true,
                "prometheus" => out.prometheus = true,
                "console" | "logging" => out.console = true,
                "none" | "" => {}
                _ => return None,
            }
        }
        Some(out)
    }

    fn describe(&self) -> String {
        let mut names = Vec::new();
        if self.otlp {
            names.push("otlp");
        }
        if self.prometheus {
            names.push("prometheus");
        }
        if self.console {
            names.push("console");
        }
        if names.is_empty() {
            "none".into()
        } else {
            names.join(",")
        }
    }
}

/// Every metric setting, resolved.
#[derive(Debug, Clone)]
pub struct MetricsConfig {
    pub exporters: Resolved<MetricsExporters>,
    pub interval: Resolved<Duration>,
    /// What was asked for; cumulative is what is sent.
    pub temporality_preference: Resolved<Temporality>,
    pub attributes: Resolved<AllowList>,
    /// `host:port` of `/metrics` when the exporter is `prometheus`.
    pub prometheus_addr: Resolved<String>,
    /// Endpoint, protocol, headers, TLS, timeout of the metrics signal
    /// (`OTEL_EXPORTER_OTLP_METRICS_*` before the generic variables), and
    /// the shared settings (resource, lease, session grace, SDK disabled).
    pub transport: ExportConfig,
    /// Values that did not parse, or were not honoured (names only).
    pub warnings: Vec<String>,
}

/// Explicit metric settings (CLI flags) that win over the environment.
#[derive(Debug, Clone, Default)]
pub struct MetricsOverrides {
    /// `serve --prometheus ADDR`: serve `/metrics` there.
    pub prometheus_addr: Option<String>,
}

/// The default metric export interval (the SDK specification's).
pub const DEFAULT_METRIC_EXPORT_INTERVAL: Duration = Duration::from_secs(60);

impl MetricsConfig {
    /// Resolves from the process environment.
    pub fn from_env(overrides: ExportOverrides) -> Self {
        Self::resolve(overrides, MetricsOverrides::default(), |name| std::env::var(name).ok())
    }

    /// Resolves from any environment (tests pass a map). Order for each
    /// setting: flag, the metric variable, the generic one, the default.
    pub fn resolve(
        overrides: ExportOverrides,
        metric_overrides: MetricsOverrides,
        var: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let mut transport = ExportConfig::resolve_signal(Signal::Metrics, overrides, &var);
        // The trace exporter's choice does not apply to the metrics transport.
        transport.exporter = Resolved {
            value: TracesExporter::Otlp,
            source: Source::Default,
        };
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let mut r = Resolver {
            var: &var,
            warnings: Vec::new(),
        };
        let mut exporters = r.setting(
            None,
            &[env::METRICS_EXPORTER],
            MetricsExporters::parse,
            MetricsExporters {
                otlp: true,
                ..MetricsExporters::default()
            },
        );
        if metric_overrides.prometheus_addr.is_some() {
            // `--prometheus` alone means "serve, no push"; a variable that
            // lists exporters explicitly keeps them beside it.
            let mut value = if exporters.source == Source::Default {
                MetricsExporters::default()
            } else {
                exporters.value
            };
            value.prometheus = true;
            exporters = Resolved {
                value,
                source: Source::Explicit,
            };
        }
        let interval = r.setting(
            None,
            &[env::METRIC_EXPORT_INTERVAL],
            |s| {
                s.trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|ms| *ms > 0)
                    .map(Duration::from_millis)
            },
            DEFAULT_METRIC_EXPORT_INTERVAL,
        );
        let temporality_preference = r.setting(
            None,
            &[env::METRICS_TEMPORALITY_PREFERENCE],
            Temporality::parse,
            Temporality::Cumulative,
        );
        let attributes = r.setting(None, &[env::METRIC_ATTRIBUTES], AllowList::parse, AllowList::default());
        let prometheus_addr = match metric_overrides.prometheus_addr {
            Some(addr) => Resolved {
                value: addr,
                source: Source::Explicit,
            },
            None => {
                let host = r.setting(
                    None,
                    &[env::PROMETHEUS_HOST],
                    |s| Some(s.trim().to_string()),
                    "localhost".to_string(),
                );
                let port = r.setting(None, &[env::PROMETHEUS_PORT], |s| s.trim().parse::<u16>().ok(), 9464);
                let source = if port.source != Source::Default {
                    port.source
                } else {
                    host.source
                };
                let value = if host.value.contains(':') {
                    format!("[{}]:{}", host.value, port.value)
                } else {
                    format!("{}:{}", host.value, port.value)
                };
                Resolved { value, source }
            }
        };
        let mut warnings = transport.warnings.clone();
        warnings.extend(r.warnings);
        MetricsConfig {
            exporters,
            interval,
            temporality_preference,
            attributes,
            prometheus_addr,
            transport,
            warnings,
        }
    }

    /// Whether metrics are pushed anywhere (OTLP or the console).
    pub fn pushes(&self) -> bool {
        !self.transport.disabled.value && (self.exporters.value.otlp || self.exporters.value.console)
    }

    /// Every setting as `(name, value, source)` for `status`; header values
    /// are left out.
    pub fn describe(&self) -> Vec<(&'static str, String, String)> {
        let t = &self.transport;
        let mut rows = vec![
            (
                "metrics_exporter",
                self.exporters.value.describe(),
                self.exporters.source.to_string(),
            ),
            (
                "metric_export_interval_ms",
                self.interval.value.as_millis().to_string(),
                self.interval.source.to_string(),
            ),
            (
                "temporality",
                self.temporality_preference.value.as_str().to_string(),
                self.temporality_preference.source.to_string(),
            ),
            (
                "metric_attributes",
                self.attributes.value.describe(),
                self.attributes.source.to_string(),
            ),
            (
                "prometheus_addr",
                self.prometheus_addr.value.clone(),
                self.prometheus_addr.source.to_string(),
            ),
        ];
        for (name, value, source) in t.describe() {
            let keep = matches!(
                name,
                "protocol"
                    | "endpoint"
                    | "headers"
                    | "timeout_ms"
                    | "compression"
                    | "insecure"
                    | "certificate"
                    | "client_certificate"
                    | "client_key"
            );
            if keep {
                rows.push((metric_setting_name(name), value, source));
            }
        }
        rows
    }
}

fn metric_setting_name(name: &'static str) -> &'static str {
    match name {
        "protocol" => "metrics_protocol",
        "endpoint" => "metrics_endpoint",
        "headers" => "metrics_headers",
        "timeout_ms" => "metrics_timeout_ms",
        "compression" => "metrics_compression",
        "insecure" => "metrics_insecure",
        "certificate" => "metrics_certificate",
        "client_certificate" => "metrics_client_certificate",
        "client_key" => "metrics_client_key",
        other => other,
    }
}

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

/// The metric exporter of one store.
pub struct MetricExporter {
    store: Store,
    config: MetricsConfig,
    runtime: tokio::runtime::Runtime,
    transport: Option<Transport>,
    holder: String,
    backoff: Backoff,
    not_before: Option<Instant>,
    identity: MetricIdentity,
    resource: Resource,
    /// The failure last logged at `warn`: a repeat is logged at `debug`.
    last_logged: Option<String>,
}

impl std::fmt::Debug for MetricExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricExporter")
            .field("store", &self.store)
            .field("holder", &self.holder)
            .field("transport", &self.transport)
            .finish()
    }
}

impl MetricExporter {
    /// Opens the store at `store_path` (its own connection) and builds the
    /// transport; nothing is sent yet and a collector that is down is not
    /// an error.
    pub fn new(config: MetricsConfig, store_path: &Path) -> Result<Self> {
        Self::with_store(config, Store::open(store_path)?)
    }

    /// Like [`MetricExporter::new`] over an open store.
    pub fn with_store(config: MetricsConfig, store: Store) -> Result<Self> {
        let runtime = super::send_runtime("metric export")?;
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
        Ok(MetricExporter {
            store,
            config,
            runtime,
            transport,
            holder: super::lease_holder(),
            backoff: Backoff::default(),
            not_before: None,
            identity,
            resource,
            last_logged: None,
        })
    }

    /// The store this exporter reads.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The settings in use.
    pub fn config(&self) -> &MetricsConfig {
        &self.config
    }

    /// The store's metric start time and instance id.
    pub fn identity(&self) -> &MetricIdentity {
        &self.identity
    }

    /// Replaces the budget gauges with `readings` (see [`crate::metrics`]).
    pub fn set_budget_gauges(&mut self, readings: &[BudgetReading<'_>]) -> Result<()> {
        set_budget_gauges(&mut self.store, readings, unix_now())
    }

    /// Replaces the budget gauges with every budget's state now, before a
    /// push; see [`refresh_budget_gauges`].
    pub fn refresh_budget_gauges(&mut self) {
        refresh_budget_gauges(&mut self.store);
    }

    /// Folds finished ledger rows into the series (bounded work).
    pub fn fold(&mut self) -> Result<usize> {
        fold(&mut self.store, self.config.transport.session_grace_seconds.value)
    }

    /// The series as exported now (allow-list applied).
    pub fn series(&self) -> Result<Vec<Series>> {
        snapshot(&self.store, self.config.attributes.value)
    }

    /// One step: fold, then, when a push is due (the interval passed since
    /// the last accepted push by any process) and this process holds the
    /// lease, send every series. Does nothing more while backing off.
    pub fn run_once(&mut self) -> Result<MetricStep> {
        let mut step = MetricStep {
            folded: self.fold()?,
            ..MetricStep::default()
        };
        if !self.config.pushes() {
            return Ok(step);
        }
        let now = unix_now();
        if let Some(last) = self.store.metric_last_success_at()? {
            if now - last < self.config.interval.value.as_secs_f64() && now >= last {
                return Ok(step);
            }
        }
        self.refresh_budget_gauges();
        self.push(&mut step, None)?;
        Ok(step)
    }

    /// Folds everything and pushes now if this process holds the lease,
    /// retrying until `deadline`. For a one-shot process's last moments.
    pub fn flush(&mut self, deadline: Instant) -> Result<MetricStep> {
        let mut step = MetricStep::default();
        loop {
            let n = self.fold()?;
            step.folded += n;
            if n == 0 || Instant::now() >= deadline {
                break;
            }
        }
        if !self.config.pushes() {
            return Ok(step);
        }
        self.refresh_budget_gauges();
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(step);
            }
            if let Some(t) = self.not_before {
                if t >= deadline {
                    return Ok(step);
                }
                if t > now {
                    std::thread::sleep(t - now);
                }
            }
            self.push(&mut step, Some(deadline))?;
            if !step.leased || step.error.is_none() {
                return Ok(step);
            }
        }
    }

    /// Gives the lease up (also lapses by itself).
    pub fn release(&mut self) -> Result<()> {
        self.store.release_lease(METRIC_LEASE, &self.holder)
    }

    fn push(&mut self, step: &mut MetricStep, deadline: Option<Instant>) -> Result<()> {
        if let Some(t) = self.not_before {
            let now = Instant::now();
            if now < t {
                step.backing_off = Some(t - now);
                return Ok(());
            }
        }
        let now = unix_now();
        step.leased = super::take_lease(
            &mut self.store,
            METRIC_LEASE,
            &self.holder,
            now,
            self.config.transport.lease_seconds.value,
        )?;
        if !step.leased {
            return Ok(());
        }
        let temporality = self.config.temporality_preference.value;
        let (series, start, delta_base) = match temporality {
            Temporality::Cumulative => (self.series()?, self.identity.start_time, None),
            Temporality::Delta => {
                // Read together: the series now, and what the last accepted
                // delta push (by any process) saw.
                let (rows, (base_rows, base_at), gauges) = self
                    .store
                    .read_snapshot(|st| Ok((st.metric_series()?, st.metric_delta_base()?, st.metric_gauges()?)))?;
                let deltas = metrics::deltas(&rows, &base_rows);
                let series = metrics::project(&deltas, &gauges, self.config.attributes.value);
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
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        match self.send(request, deadline) {
            Ok(_) => {
                self.backoff.reset();
                self.not_before = None;
                self.last_logged = None;
                step.error = None;
                step.backing_off = None;
                step.exported_points = points;
                let base = delta_base.as_deref().map(|rows| (rows, now));
                self.store.metric_export_done(points, unix_now(), base)?;
            }
            Err(e) => {
                let wait = self.backoff.next(e.verdict);
                self.not_before = Some(Instant::now() + wait);
                let text = super::failure_text(super::Signal::Metrics, &self.config.transport.endpoint.value, &e);
                self.store.metric_export_failed(&text, unix_now())?;
                // A backend that does not take metrics (a trace-only one)
                // is said once, then tried again only every
                // UNSUPPORTED_RETRY: no retry storm, no log storm.
                super::log_failure("MetricExport.Failed", &mut self.last_logged, &text, wait);
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
        let fut = transport.send_metrics(request);
        match deadline {
            None => self.runtime.block_on(fut),
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                self.runtime
                    .block_on(async { tokio::time::timeout(left, fut).await })
                    .unwrap_or_else(|_| {
                        Err(SendError {
                            verdict: retry::Verdict::Retry { after: None },
                            message: "metric export: flush deadline passed".into(),
                        })
                    })
            }
        }
    }
}

impl Drop for MetricExporter {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// Folds finished ledger rows of `store` into its series, at most
/// [`FOLD_BATCHES_PER_STEP`] batches; returns the rows consumed. Sessions
/// count once they ended `session_grace_seconds` ago (or were finalized).
pub fn fold(store: &mut Store, session_grace_seconds: f64) -> Result<usize> {
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

/// The series of `store` as exported (allow-list applied), gauges included.
pub fn snapshot(store: &Store, allow: AllowList) -> Result<Vec<Series>> {
    Ok(metrics::project(
        &store.metric_series()?,
        &store.metric_gauges()?,
        allow,
    ))
}

/// Replaces the budget gauges of `store` with every budget's state now,
/// from the budget file beside the store (see
/// `budget::budget_gauges`): before each OTLP push and each
/// Prometheus scrape, so both routes show the limits and spend of the
/// moment, a `budget set` or `budget rm` included. Without a budget file
/// there are no gauges; a file that cannot be read leaves them as they were
/// (budgets never stop an export or a scrape).
pub fn refresh_budget_gauges(store: &mut Store) {
    let Some(dir) = store.path().parent().map(Path::to_path_buf) else {
        return;
    };
    let gauges = if dir.join(crate::budget::BUDGETS_FILE_NAME).exists() {
        match crate::budget::budget_gauges(store, &dir, unix_now()) {
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
            spend_usd: g.spend_usd,
            limit_usd: g.limit_usd,
        })
        .collect();
    let mut rows = metrics::budget_gauge_rows(&readings);
    // With a fleet, the sync lag from the last successful sync (none before
    // the first: there is no lag to measure, and `status` says so).
    if crate::budget::fleet_from_env() {
        if let Some(st) = store.fleet_status().ok().flatten() {
            rows.extend(
                st.lag_seconds(unix_now())
                    .map(|lag| metrics::fleet_lag_row(&st.host_id, lag)),
            );
        }
    }
    if let Err(e) = store.replace_metric_gauges(&metrics::GAUGE_METRICS, &rows, unix_now()) {
        tracing::warn!(target: "Budget.GaugesFailed", "budget gauges not updated: {e}");
    }
}

/// Replaces the budget gauges of `store` with `readings`.
pub fn set_budget_gauges(store: &mut Store, readings: &[BudgetReading<'_>], now: f64) -> Result<()> {
    store.replace_metric_gauges(&metrics::GAUGE_METRICS, &metrics::budget_gauge_rows(readings), now)
}

/// The trace resource plus the store's stable `service.instance.id`
/// (unless `OTEL_RESOURCE_ATTRIBUTES` sets one).
fn metric_resource(config: &ExportConfig, identity: &MetricIdentity) -> Resource {
    let mut resource = resource_of(config);
    let key = crate::semconv::metric_resource::SERVICE_INSTANCE_ID;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(pairs: &[(&str, &str)], prometheus: Option<&str>) -> MetricsConfig {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        MetricsConfig::resolve(
            ExportOverrides::default(),
            MetricsOverrides {
                prometheus_addr: prometheus.map(str::to_string),
            },
            move |k| map.get(k).cloned(),
        )
    }

    #[test]
    fn the_metrics_exporter_defaults_to_otlp_and_takes_a_list() {
        let c = resolve(&[], None);
        assert!(c.exporters.value.otlp && !c.exporters.value.prometheus);
        assert!(c.pushes());
        let c = resolve(&[(env::METRICS_EXPORTER, "none")], None);
        assert!(!c.pushes());
        let c = resolve(&[(env::METRICS_EXPORTER, "prometheus,console")], None);
        assert!(c.exporters.value.prometheus && c.exporters.value.console && !c.exporters.value.otlp);
        let c = resolve(&[(env::METRICS_EXPORTER, "statsd")], None);
        assert!(c.exporters.value.otlp, "unknown values fall back to the default");
        assert_eq!(c.warnings.len(), 1);
        let c = resolve(&[(env::SDK_DISABLED, "true")], None);
        assert!(!c.pushes());
    }

    #[test]
    fn the_prometheus_flag_serves_without_pushing_unless_asked() {
        let c = resolve(&[], Some("127.0.0.1:9999"));
        assert_eq!(c.prometheus_addr.value, "127.0.0.1:9999");
        assert!(c.exporters.value.prometheus && !c.exporters.value.otlp);
        assert!(!c.pushes());
        let c = resolve(&[(env::METRICS_EXPORTER, "otlp")], Some("127.0.0.1:9999"));
        assert!(c.exporters.value.prometheus && c.exporters.value.otlp);
        let c = resolve(
            &[(env::PROMETHEUS_HOST, "0.0.0.0"), (env::PROMETHEUS_PORT, "9000")],
            None,
        );
        assert_eq!(c.prometheus_addr.value, "0.0.0.0:9000");
        assert_eq!(resolve(&[], None).prometheus_addr.value, "localhost:9464");
    }

    #[test]
    fn interval_temporality_and_attributes_have_each_rung() {
        let c = resolve(
            &[
                (env::METRIC_EXPORT_INTERVAL, "5000"),
                (env::METRICS_TEMPORALITY_PREFERENCE, "delta"),
                (env::METRIC_ATTRIBUTES, "sender"),
            ],
            None,
        );
        assert_eq!(c.interval.value, Duration::from_secs(5));
        assert_eq!(c.temporality_preference.value, Temporality::Delta);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert!(c.attributes.value.sender && !c.attributes.value.profile);
        let c = resolve(&[(env::METRICS_TEMPORALITY_PREFERENCE, "LowMemory")], None);
        assert_eq!(c.temporality_preference.value, Temporality::Delta);
        let c = resolve(&[(env::METRICS_TEMPORALITY_PREFERENCE, "sometimes")], None);
        assert_eq!(c.temporality_preference.value, Temporality::Cumulative);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        let c = resolve(&[], None);
        assert_eq!(c.interval.value, DEFAULT_METRIC_EXPORT_INTERVAL);
        assert_eq!(c.attributes.value, AllowList::default());
        assert!(c.warnings.is_empty());
        let c = resolve(&[(env::METRIC_ATTRIBUTES, "session_id")], None);
        assert_eq!(
            c.attributes.value,
            AllowList::default(),
            "unknown attributes are refused"
        );
        assert_eq!(c.warnings.len(), 1);
    }
}
