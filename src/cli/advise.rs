//! `hermes-meter advise`: the largest savings the ledger shows over a
//! window (the last 7 days by default), each with its figure and the
//! sessions behind it (the rules: the model's `advise.rs`).

use std::fmt::Write as _;
use std::path::Path;

use clap::Args;

use hermes_meter_model::advise::Advice;
use hermes_meter_model::display::escape;
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::Reader;

#[derive(Debug, Clone, Args)]
pub(crate) struct AdviseArgs {
    /// Start of the window: a date, an RFC 3339 time, or a span back from now (default 7d).
    #[arg(long, default_value = "7d")]
    since: String,
    /// End of the window (exclusive), same forms (default now).
    #[arg(long)]
    until: Option<String>,
    /// Print JSON (`hermes-meter.advice.v1`).
    #[arg(long)]
    json: bool,
}

/// The advice of the window `args` names over the store in `dir`.
pub(super) fn run(store: &Reader, dir: &Path, args: &AdviseArgs) -> Result<i32> {
    let tz = jiff::tz::TimeZone::system();
    let now = hermes_meter_store::unix_now();
    let since = super::time::parse(&args.since, &tz, now).map_err(|e| Error::Other(format!("--since: {e}")))?;
    let until = match &args.until {
        Some(t) => super::time::parse(t, &tz, now).map_err(|e| Error::Other(format!("--until: {e}")))?,
        None => now,
    };
    if until <= since {
        return Err(Error::Other("--until is not after --since: the window is empty".into()));
    }
    let advice = hermes_meter_runtime::advise::advise(store, dir, since, until)?;
    if args.json {
        let text = serde_json::to_string_pretty(&advice).map_err(|e| Error::Other(e.to_string()))?;
        println!("{text}");
    } else {
        print!("{}", render(&advice));
    }
    Ok(0)
}

fn render(a: &Advice) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} LLM calls, ${:.4}, from {} to {}",
        a.llm_calls,
        a.cost_usd,
        hermes_meter_model::budget::timestamp(a.since),
        hermes_meter_model::budget::timestamp(a.until)
    );
    if a.findings.is_empty() {
        let _ = writeln!(out, "nothing the ledger shows could have cost clearly less");
        return out;
    }
    for (i, f) in a.findings.iter().enumerate() {
        let _ = writeln!(out, "{}. about ${:.4} less: {}", i + 1, f.savings_usd, escape(&f.title));
        if !f.sessions.is_empty() {
            let names: Vec<String> = f.sessions.iter().map(|s| escape(s).into_owned()).collect();
            let _ = writeln!(out, "   sessions: {}", names.join(", "));
        }
    }
    let _ = writeln!(
        out,
        "(estimates from the ledger alone: hermes-meter trace SESSION shows each session; tokens differ across models)"
    );
    out
}
