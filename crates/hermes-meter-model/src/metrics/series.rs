//! The series as exported: the attribute allow-list, projection of the
//! store's series and gauges ([`project`]), deltas for delta temporality.
//! Must not touch: the wire formats (`otlp.rs`, `prometheus.rs`).

use std::collections::BTreeMap;

use super::instruments::{instrument, Instrument, Kind};
use crate::rows::{Attrs, GaugeRow, SeriesRow};
use crate::semconv::{attr, Names};

/// Attributes added to metrics only when the user allow-lists them
/// (`HERMES_METER_METRIC_ATTRIBUTES=sender,profile`): they are unbounded
/// enough to matter for cardinality, so they are off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AllowList {
    /// `hermes.sender.id` on `gen_ai.usage.cost`.
    pub sender: bool,
    /// `hermes.profile` on `gen_ai.usage.cost`.
    pub profile: bool,
}

impl AllowList {
    /// Parses `sender,profile` (either, both, or `none`); attribute names
    /// (`hermes.sender.id`, `hermes.profile`) work too. `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let mut out = AllowList::default();
        for item in s
            .split(',')
            .map(|i| i.trim().to_ascii_lowercase())
            .filter(|i| !i.is_empty())
        {
            match item.as_str() {
                "sender" | "sender_id" | "hermes.sender.id" => out.sender = true,
                "profile" | "hermes.profile" => out.profile = true,
                "none" => {}
                _ => return None,
            }
        }
        Some(out)
    }

    /// The keys it lets through, for `status`.
    pub fn describe(&self) -> String {
        match (self.sender, self.profile) {
            (false, false) => "(none)".into(),
            (true, false) => "sender".into(),
            (false, true) => "profile".into(),
            (true, true) => "sender,profile".into(),
        }
    }

    fn allows(&self, key: &str) -> bool {
        match key {
            attr::HERMES_SENDER_ID => self.sender,
            attr::HERMES_PROFILE => self.profile,
            _ => true,
        }
    }
}

/// The aggregation temporality of pushed counters and histograms
/// (`OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`). Gauges are
/// gauges either way; the Prometheus endpoint is always cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Temporality {
    /// Totals since the store's metric start time.
    #[default]
    Cumulative,
    /// What changed since the last accepted push. `lowmemory` means the
    /// same here: it asks delta for synchronous counters and histograms,
    /// and every instrument with a temporality is one of those.
    Delta,
}

impl Temporality {
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cumulative" => Some(Temporality::Cumulative),
            "delta" | "lowmemory" => Some(Temporality::Delta),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Temporality::Cumulative => "cumulative",
            Temporality::Delta => "delta",
        }
    }
}

/// What each of the store's series gained since `base` (the same series as
/// of the last accepted delta push): value, count and buckets minus the
/// base's. Series that did not change are left out; min and max are
/// unknown over a window, so dropped. A series that went backwards (a
/// store replaced under the exporter) counts from zero.
pub fn deltas(now: &[SeriesRow], base: &[SeriesRow]) -> Vec<SeriesRow> {
    let base: BTreeMap<(&str, &str), &SeriesRow> = base
        .iter()
        .map(|b| ((b.metric.as_str(), b.attrs.as_str()), b))
        .collect();
    let mut out = Vec::new();
    for row in now {
        let mut d = SeriesRow {
            min: None,
            max: None,
            ..row.clone()
        };
        if let Some(b) = base.get(&(row.metric.as_str(), row.attrs.as_str())) {
            if row.count < b.count || row.value < b.value {
                out.push(d);
                continue;
            }
            d.value = row.value - b.value;
            d.count = row.count - b.count;
            if let (Some(now), Some(then)) = (&row.buckets, &b.buckets) {
                if now.len() == then.len() {
                    d.buckets = Some(now.iter().zip(then).map(|(n, t)| n.saturating_sub(*t)).collect());
                }
            }
        }
        if d.count > 0 || d.value != 0.0 {
            out.push(d);
        }
    }
    out
}

/// A series as exported: its instrument, the attributes the allow-list
/// lets through, and its cumulative state (summed over the store's series
/// that differ only in left-out attributes).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub instrument: &'static Instrument,
    pub attrs: Attrs,
    pub value: f64,
    pub count: u64,
    pub buckets: Vec<u64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// Applies the allow-list to the store's series and gauges and merges
/// what became equal; previous metric names are left out unless `names`
/// asks for them. Unknown metric names (from a newer build) are left out.
/// Sorted by metric, then attributes.
pub fn project(series: &[SeriesRow], gauges: &[GaugeRow], allow: AllowList, names: Names) -> Vec<Series> {
    let mut out: BTreeMap<(&'static str, Attrs), Series> = BTreeMap::new();
    let rows = series
        .iter()
        .map(|s| {
            (
                s.metric.as_str(),
                s.attrs.as_str(),
                s.value,
                s.count,
                s.buckets.as_deref(),
                s.min,
                s.max,
            )
        })
        .chain(
            gauges
                .iter()
                .map(|g| (g.metric.as_str(), g.attrs.as_str(), g.value, 1, None, None, None)),
        );
    for (metric, attrs, value, count, buckets, min, max) in rows {
        let Some(instrument) = instrument(metric) else { continue };
        if instrument.previous && !names.previous() {
            continue;
        }
        let attrs: Attrs = crate::rows::decode_attrs(attrs)
            .into_iter()
            .filter(|(k, _)| allow.allows(k))
            .collect();
        let entry = out.entry((instrument.name, attrs.clone())).or_insert_with(|| Series {
            instrument,
            attrs,
            value: 0.0,
            count: 0,
            buckets: vec![
                0;
                if instrument.kind == Kind::Histogram {
                    instrument.buckets.len() + 1
                } else {
                    0
                }
            ],
            min: None,
            max: None,
        });
        if instrument.kind == Kind::Gauge {
            // Gauges do not add up: distinct series never merge (their
            // attributes are all kept), so this is the one value.
            entry.value = value;
            continue;
        }
        entry.value += value;
        entry.count += count;
        if let Some(b) = buckets {
            if b.len() == entry.buckets.len() {
                for (e, v) in entry.buckets.iter_mut().zip(b) {
                    *e += v;
                }
            }
        }
        entry.min = merge(entry.min, min, f64::min);
        entry.max = merge(entry.max, max, f64::max);
    }
    out.into_values().collect()
}

fn merge(a: Option<f64>, b: Option<f64>, f: fn(f64, f64) -> f64) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(f(a, b)),
        (a, b) => a.or(b),
    }
}
