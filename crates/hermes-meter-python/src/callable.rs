//! The hook callables Hermes calls (`Hook`): copying the call out while
//! holding the GIL, releasing it to hand the call to the bridge, the
//! verdict dicts of gating hooks, and the host-price question.
//!
//! Owns: one hook call from Python to the bridge, never raising: a panic or
//! error becomes a log line. Must not touch: the store directly, Hermes
//! objects after the call returned.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::copy::{copy_value, is_read_specially};
use super::exiting::{self, Entry};
use super::log::{log, log_messages, ERROR, WARNING};
use super::record::Partial;
use super::{bridge, budget_actions, test_hooks, HermesMeterError, RecentSessions, BRIDGE, MAX_SENDERS, RECENT};
use hermes_meter_model::hook::{self, HookKeys, Origin, HOOK_NAMES};
use hermes_meter_model::pricing::ModelPrice;
use hermes_meter_runtime::bridge::{Bridge, Outcome, Verdict};
use hermes_meter_store::EventContext;

/// One registered hook: a native callable Hermes calls as `cb(**kwargs)`.
#[pyclass(frozen, module = "hermes_meter._native")]
pub(super) struct Hook {
    pub(super) name: &'static str,
    /// The Hermes profile whose `register(ctx)` made this hook: written
    /// into each call's record. A multi-profile gateway registers the
    /// plugin once per profile, and Hermes passes no profile to a hook.
    profile: Option<String>,
    /// The kwargs read (see [`HookKeys`]), as interned Python strings: a
    /// lookup then allocates nothing and hashes nothing.
    always: Vec<(&'static str, Py<PyString>)>,
    content: Vec<(&'static str, Py<PyString>)>,
    digested: Vec<(&'static str, Py<PyString>)>,
}

#[pymethods]
impl Hook {
    #[new]
    #[pyo3(signature = (name, profile = None))]
    pub(super) fn new(py: Python<'_>, name: &str, profile: Option<String>) -> PyResult<Self> {
        let name = HOOK_NAMES
            .iter()
            .find(|n| **n == name)
            .ok_or_else(|| HermesMeterError::new_err(format!("unknown hook {name:?}")))?;
        let keys: HookKeys =
            hook::keys(name).ok_or_else(|| HermesMeterError::new_err(format!("no keys for hook {name:?}")))?;
        let intern = |keys: &[&'static str]| -> Vec<(&'static str, Py<PyString>)> {
            keys.iter().map(|k| (*k, PyString::intern(py, k).unbind())).collect()
        };
        Ok(Hook {
            name,
            profile: profile.filter(|p| !p.is_empty()),
            always: intern(keys.always),
            content: intern(keys.content),
            digested: intern(keys.digested),
        })
    }

    /// The hook's Hermes name.
    #[getter]
    fn name(&self) -> &'static str {
        self.name
    }

    /// The Hermes profile its calls are recorded for, if known.
    #[getter]
    fn profile(&self) -> Option<&str> {
        self.profile.as_deref()
    }

    fn __repr__(&self) -> String {
        match &self.profile {
            Some(profile) => format!("<hermes_meter hook {} of profile {profile}>", self.name),
            None => format!("<hermes_meter hook {}>", self.name),
        }
    }

    /// Records one call. Returns the verdict dict of a gating hook, else
    /// `None`. Never raises.
    #[pyo3(signature = (*_args, **kwargs))]
    fn __call__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>, kwargs: Option<&Bound<'_, PyDict>>) -> Py<PyAny> {
        match exiting::enter() {
            Entry::Normal(_in_flight) => self
                .guarded(py, || {
                    super::late::settle_if_pending(py);
                    self.call(py, kwargs)
                })
                .flatten()
                .unwrap_or_else(|| py.None()),
            Entry::AtExit => {
                let _ = catch_unwind(AssertUnwindSafe(|| self.record_at_exit(kwargs)));
                py.None()
            }
        }
    }

    /// Records one call Hermes's dispatcher skipped (see `_skips.py`):
    /// as `__call__`, except that it never waits (Hermes holds its lock and
    /// reads no verdict). Returns whether the call was handed to the bridge.
    /// Never raises.
    #[pyo3(signature = (**kwargs))]
    fn record_skipped(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> bool {
        let outcome = match exiting::enter() {
            Entry::Normal(_in_flight) => self.guarded(py, || self.record(py, kwargs, false)),
            Entry::AtExit => catch_unwind(AssertUnwindSafe(|| self.record_at_exit(kwargs))).ok(),
        };
        outcome.is_some_and(|outcome| !matches!(outcome, Outcome::Disabled | Outcome::Failed))
    }
}

impl Hook {
    /// Runs `f`; a panic becomes a logged error and `None`, never a
    /// `BaseException` in Hermes.
    fn guarded<T>(&self, py: Python<'_>, f: impl FnOnce() -> T) -> Option<T> {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(value) => Some(value),
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
                None
            }
        }
    }

    fn call(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> Option<Py<PyAny>> {
        self.record(py, kwargs, true).verdict().map(|v| verdict_dict(py, v))
    }

    /// One call handed to the bridge; `may_wait` as in [`Bridge::record_line`].
    fn record(&self, py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>, may_wait: bool) -> Outcome {
        let bridge = bridge(py);
        if bridge.disabled_reason().is_some() {
            return Outcome::Disabled;
        }
        let at = hermes_meter_store::unix_now();
        let ctx = EventContext {
            pid: Some(i64::from(std::process::id())),
            thread: thread_name(py),
            // Written into the call's record below; the bridge takes it
            // from there, as recovery and replay do.
            profile: None,
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
        let outcome = self.submit(py, bridge, kwargs, at, ctx, may_wait);
        log_messages(py, bridge);
        if may_wait && matches!(self.name, "pre_llm_call" | "pre_tool_call" | "pre_api_request") {
            budget_actions(py);
        }
        outcome
    }

    /// A call on another thread than the exiting one once the process
    /// exits (see `exiting.rs`): spooled and queued with the GIL held, no
    /// Python code run (no thread name asked, nothing logged), no wait, so
    /// no verdict. A process whose bridge never started records nothing.
    fn record_at_exit(&self, kwargs: Option<&Bound<'_, PyDict>>) -> Outcome {
        let Some(bridge) = BRIDGE.get() else {
            return Outcome::Disabled;
        };
        if bridge.disabled_reason().is_some() {
            return Outcome::Disabled;
        }
        let at = hermes_meter_store::unix_now();
        let ctx = EventContext {
            pid: Some(i64::from(std::process::id())),
            thread: THREAD_NAME.with_borrow(|c| c.as_ref().and_then(|(_, name)| name.clone())),
            profile: None,
            problems: Vec::new(),
        };
        let opts = bridge.config().decode;
        let line = self
            .partial(kwargs, at, &ctx, opts.capture_content)
            .finish(self.name, opts);
        bridge.record_line(self.name, line, at, ctx)
    }

    /// The call's spool record, begun with the GIL held: its plain kwargs
    /// written, the ones to scrub copied.
    fn partial(&self, kwargs: Option<&Bound<'_, PyDict>>, at: f64, ctx: &EventContext, capture: bool) -> Partial {
        let origin = Origin {
            pid: ctx.pid,
            thread: ctx.thread.as_deref(),
            profile: self.profile.as_deref(),
        };
        let mut partial = Partial::begin(self.name, at, origin, capture);
        if let Some(kwargs) = kwargs {
            self.write_kwargs(kwargs, &mut partial, capture);
        }
        partial
    }

    /// Writes the call's spool record straight from `kwargs` and hands it
    /// to the bridge, which decodes it on this thread when a gate may give
    /// the call a verdict, else leaves that to the writer thread
    /// ([`Bridge::submit_line`]).
    fn submit(
        &self,
        py: Python<'_>,
        bridge: &'static Bridge,
        kwargs: Option<&Bound<'_, PyDict>>,
        at: f64,
        ctx: EventContext,
        may_wait: bool,
    ) -> Outcome {
        let opts = bridge.config().decode;
        let name = self.name;
        let partial = self.partial(kwargs, at, &ctx, opts.capture_content);
        py.detach(move || {
            test_hooks::panic_if_asked(bridge.config(), name);
            bridge.start_exporter();
            // Content is redacted and cut (or, with capture off, reduced to
            // the facts the decoder reads) before the spool or the store
            // sees it; off the GIL, since redacting a large prompt is a scan.
            let line = partial.finish(name, opts);
            if may_wait {
                bridge.submit_line(name, line, at, ctx)
            } else {
                bridge.record_line(name, line, at, ctx)
            }
        })
    }

    /// The string kwarg `key` (one of the keys the decoder reads, looked up
    /// by its interned name), or `None`.
    fn text(&self, kwargs: &Bound<'_, PyDict>, key: &str) -> Option<String> {
        let (_, py_key) = self.always.iter().find(|(k, _)| *k == key)?;
        let value = kwargs.get_item(py_key.bind(kwargs.py())).ok()??;
        Some(value.cast::<PyString>().ok()?.to_string_lossy().into_owned())
    }

    /// The names of the kwargs read: content ones only when capturing.
    #[cfg(feature = "test-hooks")]
    pub(super) fn read_keys(&self, capture: bool) -> impl Iterator<Item = &'static str> + '_ {
        self.keys(capture).map(|(key, _)| *key)
    }

    /// The kwargs read, with their interned names: content ones only when
    /// capturing, else the ones only their digest is kept of.
    fn keys(&self, capture: bool) -> impl Iterator<Item = &(&'static str, Py<PyString>)> {
        let content: &[(&str, Py<PyString>)] = if capture { &self.content } else { &self.digested };
        self.always.iter().chain(content)
    }

    /// Writes the kwargs the decoder reads into `partial`: plain ones at
    /// once, the ones [`hook::scrub`] may change as copies for later.
    pub(super) fn write_kwargs(&self, kwargs: &Bound<'_, PyDict>, partial: &mut Partial, capture: bool) {
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
            } else if is_read_specially(key, capture) {
                let copied = copy_value(key, &value, capture);
                if !copied.is_null() {
                    partial.copied(key, &copied);
                }
            } else {
                partial.plain(key, &value);
            }
        }
    }
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

pub(super) fn remember_session(session_id: Option<String>, platform: Option<&str>, sender_id: Option<String>) {
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

/// Asks Hermes (through `hermes_meter._host_pricing`) for the price of a
/// model no table knows, at most once a minute per model. That helper only
/// reads what Hermes already fetched: no network I/O on the agent thread.
/// Only for a model [`Bridge::needs_host_price`] said to ask about.
fn offer_host_price(py: Python<'_>, bridge: &Bridge, model: &str, provider: Option<String>, base_url: Option<String>) {
    static LOOKUP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let lookup = match LOOKUP.get_or_try_init(py, || {
        py.import("hermes_meter._host_pricing")
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

pub(super) fn verdict_dict(py: Python<'_>, verdict: &Verdict) -> Py<PyAny> {
    if let Some(sink) = super::VERDICT_SINK.get() {
        let (kind, text) = match verdict {
            Verdict::Block { message } => ("block", message),
            Verdict::Context { text } => ("context", text),
        };
        // The sink never raises; were it to, the verdict still goes.
        let _ = sink.call1(py, (kind, text.as_str()));
    }
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
