//! Export throughput and bytes on the wire per span.
//!
//! Run: `cargo bench --bench export` (optionally `-- COPIES`, default 4000
//! readfile-shaped sessions = 20,000 spans, and/or `-- grpc` or `-- http`
//! to run one protocol only, e.g. under `perf record`). Replays the sessions into a
//! fresh store, then times draining the outbox to an in-process loopback
//! receiver for gRPC and HTTP/protobuf, each with and without gzip. Bytes
//! per span are the request bodies as they crossed the wire (compressed
//! when gzip is on), divided by the spans they carried.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_runtime::export::{ExportConfig, ExportOverrides, Exporter};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;

fn main() {
    let copies: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(4000);
    let only: Option<String> = std::env::args().skip(1).find(|a| a == "grpc" || a == "http");
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/readfile.jsonl");
    let text = std::fs::read_to_string(fixture).expect("fixture");
    let session = "20261130_013735_bf4b63";
    let mut many = String::new();
    for i in 0..copies {
        many.push_str(&text.replace(session, &format!("{session}x{i:06}")));
    }
    let src = tempfile::tempdir().expect("temp dir");
    let file = src.path().join("many.jsonl");
    std::fs::write(&file, many).expect("write");
    let template = src.path().join("template.db");
    {
        let mut store = Writer::open(&template).expect("store");
        let mut stats = ReplayStats::default();
        replay_file(&mut store, &file, DecodeOptions::default(), &mut stats).expect("replay");
        store.checkpoint().expect("checkpoint");
    }
    println!("{copies} sessions; spans per run below");
    for (protocol, gzip) in [
        ("grpc", false),
        ("grpc", true),
        ("http/protobuf", false),
        ("http/protobuf", true),
    ] {
        if only.as_deref().is_some_and(|o| !protocol.starts_with(o)) {
            continue;
        }
        run(&template, protocol, gzip);
    }
}

fn run(template: &Path, protocol: &str, gzip: bool) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("hermes-meter.db");
    std::fs::copy(template, &db).expect("copy store");
    let receiver = if protocol == "grpc" {
        hermes_meter_test_support::grpc(None, None)
    } else {
        hermes_meter_test_support::http(None)
    };
    let endpoint = if protocol == "grpc" {
        receiver.grpc_endpoint()
    } else {
        receiver.http_endpoint()
    };
    let mut env: HashMap<&str, String> = HashMap::new();
    env.insert("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint);
    env.insert("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.into());
    env.insert(
        "OTEL_EXPORTER_OTLP_COMPRESSION",
        if gzip { "gzip" } else { "none" }.into(),
    );
    env.insert("HERMES_METER_SESSION_GRACE_SECONDS", "0".into());
    env.insert("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512".into());
    let config = ExportConfig::resolve(ExportOverrides::default(), |k| env.get(k).cloned());
    let mut exporter = Exporter::new(config, &db).expect("exporter");
    let pending = exporter.store().export_state().expect("state").pending as usize;
    let start = Instant::now();
    let step = exporter
        .flush(Instant::now() + Duration::from_secs(300))
        .expect("flush");
    let elapsed = start.elapsed();
    assert!(step.error.is_none(), "{step:?}");
    let spans = receiver.wait_for_spans(pending, Duration::from_secs(10));
    assert_eq!(spans, pending, "every span arrived");
    let bytes = receiver.received.body_bytes.load(Ordering::SeqCst);
    println!(
        "{protocol:<14} gzip={:<5} {spans} spans in {:>7.1} ms = {:>8.0} spans/s, {:>6.1} bytes/span on the wire",
        gzip,
        elapsed.as_secs_f64() * 1e3,
        spans as f64 / elapsed.as_secs_f64(),
        bytes as f64 / spans as f64
    );
}
