//! `hermes-meter trace`: the recorded fixtures replayed into a store through
//! the real binary, and the tree it prints held to exact nesting and
//! numbers, and to the spans the exporter sends for the same store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use hermes_meter_model::span::hex;
use hermes_meter_runtime::export::{ExportConfig, ExportOverrides, Exporter};
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
const BIN: &str = env!("CARGO_BIN_EXE_hermes-meter");

fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(format!("{name}.jsonl"))
}

/// Runs the binary on store `home` with a clean environment for colour and
/// trace settings.
fn cli(home: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("NO_COLOR")
        .env_remove("HERMES_METER_TRACE_MODE")
        .output()
        .expect("run hermes-meter")
}

fn replayed(names: &[&str]) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("temp dir");
    let files: Vec<String> = names.iter().map(|n| fixture(n).display().to_string()).collect();
    let mut args = vec!["replay"];
    args.extend(files.iter().map(String::as_str));
    let out = cli(home.path(), &args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    home
}

fn trace_json(home: &Path, id: &str) -> Value {
    let out = cli(home, &["trace", id, "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("trace --json is JSON")
}

/// The first session id a fixture's first line names.
fn session_of(name: &str) -> String {
    let text = std::fs::read_to_string(fixture(name)).expect("fixture");
    let first: Value = serde_json::from_str(text.lines().next().expect("a line")).expect("json");
    first["kwargs"]["session_id"].as_str().expect("session id").to_string()
}

/// `name|status|input|output` per node, indented two spaces per level.
fn outline(node: &Value, depth: usize, out: &mut Vec<String>) {
    let num = |k: &str| node[k].as_i64().map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    let mut name = node["name"].as_str().expect("name").to_string();
    if let Some(a) = node["attempt"].as_i64().filter(|a| *a > 0) {
        name.push_str(&format!(" #{a}"));
    }
    out.push(format!(
        "{}{name}|{}|{}|{}",
        "  ".repeat(depth),
        node["status"].as_str().expect("status"),
        num("input_tokens"),
        num("output_tokens")
    ));
    for c in node["children"].as_array().expect("children") {
        outline(c, depth + 1, out);
    }
}

#[test]
fn a_synchronous_subagent_hangs_under_the_delegate_task_call_that_started_it() {
    let home = replayed(&["delegate_sync"]);
    let t = trace_json(home.path(), &session_of("delegate_sync"));
    let mut lines = Vec::new();
    outline(&t["root"], 0, &mut lines);
    assert_eq!(
        lines,
        [
            "hermes.session|ok|2060|66",
            "  invoke_agent hermes|ok|2060|66",
            "    chat mock-model|ok|1020|24",
            "    execute_tool delegate_task|ok|-|-",
            "      hermes.session|ok|1020|42",
            "        invoke_agent hermes|ok|1020|42",
            "          chat mock-model|ok|1020|42",
            "    chat mock-model|ok|1040|42",
        ]
    );
    let sub = &t["root"]["children"][0]["children"][1]["children"][0];
    assert_eq!(sub["detail"], "subagent (leaf)");
    assert_eq!(sub["session_id"], "20261130_013800_5b8baf");
    assert_eq!(t["spans"], 8);
    // Durations are the spans' own: the delegate call outlasts its subagent.
    let tool_ms = t["root"]["children"][0]["children"][1]["duration_ms"]
        .as_f64()
        .expect("ms");
    let sub_ms = sub["duration_ms"].as_f64().expect("ms");
    assert!(tool_ms > sub_ms && sub_ms > 0.0, "{tool_ms} {sub_ms}");
}

#[test]
fn a_retried_call_shows_each_attempt_and_why_the_first_failed() {
    let home = replayed(&["failonce"]);
    let t = trace_json(home.path(), &session_of("failonce"));
    let mut lines = Vec::new();
    outline(&t["root"], 0, &mut lines);
    assert_eq!(
        lines,
        [
            "hermes.session|ok|1020|42",
            "  invoke_agent hermes|ok|1020|42",
            "    chat mock-model|error|-|-",
            "    chat mock-model #1|ok|1020|42",
        ]
    );
    let failed = &t["root"]["children"][0]["children"][0];
    assert_eq!(failed["error"], "InternalServerError");
    assert_eq!(failed["detail"], "HTTP 500, server_error, retryable");
    let errors = t["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["status_code"], 500);
    // Hermes's error message is content: kept only when capture is on.
    assert_eq!(errors[0]["message"], Value::Null);
    assert_eq!(t["content"], serde_json::json!({}));

    let home = tempfile::tempdir().expect("temp dir");
    let out = cli(
        home.path(),
        &[
            "replay",
            "--capture-content",
            &fixture("failonce").display().to_string(),
        ],
    );
    assert!(out.status.success());
    let t = trace_json(home.path(), &session_of("failonce"));
    let message = t["errors"][0]["message"].as_str().expect("captured message");
    assert!(
        message.contains("500") || message.to_lowercase().contains("error"),
        "{message}"
    );
    let ok_id = t["root"]["children"][0]["children"][1]["span_id"].as_str().expect("id");
    let content = t["content"][ok_id]
        .as_array()
        .expect("the successful attempt's content");
    assert!(content.iter().any(|c| c[0] == "gen_ai.output.messages"), "{content:?}");
}

#[test]
fn cache_tokens_count_as_input() {
    let home = replayed(&["bigcache"]);
    let t = trace_json(home.path(), &session_of("bigcache"));
    let chat = &t["root"]["children"][0]["children"][0];
    assert_eq!(chat["kind"], "chat");
    let cached = chat["cache_read_tokens"].as_i64().expect("cache read");
    assert!(cached > 0, "the fixture reads from the cache");
    // Hermes's input_tokens excludes the cache; the tree's includes it.
    let db = rusqlite::Connection::open(home.path().join("hermes-meter.db")).expect("db");
    let (input, read, write): (i64, i64, i64) = db
        .query_row(
            "SELECT input_tokens, cache_read_tokens, cache_write_tokens FROM llm_calls WHERE api_request_id = ?1",
            [chat["key"].as_str().expect("key")],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("row");
    assert_eq!(chat["input_tokens"].as_i64(), Some(input + read + write));
    assert_eq!(read, cached);
}

#[test]
fn the_plain_tree_when_piped_has_no_colours_and_one_line_a_span() {
    let home = replayed(&["delegate_sync"]);
    let out = cli(home.path(), &["trace", &session_of("delegate_sync")]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(!text.contains('\x1b'), "no escape codes when piped: {text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 9, "{text}");
    assert!(lines[0].starts_with("hermes.session 20261130_013759_e4a976 "), "{text}");
    assert!(
        lines[4].starts_with("   │  └─ hermes.session 20261130_013800_5b8baf [subagent (leaf)]"),
        "{text}"
    );
    assert!(
        lines[2].contains("1,020 → 24") && lines[2].trim_end().ends_with("ok"),
        "{text}"
    );
    assert_eq!(lines[8], "8 spans; tokens are input (incl. cache) → output");
}

#[test]
fn an_unknown_session_gets_one_line_and_a_failing_exit() {
    let home = replayed(&["failonce"]);
    let out = cli(home.path(), &["trace", "no-such-session"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).expect("utf-8");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no session \"no-such-session\""), "{err}");

    let empty = tempfile::tempdir().expect("temp dir");
    let out = cli(empty.path(), &["trace", "--last"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no sessions recorded yet"));
}

#[test]
fn last_is_the_newest_session_that_is_not_a_subagent() {
    // delegate_bg's subagent starts after its parent: the newest session,
    // but not a root.
    let home = replayed(&["delegate_bg"]);
    let t = trace_json(home.path(), "--last");
    assert_eq!(t["session_id"].as_str(), Some(session_of("delegate_bg").as_str()));
}

/// Every span the tree shows is a span the exporter sends for the same
/// store, with the same id, parent, name and times, and the other way round.
#[test]
fn the_tree_is_exactly_the_exported_spans() {
    let names = [
        "delegate_sync",
        "delegate_bg",
        "delegate_bg_orphan",
        "failonce",
        "failalways",
        "model404",
        "multi_turn",
        "parallel",
        "cron",
        "terminal_fail",
        "tool_error",
        "nousage",
        "readfile",
        "bigcache",
    ];
    let home = replayed(&names);
    let roots = trees_match_the_export(home.path());
    assert!(roots >= names.len() - 1, "{roots}");
}

/// Exports every finished span of the store at `home` to a loopback OTLP
/// receiver and checks that the trees of all root sessions show exactly
/// those spans (id, parent, name, times). Returns how many roots it checked.
fn trees_match_the_export(home: &Path) -> usize {
    let receiver = hermes_meter_test_support::grpc(None, None);
    let endpoint = receiver.grpc_endpoint();
    let map: std::collections::HashMap<String, String> = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str())]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let config = ExportConfig::resolve(ExportOverrides::default(), move |k| map.get(k).cloned());
    let mut exporter = Exporter::new(config, &home.join("hermes-meter.db")).expect("exporter");
    let sent = exporter
        .export_history(0.0, Instant::now() + Duration::from_secs(30))
        .expect("export history");
    assert!(sent > 0);
    let exported: BTreeMap<String, (String, String, u64, u64)> = receiver
        .received
        .spans()
        .iter()
        .map(|s| {
            (
                hex(&s.span_id),
                (
                    hex(&s.parent_span_id),
                    s.name.clone(),
                    s.start_time_unix_nano,
                    s.end_time_unix_nano,
                ),
            )
        })
        .collect();

    // Every root session's tree (subagents come inside their parents').
    let db = rusqlite::Connection::open(home.join("hermes-meter.db")).expect("db");
    let roots: Vec<String> = db
        .prepare("SELECT session_id FROM runs WHERE parent_session_id IS NULL")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("roots");
    let mut shown = BTreeMap::new();
    let checked = roots.len();
    for id in roots {
        let t = trace_json(home, &id);
        let mut stack = vec![t["root"].clone()];
        while let Some(n) = stack.pop() {
            let nanos = |k: &str| (n[k].as_f64().expect("time") * 1e9).round() as u64;
            shown.insert(
                n["span_id"].as_str().expect("id").to_string(),
                (
                    n["parent_span_id"].as_str().unwrap_or("").to_string(),
                    n["name"].as_str().expect("name").to_string(),
                    nanos("start"),
                    nanos("end"),
                ),
            );
            stack.extend(n["children"].as_array().expect("children").iter().cloned());
        }
    }
    assert_eq!(shown.len(), exported.len(), "as many spans shown as exported");
    for (id, (parent, name, start, end)) in &exported {
        let (p, n, s, e) = shown
            .get(id)
            .unwrap_or_else(|| panic!("exported span {name} {id} not in any tree"));
        assert_eq!((p, n), (parent, name), "span {id}");
        // Times go through f64 seconds in the JSON: within a microsecond.
        assert!(
            s.abs_diff(*start) < 1_000 && e.abs_diff(*end) < 1_000,
            "{name}: {s} {start} {e} {end}"
        );
    }
    checked
}

/// Runs `trace` on a pseudo-terminal (util-linux `script`), as a person does.
fn on_a_terminal(home: &Path, id: &str, no_color: bool) -> String {
    let cmd = format!("{BIN} --home '{}' trace {id}", home.display());
    let mut c = Command::new("script");
    c.args(["-qec", &cmd, "/dev/null"]).env_remove("NO_COLOR");
    if no_color {
        c.env("NO_COLOR", "1");
    }
    let out = c.output().expect("script (util-linux) runs the command on a pty");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn a_terminal_gets_colours_unless_no_color_is_set() {
    let home = replayed(&["failonce"]);
    let id = session_of("failonce");
    let coloured = on_a_terminal(home.path(), &id, false);
    assert!(
        coloured.contains("\x1b[31merror InternalServerError\x1b[0m"),
        "{coloured:?}"
    );
    assert!(coloured.contains("\x1b[32mok\x1b[0m"), "{coloured:?}");
    let plain = on_a_terminal(home.path(), &id, true);
    assert!(!plain.contains('\x1b'), "{plain:?}");
    assert!(plain.contains("error InternalServerError"));
}

#[test]
fn an_approval_hangs_under_the_tool_call_it_gated_with_the_decision() {
    // terminal_ok with a human's approval of its terminal call, shaped as
    // Hermes 0.19.0's tools/approval.py fires the two hooks.
    let text = std::fs::read_to_string(fixture("terminal_ok")).expect("fixture");
    let mut lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let at = lines
        .iter()
        .position(|r| r["hook"] == "pre_tool_call")
        .expect("a tool call");
    let tool = lines[at].clone();
    let t = tool["t"].as_f64().expect("t");
    let approval = |hook: &str, dt: f64, choice: Option<&str>| {
        let mut kw = serde_json::json!({"command": "rm -rf build/", "pattern_key": "rm_recursive",
            "session_key": "cli", "surface": "cli", "turn_id": tool["kwargs"]["turn_id"],
            "tool_call_id": tool["kwargs"]["tool_call_id"]});
        if let Some(c) = choice {
            kw["choice"] = c.into();
        }
        serde_json::json!({"hook": hook, "t": t + dt, "pid": tool["pid"], "thread": tool["thread"], "seq": 0,
            "kwargs": kw})
    };
    lines.insert(at + 1, approval("pre_approval_request", 0.01, None));
    lines.insert(at + 2, approval("post_approval_response", 0.2, Some("once")));
    let home = tempfile::tempdir().expect("temp dir");
    let file = home.path().join("approval.jsonl");
    let body: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&file, body.join("\n")).expect("write");
    let out = cli(home.path(), &["replay", &file.display().to_string()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let t = trace_json(home.path(), &session_of("terminal_ok"));
    let mut stack = vec![&t["root"]];
    let mut found = None;
    while let Some(n) = stack.pop() {
        if n["name"] == "execute_tool terminal" {
            found = Some(n);
        }
        stack.extend(n["children"].as_array().expect("children"));
    }
    let tool = found.expect("the terminal call");
    let ap = &tool["children"][0];
    assert_eq!(ap["kind"], "approval");
    assert_eq!(ap["name"], "hermes.approval");
    assert_eq!(ap["status"], "approve");
    assert_eq!(ap["detail"], "choice once, on cli");
    assert_eq!(ap["parent_span_id"], tool["span_id"]);
    let waited = ap["duration_ms"].as_f64().expect("ms");
    assert!((waited - 190.0).abs() < 5.0, "the wait: {waited}");
    trees_match_the_export(home.path());
}
