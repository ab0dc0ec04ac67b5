//! The brake out of the agent's reach: which tool calls would change what
//! limits the agent ([`meter_change`]), so the budget gate refuses them
//! whatever the budgets say (its message: `budget::protected_text`). Read
//! here, beside the decoder, because the scrub writes what it found before
//! the arguments are dropped. A budget the agent it limits can lift (run `hermes-meter
//! budget set`, edit `budgets.toml`, switch the plugin off, set
//! `HERMES_METER_BUDGET_MODE=observe` in Hermes's `.env`) is advice, not a
//! brake.
//!
//! Read from the arguments as the hook gets them (with content capture off,
//! the first 4 KiB of each string: see `copy.rs` of the Python binding).
//! This is a second line: the operator keeps the budget file where the
//! agent's user cannot write (docs/budgets-and-fleet.md); the gate stops the agent
//! that follows an old message's advice or tries the obvious.

use serde_json::Value;

/// Tools that only read: naming the meter's files there changes nothing.
const READ_ONLY_TOOLS: &[&str] = &[
    "read_file",
    "search_files",
    "session_search",
    "web_search",
    "web_extract",
    "vision_analyze",
];

/// Most strings looked at in one call's arguments, and deepest nesting.
const MAX_STRINGS: usize = 256;
const MAX_DEPTH: usize = 8;

/// What the tool call `tool` with `args` would change of the meter, in
/// words for its block message, or `None` when it changes nothing of it.
pub fn meter_change(tool: &str, args: &Value) -> Option<&'static str> {
    meter_change_in(args).filter(|_| !reads_only(tool))
}

/// [`meter_change`] before the tool is known: what `args` name of the meter
/// (the scrub writes it beside the arguments' digest, where the tool's name
/// is not at hand; the decoder then applies [`reads_only`]).
pub fn meter_change_in(args: &Value) -> Option<&'static str> {
    let mut texts = Vec::new();
    strings(args, 0, &mut texts);
    texts.iter().find_map(|t| in_text(&t.to_ascii_lowercase()))
}

/// Whether `tool` only reads (naming the meter's files there is harmless).
pub fn reads_only(tool: &str) -> bool {
    READ_ONLY_TOOLS.contains(&tool)
}

fn strings<'a>(v: &'a Value, depth: usize, out: &mut Vec<&'a str>) {
    if out.len() >= MAX_STRINGS || depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|i| strings(i, depth + 1, out)),
        Value::Object(map) => map.values().for_each(|i| strings(i, depth + 1, out)),
        _ => {}
    }
}

/// The budget subcommands that only read.
const READING_SUBCOMMANDS: &[&str] = &["list", "forecast", "show", "--help", "-h", "help"];

fn in_text(t: &str) -> Option<&'static str> {
    if t.contains("budgets.toml") {
        return Some("the meter's budget file (budgets.toml)");
    }
    if t.contains("hermes-meter.db") || t.contains("hermes_meter_") {
        return Some("the meter's store or its settings (HERMES_METER_*)");
    }
    for cli in ["hermes-meter", "hermes meter", "hermes_meter"] {
        let mut rest = t;
        while let Some(at) = rest.find(cli) {
            let after = &rest[at + cli.len()..];
            let mut words = after.split_whitespace();
            match words.next() {
                Some("budget") | Some("budgets") => {
                    let sub = words.next().unwrap_or("");
                    if !READING_SUBCOMMANDS.contains(&sub) {
                        return Some("the meter's budgets (hermes-meter budget ...)");
                    }
                }
                Some("held") => {
                    let sub = words.next().unwrap_or("");
                    if !READING_SUBCOMMANDS.contains(&sub) {
                        return Some("the meter's held calls (hermes-meter held confirm ...)");
                    }
                }
                _ => {}
            }
            rest = after;
        }
    }
    let names_plugin = ["hermes-meter", "hermes_meter"].iter().any(|n| t.contains(n));
    let switches_off = ["disable", "uninstall", "remove", " rm ", "unregister"]
        .iter()
        .any(|w| t.contains(w));
    if names_plugin && switches_off {
        return Some("the meter plugin itself (disabling or removing it)");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn terminal(command: &str) -> Option<&'static str> {
        meter_change("terminal", &json!({ "command": command }))
    }

    #[test]
    fn lifting_a_budget_through_the_cli_is_named() {
        for cmd in [
            "hermes-meter budget set global daily 1000",
            "cd /tmp && HERMES_HOME=x hermes-meter budget rm global daily",
            "hermes meter budget set global daily 50",
            "python -m hermes_meter budget set per_session usd 100",
            "$(dirname $(which hermes))/hermes-meter   budget   set global daily 9",
            "hermes-meter held confirm --all",
        ] {
            assert!(terminal(cmd).is_some(), "{cmd}");
        }
    }

    #[test]
    fn the_files_the_settings_and_the_plugin_are_named() {
        assert!(terminal("printf '[global]\\ndaily = 1000\\n' > ~/.hermes/hermes-meter/budgets.toml").is_some());
        assert!(terminal("echo HERMES_METER_BUDGET_MODE=observe >> ~/.hermes/.env").is_some());
        assert!(terminal("sqlite3 ~/.hermes/hermes-meter/hermes-meter.db 'DELETE FROM llm_calls'").is_some());
        assert!(terminal("hermes plugins disable hermes-meter").is_some());
        assert!(terminal("pip uninstall -y hermes-meter").is_some());
        let write = json!({"path": "/home/a/.hermes/hermes-meter/budgets.toml", "content": "[global]\ndaily = 1e9"});
        assert!(meter_change("write_file", &write).is_some());
        let patch =
            json!({"mode": "replace", "path": "x", "edits": [{"old": "daily = 1", "new": "HERMES_METER_HOME=/tmp"}]});
        assert!(meter_change("patch", &patch).is_some());
    }

    #[test]
    fn reading_the_meter_is_not_changing_it() {
        for cmd in [
            "hermes-meter report --since 1d",
            "hermes-meter budget list",
            "hermes-meter held list",
            "hermes meter budget forecast",
            "hermes-meter status | head",
            "ls -la",
            "echo budget set",
        ] {
            assert_eq!(terminal(cmd), None, "{cmd}");
        }
        let read = json!({"path": "/home/a/.hermes/hermes-meter/budgets.toml"});
        assert_eq!(meter_change("read_file", &read), None);
        assert_eq!(meter_change("terminal", &json!({"command": 3})), None);
    }
}
