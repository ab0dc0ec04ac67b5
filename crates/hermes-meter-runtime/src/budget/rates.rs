//! Rate limits in the budget gate: counting the requests this process
//! sees start and end, and the verdict before each provider call.
//!
//! Owns: what a request counts (its reservation's estimate, then its use),
//! and what a reached limit does to the call: a stop (a stand-in response,
//! like a budget's), or with `[rate_limit] action = "wait"` a wait until it
//! fits (the `llm_execution` middleware sleeps, then calls the provider),
//! counted from when it goes, so the calls behind it queue; a wait longer
//! than `max_wait_seconds` stops instead. Must not touch: SQL (the store's
//! `crates/hermes-meter-store/src/budget/rates.rs`), the rules
//! (`crates/hermes-meter-model/src/budget/rate.rs`).

use super::gate::BudgetGate;
use super::gauges::{rate_value as value, span_values};
use crate::lock;
use hermes_meter_model::budget::rate::{rate_fits_at, rate_over, rate_used_at, Rate, RateAction, RateUnit};
use hermes_meter_model::budget::{self, verdict, Scope};
use hermes_meter_model::hook::{Hook, HookEvent, PreApiRequest};
use hermes_meter_store::{LogPlace, RateAmounts, Reader, Writer};

/// How a scope id reads in a rate limit's texts: `global`, `model gpt-4o`.
fn label(scope: Scope, id: &str) -> String {
    match scope {
        Scope::Global => "global".into(),
        _ => format!("{scope} {id}"),
    }
}

/// A limit the call is over, and what the span held with it.
struct Over {
    scope: Scope,
    id: String,
    rate: Rate,
    limit: f64,
    used: f64,
}

impl BudgetGate {
    /// The requests that can start before a global request rate limit is
    /// reached, counting every request in its span (those that wait too):
    /// the headroom of a session not measured yet. Infinite without
    /// request limits; none when a scope other than global has one (a new
    /// session may be its id's, near its line).
    pub(super) fn global_requests_left(&self, store: &Reader, now: f64) -> hermes_meter_store::Result<f64> {
        let mut left = f64::INFINITY;
        for (scope, limits) in &self.cfg.scopes {
            for l in std::iter::once(&limits.default).chain(limits.overrides.values()) {
                for (rate, limit) in l.rates.iter().filter(|(r, _)| r.unit == RateUnit::Requests) {
                    if *scope != Scope::Global {
                        return Ok(0.0);
                    }
                    let in_span = span_values(store, (Scope::Global, ""), rate, self.cfg.tokens_counted, now)?
                        .iter()
                        .fold(0.0, |sum, (_, v)| sum + v);
                    left = left.min((limit - in_span).max(0.0));
                }
            }
        }
        Ok(left)
    }

    /// Counts a request of this process as it starts, ends or fails, in
    /// every scope id it has a rate limit in (observe mode too, so that
    /// `budget list` shows what the limits would hold).
    pub(super) fn rate_observe(&mut self, store: &Writer, event: &HookEvent) -> hermes_meter_store::Result<()> {
        if !self.cfg.has_rate_limits() {
            return Ok(());
        }
        match &event.hook {
            Hook::PreApiRequest(e) => {
                let a = &e.api;
                let keys = store.budget_scope_keys(&a.session_id, a.model.as_deref())?;
                let mut scopes: Vec<(Scope, &str)> = self
                    .cfg
                    .rates_for(&keys)
                    .into_iter()
                    .map(|(s, id, _, _)| (s, id))
                    .collect();
                scopes.dedup();
                if scopes.is_empty() {
                    return Ok(());
                }
                let usage = budget::reservation_usage(e);
                let estimate = RateAmounts {
                    requests: 0.0,
                    usd: store.reservation_usd(&a.api_request_id)?,
                    input_tokens: usage.input_tokens as f64,
                    output_tokens: usage.output_tokens as f64,
                };
                store.rate_start(&a.api_request_id, &scopes, event.at, estimate)
            }
            Hook::PostApiRequest(e) => {
                let used = store.call_use(&e.api.api_request_id)?.unwrap_or_default();
                store.rate_settle(&e.api.api_request_id, used)
            }
            // A failed attempt's request counts; it used nothing.
            Hook::ApiRequestError(e) => store.rate_settle(&e.api.api_request_id, RateAmounts::default()),
            _ => Ok(()),
        }
    }

    /// The rate limits' verdict on the request `e` at `now` (enforce mode):
    /// `None` when the call was stopped (its stand-in is noted and it is
    /// taken out of the counts), else the requests the request limits
    /// leave for the quick view (infinite without one; none after a wait).
    /// A call that waits is noted with its wait and moved to when it goes.
    pub(super) fn rate_verdict(
        &mut self,
        store: &Writer,
        e: &PreApiRequest,
        now: f64,
        place: LogPlace<'_>,
    ) -> hermes_meter_store::Result<Option<f64>> {
        if !self.cfg.has_rate_limits() {
            return Ok(Some(f64::INFINITY));
        }
        let a = &e.api;
        let keys = store.budget_scope_keys(&a.session_id, a.model.as_deref())?;
        let rates = self.cfg.rates_for(&keys);
        if rates.is_empty() {
            // No rate limit applies to this session and model.
            return Ok(Some(f64::INFINITY));
        }
        let own = store.rate_own(&a.api_request_id)?;
        let counted = self.cfg.tokens_counted;
        let (mut over, mut go, mut fits) = (None::<Over>, now, true);
        // For the quick view: the requests left before the nearest request
        // limit, counting every request in its span, those that wait too.
        let mut left = f64::INFINITY;
        for (scope, id, rate, limit) in rates {
            let mut others = span_values(store, (scope, id), rate, counted, now)?;
            if rate.unit == RateUnit::Requests {
                let in_span: f64 = others.iter().map(|(_, v)| v).fold(0.0, |a, v| a + v);
                left = left.min((limit - in_span).max(0.0));
            }
            // The call itself is counted where it started: out of the others.
            let own_value = match own {
                Some((at, amounts)) => {
                    let v = value(
                        rate,
                        counted,
                        &RateAmounts {
                            requests: 1.0,
                            ..amounts
                        },
                    );
                    let at = budget::rate::rate_bucket(rate.per, at);
                    if let Some(slot) = others.iter_mut().find(|(b, _)| *b == at) {
                        slot.1 -= v;
                    }
                    v
                }
                None if rate.unit == RateUnit::Requests => 1.0,
                None => 0.0,
            };
            if !rate_over(rate, limit, &others, own_value, now) {
                continue;
            }
            let used = rate_used_at(rate.per, &others, now);
            match self.cfg.rate_action {
                RateAction::Wait => match rate_fits_at(rate, limit, &others, own_value, now, self.cfg.rate_max_wait) {
                    Some(t) => go = go.max(t),
                    None => fits = false,
                },
                RateAction::Stop => fits = false,
            }
            if over.is_none() {
                over = Some(Over {
                    scope,
                    id: id.to_string(),
                    rate,
                    limit,
                    used,
                });
            }
        }
        let Some(o) = over else { return Ok(Some(left)) };
        let who = label(o.scope, &o.id);
        if fits && go > now {
            let text = budget::rate_wait_text(&who, o.rate, o.limit, go - now);
            store.rate_move(&a.api_request_id, go)?;
            self.handle.note_wait(&a.api_request_id, go - now);
            store.count_verdict(verdict::WAITED, o.scope.as_str(), o.rate.key(), now, place, &text)?;
            lock(&self.handle.0.messages).push(format!("{text} (session {})", a.session_id));
            // Held back: the next request waits for its verdict.
            return Ok(Some(0.0));
        }
        // Stopped: it never reaches the provider, so it counts nowhere.
        store.rate_drop(&a.api_request_id)?;
        // When a call would fit again, within the hour.
        let back = {
            let others = span_values(store, (o.scope, &o.id), o.rate, counted, now)?;
            let own_value = if o.rate.unit == RateUnit::Requests { 1.0 } else { 0.0 };
            rate_fits_at(o.rate, o.limit, &others, own_value, now, 3600.0).map(|t| t.ceil() as i64)
        };
        let text = budget::rate_stop_text(&who, o.rate, o.limit, o.used, back, &self.cfg.tz);
        store.count_verdict(verdict::BLOCKED, o.scope.as_str(), o.rate.key(), now, place, &text)?;
        self.stop_call(store, &a.session_id, &a.api_request_id, text, now)?;
        Ok(None)
    }
}
