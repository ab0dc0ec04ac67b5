//! The verdict over a budget's spend, forecasts and gauges. Pure.
//!
//! Owns: [`Spend`], [`Level`], [`BudgetState`], the rule [`assess`], the
//! burn-rate [`forecast`], the metrics' budget [`gauges`], and the names of
//! the verdicts counted in the store and in `hermes.budget.verdicts`
//! ([`SOFT`], [`HARD`], [`BLOCKED`], [`PAUSED`]). Must not touch: the store
//! (which reads the spend), texts (`text.rs`) or the gate (`gate.rs`).

use super::caps::TokenCount;
use super::config::{Budget, BudgetConfig, BudgetUnit, Scope};
use super::window::Window;

/// A soft notice was shown.
pub const SOFT: &str = "soft";
/// A hard-breach notice was shown.
pub const HARD: &str = "hard";
/// A tool call was blocked or an LLM call stopped.
pub const BLOCKED: &str = "blocked";
/// A cron job was paused.
pub const PAUSED: &str = "paused";
/// A run looked like a runaway loop (counted once per run).
pub const RUNAWAY: &str = "runaway";
/// An LLM call waited for a rate limit (`[rate_limit] action = "wait"`).
pub const WAITED: &str = "waited";
/// Every verdict counted (attribute `hermes.budget.verdict`).
pub const ALL: [&str; 6] = [SOFT, HARD, BLOCKED, PAUSED, RUNAWAY, WAITED];

/// A budget's spend in its current window, from the store, in the
/// budget's unit (USD, or tokens as `tokens_counted` says).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    /// What the calls that finished in the window used.
    pub settled: f64,
    /// The part of `settled` whose usage was estimated (no usage from the
    /// provider).
    pub estimated: f64,
    /// Estimates of calls in flight (reservations not yet settled).
    pub reserved: f64,
}

impl Spend {
    /// What counts against the limit: settled plus reserved.
    pub fn total(&self) -> f64 {
        self.settled + self.reserved
    }
}

/// A scope id's use in one window in both units, as the store reads it:
/// USD, and tokens split into input (cache reads and writes included) and
/// output (reasoning included) so that any `tokens_counted` can be taken.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowUse {
    pub usd: Spend,
    pub input_tokens: Spend,
    pub output_tokens: Spend,
}

impl WindowUse {
    /// The spend in `unit`, counting tokens as `counted` says.
    pub fn spend(&self, unit: BudgetUnit, counted: TokenCount) -> Spend {
        let (i, o) = (self.input_tokens, self.output_tokens);
        match (unit, counted) {
            (BudgetUnit::Usd, _) => self.usd,
            (BudgetUnit::Tokens, TokenCount::Input) => i,
            (BudgetUnit::Tokens, TokenCount::Output) => o,
            (BudgetUnit::Tokens, TokenCount::Total) => Spend {
                settled: i.settled + o.settled,
                estimated: i.estimated + o.estimated,
                reserved: i.reserved + o.reserved,
            },
        }
    }
}

/// How far a budget is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Ok,
    Soft,
    Hard,
}

impl Level {
    /// `ok`, `soft` or `hard`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Soft => "soft",
            Level::Hard => "hard",
        }
    }
}

/// This host's part of a fleet budget (the runtime's `fleet/`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetShare {
    /// This host's spend and reservations in the window, in the budget's
    /// unit (USD or tokens).
    pub own: f64,
    /// What is left of the lease this host took at its last sync, in the
    /// budget's unit; at or below zero its calls are blocked until the
    /// next sync.
    pub lease_left: f64,
}

/// A budget, its spend and its verdict now.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetState {
    pub budget: Budget,
    /// The fleet's spend with a fleet, else this store's.
    pub spend: Spend,
    pub level: Level,
    /// A hard breach softened because it rests on estimated costs.
    pub softened: bool,
    /// The period's start date, naming it (`2026-11-30`); for a rolling
    /// window, its block (see `period_name`).
    pub period: String,
    /// When the window ends, Unix seconds. For a rolling window, when it
    /// next frees what it holds: in hard breach, the first time enough has
    /// left it to be under the hard line again (what calls in flight
    /// reserve aside); else when its oldest spend leaves.
    pub window_end: i64,
    /// A rolling window's next release: its oldest spend still in it and
    /// when that leaves ("$6.00 frees at 14:15"); `None` for a calendar
    /// window or an empty one.
    pub frees: Option<Frees>,
    /// With a fleet: this host's share and lease.
    pub fleet: Option<FleetShare>,
}

impl BudgetState {
    /// Whether calls must be blocked: a hard breach, or (with a fleet) this
    /// host's lease used up until its next sync.
    pub fn blocks(&self) -> bool {
        self.level == Level::Hard || self.fleet.is_some_and(|f| f.lease_left <= 0.0)
    }
}

/// What leaves a rolling window next: `amount` (in the budget's unit) at
/// `at` (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frees {
    pub amount: f64,
    pub at: i64,
}

/// The verdict for one budget given its spend: the rule of the whole module.
///
/// - spend ≥ hard_threshold × limit: hard, unless `soften_estimated` is on
///   and the settled spend without its estimated part (plus reservations)
///   stays under the hard line, which makes it soft (`softened`);
/// - spend ≥ soft_threshold × limit: soft;
/// - else ok. A limit of 0 is in hard breach from the start.
pub fn assess(cfg: &BudgetConfig, budget: &Budget, spend: Spend) -> (Level, bool) {
    let total = spend.total();
    let hard_line = budget.limit * cfg.hard_threshold;
    let soft_line = budget.limit * cfg.soft_threshold;
    if total >= hard_line {
        if cfg.soften_estimated && spend.estimated > 0.0 && total - spend.estimated < hard_line {
            return (Level::Soft, true);
        }
        (Level::Hard, false)
    } else if total >= soft_line {
        (Level::Soft, false)
    } else {
        (Level::Ok, false)
    }
}

/// The highest of `cfg.alert_thresholds` the spend of `state` has reached,
/// if any (a budget that jumped past several raises the highest).
pub fn threshold_reached(cfg: &BudgetConfig, state: &BudgetState) -> Option<f64> {
    let total = state.spend.total();
    cfg.alert_thresholds
        .iter()
        .rev()
        .copied()
        .find(|t| total >= t * state.budget.limit)
}

/// The burn rate of a window so far and where it lands at the window end,
/// in the budget's unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Forecast {
    /// Per hour, over the window so far.
    pub per_hour: f64,
    /// Spend now plus the rate times the time left.
    pub projected: f64,
}

impl Forecast {
    /// When, at this rate, the spend (`spend` now) reaches `line`
    /// before the window's `end`: Unix seconds; `now` if it already has,
    /// `None` if it does not within the window.
    pub fn reaches(&self, spend: f64, line: f64, now: f64, end: i64) -> Option<f64> {
        if spend >= line {
            return Some(now);
        }
        if self.per_hour <= 0.0 {
            return None;
        }
        let at = now + (line - spend) / self.per_hour * 3600.0;
        (at < end as f64).then_some(at)
    }
}

/// Projects `spend` (accrued from `start` to `now`) to `end` at the
/// window's average rate so far. Times in Unix seconds.
pub fn forecast(spend: f64, start: i64, end: i64, now: f64) -> Forecast {
    let elapsed = (now - start as f64).max(60.0);
    let left = (end as f64 - now).max(0.0);
    let rate = spend / elapsed;
    Forecast {
        per_hour: rate * 3600.0,
        projected: spend + rate * left,
    }
}

/// A budget gauge for metrics: `hermes.budget.spend` and
/// `hermes.budget.limit` with attributes `hermes.budget.scope` (`scope`),
/// `hermes.budget.id` (`id`, `""` for global) and `hermes.budget.window`
/// (`window`). Build them with [`gauges`] from
/// `Reader::budget_states(&cfg, now)`.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetGauge {
    pub scope: &'static str,
    pub id: String,
    pub window: &'static str,
    /// USD or tokens: which gauges these are.
    pub unit: BudgetUnit,
    /// Settled plus reserved, in the current window.
    pub spend: f64,
    pub limit: f64,
    /// At the window's end at the window's rate so far ([`forecast`]).
    pub projected: f64,
}

/// The id label of a sender budget's gauges while sender ids stay out of
/// metrics: the gauges are those of the sender nearest its line.
pub const ANY_SENDER: &str = "*";

/// The gauges of a set of budget states (pure), with each window's
/// forecast from its `start` (`window_start(state)`) to `now`: one per
/// budget, except that without `senders` (the metric attribute allow list
/// names no `sender`) the budgets of gateway users, which are personal
/// ids and unbounded in number, give one gauge per window and unit, id
/// [`ANY_SENDER`]: the sender's that is nearest its line (the one an alert
/// needs).
pub fn gauges(
    states: &[BudgetState],
    now: f64,
    senders: bool,
    window_start: impl Fn(&BudgetState) -> i64,
) -> Vec<BudgetGauge> {
    let ratio = |s: &BudgetState| {
        if s.budget.limit > 0.0 {
            s.spend.total() / s.budget.limit
        } else {
            f64::INFINITY
        }
    };
    // (state, whether it stands for every sender of its window and unit)
    let mut kept: Vec<(&BudgetState, bool)> = Vec::new();
    for s in states {
        if senders || s.budget.scope != Scope::Sender {
            kept.push((s, false));
            continue;
        }
        let same = |(n, folded): &&mut (&BudgetState, bool)| {
            *folded && n.budget.window == s.budget.window && n.budget.unit == s.budget.unit
        };
        match kept.iter_mut().find(same) {
            Some(n) if ratio(s) > ratio(n.0) => n.0 = s,
            Some(_) => {}
            None => kept.push((s, true)),
        }
    }
    kept.into_iter()
        .map(|(s, folded)| BudgetGauge {
            scope: s.budget.scope.as_str(),
            id: if folded {
                ANY_SENDER.to_string()
            } else {
                s.budget.id.clone()
            },
            window: s.budget.window.as_str(),
            unit: s.budget.unit,
            spend: s.spend.total(),
            limit: s.budget.limit,
            // A rolling window has no end to project to: it holds what it holds.
            projected: match s.budget.window {
                Window::Rolling(_) => s.spend.total(),
                _ => forecast(s.spend.total(), window_start(s), s.window_end, now).projected,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Scope;

    fn budget(limit: f64) -> Budget {
        Budget {
            scope: Scope::Global,
            id: String::new(),
            window: Window::Daily,
            unit: crate::budget::BudgetUnit::Usd,
            limit,
        }
    }

    #[test]
    fn verdicts_follow_the_thresholds() {
        let cfg = BudgetConfig::default();
        let spend = |settled, estimated, reserved| Spend {
            settled,
            estimated,
            reserved,
        };
        let b = budget(10.0);
        assert_eq!(assess(&cfg, &b, spend(7.9, 0.0, 0.0)), (Level::Ok, false));
        assert_eq!(assess(&cfg, &b, spend(8.0, 0.0, 0.0)), (Level::Soft, false));
        assert_eq!(
            assess(&cfg, &b, spend(9.0, 0.0, 1.0)),
            (Level::Hard, false),
            "reservations count"
        );
        assert_eq!(assess(&cfg, &b, spend(10.0, 3.0, 0.0)), (Level::Hard, false));
        let soft = BudgetConfig {
            soften_estimated: true,
            ..BudgetConfig::default()
        };
        assert_eq!(assess(&soft, &b, spend(10.0, 3.0, 0.0)), (Level::Soft, true));
        assert_eq!(assess(&soft, &b, spend(14.0, 3.0, 0.0)), (Level::Hard, false));
        assert_eq!(assess(&cfg, &budget(0.0), spend(0.0, 0.0, 0.0)), (Level::Hard, false));
    }

    #[test]
    fn forecasts_project_the_average_rate() {
        let f = forecast(1.0, 0, 86_400, 3600.0);
        assert!((f.per_hour - 1.0).abs() < 1e-9);
        assert!((f.projected - 24.0).abs() < 1e-9);
        assert_eq!(forecast(0.0, 0, 10, 20.0).projected, 0.0);
    }

    #[test]
    fn a_forecast_says_when_a_line_is_reached_within_the_window() {
        // $1 an hour from $1 at 01:00: $10 at 10:00, within the day.
        let f = forecast(1.0, 0, 86_400, 3600.0);
        let at = f.reaches(1.0, 10.0, 3600.0, 86_400).expect("within the day");
        assert!((at - 36_000.0).abs() < 1e-6, "{at}");
        assert_eq!(f.reaches(1.0, 100.0, 3600.0, 86_400), None, "$24 by the end of the day");
        assert_eq!(f.reaches(12.0, 10.0, 3600.0, 86_400), Some(3600.0), "already past");
        assert_eq!(forecast(0.0, 0, 86_400, 3600.0).reaches(0.0, 1.0, 3600.0, 86_400), None);
    }
}
