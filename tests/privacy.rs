//! Privacy: prompts, responses and tool arguments stay out of the store and
//! out of telemetry unless content capture is on; with it on they arrive in
//! the GenAI semconv shape, redacted and capped; OTLP header values never
//! show in `status` or in an export error.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_runtime::export::{ExportConfig, ExportOverrides, Exporter};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// Text from the recorded fixtures that is prompt, response, tool argument,
/// tool result, subagent goal or an error echoing them.
const CONTENT: &[&str] = &[
    "READFILE please read hello.txt",
    "MOCK-FINAL-ANSWER",
    "/home/user/work/hello.txt",
    "/home/user/work/missing.txt",
    "hello from e2e file",
    "Say CHILD-OK",
    "mock upstream exploded",
    "You are Hermes Agent",
];

const CAPTURE: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

fn config(endpoint: &str, extra: &[(&str, &str)]) -> ExportConfig {
    let mut map: HashMap<String, String> = [
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint),
        ("HERMES_METER_SESSION_GRACE_SECONDS", "0"),
        ("HERMES_METER_IDLE_TIMEOUT_SECONDS", "60"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    map.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    ExportConfig::resolve(ExportOverrides::default(), move |k| map.get(k).cloned())
}

fn fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("jsonl"))
        .collect();
    v.sort();
    v
}

fn replay(store: &mut Writer, files: &[PathBuf], capture_content: bool) {
    let opts = DecodeOptions {
        capture_content,
        ..DecodeOptions::default()
    };
    let mut stats = ReplayStats::default();
    for f in files {
        replay_file(store, f, opts, &mut stats).expect("replay");
    }
    assert!(stats.bad_lines.is_empty(), "{:?}", stats.bad_lines);
}

/// Replays `files` into a fresh store, exports everything to a gRPC
/// receiver and returns the spans and the store directory. Capture is on
/// or off for both.
fn export(files: &[PathBuf], capture_content: bool) -> (Vec<Span>, tempfile::TempDir) {
    export_with(files, capture_content, capture_content)
}

/// [`export`], capturing while replaying and exporting as told.
fn export_with(files: &[PathBuf], capture: bool, export_content: bool) -> (Vec<Span>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let receiver = hermes_meter_test_support::grpc(None, None);
    let mut store = Writer::open(&dir.path().join("hermes-meter.db")).expect("open store");
    replay(&mut store, files, capture);
    let content = [(CAPTURE, if export_content { "true" } else { "false" })];
    let mut exporter =
        Exporter::with_store(config(&receiver.grpc_endpoint(), &content), store.into_outbox()).expect("exporter");
    exporter.close_idle().expect("close idle");
    let step = exporter.flush(Instant::now() + Duration::from_secs(30)).expect("flush");
    assert!(step.error.is_none(), "{step:?}");
    assert_eq!(exporter.store().export_state().expect("state").pending, 0);
    drop(exporter);
    (receiver.received.spans(), dir)
}

/// Every string a span carries: name, status message, attribute values,
/// event and link attributes.
fn span_text(span: &Span) -> String {
    let mut out = format!("{} {:?}", span.name, span.status);
    for kv in &span.attributes {
        out.push_str(&format!(" {}={:?}", kv.key, kv.value));
    }
    for e in &span.events {
        out.push_str(&format!(" {e:?}"));
    }
    out
}

/// Every byte of every file in the store directory (database, WAL, spool):
/// freed pages included, so nothing hides in a deleted row.
fn store_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read store dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.extend(std::fs::read(&path).expect("read store file"));
            }
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a str> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match v.value.as_ref() {
            Some(AnyValue::StringValue(s)) => Some(s.as_str()),
            _ => None,
        })
}

#[test]
fn with_capture_off_no_prompt_response_or_tool_text_reaches_the_receiver_or_the_store() {
    let files = fixtures();
    // The needles are really in the fixtures.
    let all: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("read"))
        .collect();
    for needle in CONTENT {
        assert!(all.contains(needle), "{needle} is not in the fixtures");
    }
    let (spans, dir) = export(&files, false);
    assert!(spans.len() > 50, "only {} spans", spans.len());
    for span in &spans {
        let text = span_text(span);
        for needle in CONTENT {
            assert!(!text.contains(needle), "{needle:?} reached the receiver: {text}");
        }
        for name in [
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            assert!(attr(span, name).is_none(), "{name} on {}", span.name);
        }
    }
    let bytes = store_bytes(dir.path());
    assert!(bytes.len() > 10_000);
    for needle in CONTENT {
        assert!(!contains(&bytes, needle), "{needle:?} is in the store");
    }
}

/// The readfile fixture with secrets and a very long text planted in its
/// prompt, answer, tool arguments and tool result.
fn planted(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(Path::new(FIXTURES).join("readfile.jsonl")).expect("fixture");
    let long = "L".repeat(300_000);
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut r: Value = serde_json::from_str(line).expect("json");
        let hook = r["hook"].as_str().expect("hook").to_string();
        let kw = r["kwargs"].as_object_mut().expect("kwargs");
        match hook.as_str() {
            "pre_api_request" => {
                let msgs = kw["request_messages"].as_array_mut().expect("messages");
                msgs.push(json!({"role": "user", "content": format!(
                    "my key is sk-ant-api03-PLANTEDSECRET0123456789 and OPENAI_API_KEY=PLANTEDENV123 {long}"
                )}));
            }
            "post_api_request" => {
                let fields = &mut kw["assistant_message"]["fields"];
                if fields["content"].as_str() == Some("MOCK-FINAL-ANSWER") {
                    fields["content"] = json!("MOCK-FINAL-ANSWER, see https://admin:PLANTEDPASS@db.example.com/x");
                }
            }
            "pre_tool_call" | "post_tool_call" => {
                kw["args"]["api_key"] = json!("PLANTEDARGKEY");
                kw["args"]["note"] = json!(long.clone());
                if hook == "post_tool_call" {
                    let result = kw["result"].as_str().expect("result").to_string();
                    let mut parsed: Value = serde_json::from_str(&result).expect("result json");
                    parsed["curl"] = json!("curl -H 'Authorization: Bearer PLANTEDBEARER0123'");
                    kw["result"] = json!(parsed.to_string());
                }
            }
            _ => {}
        }
        out.push_str(&r.to_string());
        out.push('\n');
    }
    let path = dir.join("planted.jsonl");
    std::fs::write(&path, out).expect("write");
    path
}

const PLANTED: &[&str] = &[
    "PLANTEDSECRET",
    "PLANTEDENV",
    "PLANTEDPASS",
    "PLANTEDARGKEY",
    "PLANTEDBEARER",
];

#[test]
fn content_captured_earlier_stays_home_once_capture_is_off() {
    let content = [
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    ];
    let has_content = |spans: &[Span]| spans.iter().any(|s| content.iter().any(|name| attr(s, name).is_some()));
    // Captured and exported with capture on: the content goes out.
    let (spans, _dir) = export_with(&fixtures(), true, true);
    assert!(has_content(&spans));
    // Captured, then capture turned off before the export: none of it does.
    let (spans, _dir) = export_with(&fixtures(), true, false);
    assert!(!spans.is_empty());
    assert!(
        !has_content(&spans),
        "captured content left after capture was turned off"
    );
}

#[test]
fn with_capture_on_content_arrives_in_semconv_shape_redacted_and_capped() {
    let work = tempfile::tempdir().expect("temp dir");
    let file = planted(work.path());
    let (spans, dir) = export(&[file], true);
    let max = DecodeOptions::default().max_content_bytes;

    for span in &spans {
        let text = span_text(span);
        for secret in PLANTED {
            assert!(!text.contains(secret), "{secret} reached the receiver: {text:.300}");
        }
        for name in [
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        ] {
            if let Some(v) = attr(span, name) {
                assert!(v.len() <= max, "{name} is {} bytes", v.len());
                serde_json::from_str::<Value>(v).unwrap_or_else(|e| panic!("{name} is not JSON ({e}): {v:.200}"));
            }
        }
    }
    let bytes = store_bytes(dir.path());
    for secret in PLANTED {
        assert!(!contains(&bytes, secret), "{secret} is in the store");
    }

    let chats: Vec<&Span> = spans.iter().filter(|s| s.name.starts_with("chat ")).collect();
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        let input: Value =
            serde_json::from_str(attr(chat, "gen_ai.input.messages").expect("input messages")).expect("json");
        let messages = input.as_array().expect("a list");
        for m in messages.iter().filter(|m| m.is_object()) {
            assert!(m["role"].is_string(), "{m}");
            for part in m["parts"].as_array().expect("parts") {
                assert!(part["type"].is_string(), "{part}");
            }
        }
        let user = messages.iter().find(|m| m["role"] == "user").expect("a user message");
        assert_eq!(
            user["parts"][0],
            json!({"type": "text", "content": "READFILE please read hello.txt"})
        );
        let whole = input.to_string();
        assert!(whole.contains("[REDACTED]"), "{whole:.300}");
        assert!(whole.contains("truncated"), "{whole:.300}");
    }
    let outputs: Vec<Value> = chats
        .iter()
        .filter_map(|s| attr(s, "gen_ai.output.messages"))
        .map(|v| serde_json::from_str(v).expect("json"))
        .collect();
    assert_eq!(
        outputs,
        vec![json!([{
            "role": "assistant",
            "parts": [{"type": "text", "content": "MOCK-FINAL-ANSWER, see https://admin:[REDACTED]@db.example.com/x"}],
            "finish_reason": "stop",
        }])]
    );

    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool read_file")
        .expect("tool span");
    let args: Value = serde_json::from_str(attr(tool, "gen_ai.tool.call.arguments").expect("arguments")).expect("json");
    assert_eq!(args["path"], "/home/user/work/hello.txt");
    assert_eq!(args["api_key"], "[REDACTED]");
    assert!(args["note"].as_str().expect("note").contains("truncated"));
    let result: Value = serde_json::from_str(attr(tool, "gen_ai.tool.call.result").expect("result")).expect("json");
    assert!(result["content"]
        .as_str()
        .expect("content")
        .contains("hello from e2e file"));
    assert_eq!(result["curl"], "curl -H 'Authorization: Bearer [REDACTED]'");
}

const HEADER_SECRET: &str = "s3cr3t-t0ken-NEVER-SHOWN";

/// `hermes-meter status` and `status --json`, with the secret header set.
fn status(home: &Path, endpoint: &str, json: bool) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hermes-meter"));
    cmd.arg("status");
    if json {
        cmd.arg("--json");
    }
    let out = cmd
        .env("HERMES_METER_HOME", home)
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("authorization=Bearer%20{HEADER_SECRET},x-api-key={HEADER_SECRET}2"),
        )
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .output()
        .expect("run status");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// An HTTP server that answers every request 401, echoing the request's
/// `Authorization` header in a response header and the body.
fn echoing_http_server() -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handle = std::thread::spawn(move || {
        listener.set_nonblocking(false).expect("blocking");
        for stream in listener.incoming().take(4) {
            let Ok(mut stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut auth = String::new();
            let mut len = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if lower.starts_with("authorization:") {
                    auth = line.trim().to_string();
                }
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; len];
            let _ = std::io::Read::read_exact(&mut reader, &mut body);
            let answer = format!("denied: {auth}");
            let _ = write!(
                stream,
                "HTTP/1.1 401 Unauthorized\r\ncontent-length: {}\r\nx-echo: {auth}\r\n\r\n{answer}",
                answer.len()
            );
        }
    });
    (format!("http://{addr}/v1/traces"), handle)
}

#[test]
fn otlp_header_values_never_show_in_status_or_export_errors() {
    let home = tempfile::tempdir().expect("temp dir");
    let (endpoint, _server) = echoing_http_server();
    for json in [false, true] {
        let text = status(home.path(), &endpoint, json);
        assert!(text.contains("headers"), "{text}");
        assert!(!text.contains(HEADER_SECRET), "{text}");
    }

    // A failed export over HTTP to a collector that echoes the credentials.
    let mut store = Writer::open(&home.path().join("hermes-meter.db")).expect("open store");
    replay(&mut store, &[Path::new(FIXTURES).join("readfile.jsonl")], false);
    let headers = format!("authorization=Bearer%20{HEADER_SECRET},x-api-key={HEADER_SECRET}2");
    let cfg = config(
        &endpoint,
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", &headers),
        ],
    );
    let shown = format!("{cfg:?} {:?}", cfg.describe());
    assert!(!shown.contains(HEADER_SECRET), "{shown}");
    let mut exporter = Exporter::with_store(cfg, store.into_outbox()).expect("exporter");
    exporter.close_idle().expect("close idle");
    let step = exporter.flush(Instant::now() + Duration::from_secs(10)).expect("flush");
    let error = step.error.clone().expect("the export failed");
    assert!(!error.contains(HEADER_SECRET), "{error}");
    drop(exporter);
    let text = status(home.path(), &endpoint, true);
    assert!(!text.contains(HEADER_SECRET), "{text}");
    assert!(!contains(&store_bytes(home.path()), HEADER_SECRET));

    // Over gRPC, to a port nobody listens on.
    let dead = TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_endpoint = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let store = Writer::open(&home.path().join("hermes-meter.db")).expect("open store");
    let cfg = config(&dead_endpoint, &[("OTEL_EXPORTER_OTLP_HEADERS", &headers)]);
    let mut exporter = Exporter::with_store(cfg, store.into_outbox()).expect("exporter");
    let step = exporter.flush(Instant::now() + Duration::from_secs(10)).expect("flush");
    let error = step.error.clone().expect("the export failed");
    assert!(!error.contains(HEADER_SECRET), "{error}");
}

#[test]
fn an_export_error_echoing_a_header_value_is_scrubbed() {
    // A gRPC collector that puts the token it got into its status message.
    let home = tempfile::tempdir().expect("temp dir");
    let (endpoint, _runtime) = rejecting_grpc_collector();
    let mut store = Writer::open(&home.path().join("hermes-meter.db")).expect("open store");
    replay(&mut store, &[Path::new(FIXTURES).join("readfile.jsonl")], false);
    let headers = format!("authorization=Bearer%20{HEADER_SECRET}");
    let cfg = config(&endpoint, &[("OTEL_EXPORTER_OTLP_HEADERS", &headers)]);
    let mut exporter = Exporter::with_store(cfg, store.into_outbox()).expect("exporter");
    exporter.close_idle().expect("close idle");
    let step = exporter.flush(Instant::now() + Duration::from_secs(10)).expect("flush");
    let error = step.error.clone().expect("the export failed");
    assert!(error.contains("bad credentials"), "{error}");
    assert!(error.contains("[REDACTED]"), "{error}");
    assert!(!error.contains(HEADER_SECRET), "{error}");
    drop(exporter);
    assert!(!contains(&store_bytes(home.path()), HEADER_SECRET));
}

/// A gRPC collector that refuses every export with `unauthenticated`,
/// echoing the `authorization` metadata it got in the status message.
fn rejecting_grpc_collector() -> (String, tokio::runtime::Runtime) {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
    use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};

    struct Refuse;

    #[tonic::async_trait]
    impl TraceService for Refuse {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let auth = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            Err(tonic::Status::unauthenticated(format!("bad credentials: {auth}")))
        }
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    let router = tonic::transport::Server::builder().add_service(TraceServiceServer::new(Refuse));
    rt.spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let _ = router.serve_with_incoming(incoming).await;
    });
    (format!("http://{addr}"), rt)
}

#[test]
fn captured_content_is_pruned_once_its_session_ended_and_its_spans_went_out() {
    let count = |store: &Writer| -> i64 { store.query_scalar("SELECT COUNT(*) FROM span_content").expect("count") };
    // Every fixture captured and exported: the outbox is empty.
    let (_spans, dir) = export(&fixtures(), true);
    let mut store = Writer::open(&dir.path().join("hermes-meter.db")).expect("open store");
    let captured = count(&store);
    assert!(captured > 0);
    // A session captured since, not exported yet, keeps its content.
    let text = std::fs::read_to_string(Path::new(FIXTURES).join("readfile.jsonl")).expect("fixture");
    let session = "20261130_013735_bf4b63";
    assert!(text.contains(session));
    let later = dir.path().join("later.jsonl");
    std::fs::write(&later, text.replace(session, "20261130_013735_later")).expect("write");
    replay(&mut store, std::slice::from_ref(&later), true);
    let waiting = count(&store) - captured;
    assert!(waiting > 0);
    // Within the retention nothing goes.
    let ended: f64 = store.query_scalar("SELECT MIN(ended_at) FROM runs").expect("ended");
    assert_eq!(store.prune_content(ended).expect("prune"), 0);
    assert_eq!(count(&store), captured + waiting);
    // Past it, the content of sessions whose content events wait in the
    // log outbox stays (no log exporter ran here)...
    let first = store.prune_content(f64::MAX).expect("prune") as i64;
    assert!(first < captured, "{first} of {captured}");
    // ...until the events leave it: here they expire with the content's
    // retention, as the writer's retention step does first. Then only the
    // exported sessions' content goes.
    let expired = store.expire_log_outbox(0.0, f64::MAX, 100_000).expect("expire");
    assert!(expired > 0);
    let pruned = store.prune_content(f64::MAX).expect("prune") as i64;
    assert_eq!(first + pruned, captured);
    assert_eq!(count(&store), waiting);
}
