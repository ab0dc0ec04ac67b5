//! `hermes-meter held`: LLM calls whose usage was beyond what any provider
//! bills in one call, kept out of costs and budgets, and confirming them.

use clap::Subcommand;

use hermes_meter_model::display::escape;
use hermes_meter_store::error::Result;
use hermes_meter_store::{Confirmation, Reader, Writer};

#[derive(Debug, Subcommand)]
pub(crate) enum HeldCommand {
    /// Held calls, newest first, with what confirming each would bill.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print one JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Confirm held calls as real: each is billed from its recorded usage at
    /// the price table's cost, in its session, budgets, report and cost metric.
    Confirm {
        /// The calls' ids (`api_request_id`, as `held list` shows them).
        #[arg(required = true)]
        ids: Vec<String>,
    },
}

/// `held list`: the calls held, from a reader.
pub(super) fn list(store: &Reader, limit: usize, json: bool) -> Result<i32> {
    let calls = store.held_calls(limit)?;
    if json {
        println!("{}", serde_json::to_string(&calls).unwrap_or_else(|_| "[]".into()));
        return Ok(0);
    }
    if calls.is_empty() {
        println!("no held calls");
        return Ok(0);
    }
    for c in &calls {
        println!(
            "{}  session {}  {}  input {}  output {}  cache read {}  cache write {}  confirming bills {}",
            escape(&c.api_request_id),
            escape(&c.session_id),
            escape(c.model.as_deref().unwrap_or("?")),
            c.input_tokens,
            c.output_tokens,
            c.cache_read_tokens,
            c.cache_write_tokens,
            c.estimate_usd.map_or("$?".to_string(), |usd| format!("${usd:.4}"))
        );
    }
    println!(
        "{} held; `hermes-meter held confirm ID...` bills those that were real",
        calls.len()
    );
    Ok(0)
}

/// `held confirm`: bills the calls `ids` that were real.
pub(super) fn confirm(store: &mut Writer, ids: &[String]) -> Result<i32> {
    let mut failed = false;
    for id in ids {
        match store.confirm_held(id, hermes_meter_store::unix_now())? {
            Confirmation::Billed(usd) => println!("{}: confirmed, billed ${usd:.4}", escape(id)),
            Confirmation::NotHeld => println!("{}: not held (confirmed before, or never held)", escape(id)),
            Confirmation::Unknown => {
                eprintln!("hermes-meter: no LLM call {}", escape(id));
                failed = true;
            }
        }
    }
    Ok(if failed { 1 } else { 0 })
}
