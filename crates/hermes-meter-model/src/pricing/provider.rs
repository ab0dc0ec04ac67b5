//! What a call is billed when its provider reports its own figures: the
//! gateway's `cost`, the upstream provider's charge behind it, and whether
//! the call ran on the user's own key. Pure.

use super::{Cost, PriceSource};
use crate::hook::Usage;

/// Which figure a call is billed at when its provider reports one, as
/// `pricing show` says it ([`provider_bill`] is the rule).
pub const PROVIDER_FIGURES: &str = "a provider that reports what it billed is recorded at that figure instead: \
     the upstream provider's charge where a gateway reports one (Nous Portal, OpenRouter's \
     cost_details.upstream_inference_cost), plus the gateway's fee for a call on your own key \
     (is_byok), else the larger of it and the gateway's cost; else the gateway's cost \
     (OpenRouter's usage.cost)";

/// What the provider's own figures say the call cost, if they say:
///
/// - an upstream charge on the user's own key (OpenRouter's `is_byok`):
///   that charge plus the gateway's `cost`, its fee on top;
/// - an upstream charge otherwise: the larger of it and the gateway's
///   `cost` (Nous Portal bills the upstream charge, about 5× what its
///   token prices say, and its `cost` is the smaller figure; a gateway
///   whose `cost` includes its upstream's is billed that `cost`), so a
///   budget never counts less than either figure;
/// - only the gateway's `cost`: that.
///
/// `None` when the usage reports no figure: the price table's estimate is
/// the bill then.
pub fn provider_bill(usage: &Usage) -> Option<Cost> {
    match (usage.provider_cost_usd, usage.provider_upstream_usd) {
        (cost, Some(upstream)) => {
            let usd = if usage.provider_byok {
                upstream + cost.unwrap_or(0.0)
            } else {
                upstream.max(cost.unwrap_or(0.0))
            };
            Some(Cost {
                usd,
                source: PriceSource::Upstream,
            })
        }
        (Some(usd), None) => Some(Cost {
            usd,
            source: PriceSource::Provider,
        }),
        (None, None) => None,
    }
}
