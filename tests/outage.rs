//! A collector outage over a replay of 1,000 sessions: while the receiver is
//! down, the exporters fail and back off and nothing is lost; once it is
//! back, every span arrives exactly once and the metric totals equal the
//! ledger's sums.
//!
//! A real ten-minute outage is not waited out: what it produces is the same
//! as here (the outbox filling while every send fails and the backoff grows
//! to its cap), and the cap (30 s) bounds how long after the collector's
//! return the exporter tries again. No acknowledgement is lost when the
//! collector is down (connections are refused), so the at-least-once bound
//! of "the batch in flight" allows no duplicate here.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_runtime::export::{
    ExportConfig, ExportOverrides, Exporter, MetricExporter, MetricsConfig, MetricsOverrides,
};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;

const KINDS: [&str; 5] = ["readfile", "failonce", "delegate_sync", "terminal_fail", "bigcache"];

fn vars(endpoint: &str) -> HashMap<String, String> {
    [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("HERMES_METER_SESSION_GRACE_SECONDS", "0"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Writes `copies` copies of each fixture kind, ids made unique, to one file.
fn sessions_file(dir: &Path, name: &str, first: usize, copies: usize) -> std::path::PathBuf {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut text = String::new();
    for kind in KINDS {
        let original = std::fs::read_to_string(fixtures.join(format!("{kind}.jsonl"))).expect("fixture");
        for i in first..first + copies {
            // Every session id (and so every other id) embeds "20261130_".
            text.push_str(&original.replace("20261130_", &format!("{:08}_", 30_000_000 + i)));
            text.push('\n');
        }
    }
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write sessions");
    path
}

fn replay(store: &mut Writer, path: &Path) {
    let mut stats = ReplayStats::default();
    replay_file(store, path, DecodeOptions::default(), &mut stats).expect("replay");
    assert!(stats.bad_lines.is_empty());
}

#[test]
fn a_collector_outage_over_a_thousand_sessions_loses_nothing_and_duplicates_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let addr = hermes_meter_test_support::free_addr();
    let endpoint = format!("http://{addr}");
    let env = vars(&endpoint);
    let trace_config = ExportConfig::resolve(ExportOverrides::default(), |k| env.get(k).cloned());
    let metric_config = MetricsConfig::resolve(ExportOverrides::default(), MetricsOverrides::default(), |k| {
        env.get(k).cloned()
    });
    let db = dir.path().join("hermes-meter.db");
    let mut store = Writer::open(&db).expect("store");
    let mut traces = Exporter::new(trace_config, &db).expect("trace exporter");
    let mut metrics = MetricExporter::new(metric_config, &db).expect("metric exporter");

    // The collector is down for the whole replay of 1,000 sessions (100 + 100
    // copies of five recorded sessions); every export attempt meanwhile fails.
    let mut failures = 0;
    for (half, first) in [("a.jsonl", 0), ("b.jsonl", 100)] {
        replay(&mut store, &sessions_file(dir.path(), half, first, 100));
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut failed_now = 0;
        while failed_now < 2 && Instant::now() < deadline {
            let step = traces.run_once().expect("trace step");
            assert_eq!(step.exported, 0, "nothing can be accepted while the collector is down");
            failed_now += usize::from(step.error.is_some());
            let m = metrics
                .flush(Instant::now() + Duration::from_millis(200))
                .expect("metric step");
            assert_eq!(m.exported_points, 0);
        }
        failures += failed_now;
    }
    assert!(failures >= 4, "the exporter kept trying: {failures}");
    let pending = traces.store().export_state().expect("state").pending;
    let runs: i64 = store.query_scalar("SELECT COUNT(*) FROM runs").expect("runs");
    assert_eq!(
        runs, 1200,
        "1,000 sessions plus the 200 subagent children of delegate_sync"
    );
    let outbox: i64 = store.query_scalar("SELECT COUNT(*) FROM outbox").expect("outbox");
    assert_eq!(pending as i64, outbox);
    // Per five sessions: readfile 5 spans, failonce 4, delegate_sync 8 (with its
    // child), terminal_fail 5, bigcache 3.
    assert_eq!(pending, 200 * 25, "every span waits in the outbox");

    // The collector comes back.
    let receiver = hermes_meter_test_support::grpc(Some(addr), None);
    let deadline = Instant::now() + Duration::from_secs(120);
    while traces.store().export_state().expect("state").pending > 0 {
        assert!(Instant::now() < deadline, "the outbox did not drain");
        let _ = traces.flush(deadline).expect("flush");
    }
    let spans = receiver.received.spans();
    let unique: HashSet<_> = spans.iter().map(|s| (s.trace_id.clone(), s.span_id.clone())).collect();
    assert_eq!(spans.len(), unique.len(), "no span arrived twice");
    assert_eq!(spans.len(), pending as usize, "every span that waited arrived");

    // The metric totals equal the ledger's.
    let step = metrics
        .flush(Instant::now() + Duration::from_secs(60))
        .expect("metric flush");
    assert!(step.error.is_none() && step.exported_points > 0, "{step:?}");
    let last = receiver
        .received
        .metric_requests()
        .last()
        .cloned()
        .expect("a metric request");
    let input_sum: f64 = last
        .resource_metrics
        .iter()
        .flat_map(|rm| rm.scope_metrics.iter())
        .flat_map(|sm| sm.metrics.iter())
        .filter(|m| m.name == "gen_ai.client.inference.usage.input_tokens")
        .flat_map(|m| match &m.data {
            Some(opentelemetry_proto::tonic::metrics::v1::metric::Data::Sum(s)) => s.data_points.clone(),
            _ => Vec::new(),
        })
        .map(|p| match p.value {
            Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(v)) => v as f64,
            Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(v)) => v,
            None => 0.0,
        })
        .sum();
    let ledger: i64 = store
        .query_scalar("SELECT SUM(input_tokens + cache_read_tokens + cache_write_tokens) FROM llm_calls")
        .expect("ledger");
    assert_eq!(
        input_sum as i64, ledger,
        "input tokens (inclusive of cache, as semconv says)"
    );
}
