//! Every integration test that needs only Rust, one module per file of
//! `tests/`, in one test binary (each file its own binary would link the
//! whole workspace again). What needs PostgreSQL, Prometheus or Chromium
//! is `tests/services.rs`; what changes the whole process (its environment,
//! its open-file limit) is a binary of its own (the root `Cargo.toml`).
//!
//! A test that runs this binary again as a child names itself with
//! `hermes_meter_test_support::test_name(module_path!(), ...)`.

mod advise;
mod budget;
mod cli_behaviour;
mod contention;
mod digest;
mod doctor;
mod export;
mod export_size;
mod ledger;
mod logs;
mod metrics;
mod outage;
mod pricing;
mod privacy;
mod report_rollups;
mod retention;
mod spool_crash;
mod spool_durability;
mod store_trouble;
mod surfaces_agree;
mod tidy;
mod trace;
mod trace_lifecycle;
mod ui;
mod webhook;
