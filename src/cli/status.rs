//! `hermes-otel status`: where the store is and what it holds.

use std::path::PathBuf;

use crate::config::Resolved;
use crate::error::{Error, Result};
use crate::store::{Store, SCHEMA_VERSION};

pub fn run(store: &Store, home: &Resolved<PathBuf>, json: bool) -> Result<i32> {
    let counts = store.counts()?;
    let version = store.schema_version()?;
    let export = store.export_state()?;
    let export_config = crate::export::ExportConfig::from_env(crate::export::ExportOverrides::default());
    let settings: Vec<_> = export_config
        .describe()
        .into_iter()
        .map(|(name, value, source)| serde_json::json!({"name": name, "value": value, "source": source}))
        .collect();
    if json {
        let value = serde_json::json!({
            "store": { "path": store.path(), "dir_source": home.source.to_string(), "schema_version": version,
                       "supported_schema_version": SCHEMA_VERSION },
            "rows": counts,
            "export": export,
            "export_settings": settings,
        });
        let text = serde_json::to_string_pretty(&value).map_err(|e| Error::Other(e.to_string()))?;
        println!("{text}");
        return Ok(0);
    }
    println!("store           {} (from {})", store.path().display(), home.source);
    println!("schema version  {version} (this build: {SCHEMA_VERSION})");
    println!("journal         {} events", counts.journal);
    println!("runs            {}", counts.runs);
    println!("turns           {}", counts.turns);
    println!("llm calls       {}", counts.llm_calls);
    println!("api errors      {}", counts.llm_call_errors);
    println!("tool calls      {}", counts.tool_calls);
    println!("subagent edges  {}", counts.subagent_edges);
    println!("repaired kwargs {}", counts.decode_problems);
    print_export(&export, &export_config);
    Ok(0)
}

fn print_export(state: &crate::store::ExportState, config: &crate::export::ExportConfig) {
    let now = crate::export::unix_now();
    let ago = |t: Option<f64>| t.map_or("never".to_string(), |t| format!("{:.0} s ago", (now - t).max(0.0)));
    println!("export");
    println!(
        "  pending       {} spans ({} held for their session's grace period), oldest {}",
        state.pending,
        state.held,
        ago(state.oldest_pending_at)
    );
    println!("  exported      {}", state.exported);
    println!("  dropped       {} (retention cap)", state.dropped);
    println!("  rejected      {} (by the collector)", state.rejected);
    println!("  sampled out   {}", state.sampled_out);
    println!("  last success  {}", ago(state.last_success_at));
    if let Some(e) = &state.last_error {
        println!("  last error    {e} ({})", ago(state.last_error_at));
    }
    match &state.lease {
        Some(l) if l.expires_at >= now => {
            println!("  lease         {} (expires in {:.0} s)", l.holder, l.expires_at - now)
        }
        Some(l) => println!("  lease         free (last held by {})", l.holder),
        None => println!("  lease         free"),
    }
    println!("export settings");
    for (name, value, source) in config.describe() {
        println!("  {name:<22}{value} (from {source})");
    }
    for warning in &config.warnings {
        println!("  warning: {warning}");
    }
}
