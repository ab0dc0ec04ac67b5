//! Span records built from ledger rows. Pure: no I/O.
//!
//! Owns: the span model (names, kinds, attributes, status, times), the
//! deterministic trace and span ids, and where each span sits in which
//! trace. Must not touch: the store (the exporter hands rows in), the
//! network.
//!
//! # Ids
//!
//! Ids are hashes of Hermes ids, so the same ledger row always becomes the
//! same span: a span finished by another process keeps its parent, and a
//! re-export (after a crash, or `export --since`) sends the same ids.
//!
//! | span | span id from | trace |
//! |---|---|---|
//! | session `hermes.session` | session id | the session's trace |
//! | turn `invoke_agent hermes` | turn id | the turn's trace |
//! | attempt `chat {model}` | `api_request_id#retry_count` | its turn's trace |
//! | tool `execute_tool {tool}` | session id + tool_call_id | its turn's trace |
//!
//! A root session's trace id hashes its session id. In per-turn mode (the
//! default for gateway platforms) each turn of a root session roots its own
//! trace, hashed from the turn id, with a link to the session span; in
//! per-session mode (the default for cli, cron and subagent sessions) a
//! turn's trace is its session's. A subagent session lives in the trace of
//! the parent turn that delegated it, under the parent's `delegate_task`
//! tool span (matched by turn and time, see
//! [`crate::rows::EdgeRow::delegate_tool_call_id`]), else under that turn.
//! That also holds for background delegations that finish after the parent
//! ended, because nothing depends on the parent span still being open.
//!
//! # Tokens
//!
//! `gen_ai.usage.input_tokens` includes cached tokens, as the conventions
//! say; Hermes's own `input_tokens` excludes cache reads and writes, so the
//! builder adds them back. Cache and reasoning counts get their own
//! attributes.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span, status, Span, Status};

use crate::rows::{ApprovalRow, AttemptRow, RunRow, ToolRow, TurnRow};
use crate::semconv::{attr, span as names, value, Names};

mod approval;
mod ids;

pub use approval::approval_span;
pub use ids::{
    approval_span_id, attempt_span_id, session_part_span_id, session_span_id, span_id, tool_span_id, trace_id,
    turn_span_id,
};

/// How traces are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceMode {
    /// Per turn for gateway platforms (anything but cli, cron and
    /// subagent), per session otherwise.
    #[default]
    Auto,
    /// One trace per root session.
    Session,
    /// One trace per turn of a root session, linked to the session span.
    Turn,
}

impl TraceMode {
    /// Parses `auto`, `session` or `turn`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(TraceMode::Auto),
            "session" => Some(TraceMode::Session),
            "turn" => Some(TraceMode::Turn),
            _ => None,
        }
    }

    /// Whether a root session on `platform` gets a trace per turn.
    pub(crate) fn per_turn(self, platform: Option<&str>) -> bool {
        match self {
            TraceMode::Session => false,
            TraceMode::Turn => true,
            TraceMode::Auto => !matches!(platform, None | Some("cli") | Some("cron") | Some("subagent")),
        }
    }
}

/// What the span builder may put on spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpanOptions {
    pub mode: TraceMode,
    /// Put `hermes.sender.id` (a personal id) on session spans.
    pub include_sender: bool,
    /// Also put the previous names of renamed attributes (`gen_ai/dup`).
    pub names: Names,
}

/// One session on the way from a span's session up to its root.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ancestor {
    pub session_id: String,
    pub platform: Option<String>,
    /// The turn of the *next* (parent) session that delegated this one.
    pub parent_turn_id: Option<String>,
}

/// A session and its ancestors: `[session, parent, grandparent, ..., root]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Ancestry(pub Vec<Ancestor>);

impl Ancestry {
    /// The trace id of session `i` of the chain's session span.
    fn session_trace(&self, i: usize, mode: TraceMode) -> [u8; 16] {
        let node = &self.0[i];
        if i + 1 < self.0.len() {
            match node.parent_turn_id.as_deref() {
                Some(turn) => self.turn_trace(i + 1, turn, mode),
                None => self.session_trace(i + 1, mode),
            }
        } else {
            trace_id(&["session", &node.session_id])
        }
    }

    /// The trace id of turn `turn_id` of session `i`.
    fn turn_trace(&self, i: usize, turn_id: &str, mode: TraceMode) -> [u8; 16] {
        let root = i + 1 == self.0.len();
        if root && mode.per_turn(self.0[i].platform.as_deref()) {
            trace_id(&["turn", turn_id])
        } else {
            self.session_trace(i, mode)
        }
    }

    /// The trace of the session's own span.
    pub fn trace_of_session(&self, mode: TraceMode) -> [u8; 16] {
        if self.0.is_empty() {
            return [0; 16];
        }
        self.session_trace(0, mode)
    }

    /// The trace of a turn of the session (and of the spans in it).
    pub fn trace_of_turn(&self, turn_id: &str, mode: TraceMode) -> [u8; 16] {
        if self.0.is_empty() {
            return [0; 16];
        }
        self.turn_trace(0, turn_id, mode)
    }

    /// Whether the session's turns root their own traces.
    pub(crate) fn turns_are_roots(&self, mode: TraceMode) -> bool {
        self.0.len() == 1 && mode.per_turn(self.0[0].platform.as_deref())
    }
}

/// Session span `n` of `run`. A session span is sent once and never
/// again: span 0, the root, covers the session from its start until it was
/// sent (finalized, the process exited, or the grace period passed with no
/// new turn); when the session goes on after that (a resumed session in a
/// new process, a turn after the grace period), continuation 1, 2, ...
/// covers the next stretch, as a child of the root span with a link to it,
/// and reports only what that stretch added.
pub fn session_span(run: &RunRow, n: i64, ancestry: &Ancestry, opts: SpanOptions) -> Span {
    let trace = ancestry.trace_of_session(opts.mode);
    let root = session_span_id(&run.session_id);
    let parent = if n > 0 {
        Some(root)
    } else {
        run.edge
            .as_ref()
            .map(|edge| match (&edge.delegate_tool_call_id, &edge.parent_turn_id) {
                (Some(tool), _) => tool_span_id(&edge.parent_session_id, tool),
                (None, Some(turn)) => turn_span_id(turn),
                (None, None) => session_span_id(&edge.parent_session_id),
            })
    };
    // What this span reports: the totals since the previous one was sent
    // (zero for the root span).
    let (base_input, base_output, base_cost) = if n > 0 && n == run.span_n {
        run.span_base
    } else {
        (0, 0, 0.0)
    };
    let mut a = Attrs::default();
    // The conversation: upstream has no operation for it (its turns are
    // the agent invocations); OpenInference's kind keeps trace UIs that
    // derive a kind (Phoenix) from showing it as unknown.
    a.str(attr::OPENINFERENCE_SPAN_KIND, value::OPENINFERENCE_KIND_CHAIN);
    a.str(attr::GEN_AI_CONVERSATION_ID, &run.session_id);
    a.opt_str(attr::GEN_AI_PROVIDER_NAME, run.provider.as_deref());
    a.opt_str(attr::GEN_AI_REQUEST_MODEL, run.model.as_deref());
    // The session's totals, under names of its own: the conventions'
    // gen_ai.usage.* belong to the spans of operations, and a consumer that
    // adds them up over a trace's spans (chat spans are the ones to add)
    // would count every token twice. `gen_ai/dup` keeps the old shape.
    let (input, output) = (session_input_tokens(run) - base_input, run.output_tokens - base_output);
    a.int(attr::HERMES_USAGE_TOTAL_INPUT_TOKENS, input);
    a.int(attr::HERMES_USAGE_TOTAL_OUTPUT_TOKENS, output);
    if opts.names == Names::Dup {
        a.int(attr::GEN_AI_USAGE_INPUT_TOKENS, input);
        a.int(attr::GEN_AI_USAGE_OUTPUT_TOKENS, output);
    }
    a.str(attr::HERMES_SESSION_ID, &run.session_id);
    a.int(attr::HERMES_SESSION_CONTINUATION, n.max(0));
    a.str(attr::HERMES_PLATFORM, run.platform.as_deref().unwrap_or("unknown"));
    a.str(attr::HERMES_SESSION_STATUS, &run.status);
    a.double(attr::HERMES_USAGE_TOTAL_COST_USD, run.cost_usd - base_cost);
    a.opt_str(attr::HERMES_CRON_JOB_ID, run.cron_job_id.as_deref());
    if opts.include_sender {
        a.opt_str(attr::HERMES_SENDER_ID, run.sender_id.as_deref());
    }
    a.opt_str(attr::HERMES_PROFILE, run.profile.as_deref());
    if let Some(edge) = &run.edge {
        a.str(attr::HERMES_SUBAGENT_ID, &run.session_id);
        a.opt_str(attr::HERMES_SUBAGENT_ROLE, edge.role.as_deref());
        a.opt_str(attr::HERMES_SUBAGENT_STATUS, edge.child_status.as_deref());
    }
    let abandoned = run.status == crate::rows::outcome::ABANDONED;
    if abandoned {
        a.str(attr::HERMES_SPAN_CLOSE_REASON, close_reason(run));
    }
    let error = run.status == crate::rows::outcome::ERROR;
    if error {
        a.str(
            attr::ERROR_TYPE,
            run.last_error_type.as_deref().unwrap_or(value::ERROR_TYPE_OTHER),
        );
    }
    let end = run.ended_at.unwrap_or(run.last_event_at);
    let start = if n > 0 {
        run.span_started_at.unwrap_or(end).min(end)
    } else {
        run.started_at
    };
    Span {
        trace_id: trace.to_vec(),
        span_id: session_part_span_id(&run.session_id, n).to_vec(),
        parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
        name: names::SESSION.to_string(),
        kind: span::SpanKind::Internal as i32,
        start_time_unix_nano: nanos(start),
        end_time_unix_nano: nanos(end.max(start)),
        attributes: a.0,
        links: if n > 0 {
            vec![span::Link {
                trace_id: trace.to_vec(),
                span_id: root.to_vec(),
                ..span::Link::default()
            }]
        } else {
            Vec::new()
        },
        // A budget stop is what a person looking at the trace must see
        // first: the session did not end healthy, whatever Hermes said.
        status: match &run.budget_stop {
            Some(text) => Some(error_status(&format!("{BUDGET_STOP_STATUS}: {text}"))),
            None => error.then(|| error_status(&run.status)),
        },
        events: run
            .budget_stop
            .as_ref()
            .map(|text| {
                let mut e = Attrs::default();
                e.str(
                    crate::semconv::metric::attr::HERMES_BUDGET_VERDICT,
                    crate::budget::verdict::BLOCKED,
                );
                e.str(attr::HERMES_BUDGET_MESSAGE, text);
                vec![span::Event {
                    time_unix_nano: nanos(end.max(start)),
                    name: crate::semconv::event::BUDGET_VERDICT.to_string(),
                    attributes: e.0,
                    dropped_attributes_count: 0,
                }]
            })
            .unwrap_or_default(),
        ..Span::default()
    }
}

/// How a session span's status begins when a budget stopped the session.
pub const BUDGET_STOP_STATUS: &str = "stopped by a hermes-meter budget";

/// Why a span of `run` that Hermes never closed was closed: the run's own
/// reason (`process_exit` when its process exited with it open), else the
/// idle timeout.
fn close_reason(run: &RunRow) -> &str {
    match run.close_reason.as_deref() {
        Some(value::CLOSE_REASON_PROCESS_EXIT) => value::CLOSE_REASON_PROCESS_EXIT,
        _ => value::CLOSE_REASON_IDLE_TIMEOUT,
    }
}

/// A run's input tokens in the conventions' sense (cache included).
pub fn session_input_tokens(run: &RunRow) -> i64 {
    run.input_tokens + run.cache_read_tokens + run.cache_write_tokens
}

/// The span of `turn` of `run`.
pub fn turn_span(turn: &TurnRow, run: &RunRow, ancestry: &Ancestry, opts: SpanOptions) -> Span {
    let trace = ancestry.trace_of_turn(&turn.turn_id, opts.mode);
    let session_span = session_part_span_id(&turn.session_id, turn.span_n);
    let root = ancestry.turns_are_roots(opts.mode);
    let outcome = turn.outcome.as_deref().unwrap_or(crate::rows::outcome::ABANDONED);
    let mut a = Attrs::default();
    // One run of the agent: upstream's agent invocation (which carries no
    // provider: the agent may call several).
    a.str(attr::GEN_AI_OPERATION_NAME, value::OPERATION_INVOKE_AGENT);
    a.str(attr::GEN_AI_AGENT_NAME, value::AGENT_NAME);
    a.str(attr::OPENINFERENCE_SPAN_KIND, value::OPENINFERENCE_KIND_AGENT);
    a.str(attr::HERMES_TURN_ID, &turn.turn_id);
    a.str(attr::HERMES_SESSION_ID, &turn.session_id);
    a.opt_str(attr::HERMES_TASK_ID, turn.task_id.as_deref());
    a.str(attr::GEN_AI_CONVERSATION_ID, &turn.session_id);
    a.str(attr::HERMES_PLATFORM, run.platform.as_deref().unwrap_or("unknown"));
    a.str(attr::HERMES_TURN_OUTCOME, outcome);
    if outcome == crate::rows::outcome::ABANDONED {
        a.str(attr::HERMES_SPAN_CLOSE_REASON, close_reason(run));
    }
    let error = outcome == crate::rows::outcome::ERROR;
    if error {
        a.str(
            attr::ERROR_TYPE,
            turn.last_error_type.as_deref().unwrap_or(value::ERROR_TYPE_OTHER),
        );
    }
    let end = turn.ended_at.unwrap_or(run.ended_at.unwrap_or(run.last_event_at));
    Span {
        trace_id: trace.to_vec(),
        span_id: turn_span_id(&turn.turn_id).to_vec(),
        parent_span_id: if root { Vec::new() } else { session_span.to_vec() },
        name: names::TURN.to_string(),
        kind: span::SpanKind::Internal as i32,
        start_time_unix_nano: nanos(turn.started_at),
        end_time_unix_nano: nanos(end.max(turn.started_at)),
        attributes: a.0,
        links: if root {
            vec![span::Link {
                trace_id: ancestry.trace_of_session(opts.mode).to_vec(),
                span_id: session_span.to_vec(),
                ..span::Link::default()
            }]
        } else {
            Vec::new()
        },
        status: error.then(|| error_status(outcome)),
        ..Span::default()
    }
}

/// The `chat {model}` span of one LLM API attempt: a success, a failure,
/// or (with no end) one a dead process left open.
pub fn attempt_span(at: &AttemptRow, run: &RunRow, ancestry: &Ancestry, opts: SpanOptions) -> Span {
    let (trace, parent) = placement(&at.session_id, at.turn_id.as_deref(), ancestry, opts);
    let model = at
        .model
        .as_deref()
        .or(at.response_model.as_deref())
        .or(run.model.as_deref())
        .unwrap_or("unknown");
    let mut a = Attrs::default();
    a.str(attr::GEN_AI_OPERATION_NAME, value::OPERATION_CHAT);
    a.opt_str(attr::HERMES_LLM_AUX_TASK, at.aux_task.as_deref());
    a.str(
        attr::GEN_AI_PROVIDER_NAME,
        at.provider
            .as_deref()
            .or(run.provider.as_deref())
            .unwrap_or(value::ERROR_TYPE_OTHER),
    );
    a.str(attr::GEN_AI_REQUEST_MODEL, model);
    a.str(attr::GEN_AI_CONVERSATION_ID, &at.session_id);
    a.str(attr::HERMES_SESSION_ID, &at.session_id);
    a.opt_str(attr::HERMES_TURN_ID, at.turn_id.as_deref());
    a.str(attr::HERMES_API_REQUEST_ID, &at.api_request_id);
    a.opt_str(attr::HERMES_PLATFORM, run.platform.as_deref());
    a.int(attr::HERMES_API_RETRY_COUNT, at.retry_count.unwrap_or(at.attempt));
    if let Some(max) = at.max_retries {
        a.int(attr::HERMES_API_MAX_RETRIES, max);
    }
    if let Some((host, port)) = at.base_url.as_deref().and_then(server_of) {
        a.str(attr::SERVER_ADDRESS, &host);
        a.int(attr::SERVER_PORT, port);
    }
    let mut status = None;
    match (&at.error, at.ended_at) {
        (Some(err), _) => {
            let error_type = err
                .error_type
                .as_deref()
                .or(err.reason.as_deref())
                .unwrap_or(value::ERROR_TYPE_OTHER);
            a.str(attr::ERROR_TYPE, error_type);
            if let Some(code) = err.status_code {
                a.int(attr::HTTP_RESPONSE_STATUS_CODE, code);
            }
            if let Some(retryable) = err.retryable {
                a.bool(attr::HERMES_API_RETRYABLE, retryable);
            }
            if let Some(reason) = err.reason.as_deref() {
                a.str(attr::HERMES_ERROR_REASON, reason_token(reason));
            }
            status = Some(error_status(error_type));
        }
        (None, Some(_)) => {
            a.opt_str(attr::GEN_AI_RESPONSE_MODEL, at.response_model.as_deref());
            if let Some(reason) = at.finish_reason.as_deref() {
                a.str_array(attr::GEN_AI_RESPONSE_FINISH_REASONS, &[reason]);
            }
            if let Some(ttft) = at.time_to_first_token() {
                a.double(attr::GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, ttft);
            }
            a.int(
                attr::GEN_AI_USAGE_INPUT_TOKENS,
                at.input_tokens + at.cache_read_tokens + at.cache_write_tokens,
            );
            a.int(attr::GEN_AI_USAGE_OUTPUT_TOKENS, at.output_tokens);
            a.int(attr::GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, at.cache_read_tokens);
            a.int(attr::GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS, at.cache_write_tokens);
            if opts.names.previous() {
                a.int(attr::GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, at.cache_write_tokens);
            }
            a.int(attr::GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, at.reasoning_tokens);
            let source = at.cost_source.as_deref().unwrap_or("unknown");
            if source != "unknown" {
                if let Some(cost) = at.cost_usd {
                    a.double(attr::HERMES_USAGE_COST_USD, cost);
                    a.double(attr::GEN_AI_USAGE_COST_AMOUNT, cost);
                    a.str(attr::GEN_AI_USAGE_COST_CURRENCY, "USD");
                    let received =
                        source == crate::pricing::PriceSource::Provider.as_str() || source == crate::pricing::UPSTREAM;
                    a.str(
                        attr::GEN_AI_USAGE_COST_SOURCE,
                        if received { "provider" } else { "local" },
                    );
                }
            }
            a.str(attr::HERMES_USAGE_COST_SOURCE, source);
            a.bool(attr::HERMES_USAGE_ESTIMATED, at.estimated);
        }
        (None, None) if run.budget_stop.is_some() => {
            // The call a budget stopped: answered by the stand-in, never
            // sent to the provider (the gate sends its span at once).
            a.str(attr::HERMES_SPAN_CLOSE_REASON, value::CLOSE_REASON_BUDGET_STOP);
            a.str(attr::ERROR_TYPE, value::CLOSE_REASON_BUDGET_STOP);
            status = Some(error_status(BUDGET_STOP_STATUS));
        }
        (None, None) => {
            a.str(attr::HERMES_SPAN_CLOSE_REASON, close_reason(run));
        }
    }
    let end = at.ended_at.unwrap_or(run.ended_at.unwrap_or(run.last_event_at));
    Span {
        trace_id: trace.to_vec(),
        span_id: attempt_span_id(&at.api_request_id, at.attempt).to_vec(),
        parent_span_id: parent.to_vec(),
        name: format!("{} {model}", names::CHAT_PREFIX),
        kind: span::SpanKind::Client as i32,
        start_time_unix_nano: nanos(at.started_at),
        end_time_unix_nano: nanos(end.max(at.started_at)),
        attributes: a.0,
        status,
        ..Span::default()
    }
}

/// How a tool call ended, as `hermes.tool.outcome`: see
/// [`crate::tool_outcome`], the one definition every surface shares.
pub fn tool_outcome(tool: &ToolRow) -> &'static str {
    crate::tool_outcome::ToolOutcome::of(tool.ended_at.is_some(), tool.status.as_deref(), tool.ok, tool.exit_code)
        .as_str()
}

/// The `execute_tool {tool}` span of a tool call (open calls end with their run).
pub fn tool_span(tool: &ToolRow, run: &RunRow, ancestry: &Ancestry, opts: SpanOptions) -> Span {
    let (trace, parent) = placement(&tool.session_id, tool.turn_id.as_deref(), ancestry, opts);
    let outcome = tool_outcome(tool);
    let mut a = Attrs::default();
    a.str(attr::GEN_AI_OPERATION_NAME, value::OPERATION_EXECUTE_TOOL);
    a.str(attr::GEN_AI_TOOL_NAME, &tool.tool_name);
    a.str(attr::GEN_AI_TOOL_CALL_ID, &tool.tool_call_id);
    a.str(attr::GEN_AI_TOOL_TYPE, value::TOOL_TYPE_FUNCTION);
    a.str(attr::GEN_AI_CONVERSATION_ID, &tool.session_id);
    a.str(attr::HERMES_SESSION_ID, &tool.session_id);
    a.opt_str(attr::HERMES_TURN_ID, tool.turn_id.as_deref());
    a.opt_str(attr::HERMES_API_REQUEST_ID, tool.api_request_id.as_deref());
    a.opt_str(attr::HERMES_PLATFORM, run.platform.as_deref());
    a.str(attr::HERMES_TOOL_OUTCOME, outcome);
    a.opt_str(attr::HERMES_TOOL_STATUS, tool.status.as_deref());
    if let Some(code) = tool.exit_code {
        a.int(attr::PROCESS_EXIT_CODE, code);
        if opts.names.previous() {
            a.int(attr::HERMES_TOOL_EXIT_CODE, code);
        }
    }
    if outcome == "blocked" {
        a.bool(attr::HERMES_TOOL_BLOCKED, true);
        // The same decision an approval span carries, with why.
        a.str(attr::HERMES_TOOL_DECISION, value::DECISION_DENY);
        a.str(attr::HERMES_TOOL_DECISION_REASON, value::DECISION_REASON_BUDGET);
    }
    if tool.ended_at.is_none() {
        a.str(attr::HERMES_SPAN_CLOSE_REASON, close_reason(run));
    }
    let mut status = None;
    if outcome != "ok" {
        let error_type = tool_error_type(tool, outcome);
        status = Some(error_status(&error_type));
        a.str(attr::ERROR_TYPE, &error_type);
    }
    let end = tool.ended_at.unwrap_or(run.ended_at.unwrap_or(run.last_event_at));
    Span {
        trace_id: trace.to_vec(),
        span_id: tool_span_id(&tool.session_id, &tool.tool_call_id).to_vec(),
        parent_span_id: parent.to_vec(),
        name: format!("{} {}", names::EXECUTE_TOOL_PREFIX, tool.tool_name),
        kind: span::SpanKind::Internal as i32,
        start_time_unix_nano: nanos(tool.started_at),
        end_time_unix_nano: nanos(end.max(tool.started_at)),
        attributes: a.0,
        status,
        ..Span::default()
    }
}

/// Adds captured content to a chat or tool span: `(attribute, JSON text)`
/// pairs as the store holds them (see [`crate::content`]), which exist only
/// when the user turned content capture on.
pub fn add_content(span: &mut Span, content: &[(String, String)]) {
    for (name, text) in content {
        span.attributes.push(KeyValue {
            key: name.clone(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(text.clone())),
            }),
            ..KeyValue::default()
        });
    }
}

/// The trace and parent of a span inside a turn (or, without a turn, right
/// under the session span).
fn placement(session_id: &str, turn_id: Option<&str>, ancestry: &Ancestry, opts: SpanOptions) -> ([u8; 16], [u8; 8]) {
    match turn_id {
        Some(turn) => (ancestry.trace_of_turn(turn, opts.mode), turn_span_id(turn)),
        None => (ancestry.trace_of_session(opts.mode), session_span_id(session_id)),
    }
}

/// `server.address` and `server.port` of a base URL
/// (`scheme://host[:port]/path`); the port defaults from the scheme.
pub(crate) fn server_of(base_url: &str) -> Option<(String, i64)> {
    let (scheme, rest) = base_url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit('@').next()?;
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => match scheme.to_ascii_lowercase().as_str() {
            "https" => 443,
            "http" => 80,
            _ => return None,
        },
    };
    Some((host.to_string(), port))
}

/// Hermes's error reason if it is a short snake_case token, else `_OTHER`.
/// `error.type` of a tool call that did not end `ok` (`outcome` from
/// [`tool_outcome`]): Hermes' error type, else the non-zero exit code (`"2"`), else the outcome.
pub(crate) fn tool_error_type(tool: &ToolRow, outcome: &str) -> String {
    match (tool.error_type.as_deref(), tool.exit_code) {
        (Some(t), _) => t.to_string(),
        // The process conventions: a non-zero exit code is the error type.
        (None, Some(code)) if code != 0 => code.to_string(),
        _ if outcome == "other" => value::ERROR_TYPE_OTHER.to_string(),
        _ => outcome.to_string(),
    }
}

/// `hermes.error.reason`: Hermes' short classification token, or `_OTHER`
/// for anything that is not one (never a message).
pub(crate) fn reason_token(reason: &str) -> &str {
    let ok = !reason.is_empty()
        && reason.len() <= 64
        && reason
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        reason
    } else {
        value::ERROR_TYPE_OTHER
    }
}

fn error_status(message: &str) -> Status {
    Status {
        message: message.to_string(),
        code: status::StatusCode::Error as i32,
    }
}

/// Unix seconds to nanoseconds.
pub fn nanos(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        (seconds * 1e9).round() as u64
    } else {
        0
    }
}

/// Lower-case hex of an id, as OTLP's JSON and the viewer show it.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Attribute list builder.
#[derive(Default)]
struct Attrs(Vec<KeyValue>);

impl Attrs {
    fn push(&mut self, key: &str, value: any_value::Value) {
        self.0.push(KeyValue {
            key: key.to_string(),
            value: Some(AnyValue { value: Some(value) }),
            ..KeyValue::default()
        });
    }
    fn str(&mut self, key: &str, v: &str) {
        self.push(key, any_value::Value::StringValue(v.to_string()));
    }
    fn opt_str(&mut self, key: &str, v: Option<&str>) {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            self.str(key, v);
        }
    }
    fn int(&mut self, key: &str, v: i64) {
        self.push(key, any_value::Value::IntValue(v));
    }
    fn double(&mut self, key: &str, v: f64) {
        self.push(key, any_value::Value::DoubleValue(v));
    }
    fn bool(&mut self, key: &str, v: bool) {
        self.push(key, any_value::Value::BoolValue(v));
    }
    fn str_array(&mut self, key: &str, v: &[&str]) {
        let values = v
            .iter()
            .map(|s| AnyValue {
                value: Some(any_value::Value::StringValue(s.to_string())),
            })
            .collect();
        self.push(key, any_value::Value::ArrayValue(ArrayValue { values }));
    }
}

#[cfg(test)]
mod tests;
