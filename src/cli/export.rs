//! `hermes-otel serve` and `hermes-otel export --since T`.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::export::{
    ExportConfig, ExportOverrides, Exporter, MetricExporter, MetricsConfig, MetricsOverrides, PrometheusServer,
    Protocol,
};
use crate::store::{Store, DB_FILE_NAME};

/// How often `serve` closes idle spans. Cheap, but there is no need to
/// look more often than a fraction of the idle timeout.
const CLOSE_IDLE_EVERY: Duration = Duration::from_secs(10);

/// Where to send, overriding the OTEL_* variables.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// OTLP endpoint (default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, else localhost).
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// `grpc` or `http/protobuf` (default: OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL, else grpc).
    #[arg(long, value_parser = parse_protocol)]
    protocol: Option<Protocol>,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    target: Target,
    /// Milliseconds between looks at the outbox when it is empty.
    #[arg(long, default_value_t = 500)]
    poll_ms: u64,
    /// Exit once nothing is ready to send (for scripts and tests).
    #[arg(long)]
    drain: bool,
    /// Serve Prometheus text on http://ADDR/metrics (e.g. 127.0.0.1:9464),
    /// with the names the OTel Collector's Prometheus exporter gives.
    /// Without it, OTEL_METRICS_EXPORTER=prometheus serves on
    /// OTEL_EXPORTER_PROMETHEUS_HOST:PORT (default localhost:9464).
    #[arg(long, value_name = "ADDR")]
    prometheus: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    target: Target,
    /// Re-send spans that ended at or after this time: a date (2026-11-30),
    /// an RFC 3339 timestamp, or a span back from now (24h, 7d).
    #[arg(long)]
    since: String,
    /// Give up after this many seconds of a collector that does not accept.
    #[arg(long, default_value_t = 60)]
    timeout_seconds: u64,
}

fn parse_protocol(s: &str) -> Result<Protocol, String> {
    match s {
        "grpc" => Ok(Protocol::Grpc),
        "http/protobuf" | "http" => Ok(Protocol::HttpProtobuf),
        _ => Err("use grpc or http/protobuf".into()),
    }
}

fn config(target: &Target) -> ExportConfig {
    let config = ExportConfig::from_env(ExportOverrides {
        endpoint: target.endpoint.clone(),
        protocol: target.protocol,
        exporter: None,
    });
    for warning in &config.warnings {
        eprintln!("hermes-otel: {warning}");
    }
    config
}

fn open(dir: &Path, config: ExportConfig) -> Result<Exporter> {
    let mut store = Store::open_dir(dir)?;
    store.set_prices(crate::pricing::PriceTable::load(
        &dir.join(crate::config::PRICING_FILE_NAME),
    )?);
    debug_assert!(store.path().ends_with(DB_FILE_NAME));
    // Hermes processes that died (kill -9, a crash) left their last events
    // in their spools: apply them first, so the idle closer and the export
    // see every event whose hook returned.
    let recovered = crate::spool::recover(&mut store, dir, None, crate::hook::DecodeOptions::default());
    if recovered.files > 0 {
        eprintln!(
            "hermes-otel: applied {} events from {} spool file(s) of ended processes",
            recovered.applied, recovered.files
        );
    }
    for e in &recovered.errors {
        eprintln!("hermes-otel: spool: {e}");
    }
    Exporter::with_store(config, store)
}

/// Runs the exporter until killed (or, with `--drain`, until nothing is ready).
pub fn serve(dir: &Path, args: &ServeArgs) -> Result<i32> {
    let config = config(&args.target);
    if !config.enabled() {
        eprintln!("hermes-otel: trace export is disabled (OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none)");
    }
    eprintln!(
        "hermes-otel: serving traces from {} to {} ({})",
        dir.display(),
        config.endpoint.value,
        config.protocol.value.as_str()
    );
    let metrics_config = MetricsConfig::resolve(
        ExportOverrides {
            endpoint: args.target.endpoint.clone(),
            protocol: args.target.protocol,
            exporter: None,
        },
        MetricsOverrides {
            prometheus_addr: args.prometheus.clone(),
        },
        |name| std::env::var(name).ok(),
    );
    for warning in &metrics_config.warnings {
        eprintln!("hermes-otel: metrics: {warning}");
    }
    let mut exporter = open(dir, config)?;
    let _prometheus = if metrics_config.exporters.value.prometheus {
        let server = PrometheusServer::start(
            &metrics_config.prometheus_addr.value,
            exporter.store().path(),
            metrics_config.attributes.value,
            metrics_config.transport.session_grace_seconds.value,
        )?;
        eprintln!(
            "hermes-otel: serving Prometheus metrics on http://{}/metrics",
            server.addr()
        );
        Some(server)
    } else {
        None
    };
    let mut metrics = MetricExporter::new(metrics_config, exporter.store().path())?;
    let mut reported_metric_error: Option<String> = None;
    let poll = Duration::from_millis(args.poll_ms.max(1));
    let mut last_idle_check: Option<Instant> = None;
    let mut reported_error: Option<String> = None;
    loop {
        if last_idle_check.is_none_or(|t| t.elapsed() >= CLOSE_IDLE_EVERY) {
            exporter.close_idle()?;
            last_idle_check = Some(Instant::now());
        }
        let metric_step = metrics.run_once()?;
        if metric_step.error.is_some() && metric_step.error != reported_metric_error {
            if let Some(e) = &metric_step.error {
                eprintln!("hermes-otel: metrics: {e}; retrying");
            }
            reported_metric_error = metric_step.error.clone();
        }
        if metric_step.exported_points > 0 {
            reported_metric_error = None;
        }
        let step = exporter.run_once()?;
        if step.error != reported_error {
            if let Some(e) = &step.error {
                eprintln!("hermes-otel: {e}; retrying");
            }
            if step.error.is_some() {
                reported_error = step.error.clone();
            }
        }
        if step.exported > 0 {
            reported_error = None;
        }
        if step.more {
            continue;
        }
        if args.drain && step.leased && step.error.is_none() && step.backing_off.is_none() {
            metrics.flush(Instant::now() + Duration::from_secs(10))?;
            metrics.release()?;
            exporter.release()?;
            return Ok(0);
        }
        std::thread::sleep(step.backing_off.unwrap_or(poll));
    }
}

/// Re-sends history.
pub fn export(dir: &Path, args: &ExportArgs) -> Result<i32> {
    let since =
        super::time::parse(&args.since, &jiff::tz::TimeZone::system(), super::time::now()).map_err(Error::Other)?;
    let config = config(&args.target);
    if !config.enabled() {
        return Err(Error::Other(
            "trace export is disabled (OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none)".into(),
        ));
    }
    let mut exporter = open(dir, config)?;
    let sent = exporter.export_history(since, Instant::now() + Duration::from_secs(args.timeout_seconds))?;
    println!("re-sent {sent} spans");
    Ok(0)
}
