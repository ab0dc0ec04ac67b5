//! Captured content in the shape of the GenAI semantic conventions. Pure.
//!
//! Owns: turning what the decoder kept of a prompt, a response, tool
//! arguments and a tool result (already redacted and cut, see
//! [`crate::redact`]) into the JSON text of `gen_ai.input.messages`,
//! `gen_ai.output.messages`, `gen_ai.tool.call.arguments` and
//! `gen_ai.tool.call.result`. Must not touch: the store, the network.
//!
//! Messages follow the conventions' JSON schema:
//! `[{"role": "user", "parts": [{"type": "text", "content": "…"}]}]`, with
//! `tool_call` parts for the assistant's tool calls and a
//! `tool_call_response` part for a `tool` message. Output messages carry
//! `finish_reason`. Parts other than text (images, audio) keep only their
//! type: their payloads are large and rarely useful in a trace.

use serde_json::{json, Map, Value};

use crate::redact::truncate_value;

/// `gen_ai.input.messages` from Hermes's `request_messages` (OpenAI chat
/// messages), at most `max_bytes` long; `None` if it is not a list.
pub fn input_messages(request_messages: &Value, max_bytes: usize) -> Option<String> {
    let Value::Array(messages) = request_messages else {
        return None;
    };
    let out: Vec<Value> = messages.iter().filter_map(message).collect();
    Some(truncate_value(Value::Array(out), max_bytes).to_string())
}

/// `gen_ai.output.messages` of one assistant answer.
pub fn output_messages(text: &str, finish_reason: Option<&str>, max_bytes: usize) -> String {
    let message = json!([{
        "role": "assistant",
        "parts": [text_part(text)],
        "finish_reason": finish_reason.unwrap_or("stop"),
    }]);
    truncate_value(message, max_bytes).to_string()
}

/// `gen_ai.tool.call.arguments`: the arguments as JSON text (a string is
/// taken to be JSON text already, as Hermes passes it).
pub fn tool_arguments(args: &Value, max_bytes: usize) -> String {
    match args {
        Value::String(s) => crate::redact::truncate_text(s, max_bytes).into_owned(),
        other => truncate_value(other.clone(), max_bytes).to_string(),
    }
}

/// `gen_ai.tool.call.result`: the result text as Hermes returned it.
pub fn tool_result(result: &str, max_bytes: usize) -> String {
    crate::redact::truncate_text(result, max_bytes).into_owned()
}

fn text_part(text: &str) -> Value {
    json!({"type": "text", "content": text})
}

/// One chat message in the conventions' shape; `None` for what is not a
/// message (a truncation marker).
fn message(m: &Value) -> Option<Value> {
    let obj = m.as_object()?;
    let role = obj.get("role").and_then(Value::as_str).unwrap_or("user");
    let mut parts = Vec::new();
    if role == "tool" {
        let mut part = Map::new();
        part.insert("type".into(), "tool_call_response".into());
        if let Some(id) = obj.get("tool_call_id") {
            part.insert("id".into(), id.clone());
        }
        part.insert("response".into(), obj.get("content").cloned().unwrap_or(Value::Null));
        parts.push(Value::Object(part));
    } else {
        match obj.get("content") {
            Some(Value::String(s)) if !s.is_empty() => parts.push(text_part(s)),
            Some(Value::Array(items)) => parts.extend(items.iter().map(content_part)),
            _ => {}
        }
    }
    if let Some(Value::Array(calls)) = obj.get("tool_calls") {
        parts.extend(calls.iter().map(tool_call_part));
    }
    Some(json!({"role": role, "parts": parts}))
}

/// A part of a multi-part content list (`{"type": "text", "text": …}`).
fn content_part(item: &Value) -> Value {
    match item {
        Value::String(s) => text_part(s),
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("text") | None => match o.get("text").and_then(Value::as_str) {
                Some(t) => text_part(t),
                None => json!({"type": "text"}),
            },
            Some(other) => json!({ "type": other }),
        },
        _ => json!({"type": "unknown"}),
    }
}

/// An OpenAI tool call (`{"id", "function": {"name", "arguments"}}`) as a
/// `tool_call` part; JSON text arguments are parsed back into JSON.
fn tool_call_part(call: &Value) -> Value {
    let mut part = Map::new();
    part.insert("type".into(), "tool_call".into());
    if let Some(id) = call.get("id") {
        part.insert("id".into(), id.clone());
    }
    let function = call.get("function").unwrap_or(call);
    if let Some(name) = function.get("name") {
        part.insert("name".into(), name.clone());
    }
    if let Some(args) = function.get("arguments") {
        let parsed = args
            .as_str()
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .unwrap_or_else(|| args.clone());
        part.insert("arguments".into(), parsed);
    }
    Value::Object(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Value {
        serde_json::from_str(s).expect("valid JSON")
    }

    #[test]
    fn request_messages_become_semconv_messages() {
        let request = json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "READFILE please read hello.txt"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"/x\"}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:..."}}]},
            "…[3 more items]",
        ]);
        let got = parse(&input_messages(&request, 1 << 16).expect("a list"));
        assert_eq!(
            got,
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
                {"role": "user", "parts": [{"type": "text", "content": "READFILE please read hello.txt"}]},
                {"role": "assistant", "parts": [{"type": "tool_call", "id": "call_1", "name": "read_file", "arguments": {"path": "/x"}}]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": "hello"}]},
                {"role": "user", "parts": [{"type": "text", "content": "look"}, {"type": "image_url"}]},
            ])
        );
        assert_eq!(input_messages(&json!("not a list"), 100), None);
    }

    #[test]
    fn output_messages_carry_the_finish_reason() {
        assert_eq!(
            parse(&output_messages("MOCK-FINAL-ANSWER", None, 1024)),
            json!([{"role": "assistant", "parts": [{"type": "text", "content": "MOCK-FINAL-ANSWER"}], "finish_reason": "stop"}])
        );
    }

    #[test]
    fn every_attribute_is_capped_and_stays_json() {
        let long = "x".repeat(100_000);
        let request = json!([{"role": "user", "content": long}]);
        for text in [
            input_messages(&request, 2048).expect("a list"),
            output_messages(&long, Some("length"), 2048),
            tool_arguments(&json!({"command": long}), 2048),
        ] {
            assert!(text.len() <= 2048, "{}", text.len());
            parse(&text);
        }
        assert!(tool_result(&long, 2048).len() <= 2048);
        assert_eq!(tool_arguments(&json!({"path": "/x"}), 100), r#"{"path":"/x"}"#);
    }
}
