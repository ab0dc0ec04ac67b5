//! What a window's LLM calls would have cost at another model's prices
//! (`report --price-as MODEL`): each call's own tokens at that model's
//! rates, its prompt tier chosen per call as a bill would, beside what the
//! call was billed.
//!
//! Owns: the sums and their groupings. Must not touch: the store (the
//! caller hands each call over) or the text printed.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::hook::Usage;
use crate::pricing::{PriceTable, HELD};

/// One LLM call as recorded.
#[derive(Debug, Clone, Default)]
pub struct RecordedCall {
    /// The model it was billed as (the one a downgrade routed it to).
    pub model: String,
    pub provider: Option<String>,
    pub usage: Usage,
    /// What it was billed (the provider's figure or the price table's).
    pub cost_usd: f64,
    /// Where that cost came from (`held`: usage beyond any bill).
    pub cost_source: String,
    /// Its tokens were estimated (no usage from the provider).
    pub estimated: bool,
    /// When it ended, Unix seconds: the target's prices then are its.
    pub at: f64,
    /// What kind of session it ran in: `auxiliary` (titles, compression),
    /// `subagent`, or the session's platform (`cli`, `cron`, `telegram`).
    pub kind: String,
}

/// Calls, tokens and the two costs of a group.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PriceAsSums {
    pub llm_calls: i64,
    /// Input including cache reads and writes.
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub billed_usd: f64,
    pub at_price_usd: f64,
}

impl PriceAsSums {
    fn add(&mut self, call: &RecordedCall, at_price: f64) {
        let u = &call.usage;
        self.llm_calls += 1;
        self.input_tokens += u.input_tokens + u.cache_read_tokens + u.cache_write_tokens;
        self.output_tokens += u.output_tokens;
        self.billed_usd += call.cost_usd;
        self.at_price_usd += at_price;
    }
}

/// The re-priced window.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PriceAs {
    /// The model asked for, and the price table's key that priced it.
    pub model: String,
    pub priced_as: String,
    pub totals: PriceAsSums,
    /// By the model each call was billed as.
    pub by_model: BTreeMap<String, PriceAsSums>,
    /// By the kind of session ([`RecordedCall::kind`]).
    pub by_kind: BTreeMap<String, PriceAsSums>,
    /// Calls whose tokens were estimates (no usage from the provider).
    pub estimated_llm_calls: i64,
    /// Calls held (usage beyond any bill): left out of every sum.
    pub held_llm_calls: i64,
}

impl PriceAs {
    /// An empty re-pricing at `model`'s prices; an error naming the model
    /// when the table has no price for it.
    pub fn new(prices: &PriceTable, model: &str) -> Result<PriceAs, String> {
        let found = prices.find(model, None);
        if found.price.is_none() {
            return Err(format!(
                "no price for {}: `hermes-meter pricing show` lists the models priced, and pricing.toml adds one",
                crate::display::escape(model)
            ));
        }
        Ok(PriceAs {
            model: model.to_string(),
            priced_as: found.key.unwrap_or_else(|| model.to_string()),
            ..PriceAs::default()
        })
    }

    /// Adds one call: its tokens at the target's rates, beside its bill.
    pub fn add(&mut self, prices: &PriceTable, call: &RecordedCall) {
        if call.cost_source == HELD {
            self.held_llm_calls += 1;
            return;
        }
        let at_price = prices.cost(&self.model, None, &call.usage, call.at).usd;
        if call.estimated {
            self.estimated_llm_calls += 1;
        }
        self.totals.add(call, at_price);
        self.by_model.entry(call.model.clone()).or_default().add(call, at_price);
        self.by_kind.entry(call.kind.clone()).or_default().add(call, at_price);
    }

    /// What the numbers cannot say, one line each.
    pub fn caveats(&self) -> Vec<String> {
        let mut out = vec![
            "the same work on another model takes other token counts: its tokenizer counts the same text \
             differently, its answers run longer or shorter, and it may need more or fewer turns and tool calls"
                .to_string(),
            "cache reads and writes are priced at its cache rates as if its cache had hit as often; \
             providers differ in what they cache"
                .to_string(),
            "no quality is compared: a cheaper model that fails the task costs more in retries".to_string(),
        ];
        if self.estimated_llm_calls > 0 {
            out.push(format!(
                "{} call(s) had no usage from the provider: their tokens are estimates",
                self.estimated_llm_calls
            ));
        }
        if self.held_llm_calls > 0 {
            out.push(format!(
                "{} held call(s) (usage beyond what any provider bills in one call) are left out",
                self.held_llm_calls
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> PriceTable {
        let mut t = PriceTable::default();
        t.add_user_prices(
            "[models.\"cheap-1\"]\ninput = 1.0\noutput = 2.0\ncache_read = 0.1\n\
             [models.\"dear-1\"]\ninput = 10.0\noutput = 30.0\n",
            std::path::Path::new("pricing.toml"),
        )
        .expect("prices");
        t
    }

    fn call(model: &str, kind: &str, input: i64, output: i64, cost: f64) -> RecordedCall {
        RecordedCall {
            model: model.to_string(),
            usage: Usage {
                input_tokens: input,
                output_tokens: output,
                cache_read_tokens: 1_000_000,
                ..Usage::default()
            },
            cost_usd: cost,
            cost_source: "table".to_string(),
            kind: kind.to_string(),
            ..RecordedCall::default()
        }
    }

    #[test]
    fn each_call_is_priced_at_the_target_and_grouped_by_model_and_kind() {
        let prices = table();
        let mut r = PriceAs::new(&prices, "cheap-1").expect("priced");
        r.add(&prices, &call("dear-1", "cli", 1_000_000, 1_000_000, 50.0));
        r.add(&prices, &call("dear-1", "auxiliary", 2_000_000, 0, 30.0));
        let mut held = call("dear-1", "cli", 9_000_000, 0, 0.0);
        held.cost_source = HELD.to_string();
        r.add(&prices, &held);
        // 1M in at $1, 1M out at $2, 1M cache reads at $0.10; then 2M in and the cache reads.
        assert!((r.by_kind["cli"].at_price_usd - 3.1).abs() < 1e-9, "{r:?}");
        assert!((r.by_kind["auxiliary"].at_price_usd - 2.1).abs() < 1e-9, "{r:?}");
        assert!((r.totals.at_price_usd - 5.2).abs() < 1e-9 && (r.totals.billed_usd - 80.0).abs() < 1e-9);
        assert_eq!(r.totals.llm_calls, 2);
        assert_eq!(r.totals.input_tokens, 5_000_000);
        assert_eq!(r.by_model["dear-1"], r.totals);
        assert_eq!(r.held_llm_calls, 1);
        assert!(
            r.caveats().iter().any(|c| c.contains("1 held call")),
            "{:?}",
            r.caveats()
        );
    }

    #[test]
    fn a_model_without_a_price_is_refused_by_name_and_escaped() {
        let err = PriceAs::new(&table(), "nope\u{1b}[31m").expect_err("unpriced");
        assert!(err.starts_with("no price for nope") && !err.contains('\u{1b}'), "{err}");
    }
}
