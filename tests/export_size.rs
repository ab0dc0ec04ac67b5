//! Requests larger than the collector takes: recorded runs with captured
//! content replayed into a store and exported through the export driver to
//! in-process receivers that refuse messages over a maximum, as a
//! Collector does (`max_recv_msg_size_mib` over gRPC, `max_request_body_size`
//! over HTTP, or a proxy's 413). What arrived is checked against what an
//! unlimited receiver got from the same runs: every span and record
//! arrives once, and only one too large alone is missing, counted
//! rejected.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_runtime::export::{Driver, ExportConfig};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;
use hermes_meter_test_support::{Receiver, TooLarge};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// The recorded run every session is a copy of, and its session id.
const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/readfile.jsonl");
const SESSION_ID: &str = "20261130_013735_bf4b63";
/// The user's message of that run, which its chat spans carry as content.
const USER_MESSAGE: &str = "READFILE please read hello.txt";

/// Sessions in a batch: their spans together are far over the receivers'
/// maximum, while each alone is well under it.
const SESSIONS: usize = 12;
/// What the limited receivers take.
const MAX_MESSAGE: usize = 16 << 10;
/// The padding of the user's message in most sessions, and in the one
/// whose chat spans (and content events) are too large alone (the store
/// cuts captured content, so it grows them to about 21 KiB).
const PAD: usize = 1 << 10;
const BIG_PAD: usize = 100 << 10;
/// The session with [`BIG_PAD`], when a test has one.
const BIG: usize = 5;

/// A store in `dir` holding [`SESSIONS`] copies of the readfile run,
/// recorded with content capture on, copy `i` with its user's message
/// padded by `pad(i)` bytes.
fn store_of(dir: &Path, pad: impl Fn(usize) -> usize) -> Writer {
    let text = std::fs::read_to_string(FIXTURE).expect("fixture");
    let mut lines = String::new();
    for i in 0..SESSIONS {
        let padded = format!("{USER_MESSAGE} {}", "x".repeat(pad(i)));
        let copy = text.replace(SESSION_ID, &session(i)).replace(USER_MESSAGE, &padded);
        lines.push_str(&copy);
    }
    let file: PathBuf = dir.join("sessions.jsonl");
    std::fs::write(&file, lines).expect("write the runs");
    let mut store = Writer::open_dir(dir).expect("store");
    let opts = DecodeOptions {
        capture_content: true,
        max_content_bytes: 4 << 20,
    };
    let mut stats = ReplayStats::default();
    replay_file(&mut store, &file, opts, &mut stats).expect("replay");
    assert!(stats.bad_lines.is_empty(), "{:?}", stats.bad_lines);
    store
}

fn session(i: usize) -> String {
    format!("20261205_000000_size{i:02}")
}

/// Trace and log settings to `endpoint` over `protocol` from `pairs` only
/// (the process environment is ignored), content sent as `capture`.
fn configs(endpoint: &str, protocol: &str, capture: &str, pairs: &[(&str, &str)]) -> (ExportConfig, ExportConfig) {
    let mut all = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", capture),
        ("HERMES_METER_SESSION_GRACE_SECONDS", "0"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000"),
    ];
    all.extend_from_slice(pairs);
    hermes_meter_test_support::export_configs(&all)
}

/// What a test exports: spans, or log records (content events) alone.
#[derive(Clone, Copy, PartialEq)]
enum What {
    Spans,
    Logs,
}

/// Exports the store of `pad` to `receiver` (over `protocol`, with the
/// settings `pairs`) through a driver until nothing waits.
fn export(
    receiver: &Receiver,
    protocol: &str,
    what: What,
    pad: impl Fn(usize) -> usize,
    pairs: &[(&str, &str)],
) -> Sent {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_of(dir.path(), pad);
    let capture = match what {
        What::Spans => "SPAN_ONLY",
        What::Logs => "EVENT_ONLY",
    };
    let (traces, logs) = configs(&receiver.grpc_endpoint(), protocol, capture, pairs);
    let (traces, logs) = match what {
        What::Spans => (Some(traces), None),
        What::Logs => (None, Some(logs)),
    };
    let mut driver = Driver::new(store.into_outbox(), traces, None, logs, Duration::from_secs(60)).expect("driver");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let cycle = driver.step(Some(Instant::now() + Duration::from_secs(10)));
        cycle.traces.expect("trace step");
        if let Some(logs) = cycle.logs {
            logs.expect("log step");
        }
        let spans = driver.store().export_state().expect("state");
        let logs = driver.store().log_export_state().expect("log state");
        let (pending, failed, exported, rejected) = match what {
            What::Spans => (spans.pending, spans.failed, spans.exported, spans.rejected),
            What::Logs => (logs.pending, logs.failed, logs.exported, logs.rejected),
        };
        if pending == 0 {
            return Sent {
                exported,
                rejected,
                failed,
                _dir: dir,
            };
        }
        assert!(Instant::now() < deadline, "not drained: {spans:?} {logs:?}");
    }
}

/// What the store counted once everything was sent.
struct Sent {
    exported: i64,
    rejected: i64,
    /// Sends that failed: a refusal as too large is never one.
    failed: i64,
    _dir: tempfile::TempDir,
}

impl Sent {
    /// The store counted `exported` items exported and `rejected` (too
    /// large alone) rejected, and no send failed.
    fn counted(&self, exported: usize, rejected: usize) {
        assert_eq!(
            (self.exported, self.rejected, self.failed),
            (exported as i64, rejected as i64, 0),
            "(exported, rejected, failed)"
        );
    }
}

fn span_ids(spans: &[Span]) -> Vec<(Vec<u8>, Vec<u8>)> {
    spans.iter().map(|s| (s.trace_id.clone(), s.span_id.clone())).collect()
}

fn uid(r: &LogRecord) -> String {
    match r
        .attributes
        .iter()
        .find(|kv| kv.key == "log.record.uid")
        .and_then(|kv| kv.value.clone())
    {
        Some(v) => match v.value {
            Some(Value::StringValue(s)) => s,
            other => panic!("uid {other:?}"),
        },
        None => panic!("a record without a uid"),
    }
}

/// Each item of `ids` once: no item arrived twice.
fn once<T: std::hash::Hash + Eq + Clone + std::fmt::Debug>(ids: &[T]) -> HashSet<T> {
    let set: HashSet<T> = ids.iter().cloned().collect();
    assert_eq!(set.len(), ids.len(), "an item arrived twice");
    set
}

/// The spans an unlimited receiver gets from the runs of `pad`.
fn reference_spans(pad: impl Fn(usize) -> usize) -> Vec<Span> {
    let receiver = hermes_meter_test_support::grpc(None, None);
    let sent = export(&receiver, "grpc", What::Spans, pad, &[]);
    assert_eq!((sent.rejected, sent.failed), (0, 0));
    receiver.received.spans()
}

/// The records an unlimited receiver gets from the runs of `pad`.
fn reference_records(pad: impl Fn(usize) -> usize) -> Vec<LogRecord> {
    let receiver = hermes_meter_test_support::grpc(None, None);
    let sent = export(&receiver, "grpc", What::Logs, pad, &[]);
    assert_eq!((sent.rejected, sent.failed), (0, 0));
    receiver.received.log_records()
}

/// A batch of spans over the receiver's maximum, each span well under it,
/// arrives whole over `receiver`, each span once, none rejected.
fn a_batch_over_the_maximum_arrives_whole_over(receiver: Receiver, protocol: &str, pairs: &[(&str, &str)]) {
    let reference = reference_spans(|_| PAD);
    let total: usize = reference.iter().map(|s| s.encoded_len()).sum();
    assert!(total > 4 * MAX_MESSAGE, "the batch is over the maximum: {total}");
    assert!(reference.iter().all(|s| s.encoded_len() < MAX_MESSAGE / 2));
    let sent = export(&receiver, protocol, What::Spans, |_| PAD, pairs);
    let got = once(&span_ids(&receiver.received.spans()));
    assert_eq!(got, once(&span_ids(&reference)), "every span arrived");
    sent.counted(reference.len(), 0);
    assert!(receiver.received.largest.load(Ordering::SeqCst) <= MAX_MESSAGE);
}

#[test]
fn over_grpc_a_batch_larger_than_the_collector_takes_arrives_whole_each_span_once() {
    a_batch_over_the_maximum_arrives_whole_over(hermes_meter_test_support::grpc_max(MAX_MESSAGE), "grpc", &[]);
}

#[test]
fn over_http_a_batch_refused_as_the_collector_does_arrives_whole_each_span_once() {
    let receiver = hermes_meter_test_support::http_max(MAX_MESSAGE, TooLarge::Collector400);
    a_batch_over_the_maximum_arrives_whole_over(receiver, "http/protobuf", &[]);
}

#[test]
fn over_http_a_batch_refused_by_a_proxy_with_413_arrives_whole_each_span_once() {
    let receiver = hermes_meter_test_support::http_max(MAX_MESSAGE, TooLarge::Proxy413);
    a_batch_over_the_maximum_arrives_whole_over(
        receiver,
        "http/protobuf",
        &[("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")],
    );
}

#[test]
fn under_a_configured_limit_below_the_collectors_no_request_is_refused() {
    let receiver = hermes_meter_test_support::http_max(MAX_MESSAGE, TooLarge::Collector400);
    let limit = (MAX_MESSAGE / 2).to_string();
    let pairs = [("HERMES_METER_EXPORT_MAX_REQUEST_BYTES", limit.as_str())];
    a_batch_over_the_maximum_arrives_whole_over(receiver, "http/protobuf", &pairs);
    // Refusals are counted only over HTTP, hence this test's protocol.
    let receiver = hermes_meter_test_support::http_max(MAX_MESSAGE, TooLarge::Collector400);
    export(&receiver, "http/protobuf", What::Spans, |_| PAD, &pairs);
    assert_eq!(receiver.received.too_large.load(Ordering::SeqCst), 0);
    assert!(receiver.received.largest.load(Ordering::SeqCst) <= MAX_MESSAGE / 2);
    assert!(
        receiver.received.requests.load(Ordering::SeqCst) > 4,
        "the batch went in parts"
    );
}

/// The spans of `spans` in the session too large to send whole, and the
/// rest.
fn of_the_big_session(spans: &[Span]) -> (Vec<Span>, Vec<Span>) {
    spans.iter().cloned().partition(|s| s.encoded_len() > MAX_MESSAGE)
}

fn pad_one_big(i: usize) -> usize {
    if i == BIG {
        BIG_PAD
    } else {
        PAD
    }
}

/// A span too large alone is counted rejected, once, and every other span
/// arrives once, over `receiver`.
fn a_lone_span_too_large_is_rejected_and_the_rest_arrive_over(receiver: Receiver, protocol: &str) {
    let reference = reference_spans(pad_one_big);
    let (big, rest) = of_the_big_session(&reference);
    assert!(!big.is_empty(), "some spans are too large alone");
    let sent = export(&receiver, protocol, What::Spans, pad_one_big, &[]);
    let got = once(&span_ids(&receiver.received.spans()));
    assert_eq!(got, once(&span_ids(&rest)), "every other span arrived");
    sent.counted(rest.len(), big.len());
}

#[test]
fn over_grpc_a_span_too_large_alone_is_counted_rejected_and_the_rest_arrive() {
    a_lone_span_too_large_is_rejected_and_the_rest_arrive_over(
        hermes_meter_test_support::grpc_max(MAX_MESSAGE),
        "grpc",
    );
}

#[test]
fn over_http_a_span_too_large_alone_is_counted_rejected_and_the_rest_arrive() {
    let receiver = hermes_meter_test_support::http_max(MAX_MESSAGE, TooLarge::Collector400);
    a_lone_span_too_large_is_rejected_and_the_rest_arrive_over(receiver, "http/protobuf");
}

/// Log records too large together arrive whole, and one too large alone
/// is counted rejected while the rest arrive, each once, over `receiver`.
fn log_records_are_split_and_a_lone_one_rejected_over(receiver: impl Fn() -> Receiver, protocol: &str) {
    // Together over the maximum, each under it.
    let reference = reference_records(|_| PAD);
    let total: usize = reference.iter().map(|r| r.encoded_len()).sum();
    assert!(total > 2 * MAX_MESSAGE, "the batch is over the maximum: {total}");
    let limited = receiver();
    let sent = export(&limited, protocol, What::Logs, |_| PAD, &[]);
    let uids: Vec<String> = limited.received.log_records().iter().map(uid).collect();
    let want: Vec<String> = reference.iter().map(uid).collect();
    assert_eq!(once(&uids), once(&want), "every record arrived");
    sent.counted(reference.len(), 0);

    // One session's content events too large alone.
    let reference = reference_records(pad_one_big);
    let (big, rest): (Vec<LogRecord>, Vec<LogRecord>) =
        reference.into_iter().partition(|r| r.encoded_len() > MAX_MESSAGE);
    assert!(!big.is_empty(), "some records are too large alone");
    let limited = receiver();
    let sent = export(&limited, protocol, What::Logs, pad_one_big, &[]);
    let uids: Vec<String> = limited.received.log_records().iter().map(uid).collect();
    let want: Vec<String> = rest.iter().map(uid).collect();
    assert_eq!(once(&uids), once(&want), "every other record arrived");
    sent.counted(rest.len(), big.len());
}

#[test]
fn over_grpc_log_records_too_large_together_arrive_and_one_too_large_alone_is_rejected() {
    log_records_are_split_and_a_lone_one_rejected_over(|| hermes_meter_test_support::grpc_max(MAX_MESSAGE), "grpc");
}

#[test]
fn over_http_log_records_too_large_together_arrive_and_one_too_large_alone_is_rejected() {
    log_records_are_split_and_a_lone_one_rejected_over(
        || hermes_meter_test_support::http_max(MAX_MESSAGE, TooLarge::Collector400),
        "http/protobuf",
    );
}

/// A part the collector accepted leaves the outbox at once: when the next
/// part of the same batch fails and is sent again, the first part's spans
/// are not sent a second time.
#[test]
fn a_part_accepted_before_a_failure_is_not_sent_again_with_the_rest() {
    let reference = reference_spans(|_| PAD);
    let receiver = hermes_meter_test_support::grpc_max(MAX_MESSAGE);
    let accept = hermes_meter_test_support::Answer::Partial {
        rejected: 0,
        message: String::new(),
    };
    let unavailable = hermes_meter_test_support::Answer::Status {
        code: tonic::Code::Unavailable,
        retry_info: None,
    };
    receiver.received.answer([accept.clone(), accept, unavailable]);
    let limit = (MAX_MESSAGE / 2).to_string();
    let pairs = [("HERMES_METER_EXPORT_MAX_REQUEST_BYTES", limit.as_str())];
    let sent = export(&receiver, "grpc", What::Spans, |_| PAD, &pairs);
    assert_eq!(sent.failed, 1, "the third part failed once");
    let got = once(&span_ids(&receiver.received.spans()));
    assert_eq!(got, once(&span_ids(&reference)), "every span arrived, each once");
    assert_eq!((sent.exported, sent.rejected), (reference.len() as i64, 0));
}

/// An OTLP/HTTP "collector" that takes each request and answers 200 with a
/// body that never ends (until the client goes away).
fn endless_answers() -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut out = stream;
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                if out
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .is_err()
                {
                    return;
                }
                let chunk = vec![b'x'; 64 << 10];
                loop {
                    let head = format!("{:x}\r\n", chunk.len());
                    if out
                        .write_all(head.as_bytes())
                        .and_then(|()| out.write_all(&chunk))
                        .and_then(|()| out.write_all(b"\r\n"))
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

#[test]
fn a_collector_that_answers_endlessly_is_read_to_a_bound_and_its_200_counts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store_of(dir.path(), |_| 16);
    let (traces, _) = configs(&endless_answers(), "http/protobuf", "false", &[]);
    let mut driver =
        Driver::new(store.into_outbox(), Some(traces), None, None, Duration::from_secs(60)).expect("driver");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let cycle = driver.step(Some(Instant::now() + Duration::from_secs(20)));
        cycle.traces.expect("trace step");
        let state = driver.store().export_state().expect("state");
        if state.pending == 0 {
            // Each 200 counted (the answer past the bound is not read): no
            // send timed out reading it.
            assert!(state.exported > 0 && state.failed == 0, "{state:?}");
            break;
        }
        assert!(Instant::now() < deadline, "not drained: {state:?}");
    }
}

#[test]
fn a_grpc_answer_over_the_clients_decoding_limit_is_an_accepted_request_not_a_refused_one() {
    // Each answer an OTLP partial success whose message is over tonic's
    // 4 MiB decoding limit: the collector took every span, the client
    // cannot read what it said.
    let receiver = hermes_meter_test_support::grpc(None, None);
    receiver
        .received
        .answer((0..64).map(|_| hermes_meter_test_support::Answer::Partial {
            rejected: 0,
            message: "x".repeat(5 << 20),
        }));
    let sent = export(&receiver, "grpc", What::Spans, |_| PAD, &[]);
    let spans = receiver.received.spans();
    sent.counted(spans.len(), 0);
    assert_eq!(once(&span_ids(&spans)).len(), spans.len(), "each span sent once");
}

/// A burst of "too large" answers (a proxy's hiccup, a collector busy)
/// rejects nothing: what it refused arrives once it takes requests again.
fn a_burst_of_too_large_answers_loses_nothing_over(
    receiver: Receiver,
    protocol: &str,
    answer: hermes_meter_test_support::Answer,
) {
    // Enough refusals to split the batch down to single spans and refuse
    // some of those too: every one of them would have been rejected.
    receiver.received.answer(std::iter::repeat_n(answer, 8));
    let sent = export(&receiver, protocol, What::Spans, |_| PAD, &[]);
    let want = reference_spans(|_| PAD);
    let got = once(&span_ids(&receiver.received.spans()));
    assert_eq!(got, once(&span_ids(&want)), "every span arrived, once");
    assert_eq!(
        (sent.exported, sent.rejected),
        (want.len() as i64, 0),
        "(exported, rejected)"
    );
}

#[test]
fn over_http_a_burst_of_413_answers_rejects_nothing() {
    a_burst_of_too_large_answers_loses_nothing_over(
        hermes_meter_test_support::http(None),
        "http/protobuf",
        hermes_meter_test_support::Answer::Http {
            status: 413,
            retry_after: None,
        },
    );
}

#[test]
fn over_grpc_a_burst_of_resource_exhausted_too_large_answers_rejects_nothing() {
    a_burst_of_too_large_answers_loses_nothing_over(
        hermes_meter_test_support::grpc(None, None),
        "grpc",
        hermes_meter_test_support::Answer::StatusMessage {
            code: tonic::Code::ResourceExhausted,
            message: "grpc: received message larger than max (9000000 vs. 4194304)".into(),
        },
    );
}
