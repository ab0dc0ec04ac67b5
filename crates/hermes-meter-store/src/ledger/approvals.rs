//! Hermes's approvals in the ledger: a decision asked of a person (its
//! command, who decided, how long it waited) and its log record.

use super::*;

/// Records an approval's start or its decision. The session is the turn's
/// when the turn is known (the decoder could only guess it from the turn
/// id). A decision finishes the span, enqueued for export.
pub(super) fn apply_approval(
    tx: &Transaction<'_>,
    a: &hermes_meter_model::hook::Approval,
    at: f64,
    decided: bool,
) -> Result<()> {
    let session: String = tx
        .prepare_cached("SELECT session_id FROM turns WHERE turn_id = ?1")?
        .query_row(params![a.turn_id], |r| r.get(0))
        .optional()?
        .unwrap_or_else(|| a.session_id.clone());
    let key = a.key();
    tx.prepare_cached(
        "INSERT INTO approvals (session_id, key, turn_id, tool_call_id, surface, pattern_key, started_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (session_id, key) DO NOTHING",
    )?
    .execute(params![
        session,
        key,
        a.turn_id,
        a.tool_call_id,
        a.surface,
        a.pattern_key,
        at
    ])?;
    if decided && a.decision().is_none() {
        // No decision yet (`notify_failed`): noted, the span left open for
        // the answer that may follow.
        tx.prepare_cached(
            "UPDATE approvals SET choice = ?3, decided_by = ?4 WHERE session_id = ?1 AND key = ?2 AND ended_at IS NULL",
        )?
        .execute(params![session, key, a.choice, a.decided_by])?;
    } else if decided {
        // The first decision ends the approval; it goes out once.
        let ended = tx
            .prepare_cached(
                "UPDATE approvals SET ended_at = ?3, choice = ?4, decided_by = ?5
                 WHERE session_id = ?1 AND key = ?2 AND ended_at IS NULL",
            )?
            .execute(params![session, key, at, a.choice, a.decided_by])?;
        if ended == 1 {
            outbox::enqueue(tx, SpanKind::Approval, &session, key, -1, at, false)?;
            log_approval(tx, a, &session, at)?;
        }
    }
    Ok(())
}

/// The log record of an approval's decision, in its approval span: a
/// warning when the command was denied or the wait timed out.
fn log_approval(tx: &Transaction<'_>, a: &hermes_meter_model::hook::Approval, session: &str, at: f64) -> Result<()> {
    use hermes_meter_model::semconv::attr;
    let choice = a.choice.as_deref().unwrap_or("unknown");
    let refused = matches!(choice, "deny" | "timeout" | "smart_deny");
    let what = a.pattern_key.as_deref().unwrap_or("a command");
    let by = a.decided_by.as_deref().map(|b| format!(" by {b}")).unwrap_or_default();
    let body = format!("Approval of {what}: {choice}{by}");
    let attrs = LogAttrs::default()
        .str(attr::HERMES_APPROVAL_CHOICE, Some(choice))
        .str(attr::HERMES_APPROVAL_DECIDED_BY, a.decided_by.as_deref())
        .str(attr::HERMES_APPROVAL_SURFACE, a.surface.as_deref())
        .str(attr::HERMES_APPROVAL_PATTERN, a.pattern_key.as_deref())
        .str(attr::GEN_AI_TOOL_CALL_ID, a.tool_call_id.as_deref())
        .str(attr::HERMES_SESSION_ID, Some(session));
    crate::log_outbox::append(
        tx,
        &NewLog {
            at,
            event: hermes_meter_model::semconv::event::APPROVAL,
            severity: if refused { Severity::Warn } else { Severity::Info },
            place: LogPlace {
                session_id: Some(session),
                turn_id: a.turn_id.as_deref(),
                span_id: Some(hermes_meter_model::span::approval_span_id(session, a.key())),
            },
            body: &body,
            attrs,
            content_key: None,
        },
    )
}
