//! Spend digests: the digest of a period built from the store (the model's
//! `digest.rs` compares), its text for a person, and the scheduled ones
//! (`HERMES_METER_DIGEST`): each complete period's raised once in the
//! store, for the alert sinks to deliver once each.
//!
//! Must not touch: delivery (`export/webhook.rs`, the plugin's
//! `_deliver.py`, through the store's alert claims).

use std::fmt::Write as _;
use std::path::Path;

use jiff::tz::TimeZone;
use serde_json::Value;

use hermes_meter_model::digest::{due_periods, Digest, Every};
use hermes_meter_model::display::{escape, human_count};
use hermes_meter_store::error::Result;
use hermes_meter_store::{Outbox, Reader};

/// The most periods a schedule catches up after downtime: a week of days,
/// a month of weeks.
fn catch_up(every: Every) -> usize {
    match every {
        Every::Day => 7,
        Every::Week => 4,
    }
}

/// A digest with the budgets' state when it was made.
#[derive(Debug, Clone)]
pub struct Built {
    pub digest: Digest,
    /// Each budget's line (`agent_tool::budgets`).
    pub budgets: Vec<Value>,
    /// Why the budget file was not read, if it was not.
    pub budget_error: Option<String>,
}

impl Built {
    /// The digest as JSON, the budgets beside it.
    pub fn json(&self) -> Value {
        let mut value = serde_json::to_value(&self.digest).unwrap_or(Value::Null);
        value["budgets"] = serde_json::json!(self.budgets);
        value["budget_file_error"] = serde_json::json!(self.budget_error);
        value
    }
}

/// The digest of `[start, end)` against `[before, start)`, `top` rows a
/// list, with the budgets' state at `now`.
#[allow(clippy::too_many_arguments)]
pub fn build(
    store: &Reader,
    store_dir: &Path,
    tz: &TimeZone,
    every: Every,
    (before, start, end): (f64, f64, f64),
    top: usize,
    now: f64,
) -> Result<Built> {
    let current = store.report(tz, start, end, Some(top))?;
    let previous = store.report(tz, before, start, Some(top))?;
    let digest = hermes_meter_model::digest::digest(every.as_str(), &current, &previous, top.min(5));
    let (budgets, budget_error) = crate::agent_tool::budgets(store, store_dir, now, None)?;
    Ok(Built {
        digest,
        budgets,
        budget_error,
    })
}

/// The zone digests count days in: the budget file's `timezone`, else
/// this machine's.
pub fn zone(store_dir: &Path) -> TimeZone {
    crate::config::load_budgets(&store_dir.join(hermes_meter_model::budget::BUDGETS_FILE_NAME))
        .map(|cfg| cfg.tz)
        .unwrap_or_else(|_| TimeZone::system())
}

/// The human form of a digest: a few lines a person reads in a chat or a
/// terminal, every recorded string escaped.
pub fn render(built: &Built) -> String {
    let d = &built.digest;
    let mut out = String::new();
    let t = &d.current.totals;
    let _ = writeln!(
        out,
        "hermes-meter digest of the {} {} .. {}",
        d.period, d.current.since, d.current.until
    );
    let change = match d.cost_change_pct {
        Some(p) => format!(
            " ({p:+.0}% against the {} before: ${:.4})",
            d.period, d.previous.totals.cost_usd
        ),
        None => format!(" (the {} before: nothing)", d.period),
    };
    let _ = writeln!(
        out,
        "spent ${:.4}{change}; {} sessions, {} LLM calls, {} tokens in, {} out, {} API errors, {} failed tool calls",
        t.cost_usd,
        t.sessions,
        t.llm_calls,
        human_count(t.input_tokens + t.cache_read_tokens + t.cache_write_tokens),
        human_count(t.output_tokens),
        t.api_errors,
        t.tool_failures
    );
    for (title, groups) in [
        ("top models", &d.top_models),
        ("top sessions", &d.top_sessions),
        ("top cron jobs", &d.top_cron_jobs),
        ("top users", &d.top_senders),
    ] {
        if groups.is_empty() {
            continue;
        }
        let rows: Vec<String> = groups
            .iter()
            .map(|g| format!("{} ${:.4}", escape(g.key.as_deref().unwrap_or("-")), g.totals.cost_usd))
            .collect();
        let _ = writeln!(out, "{title}: {}", rows.join("; "));
    }
    for a in &d.anomalies {
        let _ = writeln!(
            out,
            "grew out of line: {} {} ${:.4} (the {} before: ${:.4})",
            a.dimension.replace('_', " "),
            escape(a.key.as_deref().unwrap_or("-")),
            a.cost_usd,
            d.period,
            a.previous_cost_usd
        );
    }
    if let Some(e) = &built.budget_error {
        let _ = writeln!(out, "budgets: the budget file does not parse: {}", escape(e));
    }
    for b in &built.budgets {
        let text = |k: &str| b[k].as_str().unwrap_or_default().to_string();
        let num = |k: &str| b[k].as_f64().unwrap_or_default();
        let id = text("id");
        let amount = |v: f64| {
            if text("unit") == "usd" {
                format!("${v:.4}")
            } else {
                format!("{} tokens", human_count(v as i64))
            }
        };
        let back = match &b["frees"] {
            Value::Object(f) => format!(
                "frees {} at {}",
                amount(f.get("amount").and_then(Value::as_f64).unwrap_or_default()),
                escape(f.get("at").and_then(Value::as_str).unwrap_or_default())
            ),
            _ => format!("resets {}", text("resets_at")),
        };
        let _ = writeln!(
            out,
            "budget {}{} {}: {} of {} used ({}), {back}",
            text("scope"),
            if id.is_empty() {
                String::new()
            } else {
                format!(" {}", escape(&id))
            },
            text("limit"),
            amount(num("used")),
            amount(num("amount")),
            text("level"),
        );
    }
    out
}

/// Raises the digest of every complete period the schedules `every` have
/// due at `now` and no process raised yet: built from the store's ledger,
/// raised once (the first process to raise a period's wins; the others
/// build nothing once it is raised). Returns how many this call raised.
pub fn raise_due(outbox: &Outbox, store_dir: &Path, every: &[Every], now: f64) -> Result<usize> {
    if every.is_empty() {
        return Ok(0);
    }
    let tz = zone(store_dir);
    let at = hermes_meter_model::budget::timestamp(now);
    let secs = |t: jiff::Timestamp| t.as_microsecond() as f64 / 1e6;
    let mut raised = 0;
    for e in every {
        let kind = e.alert_kind();
        // A schedule turned on now sends its last complete period, then
        // each one after: never older ones it was not on for.
        let since = outbox.digest_since(kind, now)?;
        let last = due_periods(*e, hermes_meter_model::budget::timestamp(0.0), at, &tz, 1);
        let since = last.first().map_or(since, |p| since.min(secs(p.start)));
        let due = due_periods(*e, hermes_meter_model::budget::timestamp(since), at, &tz, catch_up(*e));
        for p in due {
            if outbox.digest_raised(kind, &p.name)? {
                continue;
            }
            let built = build(
                outbox,
                store_dir,
                &tz,
                *e,
                (secs(p.previous_start), secs(p.start), secs(p.end)),
                5,
                now,
            )?;
            if outbox.raise_digest(kind, &p.name, &render(&built), now)? {
                tracing::info!(target: "Digest.Raised", "{} digest of {} raised", e.as_str(), p.name);
                raised += 1;
            }
        }
    }
    Ok(raised)
}
