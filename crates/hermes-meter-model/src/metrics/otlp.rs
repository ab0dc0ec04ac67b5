//! Series as OTLP metrics: monotonic sums, explicit-bucket histograms and
//! gauges. Must not touch: Prometheus text.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    Sum,
};

use super::instruments::{Kind, INSTRUMENTS};
use super::series::{Series, Temporality};
use crate::rows::{AttrValue, Attrs};

fn nanos(t: f64) -> u64 {
    (t.max(0.0) * 1e9) as u64
}

fn key_values(attrs: &Attrs) -> Vec<KeyValue> {
    attrs
        .iter()
        .map(|(k, v)| KeyValue {
            key: k.clone(),
            value: Some(AnyValue {
                value: Some(match v {
                    AttrValue::Str(s) => any_value::Value::StringValue(s.clone()),
                    AttrValue::Int(i) => any_value::Value::IntValue(*i),
                    AttrValue::Bool(b) => any_value::Value::BoolValue(*b),
                }),
            }),
            ..KeyValue::default()
        })
        .collect()
}

/// The OTLP metrics of `series` (from [`super::project`]): monotonic sums,
/// explicit-bucket histograms and gauges, one [`Metric`] per instrument
/// that has series. `start` is where the sums and histograms start (the
/// store's metric start time, or the last delta push), `now` the data
/// points' time, both Unix seconds.
pub fn otlp_metrics(series: &[Series], start: f64, now: f64, temporality: Temporality) -> Vec<Metric> {
    let temporality = match temporality {
        Temporality::Cumulative => AggregationTemporality::Cumulative,
        Temporality::Delta => AggregationTemporality::Delta,
    } as i32;
    let mut out = Vec::new();
    for instrument in INSTRUMENTS {
        let mine: Vec<&Series> = series.iter().filter(|s| s.instrument.name == instrument.name).collect();
        if mine.is_empty() {
            continue;
        }
        let number = |s: &Series| NumberDataPoint {
            attributes: key_values(&s.attrs),
            start_time_unix_nano: if instrument.kind == Kind::Gauge {
                0
            } else {
                nanos(start)
            },
            time_unix_nano: nanos(now),
            value: Some(if instrument.integer {
                number_data_point::Value::AsInt(s.value.round() as i64)
            } else {
                number_data_point::Value::AsDouble(s.value)
            }),
            ..NumberDataPoint::default()
        };
        let data = match instrument.kind {
            Kind::Counter => metric::Data::Sum(Sum {
                data_points: mine.iter().map(|s| number(s)).collect(),
                aggregation_temporality: temporality,
                is_monotonic: true,
            }),
            Kind::Gauge => metric::Data::Gauge(Gauge {
                data_points: mine.iter().map(|s| number(s)).collect(),
            }),
            Kind::Histogram => metric::Data::Histogram(Histogram {
                data_points: mine
                    .iter()
                    .map(|s| HistogramDataPoint {
                        attributes: key_values(&s.attrs),
                        start_time_unix_nano: nanos(start),
                        time_unix_nano: nanos(now),
                        count: s.count,
                        sum: Some(s.value),
                        bucket_counts: s.buckets.clone(),
                        explicit_bounds: instrument.buckets.to_vec(),
                        min: s.min,
                        max: s.max,
                        ..HistogramDataPoint::default()
                    })
                    .collect(),
                aggregation_temporality: temporality,
            }),
        };
        out.push(Metric {
            name: instrument.name.to_string(),
            description: instrument.description.to_string(),
            unit: instrument.unit.to_string(),
            data: Some(data),
            ..Metric::default()
        });
    }
    out
}

/// How many data points `metrics` holds.
pub fn data_points(metrics: &[Metric]) -> usize {
    metrics
        .iter()
        .map(|m| match &m.data {
            Some(metric::Data::Sum(s)) => s.data_points.len(),
            Some(metric::Data::Gauge(g)) => g.data_points.len(),
            Some(metric::Data::Histogram(h)) => h.data_points.len(),
            _ => 0,
        })
        .sum()
}
