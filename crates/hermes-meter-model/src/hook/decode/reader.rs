//! Reading typed values out of a call's kwargs: strings, ids, counts,
//! numbers, bools, content and usage, each repaired where the meaning is
//! plain and reported as a [`Problem`] otherwise.
//!
//! The kwargs come parsed (a replayed record, a test) or as the raw JSON of
//! a spool record ([`Kwargs`]); both read through [`Val`], so a call decodes
//! to the same event either way.
//!
//! Must not touch: which kwargs a hook reads (`mod.rs`), scrubbing.

use std::borrow::Cow;

use serde_json::value::RawValue;
use serde_json::{Map, Number, Value};

use super::{DecodeOptions, Problem, MAX_LABEL_BYTES};
use crate::hook::{ApiRequest, ToolRef, ToolResultFacts, Usage};

pub(super) const MISSING_ID: &str = "missing id";

/// Largest count (tokens, milliseconds, messages) kept. No call has a
/// trillion tokens; a bigger number is garbage, and summing a few of them
/// would overflow SQLite's 64-bit integers and break every report.
pub(super) const MAX_COUNT: i64 = 1_000_000_000_000;

/// What ends a long label's kept prefix, before the hash of the whole.
pub(super) const LABEL_HASH_MARK: char = '~';

/// `s` in at most [`MAX_LABEL_BYTES`]: itself if it fits, else a prefix
/// (cut at a char boundary), [`LABEL_HASH_MARK`] and the FNV-1a 64 hash of
/// the whole of `s` in 16 hex digits. FNV-1a is fixed by its definition
/// (std's `DefaultHasher` may change between releases, which would give a
/// replayed id a new identity); 64 bits make a collision between two ids
/// of one store as unlikely as a random one of 2^64.
pub(super) fn fit_label(s: &str) -> String {
    if s.len() <= MAX_LABEL_BYTES {
        return s.to_string();
    }
    let hash = format!("{LABEL_HASH_MARK}{:016x}", fnv1a_64(s.as_bytes()));
    let mut end = MAX_LABEL_BYTES - hash.len();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{hash}", &s[..end])
}

/// The 64-bit FNV-1a hash of `bytes` (offset basis and prime from the
/// FNV specification).
fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET_BASIS, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// The kwargs of one call, as a `Reader` reads them.
#[derive(Debug, Clone, Copy)]
pub enum Kwargs<'a> {
    /// Parsed values (a replayed record, a test).
    Parsed(&'a Map<String, Value>),
    /// A spool record's kwargs as raw JSON, each value parsed only when it
    /// is read and its strings borrowed from the line: a gating hook decodes
    /// its own record on the hook thread, where building a map of values
    /// cost more than the decoding itself.
    Raw(&'a [(&'a str, &'a RawValue)]),
}

impl<'a> Kwargs<'a> {
    fn get(self, key: &str) -> Option<Val<'a>> {
        match self {
            Kwargs::Parsed(map) => map.get(key).map(Val::parsed),
            // The last of a repeated key counts, as in a parsed map.
            Kwargs::Raw(entries) => entries
                .iter()
                .rev()
                .find(|(k, _)| *k == key)
                .map(|(_, raw)| Val::raw(raw)),
        }
    }
}

/// One kwarg's value, borrowed where it can be.
#[derive(Debug)]
pub(super) enum Val<'a> {
    Null,
    Bool(bool),
    Number(Number),
    Str(Cow<'a, str>),
    List(Cow<'a, Value>),
    Dict(Cow<'a, Map<String, Value>>),
}

impl<'a> Val<'a> {
    fn parsed(value: &'a Value) -> Self {
        match value {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            Value::Number(n) => Val::Number(n.clone()),
            Value::String(s) => Val::Str(Cow::Borrowed(s)),
            Value::Array(_) => Val::List(Cow::Borrowed(value)),
            Value::Object(map) => Val::Dict(Cow::Borrowed(map)),
        }
    }

    /// Reads a raw value exactly as parsing it into a [`Value`] would
    /// (`hook::parse_line` does that for a replayed record), including a
    /// value the parser refuses: that one reads as a string saying so.
    fn raw(raw: &'a RawValue) -> Self {
        let text = raw.get();
        let bytes = text.as_bytes();
        let read = match bytes.first() {
            // Most values are plain ids: no escapes, nothing to parse.
            Some(b'"') if bytes.len() >= 2 && !bytes.iter().any(|&b| b == b'\\' || b < 0x20) => {
                Some(Val::Str(Cow::Borrowed(&text[1..text.len() - 1])))
            }
            // Escapes: the string is unescaped into a copy.
            Some(b'"') => serde_json::from_str::<String>(text)
                .ok()
                .map(|s| Val::Str(Cow::Owned(s))),
            Some(b'n') => serde_json::from_str::<()>(text).ok().map(|()| Val::Null),
            Some(b't' | b'f') => serde_json::from_str::<bool>(text).ok().map(Val::Bool),
            // Lists and dicts are parsed whole, so one nested past the
            // parser's limit is refused as a whole, as in a parsed record.
            Some(b'[' | b'{') => serde_json::from_str::<Value>(text).ok().map(|v| match v {
                Value::Object(map) => Val::Dict(Cow::Owned(map)),
                other => Val::List(Cow::Owned(other)),
            }),
            // Counts: digits the standard parser reads as the JSON one does.
            Some(b'0'..=b'9')
                if bytes.len() <= 18
                    && bytes.iter().all(u8::is_ascii_digit)
                    && (bytes[0] != b'0' || bytes.len() == 1) =>
            {
                text.parse::<u64>().ok().map(|n| Val::Number(n.into()))
            }
            _ => serde_json::from_str::<Number>(text).ok().map(Val::Number),
        };
        read.unwrap_or_else(|| match serde_json::from_str::<Value>(text) {
            Ok(value) => Val::parsed(&value).into_owned(),
            Err(e) => Val::Str(Cow::Owned(format!("unparseable value: {e}"))),
        })
    }

    fn into_owned(self) -> Val<'static> {
        match self {
            Val::Null => Val::Null,
            Val::Bool(b) => Val::Bool(b),
            Val::Number(n) => Val::Number(n),
            Val::Str(s) => Val::Str(Cow::Owned(s.into_owned())),
            Val::List(v) => Val::List(Cow::Owned(v.into_owned())),
            Val::Dict(m) => Val::Dict(Cow::Owned(m.into_owned())),
        }
    }

    /// The value as a [`Value`] (content kept as JSON).
    fn into_value(self) -> Value {
        match self {
            Val::Null => Value::Null,
            Val::Bool(b) => Value::Bool(b),
            Val::Number(n) => Value::Number(n),
            Val::Str(s) => Value::String(s.into_owned()),
            Val::List(v) => v.into_owned(),
            Val::Dict(m) => Value::Object(m.into_owned()),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Val::Null => "null",
            Val::Bool(_) => "a bool",
            Val::Number(_) => "a number",
            Val::Str(_) => "a string",
            Val::List(_) => "a list",
            Val::Dict(_) => "a dict",
        }
    }
}

/// Reads typed values out of a call's kwargs, collecting problems.
pub(super) struct Reader<'a> {
    pub(super) kw: Kwargs<'a>,
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

    pub(super) fn present(&self, key: &str) -> Option<Val<'a>> {
        match self.kw.get(key) {
            None | Some(Val::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// A string of at most `max` bytes; numbers and bools are spelled out.
    pub(super) fn string(&mut self, key: &str, max: usize) -> Option<String> {
        let value = self.present(key)?;
        let s = match value {
            Val::Str(s) => s.into_owned(),
            Val::Number(n) => {
                let s = n.to_string();
                self.problem(key, "expected a string, got a number");
                s
            }
            Val::Bool(b) => {
                let s = b.to_string();
                self.problem(key, "expected a string, got a bool");
                s
            }
            other => {
                self.problem(key, format!("expected a string, got {}", other.kind()));
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

    /// A label or id of at most [`MAX_LABEL_BYTES`], a longer one keeping
    /// its identity ([`fit_label`]).
    pub(super) fn label(&mut self, key: &str) -> Option<String> {
        let s = self.string(key, usize::MAX)?;
        if s.len() <= MAX_LABEL_BYTES {
            return Some(s);
        }
        self.problem(
            key,
            format!("longer than {MAX_LABEL_BYTES} bytes, its tail replaced by a hash of the whole"),
        );
        Some(fit_label(&s))
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
            Val::Number(n) => {
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
            Val::Str(s) => {
                let parsed = s.trim().parse::<f64>().ok().filter(|f| f.is_finite());
                self.problem(key, "expected an integer, got a string");
                parsed.map(|f| f.clamp(i64::MIN as f64, i64::MAX as f64) as i64)
            }
            other => {
                self.problem(key, format!("expected an integer, got {}", other.kind()));
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
            Val::Number(n) => n.as_f64(),
            Val::Str(s) => {
                self.problem(key, "expected a number, got a string");
                s.trim().parse::<f64>().ok()
            }
            other => {
                self.problem(key, format!("expected a number, got {}", other.kind()));
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
            Val::Dict(map) => {
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
            Val::Bool(b) => Some(b),
            Val::Number(n) => {
                self.problem(key, "expected a bool, got a number");
                Some(n.as_f64().is_some_and(|f| f != 0.0))
            }
            Val::Str(s) => {
                self.problem(key, "expected a bool, got a string");
                match s.to_ascii_lowercase().as_str() {
                    "true" | "1" | "yes" => Some(true),
                    "false" | "0" | "no" | "" => Some(false),
                    _ => None,
                }
            }
            other => {
                self.problem(key, format!("expected a bool, got {}", other.kind()));
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
            Val::Str(s) => match json_text(&s) {
                Some(parsed) => json_content(parsed, max),
                None => {
                    let redacted = crate::redact::redact_text(&s);
                    let cut = crate::redact::truncate_text(&redacted, max);
                    let was_cut = cut.len() != redacted.len();
                    (cut.into_owned(), was_cut)
                }
            },
            list_or_dict @ (Val::List(_) | Val::Dict(_)) => json_content(list_or_dict.into_value(), max),
            other => (other.into_value().to_string(), false),
        };
        if cut {
            self.problem(key, format!("longer than {max} bytes, cut"));
        }
        Some(text)
    }

    /// Captured JSON (request messages, tool arguments): only with capture
    /// on, secret-keyed values and secrets in strings redacted, then cut to
    /// `max_content_bytes` keeping it valid JSON.
    /// The digest of a tool call's arguments: as the scrubbed record
    /// carries it, else from the arguments themselves (a raw recording).
    pub(super) fn args_digest(&mut self) -> Option<String> {
        if let Some(d) = self.label(crate::hook::ARGS_DIGEST) {
            return Some(d);
        }
        Some(super::scrub::args_digest(&self.present("args")?.into_value()))
    }

    /// What a tool call's arguments would change of the meter: as the
    /// scrub wrote it, else read from the arguments (a map decoded as
    /// Hermes passed it); nothing for a tool that only reads.
    pub(super) fn meter_change(&mut self, tool: &str) -> Option<String> {
        if crate::hook::protect::reads_only(tool) {
            return None;
        }
        if let Some(what) = self.label(crate::hook::ARGS_METER) {
            return Some(what);
        }
        if self.kw.get(crate::hook::ARGS_DIGEST).is_some() {
            // Scrubbed, and the scrub found nothing.
            return None;
        }
        crate::hook::protect::meter_change_in(&self.present("args")?.into_value()).map(str::to_string)
    }

    pub(super) fn content_value(&mut self, key: &str) -> Option<Value> {
        if !self.opts.capture_content {
            return None;
        }
        let mut value = self.present(key)?.into_value();
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
        let msg = self.present("assistant_message")?.into_value();
        let fields = msg.get("fields").unwrap_or(&msg);
        let content = fields.get("content")?.as_str()?;
        let redacted = crate::redact::redact_text(content);
        let max = self.opts.max_content_bytes;
        let cut = crate::redact::truncate_text(&redacted, max);
        if cut.len() != redacted.len() {
            self.problem("assistant_message", format!("longer than {max} bytes, cut"));
        }
        Some(cut.into_owned())
    }

    /// The model the provider is asked for, out of `pre_api_request`'s
    /// `request` (`{"body": {"model": ...}}`, the provider kwargs after
    /// every `llm_request` middleware): it differs from `model` (the
    /// agent's) when a middleware, a budget downgrade say, routed the call.
    pub(super) fn request_model(&mut self) -> Option<String> {
        let request = self.present("request")?.into_value();
        let model = request.get("body")?.get("model")?.as_str()?;
        Some(fit_label(model))
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
        let Val::Dict(map) = value else {
            self.problem("usage", format!("expected a dict, got {}", value.kind()));
            return None;
        };
        let mut inner = Reader {
            kw: Kwargs::Parsed(&map),
            problems: Vec::new(),
            opts: self.opts,
        };
        let usage = Usage {
            input_tokens: inner.count("input_tokens").unwrap_or(0),
            output_tokens: inner.count("output_tokens").unwrap_or(0),
            cache_read_tokens: inner.count("cache_read_tokens").unwrap_or(0),
            cache_write_tokens: inner.count("cache_write_tokens").unwrap_or(0),
            cache_write_1h_tokens: inner.count("cache_write_1h_tokens").unwrap_or(0),
            reasoning_tokens: inner.count("reasoning_tokens").unwrap_or(0),
            prompt_tokens: inner.count("prompt_tokens"),
            total_tokens: inner.count("total_tokens"),
            provider_cost_usd: inner.amount("cost"),
            provider_upstream_usd: inner.amount("upstream_cost"),
            provider_byok: inner.bool("byok").unwrap_or(false),
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
            Some(Val::Dict(map)) => {
                let mut inner = Reader {
                    kw: Kwargs::Parsed(&map),
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
            Some(Val::Str(_)) => (None, self.content_str("error")),
            Some(other) => {
                let what = format!("expected a dict, got {}", other.kind());
                self.problem("error", what);
                (None, None)
            }
        }
    }

    /// Reads exit code, error and success out of a JSON tool result. Results
    /// can be large; only those of a size a status object has are parsed.
    pub(super) fn tool_result_facts(&mut self) -> ToolResultFacts {
        const MAX_PARSED_RESULT_BYTES: usize = 256 * 1024;
        let obj: Cow<Map<String, Value>> = match self.present("result") {
            Some(Val::Dict(map)) => map,
            Some(Val::Str(s)) if s.len() <= MAX_PARSED_RESULT_BYTES && s.trim_start().starts_with('{') => {
                match serde_json::from_str::<Value>(&s) {
                    Ok(Value::Object(map)) => Cow::Owned(map),
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
