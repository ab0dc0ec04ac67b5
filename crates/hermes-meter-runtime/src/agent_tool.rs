//! The agent's read-only `meter_spend` tool: what this session and today
//! cost, each budget's headroom and when its window frees up, and the
//! costliest recent sessions and most used tools, as small, stable JSON.
//! In the gateway it answers for the asking user only (the sender of the
//! session's root): their spend, their sessions, their own sender budgets.
//!
//! Owns: the answer's shape (`hermes-meter.agent.v1`). Must not touch:
//! writes, Python (the binding passes the session id in), content of any
//! kind (no prompt, answer or tool argument is read).

use std::path::Path;

use jiff::tz::TimeZone;
use serde_json::{json, Value};

use hermes_meter_model::budget::Scope;
use hermes_meter_store::error::Result;
use hermes_meter_store::{Reader, SpendTotals, Writer, DB_FILE_NAME};

/// The tool's name, as the model calls it.
pub const TOOL_NAME: &str = "meter_spend";

/// The answer's schema name; a change that breaks readers gets a new one.
pub const SCHEMA: &str = "hermes-meter.agent.v1";

/// How far back "recent" reaches.
const RECENT_SECONDS: f64 = 7.0 * 86_400.0;

/// Rows in each recent list.
const TOP: usize = 5;

/// The tool's JSON schema (OpenAI function form): no arguments.
pub fn schema() -> Value {
    json!({
        "name": TOOL_NAME,
        "description": "Read-only spend of this agent from hermes-meter's ledger: this session's and today's \
                        cost and tokens, each budget's limit, what is left and when its window resets, and the \
                        costliest recent sessions and most used tools. Takes no arguments. Use it before \
                        expensive work to stay within budget.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": false},
    })
}

/// The answer for `session_id` (the session calling, when Hermes says),
/// read from the store in `store_dir` at `now`; "today" is the local day
/// in `tz`.
pub fn answer(store_dir: &Path, session_id: Option<&str>, now: f64, tz: &TimeZone) -> Result<Value> {
    let path = store_dir.join(DB_FILE_NAME);
    if !path.exists() {
        // Asked before any hook made the store: a new one, with nothing in it.
        drop(Writer::open_dir(store_dir)?);
    }
    let store = Reader::open(&path)?;
    let session_id = session_id.filter(|s| !s.is_empty());
    let sender = match session_id {
        Some(id) => store.sender_of(id)?,
        None => None,
    };
    let session = match session_id {
        Some(id) => store.session_totals(id)?.map(|t| {
            json!({
                "session_id": id,
                "cost_usd": round(t.cost_usd),
                "llm_calls": t.llm_calls,
                "input_tokens": t.input_tokens + t.cache_read_tokens + t.cache_write_tokens,
                "output_tokens": t.output_tokens,
                "subagents": t.runs - 1,
                "unpriced_llm_calls": t.unpriced_llm_calls,
            })
        }),
        None => None,
    };
    // Local midnight (`now` itself if the zone cannot say).
    let midnight = hermes_meter_model::report::day_bounds(now, tz).map_or(now, |(start, _)| start);
    let today = store.spend_of(midnight, now + 1.0, sender.as_deref())?;
    let (budgets, budget_file_error) = budgets(&store, store_dir, now, sender.as_deref())?;
    let since = now - RECENT_SECONDS;
    let sessions: Vec<Value> = store
        .costliest_sessions(since, sender.as_deref(), TOP)?
        .into_iter()
        .map(|s| {
            json!({
                "session_id": s.session_id,
                "platform": s.platform,
                "started_at": rfc3339(s.started_at),
                "llm_calls": s.llm_calls,
                "cost_usd": round(s.cost_usd),
            })
        })
        .collect();
    let tools: Vec<Value> = store
        .most_used_tools(since, sender.as_deref(), TOP)?
        .into_iter()
        .map(|t| json!({"tool": t.tool, "calls": t.calls, "failures": t.failures, "seconds": round(t.seconds)}))
        .collect();
    Ok(json!({
        "schema": SCHEMA,
        "as_of": rfc3339(now),
        "scope": if sender.is_some() { "this user" } else { "everyone on this store" },
        "session": session,
        "today": spend(&today, midnight),
        "budgets": budgets,
        "budget_file_error": budget_file_error,
        "recent": {"since": rfc3339(since), "costliest_sessions": sessions, "most_used_tools": tools},
    }))
}

/// Each budget of the file in `store_dir` as JSON: scope, limit, used,
/// left, level and when its window resets (a rolling window: when it is
/// back under its line if exhausted, else when its oldest spend leaves,
/// and what that frees); with `sender`, other gateway
/// users' own budgets left out. The file's error instead, when it does not
/// parse.
pub fn budgets(
    store: &Reader,
    store_dir: &Path,
    now: f64,
    sender: Option<&str>,
) -> Result<(Vec<Value>, Option<String>)> {
    let cfg = match crate::config::load_budgets(&store_dir.join(hermes_meter_model::budget::BUDGETS_FILE_NAME)) {
        Ok(cfg) => cfg,
        Err(e) => return Ok((Vec::new(), Some(e.to_string()))),
    };
    if cfg.is_empty() {
        return Ok((Vec::new(), None));
    }
    let lines = store
        .budget_states(&cfg, now)?
        .into_iter()
        // Another gateway user's own budget is theirs to know.
        .filter(|s| s.budget.scope != Scope::Sender || sender.is_none() || sender == Some(s.budget.id.as_str()))
        .map(|s| {
            let used = s.spend.total();
            json!({
                "scope": s.budget.scope.as_str(),
                "id": s.budget.id,
                "limit": s.budget.key(),
                "unit": s.budget.unit.as_str(),
                "amount": round(s.budget.limit),
                "used": round(used),
                "left": round((s.budget.limit - used).max(0.0)),
                "level": s.level.as_str(),
                "resets_at": rfc3339(s.window_end as f64),
                // A rolling window (5h, 7d) frees its oldest spend first.
                "rolling": s.budget.window.rolling().is_some(),
                "frees": s.frees.map(|f| json!({"amount": round(f.amount), "at": rfc3339(f.at as f64)})),
            })
        })
        .collect();
    Ok((lines, None))
}

fn spend(t: &SpendTotals, since: f64) -> Value {
    json!({
        "since": rfc3339(since),
        "cost_usd": round(t.cost_usd),
        "llm_calls": t.llm_calls,
        "input_tokens": t.input_tokens + t.cache_read_tokens + t.cache_write_tokens,
        "output_tokens": t.output_tokens,
        "sessions": t.sessions,
    })
}

/// Six decimals: cents of a cent, and stable JSON.
fn round(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

/// Unix seconds as RFC 3339 (UTC).
fn rfc3339(at: f64) -> String {
    hermes_meter_model::budget::timestamp(at).to_string()
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;

    use super::*;

    #[test]
    fn the_schema_takes_no_arguments_and_names_the_tool() {
        let s = schema();
        assert_eq!(s["name"], TOOL_NAME);
        assert_eq!(s["parameters"]["properties"], json!({}));
    }

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures")
            .join(format!("{name}.jsonl"))
    }

    /// A store with three sessions: multi_turn's of gateway user u1,
    /// failonce's of u2, delegate_sync's (with its subagent) of no one.
    fn store() -> (tempfile::TempDir, f64) {
        let dir = tempfile::tempdir().expect("dir");
        let mut store = Writer::open_dir(dir.path()).expect("store");
        let mut prices = hermes_meter_model::pricing::PriceTable::default();
        prices
            .add_user_prices(
                "[models.\"mock-model\"]\ninput = 3.0\noutput = 15.0\n",
                Path::new("p.toml"),
            )
            .expect("prices");
        store.set_prices(prices);
        let mut stats = hermes_meter_store::replay::ReplayStats::default();
        for name in ["multi_turn", "failonce", "delegate_sync"] {
            hermes_meter_store::replay::replay_file(&mut store, &fixture(name), Default::default(), &mut stats)
                .expect("replay");
        }
        drop(store);
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).expect("open");
        conn.execute_batch(
            "UPDATE runs SET sender_id = 'u1' WHERE session_id = '20261130_013856_a599de';
             UPDATE runs SET sender_id = 'u2' WHERE session_id = '20261130_013817_88dc56';",
        )
        .expect("senders");
        let last: f64 = conn
            .query_row("SELECT MAX(ended_at) FROM llm_calls", [], |r| r.get(0))
            .expect("last");
        std::fs::write(
            dir.path().join(hermes_meter_model::budget::BUDGETS_FILE_NAME),
            "[global]\ndaily = 1.0\n[per_sender.overrides.u1]\ndaily = 0.7\n[per_sender.overrides.u2]\ndaily = 0.5\n",
        )
        .expect("budgets");
        (dir, last + 60.0)
    }

    #[test]
    fn a_gateway_user_is_answered_with_their_own_spend_sessions_and_budgets_only() {
        let (dir, now) = store();
        let reader = Reader::open(&dir.path().join(DB_FILE_NAME)).expect("reader");
        let mine = reader
            .session_totals("20261130_013856_a599de")
            .expect("totals")
            .expect("known");
        let everyone = answer(dir.path(), Some("20261130_013759_e4a976"), now, &TimeZone::UTC).expect("answer");
        let v = answer(dir.path(), Some("20261130_013856_a599de"), now, &TimeZone::UTC).expect("answer");
        assert_eq!(v["scope"], "this user");
        assert_eq!(v["session"]["llm_calls"], mine.llm_calls);
        assert!(
            (v["session"]["cost_usd"].as_f64().unwrap() - mine.cost_usd).abs() < 1e-6,
            "{v}"
        );
        // Today is that user's spend alone.
        assert!(
            (v["today"]["cost_usd"].as_f64().unwrap() - mine.cost_usd).abs() < 1e-6,
            "{v}"
        );
        let listed: Vec<&str> = v["recent"]["costliest_sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["session_id"].as_str().unwrap())
            .collect();
        assert_eq!(listed, ["20261130_013856_a599de"]);
        let budgets: Vec<(&str, &str)> = v["budgets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| (b["scope"].as_str().unwrap(), b["id"].as_str().unwrap()))
            .collect();
        assert!(
            budgets.contains(&("global", "")) && budgets.contains(&("sender", "u1")),
            "{v}"
        );
        assert!(!budgets.contains(&("sender", "u2")), "another user's budget: {v}");

        // A session of no gateway user is answered for the whole store.
        assert_eq!(everyone["scope"], "everyone on this store");
        let all = reader.spend_between(0.0, now + 1.0).expect("spend");
        assert!((everyone["today"]["cost_usd"].as_f64().unwrap() - all.cost_usd).abs() < 1e-6);
        assert_eq!(everyone["today"]["llm_calls"], all.llm_calls);
        assert_eq!(everyone["session"]["subagents"], 1);
        assert_eq!(
            everyone["recent"]["costliest_sessions"].as_array().unwrap().len(),
            3,
            "{everyone}"
        );
        let tools = everyone["recent"]["most_used_tools"].as_array().unwrap();
        assert!(tools.iter().any(|t| t["tool"] == "delegate_task"), "{everyone}");
        let global = &everyone["budgets"][0];
        assert_eq!(
            (global["scope"].as_str(), global["limit"].as_str()),
            (Some("global"), Some("daily"))
        );
        assert!(
            (global["used"].as_f64().unwrap() - all.cost_usd).abs() < 1e-6,
            "{everyone}"
        );
        // The day's window frees up within the next day.
        let resets: Timestamp = global["resets_at"].as_str().unwrap().parse().expect("a time");
        let resets = resets.as_second() as f64;
        assert!(resets > now && resets <= now + 86_400.0, "{everyone}");
    }

    #[test]
    fn an_empty_store_answers_with_zeros_and_no_session() {
        let dir = tempfile::tempdir().expect("dir");
        let v = answer(dir.path(), Some("nope"), 1_800_000_000.0, &TimeZone::UTC).expect("answer");
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["session"], Value::Null);
        assert_eq!(v["today"]["llm_calls"], 0);
        assert_eq!(v["today"]["since"], "2027-01-15T00:00:00Z");
        assert_eq!(v["budgets"], json!([]));
    }
}
