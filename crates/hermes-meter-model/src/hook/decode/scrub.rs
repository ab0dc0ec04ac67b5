//! Scrubbing content kwargs out of a recorded call before it is spooled,
//! keeping the facts the decoder reads from them (a tool result's exit
//! code, error and success).
//!
//! Must not touch: decoding itself (`mod.rs`, `reader.rs`).

use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

use serde_json::{Map, Value};

use super::reader::{json_content, json_text, truthy};
use super::DecodeOptions;

/// Whether [`scrub`] may change or remove `key` of `hook`: its content
/// kwargs, a tool result, an API error. Every other kwarg is written as
/// copied, so the binding can write it without building a map first.
pub fn scrubbed_key(hook: &str, key: &str) -> bool {
    crate::hook::keys(hook).is_some_and(|k| k.content.contains(&key))
        || (hook == "post_tool_call" && key == crate::hook::TOOL_RESULT)
        || (hook == "api_request_error" && key == "error")
}

/// Makes a copied kwargs map fit to be written anywhere (the spool, the
/// journal) before it is decoded. With capture off, content kwargs are
/// removed, a tool result is reduced to the facts the decoder reads from it
/// (exit code, whether `error` is truthy, `success: false`), and an API
/// error keeps its type but not its message. With capture on, every content
/// value is redacted and cut as the decoder would. Decoding the scrubbed
/// map gives the same event as decoding the original.
pub fn scrub(hook: &str, kw: &mut Map<String, Value>, opts: DecodeOptions) {
    let keys = crate::hook::keys(hook);
    for key in keys.map_or(&[][..], |k| k.digested) {
        if let (Some(v), false) = (kw.get(*key), kw.contains_key(crate::hook::ARGS_DIGEST)) {
            let digest = Value::String(args_digest(v));
            let change = (hook == "pre_tool_call")
                .then(|| crate::hook::protect::meter_change_in(v))
                .flatten();
            kw.insert(crate::hook::ARGS_DIGEST.into(), digest);
            if let Some(what) = change {
                kw.insert(crate::hook::ARGS_METER.into(), Value::String(what.into()));
            }
        }
    }
    let content = keys.map_or(&[][..], |k| k.content);
    if !opts.capture_content {
        for key in content {
            kw.remove(*key);
        }
        if hook == "post_tool_call" {
            match kw.get(crate::hook::TOOL_RESULT).map(result_facts) {
                Some(Some(facts)) => {
                    kw.insert(crate::hook::TOOL_RESULT.into(), Value::String(facts.to_string()));
                }
                Some(None) => {
                    kw.remove(crate::hook::TOOL_RESULT);
                }
                None => {}
            }
        }
        if hook == "api_request_error" {
            match kw.get_mut("error") {
                Some(Value::Object(error)) => {
                    error.remove("message");
                }
                Some(Value::String(_)) => {
                    kw.remove("error");
                }
                _ => {}
            }
        }
        return;
    }
    let max = opts.max_content_bytes;
    for key in content.iter().chain(if hook == "post_tool_call" {
        &[crate::hook::TOOL_RESULT][..]
    } else {
        &[]
    }) {
        if let Some(v) = kw.get_mut(*key) {
            scrub_value(v, max);
        }
    }
    if hook == "api_request_error" {
        match kw.get_mut("error") {
            Some(Value::Object(error)) => {
                if let Some(m) = error.get_mut("message") {
                    scrub_value(m, max);
                }
            }
            Some(v @ Value::String(_)) => scrub_value(v, max),
            _ => {}
        }
    }
}

/// A digest of a tool call's arguments: equal arguments give equal
/// digests within one process, which is all a run needs (a run is one
/// process's). Keyed with a random key per process, so a digest written to
/// the spool or journal says nothing of short arguments to whoever reads
/// the file.
pub fn args_digest(args: &Value) -> String {
    static KEY: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    let mut h = KEY.get_or_init(Default::default).build_hasher();
    h.write(&serde_json::to_vec(args).unwrap_or_default());
    format!("{:016x}", h.finish())
}

/// One captured value redacted and cut: text as text, JSON text as JSON.
fn scrub_value(value: &mut Value, max: usize) {
    let scrubbed = match value {
        Value::String(s) => match json_text(s) {
            Some(parsed) => json_content(parsed, max).0,
            None => {
                let redacted = crate::redact::redact_text(s);
                let cut = crate::redact::truncate_text(&redacted, max);
                if matches!(
                    (&redacted, &cut),
                    (std::borrow::Cow::Borrowed(_), std::borrow::Cow::Borrowed(_))
                ) {
                    return;
                }
                cut.into_owned()
            }
        },
        other => {
            crate::redact::redact_value(other);
            let cut = crate::redact::truncate_value(std::mem::take(other), max);
            *other = cut;
            return;
        }
    };
    *value = Value::String(scrubbed);
}

/// The facts-only stand-in for a tool result: a JSON object with just the
/// keys the decoder reads, or `None` when the result says nothing.
fn result_facts(result: &Value) -> Option<Value> {
    const MAX_PARSED_RESULT_BYTES: usize = 256 * 1024;
    let parsed;
    let obj = match result {
        Value::Object(map) => map,
        Value::String(s) if s.len() <= MAX_PARSED_RESULT_BYTES && s.trim_start().starts_with('{') => {
            match serde_json::from_str::<Value>(s) {
                Ok(Value::Object(map)) => {
                    parsed = map;
                    &parsed
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    let mut facts = Map::new();
    for key in ["exit_code", "returncode"] {
        if let Some(v @ Value::Number(_)) = obj.get(key) {
            facts.insert(key.into(), v.clone());
        }
    }
    if let Some(e) = obj.get("error") {
        facts.insert("error".into(), if truthy(e) { Value::Bool(true) } else { Value::Null });
    }
    if obj.get("success") == Some(&Value::Bool(false)) {
        facts.insert("success".into(), Value::Bool(false));
    }
    Some(Value::Object(facts))
}
