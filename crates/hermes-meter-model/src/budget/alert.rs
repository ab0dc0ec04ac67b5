//! The alert kinds recorded in the store and counted in `hermes.alerts`
//! (attribute `hermes.alert.kind`), and the model key of the free→paid
//! alert. Pure. Raising and delivering alerts is the store's
//! (`crates/hermes-meter-store/src/budget/alerts.rs`).

/// A model first seen at $0 now costs money.
pub const FREE_TO_PAID: &str = "free_to_paid";
/// A 404 that is not retryable: the model is gone.
pub const MODEL_UNAVAILABLE: &str = "model_unavailable";
/// A budget reached its soft threshold.
pub const BUDGET_SOFT: &str = "budget_soft";
/// A budget reached its hard threshold.
pub const BUDGET_HARD: &str = "budget_hard";
/// A budget reached one of its `alert_thresholds`.
pub const BUDGET_THRESHOLD: &str = "budget_threshold";
/// A run showed the signs of a loop (see `runaway.rs`).
pub const RUNAWAY: &str = "runaway";
/// All of them.
pub const ALL: [&str; 6] = [
    FREE_TO_PAID,
    MODEL_UNAVAILABLE,
    BUDGET_SOFT,
    BUDGET_HARD,
    BUDGET_THRESHOLD,
    RUNAWAY,
];

/// The model a `:free` variant is billed as: `x:free` and `x` are one model
/// for the free→paid alert.
pub fn paid_model_key(model: &str) -> &str {
    model.strip_suffix(":free").unwrap_or(model)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_variant_is_billed_as_its_model() {
        assert_eq!(paid_model_key("meta/llama-3:free"), "meta/llama-3");
        assert_eq!(paid_model_key("gpt-4o"), "gpt-4o");
    }
}
