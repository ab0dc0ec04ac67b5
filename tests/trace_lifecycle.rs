//! Traces whole with the defaults, however Hermes runs: the
//! recorded Hermes streams are fed through the hook path of a bridge with
//! the plugin's defaults (the 120 s session grace, the 2 s exit flush), as
//! live events (their times moved to now), to an in-process OTLP receiver.
//! Each test ends its "process" the way the plugin does at exit
//! ([`Bridge::flush_at_exit`], then the export flush), and checks what
//! arrived by then: every span, one root per trace, no orphan, no span id
//! twice.
//!
//! The receiver is shared by the tests of this binary (the export thread
//! reads `OTEL_EXPORTER_OTLP_ENDPOINT` once it starts); each test looks only
//! at the traces of its own sessions.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use hermes_meter_model::hook::{self, decode, DecodeOptions, Decoded, HOOK_NAMES};
use hermes_meter_model::hook::{parse_line, Record};
use hermes_meter_runtime::bridge::{Bridge, BridgeConfig};
use hermes_meter_runtime::export::{ExportConfig, ExportOverrides, MetricsConfig};
use hermes_meter_store::EventContext;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;

fn receiver() -> &'static hermes_meter_test_support::Receiver {
    static RECEIVER: OnceLock<hermes_meter_test_support::Receiver> = OnceLock::new();
    RECEIVER.get_or_init(|| {
        let r = hermes_meter_test_support::grpc(None, None);
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", r.grpc_endpoint());
        std::env::remove_var("HERMES_METER_SESSION_GRACE_SECONDS");
        std::env::set_var("OTEL_METRICS_EXPORTER", "none");
        r
    })
}

/// A fixture's records in the order Hermes made them.
fn records(name: &str) -> Vec<Record> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
    let mut out: Vec<Record> = std::fs::read_to_string(path)
        .expect("fixture")
        .lines()
        .filter_map(|l| parse_line(l, false).ok().flatten())
        .filter(|r| HOOK_NAMES.contains(&r.hook.as_str()))
        .collect();
    out.sort_by(|a, b| {
        (a.t.unwrap_or(0.0), a.seq.unwrap_or(0))
            .partial_cmp(&(b.t.unwrap_or(0.0), b.seq.unwrap_or(0)))
            .expect("times are numbers")
    });
    out
}

/// A plugin process: a bridge over `dir` with the defaults, the export
/// settings of the environment [`receiver`] set, and the export thread the
/// plugin starts.
fn process(dir: &Path) -> Bridge {
    receiver();
    let mut config = BridgeConfig::new(dir.to_path_buf());
    config.export = ExportConfig::from_env(ExportOverrides::default());
    config.metrics = MetricsConfig::from_env(ExportOverrides::default());
    config.logs = ExportConfig::resolve_logs(ExportOverrides::default(), hermes_meter_runtime::config::process_var);
    let bridge = Bridge::start(config);
    bridge.set_exporter_factory(Box::new(hermes_meter_runtime::export_task::factory));
    assert!(bridge.start_exporter(), "the export thread starts");
    bridge
}

/// Feeds `records` as hook calls happening now (shifted by `shift` seconds).
fn feed(bridge: &Bridge, records: &[Record], shift: f64) {
    for rec in records {
        let at = rec.t.expect("t") + shift;
        let Decoded::Event(event, problems) = decode(&rec.hook, &rec.kwargs, at, DecodeOptions::default()) else {
            continue;
        };
        let line = hook::write_record(&rec.hook, at, rec.pid, rec.thread.as_deref(), &rec.kwargs, false);
        let ctx = EventContext {
            pid: rec.pid,
            thread: rec.thread.clone(),
            profile: None,
            problems,
        };
        bridge.submit_recorded(event, ctx, Some(&line));
    }
}

/// The plugin's exit: commit, release held session spans, send, within
/// the default 2 s.
fn exit(bridge: Bridge) {
    let deadline = Instant::now() + Duration::from_secs(2);
    assert!(bridge.flush_at_exit(Duration::from_secs(2)), "the exit flush committed");
    assert!(
        bridge.flush_exporter(deadline),
        "the exit flush sent what was ready within 2 s"
    );
    drop(bridge);
}

/// The spans received so far whose trace holds a span of `session`.
fn spans_of(session: &str) -> Vec<Span> {
    let all = receiver().received.spans();
    let traces: HashSet<Vec<u8>> = all
        .iter()
        .filter(|s| attr(s, "gen_ai.conversation.id").as_deref() == Some(session))
        .map(|s| s.trace_id.clone())
        .collect();
    all.into_iter().filter(|s| traces.contains(&s.trace_id)).collect()
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| {
        kv.value.as_ref().and_then(|v| match v.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            AnyValue::IntValue(i) => Some(i.to_string()),
            AnyValue::BoolValue(b) => Some(b.to_string()),
            AnyValue::DoubleValue(d) => Some(d.to_string()),
            _ => None,
        })
    })
}

/// Every span once, one root per trace, every parent present.
fn assert_whole(spans: &[Span], what: &str) {
    let mut ids = HashSet::new();
    for s in spans {
        assert!(ids.insert(s.span_id.clone()), "{what}: span {} sent twice", s.name);
    }
    let mut roots: HashMap<Vec<u8>, usize> = HashMap::new();
    for s in spans {
        if s.parent_span_id.is_empty() {
            *roots.entry(s.trace_id.clone()).or_default() += 1;
        } else {
            assert!(
                ids.contains(&s.parent_span_id),
                "{what}: the parent of {} never arrived (an orphan)",
                s.name
            );
        }
    }
    let traces: HashSet<&Vec<u8>> = spans.iter().map(|s| &s.trace_id).collect();
    for t in traces {
        assert_eq!(roots.get(t), Some(&1), "{what}: one root per trace");
    }
}

fn names(spans: &[Span]) -> Vec<String> {
    let mut n: Vec<String> = spans.iter().map(|s| s.name.clone()).collect();
    n.sort();
    n
}

fn store_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("meter");
    (dir, path)
}

fn now_shift(records: &[Record]) -> f64 {
    hermes_meter_store::unix_now() - records.last().and_then(|r| r.t).expect("t") - 0.5
}

#[test]
fn a_one_shot_run_sends_its_whole_tree_before_the_process_ends() {
    // hermes -z with a synchronous subagent: Hermes never finalizes it.
    let recs = records("delegate_sync.jsonl");
    let session = recs[0].kwargs["session_id"].as_str().expect("id").to_string();
    let (_tmp, dir) = store_dir();
    let bridge = process(&dir);
    feed(&bridge, &recs, now_shift(&recs));
    exit(bridge);
    let spans = spans_of(&session);
    assert_whole(&spans, "hermes -z");
    assert_eq!(
        names(&spans),
        [
            "chat mock-model",
            "chat mock-model",
            "chat mock-model",
            "execute_tool delegate_task",
            "hermes.session",
            "hermes.session",
            "invoke_agent hermes",
            "invoke_agent hermes",
        ]
    );
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool delegate_task")
        .expect("tool");
    let child = spans
        .iter()
        .find(|s| s.name == "hermes.session" && !s.parent_span_id.is_empty())
        .expect("the subagent's session span");
    assert_eq!(
        child.parent_span_id, tool.span_id,
        "the subagent hangs under delegate_task"
    );
    let turn = spans.iter().find(|s| s.name == "invoke_agent hermes").expect("turn");
    assert_eq!(attr(turn, "openinference.span.kind").as_deref(), Some("AGENT"));
    assert_eq!(attr(turn, "gen_ai.operation.name").as_deref(), Some("invoke_agent"));
    let session = spans.iter().find(|s| s.name == "hermes.session").expect("session");
    assert_eq!(attr(session, "openinference.span.kind").as_deref(), Some("CHAIN"));
    assert_eq!(attr(session, "gen_ai.operation.name"), None);
}

#[test]
fn a_repl_session_over_two_turns_sends_its_session_span_once() {
    let recs = records("multi_turn.jsonl");
    let session = recs[0].kwargs["session_id"].as_str().expect("id").to_string();
    let (_tmp, dir) = store_dir();
    let bridge = process(&dir);
    let shift = now_shift(&recs);
    // The first turn, then a pause long enough for the exporter to look
    // (it polls every 500 ms), then the second turn and /exit.
    let first_end = recs
        .iter()
        .position(|r| r.hook == "on_session_end")
        .expect("turn 1 end");
    feed(&bridge, &recs[..=first_end], shift);
    assert!(bridge.flush(Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(1200));
    feed(&bridge, &recs[first_end + 1..], shift);
    exit(bridge);
    let spans = spans_of(&session);
    assert_whole(&spans, "REPL");
    let sessions: Vec<&Span> = spans.iter().filter(|s| s.name == "hermes.session").collect();
    assert_eq!(sessions.len(), 1, "one session span, sent once");
    let turns: Vec<&Span> = spans.iter().filter(|s| s.name == "invoke_agent hermes").collect();
    assert_eq!(turns.len(), 2);
    assert!(turns.iter().all(|t| t.parent_span_id == sessions[0].span_id));
}

#[test]
fn a_resumed_session_continues_its_trace_without_sending_the_root_again() {
    let recs = records("resume.jsonl");
    let session = recs[0].kwargs["session_id"].as_str().expect("id").to_string();
    let first_pid = recs[0].pid;
    let (first, second): (Vec<Record>, Vec<Record>) = recs.into_iter().partition(|r| r.pid == first_pid);
    let (_tmp, dir) = store_dir();
    // Process 1: chat -q, finalized at its end.
    let shift = hermes_meter_store::unix_now() - second.last().and_then(|r| r.t).expect("t") - 0.5;
    let bridge = process(&dir);
    feed(&bridge, &first, shift);
    exit(bridge);
    let after_first = spans_of(&session);
    assert_whole(&after_first, "first process");
    // Process 2: --resume, no on_session_start.
    let bridge = process(&dir);
    feed(&bridge, &second, shift);
    exit(bridge);
    let spans = spans_of(&session);
    assert_whole(&spans, "resumed");
    let chats = spans.iter().filter(|s| s.name.starts_with("chat ")).count();
    assert_eq!(chats, 3, "every chat span of both processes arrived");
    let sessions: Vec<&Span> = spans.iter().filter(|s| s.name == "hermes.session").collect();
    assert_eq!(sessions.len(), 2, "the root and one continuation: {:?}", names(&spans));
    let root = sessions.iter().find(|s| s.parent_span_id.is_empty()).expect("root");
    let cont = sessions
        .iter()
        .find(|s| !s.parent_span_id.is_empty())
        .expect("continuation");
    assert_eq!(cont.parent_span_id, root.span_id);
    assert_eq!(attr(root, "hermes.session.continuation").as_deref(), Some("0"));
    assert_eq!(attr(cont, "hermes.session.continuation").as_deref(), Some("1"));
    assert_eq!(
        cont.links.first().map(|l| l.span_id.clone()),
        Some(root.span_id.clone())
    );
    // Each stretch reports its own tokens (hermes.usage.*, no GenAI
    // consumer adds them to the chat spans'): together they are the
    // session's.
    let tokens = |s: &Span, key: &str| attr(s, key).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    let chat_tokens: i64 = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .map(|s| tokens(s, "gen_ai.usage.output_tokens"))
        .sum();
    let session = |s: &Span| tokens(s, "hermes.usage.total_output_tokens");
    assert!(chat_tokens > 0);
    assert_eq!(session(root) + session(cont), chat_tokens);
    assert_eq!(
        tokens(root, "gen_ai.usage.output_tokens"),
        0,
        "no GenAI usage on a session span"
    );
    let turns: Vec<&Span> = spans.iter().filter(|s| s.name == "invoke_agent hermes").collect();
    assert_eq!(turns.len(), 2);
    assert!(
        turns.iter().any(|t| t.parent_span_id == cont.span_id),
        "the resumed turn is under the continuation"
    );
}

#[test]
fn a_background_child_cut_off_by_the_exit_is_closed_and_sent() {
    // The child never ends: the process exits under it.
    let recs = records("delegate_bg_orphan.jsonl");
    let session = recs[0].kwargs["session_id"].as_str().expect("id").to_string();
    let (_tmp, dir) = store_dir();
    let bridge = process(&dir);
    feed(&bridge, &recs, now_shift(&recs));
    exit(bridge);
    let spans = spans_of(&session);
    assert_whole(&spans, "orphaned child");
    let child = spans
        .iter()
        .find(|s| s.name == "hermes.session" && !s.parent_span_id.is_empty())
        .expect("the child's session span arrived");
    assert_eq!(attr(child, "hermes.span.close_reason").as_deref(), Some("process_exit"));
    assert!(
        spans
            .iter()
            .any(|s| s.name.starts_with("chat ") && attr(s, "hermes.span.close_reason").is_some()),
        "the child's open attempt was closed and sent"
    );
}

#[test]
fn a_child_that_ends_after_the_exit_flush_closed_it_sends_nothing_twice() {
    // The background child answers while the interpreter shuts down: the
    // exit flush has closed its turn and attempt (process_exit) and sent
    // them when its last hooks arrive from the still-running thread.
    let recs = records("delegate_bg.jsonl");
    let session = recs[0].kwargs["session_id"].as_str().expect("id").to_string();
    let child = recs
        .iter()
        .find(|r| r.hook == "subagent_start")
        .and_then(|r| r.kwargs["child_session_id"].as_str())
        .expect("a child")
        .to_string();
    let late_hooks = ["post_api_request", "post_llm_call", "on_session_end", "subagent_stop"];
    let is_late = |r: &Record| {
        late_hooks.contains(&r.hook.as_str())
            && (r.kwargs.get("session_id").and_then(|v| v.as_str()) == Some(child.as_str())
                || r.kwargs.get("child_session_id").and_then(|v| v.as_str()) == Some(child.as_str()))
    };
    let (late, early): (Vec<Record>, Vec<Record>) = recs.iter().cloned().partition(|r| is_late(r));
    assert_eq!(
        late.len(),
        4,
        "the child's answer, its turn's end and its stop come late"
    );
    let (_tmp, dir) = store_dir();
    let bridge = process(&dir);
    let shift = now_shift(&recs);
    feed(&bridge, &early, shift);
    let deadline = Instant::now() + Duration::from_secs(2);
    assert!(bridge.flush_at_exit(Duration::from_secs(2)), "the exit flush committed");
    assert!(bridge.flush_exporter(deadline), "the exit flush sent what was ready");
    let closed = spans_of(&session);
    assert!(
        closed.iter().any(|s| s.name == "invoke_agent hermes"
            && attr(s, "hermes.span.close_reason").as_deref() == Some("process_exit")),
        "the child's turn went out closed by the exit"
    );
    feed(&bridge, &late, shift);
    assert!(bridge.flush_at_exit(Duration::from_secs(2)));
    assert!(bridge.flush_exporter(Instant::now() + Duration::from_secs(2)));
    drop(bridge);
    assert_whole(&spans_of(&session), "a child ending after the exit flush");
}

/// An approval record shaped as Hermes 0.19.0's `tools/approval.py` fires
/// it (the turn and tool call ids come from its context variables).
fn approval(hook: &str, t: f64, like: &Record, choice: Option<&str>) -> Record {
    let mut kwargs = serde_json::Map::new();
    let k = |v: &str| serde_json::Value::String(v.to_string());
    kwargs.insert("command".into(), k("rm -rf build/"));
    kwargs.insert("description".into(), k("recursive delete"));
    kwargs.insert("pattern_key".into(), k("rm_recursive"));
    kwargs.insert("pattern_keys".into(), serde_json::json!(["rm_recursive"]));
    kwargs.insert("session_key".into(), k("cli"));
    kwargs.insert("surface".into(), k("cli"));
    kwargs.insert("turn_id".into(), like.kwargs["turn_id"].clone());
    kwargs.insert("tool_call_id".into(), like.kwargs["tool_call_id"].clone());
    if let Some(c) = choice {
        kwargs.insert("choice".into(), k(c));
    }
    Record {
        hook: hook.into(),
        kwargs,
        t: Some(t),
        seq: None,
        pid: like.pid,
        thread: like.thread.clone(),
        profile: None,
        capture: None,
    }
}

#[test]
fn the_wait_for_an_approval_is_a_span_under_its_tool_call_with_the_decision() {
    let mut recs = records("terminal_ok.jsonl");
    let session = recs[0].kwargs["session_id"].as_str().expect("id").to_string();
    let at = recs.iter().position(|r| r.hook == "pre_tool_call").expect("tool call");
    let tool = recs[at].clone();
    let t = tool.t.expect("t");
    recs.insert(at + 1, approval("pre_approval_request", t + 0.01, &tool, None));
    recs.insert(at + 2, approval("post_approval_response", t + 0.2, &tool, Some("once")));
    let (_tmp, dir) = store_dir();
    let bridge = process(&dir);
    feed(&bridge, &recs, now_shift(&recs));
    exit(bridge);
    let spans = spans_of(&session);
    assert_whole(&spans, "approval");
    let tool_span = spans
        .iter()
        .find(|s| s.name == "execute_tool terminal")
        .expect("tool span");
    let approval = spans
        .iter()
        .find(|s| s.name == "hermes.approval")
        .expect("approval span");
    assert_eq!(approval.parent_span_id, tool_span.span_id, "under its tool call");
    assert_eq!(attr(approval, "hermes.tool.decision").as_deref(), Some("approve"));
    assert_eq!(attr(approval, "hermes.tool.decision_reason").as_deref(), Some("user"));
    assert_eq!(attr(approval, "hermes.approval.choice").as_deref(), Some("once"));
    assert_eq!(attr(approval, "openinference.span.kind").as_deref(), Some("GUARDRAIL"));
    let waited = (approval.end_time_unix_nano - approval.start_time_unix_nano) as f64 / 1e9;
    assert!((waited - 0.19).abs() < 0.01, "the span is the wait: {waited}");
    assert!(
        spans
            .iter()
            .all(|s| attr(s, "hermes.approval.choice").is_none() || s.name == "hermes.approval"),
        "no other span carries the approval"
    );
    // The decision is also a log record, in the approval's span.
    let records: Vec<_> = receiver()
        .received
        .log_records()
        .into_iter()
        .filter(|r| r.event_name == "hermes.approval")
        .filter(|r| {
            r.attributes.iter().any(|kv| {
                kv.key == "hermes.session.id"
                    && kv.value.as_ref().and_then(|v| v.value.as_ref())
                        == Some(&opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                            session.clone(),
                        ))
            })
        })
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!((&r.trace_id, &r.span_id), (&approval.trace_id, &approval.span_id));
    assert_eq!(r.severity_text, "INFO");
    let body = r.body.as_ref().and_then(|b| b.value.as_ref());
    assert_eq!(
        body,
        Some(&opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
            "Approval of rm_recursive: once".into()
        ))
    );
}

/// Hermes main's `tools/approval.py` (docs/…/hooks.md at
/// 006a5aebb4d134ba188ff60adf1a02f668312b5f): "Notification failure emits
/// `choice="notify_failed"` before any approval decision exists". That is
/// no deny: the answer that follows is the decision, and the approval goes
/// out once, with it. `cancelled` (the turn was interrupted) is its own
/// decision, not a deny.
#[test]
fn a_failed_notification_is_no_decision_and_the_answer_after_it_goes_out_once() {
    for (n, (choices, decision)) in [
        (&["notify_failed", "once"][..], "approve"),
        (&["cancelled"][..], "cancelled"),
    ]
    .into_iter()
    .enumerate()
    {
        // A session of its own (the receiver is shared by every test).
        let fixture = records("terminal_ok.jsonl");
        let original = fixture[0].kwargs["session_id"].as_str().expect("id").to_string();
        let session = format!("{original}-notify-{n}");
        let mut recs: Vec<Record> = fixture
            .into_iter()
            .map(|mut r| {
                let text = serde_json::to_string(&r.kwargs).expect("kwargs");
                r.kwargs = serde_json::from_str(&text.replace(&original, &session)).expect("kwargs");
                r
            })
            .collect();
        let at = recs.iter().position(|r| r.hook == "pre_tool_call").expect("tool call");
        let tool = recs[at].clone();
        let t = tool.t.expect("t");
        recs.insert(at + 1, approval("pre_approval_request", t + 0.01, &tool, None));
        for (i, choice) in choices.iter().enumerate() {
            let when = t + 0.1 * (i + 1) as f64;
            recs.insert(
                at + 2 + i,
                approval("post_approval_response", when, &tool, Some(choice)),
            );
        }
        let (_tmp, dir) = store_dir();
        let bridge = process(&dir);
        feed(&bridge, &recs, now_shift(&recs));
        exit(bridge);
        let spans = spans_of(&session);
        assert_whole(&spans, "approval");
        let approvals: Vec<_> = spans.iter().filter(|s| s.name == "hermes.approval").collect();
        assert_eq!(approvals.len(), 1, "{choices:?}: one approval span");
        assert_eq!(
            attr(approvals[0], "hermes.tool.decision").as_deref(),
            Some(decision),
            "{choices:?}"
        );
        assert_eq!(
            attr(approvals[0], "hermes.approval.choice").as_deref(),
            choices.last().copied(),
            "{choices:?}"
        );
    }
}
