//! The rate limits part of `hermes-meter budget list`: each rate limit
//! of global and of the ids the file names, what its span holds now and
//! what a reached one does. Must not touch: the budget file (`budget_file.rs`).

use std::fmt::Write as _;
use std::path::Path;

use hermes_meter_model::budget::BudgetConfig;
use hermes_meter_model::display::escape;
use hermes_meter_runtime::budget::{rate_states, RateState};
use hermes_meter_store::error::Result;
use hermes_meter_store::Writer;

/// Every rate limit's state now (none without rate limits: no store read).
pub(super) fn states(dir: &Path, cfg: &BudgetConfig) -> Result<Vec<RateState>> {
    if !cfg.has_rate_limits() {
        return Ok(Vec::new());
    }
    let store = Writer::open_dir(dir)?.into_reader();
    rate_states(&store, cfg, hermes_meter_store::unix_now())
}

/// `budget list --json`'s `rate_limits`.
pub(super) fn json(cfg: &BudgetConfig, states: &[RateState]) -> serde_json::Value {
    serde_json::json!({
        "action": cfg.rate_action.as_str(),
        "max_wait_seconds": cfg.rate_max_wait,
        "limits": states.iter().map(|s| serde_json::json!({
            "scope": s.scope.as_str(),
            "id": s.id,
            "key": s.rate.key(),
            "limit": s.limit,
            "used": s.used,
        })).collect::<Vec<_>>(),
    })
}

/// `budget list`'s rate limit lines: `rate limit global
/// requests_per_minute: 2 requests of 30 in the last minute`.
pub(super) fn render(cfg: &BudgetConfig, states: &[RateState]) -> String {
    let mut out = String::new();
    for s in states {
        let who = if s.id.is_empty() {
            "global".to_string()
        } else {
            format!("{} {}", s.scope, escape(&s.id))
        };
        let _ = writeln!(
            out,
            "rate limit {who} {}: {} of {} in the last {}",
            s.rate.key(),
            s.rate.format(s.used),
            s.rate.format(s.limit),
            s.rate.per.as_str()
        );
    }
    if cfg.has_rate_limits() {
        let what = match cfg.rate_action {
            hermes_meter_model::budget::rate::RateAction::Stop => {
                "a call past one is stopped before the provider".to_string()
            }
            hermes_meter_model::budget::rate::RateAction::Wait => format!(
                "a call past one waits until it fits (at most {} s, else it is stopped)",
                cfg.rate_max_wait
            ),
        };
        let _ = writeln!(out, "rate limits: {what}");
    }
    out
}
