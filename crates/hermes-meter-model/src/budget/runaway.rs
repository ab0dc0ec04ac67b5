//! Runaway detection: the signs of an agent stuck in a loop, and the
//! verdict over them. Pure.
//!
//! Owns: the `[runaway]` table of the budget file ([`RunawayConfig`], on
//! by default in alert mode), the signs a run shows ([`RunSigns`]) and the
//! reason a run is a runaway ([`runaway_reason`]), and its texts. Must not
//! touch: the store (which reads the signs), the gate (which watches the
//! events, raises the alert and, with `action = "stop"`, stops the run).
//!
//! The defaults are far past what a working agent does (the recorded
//! fixtures and every scenario of the e2e kit stay under them) and well
//! under the loops users reported: 1,811 API calls for 166 tool calls,
//! 18.7 M tokens in five hours.

use serde::Deserialize;

/// What a runaway verdict does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunawayAction {
    /// Nothing is watched.
    Off,
    /// An alert (shown at the next `pre_llm_call`, logged, counted): the
    /// default.
    #[default]
    Alert,
    /// The alert, and the run's tool calls are blocked and its LLM calls
    /// stopped until its next run.
    Stop,
}

impl RunawayAction {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "off" => Some(RunawayAction::Off),
            "alert" => Some(RunawayAction::Alert),
            "stop" => Some(RunawayAction::Stop),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunawayAction::Off => "off",
            RunawayAction::Alert => "alert",
            RunawayAction::Stop => "stop",
        }
    }
}

/// The `[runaway]` table as written; every key optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunawayFile {
    action: Option<String>,
    api_calls_per_tool_call: Option<f64>,
    min_api_calls: Option<u64>,
    retries_per_request: Option<u64>,
    tokens_per_minute: Option<u64>,
    repeated_tool_calls: Option<u64>,
}

/// When a run is a runaway, resolved.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunawayConfig {
    pub action: RunawayAction,
    /// API calls (successful or failed) per tool call in one run, once the
    /// run made at least `min_api_calls`.
    pub api_calls_per_tool_call: f64,
    pub min_api_calls: u64,
    /// Attempts of one request (its `retry_count`).
    pub retries_per_request: u64,
    /// Tokens (input with cache, plus output) a session and its subagents
    /// recorded in the last minute.
    pub tokens_per_minute: u64,
    /// The same tool with the same arguments, this many times in a row in
    /// one session.
    pub repeated_tool_calls: u64,
}

impl Default for RunawayConfig {
    fn default() -> Self {
        RunawayConfig {
            action: RunawayAction::Alert,
            api_calls_per_tool_call: 8.0,
            min_api_calls: 40,
            retries_per_request: 10,
            tokens_per_minute: 2_000_000,
            repeated_tool_calls: 10,
        }
    }
}

impl RunawayConfig {
    /// What the watch does and at which signs, in one line:
    /// `alert at 10 identical tool calls in a row, ...`.
    pub fn describe(&self) -> String {
        if self.action == RunawayAction::Off {
            return "off".into();
        }
        let flood = match self.tokens_per_minute {
            u64::MAX => "token floods left to the tokens_per_minute rate limit".to_string(),
            n => format!("{n} tokens a minute"),
        };
        format!(
            "{} at {} identical tool calls in a row, {} API calls per tool call (from {}), \
             {} retries of a request, {flood}",
            self.action.as_str(),
            self.repeated_tool_calls,
            self.api_calls_per_tool_call,
            self.min_api_calls,
            self.retries_per_request,
        )
    }

    pub(super) fn from_file(file: Option<RunawayFile>) -> Result<Self, String> {
        let d = RunawayConfig::default();
        let Some(f) = file else { return Ok(d) };
        let action = match &f.action {
            Some(a) => {
                RunawayAction::parse(a).ok_or_else(|| format!("runaway.action: {a:?} is none of off, alert, stop"))?
            }
            None => d.action,
        };
        let positive = |key: &str, v: Option<u64>, default: u64| match v {
            Some(0) => Err(format!(
                "runaway.{key}: must be at least 1 (to watch nothing, action = \"off\")"
            )),
            Some(v) => Ok(v),
            None => Ok(default),
        };
        let ratio = f.api_calls_per_tool_call.unwrap_or(d.api_calls_per_tool_call);
        if !(ratio.is_finite() && ratio > 0.0) {
            return Err(format!(
                "runaway.api_calls_per_tool_call: must be more than 0, not {ratio}"
            ));
        }
        Ok(RunawayConfig {
            action,
            api_calls_per_tool_call: ratio,
            min_api_calls: positive("min_api_calls", f.min_api_calls, d.min_api_calls)?,
            retries_per_request: positive("retries_per_request", f.retries_per_request, d.retries_per_request)?,
            tokens_per_minute: positive("tokens_per_minute", f.tokens_per_minute, d.tokens_per_minute)?,
            repeated_tool_calls: positive("repeated_tool_calls", f.repeated_tool_calls, d.repeated_tool_calls)?,
        })
    }
}

/// What a run shows, from the store and the events.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunSigns {
    /// API calls of the run: recorded calls and failed attempts.
    pub api_calls: u64,
    /// Tool calls the run started.
    pub tool_calls: u64,
    /// Tokens the session family recorded in the minute before now.
    pub tokens_last_minute: u64,
}

/// Why `signs` make a run a runaway, if they do: the first sign past its
/// threshold, with its figures.
pub fn runaway_reason(cfg: &RunawayConfig, signs: &RunSigns) -> Option<String> {
    let per_tool = signs.api_calls as f64 / signs.tool_calls.max(1) as f64;
    if signs.api_calls >= cfg.min_api_calls && per_tool > cfg.api_calls_per_tool_call {
        return Some(format!(
            "{} API calls for {} tool calls in this run (more than {} per tool call)",
            signs.api_calls, signs.tool_calls, cfg.api_calls_per_tool_call
        ));
    }
    if signs.tokens_last_minute > cfg.tokens_per_minute {
        return Some(format!(
            "{} tokens in the last minute (more than {} a minute)",
            signs.tokens_last_minute, cfg.tokens_per_minute
        ));
    }
    None
}

/// Why a request retried past its threshold is a runaway, if it is.
pub fn retry_reason(cfg: &RunawayConfig, retry_count: i64) -> Option<String> {
    (retry_count >= 0 && retry_count as u64 >= cfg.retries_per_request).then(|| {
        format!(
            "one request retried {retry_count} times (the limit is {})",
            cfg.retries_per_request
        )
    })
}

/// Why a streak of identical tool calls is a runaway, if it is.
pub fn repeat_reason(cfg: &RunawayConfig, tool: &str, streak: u64) -> Option<String> {
    (streak >= cfg.repeated_tool_calls)
        .then(|| format!("{tool} called {streak} times in a row with the same arguments"))
}

/// The alert (and, stopping, the block message) of a runaway run.
pub fn runaway_text(session: &str, reason: &str, action: RunawayAction) -> String {
    let what = match action {
        RunawayAction::Stop => {
            "hermes-meter stopped its tool and LLM calls until the next message (runaway action = \"stop\")"
        }
        _ => "nothing was stopped (runaway action = \"alert\"; set it to \"stop\" to stop such a run)",
    };
    format!("RUNAWAY: session {session} looks stuck in a loop: {reason}; {what}.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_fire_on_a_loop_and_not_on_a_working_run() {
        let cfg = RunawayConfig::default();
        let working = RunSigns {
            api_calls: 60,
            tool_calls: 55,
            tokens_last_minute: 400_000,
        };
        assert_eq!(runaway_reason(&cfg, &working), None);
        // The reported loop: 1,811 API calls for 166 tool calls.
        let reported = RunSigns {
            api_calls: 1811,
            tool_calls: 166,
            ..RunSigns::default()
        };
        let why = runaway_reason(&cfg, &reported).expect("a runaway");
        assert!(why.contains("1811 API calls for 166 tool calls"), "{why}");
        // Few calls are never a loop, whatever their ratio.
        let short = RunSigns {
            api_calls: 20,
            tool_calls: 0,
            ..RunSigns::default()
        };
        assert_eq!(runaway_reason(&cfg, &short), None);
        let burst = RunSigns {
            tokens_last_minute: 2_500_000,
            ..RunSigns::default()
        };
        assert!(runaway_reason(&cfg, &burst).expect("tokens").contains("2500000 tokens"));
        assert_eq!(retry_reason(&cfg, 3), None);
        assert!(retry_reason(&cfg, 10).is_some());
        assert_eq!(repeat_reason(&cfg, "terminal", 9), None);
        assert!(repeat_reason(&cfg, "terminal", 10)
            .expect("a streak")
            .contains("terminal called 10 times"));
    }

    #[test]
    fn the_table_parses_and_refuses_what_would_watch_nothing() {
        let f = |t: &str| toml::from_str::<RunawayFile>(t).map_err(|e| e.to_string());
        let cfg = RunawayConfig::from_file(Some(f("action = \"stop\"\nrepeated_tool_calls = 4").expect("toml")))
            .expect("valid");
        assert_eq!((cfg.action, cfg.repeated_tool_calls), (RunawayAction::Stop, 4));
        assert_eq!(cfg.tokens_per_minute, RunawayConfig::default().tokens_per_minute);
        for bad in [
            "action = \"kill\"",
            "repeated_tool_calls = 0",
            "api_calls_per_tool_call = -1",
        ] {
            assert!(RunawayConfig::from_file(Some(f(bad).expect("toml"))).is_err(), "{bad}");
        }
        assert!(f("loops = 3").is_err(), "unknown keys are refused");
    }
}
