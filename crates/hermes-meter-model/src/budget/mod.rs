//! Budgets' arithmetic: limits, windows, thresholds, caps, runaway signs,
//! verdicts and the texts Hermes shows.
//!
//! One file a concern:
//!
//! - `config.rs`: the budget file's format ([`BudgetConfig::parse`]), its
//!   defaults and which budgets apply to a session
//!   ([`BudgetConfig::budgets_for`]); `limits.rs` one scope id's limits
//!   and their keys;
//! - `rate.rs`: rate limits (requests, tokens, USD per minute or hour),
//!   sliding, and when a call that waits may go;
//! - `window.rs`: window bounds in the configured zone ([`window_bounds`])
//!   and how a window is summed from the store's spend buckets
//!   ([`bucket_ranges`], [`open_ranges`]);
//! - `verdict.rs`: the verdict over a spend snapshot ([`assess`]),
//!   forecasting ([`forecast`]), the gauges metrics export ([`gauges`]) and
//!   the verdict names ([`verdict::SOFT`], ...);
//! - `caps.rs`: per-session and per-run caps ([`assess_caps`]);
//! - `runaway.rs`: the runaway signs and their reasons ([`runaway_reason`]);
//! - `alert.rs`: the alert kinds and the free→paid model key;
//! - `text.rs`: the texts Hermes shows (notices, block messages, pauses,
//!   the refusal of a tool call that would change the meter: which calls
//!   those are is `hook/protect.rs`'s [`meter_change`]);
//! - `spend_bound.rs`: the most a hook call can add to a spend, known on the
//!   hook thread ([`spend_bound`]), and a reservation's usage;
//! - `first_sync.rs`: what a fleet host whose store never synced does
//!   ([`Unsynced`], [`FIRST_SYNC_WAIT`]).
//!
//! The gate that applies them to a live session (reading the store on the
//! writer thread) is the runtime's: `crates/hermes-meter-runtime/src/budget/`.
//!
//! # Model
//!
//! A *budget* is a limit in USD for one scope id over one window:
//! `global`, or one cron job, sender, profile or model, per `daily`,
//! `weekly` (Monday to Monday) or `monthly` calendar window in one time zone.
//! Each scope has a default (for every id) and overrides by id; an override
//! sets the windows it names and inherits the others from the default.
//! A session is subject to the global budgets and to those of its root
//! session's cron job, sender and profile, and of the model it calls (a
//! subagent counts toward its root's cron job, sender and profile).
//!
//! Spend is settled cost plus open reservations (estimates of calls in
//! flight, see `crates/hermes-meter-store/src/budget/`). At `soft_threshold` × limit a budget is in
//! soft breach (a notice), at `hard_threshold` × limit in hard breach (tools
//! blocked, LLM calls stopped and cron jobs paused, in `enforce` mode); at
//! each of `alert_thresholds` × limit an alert, once per window.

pub mod alert;
mod caps;
mod config;
pub mod edit;
mod first_sync;
pub mod lease;
mod limits;
pub mod rate;
mod runaway;
mod spend_bound;
mod text;
pub mod verdict;
mod window;

pub use crate::hook::protect::meter_change;
pub use alert::paid_model_key;
pub use caps::{
    assess_caps, cap_block_text, cap_notice_text, cap_threshold_reached, cap_threshold_text, Cap, CapLimits, CapScope,
    CapState, CapUnit, TokenCount, Used, LIFETIME,
};
pub use config::{
    format_tokens, limit_key, parse_limit_key, parse_tokens, Budget, BudgetConfig, BudgetMode, BudgetUnit, Downgrade,
    Limits, Scope, ScopeKeys, ScopeLimits, BUDGETS_FILE_NAME,
};
pub use first_sync::{Unsynced, FIRST_SYNC_WAIT, UNSYNCED_ENV};
pub use runaway::{repeat_reason, retry_reason, runaway_reason, runaway_text, RunSigns, RunawayAction, RunawayConfig};
pub use spend_bound::{carries_spend, reservation_usage, spend_bound};
pub use text::{
    block_text, invalid_file_text, left_text, notice_text, pause_reason, protected_text, rate_stop_text,
    rate_wait_text, threshold_text, unsynced_block_text, BLOCKED_MODEL, NOT_YOURS, PROTECTED_PREFIX,
};
pub use verdict::{
    assess, forecast, gauges, threshold_reached, BudgetGauge, BudgetState, FleetShare, Forecast, Frees, Level, Spend,
    WindowUse, ANY_SENDER,
};
pub use window::{
    bucket_ranges, open_ranges, period_name, rolling_frees_at, rolling_start, timestamp, window_bounds, Rolling,
    Window, BUCKET_SECONDS, ROLLING_FLEET_PERIOD, ROLLING_STEP, WINDOW_COUNT,
};
