//! Editing `budgets.toml` for `hermes-meter budget set | rm`: read the
//! file, change one limit, cap or rate limit in its document (the model's
//! `crates/hermes-meter-model/src/budget/edit.rs`, so comments and layout
//! survive), check the result parses, and replace the file atomically (a
//! temporary file in the same directory, then a rename): a hook reloading
//! it concurrently sees the old file or the new, never half.

use std::path::Path;

use toml_edit::DocumentMut;

use super::budget::budget_words;
use hermes_meter_model::budget::rate::Rate;
use hermes_meter_model::budget::{self, BudgetConfig, BudgetUnit, CapScope, CapUnit, Scope, Window};
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::write_atomically;

/// Changes the budget file at `path` with `edit` (a new file gets its
/// header above the tables: parsed with them, comments alone would end up
/// below them), keeping everything else, and writes it once it parses.
fn set_in(path: &Path, edit: impl FnOnce(&mut DocumentMut) -> std::result::Result<(), String>) -> Result<()> {
    let (text, header) = match std::fs::read_to_string(path) {
        Ok(t) => (t, ""),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), NEW_FILE_HEADER),
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut doc = parse_doc(path, &text)?;
    edit(&mut doc).map_err(|message| Error::Config {
        path: path.to_path_buf(),
        message,
    })?;
    write_checked(path, header, &doc)
}

/// Removes from the budget file at `path` what `remove` takes out (false:
/// it was not set), keeping everything else, comments too. `what` names it
/// in the error of a file without it (`global daily limit`, `per-run
/// tool_calls cap`).
fn remove_in(path: &Path, what: &str, remove: impl FnOnce(&mut DocumentMut) -> bool) -> Result<()> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Other(format!(
                "no {what} to remove: {} does not exist",
                path.display()
            )))
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let mut doc = parse_doc(path, &text)?;
    if !remove(&mut doc) {
        return Err(Error::Other(format!(
            "no {what} is set in {}; see hermes-meter budget list",
            path.display()
        )));
    }
    write_checked(path, "", &doc)
}

/// The budget file's text as an editable document.
fn parse_doc(path: &Path, text: &str) -> Result<DocumentMut> {
    text.parse().map_err(|e: toml_edit::TomlError| Error::Config {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Writes the edited file (after `header`, a new file's comments), once it
/// is known to parse as a budget file.
fn write_checked(path: &Path, header: &str, doc: &DocumentMut) -> Result<()> {
    let new_text = format!("{header}{doc}");
    BudgetConfig::parse(&new_text).map_err(|message| Error::Config {
        path: path.to_path_buf(),
        message,
    })?;
    write_atomically(path, new_text.as_bytes())
}

/// Sets one limit in the budget file at `path`.
pub(super) fn set(
    path: &Path,
    scope: Scope,
    id: Option<&str>,
    window: Window,
    unit: BudgetUnit,
    limit: f64,
) -> Result<()> {
    set_in(path, |doc| {
        budget::edit::set_limit(doc, scope, id, (window, unit), limit)
    })
}

/// Removes one limit from the budget file at `path` (a table left empty by
/// it goes as well); an error when it is not set.
pub(super) fn remove(path: &Path, scope: Scope, id: Option<&str>, window: Window, unit: BudgetUnit) -> Result<()> {
    let what = format!("{} limit", budget_words(scope, id, window, unit));
    remove_in(path, &what, |doc| {
        budget::edit::remove_limit(doc, scope, id, (window, unit))
    })
}

/// Sets one cap in the budget file at `path`.
pub(super) fn set_cap(path: &Path, scope: CapScope, unit: CapUnit, limit: f64) -> Result<()> {
    set_in(path, |doc| budget::edit::set_cap(doc, scope, unit, limit))
}

/// Removes one cap from the budget file at `path`; an error when it is not set.
pub(super) fn remove_cap(path: &Path, scope: CapScope, unit: CapUnit) -> Result<()> {
    let what = format!("per-{scope} {} cap", unit.as_str());
    remove_in(path, &what, |doc| budget::edit::remove_cap(doc, scope, unit))
}

/// How a rate limit reads in messages: `global requests_per_minute`,
/// `model gpt-4o tokens_per_minute`, `sender (default) usd_per_hour`.
pub(super) fn rate_words(scope: Scope, id: Option<&str>, rate: Rate) -> String {
    match (id, scope) {
        (_, Scope::Global) => format!("global {rate}"),
        (Some(id), _) => format!("{scope} {id} {rate}"),
        (None, _) => format!("{scope} (default) {rate}"),
    }
}

/// Sets one rate limit in the budget file at `path`.
pub(super) fn set_rate(path: &Path, scope: Scope, id: Option<&str>, rate: Rate, limit: f64) -> Result<()> {
    set_in(path, |doc| budget::edit::set_rate(doc, scope, id, rate, limit))
}

/// Removes one rate limit from the budget file at `path`; an error when it
/// is not set.
pub(super) fn remove_rate(path: &Path, scope: Scope, id: Option<&str>, rate: Rate) -> Result<()> {
    let what = format!("{} limit", rate_words(scope, id, rate));
    remove_in(path, &what, |doc| budget::edit::remove_rate(doc, scope, id, rate))
}

pub(super) const NEW_FILE_HEADER: &str = "\
# hermes-meter budgets: limits per daily, weekly or monthly window or a
# rolling one (5h, 7d, ...), in USD (daily = 10.0, 5h = 20) or in tokens
# (daily_tokens = 5000000); rate limits per minute or hour
# (requests_per_minute = 30, tokens_per_minute = 200000, usd_per_hour = 2).
# Edited by `hermes-meter budget set`; comments are kept. Reloaded by running
# Hermes processes within a second of a change. See docs/budgets-and-fleet.md.
#
# mode = \"enforce\"          # or \"observe\": notices only, nothing blocked
# timezone = \"local\"        # IANA name, e.g. \"Europe/Paris\"
# soft_threshold = 0.8
# hard_threshold = 1.0
# soften_estimated = false  # a hard breach resting on estimated costs is soft
# alert_thresholds = [0.5, 0.75, 0.9]  # an alert at each, once per window
# tokens_counted = \"total\"  # what token limits count: total, input or output
# [per_session]             # caps on every session (all turns and subagents)
# usd = 5.0
# [per_run]                 # caps on every run (one turn with its subagents)
# tool_calls = 200
# [downgrade]               # past `at`, calls go to a cheaper model instead
# at = 0.8
# to = \"gpt-4o-mini\"
# [downgrade.models]        # or one per model, each its provider's cheaper one
# \"claude-opus-4\" = \"claude-haiku-4\"
# [rate_limit]              # what a reached rate limit does: stop (default) or
# action = \"wait\"           # wait until the call fits, at most max_wait_seconds
# max_wait_seconds = 60
";
