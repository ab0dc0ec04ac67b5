//! The texts Hermes shows for budgets: notices, block messages, the pause
//! reason, and the model name of the stand-in response of a stopped LLM
//! call. Pure.
//!
//! Owns: wording and money formatting. Must not touch: verdicts
//! (`verdict.rs` decides, this only words them) or the store.

use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::config::BudgetMode;
use super::config::BudgetUnit;
use super::first_sync::{Unsynced, FIRST_SYNC_WAIT, UNSYNCED_ENV};
use super::verdict::{BudgetState, Level};

/// The `model` of the stand-in response that stops an LLM call; the ledger
/// recognises it in `post_api_request` and records no LLM call for it.
pub const BLOCKED_MODEL: &str = "hermes-meter/budget-blocked";

/// An amount in `state`'s unit: `$2.60`, `4.2M tokens`.
fn amount(state: &BudgetState, v: f64) -> String {
    state.budget.unit.format(v)
}

/// What happened to what a budget counts: dollars are spent, tokens used.
fn spent(state: &BudgetState) -> &'static str {
    match state.budget.unit {
        BudgetUnit::Usd => "spent",
        BudgetUnit::Tokens => "used",
    }
}

fn when(end: i64, tz: &TimeZone) -> String {
    Timestamp::from_second(end)
        .map(|t| t.to_zoned(tz.clone()).strftime("%Y-%m-%d %H:%M %Z").to_string())
        .unwrap_or_else(|_| "the end of the window".into())
}

/// The `pre_llm_call` context of an alert threshold (`threshold`, a
/// fraction of the limit) reached.
pub fn threshold_text(state: &BudgetState, threshold: f64, tz: &TimeZone) -> String {
    let s = state;
    format!(
        "[hermes-meter budget alert] The {} budget has {} {} of {} ({:.0}%), past its {:.0}% alert. It resets {}.",
        s.budget.label(),
        amount(s, s.spend.total()),
        spent(s),
        amount(s, s.budget.limit),
        100.0 * s.spend.total() / s.budget.limit,
        100.0 * threshold,
        when(s.window_end, tz),
    )
}

/// The `pre_llm_call` context of a soft or hard notice.
pub fn notice_text(state: &BudgetState, mode: BudgetMode, tz: &TimeZone) -> String {
    let s = state;
    let pct = if s.budget.limit > 0.0 {
        format!(" ({:.0}%)", 100.0 * s.spend.total() / s.budget.limit)
    } else {
        String::new()
    };
    let est = if s.spend.estimated > 0.0 {
        format!(", of which {} estimated", amount(s, s.spend.estimated))
    } else {
        String::new()
    };
    let what = match (s.level, mode) {
        (Level::Hard, BudgetMode::Enforce) => "is exhausted: tool calls and LLM calls are blocked until",
        (Level::Hard, BudgetMode::Observe) => "is exhausted (observe mode: nothing is blocked); it resets",
        _ if s.softened => "is past its limit on estimated costs (soft notice); it resets",
        _ => "is nearly used up; it resets",
    };
    format!(
        "[hermes-meter budget notice] The {} budget has {} {} of {}{pct}{est}. It {what} {}. To raise it: {}",
        s.budget.label(),
        amount(s, s.spend.total()),
        spent(s),
        amount(s, s.budget.limit),
        when(s.window_end, tz),
        s.budget.raise_command(),
    )
}

/// The `pre_tool_call` block message (and the stand-in response of a
/// stopped LLM call).
pub fn block_text(state: &BudgetState, tz: &TimeZone) -> String {
    format!(
        "BUDGET-EXCEEDED: hermes-meter blocked this call: the {} budget is exhausted ({} {} of {}). \
         It resets {}. To raise the limit run: {}",
        state.budget.label(),
        amount(state, state.spend.total()),
        spent(state),
        amount(state, state.budget.limit),
        when(state.window_end, tz),
        state.budget.raise_command(),
    )
}

/// The block message (and stand-in response) of a call on a fleet host
/// whose store never synced, in enforce mode with [`Unsynced::Closed`]:
/// `fleet` is the database's address without its password, `error` the
/// last attempt's failure, if one was recorded.
pub fn unsynced_block_text(fleet: &str, error: Option<&str>) -> String {
    let why = error.map_or(String::new(), |e| format!(" ({e})"));
    format!(
        "BUDGET-EXCEEDED: hermes-meter blocked this call: this host could not reach the fleet database {fleet}{why} \
         within {} s and has never synced with it, so the fleet's budgets are unknown here and may be exhausted. \
         Calls are blocked until the first sync succeeds (it is retried every few seconds); \
         to let them through meanwhile, set {UNSYNCED_ENV}={}.",
        FIRST_SYNC_WAIT.as_secs(),
        Unsynced::Open.as_str(),
    )
}

/// The reason given to `cron.jobs.pause_job`.
pub fn pause_reason(state: &BudgetState) -> String {
    format!(
        "hermes-meter: {} budget exhausted ({} of {}); resume with `hermes cron resume` after raising it: {}",
        state.budget.label(),
        amount(state, state.spend.total()),
        amount(state, state.budget.limit),
        state.budget.raise_command()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Budget, BudgetUnit, Scope, Spend, Window};

    #[test]
    fn texts_name_the_budget_and_how_to_raise_it() {
        let state = BudgetState {
            budget: Budget {
                scope: Scope::CronJob,
                id: "3f9a1c2b7d10".into(),
                window: Window::Daily,
                unit: BudgetUnit::Usd,
                limit: 2.5,
            },
            spend: Spend {
                settled: 2.6,
                ..Spend::default()
            },
            level: Level::Hard,
            softened: false,
            period: "2026-11-30".into(),
            window_end: 1_796_083_200,
            fleet: None,
        };
        let block = block_text(&state, &TimeZone::UTC);
        assert!(block.contains("cron 3f9a1c2b7d10 daily"), "{block}");
        assert!(
            block.contains("hermes-meter budget set cron 3f9a1c2b7d10 daily <usd>"),
            "{block}"
        );
        let notice = notice_text(&state, BudgetMode::Enforce, &TimeZone::UTC);
        assert!(notice.contains("$2.60 spent of $2.50 (104%)"), "{notice}");

        let tokens = BudgetState {
            budget: Budget {
                scope: Scope::Global,
                id: String::new(),
                window: Window::Monthly,
                unit: BudgetUnit::Tokens,
                limit: 100e6,
            },
            spend: Spend {
                settled: 101_250_000.0,
                ..Spend::default()
            },
            ..state
        };
        let block = block_text(&tokens, &TimeZone::UTC);
        assert!(block.contains("global monthly_tokens budget is exhausted"), "{block}");
        assert!(block.contains("(101.2M tokens used of 100M tokens)"), "{block}");
        assert!(block.contains("budget set global monthly_tokens <tokens>"), "{block}");
    }
}
