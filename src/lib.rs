//! hermes-meter: an OpenTelemetry exporter bridge for the Hermes Agent.
//!
//! Hermes calls plugin hooks for sessions, turns, LLM API calls, tool calls
//! and subagents. This crate decodes those calls ([`hook`]), applies each
//! one to a local SQLite store in one transaction ([`store`]), and builds
//! reports, telemetry and budget verdicts from that store. Data flows one
//! way: hook → decode → store → export. The core knows nothing of Python;
//! the binding lives behind the `python` feature.

// The pure model (crates/hermes-meter-model), under the paths the rest of
// this crate and its users name it by.
pub use hermes_meter_model::{
    content, display, hook, metrics, model, pricing, redact, report, semconv, span, tool_outcome,
};

pub mod bridge;
pub mod budget;
pub mod cli;
pub mod config;
pub mod export;
pub mod export_task;
pub mod fleet;
pub mod http_server;
pub mod process;
#[cfg(feature = "python")]
mod python;
pub mod slash;
pub mod spool;
pub mod trace;
pub mod ui;

// The store (crates/hermes-meter-store), likewise.
pub use hermes_meter_store::{error, health, replay, store, unix_now, Error, Result};

/// Locks a mutex, ignoring poison: every critical section of this crate
/// leaves its data consistent, and a hook must never panic on a lock.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
