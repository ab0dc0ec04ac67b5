//! Rate limits: requests, tokens or USD per minute or per hour, sliding,
//! per scope id, checked before each provider call. Pure.
//!
//! Owns: [`Rate`] (what a limit counts over how long), the rate buckets'
//! widths ([`RATE_STEP`]), [`RateUse`], the rule [`rate_over`], when a call
//! that waits may go ([`rate_fits_at`]), and [`RateAction`]. Must not
//! touch: the store (which keeps the buckets and reads them), texts
//! (`text.rs`) or the gate.
//!
//! # Model
//!
//! A rate limit is a sliding window ending now: a minute counted in
//! 5-second steps, an hour in 1-minute steps. At any moment it counts every
//! step that began at or after "now minus its width" (rounded down to a
//! step): never less than its width, at most one step more, so the limit
//! holds. A provider request counts when it starts (`pre_api_request`),
//! with the estimate its reservation holds; the call's real use replaces
//! the estimate when it ends. A call starts while the requests before it
//! (itself included) are at most the limit and the tokens or USD of the
//! others are under it.

use std::fmt;

use super::config::BudgetUnit;

/// What a rate limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RateUnit {
    /// Provider requests (each attempt, retries included).
    Requests,
    /// Tokens, as `tokens_counted` says.
    Tokens,
    /// USD.
    Usd,
}

/// The span a rate limit counts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RatePer {
    Minute,
    Hour,
}

/// The step each span moves in, by [`RatePer`] (also the bucket level in
/// the store): 5 s for a minute, 60 s for an hour.
pub const RATE_STEP: [i64; 2] = [5, 60];

impl RatePer {
    /// The span in seconds.
    pub fn seconds(self) -> i64 {
        match self {
            RatePer::Minute => 60,
            RatePer::Hour => 3600,
        }
    }

    /// Its step (see [`RATE_STEP`]).
    pub fn step(self) -> i64 {
        RATE_STEP[self as usize]
    }

    /// `minute` or `hour`.
    pub fn as_str(self) -> &'static str {
        match self {
            RatePer::Minute => "minute",
            RatePer::Hour => "hour",
        }
    }
}

/// One kind of rate limit: a unit per a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate {
    pub unit: RateUnit,
    pub per: RatePer,
}

impl Rate {
    /// Every kind, in the order limits are listed and checked.
    pub const ALL: [Rate; 6] = [
        Rate::new(RateUnit::Requests, RatePer::Minute),
        Rate::new(RateUnit::Requests, RatePer::Hour),
        Rate::new(RateUnit::Tokens, RatePer::Minute),
        Rate::new(RateUnit::Tokens, RatePer::Hour),
        Rate::new(RateUnit::Usd, RatePer::Minute),
        Rate::new(RateUnit::Usd, RatePer::Hour),
    ];

    pub const fn new(unit: RateUnit, per: RatePer) -> Rate {
        Rate { unit, per }
    }

    /// Its key in the budget file: `requests_per_minute`, `usd_per_hour`.
    pub fn key(self) -> &'static str {
        match (self.unit, self.per) {
            (RateUnit::Requests, RatePer::Minute) => "requests_per_minute",
            (RateUnit::Requests, RatePer::Hour) => "requests_per_hour",
            (RateUnit::Tokens, RatePer::Minute) => "tokens_per_minute",
            (RateUnit::Tokens, RatePer::Hour) => "tokens_per_hour",
            (RateUnit::Usd, RatePer::Minute) => "usd_per_minute",
            (RateUnit::Usd, RatePer::Hour) => "usd_per_hour",
        }
    }

    /// Reads a key.
    pub fn parse(key: &str) -> Option<Rate> {
        Rate::ALL.into_iter().find(|r| r.key() == key)
    }

    /// Its place in [`Rate::ALL`].
    pub fn index(self) -> usize {
        self.unit as usize * 2 + self.per as usize
    }

    /// An amount of its unit as people read it: `12 requests`, `$0.40`,
    /// `120k tokens`.
    pub fn format(self, v: f64) -> String {
        match self.unit {
            RateUnit::Requests => format!("{v:.0} request{}", if v == 1.0 { "" } else { "s" }),
            RateUnit::Tokens => BudgetUnit::Tokens.format(v),
            RateUnit::Usd => BudgetUnit::Usd.format(v),
        }
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// What a rate limit that is reached does to the call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RateAction {
    /// The call is answered by a stand-in, the provider is not called (the
    /// default: an unattended run stops).
    #[default]
    Stop,
    /// The call waits until it fits, at most `max_wait`; longer, it stops.
    Wait,
}

impl RateAction {
    pub fn parse(text: &str) -> Option<RateAction> {
        match text {
            "stop" => Some(RateAction::Stop),
            "wait" => Some(RateAction::Wait),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RateAction::Stop => "stop",
            RateAction::Wait => "wait",
        }
    }
}

/// The default longest wait of [`RateAction::Wait`], seconds.
pub const DEFAULT_MAX_WAIT_SECONDS: f64 = 60.0;

/// The rate buckets of one scope id and span, oldest first: (bucket
/// start, amount in the limit's unit). Buckets may lie ahead of now: a
/// call that waits counts from when it goes.
pub type RateBuckets = Vec<(i64, f64)>;

/// What counts against a limit at `t`: every bucket that began at or after
/// `t - width` rounded down to a step, and not after `t`.
pub fn rate_used_at(per: RatePer, buckets: &[(i64, f64)], t: f64) -> f64 {
    let step = per.step();
    let from = (t.floor() as i64 - per.seconds()).div_euclid(step) * step;
    buckets
        .iter()
        .filter(|(b, _)| *b >= from && (*b as f64) <= t)
        // Folded from +0 (an empty `sum` of floats is -0, "-0 requests").
        .fold(0.0, |sum, (_, v)| sum + v)
}

/// Whether a call of `own` (in the limit's unit; 1 for requests) is over
/// `limit` at `t`, the other calls' use being `buckets` (its own excluded):
/// requests when the others and it exceed the limit; tokens and USD when
/// the others alone reach it (a call starts while the spend before it is
/// under the limit, as budgets do).
pub fn rate_over(rate: Rate, limit: f64, buckets: &[(i64, f64)], own: f64, t: f64) -> bool {
    let used = rate_used_at(rate.per, buckets, t);
    match rate.unit {
        RateUnit::Requests => used + own > limit,
        RateUnit::Tokens | RateUnit::Usd => used >= limit,
    }
}

/// The first moment from `now` on when the call fits (see [`rate_over`]):
/// `now`, or when enough of the others' use has left the window (a bucket
/// leaves one step plus the width after it began); `None` if it never
/// fits within `horizon` seconds (a limit below one call's own use).
pub fn rate_fits_at(rate: Rate, limit: f64, buckets: &[(i64, f64)], own: f64, now: f64, horizon: f64) -> Option<f64> {
    let leaves = |b: i64| (b + rate.per.step() + rate.per.seconds()) as f64;
    let mut candidates: Vec<f64> = std::iter::once(now)
        .chain(buckets.iter().map(|(b, _)| leaves(*b)).filter(|t| *t > now))
        .filter(|t| *t <= now + horizon)
        .collect();
    candidates.sort_by(f64::total_cmp);
    candidates.dedup();
    // A bucket ahead of now (a call waiting) counts from when it begins:
    // a candidate must hold until every later bucket of the window is in.
    candidates
        .into_iter()
        .find(|t| !rate_over(rate, limit, buckets, own, *t) && !over_later(rate, limit, buckets, own, *t))
}

/// Whether the call, going at `t`, would push a request that waits (a
/// bucket ahead of `t`, within the window) over a request limit. Tokens
/// and USD are checked when a call starts, as budgets are: a waiting call
/// is not held back by what goes before it.
fn over_later(rate: Rate, limit: f64, buckets: &[(i64, f64)], own: f64, t: f64) -> bool {
    rate.unit == RateUnit::Requests
        && buckets
            .iter()
            .filter(|(b, _)| (*b as f64) > t && (*b as f64) < t + rate.per.seconds() as f64)
            .any(|(b, _)| rate_used_at(rate.per, buckets, *b as f64) + own > limit)
}

/// The bucket a call going at `t` counts in, for `per`.
pub fn rate_bucket(per: RatePer, t: f64) -> i64 {
    (t.floor() as i64).div_euclid(per.step()) * per.step()
}

/// One scope id's rate limits: a limit per [`Rate`], `None` for none.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RateLimits {
    values: [Option<f64>; 6],
}

impl RateLimits {
    pub fn get(&self, rate: Rate) -> Option<f64> {
        self.values[rate.index()]
    }

    pub fn set(&mut self, rate: Rate, limit: Option<f64>) {
        self.values[rate.index()] = limit;
    }

    /// Every limit set, in [`Rate::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (Rate, f64)> + '_ {
        Rate::ALL.into_iter().filter_map(|r| self.get(r).map(|l| (r, l)))
    }

    /// These limits, with those they leave unset taken from `base`.
    pub fn or(self, base: RateLimits) -> RateLimits {
        RateLimits {
            values: std::array::from_fn(|i| self.values[i].or(base.values[i])),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RPM: Rate = Rate::new(RateUnit::Requests, RatePer::Minute);
    const USD_HOUR: Rate = Rate::new(RateUnit::Usd, RatePer::Hour);

    #[test]
    fn keys_read_back_and_index_every_kind_once() {
        for (i, r) in Rate::ALL.into_iter().enumerate() {
            assert_eq!(Rate::parse(r.key()), Some(r));
            assert_eq!(r.index(), i);
        }
        assert_eq!(Rate::parse("requests_per_second"), None);
    }

    #[test]
    fn a_minute_counts_its_last_sixty_seconds_in_five_second_steps() {
        // Requests at 100 s, 130 s and 158 s.
        let buckets = vec![(100, 1.0), (130, 1.0), (155, 1.0)];
        assert_eq!(rate_used_at(RatePer::Minute, &buckets, 159.0), 3.0);
        // At 164 s the window begins at 104 -> 100: 100 s still counts.
        assert_eq!(rate_used_at(RatePer::Minute, &buckets, 164.0), 3.0);
        // At 165 s it begins at 105: 100 s has left.
        assert_eq!(rate_used_at(RatePer::Minute, &buckets, 165.0), 2.0);
        assert!(
            rate_used_at(RatePer::Minute, &[], 165.0).is_sign_positive(),
            "0, not -0"
        );
        // Three a minute: a fourth at 159 s is over; it fits at 165 s.
        assert!(rate_over(RPM, 3.0, &buckets, 1.0, 159.0));
        assert_eq!(rate_fits_at(RPM, 3.0, &buckets, 1.0, 159.0, 60.0), Some(165.0));
        assert!(!rate_over(RPM, 4.0, &buckets, 1.0, 159.0));
        // Never within a short horizon.
        assert_eq!(rate_fits_at(RPM, 3.0, &buckets, 1.0, 159.0, 2.0), None);
    }

    #[test]
    fn a_call_that_waits_counts_from_when_it_goes_and_the_next_one_queues_behind_it() {
        // Two a minute; calls at 0 and 10 s. A third at 20 s fits at 65 s
        // (the first leaves); counted there, a fourth at 21 s waits for the
        // second to leave (75 s), not for the first.
        let mut buckets = vec![(0, 1.0), (10, 1.0)];
        let third = rate_fits_at(RPM, 2.0, &buckets, 1.0, 20.0, 120.0).expect("fits");
        assert_eq!(third, 65.0);
        buckets.push((rate_bucket(RatePer::Minute, third), 1.0));
        let fourth = rate_fits_at(RPM, 2.0, &buckets, 1.0, 21.0, 120.0).expect("fits");
        assert_eq!(fourth, 75.0);
        buckets.push((rate_bucket(RatePer::Minute, fourth), 1.0));
        // No minute ever holds three.
        let most = (0..200)
            .map(|t| {
                // The exact count in (t - 60, t].
                buckets.iter().filter(|(b, _)| *b <= t && *b > t - 60).count()
            })
            .max();
        assert_eq!(most, Some(2));
    }

    #[test]
    fn dollars_start_while_the_others_are_under_the_limit() {
        let buckets = vec![(0, 0.6), (600, 0.3)];
        assert!(!rate_over(USD_HOUR, 1.0, &buckets, 0.5, 700.0), "0.9 < 1.0: it starts");
        assert!(rate_over(USD_HOUR, 0.85, &buckets, 0.0, 700.0));
        // The $0.60 leaves at 0 + 60 + 3600.
        assert_eq!(rate_fits_at(USD_HOUR, 0.85, &buckets, 0.1, 700.0, 3600.0), Some(3660.0));
    }
}
