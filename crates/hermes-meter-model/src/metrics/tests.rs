//! Unit tests of the instruments, measurements and renderings (table tests, no I/O).

use super::*;
use crate::rows::ToolRow;
use crate::semconv::metric as m;
use crate::semconv::metric::attr as mattr;
use crate::semconv::{attr, Names};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, AggregationTemporality};

fn run() -> RunLabels {
    RunLabels {
        platform: Some("cli".into()),
        cron_job_id: None,
        model: Some("run-model".into()),
        provider: Some("openrouter".into()),
        sender_id: Some("alice".into()),
        profile: Some("work".into()),
    }
}

fn series_of(increments: &[Increment]) -> Vec<SeriesRow> {
    // The store's fold, in memory: one row per increment is enough here.
    increments
        .iter()
        .map(|i| {
            let (value, buckets, min, max) = match &i.add {
                Add::Sum(v) => (*v, None, None, None),
                Add::Observe { value, bounds } => {
                    let mut b = vec![0; bounds.len() + 1];
                    b[crate::rows::bucket_index(*value, bounds)] = 1;
                    (*value, Some(b), Some(*value), Some(*value))
                }
            };
            SeriesRow {
                metric: i.metric.to_string(),
                attrs: i.attrs.clone(),
                value,
                count: 1,
                buckets,
                min,
                max,
                updated_at: 0.0,
            }
        })
        .collect()
}

fn call() -> LlmCallFact {
    LlmCallFact {
        model: Some("gpt-x".into()),
        provider: Some("openai".into()),
        started_at: 10.0,
        ended_at: 11.5,
        input_tokens: 100,
        output_tokens: 20,
        cache_read_tokens: 300,
        cache_write_tokens: 4,
        reasoning_tokens: 7,
        cost_usd: 0.25,
        ..LlmCallFact::default()
    }
}

/// [`call`] streamed: its first token came 0.4 s after it started.
fn streamed_call() -> LlmCallFact {
    LlmCallFact {
        first_token_at: Some(10.4),
        ..call()
    }
}

#[test]
fn a_streamed_call_observes_its_time_to_first_chunk_with_the_duration_attributes() {
    let mut out = Vec::new();
    measure(&MetricFact::LlmCall(streamed_call(), run()), &mut out);
    let attrs_of = |metric: &str| {
        let incs: Vec<&Increment> = out.iter().filter(|i| i.metric == metric).collect();
        assert_eq!(incs.len(), 1, "{metric}: one measurement");
        incs[0].clone()
    };
    let ttft = attrs_of(m::INFERENCE_TIME_TO_FIRST_CHUNK);
    assert_eq!(ttft.attrs, attrs_of(m::INFERENCE_DURATION).attrs);
    let previous = attrs_of(m::TIME_TO_FIRST_CHUNK);
    assert_eq!(
        (&previous.attrs, &previous.add),
        (&ttft.attrs, &ttft.add),
        "the previous name, the same measurement"
    );
    let Add::Observe { value, bounds } = ttft.add else {
        panic!("a histogram observation")
    };
    assert!((value - 0.4).abs() < 1e-9, "{value}");
    assert_eq!(bounds, DURATION_BUCKETS);
}

#[test]
fn a_call_without_a_first_token_time_observes_no_time_to_first_chunk() {
    let mut out = Vec::new();
    measure(&MetricFact::LlmCall(call(), run()), &mut out);
    assert!(out.iter().any(|i| i.metric == m::INFERENCE_DURATION));
    assert!(!out
        .iter()
        .any(|i| i.metric == m::INFERENCE_TIME_TO_FIRST_CHUNK || i.metric == m::TIME_TO_FIRST_CHUNK));
}

#[test]
fn an_llm_call_counts_input_with_cache_on_semconv_and_without_on_hermes_tokens() {
    let mut out = Vec::new();
    measure(&MetricFact::LlmCall(call(), run()), &mut out);
    let series = project(&series_of(&out), &[], AllowList::default(), Names::Current);
    let get = |metric: &str, key: &str, v: &str| {
        series
            .iter()
            .find(|s| {
                s.instrument.name == metric && s.attrs.iter().any(|(k, x)| k == key && *x == AttrValue::Str(v.into()))
            })
            .map(|s| s.value)
    };
    let model = |metric: &str| get(metric, attr::GEN_AI_REQUEST_MODEL, "gpt-x");
    assert_eq!(model(m::INPUT_TOKENS), Some(404.0));
    assert_eq!(model(m::OUTPUT_TOKENS), Some(20.0));
    assert_eq!(model(m::CACHE_READ_TOKENS), Some(300.0));
    assert_eq!(model(m::CACHE_WRITE_TOKENS), Some(4.0));
    assert_eq!(model(m::REASONING_TOKENS), Some(7.0));
    assert_eq!(
        get(m::INPUT_TOKENS, mattr::GEN_AI_TOKEN_MODALITY, m::MODALITY_UNKNOWN),
        Some(404.0),
        "Hermes reports no modality"
    );
    assert_eq!(model(m::OPERATION_INPUT_TOKENS), Some(404.0));
    assert_eq!(model(m::OPERATION_OUTPUT_TOKENS), Some(20.0));
    assert_eq!(
        get(m::HERMES_TOKEN_USAGE, mattr::HERMES_TOKEN_TYPE, "input"),
        Some(100.0)
    );
    assert_eq!(
        get(m::HERMES_TOKEN_USAGE, mattr::HERMES_TOKEN_TYPE, "cache_read"),
        Some(300.0)
    );
    assert_eq!(
        get(m::HERMES_TOKEN_USAGE, mattr::HERMES_TOKEN_TYPE, "reasoning"),
        Some(7.0)
    );
    assert_eq!(
        get(m::OPERATION_COST, mattr::GEN_AI_USAGE_COST_CURRENCY, "USD"),
        Some(0.25)
    );
    assert_eq!(model(m::INFERENCE_DURATION), Some(1.5));
}

#[test]
fn previous_metric_names_are_sent_only_when_opted_in_and_count_the_same() {
    let mut out = Vec::new();
    measure(&MetricFact::LlmCall(call(), run()), &mut out);
    let rows = series_of(&out);
    let names = |n| -> Vec<&'static str> {
        let mut v: Vec<_> = project(&rows, &[], AllowList::default(), n)
            .iter()
            .map(|s| s.instrument.name)
            .collect();
        v.dedup();
        v
    };
    let current = names(Names::Current);
    for previous in [m::TOKEN_USAGE, m::OPERATION_DURATION, m::COST] {
        assert!(!current.contains(&previous), "{previous} is a previous name");
    }
    assert!(current.contains(&m::INPUT_TOKENS) && current.contains(&m::OPERATION_COST));
    let dup = names(Names::Dup);
    for both in [
        m::TOKEN_USAGE,
        m::OPERATION_DURATION,
        m::COST,
        m::INPUT_TOKENS,
        m::OPERATION_COST,
    ] {
        assert!(dup.contains(&both), "{both} under gen_ai/dup");
    }
    let series = project(&rows, &[], AllowList::default(), Names::Dup);
    let value = |metric: &str| {
        series
            .iter()
            .filter(|s| s.instrument.name == metric)
            .map(|s| s.value)
            .sum::<f64>()
    };
    assert_eq!(value(m::COST), value(m::OPERATION_COST));
    assert_eq!(value(m::OPERATION_DURATION), value(m::INFERENCE_DURATION));
    assert_eq!(value(m::TOKEN_USAGE), value(m::INPUT_TOKENS) + value(m::OUTPUT_TOKENS));
}

#[test]
fn sender_and_profile_reach_metrics_only_when_allow_listed() {
    let mut out = Vec::new();
    measure(&MetricFact::LlmCall(call(), run()), &mut out);
    let rows = series_of(&out);
    let keys = |allow| -> Vec<String> {
        project(&rows, &[], allow, Names::Current)
            .iter()
            .flat_map(|s| s.attrs.iter().map(|(k, _)| k.clone()))
            .collect()
    };
    let off = keys(AllowList::default());
    assert!(!off
        .iter()
        .any(|k| k == attr::HERMES_SENDER_ID || k == attr::HERMES_PROFILE));
    let on = keys(AllowList::parse("sender,profile").expect("parse"));
    assert!(on.iter().any(|k| k == attr::HERMES_SENDER_ID));
    assert!(on.iter().any(|k| k == attr::HERMES_PROFILE));
    assert_eq!(
        AllowList::parse("sender"),
        Some(AllowList {
            sender: true,
            profile: false
        })
    );
    assert_eq!(AllowList::parse("session_id"), None, "unknown names are refused");
    assert_eq!(AllowList::parse(""), Some(AllowList::default()));
}

#[test]
fn series_that_differ_only_in_left_out_attributes_are_summed() {
    let mut out = Vec::new();
    let mut other = run();
    other.sender_id = Some("bob".into());
    measure(&MetricFact::LlmCall(call(), run()), &mut out);
    measure(&MetricFact::LlmCall(call(), other), &mut out);
    let series = project(&series_of(&out), &[], AllowList::default(), Names::Current);
    let cost: Vec<&Series> = series
        .iter()
        .filter(|s| s.instrument.name == m::OPERATION_COST)
        .collect();
    assert_eq!(cost.len(), 1);
    assert_eq!((cost[0].value, cost[0].count), (0.5, 2));
    let hist: Vec<&Series> = series
        .iter()
        .filter(|s| s.instrument.name == m::INFERENCE_DURATION)
        .collect();
    assert_eq!((hist[0].count, hist[0].buckets.iter().sum::<u64>()), (2, 2));
}

#[test]
fn api_errors_carry_status_reason_and_retryable_but_no_ids() {
    let mut out = Vec::new();
    let e = ApiErrorFact {
        model: Some("m".into()),
        provider: Some("p".into()),
        started_at: 1.0,
        ended_at: 2.0,
        status_code: Some(404),
        retryable: Some(false),
        reason: Some("model_not_found".into()),
        error_type: Some("NotFoundError".into()),
    };
    measure(&MetricFact::ApiError(e, run()), &mut out);
    let errors = out.iter().find(|i| i.metric == m::API_ERRORS).expect("error counter");
    assert_eq!(
        errors.attrs,
        r#"[["error.type","NotFoundError"],["gen_ai.provider.name","p"],["gen_ai.request.model","m"],["hermes.api.retryable",false],["hermes.error.reason","model_not_found"],["http.response.status_code",404]]"#
    );
    let duration = out
        .iter()
        .find(|i| i.metric == m::INFERENCE_DURATION)
        .expect("duration");
    assert!(duration.attrs.contains("NotFoundError"));
    let per_call = [m::OPERATION_INPUT_TOKENS, m::OPERATION_OUTPUT_TOKENS, m::TOKEN_USAGE];
    let tokens: Vec<_> = out.iter().filter(|i| per_call.contains(&i.metric)).collect();
    assert_eq!(tokens.len(), 4, "input and output, each 0, under both names");
    for t in tokens {
        assert!(
            matches!(t.add, crate::rows::Add::Observe { value, .. } if value == 0.0),
            "{:?}",
            t.add
        );
        assert!(t.attrs.contains(r#"["error.type","NotFoundError"]"#), "{}", t.attrs);
    }
}

#[test]
fn tool_calls_follow_the_span_outcome() {
    let mut out = Vec::new();
    let tool = ToolRow {
        tool_name: "terminal".into(),
        started_at: 1.0,
        ended_at: Some(3.0),
        ok: Some(true),
        status: Some("ok".into()),
        exit_code: Some(2),
        ..ToolRow::default()
    };
    measure(&MetricFact::Tool(tool, None, run()), &mut out);
    assert!(
        out[0].attrs.contains(r#"["hermes.tool.outcome","nonzero_exit"]"#),
        "{:?}",
        out[0]
    );
    assert!(out[1].attrs.contains(r#"["error.type","2"]"#), "{:?}", out[1]);
    assert_eq!(
        out[1].add,
        Add::Observe {
            value: 2.0,
            bounds: DURATION_BUCKETS
        }
    );
}

#[test]
fn prometheus_text_has_registry_names_cumulative_buckets_and_escaped_labels() {
    let series = vec![
        Series {
            instrument: instrument(m::TOOL_DURATION).expect("instrument"),
            attrs: vec![("gen_ai.tool.name".into(), AttrValue::Str("a\"b".into()))],
            value: 1.5,
            count: 3,
            buckets: {
                let mut b = vec![0; 15];
                b[0] = 1;
                b[3] = 2;
                b
            },
            min: None,
            max: None,
        },
        Series {
            instrument: instrument(m::API_ERRORS).expect("instrument"),
            attrs: vec![
                ("http.response.status_code".into(), AttrValue::Int(404)),
                ("hermes.api.retryable".into(), AttrValue::Bool(false)),
            ],
            value: 2.0,
            count: 2,
            buckets: Vec::new(),
            min: None,
            max: None,
        },
    ];
    let text = prometheus_text(&series);
    assert!(
        text.contains("# TYPE gen_ai_execute_tool_duration_seconds histogram\n"),
        "{text}"
    );
    assert!(text.contains("gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"a\\\"b\",le=\"0.01\"} 1\n"));
    assert!(text.contains("gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"a\\\"b\",le=\"0.04\"} 1\n"));
    assert!(text.contains("gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"a\\\"b\",le=\"0.08\"} 3\n"));
    assert!(text.contains("gen_ai_execute_tool_duration_seconds_bucket{gen_ai_tool_name=\"a\\\"b\",le=\"+Inf\"} 3\n"));
    assert!(text.contains("gen_ai_execute_tool_duration_seconds_sum{gen_ai_tool_name=\"a\\\"b\"} 1.5\n"));
    assert!(text.contains("gen_ai_execute_tool_duration_seconds_count{gen_ai_tool_name=\"a\\\"b\"} 3\n"));
    assert!(text.contains("# TYPE hermes_api_errors_total counter\n"));
    assert!(
        text.contains("hermes_api_errors_total{http_response_status_code=\"404\",hermes_api_retryable=\"false\"} 2\n")
    );
}

#[test]
fn otlp_sums_are_cumulative_monotonic_from_the_store_start() {
    let mut out = Vec::new();
    measure(&MetricFact::Turn("ok".into(), run()), &mut out);
    let series = project(&series_of(&out), &[], AllowList::default(), Names::Current);
    let metrics = otlp_metrics(&series, 100.0, 200.0, Temporality::Cumulative);
    assert_eq!(metrics.len(), 1);
    let Some(metric::Data::Sum(s)) = &metrics[0].data else {
        panic!("a sum")
    };
    assert!(s.is_monotonic);
    assert_eq!(s.aggregation_temporality, AggregationTemporality::Cumulative as i32);
    assert_eq!(s.data_points[0].start_time_unix_nano, 100_000_000_000);
    assert_eq!(s.data_points[0].value, Some(number_data_point::Value::AsInt(1)));
    assert_eq!(data_points(&metrics), 1);
}

#[test]
fn budget_gauges_and_counters_have_the_registry_attributes() {
    let rows = budget_gauge_rows(&[BudgetReading {
        scope: "global",
        id: "",
        window: "daily",
        tokens: false,
        spend: 3.0,
        limit: 2.0,
        projected: 4.5,
    }]);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].0, m::BUDGET_SPEND);
    assert_eq!((rows[2].0, rows[2].2), (m::BUDGET_PROJECTED, 4.5));
    assert_eq!(rows[2].1, rows[0].1, "the same labels as spend and limit");
    assert_eq!(
        rows[0].1,
        r#"[["hermes.budget.id",""],["hermes.budget.scope","global"],["hermes.budget.window","daily"]]"#
    );
    let tokens = budget_gauge_rows(&[BudgetReading {
        scope: "global",
        id: "",
        window: "daily",
        tokens: true,
        spend: 3e6,
        limit: 5e6,
        projected: 6e6,
    }]);
    let names: Vec<&str> = tokens.iter().map(|r| r.0).collect();
    assert_eq!(
        names,
        [m::BUDGET_TOKENS, m::BUDGET_TOKEN_LIMIT, m::BUDGET_TOKENS_PROJECTED],
        "a token budget never lands in a USD series"
    );
    assert_eq!(tokens[0].1, rows[0].1);
    assert!(verdict_attrs("cron", "daily", "paused").contains("hermes.budget.verdict"));
    assert_eq!(alert_attrs("budget_hard"), r#"[["hermes.alert.kind","budget_hard"]]"#);
}

/// Every budget window's name is a value the registry lists for
/// `hermes.budget.window` (a rolling width and a rate limit too), and every
/// verdict one it lists for `hermes.budget.verdict`.
#[test]
fn every_budget_window_is_in_the_registry() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../semconv/docs/names.json");
    let names: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("names.json")).expect("json");
    let values = names["attributes"]["hermes.budget.window"]["values"]
        .as_array()
        .unwrap_or_else(|| {
            panic!(
                "no hermes.budget.window values: {}",
                names["attributes"]["hermes.budget.window"]
            )
        });
    for w in crate::budget::Window::every() {
        assert!(values.iter().any(|v| v == w.as_str()), "{w} is not in the registry");
    }
    // A rate limit's verdicts name it as their window.
    for r in crate::budget::rate::Rate::ALL {
        assert!(values.iter().any(|v| v == r.key()), "{r} is not in the registry");
    }
    let verdicts = names["attributes"]["hermes.budget.verdict"]["values"]
        .as_array()
        .expect("verdict values");
    for v in crate::budget::verdict::ALL {
        assert!(verdicts.iter().any(|x| x == v), "verdict {v} is not in the registry");
    }
}

/// Every instrument matches the registry (`semconv/docs/names.json`):
/// kind, unit, buckets, Prometheus name; and every attribute a
/// measurement sets is one the registry lists for that metric.
#[test]
fn instruments_and_attributes_match_the_semconv_registry() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../semconv/docs/names.json");
    let names: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("names.json")).expect("json");
    let defs = names["metrics"].as_array().expect("metrics");
    assert_eq!(defs.len(), INSTRUMENTS.len());
    for i in INSTRUMENTS {
        let def = defs
            .iter()
            .find(|d| d["name"] == i.name)
            .unwrap_or_else(|| panic!("{} not in the registry", i.name));
        let kind = match i.kind {
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
            Kind::Gauge => "gauge",
        };
        assert_eq!(def["instrument"], kind, "{}", i.name);
        assert_eq!(def["unit"], i.unit, "{}", i.name);
        assert_eq!(def["prometheus_name"], i.prometheus_name, "{}", i.name);
        let buckets: Vec<f64> = def["bucket_boundaries"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_f64()).collect())
            .unwrap_or_default();
        assert_eq!(buckets, i.buckets, "{}", i.name);
    }
    let mut out = Vec::new();
    let mut cron = run();
    cron.cron_job_id = Some("job".into());
    measure(&MetricFact::LlmCall(streamed_call(), cron.clone()), &mut out);
    measure(
        &MetricFact::ApiError(
            ApiErrorFact {
                status_code: Some(500),
                retryable: Some(true),
                reason: Some("server_error".into()),
                ..ApiErrorFact::default()
            },
            cron.clone(),
        ),
        &mut out,
    );
    let tool = ToolRow {
        tool_name: "t".into(),
        ended_at: Some(1.0),
        ok: Some(false),
        ..ToolRow::default()
    };
    measure(&MetricFact::Tool(tool, Some(0.5), cron.clone()), &mut out);
    measure(&MetricFact::Turn("ok".into(), cron.clone()), &mut out);
    measure(&MetricFact::Session("ok".into(), cron), &mut out);
    let reading = BudgetReading {
        scope: "global",
        id: "",
        window: "daily",
        tokens: false,
        spend: 1.0,
        limit: 1.0,
        projected: 1.0,
    };
    let in_tokens = BudgetReading {
        tokens: true,
        ..reading
    };
    for (metric, attrs, _) in budget_gauge_rows(&[reading, in_tokens])
        .into_iter()
        .chain([fleet_lag_row("5f0c8e2a", 1.5)])
        .chain(hook_call_rows(1, 2, 3))
        .chain(rate_limit_rows("global", "", "requests_per_minute", 2.0, 30.0))
    {
        out.push(Increment {
            metric,
            attrs,
            add: Add::Sum(0.0),
        });
    }
    for (metric, attrs) in [
        (m::BUDGET_VERDICTS, verdict_attrs("global", "daily", "soft")),
        (m::ALERTS, alert_attrs("budget_soft")),
    ] {
        out.push(Increment {
            metric,
            attrs,
            add: Add::Sum(1.0),
        });
    }
    let mut seen = std::collections::HashSet::new();
    for inc in &out {
        seen.insert(inc.metric);
        let def = defs.iter().find(|d| d["name"] == inc.metric).expect("registered");
        let allowed: Vec<&str> = def["attributes"]
            .as_array()
            .expect("attributes")
            .iter()
            .filter_map(|a| a["id"].as_str())
            .collect();
        for (k, _) in crate::rows::decode_attrs(&inc.attrs) {
            assert!(
                allowed.contains(&k.as_str()),
                "{}: {k} is not in the registry",
                inc.metric
            );
        }
    }
    assert_eq!(seen.len(), INSTRUMENTS.len(), "every instrument is measured: {seen:?}");
}
