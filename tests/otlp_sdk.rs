//! The OpenTelemetry SDK's own OTLP span exporter (`opentelemetry-otlp`
//! 0.33, `opentelemetry_sdk` 0.33), held to the promises our transport
//! (`crates/hermes-meter-runtime/src/export/transport.rs`) makes, against the same in-process loopback
//! receivers as `tests/export.rs`.
//!
//! This is an evaluation, not a use: the exporter does not depend on these
//! crates (they are dev-dependencies only). Each test asserts what the SDK
//! does today. A test of a promise the SDK breaks says which one; if a later
//! SDK keeps it, the test fails, and the finding in ARCHITECTURE.md ("Why
//! the span transport is our own") should be looked at again.

use std::borrow::Cow;
use std::time::{Duration, Instant, SystemTime};

use hermes_meter_test_support::Answer;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Compression, Protocol, RetryPolicy, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use prost::Message;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// Every export here is bounded by this; none comes near it.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A test's runtime: the SDK's gRPC channel is built inside one (tonic
/// spawns its connection task), and the hyper client runs on one, as our
/// transport's do. Each test enters it before building an exporter.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A span as our exporter would hand one over: ids from `span::ids` (hashes
/// of Hermes ids), built by hand rather than by the SDK's tracer.
fn our_span(session: &str, turn: &str) -> SpanData {
    let trace = hermes_meter_model::span::trace_id(&["session", session]);
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(trace),
            SpanId::from_bytes(hermes_meter_model::span::turn_span_id(turn)),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        ),
        parent_span_id: SpanId::from_bytes(hermes_meter_model::span::session_span_id(session)),
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: Cow::Borrowed("invoke_agent hermes"),
        start_time: start,
        end_time: start + Duration::from_millis(1500),
        attributes: vec![opentelemetry::KeyValue::new("hermes.turn.outcome", "ok")],
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: InstrumentationScope::builder("hermes-meter").build(),
    }
}

fn batch(n: usize) -> Vec<SpanData> {
    (0..n).map(|i| our_span("s-1", &format!("t-{i}"))).collect()
}

/// The SDK's gRPC span exporter to `endpoint`, with `retry` as its policy.
fn grpc_exporter(endpoint: &str, retry: RetryPolicy) -> opentelemetry_otlp::SpanExporter {
    opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(TIMEOUT)
        .with_retry_policy(retry)
        .build()
        .expect("sdk grpc exporter")
}

/// The SDK's gRPC span exporter over TLS as `tls` says, without retries.
fn grpc_tls_exporter(endpoint: String, tls: ClientTlsConfig) -> opentelemetry_otlp::SpanExporter {
    opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(TIMEOUT)
        .with_tls_config(tls)
        .with_retry_policy(RetryPolicy::disabled())
        .build()
        .expect("sdk grpc exporter")
}

/// The SDK's OTLP/HTTP (protobuf, hyper client) span exporter.
fn http_exporter(endpoint: &str, retry: RetryPolicy) -> opentelemetry_otlp::SpanExporter {
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(TIMEOUT)
        .with_retry_policy(retry)
        .build()
        .expect("sdk http exporter")
}

// Kept: deterministic ids. Spans built by hand go out with our trace, span
// and parent ids unchanged (the SDK's id generator is a tracer's, not the
// exporter's).
#[test]
fn the_sdk_sends_our_own_trace_span_and_parent_ids_unchanged() {
    let rt = runtime();
    let _in = rt.enter();
    let receiver = hermes_meter_test_support::grpc(None, None);
    let spans = batch(2);
    let result = rt.block_on(grpc_exporter(&receiver.grpc_endpoint(), RetryPolicy::disabled()).export(spans.clone()));
    assert!(result.is_ok(), "{result:?}");
    let got = receiver.received.spans();
    assert_eq!(got.len(), 2);
    for (sent, got) in spans.iter().zip(&got) {
        assert_eq!(got.trace_id, sent.span_context.trace_id().to_bytes().to_vec());
        assert_eq!(got.span_id, sent.span_context.span_id().to_bytes().to_vec());
        assert_eq!(got.parent_span_id, sent.parent_span_id.to_bytes().to_vec());
    }
}

// Kept, at the exporter (not at the SDK's batch processor, which drops a
// batch whose export failed): `export` is `Ok` only once the collector
// answered OK, and an error while the collector refuses. With retries off
// the outbox could mark rows on `Ok` and keep them on `Err`.
#[test]
fn the_sdk_export_is_ok_only_after_the_collector_accepted() {
    let rt = runtime();
    let _in = rt.enter();
    let receiver = hermes_meter_test_support::grpc(None, None);
    receiver.received.answer([Answer::Status {
        code: tonic::Code::Unavailable,
        retry_info: None,
    }]);
    let exporter = grpc_exporter(&receiver.grpc_endpoint(), RetryPolicy::disabled());
    let refused = rt.block_on(exporter.export(batch(3)));
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(receiver.received.span_count(), 0);
    let accepted = rt.block_on(exporter.export(batch(3)));
    assert!(accepted.is_ok(), "{accepted:?}");
    assert_eq!(receiver.received.span_count(), 3);

    // A collector that is not there is an error too, not a silent drop.
    let gone = hermes_meter_test_support::free_addr();
    let result = rt.block_on(grpc_exporter(&format!("http://{gone}"), RetryPolicy::disabled()).export(batch(1)));
    assert!(result.is_err(), "{result:?}");
}

// Broken: partial success. Our transport returns `rejected_spans` to the
// export loop, which counts them as `rejected` (not `exported`) in the
// outbox and `status`. The SDK only logs them (`TonicTracesClient.
// PartialSuccess`) and returns `Ok(())`: its result type has no room for
// the number, so rejected spans would be counted as delivered.
#[test]
fn the_sdk_hides_a_partial_success_over_grpc() {
    let rt = runtime();
    let _in = rt.enter();
    let receiver = hermes_meter_test_support::grpc(None, None);
    receiver.received.answer([Answer::Partial {
        rejected: 2,
        message: "2 spans too old".into(),
    }]);
    let result: Result<(), OTelSdkError> =
        rt.block_on(grpc_exporter(&receiver.grpc_endpoint(), RetryPolicy::disabled()).export(batch(3)));
    assert!(
        result.is_ok(),
        "a partial success is reported as plain success: {result:?}"
    );
    assert_eq!(receiver.received.requests.load(std::sync::atomic::Ordering::SeqCst), 1);
}

// Broken: partial success, over OTLP/HTTP the same way
// (`HttpTraceClient.PartialSuccess` is a log event only).
#[test]
fn the_sdk_hides_a_partial_success_over_http() {
    let rt = runtime();
    let _in = rt.enter();
    let receiver = hermes_meter_test_support::http(None);
    receiver.received.answer([Answer::Partial {
        rejected: 2,
        message: "2 spans too old".into(),
    }]);
    let result = rt.block_on(http_exporter(&receiver.http_endpoint(), RetryPolicy::disabled()).export(batch(3)));
    assert!(
        result.is_ok(),
        "a partial success is reported as plain success: {result:?}"
    );
    assert_eq!(receiver.received.span_count(), 3);
}

/// The one thing a failed SDK export tells its caller: a message "for
/// logging purposes only" (`OTelSdkError::InternalFailure`'s docs).
fn failure_text(result: Result<(), OTelSdkError>) -> String {
    match result {
        Err(OTelSdkError::InternalFailure(message)) => message,
        other => panic!("expected InternalFailure, got {other:?}"),
    }
}

// Broken: retry classification with `RetryInfo`. The SDK reads a
// RESOURCE_EXHAUSTED's `RetryInfo` for its own retry loop, but what reaches
// the caller is a string with the code's name: the delay (7 s here) is gone.
// Our outbox waits out the collector's delay across attempts (and across
// processes, through the export lease) and shows it in `status`; from this
// error it could only guess.
#[test]
fn the_sdk_does_not_surface_a_grpc_retry_info_delay() {
    let rt = runtime();
    let _in = rt.enter();
    let receiver = hermes_meter_test_support::grpc(None, None);
    receiver.received.answer([Answer::Status {
        code: tonic::Code::ResourceExhausted,
        retry_info: Some(Duration::from_secs(7)),
    }]);
    let result = rt.block_on(grpc_exporter(&receiver.grpc_endpoint(), RetryPolicy::disabled()).export(batch(1)));
    let text = failure_text(result);
    assert!(text.contains("ResourceExhausted"), "{text}");
    assert!(!text.contains('7'), "the delay is not in the error: {text}");
}

// Broken: retry classification. Our classifier turns UNIMPLEMENTED (a
// trace-only or metric-only backend) into "unsupported, try again in 15
// minutes", INVALID_ARGUMENT into "permanent, retry slowly", UNAVAILABLE
// into "retry soon". The SDK flattens all three into the same error
// variant, told apart only by free text its docs say not to parse.
#[test]
fn the_sdk_flattens_every_grpc_failure_into_one_error_variant() {
    let rt = runtime();
    let _in = rt.enter();
    let receiver = hermes_meter_test_support::grpc(None, None);
    let codes = [
        tonic::Code::Unavailable,
        tonic::Code::InvalidArgument,
        tonic::Code::Unimplemented,
    ];
    receiver
        .received
        .answer(codes.map(|code| Answer::Status { code, retry_info: None }));
    let exporter = grpc_exporter(&receiver.grpc_endpoint(), RetryPolicy::disabled());
    for code in codes {
        let text = failure_text(rt.block_on(exporter.export(batch(1))));
        assert!(text.contains(&format!("{code:?}")), "{code:?}: {text}");
    }
}

// Broken: retry classification over HTTP. A 429 with `Retry-After: 7`
// reaches the caller as text; the delay is not there either.
#[test]
fn the_sdk_does_not_surface_an_http_retry_after_delay() {
    let rt = runtime();
    let _in = rt.enter();
    let receiver = hermes_meter_test_support::http(None);
    receiver.received.answer([Answer::Http {
        status: 429,
        retry_after: Some(7),
    }]);
    let result = rt.block_on(http_exporter(&receiver.http_endpoint(), RetryPolicy::disabled()).export(batch(1)));
    let text = failure_text(result);
    assert!(text.contains("429"), "{text}");
    assert!(!text.contains("7 s") && !text.contains("7s"), "{text}");
}

// Broken unless turned off: the SDK retries inside `export` by default
// (3 retries, 100 ms to 1.6 s apart, within the export timeout), so one
// call hides failed attempts from the caller and holds its thread through
// the backoff. Our outbox owns the schedule (`retry::Backoff`, the export
// lease, `status`'s last error). `RetryPolicy::disabled()` gives one attempt
// per call, which the tests above use.
#[test]
fn the_sdk_retries_inside_export_unless_told_not_to() {
    let rt = runtime();
    let _in = rt.enter();
    let receiver = hermes_meter_test_support::grpc(None, None);
    let unavailable = Answer::Status {
        code: tonic::Code::Unavailable,
        retry_info: None,
    };
    receiver.received.answer([unavailable.clone(), unavailable]);
    let started = Instant::now();
    let result = rt.block_on(grpc_exporter(&receiver.grpc_endpoint(), RetryPolicy::default()).export(batch(1)));
    assert!(
        result.is_ok(),
        "two refusals, then success, reported as one success: {result:?}"
    );
    assert_eq!(receiver.received.requests.load(std::sync::atomic::Ordering::SeqCst), 3);
    // At least the two backoffs' 100 ms and 200 ms (jitter only adds).
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
}

// Kept: gzip. Asked for in code (or by `OTEL_EXPORTER_OTLP_TRACES_COMPRESSION`),
// the HTTP body goes out gzipped; the receiver counts wire bytes.
#[test]
fn the_sdk_gzips_http_bodies() {
    let rt = runtime();
    let _in = rt.enter();
    let receiver = hermes_meter_test_support::http(None);
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(receiver.http_endpoint())
        .with_timeout(TIMEOUT)
        .with_compression(Compression::Gzip)
        .with_retry_policy(RetryPolicy::disabled())
        .build()
        .expect("sdk http exporter");
    let spans = batch(50);
    let result = rt.block_on(exporter.export(spans));
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(receiver.received.span_count(), 50);
    let plain: usize = receiver.received.spans().iter().map(|s| s.encoded_len()).sum();
    let wire = receiver.received.body_bytes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(wire < plain / 2, "gzip: {wire} bytes on the wire for {plain} of spans");
}

// Kept, in code only: mutual TLS over gRPC. Given a `ClientTlsConfig` with
// our CA and client identity, the SDK presents the certificate to a
// collector that asks for one. (See the next test for the variables.)
#[test]
fn the_sdk_presents_a_client_certificate_given_in_code() {
    let rt = runtime();
    let _in = rt.enter();
    let pki = hermes_meter_test_support::pki();
    let receiver = hermes_meter_test_support::grpc_tls(
        None,
        Some(hermes_meter_test_support::ServerTls {
            cert: pki.server.0.clone(),
            key: pki.server.1.clone(),
            client_ca: Some(pki.ca.clone()),
        }),
    );
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pki.ca))
        .identity(Identity::from_pem(&pki.client.0, &pki.client.1));
    let exporter = grpc_tls_exporter(format!("https://localhost:{}", receiver.addr.port()), tls);
    let result = rt.block_on(exporter.export(batch(2)));
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(receiver.received.span_count(), 2);
}

// Broken: per-signal `OTEL_*`. The SDK reads the traces endpoint, headers,
// timeout, compression, protocol and insecure variables, but not
// `OTEL_EXPORTER_OTLP_{,TRACES_}CERTIFICATE`, `_CLIENT_CERTIFICATE` or
// `_CLIENT_KEY`: with the CA file named there (as a user sets it for us),
// the SDK does not trust the collector and nothing is sent. This is the
// only test here that sets process variables; no other test reads these
// two (every other exporter is given its endpoint in code, which wins).
#[test]
fn the_sdk_ignores_the_certificate_variables() {
    let rt = runtime();
    let _in = rt.enter();
    let (cert, key) = hermes_meter_test_support::self_signed();
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &cert).expect("write ca");
    let receiver = hermes_meter_test_support::grpc(None, Some((cert, key)));
    let endpoint = format!("https://localhost:{}", receiver.addr.port());

    std::env::set_var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint);
    std::env::set_var("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", &ca);
    let built = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_timeout(TIMEOUT)
        .with_retry_policy(RetryPolicy::disabled())
        .build();
    std::env::remove_var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    std::env::remove_var("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE");

    // The endpoint variable was read (the request went to our receiver's
    // port over TLS), the certificate variable was not (the handshake
    // failed on an unknown CA).
    let result = rt.block_on(built.expect("sdk grpc exporter").export(batch(1)));
    let text = failure_text(result);
    assert!(text.contains("UnknownIssuer"), "{text}");
    assert_eq!(receiver.received.span_count(), 0);

    // The same CA given in code is trusted: the variable is what is missing.
    let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(std::fs::read(&ca).expect("read ca")));
    let exporter = grpc_tls_exporter(endpoint, tls);
    let result = rt.block_on(exporter.export(batch(1)));
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(receiver.received.span_count(), 1);
}

// Broken: TLS (and so mutual TLS) over OTLP/HTTP. The HTTP builder has no
// TLS setting at all (no CA, no client certificate, in code or from the
// variables), and its hyper client (the `hyper-client` feature) is built on
// hyper's plain `HttpConnector` ("TODO - support configuring custom
// connector"): an `https://` collector is out of reach unless we write the
// TLS connector ourselves and hand the SDK a whole HTTP client
// (`with_http_client`). (The reqwest clients can do TLS with built-in
// roots, but still take no CA file or client certificate from us.)
#[test]
fn the_sdk_http_client_cannot_reach_an_https_collector() {
    let rt = runtime();
    let _in = rt.enter();
    let pki = hermes_meter_test_support::pki();
    let receiver = hermes_meter_test_support::https(hermes_meter_test_support::ServerTls {
        cert: pki.server.0.clone(),
        key: pki.server.1.clone(),
        client_ca: None,
    });
    let endpoint = format!("https://localhost:{}/v1/traces", receiver.addr.port());
    let result = rt.block_on(http_exporter(&endpoint, RetryPolicy::disabled()).export(batch(1)));
    assert!(result.is_err(), "{result:?}");
    assert_eq!(receiver.received.span_count(), 0);
}
