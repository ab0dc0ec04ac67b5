//! A hook call the way the binding makes it, for tests that drive a
//! [`Bridge`]: the spool record for the writer to decode when
//! [`Bridge::decodes_later`] says so, else decode the kwargs, append the
//! spool record and submit the event.

#![allow(dead_code)]

use std::time::{Duration, Instant};

use hermes_otel::bridge::{Bridge, Outcome};
use hermes_otel::hook::{decode, DecodeOptions, Decoded};
use hermes_otel::spool;
use hermes_otel::store::EventContext;
use serde_json::{Map, Value};

/// Submits one `hook` call with `kwargs`; returns the outcome and how long
/// the call took.
pub fn call(bridge: &Bridge, hook: &str, kwargs: Value) -> (Outcome, Duration) {
    let kwargs: Map<String, Value> = kwargs.as_object().cloned().expect("kwargs object");
    let at = hermes_otel::bridge::unix_now();
    let started = Instant::now();
    let hook: &'static str = hermes_otel::hook::HOOK_NAMES
        .into_iter()
        .find(|h| *h == hook)
        .expect("a hook of the bridge");
    if bridge.decodes_later(hook) {
        let line = spool::record(hook, at, Some(1), Some("t"), &kwargs, false);
        let ctx = EventContext {
            pid: Some(1),
            thread: Some("t".into()),
            problems: Vec::new(),
        };
        return (bridge.submit_line(hook, line, at, ctx), started.elapsed());
    }
    let Decoded::Event(event, problems) = decode(hook, &kwargs, at, DecodeOptions::default()) else {
        panic!("{hook} does not decode");
    };
    let record = spool::record(hook, at, Some(1), Some("t"), &kwargs, false);
    let ctx = EventContext {
        pid: Some(1),
        thread: Some("t".into()),
        problems,
    };
    let outcome = bridge.submit_recorded(event, ctx, Some(&record));
    (outcome, started.elapsed())
}
