//! What only the command line reads: the log filter, whether to colour,
//! and where Hermes's Python is.
//!
//! Owns: those variables' names and their resolution. Must not touch: the
//! command line itself (`cli/` receives the resolved values), the store.

use std::ffi::OsString;
use std::path::PathBuf;

/// The log filter of the command line (an `EnvFilter` directive), before
/// `RUST_LOG`.
pub const LOG_ENV: &str = "HERMES_METER_LOG";
/// The conventional variable that turns colours off when set and not empty.
pub(crate) const NO_COLOR_ENV: &str = "NO_COLOR";
/// Hermes's Python, for `pricing drift`.
pub const HERMES_PYTHON_ENV: &str = "HERMES_METER_HERMES_PYTHON";
/// The generic Rust log filter, read when `HERMES_METER_LOG` is not set.
pub(crate) const RUST_LOG_ENV: &str = "RUST_LOG";
/// The viewer's access token, when `--token` is not given.
pub const UI_TOKEN_ENV: &str = "HERMES_METER_UI_TOKEN";
/// The MCP server's access token over HTTP (`mcp --listen`).
pub const MCP_TOKEN_ENV: &str = "HERMES_METER_MCP_TOKEN";
/// Where the viewer links a session's trace, when `--trace-url` is not given.
pub const TRACE_URL_ENV: &str = "HERMES_METER_TRACE_URL";

/// The log filter text and the variable it came from: `HERMES_METER_LOG`
/// when set and not blank, else `RUST_LOG` (possibly empty: the caller's
/// default then applies).
pub fn log_filter() -> (&'static str, String) {
    log_filter_from(super::process_var)
}

/// [`log_filter`] over any environment.
pub(crate) fn log_filter_from(var: impl Fn(&str) -> Option<String>) -> (&'static str, String) {
    match var(LOG_ENV) {
        Some(v) if !v.trim().is_empty() => (LOG_ENV, v),
        _ => (RUST_LOG_ENV, var(RUST_LOG_ENV).unwrap_or_default()),
    }
}

/// Whether `NO_COLOR` asks for no colour (set and not empty).
pub fn no_color() -> bool {
    super::process_var_set(NO_COLOR_ENV).is_some()
}

/// `HERMES_METER_HERMES_PYTHON` when set and not empty.
pub fn hermes_python() -> Option<PathBuf> {
    super::process_var_set(HERMES_PYTHON_ENV).map(PathBuf::from)
}

/// The viewer's access token: `flag`, else `HERMES_METER_UI_TOKEN` as set
/// (an empty value included, as clap's `env` read it before).
pub fn ui_token(flag: Option<String>) -> Option<String> {
    flag.or_else(|| super::process_var(UI_TOKEN_ENV))
}

/// The MCP server's access token over HTTP: `flag`, else
/// `HERMES_METER_MCP_TOKEN` (set and not empty).
pub fn mcp_token(flag: Option<String>) -> Option<String> {
    flag.or_else(|| super::process_var(MCP_TOKEN_ENV))
        .filter(|t| !t.is_empty())
}

/// Where the viewer links traces: `flag`, else `HERMES_METER_TRACE_URL`
/// as set (empty included: no link).
pub fn trace_url(flag: Option<String>) -> Option<String> {
    flag.or_else(|| super::process_var(TRACE_URL_ENV))
}

/// The command search path (`PATH`), empty when unset.
pub fn search_path() -> OsString {
    super::process_var_os("PATH").unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_filter_is_hermes_meter_log_then_rust_log() {
        let both = |k: &str| match k {
            LOG_ENV => Some("debug".to_string()),
            RUST_LOG_ENV => Some("info".to_string()),
            _ => None,
        };
        assert_eq!(log_filter_from(both), (LOG_ENV, "debug".to_string()));
        let blank = |k: &str| match k {
            LOG_ENV => Some(" ".to_string()),
            RUST_LOG_ENV => Some("info".to_string()),
            _ => None,
        };
        assert_eq!(log_filter_from(blank), (RUST_LOG_ENV, "info".to_string()));
        assert_eq!(log_filter_from(|_| None), (RUST_LOG_ENV, String::new()));
    }
}
