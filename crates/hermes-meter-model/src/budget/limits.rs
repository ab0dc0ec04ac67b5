//! One scope id's limits as the budget file writes them: a limit per
//! window and unit (`daily`, `5h_tokens`) and its rate limits
//! (`requests_per_minute`), and their keys. Pure.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::config::BudgetUnit;
use super::rate::{Rate, RateLimits};
use super::window::{Rolling, Window, WINDOW_COUNT};

/// Limits per window, in USD (`daily`, `5h`) and in tokens
/// (`daily_tokens`, `5h_tokens`); `None` means no limit for that window and
/// unit. Read from a table of the budget file, whose keys are these names:
/// any other key is an error.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "BTreeMap<String, f64>")]
pub struct Limits {
    /// By unit ([`BudgetUnit::ALL`] order), then by [`Window::index`].
    values: [[Option<f64>; WINDOW_COUNT]; 2],
    /// Rate limits (`requests_per_minute`, ...; see `rate.rs`).
    pub rates: RateLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            values: [[None; WINDOW_COUNT]; 2],
            rates: RateLimits::default(),
        }
    }
}

impl TryFrom<BTreeMap<String, f64>> for Limits {
    type Error = String;

    fn try_from(table: BTreeMap<String, f64>) -> Result<Self, String> {
        let mut limits = Limits::default();
        for (key, v) in table {
            if let Some(rate) = Rate::parse(&key) {
                limits.rates.set(rate, Some(v));
                continue;
            }
            let (window, unit) = parse_limit_key(&key).ok_or_else(|| {
                format!(
                    "unknown limit {key:?}: a window is daily, weekly, monthly or a rolling {} \
                     (in USD), or the same with _tokens (daily_tokens, 5h_tokens); a rate limit is \
                     requests_per_minute, tokens_per_minute or usd_per_minute (or _per_hour)",
                    Rolling::names()
                )
            })?;
            limits.set(window, unit, Some(v));
        }
        Ok(limits)
    }
}

impl Limits {
    /// The limit for `window` in `unit`.
    pub fn get(&self, window: Window, unit: BudgetUnit) -> Option<f64> {
        self.values[unit as usize][window.index()]
    }

    /// Sets (or with `None` removes) the limit for `window` in `unit`.
    pub fn set(&mut self, window: Window, unit: BudgetUnit, limit: Option<f64>) {
        self.values[unit as usize][window.index()] = limit;
    }

    /// Every limit set: (window, unit, limit), USD first, windows in
    /// [`Window::every`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Window, BudgetUnit, f64)> + '_ {
        BudgetUnit::ALL
            .into_iter()
            .flat_map(move |u| Window::every().filter_map(move |w| self.get(w, u).map(|l| (w, u, l))))
    }

    /// These limits, with the windows they leave unset taken from `base`.
    pub fn or(self, base: Limits) -> Limits {
        let mut out = self;
        out.rates = self.rates.or(base.rates);
        for (unit, row) in out.values.iter_mut().enumerate() {
            for (w, slot) in row.iter_mut().enumerate() {
                *slot = slot.or(base.values[unit][w]);
            }
        }
        out
    }

    pub(crate) fn is_empty(&self) -> bool {
        *self == Limits::default()
    }

    /// Whether a token limit is set.
    pub(crate) fn in_tokens(&self) -> bool {
        self.iter().any(|(_, u, _)| u == BudgetUnit::Tokens)
    }

    pub(crate) fn check(&self, what: &str) -> Result<(), String> {
        for (w, unit, v) in self.iter() {
            // A limit of 0 would block every call, which nobody means;
            // no limit is written as no key (`hermes-meter budget rm`).
            if !v.is_finite() || v <= 0.0 {
                return Err(format!(
                    "{what}.{}: a limit must be more than 0 {}, not {v} \
                     (to have no limit, remove the key: hermes-meter budget rm)",
                    limit_key(w, unit),
                    if unit == BudgetUnit::Usd { "USD" } else { "tokens" },
                ));
            }
        }
        for (rate, v) in self.rates.iter() {
            if !v.is_finite() || v <= 0.0 {
                return Err(format!(
                    "{what}.{rate}: a rate limit must be more than 0, not {v} \
                     (to have no limit, remove the key: hermes-meter budget rm)"
                ));
            }
        }
        Ok(())
    }
}

/// The key of a limit in the budget file, and the window word of
/// `budget set`: `daily`, `daily_tokens`, `5h`, `7d_tokens`.
pub fn limit_key(window: Window, unit: BudgetUnit) -> &'static str {
    match unit {
        BudgetUnit::Usd => window.as_str(),
        BudgetUnit::Tokens => window.tokens_key(),
    }
}

/// Reads a limit key (`daily`, `weekly_tokens`, `5h`, ...).
pub fn parse_limit_key(text: &str) -> Option<(Window, BudgetUnit)> {
    BudgetUnit::ALL
        .into_iter()
        .flat_map(|u| Window::every().map(move |w| (w, u)))
        .find(|(w, u)| limit_key(*w, *u) == text)
}
