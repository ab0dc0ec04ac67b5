//! Series as the Prometheus text exposition, with the names and labels
//! the OTel Collector's `prometheus` exporter gives the same data. Must not
//! touch: OTLP.

use super::instruments::{Kind, INSTRUMENTS};
use super::series::Series;

/// The Prometheus text exposition (format 0.0.4) of `series`, with the
/// names and labels the OTel Collector's `prometheus` exporter gives the
/// same data (see `semconv/README.md`): metric names from the registry,
/// labels are attribute names with every character outside `[a-zA-Z0-9_]`
/// turned into `_`, values as text (`true`, `404`).
pub fn prometheus_text(series: &[Series]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for instrument in INSTRUMENTS {
        let mine: Vec<&Series> = series.iter().filter(|s| s.instrument.name == instrument.name).collect();
        if mine.is_empty() {
            continue;
        }
        let name = instrument.prometheus_name;
        let kind = match instrument.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let _ = writeln!(out, "# HELP {name} {}", escape_help(instrument.description));
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for s in mine {
            let labels: Vec<(String, String)> = s.attrs.iter().map(|(k, v)| (label_name(k), v.to_label())).collect();
            match instrument.kind {
                Kind::Counter | Kind::Gauge => {
                    let _ = writeln!(out, "{name}{} {}", label_text(&labels, None), number(s.value));
                }
                Kind::Histogram => {
                    let mut cumulative = 0u64;
                    for (i, bound) in instrument.buckets.iter().enumerate() {
                        cumulative += s.buckets.get(i).copied().unwrap_or(0);
                        let le = number(*bound);
                        let _ = writeln!(out, "{name}_bucket{} {cumulative}", label_text(&labels, Some(&le)));
                    }
                    let _ = writeln!(out, "{name}_bucket{} {}", label_text(&labels, Some("+Inf")), s.count);
                    let _ = writeln!(out, "{name}_sum{} {}", label_text(&labels, None), number(s.value));
                    let _ = writeln!(out, "{name}_count{} {}", label_text(&labels, None), s.count);
                }
            }
        }
    }
    out
}

/// The Prometheus label name of an attribute key.
pub(crate) fn label_name(key: &str) -> String {
    let mut name: String = key
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
        .collect();
    if name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert_str(0, "key_");
    }
    name
}

fn label_text(labels: &[(String, String)], le: Option<&str>) -> String {
    if labels.is_empty() && le.is_none() {
        return String::new();
    }
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    format!("{{{}}}", parts.join(","))
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A sample value: shortest round-trip decimal, `+Inf`/`-Inf`/`NaN`.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}
