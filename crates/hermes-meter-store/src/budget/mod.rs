//! Budget state in the store (schema in `migrations/0001_initial.sql`), its
//! SQL split by purpose:
//!
//! - `rollups.rs`: what the apply transaction writes: spend buckets
//!   (`budget_spend`), per-period totals of registered zones
//!   (`budget_period`, `budget_zones`), reservations
//!   (`budget_reservations`), free/paid sightings (`budget_models`);
//! - `spend.rs`: reading a scope id's spend in a window, the ids that
//!   spent, store-wide totals (`budget/states.rs` turns these into budget
//!   states for the gate, `budget list` and the gauges);
//! - `caps.rs`: what a session family and its current run used, for the
//!   per-session and per-run caps;
//! - `alerts.rs`: alerts (`alerts`), once-per-period claims (`budget_once`)
//!   and verdict counts (`budget_verdicts`);
//! - `rates.rs`: rate-limit buckets (`rate_spend`, `rate_calls`), which the
//!   gate writes as it sees requests start and end (not the ledger's
//!   transaction: a rate limit counts requests, not money).
//!
//! The ledger calls the `on_*` functions inside the transaction that applies
//! a hook event, so rollups and reservations commit with the LLM call they
//! count, exactly once, whichever process applied it. The gate
//! (`crates/hermes-meter-runtime/src/budget/gate.rs`) and the CLI read through the `Store` methods; every
//! read used by a gating hook goes through a primary key or a bounded range
//! of one, never a scan of the ledger. The budget rules themselves (windows,
//! verdicts, assembling states) are `hermes_meter_model::budget`'s; this module only
//! runs SQL.

mod alerts;
mod caps;
mod rates;
mod rollups;
mod spend;
mod states;

pub use alerts::{AlertRow, AlertSink, RecentAlert};
pub use caps::CapUse;
pub use rates::{RateAmounts, RATE_KEEP_SECONDS};
pub(crate) use rollups::RecordedCall;
pub(super) use rollups::{
    note_profile, on_api_request_error, on_post_api_request, on_pre_api_request, on_usage_confirmed, SpendRollup,
};
pub use spend::RESERVATION_TTL_SECONDS;

/// A fresh store in a temp dir, for the unit tests of the parts.
#[cfg(test)]
fn temp_store() -> (tempfile::TempDir, super::Writer) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = super::Writer::open(&dir.path().join("s.db")).expect("open store");
    (dir, store)
}
