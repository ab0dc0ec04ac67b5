//! Trace export end to end: fixtures replayed into a store, exported over
//! OTLP to in-process receivers on loopback, and what arrived checked.

use hermes_meter_test_support::hermes_main;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_model::span::hex;
use hermes_meter_runtime::export::{ExportConfig, ExportOverrides, Exporter};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// An export config from `pairs` only (the process environment is ignored).
fn config(pairs: &[(&str, &str)]) -> ExportConfig {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    ExportConfig::resolve(ExportOverrides::default(), move |k| map.get(k).cloned())
}

/// Settings every test uses: no grace for sessions, a short idle timeout.
fn base<'a>(endpoint: &'a str, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut v = vec![
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint),
        ("HERMES_METER_SESSION_GRACE_SECONDS", "0"),
        ("HERMES_METER_IDLE_TIMEOUT_SECONDS", "60"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
    ];
    v.extend_from_slice(extra);
    v
}

fn replay(store: &mut Writer, files: &[PathBuf]) {
    let mut stats = ReplayStats::default();
    for f in files {
        replay_file(store, f, DecodeOptions::default(), &mut stats).expect("replay");
    }
    assert!(stats.bad_lines.is_empty(), "{:?}", stats.bad_lines);
}

fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(format!("{name}.jsonl"))
}

fn store_at(dir: &Path) -> Writer {
    Writer::open(&dir.join("hermes-meter.db")).expect("open store")
}

/// Exports everything that is ready, closing idle spans first.
fn drain(exporter: &mut Exporter) {
    exporter.close_idle().expect("close idle");
    let step = exporter.flush(Instant::now() + Duration::from_secs(30)).expect("flush");
    assert!(step.error.is_none(), "{step:?}");
    assert_eq!(exporter.store().export_state().expect("state").pending, 0);
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn attr_text(span: &Span, key: &str) -> Option<String> {
    attr(span, key).map(|v| match v {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => format!("{d}"),
        Value::ArrayValue(a) => format!("{:?}", a.values.len()),
        _ => "?".into(),
    })
}

/// One line per span, indented under its parent: name, kind, the key
/// attributes, and `ERROR` for error status. Traces are separated by
/// `--`; a turn rooting its own trace shows `link->session`.
fn render(spans: &[Span]) -> String {
    let ids: HashSet<(Vec<u8>, Vec<u8>)> = spans.iter().map(|s| (s.trace_id.clone(), s.span_id.clone())).collect();
    let mut children: BTreeMap<Vec<u8>, Vec<&Span>> = BTreeMap::new();
    let mut roots = Vec::new();
    for s in spans {
        if s.parent_span_id.is_empty() {
            roots.push(s);
        } else {
            assert!(
                ids.contains(&(s.trace_id.clone(), s.parent_span_id.clone())),
                "span {} has a parent that is not in its trace",
                s.name
            );
            children.entry(s.parent_span_id.clone()).or_default().push(s);
        }
    }
    let order = |a: &&Span, b: &&Span| {
        (a.start_time_unix_nano, &a.name, attr_text(a, "hermes.api.retry_count")).cmp(&(
            b.start_time_unix_nano,
            &b.name,
            attr_text(b, "hermes.api.retry_count"),
        ))
    };
    roots.sort_by(order);
    for v in children.values_mut() {
        v.sort_by(order);
    }
    let mut out = String::new();
    fn line(s: &Span) -> String {
        let kind = match s.kind {
            1 => "internal",
            3 => "client",
            _ => "other",
        };
        let mut l = format!("{} [{kind}]", s.name);
        for key in [
            "hermes.platform",
            "hermes.session.status",
            "hermes.subagent.status",
            "hermes.turn.outcome",
            "hermes.api.retry_count",
            "http.response.status_code",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "hermes.usage.total_input_tokens",
            "hermes.usage.total_output_tokens",
            "hermes.usage.estimated",
            "hermes.tool.outcome",
            "process.exit.code",
            "hermes.span.close_reason",
            "error.type",
        ] {
            if let Some(v) = attr_text(s, key) {
                // The last two parts of the name are enough to tell them apart.
                let short = key.splitn(key.matches('.').count(), '.').last().unwrap_or(key);
                l.push_str(&format!(" {short}={v}"));
            }
        }
        if !s.links.is_empty() {
            l.push_str(" link->session");
        }
        if s.status.as_ref().is_some_and(|st| st.code == 2) {
            l.push_str(" ERROR");
        }
        l
    }
    fn walk(s: &Span, depth: usize, children: &BTreeMap<Vec<u8>, Vec<&Span>>, out: &mut String) {
        out.push_str(&"  ".repeat(depth));
        out.push_str(&line(s));
        out.push('\n');
        for c in children.get(&s.span_id).into_iter().flatten() {
            walk(c, depth + 1, children, out);
        }
    }
    for (i, r) in roots.iter().enumerate() {
        if i > 0 {
            out.push_str("--\n");
        }
        walk(r, 0, &children, &mut out);
    }
    out
}

fn assert_unique(spans: &[Span]) {
    let mut seen = HashSet::new();
    for s in spans {
        assert!(
            seen.insert((s.trace_id.clone(), s.span_id.clone())),
            "span {} ({}) arrived twice",
            s.name,
            hex(&s.span_id)
        );
    }
}

/// Replays one fixture into a fresh store, exports it over gRPC, and
/// renders the tree that arrived.
fn tree_of(name: &str, extra: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = hermes_meter_test_support::grpc(None, None);
    let mut store = store_at(dir.path());
    replay(&mut store, &[fixture(name)]);
    let endpoint = receiver.grpc_endpoint();
    let mut exporter = Exporter::with_store(config(&base(&endpoint, extra)), store.into_outbox()).expect("exporter");
    drain(&mut exporter);
    let spans = receiver.received.spans();
    assert_unique(&spans);
    render(&spans)
}

/// The exact tree per fixture (checked by hand against the fixture's
/// hook sequence in tests/fixtures/README.md).
const EXPECTED: &[(&str, &str)] = &[
    (
        "bigcache",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=120000 usage.total_output_tokens=3000
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=120000 usage.output_tokens=3000 usage.estimated=false
"#,
    ),
    (
        "cron",
        r#"
hermes.session [internal] hermes.platform=cron session.status=ok usage.total_input_tokens=2060 usage.total_output_tokens=66
  invoke_agent hermes [internal] hermes.platform=cron turn.outcome=ok
    chat mock-model [client] hermes.platform=cron api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool read_file [internal] hermes.platform=cron tool.outcome=ok
    chat mock-model [client] hermes.platform=cron api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "delegate_bg",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=2060 usage.total_output_tokens=66
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool delegate_task [internal] hermes.platform=cli tool.outcome=ok
      hermes.session [internal] hermes.platform=subagent session.status=ok subagent.status=completed usage.total_input_tokens=1020 usage.total_output_tokens=42
        invoke_agent hermes [internal] hermes.platform=subagent turn.outcome=ok
          chat mock-model [client] hermes.platform=subagent api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=42 usage.estimated=false
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "delegate_bg_orphan",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=2060 usage.total_output_tokens=66
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool delegate_task [internal] hermes.platform=cli tool.outcome=ok
      hermes.session [internal] hermes.platform=subagent session.status=abandoned usage.total_input_tokens=0 usage.total_output_tokens=0 span.close_reason=idle_timeout
        invoke_agent hermes [internal] hermes.platform=subagent turn.outcome=abandoned span.close_reason=idle_timeout
          chat mock-model [client] hermes.platform=subagent api.retry_count=0 span.close_reason=idle_timeout
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "delegate_sync",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=2060 usage.total_output_tokens=66
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool delegate_task [internal] hermes.platform=cli tool.outcome=ok
      hermes.session [internal] hermes.platform=subagent session.status=ok subagent.status=completed usage.total_input_tokens=1020 usage.total_output_tokens=42
        invoke_agent hermes [internal] hermes.platform=subagent turn.outcome=ok
          chat mock-model [client] hermes.platform=subagent api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=42 usage.estimated=false
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "failalways",
        r#"
hermes.session [internal] hermes.platform=cli session.status=error usage.total_input_tokens=0 usage.total_output_tokens=0 error.type=InternalServerError ERROR
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=error error.type=InternalServerError ERROR
    chat mock-model [client] hermes.platform=cli api.retry_count=0 response.status_code=500 error.type=InternalServerError ERROR
    chat mock-model [client] hermes.platform=cli api.retry_count=1 response.status_code=500 error.type=InternalServerError ERROR
    chat mock-model [client] hermes.platform=cli api.retry_count=2 response.status_code=500 error.type=InternalServerError ERROR
"#,
    ),
    (
        "failonce",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=1020 usage.total_output_tokens=42
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 response.status_code=500 error.type=InternalServerError ERROR
    chat mock-model [client] hermes.platform=cli api.retry_count=1 usage.input_tokens=1020 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "model404",
        r#"
hermes.session [internal] hermes.platform=cli session.status=error usage.total_input_tokens=0 usage.total_output_tokens=0 error.type=NotFoundError ERROR
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=error error.type=NotFoundError ERROR
    chat mock-model [client] hermes.platform=cli api.retry_count=0 response.status_code=404 error.type=NotFoundError ERROR
"#,
    ),
    (
        "multi_turn",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=3120 usage.total_output_tokens=108
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool read_file [internal] hermes.platform=cli tool.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1060 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "nousage",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=1700 usage.total_output_tokens=5
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1700 usage.output_tokens=5 usage.estimated=true
"#,
    ),
    (
        "parallel",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=2070 usage.total_output_tokens=66
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool read_file [internal] hermes.platform=cli tool.outcome=ok
    execute_tool read_file [internal] hermes.platform=cli tool.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1050 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "readfile",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=2060 usage.total_output_tokens=66
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool read_file [internal] hermes.platform=cli tool.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "resume",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=3120 usage.total_output_tokens=108
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool read_file [internal] hermes.platform=cli tool.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1060 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "terminal_fail",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=2060 usage.total_output_tokens=66
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool terminal [internal] hermes.platform=cli tool.outcome=nonzero_exit exit.code=3 error.type=3 ERROR
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "terminal_ok",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=2060 usage.total_output_tokens=66
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool terminal [internal] hermes.platform=cli tool.outcome=ok exit.code=0
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
"#,
    ),
    (
        "tool_error",
        r#"
hermes.session [internal] hermes.platform=cli session.status=ok usage.total_input_tokens=2060 usage.total_output_tokens=66
  invoke_agent hermes [internal] hermes.platform=cli turn.outcome=ok
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1020 usage.output_tokens=24 usage.estimated=false
    execute_tool read_file [internal] hermes.platform=cli tool.outcome=error error.type=tool_error ERROR
    chat mock-model [client] hermes.platform=cli api.retry_count=0 usage.input_tokens=1040 usage.output_tokens=42 usage.estimated=false
"#,
    ),
];

#[test]
fn every_fixture_exports_its_exact_span_tree() {
    let mut failures = Vec::new();
    let print = std::env::var_os("PRINT_TREES").is_some();
    for entry in std::fs::read_dir(FIXTURES).expect("fixtures") {
        let path = entry.expect("entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        let name = path.file_stem().and_then(|s| s.to_str()).expect("name").to_string();
        let got = tree_of(&name, &[]);
        if print {
            println!("==== {name}\n{got}");
        }
        match EXPECTED.iter().find(|(n, _)| *n == name) {
            Some((_, want)) if want.trim() == got.trim() => {}
            Some((_, want)) => failures.push(format!("{name}: want\n{want}\ngot\n{got}")),
            None => failures.push(format!("{name}: no expected tree; got\n{got}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_streamed_call_of_hermes_main_arrives_with_its_time_to_first_chunk_and_0_19_calls_without() {
    use hermes_meter_model::semconv::attr::{GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK as TTFC, HERMES_API_REQUEST_ID};
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = hermes_meter_test_support::grpc(None, None);
    let mut store = store_at(dir.path());
    let started = 1_796_002_700.0;
    let streamed = hermes_main::streamed_call(dir.path(), "main-streamed", started, Some(started + 0.75));
    let unstreamed = hermes_main::streamed_call(dir.path(), "main-unstreamed", started, None);
    replay(&mut store, &[streamed, unstreamed, fixture("terminal_ok")]);
    let mut exporter =
        Exporter::with_store(config(&base(&receiver.grpc_endpoint(), &[])), store.into_outbox()).expect("exporter");
    drain(&mut exporter);
    let spans = receiver.received.spans();
    let chats: Vec<&Span> = spans.iter().filter(|s| s.name.starts_with("chat ")).collect();
    let of = |id: &str| -> Vec<Option<&Value>> {
        chats
            .iter()
            .filter(|s| attr_text(s, HERMES_API_REQUEST_ID).as_deref() == Some(id))
            .map(|s| attr(s, TTFC))
            .collect()
    };
    // From the attempt's start (its pre_api_request) to Hermes's first chunk.
    assert_eq!(
        of(&hermes_main::api_request_id("main-streamed")),
        [Some(&Value::DoubleValue(0.75))]
    );
    assert_eq!(of(&hermes_main::api_request_id("main-unstreamed")), [None]);
    // Hermes 0.19 sends no first chunk time: no attribute is made up.
    let old: Vec<&&Span> = chats
        .iter()
        .filter(|s| !attr_text(s, HERMES_API_REQUEST_ID).is_some_and(|id| id.starts_with("main-")))
        .collect();
    assert!(!old.is_empty(), "the 0.19 fixture's chat spans arrived");
    assert!(old.iter().all(|s| attr(s, TTFC).is_none()), "{old:?}");
}

fn all_fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("jsonl"))
        .collect();
    v.sort();
    v
}

fn ids(spans: &[Span]) -> HashSet<(Vec<u8>, Vec<u8>)> {
    spans.iter().map(|s| (s.trace_id.clone(), s.span_id.clone())).collect()
}

/// Every fixture exported over gRPC, as the reference set of span ids.
fn reference_ids() -> HashSet<(Vec<u8>, Vec<u8>)> {
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = hermes_meter_test_support::grpc(None, None);
    let mut store = store_at(dir.path());
    replay(&mut store, &all_fixtures());
    let endpoint = receiver.grpc_endpoint();
    let mut exporter = Exporter::with_store(config(&base(&endpoint, &[])), store.into_outbox()).expect("exporter");
    drain(&mut exporter);
    let spans = receiver.received.spans();
    assert_unique(&spans);
    ids(&spans)
}

#[test]
fn per_turn_traces_root_each_turn_and_link_it_to_the_session() {
    let got = tree_of("multi_turn", &[("HERMES_METER_TRACE_MODE", "turn")]);
    let traces: Vec<&str> = got.split("--\n").collect();
    assert_eq!(traces.len(), 3, "{got}");
    assert!(
        traces[0].starts_with("hermes.session") && traces[0].lines().count() == 1,
        "{got}"
    );
    for turn in &traces[1..] {
        assert!(
            turn.starts_with("invoke_agent hermes") && turn.lines().next().is_some_and(|l| l.contains("link->session"))
        );
    }
}

#[test]
fn http_protobuf_with_gzip_delivers_the_same_spans_as_grpc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = hermes_meter_test_support::http(None);
    let mut store = store_at(dir.path());
    replay(&mut store, &all_fixtures());
    let endpoint = receiver.http_endpoint();
    let cfg = config(&base(
        &endpoint,
        &[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=secret"),
        ],
    ));
    let mut exporter = Exporter::with_store(cfg, store.into_outbox()).expect("exporter");
    drain(&mut exporter);
    let spans = receiver.received.spans();
    assert_unique(&spans);
    assert_eq!(ids(&spans), reference_ids());
}

/// A partial success, which no OpenTelemetry Collector at v0.165 sends
/// (collector-config/README.md): the spans the collector says it rejected
/// are counted `rejected`, not `exported`, and not sent again.
#[test]
fn a_partial_success_counts_the_rejected_spans_and_sends_nothing_again() {
    for protocol in ["grpc", "http/protobuf"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let (receiver, endpoint) = if protocol == "grpc" {
            let r = hermes_meter_test_support::grpc(None, None);
            let e = r.grpc_endpoint();
            (r, e)
        } else {
            let r = hermes_meter_test_support::http(None);
            let e = r.http_endpoint();
            (r, e)
        };
        receiver.received.answer([hermes_meter_test_support::Answer::Partial {
            rejected: 2,
            message: "2 spans too old".into(),
        }]);
        let mut store = store_at(dir.path());
        replay(&mut store, &[fixture("readfile")]);
        let settings = base(&endpoint, &[("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)]);
        let mut exporter = Exporter::with_store(config(&settings), store.into_outbox()).expect("exporter");
        drain(&mut exporter);
        let spans = receiver.received.spans();
        assert_unique(&spans);
        assert!(spans.len() > 2, "{protocol}");
        let state = exporter.store().export_state().expect("state");
        assert_eq!(
            (state.rejected, state.exported, state.pending, state.failed),
            (2, spans.len() as i64 - 2, 0, 0),
            "{protocol}: {state:?}"
        );
    }
}

#[test]
fn a_collector_that_is_down_for_the_first_half_gets_every_span_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let addr = hermes_meter_test_support::free_addr();
    let endpoint = format!("http://{addr}");
    let files = all_fixtures();
    let (first, second) = files.split_at(files.len() / 2);
    let mut store = store_at(dir.path());
    replay(&mut store, first);
    let mut exporter = Exporter::with_store(config(&base(&endpoint, &[])), store.into_outbox()).expect("exporter");
    exporter.close_idle().expect("close idle");
    // The collector is down: a few attempts fail and back off.
    let mut failures = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while failures < 3 && Instant::now() < deadline {
        let step = exporter.run_once().expect("step");
        assert_eq!(step.exported, 0);
        if step.error.is_some() {
            failures += 1;
        }
    }
    assert_eq!(failures, 3);
    let state = exporter.store().export_state().expect("state");
    assert!(state.pending > 0 && state.exported == 0 && state.last_error.is_some());
    // The collector comes up; the second half of the replay arrives.
    let receiver = hermes_meter_test_support::grpc(Some(addr), None);
    let mut store = store_at(dir.path());
    replay(&mut store, second);
    drop(store);
    drain(&mut exporter);
    let spans = receiver.received.spans();
    assert_unique(&spans);
    assert_eq!(ids(&spans), reference_ids());
}

#[test]
fn only_the_lease_holder_exports_and_the_lease_lapses_when_it_stops() {
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = hermes_meter_test_support::grpc(None, None);
    let mut store = store_at(dir.path());
    replay(&mut store, &[fixture("readfile")]);
    let endpoint = receiver.grpc_endpoint();
    let cfg = config(&base(&endpoint, &[("HERMES_METER_LEASE_SECONDS", "0.5")]));
    let mut a = Exporter::with_store(cfg.clone(), store.into_outbox()).expect("a");
    let mut b = Exporter::new(cfg, &dir.path().join("hermes-meter.db")).expect("b");
    assert!(a.run_once().expect("a").leased);
    let step = b.run_once().expect("b");
    assert!(!step.leased && step.exported == 0);
    // a stops renewing (as if it died): b takes over once the lease lapses.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !b.run_once().expect("b").leased {
        assert!(Instant::now() < deadline, "the lease never lapsed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!a.run_once().expect("a").leased);
    assert_eq!(receiver.received.span_count(), 5);
}

#[test]
fn export_since_resends_history_with_the_same_ids() {
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = hermes_meter_test_support::grpc(None, None);
    let mut store = store_at(dir.path());
    replay(&mut store, &all_fixtures());
    let endpoint = receiver.grpc_endpoint();
    let mut exporter = Exporter::with_store(config(&base(&endpoint, &[])), store.into_outbox()).expect("exporter");
    drain(&mut exporter);
    let first = ids(&receiver.received.spans());
    let sent = exporter
        .export_history(0.0, Instant::now() + Duration::from_secs(30))
        .expect("history");
    let all = receiver.received.spans();
    assert_eq!(sent, first.len());
    assert_eq!(all.len(), 2 * first.len());
    assert_eq!(ids(&all), first);
}

#[test]
fn a_sampler_that_keeps_nothing_sends_nothing_and_counts_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = hermes_meter_test_support::grpc(None, None);
    let mut store = store_at(dir.path());
    replay(&mut store, &[fixture("readfile")]);
    let endpoint = receiver.grpc_endpoint();
    let cfg = config(&base(&endpoint, &[("OTEL_TRACES_SAMPLER", "always_off")]));
    let mut exporter = Exporter::with_store(cfg, store.into_outbox()).expect("exporter");
    drain(&mut exporter);
    assert_eq!(receiver.received.span_count(), 0);
    assert_eq!(exporter.store().export_state().expect("state").sampled_out, 5);
}

#[test]
fn grpc_over_tls_on_loopback_trusts_the_ca_file_and_nothing_else() {
    let (cert, key) = hermes_meter_test_support::self_signed();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert).expect("write ca");
    let ca = ca.to_string_lossy().to_string();

    let receiver = hermes_meter_test_support::grpc(None, Some((cert.clone(), key.clone())));
    let mut store = store_at(dir.path());
    replay(&mut store, &[fixture("readfile")]);
    let endpoint = format!("https://localhost:{}", receiver.addr.port());
    let cfg = config(&base(&endpoint, &[("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca)]));
    let mut exporter = Exporter::with_store(cfg, store.into_outbox()).expect("exporter");
    drain(&mut exporter);
    assert_eq!(receiver.received.span_count(), 5);

    // Without the CA the collector is not trusted: nothing is sent or lost.
    let dir2 = tempfile::tempdir().expect("temp dir");
    let mut store = store_at(dir2.path());
    replay(&mut store, &[fixture("readfile")]);
    let mut exporter = Exporter::with_store(config(&base(&endpoint, &[])), store.into_outbox()).expect("exporter");
    exporter.close_idle().expect("close idle");
    let step = exporter.run_once().expect("step");
    assert_untrusted(&step.error);
    assert_eq!(exporter.store().export_state().expect("state").pending, 5);
}

/// An untrusted collector certificate is said as such, pointing at the
/// setting that trusts its CA, not as a collector that is not there.
fn assert_untrusted(error: &Option<String>) {
    let error = error.as_deref().expect("an error");
    assert!(
        error.contains("not trusted") && error.contains("OTEL_EXPORTER_OTLP_CERTIFICATE"),
        "{error}"
    );
    assert!(!error.contains("is a collector listening there"), "{error}");
}

#[test]
fn https_on_loopback_trusts_the_ca_file_and_nothing_else() {
    let (cert, key) = hermes_meter_test_support::self_signed();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert).expect("write ca");
    let ca = ca.to_string_lossy().to_string();
    let receiver = hermes_meter_test_support::https(hermes_meter_test_support::ServerTls {
        cert,
        key,
        client_ca: None,
    });
    let endpoint = format!("https://localhost:{}/v1/traces", receiver.addr.port());
    let http = [("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")];

    let mut store = store_at(dir.path());
    replay(&mut store, &[fixture("readfile")]);
    let mut with_ca = base(&endpoint, &http);
    with_ca.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca));
    let mut exporter = Exporter::with_store(config(&with_ca), store.into_outbox()).expect("exporter");
    drain(&mut exporter);
    assert_eq!(receiver.received.span_count(), 5);

    // Without the CA the collector is not trusted: nothing is sent or lost.
    let dir2 = tempfile::tempdir().expect("temp dir");
    let mut store = store_at(dir2.path());
    replay(&mut store, &[fixture("readfile")]);
    let mut exporter = Exporter::with_store(config(&base(&endpoint, &http)), store.into_outbox()).expect("exporter");
    exporter.close_idle().expect("close idle");
    let step = exporter.run_once().expect("step");
    assert_untrusted(&step.error);
    assert_eq!(exporter.store().export_state().expect("state").pending, 5);
    assert_eq!(receiver.received.span_count(), 5);
}

#[test]
fn a_collector_that_asks_for_a_client_certificate_gets_ours_over_grpc_and_https() {
    let pki = hermes_meter_test_support::pki();
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write pem");
        path.to_string_lossy().to_string()
    };
    let (ca, cert, key) = (
        write("ca.pem", &pki.ca),
        write("client.pem", &pki.client.0),
        write("client.key", &pki.client.1),
    );
    for protocol in ["grpc", "http/protobuf"] {
        let tls = hermes_meter_test_support::ServerTls {
            cert: pki.server.0.clone(),
            key: pki.server.1.clone(),
            client_ca: Some(pki.ca.clone()),
        };
        let (receiver, endpoint) = if protocol == "grpc" {
            let r = hermes_meter_test_support::grpc_tls(None, Some(tls));
            let e = format!("https://localhost:{}", r.addr.port());
            (r, e)
        } else {
            let r = hermes_meter_test_support::https(tls);
            let e = format!("https://localhost:{}/v1/traces", r.addr.port());
            (r, e)
        };
        let settings = |client: bool| {
            let mut v = base(&endpoint, &[("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)]);
            v.push(("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca));
            if client {
                v.push(("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert));
                v.push(("OTEL_EXPORTER_OTLP_CLIENT_KEY", &key));
            }
            config(&v)
        };

        // Without a client certificate the collector turns us away, and
        // the spans wait in the outbox.
        let without = tempfile::tempdir().expect("temp dir");
        let mut store = store_at(without.path());
        replay(&mut store, &[fixture("readfile")]);
        let mut exporter = Exporter::with_store(settings(false), store.into_outbox()).expect("exporter");
        exporter.close_idle().expect("close idle");
        let step = exporter.run_once().expect("step");
        let error = step.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("client certificate") && error.contains("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
            "{protocol}: {error}"
        );
        assert_eq!(exporter.store().export_state().expect("state").pending, 5, "{protocol}");
        assert_eq!(receiver.received.span_count(), 0, "{protocol}");

        // With it, every span arrives.
        let with = tempfile::tempdir().expect("temp dir");
        let mut store = store_at(with.path());
        replay(&mut store, &[fixture("readfile")]);
        let mut exporter = Exporter::with_store(settings(true), store.into_outbox()).expect("exporter");
        drain(&mut exporter);
        assert_eq!(receiver.received.span_count(), 5, "{protocol}");
    }
}

#[test]
fn a_client_certificate_without_its_key_is_a_configuration_error() {
    let pki = hermes_meter_test_support::pki();
    let dir = tempfile::tempdir().expect("temp dir");
    let cert = dir.path().join("client.pem");
    std::fs::write(&cert, &pki.client.0).expect("write");
    let cert = cert.to_string_lossy().to_string();
    for protocol in ["grpc", "http/protobuf"] {
        let cfg = config(&base(
            "https://localhost:4317",
            &[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
                ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &cert),
            ],
        ));
        let row = cfg
            .describe()
            .into_iter()
            .find(|(name, ..)| *name == "client_certificate")
            .expect("status shows the client certificate");
        assert_eq!(row.1, cert);
        let store = store_at(dir.path());
        let err = match Exporter::with_store(cfg, store.into_outbox()) {
            Ok(_) => panic!("{protocol}: a certificate without its key was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("OTEL_EXPORTER_OTLP_CLIENT_KEY"), "{protocol}: {err}");
    }
}

/// Every span the fixtures produce, as one gRPC receiver got them.
fn all_spans() -> Vec<Span> {
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = hermes_meter_test_support::grpc(None, None);
    let mut store = store_at(dir.path());
    replay(&mut store, &all_fixtures());
    let endpoint = receiver.grpc_endpoint();
    let mut exporter = Exporter::with_store(config(&base(&endpoint, &[])), store.into_outbox()).expect("exporter");
    drain(&mut exporter);
    receiver.received.spans()
}

#[test]
fn every_emitted_span_and_attribute_name_is_in_the_semconv_registry() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("semconv/docs/names.json");
    let names: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("names.json")).expect("json");
    let registry_attrs = names["attributes"].as_object().expect("attributes");
    for name in hermes_meter_model::semconv::SPAN_ATTRIBUTES {
        assert!(registry_attrs.contains_key(*name), "{name} is not in the registry");
    }
    let spans_def = names["spans"].as_array().expect("spans");
    let mut problems = Vec::new();
    for span in all_spans() {
        // A template such as `chat {gen_ai.request.model}` matches on its prefix.
        let def = spans_def.iter().find(|d| {
            let n = d["name"].as_str().unwrap_or("");
            match n.split_once(" {") {
                Some((prefix, _)) => span.name.starts_with(&format!("{prefix} ")),
                None => span.name == n,
            }
        });
        let Some(def) = def else {
            problems.push(format!("span name {:?} is not in the registry", span.name));
            continue;
        };
        let allowed: Vec<&str> = def["attributes"]
            .as_array()
            .expect("attributes")
            .iter()
            .filter_map(|a| a.as_str())
            .collect();
        for kv in &span.attributes {
            if !allowed.contains(&kv.key.as_str()) {
                problems.push(format!(
                    "{}: attribute {} is not in the registry for this span",
                    span.name, kv.key
                ));
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `copies` sessions shaped like the readfile fixture, each with its own ids.
fn many_sessions(dir: &Path, copies: usize) -> PathBuf {
    let text = std::fs::read_to_string(fixture("readfile")).expect("fixture");
    let session = "20261130_013735_bf4b63";
    assert!(text.contains(session));
    let mut out = String::new();
    for i in 0..copies {
        out.push_str(&text.replace(session, &format!("{session}x{i:06}")));
    }
    let path = dir.join("many.jsonl");
    std::fs::write(&path, out).expect("write");
    path
}

#[test]
fn killing_the_exporting_process_mid_batch_loses_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let copies = 200;
    let file = many_sessions(dir.path(), copies);
    let home = dir.path().join("home");
    let mut store = Writer::open_dir(&home).expect("store");
    replay(&mut store, &[file]);
    drop(store);
    let receiver = hermes_meter_test_support::grpc(None, None);
    // The collector takes the first request and does not answer it.
    receiver.received.hold.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .arg("--home")
        .arg(&home)
        .args(["serve", "--poll-ms", "20", "--endpoint", &receiver.grpc_endpoint()])
        .env("HERMES_METER_LEASE_SECONDS", "1")
        .env("HERMES_METER_SESSION_GRACE_SECONDS", "0")
        .env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_EXPORTER")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    while receiver.received.held.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "serve never sent");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    receiver.received.hold.store(false, std::sync::atomic::Ordering::SeqCst);
    // Another exporter takes over once the dead one's lease lapses.
    let endpoint = receiver.grpc_endpoint();
    let store = Writer::open_dir(&home).expect("store");
    assert_eq!(store.export_state().expect("state").pending, 5 * copies as i64);
    let mut exporter = Exporter::with_store(config(&base(&endpoint, &[])), store.into_outbox()).expect("exporter");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !exporter.run_once().expect("step").leased {
        assert!(Instant::now() < deadline, "the dead exporter's lease never lapsed");
        std::thread::sleep(Duration::from_millis(20));
    }
    drain(&mut exporter);
    let spans = receiver.received.spans();
    assert_eq!(ids(&spans).len(), 5 * copies, "every span arrived");
    // At most the batch in flight when the process died arrived twice.
    assert!(
        spans.len() - 5 * copies <= 100,
        "{} duplicates",
        spans.len() - 5 * copies
    );
}

/// A collector that accepts the connection, reads whatever is sent and
/// never answers (a hung proxy, a stopped process whose socket stays
/// open). The sockets are kept open until the listener is dropped.
struct SilentCollector {
    addr: std::net::SocketAddr,
    _thread: std::thread::JoinHandle<()>,
}

fn silent_collector() -> SilentCollector {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let thread = std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let mut reader = conn.try_clone().expect("clone socket");
            held.push(conn);
            std::thread::spawn(move || {
                let mut sink = [0u8; 4096];
                while std::io::Read::read(&mut reader, &mut sink).is_ok_and(|n| n > 0) {}
            });
        }
    });
    SilentCollector { addr, _thread: thread }
}

/// Steps `exporter` until a step fails, within a deadline.
fn first_failure(exporter: &mut Exporter) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let step = exporter.run_once().expect("step");
        assert_eq!(step.exported, 0, "nothing was accepted");
        if let Some(error) = step.error {
            return error;
        }
    }
    panic!("no export attempt failed within 20 s");
}

#[test]
fn a_collector_that_accepts_and_never_answers_is_a_failure_kept_for_status() {
    for protocol in ["grpc", "http/protobuf"] {
        let dir = tempfile::tempdir().expect("temp dir");
        let collector = silent_collector();
        let endpoint = format!("http://{}", collector.addr);
        let mut store = store_at(dir.path());
        replay(&mut store, &[fixture("readfile")]);
        let settings = base(
            &endpoint,
            &[
                ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "300"),
            ],
        );
        let mut exporter = Exporter::with_store(config(&settings), store.into_outbox()).expect("exporter");
        exporter.close_idle().expect("close idle");
        let started = Instant::now();
        let error = first_failure(&mut exporter);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{protocol}: the attempt is bounded by the export timeout"
        );
        assert!(error.contains("no answer within 300 ms"), "{protocol}: {error}");
        assert!(error.contains("did not answer in time"), "{protocol}: {error}");
        let state = exporter.store().export_state().expect("state");
        assert_eq!(state.last_error.as_deref(), Some(error.as_str()), "{protocol}");
        assert_eq!(state.failed, 1, "{protocol}: the failure is counted");
        assert!(state.pending > 0 && state.exported == 0, "{protocol}: nothing is lost");
    }
}

#[test]
fn a_collector_that_closes_the_connection_is_a_transport_failure_not_a_refusal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            // Read the start of the request, then hang up without an answer.
            let Ok(mut conn) = conn else { return };
            let _ = std::io::Read::read(&mut conn, &mut [0u8; 64]);
        }
    });
    let endpoint = format!("http://{addr}");
    let mut store = store_at(dir.path());
    replay(&mut store, &[fixture("readfile")]);
    let mut exporter = Exporter::with_store(config(&base(&endpoint, &[])), store.into_outbox()).expect("exporter");
    exporter.close_idle().expect("close idle");
    let error = first_failure(&mut exporter);
    assert!(!error.contains("refused them"), "{error}");
    assert!(error.contains("closed the connection"), "{error}");
}
