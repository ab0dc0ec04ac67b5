//! What the metrics code reads and returns, below the store: attribute
//! sets and their on-disk text, the facts of finished ledger rows, the
//! increments they make, and the cumulative series and gauges.
//!
//! Owns: these types and the attribute sets' encoding. Must not touch:
//! SQL (the store keeps the series, `crates/hermes-meter-store/src/metrics.rs`), instruments and
//! rendering (`metrics.rs`).

use super::spans::ToolRow;

/// A typed attribute value, as stored in an attribute set.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttrValue {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl AttrValue {
    /// The value as a Prometheus label value (`true`, `404`, text).
    pub(crate) fn to_label(&self) -> String {
        match self {
            AttrValue::Str(s) => s.clone(),
            AttrValue::Int(i) => i.to_string(),
            AttrValue::Bool(b) => b.to_string(),
        }
    }
}

/// An attribute set: key and value pairs, sorted by key, keys unique.
pub type Attrs = Vec<(String, AttrValue)>;

/// The on-disk form of an attribute set: `[[key, value], ...]` sorted by
/// key, as compact JSON (values keep their type). Equal sets give equal text.
pub fn encode_attrs(attrs: &[(String, AttrValue)]) -> String {
    let mut sorted: Vec<&(String, AttrValue)> = attrs.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    sorted.dedup_by(|a, b| a.0 == b.0);
    let pairs: Vec<serde_json::Value> = sorted
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                AttrValue::Str(s) => serde_json::Value::from(s.as_str()),
                AttrValue::Int(i) => serde_json::Value::from(*i),
                AttrValue::Bool(b) => serde_json::Value::from(*b),
            };
            serde_json::json!([k, v])
        })
        .collect();
    serde_json::Value::Array(pairs).to_string()
}

/// Reads [`encode_attrs`]'s form back; anything unreadable is left out.
pub fn decode_attrs(text: &str) -> Attrs {
    let Ok(serde_json::Value::Array(pairs)) = serde_json::from_str::<serde_json::Value>(text) else {
        return Vec::new();
    };
    pairs
        .iter()
        .filter_map(|pair| {
            let key = pair.get(0)?.as_str()?.to_string();
            let value = match pair.get(1)? {
                serde_json::Value::String(s) => AttrValue::Str(s.clone()),
                serde_json::Value::Bool(b) => AttrValue::Bool(*b),
                serde_json::Value::Number(n) => AttrValue::Int(n.as_i64()?),
                _ => return None,
            };
            Some((key, value))
        })
        .collect()
}

/// The labels of the run a fact belongs to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunLabels {
    pub platform: Option<String>,
    pub cron_job_id: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub sender_id: Option<String>,
    pub profile: Option<String>,
}

/// A successful LLM call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LlmCallFact {
    pub model: Option<String>,
    pub response_model: Option<String>,
    pub provider: Option<String>,
    pub started_at: f64,
    pub ended_at: f64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
    pub reasoning_tokens: i64,
    pub cost_usd: f64,
    /// When the first token arrived, where Hermes reported it.
    pub first_token_at: Option<f64>,
    /// What its cache reads and writes saved at the price table's rates
    /// when the fold read it (0 for an unpriced model).
    pub cache_saved_usd: f64,
}

/// A failed attempt of an LLM call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApiErrorFact {
    pub model: Option<String>,
    pub provider: Option<String>,
    pub started_at: f64,
    pub ended_at: f64,
    pub status_code: Option<i64>,
    pub retryable: Option<bool>,
    pub reason: Option<String>,
    pub error_type: Option<String>,
}

/// A finished ledger row, with what metrics need to label it.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricFact {
    LlmCall(LlmCallFact, RunLabels),
    ApiError(ApiErrorFact, RunLabels),
    /// A finished tool call (`latency_s` as Hermes reported it, if it did).
    Tool(ToolRow, Option<f64>, RunLabels),
    /// A finished turn and its outcome.
    Turn(String, RunLabels),
    /// A settled session and its status.
    Session(String, RunLabels),
    /// A held LLM call the user confirmed after it was counted at no cost:
    /// its cost alone.
    ConfirmedCost(LlmCallFact, RunLabels),
}

/// What to add to one series.
#[derive(Debug, Clone, PartialEq)]
pub struct Increment {
    pub metric: &'static str,
    /// [`encode_attrs`] of the series' attributes.
    pub attrs: String,
    pub add: Add,
}

/// A counter increment or a histogram measurement.
#[derive(Debug, Clone, PartialEq)]
pub enum Add {
    Sum(f64),
    Observe { value: f64, bounds: &'static [f64] },
}

/// One series' cumulative state.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesRow {
    pub metric: String,
    pub attrs: String,
    /// The counter's sum, or the histogram's sum.
    pub value: f64,
    /// Increments or measurements added.
    pub count: u64,
    /// Histogram bucket counts (one more than the bounds), else `None`.
    pub buckets: Option<Vec<u64>>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub updated_at: f64,
}

/// One gauge's latest value.
#[derive(Debug, Clone, PartialEq)]
pub struct GaugeRow {
    pub metric: String,
    pub attrs: String,
    pub value: f64,
    pub updated_at: f64,
}

/// The explicit-bucket index of `value`: bucket `i` holds values in
/// `(bounds[i-1], bounds[i]]`, the last one everything above the last bound
/// (the OTLP `ExplicitBucketHistogram` rule).
pub fn bucket_index(value: f64, bounds: &[f64]) -> usize {
    bounds.iter().position(|b| value <= *b).unwrap_or(bounds.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_sets_encode_sorted_typed_and_back() {
        let attrs = vec![
            ("b".to_string(), AttrValue::Int(404)),
            ("a".to_string(), AttrValue::Str("x\"y".into())),
            ("c".to_string(), AttrValue::Bool(true)),
        ];
        let text = encode_attrs(&attrs);
        assert_eq!(text, r#"[["a","x\"y"],["b",404],["c",true]]"#);
        let mut sorted = attrs.clone();
        sorted.sort();
        assert_eq!(decode_attrs(&text), sorted);
        assert_eq!(decode_attrs("not json"), Vec::new());
    }

    #[test]
    fn bucket_bounds_are_upper_inclusive() {
        let b = [1.0, 4.0];
        assert_eq!(bucket_index(0.0, &b), 0);
        assert_eq!(bucket_index(1.0, &b), 0);
        assert_eq!(bucket_index(1.5, &b), 1);
        assert_eq!(bucket_index(4.0, &b), 1);
        assert_eq!(bucket_index(5.0, &b), 2);
    }
}
