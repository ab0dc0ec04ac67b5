//! hermes-meter's store: one SQLite file per Hermes home that is the
//! journal of hook calls, the ledger, the span and log outboxes, the metric
//! log and the budget state, with the replay that feeds it recorded calls
//! and the classification of its faults.
//!
//! Every SQL statement of hermes-meter is here. No runtime (threads that
//! export or sync), no network, no configuration resolution, no Python:
//! the runtime opens the handles of the roles it plays ([`store::Writer`],
//! [`store::Outbox`], [`store::Reader`], [`store::Doctor`]) and drives them.

pub mod error;
mod files;
pub mod health;
pub mod hermes_state;
pub mod replay;
pub mod store;

pub use error::{Error, Result};

// The model, under the paths this crate's modules name it by.
use hermes_meter_model::{
    budget, content, hook, metrics, model, price_as, pricing, report, semconv, span, tool_outcome,
};

/// Now, in Unix seconds: the time the store records (0 if the clock is
/// before 1970).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}
