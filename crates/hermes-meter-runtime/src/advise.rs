//! The advice of a window over a store (`hermes-meter advise`, the
//! viewer's advice page, MCP's `advise`): the store's calls and tool
//! streaks through the model's rules (`advise.rs` there), at the prices of
//! the store's pricing file.

use std::path::Path;

use hermes_meter_model::advise::{Advice, Advisor};
use hermes_meter_model::budget::RunawayConfig;
use hermes_meter_store::error::Result;
use hermes_meter_store::Reader;

/// `[since, until)`'s LLM calls re-priced at `model`'s rates (`report
/// --price-as`, the viewer's what-if): `Ok(Err(why))` when the price
/// table has no price for `model`.
pub fn price_as(
    store: &Reader,
    store_dir: &Path,
    model: &str,
    since: f64,
    until: f64,
) -> Result<std::result::Result<hermes_meter_model::price_as::PriceAs, String>> {
    let prices = crate::config::load_prices(&store_dir.join(crate::config::PRICING_FILE_NAME))?;
    let mut sums = match hermes_meter_model::price_as::PriceAs::new(&prices, model) {
        Ok(sums) => sums,
        Err(why) => return Ok(Err(why)),
    };
    store.for_each_recorded_call(since, until, |call| sums.add(&prices, call))?;
    Ok(Ok(sums))
}

/// The advice of `[since, until)` over `store`, whose directory is
/// `store_dir` (its pricing file prices the figures).
pub fn advise(store: &Reader, store_dir: &Path, since: f64, until: f64) -> Result<Advice> {
    let prices = crate::config::load_prices(&store_dir.join(crate::config::PRICING_FILE_NAME))?;
    let mut advisor = Advisor::new(&prices, since, until);
    store.for_each_call_by_session(since, until, |session, call| advisor.call(session, call))?;
    store.tool_context(since, until, |tool, session, model, provider, at, added, after| {
        advisor.tool_result(tool, session, model, provider, at, added, after)
    })?;
    // Half the runaway watch's streak up to just below it.
    let watch = RunawayConfig::default().repeated_tool_calls as i64;
    store.tool_streaks(since, until, ((watch / 2).max(2), watch - 1), |session, length, usd| {
        advisor.streak(session, length, usd)
    })?;
    Ok(advisor.finish())
}
