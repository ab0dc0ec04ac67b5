//! Every surface tells the same story: for each recorded fixture, the
//! report, the Prometheus scrape of `/metrics`, the OTLP metrics, the
//! spans and the viewer's index totals agree on every count they share:
//! LLM calls, failed attempts, tool calls, failed tool calls, non-zero
//! exits Hermes reported as ok, tokens and cost, auxiliary LLM calls
//! included, and the streamed calls of Hermes main with their times to
//! first chunk. Real components: a store in a temp dir, the Prometheus
//! endpoint of `serve`, in-process OTLP receivers on loopback, the
//! viewer's HTTP server.

use hermes_meter_test_support::hermes_main;
use hermes_meter_test_support::http_get;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_model::metrics::AllowList;
use hermes_meter_model::semconv::{attr, metric as m};
use hermes_meter_runtime::export::{
    ExportConfig, ExportOverrides, Exporter, MetricExporter, MetricsConfig, MetricsOverrides,
};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
use opentelemetry_proto::tonic::trace::v1::Span;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixtures() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(FIXTURES)
        .expect("fixtures")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    v
}

/// The counts every surface shows.
#[derive(Debug, Default, Clone, PartialEq)]
struct Counts {
    llm_calls: f64,
    api_errors: f64,
    tool_calls: f64,
    tool_failures: f64,
    nonzero_exits: f64,
    input_tokens: f64,
    output_tokens: f64,
    cost_usd: f64,
    /// Calls with a time to first chunk, and the sum of those times.
    streamed_calls: f64,
    time_to_first_chunk_s: f64,
}

fn agree(what: &str, fixture: &str, a: &Counts, b: &Counts) {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0);
    let pairs = [
        ("llm calls", a.llm_calls, b.llm_calls),
        ("api errors", a.api_errors, b.api_errors),
        ("tool calls", a.tool_calls, b.tool_calls),
        ("tool failures", a.tool_failures, b.tool_failures),
        ("nonzero exits", a.nonzero_exits, b.nonzero_exits),
        ("input tokens", a.input_tokens, b.input_tokens),
        ("output tokens", a.output_tokens, b.output_tokens),
        ("cost", a.cost_usd, b.cost_usd),
        ("streamed calls", a.streamed_calls, b.streamed_calls),
        ("time to first chunk", a.time_to_first_chunk_s, b.time_to_first_chunk_s),
    ];
    for (name, x, y) in pairs {
        assert!(
            close(x, y),
            "{fixture}: {name}: report {x}, {what} {y}\nreport {a:?}\n{what} {b:?}"
        );
    }
}

/// What `hermes-meter report` prints, from the rollups a running Hermes's
/// sweep builds (all of them here), as the other surfaces are read.
fn report_counts(store: &mut Writer) -> Counts {
    while store.roll_up(1e12).expect("roll up").more {}
    assert!(store.rolled_until().expect("mark") > 0);
    let t = store
        .report(&jiff::tz::TimeZone::UTC, 0.0, 1e12, None)
        .expect("report")
        .totals;
    Counts {
        llm_calls: t.llm_calls as f64,
        api_errors: t.api_errors as f64,
        tool_calls: t.tool_calls as f64,
        tool_failures: t.tool_failures as f64,
        nonzero_exits: t.tool_nonzero_exits as f64,
        input_tokens: t.input_tokens as f64,
        output_tokens: t.output_tokens as f64,
        cost_usd: t.cost_usd,
        // The report shows no time to first chunk: the ledger's own rows.
        streamed_calls: store
            .query_scalar::<f64>("SELECT COUNT(*) FROM llm_calls WHERE first_token_at IS NOT NULL")
            .expect("streamed calls"),
        time_to_first_chunk_s: store
            .query_scalar::<f64>("SELECT TOTAL(MAX(first_token_at - started_at, 0)) FROM llm_calls")
            .expect("time to first chunk"),
    }
}

/// Sum of the samples of `name` whose labels contain every `label="value"`
/// of `with` and none of `without`, in Prometheus text.
fn prom_sum(text: &str, name: &str, with: &[&str], without: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && with.iter().all(|w| labels.contains(w)) && !without.iter().any(|w| labels.contains(w)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

fn prometheus_counts(text: &str) -> Counts {
    Counts {
        llm_calls: prom_sum(
            text,
            "gen_ai_client_inference_operation_output_tokens_count",
            &[],
            // Failed attempts are observations of 0 with their error.type.
            &["error_type="],
        ),
        api_errors: prom_sum(text, "hermes_api_errors_total", &[], &[]),
        tool_calls: prom_sum(text, "hermes_tool_calls_total", &[], &[]),
        tool_failures: prom_sum(text, "hermes_tool_calls_total", &[], &["hermes_tool_outcome=\"ok\""]),
        nonzero_exits: prom_sum(
            text,
            "hermes_tool_calls_total",
            &["hermes_tool_outcome=\"nonzero_exit\""],
            &[],
        ),
        input_tokens: prom_sum(text, "hermes_token_usage_total", &["hermes_token_type=\"input\""], &[]),
        output_tokens: prom_sum(text, "hermes_token_usage_total", &["hermes_token_type=\"output\""], &[]),
        cost_usd: prom_sum(text, "gen_ai_client_operation_cost_sum", &[], &[]),
        streamed_calls: prom_sum(
            text,
            "gen_ai_client_inference_time_to_first_chunk_seconds_count",
            &[],
            &[],
        ),
        time_to_first_chunk_s: prom_sum(
            text,
            "gen_ai_client_inference_time_to_first_chunk_seconds_sum",
            &[],
            &[],
        ),
    }
}

fn string_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.as_str()),
            _ => None,
        })
}

fn number_attr(attrs: &[KeyValue], key: &str) -> f64 {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::IntValue(i) => Some(*i as f64),
            AnyValue::DoubleValue(d) => Some(*d),
            _ => None,
        })
        .unwrap_or(0.0)
}

/// Sum (or, for a histogram, count) of the points of `name` whose
/// attributes match `pred`.
fn otlp_sum(request: &ExportMetricsServiceRequest, name: &str, pred: impl Fn(&[KeyValue]) -> bool) -> f64 {
    let mut total = 0.0;
    for rm in &request.resource_metrics {
        for sm in &rm.scope_metrics {
            for metric in sm.metrics.iter().filter(|x| x.name == name) {
                match &metric.data {
                    Some(Data::Sum(s)) => {
                        for p in s.data_points.iter().filter(|p| pred(&p.attributes)) {
                            total += match p.value {
                                Some(Value::AsDouble(d)) => d,
                                Some(Value::AsInt(i)) => i as f64,
                                None => 0.0,
                            };
                        }
                    }
                    Some(Data::Histogram(h)) => {
                        for p in h.data_points.iter().filter(|p| pred(&p.attributes)) {
                            total += p.count as f64;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    total
}

/// The sum of the observations of histogram `name`.
fn otlp_histogram_sum(request: &ExportMetricsServiceRequest, name: &str) -> f64 {
    let metrics = request
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics);
    metrics
        .filter(|x| x.name == name)
        .filter_map(|x| match &x.data {
            Some(Data::Histogram(h)) => Some(h.data_points.iter().filter_map(|p| p.sum).sum::<f64>()),
            _ => None,
        })
        .sum()
}

fn otlp_counts(r: &ExportMetricsServiceRequest) -> Counts {
    let is = |key: &'static str, value: &'static str| move |a: &[KeyValue]| string_attr(a, key) == Some(value);
    let outcome = attr::HERMES_TOOL_OUTCOME;
    Counts {
        llm_calls: otlp_sum(r, m::OPERATION_OUTPUT_TOKENS, |a| {
            string_attr(a, attr::ERROR_TYPE).is_none()
        }),
        api_errors: otlp_sum(r, m::API_ERRORS, |_| true),
        tool_calls: otlp_sum(r, m::TOOL_CALLS, |_| true),
        tool_failures: otlp_sum(r, m::TOOL_CALLS, |a| string_attr(a, outcome) != Some("ok")),
        nonzero_exits: otlp_sum(r, m::TOOL_CALLS, is(outcome, "nonzero_exit")),
        input_tokens: otlp_sum(r, m::HERMES_TOKEN_USAGE, is("hermes.token.type", "input")),
        output_tokens: otlp_sum(r, m::HERMES_TOKEN_USAGE, is("hermes.token.type", "output")),
        cost_usd: otlp_histogram_sum(r, m::OPERATION_COST),
        streamed_calls: otlp_sum(r, m::INFERENCE_TIME_TO_FIRST_CHUNK, |_| true),
        time_to_first_chunk_s: otlp_histogram_sum(r, m::INFERENCE_TIME_TO_FIRST_CHUNK),
    }
}

fn span_counts(spans: &[Span]) -> Counts {
    let mut c = Counts::default();
    for s in spans {
        let a = &s.attributes;
        match string_attr(a, attr::GEN_AI_OPERATION_NAME) {
            // An attempt a dead process left open ends with its run and says
            // so: neither a call nor a failed attempt anywhere else.
            Some("chat") if string_attr(a, attr::HERMES_SPAN_CLOSE_REASON).is_some() => {}
            Some("chat") if string_attr(a, attr::ERROR_TYPE).is_some() => c.api_errors += 1.0,
            Some("chat") => {
                c.llm_calls += 1.0;
                // Spans carry input in the semconv meaning (cache included);
                // the report and hermes.token.usage count it apart.
                c.input_tokens += number_attr(a, attr::GEN_AI_USAGE_INPUT_TOKENS)
                    - number_attr(a, attr::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)
                    - number_attr(a, attr::GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS);
                c.output_tokens += number_attr(a, attr::GEN_AI_USAGE_OUTPUT_TOKENS);
                c.cost_usd += number_attr(a, attr::HERMES_USAGE_COST_USD);
                if a.iter().any(|kv| kv.key == attr::GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK) {
                    c.streamed_calls += 1.0;
                    c.time_to_first_chunk_s += number_attr(a, attr::GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK);
                }
                // The proposed GenAI cost attributes say the same amount.
                assert_eq!(
                    number_attr(a, attr::GEN_AI_USAGE_COST_AMOUNT),
                    number_attr(a, attr::HERMES_USAGE_COST_USD)
                );
                if a.iter().any(|kv| kv.key == attr::HERMES_USAGE_COST_USD) {
                    assert_eq!(string_attr(a, attr::GEN_AI_USAGE_COST_CURRENCY), Some("USD"));
                    assert_eq!(string_attr(a, attr::GEN_AI_USAGE_COST_SOURCE), Some("local"));
                }
            }
            Some("execute_tool") => {
                c.tool_calls += 1.0;
                let outcome = string_attr(a, attr::HERMES_TOOL_OUTCOME);
                c.tool_failures += (outcome != Some("ok")) as u8 as f64;
                c.nonzero_exits += (outcome == Some("nonzero_exit")) as u8 as f64;
            }
            _ => {}
        }
    }
    c
}

fn env(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    move |k| map.get(k).cloned()
}

/// One GET of `/metrics` on loopback; the body.
fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("answer");
    let (head, body) = raw.split_once("\r\n\r\n").expect("http answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

fn replay(store: &mut Writer, file: &Path) {
    let dir = tempfile::tempdir().expect("temp dir");
    let pricing = dir.path().join("pricing.toml");
    std::fs::write(&pricing, "[models.\"mock-model\"]\ninput = 3.0\noutput = 15.0\n").expect("pricing");
    store.set_prices(hermes_meter_runtime::config::load_prices(&pricing).expect("prices"));
    let mut stats = ReplayStats::default();
    replay_file(store, file, DecodeOptions::default(), &mut stats).expect("replay");
    assert!(stats.bad_lines.is_empty(), "{:?}", stats.bad_lines);
}

/// The REPL fixture plus an auxiliary call (a title), as the package feeds
/// it from Hermes 0.19.0's own accounting: auxiliary calls are LLM calls
/// on every surface.
fn with_auxiliary_call(dir: &Path) -> PathBuf {
    let base = std::fs::read_to_string(Path::new(FIXTURES).join("multi_turn.jsonl")).expect("fixture");
    let session = base
        .lines()
        .find_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).ok()?;
            v["kwargs"]["session_id"].as_str().map(str::to_string)
        })
        .expect("a session id");
    let aux = serde_json::json!({
        "hook": "post_auxiliary_call", "t": 1796002700.5, "pid": 1, "thread": "title",
        "kwargs": {"session_id": session, "aux_task": "title_generation", "model": "mock-model",
                   "provider": "custom", "usage": {"input_tokens": 1020, "output_tokens": 42}},
    });
    let path = dir.join("multi_turn_with_an_auxiliary_call.jsonl");
    std::fs::write(&path, format!("{base}{aux}\n")).expect("write");
    path
}

#[test]
fn report_prometheus_otlp_metrics_and_spans_agree_on_every_fixture() {
    let mut all = Counts::default();
    let extra = tempfile::tempdir().expect("temp dir");
    let mut files = fixtures();
    files.push(with_auxiliary_call(extra.path()));
    let started = 1_796_002_700.0;
    files.push(hermes_main::streamed_call(
        extra.path(),
        "main-streamed",
        started,
        Some(started + 0.75),
    ));
    let mut aux_calls = 0;
    for file in files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("hermes-meter.db");
        let mut store = Writer::open(&path).expect("open");
        replay(&mut store, &file);

        // Spans (this also closes what the fixture's processes left open).
        let traces = hermes_meter_test_support::grpc(None, None);
        let config = ExportConfig::resolve(
            ExportOverrides::default(),
            env(&[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.grpc_endpoint()),
                ("HERMES_METER_SESSION_GRACE_SECONDS", "0".into()),
                ("HERMES_METER_IDLE_TIMEOUT_SECONDS", "60".into()),
            ]),
        );
        let mut exporter = Exporter::with_store(config, store.into_outbox()).expect("exporter");
        exporter.close_idle().expect("close idle");
        let step = exporter.flush(Instant::now() + Duration::from_secs(30)).expect("flush");
        assert!(step.error.is_none(), "{name}: {step:?}");
        drop(exporter);
        let spans = span_counts(&traces.received.spans());

        let mut store = Writer::open(&path).expect("reopen");
        let report = report_counts(&mut store);
        let cache = {
            let t = store
                .report(&jiff::tz::TimeZone::UTC, 0.0, 1e12, None)
                .expect("report")
                .totals;
            (t.cache_read_tokens + t.cache_write_tokens) as f64
        };
        aux_calls += store
            .query_scalar::<i64>("SELECT COUNT(*) FROM llm_calls WHERE aux_task IS NOT NULL")
            .expect("aux calls");
        assert!(
            report.llm_calls + report.tool_calls + report.api_errors > 0.0,
            "{name}: empty fixture?"
        );

        // The Prometheus endpoint of `serve`.
        let server = hermes_meter_runtime::export::PrometheusServer::start(
            "127.0.0.1:0",
            &path,
            AllowList::default(),
            hermes_meter_model::semconv::Names::Current,
            0.0,
        )
        .expect("prometheus endpoint");
        let prometheus = prometheus_counts(&scrape(server.addr()));
        drop(server);

        // OTLP metrics.
        let metrics_receiver = hermes_meter_test_support::grpc(None, None);
        let metrics_config = MetricsConfig::resolve(
            ExportOverrides::default(),
            MetricsOverrides::default(),
            env(&[
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", metrics_receiver.grpc_endpoint()),
                ("HERMES_METER_SESSION_GRACE_SECONDS", "0".into()),
            ]),
        );
        let mut metrics = MetricExporter::with_store(metrics_config, store.into_outbox()).expect("metric exporter");
        let step = metrics.flush(Instant::now() + Duration::from_secs(30)).expect("push");
        assert!(step.error.is_none() && step.leased, "{name}: {step:?}");
        let requests = metrics_receiver.received.metric_requests();
        let otlp = otlp_counts(requests.last().expect("a metric request"));

        // The viewer's index, all time, as `/api/sessions` answers it: the
        // totals of every session (input with cache reads and writes, as
        // the index shows it).
        let ui = hermes_meter::ui::UiServer::start(hermes_meter::ui::UiConfig {
            listen: "127.0.0.1:0".into(),
            store_dir: dir.path().to_path_buf(),
            token: None,
            span_options: hermes_meter_model::span::SpanOptions::default(),
            base: String::new(),
            hermes_home: None,
            trace_link: None,
        })
        .expect("viewer");
        let got = http_get::get(ui.addr(), "/api/sessions", &[]);
        assert_eq!(got.status, 200, "{name}: {}", got.body);
        let index: serde_json::Value = serde_json::from_str(&got.body).expect("index JSON");
        let number = |k: &str| {
            index["totals"][k]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}: totals.{k}"))
        };
        let viewer = Counts {
            llm_calls: number("llm_calls"),
            api_errors: number("api_errors"),
            input_tokens: number("input_tokens"),
            output_tokens: number("output_tokens"),
            cost_usd: number("cost_usd"),
            ..report.clone()
        };
        let with_cache = Counts {
            input_tokens: report.input_tokens + cache,
            ..report.clone()
        };
        agree("viewer", &name, &with_cache, &viewer);

        agree("prometheus", &name, &report, &prometheus);
        agree("otlp metrics", &name, &report, &otlp);
        agree("spans", &name, &report, &spans);
        all.tool_calls += report.tool_calls;
        all.nonzero_exits += report.nonzero_exits;
        all.api_errors += report.api_errors;
        all.streamed_calls += report.streamed_calls;
    }
    // The fixtures hold what the comparison is about.
    assert!(
        all.nonzero_exits >= 1.0,
        "no fixture has a non-zero exit Hermes called ok: {all:?}"
    );
    assert!(all.api_errors >= 1.0 && all.tool_calls >= 1.0, "{all:?}");
    assert_eq!(aux_calls, 1, "the auxiliary call was compared too");
    assert_eq!(
        all.streamed_calls, 1.0,
        "the streamed call of Hermes main was compared too"
    );
}

/// An auxiliary call (a title) under the dated id the provider returned
/// leaves the session's model as the agent's: the session list shows the
/// model the session ran on, not its title call's.
#[test]
fn an_auxiliary_call_does_not_rename_its_sessions_model() {
    let extra = tempfile::tempdir().expect("temp dir");
    let file = with_auxiliary_call(extra.path());
    let mut lines: Vec<String> = std::fs::read_to_string(&file)
        .expect("read")
        .lines()
        .map(str::to_string)
        .collect();
    let mut aux: serde_json::Value = serde_json::from_str(lines.last().expect("the aux line")).expect("json");
    aux["kwargs"]["model"] = "gpt-4o-mini-2024-07-18".into();
    *lines.last_mut().expect("line") = aux.to_string();
    std::fs::write(&file, lines.join("\n") + "\n").expect("write");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("store");
    replay(&mut store, &file);
    let renamed: i64 = store
        .query_scalar("SELECT COUNT(*) FROM runs WHERE model IS NOT 'mock-model'")
        .expect("runs");
    assert_eq!(renamed, 0, "every session keeps the agent's model");
    let aux: String = store
        .query_scalar("SELECT model FROM llm_calls WHERE aux_task IS NOT NULL")
        .expect("aux call");
    assert_eq!(
        aux, "gpt-4o-mini-2024-07-18",
        "the call itself keeps its id, and its price"
    );
}
