//! The budget gauges the metrics exporter reads: every budget's spend and
//! limit now. Off the hook path. Must not touch: verdicts (`gate.rs`).

use hermes_meter_model::budget;
use hermes_meter_store::Reader;

/// The budget gauges now (`hermes.budget.spend` and `hermes.budget.limit`,
/// one pair per budget; see [`budget::BudgetGauge`]): loads the budget file
/// of `store_dir` and reads every budget's spend (global, overrides, and each
/// id that spent under a default). For the metrics exporter, off the hook
/// path; each gauge maps onto `metrics::BudgetReading` field for field.
pub fn budget_gauges(
    store: &Reader,
    store_dir: &std::path::Path,
    fleet: bool,
    senders: bool,
    now: f64,
) -> hermes_meter_store::Result<Vec<budget::BudgetGauge>> {
    let mut cfg = crate::config::load_budgets(&store_dir.join(budget::BUDGETS_FILE_NAME))?;
    cfg.fleet = fleet;
    if cfg.is_empty() {
        return Ok(Vec::new());
    }
    let start = |s: &budget::BudgetState| {
        budget::window_bounds(s.budget.window, budget::timestamp(now), &cfg.tz)
            .0
            .as_second()
    };
    Ok(budget::gauges(&store.budget_states(&cfg, now)?, now, senders, start))
}
