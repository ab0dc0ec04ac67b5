//! A hook call's spool record, written straight from its Python kwargs.
//!
//! Every hook call is written this way, gating or not. Plain kwargs (ids,
//! counts, timings) are written in one pass over the Python values: no map
//! of copies is built, and nothing is serialized twice. The kwargs
//! [`scrub`] may change (content, tool results, API errors) are copied as
//! values ([`super::copy`]), and scrubbed and written after the GIL is
//! released. The line is then decoded from (on the writer thread, or on
//! the hook thread when a gate waits), so the spool, the gate and a replay
//! all read the same bytes. The record's layout is `hook::RecordWriter`'s;
//! this file writes Python values into it.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

use hermes_meter_model::hook::{scrub, DecodeOptions};
use hermes_meter_model::hook::{write_json, Origin, RecordWriter};

use super::copy::MAX_DEPTH;

/// A record being written: its kwargs object is still open.
pub(crate) struct Partial {
    writer: RecordWriter,
    /// Copies of the kwargs written by [`Partial::finish`], after [`scrub`].
    scrubbed: Map<String, Value>,
}

impl Partial {
    /// Starts the record of one `hook` call made at `origin`.
    pub(crate) fn begin(hook: &str, at: f64, origin: Origin<'_>, capture: bool) -> Self {
        Partial {
            writer: RecordWriter::begin(hook, at, origin, capture),
            scrubbed: Map::new(),
        }
    }

    /// Writes `key` with a plain copy of `value`, or nothing when the copy
    /// is null (a kwarg Hermes passed as None, or that holds no plain value).
    pub(crate) fn plain(&mut self, key: &str, value: &Bound<'_, PyAny>) {
        let mark = self.writer.mark();
        self.writer.key(key);
        if !write_value(self.writer.buf(), value, 0) {
            self.writer.rewind(mark);
        }
    }

    /// Writes `key` with `value`, a copy already made ([`super::copy`]).
    pub(crate) fn copied(&mut self, key: &str, value: &Value) {
        self.writer.kwarg(key, value);
    }

    /// Keeps `value` (already copied) for [`scrub`] in [`Partial::finish`].
    pub(crate) fn scrub_later(&mut self, key: &str, value: Value) {
        self.scrubbed.insert(key.to_string(), value);
    }

    /// Scrubs the kept kwargs, writes what is left of them and ends the
    /// line (its newline included). Needs no GIL.
    pub(crate) fn finish(mut self, hook: &str, opts: DecodeOptions) -> Vec<u8> {
        scrub(hook, &mut self.scrubbed, opts);
        for (key, value) in &self.scrubbed {
            self.writer.kwarg(key, value);
        }
        self.writer.finish()
    }
}

/// Writes the JSON of a Python value as `to_json` copies it: None, bool,
/// int, float, str, dict (str keys), list and tuple; anything else, a
/// non-finite float and anything nested past [`MAX_DEPTH`] are null.
/// Returns false when it wrote null.
fn write_value(line: &mut Vec<u8>, value: &Bound<'_, PyAny>, depth: usize) -> bool {
    if value.is_none() || depth > MAX_DEPTH {
        line.extend_from_slice(b"null");
        return false;
    }
    if let Ok(s) = value.cast::<PyString>() {
        write_json(line, s.to_string_lossy().as_ref());
        return true;
    }
    if let Ok(b) = value.cast::<PyBool>() {
        line.extend_from_slice(if b.is_true() { b"true" } else { b"false" });
        return true;
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(i) = value.extract::<i64>() {
            write_json(line, &i);
            return true;
        }
        if let Ok(u) = value.extract::<u64>() {
            write_json(line, &u);
            return true;
        }
        return match value.extract::<f64>() {
            Ok(f) if f.is_finite() => {
                write_json(line, &f);
                true
            }
            _ => {
                line.extend_from_slice(b"null");
                false
            }
        };
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        let f = f.value();
        if f.is_finite() {
            write_json(line, &f);
            return true;
        }
        line.extend_from_slice(b"null");
        return false;
    }
    if let Ok(d) = value.cast::<PyDict>() {
        line.push(b'{');
        let mut first = true;
        for (k, v) in d.iter() {
            let Ok(k) = k.cast::<PyString>() else { continue };
            if !first {
                line.push(b',');
            }
            first = false;
            write_json(line, k.to_string_lossy().as_ref());
            line.push(b':');
            write_value(line, &v, depth + 1);
        }
        line.push(b'}');
        return true;
    }
    if let Ok(l) = value.cast::<PyList>() {
        write_items(line, l.iter(), depth);
        return true;
    }
    if let Ok(t) = value.cast::<PyTuple>() {
        write_items(line, t.iter(), depth);
        return true;
    }
    line.extend_from_slice(b"null");
    false
}

fn write_items<'py>(line: &mut Vec<u8>, items: impl Iterator<Item = Bound<'py, PyAny>>, depth: usize) {
    line.push(b'[');
    for (i, v) in items.enumerate() {
        if i > 0 {
            line.push(b',');
        }
        write_value(line, &v, depth + 1);
    }
    line.push(b']');
}
