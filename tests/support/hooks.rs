//! A hook call the way the binding makes it, for tests that drive a
//! [`Bridge`]: decode the kwargs, append the spool record, submit.

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
