//! The PyO3 module `hermes_meter._native`: the only code that knows Python.
//!
//! Owns: copying plain values out of hook kwargs while holding the GIL,
//! releasing the GIL for decoding and the store, turning every error and
//! panic into a rate-limited log line on `logging.getLogger("hermes_meter")`,
//! mapping errors to Python exceptions (only here, under one base class
//! [`HermesMeterError`]), and the verdict dicts of the gating hooks. Must not
//! touch: the store directly, SQL, the network, Hermes objects after a hook
//! returned (only plain copies leave the GIL).
//!
//! Hook entry points ([`Hook::__call__`]) never raise: Hermes swallows an
//! `Exception` from a hook but a `BaseException` (which PyO3 turns a panic
//! into) escapes and can abort the agent's turn, so each call catches
//! unwinds itself and returns `None`.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use hermes_meter::cli;
use hermes_meter_model::hook;
use hermes_meter_runtime::{bridge, budget, export_task};

use bridge::{Bridge, BridgeConfig};
use budget::{BudgetGate, BudgetHandle, MAX_PAUSE_ATTEMPTS, PAUSE_RETRY};
use hermes_meter_model::budget::BudgetMode;
use hermes_meter_store::AlertSink;
use hook::HOOK_NAMES;

mod callable;
mod copy;
mod exiting;
mod late;
mod log;
mod record;
mod test_hooks;

use callable::Hook;
use log::{install_log_layer, log, log_messages, ERROR, WARNING};

pyo3::create_exception!(
    hermes_meter._native,
    HermesMeterError,
    PyException,
    "Base class of the errors hermes-meter raises (never from a hook)."
);

/// The process's bridge, started on first use.
pub(crate) static BRIDGE: OnceLock<Bridge> = OnceLock::new();

/// The Hermes profile of the first `register` in this process, given before
/// the bridge starts: the store's fallback for a call that names none. Each
/// hook records its own profile ([`Hook`]'s); one process keeps one store
/// whatever profiles it serves.
pub(crate) static PROFILE: OnceLock<String> = OnceLock::new();

/// The budget gate's handle: LLM calls to stop, cron jobs to pause.
pub(crate) static BUDGET: OnceLock<BudgetHandle> = OnceLock::new();

/// The top-level sessions turns started in, for `/meter` when Hermes does
/// not say which session it is in.
pub(crate) static RECENT: Mutex<Option<RecentSessions>> = Mutex::new(None);

/// Most senders remembered; past this the map starts over.
pub(crate) const MAX_SENDERS: usize = 10_000;

#[derive(Default)]
pub(crate) struct RecentSessions {
    /// The last session of any sender.
    last: Option<String>,
    /// The last session of each sender (`sender_id`, the gateway's user).
    by_sender: HashMap<String, String>,
    /// More than one sender was seen: the last session may be someone
    /// else's, so it is never shown to a caller who cannot be told apart.
    many_senders: bool,
}

impl RecentSessions {
    /// The session `/meter` shows: `sender`'s last one when the caller is
    /// known, else the last one while this process served one sender only.
    fn for_caller(&self, sender: Option<&str>) -> Option<String> {
        match sender {
            Some(sender) => self.by_sender.get(sender).cloned(),
            None if self.many_senders => None,
            None => self.last.clone(),
        }
    }
}

pub(crate) fn bridge(py: Python<'_>) -> &'static Bridge {
    if let Some(b) = BRIDGE.get() {
        return b;
    }
    // Opening the store is file I/O: do it without the GIL. A second
    // thread arriving meanwhile waits on the OnceLock, not on Python.
    let b = exiting::detach(py, || {
        BRIDGE.get_or_init(|| {
            install_log_layer();
            let mut config = BridgeConfig::from_env();
            config.profile = PROFILE.get().cloned();
            // The gate takes the mode and the fleet as resolved here (the
            // budget file's own `mode` applies unless the variable is set).
            let fleet_name = hermes_meter_runtime::fleet::FleetConfig::from_env()
                .ok()
                .flatten()
                .map(|f| f.redacted());
            let gate = BudgetGate::for_store_dir(&config.store_dir, config.budget_mode_override, config.fleet)
                .with_unsynced(config.fleet_unsynced, fleet_name);
            let _ = BUDGET.set(gate.handle());
            Bridge::start_with_gate(config, Box::new(gate))
        })
    });
    // The export thread starts lazily, on the first hook (start_exporter).
    static EXPORTER_FACTORY: std::sync::Once = std::sync::Once::new();
    EXPORTER_FACTORY.call_once(|| b.set_exporter_factory(Box::new(export_task::factory)));
    if let Some(reason) = b.disabled_reason() {
        log(py, ERROR, "Bridge.Disabled", reason.to_string());
    }
    // A store in trouble at start is said once, now, not at the first hook.
    log_messages(py, b);
    for warning in &b.config().warnings {
        log(py, WARNING, "Config.Invalid", warning.clone());
    }
    b
}

/// Pauses the cron jobs the budget gate asked for, through
/// `hermes_meter._budget.pause_cron_job` (which never raises), and logs the
/// gate's messages.
pub(crate) fn budget_actions(py: Python<'_>) {
    let Some(handle) = BUDGET.get() else { return };
    for text in handle.take_messages() {
        log(py, WARNING, "Budget.Problem", text);
    }
    for pause in handle.take_pauses() {
        let done = py
            .import("hermes_meter._budget")
            .and_then(|m| m.getattr("pause_cron_job")?.call1((&pause.job_id, &pause.reason)))
            .and_then(|r| r.extract::<bool>());
        let why = match done {
            Ok(true) => {
                log(
                    py,
                    WARNING,
                    "Budget.CronPaused",
                    format!("cron job {} paused: {}", pause.job_id, pause.reason),
                );
                continue;
            }
            Ok(false) => String::new(),
            Err(e) => format!(": {e}"),
        };
        let (job, attempt) = (pause.job_id.clone(), pause.attempt);
        let next = if handle.pause_failed(pause, Instant::now()) {
            format!(
                "trying again in {} s (try {attempt} of {MAX_PAUSE_ATTEMPTS})",
                PAUSE_RETRY.as_secs()
            )
        } else {
            format!("giving up after {attempt} tries")
        };
        log(
            py,
            WARNING,
            "Budget.CronPauseFailed",
            format!("cron job {job} could not be paused{why}; {next}"),
        );
    }
}

/// For the `llm_execution` middleware: the stand-in text when the LLM call
/// `api_request_id` must be stopped (a budget in hard breach, enforce
/// mode, decided at its `pre_api_request`), else `None`. Never raises.
#[pyfunction]
#[pyo3(signature = (api_request_id = None))]
fn llm_stop(api_request_id: Option<&str>) -> Option<String> {
    let id = api_request_id?;
    catch_unwind(AssertUnwindSafe(|| BUDGET.get().and_then(|h| h.stop_for(id)))).unwrap_or(None)
}

/// For the `llm_execution` middleware: how many seconds the LLM call
/// `api_request_id` waits before it goes (a rate limit reached,
/// `[rate_limit] action = "wait"`, decided at its `pre_api_request`),
/// taken once; else `None`. Never raises.
#[pyfunction]
#[pyo3(signature = (api_request_id = None))]
fn llm_wait(api_request_id: Option<&str>) -> Option<f64> {
    let id = api_request_id?;
    catch_unwind(AssertUnwindSafe(|| BUDGET.get().and_then(|h| h.wait_for(id)))).unwrap_or(None)
}

/// The stop text for an auxiliary LLM call of `session_id` (Hermes main's
/// `aux-…` calls, which fire no `pre_api_request`): the session's last
/// verdict, when it was a hard breach. Never raises.
///
/// While budgets are enforced it first waits, bounded by the hook wait,
/// for what this process recorded to commit: the spend of the call just
/// before (a turn's last call, then its title) decides, not the verdict
/// taken before that call.
#[pyfunction]
#[pyo3(signature = (session_id = None))]
fn session_stop(py: Python<'_>, session_id: Option<&str>) -> Option<String> {
    let session = session_id.filter(|s| !s.is_empty())?;
    catch_unwind(AssertUnwindSafe(|| {
        let handle = BUDGET.get()?;
        if handle.enforcing() {
            if let Some(b) = BRIDGE.get() {
                let wait = b.config().hook_wait;
                exiting::detach(py, || b.flush(wait));
            }
        }
        handle.session_stop(session)
    }))
    .unwrap_or(None)
}

/// The model the next LLM call of `session_id` to the agent's `model` is
/// routed to by a budget downgrade (`[downgrade]` in the budget file), if
/// the session's last verdict said so. Never raises.
#[pyfunction]
#[pyo3(signature = (session_id = None, model = None))]
fn downgrade_model(session_id: Option<&str>, model: Option<&str>) -> Option<String> {
    let session = session_id.filter(|s| !s.is_empty())?;
    catch_unwind(AssertUnwindSafe(|| {
        BUDGET.get().and_then(|h| h.downgrade_for(session, model))
    }))
    .unwrap_or(None)
}

/// The `model` of the stand-in response of a stopped LLM call.
#[pyfunction]
fn blocked_model() -> &'static str {
    hermes_meter_model::budget::BLOCKED_MODEL
}

/// The sentence every budget text addresses to the agent (left out of the
/// line a person is shown).
#[pyfunction]
fn agent_only_text() -> &'static str {
    hermes_meter_model::budget::NOT_YOURS
}

/// How a refusal to let the agent change its own brake begins (a block
/// that is no budget stop).
#[pyfunction]
fn protected_prefix() -> &'static str {
    hermes_meter_model::budget::PROTECTED_PREFIX
}

/// Who is told of each verdict a gating hook returns (`_oneshot.noted`,
/// called with the verdict's kind and text): set once per process.
pub(crate) static VERDICT_SINK: OnceLock<Py<PyAny>> = OnceLock::new();

/// Sets [`VERDICT_SINK`]; false if it was set already.
#[pyfunction]
fn set_verdict_sink(sink: Py<PyAny>) -> bool {
    VERDICT_SINK.set(sink).is_ok()
}

/// Starts the bridge (opening the store) and returns why it is disabled or
/// what store trouble it is riding out (it retries by itself), or `None`
/// when all is well. Logs that reason once. `profile` is Hermes's
/// `ctx.profile_name`: the first one given is recorded on runs whose calls
/// name no profile. Called again by each profile a multi-profile gateway
/// registers the plugin for, which changes nothing: the bridge is the
/// process's.
#[pyfunction]
#[pyo3(signature = (profile = None))]
fn start(py: Python<'_>, profile: Option<String>) -> Option<String> {
    if let Some(p) = profile.filter(|p| !p.is_empty()) {
        let _ = PROFILE.set(p);
    }
    catch_unwind(AssertUnwindSafe(|| {
        let b = bridge(py);
        b.disabled_reason().map(str::to_string).or_else(|| b.store_problem())
    }))
    .unwrap_or_else(|_| Some("hermes-meter failed to start".into()))
}

/// The hooks to register: the ledger's, without `pre_tool_call` in
/// observe mode.
#[pyfunction]
fn hook_names(py: Python<'_>) -> Vec<&'static str> {
    let mode = bridge(py).config().budget_mode;
    HOOK_NAMES
        .iter()
        .copied()
        .filter(|n| mode == BudgetMode::Enforce || *n != "pre_tool_call")
        .collect()
}

/// `observe` or `enforce`.
#[pyfunction]
fn budget_mode(py: Python<'_>) -> &'static str {
    bridge(py).config().budget_mode.as_str()
}

/// Waits up to `timeout_seconds`, in all, for everything submitted to
/// commit and then for the spans that made ready to be sent (when this
/// process exports). Returns whether everything committed. Never raises.
/// The package calls it when the process exits, `os._exit` included.
#[pyfunction]
#[pyo3(signature = (timeout_seconds = 2.0))]
fn flush(py: Python<'_>, timeout_seconds: f64) -> bool {
    flush_with(py, timeout_seconds, Bridge::flush, Bridge::flush_exporter)
}

/// The flush of a process about to exit (atexit, `os._exit`): commits
/// what is queued, releases the session spans this process held for their
/// grace period and closes what it leaves open, and lets the exporter send
/// what that made ready, all within `timeout_seconds`. Never raises.
#[pyfunction]
fn exit_flush(py: Python<'_>, timeout_seconds: f64) -> bool {
    // Daemon threads' hook calls still running return first, while they
    // can still take the GIL back; later ones keep it (see `exiting.rs`).
    let hook_wait = BRIDGE.get().map_or(Duration::ZERO, |b| b.config().hook_wait);
    let still = exiting::begin_exit(py, hook_wait + EXIT_DRAIN_SLACK);
    if still > 0 {
        log(
            py,
            WARNING,
            "Exit.CallsInFlight",
            format!("{still} hook call(s) on other threads still running at exit"),
        );
    }
    flush_with(py, timeout_seconds, Bridge::flush_at_exit, Bridge::exit_exporter)
}

/// How much longer than a hook's wait for its verdict the exit flush
/// waits for hook calls in flight on other threads.
const EXIT_DRAIN_SLACK: Duration = Duration::from_secs(1);

/// Commits with `commit` (within the timeout), then lets the exporter send
/// what is ready until the same deadline, with the GIL released.
fn flush_with(
    py: Python<'_>,
    timeout_seconds: f64,
    commit: fn(&Bridge, Duration) -> bool,
    export: fn(&Bridge, Instant) -> bool,
) -> bool {
    let Some(b) = BRIDGE.get() else { return true };
    let timeout = Duration::try_from_secs_f64(timeout_seconds.max(0.0)).unwrap_or(bridge::DEFAULT_FLUSH_TIMEOUT);
    let committed = exiting::detach(py, || {
        catch_unwind(AssertUnwindSafe(|| {
            let deadline = std::time::Instant::now() + timeout;
            let committed = commit(b, timeout);
            export(b, deadline);
            committed
        }))
        .unwrap_or(false)
    });
    // What the last export attempts said (a dead collector, say) is the
    // last thing a one-shot process can still tell.
    log_messages(py, b);
    committed
}

/// Counts one call of our hooks Hermes's dispatcher skipped (`_skips.py`):
/// `recorded` when the plugin recorded it anyway. Never raises.
#[pyfunction]
#[pyo3(signature = (recorded, after_timeout = false))]
fn note_hermes_skip(py: Python<'_>, recorded: bool, after_timeout: bool) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        bridge(py).note_hermes_skip(recorded, after_timeout)
    }));
}

/// Counts one call of our hooks Hermes stopped waiting for (`_skips.py`
/// watches its "timed out" line). Never raises.
#[pyfunction]
fn note_hermes_timeout(py: Python<'_>) {
    let _ = catch_unwind(AssertUnwindSafe(|| bridge(py).note_hermes_timeout()));
}

/// Notes what this process found of its Hermes (`_integrations.py`'s
/// report, as JSON) for the store's health record, where `status` reads
/// it. Raises `HermesMeterError` on a report it cannot read.
#[pyfunction]
fn note_hermes(py: Python<'_>, report_json: &str) -> PyResult<()> {
    let value: serde_json::Value =
        serde_json::from_str(report_json).map_err(|e| HermesMeterError::new_err(format!("the Hermes report: {e}")))?;
    let b = bridge(py);
    b.note_hermes(value).map_err(HermesMeterError::new_err)
}

/// Whether the package's integration points still wait to be settled (see
/// `late.rs`); the package says `False` once they are.
#[pyfunction]
fn settle_pending(pending: bool) {
    late::set_pending(pending);
}

/// The hooks registered only where the running Hermes knows them.
#[pyfunction]
fn optional_hooks() -> Vec<&'static str> {
    hook::OPTIONAL_HOOKS.to_vec()
}

/// The bridge's counters, as a dict.
#[pyfunction]
fn stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let s = bridge(py).stats();
    let d = PyDict::new(py);
    for (k, v) in [
        ("submitted", s.submitted),
        ("committed", s.committed),
        ("failed", s.failed),
        ("timed_out", s.timed_out),
        ("dropped", s.dropped),
        ("batches", s.batches),
        ("largest_batch", s.largest_batch),
        ("checkpoints", s.checkpoints),
        ("sweeps", s.sweeps),
    ] {
        d.set_item(k, v)?;
    }
    Ok(d)
}

/// The store directory the bridge uses.
#[pyfunction]
fn store_dir(py: Python<'_>) -> String {
    bridge(py).config().store_dir.display().to_string()
}

/// How long `/meter` waits for the hooks before it to commit.
const SLASH_FLUSH_TIMEOUT: Duration = Duration::from_millis(500);

/// The reply to `/meter`: the session's cost and tokens and today's spend.
/// `session_id` is the one Hermes reports; else the last session of
/// `sender_id` (the gateway user who asked); else, while this process has
/// served one sender only, its last session. Never another user's session.
/// Raises [`HermesMeterError`] if the store cannot be read.
#[pyfunction]
#[pyo3(signature = (raw_args = "", session_id = None, sender_id = None))]
fn meter_command(
    py: Python<'_>,
    raw_args: &str,
    session_id: Option<String>,
    sender_id: Option<String>,
) -> PyResult<String> {
    let _ = raw_args;
    let bridge = bridge(py);
    let dir = bridge.config().store_dir.clone();
    let session = session_id.filter(|s| !s.is_empty()).or_else(|| {
        let sender = sender_id.as_deref().filter(|s| !s.is_empty());
        let recent = RECENT.lock().unwrap_or_else(|p| p.into_inner());
        recent.as_ref().and_then(|r| r.for_caller(sender))
    });
    let result = exiting::detach(py, move || {
        catch_unwind(AssertUnwindSafe(|| {
            // Hooks do not wait for their commits: let this turn's land first.
            bridge.flush(SLASH_FLUSH_TIMEOUT);
            hermes_meter_runtime::slash::meter_command(
                &dir,
                session.as_deref(),
                hermes_meter_store::unix_now(),
                &jiff::tz::TimeZone::system(),
            )
        }))
    });
    match result {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(HermesMeterError::new_err(e.to_string())),
        Err(payload) => Err(HermesMeterError::new_err(format!(
            "/meter failed: {}",
            bridge::panic_text(payload.as_ref())
        ))),
    }
}

/// Where alerts go through Hermes itself (`HERMES_METER_ALERT_DELIVER`) as
/// the configuration reads it; `None` when unset or blank.
#[pyfunction]
fn alert_deliver_target() -> Option<String> {
    hermes_meter_runtime::config::webhook::deliver_target()
}

/// Whether the agent gets the `meter_spend` tool (`HERMES_METER_AGENT_TOOL`).
#[pyfunction]
fn agent_tool_enabled(py: Python<'_>) -> bool {
    bridge(py).config().agent_tool
}

/// The `meter_spend` tool's JSON schema, as JSON text.
#[pyfunction]
fn agent_tool_schema() -> String {
    hermes_meter_runtime::agent_tool::schema().to_string()
}

/// The `meter_spend` tool's answer for `session_id`, as JSON text. Never
/// raises: a failure is `{"error": ...}` for the model to read.
#[pyfunction]
#[pyo3(signature = (session_id = None))]
fn meter_spend(py: Python<'_>, session_id: Option<String>) -> String {
    let bridge = bridge(py);
    let dir = bridge.config().store_dir.clone();
    let result = exiting::detach(py, move || {
        catch_unwind(AssertUnwindSafe(|| {
            // This turn's calls land first, as for `/meter`.
            bridge.flush(SLASH_FLUSH_TIMEOUT);
            hermes_meter_runtime::agent_tool::answer(
                &dir,
                session_id.as_deref(),
                hermes_meter_store::unix_now(),
                &jiff::tz::TimeZone::system(),
            )
        }))
    });
    let error = match result {
        Ok(Ok(value)) => return value.to_string(),
        Ok(Err(e)) => e.to_string(),
        Err(payload) => bridge::panic_text(payload.as_ref()),
    };
    serde_json::json!({ "error": format!("hermes-meter could not read its ledger: {error}") }).to_string()
}

/// For the plugin's delivery of alerts through Hermes (`_deliver.py`): up
/// to `limit` alerts due, each claimed by this process for one send, as
/// `(kind, key, text)`. Empty when there are none, or on any failure
/// (logged, rate-limited, through Python's logging).
#[pyfunction]
#[pyo3(signature = (limit = 5))]
fn claim_alert_deliveries(py: Python<'_>, limit: usize) -> Vec<(String, String, String)> {
    let db = bridge(py).config().store_dir.join(hermes_meter_store::DB_FILE_NAME);
    let claimed = exiting::detach(py, move || {
        catch_unwind(AssertUnwindSafe(|| -> hermes_meter_store::Result<Vec<_>> {
            let store = hermes_meter_store::Outbox::open(&db)?;
            let due = hermes_meter_runtime::export::webhook::claim_due(
                &store,
                AlertSink::Hermes,
                hermes_meter_store::unix_now(),
                limit,
            )?;
            Ok(due
                .into_iter()
                .map(|a| {
                    let text = if a.count > 1 {
                        format!("{} Seen {} times.", a.text, a.count)
                    } else {
                        a.text
                    };
                    (a.kind, a.key, text)
                })
                .collect())
        }))
    });
    match claimed {
        Ok(Ok(alerts)) => alerts,
        Ok(Err(e)) => {
            tracing::warn!(target: "AlertDelivery.Failed", "reading the alerts to deliver: {e}");
            Vec::new()
        }
        Err(payload) => {
            tracing::warn!(target: "AlertDelivery.Failed", "{}", bridge::panic_text(payload.as_ref()));
            Vec::new()
        }
    }
}

/// Writes down how the send of a claimed alert went: `error` `None` when
/// Hermes's sender took it, else why it failed (it is tried again after a
/// backoff). Never raises.
#[pyfunction]
#[pyo3(signature = (kind, key, error = None))]
fn alert_delivery_done(py: Python<'_>, kind: String, key: String, error: Option<String>) {
    let db = bridge(py).config().store_dir.join(hermes_meter_store::DB_FILE_NAME);
    let done = exiting::detach(py, move || {
        catch_unwind(AssertUnwindSafe(|| -> hermes_meter_store::Result<()> {
            let store = hermes_meter_store::Outbox::open(&db)?;
            let outcome = error.as_deref().map_or(Ok(()), Err);
            hermes_meter_runtime::export::webhook::sent(
                &store,
                AlertSink::Hermes,
                &kind,
                &key,
                outcome,
                hermes_meter_store::unix_now(),
            )
        }))
    });
    match done {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(target: "AlertDelivery.Failed", "recording a delivery: {e}"),
        Err(payload) => tracing::warn!(target: "AlertDelivery.Failed", "{}", bridge::panic_text(payload.as_ref())),
    }
}

/// Runs the `hermes-meter` command line with `argv` (program name first) and
/// returns its exit code. Panics become exit code 70 (EX_SOFTWARE).
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    // With the bridge started, this is a Hermes process (`hermes meter ...`),
    // not the `hermes-meter` console script.
    crate::cli::set_embedded(BRIDGE.get().is_some());
    exiting::detach(py, move || {
        catch_unwind(AssertUnwindSafe(|| crate::cli::run(argv))).unwrap_or(70)
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("HermesMeterError", m.py().get_type::<HermesMeterError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Hook>()?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(llm_stop, m)?)?;
    m.add_function(wrap_pyfunction!(llm_wait, m)?)?;
    m.add_function(wrap_pyfunction!(session_stop, m)?)?;
    m.add_function(wrap_pyfunction!(downgrade_model, m)?)?;
    m.add_function(wrap_pyfunction!(blocked_model, m)?)?;
    m.add_function(wrap_pyfunction!(agent_only_text, m)?)?;
    m.add_function(wrap_pyfunction!(protected_prefix, m)?)?;
    m.add_function(wrap_pyfunction!(set_verdict_sink, m)?)?;
    m.add_function(wrap_pyfunction!(hook_names, m)?)?;
    m.add_function(wrap_pyfunction!(budget_mode, m)?)?;
    m.add_function(wrap_pyfunction!(flush, m)?)?;
    m.add_function(wrap_pyfunction!(exit_flush, m)?)?;
    m.add_function(wrap_pyfunction!(optional_hooks, m)?)?;
    m.add_function(wrap_pyfunction!(note_hermes_skip, m)?)?;
    m.add_function(wrap_pyfunction!(note_hermes_timeout, m)?)?;
    m.add_function(wrap_pyfunction!(note_hermes, m)?)?;
    m.add_function(wrap_pyfunction!(settle_pending, m)?)?;
    m.add_function(wrap_pyfunction!(stats, m)?)?;
    m.add_function(wrap_pyfunction!(store_dir, m)?)?;
    m.add_function(wrap_pyfunction!(meter_command, m)?)?;
    m.add_function(wrap_pyfunction!(alert_deliver_target, m)?)?;
    m.add_function(wrap_pyfunction!(agent_tool_enabled, m)?)?;
    m.add_function(wrap_pyfunction!(agent_tool_schema, m)?)?;
    m.add_function(wrap_pyfunction!(meter_spend, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(claim_alert_deliveries, m)?)?;
    m.add_function(wrap_pyfunction!(alert_delivery_done, m)?)?;
    test_hooks::add_to(m)?;
    Ok(())
}
