//! Metric settings, resolved once: where metrics go, how often, which
//! attributes they carry, where `/metrics` is served, and the metrics
//! signal's transport (`OTEL_EXPORTER_OTLP_METRICS_*` before the generic
//! variables, through [`ExportConfig::resolve_signal`]).
//!
//! Owns: `OTEL_METRICS_EXPORTER`, `OTEL_METRIC_EXPORT_INTERVAL`, the
//! temporality preference, `HERMES_METER_METRIC_ATTRIBUTES` and the
//! Prometheus address, each with its source. Must not touch: the store,
//! the network (the exporter in `export/metrics.rs` does both).

use std::time::Duration;

use super::export::{env, ExportConfig, ExportOverrides, Signal, TracesExporter};
use super::parse::Resolver;
use super::{Resolved, Source};
use hermes_meter_model::metrics::{AllowList, Temporality};

/// Where metrics go (`OTEL_METRICS_EXPORTER`, a comma list).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetricsExporters {
    /// Push OTLP to the collector.
    pub otlp: bool,
    /// Serve `/metrics` (only `hermes-meter serve` can: it is the one
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
pub(crate) const DEFAULT_METRIC_EXPORT_INTERVAL: Duration = Duration::from_secs(60);

impl MetricsConfig {
    /// Resolves from the process environment.
    pub fn from_env(overrides: ExportOverrides) -> Self {
        Self::resolve(overrides, MetricsOverrides::default(), super::process_var)
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
    /// OTLP only once a destination is configured (see
    /// [`ExportConfig::enabled`]).
    pub fn pushes(&self) -> bool {
        let configured = self.exporters.source != Source::Default || self.transport.configured();
        !self.transport.disabled.value && ((self.exporters.value.otlp && configured) || self.exporters.value.console)
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
        assert!(!c.pushes(), "no destination configured: nothing pushed");
        assert!(resolve(&[(env::ENDPOINT, "http://c:4317")], None).pushes());
        assert!(resolve(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://c:4317")], None).pushes());
        assert!(resolve(&[(env::METRICS_EXPORTER, "otlp")], None).pushes());
        assert!(!resolve(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4317")], None).pushes());
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
