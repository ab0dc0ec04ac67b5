//! Per-session and per-run caps: limits on one session (every turn and
//! subagent of it, across resumes) or one run (one turn of the root session,
//! with the subagents it started), in USD, tokens or tool calls. Pure.
//!
//! Owns: the `[per_session]` / `[per_run]` tables of the budget file
//! ([`CapLimits`]), which tokens a token cap counts ([`TokenCount`]), the
//! verdict over what a session or run has used ([`assess_caps`]), and the
//! texts Hermes shows for them. Must not touch: the store (which reads what
//! was used, `crates/hermes-meter-store/src/budget/caps.rs`), the gate.
//!
//! A cap has the calendar budgets' soft and hard thresholds, alert
//! thresholds and mode. A USD or token cap in hard breach blocks tool calls
//! and stops LLM calls; a tool-call cap blocks tool calls only, so the
//! model can still give its answer. Caps never pause a cron job: the job's
//! next run is a new session with caps of its own.

use std::fmt;

use serde::Deserialize;

use super::config::{BudgetConfig, BudgetMode};
use super::verdict::Level;

/// The `hermes.budget.window` of a cap's verdicts: the session's or run's
/// whole life, not a calendar window.
pub const LIFETIME: &str = "lifetime";

/// What a cap limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapScope {
    /// One session: every turn and subagent of it.
    Session,
    /// One run of the agent loop: one turn of the root session and the
    /// subagents started in it.
    Run,
}

impl CapScope {
    pub const ALL: [CapScope; 2] = [CapScope::Session, CapScope::Run];

    /// `session` or `run`: the CLI's word and the metrics' scope.
    pub fn as_str(self) -> &'static str {
        match self {
            CapScope::Session => "session",
            CapScope::Run => "run",
        }
    }

    /// The table of the budget file.
    pub fn table(self) -> &'static str {
        match self {
            CapScope::Session => "per_session",
            CapScope::Run => "per_run",
        }
    }

    /// Parses a short name or a table name.
    pub fn parse(text: &str) -> Option<CapScope> {
        CapScope::ALL
            .into_iter()
            .find(|s| s.as_str() == text || s.table() == text)
    }
}

impl fmt::Display for CapScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a cap is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CapUnit {
    Usd,
    Tokens,
    ToolCalls,
}

impl CapUnit {
    pub const ALL: [CapUnit; 3] = [CapUnit::Usd, CapUnit::Tokens, CapUnit::ToolCalls];

    /// The key in the file and the CLI's word.
    pub fn as_str(self) -> &'static str {
        match self {
            CapUnit::Usd => "usd",
            CapUnit::Tokens => "tokens",
            CapUnit::ToolCalls => "tool_calls",
        }
    }

    pub fn parse(text: &str) -> Option<CapUnit> {
        CapUnit::ALL.into_iter().find(|u| u.as_str() == text)
    }

    /// An amount in this unit, as people read it.
    pub fn format(self, v: f64) -> String {
        match self {
            CapUnit::Usd if v.abs() < 0.01 && v != 0.0 => format!("${v:.4}"),
            CapUnit::Usd => format!("${v:.2}"),
            CapUnit::Tokens => format!("{} tokens", v.round() as i64),
            CapUnit::ToolCalls => format!("{} tool calls", v.round() as i64),
        }
    }
}

/// Which tokens a token cap (and the `tokens` figures of `budget list`)
/// counts: `total` (the default) is input, cache reads and writes included,
/// plus output, reasoning included; `input` and `output` one side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenCount {
    #[default]
    Total,
    Input,
    Output,
}

impl TokenCount {
    pub fn parse(text: &str) -> Option<TokenCount> {
        match text {
            "total" => Some(TokenCount::Total),
            "input" => Some(TokenCount::Input),
            "output" => Some(TokenCount::Output),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TokenCount::Total => "total",
            TokenCount::Input => "input",
            TokenCount::Output => "output",
        }
    }

    /// The count of `used`'s tokens.
    pub fn of(self, used: &Used) -> f64 {
        match self {
            TokenCount::Total => (used.input_tokens + used.output_tokens) as f64,
            TokenCount::Input => used.input_tokens as f64,
            TokenCount::Output => used.output_tokens as f64,
        }
    }
}

/// One scope's caps as the file writes them; `None` is no cap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapLimits {
    pub usd: Option<f64>,
    pub tokens: Option<u64>,
    pub tool_calls: Option<u64>,
}

impl CapLimits {
    /// The cap in `unit`, if set.
    pub fn get(&self, unit: CapUnit) -> Option<f64> {
        match unit {
            CapUnit::Usd => self.usd,
            CapUnit::Tokens => self.tokens.map(|t| t as f64),
            CapUnit::ToolCalls => self.tool_calls.map(|t| t as f64),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.usd.is_none() && self.tokens.is_none() && self.tool_calls.is_none()
    }

    pub(super) fn check(&self, table: &str) -> Result<(), String> {
        if let Some(v) = self.usd {
            if !v.is_finite() || v <= 0.0 {
                return Err(format!(
                    "{table}.usd: a cap must be more than 0 USD, not {v} \
                     (to have no cap, remove the key: hermes-meter budget rm)"
                ));
            }
        }
        for (key, v) in [("tokens", self.tokens), ("tool_calls", self.tool_calls)] {
            if v == Some(0) {
                return Err(format!(
                    "{table}.{key}: a cap must be at least 1 (to have no cap, remove the key: hermes-meter budget rm)"
                ));
            }
        }
        Ok(())
    }
}

/// What one session or run has used, from the store.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Used {
    /// Cost of its recorded LLM calls, USD.
    pub settled_usd: f64,
    /// Estimates of its LLM calls in flight (other than the one asking).
    pub reserved_usd: f64,
    /// Input tokens of its recorded calls, cache reads and writes included.
    pub input_tokens: i64,
    /// Output tokens of its recorded calls, reasoning included.
    pub output_tokens: i64,
    /// Tool calls started before the one asking (subagent proxies aside).
    pub tool_calls: i64,
}

/// One cap on one session or run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cap {
    pub scope: CapScope,
    pub unit: CapUnit,
    /// In `unit`.
    pub limit: f64,
}

impl Cap {
    /// `per-session usd`.
    pub fn label(&self) -> String {
        format!("per-{} {}", self.scope, self.unit.as_str())
    }
}

/// A cap, what its session or run used, and the verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct CapState {
    pub cap: Cap,
    /// The root session, or the run's turn id: the id the cap is on.
    pub id: String,
    /// In the cap's unit.
    pub used: f64,
    pub level: Level,
}

impl CapState {
    /// Whether this cap stops LLM calls when in hard breach (a tool-call
    /// cap does not).
    pub fn stops_llm_calls(&self) -> bool {
        self.cap.unit != CapUnit::ToolCalls
    }

    /// The key of this cap's alerts: once per session or run, cap and line.
    pub fn alert_key(&self, line: &str) -> String {
        format!("{}|{}|{}|{line}", self.cap.scope, self.id, self.cap.unit.as_str())
    }
}

/// The verdict of each cap of `scope` set in `cfg` over what the session or
/// run `id` used: hard at `hard_threshold` × cap, soft at `soft_threshold`.
/// USD counts reservations; tokens and tool calls count what was recorded.
pub fn assess_caps(cfg: &BudgetConfig, scope: CapScope, id: &str, used: &Used) -> Vec<CapState> {
    let Some(limits) = cfg.caps.get(&scope) else {
        return Vec::new();
    };
    CapUnit::ALL
        .into_iter()
        .filter_map(|unit| {
            let limit = limits.get(unit)?;
            let amount = match unit {
                CapUnit::Usd => used.settled_usd + used.reserved_usd,
                CapUnit::Tokens => cfg.tokens_counted.of(used),
                CapUnit::ToolCalls => used.tool_calls as f64,
            };
            let level = if amount >= limit * cfg.hard_threshold {
                Level::Hard
            } else if amount >= limit * cfg.soft_threshold {
                Level::Soft
            } else {
                Level::Ok
            };
            Some(CapState {
                cap: Cap { scope, unit, limit },
                id: id.to_string(),
                used: amount,
                level,
            })
        })
        .collect()
}

/// The highest alert threshold `state` reached, if any.
pub fn cap_threshold_reached(cfg: &BudgetConfig, state: &CapState) -> Option<f64> {
    cfg.alert_thresholds
        .iter()
        .rev()
        .copied()
        .find(|t| state.used >= t * state.cap.limit)
}

fn of_whom(state: &CapState) -> &'static str {
    match state.cap.scope {
        CapScope::Session => "this session",
        CapScope::Run => "this run",
    }
}

fn used_of(state: &CapState) -> String {
    let u = state.cap.unit;
    format!(
        "{} used of {} ({:.0}%)",
        u.format(state.used),
        u.format(state.cap.limit),
        100.0 * state.used / state.cap.limit
    )
}

/// The `pre_llm_call` context of an alert threshold reached.
pub fn cap_threshold_text(state: &CapState, threshold: f64) -> String {
    format!(
        "[hermes-meter budget alert] The {} cap of {} has {}, past its {:.0}% alert.",
        state.cap.label(),
        of_whom(state),
        used_of(state),
        100.0 * threshold
    )
}

/// The `pre_llm_call` context of a soft or hard notice.
pub fn cap_notice_text(state: &CapState, mode: BudgetMode) -> String {
    let what = match (state.level, mode, state.stops_llm_calls()) {
        (Level::Hard, BudgetMode::Enforce, true) => "is used up: tool calls and LLM calls are blocked",
        (Level::Hard, BudgetMode::Enforce, false) => "is used up: tool calls are blocked; finish with what you have",
        (Level::Hard, BudgetMode::Observe, _) => "is used up (observe mode: nothing is blocked)",
        _ => "is nearly used up",
    };
    format!(
        "[hermes-meter budget notice] The {} cap of {} has {}. It {what}. {}",
        state.cap.label(),
        of_whom(state),
        used_of(state),
        super::text::NOT_YOURS
    )
}

/// The block message of a cap in hard breach (and the stand-in response of
/// a stopped LLM call).
pub fn cap_block_text(state: &CapState) -> String {
    let next = match state.cap.scope {
        CapScope::Session => "A new session starts with a fresh cap.",
        CapScope::Run => "The next message starts a new run with a fresh cap.",
    };
    format!(
        "BUDGET-EXCEEDED: hermes-meter blocked this call: the {} cap of {} is used up ({}). {next} {}",
        state.cap.label(),
        of_whom(state),
        used_of(state),
        super::text::NOT_YOURS
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> BudgetConfig {
        BudgetConfig::parse(text).expect("parse")
    }

    #[test]
    fn caps_parse_and_check_their_limits() {
        let c =
            cfg("tokens_counted = \"output\"\n[per_session]\nusd = 5\ntokens = 2000000\n[per_run]\ntool_calls = 50");
        assert_eq!(c.tokens_counted, TokenCount::Output);
        assert_eq!(c.caps[&CapScope::Session].usd, Some(5.0));
        assert_eq!(c.caps[&CapScope::Run].get(CapUnit::ToolCalls), Some(50.0));
        assert!(!c.is_empty(), "caps alone are budgets to enforce");
        for bad in [
            "[per_session]\nusd = 0",
            "[per_run]\ntool_calls = 0",
            "[per_run]\ncalls = 3",
            "tokens_counted = \"cached\"",
            "[per_session]\ntokens = -5",
        ] {
            assert!(BudgetConfig::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_cap_is_soft_then_hard_and_counts_what_its_unit_says() {
        let c = cfg("[per_run]\nusd = 1\ntokens = 1000\ntool_calls = 10");
        let used = Used {
            settled_usd: 0.5,
            reserved_usd: 0.35,
            input_tokens: 600,
            output_tokens: 400,
            tool_calls: 3,
        };
        let states = assess_caps(&c, CapScope::Run, "turn-1", &used);
        let level = |u: CapUnit| states.iter().find(|s| s.cap.unit == u).map(|s| (s.used, s.level));
        assert_eq!(level(CapUnit::Usd), Some((0.85, Level::Soft)), "reservations count");
        assert_eq!(level(CapUnit::Tokens), Some((1000.0, Level::Hard)));
        assert_eq!(level(CapUnit::ToolCalls), Some((3.0, Level::Ok)));
        assert!(assess_caps(&c, CapScope::Session, "s", &used).is_empty());
        let input_only = cfg("tokens_counted = \"input\"\n[per_run]\ntokens = 1000");
        assert_eq!(assess_caps(&input_only, CapScope::Run, "t", &used)[0].level, Level::Ok);
    }

    #[test]
    fn texts_say_which_cap_and_what_it_blocks_never_how_to_raise_it() {
        let c = cfg("[per_run]\ntool_calls = 40");
        let used = Used {
            tool_calls: 40,
            ..Used::default()
        };
        let s = &assess_caps(&c, CapScope::Run, "t", &used)[0];
        assert!(!s.stops_llm_calls());
        let block = cap_block_text(s);
        assert!(block.starts_with("BUDGET-EXCEEDED"), "{block}");
        assert!(block.contains("per-run tool_calls cap of this run"), "{block}");
        assert!(block.contains("40 tool calls used of 40 tool calls (100%)"), "{block}");
        assert!(
            block.contains("not yours to change") && !block.contains("budget set"),
            "{block}"
        );
        let notice = cap_notice_text(s, BudgetMode::Enforce);
        assert!(notice.contains("tool calls are blocked; finish"), "{notice}");
        assert!(!notice.contains("budget set"), "{notice}");
        assert_eq!(s.alert_key("hard"), "run|t|tool_calls|hard");
    }
}
