//! Metrics end to end: fixtures replayed into a store, metric data points
//! exported over OTLP to in-process receivers on loopback and compared with
//! the ledger's own sums; a second exporting process continuing every
//! series; a real Prometheus scraping `hermes-meter serve --prometheus`.

use hermes_meter_test_support::fixtures::{all_fixtures, call_now, close, ledger, replay, Ledger};
use hermes_meter_test_support::hermes_main;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use hermes_meter_model::metrics;
use hermes_meter_model::semconv::metric as m;
use hermes_meter_runtime::export::{ExportOverrides, MetricExporter, MetricsConfig, MetricsOverrides};
use hermes_meter_store::Writer;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value, AggregationTemporality};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

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

/// Pushes once, now, and returns the request the receiver got.
fn push(exporter: &mut MetricExporter, receiver: &hermes_meter_test_support::Receiver) -> ExportMetricsServiceRequest {
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
    let receiver = hermes_meter_test_support::grpc(None, None);
    // A budget (the fixtures are days old: nothing spent in today's window).
    std::fs::write(
        dir.path().join("budgets.toml"),
        "timezone = \"UTC\"\n[global]\ndaily = 10.0\ndaily_tokens = 1000000\nrequests_per_minute = 30\n",
    )
    .expect("budgets");
    let mut exporter =
        MetricExporter::with_store(grpc_config(&receiver.grpc_endpoint()), store.into_outbox()).expect("exporter");
    let mut counters = Writer::open(&path).expect("second connection");
    let now = hermes_meter_store::unix_now();
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
        "schema": hermes_meter_store::health::HEALTH_SCHEMA, "state": "ok", "updated_at": now, "updated_by_pid": 1,
        "counts": {"dropped_events": 0, "hermes_skipped_recorded": 1, "hermes_skipped_lost": 0},
    });
    let dir = path.parent().expect("store dir");
    std::fs::write(
        dir.join(hermes_meter_store::health::HEALTH_FILE_NAME),
        record.to_string(),
    )
    .expect("health");
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
    let receiver = hermes_meter_test_support::grpc(None, None);
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
    let receiver = hermes_meter_test_support::http(None);
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
    let receiver = hermes_meter_test_support::grpc(None, None);
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
    let receiver = hermes_meter_test_support::grpc(None, None);
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
    let receiver = hermes_meter_test_support::grpc(None, None);
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
fn serve_metrics(path: &Path) -> hermes_meter_runtime::export::PrometheusServer {
    hermes_meter_runtime::export::PrometheusServer::start(
        "127.0.0.1:0",
        path,
        metrics::AllowList::default(),
        hermes_meter_model::semconv::Names::Current,
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
    let scrape = || hermes_meter_test_support::http_get::ok_body(&addr, "/metrics").expect("a 200 scrape");
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

/// Each rate limit's use and limit are scraped as the requests stand now;
/// a gateway user's own limit stays out (sender ids are not in metrics by
/// default).
#[test]
fn rate_limit_gauges_show_what_each_span_holds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let store = Writer::open_dir(&home).expect("open");
    std::fs::write(
        home.join("budgets.toml"),
        "timezone = \"UTC\"\n[global]\nrequests_per_minute = 30\n[per_sender.overrides.alice]\nrequests_per_minute = 5\n",
    )
    .expect("budgets");
    let now = hermes_meter_store::unix_now();
    let scopes = [(hermes_meter_model::budget::Scope::Global, "")];
    for id in ["r1", "r2"] {
        store
            .rate_start(id, &scopes, now, hermes_meter_store::RateAmounts::default())
            .expect("a request");
    }
    let server = serve_metrics(store.path());
    let text =
        hermes_meter_test_support::http_get::ok_body(&server.addr().to_string(), "/metrics").expect("a 200 scrape");
    let sample = |name: &str| {
        text.lines()
            .find(|l| {
                l.starts_with(&format!("{name}{{"))
                    && l.contains("hermes_budget_scope=\"global\"")
                    && l.contains("hermes_budget_window=\"requests_per_minute\"")
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(sample("hermes_rate_limit_used"), Some(2.0), "{text}");
    assert_eq!(sample("hermes_rate_limit_limit"), Some(30.0), "{text}");
    assert!(!text.contains("alice"), "{text}");
}

#[test]
fn hook_calls_lost_or_skipped_in_the_health_record_are_scraped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let store = Writer::open_dir(&home).expect("open");
    // As the writers leave it: counts summed over every process.
    let record = serde_json::json!({
        "schema": hermes_meter_store::health::HEALTH_SCHEMA, "state": "ok", "updated_at": 1.0, "updated_by_pid": 1,
        "counts": {"dropped_events": 4, "hermes_skipped_recorded": 7, "hermes_skipped_lost": 2},
    });
    std::fs::write(
        home.join(hermes_meter_store::health::HEALTH_FILE_NAME),
        record.to_string(),
    )
    .expect("health");
    let server = serve_metrics(store.path());
    let text =
        hermes_meter_test_support::http_get::ok_body(&server.addr().to_string(), "/metrics").expect("a 200 scrape");
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
    let receiver = hermes_meter_test_support::grpc(None, None);
    let mut exporter =
        MetricExporter::with_store(grpc_config(&receiver.grpc_endpoint()), store.into_outbox()).expect("exporter");
    check_against_ledger(&points(&push(&mut exporter, &receiver)), &ledger(&path));
}
