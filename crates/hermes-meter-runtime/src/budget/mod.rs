//! Budgets at run time: the gate that turns the model's verdicts
//! (`hermes_meter_model::budget`, re-exported here) into what Hermes sees.
//!
//! - `gate.rs` (with `handle.rs` and `quick.rs`): the bridge's [`BudgetGate`]
//!   (reload, notices, tool blocks, LLM-call stops, cron pauses), which
//!   reads the store on the writer thread, and its quick view;
//! - `first_sync.rs`: the state a fleet host's hook threads wait on until
//!   its store first synced;
//! - `caps.rs`: the per-session and per-run caps' use and notices;
//! - `rates.rs`: rate limits (requests, tokens, USD per minute or hour):
//!   counting requests as they start and end, and the stop or wait before
//!   the provider;
//! - `watch.rs`: the runaway watch over a session's recent calls;
//! - `gauges.rs`: the budget gauges the metrics exporter reads;
//! - `exposure.rs`: who can change the limits (the file's and directory's modes).
//!
//! Every budget of a session with its spend and verdict
//! (`Reader::budget_states`, ...) is the store's `crates/hermes-meter-store/src/budget/states.rs`.
//!
//! Must not touch: SQL (every statement is in the store crate), Python, the
//! network. The CLI (`src/cli/budget.rs`) edits the file.

mod caps;
mod exposure;
mod first_sync;
mod gate;
mod gauges;
mod handle;
mod quick;
mod rates;
mod watch;

pub use exposure::{editable_here, world_writable};
pub use gate::BudgetGate;
pub use gauges::{budget_gauges, rate_states, RateState};
pub use handle::{BudgetHandle, CronPause, MAX_PAUSE_ATTEMPTS, PAUSE_RETRY};
