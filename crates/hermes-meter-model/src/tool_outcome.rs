//! How a tool call ended: the one definition `report`, metrics, spans, the
//! alert rules and the dashboard share. Pure.
//!
//! Owns: [`ToolOutcome`] (the `hermes.tool.outcome` value) and which
//! outcomes are failures. Must not touch: I/O.
//!
//! Hermes 0.19.0 reports a terminal command that exits non-zero with status
//! `ok`. Folding that into `ok` hides a failed command; folding it into
//! `error` hides that Hermes disagreed. It is its own outcome,
//! [`ToolOutcome::NonzeroExit`] (`nonzero_exit`), counted among failures
//! and shown by itself on every surface: the report's `nonzero exit`
//! column, the `hermes.tool.outcome` label of `hermes.tool.calls`, and the
//! span attribute.

/// The normalised outcome of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolOutcome {
    /// The tool succeeded (a terminal command exited 0).
    Ok,
    /// Hermes said `ok`, but the command exited non-zero.
    NonzeroExit,
    /// The tool failed, by Hermes' account.
    Error,
    /// A `pre_tool_call` verdict (the budget) blocked it.
    Blocked,
    /// Cancelled (an interrupt).
    Cancelled,
    /// Timed out.
    Timeout,
    /// Not finished, or a status nobody can classify.
    Other,
}

impl ToolOutcome {
    /// Every outcome, in the order reports list them.
    pub const ALL: [ToolOutcome; 7] = [
        ToolOutcome::Ok,
        ToolOutcome::NonzeroExit,
        ToolOutcome::Error,
        ToolOutcome::Blocked,
        ToolOutcome::Cancelled,
        ToolOutcome::Timeout,
        ToolOutcome::Other,
    ];

    /// The outcome of a call from what the ledger holds of it: whether it
    /// ended, Hermes' status and ok flag, and the exit code of a terminal
    /// command.
    pub fn of(ended: bool, status: Option<&str>, ok: Option<bool>, exit_code: Option<i64>) -> Self {
        if !ended {
            return ToolOutcome::Other;
        }
        match status {
            Some("blocked") => return ToolOutcome::Blocked,
            Some("cancelled") | Some("interrupted") => return ToolOutcome::Cancelled,
            Some("timeout") | Some("timed_out") => return ToolOutcome::Timeout,
            _ => {}
        }
        let hermes_says_error = status == Some("error") || ok == Some(false);
        if exit_code.is_some_and(|c| c != 0) {
            return if hermes_says_error {
                ToolOutcome::Error
            } else {
                ToolOutcome::NonzeroExit
            };
        }
        match (hermes_says_error, ok, status) {
            (true, _, _) => ToolOutcome::Error,
            (_, Some(true), _) | (_, None, Some("ok")) => ToolOutcome::Ok,
            _ => ToolOutcome::Other,
        }
    }

    /// The `hermes.tool.outcome` value.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolOutcome::Ok => "ok",
            ToolOutcome::NonzeroExit => "nonzero_exit",
            ToolOutcome::Error => "error",
            ToolOutcome::Blocked => "blocked",
            ToolOutcome::Cancelled => "cancelled",
            ToolOutcome::Timeout => "timeout",
            ToolOutcome::Other => "other",
        }
    }

    /// Whether it counts as a failed call: everything but `ok`, as the
    /// alert rule `hermes_tool_outcome!="ok"` and the dashboard read it.
    pub fn is_failure(self) -> bool {
        self != ToolOutcome::Ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_and_hermes_status_decide_together() {
        use ToolOutcome::*;
        for (ended, status, ok, code, want) in [
            (true, Some("ok"), Some(true), Some(3), NonzeroExit),
            (true, Some("ok"), Some(true), Some(0), Ok),
            (true, Some("ok"), None, None, Ok),
            (true, Some("error"), Some(false), Some(3), Error),
            (true, None, Some(false), None, Error),
            (true, Some("blocked"), Some(false), None, Blocked),
            (true, Some("interrupted"), None, Some(130), Cancelled),
            (true, Some("timed_out"), None, None, Timeout),
            (true, Some("weird"), None, None, Other),
            (false, Some("ok"), Some(true), Some(0), Other),
        ] {
            assert_eq!(
                ToolOutcome::of(ended, status, ok, code),
                want,
                "{status:?} {ok:?} {code:?}"
            );
        }
        assert!(NonzeroExit.is_failure() && Error.is_failure() && !Ok.is_failure());
    }
}
