//! Metrics end to end: fixtures replayed into a store, metric data points
//! exported over OTLP to in-process receivers on loopback and compared with
//! the ledger's own sums; a second exporting process continuing every
//! series; a real Prometheus scraping `hermes-meter serve --prometheus`.

#[path = "support/hermes_main.rs"]
mod hermes_main;
mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hermes_meter::export::{ExportOverrides, MetricExporter, MetricsConfig, MetricsOverrides};
use hermes_meter::hook::DecodeOptions;
use hermes_meter::metrics;
use hermes_meter::replay::{replay_file, ReplayStats};
use hermes_meter::semconv::metric as m;
use hermes_meter::store::Writer;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value, AggregationTemporality};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn all_fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .expect("fixtures")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

/// Replays `files` with a price for the fixtures' mock model, so costs
/// are not all zero.
fn replay(store: &mut Writer, files: &[PathBuf]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let pricing = dir.path().join("pricing.toml");
    std::fs::write(
        &pricing,
        "[models.\"mock-model\"]\ninput = 3.0\noutput = 15.0\ncache_read = 0.3\ncache_write = 3.75\n",
    )
    .expect("pricing");
    store.set_prices(hermes_meter::config::load_prices(&pricing).expect("prices"));
    let mut stats = ReplayStats::default();
    for f in files {
        replay_file(store, f, DecodeOptions::default(), &mut stats).expect("replay");
    }
    assert!(stats.bad_lines.is_empty(), "{:?}", stats.bad_lines);
    // The fixtures were recorded hours ago: close what their processes left open.
    store
        .close_idle_runs(hermes_meter::export::unix_now(), 60.0)
        .expect("close idle");
}

/// A replay file with one LLM call of `session` made now, 1,000,000 input
/// tokens of the mock model, so $3.00 at [`replay`]'s price: spend inside
/// today's budget window (the fixtures are days old).
fn call_now(dir: &Path, session: &str) -> PathBuf {
    let now = hermes_meter::export::unix_now();
    let turn = format!("{session}:t");
    let lines = [
        serde_json::json!({"hook": "on_session_start", "t": now,
            "kwargs": {"session_id": session, "platform": "cli", "model": "mock-model"}}),
        serde_json::json!({"hook": "post_api_request", "t": now + 0.5,
            "kwargs": {"session_id": session, "turn_id": turn, "api_request_id": format!("{turn}:api:1"),
                       "model": "mock-model", "provider": "custom", "api_duration": 0.5,
                       "usage": {"input_tokens": 1_000_000, "output_tokens": 0}}}),
    ];
    let path = dir.join(format!("{session}.jsonl"));
    let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    std::fs::write(&path, text.join("\n") + "\n").expect("write the call");
    path
}

fn config(pairs: &[(&str, &str)]) -> MetricsConfig {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    MetricsConfig::resolve(ExportOverrides::default(), MetricsOverrides::default(), move |k| {
        map.get(k).cloned()
    })
}

fn grpc_config(endpoint: &str) -> MetricsConfig {
    config(&[
        ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", endpoint),
        ("HERMES_METER_SESSION_GRACE_SECONDS", "0"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "5000"),
    ])
}

/// The ledger's own totals, straight from SQL.
#[derive(Debug, Clone, PartialEq)]
struct Ledger {
    calls: i64,
    input: i64,
    cache_read: i64,
    cache_write: i64,
    output: i64,
    reasoning: i64,
    cost: f64,
    /// What cache reads and writes saved at [`replay`]'s prices.
    cache_saved: f64,
    errors: i64,
    tools: i64,
    turns: i64,
    sessions: i64,
}

fn ledger(path: &Path) -> Ledger {
    let conn = rusqlite::Connection::open(path).expect("open");
    let one = |sql: &str| -> f64 { conn.query_row(sql, [], |r| r.get::<_, f64>(0)).expect(sql) };
    Ledger {
        calls: one("SELECT COUNT(*) FROM llm_calls") as i64,
        input: one("SELECT COALESCE(SUM(input_tokens), 0) FROM llm_calls") as i64,
        cache_read: one("SELECT COALESCE(SUM(cache_read_tokens), 0) FROM llm_calls") as i64,
        cache_write: one("SELECT COALESCE(SUM(cache_write_tokens), 0) FROM llm_calls") as i64,
        output: one("SELECT COALESCE(SUM(output_tokens), 0) FROM llm_calls") as i64,
        reasoning: one("SELECT COALESCE(SUM(reasoning_tokens), 0) FROM llm_calls") as i64,
        cost: one("SELECT COALESCE(SUM(cost_usd), 0) FROM llm_calls"),
        cache_saved: one(
            "SELECT COALESCE(SUM(cache_read_tokens * (3.0 - 0.3) + cache_write_tokens * (3.0 - 3.75)), 0) / 1e6
               FROM llm_calls WHERE model = 'mock-model' AND cost_source != 'held'",
        ),
        errors: one("SELECT COUNT(*) FROM llm_call_errors") as i64,
        tools: one("SELECT COUNT(*) FROM tool_calls WHERE ended_at IS NOT NULL AND proxy = 0") as i64,
        turns: one("SELECT COUNT(*) FROM turns WHERE outcome IS NOT NULL") as i64,
        sessions: one("SELECT COUNT(*) FROM runs WHERE status != 'running'") as i64,
    }
}

/// Per metric name: the points of the last request, as
/// `(attributes as "k=v,...", value, count)`.
type Points = HashMap<String, Vec<(String, f64, u64)>>;

fn points(request: &ExportMetricsServiceRequest) -> Points {
    points_of(request, AggregationTemporality::Cumulative)
}

/// [`points`] of a request whose sums and histograms have `temporality`.
fn points_of(request: &ExportMetricsServiceRequest, temporality: AggregationTemporality) -> Points {
    let mut out: Points = HashMap::new();
    let text = |kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]| -> String {
        let mut parts: Vec<String> = kvs
            .iter()
            .map(|kv| {
                let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(AnyValue::StringValue(s)) => s.clone(),
                    Some(AnyValue::IntValue(i)) => i.to_string(),
                    Some(AnyValue::BoolValue(b)) => b.to_string(),
                    other => format!("{other:?}"),
                };
                format!("{}={v}", kv.key)
            })
            .collect();
        parts.sort();
        parts.join(",")
    };
    let number = |v: &Option<Value>| match v {
        Some(Value::AsInt(i)) => *i as f64,
        Some(Value::AsDouble(d)) => *d,
        None => f64::NAN,
    };
    for rm in &request.resource_metrics {
        for sm in &rm.scope_metrics {
            for metric in &sm.metrics {
                let entry = out.entry(metric.name.clone()).or_default();
                match &metric.data {
                    Some(Data::Sum(s)) => {
                        assert!(s.is_monotonic, "{}", metric.name);
                        assert_eq!(s.aggregation_temporality, temporality as i32);
                        for p in &s.data_points {
                            entry.push((text(&p.attributes), number(&p.value), 0));
                        }
                    }
                    Some(Data::Gauge(g)) => {
                        for p in &g.data_points {
                            entry.push((text(&p.attributes), number(&p.value), 0));
                        }
                    }
                    Some(Data::Histogram(h)) => {
                        assert_eq!(h.aggregation_temporality, temporality as i32);
                        for p in &h.data_points {
                            assert_eq!(p.bucket_counts.iter().sum::<u64>(), p.count, "{}", metric.name);
                            assert_eq!(p.bucket_counts.len(), p.explicit_bounds.len() + 1);
                            entry.push((text(&p.attributes), p.sum.unwrap_or(f64::NAN), p.count));
                        }
                    }
                    other => panic!("unexpected data {other:?}"),
                }
            }
        }
    }
    out
}

fn total(points: &Points, metric: &str, filter: &str) -> f64 {
    points
        .get(metric)
        .map(|v| v.iter().filter(|(a, _, _)| a.contains(filter)).map(|(_, v, _)| v).sum())
        .unwrap_or(0.0)
}

fn count(points: &Points, metric: &str, filter: &str) -> u64 {
    points
        .get(metric)
        .map(|v| v.iter().filter(|(a, _, _)| a.contains(filter)).map(|(_, _, c)| c).sum())
        .unwrap_or(0)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Pushes once, now, and returns the request the receiver got.
fn push(exporter: &mut MetricExporter, receiver: &support::Receiver) -> ExportMetricsServiceRequest {
    let before = receiver.received.metric_requests().len();
    let step = exporter.flush(Instant::now() + Duration::from_secs(30)).expect("flush");
    assert!(step.error.is_none(), "{step:?}");
    assert!(step.leased, "{step:?}");
    let requests = receiver.received.metric_requests();
    assert_eq!(requests.len(), before + 1);
    requests.last().cloned().expect("a request")
}

fn check_against_ledger(p: &Points, l: &Ledger) {
    let input_semconv = (l.input + l.cache_read + l.cache_write) as f64;
    assert_eq!(total(p, m::INPUT_TOKENS, ""), input_semconv);
    assert_eq!(total(p, m::OUTPUT_TOKENS, ""), l.output as f64);
    assert_eq!(total(p, m::CACHE_READ_TOKENS, ""), l.cache_read as f64);
    assert_eq!(total(p, m::CACHE_WRITE_TOKENS, ""), l.cache_write as f64);
    assert_eq!(total(p, m::REASONING_TOKENS, ""), l.reasoning as f64);
    assert_eq!(
        total(p, m::INPUT_TOKENS, "gen_ai.token.modality=unknown"),
        input_semconv
    );
    assert_eq!(total(p, m::OPERATION_INPUT_TOKENS, ""), input_semconv);
    assert_eq!(total(p, m::OPERATION_OUTPUT_TOKENS, ""), l.output as f64);
    // Every attempt is one observation; a failed one is 0 with its error.type.
    assert_eq!(count(p, m::OPERATION_INPUT_TOKENS, ""), (l.calls + l.errors) as u64);
    assert_eq!(count(p, m::OPERATION_OUTPUT_TOKENS, "error.type="), l.errors as u64);
    assert_eq!(
        total(p, m::HERMES_TOKEN_USAGE, "hermes.token.type=input"),
        l.input as f64
    );
    assert_eq!(
        total(p, m::HERMES_TOKEN_USAGE, "hermes.token.type=cache_read"),
        l.cache_read as f64
    );
    assert_eq!(
        total(p, m::HERMES_TOKEN_USAGE, "hermes.token.type=cache_write"),
        l.cache_write as f64
    );
    assert_eq!(
        total(p, m::HERMES_TOKEN_USAGE, "hermes.token.type=output"),
        l.output as f64
    );
    assert_eq!(
        total(p, m::HERMES_TOKEN_USAGE, "hermes.token.type=reasoning"),
        l.reasoning as f64
    );
    assert!(
        close(total(p, m::OPERATION_COST, "gen_ai.usage.cost.currency=USD"), l.cost),
        "{} vs {}",
        total(p, m::OPERATION_COST, ""),
        l.cost
    );
    assert_eq!(count(p, m::OPERATION_COST, ""), l.calls as u64);
    assert!(
        close(total(p, m::CACHE_SAVINGS, ""), l.cache_saved),
        "{} vs {}",
        total(p, m::CACHE_SAVINGS, ""),
        l.cache_saved
    );
    assert_eq!(count(p, m::INFERENCE_DURATION, ""), (l.calls + l.errors) as u64);
    assert_eq!(count(p, m::INFERENCE_DURATION, "error.type="), l.errors as u64);
    assert_eq!(total(p, m::API_ERRORS, ""), l.errors as f64);
    assert_eq!(total(p, m::TOOL_CALLS, ""), l.tools as f64);
    assert_eq!(count(p, m::TOOL_DURATION, ""), l.tools as u64);
    assert_eq!(total(p, m::TURNS, ""), l.turns as f64);
    assert_eq!(total(p, m::SESSIONS, ""), l.sessions as f64);
}

/// The previous names (`gen_ai/dup`) carry the same totals as the current ones.
fn check_previous_against_ledger(p: &Points, l: &Ledger) {
    let input_semconv = (l.input + l.cache_read + l.cache_write) as f64;
    assert_eq!(total(p, m::TOKEN_USAGE, "gen_ai.token.type=input"), input_semconv);
    assert_eq!(total(p, m::TOKEN_USAGE, "gen_ai.token.type=output"), l.output as f64);
    assert_eq!(
        count(p, m::TOKEN_USAGE, "gen_ai.token.type=input"),
        (l.calls + l.errors) as u64
    );
    assert_eq!(count(p, m::TOKEN_USAGE, "error.type="), 2 * l.errors as u64);
    assert!(
        close(total(p, m::COST, ""), l.cost),
        "{} vs {}",
        total(p, m::COST, ""),
        l.cost
    );
    assert_eq!(count(p, m::OPERATION_DURATION, ""), (l.calls + l.errors) as u64);
    assert_eq!(count(p, m::OPERATION_DURATION, "error.type="), l.errors as u64);
}

#[test]
fn after_replaying_the_fixtures_every_instrument_arrives_with_the_ledgers_sums() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hermes-meter.db");
    let mut store = Writer::open(&path).expect("open");
    replay(&mut store, &all_fixtures());
    let receiver = support::grpc(None, None);
    // A budget (the fixtures are days old: nothing spent in today's window).
    std::fs::write(
        dir.path().join("budgets.toml"),
        "timezone = \"UTC\"\n[global]\ndaily = 10.0\ndaily_tokens = 1000000\n",
    )
    .expect("budgets");
    let mut exporter =
        MetricExporter::with_store(grpc_config(&receiver.grpc_endpoint()), store.into_outbox()).expect("exporter");
    let mut counters = Writer::open(&path).expect("second connection");
    let now = hermes_meter::export::unix_now();
    counters
        .add_to_metric_counter(
            m::BUDGET_VERDICTS,
            &metrics::verdict_attrs("global", "daily", "soft"),
            1.0,
            now,
        )
        .expect("verdict");
    counters
        .add_to_metric_counter(m::ALERTS, &metrics::alert_attrs("budget_soft"), 1.0, now)
        .expect("alert");
    // The loss gauges read the store's health record, which a Hermes
    // process's writer leaves (a replay writes none).
    let record = serde_json::json!({
        "schema": hermes_meter::health::HEALTH_SCHEMA, "state": "ok", "updated_at": now, "updated_by_pid": 1,
        "counts": {"dropped_events": 0, "hermes_skipped_recorded": 1, "hermes_skipped_lost": 0},
    });
    let dir = path.parent().expect("store dir");
    std::fs::write(dir.join(hermes_meter::health::HEALTH_FILE_NAME), record.to_string()).expect("health");
    let request = push(&mut exporter, &receiver);
    let p = points(&request);
    let l = ledger(&path);
    assert!(
        l.calls > 0 && l.errors > 0 && l.tools > 0 && l.sessions > 0 && l.cost > 0.0 && l.cache_saved > 0.0,
        "{l:?}"
    );
    check_against_ledger(&p, &l);
    // The fleet sync lag exists only with a fleet (tests/fleet.rs reads it);
    // the time to first chunk only where Hermes reports it, which 0.19, the
    // fixtures' Hermes, does not (see below); previous names only when
    // asked for (below).
    let no_ttfc = [m::FLEET_SYNC_LAG, m::INFERENCE_TIME_TO_FIRST_CHUNK];
    for i in metrics::INSTRUMENTS.iter().filter(|i| !no_ttfc.contains(&i.name)) {
        assert_eq!(
            p.contains_key(i.name),
            !i.previous,
            "{} (previous: {})",
            i.name,
            i.previous
        );
    }
    assert!(
        !p.contains_key(m::INFERENCE_TIME_TO_FIRST_CHUNK),
        "no data point made up for Hermes 0.19"
    );
    assert_eq!(total(&p, m::BUDGET_SPEND, "hermes.budget.scope=global"), 0.0);
    assert_eq!(total(&p, m::BUDGET_LIMIT, "hermes.budget.window=daily"), 10.0);
    assert_eq!(total(&p, m::BUDGET_PROJECTED, "hermes.budget.window=daily"), 0.0);
    assert_eq!(total(&p, m::BUDGET_VERDICTS, "hermes.budget.verdict=soft"), 1.0);
    assert_eq!(total(&p, m::ALERTS, "hermes.alert.kind=budget_soft"), 1.0);
    // No ids, no opt-in attributes by default.
    for (metric, series) in &p {
        for (attrs, _, _) in series {
            for forbidden in ["session", "turn.id", "api_request", "tool.call.id", "sender", "profile"] {
                assert!(!attrs.contains(forbidden), "{metric} carries {forbidden}: {attrs}");
            }
        }
    }
    let resource = request.resource_metrics[0].resource.as_ref().expect("resource");
    let instance = resource
        .attributes
        .iter()
        .find(|kv| kv.key == "service.instance.id")
        .expect("service.instance.id");
    assert_eq!(
        instance.value.as_ref().and_then(|v| v.value.clone()),
        Some(AnyValue::StringValue(exporter.identity().instance_id.clone()))
    );
    // Pushing again without new events sends the same totals.
    let again = points(&push(&mut exporter, &receiver));
    check_against_ledger(&again, &l);
}

#[test]
fn a_streamed_call_of_hermes_main_is_one_time_to_first_chunk_point_beside_its_duration() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hermes-meter.db");
    let mut store = Writer::open(&path).expect("open");
    let started = 1_796_002_700.0;
    let calls = [
        hermes_main::streamed_call(dir.path(), "main-streamed", started, Some(started + 0.75)),
        hermes_main::streamed_call(dir.path(), "main-unstreamed", started, None),
        Path::new(FIXTURES).join("terminal_ok.jsonl"),
    ];
    replay(&mut store, &calls);
    let receiver = support::grpc(None, None);
    let mut exporter =
        MetricExporter::with_store(grpc_config(&receiver.grpc_endpoint()), store.into_outbox()).expect("exporter");
    let p = points(&push(&mut exporter, &receiver));
    let ttfc = p.get(m::INFERENCE_TIME_TO_FIRST_CHUNK).expect("the histogram arrived");
    assert_eq!(ttfc.len(), 1, "one series: {ttfc:?}");
    let (attrs, sum, n) = &ttfc[0];
    assert_eq!((*sum, *n), (0.75, 1), "the streamed call alone");
    // The attributes of the successful calls' duration series.
    let durations: Vec<&String> = p[m::INFERENCE_DURATION]
        .iter()
        .filter(|(a, _, _)| !a.contains("error.type="))
        .map(|(a, _, _)| a)
        .collect();
    assert_eq!(durations, [attrs], "{:?}", p[m::INFERENCE_DURATION]);
    // Every call is in the duration histogram, only the streamed one here.
    assert_eq!(count(&p, m::INFERENCE_DURATION, ""), ledger(&path).calls as u64);
}

#[test]
fn otlp_http_carries_the_same_totals_and_allow_listed_senders() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hermes-meter.db");
    let mut store = Writer::open(&path).expect("open");
    replay(&mut store, &all_fixtures());
    // The CLI fixtures have no sender: give their runs one.
    rusqlite::Connection::open(&path)
        .expect("open")
        .execute("UPDATE runs SET sender_id = 'alice' WHERE platform = 'cli'", [])
        .expect("sender");
    let receiver = support::http(None);
    let endpoint = format!("http://{}", receiver.addr);
    let c = config(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("HERMES_METER_SESSION_GRACE_SECONDS", "0"),
        ("HERMES_METER_METRIC_ATTRIBUTES", "sender,profile"),
        ("OTEL_SEMCONV_STABILITY_OPT_IN", "http,gen_ai/dup"),
    ]);
    assert_eq!(c.transport.endpoint.value, format!("{endpoint}/v1/metrics"));
    let mut exporter = MetricExporter::with_store(c, store.into_outbox()).expect("exporter");
    let p = points(&push(&mut exporter, &receiver));
    // Both generations of names, each with the ledger's totals.
    check_against_ledger(&p, &ledger(&path));
    check_previous_against_ledger(&p, &ledger(&path));
    for metric in [m::OPERATION_COST, m::COST] {
        let senders = p[metric]
            .iter()
            .filter(|(a, _, _)| a.contains("hermes.sender.id="))
            .count();
        assert!(senders > 0, "allow-listed senders reach {metric}: {:?}", p[metric]);
    }
}

#[test]
fn a_second_exporting_process_continues_every_series_and_never_goes_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hermes-meter.db");
    let files = all_fixtures();
    let (first, second) = files.split_at(files.len() / 2);
    let receiver = support::grpc(None, None);
    let mut store = Writer::open(&path).expect("open");
    replay(&mut store, first);
    let mut a = MetricExporter::with_store(grpc_config(&receiver.grpc_endpoint()), store.into_outbox()).expect("A");
    let from_a = push(&mut a, &receiver);
    let identity_a = a.identity().clone();
    drop(a); // process A goes away (its lease is released)
    let mut store = Writer::open(&path).expect("reopen");
    replay(&mut store, second);
    let mut b = MetricExporter::with_store(grpc_config(&receiver.grpc_endpoint()), store.into_outbox()).expect("B");
    assert_eq!(b.identity(), &identity_a, "same start time and instance id");
    let from_b = push(&mut b, &receiver);
    let (pa, pb) = (points(&from_a), points(&from_b));
    for (metric, series) in &pa {
        if metric == m::BUDGET_SPEND || metric == m::BUDGET_LIMIT {
            continue;
        }
        for (attrs, value, n) in series {
            let later = pb[metric]
                .iter()
                .find(|(a, _, _)| a == attrs)
                .unwrap_or_else(|| panic!("{metric}{{{attrs}}} vanished"));
            assert!(
                later.1 >= *value && later.2 >= *n,
                "{metric}{{{attrs}}} went back: {value} -> {}",
                later.1
            );
        }
    }
    check_against_ledger(&pb, &ledger(&path));
    let starts: Vec<u64> = point_times(&from_a)
        .into_iter()
        .chain(point_times(&from_b))
        .map(|(start, _)| start)
        .collect();
    assert!(
        starts.windows(2).all(|w| w[0] == w[1]),
        "one start time for all: {starts:?}"
    );
}

/// `(start, time)` of every sum and histogram point of `request`.
fn point_times(request: &ExportMetricsServiceRequest) -> Vec<(u64, u64)> {
    request.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .flat_map(|m| match &m.data {
            Some(Data::Sum(s)) => s
                .data_points
                .iter()
                .map(|p| (p.start_time_unix_nano, p.time_unix_nano))
                .collect(),
            Some(Data::Histogram(h)) => h
                .data_points
                .iter()
                .map(|p| (p.start_time_unix_nano, p.time_unix_nano))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

#[test]
fn delta_pushes_add_up_to_the_ledger_across_exporting_processes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hermes-meter.db");
    let files = all_fixtures();
    let (first, second) = files.split_at(files.len() / 2);
    let receiver = support::grpc(None, None);
    let delta = || {
        let endpoint = receiver.grpc_endpoint();
        config(&[
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", endpoint.as_str()),
            ("HERMES_METER_SESSION_GRACE_SECONDS", "0"),
            ("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta"),
        ])
    };
    let mut store = Writer::open(&path).expect("open");
    replay(&mut store, first);
    let mut a = MetricExporter::with_store(delta(), store.into_outbox()).expect("A");
    let from_a = push(&mut a, &receiver);
    let start = (a.identity().start_time * 1e9) as u64;
    let pa = points_of(&from_a, AggregationTemporality::Delta);
    // The first delta covers everything since the store's metric start.
    check_against_ledger(&pa, &ledger(&path));
    let times_a = point_times(&from_a);
    assert!(times_a.iter().all(|(s, _)| *s == start), "{times_a:?}");
    drop(a); // process A goes away; B continues its deltas
    let mut store = Writer::open(&path).expect("reopen");
    replay(&mut store, second);
    let mut b = MetricExporter::with_store(delta(), store.into_outbox()).expect("B");
    let from_b = push(&mut b, &receiver);
    let pb = points_of(&from_b, AggregationTemporality::Delta);
    // B sent only what was new: A's points plus B's are the ledger.
    let mut both = pa.clone();
    for (metric, series) in &pb {
        both.entry(metric.clone()).or_default().extend(series.iter().cloned());
    }
    check_against_ledger(&both, &ledger(&path));
    assert!(
        total(&pb, m::OUTPUT_TOKENS, "") < total(&both, m::OUTPUT_TOKENS, ""),
        "B's points are not cumulative"
    );
    // B's window starts where A's ended.
    let a_end = times_a[0].1;
    let times_b = point_times(&from_b);
    assert!(!times_b.is_empty());
    assert!(
        times_b.iter().all(|(s, t)| *s == a_end && t > s),
        "{times_b:?} after {a_end}"
    );
    // Nothing new: no sum or histogram point at all.
    let from_b_again = push(&mut b, &receiver);
    assert_eq!(point_times(&from_b_again), Vec::new());
}

#[test]
fn budget_gauges_follow_the_budget_file_and_spend_at_every_push() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let store = Writer::open_dir(&home).expect("open");
    let receiver = support::grpc(None, None);
    let mut exporter =
        MetricExporter::with_store(grpc_config(&receiver.grpc_endpoint()), store.into_outbox()).expect("exporter");
    let budgets = home.join("budgets.toml");
    let gauge = |p: &Points, name: &str| total(p, name, "hermes.budget.window=daily");
    // No budget file: no budget gauges.
    let p = points(&push(&mut exporter, &receiver));
    assert!(!p.contains_key(m::BUDGET_LIMIT), "{:?}", p.keys());
    std::fs::write(&budgets, "timezone = \"UTC\"\n[global]\ndaily = 10.0\n").expect("budgets");
    let p = points(&push(&mut exporter, &receiver));
    assert_eq!((gauge(&p, m::BUDGET_LIMIT), gauge(&p, m::BUDGET_SPEND)), (10.0, 0.0));
    // Spend, then a new limit: the next push has both.
    let mut other = Writer::open_dir(&home).expect("second connection");
    replay(&mut other, &[call_now(dir.path(), "spend-now")]);
    std::fs::write(&budgets, "timezone = \"UTC\"\n[global]\ndaily = 2.0\n").expect("budgets");
    let p = points(&push(&mut exporter, &receiver));
    assert_eq!(gauge(&p, m::BUDGET_LIMIT), 2.0);
    assert!(close(gauge(&p, m::BUDGET_SPEND), 3.0), "{}", gauge(&p, m::BUDGET_SPEND));
    // The budget removed: its gauges go.
    std::fs::write(&budgets, "timezone = \"UTC\"\n").expect("budgets");
    let p = points(&push(&mut exporter, &receiver));
    assert!(!p.contains_key(m::BUDGET_LIMIT), "{:?}", p.keys());
}

/// The value of the Prometheus sample `name{...window="daily"...}` in
/// `text`, if there is one.
fn daily_sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("hermes_budget_window=\"daily\""))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The `/metrics` endpoint over the store at `path`, with the defaults.
fn serve_metrics(path: &Path) -> hermes_meter::export::PrometheusServer {
    hermes_meter::export::PrometheusServer::start(
        "127.0.0.1:0",
        path,
        metrics::AllowList::default(),
        hermes_meter::semconv::Names::Current,
        0.0,
    )
    .expect("prometheus endpoint")
}

#[test]
fn budget_gauges_follow_the_budget_file_and_spend_at_every_scrape() {
    // Served, not pushed: nothing folds or pushes between the scrapes but
    // the endpoint itself, so each scrape must read the budgets anew.
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let store = Writer::open_dir(&home).expect("open");
    let server = serve_metrics(store.path());
    let addr = server.addr().to_string();
    let scrape = || http_get(&addr, "/metrics").expect("a 200 scrape");
    let budgets = home.join("budgets.toml");
    // No budget file: no budget gauges.
    assert_eq!(daily_sample(&scrape(), "hermes_budget_limit"), None);
    std::fs::write(&budgets, "timezone = \"UTC\"\n[global]\ndaily = 10.0\n").expect("budgets");
    let text = scrape();
    assert_eq!(daily_sample(&text, "hermes_budget_limit"), Some(10.0), "{text}");
    assert_eq!(daily_sample(&text, "hermes_budget_spend"), Some(0.0), "{text}");
    // Spend, then a new limit: the next scrape has both.
    let mut other = Writer::open_dir(&home).expect("second connection");
    replay(&mut other, &[call_now(dir.path(), "spend-now")]);
    std::fs::write(&budgets, "timezone = \"UTC\"\n[global]\ndaily = 2.0\n").expect("budgets");
    let text = scrape();
    assert_eq!(daily_sample(&text, "hermes_budget_limit"), Some(2.0), "{text}");
    let spend = daily_sample(&text, "hermes_budget_spend").expect("a spend gauge");
    assert!(close(spend, 3.0), "{spend}");
    // The budget removed: its gauges go.
    std::fs::write(&budgets, "timezone = \"UTC\"\n").expect("budgets");
    assert_eq!(daily_sample(&scrape(), "hermes_budget_limit"), None);
}

#[test]
fn hook_calls_lost_or_skipped_in_the_health_record_are_scraped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let store = Writer::open_dir(&home).expect("open");
    // As the writers leave it: counts summed over every process.
    let record = serde_json::json!({
        "schema": hermes_meter::health::HEALTH_SCHEMA, "state": "ok", "updated_at": 1.0, "updated_by_pid": 1,
        "counts": {"dropped_events": 4, "hermes_skipped_recorded": 7, "hermes_skipped_lost": 2},
    });
    std::fs::write(home.join(hermes_meter::health::HEALTH_FILE_NAME), record.to_string()).expect("health");
    let server = serve_metrics(store.path());
    let text = http_get(&server.addr().to_string(), "/metrics").expect("a 200 scrape");
    let sample = |series: &str| {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(
        sample("hermes_hook_calls_lost{hermes_loss_reason=\"unsaved\"}"),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        sample("hermes_hook_calls_lost{hermes_loss_reason=\"hermes_skip\"}"),
        Some(2.0),
        "{text}"
    );
    assert_eq!(
        sample("hermes_hook_calls_skipped{hermes_skip_recorded=\"true\"}"),
        Some(7.0),
        "{text}"
    );
    assert_eq!(
        sample("hermes_hook_calls_skipped{hermes_skip_recorded=\"false\"}"),
        Some(2.0),
        "{text}"
    );
}

#[test]
fn replaying_the_same_events_again_counts_nothing_twice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("hermes-meter.db");
    let mut store = Writer::open(&path).expect("open");
    replay(&mut store, &all_fixtures());
    replay(&mut store, &all_fixtures());
    let receiver = support::grpc(None, None);
    let mut exporter =
        MetricExporter::with_store(grpc_config(&receiver.grpc_endpoint()), store.into_outbox()).expect("exporter");
    check_against_ledger(&points(&push(&mut exporter, &receiver)), &ledger(&path));
}

// --- A real Prometheus -------------------------------------------------------

const PROMETHEUS: &str = "/usr/bin/prometheus";

/// A child process killed (and reaped) when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One GET on loopback; the body of a 200 answer.
fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n")?;
    if !head.starts_with("HTTP/1.1 200") {
        return None;
    }
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        return Some(dechunk(body));
    }
    Some(body.to_string())
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of an instant PromQL query returning one sample, if it does.
fn query(prometheus: &str, promql: &str) -> Option<f64> {
    let body = http_get(prometheus, &format!("/api/v1/query?query={}", encode(promql)))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let result = v["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

/// Polls `f` until it returns `Some` or `timeout` passes.
fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_real_prometheus_scraping_serve_sees_the_ledger_totals_and_fires_the_budget_alert() {
    // Missing Prometheus is a failure, not a silent pass: scripts/test.sh
    // checks for it first and says how to install it.
    assert!(
        Path::new(PROMETHEUS).exists(),
        "{PROMETHEUS} is missing: apt-get install -y prometheus (Debian); this test needs the real server"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let mut store = Writer::open_dir(&home).expect("open");
    replay(&mut store, &all_fixtures());
    let l = ledger(store.path());

    let serve_addr = support::free_addr().to_string();
    let serve = Reaped(
        Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
            .args([
                "--home",
                home.to_str().expect("utf-8 path"),
                "serve",
                "--prometheus",
                &serve_addr,
            ])
            .env("OTEL_TRACES_EXPORTER", "none")
            .env_remove("OTEL_METRICS_EXPORTER")
            .env("HERMES_METER_SESSION_GRACE_SECONDS", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hermes-meter serve"),
    );
    let text = poll(Duration::from_secs(30), || http_get(&serve_addr, "/metrics")).expect("serve answers /metrics");
    assert!(text.contains("# TYPE gen_ai_client_operation_cost histogram"), "{text}");
    assert!(
        !text.contains("gen_ai_usage_cost_total"),
        "previous names only with gen_ai/dup"
    );

    let prom_addr = support::free_addr().to_string();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("collector-config/prometheus/rules/hermes-meter.rules.yaml");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: hermes-meter\n    static_configs:\n      - targets: [\"{serve_addr}\"]\n",
            rules.display()
        ),
    )
    .expect("prometheus config");
    let prometheus = Reaped(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );

    let wait = Duration::from_secs(90);
    let expect = |promql: &str, want: f64| {
        let got = poll(wait, || query(&prom_addr, promql).filter(|v| close(*v, want)));
        assert!(
            got.is_some(),
            "{promql}: wanted {want}, Prometheus says {:?}",
            query(&prom_addr, promql)
        );
    };
    expect("sum(gen_ai_client_operation_cost_sum)", l.cost);
    expect(
        "sum(hermes_token_usage_total{hermes_token_type=\"input\"})",
        l.input as f64,
    );
    expect(
        "sum(hermes_token_usage_total{hermes_token_type=\"cache_read\"})",
        l.cache_read as f64,
    );
    expect(
        "sum(hermes_token_usage_total{hermes_token_type=\"output\"})",
        l.output as f64,
    );
    expect(
        "sum(gen_ai_client_inference_usage_input_tokens_total)",
        (l.input + l.cache_read + l.cache_write) as f64,
    );
    expect(
        "sum(gen_ai_client_inference_operation_output_tokens_count)",
        (l.calls + l.errors) as f64,
    );
    expect(
        "sum(gen_ai_client_inference_operation_output_tokens_count{error_type!=\"\"})",
        l.errors as f64,
    );
    expect(
        "sum(gen_ai_client_inference_duration_seconds_count)",
        (l.calls + l.errors) as f64,
    );
    expect(
        "sum(gen_ai_client_inference_duration_seconds_bucket{le=\"+Inf\"})",
        (l.calls + l.errors) as f64,
    );
    expect("sum(hermes_api_errors_total)", l.errors as f64);
    expect("sum(hermes_tool_calls_total)", l.tools as f64);
    expect("sum(gen_ai_execute_tool_duration_seconds_count)", l.tools as f64);
    expect("sum(hermes_turns_total)", l.turns as f64);
    expect("sum(hermes_sessions_total)", l.sessions as f64);
    let notfound = query(
        &prom_addr,
        "sum(hermes_api_errors_total{http_response_status_code=\"404\"})",
    );
    assert!(
        notfound.is_some_and(|v| v >= 1.0),
        "the model404 fixture's 404: {notfound:?}"
    );

    // Budgets on this route (no OTLP push here): the gauges follow the
    // budget file and the spend within a scrape of each change, and a
    // budget going over its limit makes HermesBudgetHardBurn fire.
    assert!(
        http_get(&prom_addr, "/api/v1/alerts").is_some_and(|b| !b.contains("HermesBudgetHardBurn")),
        "not firing before the budget is exceeded"
    );
    let cli = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
            .arg("--home")
            .arg(&home)
            .args(args)
            .output()
            .expect("hermes-meter");
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let global = "{hermes_budget_scope=\"global\",hermes_budget_window=\"daily\"}";
    cli(&["budget", "set", "global", "daily", "10"]);
    expect(&format!("hermes_budget_limit{global}"), 10.0);
    expect(&format!("hermes_budget_spend{global}"), 0.0);
    replay(&mut store, &[call_now(dir.path(), "spend-now")]);
    expect(&format!("hermes_budget_spend{global}"), 3.0);
    cli(&["budget", "set", "global", "daily", "2"]);
    expect(&format!("hermes_budget_limit{global}"), 2.0);
    expect("hermes_budget_spend / hermes_budget_limit", 1.5);
    let firing = poll(wait, || {
        let body = http_get(&prom_addr, "/api/v1/alerts")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["alerts"].as_array()?.iter().find_map(|a| {
            (a["labels"]["alertname"] == "HermesBudgetHardBurn" && a["state"] == "firing").then(|| a.clone())
        })
    });
    let firing = firing.expect("HermesBudgetHardBurn fires");
    assert_eq!(firing["labels"]["hermes_budget_scope"], "global");
    assert_eq!(firing["labels"]["hermes_budget_window"], "daily");
    // Removed: the series goes stale at the next scrape.
    cli(&["budget", "rm", "global", "daily"]);
    let gone = poll(wait, || {
        let body = http_get(
            &prom_addr,
            &format!("/api/v1/query?query={}", encode("count(hermes_budget_limit)")),
        )?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"].as_array()?.is_empty().then_some(())
    });
    assert!(gone.is_some(), "hermes_budget_limit still scraped after budget rm");
    drop(prometheus);
    drop(serve);
}
