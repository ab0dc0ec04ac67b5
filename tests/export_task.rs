//! The export thread a Hermes process runs: it sends what the outbox holds
//! and the metric series to the collector configured by `OTEL_*`, and a
//! session end can wait, bounded, for what is ready.
//!
//! One test in this binary: it sets process-wide environment variables.

use std::path::Path;
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_runtime::bridge::{Background, BridgeConfig};
use hermes_meter_runtime::export_task::ExportTask;
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;

#[test]
fn the_export_thread_sends_the_outbox_and_a_session_end_can_wait_for_it() {
    let receiver = hermes_meter_test_support::grpc(None, None);
    std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.grpc_endpoint());
    // Sessions Hermes never finalizes are held back this long; not here.
    std::env::set_var("HERMES_METER_SESSION_GRACE_SECONDS", "0");
    let dir = tempfile::tempdir().expect("temp dir");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/readfile.jsonl");
    {
        let mut store = Writer::open_dir(dir.path()).expect("store");
        let mut stats = ReplayStats::default();
        replay_file(&mut store, &fixture, DecodeOptions::default(), &mut stats).expect("replay");
    }
    // The settings as a Hermes process resolves them, with the bridge's.
    let config = BridgeConfig::from_env();
    let mut task = ExportTask::start(dir.path(), config.export, config.metrics, config.logs)
        .expect("start")
        .expect("export is enabled");
    // readfile: session, turn, two LLM calls, one tool call.
    assert_eq!(receiver.wait_for_spans(5, Duration::from_secs(20)), 5);

    // More arrives; a session end asks for it and gets it before returning.
    let more = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/terminal_ok.jsonl");
    {
        let mut store = Writer::open_dir(dir.path()).expect("store");
        let mut stats = ReplayStats::default();
        replay_file(&mut store, &more, DecodeOptions::default(), &mut stats).expect("replay");
    }
    assert!(
        task.flush(Instant::now() + Duration::from_secs(20)),
        "the flush finished"
    );
    assert_eq!(
        receiver.received.span_count(),
        10,
        "the flush sent the second session's spans"
    );
    // The same thread pushes the metric series folded from the ledger.
    let deadline = Instant::now() + Duration::from_secs(20);
    let names = || -> Vec<String> {
        receiver
            .received
            .metric_requests()
            .iter()
            .flat_map(|r| r.resource_metrics.iter())
            .flat_map(|rm| rm.scope_metrics.iter())
            .flat_map(|sm| sm.metrics.iter())
            .map(|m| m.name.clone())
            .collect()
    };
    while !names()
        .iter()
        .any(|n| n == "gen_ai.client.inference.usage.input_tokens")
    {
        assert!(Instant::now() < deadline, "no metric push arrived: {:?}", names());
        std::thread::sleep(Duration::from_millis(20));
    }
    task.shutdown(Instant::now() + Duration::from_secs(5));
    // Nothing is left in the outbox and nothing was sent twice.
    let store = Writer::open_dir(dir.path()).expect("store");
    assert_eq!(
        store
            .query_scalar::<i64>("SELECT COUNT(*) FROM outbox")
            .expect("outbox"),
        0
    );
    let mut ids: Vec<_> = receiver.received.spans().iter().map(|s| s.span_id.clone()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 10);
}
