//! Hooks only tests use, compiled in only with the `test-hooks` feature
//! (never in the shipped wheel): a hook's Rust path panicking on demand
//! (`HERMES_METER_TEST_PANIC`, to prove no panic reaches Hermes) and
//! `_native._spool_records`.
//!
//! Owns: those two. Must not touch: anything a user's build runs; without
//! the feature, [`panic_if_asked`] is empty and `_spool_records` absent.

#[cfg(feature = "test-hooks")]
use pyo3::prelude::*;
#[cfg(feature = "test-hooks")]
use pyo3::types::PyDict;

#[cfg(feature = "test-hooks")]
use super::{callable::Hook, copy::copy_value, record::Partial, HermesMeterError};
#[cfg(feature = "test-hooks")]
use hermes_meter_model::hook::{self, DecodeOptions};

use hermes_meter_runtime::config::BridgeConfig;

/// Panics when `HERMES_METER_TEST_PANIC` names `hook` (or is `*`); called
/// where a hook's Rust work starts, with the GIL released.
#[cfg(feature = "test-hooks")]
pub(super) fn panic_if_asked(config: &BridgeConfig, hook: &str) {
    if matches!(config.test_panic_hook.as_deref(), Some(h) if h == hook || h == "*") {
        panic!(
            "{} set to {hook}: panicking on purpose",
            hermes_meter_runtime::config::bridge::env::TEST_PANIC
        );
    }
}

/// Without the `test-hooks` feature: nothing.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(super) fn panic_if_asked(_config: &BridgeConfig, _hook: &str) {}

/// Adds the test-only functions to the module (none without the feature).
pub(super) fn add_to(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    #[cfg(feature = "test-hooks")]
    m.add_function(wrap_pyfunction!(_spool_records, m)?)?;
    let _ = m;
    Ok(())
}

#[cfg(feature = "test-hooks")]
/// For tests: the spool record of one `hook` call as the binding writes it
/// (straight from the kwargs), and the same record made from plain
/// `serde_json` copies of the kwargs, with capture on or off. The two must
/// hold the same kwargs, or the line would not say what Hermes passed.
#[pyfunction]
#[pyo3(signature = (hook, kwargs, capture))]
fn _spool_records(py: Python<'_>, hook: &str, kwargs: &Bound<'_, PyDict>, capture: bool) -> PyResult<(String, String)> {
    let hook = Hook::new(py, hook, None)?;
    let opts = DecodeOptions {
        capture_content: capture,
        ..DecodeOptions::default()
    };
    let origin = hook::Origin {
        pid: Some(1),
        thread: Some("t"),
        profile: None,
    };
    let mut partial = Partial::begin(hook.name, 1.5, origin, capture);
    hook.write_kwargs(kwargs, &mut partial, capture);
    let direct = partial.finish(hook.name, opts);
    let mut kw = serde_json::Map::new();
    for key in hook.read_keys(capture) {
        if let Ok(Some(value)) = kwargs.get_item(key) {
            let copied = copy_value(key, &value, capture);
            if !copied.is_null() {
                kw.insert(key.to_string(), copied);
            }
        }
    }
    hook::scrub(hook.name, &mut kw, opts);
    let copied = hook::write_record(hook.name, 1.5, Some(1), Some("t"), &kw, capture);
    let text = |b: Vec<u8>| String::from_utf8(b).map_err(|e| HermesMeterError::new_err(e.to_string()));
    Ok((text(direct)?, text(copied)?))
}
