//! `hermes-meter serve` and `hermes-meter export --since T`.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hermes_meter_runtime::config::{Resolved, Source};
use hermes_meter_runtime::export::{
    Driver, ExportConfig, ExportOverrides, Exporter, MetricsConfig, MetricsOverrides, PrometheusServer, Protocol,
    TracesExporter,
};
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::{Outbox, Writer, DB_FILE_NAME};

/// How often `serve` closes idle spans. Cheap, but there is no need to
/// look more often than a fraction of the idle timeout.
const CLOSE_IDLE_EVERY: Duration = Duration::from_secs(10);

/// Where to send, overriding the OTEL_* variables.
#[derive(Debug, clap::Args)]
pub(super) struct Target {
    /// OTLP endpoint (default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, else localhost).
    #[arg(long, value_name = "URL")]
    endpoint: Option<String>,
    /// `grpc` or `http/protobuf` (default: OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL, else grpc).
    #[arg(long, value_parser = parse_protocol)]
    protocol: Option<Protocol>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    target: Target,
    /// Milliseconds between looks at the outbox when it is empty.
    #[arg(long, default_value_t = 500)]
    poll_ms: u64,
    /// Exit once nothing is ready to send (for scripts and tests); exit 1
    /// if the collector has not accepted it within --drain-timeout-seconds.
    #[arg(long)]
    drain: bool,
    /// With --drain: how long a collector that does not accept is waited for.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    drain_timeout_seconds: u64,
    /// Serve Prometheus text on http://ADDR/metrics (e.g. 127.0.0.1:9464),
    /// with the names the OTel Collector's Prometheus exporter gives.
    /// Without it, OTEL_METRICS_EXPORTER=prometheus serves on
    /// OTEL_EXPORTER_PROMETHEUS_HOST:PORT (default localhost:9464).
    /// Alone, it pushes nothing: add --endpoint (or set
    /// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT or OTEL_TRACES_EXPORTER) to
    /// push traces too.
    #[arg(long, value_name = "ADDR")]
    prometheus: Option<String>,
}

/// The default of `export --timeout-seconds`: long enough for a collector
/// that is starting, short enough that a person at a terminal waits for it.
pub(crate) const EXPORT_TIMEOUT_SECONDS: u64 = 10;

#[derive(Debug, clap::Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    target: Target,
    /// Re-send spans that ended at or after this time: a date (2026-11-30),
    /// an RFC 3339 timestamp, or a span back from now (24h, 7d).
    #[arg(long)]
    since: String,
    /// Give up after this many seconds of a collector that does not accept.
    #[arg(long, default_value_t = EXPORT_TIMEOUT_SECONDS)]
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
        eprintln!("hermes-meter: {warning}");
    }
    config
}

/// The outbox of the store in `dir` with its price table, once the spools
/// of ended processes are applied.
fn open(dir: &Path) -> Result<Outbox> {
    let prices = hermes_meter_runtime::config::load_prices(&dir.join(hermes_meter_runtime::config::PRICING_FILE_NAME))?;
    // Hermes processes that died (kill -9, a crash) left their last events
    // in their spools: apply them first, so the idle closer and the export
    // see every event whose hook returned.
    let mut writer = Writer::open_dir(dir)?;
    writer.set_prices(prices.clone());
    let recovered = hermes_meter_runtime::spool::recover(
        &mut writer,
        dir,
        None,
        hermes_meter_model::hook::DecodeOptions::default(),
    );
    drop(writer);
    if recovered.files > 0 {
        eprintln!(
            "hermes-meter: applied {} events from {} spool file(s) of ended processes",
            recovered.applied, recovered.files
        );
    }
    for e in &recovered.errors {
        eprintln!("hermes-meter: spool: {e}");
    }
    let mut store = Outbox::open(&dir.join(DB_FILE_NAME))?;
    store.set_prices(prices);
    Ok(store)
}

/// Whether the user asked for traces to be pushed somewhere: `--endpoint`,
/// or a traces exporter or endpoint variable. `serve --prometheus` alone
/// serves metrics and pushes nothing.
fn traces_asked(config: &ExportConfig) -> bool {
    config.exporter.source != Source::Default || config.endpoint.source != Source::Default
}

/// Set by SIGTERM or SIGINT: `serve` stops at its next look, releasing its
/// export leases at once (a killed holder's lease would keep every other
/// exporter out for `HERMES_METER_LEASE_SECONDS`).
struct StopSignal {
    stop: Arc<AtomicBool>,
    name: Arc<std::sync::Mutex<&'static str>>,
}

impl StopSignal {
    /// Installs the handlers now (so a signal sent once `serve` said it
    /// runs is caught) and waits for them on a thread of its own.
    fn install() -> Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        let stop = Arc::new(AtomicBool::new(false));
        let name = Arc::new(std::sync::Mutex::new(""));
        // Inside Hermes (`hermes meter serve`) the signals are the host's:
        // taking SIGINT would keep Ctrl-C from reaching it, for good.
        if super::embedded() {
            return Ok(StopSignal { stop, name });
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Other(format!("signal runtime: {e}")))?;
        let (mut term, mut int) = {
            let _guard = runtime.enter();
            let term = signal(SignalKind::terminate()).map_err(|e| Error::Other(format!("SIGTERM handler: {e}")))?;
            let int = signal(SignalKind::interrupt()).map_err(|e| Error::Other(format!("SIGINT handler: {e}")))?;
            (term, int)
        };
        let (stop2, name2) = (stop.clone(), name.clone());
        std::thread::Builder::new()
            .name("hermes-meter-signals".into())
            .spawn(move || {
                let which = runtime.block_on(async {
                    tokio::select! {
                        _ = term.recv() => "SIGTERM",
                        _ = int.recv() => "SIGINT",
                    }
                });
                if let Ok(mut n) = name2.lock() {
                    *n = which;
                }
                stop2.store(true, Ordering::SeqCst);
            })
            .map_err(|e| Error::Other(format!("signal thread: {e}")))?;
        Ok(StopSignal { stop, name })
    }

    fn stopped(&self) -> Option<&'static str> {
        self.stop
            .load(Ordering::SeqCst)
            .then(|| self.name.lock().map(|n| *n).unwrap_or("a signal"))
    }

    /// Sleeps `d`, or less if a stop signal comes.
    fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while self.stopped().is_none() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
    }
}

/// Runs the exporter until SIGTERM/SIGINT (or, with `--drain`, until
/// nothing is ready, or the collector kept refusing past the drain timeout).
pub(super) fn serve(dir: &Path, args: &ServeArgs) -> Result<i32> {
    let mut config = config(&args.target);
    if args.prometheus.is_some() && !traces_asked(&config) {
        config.exporter = Resolved {
            value: TracesExporter::None,
            source: Source::Explicit,
        };
    }
    let metrics_config = MetricsConfig::resolve(
        ExportOverrides {
            endpoint: args.target.endpoint.clone(),
            protocol: args.target.protocol,
            exporter: None,
        },
        MetricsOverrides {
            prometheus_addr: args.prometheus.clone(),
        },
        hermes_meter_runtime::config::process_var,
    );
    for warning in &metrics_config.warnings {
        eprintln!("hermes-meter: metrics: {warning}");
    }
    let signals = StopSignal::install()?;
    // One connection for both signals. Metrics are folded here even when
    // they are only served: the endpoint folds too, and folding is exactly
    // once whoever does it.
    let store = open(dir)?;
    let logs_config = ExportConfig::resolve_logs(
        ExportOverrides {
            endpoint: args.target.endpoint.clone(),
            protocol: args.target.protocol,
            exporter: None,
        },
        hermes_meter_runtime::config::process_var,
    );
    // `--prometheus` alone sends no traces, and then no logs either unless
    // OTEL_LOGS_EXPORTER asks for them.
    let send_logs = logs_config.enabled() && (config.enabled() || logs_config.exporter.source != Source::Default);
    if args.drain && !config.enabled() && !metrics_config.pushes() && !send_logs {
        return Err(Error::Other(format!(
            "serve --drain: nothing to send: no OTLP endpoint is configured (set {} or pass --endpoint)",
            hermes_meter_runtime::config::export::env::ENDPOINT
        )));
    }
    // A trace export that sends nothing holds no lease: it would keep every
    // Hermes process from sending its spans.
    let mut driver = Driver::new(
        store,
        config.enabled().then(|| config.clone()),
        Some(metrics_config.clone()),
        send_logs.then(|| logs_config.clone()),
        CLOSE_IDLE_EVERY,
    )?;
    eprintln!("hermes-meter: serving the store in {}", dir.display());
    if config.enabled() {
        eprintln!(
            "hermes-meter: pushing traces to {} ({})",
            config.endpoint.value,
            config.protocol.value.as_str()
        );
    } else if args.prometheus.is_some() && !config.disabled.value && config.exporter.source == Source::Explicit {
        eprintln!(
            "hermes-meter: not pushing traces (--prometheus alone); add --endpoint URL or set {} to push them",
            hermes_meter_runtime::config::export::env::ENDPOINT
        );
    } else if !config.configured() {
        eprintln!(
            "hermes-meter: not pushing traces: no OTLP endpoint is configured (set {} or pass --endpoint)",
            hermes_meter_runtime::config::export::env::ENDPOINT
        );
    } else {
        eprintln!("hermes-meter: not pushing traces (OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none)");
    }
    if send_logs {
        eprintln!(
            "hermes-meter: pushing log records to {} ({})",
            logs_config.endpoint.value,
            logs_config.protocol.value.as_str()
        );
    }
    let _prometheus = if metrics_config.exporters.value.prometheus {
        let server = PrometheusServer::start(
            &metrics_config.prometheus_addr.value,
            driver.store().path(),
            metrics_config.attributes.value,
            metrics_config.transport.names.value,
            metrics_config.transport.session_grace_seconds.value,
        )?;
        eprintln!(
            "hermes-meter: serving Prometheus metrics (budget gauges included) on http://{}/metrics",
            server.addr()
        );
        Some(server)
    } else {
        None
    };
    if metrics_config.pushes() && metrics_config.exporters.value.otlp {
        eprintln!(
            "hermes-meter: pushing metrics to {} every {} s",
            metrics_config.transport.endpoint.value,
            metrics_config.interval.value.as_secs_f64()
        );
    }
    // Fleet budgets: this store's sync, when no Hermes process holds it.
    let _fleet = hermes_meter_runtime::fleet::task::FleetTask::start_from_env(dir)?;
    if let Ok(Some(fleet)) = hermes_meter_runtime::fleet::FleetConfig::from_env() {
        eprintln!("hermes-meter: syncing budgets with the fleet at {}", fleet.redacted());
    }
    let poll = Duration::from_millis(args.poll_ms.max(1));
    let mut last_error: Option<String> = None;
    let drain_deadline = Instant::now() + Duration::from_secs(args.drain_timeout_seconds);
    loop {
        if let Some(name) = signals.stopped() {
            driver.stop(None)?;
            eprintln!("hermes-meter: stopped by {name}; export leases released");
            return Ok(0);
        }
        // Failures are logged by the exporters (`Export.Failed`,
        // `MetricExport.Failed`: once each, then at debug while they repeat).
        let step = driver.step(None).into_result()?;
        if step.error.is_some() {
            last_error = step.error.clone();
        }
        if step.exported > 0 {
            last_error = None;
        }
        if step.more {
            continue;
        }
        if args.drain {
            if step.leased && step.error.is_none() && step.backing_off.is_none() {
                driver.flush_metrics(Instant::now() + Duration::from_secs(10))?;
                driver.stop(None)?;
                return Ok(0);
            }
            if Instant::now() >= drain_deadline {
                driver.stop(None)?;
                let pending = driver.store().export_state()?.pending;
                let why = last_error
                    .clone()
                    .or_else(|| (!step.leased).then(|| "another process holds the export lease".to_string()))
                    .unwrap_or_else(|| "the collector did not accept".to_string());
                return Err(Error::Other(format!(
                    "serve --drain: gave up after {} s with {pending} spans still waiting in the store \
                     (kept for the next exporter): {why}",
                    args.drain_timeout_seconds
                )));
            }
        }
        let wait = step.backing_off.unwrap_or(poll);
        let wait = if args.drain {
            wait.min(drain_deadline.saturating_duration_since(Instant::now()))
        } else {
            wait
        };
        signals.sleep(wait);
    }
}

/// Re-sends history, saying where to and how it goes.
pub(super) fn export(dir: &Path, args: &ExportArgs) -> Result<i32> {
    let since = super::time::parse(
        &args.since,
        &jiff::tz::TimeZone::system(),
        hermes_meter_store::unix_now(),
    )
    .map_err(Error::Other)?;
    let config = config(&args.target);
    if !config.configured() {
        return Err(Error::Other(format!(
            "no OTLP endpoint is configured: pass --endpoint or set {}",
            hermes_meter_runtime::config::export::env::ENDPOINT
        )));
    }
    if !config.enabled() {
        return Err(Error::Other(
            "trace export is disabled (OTEL_SDK_DISABLED or OTEL_TRACES_EXPORTER=none)".into(),
        ));
    }
    let endpoint = config.endpoint.value.clone();
    // A one-off re-send asked for by hand: the exporter alone, no lease.
    let mut exporter = Exporter::with_store(config, open(dir)?)?;
    eprintln!(
        "hermes-meter: re-sending spans since {} to {endpoint} (giving up after {} s; --timeout-seconds to change)",
        args.since, args.timeout_seconds
    );
    let deadline = Instant::now() + Duration::from_secs(args.timeout_seconds);
    let sent = exporter.export_history_with(since, deadline, |sent, total| {
        eprintln!("hermes-meter: {sent} spans (of at most {total}) accepted by {endpoint}");
    })?;
    println!("re-sent {sent} spans to {endpoint}");
    Ok(0)
}
