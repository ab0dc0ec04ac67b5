//! hermes-meter: an OpenTelemetry exporter bridge for the Hermes Agent.
//!
//! Hermes calls plugin hooks for sessions, turns, LLM API calls, tool calls
//! and subagents. hermes-meter decodes those calls (`hermes_meter_model::hook`), applies each
//! one to a local SQLite store in one transaction (`hermes_meter_store`), and builds
//! reports, telemetry and budget verdicts from that store.
//!
//! This crate is the command line ([`cli`]) with the viewer ([`ui`]), the
//! terminal trace ([`trace`]) and what the Hermes side of a store says
//! ([`hermes_check`]), over the runtime (`hermes_meter_runtime`), the store
//! (`hermes_meter_store`) and the model (`hermes_meter_model`), each named
//! by its own crate's path.

pub mod cli;
pub mod hermes_check;
pub mod trace;
pub mod ui;
