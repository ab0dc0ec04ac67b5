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
use super::first_sync::FIRST_SYNC_WAIT;
use super::rate::Rate;
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

/// How the budget comes back, after "it": a calendar window `resets` at
/// its end; a rolling one frees what leaves it (`frees $6.00 at 14:15, as
/// spend leaves its rolling 5h window`).
fn comes_back(s: &BudgetState, tz: &TimeZone) -> String {
    match (s.budget.window.rolling(), s.frees) {
        (None, _) => format!("resets {}", when(s.window_end, tz)),
        (Some(r), Some(f)) => format!(
            "frees {} at {}, as spend leaves its rolling {} window",
            amount(s, f.amount),
            when(f.at, tz),
            r.as_str()
        ),
        (Some(r), None) => format!("frees up as spend leaves its rolling {} window", r.as_str()),
    }
}

/// What is left of a budget and when it comes back, for the people and
/// the agent reading a list: `$4.20 left; resets 2026-12-08 00:00 CET`, or
/// for a rolling window `$4.20 left; frees $6.00 at 2026-12-07 14:15 UTC,
/// as spend leaves its rolling 5h window`. `hard_line` is the limit times
/// the hard threshold.
pub fn left_text(state: &BudgetState, hard_line: f64, tz: &TimeZone) -> String {
    let left = (hard_line - state.spend.total()).max(0.0);
    let back = match (state.level, state.budget.window.rolling()) {
        (Level::Hard, Some(_)) => format!(
            "back under its line at {}; it {}",
            when(state.window_end, tz),
            comes_back(state, tz)
        ),
        _ => format!("it {}", comes_back(state, tz)),
    };
    format!("{} left; {back}", amount(state, left))
}

/// The `pre_llm_call` context of an alert threshold (`threshold`, a
/// fraction of the limit) reached.
pub fn threshold_text(state: &BudgetState, threshold: f64, tz: &TimeZone) -> String {
    let s = state;
    format!(
        "[hermes-meter budget alert] The {} budget has {} {} of {} ({:.0}%), past its {:.0}% alert. It {}.",
        s.budget.label(),
        amount(s, s.spend.total()),
        spent(s),
        amount(s, s.budget.limit),
        100.0 * s.spend.total() / s.budget.limit,
        100.0 * threshold,
        comes_back(s, tz),
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
    let back = comes_back(s, tz);
    let what = match (s.level, mode) {
        (Level::Hard, BudgetMode::Enforce) => format!(
            "is exhausted: tool calls and LLM calls are blocked until {}",
            when(s.window_end, tz)
        ),
        (Level::Hard, BudgetMode::Observe) => format!("is exhausted (observe mode: nothing is blocked); it {back}"),
        _ if s.softened => format!("is past its limit on estimated costs (soft notice); it {back}"),
        _ => format!("is nearly used up; it {back}"),
    };
    format!(
        "[hermes-meter budget notice] The {} budget has {} {} of {}{pct}{est}. It {what}. {NOT_YOURS}",
        s.budget.label(),
        amount(s, s.spend.total()),
        spent(s),
        amount(s, s.budget.limit),
    )
}

/// What every text the agent reads says of the limit: that it is the
/// operator's, never how to lift it (the agent has a shell; see
/// `protect.rs`).
pub const NOT_YOURS: &str =
    "This limit is set by the operator and is not yours to change: finish within it and tell the user.";

/// The `pre_tool_call` block message (and the stand-in response of a
/// stopped LLM call) of a budget that blocks (`state.blocks()`), saying
/// what is true of it: exhausted by what calls spent (`hard_line`: the
/// limit times the hard threshold); at its line only with what calls in
/// flight reserve (the call may go once they settle); or, on a fleet host
/// under the fleet's line, this host's share used up until its next sync.
pub fn block_text(state: &BudgetState, hard_line: f64, tz: &TimeZone) -> String {
    let s = state;
    let label = s.budget.label();
    let limit = amount(s, s.budget.limit);
    let settled = amount(s, s.spend.settled);
    let why = if s.level != Level::Hard {
        let used = s.fleet.map_or(s.spend.settled, |f| f.own);
        format!(
            "this host's share of the fleet's {label} budget is used up until its next sync with the fleet \
             ({} {} here; {settled} {} of {limit} fleet-wide). Calls go again once the sync grants more, \
             while the fleet is under its line",
            amount(s, used),
            spent(s),
            spent(s),
        )
    } else if s.spend.settled < hard_line {
        format!(
            "the {label} budget has {settled} {} of {limit}, and calls in flight reserve {} more: together they \
             reach its line. Calls go again if those spend less than they reserve; else it {}",
            spent(s),
            amount(s, s.spend.reserved),
            comes_back(s, tz),
        )
    } else if s.budget.window.rolling().is_some() {
        format!(
            "the {label} budget is exhausted ({settled} {} of {limit}). Calls go again at {}, once enough has \
             left the window; it {}",
            spent(s),
            when(s.window_end, tz),
            comes_back(s, tz),
        )
    } else {
        format!(
            "the {label} budget is exhausted ({settled} {} of {limit}). It resets {}",
            spent(s),
            when(s.window_end, tz),
        )
    };
    format!("BUDGET-EXCEEDED: hermes-meter blocked this call: {why}. {NOT_YOURS}")
}

/// The stand-in response of an LLM call a rate limit stopped: `label` is
/// the scope id's (`global`, `model gpt-4o`), `used` what the span held
/// with the call, `back` when a call would fit again (if within the
/// hour). Says the limit is the operator's, never how to lift it.
pub fn rate_stop_text(label: &str, rate: Rate, limit: f64, used: f64, back: Option<i64>, tz: &TimeZone) -> String {
    let again = back.map_or(String::new(), |t| format!(" Calls fit again at {}.", when(t, tz)));
    format!(
        "BUDGET-EXCEEDED: hermes-meter stopped this call: the {label} rate limit of {} per {} is reached \
         ({} in the last {}).{again} {NOT_YOURS}",
        rate.format(limit),
        rate.per.as_str(),
        rate.format(used),
        rate.per.as_str(),
    )
}

/// What is logged of an LLM call that waits for a rate limit.
pub fn rate_wait_text(label: &str, rate: Rate, limit: f64, seconds: f64) -> String {
    format!(
        "an LLM call waits {seconds:.1} s for the {label} rate limit of {} per {}",
        rate.format(limit),
        rate.per.as_str()
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
         Calls are blocked until the first sync succeeds (it is retried every few seconds). {NOT_YOURS}",
        FIRST_SYNC_WAIT.as_secs(),
    )
}

/// The block message (and stand-in response) of a call held because the
/// budget file does not parse and no limits were loaded before it. The
/// parse error is the operator's to read (`status`, the log), not the
/// agent's.
pub fn invalid_file_text() -> String {
    "BUDGET-EXCEEDED: hermes-meter held this call: the operator's budget file does not parse, so the limits \
     it sets cannot be checked, and calls are held until it is fixed. The file is the operator's to fix, not \
     yours: stop here and tell the user."
        .to_string()
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

/// How [`protected_text`] begins: a refusal to let the agent change its
/// brake, which stops nothing else (the binding tells it from a stop).
pub const PROTECTED_PREFIX: &str = "BUDGET-PROTECTED:";

/// The block message of a tool call [`meter_change`] named.
pub fn protected_text(what: &str) -> String {
    format!(
        "{PROTECTED_PREFIX} hermes-meter refused this call: it would change {what}, which limits this agent and \
         is the operator's to change, not the agent's. Go on without it, or tell the user what you needed."
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::{Budget, BudgetUnit, Scope, Spend, Window};

    #[test]
    fn texts_name_the_budget_and_never_tell_the_agent_how_to_raise_it() {
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
            frees: None,
            fleet: None,
        };
        let block = block_text(&state, 2.5, &TimeZone::UTC);
        assert!(block.contains("cron 3f9a1c2b7d10 daily"), "{block}");
        // The agent reads it: never how to lift the limit.
        assert!(block.contains("not yours to change"), "{block}");
        assert!(
            !block.contains("budget set") && !block.contains("hermes-meter budget"),
            "{block}"
        );
        let notice = notice_text(&state, BudgetMode::Enforce, &TimeZone::UTC);
        assert!(notice.contains("$2.60 spent of $2.50 (104%)"), "{notice}");
        assert!(!notice.contains("budget set"), "{notice}");
        // The pause reason is for the operator (`hermes cron list`).
        assert!(pause_reason(&state).contains("hermes-meter budget set cron 3f9a1c2b7d10 daily <usd>"));

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
        let block = block_text(&tokens, 100e6, &TimeZone::UTC);
        assert!(block.contains("global monthly_tokens budget is exhausted"), "{block}");
        assert!(block.contains("(101.2M tokens used of 100M tokens)"), "{block}");
        assert!(!block.contains("budget set"), "{block}");
    }

    /// A rolling window's texts say when spend leaves it, never "resets".
    #[test]
    fn a_rolling_budget_says_what_frees_when() {
        let five = Window::parse("5h").expect("5h");
        let state = BudgetState {
            budget: Budget {
                scope: Scope::Global,
                id: String::new(),
                window: five,
                unit: BudgetUnit::Usd,
                limit: 10.0,
            },
            spend: Spend {
                settled: 10.5,
                ..Spend::default()
            },
            level: Level::Hard,
            softened: false,
            period: "5h@2026-12-07T10:00Z".into(),
            // 2026-12-07 15:30 and 14:15 UTC.
            window_end: 1_796_657_400,
            frees: Some(crate::budget::Frees {
                amount: 6.0,
                at: 1_796_652_900,
            }),
            fleet: None,
        };
        let block = block_text(&state, 10.0, &TimeZone::UTC);
        assert!(
            block.contains("global 5h budget is exhausted ($10.50 spent of $10.00)"),
            "{block}"
        );
        assert!(block.contains("Calls go again at 2026-12-07 15:30 UTC"), "{block}");
        assert!(block.contains("frees $6.00 at 2026-12-07 14:15 UTC"), "{block}");
        assert!(!block.contains("resets"), "{block}");
        let left = left_text(&state, 10.0, &TimeZone::UTC);
        assert!(
            left.starts_with("$0.00 left; back under its line at 2026-12-07 15:30 UTC"),
            "{left}"
        );
        let soft = BudgetState {
            level: Level::Soft,
            spend: Spend {
                settled: 8.5,
                ..Spend::default()
            },
            ..state.clone()
        };
        let left = left_text(&soft, 10.0, &TimeZone::UTC);
        assert_eq!(
            left,
            "$1.50 left; it frees $6.00 at 2026-12-07 14:15 UTC, as spend leaves its rolling 5h window"
        );
        let notice = notice_text(&soft, BudgetMode::Enforce, &TimeZone::UTC);
        assert!(
            notice.contains(
                "nearly used up; it frees $6.00 at 2026-12-07 14:15 UTC, as spend leaves its rolling 5h window"
            ),
            "{notice}"
        );
    }

    /// A call held back by other calls' reservations, or by a fleet host's
    /// lease while the fleet is under its line, is not told the budget is
    /// exhausted.
    #[test]
    fn a_block_says_what_holds_the_call_back() {
        let state = BudgetState {
            budget: Budget {
                scope: Scope::Global,
                id: String::new(),
                window: Window::Daily,
                unit: BudgetUnit::Usd,
                limit: 0.5,
            },
            spend: Spend {
                settled: 0.46,
                estimated: 0.0,
                reserved: 0.06,
            },
            level: Level::Hard,
            softened: false,
            period: "2026-11-30".into(),
            window_end: 1_796_083_200,
            frees: None,
            fleet: None,
        };
        let reserved = block_text(&state, 0.5, &TimeZone::UTC);
        assert!(!reserved.contains("exhausted"), "{reserved}");
        assert!(
            reserved.contains("$0.46 spent of $0.50, and calls in flight reserve $0.06 more"),
            "{reserved}"
        );
        let leased = BudgetState {
            spend: Spend {
                settled: 0.3,
                ..state.spend
            },
            level: Level::Soft,
            fleet: Some(crate::budget::FleetShare {
                own: 0.12,
                lease_left: 0.0,
            }),
            ..state.clone()
        };
        let lease = block_text(&leased, 0.5, &TimeZone::UTC);
        assert!(!lease.contains("exhausted") && !lease.contains("resets"), "{lease}");
        assert!(
            lease.contains("this host's share of the fleet's global daily budget is used up"),
            "{lease}"
        );
        assert!(
            lease.contains("($0.12 spent here; $0.30 spent of $0.50 fleet-wide)"),
            "{lease}"
        );
    }

    #[test]
    fn the_message_says_it_is_not_the_agents_to_change_and_not_how() {
        let text = protected_text("the meter's budgets (hermes-meter budget ...)");
        assert!(text.starts_with("BUDGET-PROTECTED: "));
        assert!(text.contains("the operator's to change"));
        assert!(!text.contains("budget set"));
    }
}
