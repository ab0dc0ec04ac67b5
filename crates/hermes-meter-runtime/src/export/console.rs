//! `OTEL_TRACES_EXPORTER=console`: one JSON line per span on stdout, for
//! looking at what would be sent. Attribute values are printed as they
//! are on the span (content capture governs what spans carry).

use hermes_meter_model::span::hex;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};

/// Prints every span of `request`.
pub(super) fn print(request: &ExportTraceServiceRequest) {
    for rs in &request.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let attributes: serde_json::Map<String, serde_json::Value> = span
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), json_of(kv.value.as_ref())))
                    .collect();
                let line = serde_json::json!({
                    "trace_id": hex(&span.trace_id),
                    "span_id": hex(&span.span_id),
                    "parent_span_id": hex(&span.parent_span_id),
                    "name": span.name,
                    "kind": span.kind,
                    "start_time_unix_nano": span.start_time_unix_nano,
                    "end_time_unix_nano": span.end_time_unix_nano,
                    "status": span.status.as_ref().map(|s| s.code),
                    "attributes": attributes,
                });
                println!("{line}");
            }
        }
    }
}

/// `OTEL_METRICS_EXPORTER=console`: one JSON line per data point.
pub(crate) fn print_metrics(request: &opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest) {
    use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
    let attrs = |kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]| -> serde_json::Value {
        kvs.iter()
            .map(|kv| (kv.key.clone(), json_of(kv.value.as_ref())))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let number = |v: &Option<Value>| -> serde_json::Value {
        match v {
            Some(Value::AsInt(i)) => (*i).into(),
            Some(Value::AsDouble(d)) => (*d).into(),
            None => serde_json::Value::Null,
        }
    };
    for rm in &request.resource_metrics {
        for sm in &rm.scope_metrics {
            for metric in &sm.metrics {
                let points: Vec<serde_json::Value> = match &metric.data {
                    Some(Data::Sum(s)) => s
                        .data_points
                        .iter()
                        .map(|p| serde_json::json!({"attributes": attrs(&p.attributes), "value": number(&p.value)}))
                        .collect(),
                    Some(Data::Gauge(g)) => g
                        .data_points
                        .iter()
                        .map(|p| serde_json::json!({"attributes": attrs(&p.attributes), "value": number(&p.value)}))
                        .collect(),
                    Some(Data::Histogram(h)) => h
                        .data_points
                        .iter()
                        .map(|p| {
                            serde_json::json!({"attributes": attrs(&p.attributes), "count": p.count, "sum": p.sum,
                                "bucket_counts": p.bucket_counts})
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                for point in points {
                    println!(
                        "{}",
                        serde_json::json!({"metric": metric.name, "unit": metric.unit, "point": point})
                    );
                }
            }
        }
    }
}

/// `OTEL_LOGS_EXPORTER=console`: one JSON line per log record.
pub(crate) fn print_logs(request: &opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest) {
    for rl in &request.resource_logs {
        for sl in &rl.scope_logs {
            for r in &sl.log_records {
                let attrs: serde_json::Map<_, _> = r
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), json_of(kv.value.as_ref())))
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({
                        "event": r.event_name,
                        "severity": r.severity_text,
                        "body": json_of(r.body.as_ref()),
                        "trace_id": super::hex(&r.trace_id),
                        "span_id": super::hex(&r.span_id),
                        "attributes": attrs,
                    })
                );
            }
        }
    }
}

fn json_of(value: Option<&AnyValue>) -> serde_json::Value {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone().into(),
        Some(any_value::Value::IntValue(i)) => (*i).into(),
        Some(any_value::Value::DoubleValue(d)) => (*d).into(),
        Some(any_value::Value::BoolValue(b)) => (*b).into(),
        Some(any_value::Value::ArrayValue(a)) => a.values.iter().map(|v| json_of(Some(v))).collect(),
        _ => serde_json::Value::Null,
    }
}
