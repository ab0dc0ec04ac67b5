//! Decoding hook kwargs (plain JSON values) into [`HookEvent`]s.
//!
//! Hermes passes different kwargs at different call sites of one hook, and a
//! future Hermes may change types. So nothing here fails on a surprise: an
//! unknown kwarg is ignored, a wrong type is converted where the meaning is
//! plain (a numeric string, an integral float) and otherwise dropped, and
//! every such repair is reported as a [`Problem`] for the caller to count
//! and log. Only an event without the id it is keyed by is unusable.

use serde_json::{Map, Value};

use super::*;

/// The auxiliary task of a mixture-of-agents aggregator: the turn's own
/// response, reported by `post_api_request`.
const MOA_AGGREGATOR: &str = "moa_aggregator";

/// Longest id or label kept; longer values are cut at a char boundary.
/// Ids from Hermes are under 100 bytes; anything near this is garbage.
const MAX_LABEL_BYTES: usize = 1024;

/// How to decode.
#[derive(Debug, Clone, Copy)]
pub struct DecodeOptions {
    /// Keep prompts, responses, tool arguments and results.
    pub capture_content: bool,
    /// Largest content string kept when capturing, in bytes.
    pub max_content_bytes: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            capture_content: false,
            max_content_bytes: 64 * 1024,
        }
    }
}

/// Something that was wrong with the kwargs and how it was handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The kwarg concerned.
    pub key: String,
    /// What was wrong, e.g. "expected an integer, got a string".
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.what)
    }
}

/// The result of decoding one hook call.
// Returned once and consumed at once; boxing the event would cost an
// allocation per hook for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A hook the bridge does not use; nothing to do.
    Ignored,
    /// The event, with what had to be repaired on the way.
    Event(HookEvent, Vec<Problem>),
    /// The id the event is keyed by is missing, so it cannot be applied.
    Unusable(Vec<Problem>),
}

/// Decodes the kwargs of one call of `hook`, made at `at` (Unix seconds).
pub fn decode(hook: &str, kwargs: &Map<String, Value>, at: f64, opts: DecodeOptions) -> Decoded {
    let mut r = Reader {
        kw: kwargs,
        problems: Vec::new(),
        opts,
    };
    let hook = match hook {
        "on_session_start" => Hook::SessionStart(SessionStart {
            session_id: r.id("session_id"),
            model: r.label("model"),
            platform: r.label("platform"),
        }),
        "pre_llm_call" => Hook::PreLlmCall(PreLlmCall {
            session_id: r.id("session_id"),
            task_id: r.label("task_id"),
            turn_id: r.id("turn_id"),
            is_first_turn: r.bool("is_first_turn"),
            model: r.label("model"),
            platform: r.label("platform"),
            sender_id: r.label("sender_id"),
            user_message: r.content_str("user_message"),
        }),
        "pre_api_request" => Hook::PreApiRequest(PreApiRequest {
            api: r.api_request(),
            message_count: r.count("message_count"),
            tool_count: r.count("tool_count"),
            approx_input_tokens: r.count("approx_input_tokens"),
            request_char_count: r.count("request_char_count"),
            max_tokens: r.count("max_tokens"),
            request_messages: r.content_value("request_messages"),
        }),
        "post_api_request" => Hook::PostApiRequest(PostApiRequest {
            api: r.api_request(),
            api_duration: r.seconds("api_duration"),
            ended_at: r.seconds("ended_at"),
            finish_reason: r.label("finish_reason"),
            response_model: r.label("response_model"),
            usage: r.usage(),
            assistant_content_chars: r.count("assistant_content_chars"),
            assistant_tool_call_count: r.count("assistant_tool_call_count"),
            assistant_content: r.assistant_content(),
            aux_task: None,
        }),
        // An auxiliary LLM call (titles, compression, vision, ...): an LLM
        // call like any other, marked with its task. Hermes may leave its
        // ids empty: one with no session is not attributable and ignored;
        // one with no request id gets one made of its session, task and time.
        "post_auxiliary_call" => {
            let Some(session_id) = r.label("session_id").filter(|s| !s.is_empty()) else {
                return Decoded::Ignored;
            };
            let aux_task = r.label("aux_task").unwrap_or_else(|| "auxiliary".into());
            // A failed attempt bills nothing (its retry reports again), and
            // the mixture-of-agents aggregator is the turn's own call, which
            // post_api_request reports: counting either would add spend
            // nobody was billed.
            if r.present("error").is_some() || aux_task == MOA_AGGREGATOR {
                return Decoded::Ignored;
            }
            let api_request_id = r
                .label("api_request_id")
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("{session_id}:aux:{aux_task}:{at:.6}"));
            Hook::PostApiRequest(PostApiRequest {
                api: ApiRequest {
                    session_id,
                    task_id: r.label("task_id"),
                    turn_id: r.label("turn_id").filter(|s| !s.is_empty()),
                    api_request_id,
                    platform: r.label("platform"),
                    model: r.label("model"),
                    provider: r.label("provider"),
                    base_url: r.url("base_url"),
                    api_mode: r.label("api_mode"),
                    api_call_count: r.count("api_call_count"),
                    started_at: r.seconds("started_at"),
                },
                api_duration: r.seconds("api_duration"),
                ended_at: r.seconds("ended_at"),
                finish_reason: r.label("finish_reason"),
                response_model: r.label("response_model"),
                usage: r.usage(),
                assistant_content_chars: None,
                assistant_tool_call_count: None,
                assistant_content: None,
                aux_task: Some(aux_task),
            })
        }
        "api_request_error" => {
            let api = r.api_request();
            let (error_type, error_message) = r.error_object();
            Hook::ApiRequestError(ApiRequestError {
                api,
                api_duration: r.seconds("api_duration"),
                ended_at: r.seconds("ended_at"),
                status_code: r.int("status_code"),
                retry_count: r.count("retry_count").unwrap_or(0),
                max_retries: r.count("max_retries"),
                retryable: r.bool("retryable"),
                reason: r.label("reason"),
                error_type,
                error_message,
            })
        }
        "pre_tool_call" => Hook::PreToolCall(PreToolCall {
            tool: r.tool_ref(),
            args: r.content_value("args"),
        }),
        "post_tool_call" => {
            let tool = r.tool_ref();
            let outcome = r.tool_result_facts();
            Hook::PostToolCall(PostToolCall {
                tool,
                duration_ms: r.count("duration_ms"),
                status: r.label("status"),
                error_type: r.label("error_type"),
                error_message: r.content_str("error_message"),
                outcome,
                args: r.content_value("args"),
                result: r.content_str("result"),
            })
        }
        "post_llm_call" => Hook::PostLlmCall(PostLlmCall {
            session_id: r.id("session_id"),
            task_id: r.label("task_id"),
            turn_id: r.id("turn_id"),
            model: r.label("model"),
            platform: r.label("platform"),
            assistant_response: r.content_str("assistant_response"),
        }),
        "subagent_start" => Hook::SubagentStart(SubagentStart {
            parent_session_id: r.id("parent_session_id"),
            parent_turn_id: r.label("parent_turn_id"),
            parent_subagent_id: r.label("parent_subagent_id"),
            child_session_id: r.id("child_session_id"),
            child_subagent_id: r.label("child_subagent_id"),
            child_role: r.label("child_role"),
            child_goal: r.content_str("child_goal"),
        }),
        "subagent_stop" => Hook::SubagentStop(SubagentStop {
            parent_session_id: r.id("parent_session_id"),
            parent_turn_id: r.label("parent_turn_id"),
            child_session_id: r.id("child_session_id"),
            child_role: r.label("child_role"),
            child_status: match r.label("child_status") {
                Some(status) => Some(status),
                None => r.child_outcome(),
            },
            duration_ms: r.count("duration_ms"),
            child_summary: r.content_str("child_summary"),
        }),
        "on_session_end" => Hook::SessionEnd(SessionEnd {
            session_id: r.id("session_id"),
            task_id: r.label("task_id"),
            turn_id: r.id("turn_id"),
            completed: r.bool("completed"),
            interrupted: r.bool("interrupted"),
            model: r.label("model"),
            platform: r.label("platform"),
        }),
        "on_session_finalize" => Hook::SessionFinalize(SessionFinalize {
            session_id: r.id("session_id"),
            platform: r.label("platform"),
            reason: r.label("reason"),
        }),
        "pre_approval_request" | "post_approval_response" => {
            let turn_id = r.label("turn_id");
            let session_key = r.label("session_key");
            let session_id = turn_id
                .as_deref()
                .and_then(|t| t.split(':').next())
                .or(session_key.as_deref())
                .unwrap_or_default()
                .to_string();
            let approval = Approval {
                session_id,
                session_key,
                turn_id,
                tool_call_id: r.label("tool_call_id"),
                surface: r.label("surface"),
                pattern_key: r.label("pattern_key"),
                choice: r.label("choice"),
                decided_by: r.label("decided_by"),
                command: r.content_str("command"),
            };
            if approval.session_id.is_empty() {
                return Decoded::Unusable(vec![Problem {
                    key: "turn_id".into(),
                    what: MISSING_ID.into(),
                }]);
            }
            if hook == "pre_approval_request" {
                Hook::ApprovalRequest(approval)
            } else {
                Hook::ApprovalResponse(approval)
            }
        }
        _ => return Decoded::Ignored,
    };
    if r.problems.iter().any(|p| p.what == MISSING_ID) {
        return Decoded::Unusable(r.problems);
    }
    let at = if at.is_finite() && at > 0.0 { at } else { 0.0 };
    Decoded::Event(HookEvent { at, hook }, r.problems)
}

/// Whether [`scrub`] may change or remove `key` of `hook`: its content
/// kwargs, a tool result, an API error. Every other kwarg is written as
/// copied, so the binding can write it without building a map first.
pub fn scrubbed_key(hook: &str, key: &str) -> bool {
    super::keys(hook).is_some_and(|k| k.content.contains(&key))
        || (hook == "post_tool_call" && key == super::TOOL_RESULT)
        || (hook == "api_request_error" && key == "error")
}

/// Makes a copied kwargs map fit to be written anywhere (the spool, the
/// journal) before it is decoded. With capture off, content kwargs are
/// removed, a tool result is reduced to the facts the decoder reads from it
/// (exit code, whether `error` is truthy, `success: false`), and an API
/// error keeps its type but not its message. With capture on, every content
/// value is redacted and cut as the decoder would. Decoding the scrubbed
/// map gives the same event as decoding the original.
pub fn scrub(hook: &str, kw: &mut Map<String, Value>, opts: DecodeOptions) {
    let content = super::keys(hook).map_or(&[][..], |k| k.content);
    if !opts.capture_content {
        for key in content {
            kw.remove(*key);
        }
        if hook == "post_tool_call" {
            match kw.get(super::TOOL_RESULT).map(result_facts) {
                Some(Some(facts)) => {
                    kw.insert(super::TOOL_RESULT.into(), Value::String(facts.to_string()));
                }
                Some(None) => {
                    kw.remove(super::TOOL_RESULT);
                }
                None => {}
            }
        }
        if hook == "api_request_error" {
            match kw.get_mut("error") {
                Some(Value::Object(error)) => {
                    error.remove("message");
                }
                Some(Value::String(_)) => {
                    kw.remove("error");
                }
                _ => {}
            }
        }
        return;
    }
    let max = opts.max_content_bytes;
    for key in content.iter().chain(if hook == "post_tool_call" {
        &[super::TOOL_RESULT][..]
    } else {
        &[]
    }) {
        if let Some(v) = kw.get_mut(*key) {
            scrub_value(v, max);
        }
    }
    if hook == "api_request_error" {
        match kw.get_mut("error") {
            Some(Value::Object(error)) => {
                if let Some(m) = error.get_mut("message") {
                    scrub_value(m, max);
                }
            }
            Some(v @ Value::String(_)) => scrub_value(v, max),
            _ => {}
        }
    }
}

/// One captured value redacted and cut: text as text, JSON text as JSON.
fn scrub_value(value: &mut Value, max: usize) {
    let scrubbed = match value {
        Value::String(s) => match json_text(s) {
            Some(parsed) => json_content(parsed, max).0,
            None => {
                let redacted = crate::redact::redact_text(s);
                let cut = crate::redact::truncate_text(&redacted, max);
                if matches!(
                    (&redacted, &cut),
                    (std::borrow::Cow::Borrowed(_), std::borrow::Cow::Borrowed(_))
                ) {
                    return;
                }
                cut.into_owned()
            }
        },
        other => {
            crate::redact::redact_value(other);
            let cut = crate::redact::truncate_value(std::mem::take(other), max);
            *other = cut;
            return;
        }
    };
    *value = Value::String(scrubbed);
}

/// The facts-only stand-in for a tool result: a JSON object with just the
/// keys the decoder reads, or `None` when the result says nothing.
fn result_facts(result: &Value) -> Option<Value> {
    const MAX_PARSED_RESULT_BYTES: usize = 256 * 1024;
    let parsed;
    let obj = match result {
        Value::Object(map) => map,
        Value::String(s) if s.len() <= MAX_PARSED_RESULT_BYTES && s.trim_start().starts_with('{') => {
            match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(map)) => {
                    parsed = map;
                    &parsed
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    let mut facts = Map::new();
    for key in ["exit_code", "returncode"] {
        if let Some(v @ Value::Number(_)) = obj.get(key) {
            facts.insert(key.into(), v.clone());
        }
    }
    if let Some(e) = obj.get("error") {
        facts.insert("error".into(), if truthy(e) { Value::Bool(true) } else { Value::Null });
    }
    if obj.get("success") == Some(&Value::Bool(false)) {
        facts.insert("success".into(), Value::Bool(false));
    }
    Some(Value::Object(facts))
}

const MISSING_ID: &str = "missing id";

/// Largest count (tokens, milliseconds, messages) kept. No call has a
/// trillion tokens; a bigger number is garbage, and summing a few of them
/// would overflow SQLite's 64-bit integers and break every report.
const MAX_COUNT: i64 = 1_000_000_000_000;

/// Reads typed values out of a kwargs map, collecting problems.
struct Reader<'a> {
    kw: &'a Map<String, Value>,
    problems: Vec<Problem>,
    opts: DecodeOptions,
}

impl<'a> Reader<'a> {
    fn problem(&mut self, key: &str, what: impl Into<String>) {
        self.problems.push(Problem {
            key: key.to_string(),
            what: what.into(),
        });
    }

    fn present(&self, key: &str) -> Option<&'a Value> {
        let kw: &'a Map<String, Value> = self.kw;
        match kw.get(key) {
            None | Some(Value::Null) => None,
            Some(v) => Some(v),
        }
    }

    /// A string of at most `max` bytes; numbers and bools are spelled out.
    fn string(&mut self, key: &str, max: usize) -> Option<String> {
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

    fn cut(&mut self, key: &str, mut s: String, max: usize) -> String {
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

    fn label(&mut self, key: &str) -> Option<String> {
        self.string(key, MAX_LABEL_BYTES)
    }

    /// A URL label with any password in it redacted.
    fn url(&mut self, key: &str) -> Option<String> {
        let url = self.label(key)?;
        Some(match crate::redact::redact_text(&url) {
            std::borrow::Cow::Borrowed(_) => url,
            std::borrow::Cow::Owned(redacted) => redacted,
        })
    }

    /// A required id; an empty or missing one makes the event unusable.
    fn id(&mut self, key: &str) -> String {
        match self.label(key) {
            Some(s) if !s.is_empty() => s,
            _ => {
                self.problem(key, MISSING_ID);
                String::new()
            }
        }
    }

    fn int(&mut self, key: &str) -> Option<i64> {
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
    fn count(&mut self, key: &str) -> Option<i64> {
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

    fn float(&mut self, key: &str) -> Option<f64> {
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
    fn seconds(&mut self, key: &str) -> Option<f64> {
        let f = self.float(key)?;
        if f < 0.0 {
            self.problem(key, "negative time, dropped");
            return None;
        }
        Some(f)
    }

    /// Newer Hermes's `child_outcome` of `subagent_stop`, read where
    /// `child_status` is missing: a status string, or a dict with one.
    fn child_outcome(&mut self) -> Option<String> {
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
    fn amount(&mut self, key: &str) -> Option<f64> {
        let f = self.float(key)?;
        if !(0.0..1e9).contains(&f) {
            self.problem(key, "not an amount between 0 and 1e9 USD, dropped");
            return None;
        }
        Some(f)
    }

    fn bool(&mut self, key: &str) -> Option<bool> {
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
    fn content_str(&mut self, key: &str) -> Option<String> {
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
    fn content_value(&mut self, key: &str) -> Option<Value> {
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
    fn assistant_content(&mut self) -> Option<String> {
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

    fn api_request(&mut self) -> ApiRequest {
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

    fn tool_ref(&mut self) -> ToolRef {
        ToolRef {
            session_id: self.id("session_id"),
            task_id: self.label("task_id"),
            turn_id: self.label("turn_id"),
            api_request_id: self.label("api_request_id"),
            tool_call_id: self.id("tool_call_id"),
            tool_name: self.label("tool_name").unwrap_or_else(|| "unknown".into()),
        }
    }

    fn usage(&mut self) -> Option<Usage> {
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
    fn error_object(&mut self) -> (Option<String>, Option<String>) {
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
    fn tool_result_facts(&mut self) -> ToolResultFacts {
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
fn json_text(s: &str) -> Option<Value> {
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
fn json_content(mut value: Value, max: usize) -> (String, bool) {
    crate::redact::redact_value(&mut value);
    let cut = crate::redact::truncate_value(value.clone(), max);
    let was_cut = cut != value;
    (cut.to_string(), was_cut)
}

/// Python truthiness of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a dict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kw(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("test kwargs are an object")
    }

    fn event(hook: &str, v: Value) -> (Hook, Vec<Problem>) {
        match decode(hook, &kw(v), 1.0, DecodeOptions::default()) {
            Decoded::Event(e, p) => (e.hook, p),
            other => panic!("expected an event, got {other:?}"),
        }
    }

    #[test]
    fn unknown_kwargs_are_ignored() {
        let (hook, problems) = event(
            "on_session_start",
            json!({"session_id": "s", "platform": "cli", "telemetry_schema_version": "hermes.observer.v1", "new_thing": [1]}),
        );
        assert!(problems.is_empty());
        assert_eq!(hook.session_id(), "s");
    }

    #[test]
    fn absurd_counts_are_cut_so_sums_cannot_overflow() {
        let (hook, problems) = event(
            "post_api_request",
            json!({"session_id": "s", "api_request_id": "a", "usage": {"input_tokens": 1e30, "output_tokens": u64::MAX}}),
        );
        let Hook::PostApiRequest(p) = hook else { unreachable!() };
        let usage = p.usage.expect("usage survives repair");
        assert_eq!((usage.input_tokens, usage.output_tokens), (MAX_COUNT, MAX_COUNT));
        assert!(problems.iter().any(|p| p.what.contains("implausibly large")));
    }

    #[test]
    fn unknown_hooks_are_ignored() {
        assert_eq!(
            decode("transform_tool_result", &kw(json!({})), 1.0, DecodeOptions::default()),
            Decoded::Ignored
        );
    }

    #[test]
    fn a_missing_id_makes_the_event_unusable() {
        let d = decode(
            "pre_llm_call",
            &kw(json!({"session_id": "s"})),
            1.0,
            DecodeOptions::default(),
        );
        assert!(matches!(d, Decoded::Unusable(p) if p.iter().any(|p| p.key == "turn_id")));
    }

    #[test]
    fn wrong_types_are_repaired_and_reported() {
        let (hook, problems) = event(
            "post_api_request",
            json!({"session_id": "s", "api_request_id": "a", "usage": {"input_tokens": "12", "output_tokens": -5, "cache_read_tokens": 3.0}, "api_duration": "NaN"}),
        );
        let Hook::PostApiRequest(p) = hook else { unreachable!() };
        let usage = p.usage.expect("usage survives repair");
        assert_eq!(usage.input_tokens, 12);
        assert_eq!(usage.output_tokens, 0);
        assert_eq!(usage.cache_read_tokens, 3);
        assert_eq!(p.api_duration, None);
        let keys: Vec<_> = problems.iter().map(|p| p.key.as_str()).collect();
        assert!(keys.contains(&"usage.input_tokens"));
        assert!(keys.contains(&"usage.output_tokens"));
        assert!(keys.contains(&"api_duration"));
    }

    #[test]
    fn content_is_dropped_unless_captured() {
        let args = json!({"session_id": "s", "turn_id": "t", "user_message": "secret plan"});
        let (hook, _) = event("pre_llm_call", args.clone());
        let Hook::PreLlmCall(p) = hook else { unreachable!() };
        assert_eq!(p.user_message, None);
        let opts = DecodeOptions {
            capture_content: true,
            ..Default::default()
        };
        let Decoded::Event(e, _) = decode("pre_llm_call", &kw(args), 1.0, opts) else {
            unreachable!()
        };
        let Hook::PreLlmCall(p) = e.hook else { unreachable!() };
        assert_eq!(p.user_message.as_deref(), Some("secret plan"));
    }

    #[test]
    fn tool_success_follows_status_then_the_result() {
        let cases = [
            (json!({"status": "ok"}), true),
            (json!({"status": "error"}), false),
            (json!({"status": "blocked"}), false),
            (json!({"status": "cancelled"}), false),
            (json!({"status": "timeout"}), false),
            (json!({"status": "weird"}), false),
            // Hermes reports a terminal command exiting 3 with status "ok".
            (
                json!({"status": "ok", "result": "{\"exit_code\": 3, \"error\": null}"}),
                true,
            ),
            (
                json!({"result": "{\"output\": \"\", \"exit_code\": 3, \"error\": null}"}),
                false,
            ),
            (
                json!({"result": "{\"output\": \"\", \"exit_code\": 0, \"error\": null}"}),
                true,
            ),
            (json!({"result": "{\"error\": null}"}), true),
            (json!({"result": "{\"error\": \"boom\"}"}), false),
            (json!({"result": "{\"success\": false}"}), false),
            (json!({"result": "plain text"}), true),
        ];
        for (extra, ok) in cases {
            let mut args = json!({"session_id": "s", "tool_call_id": "c", "tool_name": "terminal"});
            args.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            let (hook, _) = event("post_tool_call", args.clone());
            let Hook::PostToolCall(p) = hook else { unreachable!() };
            assert_eq!(p.ok(), ok, "{args}");
        }
    }

    #[test]
    fn huge_ids_are_cut_at_a_char_boundary() {
        let long = "é".repeat(10_000);
        let (hook, problems) = event("on_session_start", json!({"session_id": long}));
        assert!(hook.session_id().len() <= MAX_LABEL_BYTES);
        assert_eq!(problems.len(), 1);
    }
}

#[cfg(test)]
mod approval_tests {
    use super::*;

    /// Kwargs as Hermes 0.19.0's `tools/approval.py` fires them, the smart
    /// (auxiliary model) surface included.
    #[test]
    fn approval_hooks_decode_with_the_session_from_the_turn_id() {
        let kwargs = serde_json::json!({
            "command": "rm -rf /tmp/x", "description": "recursive delete",
            "pattern_key": "rm_recursive", "pattern_keys": ["rm_recursive"],
            "session_key": "agent:main:telegram:dm:42", "surface": "smart",
            "choice": "smart_deny", "decided_by": "aux_llm",
            "turn_id": "20261130_013735_bf4b63:task:90cda183", "tool_call_id": "call_1",
            "telemetry_schema_version": "hermes.observer.v1",
        });
        let map = kwargs.as_object().expect("object").clone();
        let Decoded::Event(event, problems) = decode("post_approval_response", &map, 10.0, DecodeOptions::default())
        else {
            panic!("decodes");
        };
        assert!(problems.is_empty(), "{problems:?}");
        let Hook::ApprovalResponse(a) = event.hook else {
            panic!("an approval response")
        };
        assert_eq!(a.session_id, "20261130_013735_bf4b63");
        assert_eq!(a.key(), "call_1");
        assert_eq!(a.decision(), Some("deny"));
        assert_eq!(a.decided_by.as_deref(), Some("aux_llm"));
        assert_eq!(a.command, None, "the command is content: kept only with capture on");
        // No turn (an approval outside a turn): the session key stands in.
        let mut map = map;
        map.remove("turn_id");
        let Decoded::Event(event, _) = decode("pre_approval_request", &map, 10.0, DecodeOptions::default()) else {
            panic!("decodes");
        };
        assert_eq!(event.hook.session_id(), "agent:main:telegram:dm:42");
        for (choice, decision) in [
            ("once", "approve"),
            ("always", "approve"),
            ("deny", "deny"),
            ("timeout", "timeout"),
        ] {
            let a = Approval {
                choice: Some(choice.into()),
                ..Approval::default()
            };
            assert_eq!(a.decision(), Some(decision), "{choice}");
        }
    }

    #[test]
    fn failed_auxiliary_attempts_and_the_moa_aggregator_are_not_calls_of_their_own() {
        let call = |extra: serde_json::Value| {
            let mut kwargs = serde_json::json!({
                "session_id": "s1", "aux_task": "vision", "model": "m", "streaming": false,
                "usage": {"input_tokens": 10, "output_tokens": 2},
            });
            for (k, v) in extra.as_object().expect("object") {
                kwargs[k] = v.clone();
            }
            let map = kwargs.as_object().expect("object").clone();
            matches!(
                decode("post_auxiliary_call", &map, 1.0, DecodeOptions::default()),
                Decoded::Event(..)
            )
        };
        assert!(call(serde_json::json!({"error": null})), "a success");
        assert!(!call(
            serde_json::json!({"error": "RateLimitError: slow down", "usage": null})
        ));
        assert!(!call(serde_json::json!({"aux_task": "moa_aggregator"})));
        assert!(
            call(serde_json::json!({"aux_task": "moa_reference"})),
            "an advisor is a call"
        );
    }

    /// Kwargs shaped as newer Hermes fires `post_auxiliary_call` (those of
    /// `post_api_request` plus `aux_task`; ids may be empty), and as the
    /// package feeds it from Hermes 0.19.0's own accounting.
    #[test]
    fn an_auxiliary_call_decodes_as_an_llm_call_marked_with_its_task() {
        let kwargs = serde_json::json!({
            "session_id": "s1", "turn_id": "", "api_request_id": "", "aux_task": "compression",
            "model": "gpt-4o-mini", "provider": "openai", "api_duration": 0.4, "finish_reason": "stop",
            "usage": {"input_tokens": 900, "output_tokens": 80, "cache_read_tokens": 100},
        });
        let map = kwargs.as_object().expect("object").clone();
        let Decoded::Event(event, problems) = decode("post_auxiliary_call", &map, 12.5, DecodeOptions::default())
        else {
            panic!("decodes");
        };
        assert!(problems.is_empty(), "{problems:?}");
        let Hook::PostApiRequest(e) = &event.hook else {
            panic!("an LLM call")
        };
        assert_eq!(e.aux_task.as_deref(), Some("compression"));
        assert_eq!(e.api.turn_id, None, "an empty turn id is no turn");
        assert_eq!(e.api.api_request_id, "s1:aux:compression:12.500000");
        assert_eq!(e.usage.map(|u| (u.input_tokens, u.cache_read_tokens)), Some((900, 100)));
        // No session: nothing to attribute it to.
        let mut map = map;
        map.insert("session_id".into(), serde_json::json!(""));
        assert!(matches!(
            decode("post_auxiliary_call", &map, 12.5, DecodeOptions::default()),
            Decoded::Ignored
        ));
    }

    #[test]
    fn newer_hermes_kwargs_decode_the_provider_cost_and_child_outcome() {
        // post_api_request with the provider's billed cost in the usage.
        let kwargs = serde_json::json!({
            "session_id": "s1", "api_request_id": "s1:t:api:1", "model": "anthropic/claude-sonnet-4.5",
            "provider": "openrouter", "first_chunk_at": 1756000000.512, "moa_references": null,
            "usage": {"input_tokens": 2048, "output_tokens": 512, "cost": 0.0139},
        });
        let map = kwargs.as_object().expect("object").clone();
        let Decoded::Event(event, problems) = decode("post_api_request", &map, 1.0, DecodeOptions::default()) else {
            panic!("decodes");
        };
        assert!(problems.is_empty(), "{problems:?}");
        let Hook::PostApiRequest(e) = &event.hook else {
            panic!("an LLM call")
        };
        assert_eq!(e.usage.and_then(|u| u.provider_cost_usd), Some(0.0139));
        // A cost that is not an amount is dropped and reported, the call kept.
        for bad in [
            serde_json::json!(-1.0),
            serde_json::json!("lots"),
            serde_json::json!(1e12),
        ] {
            let mut map = map.clone();
            map.insert("usage".into(), serde_json::json!({"input_tokens": 1, "cost": bad}));
            let Decoded::Event(event, problems) = decode("post_api_request", &map, 1.0, DecodeOptions::default())
            else {
                panic!("decodes");
            };
            let Hook::PostApiRequest(e) = &event.hook else {
                panic!("an LLM call")
            };
            assert_eq!(e.usage.map(|u| (u.input_tokens, u.provider_cost_usd)), Some((1, None)));
            assert!(problems.iter().any(|p| p.key == "usage.cost"), "{problems:?}");
        }
        // subagent_stop: child_outcome where child_status is missing.
        for (outcome, want) in [
            (serde_json::json!("cancelled"), Some("cancelled")),
            (serde_json::json!({"status": "failed", "summary": "x"}), Some("failed")),
            (serde_json::json!({"other": 1}), None),
        ] {
            let kwargs = serde_json::json!({
                "parent_session_id": "p", "child_session_id": "c", "child_outcome": outcome,
            });
            let map = kwargs.as_object().expect("object").clone();
            let Decoded::Event(event, _) = decode("subagent_stop", &map, 1.0, DecodeOptions::default()) else {
                panic!("decodes");
            };
            let Hook::SubagentStop(e) = &event.hook else {
                panic!("a subagent stop")
            };
            assert_eq!(e.child_status.as_deref(), want);
        }
    }
}
