//! The old home of the budget gate, kept so `crate::budget_gate::X` paths
//! keep working: everything here lives in `budget/` (`gate.rs`,
//! `handle.rs`, `env.rs`).

pub use crate::budget::{
    budget_gauges, fleet_from_env, BudgetGate, BudgetHandle, CronPause, MAX_PAUSE_ATTEMPTS, PAUSE_RETRY,
    RELOAD_INTERVAL,
};
