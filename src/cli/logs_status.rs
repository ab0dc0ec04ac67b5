//! The logs part of `hermes-meter status`: the records waiting in the log
//! outbox, what was sent, dropped or refused, the last outcome and the
//! settings with their sources.

use hermes_meter_runtime::export::{ExportConfig, ExportOverrides};
use hermes_meter_store::error::Result;
use hermes_meter_store::Reader;

/// The settings that apply to logs: the exporter and the transport (the
/// rest of an `ExportConfig` is about spans).
fn settings_of(config: &ExportConfig) -> Vec<(&'static str, String, String)> {
    const TRANSPORT: &[&str] = &[
        "sdk_disabled",
        "protocol",
        "endpoint",
        "headers",
        "timeout_ms",
        "compression",
        "insecure",
        "certificate",
        "client_certificate",
        "client_key",
        "service_name",
        "resource_attributes",
    ];
    config
        .describe()
        .into_iter()
        .filter_map(|(name, value, source)| match name {
            "traces_exporter" => Some(("logs_exporter", value, source)),
            n if TRANSPORT.contains(&n) => Some((name, value, source)),
            _ => None,
        })
        .collect()
}

/// The logs section of `status --json`.
pub(super) fn json(store: &Reader) -> Result<serde_json::Value> {
    let config = ExportConfig::resolve_logs(ExportOverrides::default(), hermes_meter_runtime::config::process_var);
    let settings = super::status::settings_json(&settings_of(&config));
    Ok(serde_json::json!({
        "enabled": config.enabled(),
        "state": store.log_export_state()?,
        "settings": settings,
        "warnings": config.warnings,
    }))
}

/// Prints the logs section of `status`.
pub(super) fn print(store: &Reader) -> Result<()> {
    let config = ExportConfig::resolve_logs(ExportOverrides::default(), hermes_meter_runtime::config::process_var);
    let state = store.log_export_state()?;
    let now = hermes_meter_store::unix_now();
    let ago = |t: Option<f64>| t.map_or("never".to_string(), |t| hermes_meter_model::display::ago(t, now));
    println!("logs");
    if !config.enabled() {
        println!(
            "  off           {} records kept until the outbox retention (set {} or {}=otlp to send them)",
            state.pending,
            hermes_meter_runtime::config::export::env::ENDPOINT,
            hermes_meter_runtime::config::export::env::LOGS_EXPORTER
        );
    }
    println!(
        "  pending       {} records, oldest {}",
        state.pending,
        ago(state.oldest_pending_at)
    );
    println!("  exported      {}", state.exported);
    println!("  dropped       {} (retention and cap)", state.dropped);
    println!("  rejected      {} (by the collector)", state.rejected);
    println!("  failed        {} attempts", state.failed);
    super::status::print_outcome(
        now,
        state.last_success_at,
        state.last_error.as_deref(),
        state.last_error_at,
        state.lease.as_ref(),
    );
    super::status::print_settings("log settings", 22, &settings_of(&config), &config.warnings);
    Ok(())
}
