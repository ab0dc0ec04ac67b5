//! A hook call the way the binding makes it, for tests that drive a
//! [`Bridge`]: its spool record, handed to [`Bridge::submit_line`].

use std::time::{Duration, Instant};

use hermes_meter_model::hook;
use hermes_meter_runtime::bridge::{Bridge, Outcome};
use hermes_meter_store::EventContext;
use serde_json::{Map, Value};

/// Submits one `hook` call with `kwargs`; returns the outcome and how long
/// the call took.
pub fn call(bridge: &Bridge, hook: &str, kwargs: Value) -> (Outcome, Duration) {
    let kwargs: Map<String, Value> = kwargs.as_object().cloned().expect("kwargs object");
    let at = hermes_meter_store::unix_now();
    let started = Instant::now();
    let hook: &'static str = hermes_meter_model::hook::HOOK_NAMES
        .into_iter()
        .find(|h| *h == hook)
        .expect("a hook of the bridge");
    // As the binding does: the call's spool record, which the bridge
    // decodes here when a gate may answer it, else on its writer thread.
    let line = hook::write_record(hook, at, Some(1), Some("t"), &kwargs, false);
    let ctx = EventContext {
        pid: Some(1),
        thread: Some("t".into()),
        profile: None,
        problems: Vec::new(),
    };
    let outcome = bridge.submit_line(hook, line, at, ctx);
    (outcome, started.elapsed())
}
