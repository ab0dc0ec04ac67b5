//! The text of the `/meter` slash command: the current session's cost and
//! tokens (with its subagents) and today's spend.
//!
//! Owns: reading those totals and laying them out. Must not touch: writes,
//! Python (the binding passes the session id in and hands the text back).

use std::path::Path;

use jiff::{tz::TimeZone, Timestamp};

use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::{Reader, SessionTotals, SpendTotals, Writer, DB_FILE_NAME};

/// The reply to `/meter` for `session_id` (if the host knows it), read from
/// the store in `store_dir` at `now` (Unix seconds), "today" being the
/// local day in `tz`.
pub fn meter_command(store_dir: &Path, session_id: Option<&str>, now: f64, tz: &TimeZone) -> Result<String> {
    let path = store_dir.join(DB_FILE_NAME);
    if !path.exists() {
        // Asked before any hook made the store: a new one, with nothing in it.
        drop(Writer::open_dir(store_dir)?);
    }
    let store = Reader::open(&path)?;
    let session = match session_id.filter(|s| !s.is_empty()) {
        Some(id) => Some((id.to_string(), store.session_totals(id)?)),
        None => None,
    };
    let midnight = start_of_day(now, tz)?;
    let today = store.spend_between(midnight, now + 1.0)?;
    let mut text = render(session.as_ref().map(|(id, t)| (id.as_str(), t.as_ref())), &today);
    text.push_str(&budget_lines(&store, store_dir, now));
    // What fired today, where a person asks (`status` lists where each went).
    let alerts = store.recent_alerts(midnight, ALERTS_SHOWN)?;
    if let Some(newest) = alerts.first() {
        let mut said: String = hermes_meter_model::display::escape(&newest.alert.text)
            .chars()
            .take(140)
            .collect();
        if newest.alert.text.chars().count() > 140 {
            said.push('…');
        }
        text.push_str(&format!(
            "\nalerts    {}{} today; newest: {said}",
            alerts.len(),
            if alerts.len() == ALERTS_SHOWN { "+" } else { "" }
        ));
    }
    Ok(text)
}

/// Most budgets `/meter` lists (the nearest their lines first).
const BUDGETS_SHOWN: usize = 8;

/// One line per budget: what is left and when it comes back (`budget
/// global 5h: $4.20 left; it frees $6.00 at ...`), nearest its line first.
/// Gateway users' own budgets are left out: `/meter` may be asked in a
/// chat, and other users' ids are theirs. Nothing when no budget is set;
/// a file that does not parse is said.
fn budget_lines(store: &Reader, store_dir: &Path, now: f64) -> String {
    use hermes_meter_model::budget::{self, Scope};
    let cfg = match crate::config::load_budgets(&store_dir.join(budget::BUDGETS_FILE_NAME)) {
        Ok(cfg) if cfg.is_empty() => return String::new(),
        Ok(cfg) => cfg,
        Err(e) => {
            return format!(
                "\nbudgets   the budget file does not parse: {}",
                hermes_meter_model::display::escape(&e.to_string())
            )
        }
    };
    let mut states = match store.budget_states(&cfg, now) {
        Ok(states) => states,
        Err(e) => return format!("\nbudgets   not readable now: {e}"),
    };
    states.retain(|s| s.budget.scope != Scope::Sender);
    let used = |s: &budget::BudgetState| s.spend.total() / s.budget.limit.max(f64::MIN_POSITIVE);
    states.sort_by(|a, b| used(b).total_cmp(&used(a)));
    let mut out = String::new();
    for s in states.iter().take(BUDGETS_SHOWN) {
        out.push_str(&format!(
            "\nbudget    {} ({}): {}",
            hermes_meter_model::display::escape(&s.budget.label()),
            s.level.as_str(),
            budget::left_text(s, s.budget.limit * cfg.hard_threshold, &cfg.tz)
        ));
    }
    if states.len() > BUDGETS_SHOWN {
        out.push_str(&format!(
            "\nbudgets   {} more: hermes-meter budget list",
            states.len() - BUDGETS_SHOWN
        ));
    }
    out
}

/// Most of today's alerts `/meter` counts (it names the newest).
const ALERTS_SHOWN: usize = 20;

fn start_of_day(now: f64, tz: &TimeZone) -> Result<f64> {
    let ts = Timestamp::from_microsecond((now * 1e6) as i64).map_err(|e| Error::Other(e.to_string()))?;
    let midnight = ts
        .to_zoned(tz.clone())
        .start_of_day()
        .map_err(|e| Error::Other(e.to_string()))?;
    Ok(midnight.timestamp().as_microsecond() as f64 / 1e6)
}

/// Lays the totals out, one fact per line.
pub fn render(session: Option<(&str, Option<&SessionTotals>)>, today: &SpendTotals) -> String {
    let mut out = String::new();
    match session {
        None => out.push_str("session   unknown here (no session id from Hermes)\n"),
        Some((id, None)) => out.push_str(&format!("session   {id}: nothing recorded yet\n")),
        Some((id, Some(t))) => {
            let subagents = t.runs - 1;
            out.push_str(&format!("session   {id} ({})\n", t.status));
            out.push_str(&format!(
                "cost      {} over {} LLM call{}{}{}\n",
                usd(t.cost_usd),
                t.llm_calls,
                plural(t.llm_calls),
                if subagents > 0 {
                    format!(", {subagents} subagent{} included", plural(subagents))
                } else {
                    String::new()
                },
                if t.unpriced_llm_calls > 0 {
                    format!(" ({} unpriced, counted as $0)", t.unpriced_llm_calls)
                } else {
                    String::new()
                }
            ));
            out.push_str(&format!(
                "tokens    input {} · output {} · cache read {} · cache write {} · reasoning {}{}\n",
                t.input_tokens,
                t.output_tokens,
                t.cache_read_tokens,
                t.cache_write_tokens,
                t.reasoning_tokens,
                if t.estimated_llm_calls > 0 {
                    format!(
                        " ({} call{} estimated)",
                        t.estimated_llm_calls,
                        plural(t.estimated_llm_calls)
                    )
                } else {
                    String::new()
                }
            ));
            out.push_str(&format!(
                "tools     {} call{}, {} failed · API errors {}\n",
                t.tool_calls,
                plural(t.tool_calls),
                t.tool_failures,
                t.api_errors
            ));
        }
    }
    out.push_str(&format!(
        "today     {} over {} LLM call{} in {} session{}",
        usd(today.cost_usd),
        today.llm_calls,
        plural(today.llm_calls),
        today.sessions,
        plural(today.sessions)
    ));
    // Where to look further: the viewer (a tab of Hermes's dashboard, or
    // standalone) and the session's span tree.
    out.push_str("\nviewer    the Meter tab of `hermes dashboard`, or `hermes-meter ui`");
    if let Some((id, Some(_))) = session {
        out.push_str(&format!(" · spans: `hermes-meter trace {id}`"));
    }
    out
}

fn usd(x: f64) -> String {
    if x != 0.0 && x.abs() < 0.01 {
        format!("${x:.6}")
    } else {
        format!("${x:.2}")
    }
}

fn plural(n: i64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reply_names_session_cost_tokens_and_today() {
        let t = SessionTotals {
            session_id: "s".into(),
            status: "running".into(),
            runs: 2,
            llm_calls: 3,
            input_tokens: 3060,
            output_tokens: 108,
            cost_usd: 0.007024,
            tool_calls: 1,
            ..SessionTotals::default()
        };
        let today = SpendTotals {
            llm_calls: 5,
            cost_usd: 1.5,
            sessions: 2,
            ..SpendTotals::default()
        };
        let text = render(Some(("s", Some(&t))), &today);
        assert!(text.contains("session   s (running)"), "{text}");
        assert!(
            text.contains("$0.007024 over 3 LLM calls, 1 subagent included"),
            "{text}"
        );
        assert!(text.contains("input 3060 · output 108"), "{text}");
        assert!(
            text.contains("today     $1.50 over 5 LLM calls in 2 sessions"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "viewer    the Meter tab of `hermes dashboard`, or `hermes-meter ui` · spans: `hermes-meter trace s`"
            ),
            "{text}"
        );
        let text = render(Some(("s", None)), &SpendTotals::default());
        assert!(text.contains("nothing recorded yet"), "{text}");
        assert!(render(None, &today).starts_with("session   unknown"));
    }

    #[test]
    fn todays_alerts_are_counted_and_the_newest_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open_dir(dir.path()).expect("store");
        let now = 1_796_083_200.0 + 12.0 * 3600.0;
        store
            .raise_pending_alert("runaway", "run|y", "RUNAWAY: yesterday", now - 86_400.0)
            .expect("raise");
        let text = meter_command(dir.path(), None, now, &TimeZone::UTC).expect("reply");
        assert!(!text.contains("alerts"), "{text}");
        store
            .raise_pending_alert("runaway", "run|t", "RUNAWAY: session \x1b]0;x\x07s loops", now - 60.0)
            .expect("raise");
        let text = meter_command(dir.path(), None, now, &TimeZone::UTC).expect("reply");
        let line = text.lines().last().expect("a line");
        assert!(
            line.starts_with("alerts    1 today; newest: RUNAWAY: session"),
            "{text}"
        );
        assert!(!line.contains('\x1b') && !line.contains('\x07'), "{line:?}");
    }

    /// Each budget's headroom, a rolling one's with what frees when; other
    /// gateway users' budgets are not shown.
    #[test]
    fn budgets_are_listed_with_what_is_left_and_when_it_frees() {
        let dir = tempfile::tempdir().expect("temp dir");
        drop(Writer::open_dir(dir.path()).expect("store"));
        std::fs::write(
            dir.path().join("budgets.toml"),
            "timezone = \"UTC\"\n[global]\n5h = 4\n[per_sender.overrides.alice]\ndaily = 1\n",
        )
        .expect("budgets");
        let text = meter_command(dir.path(), None, 1_796_652_000.0, &TimeZone::UTC).expect("reply");
        assert!(
            text.contains("budget    global 5h (ok): $4.00 left; it frees up as spend leaves its rolling 5h window"),
            "{text}"
        );
        assert!(!text.contains("alice"), "{text}");
        std::fs::write(dir.path().join("budgets.toml"), "[global]\ndaily = \"\u{1b}[2J\"\n").expect("budgets");
        let text = meter_command(dir.path(), None, 1_796_652_000.0, &TimeZone::UTC).expect("reply");
        assert!(text.contains("budgets   the budget file does not parse"), "{text}");
        assert!(!text.contains('\u{1b}'), "{text:?}");
    }

    #[test]
    fn today_starts_at_local_midnight() {
        let tz = TimeZone::fixed(jiff::tz::offset(2));
        // 2026-01-02T01:00:00+02:00 is 2026-01-01T23:00:00Z.
        let now = 1_767_308_400.0;
        let midnight = start_of_day(now, &tz).expect("midnight");
        assert_eq!(now - midnight, 3600.0);
    }
}
