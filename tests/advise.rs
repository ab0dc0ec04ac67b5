//! `hermes-meter advise` on a store of recorded sessions, changed the way a
//! costly fleet would run them: the findings it names, their figures, the
//! sessions behind them, and nothing on a store with nothing to advise.

use std::path::Path;

use hermes_meter_test_support::cli::cli;
use hermes_meter_test_support::stream::session_copy;
use serde_json::Value;

fn readfile() -> Vec<String> {
    std::fs::read_to_string(hermes_meter_test_support::repository().join("tests/fixtures/readfile.jsonl"))
        .expect("fixture")
        .lines()
        .map(str::to_string)
        .collect()
}

/// Copy `n` of the readfile session on `model`, its two calls with `input`
/// prompt tokens (none read from the cache), `tools` read_file calls in a
/// row in its turn, moved to a day ago.
pub(crate) fn session(n: usize, model: &str, input: (i64, i64), tools: usize) -> String {
    let lines = readfile();
    let first: f64 = serde_json::from_str::<Value>(&lines[0]).expect("json")["t"]
        .as_f64()
        .expect("t");
    let shift = hermes_meter_store::unix_now() - 86_400.0 - first + n as f64 * 60.0;
    let mut out = String::new();
    let mut calls = 0;
    for line in session_copy(&lines, n, shift).lines() {
        let mut r: Value = serde_json::from_str(&line.replace("mock-model", model)).expect("json");
        if r["hook"] == "post_api_request" {
            calls += 1;
            r["kwargs"]["usage"]["input_tokens"] = (if calls == 1 { input.0 } else { input.1 }).into();
            r["kwargs"]["usage"]["cache_read_tokens"] = 0.into();
        }
        let repeat = if r["hook"] == "pre_tool_call" || r["hook"] == "post_tool_call" {
            tools
        } else {
            1
        };
        for i in 0..repeat {
            let mut copy = r.clone();
            if repeat > 1 {
                let id = format!("call_streak_{i}");
                copy["kwargs"]["tool_call_id"] = id.into();
                copy["t"] = (r["t"].as_f64().expect("t") + i as f64 * 0.001).into();
            }
            out.push_str(&copy.to_string());
            out.push('\n');
        }
    }
    out
}

fn advise(home: &Path) -> Value {
    let (code, out, err) = cli(home, &["advise", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("JSON")
}

#[test]
fn advise_names_uncached_context_a_near_runaway_streak_and_a_dearer_model_with_their_sessions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    std::fs::write(
        home.join("pricing.toml"),
        "[models.\"dear-model\"]\ninput = 3.0\noutput = 15.0\ncache_read = 0.3\n\
         [models.\"cheap-model\"]\ninput = 0.1\noutput = 0.4\ncache_read = 0.01\n",
    )
    .expect("pricing");
    // Three cli sessions on the dear model re-sending 40k tokens uncached
    // (one of them running read_file 7 times in a row), three on the cheap.
    let mut stream = String::new();
    for n in 0..3 {
        stream.push_str(&session(n, "dear-model", (40_000, 40_000), if n == 0 { 7 } else { 1 }));
        stream.push_str(&session(10 + n, "cheap-model", (40_000, 40_000), 1));
    }
    let file = home.join("stream.jsonl");
    std::fs::write(&file, stream).expect("write");
    let (code, _, err) = cli(home, &["replay", file.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{err}");
    let a = advise(home);
    assert_eq!(a["schema"], "hermes-meter.advice.v1");
    assert_eq!(a["llm_calls"], 12);
    let findings = a["findings"].as_array().expect("findings");
    let kinds: Vec<&str> = findings.iter().filter_map(|f| f["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"uncached_context") && kinds.contains(&"near_runaway") && kinds.contains(&"dearer_model"),
        "{a}"
    );
    let savings: Vec<f64> = findings
        .iter()
        .map(|f| f["savings_usd"].as_f64().expect("usd"))
        .collect();
    assert!(savings.windows(2).all(|w| w[0] >= w[1]), "largest first: {savings:?}");
    // The dear model's re-sent context: each session's second call held the
    // first's 40k tokens again, none from the cache: 3 x 40k at $3 - $0.30.
    let uncached = findings
        .iter()
        .find(|f| f["kind"] == "uncached_context" && f["evidence"]["model"] == "dear-model")
        .expect("dear-model's uncached context");
    assert_eq!(uncached["evidence"]["repeated_uncached_tokens"], 120_000);
    assert!(
        (uncached["savings_usd"].as_f64().expect("usd") - 120_000.0 * 2.7 / 1e6).abs() < 1e-9,
        "{uncached}"
    );
    assert_eq!(uncached["sessions"].as_array().expect("sessions").len(), 3);
    // The streak of 7 read_file calls: one turn, its session named.
    let streak = findings.iter().find(|f| f["kind"] == "near_runaway").expect("streak");
    assert_eq!(streak["evidence"]["turns"], 1);
    assert_eq!(streak["evidence"]["tool_calls_in_streaks"], 7);
    assert_eq!(streak["sessions"].as_array().expect("sessions").len(), 1);
    // The dear model against the cheap one the same kind of session used.
    let dearer = findings.iter().find(|f| f["kind"] == "dearer_model").expect("dearer");
    assert_eq!(
        (
            dearer["evidence"]["model"].as_str(),
            dearer["evidence"]["cheaper_model"].as_str()
        ),
        (Some("dear-model"), Some("cheap-model"))
    );
    assert!(dearer["savings_usd"].as_f64().expect("usd") > 0.0);
    // The text names each, with its sessions.
    let (_, text, _) = cli(home, &["advise"]);
    assert!(text.contains("about $") && text.contains("sessions: "), "{text}");
    // The viewer's advice page shows the same findings, in the same order,
    // each session a link; a window asked for past 90 days is 90 days.
    let viewer = hermes_meter_test_support::viewer::start(home, None, None);
    let page = hermes_meter_test_support::http_get::get(viewer.addr(), "/advice?days=100000", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("the last 90 days: 12 LLM calls"), "{}", page.body);
    let shown: Vec<&str> = page
        .body
        .split("data-kind=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert_eq!(shown, kinds, "{}", page.body);
    let first = findings[0]["sessions"][0].as_str().expect("a session");
    assert!(
        page.body.contains(&format!("/session/{first}\">{first}</a>")),
        "{}",
        page.body
    );
    // The what-if: the days' calls at another model's prices, as `report
    // --price-as` says it; an unknown or hostile model is said, escaped.
    let (code, report, err) = cli(
        home,
        &["report", "--price-as", "cheap-model", "--since", "90d", "--json"],
    );
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&report).expect("JSON");
    let page = hermes_meter_test_support::http_get::get(viewer.addr(), "/advice?days=90&price_as=cheap-model", &[]);
    let at = report["price_as"]["totals"]["at_price_usd"].as_f64().expect("usd");
    assert!(
        page.body
            .contains(&format!("at cheap-model's prices <strong>${at:.4}</strong>")),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("tokenizer counts the same text"),
        "the caveats are shown"
    );
    let page = hermes_meter_test_support::http_get::get(viewer.addr(), "/advice?price_as=%3Cscript%3Ex", &[]);
    assert!(
        page.body.contains("id=\"what-if-error\"") && !page.body.contains("<script>x"),
        "{}",
        page.body
    );
}

#[test]
fn a_store_with_nothing_to_advise_says_so_and_a_bad_window_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    let file = home.join("one.jsonl");
    std::fs::write(&file, session(0, "mock-model", (100, 100), 1)).expect("write");
    assert_eq!(cli(home, &["replay", file.to_str().expect("utf-8")]).0, 0);
    assert!(advise(home)["findings"].as_array().expect("findings").is_empty());
    let (_, text, _) = cli(home, &["advise"]);
    assert!(
        text.contains("nothing the ledger shows could have cost clearly less"),
        "{text}"
    );
    let (code, _, err) = cli(home, &["advise", "--since", "1d", "--until", "2d"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("window is empty") && err.lines().count() == 1, "{err}");
}

#[test]
fn a_tool_whose_results_fill_the_prompt_is_named_with_what_they_cost_as_context() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    std::fs::write(
        home.join("pricing.toml"),
        "[models.\"dear-model\"]\ninput = 3.0\noutput = 15.0\n",
    )
    .expect("pricing");
    // read_file's result grows the next prompt from 5k to 35k tokens.
    let stream: String = (0..2).map(|n| session(n, "dear-model", (5_000, 35_000), 1)).collect();
    let file = home.join("stream.jsonl");
    std::fs::write(&file, stream).expect("write");
    assert_eq!(cli(home, &["replay", file.to_str().expect("utf-8")]).0, 0);
    let a = advise(home);
    let tool = a["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["kind"] == "tool_output")
        .unwrap_or_else(|| panic!("no tool_output finding: {a}"));
    assert_eq!(tool["evidence"]["tool"], "read_file");
    assert_eq!(tool["evidence"]["results"], 2);
    assert_eq!(tool["evidence"]["tokens_added_per_result"], 30_000.0);
    // 2 x 30k of 2 x 40k prompt tokens; at $3 a million input.
    assert_eq!(tool["evidence"]["share_of_prompt_tokens"], 0.75);
    assert!(
        (tool["savings_usd"].as_f64().expect("usd") - 60_000.0 * 3.0 / 1e6).abs() < 1e-9,
        "{tool}"
    );
    assert_eq!(tool["sessions"].as_array().expect("sessions").len(), 2);
}
