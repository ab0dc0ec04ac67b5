//! The trace exporter: reads the outbox, sends OTLP, marks rows done.
//!
//! Owns: the trace export step (batches, sampling, marking rows done),
//! turning outbox rows into spans through [`hermes_meter_model::span`], and re-sending
//! history. The trace export itself (`TraceExport`) holds no store
//! connection: each call is handed one, so the export driver steps it and
//! the metric export over a single connection; [`Exporter`] is it with a
//! connection of its own. The lease and the backoff it sends under are
//! `pacing.rs`'s, shared with the metric exporter.
//! Must not touch: the journal, Python, anything on the hook path.
//!
//! # Use
//!
//! ```no_run
//! # fn main() -> hermes_meter_store::Result<()> {
//! use hermes_meter_runtime::export::{ExportConfig, ExportOverrides, Exporter};
//! let config = ExportConfig::from_env(ExportOverrides::default());
//! let mut exporter = Exporter::new(config, std::path::Path::new("/tmp/hermes-meter.db"))?;
//! exporter.run_once()?; // one batch, if this process holds the lease
//! exporter.flush(std::time::Instant::now() + std::time::Duration::from_secs(2))?;
//! # Ok(()) }
//! ```
//!
//! Nothing loops over an exporter by hand: the export thread of a Hermes
//! process (`export_task.rs`) and `hermes-meter serve` both step a
//! [`Driver`] (`driver.rs`). It holds one store connection and the trace
//! and the metric export over it, and runs the trace step of
//! [`Exporter::run_once`] (or, for an exit flush, of [`Exporter::flush`]
//! with a short deadline), that of [`Exporter::close_idle`] and the metric
//! step in one order. `export --since` calls
//! [`Exporter::export_history_with`] once, with no lease: a one-off
//! re-send asked for by hand.
//!
//! # Guarantees
//!
//! - Only the holder of the store's export lease sends (one exporter per
//!   store). The lease is renewed at every step and lapses `lease_seconds`
//!   after its holder stopped renewing it (it died), so another process
//!   takes over. Processes sharing a store never send a span twice in
//!   normal operation.
//! - Rows are deleted only after the collector accepted the request, so a
//!   crash or an outage loses nothing; after a crash between the two, the
//!   next exporter re-sends the same spans with the same ids.
//! - A failed send backs off (bounded exponential with jitter, see
//!   [`retry`]) and retries for as long as the retention cap allows.
//! - A batch goes in requests under a byte limit, halved when the
//!   collector refuses one as too large (`split.rs`); a span too large
//!   alone is counted rejected, and each request's rows leave the outbox
//!   once it is accepted, so no span is sent twice.

mod alert_thread;
mod console;
pub mod driver;
pub mod logs;
pub mod metrics;
mod pacing;
pub mod prometheus;
pub mod retry;
mod split;
pub mod transport;
pub mod webhook;

pub use crate::config::export::Sampler;
pub use crate::config::export::Signal;
pub use crate::config::export::{ExportConfig, ExportOverrides, Protocol, TracesExporter};
pub use crate::config::metrics::MetricsExporters;
pub use crate::config::metrics::{MetricsConfig, MetricsOverrides};
pub use driver::Driver;
/// Lower-case hex of an id (defined with the ids, in `span.rs`).
use hermes_meter_model::span::hex;
use metrics::MetricExport;
pub use metrics::MetricExporter;
pub use metrics::MetricStep;
pub use prometheus::PrometheusServer;
pub use transport::Accepted;
pub use transport::SendError;
pub(crate) use transport::Transport;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use hermes_meter_model::rows::outcome::RUNNING;
use hermes_meter_model::rows::RunRow;
use hermes_meter_model::span::{self, Ancestor, Ancestry, SpanOptions};
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::{
    counter, BatchRows, ContentKind, Outbox, OutboxRow, Reader, SentSession, SpanKind, TRACE_LEASE,
};
pub(crate) use pacing::take_lease;
use pacing::{block_on_until, Lease, Pacing};
use prost::Message as _;
use split::{Parts, Refused, RequestLimit};

/// The instrumentation scope name on every span.
pub(crate) const SCOPE_NAME: &str = "hermes-meter";

/// How deep a chain of subagents is followed (a guard against cycles).
const MAX_ANCESTRY: usize = 32;

/// Outbox rows over the cap one export step drops at most: a store far
/// over it (trace export was off for months) is brought down a step at a
/// time, each a short transaction, as the writers' retention does.
pub(crate) const CAP_STEP: usize = 10_000;

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    /// This process holds the lease.
    pub leased: bool,
    /// Spans the collector accepted.
    pub exported: usize,
    /// Rows done without a span (sampled out, not finished, gone).
    pub skipped: usize,
    /// A full batch was read: more may be ready.
    pub more: bool,
    /// The send failed; retry no earlier than this.
    pub backing_off: Option<Duration>,
    /// The last failure, if this step failed.
    pub error: Option<String>,
}

/// The single-threaded runtime exporters send on. A driver's trace and
/// metric exporters share one: they are stepped by one thread, one after
/// the other, and a runtime is a thread's worth of state.
pub(crate) type SendRuntime = std::sync::Arc<tokio::runtime::Runtime>;

/// A new [`SendRuntime`] (`what` names it in the error).
pub(crate) fn send_runtime(what: &str) -> Result<SendRuntime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(std::sync::Arc::new)
        .map_err(|e| Error::Other(format!("{what} runtime: {e}")))
}

/// The transport `config` sends over, built inside `runtime` (tonic's
/// lazy channel needs one); none when the signal is not sent.
pub(crate) fn transport_if_enabled(config: &ExportConfig, runtime: &SendRuntime) -> Result<Option<Transport>> {
    if !config.enabled() {
        return Ok(None);
    }
    let _guard = runtime.enter();
    Transport::new(config).map(Some)
}

/// The trace exporter of one store, on a connection of its own, for a
/// caller that sends traces alone (`export --since`, tests, benches): the
/// trace export and the store it works on. The export driver ([`Driver`])
/// holds the trace export alone, over the one connection it shares with
/// the metric export.
pub struct Exporter {
    store: Outbox,
    traces: TraceExport,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter")
            .field("store", &self.store)
            .field("holder", &self.traces.holder())
            .field("transport", &self.traces.transport)
            .finish()
    }
}

impl Exporter {
    /// Opens the store at `store_path` (its own connection) and builds the
    /// transport; nothing is sent yet and a collector that is down is not
    /// an error.
    pub fn new(config: ExportConfig, store_path: &Path) -> Result<Self> {
        let store = Outbox::open(store_path)?;
        Self::with_store(config, store)
    }

    /// Like [`Exporter::new`] over an open store.
    pub fn with_store(config: ExportConfig, store: Outbox) -> Result<Self> {
        let traces = TraceExport::new(config, send_runtime("export")?)?;
        Ok(Exporter { store, traces })
    }

    /// The store this exporter reads.
    pub fn store(&self) -> &Outbox {
        &self.store
    }

    /// The settings in use.
    pub fn config(&self) -> &ExportConfig {
        &self.traces.config
    }

    /// This exporter's lease holder id.
    pub fn holder(&self) -> &str {
        self.traces.holder()
    }

    /// One step: take or renew the lease, apply the retention cap, send one
    /// batch of ready rows, and delete them once accepted. Does nothing while
    /// backing off, without the lease, or with export disabled (the cap still
    /// applies then, so the disk stays bounded).
    pub fn run_once(&mut self) -> Result<Step> {
        self.traces.run_once(&mut self.store)
    }

    /// Sends batches until no row is ready or `deadline` passes; waits out
    /// backoff delays that end before the deadline. For a one-shot process's
    /// last moments: whatever is left stays for the next exporter.
    pub fn flush(&mut self, deadline: Instant) -> Result<Step> {
        self.traces.flush(&mut self.store, deadline)
    }

    /// Closes spans left open by processes that went away (see
    /// [`Outbox::close_idle_runs`](hermes_meter_store::Outbox::close_idle_runs)), enqueueing them. Returns the runs closed.
    pub fn close_idle(&mut self) -> Result<usize> {
        self.traces.close_idle(&mut self.store)
    }

    /// Gives the lease up (also done on drop).
    pub fn release(&mut self) -> Result<()> {
        self.traces.release(&mut self.store)
    }

    /// Re-sends every finished span that ended at or after `since` (Unix
    /// seconds), whatever the outbox says, with the same ids as before.
    /// Leaves the outbox alone. Retries each batch until `deadline`.
    pub fn export_history(&mut self, since: f64, deadline: Instant) -> Result<usize> {
        self.export_history_with(since, deadline, |_, _| {})
    }

    /// [`Exporter::export_history`], calling `progress(sent, total)` after
    /// each accepted batch. It takes no lease: a one-off re-send, asked for
    /// by hand. Spans it re-sent that were still waiting in the outbox are
    /// marked exported there (the normal exporter would send them again
    /// otherwise). A failure is recorded for `status`, like the export
    /// loop's, and its message names the endpoint and what to do.
    pub fn export_history_with(
        &mut self,
        since: f64,
        deadline: Instant,
        progress: impl FnMut(usize, usize),
    ) -> Result<usize> {
        self.traces
            .export_history_with(&mut self.store, since, deadline, progress)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.release();
    }
}

/// The trace export of a store without the store: its settings, transport,
/// lease and backoff. Each call is given the connection to work on, so the
/// driver steps it and the metric export over one connection.
#[derive(Debug)]
pub(crate) struct TraceExport {
    config: ExportConfig,
    runtime: SendRuntime,
    transport: Option<Transport>,
    lease: Lease,
    pacing: Pacing,
    resource: Resource,
    options: SpanOptions,
    /// The byte limit requests are kept under, as learned.
    size: SizeLimit,
}

impl TraceExport {
    /// Builds the transport, sending on `runtime` (shared with a metric
    /// export stepped by the same thread); nothing is sent yet and a
    /// collector that is down is not an error.
    pub(crate) fn new(config: ExportConfig, runtime: SendRuntime) -> Result<Self> {
        let transport = transport_if_enabled(&config, &runtime)?;
        let lease = Lease::new(TRACE_LEASE, config.lease_seconds.value);
        let resource = resource_of(&config);
        let options = SpanOptions {
            mode: config.trace_mode.value,
            include_sender: config.include_sender.value,
            names: config.names.value,
        };
        Ok(TraceExport {
            size: SizeLimit::new(Signal::Traces, config.max_request_bytes.value),
            config,
            runtime,
            transport,
            lease,
            pacing: Pacing::new("Export.Failed"),
            resource,
            options,
        })
    }

    /// This export's lease holder id.
    pub(crate) fn holder(&self) -> &str {
        self.lease.holder()
    }

    /// [`Exporter::run_once`] over `store`.
    pub(crate) fn run_once(&mut self, store: &mut Outbox) -> Result<Step> {
        self.step(store, None)
    }

    /// [`Exporter::flush`] over `store`.
    pub(crate) fn flush(&mut self, store: &mut Outbox, deadline: Instant) -> Result<Step> {
        let mut total = Step::default();
        while self.pacing.wait_to_send_by(deadline) {
            let step = self.step(store, Some(deadline))?;
            total.leased = step.leased;
            total.exported += step.exported;
            total.skipped += step.skipped;
            total.error = step.error.clone().or(total.error);
            total.backing_off = step.backing_off;
            if !step.leased || (!step.more && step.error.is_none()) {
                total.more = step.more;
                break;
            }
        }
        Ok(total)
    }

    /// [`Exporter::close_idle`] over `store`.
    pub(crate) fn close_idle(&self, store: &mut Outbox) -> Result<usize> {
        store.close_idle_runs(unix_now(), self.config.idle_timeout_seconds.value)
    }

    /// Gives the lease up, if this export holds it.
    pub(crate) fn release(&self, store: &mut Outbox) -> Result<()> {
        self.lease.release(store)
    }

    /// [`Exporter::export_history_with`] over `store`.
    pub(crate) fn export_history_with(
        &mut self,
        store: &mut Outbox,
        since: f64,
        deadline: Instant,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<usize> {
        let rows = store.history(since)?;
        let mut sent = 0;
        for chunk in rows.chunks(self.config.batch_max_spans.value.max(1)) {
            let spans = self.build(store, chunk)?.spans;
            let sizes = spans.iter().map(|b| split::item_len(b.span.encoded_len())).collect();
            let empty = traces_request(&self.resource, Vec::new()).encoded_len();
            let mut parts = self.size.parts(sizes, empty);
            while let Some(part) = parts.next() {
                let built = &spans[part.clone()];
                let request = traces_request(&self.resource, built.iter().map(|b| b.span.clone()).collect());
                let bytes = parts.bytes(&part);
                if let Err(e) = self.send_until(store, request, deadline)? {
                    // Too large: its halves, a span too large alone left
                    // out (logged), or a passing refusal sent again.
                    let row = &chunk[built[0].row];
                    let kind = format!("{:?}", row.kind);
                    let refusal = self
                        .size
                        .refused(&mut parts, part.clone(), &kind, &span_key(row), &e.message);
                    if matches!(refusal, Refusal::Passing | Refusal::Later) {
                        if Instant::now() + PASSING_RETRY >= deadline {
                            return Err(Error::Other(format!("export --since: {}", e.message)));
                        }
                        std::thread::sleep(PASSING_RETRY);
                        parts.again(part);
                    }
                    continue;
                }
                self.size.accepted(bytes);
                let done: Vec<OutboxRow> = built.iter().map(|b| chunk[b.row].clone()).collect();
                store.outbox_resent(&done, unix_now())?;
                sent += built.len();
                progress(sent, rows.len());
            }
        }
        Ok(sent)
    }

    /// Sends `request` for `export --since`, retrying with backoff until
    /// `deadline`: `Ok(Ok(()))` once accepted, `Ok(Err(_))` when refused
    /// as too large (for the caller to split), an error when it gives up.
    fn send_until(
        &mut self,
        store: &mut Outbox,
        request: ExportTraceServiceRequest,
        deadline: Instant,
    ) -> Result<std::result::Result<(), SendError>> {
        loop {
            match self.send(request.clone(), Some(deadline)) {
                Ok(_) => {
                    self.pacing.backoff().reset();
                    return Ok(Ok(()));
                }
                Err(e) if e.verdict == retry::Verdict::TooLarge => return Ok(Err(e)),
                Err(e) => {
                    let wait = self.pacing.backoff().next(e.verdict);
                    if Instant::now() + wait >= deadline || e.verdict == retry::Verdict::Unsupported {
                        let text = failure_text(Signal::Traces, &self.config.endpoint.value, &e);
                        store.export_failed(&text, unix_now())?;
                        return Err(Error::Other(format!("export --since: {text}")));
                    }
                    std::thread::sleep(wait);
                }
            }
        }
    }

    fn step(&mut self, store: &mut Outbox, deadline: Option<Instant>) -> Result<Step> {
        let mut out = Step::default();
        if let Some(left) = self.pacing.wait_left() {
            out.backing_off = Some(left);
            return Ok(out);
        }
        let now = unix_now();
        if !self.lease.take(store, now)? {
            return Ok(out);
        }
        out.leased = true;
        store.outbox_enforce_cap(self.config.outbox_max_rows.value, CAP_STEP)?;
        if self.transport.is_none() {
            return Ok(out);
        }
        let limit = self.config.batch_max_spans.value.max(1);
        let rows = store.outbox_ready(now, self.config.session_grace_seconds.value, limit)?;
        out.more = rows.len() == limit;
        if rows.is_empty() {
            return Ok(out);
        }
        let Built { spans, skipped } = self.build(store, &rows)?;
        out.skipped = skipped.sampled_out + skipped.unfinished;
        let skipped_counts = [
            (counter::SAMPLED_OUT, skipped.sampled_out as i64),
            (counter::SKIPPED, skipped.unfinished as i64),
        ];
        if spans.is_empty() {
            store.outbox_done(&rows, &skipped.sessions, &skipped_counts, now)?;
            return Ok(out);
        }
        // The rows without a span leave with the first part done.
        let mut skipped = Some((skipped.rows, skipped.sessions));
        let sizes = spans.iter().map(|b| split::item_len(b.span.encoded_len())).collect();
        let empty = traces_request(&self.resource, Vec::new()).encoded_len();
        let mut parts = self.size.parts(sizes, empty);
        let timeout = self.config.timeout.value;
        let no_answer = SendError::no_answer(self.config.protocol.value.otlp_name(), timeout);
        let no_answer = failure_text(Signal::Traces, &self.config.endpoint.value, &no_answer);
        while let Some(part) = parts.next() {
            let built = &spans[part.clone()];
            let n = built.len();
            if n == 1 && self.size.holding(&span_key(&rows[built[0].row])) {
                continue;
            }
            let request = traces_request(&self.resource, built.iter().map(|b| b.span.clone()).collect());
            let now = unix_now();
            store.export_attempt(&no_answer, now, now + timeout.as_secs_f64())?;
            let bytes = parts.bytes(&part);
            let rejected = match self.send(request, deadline) {
                Ok(accepted) => {
                    self.pacing.succeeded();
                    self.size.accepted(bytes);
                    out.exported += n;
                    accepted.rejected_spans.clamp(0, n as i64)
                }
                Err(e) if e.verdict == retry::Verdict::TooLarge => {
                    let row = &rows[built[0].row];
                    let kind = format!("{:?}", row.kind);
                    match self.size.refused(&mut parts, part, &kind, &span_key(row), &e.message) {
                        Refusal::Split | Refusal::Later => continue,
                        Refusal::Reject => 1,
                        Refusal::Passing => {
                            let text = failure_text(Signal::Traces, &self.config.endpoint.value, &e);
                            let wait = self.pacing.failed(retry::Verdict::Retry { after: None }, &text);
                            store.export_failed(&text, unix_now())?;
                            out.backing_off = Some(wait);
                            out.error = Some(text);
                            out.more = false;
                            break;
                        }
                    }
                }
                Err(e) => {
                    let text = failure_text(Signal::Traces, &self.config.endpoint.value, &e);
                    let wait = self.pacing.failed(e.verdict, &text);
                    store.export_failed(&text, unix_now())?;
                    out.backing_off = Some(wait);
                    out.error = Some(text);
                    out.more = false;
                    break;
                }
            };
            let mut done: Vec<OutboxRow> = built.iter().map(|b| rows[b.row].clone()).collect();
            let mut sessions: Vec<SentSession> = built.iter().filter_map(|b| b.session.clone()).collect();
            let mut counts = vec![(counter::EXPORTED, n as i64 - rejected), (counter::REJECTED, rejected)];
            if let Some((skipped_rows, skipped_sessions)) = skipped.take() {
                done.extend(skipped_rows.into_iter().map(|i| rows[i].clone()));
                sessions.extend(skipped_sessions);
                counts.extend(skipped_counts);
            }
            store.outbox_done(&done, &sessions, &counts, unix_now())?;
        }
        Ok(out)
    }

    /// Sends one request. A failure's message never holds a header value:
    /// a collector may echo the request's credentials in its answer, and
    /// the message is stored, logged and shown by `status`.
    fn send(&mut self, request: ExportTraceServiceRequest, deadline: Option<Instant>) -> Result<Accepted, SendError> {
        self.send_unscrubbed(request, deadline).map_err(|mut e| {
            e.message = scrub_error(&e.message, &self.config.headers.value);
            e
        })
    }

    fn send_unscrubbed(
        &mut self,
        request: ExportTraceServiceRequest,
        deadline: Option<Instant>,
    ) -> Result<Accepted, SendError> {
        let Some(transport) = self.transport.as_mut() else {
            return Ok(Accepted::default());
        };
        block_on_until(&self.runtime, transport.send(request), deadline, "export")
    }

    /// The spans of `rows` that are finished and sampled, each with the
    /// row it was built from. Reads every ledger row of the batch in one
    /// read transaction, with one query per kind of row rather than one per
    /// outbox row.
    fn build(&self, store: &Reader, rows: &[OutboxRow]) -> Result<Built> {
        store.read_snapshot(|store| {
            // Content goes out only while capture is on: turning it off
            // also stops what was captured before from leaving.
            let batch = store.batch_rows(rows, self.config.capture_content.value)?;
            let mut sessions = Sessions::default();
            let mut spans = Vec::with_capacity(rows.len());
            let mut skipped = Skipped::default();
            for (i, row) in rows.iter().enumerate() {
                let mut session = Vec::new();
                match self.build_one(store, row, &batch, &mut sessions, &mut session)? {
                    Some(span) if self.config.sampler.value.keeps(&span.trace_id) => spans.push(BuiltSpan {
                        row: i,
                        span,
                        session: session.pop(),
                    }),
                    built => {
                        match built {
                            Some(_) => skipped.sampled_out += 1,
                            None => skipped.unfinished += 1,
                        }
                        skipped.rows.push(i);
                        skipped.sessions.extend(session);
                    }
                }
            }
            Ok(Built { spans, skipped })
        })
    }

    fn build_one(
        &self,
        store: &Reader,
        row: &OutboxRow,
        batch: &BatchRows,
        sessions: &mut Sessions,
        sent: &mut Vec<SentSession>,
    ) -> Result<Option<Span>> {
        let opts = self.options;
        let Some((run, ancestry)) = sessions.get(store, &row.session_id)? else {
            return Ok(None);
        };
        let span = match row.kind {
            SpanKind::Run if run.status != RUNNING => {
                sent.push(SentSession {
                    session_id: run.session_id.clone(),
                    n: row.n,
                    ended_at: run.ended_at.unwrap_or(run.last_event_at),
                    totals: (span::session_input_tokens(run), run.output_tokens, run.cost_usd),
                });
                Some(span::session_span(run, row.n, ancestry, opts))
            }
            SpanKind::Run => None,
            SpanKind::Turn => batch
                .turn(&row.key)
                .filter(|t| t.ended_at.is_some() || run.status != RUNNING)
                .map(|t| span::turn_span(t, run, ancestry, opts)),
            SpanKind::LlmCall => batch
                .llm_call(&row.key)
                .map(|a| span::attempt_span(a, run, ancestry, opts)),
            SpanKind::LlmError => batch
                .llm_error(&row.key, row.n)
                .map(|a| span::attempt_span(a, run, ancestry, opts)),
            SpanKind::OpenAttempt => batch
                .open_attempt(&row.key)
                .map(|a| span::attempt_span(a, run, ancestry, opts)),
            SpanKind::Tool => batch
                .tool(&row.session_id, &row.key)
                .filter(|t| t.ended_at.is_some() || run.status != RUNNING)
                .map(|t| span::tool_span(t, run, ancestry, opts)),
            SpanKind::Approval => store
                .approval_row(&row.session_id, &row.key)?
                .filter(|a| a.ended_at.is_some() || run.status != RUNNING)
                .map(|a| span::approval_span(&a, run, ancestry, opts)),
        };
        let Some(mut span) = span else { return Ok(None) };
        // Captured content exists only if capture was on when the event was
        // applied. Output messages belong to the attempt that produced them.
        let content = match row.kind {
            SpanKind::LlmCall => batch.content(ContentKind::Llm, &row.session_id, &row.key),
            SpanKind::LlmError | SpanKind::OpenAttempt => {
                let mut c = batch.content(ContentKind::Llm, &row.session_id, &row.key);
                c.retain(|(name, _)| name != hermes_meter_model::semconv::attr::GEN_AI_OUTPUT_MESSAGES);
                c
            }
            SpanKind::Tool => batch.content(ContentKind::Tool, &row.session_id, &row.key),
            SpanKind::Run | SpanKind::Turn | SpanKind::Approval => Vec::new(),
        };
        span::add_content(&mut span, &content);
        Ok(Some(span))
    }
}

/// A request of `spans` from `resource`, in this exporter's scope.
fn traces_request(resource: &Resource, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(resource.clone()),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: SCOPE_NAME.to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..InstrumentationScope::default()
                }),
                spans,
                schema_url: hermes_meter_model::semconv::SCHEMA_URL.to_string(),
            }],
            schema_url: hermes_meter_model::semconv::SCHEMA_URL.to_string(),
        }],
    }
}

/// What a failed send says wherever it is shown (stderr, logs, `status`):
/// the signal, where it went, the collector's answer and what to do.
pub fn failure_text(signal: Signal, endpoint: &str, e: &SendError) -> String {
    let what = signal.as_str();
    if let Some(todo) = tls_todo(e) {
        return format!("{what} to {endpoint}: {} ({todo})", e.message);
    }
    let todo = match (e.cause, e.verdict) {
        (retry::Cause::NoAnswer, _) => format!(
            "the collector took the connection but did not answer in time: is it hung or overloaded? \
             {} sets how long to wait; nothing is lost meanwhile",
            crate::config::export::env::TIMEOUT
        ),
        // Over TLS 1.3 a server that wants a client certificate and got
        // none closes the connection after the handshake: it reads the same.
        (retry::Cause::Closed, _) if endpoint.starts_with("https://") => format!(
            "the collector closed the connection before answering: is it restarting, or behind a proxy \
             that drops it? If it asks for a client certificate (mutual TLS), set {} and {}. Nothing is lost \
             meanwhile",
            crate::config::export::env::CLIENT_CERTIFICATE,
            crate::config::export::env::CLIENT_KEY
        ),
        (retry::Cause::Closed, _) => {
            "the collector closed the connection before answering: is it restarting, or behind a proxy \
             that drops it? Nothing is lost meanwhile"
                .to_string()
        }
        // A refusal for now: a full queue (the Collector's "sending queue
        // is full"), memory pressure, a rate limit, a restart.
        (retry::Cause::Answered, retry::Verdict::Retry { .. }) => {
            "the collector answered that it cannot take them now (a full queue, memory pressure or a \
             rate limit: see its log); they wait in the store and are sent again"
                .to_string()
        }
        (_, retry::Verdict::Retry { .. }) => format!(
            "is a collector listening there? Start it, or point {} (or --endpoint) at yours; \
             nothing is lost meanwhile",
            signal.endpoint_var()
        ),
        // RESOURCE_EXHAUSTED without RetryInfo: what the Collector's
        // memory_limiter extension answers every request while it is over
        // its limit (grpc-go past the receiver's max message size says so,
        // and is TooLarge).
        (_, retry::Verdict::Exhausted) => format!(
            "the collector is out of a resource and did not say when to retry (memory over its \
             memory_limiter, or a quota: see its log); they wait in \
             the store and are sent again every {} s",
            retry::MAX_BACKOFF.as_secs()
        ),
        (_, retry::Verdict::Permanent) => format!(
            "the collector refused them; see its log, and check {} and the endpoint",
            crate::config::export::env::HEADERS
        ),
        // Spans and records are split and never reach here as a failure;
        // a metric push is not split.
        (_, retry::Verdict::TooLarge) => format!(
            "the request is larger than the collector takes (max_recv_msg_size_mib over gRPC, \
             max_request_body_size over HTTP): raise that limit; {what} are not split and are \
             tried again every {} s",
            retry::MAX_BACKOFF.as_secs()
        ),
        (_, retry::Verdict::Unsupported) => format!(
            "it does not take {what}: set {}=none to stop sending them, or point {} at a collector that does",
            signal.exporter_var(),
            signal.endpoint_var(),
        ),
    };
    format!("{what} to {endpoint}: {} ({todo})", e.message)
}

/// What to do about a TLS handshake that failed, told by rustls's texts
/// (they reach us as the message of tonic's or hyper's error): our side
/// does not trust the collector's certificate, or the collector refused
/// ours. `None` for any other failure.
fn tls_todo(e: &SendError) -> Option<String> {
    use crate::config::export::env;
    if e.cause == retry::Cause::Answered {
        return None;
    }
    let m = e.message.as_str();
    if m.contains("invalid peer certificate") {
        return Some(format!(
            "the collector's certificate is not trusted here: set {} to the file of the CA that signed it (a \
             self-signed certificate is its own CA), or use the host name the certificate names; nothing is \
             lost meanwhile",
            env::CERTIFICATE
        ));
    }
    let refused = [
        "BadCertificate",
        "CertificateRequired",
        "UnknownCA",
        "CertificateUnknown",
    ];
    if m.contains("received fatal alert") && refused.iter().any(|a| m.contains(a)) {
        return Some(format!(
            "the collector refused the TLS handshake: it wants a client certificate it trusts; set {} and {} \
             (mutual TLS); nothing is lost meanwhile",
            env::CLIENT_CERTIFICATE,
            env::CLIENT_KEY
        ));
    }
    None
}

/// The byte limit a signal's requests are kept under, as learned from the
/// collector's refusals as too large, and the kinds of item already
/// logged as too large alone.
///
/// A refusal as too large is believed only when it can be true: a request
/// no larger than one the collector took is refused for another reason (a
/// proxy's hiccup, a collector restarting), so it is a passing failure,
/// retried after a backoff, the limit unchanged; an item refused alone is
/// rejected only once refused [`LONE_REFUSALS`] times over at least
/// [`LONE_REFUSED_FOR`]. Each accepted request doubles a learned limit back
/// toward the configured one (a collector's limit may rise again).
#[derive(Debug)]
pub(crate) struct SizeLimit {
    signal: Signal,
    limit: RequestLimit,
    configured: usize,
    logged: HashSet<String>,
    /// The largest request the collector took in this process, bytes.
    largest_accepted: usize,
    /// Items refused alone so far: their key, when first and last, how often.
    lone: HashMap<String, (Instant, Instant, u32)>,
}

/// How often an item must be refused alone as too large before it is
/// counted rejected: a burst of refusals (a proxy's hiccup) rejects nothing.
/// An outbox row's identity, for [`SizeLimit`]'s items refused alone.
fn span_key(row: &OutboxRow) -> String {
    format!("{:?}|{}|{}|{}", row.kind, row.session_id, row.key, row.n)
}

/// How long `export --since` waits before sending again a request refused
/// as too large that it does not believe (see [`SizeLimit`]).
const PASSING_RETRY: Duration = Duration::from_secs(1);

pub(crate) const LONE_REFUSALS: u32 = 3;
/// How long the refusals of an item alone must span before it is rejected.
pub(crate) const LONE_REFUSED_FOR: Duration = Duration::from_secs(30);
/// How long an item refused alone waits before it is sent again.
pub(crate) const LONE_WAIT: Duration = Duration::from_secs(5);
/// Items remembered as refused alone; past it the oldest are forgotten.
const LONE_REMEMBERED: usize = 1024;

/// What a refusal as too large means for the part refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Its halves go next, under a halved limit.
    Split,
    /// One item, refused alone long enough: counted rejected.
    Reject,
    /// Not believed (yet), and the collector may be refusing everything
    /// (nothing larger was taken): the rows wait, retried after a backoff.
    Passing,
    /// One item larger than any the collector took, not refused long
    /// enough yet: it waits (sent again next step), the other parts go on.
    Later,
}

impl SizeLimit {
    /// The configured limit of `signal` (`max_request_bytes`).
    pub(crate) fn new(signal: Signal, bytes: usize) -> Self {
        SizeLimit {
            signal,
            limit: RequestLimit::new(bytes),
            configured: bytes.max(1),
            logged: HashSet::new(),
            largest_accepted: 0,
            lone: HashMap::new(),
        }
    }

    /// Whether the item `key`, refused alone a moment ago, waits still
    /// (not sent again within [`LONE_WAIT`]).
    pub(crate) fn holding(&self, key: &str) -> bool {
        self.lone
            .get(key)
            .is_some_and(|(_, last, _)| last.elapsed() < LONE_WAIT)
    }

    /// The collector took a request of `bytes`: it takes that size, and a
    /// learned limit grows back (doubled, up to the configured one).
    pub(crate) fn accepted(&mut self, bytes: usize) {
        self.largest_accepted = self.largest_accepted.max(bytes);
        self.limit.grow(self.configured);
    }

    /// The parts to send items of `sizes` (each a [`split::item_len`]) in,
    /// in a request of `empty` bytes without them.
    pub(crate) fn parts(&self, sizes: Vec<usize>, empty: usize) -> Parts {
        Parts::new(sizes, empty, &self.limit)
    }

    /// The collector refused `part` (taken from `parts`, its first item of
    /// `kind`) as too large, answering `answer`. Returns whether it is one
    /// item too large alone, to be counted rejected (logged at `warn` the
    /// first time for its kind, else at `debug`: the rejected counter of
    /// `status` counts them all); otherwise its halves are sent next, with
    /// the limit halved (logged at `info`: nothing is lost).
    pub(crate) fn refused(
        &mut self,
        parts: &mut Parts,
        part: std::ops::Range<usize>,
        kind: &str,
        key: &str,
        answer: &str,
    ) -> Refusal {
        let what = self.signal.as_str();
        let bytes = parts.bytes(&part);
        if bytes <= self.largest_accepted {
            tracing::info!(
                target: "Export.Refused",
                bytes,
                "the collector refused a request of {what} of {bytes} bytes as too large ({answer}), having taken \
                 one of {} bytes: taken as a passing refusal, retried after a backoff",
                self.largest_accepted
            );
            return Refusal::Passing;
        }
        if part.len() <= 1 {
            let now = Instant::now();
            if self.lone.len() >= LONE_REMEMBERED && !self.lone.contains_key(key) {
                self.lone.clear();
            }
            let (first, last, times) = self.lone.entry(key.to_string()).or_insert((now, now, 0));
            *times += 1;
            *last = now;
            if *times < LONE_REFUSALS || now.duration_since(*first) < LONE_REFUSED_FOR {
                tracing::info!(
                    target: "Export.Refused",
                    bytes,
                    "a {kind} item of {what} of {bytes} bytes was refused alone as too large ({answer}), \
                     {times} time(s): sent again later before it is counted rejected"
                );
                return if self.largest_accepted > 0 {
                    Refusal::Later
                } else {
                    Refusal::Passing
                };
            }
            self.lone.remove(key);
        }
        match parts.refused(part, &mut self.limit) {
            Refused::Split { limit } => {
                let text = format!(
                    "the collector refused a request of {what} of {bytes} bytes as too large ({answer}): \
                     sending it again in halves, and requests of {what} under {limit} bytes from now on"
                );
                match self.signal {
                    Signal::Logs => tracing::info!(target: "LogExport.Split", bytes, limit, "{text}"),
                    _ => tracing::info!(target: "Export.Split", bytes, limit, "{text}"),
                }
                Refusal::Split
            }
            Refused::Alone => {
                let text = format!(
                    "a {kind} item of {what} of {bytes} bytes is larger alone than the collector takes ({answer}): \
                     it is counted rejected and not sent again. Raise the collector's limit \
                     (max_recv_msg_size_mib over gRPC, max_request_body_size over HTTP) or capture less content; \
                     more of this kind are counted without a warning"
                );
                match (self.signal, self.logged.insert(kind.to_string())) {
                    (Signal::Logs, true) => tracing::warn!(target: "LogExport.Rejected", bytes, "{text}"),
                    (Signal::Logs, false) => tracing::debug!(target: "LogExport.Rejected", bytes, "{text}"),
                    (_, true) => tracing::warn!(target: "Export.Rejected", bytes, "{text}"),
                    (_, false) => tracing::debug!(target: "Export.Rejected", bytes, "{text}"),
                }
                Refusal::Reject
            }
        }
    }
}

/// Logs an export failure at `warn` the first time it is seen (after a
/// success, or after a different failure) and at `debug` while it repeats:
/// a collector that is down for an hour is one line, not 120.
pub(crate) fn log_failure(event: &'static str, last: &mut Option<String>, text: &str, retry_in: Duration) {
    let retry_in_ms = retry_in.as_millis() as u64;
    if last.as_deref() == Some(text) {
        match event {
            "MetricExport.Failed" => tracing::debug!(target: "MetricExport.Failed", retry_in_ms, "{text}"),
            "LogExport.Failed" => tracing::debug!(target: "LogExport.Failed", retry_in_ms, "{text}"),
            _ => tracing::debug!(target: "Export.Failed", retry_in_ms, "{text}"),
        }
        return;
    }
    match event {
        "MetricExport.Failed" => tracing::warn!(target: "MetricExport.Failed", retry_in_ms, "{text}"),
        "LogExport.Failed" => tracing::warn!(target: "LogExport.Failed", retry_in_ms, "{text}"),
        _ => tracing::warn!(target: "Export.Failed", retry_in_ms, "{text}"),
    }
    *last = Some(text.to_string());
}

/// `message` with every OTLP header value (and each word of it, so the
/// token of `Bearer <token>` alone is caught too) and every secret
/// [`hermes_meter_model::redact`] recognises replaced.
pub(crate) fn scrub_error(message: &str, headers: &crate::config::export::Headers) -> String {
    let mut out = message.to_string();
    for (_, value) in &headers.0 {
        let words = value.split_whitespace().filter(|w| w.len() >= 6);
        for secret in std::iter::once(value.as_str()).chain(words) {
            if !secret.is_empty() && out.contains(secret) {
                out = out.replace(secret, hermes_meter_model::redact::REDACTED);
            }
        }
    }
    hermes_meter_model::redact::redact_text(&out).into_owned()
}

/// The ready rows of one step, built.
#[derive(Debug, Default, Clone)]
struct Built {
    /// The spans to send, in row order.
    spans: Vec<BuiltSpan>,
    /// The rows without a span to send.
    skipped: Skipped,
}

/// One span to send and what it was built from.
#[derive(Debug, Clone)]
struct BuiltSpan {
    /// Its outbox row (an index into the step's rows).
    row: usize,
    span: Span,
    /// Its session, if it is a session span: once it is done, its run
    /// moves on to the next session span.
    session: Option<SentSession>,
}

#[derive(Debug, Default, Clone)]
struct Skipped {
    sampled_out: usize,
    unfinished: usize,
    /// Their outbox rows (indices into the step's rows).
    rows: Vec<usize>,
    /// Session spans built (sent or sampled out): once the batch is done
    /// their runs move on to the next session span.
    sessions: Vec<SentSession>,
}

/// Runs and their ancestry, loaded once per batch.
#[derive(Default)]
pub(crate) struct Sessions(HashMap<String, Option<(RunRow, Ancestry)>>);

impl Sessions {
    pub(crate) fn get(&mut self, store: &Reader, session_id: &str) -> Result<Option<&(RunRow, Ancestry)>> {
        if !self.0.contains_key(session_id) {
            let loaded = match store.run_row(session_id)? {
                Some(run) => {
                    let ancestry = ancestry_of(store, &run)?;
                    Some((run, ancestry))
                }
                None => None,
            };
            self.0.insert(session_id.to_string(), loaded);
        }
        Ok(self.0.get(session_id).and_then(|v| v.as_ref()))
    }
}

/// The chain of sessions from `run` up to its root (also what the CLI's
/// `trace` places a session's spans with).
pub fn ancestry_of(store: &Reader, run: &RunRow) -> Result<Ancestry> {
    let node = |r: &RunRow| Ancestor {
        session_id: r.session_id.clone(),
        platform: r.platform.clone(),
        parent_turn_id: r.edge.as_ref().and_then(|e| e.parent_turn_id.clone()),
    };
    let mut chain = vec![node(run)];
    let mut parent = run.edge.as_ref().map(|e| e.parent_session_id.clone());
    while let Some(p) = parent.take() {
        if chain.len() >= MAX_ANCESTRY || chain.iter().any(|a| a.session_id == p) {
            break;
        }
        match store.run_row(&p)? {
            Some(r) => {
                chain.push(node(&r));
                parent = r.edge.as_ref().map(|e| e.parent_session_id.clone());
            }
            None => {
                // A parent with no run of its own (its events were never
                // recorded here): still the root of the trace.
                chain.push(Ancestor {
                    session_id: p,
                    ..Ancestor::default()
                });
            }
        }
    }
    Ok(Ancestry(chain))
}

pub(crate) fn resource_of(config: &ExportConfig) -> Resource {
    let kv = |k: &str, v: &str| KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
        ..KeyValue::default()
    };
    let mut attributes = vec![kv(
        hermes_meter_model::semconv::resource::SERVICE_NAME,
        &config.service_name.value,
    )];
    for (k, v) in &config.resource_attributes.value {
        if k != hermes_meter_model::semconv::resource::SERVICE_NAME {
            attributes.push(kv(k, v));
        }
    }
    Resource {
        attributes,
        ..Resource::default()
    }
}

use hermes_meter_store::unix_now;

#[cfg(test)]
mod tests {
    use super::retry::{Cause, Verdict};
    use super::*;

    /// The size a part is cut by is never less than its request's encoded
    /// size, from one tiny span to a thousand large ones.
    #[test]
    fn a_parts_bytes_bound_the_size_of_its_request() {
        let resource = resource_of(&ExportConfig::resolve(ExportOverrides::default(), |_| None));
        let span = |n: usize| Span {
            name: "chat".into(),
            attributes: vec![KeyValue {
                key: "gen_ai.input.messages".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("x".repeat(n))),
                }),
                ..KeyValue::default()
            }],
            ..Span::default()
        };
        for (count, each) in [(1, 0), (1, 100), (3, 200), (1000, 5000), (2, 3 << 20)] {
            let spans: Vec<Span> = (0..count).map(|i| span(each + i % 7)).collect();
            let sizes = spans.iter().map(|s| split::item_len(s.encoded_len())).collect();
            let empty = traces_request(&resource, Vec::new()).encoded_len();
            let mut parts = Parts::new(sizes, empty, &RequestLimit::new(usize::MAX));
            let all = parts.next().expect("one part");
            let encoded = traces_request(&resource, spans).encoded_len();
            assert!(parts.bytes(&all) >= encoded, "{count} x {each}");
            assert!(parts.bytes(&all) <= encoded + 8, "{count} x {each}: a close bound");
        }
    }

    #[test]
    fn a_failure_is_worded_by_its_cause_and_only_an_answer_blames_the_request() {
        let retry = Verdict::Retry { after: None };
        for (verdict, cause, says, never) in [
            (retry, Cause::Closed, "closed the connection", "refused"),
            (retry, Cause::NoAnswer, "did not answer in time", "refused"),
            (retry, Cause::Unreachable, "is a collector listening there?", "refused"),
            (Verdict::Permanent, Cause::Answered, "refused them", "listening"),
            (Verdict::Exhausted, Cause::Answered, "out of a resource", "HEADERS"),
            (
                Verdict::TooLarge,
                Cause::Answered,
                "larger than the collector takes",
                "memory_limiter",
            ),
            (retry, Cause::Answered, "cannot take them now", "listening"),
        ] {
            let e = SendError {
                verdict,
                cause,
                message: "otlp grpc: Unknown: h2 protocol error".into(),
            };
            let text = failure_text(Signal::Traces, "http://127.0.0.1:4317", &e);
            assert!(text.contains(says), "{cause:?}: {text}");
            assert!(!text.contains(never), "{cause:?}: {text}");
        }
    }
}
