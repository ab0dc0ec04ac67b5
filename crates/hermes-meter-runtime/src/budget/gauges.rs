//! The budget gauges the metrics exporter reads (every budget's spend and
//! limit now), and what every rate limit's span holds now (`budget list`).
//! Off the hook path. Must not touch: verdicts (`gate.rs`, `rates.rs`).

use hermes_meter_model::budget::rate::{rate_used_at, Rate, RateUnit};
use hermes_meter_model::budget::{self, BudgetConfig, Scope, TokenCount};
use hermes_meter_store::{RateAmounts, Reader};

/// A rate limit of one scope id and what its span holds now.
#[derive(Debug, Clone, PartialEq)]
pub struct RateState {
    pub scope: Scope,
    /// `""` for global.
    pub id: String,
    pub rate: Rate,
    pub limit: f64,
    /// What the span holds now (requests started, or their USD or tokens).
    pub used: f64,
}

/// Every rate limit set for global and for the ids the file names, with
/// what its span holds now (a scope's default applies to each id, whose
/// use shows at its calls' verdicts, not here).
pub fn rate_states(store: &Reader, cfg: &BudgetConfig, now: f64) -> hermes_meter_store::Result<Vec<RateState>> {
    let mut out = Vec::new();
    for (scope, limits) in &cfg.scopes {
        let ids: Vec<String> = match scope {
            Scope::Global => vec![String::new()],
            _ => limits.overrides.keys().cloned().collect(),
        };
        for id in ids {
            for (rate, limit) in cfg.limits(*scope, &id).rates.iter() {
                let buckets = span_values(store, (*scope, &id), rate, cfg.tokens_counted, now)?;
                out.push(RateState {
                    scope: *scope,
                    id: id.clone(),
                    rate,
                    limit,
                    used: rate_used_at(rate.per, &buckets, now),
                });
            }
        }
    }
    Ok(out)
}

/// The buckets of `rate`'s span of one scope id at `now`, oldest first,
/// in the limit's unit (those of calls that wait, ahead of now, included).
pub(super) fn span_values(
    store: &Reader,
    (scope, id): (Scope, &str),
    rate: Rate,
    counted: TokenCount,
    now: f64,
) -> hermes_meter_store::Result<Vec<(i64, f64)>> {
    let step = rate.per.step();
    let since = (now as i64 - rate.per.seconds()).div_euclid(step) * step - step;
    Ok(store
        .rate_buckets(scope, id, rate.per, since)?
        .iter()
        .map(|(b, a)| (*b, rate_value(rate, counted, a)))
        .collect())
}

/// A rate limit's value of some amounts.
pub(super) fn rate_value(rate: Rate, counted: TokenCount, a: &RateAmounts) -> f64 {
    match (rate.unit, counted) {
        (RateUnit::Requests, _) => a.requests,
        (RateUnit::Usd, _) => a.usd,
        (RateUnit::Tokens, TokenCount::Total) => a.input_tokens + a.output_tokens,
        (RateUnit::Tokens, TokenCount::Input) => a.input_tokens,
        (RateUnit::Tokens, TokenCount::Output) => a.output_tokens,
    }
}

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
