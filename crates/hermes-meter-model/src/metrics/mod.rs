//! Metric instruments, units, attributes and data points. Pure.
//!
//! Owns: the thirteen instruments of `semconv/registry/metrics.yaml` (name,
//! kind, unit, buckets, Prometheus name), turning a finished ledger row
//! ([`MetricFact`]) into series increments ([`measure`]), the attribute
//! allow-list, and rendering cumulative series as OTLP metrics
//! ([`otlp_metrics`]) or Prometheus text ([`prometheus_text`]). Must not
//! touch: I/O. The store keeps the series (`crates/hermes-meter-store/src/metrics.rs`), the
//! exporter sends them (`crates/hermes-meter-runtime/src/export/metrics.rs`).
//!
//! One file a concern: `instruments.rs` (the registry's instruments),
//! `measure.rs` (ledger facts to increments, budget and alert attribute
//! sets), `series.rs` (allow-list, projection, deltas), `otlp.rs` and
//! `prometheus.rs` (the two renderings). The row and fact types are
//! `crate::rows`'s, so this module never imports the store.
//!
//! # What a consumer sees
//!
//! - Counters are monotonic cumulative sums and histograms cumulative
//!   explicit-bucket histograms, whose `start_time_unix_nano` is the
//!   store's metric start (the first event it knows of) for every series,
//!   in every process. The values come from the store, so when another
//!   process takes over exporting, a series continues where it was: it
//!   never goes back and never restarts.
//! - `service.instance.id` is the store's own (kept in its `meta` table):
//!   one Hermes host with one store is one instance however many short
//!   `hermes -z` or cron processes come and go.
//! - A series appears once its first measurement is folded, and stays.
//! - Gauges (`hermes.budget.spend`, `hermes.budget.limit`) are the latest
//!   values the budget code reported.
//!
//! # Budgets (for `budget/`)
//!
//! - Gauges: turn each budget's state into a [`BudgetReading`] and hand
//!   the list to the runtime's `MetricExporter::set_budget_gauges` (or
//!   store them with `Outbox::replace_metric_gauges(&GAUGE_METRICS,
//!   &budget_gauge_rows(&readings), now)`); the latest list replaces the
//!   previous one, so removed budgets disappear.
//! - Verdicts and alerts are counters kept in the store: in the transaction
//!   that records a verdict call `store::add_to_counter(tx,
//!   semconv::metric::BUDGET_VERDICTS, &verdict_attrs(scope, window,
//!   verdict), 1.0, now)`, and for an alert `store::add_to_counter(tx,
//!   semconv::metric::ALERTS, &alert_attrs(kind), 1.0, now)`. They are then
//!   exported like every other counter.

mod instruments;
mod measure;
mod otlp;
mod prometheus;
mod series;

pub use instruments::*;
pub use measure::*;
pub use otlp::*;
pub use prometheus::*;
pub use series::*;

pub use crate::rows::{
    encode_attrs, Add, ApiErrorFact, AttrValue, Attrs, GaugeRow, Increment, LlmCallFact, MetricFact, RunLabels,
    SeriesRow,
};

#[cfg(test)]
mod tests;
