//! Reading typed values out of a kwargs map: strings, ids, counts,
//! numbers, bools, content and usage, each repaired where the meaning is
//! plain and reported as a [`Problem`] otherwise.
//!
//! Must not touch: which kwargs a hook reads (`mod.rs`), scrubbing.

use serde_json::{Map, Value};

use super::{DecodeOptions, Problem, MAX_LABEL_BYTES};
use crate::hook::{ApiRequest, ToolRef, ToolResultFacts, Usage};

pub(super) const MISSING_ID: &str = "missing id";

/// Largest count (tokens, milliseconds, messages) kept. No call has a
/// trillion tokens; a bigger number is garbage, and summing a few of them
/// would overflow SQLite's 64-bit integers and break every report.
pub(super) const MAX_COUNT: i64 = 1_000_000_000_000;

/// Reads typed values out of a kwargs map, collecting problems.
pub(super) struct Reader<'a> {
    pub(super) kw: &'a Map<String, Value>,
    pub(super) problems: Vec<Problem>,
    pub(super) opts: DecodeOptions,
}

impl<'a> Reader<'a> {
    pub(super) fn problem(&mut self, key: &str, what: impl Into<String>) {
        self.problems.push(Problem {
            key: key.to_string(),
            what: what.into(),
        });
    }

    pub(super) fn present(&self, key: &str) -> Option<&'a Value> {
        let kw: &'a Map<String, Value> = self.kw;
        match kw.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// A string of at most `max` bytes; numbers and bools are spelled out.
    pub(super) fn string(&mut self, key: &str, max: usize) -> Option<String> {
        let value = self.present(key)?;
        let s = match value {
            Value::String(s) => s.clone(),
            Value::Number(n) => {
                let s = n.to_string();
                self.problem(key, "expected a string, got a number");
                s
            }
            Value::Bool(b) => {
                let s = b.to_string();
                self.problem(key, "expected a string, got a bool");
                s
            }
            _ => {
                self.problem(key, format!("expected a string, got {}", kind(value)));
                return None;
            }
        };
        Some(self.cut(key, s, max))
    }

    pub(super) fn cut(&mut self, key: &str, mut s: String, max: usize) -> String {
        if s.len() > max {
            let mut end = max;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
            self.problem(key, format!("longer than {max} bytes, cut"));
        }
        s
    }

    pub(super) fn label(&mut self, key: &str) -> Option<String> {
        self.string(key, MAX_LABEL_BYTES)
    }

    /// A URL label with any password in it redacted.
    pub(super) fn url(&mut self, key: &str) -> Option<String> {
        let url = self.label(key)?;
        Some(match crate::redact::redact_text(&url) {
            std::borrow::Cow::Borrowed(_) => url,
            std::borrow::Cow::Owned(redacted) => redacted,
        })
    }

    /// A required id; an empty or missing one makes the event unusable.
    pub(super) fn id(&mut self, key: &str) -> String {
        match self.label(key) {
            Some(s) if !s.is_empty() => s,
            _ => {
                self.problem(key, MISSING_ID);
                String::new()
            }
        }
    }

    pub(super) fn int(&mut self, key: &str) -> Option<i64> {
        let value = self.present(key)?;
        match value {
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Some(i)
                } else if let Some(f) = n.as_f64().filter(|f| f.is_finite()) {
                    if f.fract() != 0.0 {
                        self.problem(key, "expected an integer, got a fraction");
                    }
                    Some(f.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
                } else {
                    // u64 beyond i64::MAX.
                    self.problem(key, "integer out of range");
                    Some(i64::MAX)
                }
            }
            Value::String(s) => {
                let parsed = s.trim().parse::<f64>().ok().filter(|f| f.is_finite());
                self.problem(key, "expected an integer, got a string");
                parsed.map(|f| f.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
            }
            _ => {
                self.problem(key, format!("expected an integer, got {}", kind(value)));
                None
            }
        }
    }

    /// A count that cannot be negative: negatives become 0, and counts
    /// beyond [`MAX_COUNT`] are cut to it.
    pub(super) fn count(&mut self, key: &str) -> Option<i64> {
        let n = self.int(key)?;
        if n < 0 {
            self.problem(key, "negative count, taken as 0");
            return Some(0);
        }
        if n > MAX_COUNT {
            self.problem(key, "implausibly large count, cut");
            return Some(MAX_COUNT);
        }
        Some(n)
    }

    pub(super) fn float(&mut self, key: &str) -> Option<f64> {
        let value = self.present(key)?;
        let f = match value {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => {
                self.problem(key, "expected a number, got a string");
                s.trim().parse::<f64>().ok()
            }
            _ => {
                self.problem(key, format!("expected a number, got {}", kind(value)));
                None
            }
        };
        match f {
            Some(f) if f.is_finite() => Some(f),
            Some(_) => {
                self.problem(key, "not a finite number");
                None
            }
            None => None,
        }
    }

    /// A non-negative duration or timestamp in seconds.
    pub(super) fn seconds(&mut self, key: &str) -> Option<f64> {
        let f = self.float(key)?;
        if f < 0.0 {
            self.problem(key, "negative time, dropped");
            return None;
        }
        Some(f)
    }

    /// Newer Hermes's `child_outcome` of `subagent_stop`, read where
    /// `child_status` is missing: a status string, or a dict with one.
    pub(super) fn child_outcome(&mut self) -> Option<String> {
        match self.present("child_outcome")? {
            Value::Object(map) => {
                let status = ["status", "outcome"]
                    .iter()
                    .find_map(|k| map.get(*k).and_then(Value::as_str))?;
                Some(crate::redact::truncate_text(status, MAX_LABEL_BYTES).into_owned())
            }
            _ => self.label("child_outcome"),
        }
    }

    /// A non-negative amount of money (USD), below 1e9 so no single call
    /// can swamp every total.
    pub(super) fn amount(&mut self, key: &str) -> Option<f64> {
        let f = self.float(key)?;
        if !(0.0..1e9).contains(&f) {
            self.problem(key, "not an amount between 0 and 1e9 USD, dropped");
            return None;
        }
        Some(f)
    }

    pub(super) fn bool(&mut self, key: &str) -> Option<bool> {
        let value = self.present(key)?;
        match value {
            Value::Bool(b) => Some(*b),
            Value::Number(n) => {
                self.problem(key, "expected a bool, got a number");
                Some(n.as_f64().is_some_and(|f| f != 0.0))
            }
            Value::String(s) => {
                self.problem(key, "expected a bool, got a string");
                match s.to_ascii_lowercase().as_str() {
                    "true" | "1" | "yes" => Some(true),
                    "false" | "0" | "no" | "" => Some(false),
                    _ => None,
                }
            }
            _ => {
                self.problem(key, format!("expected a bool, got {}", kind(value)));
                None
            }
        }
    }

    /// Captured free text (a prompt, an answer, a tool result, an error
    /// message): only with capture on, redacted, then cut to
    /// `max_content_bytes` with a marker. A JSON text (a tool result) is
    /// redacted and cut as JSON so it stays valid; a dict or list where a
    /// string was expected is kept as its JSON text.
    pub(super) fn content_str(&mut self, key: &str) -> Option<String> {
        if !self.opts.capture_content {
            return None;
        }
        let value = self.present(key)?;
        let max = self.opts.max_content_bytes;
        let (text, cut) = match value {
            Value::String(s) => match json_text(s) {
                Some(parsed) => json_content(parsed, max),
                None => {
                    let redacted = crate::redact::redact_text(s);
                    let cut = crate::redact::truncate_text(&redacted, max);
                    let was_cut = cut.len() != redacted.len();
                    (cut.into_owned(), was_cut)
                }
            },
            Value::Array(_) | Value::Object(_) => json_content(value.clone(), max),
            other => (other.to_string(), false),
        };
        if cut {
            self.problem(key, format!("longer than {max} bytes, cut"));
        }
        Some(text)
    }

    /// Captured JSON (request messages, tool arguments): only with capture
    /// on, secret-keyed values and secrets in strings redacted, then cut to
    /// `max_content_bytes` keeping it valid JSON.
    pub(super) fn content_value(&mut self, key: &str) -> Option<Value> {
        if !self.opts.capture_content {
            return None;
        }
        let mut value = self.present(key)?.clone();
        crate::redact::redact_value(&mut value);
        let max = self.opts.max_content_bytes;
        let cut = crate::redact::truncate_value(value.clone(), max);
        if cut != value {
            self.problem(key, format!("longer than {max} bytes, cut"));
        }
        Some(cut)
    }

    /// The assistant text out of `assistant_message` (a NormalizedResponse
    /// the binding or the probe turned into a dict with `fields`).
    pub(super) fn assistant_content(&mut self) -> Option<String> {
        if !self.opts.capture_content {
            return None;
        }
        let msg = self.present("assistant_message")?;
        let fields = msg.get("fields").unwrap_or(msg);
        let content = fields.get("content")?.as_str()?;
        let redacted = crate::redact::redact_text(content);
        let max = self.opts.max_content_bytes;
        let cut = crate::redact::truncate_text(&redacted, max);
        if cut.len() != redacted.len() {
            self.problem("assistant_message", format!("longer than {max} bytes, cut"));
        }
        Some(cut.into_owned())
    }

    pub(super) fn api_request(&mut self) -> ApiRequest {
        ApiRequest {
            session_id: self.id("session_id"),
            task_id: self.label("task_id"),
            turn_id: self.label("turn_id"),
            api_request_id: self.id("api_request_id"),
            platform: self.label("platform"),
            model: self.label("model"),
            provider: self.label("provider"),
            base_url: self.url("base_url"),
            api_mode: self.label("api_mode"),
            api_call_count: self.count("api_call_count"),
            started_at: self.seconds("started_at"),
        }
    }

    pub(super) fn tool_ref(&mut self) -> ToolRef {
        ToolRef {
            session_id: self.id("session_id"),
            task_id: self.label("task_id"),
            turn_id: self.label("turn_id"),
            api_request_id: self.label("api_request_id"),
            tool_call_id: self.id("tool_call_id"),
            tool_name: self.label("tool_name").unwrap_or_else(|| "unknown".into()),
        }
    }

    pub(super) fn usage(&mut self) -> Option<Usage> {
        let value = self.present("usage")?;
        let Value::Object(map) = value else {
            self.problem("usage", format!("expected a dict, got {}", kind(value)));
            return None;
        };
        let mut inner = Reader {
            kw: map,
            problems: Vec::new(),
            opts: self.opts,
        };
        let usage = Usage {
            input_tokens: inner.count("input_tokens").unwrap_or(0),
            output_tokens: inner.count("output_tokens").unwrap_or(0),
            cache_read_tokens: inner.count("cache_read_tokens").unwrap_or(0),
            cache_write_tokens: inner.count("cache_write_tokens").unwrap_or(0),
            reasoning_tokens: inner.count("reasoning_tokens").unwrap_or(0),
            prompt_tokens: inner.count("prompt_tokens"),
            total_tokens: inner.count("total_tokens"),
            provider_cost_usd: inner.amount("cost"),
        };
        for p in inner.problems {
            self.problem(&format!("usage.{}", p.key), p.what);
        }
        Some(usage)
    }

    /// `error` of api_request_error: `{"type": ..., "message": ...}`.
    pub(super) fn error_object(&mut self) -> (Option<String>, Option<String>) {
        match self.present("error") {
            None => (None, None),
            Some(Value::Object(map)) => {
                let mut inner = Reader {
                    kw: map,
                    problems: Vec::new(),
                    opts: self.opts,
                };
                let t = inner.label("type");
                // The provider's error text can echo the request: content.
                let m = inner.content_str("message");
                for p in inner.problems {
                    self.problem(&format!("error.{}", p.key), p.what);
                }
                (t, m)
            }
            Some(Value::String(_)) => (None, self.content_str("error")),
            Some(other) => {
                let what = format!("expected a dict, got {}", kind(other));
                self.problem("error", what);
                (None, None)
            }
        }
    }

    /// Reads exit code, error and success out of a JSON tool result. Results
    /// can be large; only those of a size a status object has are parsed.
    pub(super) fn tool_result_facts(&mut self) -> ToolResultFacts {
        const MAX_PARSED_RESULT_BYTES: usize = 256 * 1024;
        let parsed;
        let obj = match self.present("result") {
            Some(Value::Object(map)) => map,
            Some(Value::String(s)) if s.len() <= MAX_PARSED_RESULT_BYTES && s.trim_start().starts_with('{') => {
                match serde_json::from_str::<Value>(s) {
                    Ok(Value::Object(map)) => {
                        parsed = map;
                        &parsed
                    }
                    _ => return ToolResultFacts::default(),
                }
            }
            _ => return ToolResultFacts::default(),
        };
        let exit_code = match obj.get("exit_code").or_else(|| obj.get("returncode")) {
            Some(Value::Number(n)) => n.as_i64(),
            _ => None,
        };
        ToolResultFacts {
            exit_code,
            error_truthy: obj.get("error").is_some_and(truthy),
            success_false: obj.get("success") == Some(&Value::Bool(false)),
        }
    }
}

/// The parsed value of a string that holds a JSON object or list (a tool
/// result), if it does.
pub(super) fn json_text(s: &str) -> Option<Value> {
    let t = s.trim_start();
    if !(t.starts_with('{') || t.starts_with('[')) {
        return None;
    }
    match serde_json::from_str::<Value>(s) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => Some(v),
        _ => None,
    }
}

/// JSON content redacted and cut to `max` bytes, as text; and whether it
/// was cut.
pub(super) fn json_content(mut value: Value, max: usize) -> (String, bool) {
    crate::redact::redact_value(&mut value);
    let cut = crate::redact::truncate_value(value.clone(), max);
    let was_cut = cut != value;
    (cut.to_string(), was_cut)
}

/// Python truthiness of a JSON value.
pub(super) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a dict",
    }
}
