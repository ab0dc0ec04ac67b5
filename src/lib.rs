//! hermes-meter: an OpenTelemetry exporter bridge for the Hermes Agent.
//!
//! Hermes calls plugin hooks for sessions, turns, LLM API calls, tool calls
//! and subagents. hermes-meter decodes those calls ([`hook`]), applies each
//! one to a local SQLite store in one transaction ([`store`]), and builds
//! reports, telemetry and budget verdicts from that store.
//!
//! This crate is the command line ([`cli`]) with the viewer ([`ui`]), the
//! terminal trace ([`trace`]) and what the Hermes side of a store says
//! ([`hermes_check`]); it re-exports the runtime
//! (`hermes-meter-runtime`), which re-exports the store and the model, so
//! `hermes_meter::…` names all of it.

pub use hermes_meter_runtime::*;

pub mod cli;
pub mod hermes_check;
pub mod trace;
pub mod ui;
