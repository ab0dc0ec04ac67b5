//! The most a hook call can add to a budget's spend, known on the hook
//! thread before the writer applies it: what lets the quick view answer a
//! gating hook without waiting. Pure.
//!
//! Owns: [`spend_bound`], [`carries_spend`] and the usage a request's
//! reservation is priced at ([`reservation_usage`]), which the store's
//! reservations use too, so the bound and the reservation cannot differ.
//! Must not touch: the store, the bridge's queue.

use crate::hook::{Hook, HookEvent, PreApiRequest, Usage};
use crate::pricing::PriceTable;

/// Output tokens a reservation assumes when the request names no
/// `max_tokens`, and the most it assumes when it does (a cap, because
/// `max_tokens` is a ceiling most replies stay far below).
pub(crate) const RESERVED_OUTPUT_TOKENS: i64 = 1024;
const MAX_RESERVED_OUTPUT_TOKENS: i64 = 4096;

/// The most `event` can add to a budget's spend once applied, or `None`
/// when that is not known on the hook thread: the cost of a recorded LLM
/// call, the reservation of a request (the formula the store uses), zero
/// for the other hooks. A model neither the user's file nor the built-in
/// table prices costs 0, unless the host was asked for its price
/// (`host_asked`): then the writer may price it, and the bound is unknown.
pub fn spend_bound(event: &HookEvent, prices: &PriceTable, host_asked: impl Fn(&str) -> bool) -> Option<f64> {
    let priced = |model: &str, provider: Option<&str>, usage: &crate::hook::Usage| {
        let bill = prices.bill(model, provider, usage, event.at);
        if bill.cost.source != crate::pricing::PriceSource::Unknown {
            Some(bill.cost.usd.max(0.0))
        } else {
            (!host_asked(model)).then_some(0.0)
        }
    };
    match &event.hook {
        Hook::PostApiRequest(e) => {
            if e.response_model.as_deref() == Some(super::BLOCKED_MODEL) {
                return Some(0.0);
            }
            let model = e.api.model.as_deref().or(e.response_model.as_deref()).unwrap_or("");
            priced(model, e.api.provider.as_deref(), e.usage.as_ref()?)
        }
        Hook::PreApiRequest(e) => priced(
            e.api.model.as_deref().unwrap_or(""),
            e.api.provider.as_deref(),
            &reservation_usage(e),
        ),
        _ => Some(0.0),
    }
}

/// Whether a call of `hook` may have a [`spend_bound`] above zero: the
/// reservation of a request, the cost of a call.
pub fn carries_spend(hook: &str) -> bool {
    matches!(hook, "pre_api_request" | "post_api_request" | "post_auxiliary_call")
}

/// The usage a request's reservation is priced at: its approximate input
/// and its `max_tokens` (capped), or `RESERVED_OUTPUT_TOKENS`.
pub fn reservation_usage(e: &PreApiRequest) -> Usage {
    Usage {
        input_tokens: e.approx_input_tokens.unwrap_or(0).max(0),
        output_tokens: e
            .max_tokens
            .unwrap_or(RESERVED_OUTPUT_TOKENS)
            .clamp(0, MAX_RESERVED_OUTPUT_TOKENS),
        ..Usage::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(max_tokens: Option<i64>, approx_input: Option<i64>) -> PreApiRequest {
        PreApiRequest {
            max_tokens,
            approx_input_tokens: approx_input,
            ..PreApiRequest::default()
        }
    }

    #[test]
    fn a_reservation_assumes_capped_output_and_the_approximate_input() {
        let u = reservation_usage(&request(None, Some(500)));
        assert_eq!((u.input_tokens, u.output_tokens), (500, RESERVED_OUTPUT_TOKENS));
        let u = reservation_usage(&request(Some(100_000), None));
        assert_eq!((u.input_tokens, u.output_tokens), (0, MAX_RESERVED_OUTPUT_TOKENS));
        let u = reservation_usage(&request(Some(-5), Some(-1)));
        assert_eq!((u.input_tokens, u.output_tokens), (0, 0));
    }

    #[test]
    fn only_requests_and_calls_carry_spend() {
        for hook in ["pre_api_request", "post_api_request", "post_auxiliary_call"] {
            assert!(carries_spend(hook), "{hook}");
        }
        for hook in ["pre_tool_call", "pre_llm_call", "on_session_end"] {
            assert!(!carries_spend(hook), "{hook}");
        }
    }
}
