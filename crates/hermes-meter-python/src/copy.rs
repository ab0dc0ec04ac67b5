//! Plain copies of Python values: the kwargs the decoder reads, copied to
//! JSON while the GIL is held, so nothing of Hermes's leaves it live.
//!
//! Owns: which values are copied how (the two live objects Hermes passes,
//! nesting and size bounds). Must not touch: decoding (`hook/`), the store.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value};

use hermes_meter_model::hook;

/// Deepest nesting copied out of a kwarg; deeper values become null.
pub(super) const MAX_DEPTH: usize = 16;

/// Largest tool result copied when content capture is off: the decoder
/// only parses results up to this size for exit code and error.
const MAX_UNCAPTURED_RESULT_BYTES: usize = 256 * 1024;

/// A plain copy of the kwarg `key`: the two live objects Hermes passes are
/// read as the decoder needs them, everything else is copied as it is.
pub(super) fn copy_value(key: &str, value: &Bound<'_, PyAny>, capture: bool) -> Value {
    match key {
        hook::ASSISTANT_MESSAGE => assistant_message(value),
        hook::TOOL_RESULT => tool_result(value, capture),
        hook::REQUEST => request_model(value),
        // Not captured, the arguments are copied only for their digest:
        // a long string's head and length tell calls apart well enough,
        // and a megabyte written by write_file is not copied for it.
        "args" if !capture => copy(value, 0, Some(DIGESTED_STR_BYTES)),
        _ => to_json(value, 0),
    }
}

/// Whether `copy_value` reads `key` otherwise than as a plain copy: such a
/// kwarg is never written straight from its Python value.
pub(super) fn is_read_specially(key: &str, capture: bool) -> bool {
    matches!(key, hook::ASSISTANT_MESSAGE | hook::TOOL_RESULT | hook::REQUEST) || (key == "args" && !capture)
}

/// `pre_api_request`'s `request` holds the whole provider payload (every
/// message): only `body.model` is copied, as `{"body": {"model": ...}}`.
fn request_model(value: &Bound<'_, PyAny>) -> Value {
    let model = value
        .cast::<PyDict>()
        .ok()
        .and_then(|d| d.get_item("body").ok().flatten())
        .and_then(|b| b.cast_into::<PyDict>().ok())
        .and_then(|b| b.get_item("model").ok().flatten())
        .and_then(|m| m.extract::<String>().ok());
    match model {
        Some(m) => serde_json::json!({"body": {"model": m}}),
        None => Value::Null,
    }
}

/// The most of one string copied for a digest (see [`copy_value`]).
const DIGESTED_STR_BYTES: usize = 4096;

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
    copy(value, depth, None)
}

/// [`to_json`], strings longer than `max_str` bytes (if given) cut to
/// their head and their length.
fn copy(value: &Bound<'_, PyAny>, depth: usize, max_str: Option<usize>) -> Value {
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
        let text = s.to_string_lossy();
        return match max_str {
            Some(max) if text.len() > max => {
                let mut head = max;
                while !text.is_char_boundary(head) {
                    head -= 1;
                }
                Value::String(format!("{}…[{} bytes]", &text[..head], text.len()))
            }
            _ => Value::String(text.into_owned()),
        };
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            if let Ok(k) = k.cast::<PyString>() {
                map.insert(k.to_string_lossy().into_owned(), copy(&v, depth + 1, max_str));
            }
        }
        return Value::Object(map);
    }
    if let Ok(l) = value.cast::<PyList>() {
        return Value::Array(l.iter().map(|v| copy(&v, depth + 1, max_str)).collect());
    }
    if let Ok(t) = value.cast::<PyTuple>() {
        return Value::Array(t.iter().map(|v| copy(&v, depth + 1, max_str)).collect());
    }
    Value::Null
}
