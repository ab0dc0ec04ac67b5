//! A session's spans as a tree, for `hermes-meter trace` and the viewer.
//!
//! Owns: turning one session's ledger rows (from
//! [`hermes_meter_store::Reader::trace_rows`]) into a tree of the very spans the
//! exporter sends (built by [`hermes_meter_model::span`], so names, ids, parents and
//! times are the exported ones), the per-turn figures and the error list,
//! and the terminal rendering. Must not touch: SQL (the store reads the
//! rows), HTML (the viewer renders the tree).
//!
//! Everything but [`load`] is pure.
//!
//! # Shape
//!
//! The session span is the root; turns, chat attempts and tool calls hang
//! under their span parent, and a subagent's session span under the
//! parent's `delegate_task` tool span (else its turn), exactly as in the
//! exported trace. In per-turn trace mode a turn roots its own trace and
//! links to the session span; the tree still shows it under the session
//! (`linked: true`), which is what the link means. A session that went on
//! after its span was sent has continuation spans (children of the session
//! span, see [`span::session_span`]); its later turns hang under them. The
//! ledger keeps only the current continuation's own figures, so a
//! continuation node shows the time range and sums of its turns.
//!
//! Token counts follow the conventions: `input_tokens` includes cache
//! reads and writes (Hermes's own count excludes them).

use std::collections::HashMap;
use std::fmt::Write as _;

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::{status, Span};

use hermes_meter_model::rows::outcome::RUNNING;
use hermes_meter_model::semconv::attr;
use hermes_meter_model::span::hex;
use hermes_meter_model::span::{self, Ancestor, Ancestry, SpanOptions};
use hermes_meter_store::error::Result;
use hermes_meter_store::{Reader, TraceRows};

mod render;
pub use render::label;
pub(crate) use render::{human_duration, render_text};

/// What a node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    Session,
    /// A later stretch of a session whose span was already sent (a resumed
    /// session, a turn after the grace period): a child of the session span.
    Continuation,
    Turn,
    Chat,
    Tool,
    /// A tool call's wait for a human's approval.
    Approval,
}

/// One span of the tree.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TraceNode {
    pub kind: NodeKind,
    /// The span name (`hermes.session`, `invoke_agent hermes`, `chat {model}`,
    /// `execute_tool {tool}`).
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// The exported span's parent; `None` for a trace root.
    pub parent_span_id: Option<String>,
    /// A turn rooting its own trace, linked to the session span.
    pub linked: bool,
    /// The Hermes session this span belongs to.
    pub session_id: String,
    /// The Hermes id the span is keyed by: session, turn, api_request_id
    /// or tool call id.
    pub key: String,
    /// Unix seconds.
    pub start: f64,
    pub end: f64,
    pub duration_ms: f64,
    /// Input tokens including cache reads and writes; for a turn, the sum
    /// of its attempts; for a session, its own calls (not its subagents').
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_tokens: Option<i64>,
    pub cost_usd: Option<f64>,
    /// `ok`, `error`, `running`, or the session status / turn outcome /
    /// tool outcome Hermes reported (`abandoned`, `blocked`, ...).
    pub status: String,
    /// The span's error type, for error spans.
    pub error: Option<String>,
    /// 0-based attempt number of a chat span (Hermes's retry_count).
    pub attempt: Option<i64>,
    /// Extra words for the line: HTTP status and reason of a failed
    /// attempt, the exit code of a tool, the role of a subagent.
    pub detail: Option<String>,
    /// The exported span's attributes as text, in the span's order (the
    /// viewer shows them on click; `trace --json` leaves them out).
    #[serde(skip)]
    pub attributes: Vec<(String, String)>,
    pub children: Vec<TraceNode>,
}

/// One turn's figures, for the viewer's chart.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TurnPoint {
    pub turn_id: String,
    pub session_id: String,
    pub start: f64,
    pub cost_usd: f64,
    /// The largest context sent in the turn: input tokens including cache.
    pub context_tokens: i64,
    pub llm_calls: i64,
}

/// A failed attempt or tool call, with what is known of why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TraceError {
    pub span_id: String,
    pub name: String,
    pub session_id: String,
    pub at: f64,
    pub error_type: String,
    pub status_code: Option<i64>,
    pub reason: Option<String>,
    /// Hermes's error message (attempts only).
    pub message: Option<String>,
}

/// A session's tree with its per-turn figures, errors and captured content.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Trace {
    pub session_id: String,
    pub root: TraceNode,
    pub turns: Vec<TurnPoint>,
    pub errors: Vec<TraceError>,
    /// Captured content by span id: `(attribute, JSON text)`; empty unless
    /// content capture was on when the session ran.
    pub content: HashMap<String, Vec<(String, String)>>,
    /// Spans in the tree (nodes).
    pub spans: usize,
}

/// Loads `session_id` and its subagents from `store` and builds the tree
/// with `opts` (the exporter's [`SpanOptions`]); `None` for an unknown id.
pub fn load(store: &Reader, session_id: &str, opts: SpanOptions) -> Result<Option<Trace>> {
    let Some(rows) = store.trace_rows(session_id)? else {
        return Ok(None);
    };
    let Some(top) = rows.runs.first() else {
        return Ok(None);
    };
    let top_ancestry = hermes_meter_runtime::export::ancestry_of(store, top)?;
    Ok(Some(build(&rows, &top_ancestry, opts)))
}

/// The ancestry of every run of `rows` from the top run's (the runs come
/// parents first).
fn ancestries(rows: &TraceRows, top: &Ancestry) -> HashMap<String, Ancestry> {
    let mut out: HashMap<String, Ancestry> = HashMap::new();
    for (i, run) in rows.runs.iter().enumerate() {
        if i == 0 {
            out.insert(run.session_id.clone(), top.clone());
            continue;
        }
        let parent = run.edge.as_ref().and_then(|e| out.get(&e.parent_session_id)).cloned();
        let mut chain = vec![Ancestor {
            session_id: run.session_id.clone(),
            platform: run.platform.clone(),
            parent_turn_id: run.edge.as_ref().and_then(|e| e.parent_turn_id.clone()),
        }];
        chain.extend(parent.map(|p| p.0).unwrap_or_default());
        out.insert(run.session_id.clone(), Ancestry(chain));
    }
    out
}

/// Builds the tree of `rows` (pure). `top` is the ancestry of the first
/// run (the session asked for), which places it in its parent's trace if
/// it is itself a subagent.
pub fn build(rows: &TraceRows, top: &Ancestry, opts: SpanOptions) -> Trace {
    let ancestry = ancestries(rows, top);
    let runs: HashMap<&str, &hermes_meter_model::rows::RunRow> =
        rows.runs.iter().map(|r| (r.session_id.as_str(), r)).collect();
    let mut nodes: Vec<TraceNode> = Vec::new();
    let mut content = HashMap::new();
    let mut errors = Vec::new();
    let empty = Ancestry::default();

    for run in &rows.runs {
        let a = ancestry.get(&run.session_id).unwrap_or(&empty);
        let s = span::session_span(run, 0, a, opts);
        let running = run.status == RUNNING;
        let mut n = node(NodeKind::Session, &s, &run.session_id, &run.session_id);
        n.input_tokens = Some(run.input_tokens + run.cache_read_tokens + run.cache_write_tokens);
        n.output_tokens = Some(run.output_tokens);
        n.cache_read_tokens = Some(run.cache_read_tokens);
        n.cost_usd = Some(run.cost_usd);
        n.status = run.status.clone();
        n.detail = run.edge.as_ref().map(|e| match &e.role {
            Some(role) => format!("subagent ({role})"),
            None => "subagent".to_string(),
        });
        if running {
            n.status = RUNNING.to_string();
        }
        if let Some(text) = &run.budget_stop {
            // Stopped by a budget: not the healthy session Hermes reports.
            if !running {
                n.status = hermes_meter_model::budget::verdict::BLOCKED.to_string();
            }
            n.detail = Some(match n.detail.take() {
                Some(d) => format!("{d}, stopped by a budget"),
                None => "stopped by a budget".to_string(),
            });
            errors.push(TraceError {
                span_id: n.span_id.clone(),
                name: n.name.clone(),
                session_id: run.session_id.clone(),
                at: run.ended_at.unwrap_or(run.last_event_at),
                error_type: "budget_stop".into(),
                status_code: None,
                reason: Some(hermes_meter_model::budget::verdict::BLOCKED.into()),
                message: Some(text.clone()),
            });
        }
        nodes.push(n);
        // Continuations the session's turns hang under. Only the current
        // one's own figures are kept in the ledger, so each shows the span
        // (id, parent, name) with the time range of its turns.
        let parts: std::collections::BTreeSet<i64> = rows
            .turns
            .iter()
            .filter(|t| t.session_id == run.session_id && t.span_n > 0)
            .map(|t| t.span_n)
            .collect();
        for k in parts {
            let s = span::session_span(run, k, a, opts);
            let mut c = node(NodeKind::Continuation, &s, &run.session_id, &run.session_id);
            let turns = rows
                .turns
                .iter()
                .filter(|t| t.session_id == run.session_id && t.span_n == k);
            let start = turns.clone().map(|t| t.started_at).fold(f64::INFINITY, f64::min);
            let end = turns
                .map(|t| t.ended_at.unwrap_or(run.ended_at.unwrap_or(run.last_event_at)))
                .fold(f64::NEG_INFINITY, f64::max);
            if start.is_finite() && end >= start {
                c.start = start;
                c.end = end;
                c.duration_ms = (end - start) * 1000.0;
            }
            c.status = run.status.clone();
            c.detail = Some(format!("continuation {k}"));
            nodes.push(c);
        }
    }
    for turn in &rows.turns {
        let Some(run) = runs.get(turn.session_id.as_str()) else {
            continue;
        };
        let a = ancestry.get(&turn.session_id).unwrap_or(&empty);
        let s = span::turn_span(turn, run, a, opts);
        let mut n = node(NodeKind::Turn, &s, &turn.session_id, &turn.turn_id);
        n.linked = !s.links.is_empty();
        n.status = match (&turn.outcome, run.status == RUNNING) {
            (Some(o), _) => o.clone(),
            (None, true) => RUNNING.to_string(),
            (None, false) => hermes_meter_model::rows::outcome::ABANDONED.to_string(),
        };
        nodes.push(n);
    }
    for at in &rows.attempts {
        let Some(run) = runs.get(at.session_id.as_str()) else {
            continue;
        };
        let a = ancestry.get(&at.session_id).unwrap_or(&empty);
        let s = span::attempt_span(at, run, a, opts);
        let mut n = node(NodeKind::Chat, &s, &at.session_id, &at.api_request_id);
        n.attempt = Some(at.attempt);
        match (&at.error, at.ended_at) {
            (Some(err), _) => {
                n.status = "error".into();
                let mut words = Vec::new();
                if let Some(code) = err.status_code {
                    words.push(format!("HTTP {code}"));
                }
                if let Some(reason) = &err.reason {
                    words.push(reason.clone());
                }
                if err.retryable == Some(true) {
                    words.push("retryable".into());
                }
                n.detail = (!words.is_empty()).then(|| words.join(", "));
                errors.push(TraceError {
                    span_id: n.span_id.clone(),
                    name: n.name.clone(),
                    session_id: at.session_id.clone(),
                    at: at.ended_at.unwrap_or(at.started_at),
                    error_type: n.error.clone().unwrap_or_default(),
                    status_code: err.status_code,
                    reason: err.reason.clone(),
                    message: rows
                        .error_messages
                        .get(&(at.api_request_id.clone(), at.attempt))
                        .cloned(),
                });
            }
            (None, Some(_)) => {
                n.status = "ok".into();
                n.input_tokens = int_attr(&s, attr::GEN_AI_USAGE_INPUT_TOKENS);
                n.output_tokens = int_attr(&s, attr::GEN_AI_USAGE_OUTPUT_TOKENS);
                n.cache_read_tokens = int_attr(&s, attr::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS);
                n.cost_usd = double_attr(&s, attr::HERMES_USAGE_COST_USD);
                let unpriced = str_attr(&s, attr::HERMES_USAGE_COST_SOURCE).as_deref()
                    == Some(hermes_meter_model::pricing::PriceSource::Unknown.as_str());
                n.detail = match (unpriced, at.estimated) {
                    (true, true) => Some(format!("{UNPRICED}; estimated tokens")),
                    (true, false) => Some(UNPRICED.into()),
                    (false, true) => Some("estimated tokens".into()),
                    (false, false) => None,
                };
            }
            (None, None) => {
                n.status = if run.status == RUNNING {
                    RUNNING.to_string()
                } else if run.budget_stop.is_some() {
                    // The call the budget stopped: answered by the
                    // stand-in, never sent to the provider.
                    n.detail = Some("stopped by a budget before the provider".into());
                    hermes_meter_model::budget::verdict::BLOCKED.to_string()
                } else {
                    hermes_meter_model::rows::outcome::ABANDONED.to_string()
                };
            }
        }
        let c = rows
            .content
            .get(&("llm".to_string(), at.session_id.clone(), at.api_request_id.clone()))
            .cloned()
            .unwrap_or_default();
        // Output messages belong to the attempt that produced them, as in export.
        let c: Vec<_> = if at.error.is_some() || at.ended_at.is_none() {
            c.into_iter()
                .filter(|(name, _)| name != attr::GEN_AI_OUTPUT_MESSAGES)
                .collect()
        } else {
            c
        };
        if !c.is_empty() {
            content.insert(n.span_id.clone(), c);
        }
        nodes.push(n);
    }
    for tool in &rows.tools {
        let Some(run) = runs.get(tool.session_id.as_str()) else {
            continue;
        };
        let a = ancestry.get(&tool.session_id).unwrap_or(&empty);
        let s = span::tool_span(tool, run, a, opts);
        let mut n = node(NodeKind::Tool, &s, &tool.session_id, &tool.tool_call_id);
        n.status = str_attr(&s, attr::HERMES_TOOL_OUTCOME).unwrap_or_default();
        if tool.ended_at.is_none() && run.status == RUNNING {
            n.status = RUNNING.to_string();
        }
        if let Some(code) = tool.exit_code {
            n.detail = Some(format!("exit code {code}"));
        }
        if s.status.is_some() && n.status != RUNNING {
            errors.push(TraceError {
                span_id: n.span_id.clone(),
                name: n.name.clone(),
                session_id: tool.session_id.clone(),
                at: tool.ended_at.unwrap_or(tool.started_at),
                error_type: n.error.clone().unwrap_or_default(),
                status_code: None,
                reason: tool.status.clone(),
                message: None,
            });
        }
        if let Some(c) = rows
            .content
            .get(&("tool".to_string(), tool.session_id.clone(), tool.tool_call_id.clone()))
        {
            content.insert(n.span_id.clone(), c.clone());
        }
        nodes.push(n);
    }
    for ap in &rows.approvals {
        let Some(run) = runs.get(ap.session_id.as_str()) else {
            continue;
        };
        let a = ancestry.get(&ap.session_id).unwrap_or(&empty);
        let s = span::approval_span(ap, run, a, opts);
        let mut n = node(NodeKind::Approval, &s, &ap.session_id, &ap.key);
        n.status = match str_attr(&s, attr::HERMES_TOOL_DECISION) {
            Some(d) => d,
            None if run.status == RUNNING => RUNNING.to_string(),
            None => hermes_meter_model::rows::outcome::ABANDONED.to_string(),
        };
        let mut words = Vec::new();
        if let Some(c) = &ap.choice {
            words.push(format!("choice {c}"));
        }
        if let Some(by) = &ap.decided_by {
            words.push(format!("by {by}"));
        }
        if let Some(surface) = &ap.surface {
            words.push(format!("on {surface}"));
        }
        n.detail = (!words.is_empty()).then(|| words.join(", "));
        nodes.push(n);
    }

    let turns = turn_points(&nodes);
    let spans = nodes.len();
    let root = assemble(nodes);
    errors.sort_by(|a, b| a.at.total_cmp(&b.at));
    Trace {
        session_id: root.session_id.clone(),
        root,
        turns,
        errors,
        content,
        spans,
    }
}

/// A node of span `s` with what every kind shares.
fn node(kind: NodeKind, s: &Span, session_id: &str, key: &str) -> TraceNode {
    let start = s.start_time_unix_nano as f64 / 1e9;
    let end = s.end_time_unix_nano as f64 / 1e9;
    let error = s
        .status
        .as_ref()
        .filter(|st| st.code == status::StatusCode::Error as i32)
        .map(|_| str_attr(s, attr::ERROR_TYPE).unwrap_or_default());
    TraceNode {
        kind,
        name: s.name.clone(),
        trace_id: hex(&s.trace_id),
        span_id: hex(&s.span_id),
        parent_span_id: (!s.parent_span_id.is_empty()).then(|| hex(&s.parent_span_id)),
        linked: false,
        session_id: session_id.to_string(),
        key: key.to_string(),
        start,
        end,
        duration_ms: (s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano)) as f64 / 1e6,
        input_tokens: None,
        output_tokens: None,
        cache_read_tokens: None,
        cost_usd: None,
        status: String::new(),
        error,
        attempt: None,
        detail: None,
        attributes: s
            .attributes
            .iter()
            .map(|kv| {
                (
                    kv.key.clone(),
                    value_text(kv.value.as_ref().and_then(|v| v.value.as_ref())),
                )
            })
            .collect(),
        children: Vec::new(),
    }
}

/// An attribute's value as a person reads it: strings as they are, arrays
/// and maps as JSON-like lists, bytes in hex.
fn value_text(v: Option<&Value>) -> String {
    match v {
        None => String::new(),
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::BytesValue(b)) => hex(b),
        // An index into a profile's string table: spans never use it.
        Some(Value::StringValueStrindex(i)) => format!("string #{i}"),
        Some(Value::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(|v| value_text(v.value.as_ref())).collect();
            format!("[{}]", items.join(", "))
        }
        Some(Value::KvlistValue(l)) => {
            let items: Vec<String> = l
                .values
                .iter()
                .map(|kv| {
                    format!(
                        "{}: {}",
                        kv.key,
                        value_text(kv.value.as_ref().and_then(|v| v.value.as_ref()))
                    )
                })
                .collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// Hangs every node under its parent (a linked turn under its session),
/// children in start order; the first node (the session asked for) is the
/// root, and a node whose parent is not in the tree hangs under the root.
/// Turns get the sums of their attempts' tokens and costs.
fn assemble(nodes: Vec<TraceNode>) -> TraceNode {
    let index: HashMap<String, usize> = nodes.iter().enumerate().map(|(i, n)| (n.span_id.clone(), i)).collect();
    let session_of: HashMap<String, usize> = nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind == NodeKind::Session)
        .map(|(i, n)| (n.session_id.clone(), i))
        .collect();
    let mut parent: Vec<Option<usize>> = vec![None; nodes.len()];
    for (i, n) in nodes.iter().enumerate().skip(1) {
        let p = match (&n.parent_span_id, n.linked) {
            (_, true) => session_of.get(&n.session_id).copied(),
            (Some(p), _) => index.get(p).copied(),
            (None, _) => None,
        };
        parent[i] = Some(p.filter(|p| *p != i).unwrap_or(0));
    }
    // Children lists, then build bottom-up from the root.
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            children[*p].push(i);
        }
    }
    let mut slots: Vec<Option<TraceNode>> = nodes.into_iter().map(Some).collect();
    fn take(i: usize, slots: &mut [Option<TraceNode>], children: &[Vec<usize>], depth: usize) -> Option<TraceNode> {
        let mut n = slots[i].take()?;
        if depth < 256 {
            for &c in &children[i] {
                if let Some(child) = take(c, slots, children, depth + 1) {
                    n.children.push(child);
                }
            }
        }
        n.children.sort_by(|a, b| {
            a.start
                .total_cmp(&b.start)
                .then(a.attempt.cmp(&b.attempt))
                .then(a.name.cmp(&b.name))
        });
        // A turn adds up its attempts, a continuation its turns.
        let summed = match n.kind {
            NodeKind::Turn => Some(NodeKind::Chat),
            NodeKind::Continuation => Some(NodeKind::Turn),
            _ => None,
        };
        if let Some(kind) = summed {
            let (mut i, mut o, mut c, mut usd, mut priced) = (0, 0, 0, 0.0, false);
            for ch in n.children.iter().filter(|c| c.kind == kind) {
                i += ch.input_tokens.unwrap_or(0);
                o += ch.output_tokens.unwrap_or(0);
                c += ch.cache_read_tokens.unwrap_or(0);
                if let Some(u) = ch.cost_usd {
                    usd += u;
                    priced = true;
                }
            }
            n.input_tokens = Some(i);
            n.output_tokens = Some(o);
            n.cache_read_tokens = Some(c);
            n.cost_usd = priced.then_some(usd);
        }
        Some(n)
    }
    take(0, &mut slots, &children, 0).expect("the root node is present: nodes start with the session asked for")
}

/// Per turn: its cost and its largest context (input incl. cache).
fn turn_points(nodes: &[TraceNode]) -> Vec<TurnPoint> {
    let mut points: Vec<TurnPoint> = nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Turn)
        .map(|n| TurnPoint {
            turn_id: n.key.clone(),
            session_id: n.session_id.clone(),
            start: n.start,
            cost_usd: 0.0,
            context_tokens: 0,
            llm_calls: 0,
        })
        .collect();
    let by_span: HashMap<String, usize> = nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Turn)
        .enumerate()
        .map(|(i, n)| (n.span_id.clone(), i))
        .collect();
    for n in nodes.iter().filter(|n| n.kind == NodeKind::Chat && n.status == "ok") {
        if let Some(&i) = n.parent_span_id.as_ref().and_then(|p| by_span.get(p)) {
            let p = &mut points[i];
            p.cost_usd += n.cost_usd.unwrap_or(0.0);
            p.context_tokens = p.context_tokens.max(n.input_tokens.unwrap_or(0));
            p.llm_calls += 1;
        }
    }
    points.sort_by(|a, b| a.start.total_cmp(&b.start));
    points
}

fn attr_value<'a>(s: &'a Span, key: &str) -> Option<&'a Value> {
    s.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn int_attr(s: &Span, key: &str) -> Option<i64> {
    match attr_value(s, key) {
        Some(Value::IntValue(v)) => Some(*v),
        _ => None,
    }
}

/// The detail of an LLM call no price list knows (its cost is unknown,
/// not $0): `pricing show MODEL` says which rate a model gets.
pub const UNPRICED: &str = "unpriced: no price for this model (hermes-meter pricing show)";

fn double_attr(s: &Span, key: &str) -> Option<f64> {
    match attr_value(s, key) {
        Some(Value::DoubleValue(v)) => Some(*v),
        _ => None,
    }
}

fn str_attr(s: &Span, key: &str) -> Option<String> {
    match attr_value(s, key) {
        Some(Value::StringValue(v)) => Some(v.clone()),
        _ => None,
    }
}

/// Every node of the tree, depth first, with its depth.
pub fn walk(root: &TraceNode) -> Vec<(usize, &TraceNode)> {
    fn go<'a>(n: &'a TraceNode, depth: usize, out: &mut Vec<(usize, &'a TraceNode)>) {
        out.push((depth, n));
        for c in &n.children {
            go(c, depth + 1, out);
        }
    }
    let mut out = Vec::new();
    go(root, 0, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_meter_model::rows::{RunRow, TurnRow};

    #[test]
    fn a_turn_after_the_session_span_went_out_hangs_under_its_continuation() {
        let run = RunRow {
            session_id: "s".into(),
            platform: Some("cli".into()),
            started_at: 100.0,
            ended_at: Some(300.0),
            last_event_at: 300.0,
            status: "ok".into(),
            span_n: 1,
            span_started_at: Some(200.0),
            ..RunRow::default()
        };
        let turn = |id: &str, start: f64, n: i64| TurnRow {
            turn_id: id.into(),
            session_id: "s".into(),
            started_at: start,
            ended_at: Some(start + 10.0),
            outcome: Some("ok".into()),
            span_n: n,
            ..TurnRow::default()
        };
        let rows = TraceRows {
            runs: vec![run],
            turns: vec![turn("t0", 110.0, 0), turn("t1", 210.0, 1)],
            ..TraceRows::default()
        };
        let top = Ancestry(vec![Ancestor {
            session_id: "s".into(),
            platform: Some("cli".into()),
            parent_turn_id: None,
        }]);
        let t = build(&rows, &top, SpanOptions::default());
        let kids: Vec<(NodeKind, &str)> = t.root.children.iter().map(|c| (c.kind, c.key.as_str())).collect();
        assert_eq!(kids, [(NodeKind::Turn, "t0"), (NodeKind::Continuation, "s")]);
        let cont = &t.root.children[1];
        assert_eq!(cont.parent_span_id.as_deref(), Some(t.root.span_id.as_str()));
        assert_eq!(cont.span_id, hex(&span::session_part_span_id("s", 1)));
        assert_eq!(cont.children[0].key, "t1");
        assert_eq!((cont.start, cont.end), (210.0, 220.0));
        assert_eq!(cont.detail.as_deref(), Some("continuation 1"));
    }

    #[test]
    fn counts_and_durations_read_like_people_write_them() {
        assert_eq!(hermes_meter_model::display::human_count(0), "0");
        assert_eq!(hermes_meter_model::display::human_count(1234567), "1,234,567");
        assert_eq!(hermes_meter_model::display::human_count(-1000), "-1,000");
        assert_eq!(human_duration(850.0), "850 ms");
        assert_eq!(human_duration(12_345.0), "12.3 s");
        assert_eq!(human_duration(245_000.0), "4m 05s");
    }
}
