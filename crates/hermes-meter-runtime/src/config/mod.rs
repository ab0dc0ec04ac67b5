//! Configuration: every setting hermes-meter has, resolved once.
//!
//! Owns: reading the process environment (the only module that does, tests
//! aside, through [`process_var`] and [`process_var_os`]), resolving each
//! setting in
//! the documented order (explicit argument, then environment, then
//! defaults) with one parser per type (`parse.rs`), and remembering where
//! each value came from so `status` can say. The runtime, the exporters,
//! the budget gate and the CLI receive resolved values. Must not touch: the
//! store, the network.
//!
//! One file per concern: `store.rs` where the store lives and what it keeps
//! (retention, content capture); `bridge.rs` the per-process runtime's
//! settings; `export.rs` the trace export (`OTEL_*`, per signal);
//! `metrics.rs` the metric export; `cli.rs` what only the command line
//! reads (log filter, colour, Hermes's Python, the viewer's token); `fleet.rs` the fleet
//! database's variables (libpq's, read for `fleet/config.rs`).

use std::ffi::OsString;

pub mod bridge;
pub mod cli;
pub mod digest;
pub mod dotenv;
pub mod export;
mod files;
pub mod fleet;
pub mod metrics;
pub mod parse;
mod store;
pub mod webhook;

pub use bridge::{BridgeConfig, DEFAULT_STORE_RETRY_MAX};
pub use files::{load_budgets, load_prices};
pub(crate) use store::capture_content_from;
pub use store::{hermes_home, store_dir, Retention};

/// One variable of the process environment, else of Hermes's `.env`
/// file ([`dotenv`]); `None` when neither sets it (or it is not UTF-8).
/// With [`process_var_os`], the crate's only read of the environment.
pub fn process_var(name: &str) -> Option<String> {
    match std::env::var_os(name) {
        Some(v) => v.into_string().ok(),
        None => dotenv::var(name),
    }
}

/// One variable of the process environment as the OS holds it, else of
/// Hermes's `.env` file.
pub(crate) fn process_var_os(name: &str) -> Option<OsString> {
    std::env::var_os(name).or_else(|| dotenv::var(name).map(OsString::from))
}

/// [`process_var_os`] with an empty value counted as unset.
pub(crate) fn process_var_set(name: &str) -> Option<OsString> {
    process_var_os(name).filter(|v| !v.is_empty())
}

/// Names of the environment variables of the store's settings.
pub mod env {
    /// The store directory, overriding everything but an explicit flag.
    pub const HERMES_METER_HOME: &str = "HERMES_METER_HOME";
    /// Hermes's home; the store defaults to `$HERMES_HOME/meter`.
    pub const HERMES_HOME: &str = "HERMES_HOME";
    /// The user's home, for the `~/.hermes/meter` default.
    pub(crate) const HOME: &str = "HOME";
    /// Opt-in capture of prompts, responses and tool arguments.
    pub(crate) const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
    /// Which generation of GenAI names to emit (`gen_ai/dup`: both).
    pub(crate) const SEMCONV_STABILITY_OPT_IN: &str = "OTEL_SEMCONV_STABILITY_OPT_IN";
    /// Days journal rows (each event's key and payload) are kept.
    pub(crate) const RETENTION_JOURNAL_DAYS: &str = "HERMES_METER_RETENTION_JOURNAL_DAYS";
    /// Days a span waits in the outbox for a collector before it is given up.
    pub(crate) const RETENTION_OUTBOX_DAYS: &str = "HERMES_METER_RETENTION_OUTBOX_DAYS";
    /// Hours captured content stays after its session ended and its spans went out.
    pub(crate) const RETENTION_CONTENT_HOURS: &str = "HERMES_METER_RETENTION_CONTENT_HOURS";
}

/// Default idle time after which a run that never ended is closed as
/// abandoned (`HERMES_METER_IDLE_TIMEOUT_SECONDS`; the writer's sweep and
/// the exporter both use it).
pub const DEFAULT_IDLE_TIMEOUT_SECONDS: f64 = 15.0 * 60.0;

/// The pricing file's name inside the store directory.
pub const PRICING_FILE_NAME: &str = "pricing.toml";

/// Where a resolved value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag or an explicit argument.
    Explicit,
    /// An environment variable, by name.
    Env(&'static str),
    /// The built-in default.
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Explicit => f.write_str("flag"),
            Source::Env(name) => match dotenv::provides(name) {
                Some(path) => write!(f, "{name} in {}", path.display()),
                None => write!(f, "env {name}"),
            },
            Source::Default => f.write_str("default"),
        }
    }
}

/// A resolved value and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved<T> {
    pub value: T,
    pub source: Source,
}
