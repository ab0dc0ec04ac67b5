//! The PyO3 module `hermes_otel._native`: the only code that knows Python.
//!
//! Owns: copying plain values out of hook kwargs while holding the GIL,
//! releasing the GIL for decoding and the store, turning every error and
//! panic into a rate-limited log line on `logging.getLogger("hermes_otel")`,
//! mapping errors to Python exceptions (only here, under one base class
//! [`HermesOtelError`]), and the verdict dicts of the gating hooks. Must not
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
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

use crate::bridge::{self, Bridge, BridgeConfig, BudgetMode, Outcome, Verdict};
use crate::budget_gate::{BudgetGate, BudgetHandle, MAX_PAUSE_ATTEMPTS, PAUSE_RETRY};
use crate::export_task;
use crate::hook::{self, decode, DecodeOptions, Decoded, HookKeys, HOOK_NAMES};
use crate::pricing::ModelPrice;
use crate::spool;
use crate::store::EventContext;

mod record;
use record::Partial;

pyo3::create_exception!(
    hermes_otel._native,
    HermesOtelError,
    PyException,
    "Base class of the errors hermes-otel raises (never from a hook)."
);

/// The logger every line of ours goes to.
const LOGGER: &str = "hermes_otel";

/// The same problem is logged at most once per this interval; the lines in
/// between are counted and the count goes with the next one.
const LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Deepest nesting copied out of a kwarg; deeper values become null.
const MAX_DEPTH: usize = 16;

/// Largest tool result copied when content capture is off: the decoder
/// only parses results up to this size for exit code and error.
const MAX_UNCAPTURED_RESULT_BYTES: usize = 256 * 1024;

/// Python's `logging` levels.
const INFO: i32 = 20;
const WARNING: i32 = 30;
const ERROR: i32 = 40;

/// Log events of the core (`tracing`, e.g. `Export.Failed` from the export
/// thread) waiting for a thread holding the GIL to pass them to `logging`.
/// Taking the GIL from the export thread could stall it behind Hermes, so
/// the next hook call (or `flush`) drains this instead.
static TRACING_QUEUE: Mutex<Vec<(i32, &'static str, String)>> = Mutex::new(Vec::new());

/// Most events kept in [`TRACING_QUEUE`]; later ones are dropped (the rate
/// limiter would suppress them anyway).
const TRACING_QUEUE_MAX: usize = 256;

/// Whether [`TRACING_QUEUE`] holds anything: the hook path checks this
/// instead of taking the lock.
static TRACING_WAITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The `tracing` subscriber of a Hermes process: every event at `info` or
/// above goes to Python's `logging` logger [`LOGGER`], named by its target
/// (`Export.Failed: ...`), through [`log`]'s rate limit.
struct PythonLogLayer;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for PythonLogLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                use std::fmt::Write as _;
                if field.name() == "message" {
                    let _ = write!(self.0, "{value:?}");
                } else {
                    let _ = write!(self.0, " {}={value:?}", field.name());
                }
            }
        }
        let meta = event.metadata();
        let level = match *meta.level() {
            tracing::Level::ERROR => ERROR,
            tracing::Level::WARN => WARNING,
            _ => INFO,
        };
        let mut text = Text(String::new());
        event.record(&mut text);
        let mut queue = TRACING_QUEUE.lock().unwrap_or_else(|p| p.into_inner());
        if queue.len() < TRACING_QUEUE_MAX {
            queue.push((level, meta.target(), text.0.trim().to_string()));
            TRACING_WAITING.store(true, std::sync::atomic::Ordering::Release);
        }
    }
}

/// Makes [`PythonLogLayer`] the process's subscriber, unless the host
/// already installed one (then events go there).
fn install_log_layer() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::Layer as _;
    let subscriber =
        tracing_subscriber::registry().with(PythonLogLayer.with_filter(tracing_subscriber::filter::LevelFilter::INFO));
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Passes queued `tracing` events to `logging` (rate-limited per event).
fn log_tracing_events(py: Python<'_>) {
    if !TRACING_WAITING.swap(false, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let events = std::mem::take(&mut *TRACING_QUEUE.lock().unwrap_or_else(|p| p.into_inner()));
    for (level, target, text) in events {
        log(py, level, target, text);
    }
}

/// The process's bridge, started on first use.
static BRIDGE: OnceLock<Bridge> = OnceLock::new();

/// The Hermes profile of this process, given by `register` before the
/// bridge starts.
static PROFILE: OnceLock<String> = OnceLock::new();

/// The budget gate's handle: LLM calls to stop, cron jobs to pause.
static BUDGET: OnceLock<BudgetHandle> = OnceLock::new();

/// The top-level sessions turns started in, for `/otel` when Hermes does
/// not say which session it is in.
static RECENT: Mutex<Option<RecentSessions>> = Mutex::new(None);

/// Most senders remembered; past this the map starts over.
const MAX_SENDERS: usize = 10_000;

#[derive(Default)]
struct RecentSessions {
    /// The last session of any sender.
    last: Option<String>,
    /// The last session of each sender (`sender_id`, the gateway's user).
    by_sender: HashMap<String, String>,
    /// More than one sender was seen: the last session may be someone
    /// else's, so it is never shown to a caller who cannot be told apart.
    many_senders: bool,
}

impl RecentSessions {
    /// The session `/otel` shows: `sender`'s last one when the caller is
    /// known, else the last one while this process served one sender only.
    fn for_caller(&self, sender: Option<&str>) -> Option<String> {
        match sender {
            Some(sender) => self.by_sender.get(sender).cloned(),
            None if self.many_senders => None,
            None => self.last.clone(),
        }
    }
}

fn bridge(py: Python<'_>) -> &'static Bridge {
    if let Some(b) = BRIDGE.get() {
        return b;
    }
    // Opening the store is file I/O: do it without the GIL. A second
    // thread arriving meanwhile waits on the OnceLock, not on Python.
    let b = py.detach(|| {
        BRIDGE.get_or_init(|| {
            install_log_layer();
            let mut config = BridgeConfig::from_env();
            config.profile = PROFILE.get().cloned();
            let gate = BudgetGate::for_store_dir(&config.store_dir);
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

/// One registered hook: a native callable Hermes calls as `cb(**kwargs)`.
#[pyclass(frozen, module = "hermes_otel._native")]
struct Hook {
    name: &'static str,
    /// The kwargs read (see [`HookKeys`]), as interned Python strings: a
    /// lookup then allocates nothing and hashes nothing.
    always: Vec<(&'static str, Py<PyString>)>,
    content: Vec<(&'static str, Py<PyString>)>,
}

#[pymethods]
impl Hook {
    #[new]
    fn new(py: Python<'_>, name: &str) -> PyResult<Self> {
        let name = HOOK_NAMES
            .iter()
            .find(|n| **n == name)
            .ok_or_else(|| HermesOtelError::new_err(format!("unknown hook {name:?}")))?;
        let keys: HookKeys =
            hook::keys(name).ok_or_else(|| HermesOtelError::new_err(format!("no keys for hook {name:?}")))?;
        let intern = |keys: &[&'static str]| -> Vec<(&'static str, Py<PyString>)> {
            keys.iter().map(|k| (*k, PyString::intern(py, k).unbind())).collect()
        };
        Ok(Hook {
            name,
            always: intern(keys.always),
            content: intern(keys.content),
        })
    }

    /// The hook's Hermes name.
    #[getter]
    fn name(&self) -> &'static str {
        self.name
    }

    fn __repr__(&self) -> String {
        format!("<hermes_otel hook {}>", self.name)
    }

    /// Records one call. Returns the verdict dict of a gating hook, else
    /// `None`. Never raises.
    #[pyo3(signature = (*_args, **kwargs))]
    fn __call__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> Py<PyAny> {
        match catch_unwind(AssertUnwindSafe(|| self.call(py, kwargs))) {
            Ok(Some(verdict)) => verdict,
            Ok(None) => py.None(),
            Err(payload) => {
                log(
                    py,
                    ERROR,
                    "Hook.Panicked",
                    format!(
                        "{} hook panicked ({}); the call was not recorded",
                        self.name,
                        bridge::panic_text(payload.as_ref())
                    ),
                );
                py.None()
            }
        }
    }
}

impl Hook {
    fn call(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> Option<Py<PyAny>> {
        let bridge = bridge(py);
        if bridge.disabled_reason().is_some() {
            return None;
        }
        let at = bridge::unix_now();
        let ctx = EventContext {
            pid: Some(i64::from(std::process::id())),
            thread: thread_name(py),
            problems: Vec::new(),
        };
        let text = |key: &str| kwargs.and_then(|kwargs| self.text(kwargs, key));
        if matches!(self.name, "post_api_request" | "post_auxiliary_call") {
            if let Some(model) = text("model").filter(|m| bridge.needs_host_price(m)) {
                offer_host_price(py, bridge, &model, text("provider"), text("base_url"));
            }
        }
        if self.name == "pre_llm_call" {
            remember_session(text("session_id"), text("platform").as_deref(), text("sender_id"));
        }
        let outcome = if bridge.decodes_later(self.name) {
            self.submit_line(py, bridge, kwargs, at, ctx)
        } else {
            self.submit_decoded(py, bridge, kwargs, at, ctx)
        };
        log_messages(py, bridge);
        if matches!(self.name, "pre_llm_call" | "pre_tool_call" | "pre_api_request") {
            budget_actions(py);
        }
        outcome.verdict().map(|v| verdict_dict(py, v))
    }

    /// While no gate waits on any hook: writes the call's spool record
    /// straight from `kwargs` and leaves decoding to the writer thread.
    fn submit_line(
        &self,
        py: Python<'_>,
        bridge: &'static Bridge,
        kwargs: Option<&Bound<'_, PyDict>>,
        at: f64,
        ctx: EventContext,
    ) -> Outcome {
        let opts = bridge.config().decode;
        let name = self.name;
        let mut partial = Partial::begin(name, at, ctx.pid, ctx.thread.as_deref(), opts.capture_content);
        if let Some(kwargs) = kwargs {
            self.write_kwargs(kwargs, &mut partial, opts.capture_content);
        }
        let panic_here = self.test_panic(bridge);
        py.detach(move || {
            if panic_here {
                panic!("{} set to {name}: panicking on purpose", bridge::env::TEST_PANIC);
            }
            bridge.start_exporter();
            // Scrubbing (redacting a large prompt is a scan) without the GIL.
            let line = partial.finish(name, opts);
            bridge.submit_line(name, line, at, ctx)
        })
    }

    /// While a gate may give this call a verdict: copies and decodes it here,
    /// so the gate sees the event before the hook returns.
    fn submit_decoded(
        &self,
        py: Python<'_>,
        bridge: &'static Bridge,
        kwargs: Option<&Bound<'_, PyDict>>,
        at: f64,
        ctx: EventContext,
    ) -> Outcome {
        let capture = bridge.config().decode.capture_content;
        let kw = match kwargs {
            Some(kwargs) => self.copy_kwargs(kwargs, capture),
            None => Map::new(),
        };
        let name = self.name;
        let panic_here = self.test_panic(bridge);
        let (outcome, unusable) = py.detach(move || {
            if panic_here {
                panic!("{} set to {name}: panicking on purpose", bridge::env::TEST_PANIC);
            }
            bridge.start_exporter();
            // Content is redacted and cut (or, with capture off, reduced to
            // the facts the decoder reads) before the spool or the store
            // sees it; off the GIL, since redacting a large prompt is a scan.
            let mut kw = kw;
            hook::scrub(name, &mut kw, bridge.config().decode);
            match decode(name, &kw, at, bridge.config().decode) {
                Decoded::Event(event, problems) => {
                    let record = spool::record(name, at, ctx.pid, ctx.thread.as_deref(), &kw, capture);
                    let ctx = EventContext { problems, ..ctx };
                    (bridge.submit_recorded(event, ctx, Some(&record)), None)
                }
                Decoded::Unusable(problems) => (Outcome::Failed, Some(problems)),
                Decoded::Ignored => (Outcome::Committed(None), None),
            }
        });
        if let Some(problems) = unusable {
            let what: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
            log(
                py,
                WARNING,
                "Decode.Unusable",
                format!("{name} call not recorded: {}", what.join("; ")),
            );
        }
        outcome
    }

    /// The string kwarg `key` (one of the keys the decoder reads, looked up
    /// by its interned name), or `None`.
    fn text(&self, kwargs: &Bound<'_, PyDict>, key: &str) -> Option<String> {
        let (_, py_key) = self.always.iter().find(|(k, _)| *k == key)?;
        let value = kwargs.get_item(py_key.bind(kwargs.py())).ok()??;
        Some(value.cast::<PyString>().ok()?.to_string_lossy().into_owned())
    }

    /// Test-only: `HERMES_OTEL_TEST_PANIC=<hook>` (or `*` for every hook).
    fn test_panic(&self, bridge: &Bridge) -> bool {
        matches!(bridge.config().test_panic_hook.as_deref(), Some(h) if h == self.name || h == "*")
    }

    /// The kwargs read, with their interned names: content ones only when
    /// capturing.
    fn keys(&self, capture: bool) -> impl Iterator<Item = &(&'static str, Py<PyString>)> {
        let content: &[(&str, Py<PyString>)] = if capture { &self.content } else { &[] };
        self.always.iter().chain(content)
    }

    /// Writes the kwargs the decoder reads into `partial`: plain ones at
    /// once, the ones [`hook::scrub`] may change as copies for later.
    fn write_kwargs(&self, kwargs: &Bound<'_, PyDict>, partial: &mut Partial, capture: bool) {
        let py = kwargs.py();
        for (key, py_key) in self.keys(capture) {
            let Ok(Some(value)) = kwargs.get_item(py_key.bind(py)) else {
                continue;
            };
            if hook::scrubbed_key(self.name, key) {
                let copied = copy_value(key, &value, capture);
                if !copied.is_null() {
                    partial.scrub_later(key, copied);
                }
            } else {
                partial.plain(key, &value);
            }
        }
    }

    /// Copies the keys the decoder reads out of `kwargs` as plain JSON values.
    fn copy_kwargs(&self, kwargs: &Bound<'_, PyDict>, capture: bool) -> Map<String, Value> {
        let py = kwargs.py();
        let mut out = Map::new();
        for (key, py_key) in self.keys(capture) {
            let Ok(Some(value)) = kwargs.get_item(py_key.bind(py)) else {
                continue;
            };
            let copied = copy_value(key, &value, capture);
            if !copied.is_null() {
                out.insert((*key).to_string(), copied);
            }
        }
        out
    }
}

/// A plain copy of the kwarg `key`: the two live objects Hermes passes are
/// read as the decoder needs them, everything else is copied as it is.
fn copy_value(key: &str, value: &Bound<'_, PyAny>, capture: bool) -> Value {
    match key {
        hook::ASSISTANT_MESSAGE => assistant_message(value),
        hook::TOOL_RESULT => tool_result(value, capture),
        _ => to_json(value, 0),
    }
}

/// `assistant_message` is a live `NormalizedResponse`: read its `content`
/// attribute only (a dict, as the recorded fixtures hold, is copied).
fn assistant_message(value: &Bound<'_, PyAny>) -> Value {
    if value.is_instance_of::<PyDict>() {
        return to_json(value, 0);
    }
    match value.getattr_opt("content") {
        Ok(Some(content)) if content.is_instance_of::<PyString>() => {
            let mut fields = Map::new();
            fields.insert("content".into(), to_json(&content, 0));
            let mut outer = Map::new();
            outer.insert("fields".into(), Value::Object(fields));
            Value::Object(outer)
        }
        _ => Value::Null,
    }
}

/// A tool result: copied when capturing, else only when it could be the
/// JSON status object the decoder reads facts from.
fn tool_result(value: &Bound<'_, PyAny>, capture: bool) -> Value {
    let Ok(s) = value.cast::<PyString>() else {
        return if capture { to_json(value, 0) } else { Value::Null };
    };
    let text = s.to_string_lossy();
    if capture || (text.len() <= MAX_UNCAPTURED_RESULT_BYTES && text.trim_start().starts_with('{')) {
        Value::String(text.into_owned())
    } else {
        Value::Null
    }
}

/// A plain copy of a Python value: None, bool, int, float, str, dict,
/// list and tuple; anything else (a live object) becomes null.
fn to_json(value: &Bound<'_, PyAny>, depth: usize) -> Value {
    if value.is_none() || depth > MAX_DEPTH {
        return Value::Null;
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Value::Bool(b.is_true());
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(i) = value.extract::<i64>() {
            return Value::from(i);
        }
        if let Ok(u) = value.extract::<u64>() {
            return Value::from(u);
        }
        return value
            .extract::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map_or(Value::Null, Value::Number);
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Number::from_f64(f.value()).map_or(Value::Null, Value::Number);
    }
    if let Ok(s) = value.cast::<PyString>() {
        // Lossy: a str holding a lone surrogate cannot be UTF-8; its
        // surrogates become U+FFFD rather than the whole value being lost.
        return Value::String(s.to_string_lossy().into_owned());
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            if let Ok(k) = k.cast::<PyString>() {
                map.insert(k.to_string_lossy().into_owned(), to_json(&v, depth + 1));
            }
        }
        return Value::Object(map);
    }
    if let Ok(l) = value.cast::<PyList>() {
        return Value::Array(l.iter().map(|v| to_json(&v, depth + 1)).collect());
    }
    if let Ok(t) = value.cast::<PyTuple>() {
        return Value::Array(t.iter().map(|v| to_json(&v, depth + 1)).collect());
    }
    Value::Null
}

/// How long a thread's name is taken as known. Asking Python costs a
/// call into `threading` on every hook; a rename shows up this much later.
const THREAD_NAME_TTL: Duration = Duration::from_secs(1);

thread_local! {
    static THREAD_NAME: std::cell::RefCell<Option<(Instant, Option<String>)>> =
        const { std::cell::RefCell::new(None) };
}

/// The calling Python thread's name, asked at most once a
/// [`THREAD_NAME_TTL`] per thread.
fn thread_name(py: Python<'_>) -> Option<String> {
    let now = Instant::now();
    let cached = THREAD_NAME.with_borrow(|c| match c {
        Some((at, name)) if now.duration_since(*at) < THREAD_NAME_TTL => Some(name.clone()),
        _ => None,
    });
    if let Some(name) = cached {
        return name;
    }
    let name = ask_thread_name(py);
    THREAD_NAME.set(Some((now, name.clone())));
    name
}

fn ask_thread_name(py: Python<'_>) -> Option<String> {
    static CURRENT_THREAD: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let f = CURRENT_THREAD
        .get_or_try_init(py, || {
            py.import("threading")
                .and_then(|m| m.getattr("current_thread"))
                .map(Bound::unbind)
        })
        .ok()?;
    let name = f.bind(py).call0().ok()?.getattr("name").ok()?;
    name.extract::<String>().ok()
}

fn remember_session(session_id: Option<String>, platform: Option<&str>, sender_id: Option<String>) {
    if platform == Some("subagent") {
        return;
    }
    let Some(id) = session_id else {
        return;
    };
    let mut guard = RECENT.lock().unwrap_or_else(|p| p.into_inner());
    let recent = guard.get_or_insert_with(RecentSessions::default);
    if recent.last.as_deref() != Some(id.as_str()) {
        recent.last = Some(id.clone());
    }
    if let Some(sender) = sender_id.filter(|s| !s.is_empty()) {
        if recent.by_sender.get(&sender) != Some(&id) {
            if recent.by_sender.len() >= MAX_SENDERS {
                recent.by_sender.clear();
            }
            recent.by_sender.insert(sender, id);
        }
        recent.many_senders |= recent.by_sender.len() > 1;
    }
}

/// Asks Hermes (through `hermes_otel._host_pricing`) for the price of a
/// model no table knows, at most once a minute per model. That helper only
/// reads what Hermes already fetched: no network I/O on the agent thread.
/// Only for a model [`Bridge::needs_host_price`] said to ask about.
fn offer_host_price(py: Python<'_>, bridge: &Bridge, model: &str, provider: Option<String>, base_url: Option<String>) {
    static LOOKUP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let lookup = match LOOKUP.get_or_try_init(py, || {
        py.import("hermes_otel._host_pricing")
            .and_then(|m| m.getattr("lookup"))
            .map(Bound::unbind)
    }) {
        Ok(f) => f.bind(py),
        Err(e) => {
            log(
                py,
                WARNING,
                "HostPrice.Unavailable",
                format!("cannot load the host price lookup: {e}"),
            );
            return;
        }
    };
    let price = match lookup.call1((model, provider, base_url)) {
        Ok(p) if p.is_none() => return,
        Ok(p) => p,
        Err(e) => {
            log(
                py,
                WARNING,
                "HostPrice.Failed",
                format!("host price lookup for {model} failed: {e}"),
            );
            return;
        }
    };
    let Ok(price) = price.cast::<PyDict>() else { return };
    let get = |k: &str| -> Option<f64> { price.get_item(k).ok().flatten().and_then(|v| v.extract::<f64>().ok()) };
    let (Some(input), Some(output)) = (get("input"), get("output")) else {
        return;
    };
    let all = [Some(input), Some(output), get("cache_read"), get("cache_write")];
    if all.iter().flatten().any(|p| !p.is_finite() || *p < 0.0) {
        return;
    }
    bridge.set_host_price(
        model,
        ModelPrice {
            cache_read: get("cache_read"),
            cache_write: get("cache_write"),
            ..ModelPrice::flat(input, output)
        },
    );
}

fn verdict_dict(py: Python<'_>, verdict: &Verdict) -> Py<PyAny> {
    let d = PyDict::new(py);
    let filled = match verdict {
        Verdict::Block { message } => d
            .set_item("action", "block")
            .and_then(|_| d.set_item("message", message)),
        Verdict::Context { text } => d.set_item("context", text),
    };
    match filled {
        Ok(()) => d.into_any().unbind(),
        Err(_) => py.None(),
    }
}

/// Logs what the writer left for us: recoveries as warnings (worth
/// knowing, nothing to do), everything else as errors.
fn log_messages(py: Python<'_>, bridge: &Bridge) {
    log_tracing_events(py);
    if !bridge.has_messages() {
        return;
    }
    for m in bridge.take_messages() {
        // Recoveries and calls the decoder could not use are worth knowing
        // but need nothing done; everything else is an error.
        let level = if m.event.ends_with("Recovered") || m.event == "Decode.Unusable" {
            WARNING
        } else {
            ERROR
        };
        log(py, level, m.event, m.text);
    }
}

/// Per-event rate limiting of log lines: (last logged, suppressed since).
static LOG_STATE: Mutex<Option<HashMap<&'static str, (Instant, u64)>>> = Mutex::new(None);

/// Logs `text` through `logging.getLogger("hermes_otel")`, at most once per
/// [`LOG_INTERVAL`] per event. Never raises, never panics.
fn log(py: Python<'_>, level: i32, event: &'static str, text: String) {
    let suppressed = {
        let mut state = LOG_STATE.lock().unwrap_or_else(|p| p.into_inner());
        let map = state.get_or_insert_with(HashMap::new);
        let now = Instant::now();
        match map.get_mut(event) {
            Some((last, count)) if now.duration_since(*last) < LOG_INTERVAL => {
                *count += 1;
                return;
            }
            Some((last, count)) => {
                let n = *count;
                *last = now;
                *count = 0;
                n
            }
            None => {
                map.insert(event, (now, 0));
                0
            }
        }
    };
    let line = if suppressed > 0 {
        format!("{event}: {text} ({suppressed} similar lines suppressed)")
    } else {
        format!("{event}: {text}")
    };
    let _ = py
        .import("logging")
        .and_then(|m| m.getattr("getLogger")?.call1((LOGGER,)))
        .and_then(|logger| logger.call_method1("log", (level, line)));
}

/// Pauses the cron jobs the budget gate asked for, through
/// `hermes_otel._budget.pause_cron_job` (which never raises), and logs the
/// gate's messages.
fn budget_actions(py: Python<'_>) {
    let Some(handle) = BUDGET.get() else { return };
    for text in handle.take_messages() {
        log(py, WARNING, "Budget.Problem", text);
    }
    for pause in handle.take_pauses() {
        let done = py
            .import("hermes_otel._budget")
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
    catch_unwind(AssertUnwindSafe(|| BUDGET.get().and_then(|h| h.take_stop(id)))).unwrap_or(None)
}

/// The `model` of the stand-in response of a stopped LLM call.
#[pyfunction]
fn blocked_model() -> &'static str {
    crate::budget::BLOCKED_MODEL
}

/// Starts the bridge (opening the store) and returns why it is disabled or
/// what store trouble it is riding out (it retries by itself), or `None`
/// when all is well. Logs that reason once. `profile` is Hermes's
/// `ctx.profile_name`, recorded on runs for per-profile budgets.
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
    .unwrap_or_else(|_| Some("hermes-otel failed to start".into()))
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
    flush_with(py, timeout_seconds, Bridge::flush)
}

/// The flush of a process about to exit (atexit, `os._exit`): commits
/// what is queued, releases the session spans this process held for their
/// grace period and closes what it leaves open, and lets the exporter send
/// what that made ready, all within `timeout_seconds`. Never raises.
#[pyfunction]
fn exit_flush(py: Python<'_>, timeout_seconds: f64) -> bool {
    flush_with(py, timeout_seconds, Bridge::flush_at_exit)
}

/// Commits with `commit` (within the timeout), then lets the exporter send
/// what is ready until the same deadline, with the GIL released.
fn flush_with(py: Python<'_>, timeout_seconds: f64, commit: fn(&Bridge, Duration) -> bool) -> bool {
    let Some(b) = BRIDGE.get() else { return true };
    let timeout = Duration::try_from_secs_f64(timeout_seconds.max(0.0)).unwrap_or(bridge::DEFAULT_FLUSH_TIMEOUT);
    let committed = py.detach(|| {
        catch_unwind(AssertUnwindSafe(|| {
            let deadline = std::time::Instant::now() + timeout;
            let committed = commit(b, timeout);
            b.flush_exporter(deadline);
            committed
        }))
        .unwrap_or(false)
    });
    // What the last export attempts said (a dead collector, say) is the
    // last thing a one-shot process can still tell.
    log_messages(py, b);
    committed
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

/// How long `/otel` waits for the hooks before it to commit.
const SLASH_FLUSH_TIMEOUT: Duration = Duration::from_millis(500);

/// The reply to `/otel`: the session's cost and tokens and today's spend.
/// `session_id` is the one Hermes reports; else the last session of
/// `sender_id` (the gateway user who asked); else, while this process has
/// served one sender only, its last session. Never another user's session.
/// Raises [`HermesOtelError`] if the store cannot be read.
#[pyfunction]
#[pyo3(signature = (raw_args = "", session_id = None, sender_id = None))]
fn otel_command(
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
    let result = py.detach(move || {
        catch_unwind(AssertUnwindSafe(|| {
            // Hooks do not wait for their commits: let this turn's land first.
            bridge.flush(SLASH_FLUSH_TIMEOUT);
            crate::slash::otel_command(
                &dir,
                session.as_deref(),
                bridge::unix_now(),
                &jiff::tz::TimeZone::system(),
            )
        }))
    });
    match result {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(HermesOtelError::new_err(e.to_string())),
        Err(payload) => Err(HermesOtelError::new_err(format!(
            "/otel failed: {}",
            bridge::panic_text(payload.as_ref())
        ))),
    }
}

/// Runs the `hermes-otel` command line with `argv` (program name first) and
/// returns its exit code. Panics become exit code 70 (EX_SOFTWARE).
#[pyfunction]
fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    // With the bridge started, this is a Hermes process (`hermes otel ...`),
    // not the `hermes-otel` console script.
    crate::cli::set_embedded(BRIDGE.get().is_some());
    py.detach(move || catch_unwind(AssertUnwindSafe(|| crate::cli::run(argv))).unwrap_or(70))
}

/// For tests: the spool record of one `hook` call both ways the binding
/// writes it, straight from the kwargs (no gate waiting) and from the
/// copied map (a gate waiting), with capture on or off. The two must hold
/// the same kwargs.
#[pyfunction]
#[pyo3(signature = (hook, kwargs, capture))]
fn _spool_records(py: Python<'_>, hook: &str, kwargs: &Bound<'_, PyDict>, capture: bool) -> PyResult<(String, String)> {
    let hook = Hook::new(py, hook)?;
    let opts = DecodeOptions {
        capture_content: capture,
        ..DecodeOptions::default()
    };
    let mut partial = Partial::begin(hook.name, 1.5, Some(1), Some("t"), capture);
    hook.write_kwargs(kwargs, &mut partial, capture);
    let direct = partial.finish(hook.name, opts);
    let mut kw = hook.copy_kwargs(kwargs, capture);
    hook::scrub(hook.name, &mut kw, opts);
    let copied = spool::record(hook.name, 1.5, Some(1), Some("t"), &kw, capture);
    let text = |b: Vec<u8>| String::from_utf8(b).map_err(|e| HermesOtelError::new_err(e.to_string()));
    Ok((text(direct)?, text(copied)?))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("HermesOtelError", m.py().get_type::<HermesOtelError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Hook>()?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(llm_stop, m)?)?;
    m.add_function(wrap_pyfunction!(blocked_model, m)?)?;
    m.add_function(wrap_pyfunction!(hook_names, m)?)?;
    m.add_function(wrap_pyfunction!(budget_mode, m)?)?;
    m.add_function(wrap_pyfunction!(flush, m)?)?;
    m.add_function(wrap_pyfunction!(exit_flush, m)?)?;
    m.add_function(wrap_pyfunction!(optional_hooks, m)?)?;
    m.add_function(wrap_pyfunction!(stats, m)?)?;
    m.add_function(wrap_pyfunction!(store_dir, m)?)?;
    m.add_function(wrap_pyfunction!(otel_command, m)?)?;
    m.add_function(wrap_pyfunction!(cli_main, m)?)?;
    m.add_function(wrap_pyfunction!(_spool_records, m)?)?;
    Ok(())
}
