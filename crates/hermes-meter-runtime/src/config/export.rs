//! Export settings, resolved once from flags, `OTEL_*` and `HERMES_METER_*`
//! variables and defaults.
//!
//! Owns: one resolver per setting, each documenting its order, and the
//! source of every value (printed by `status`). Must not touch: the store,
//! the network.
//!
//! Order for each setting: an explicit override (a CLI flag) first, then the
//! signal-specific variable (`OTEL_EXPORTER_OTLP_TRACES_*`), then the generic
//! one (`OTEL_EXPORTER_OTLP_*`), then the default. Empty variables count as
//! unset. A value that does not parse is ignored with a warning (kept in
//! [`ExportConfig::warnings`]) and the next rung applies, as the OTel SDK
//! specification asks. Booleans are read by the one parser,
//! [`super::parse::parse_bool`]: only `true` is true. Header values are
//! never printed: [`Headers`] shows only their names.

use std::path::PathBuf;
use std::time::Duration;

use super::parse::{parse_key_values, parse_non_negative, parse_positive, CaptureMode, Resolver};
use super::{Resolved, Source};
use hermes_meter_model::semconv::Names;
use hermes_meter_model::span::TraceMode;

/// Environment variable names.
pub mod env {
    pub(crate) const SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
    pub(crate) const TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
    pub const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
    pub(crate) const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
    pub const PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
    pub(crate) const TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
    pub(crate) const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
    pub(crate) const TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
    pub const TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
    pub(crate) const TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
    pub(crate) const COMPRESSION: &str = "OTEL_EXPORTER_OTLP_COMPRESSION";
    pub(crate) const TRACES_COMPRESSION: &str = "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION";
    pub(crate) const INSECURE: &str = "OTEL_EXPORTER_OTLP_INSECURE";
    pub(crate) const TRACES_INSECURE: &str = "OTEL_EXPORTER_OTLP_TRACES_INSECURE";
    pub const CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";
    pub(crate) const TRACES_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE";
    /// The client certificate (PEM) and its private key (PEM), for a
    /// collector that asks for one (mutual TLS).
    pub(crate) const CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
    pub(crate) const TRACES_CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE";
    pub(crate) const CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_CLIENT_KEY";
    pub(crate) const TRACES_CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY";
    pub const SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
    pub(crate) const RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";
    pub(crate) const TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
    pub(crate) const TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
    pub(crate) const BSP_MAX_EXPORT_BATCH_SIZE: &str = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE";
    /// `auto`, `session` or `turn`: how traces are cut.
    pub(crate) const TRACE_MODE: &str = "HERMES_METER_TRACE_MODE";
    /// Whether session spans carry `hermes.sender.id`.
    pub(crate) const SPAN_SENDER: &str = "HERMES_METER_SPAN_SENDER";
    /// Seconds without events after which open spans are closed.
    pub(crate) const IDLE_TIMEOUT_SECONDS: &str = "HERMES_METER_IDLE_TIMEOUT_SECONDS";
    /// Seconds a session span waits after its last turn ended, for Hermes
    /// to start another turn, before it is sent without on_session_finalize.
    pub(crate) const SESSION_GRACE_SECONDS: &str = "HERMES_METER_SESSION_GRACE_SECONDS";
    /// The most outbox rows kept; the oldest beyond it are dropped.
    pub(crate) const OUTBOX_MAX_ROWS: &str = "HERMES_METER_OUTBOX_MAX_ROWS";
    /// How long the export lease lasts without renewal.
    pub(crate) const LEASE_SECONDS: &str = "HERMES_METER_LEASE_SECONDS";
    /// The largest span or log request sent, in encoded bytes; a batch
    /// over it goes as several requests.
    pub(crate) const MAX_REQUEST_BYTES: &str = "HERMES_METER_EXPORT_MAX_REQUEST_BYTES";

    pub(crate) const METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
    pub(crate) const METRICS_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL";
    pub(crate) const METRICS_HEADERS: &str = "OTEL_EXPORTER_OTLP_METRICS_HEADERS";
    pub(crate) const METRICS_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT";
    pub(crate) const METRICS_COMPRESSION: &str = "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION";
    pub(crate) const METRICS_INSECURE: &str = "OTEL_EXPORTER_OTLP_METRICS_INSECURE";
    pub(crate) const METRICS_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE";
    pub(crate) const METRICS_CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE";
    pub(crate) const METRICS_CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY";
    /// `otlp`, `prometheus`, `console` or `none`.
    pub(crate) const METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";

    /// `otlp`, `console` or `none`: where log records go.
    pub const LOGS_EXPORTER: &str = "OTEL_LOGS_EXPORTER";
    pub(crate) const LOGS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT";
    pub(crate) const LOGS_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL";
    pub(crate) const LOGS_HEADERS: &str = "OTEL_EXPORTER_OTLP_LOGS_HEADERS";
    pub(crate) const LOGS_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT";
    pub(crate) const LOGS_COMPRESSION: &str = "OTEL_EXPORTER_OTLP_LOGS_COMPRESSION";
    pub(crate) const LOGS_INSECURE: &str = "OTEL_EXPORTER_OTLP_LOGS_INSECURE";
    pub(crate) const LOGS_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_LOGS_CERTIFICATE";
    pub(crate) const LOGS_CLIENT_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_LOGS_CLIENT_CERTIFICATE";
    pub(crate) const LOGS_CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_LOGS_CLIENT_KEY";
    /// Milliseconds between metric exports.
    pub(crate) const METRIC_EXPORT_INTERVAL: &str = "OTEL_METRIC_EXPORT_INTERVAL";
    /// `cumulative` (the only one supported), `delta` or `lowmemory`.
    pub(crate) const METRICS_TEMPORALITY_PREFERENCE: &str = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
    /// Where `hermes-meter serve` serves `/metrics` when the exporter is `prometheus`.
    pub(crate) const PROMETHEUS_HOST: &str = "OTEL_EXPORTER_PROMETHEUS_HOST";
    pub(crate) const PROMETHEUS_PORT: &str = "OTEL_EXPORTER_PROMETHEUS_PORT";
    /// Opt-in metric attributes: `sender`, `profile` (comma-separated).
    pub(crate) const METRIC_ATTRIBUTES: &str = "HERMES_METER_METRIC_ATTRIBUTES";
}

/// The OTLP signal a configuration is for: it picks the signal-specific
/// variables and, for a generic HTTP endpoint, the path appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Traces,
    Metrics,
    Logs,
}

/// The signal-specific variable names and paths of a [`Signal`].
struct SignalNames {
    endpoint: &'static str,
    protocol: &'static str,
    headers: &'static str,
    timeout: &'static str,
    compression: &'static str,
    insecure: &'static str,
    certificate: &'static str,
    client_certificate: &'static str,
    client_key: &'static str,
    http_path: &'static str,
    default_http_endpoint: &'static str,
}

impl Signal {
    /// `traces` or `metrics`, as messages say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
            Signal::Logs => "logs",
        }
    }

    /// The variable that turns this signal's export off with `none`.
    pub(crate) fn exporter_var(self) -> &'static str {
        match self {
            Signal::Traces => env::TRACES_EXPORTER,
            Signal::Metrics => env::METRICS_EXPORTER,
            Signal::Logs => env::LOGS_EXPORTER,
        }
    }

    /// The signal-specific endpoint variable.
    pub(crate) fn endpoint_var(self) -> &'static str {
        self.names().endpoint
    }

    fn names(self) -> SignalNames {
        match self {
            Signal::Traces => SignalNames {
                endpoint: env::TRACES_ENDPOINT,
                protocol: env::TRACES_PROTOCOL,
                headers: env::TRACES_HEADERS,
                timeout: env::TRACES_TIMEOUT,
                compression: env::TRACES_COMPRESSION,
                insecure: env::TRACES_INSECURE,
                certificate: env::TRACES_CERTIFICATE,
                client_certificate: env::TRACES_CLIENT_CERTIFICATE,
                client_key: env::TRACES_CLIENT_KEY,
                http_path: HTTP_TRACES_PATH,
                default_http_endpoint: DEFAULT_HTTP_ENDPOINT,
            },
            Signal::Metrics => SignalNames {
                endpoint: env::METRICS_ENDPOINT,
                protocol: env::METRICS_PROTOCOL,
                headers: env::METRICS_HEADERS,
                timeout: env::METRICS_TIMEOUT,
                compression: env::METRICS_COMPRESSION,
                insecure: env::METRICS_INSECURE,
                certificate: env::METRICS_CERTIFICATE,
                client_certificate: env::METRICS_CLIENT_CERTIFICATE,
                client_key: env::METRICS_CLIENT_KEY,
                http_path: HTTP_METRICS_PATH,
                default_http_endpoint: DEFAULT_HTTP_METRICS_ENDPOINT,
            },
            Signal::Logs => SignalNames {
                endpoint: env::LOGS_ENDPOINT,
                protocol: env::LOGS_PROTOCOL,
                headers: env::LOGS_HEADERS,
                timeout: env::LOGS_TIMEOUT,
                compression: env::LOGS_COMPRESSION,
                insecure: env::LOGS_INSECURE,
                certificate: env::LOGS_CERTIFICATE,
                client_certificate: env::LOGS_CLIENT_CERTIFICATE,
                client_key: env::LOGS_CLIENT_KEY,
                http_path: HTTP_LOGS_PATH,
                default_http_endpoint: DEFAULT_HTTP_LOGS_ENDPOINT,
            },
        }
    }
}

/// Where traces go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TracesExporter {
    Otlp,
    /// One JSON line per span on stdout.
    Console,
    None,
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Protocol {
    #[serde(rename = "grpc")]
    Grpc,
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }

    /// How a send's failure names the transport (`otlp grpc: ...`).
    pub(crate) fn otlp_name(self) -> &'static str {
        match self {
            Protocol::Grpc => "otlp grpc",
            Protocol::HttpProtobuf => "otlp http",
        }
    }
}

/// Body compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    None,
    Gzip,
}

/// The trace sampler. Decisions are per trace, from the trace id, so every
/// process decides the same for every span of a trace.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    AlwaysOn,
    AlwaysOff,
    /// Keep a trace when the low 63 bits of its id fall under the ratio.
    TraceIdRatio(f64),
}

impl Sampler {
    /// Whether spans of `trace_id` are exported (the TraceIdRatioBased rule
    /// of the SDK specification: the last 8 bytes, shifted right by one,
    /// under `ratio * 2^63`).
    pub fn keeps(&self, trace_id: &[u8]) -> bool {
        match *self {
            Sampler::AlwaysOn => true,
            Sampler::AlwaysOff => false,
            Sampler::TraceIdRatio(ratio) => {
                if ratio >= 1.0 {
                    return true;
                }
                if ratio <= 0.0 || trace_id.len() != 16 {
                    return false;
                }
                let mut low = [0u8; 8];
                low.copy_from_slice(&trace_id[8..]);
                let x = u64::from_be_bytes(low) >> 1;
                x < (ratio * (1u64 << 63) as f64) as u64
            }
        }
    }
}

/// OTLP headers; `Debug` shows names only, never values.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Headers(pub Vec<(String, String)>);

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(k, _)| format!("{k}=<redacted>")))
            .finish()
    }
}

impl serde::Serialize for Headers {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|(k, _)| k))
    }
}

/// Explicit values (CLI flags) that win over the environment.
#[derive(Debug, Clone, Default)]
pub struct ExportOverrides {
    pub endpoint: Option<String>,
    pub protocol: Option<Protocol>,
    pub exporter: Option<TracesExporter>,
}

/// Every export setting, resolved.
#[derive(Debug, Clone)]
pub struct ExportConfig {
    pub disabled: Resolved<bool>,
    pub exporter: Resolved<TracesExporter>,
    pub protocol: Resolved<Protocol>,
    /// The full URL spans are sent to (for HTTP, including `/v1/traces`).
    pub endpoint: Resolved<String>,
    pub headers: Resolved<Headers>,
    pub timeout: Resolved<Duration>,
    pub compression: Resolved<Compression>,
    pub insecure: Resolved<bool>,
    pub certificate: Resolved<Option<PathBuf>>,
    /// The client certificate and key presented to a collector that asks
    /// for one (mutual TLS); both or neither.
    pub client_certificate: Resolved<Option<PathBuf>>,
    pub client_key: Resolved<Option<PathBuf>>,
    pub service_name: Resolved<String>,
    pub resource_attributes: Resolved<Vec<(String, String)>>,
    pub sampler: Resolved<Sampler>,
    pub batch_max_spans: Resolved<usize>,
    /// The largest request of spans or log records, in encoded protobuf
    /// bytes (see `export/split.rs`).
    pub max_request_bytes: Resolved<usize>,
    pub trace_mode: Resolved<TraceMode>,
    pub include_sender: Resolved<bool>,
    pub idle_timeout_seconds: Resolved<f64>,
    pub session_grace_seconds: Resolved<f64>,
    pub outbox_max_rows: Resolved<u64>,
    pub lease_seconds: Resolved<f64>,
    /// Whether captured content is sent with spans
    /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`, the same
    /// setting that makes hooks capture it).
    pub capture_content: Resolved<bool>,
    /// Whether captured content is sent as content events, OTLP log
    /// records (`EVENT_ONLY`, `SPAN_AND_EVENT`).
    pub content_events: Resolved<bool>,
    /// Which generation of GenAI names spans carry
    /// (`OTEL_SEMCONV_STABILITY_OPT_IN`).
    pub names: Resolved<Names>,
    /// Values that did not parse and were ignored (names only).
    pub warnings: Vec<String>,
}

/// The default limit of a span or log request's encoded size: 3 MiB,
/// under the Collector's default 4 MiB gRPC limit with room for what a
/// proxy in front may add, and still large enough that a batch of spans
/// without content (a few hundred bytes each) is one request.
pub(crate) const DEFAULT_MAX_REQUEST_BYTES: usize = 3 << 20;
/// The default service name.
pub(crate) const DEFAULT_SERVICE_NAME: &str = "hermes-agent";
/// The default gRPC endpoint (OTLP specification).
pub(crate) const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";
/// The default HTTP endpoint (OTLP specification).
pub(crate) const DEFAULT_HTTP_ENDPOINT: &str = "http://localhost:4318/v1/traces";
/// The path of the traces signal under a generic HTTP endpoint.
pub(crate) const HTTP_TRACES_PATH: &str = "v1/traces";
/// The default HTTP endpoint of metrics.
pub(crate) const DEFAULT_HTTP_METRICS_ENDPOINT: &str = "http://localhost:4318/v1/metrics";
/// The path of the metrics signal under a generic HTTP endpoint.
pub(crate) const HTTP_METRICS_PATH: &str = "v1/metrics";
/// The default HTTP endpoint of logs.
pub(crate) const DEFAULT_HTTP_LOGS_ENDPOINT: &str = "http://localhost:4318/v1/logs";
/// The path of the logs signal under a generic HTTP endpoint.
pub(crate) const HTTP_LOGS_PATH: &str = "v1/logs";

impl ExportConfig {
    /// Resolves from the process environment.
    pub fn from_env(overrides: ExportOverrides) -> Self {
        Self::resolve(overrides, super::process_var)
    }

    /// Resolves from any environment (tests pass a map).
    pub fn resolve(overrides: ExportOverrides, var: impl Fn(&str) -> Option<String>) -> Self {
        Self::resolve_signal(Signal::Traces, overrides, var)
    }

    /// Resolves the log export's settings (`OTEL_LOGS_EXPORTER`, the
    /// `OTEL_EXPORTER_OTLP_LOGS_*` variables before the generic ones) from
    /// any environment. A trace exporter given on the command line does not
    /// apply to logs; an endpoint or protocol does.
    pub fn resolve_logs(overrides: ExportOverrides, var: impl Fn(&str) -> Option<String>) -> Self {
        let overrides = ExportOverrides {
            exporter: None,
            ..overrides
        };
        Self::resolve_signal(Signal::Logs, overrides, var)
    }

    /// Resolves the transport settings of `signal` (its
    /// `OTEL_EXPORTER_OTLP_{SIGNAL}_*` variables before the generic ones)
    /// from any environment. The trace-only settings resolve as for traces.
    pub(crate) fn resolve_signal(
        signal: Signal,
        overrides: ExportOverrides,
        var: impl Fn(&str) -> Option<String>,
    ) -> Self {
        let n = signal.names();
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let mut r = Resolver {
            var: &var,
            warnings: Vec::new(),
        };
        let disabled = r.flag(&[env::SDK_DISABLED], false);
        // Log records have an exporter variable of their own; the metrics
        // one is read by `MetricsConfig` (it takes `prometheus` too).
        let exporter_var = match signal {
            Signal::Logs => env::LOGS_EXPORTER,
            Signal::Traces | Signal::Metrics => env::TRACES_EXPORTER,
        };
        let exporter = r.setting(
            overrides.exporter,
            &[exporter_var],
            parse_exporter,
            TracesExporter::Otlp,
        );
        let protocol = r.setting(
            overrides.protocol,
            &[n.protocol, env::PROTOCOL],
            parse_protocol,
            Protocol::Grpc,
        );
        let endpoint = r.endpoint(overrides.endpoint, protocol.value, &n);
        let headers = r.setting(None, &[n.headers, env::HEADERS], parse_headers, Headers::default());
        let timeout = r.setting(
            None,
            &[n.timeout, env::TIMEOUT],
            |s| s.trim().parse::<u64>().ok().map(Duration::from_millis),
            Duration::from_secs(10),
        );
        let compression = r.setting(
            None,
            &[n.compression, env::COMPRESSION],
            parse_compression,
            Compression::None,
        );
        let insecure = r.flag(&[n.insecure, env::INSECURE], false);
        let path = |s: &str| Some(Some(PathBuf::from(s.trim())));
        let certificate = r.setting(None, &[n.certificate, env::CERTIFICATE], path, None);
        let client_certificate = r.setting(None, &[n.client_certificate, env::CLIENT_CERTIFICATE], path, None);
        let client_key = r.setting(None, &[n.client_key, env::CLIENT_KEY], path, None);
        let resource_attributes = r.setting(None, &[env::RESOURCE_ATTRIBUTES], parse_key_values, Vec::new());
        let service_name = match var(env::SERVICE_NAME) {
            Some(v) => Resolved {
                value: v.trim().to_string(),
                source: Source::Env(env::SERVICE_NAME),
            },
            None => match resource_attributes.value.iter().find(|(k, _)| k == "service.name") {
                Some((_, v)) => Resolved {
                    value: v.clone(),
                    source: Source::Env(env::RESOURCE_ATTRIBUTES),
                },
                None => Resolved {
                    value: DEFAULT_SERVICE_NAME.to_string(),
                    source: Source::Default,
                },
            },
        };
        let sampler = r.sampler();
        let batch_max_spans = r.setting(None, &[env::BSP_MAX_EXPORT_BATCH_SIZE], parse_positive::<usize>, 512);
        let max_request_bytes = r.setting(
            None,
            &[env::MAX_REQUEST_BYTES],
            parse_positive::<usize>,
            DEFAULT_MAX_REQUEST_BYTES,
        );
        let trace_mode = r.setting(None, &[env::TRACE_MODE], TraceMode::parse, TraceMode::Auto);
        let include_sender = r.flag(&[env::SPAN_SENDER], true);
        let idle_timeout_seconds = r.setting(
            None,
            &[env::IDLE_TIMEOUT_SECONDS],
            parse_non_negative,
            super::DEFAULT_IDLE_TIMEOUT_SECONDS,
        );
        let session_grace_seconds = r.setting(None, &[env::SESSION_GRACE_SECONDS], parse_non_negative, 120.0);
        let outbox_max_rows = r.setting(None, &[env::OUTBOX_MAX_ROWS], parse_positive::<u64>, 1_000_000);
        let lease_seconds = r.setting(None, &[env::LEASE_SECONDS], parse_non_negative, 15.0);
        let capture = r.setting(
            None,
            &[super::env::CAPTURE_CONTENT],
            CaptureMode::parse,
            CaptureMode::NoContent,
        );
        let capture_content = Resolved {
            value: capture.value.on_spans(),
            source: capture.source.clone(),
        };
        let content_events = Resolved {
            value: capture.value.as_events(),
            source: capture.source,
        };
        let names = r.setting(
            None,
            &[super::env::SEMCONV_STABILITY_OPT_IN],
            |v| Some(Names::parse(v)),
            Names::Current,
        );
        ExportConfig {
            disabled,
            exporter,
            protocol,
            endpoint,
            headers,
            timeout,
            compression,
            insecure,
            certificate,
            client_certificate,
            client_key,
            service_name,
            resource_attributes,
            sampler,
            batch_max_spans,
            max_request_bytes,
            trace_mode,
            include_sender,
            idle_timeout_seconds,
            session_grace_seconds,
            outbox_max_rows,
            lease_seconds,
            capture_content,
            content_events,
            names,
            warnings: r.warnings,
        }
    }

    /// Whether spans are sent anywhere at all: not until a destination is
    /// configured (an endpoint, or the exporter named): the plugin's
    /// catalog entry promises it sends nothing before, and an install with
    /// no collector must not log a failed export every session. Naming
    /// `OTEL_TRACES_EXPORTER=otlp` alone sends to the OTLP default,
    /// `localhost:4317`, as the OpenTelemetry SDKs do.
    pub fn enabled(&self) -> bool {
        !self.disabled.value && self.exporter.value != TracesExporter::None && self.configured()
    }

    /// Whether a destination was configured at all (see [`Self::enabled`]).
    pub fn configured(&self) -> bool {
        self.exporter.source != Source::Default || self.endpoint.source != Source::Default
    }

    /// Every setting as `(name, value, source)` for `status`; header values
    /// are left out.
    pub fn describe(&self) -> Vec<(&'static str, String, String)> {
        fn row<T>(name: &'static str, r: &Resolved<T>, show: impl Fn(&T) -> String) -> (&'static str, String, String) {
            (name, show(&r.value), r.source.to_string())
        }
        fn show_path(v: &Option<PathBuf>) -> String {
            v.as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "(none)".into())
        }
        vec![
            row("sdk_disabled", &self.disabled, |v| v.to_string()),
            row("traces_exporter", &self.exporter, |v| format!("{v:?}").to_lowercase()),
            row("protocol", &self.protocol, |v| v.as_str().to_string()),
            row("endpoint", &self.endpoint, |v| v.clone()),
            row("headers", &self.headers, |v| {
                let names: Vec<&str> = v.0.iter().map(|(k, _)| k.as_str()).collect();
                if names.is_empty() {
                    "(none)".into()
                } else {
                    format!("{} (values hidden)", names.join(","))
                }
            }),
            row("timeout_ms", &self.timeout, |v| v.as_millis().to_string()),
            row("compression", &self.compression, |v| format!("{v:?}").to_lowercase()),
            row("insecure", &self.insecure, |v| v.to_string()),
            row("certificate", &self.certificate, show_path),
            row("client_certificate", &self.client_certificate, show_path),
            row("client_key", &self.client_key, show_path),
            row("service_name", &self.service_name, |v| v.clone()),
            row("resource_attributes", &self.resource_attributes, |v| {
                v.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>().join(",")
            }),
            row("sampler", &self.sampler, |v| format!("{v:?}")),
            row("batch_max_spans", &self.batch_max_spans, |v| v.to_string()),
            row("max_request_bytes", &self.max_request_bytes, |v| v.to_string()),
            row("trace_mode", &self.trace_mode, |v| format!("{v:?}").to_lowercase()),
            row("span_sender", &self.include_sender, |v| v.to_string()),
            row("idle_timeout_seconds", &self.idle_timeout_seconds, |v| v.to_string()),
            row("session_grace_seconds", &self.session_grace_seconds, |v| v.to_string()),
            row("outbox_max_rows", &self.outbox_max_rows, |v| v.to_string()),
            row("lease_seconds", &self.lease_seconds, |v| v.to_string()),
            row("capture_content", &self.capture_content, |v| v.to_string()),
            row("content_events", &self.content_events, |v| v.to_string()),
            row("semconv_names", &self.names, |v| v.as_str().to_string()),
        ]
    }
}

/// The export-only rungs of the shared resolver.
impl Resolver<'_> {
    /// explicit > `..._{SIGNAL}_ENDPOINT` (as is) > `..._ENDPOINT` (for HTTP
    /// with `/v1/traces` or `/v1/metrics` appended) > the protocol's default.
    fn endpoint(&mut self, explicit: Option<String>, protocol: Protocol, n: &SignalNames) -> Resolved<String> {
        if let Some(value) = explicit {
            return Resolved {
                value,
                source: Source::Explicit,
            };
        }
        if let Some(v) = (self.var)(n.endpoint) {
            return Resolved {
                value: v.trim().to_string(),
                source: Source::Env(n.endpoint),
            };
        }
        if let Some(v) = (self.var)(env::ENDPOINT) {
            let v = v.trim();
            let value = match protocol {
                Protocol::Grpc => v.to_string(),
                Protocol::HttpProtobuf => format!("{}/{}", v.trim_end_matches('/'), n.http_path),
            };
            return Resolved {
                value,
                source: Source::Env(env::ENDPOINT),
            };
        }
        Resolved {
            value: match protocol {
                Protocol::Grpc => DEFAULT_GRPC_ENDPOINT,
                Protocol::HttpProtobuf => n.default_http_endpoint,
            }
            .to_string(),
            source: Source::Default,
        }
    }

    /// `OTEL_TRACES_SAMPLER` with `OTEL_TRACES_SAMPLER_ARG` for the ratio.
    /// The parent-based forms decide the same here: hermes-meter starts
    /// every trace itself, so there is never a remote parent.
    fn sampler(&mut self) -> Resolved<Sampler> {
        let arg = (self.var)(env::TRACES_SAMPLER_ARG);
        let ratio = match arg.as_deref().map(|s| s.trim().parse::<f64>()) {
            Some(Ok(r)) if (0.0..=1.0).contains(&r) => r,
            Some(_) => {
                self.warnings
                    .push(format!("{}: not a ratio in [0, 1], using 1.0", env::TRACES_SAMPLER_ARG));
                1.0
            }
            None => 1.0,
        };
        self.setting(
            None,
            &[env::TRACES_SAMPLER],
            |s| match s.trim().to_ascii_lowercase().as_str() {
                "always_on" | "parentbased_always_on" => Some(Sampler::AlwaysOn),
                "always_off" | "parentbased_always_off" => Some(Sampler::AlwaysOff),
                "traceidratio" | "parentbased_traceidratio" => Some(Sampler::TraceIdRatio(ratio)),
                _ => None,
            },
            Sampler::AlwaysOn,
        )
    }
}

/// The first known exporter of a comma list (`otlp`, `console`, `none`).
fn parse_exporter(s: &str) -> Option<TracesExporter> {
    s.split(',').find_map(|e| match e.trim().to_ascii_lowercase().as_str() {
        "otlp" => Some(TracesExporter::Otlp),
        "console" | "logging" => Some(TracesExporter::Console),
        "none" => Some(TracesExporter::None),
        _ => None,
    })
}

fn parse_protocol(s: &str) -> Option<Protocol> {
    match s.trim().to_ascii_lowercase().as_str() {
        "grpc" => Some(Protocol::Grpc),
        "http/protobuf" => Some(Protocol::HttpProtobuf),
        _ => None,
    }
}

fn parse_compression(s: &str) -> Option<Compression> {
    match s.trim().to_ascii_lowercase().as_str() {
        "gzip" => Some(Compression::Gzip),
        "none" => Some(Compression::None),
        _ => None,
    }
}

fn parse_headers(s: &str) -> Option<Headers> {
    parse_key_values(s).map(Headers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(pairs: &[(&str, &str)]) -> ExportConfig {
        resolve_with(ExportOverrides::default(), pairs)
    }

    fn resolve_with(overrides: ExportOverrides, pairs: &[(&str, &str)]) -> ExportConfig {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ExportConfig::resolve(overrides, move |k| map.get(k).cloned())
    }

    #[test]
    fn the_endpoint_follows_flag_then_signal_then_generic_then_default() {
        let all = [
            (env::TRACES_ENDPOINT, "http://t:1/custom"),
            (env::ENDPOINT, "http://g:2/"),
        ];
        let flag = ExportOverrides {
            endpoint: Some("http://flag:3".into()),
            ..ExportOverrides::default()
        };
        let c = resolve_with(flag, &all);
        assert_eq!(
            (c.endpoint.value.as_str(), c.endpoint.source),
            ("http://flag:3", Source::Explicit)
        );
        let c = resolve(&all);
        assert_eq!(
            (c.endpoint.value.as_str(), c.endpoint.source),
            ("http://t:1/custom", Source::Env(env::TRACES_ENDPOINT))
        );
        let c = resolve(&all[1..]);
        assert_eq!(c.endpoint.value, "http://g:2/");
        let c = resolve(&[(env::ENDPOINT, "http://g:2/"), (env::PROTOCOL, "http/protobuf")]);
        assert_eq!(
            c.endpoint.value, "http://g:2/v1/traces",
            "generic HTTP endpoints get the signal path"
        );
        assert_eq!(resolve(&[]).endpoint.value, DEFAULT_GRPC_ENDPOINT);
        let c = resolve(&[(env::PROTOCOL, "http/protobuf")]);
        assert_eq!(
            (c.endpoint.value.as_str(), c.endpoint.source),
            (DEFAULT_HTTP_ENDPOINT, Source::Default)
        );
    }

    #[test]
    fn metrics_read_their_own_signal_variables_before_the_generic_ones() {
        let map: HashMap<String, String> = [
            (env::METRICS_ENDPOINT, "http://m:1/custom"),
            (env::TRACES_ENDPOINT, "http://t:2"),
            (env::METRICS_PROTOCOL, "http/protobuf"),
            (env::METRICS_HEADERS, "k=v"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let c = ExportConfig::resolve_signal(Signal::Metrics, ExportOverrides::default(), |k| map.get(k).cloned());
        assert_eq!(c.endpoint.value, "http://m:1/custom");
        assert_eq!(c.protocol.value, Protocol::HttpProtobuf);
        assert_eq!(c.headers.source, Source::Env(env::METRICS_HEADERS));
        let map: HashMap<String, String> = [(env::ENDPOINT, "http://g:3/"), (env::PROTOCOL, "http/protobuf")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let c = ExportConfig::resolve_signal(Signal::Metrics, ExportOverrides::default(), |k| map.get(k).cloned());
        assert_eq!(c.endpoint.value, "http://g:3/v1/metrics");
        let c = ExportConfig::resolve_signal(Signal::Metrics, ExportOverrides::default(), |_| None);
        assert_eq!(c.endpoint.value, DEFAULT_GRPC_ENDPOINT);
    }

    #[test]
    fn the_protocol_follows_signal_then_generic_then_default() {
        let c = resolve(&[(env::TRACES_PROTOCOL, "http/protobuf"), (env::PROTOCOL, "grpc")]);
        assert_eq!(c.protocol.value, Protocol::HttpProtobuf);
        assert_eq!(c.protocol.source, Source::Env(env::TRACES_PROTOCOL));
        let c = resolve(&[(env::PROTOCOL, "http/protobuf")]);
        assert_eq!(c.protocol.source, Source::Env(env::PROTOCOL));
        assert_eq!(resolve(&[]).protocol.value, Protocol::Grpc);
        let c = resolve(&[(env::PROTOCOL, "http/json")]);
        assert_eq!(c.protocol.value, Protocol::Grpc);
        assert_eq!(c.warnings.len(), 1, "unsupported values warn");
    }

    #[test]
    fn headers_are_parsed_decoded_and_never_shown() {
        let c = resolve(&[
            (env::TRACES_HEADERS, "api-key=s%3Dcret,x-tenant=a"),
            (env::HEADERS, "other=1"),
        ]);
        assert_eq!(
            c.headers.value.0,
            vec![("api-key".into(), "s=cret".into()), ("x-tenant".into(), "a".into())]
        );
        let shown = format!("{:?} {:?}", c.headers, c.describe());
        assert!(!shown.contains("s=cret") && !shown.contains("s%3Dcret"), "{shown}");
        let c = resolve(&[(env::HEADERS, "other=1")]);
        assert_eq!(c.headers.source, Source::Env(env::HEADERS));
        assert!(resolve(&[]).headers.value.0.is_empty());
    }

    #[test]
    fn timeout_compression_insecure_and_certificate_have_each_rung() {
        let c = resolve(&[
            (env::TRACES_TIMEOUT, "500"),
            (env::TIMEOUT, "700"),
            (env::TRACES_COMPRESSION, "gzip"),
            (env::INSECURE, "true"),
            (env::CERTIFICATE, "/ca.pem"),
        ]);
        assert_eq!(c.timeout.value, Duration::from_millis(500));
        assert_eq!(c.compression.value, Compression::Gzip);
        assert!(c.insecure.value);
        assert_eq!(c.insecure.source, Source::Env(env::INSECURE));
        assert_eq!(c.certificate.value, Some(PathBuf::from("/ca.pem")));
        let c = resolve(&[(env::TIMEOUT, "700"), (env::COMPRESSION, "none")]);
        assert_eq!(c.timeout.value, Duration::from_millis(700));
        assert_eq!(c.compression.source, Source::Env(env::COMPRESSION));
        let c = resolve(&[]);
        assert_eq!(c.timeout.value, Duration::from_secs(10));
        assert_eq!(c.compression.value, Compression::None);
        assert!(!c.insecure.value);
        assert_eq!(c.certificate.value, None);
    }

    #[test]
    fn disabled_sdk_or_none_exporter_turns_export_off() {
        let endpoint = (env::ENDPOINT, "http://collector:4317");
        assert!(resolve(&[endpoint]).enabled());
        assert!(!resolve(&[endpoint, (env::SDK_DISABLED, "true")]).enabled());
        assert!(!resolve(&[endpoint, (env::TRACES_EXPORTER, "none")]).enabled());
        assert_eq!(
            resolve(&[(env::TRACES_EXPORTER, "zipkin,console")]).exporter.value,
            TracesExporter::Console
        );
        let flag = ExportOverrides {
            exporter: Some(TracesExporter::Otlp),
            ..ExportOverrides::default()
        };
        assert!(resolve_with(flag, &[(env::TRACES_EXPORTER, "none")]).enabled());
    }

    #[test]
    fn nothing_is_sent_until_a_destination_is_configured() {
        // The defaults: no endpoint, no exporter named.
        let c = resolve(&[]);
        assert!(!c.configured() && !c.enabled());
        assert_eq!(
            c.endpoint.value, DEFAULT_GRPC_ENDPOINT,
            "status still shows where it would send"
        );
        // An endpoint, for all signals or for traces alone.
        assert!(resolve(&[(env::ENDPOINT, "http://c:4317")]).enabled());
        assert!(resolve(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4317")]).enabled());
        // Naming the exporter keeps the OTLP default, as the SDKs do.
        let named = resolve(&[(env::TRACES_EXPORTER, "otlp")]);
        assert!(named.enabled());
        assert_eq!(named.endpoint.value, DEFAULT_GRPC_ENDPOINT);
        assert!(resolve(&[(env::TRACES_EXPORTER, "console")]).enabled());
    }

    #[test]
    fn service_name_comes_from_its_variable_then_the_resource_then_the_default() {
        let c = resolve(&[
            (env::SERVICE_NAME, "svc"),
            (env::RESOURCE_ATTRIBUTES, "service.name=res,deployment.environment=prod"),
        ]);
        assert_eq!(c.service_name.value, "svc");
        let c = resolve(&[(env::RESOURCE_ATTRIBUTES, "service.name=res")]);
        assert_eq!(
            (c.service_name.value.as_str(), c.service_name.source),
            ("res", Source::Env(env::RESOURCE_ATTRIBUTES))
        );
        assert_eq!(resolve(&[]).service_name.value, DEFAULT_SERVICE_NAME);
    }

    #[test]
    fn sampling_is_per_trace_id_and_follows_the_ratio() {
        let c = resolve(&[
            (env::TRACES_SAMPLER, "parentbased_traceidratio"),
            (env::TRACES_SAMPLER_ARG, "0.25"),
        ]);
        assert_eq!(c.sampler.value, Sampler::TraceIdRatio(0.25));
        assert_eq!(
            resolve(&[(env::TRACES_SAMPLER, "always_off")]).sampler.value,
            Sampler::AlwaysOff
        );
        assert_eq!(resolve(&[]).sampler.value, Sampler::AlwaysOn);
        let kept = (0..10_000)
            .filter(|i| {
                c.sampler
                    .value
                    .keeps(&hermes_meter_model::span::trace_id(&["t", &i.to_string()]))
            })
            .count();
        assert!((2_200..2_800).contains(&kept), "{kept}");
        let id = hermes_meter_model::span::trace_id(&["same"]);
        assert_eq!(c.sampler.value.keeps(&id), c.sampler.value.keeps(&id));
    }

    #[test]
    fn hermes_settings_have_defaults_and_env() {
        let c = resolve(&[
            (env::TRACE_MODE, "turn"),
            (env::OUTBOX_MAX_ROWS, "10"),
            (env::SESSION_GRACE_SECONDS, "0"),
            (env::SPAN_SENDER, "false"),
            (env::LEASE_SECONDS, "2"),
            (env::IDLE_TIMEOUT_SECONDS, "5"),
            (env::BSP_MAX_EXPORT_BATCH_SIZE, "64"),
            (env::MAX_REQUEST_BYTES, "65536"),
        ]);
        assert_eq!(c.trace_mode.value, TraceMode::Turn);
        assert_eq!(c.outbox_max_rows.value, 10);
        assert_eq!(c.session_grace_seconds.value, 0.0);
        assert!(!c.include_sender.value);
        assert_eq!(c.lease_seconds.value, 2.0);
        assert_eq!(c.idle_timeout_seconds.value, 5.0);
        assert_eq!(c.batch_max_spans.value, 64);
        assert_eq!(c.max_request_bytes.value, 65_536);
        let c = resolve(&[(env::OUTBOX_MAX_ROWS, "lots"), (env::MAX_REQUEST_BYTES, "0")]);
        assert_eq!(c.outbox_max_rows.source, Source::Default);
        assert_eq!(c.max_request_bytes.source, Source::Default);
        assert_eq!(c.max_request_bytes.value, 3 << 20);
        assert_eq!(c.trace_mode.value, TraceMode::Auto);
    }
}
