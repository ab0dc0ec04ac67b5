//! hermes-otel: an OpenTelemetry exporter bridge for the Hermes Agent.
//!
//! Hermes calls plugin hooks for sessions, turns, LLM API calls, tool calls
//! and subagents. This crate decodes those calls ([`hook`]), applies each
//! one to a local SQLite store in one transaction ([`store`]), and builds
//! reports, telemetry and budget verdicts from that store. Data flows one
//! way: hook → decode → store → export. The core knows nothing of Python;
//! the binding lives behind the `python` feature.

pub mod bridge;
pub mod budget;
pub mod budget_gate;
pub mod cli;
pub mod config;
pub mod content;
pub mod error;
pub mod export;
pub mod export_task;
pub mod health;
pub mod hook;
pub mod metrics;
pub mod pricing;
#[cfg(feature = "python")]
mod python;
pub mod redact;
pub mod replay;
pub mod report;
pub mod semconv;
pub mod slash;
pub mod span;
pub mod spool;
pub mod store;

pub use error::{Error, Result};
