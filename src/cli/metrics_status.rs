//! The metrics part of `hermes-meter status`: the store's metric identity,
//! the fold backlog, the last pushes and the settings with their sources.

use hermes_meter_runtime::export::MetricsConfig;
use hermes_meter_store::error::Result;
use hermes_meter_store::Reader;

/// The metrics section of `status --json`.
pub(super) fn json(store: &Reader) -> Result<serde_json::Value> {
    let config = MetricsConfig::from_env(hermes_meter_runtime::export::ExportOverrides::default());
    let settings = super::status::settings_json(&config.describe());
    Ok(serde_json::json!({
        "identity": store.metric_identity()?,
        "state": store.metric_state()?,
        "settings": settings,
        "warnings": config.warnings,
    }))
}

/// Prints the metrics section of `status`.
pub(super) fn print(store: &Reader) -> Result<()> {
    let config = MetricsConfig::from_env(hermes_meter_runtime::export::ExportOverrides::default());
    let identity = store.metric_identity()?;
    let state = store.metric_state()?;
    let now = hermes_meter_store::unix_now();
    let ago = |t: Option<f64>| t.map_or("never".to_string(), |t| hermes_meter_model::display::ago(t, now));
    println!("metrics");
    if !config.pushes() && !config.exporters.value.prometheus {
        println!("  off           not pushed (no OTLP endpoint configured, or the metrics exporter is none); `serve --prometheus` serves them");
    }
    println!(
        "  instance id   {} (service.instance.id, stable for this store)",
        identity.instance_id
    );
    println!("  counted from  {}", ago(Some(identity.start_time)));
    println!(
        "  series        {} ({} gauges), {} finished rows not folded yet",
        state.series, state.gauges, state.unfolded
    );
    println!(
        "  pushed        {} times, {} data points",
        state.exports, state.exported_points
    );
    super::status::print_outcome(
        now,
        state.last_success_at,
        state.last_error.as_deref(),
        state.last_error_at,
        state.lease.as_ref(),
    );
    super::status::print_settings("metric settings", 26, &config.describe(), &config.warnings);
    Ok(())
}
