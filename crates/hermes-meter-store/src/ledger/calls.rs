//! Applying the events that record calls: an LLM call, a failed attempt,
//! a tool's result, a subagent's start and stop (their rows, and what they
//! add to their run).

use rusqlite::{params, OptionalExtension, Transaction};

use super::super::budget::RecordedCall;
use super::super::log_outbox::{self, LogAttrs, LogPlace, NewLog, Severity};
use super::super::outbox::{self, SpanKind};
use super::super::row_counts::{Counted, RowCounts};
use super::super::run_memo::RunMemo;
use super::{link_child, touch_run, SUBAGENT_TOOL_NAME};
use crate::error::Result;
use hermes_meter_model::hook::{
    ApiRequestError, PostApiRequest, PostToolCall, SubagentStart, SubagentStop, Usage, UsageConfirmed,
};
use hermes_meter_model::rows::outcome::{ERROR, INTERRUPTED, OK, RUNNING};

/// Records a successful LLM call; returns it when it is new. A call the
/// budget middleware stopped (its stand-in response names
/// [`hermes_meter_model::budget::BLOCKED_MODEL`]) reached no provider: it is no LLM call.
pub(super) fn apply_llm_call<'e>(
    tx: &Transaction<'_>,
    runs: &mut RunMemo,
    counts: &mut RowCounts,
    prices: &hermes_meter_model::pricing::PriceTable,
    e: &'e PostApiRequest,
    at: f64,
) -> Result<Option<RecordedCall<'e>>> {
    let a = &e.api;
    // An auxiliary call (a title, compression) says nothing of the
    // session's model: it runs on the auxiliary model, under the id the
    // provider returned on Hermes 0.19.
    let main = e.aux_task.is_none();
    touch_run(
        tx,
        runs,
        counts,
        &a.session_id,
        at,
        a.platform.as_deref(),
        a.model.as_deref().filter(|_| main),
        a.provider.as_deref().filter(|_| main),
        a.base_url.as_deref().filter(|_| main),
    )?;
    if e.response_model.as_deref() == Some(hermes_meter_model::budget::BLOCKED_MODEL) {
        return Ok(None);
    }
    type RequestRow = (Option<i64>, f64, i64, Option<i64>, Option<String>);
    let request_row: Option<RequestRow> = tx
        .prepare_cached(
            "SELECT approx_input_tokens, attempt_started_at, attempts, closed_attempt, routed_model
               FROM api_requests WHERE api_request_id = ?1",
        )?
        .query_row(params![a.api_request_id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .optional()?;
    let routed = request_row.as_ref().and_then(|r| r.4.clone());
    let request = request_row.map(|r| (r.0, r.1, r.2, r.3));
    let (usage, estimated) = match e.usage {
        Some(u) => (u, false),
        None => {
            // No usage from the provider: estimate from what pre_api_request
            // counted, and ~4 characters per output token.
            let input = request.and_then(|r| r.0).unwrap_or(0);
            let output = (e.assistant_content_chars.unwrap_or(0) + 3) / 4;
            let usage = Usage {
                input_tokens: input,
                output_tokens: output,
                ..Usage::default()
            };
            (usage, true)
        }
    };
    // A call a middleware routed elsewhere (a budget downgrade) is priced
    // as the model it was sent to.
    let model = routed
        .as_deref()
        .or(a.model.as_deref())
        .or(e.response_model.as_deref())
        .unwrap_or("");
    let bill = prices.bill(model, a.provider.as_deref(), &usage, at);
    let cost = bill.cost;
    let ended_at = e.ended_at.unwrap_or(at);
    // The successful attempt began at the latest pre_api_request; without
    // one, at the call's own start.
    let started_at = request
        .map(|r| r.1)
        .or(a.started_at)
        .unwrap_or(ended_at - e.api_duration.unwrap_or(0.0))
        .min(ended_at);
    let attempts = request.map(|r| r.2).unwrap_or(1).max(1);
    let inserted = tx
        .prepare_cached(
            "INSERT INTO llm_calls (api_request_id, session_id, turn_id, task_id, model, response_model, provider, base_url,
                api_mode, started_at, ended_at, latency_s, attempts, finish_reason, input_tokens, output_tokens,
                cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, cost_source, estimated, aux_task, estimate_usd,
                first_token_at, routed_model)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23,
                ?24, ?25, ?26)
             ON CONFLICT (api_request_id) DO NOTHING",
        )?
        .execute(params![
            a.api_request_id,
            a.session_id,
            a.turn_id,
            a.task_id,
            a.model,
            e.response_model,
            a.provider,
            a.base_url,
            a.api_mode,
            started_at,
            ended_at,
            e.api_duration,
            attempts,
            e.finish_reason,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.reasoning_tokens,
            cost.usd,
            cost.source.as_str(),
            estimated,
            e.aux_task,
            bill.estimate.usd,
            e.first_token_at(),
            routed
        ])?;
    counts.inserted(Counted::LlmCalls, inserted);
    if inserted == 1 {
        // An attempt hermes-meter closed itself already went out as a span.
        if request.and_then(|r| r.3) != Some(attempts - 1) {
            outbox::enqueue(tx, SpanKind::LlmCall, &a.session_id, &a.api_request_id, -1, at, false)?;
        }
        let unpriced = cost.source == hermes_meter_model::pricing::PriceSource::Unknown;
        tx.prepare_cached(
            "UPDATE runs SET llm_calls = llm_calls + 1, input_tokens = input_tokens + ?2, output_tokens = output_tokens + ?3,
                cache_read_tokens = cache_read_tokens + ?4, cache_write_tokens = cache_write_tokens + ?5,
                reasoning_tokens = reasoning_tokens + ?6, cost_usd = cost_usd + ?7,
                estimated_llm_calls = estimated_llm_calls + ?8, unpriced_llm_calls = unpriced_llm_calls + ?9
             WHERE session_id = ?1",
        )?
        .execute(params![
            a.session_id,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.reasoning_tokens,
            cost.usd,
            estimated as i64,
            unpriced as i64
        ])?;
        // A held call's usage is kept out of budgets like its cost, until
        // the user confirms it.
        let (input_tokens, output_tokens) = match cost.source {
            hermes_meter_model::pricing::PriceSource::Held => (0, 0),
            _ => budget_tokens(&usage),
        };
        let model = match routed {
            Some(r) => std::borrow::Cow::Owned(r),
            None => std::borrow::Cow::Borrowed(a.model.as_deref().or(e.response_model.as_deref()).unwrap_or("")),
        };
        return Ok(Some(RecordedCall {
            model,
            cost_usd: cost.usd,
            source: cost.source,
            estimated,
            ended_at,
            input_tokens,
            output_tokens,
        }));
    }
    Ok(None)
}

pub(super) fn apply_api_error(
    tx: &Transaction<'_>,
    runs: &mut RunMemo,
    counts: &mut RowCounts,
    e: &ApiRequestError,
    at: f64,
) -> Result<()> {
    let a = &e.api;
    touch_run(
        tx,
        runs,
        counts,
        &a.session_id,
        at,
        a.platform.as_deref(),
        a.model.as_deref(),
        a.provider.as_deref(),
        a.base_url.as_deref(),
    )?;
    let (attempt_started, closed_attempt): (Option<f64>, Option<i64>) = tx
        .prepare_cached("SELECT attempt_started_at, closed_attempt FROM api_requests WHERE api_request_id = ?1")?
        .query_row(params![a.api_request_id], |r| Ok((Some(r.get(0)?), r.get(1)?)))
        .optional()?
        .unwrap_or((None, None));
    let ended_at = e.ended_at.unwrap_or(at);
    let started_at = attempt_started.or(a.started_at).unwrap_or(ended_at).min(ended_at);
    // The attempt's place among its request's attempts: Hermes 0.22's
    // recovery cycles fire retry_count 0, 1, 2 again for the same request,
    // each an attempt of its own (schema version 2).
    let attempt: Option<i64> = tx
        .prepare_cached(
            "INSERT INTO llm_call_errors (api_request_id, session_id, turn_id, attempt, retry_count, max_retries,
                status_code, retryable, reason, error_type, error_message, model, provider, base_url, started_at,
                ended_at)
             VALUES (?1, ?2, ?3, (SELECT COUNT(*) FROM llm_call_errors WHERE api_request_id = ?1), ?4, ?5, ?6,
                     ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
             ON CONFLICT DO NOTHING RETURNING attempt",
        )?
        .query_row(
            params![
                a.api_request_id,
                a.session_id,
                a.turn_id,
                e.retry_count,
                e.max_retries,
                e.status_code,
                e.retryable,
                e.reason,
                e.error_type,
                e.error_message,
                a.model,
                a.provider,
                a.base_url,
                started_at,
                ended_at
            ],
            |r| r.get(0),
        )
        .optional()?;
    counts.inserted(Counted::LlmCallErrors, usize::from(attempt.is_some()));
    if let Some(attempt) = attempt {
        // The last attempt of a request failing (not retryable, or out of
        // retries) fails the turn; a later success or on_session_end overrides.
        let last_attempt = e.retryable == Some(false) || e.max_retries.is_some_and(|max| e.retry_count + 1 >= max);
        tx.prepare_cached(
            "UPDATE runs SET api_errors = api_errors + 1,
                status = CASE WHEN ?2 THEN ?3 ELSE status END,
                ended_at = CASE WHEN ?2 THEN ?4 ELSE ended_at END
             WHERE session_id = ?1",
        )?
        .execute(params![a.session_id, last_attempt, ERROR, ended_at])?;
        // An attempt hermes-meter closed itself already went out as a span.
        if closed_attempt != Some(attempt) {
            outbox::enqueue(
                tx,
                SpanKind::LlmError,
                &a.session_id,
                &a.api_request_id,
                attempt,
                at,
                false,
            )?;
        }
        if last_attempt {
            outbox::enqueue_run(tx, &a.session_id, at, false)?;
        }
        log_api_error(tx, e, attempt, ended_at, last_attempt)?;
    }
    Ok(())
}

/// The log record of a failed attempt, in its attempt span: an error when
/// it was the request's last, a warning when Hermes retries it.
fn log_api_error(tx: &Transaction<'_>, e: &ApiRequestError, attempt: i64, at: f64, last_attempt: bool) -> Result<()> {
    use hermes_meter_model::semconv::attr;
    let a = &e.api;
    let body = match (&e.error_message, e.status_code) {
        (Some(m), _) => m.clone(),
        (None, Some(code)) => format!("LLM API call failed with HTTP {code}"),
        (None, None) => "LLM API call failed".to_string(),
    };
    let attrs = LogAttrs::default()
        .str(attr::ERROR_TYPE, e.error_type.as_deref())
        .int(attr::HTTP_RESPONSE_STATUS_CODE, e.status_code)
        .int(attr::HERMES_API_RETRY_COUNT, Some(e.retry_count))
        .bool(attr::HERMES_API_RETRYABLE, e.retryable)
        .str(attr::HERMES_ERROR_REASON, e.reason.as_deref())
        .str(attr::GEN_AI_REQUEST_MODEL, a.model.as_deref())
        .str(attr::GEN_AI_PROVIDER_NAME, a.provider.as_deref())
        .str(attr::HERMES_SESSION_ID, Some(&a.session_id));
    log_outbox::append(
        tx,
        &NewLog {
            at,
            event: hermes_meter_model::semconv::event::API_ERROR,
            severity: if last_attempt { Severity::Error } else { Severity::Warn },
            place: LogPlace {
                session_id: Some(&a.session_id),
                turn_id: a.turn_id.as_deref(),
                span_id: Some(hermes_meter_model::span::attempt_span_id(&a.api_request_id, attempt)),
            },
            body: &body,
            attrs,
            content_key: None,
        },
    )
}

pub(super) fn apply_tool_result(
    tx: &Transaction<'_>,
    runs: &mut RunMemo,
    counts: &mut RowCounts,
    e: &PostToolCall,
    at: f64,
) -> Result<()> {
    let t = &e.tool;
    touch_run(tx, runs, counts, &t.session_id, at, None, None, None, None)?;
    let ok = e.ok();
    let latency = e.duration_ms.map(|ms| ms as f64 / 1000.0);
    let started_at = at - latency.unwrap_or(0.0);
    // Only the first result of a tool call counts (a repeated post is a
    // no-op). An insert, else the update of a call pre_tool_call opened:
    // two statements rather than one upsert, so what was inserted is known
    // (`store_counts`).
    let inserted = tx
        .prepare_cached(
            "INSERT INTO tool_calls (session_id, tool_call_id, tool_name, turn_id, task_id, api_request_id, started_at,
                ended_at, latency_s, ok, status, error_type, exit_code)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
             ON CONFLICT (session_id, tool_call_id) DO NOTHING",
        )?
        .execute(params![
            t.session_id,
            t.tool_call_id,
            t.tool_name,
            t.turn_id,
            t.task_id,
            t.api_request_id,
            started_at,
            at,
            latency,
            ok,
            e.status,
            e.error_type,
            e.outcome.exit_code
        ])?;
    counts.inserted(Counted::ToolCalls, inserted);
    let completed = if inserted == 1 {
        1
    } else {
        tx.prepare_cached(
            "UPDATE tool_calls SET ended_at = ?3, latency_s = ?4, ok = ?5, status = ?6, error_type = ?7, exit_code = ?8
              WHERE session_id = ?1 AND tool_call_id = ?2 AND ended_at IS NULL",
        )?
        .execute(params![
            t.session_id,
            t.tool_call_id,
            at,
            latency,
            ok,
            e.status,
            e.error_type,
            e.outcome.exit_code
        ])?
    };
    if completed == 1 {
        outbox::enqueue(tx, SpanKind::Tool, &t.session_id, &t.tool_call_id, -1, at, false)?;
        // Failed as every surface counts it (hermes_meter_model::tool_outcome): a
        // non-zero exit Hermes reported as ok is one.
        let failed =
            hermes_meter_model::tool_outcome::ToolOutcome::of(true, e.status.as_deref(), Some(ok), e.outcome.exit_code)
                .is_failure();
        tx.prepare_cached(
            "UPDATE runs SET tool_calls = tool_calls + 1, tool_failures = tool_failures + ?2 WHERE session_id = ?1",
        )?
        .execute(params![t.session_id, failed as i64])?;
    }
    Ok(())
}

pub(super) fn apply_subagent_start(
    tx: &Transaction<'_>,
    runs: &mut RunMemo,
    counts: &mut RowCounts,
    e: &SubagentStart,
    at: f64,
) -> Result<()> {
    touch_run(tx, runs, counts, &e.parent_session_id, at, None, None, None, None)?;
    // An insert, else the earlier start kept: two statements rather than
    // one upsert, so what was inserted is known (`store_counts`).
    let inserted = tx
        .prepare_cached(
            "INSERT INTO subagent_edges (child_session_id, parent_session_id, parent_turn_id, parent_subagent_id,
                child_subagent_id, role, goal, started_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (child_session_id) DO NOTHING",
        )?
        .execute(params![
            e.child_session_id,
            e.parent_session_id,
            e.parent_turn_id,
            e.parent_subagent_id,
            e.child_subagent_id,
            e.child_role,
            e.child_goal,
            at
        ])?;
    counts.inserted(Counted::SubagentEdges, inserted);
    if inserted == 0 {
        tx.prepare_cached("UPDATE subagent_edges SET started_at = MIN(started_at, ?2) WHERE child_session_id = ?1")?
            .execute(params![e.child_session_id, at])?;
    }
    // The child run exists from here, whichever of its events comes next.
    insert_child_run(tx, counts, &e.child_session_id, at)?;
    link_child(tx, &e.child_session_id, &e.parent_session_id)
}

pub(super) fn apply_subagent_stop(
    tx: &Transaction<'_>,
    runs: &mut RunMemo,
    counts: &mut RowCounts,
    e: &SubagentStop,
    at: f64,
) -> Result<()> {
    touch_run(tx, runs, counts, &e.parent_session_id, at, None, None, None, None)?;
    let edge_started: Option<f64> = tx
        .prepare_cached("SELECT started_at FROM subagent_edges WHERE child_session_id = ?1")?
        .query_row(params![e.child_session_id], |r| r.get(0))
        .optional()?;
    let duration = e.duration_ms.map(|ms| ms as f64 / 1000.0);
    let started_at = edge_started.unwrap_or(at - duration.unwrap_or(0.0));
    tx.prepare_cached(
        "INSERT INTO subagent_edges (child_session_id, parent_session_id, parent_turn_id, role, started_at,
            stopped_at, child_status, duration_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (child_session_id) DO UPDATE SET stopped_at = excluded.stopped_at,
            child_status = excluded.child_status, duration_ms = excluded.duration_ms",
    )?
    .execute(params![
        e.child_session_id,
        e.parent_session_id,
        e.parent_turn_id,
        e.child_role,
        started_at,
        at,
        e.child_status,
        e.duration_ms
    ])?;
    // No edge was read above: the upsert inserted it.
    counts.inserted(Counted::SubagentEdges, edge_started.is_none() as usize);
    if edge_started.is_none() {
        insert_child_run(tx, counts, &e.child_session_id, started_at)?;
        link_child(tx, &e.child_session_id, &e.parent_session_id)?;
    }
    let ok = matches!(
        e.child_status.as_deref(),
        Some("completed") | Some("ok") | Some("success")
    );
    let child_outcome = match e.child_status.as_deref() {
        _ if ok => OK,
        Some("interrupted") | Some("cancelled") => INTERRUPTED,
        _ => ERROR,
    };
    // A child that never reported its own end ends with the delegation.
    tx.prepare_cached(
        "UPDATE runs SET status = ?2, ended_at = COALESCE(ended_at, ?3) WHERE session_id = ?1 AND status = ?4",
    )?
    .execute(params![e.child_session_id, child_outcome, at, RUNNING])?;
    outbox::enqueue_run(tx, &e.child_session_id, at, true)?;
    let tool_call_id = format!("subagent:{}", e.child_session_id);
    let inserted = tx
        .prepare_cached(
            "INSERT INTO tool_calls (session_id, tool_call_id, tool_name, turn_id, started_at, ended_at, latency_s,
                ok, status, proxy)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 1) ON CONFLICT (session_id, tool_call_id) DO NOTHING",
        )?
        .execute(params![
            e.parent_session_id,
            tool_call_id,
            SUBAGENT_TOOL_NAME,
            e.parent_turn_id,
            started_at,
            at,
            duration.unwrap_or(at - started_at),
            ok,
            e.child_status
        ])?;
    // The proxy row is no call Hermes made (the parent's delegate_task call
    // is counted when it returns): run totals leave it out, as the report,
    // metrics and spans do, but it is a row of the table.
    // The child's own outcome is its run's status.
    counts.inserted(Counted::ToolCalls, inserted);
    Ok(())
}

/// Inserts a subagent's run started at `at` unless it exists.
fn insert_child_run(tx: &Transaction<'_>, counts: &mut RowCounts, child_session_id: &str, at: f64) -> Result<()> {
    let inserted = tx
        .prepare_cached(
            "INSERT INTO runs (session_id, platform, root_session_id, started_at, last_event_at)
             VALUES (?1, 'subagent', ?1, ?2, ?2) ON CONFLICT (session_id) DO NOTHING",
        )?
        .execute(params![child_session_id, at])?;
    counts.inserted(Counted::Runs, inserted);
    Ok(())
}

/// Bills a held call the user confirmed: its recorded usage at the price
/// table's cost, added to its run, its spend buckets and periods, and the
/// cost metric. Returns the cost billed, or `None` when the call is not
/// held (never recorded, or confirmed already).
pub(super) fn apply_usage_confirmed(
    tx: &Transaction<'_>,
    prices: &hermes_meter_model::pricing::PriceTable,
    e: &UsageConfirmed,
    rollup: &mut super::super::budget::SpendRollup,
) -> Result<Option<f64>> {
    let row = tx
        .prepare_cached(
            "SELECT COALESCE(routed_model, model, response_model, ''), provider, ended_at, estimated, input_tokens, output_tokens,
                    cache_read_tokens, cache_write_tokens, reasoning_tokens
               FROM llm_calls WHERE api_request_id = ?1 AND session_id = ?2 AND cost_source = ?3",
        )?
        .query_row(params![e.api_request_id, e.session_id, hermes_meter_model::pricing::HELD], |r| {
            let usage = Usage {
                input_tokens: r.get(4)?,
                output_tokens: r.get(5)?,
                cache_read_tokens: r.get(6)?,
                cache_write_tokens: r.get(7)?,
                reasoning_tokens: r.get(8)?,
                ..Usage::default()
            };
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, Option<String>>(1)?,
                r.get::<_, f64>(2)?,
                r.get::<_, bool>(3)?,
                usage,
            ))
        })
        .optional()?;
    let Some((model, provider, ended_at, estimated, usage)) = row else {
        return Ok(None);
    };
    let cost = prices.cost(&model, provider.as_deref(), &usage, ended_at);
    tx.prepare_cached(
        "UPDATE llm_calls SET cost_usd = ?2, cost_source = ?3, estimate_usd = ?2 WHERE api_request_id = ?1",
    )?
    .execute(params![e.api_request_id, cost.usd, cost.source.as_str()])?;
    let unpriced = cost.source == hermes_meter_model::pricing::PriceSource::Unknown;
    tx.prepare_cached(
        "UPDATE runs SET cost_usd = cost_usd + ?2, unpriced_llm_calls = unpriced_llm_calls + ?3 WHERE session_id = ?1",
    )?
    .execute(params![e.session_id, cost.usd, unpriced as i64])?;
    // A call whose metric row is still in the log is counted at its
    // confirmed cost when that row is folded; one folded already at no
    // cost gets a row that adds the cost alone.
    let folded = tx
        .prepare_cached("SELECT NOT EXISTS (SELECT 1 FROM metric_log WHERE kind = 1 AND key = ?1)")?
        .query_row(params![e.api_request_id], |r| r.get::<_, bool>(0))?;
    if folded {
        tx.prepare_cached("INSERT INTO metric_log (kind, session_id, key) VALUES (6, ?1, ?2)")?
            .execute(params![e.session_id, e.api_request_id])?;
    }
    let (input_tokens, output_tokens) = budget_tokens(&usage);
    let call = RecordedCall {
        model: model.as_str().into(),
        cost_usd: cost.usd,
        source: cost.source,
        estimated,
        ended_at,
        input_tokens,
        output_tokens,
    };
    super::super::budget::on_usage_confirmed(tx, &e.session_id, &call, rollup)?;
    Ok(Some(cost.usd))
}

/// A call's tokens as budgets count them: input with cache reads and
/// writes, and output (reasoning is part of it).
fn budget_tokens(u: &Usage) -> (i64, i64) {
    (
        u.input_tokens.max(0) + u.cache_read_tokens.max(0) + u.cache_write_tokens.max(0),
        u.output_tokens.max(0),
    )
}
