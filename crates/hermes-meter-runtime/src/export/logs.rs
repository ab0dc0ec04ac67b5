//! The log exporter: reads the log outbox, sends OTLP log records, deletes
//! what the collector accepted.
//!
//! Owns: turning log outbox rows into OTLP `LogRecord`s (event name,
//! severity, body, attributes, and the trace context of the span each
//! happened in) and the log export step. Must not touch: what is recorded
//! (the store's transactions append the rows), the journal, Python.
//!
//! Like spans, records leave the store only once the collector accepted
//! them, under a lease of their own (`logs`) so that processes sharing a
//! store never send a record twice in normal operation, with their own
//! backoff: a collector may take traces and refuse logs (Jaeger takes no
//! logs), and then `status` says so while spans go on. A record sent again
//! after a crash carries the same `log.record.uid`. A batch goes in
//! requests under a byte limit, as spans do (`split.rs`): a record too
//! large alone is counted rejected, and each request's rows leave the
//! outbox once it is accepted.
//!
//! The trace context is worked out when the record is sent, as for spans:
//! a subagent's record lands in its parent's trace, a gateway turn's in
//! that turn's trace.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;

use prost::Message as _;

use super::pacing::{block_on_until, Lease, Pacing};
use super::split;
use super::transport::{Accepted, SendError, Transport};
use super::{
    failure_text, resource_of, retry, scrub_error, Refusal, SendRuntime, Sessions, Signal, SizeLimit, CAP_STEP,
};
use crate::config::export::ExportConfig;
use hermes_meter_model::span::{self, TraceMode};
use hermes_meter_store::error::Result;
use hermes_meter_store::unix_now;
use hermes_meter_store::{ContentKind, LogRow, Outbox, Reader, DEFAULT_LOG_OUTBOX_MAX_ROWS, LOG_LEASE};

/// The attribute every record carries: an id a backend can drop a
/// re-sent record by (OTel's `log.record.uid`).
pub(crate) const LOG_RECORD_UID: &str = "log.record.uid";

/// What one log step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogStep {
    /// This process holds the log lease.
    pub leased: bool,
    /// Records the collector accepted.
    pub exported: usize,
    /// A full batch was read: more may be ready.
    pub more: bool,
    /// The send failed; retry no earlier than this.
    pub backing_off: Option<Duration>,
    /// The last failure, if this step failed.
    pub error: Option<String>,
}

/// The log export of a store without the store (the driver hands its one
/// connection to each call).
#[derive(Debug)]
pub(crate) struct LogExport {
    config: ExportConfig,
    runtime: SendRuntime,
    transport: Option<Transport>,
    lease: Lease,
    pacing: Pacing,
    resource: Resource,
    mode: TraceMode,
    /// The byte limit requests are kept under, as learned.
    size: SizeLimit,
}

impl LogExport {
    /// Builds the transport of the logs signal (`OTEL_EXPORTER_OTLP_LOGS_*`
    /// before the generic variables); nothing is sent yet.
    pub(crate) fn new(config: ExportConfig, runtime: SendRuntime) -> Result<Self> {
        let transport = super::transport_if_enabled(&config, &runtime)?;
        Ok(LogExport {
            lease: Lease::new(LOG_LEASE, config.lease_seconds.value),
            pacing: Pacing::new("LogExport.Failed"),
            resource: resource_of(&config),
            mode: config.trace_mode.value,
            size: SizeLimit::new(Signal::Logs, config.max_request_bytes.value),
            config,
            runtime,
            transport,
        })
    }

    /// One step: take or renew the lease, apply the cap, send one batch.
    pub(crate) fn run_once(&mut self, store: &mut Outbox) -> Result<LogStep> {
        self.step(store, None)
    }

    /// Sends batches until none is left or `deadline` passes (a stopping
    /// process's last chance; what is left waits in the store).
    pub(crate) fn flush(&mut self, store: &mut Outbox, deadline: Instant) -> Result<LogStep> {
        let mut total = LogStep::default();
        while self.pacing.wait_to_send_by(deadline) {
            let step = self.step(store, Some(deadline))?;
            total.leased = step.leased;
            total.exported += step.exported;
            total.error = step.error.clone().or(total.error);
            total.backing_off = step.backing_off;
            if !step.leased || !step.more || step.error.is_some() {
                total.more = step.more;
                break;
            }
        }
        Ok(total)
    }

    /// Gives the lease up, if this export holds it.
    pub(crate) fn release(&self, store: &mut Outbox) -> Result<()> {
        self.lease.release(store)
    }

    fn step(&mut self, store: &mut Outbox, deadline: Option<Instant>) -> Result<LogStep> {
        let mut out = LogStep::default();
        if let Some(left) = self.pacing.wait_left() {
            out.backing_off = Some(left);
            return Ok(out);
        }
        if !self.lease.take(store, unix_now())? {
            return Ok(out);
        }
        out.leased = true;
        store.log_outbox_enforce_cap(DEFAULT_LOG_OUTBOX_MAX_ROWS, CAP_STEP)?;
        if self.transport.is_none() {
            return Ok(out);
        }
        let limit = self.config.batch_max_spans.value.max(1);
        let rows = store.log_outbox_ready(limit)?;
        out.more = rows.len() == limit;
        if rows.is_empty() {
            return Ok(out);
        }
        let records = self.build(store, &rows)?;
        let skipped = rows.len() - records.len();
        if records.is_empty() {
            store.log_outbox_done(&rows, skipped, 0, unix_now())?;
            return Ok(out);
        }
        // The rows of records left out leave with the first part done.
        let mut skipped_rows = {
            let sent: HashSet<usize> = records.iter().map(|(i, _)| *i).collect();
            let left_out: Vec<LogRow> = (0..rows.len())
                .filter(|i| !sent.contains(i))
                .map(|i| rows[i].clone())
                .collect();
            Some(left_out)
        };
        let sizes = records.iter().map(|(_, r)| split::item_len(r.encoded_len())).collect();
        let mut parts = self.size.parts(sizes, self.request(Vec::new()).encoded_len());
        while let Some(part) = parts.next() {
            let built = &records[part.clone()];
            let n = built.len();
            if n == 1 && self.size.holding(&format!("log|{}", rows[built[0].0].seq)) {
                continue;
            }
            let bytes = parts.bytes(&part);
            let rejected = match self.send(self.request(built.iter().map(|(_, r)| r.clone()).collect()), deadline) {
                Ok(accepted) => {
                    self.pacing.succeeded();
                    self.size.accepted(bytes);
                    out.exported += n;
                    accepted.rejected_log_records
                }
                Err(e) if e.verdict == retry::Verdict::TooLarge => {
                    let row = &rows[built[0].0];
                    let key = format!("log|{}", row.seq);
                    match self.size.refused(&mut parts, part, &row.event, &key, &e.message) {
                        Refusal::Split | Refusal::Later => continue,
                        Refusal::Reject => 1,
                        Refusal::Passing => {
                            let text = failure_text(Signal::Logs, &self.config.endpoint.value, &e);
                            let wait = self.pacing.failed(retry::Verdict::Retry { after: None }, &text);
                            store.log_export_failed(&text, unix_now())?;
                            out.backing_off = Some(wait);
                            out.error = Some(text);
                            out.more = false;
                            break;
                        }
                    }
                }
                Err(e) => {
                    let text = failure_text(Signal::Logs, &self.config.endpoint.value, &e);
                    let wait = self.pacing.failed(e.verdict, &text);
                    store.log_export_failed(&text, unix_now())?;
                    out.backing_off = Some(wait);
                    out.error = Some(text);
                    out.more = false;
                    break;
                }
            };
            let mut done: Vec<LogRow> = built.iter().map(|(i, _)| rows[*i].clone()).collect();
            let left_out = skipped_rows.take().unwrap_or_default();
            let skipped = left_out.len();
            done.extend(left_out);
            store.log_outbox_done(&done, skipped, rejected, unix_now())?;
        }
        Ok(out)
    }

    /// Sends one request; a failure's message never holds a header value.
    fn send(&mut self, request: ExportLogsServiceRequest, deadline: Option<Instant>) -> Result<Accepted, SendError> {
        let Some(transport) = self.transport.as_mut() else {
            return Ok(Accepted::default());
        };
        block_on_until(&self.runtime, transport.send_logs(request), deadline, "log export").map_err(|mut e| {
            e.message = scrub_error(&e.message, &self.config.headers.value);
            e
        })
    }

    /// The records of `rows`, each with the trace context of its span and
    /// the index of its row, read in one snapshot. Content events carry the
    /// call's captured content, and are left out (skipped) unless content
    /// events are on.
    fn build(&self, store: &Reader, rows: &[LogRow]) -> Result<Vec<(usize, LogRecord)>> {
        store.read_snapshot(|store| {
            let mut sessions = Sessions::default();
            let mut out = Vec::with_capacity(rows.len());
            for (i, row) in rows.iter().enumerate() {
                if row.content_key.is_some() && !self.config.content_events.value {
                    continue;
                }
                let context = match row.session_id.as_deref() {
                    Some(session) => sessions
                        .get(store, session)?
                        .map(|(_, ancestry)| trace_context(row, session, ancestry, self.mode)),
                    None => None,
                };
                let mut rec = record(row, context);
                if let (Some(key), Some(session)) = (row.content_key.as_deref(), row.session_id.as_deref()) {
                    for (name, value) in store.span_content(ContentKind::Llm, session, key)? {
                        rec.attributes.push(KeyValue {
                            key: name,
                            value: Some(AnyValue {
                                value: Some(any_value::Value::StringValue(value)),
                            }),
                            ..KeyValue::default()
                        });
                    }
                }
                out.push((i, rec));
            }
            Ok(out)
        })
    }

    fn request(&self, log_records: Vec<LogRecord>) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(self.resource.clone()),
                scope_logs: vec![ScopeLogs {
                    scope: Some(InstrumentationScope {
                        name: super::SCOPE_NAME.to_string(),
                        version: env!("CARGO_PKG_VERSION").to_string(),
                        ..InstrumentationScope::default()
                    }),
                    log_records,
                    schema_url: hermes_meter_model::semconv::SCHEMA_URL.to_string(),
                }],
                schema_url: hermes_meter_model::semconv::SCHEMA_URL.to_string(),
            }],
        }
    }
}

/// The trace and span a record of `session` belongs to: the span it names,
/// else its turn's, else its session's, in the trace that span is in.
fn trace_context(row: &LogRow, session: &str, ancestry: &span::Ancestry, mode: TraceMode) -> ([u8; 16], [u8; 8]) {
    let trace = match row.turn_id.as_deref() {
        Some(turn) => ancestry.trace_of_turn(turn, mode),
        None => ancestry.trace_of_session(mode),
    };
    let named = row.span_id.as_deref().and_then(|b| <[u8; 8]>::try_from(b).ok());
    let span = named.unwrap_or_else(|| match row.turn_id.as_deref() {
        Some(turn) => span::turn_span_id(turn),
        None => span::session_span_id(session),
    });
    (trace, span)
}

/// One OTLP record of `row`, in `context` when its session is known.
fn record(row: &LogRow, context: Option<([u8; 16], [u8; 8])>) -> LogRecord {
    let text = |s: String| AnyValue {
        value: Some(any_value::Value::StringValue(s)),
    };
    let mut attributes = vec![KeyValue {
        key: LOG_RECORD_UID.into(),
        value: Some(text(record_uid(row))),
        ..KeyValue::default()
    }];
    let attrs: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&row.attrs).unwrap_or_default();
    for (key, value) in attrs {
        let value = match value {
            serde_json::Value::String(s) => any_value::Value::StringValue(s),
            serde_json::Value::Bool(b) => any_value::Value::BoolValue(b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => any_value::Value::IntValue(i),
                None => any_value::Value::DoubleValue(n.as_f64().unwrap_or_default()),
            },
            other => any_value::Value::StringValue(other.to_string()),
        };
        attributes.push(KeyValue {
            key,
            value: Some(AnyValue { value: Some(value) }),
            ..KeyValue::default()
        });
    }
    let at = span::nanos(row.at);
    let (trace_id, span_id, flags) = match context {
        Some((trace, span)) => (trace.to_vec(), span.to_vec(), 1),
        None => (Vec::new(), Vec::new(), 0),
    };
    LogRecord {
        time_unix_nano: at,
        observed_time_unix_nano: at,
        severity_number: row.severity,
        severity_text: severity_text(row.severity).into(),
        body: Some(text(row.body.clone())),
        attributes,
        flags,
        trace_id,
        span_id,
        event_name: row.event.clone(),
        ..LogRecord::default()
    }
}

/// The severity text of an OTLP `SeverityNumber` (its range's short name).
fn severity_text(number: i32) -> &'static str {
    match number {
        1..=4 => "TRACE",
        5..=8 => "DEBUG",
        9..=12 => "INFO",
        13..=16 => "WARN",
        17..=20 => "ERROR",
        _ => "FATAL",
    }
}

/// A record's `log.record.uid`: a hash of what makes it itself in its
/// store (its place in the outbox, its time and event), the same on every
/// re-send.
fn record_uid(row: &LogRow) -> String {
    let id = span::span_id(&["log", &row.seq.to_string(), &row.at.to_string(), &row.event]);
    super::hex(&id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(span_id: Option<Vec<u8>>, turn: Option<&str>) -> LogRow {
        LogRow {
            seq: 7,
            at: 1_700_000_000.5,
            event: hermes_meter_model::semconv::event::BUDGET_VERDICT.into(),
            severity: 17,
            session_id: Some("s1".into()),
            turn_id: turn.map(str::to_string),
            span_id,
            body: "Blocked".into(),
            attrs: r#"{"hermes.budget.verdict":"blocked","n":3,"ok":true}"#.into(),
            content_key: None,
        }
    }

    #[test]
    fn a_record_carries_its_event_severity_attributes_and_the_trace_context_of_its_span() {
        let ancestry = span::Ancestry(vec![span::Ancestor {
            session_id: "s1".into(),
            platform: Some("cli".into()),
            parent_turn_id: None,
        }]);
        let tool = span::tool_span_id("s1", "call-1");
        let r = row(Some(tool.to_vec()), Some("t1"));
        let context = trace_context(&r, "s1", &ancestry, TraceMode::Auto);
        assert_eq!(context, (span::trace_id(&["session", "s1"]), tool));
        let rec = record(&r, Some(context));
        assert_eq!(rec.event_name, "hermes.budget.verdict");
        assert_eq!((rec.severity_number, rec.severity_text.as_str()), (17, "ERROR"));
        assert_eq!(rec.time_unix_nano, 1_700_000_000_500_000_000);
        assert_eq!(rec.span_id, tool.to_vec());
        assert_eq!(rec.flags, 1);
        let keys: Vec<&str> = rec.attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(keys, [LOG_RECORD_UID, "hermes.budget.verdict", "n", "ok"]);
        assert_eq!(
            record(&r, Some(context)).attributes[0],
            rec.attributes[0],
            "the uid is stable"
        );
        // No span named: the turn's; in per-turn mode, the turn's own trace.
        let r = row(None, Some("t1"));
        let context = trace_context(&r, "s1", &ancestry, TraceMode::Turn);
        assert_eq!(context, (span::trace_id(&["turn", "t1"]), span::turn_span_id("t1")));
        let r = row(None, None);
        let context = trace_context(&r, "s1", &ancestry, TraceMode::Turn);
        assert_eq!(context.1, span::session_span_id("s1"));
        let rec = record(&r, None);
        assert!(rec.trace_id.is_empty() && rec.span_id.is_empty() && rec.flags == 0);
    }
}
