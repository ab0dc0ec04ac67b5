//! `hermes-otel status`: where the store is and what it holds.

use std::path::PathBuf;

use crate::config::Resolved;
use crate::error::{Error, Result};
use crate::store::{Store, SCHEMA_VERSION};

pub fn run(store: &Store, home: &Resolved<PathBuf>, json: bool) -> Result<i32> {
    let counts = store.counts()?;
    let version = store.schema_version()?;
    if json {
        let value = serde_json::json!({
            "store": { "path": store.path(), "dir_source": home.source.to_string(), "schema_version": version,
                       "supported_schema_version": SCHEMA_VERSION },
            "rows": counts,
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
    Ok(0)
}
