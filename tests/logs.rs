//! OTLP logs end to end: recorded Hermes runs replayed into a store, a
//! budget verdict given, everything exported through the export driver to
//! in-process receivers on loopback, and the log records that arrived
//! checked against the spans that arrived with them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_model::semconv::event;
use hermes_meter_runtime::export::{Driver, ExportConfig};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::{LogPlace, Writer};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::logs::v1::LogRecord;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// Trace and log settings from `pairs` only (the process environment is
/// ignored), no session grace.
fn configs(pairs: &[(&str, &str)]) -> (ExportConfig, ExportConfig) {
    let mut all = vec![
        ("HERMES_METER_SESSION_GRACE_SECONDS", "0"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
    ];
    all.extend_from_slice(pairs);
    hermes_meter_test_support::export_configs(&all)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(format!("{name}.jsonl"))
}

/// A store in `dir` holding the runs of `names`.
fn replayed(dir: &Path, names: &[&str]) -> Writer {
    replayed_with(dir, names, DecodeOptions::default())
}

/// [`replayed`], decoded with `opts`.
fn replayed_with(dir: &Path, names: &[&str], opts: DecodeOptions) -> Writer {
    let mut store = Writer::open_dir(dir).expect("store");
    let mut stats = ReplayStats::default();
    for name in names {
        replay_file(&mut store, &fixture(name), opts, &mut stats).expect("replay");
    }
    assert!(stats.bad_lines.is_empty(), "{:?}", stats.bad_lines);
    store
}

/// Steps `driver` until nothing is left to send or `timeout` passes.
fn drain(driver: &mut Driver, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let cycle = driver.step(Some(Instant::now() + Duration::from_secs(5)));
        let state = driver.store().log_export_state().expect("log state");
        let spans = driver.store().export_state().expect("state");
        if state.pending == 0 && spans.pending == 0 {
            return;
        }
        assert!(cycle.traces.is_ok(), "{:?}", cycle.traces);
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("not drained: {:?}", driver.store().log_export_state());
}

fn attr(r: &LogRecord, key: &str) -> Option<Value> {
    r.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.clone())
}

fn text(v: Option<Value>) -> Option<String> {
    match v {
        Some(Value::StringValue(s)) => Some(s),
        _ => None,
    }
}

/// The session of the failonce fixture.
const FAILONCE_SESSION: &str = "20261130_013817_88dc56";

#[test]
fn failed_attempts_alerts_and_verdicts_arrive_as_records_in_the_traces_of_their_spans() {
    let receiver = hermes_meter_test_support::grpc(None, None);
    let endpoint = receiver.grpc_endpoint();
    let dir = tempfile::tempdir().expect("temp dir");
    // failonce: one attempt fails and its retry succeeds; model404: the
    // model is gone (an error and the model-unavailable alert).
    let store = replayed(dir.path(), &["failonce", "model404"]);
    store
        .count_verdict(
            "blocked",
            "session",
            "lifetime",
            1_800_000_000.0,
            LogPlace {
                session_id: Some(FAILONCE_SESSION),
                turn_id: None,
                span_id: None,
            },
            "Blocked: the session's cap is used up.",
        )
        .expect("verdict");
    let errors = store.store_count("llm_call_errors").expect("errors");
    assert!(errors >= 2, "both fixtures hold a failed attempt: {errors}");
    let (traces, logs) = configs(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    let store = store.into_outbox();
    let mut driver = Driver::new(store, Some(traces), None, Some(logs), Duration::from_secs(60)).expect("driver");
    drain(&mut driver, Duration::from_secs(30));

    let records = receiver.received.log_records();
    let spans = receiver.received.spans();
    let by_event = |name: &str| records.iter().filter(|r| r.event_name == name).collect::<Vec<_>>();
    let api_errors = by_event(event::API_ERROR);
    assert_eq!(api_errors.len() as i64, errors, "one record per failed attempt");
    for r in &api_errors {
        // In the attempt span that failed, in that span's trace.
        let span = spans
            .iter()
            .find(|s| s.span_id == r.span_id)
            .unwrap_or_else(|| panic!("no span {:?} for {r:?}", r.span_id));
        assert_eq!(span.trace_id, r.trace_id);
        assert!(span.name.starts_with("chat "), "{}", span.name);
        assert!(matches!(attr(r, "hermes.api.retry_count"), Some(Value::IntValue(_))));
        assert!(r.severity_number == 13 || r.severity_number == 17, "{r:?}");
        assert!(!text(r.body.as_ref().and_then(|b| b.value.clone()))
            .unwrap_or_default()
            .is_empty());
    }
    // The retried attempt of failonce warns; the 404 that ends model404 is
    // an error.
    assert!(api_errors.iter().any(|r| r.severity_text == "WARN"));
    assert!(api_errors.iter().any(|r| r.severity_text == "ERROR"));
    let alerts = by_event(event::ALERT);
    assert_eq!(alerts.len(), 1, "{alerts:?}");
    assert_eq!(
        text(attr(alerts[0], "hermes.alert.kind")).as_deref(),
        Some("model_unavailable")
    );
    assert!(spans
        .iter()
        .any(|s| s.span_id == alerts[0].span_id && s.trace_id == alerts[0].trace_id));
    let verdicts = by_event(event::BUDGET_VERDICT);
    assert_eq!(verdicts.len(), 1);
    let v = verdicts[0];
    assert_eq!(text(attr(v, "hermes.budget.verdict")).as_deref(), Some("blocked"));
    assert_eq!(v.severity_text, "ERROR");
    // A verdict with no turn sits on the session's root span.
    let root = spans.iter().find(|s| s.span_id == v.span_id).expect("the session span");
    assert_eq!((root.name.as_str(), &root.trace_id), ("hermes.session", &v.trace_id));
    // Every record once, each with its own uid.
    let uids: HashSet<_> = records.iter().map(|r| text(attr(r, "log.record.uid"))).collect();
    assert_eq!(uids.len(), records.len());
    let state = driver.store().log_export_state().expect("state");
    assert_eq!((state.pending, state.exported), (0, records.len() as i64));
}

#[test]
fn over_http_with_gzip_the_same_records_arrive() {
    let receiver = hermes_meter_test_support::http(None);
    let endpoint = receiver.http_endpoint();
    let base = endpoint.trim_end_matches("/v1/traces").to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = replayed(dir.path(), &["failalways"]);
    let errors = store.store_count("llm_call_errors").expect("errors");
    let (traces, logs) = configs(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &base),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
    ]);
    assert_eq!(logs.endpoint.value, format!("{base}/v1/logs"));
    let store = store.into_outbox();
    let mut driver = Driver::new(store, Some(traces), None, Some(logs), Duration::from_secs(60)).expect("driver");
    drain(&mut driver, Duration::from_secs(30));
    let records = receiver.received.log_records();
    assert_eq!(records.len() as i64, errors);
    assert!(records.iter().all(|r| r.event_name == event::API_ERROR));
}

#[test]
fn a_backend_that_takes_no_logs_keeps_them_waiting_and_says_so_while_spans_go_on() {
    let receiver = hermes_meter_test_support::grpc_traces_only();
    let endpoint = receiver.grpc_endpoint();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = replayed(dir.path(), &["failonce"]);
    let waiting = store.log_export_state().expect("state").pending;
    assert!(waiting > 0);
    let (traces, logs) = configs(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    let store = store.into_outbox();
    let mut driver = Driver::new(store, Some(traces), None, Some(logs), Duration::from_secs(60)).expect("driver");
    let cycle = driver.step(Some(Instant::now() + Duration::from_secs(5)));
    let step = cycle.logs.expect("a log step").expect("no store error");
    let error = step.error.expect("the log send failed");
    assert!(error.contains("it does not take logs"), "{error}");
    assert!(error.contains("OTEL_LOGS_EXPORTER=none"), "{error}");
    assert!(receiver.received.span_count() > 0, "spans went out");
    let state = driver.store().log_export_state().expect("state");
    assert_eq!(state.pending, waiting, "nothing lost");
    assert_eq!(state.last_error.as_deref(), Some(error.as_str()));
    assert_eq!(state.failed, 1);
}

#[test]
fn each_signal_has_its_own_exporter_and_endpoint_variables() {
    let receiver = hermes_meter_test_support::grpc(None, None);
    let endpoint = receiver.grpc_endpoint();
    let (_, logs) = configs(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ("OTEL_LOGS_EXPORTER", "none"),
    ]);
    assert!(!logs.enabled());
    let (traces, logs) = configs(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ("OTEL_TRACES_EXPORTER", "none"),
    ]);
    assert!(
        !traces.enabled() && logs.enabled(),
        "each signal has its own exporter variable"
    );
    let (_, logs) = configs(&[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://127.0.0.1:1")]);
    assert_eq!(logs.endpoint.value, "http://127.0.0.1:1");
}

#[test]
fn killing_the_sending_process_mid_batch_loses_no_record_and_a_resent_one_keeps_its_uid() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    let total = 300;
    {
        let store = Writer::open_dir(&home).expect("store");
        for i in 0..total {
            let body = format!("alert {i}");
            store
                .append_log(&hermes_meter_store::NewLog {
                    at: 1_800_000_000.0 + i as f64,
                    event: event::ALERT,
                    severity: hermes_meter_store::Severity::Warn,
                    place: LogPlace::default(),
                    body: &body,
                    attrs: Default::default(),
                    content_key: None,
                })
                .expect("append");
        }
    }
    let receiver = hermes_meter_test_support::grpc(None, None);
    // The collector takes the first log request and does not answer it.
    receiver
        .received
        .hold_logs
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .arg("--home")
        .arg(&home)
        .args(["serve", "--poll-ms", "20", "--endpoint", &receiver.grpc_endpoint()])
        .env("HERMES_METER_LEASE_SECONDS", "1")
        .env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100")
        .env("OTEL_LOGS_EXPORTER", "otlp")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_EXPORTER")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn serve");
    let deadline = Instant::now() + Duration::from_secs(30);
    while receiver.received.held_logs.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "serve never sent");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("kill -9");
    child.wait().expect("reap");
    receiver
        .received
        .hold_logs
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let store = Writer::open_dir(&home).expect("store");
    assert_eq!(
        store.log_export_state().expect("state").pending,
        total,
        "nothing left the store unanswered"
    );
    // Another process takes over once the dead one's lease lapses.
    let (traces, logs) = configs(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.grpc_endpoint())]);
    let store = store.into_outbox();
    let mut driver = Driver::new(store, Some(traces), None, Some(logs), Duration::from_secs(60)).expect("driver");
    drain(&mut driver, Duration::from_secs(30));
    let records = receiver.received.log_records();
    let uids: HashSet<_> = records.iter().map(|r| text(attr(r, "log.record.uid"))).collect();
    let bodies: HashSet<_> = records
        .iter()
        .map(|r| text(r.body.as_ref().and_then(|b| b.value.clone())))
        .collect();
    assert_eq!(bodies.len() as i64, total, "every record arrived");
    assert_eq!(uids.len() as i64, total, "a record sent twice has the same uid");
    // At most the batch in flight when the process died arrived twice.
    assert!(
        records.len() as i64 - total <= 100,
        "{} repeats",
        records.len() as i64 - total
    );
}

/// The readfile run recorded with capture on, then sent by an exporter
/// with capture `mode`: the receiver, the driver (its store), the run's
/// LLM calls and the store's directory.
fn sent_with_content(mode: &str) -> (hermes_meter_test_support::Receiver, Driver, i64, tempfile::TempDir) {
    let receiver = hermes_meter_test_support::grpc(None, None);
    let endpoint = receiver.grpc_endpoint();
    let dir = tempfile::tempdir().expect("temp dir");
    let capture = DecodeOptions {
        capture_content: true,
        ..DecodeOptions::default()
    };
    let store = replayed_with(dir.path(), &["readfile"], capture);
    let calls = store.store_count("llm_calls").expect("calls");
    let (traces, logs) = configs(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode),
    ]);
    assert_eq!(traces.capture_content.value, mode != "EVENT_ONLY");
    assert_eq!(logs.content_events.value, mode != "SPAN_ONLY");
    let store = store.into_outbox();
    let mut driver = Driver::new(store, Some(traces), None, Some(logs), Duration::from_secs(60)).expect("driver");
    drain(&mut driver, Duration::from_secs(30));
    (receiver, driver, calls, dir)
}

#[test]
fn event_only_sends_each_calls_content_as_a_content_event_in_its_span_and_none_on_spans() {
    let (receiver, _driver, calls, _dir) = sent_with_content("EVENT_ONLY");
    let spans = receiver.received.spans();
    let content_keys = ["gen_ai.input.messages", "gen_ai.output.messages"];
    assert!(
        spans
            .iter()
            .all(|s| s.attributes.iter().all(|kv| !content_keys.contains(&kv.key.as_str()))),
        "EVENT_ONLY puts no content on spans"
    );
    let events: Vec<_> = receiver
        .received
        .log_records()
        .into_iter()
        .filter(|r| r.event_name == event::INFERENCE_DETAILS)
        .collect();
    assert_eq!(events.len() as i64, calls, "one content event per LLM call");
    for e in &events {
        let span = spans.iter().find(|s| s.span_id == e.span_id).expect("its chat span");
        assert!(
            span.name.starts_with("chat ") && span.trace_id == e.trace_id,
            "{}",
            span.name
        );
        let input = text(attr(e, "gen_ai.input.messages")).expect("input messages");
        assert!(input.contains("READFILE"), "{input}");
        assert_eq!(text(attr(e, "gen_ai.operation.name")).as_deref(), Some("chat"));
    }
    // The final answer's call carries what the model said.
    assert!(events.iter().any(|e| text(attr(e, "gen_ai.output.messages")).is_some()));
}

#[test]
fn without_content_events_a_calls_captured_content_stays_off_the_wire_and_is_counted_skipped() {
    let (receiver, driver, calls, _dir) = sent_with_content("SPAN_ONLY");
    assert!(
        receiver.received.log_records().is_empty(),
        "readfile has no other record"
    );
    let state = driver.store().log_export_state().expect("state");
    assert_eq!((state.pending, state.skipped, state.exported), (0, calls, 0));
    // On spans instead.
    assert!(receiver
        .received
        .spans()
        .iter()
        .any(|s| s.attributes.iter().any(|kv| kv.key == "gen_ai.input.messages")));
}
