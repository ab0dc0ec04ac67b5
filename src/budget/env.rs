//! The environment the budget code reads, each variable in one named
//! function, so that a config module can later resolve them once and pass
//! the values in instead.
//!
//! Owns: reading `HERMES_OTEL_BUDGET_MODE` and `HERMES_OTEL_FLEET_URL` for
//! budgets. Must not touch: anything else.

use super::config::BudgetMode;

/// `HERMES_OTEL_BUDGET_MODE` when set to `observe` or `enforce`: wins over
/// the budget file's `mode`.
pub fn budget_mode_from_env() -> Option<BudgetMode> {
    std::env::var(crate::bridge::env::BUDGET_MODE)
        .ok()
        .and_then(|v| BudgetMode::parse(&v))
}

/// Whether `HERMES_OTEL_FLEET_URL` is set: budgets count the fleet's spend.
pub fn fleet_from_env() -> bool {
    std::env::var_os(crate::fleet::FLEET_URL_ENV).is_some_and(|v| !v.is_empty())
}
