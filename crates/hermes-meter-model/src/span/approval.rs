//! The span of one approval Hermes asked of a person: the command, the
//! decision, who made it and how long it waited, in its turn's trace.

use super::*;

/// The `hermes.approval` span of a tool call's wait for approval: under
/// the tool call's span when Hermes named it, else under the turn. The
/// decision is `hermes.tool.decision` (`approve`, `deny`, `timeout`), the
/// same attribute a tool call blocked by a budget carries; Hermes's own
/// answer is `hermes.approval.choice`. One left open by its process (no
/// answer came) is closed with `hermes.span.close_reason`.
pub fn approval_span(ap: &ApprovalRow, run: &RunRow, ancestry: &Ancestry, opts: SpanOptions) -> Span {
    let (trace, turn_parent) = placement(&ap.session_id, ap.turn_id.as_deref(), ancestry, opts);
    let parent = match &ap.tool_call_id {
        Some(tool) => tool_span_id(&ap.session_id, tool),
        None => turn_parent,
    };
    let mut a = Attrs::default();
    a.str(attr::OPENINFERENCE_SPAN_KIND, value::OPENINFERENCE_KIND_GUARDRAIL);
    a.str(attr::HERMES_SESSION_ID, &ap.session_id);
    a.str(attr::GEN_AI_CONVERSATION_ID, &ap.session_id);
    a.opt_str(attr::HERMES_TURN_ID, ap.turn_id.as_deref());
    a.opt_str(attr::GEN_AI_TOOL_CALL_ID, ap.tool_call_id.as_deref());
    a.opt_str(attr::HERMES_APPROVAL_SURFACE, ap.surface.as_deref());
    a.opt_str(attr::HERMES_APPROVAL_CHOICE, ap.choice.as_deref());
    a.opt_str(attr::HERMES_APPROVAL_DECIDED_BY, ap.decided_by.as_deref());
    let decision = crate::hook::Approval {
        choice: ap.choice.clone(),
        ..Default::default()
    }
    .decision();
    match decision {
        Some(d) => {
            a.str(attr::HERMES_TOOL_DECISION, d);
            let reason = if ap.decided_by.is_some() {
                value::DECISION_REASON_AUX_LLM
            } else if d == "timeout" {
                value::DECISION_REASON_TIMEOUT
            } else {
                value::DECISION_REASON_USER
            };
            a.str(attr::HERMES_TOOL_DECISION_REASON, reason);
        }
        None => a.str(attr::HERMES_SPAN_CLOSE_REASON, close_reason(run)),
    }
    let end = ap.ended_at.unwrap_or(run.ended_at.unwrap_or(run.last_event_at));
    Span {
        trace_id: trace.to_vec(),
        span_id: approval_span_id(&ap.session_id, &ap.key).to_vec(),
        parent_span_id: parent.to_vec(),
        name: names::APPROVAL.to_string(),
        kind: span::SpanKind::Internal as i32,
        start_time_unix_nano: nanos(ap.started_at),
        end_time_unix_nano: nanos(end.max(ap.started_at)),
        attributes: a.0,
        ..Span::default()
    }
}
