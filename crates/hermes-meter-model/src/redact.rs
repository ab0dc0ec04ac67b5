//! Secret redaction and structure-preserving truncation of captured content.
//!
//! Owns: turning a prompt, a response, tool arguments or a tool result that
//! the user chose to capture into something safe and bounded to store and
//! export. Pure: no I/O, no regex engine (every pattern below is a
//! hand-written linear scan, so a 10 MB string costs one pass). Must not
//! touch: the store, the network, Python.
//!
//! # What is redacted
//!
//! Text (every string leaf of captured JSON, and captured plain strings):
//!
//! - API keys by their vendor prefix, as whole tokens: OpenAI, OpenRouter and
//!   Anthropic `sk-…` (`sk-ant-…`, `sk-proj-…`), Stripe `sk_live_`/`sk_test_`/
//!   `rk_live_`, GitHub `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`,
//!   Slack `xoxb-`/`xoxa-`/`xoxp-`/`xoxr-`/`xoxs-`/`xapp-`, AWS `AKIA…`,
//!   Google `AIza…`, GitLab `glpat-`, Hugging Face `hf_`, Groq `gsk_`,
//!   Perplexity `pplx-`, Replicate `r8_`, npm `npm_`, PyPI `pypi-`, xAI
//!   `xai-`, Tavily `tvly-`, Notion `ntn_`, SendGrid `SG.`, DigitalOcean
//!   `dop_v1_`/`doo_v1_` (the prefix list Hermes 0.19.0 masks in
//!   `agent/redact.py`, `_PREFIX_PATTERNS`, minus a few two-letter prefixes
//!   too likely to hit ordinary words);
//! - JSON Web Tokens (`eyJ…`);
//! - `Authorization:` / `Proxy-Authorization:` header values (any scheme),
//!   and any `Bearer <token>`;
//! - API-key headers: `x-api-key`, `x-goog-api-key`, `api-key`,
//!   `x-auth-token`, `x-access-token`;
//! - assignments whose key names a secret: `api_key=…`, `"api_key": "…"`,
//!   `OPENAI_API_KEY=…`, `password: …`, `client_secret=…`, `access_token=…`
//!   (the key's last word is one of `key` with a qualifier before it,
//!   `apikey`, `token`, `secret`, `password`, `passwd`, `pwd`,
//!   `credential(s)`), which covers Hermes's `_ENV_ASSIGN_RE`,
//!   `_JSON_FIELD_RE` and `_CFG_*` names without its false positives
//!   (`max_tokens: 100` is left alone);
//! - passwords in URLs, `scheme://user:password@host` for any scheme;
//! - private key blocks (`-----BEGIN … PRIVATE KEY-----` to its END line);
//! - Telegram bot tokens (`123456789:AA…`).
//!
//! JSON objects (captured tool arguments, request messages, JSON tool
//! results): the value of a key Hermes treats as secret is replaced
//! whatever it is. These are Hermes's `_SENSITIVE_BODY_KEYS` and
//! `_SENSITIVE_QUERY_PARAMS` (exact, case-insensitive): `access_token`,
//! `refresh_token`, `id_token`, `token`, `api_key`, `apikey`,
//! `client_secret`, `password`, `auth`, `jwt`, `secret`, `private_key`,
//! `authorization`, `key`, `session`, `signature`, `x-amz-signature`, plus
//! the header names above. (`code` is left out: tool arguments named `code`
//! are source code far more often than OAuth codes.)
//!
//! Every secret becomes [`REDACTED`]; the text around it is kept, so a
//! `curl -H "Authorization: Bearer …"` stays readable.
//!
//! # Truncation
//!
//! [`truncate_value`] keeps JSON valid: long strings are cut at a char
//! boundary with a marker saying how much was cut, long arrays keep their
//! first items and end with a marker item, objects with many keys keep
//! their first keys and a `"…"` marker key, deep nesting is replaced by a
//! marker string. Limits shrink step by step until the serialized value
//! fits; the last resort is a single marker string.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Deepest nesting kept by [`truncate_value`]; deeper values become a
/// marker. It also bounds the recursion of every function here.
pub const MAX_DEPTH: usize = 32;

/// Vendor key prefixes and the least number of token characters that must
/// follow each for the match to count.
const PREFIXES: &[(&str, usize)] = &[
    ("sk-", 10),
    ("sk_live_", 10),
    ("sk_test_", 10),
    ("rk_live_", 10),
    ("ghp_", 10),
    ("gho_", 10),
    ("ghu_", 10),
    ("ghs_", 10),
    ("ghr_", 10),
    ("github_pat_", 10),
    ("glpat-", 10),
    ("xoxb-", 10),
    ("xoxa-", 10),
    ("xoxp-", 10),
    ("xoxr-", 10),
    ("xoxs-", 10),
    ("xapp-", 10),
    ("AIza", 30),
    ("hf_", 10),
    ("gsk_", 10),
    ("pplx-", 10),
    ("r8_", 10),
    ("npm_", 10),
    ("pypi-", 10),
    ("xai-", 30),
    ("tvly-", 10),
    ("ntn_", 10),
    ("SG.", 10),
    ("dop_v1_", 10),
    ("doo_v1_", 10),
    ("eyJ", 10),
];

/// JSON object keys whose values are always secret (lower-case).
const SECRET_KEYS: &[&str] = &[
    "access_token",
    "refresh_token",
    "id_token",
    "token",
    "api_key",
    "apikey",
    "api-key",
    "client_secret",
    "password",
    "passwd",
    "auth",
    "jwt",
    "secret",
    "private_key",
    "authorization",
    "proxy-authorization",
    "key",
    "session",
    "signature",
    "x-amz-signature",
    "x-api-key",
    "x-goog-api-key",
    "x-auth-token",
    "x-access-token",
];

/// Header names whose whole value is a credential (lower-case).
const SECRET_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "x-api-token",
    "x-auth-token",
    "x-access-token",
];

/// Last words of an assignment key that make its value a secret.
const SECRET_WORDS: &[&str] = &[
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "credential",
    "credentials",
];

/// Whether a JSON object key names a secret value.
pub(crate) fn is_secret_key(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    SECRET_KEYS.contains(&lower.as_str()) || assignment_key_is_secret(&lower)
}

/// Redacts the secrets in `text`. Borrowed when there were none.
pub fn redact_text(text: &str) -> Cow<'_, str> {
    let mut out: Option<String> = None;
    let bytes = text.as_bytes();
    // `copied` is where the next untouched run of `text` starts.
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let Some((start, end)) = secret_at(text, i).filter(|(start, _)| !text[*start..].starts_with(REDACTED)) else {
            i += 1;
            continue;
        };
        let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
        o.push_str(&text[copied..start]);
        o.push_str(REDACTED);
        copied = end;
        i = end.max(i + 1);
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut o) => {
            o.push_str(&text[copied..]);
            Cow::Owned(o)
        }
    }
}

/// Redacts a JSON value in place: secret-named keys lose their values,
/// every string leaf is redacted as text. Nesting deeper than
/// [`MAX_DEPTH`] is replaced by a marker (it would be cut anyway).
pub(crate) fn redact_value(value: &mut Value) {
    redact_at(value, 0);
}

fn redact_at(value: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        *value = Value::String(DEPTH_MARKER.into());
        return;
    }
    match value {
        Value::String(s) => {
            if let Cow::Owned(r) = redact_text(s) {
                *s = r;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_at(v, depth + 1)),
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if is_secret_key(k) && !v.is_null() {
                    *v = Value::String(REDACTED.into());
                } else {
                    redact_at(v, depth + 1);
                }
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `text` cut to at most `max_bytes` (at a char boundary) with a marker
/// saying how many bytes were cut; the result never exceeds `max_bytes`
/// unless `max_bytes` is smaller than the marker itself.
pub(crate) fn truncate_text(text: &str, max_bytes: usize) -> Cow<'_, str> {
    if text.len() <= max_bytes {
        return Cow::Borrowed(text);
    }
    // The marker's length depends on the count; 20 digits covers any usize.
    let room = max_bytes.saturating_sub(TRUNCATED_PREFIX.len() + 20 + TRUNCATED_SUFFIX.len());
    let cut = floor_char_boundary(text, room);
    Cow::Owned(format!(
        "{}{TRUNCATED_PREFIX}{}{TRUNCATED_SUFFIX}",
        &text[..cut],
        text.len() - cut
    ))
}

const TRUNCATED_PREFIX: &str = "…[truncated ";
const TRUNCATED_SUFFIX: &str = " bytes]";
const DEPTH_MARKER: &str = "…[nested too deep]";

/// `value` made to serialize in at most `max_bytes`, still valid JSON of
/// the same shape where possible (see the module docs).
pub(crate) fn truncate_value(value: Value, max_bytes: usize) -> Value {
    if value_fits(&value, max_bytes) && depth_within(&value, 0) {
        return value;
    }
    // (longest string kept, most items or keys kept), loosest first.
    let steps = [
        (max_bytes, 1024),
        (max_bytes / 4, 256),
        (max_bytes / 16, 64),
        (1024, 32),
        (256, 16),
        (64, 8),
        (16, 4),
        (0, 2),
        (0, 1),
    ];
    for (string_bytes, items) in steps {
        let cut = cut_value(&value, string_bytes, items, 0);
        if value_fits(&cut, max_bytes) {
            return cut;
        }
    }
    let total = serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(0);
    Value::String(format!("{TRUNCATED_PREFIX}{total}{TRUNCATED_SUFFIX}"))
}

fn value_fits(value: &Value, max_bytes: usize) -> bool {
    // Counting bytes through a writer that stops early would save the
    // allocation; values here are at most a few MB, once per hook call.
    serde_json::to_vec(value).map(|v| v.len() <= max_bytes).unwrap_or(false)
}

fn depth_within(value: &Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match value {
        Value::Array(items) => items.iter().all(|v| depth_within(v, depth + 1)),
        Value::Object(map) => map.values().all(|v| depth_within(v, depth + 1)),
        _ => true,
    }
}

fn cut_value(value: &Value, string_bytes: usize, items: usize, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return Value::String(DEPTH_MARKER.into());
    }
    match value {
        Value::String(s) => Value::String(cut_leaf(s, string_bytes)),
        Value::Array(list) => {
            let mut out: Vec<Value> = list
                .iter()
                .take(items)
                .map(|v| cut_value(v, string_bytes, items, depth + 1))
                .collect();
            if list.len() > items {
                out.push(Value::String(format!("…[{} more items]", list.len() - items)));
            }
            Value::Array(out)
        }
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map.iter().take(items) {
                out.insert(
                    cut_leaf(k, string_bytes.max(64)),
                    cut_value(v, string_bytes, items, depth + 1),
                );
            }
            if map.len() > items {
                out.insert("…".into(), Value::String(format!("{} more keys", map.len() - items)));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// A string leaf cut to `max` bytes of its text plus a marker.
fn cut_leaf(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let cut = floor_char_boundary(s, max);
    format!("{}{TRUNCATED_PREFIX}{}{TRUNCATED_SUFFIX}", &s[..cut], s.len() - cut)
}

fn floor_char_boundary(s: &str, at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    let mut i = at;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Characters API keys and tokens are made of.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// The secret starting at byte `i` of `text`, as the byte range to replace.
fn secret_at(text: &str, i: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let b = bytes[i];
    let at_boundary = i == 0 || !is_token_byte(bytes[i - 1]);
    if at_boundary {
        if let Some(r) = prefixed_key(bytes, i) {
            return Some(r);
        }
        if b == b'A' && bytes[i..].starts_with(b"AKIA") {
            let end = i
                + 4
                + bytes[i + 4..]
                    .iter()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
                    .count();
            if end - i == 20 && (end == bytes.len() || !is_token_byte(bytes[end])) {
                return Some((i, end));
            }
        }
        if b.is_ascii_digit() || b == b'b' {
            if let Some(r) = telegram_token(bytes, i) {
                return Some(r);
            }
        }
        if b == b'-' && bytes[i..].starts_with(b"-----BEGIN") {
            if let Some(r) = private_key_block(text, i) {
                return Some(r);
            }
        }
        if b == b'B' && bytes[i..].starts_with(b"Bearer ") {
            let start = i + 7 + count_spaces(&bytes[i + 7..]);
            let end = start + bytes[start..].iter().take_while(|c| is_credential_byte(**c)).count();
            if end - start >= 8 {
                return Some((start, end));
            }
        }
        if b.is_ascii_alphabetic() || b == b'_' {
            if let Some(r) = assignment(text, i) {
                return Some(r);
            }
        }
    }
    if b == b':' && bytes[i..].starts_with(b"://") {
        return url_password(bytes, i + 3);
    }
    None
}

fn count_spaces(bytes: &[u8]) -> usize {
    bytes.iter().take_while(|c| **c == b' ' || **c == b'\t').count()
}

/// Bytes of a credential after `Bearer` or a header name: anything but
/// whitespace and quotes (a closing quote must survive, as Hermes notes).
fn is_credential_byte(b: u8) -> bool {
    !b.is_ascii_whitespace() && b != b'"' && b != b'\'' && b != b','
}

/// Which bytes some entry of [`PREFIXES`] starts with: most bytes start
/// none, and this spares them the loop over every prefix.
const PREFIX_FIRST_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < PREFIXES.len() {
        table[PREFIXES[i].0.as_bytes()[0] as usize] = true;
        i += 1;
    }
    table
};

fn prefixed_key(bytes: &[u8], i: usize) -> Option<(usize, usize)> {
    if !PREFIX_FIRST_BYTES[bytes[i] as usize] {
        return None;
    }
    for (prefix, min) in PREFIXES {
        let p = prefix.as_bytes();
        if !bytes[i..].starts_with(p) {
            continue;
        }
        let start = i + p.len();
        // JWTs continue with dot-separated parts.
        let jwt = *prefix == "eyJ";
        let end = start
            + bytes[start..]
                .iter()
                .take_while(|c| is_token_byte(**c) || (jwt && (**c == b'.' || **c == b'=')))
                .count();
        if end - start >= *min {
            return Some((i, end));
        }
    }
    None
}

/// `bot123456789:AA…` or `123456789:AA…` (8+ digits, 30+ token chars).
fn telegram_token(bytes: &[u8], i: usize) -> Option<(usize, usize)> {
    let digits_start = if bytes[i..].starts_with(b"bot") { i + 3 } else { i };
    let digits = bytes[digits_start..].iter().take_while(|c| c.is_ascii_digit()).count();
    let colon = digits_start + digits;
    if digits < 8 || bytes.get(colon) != Some(&b':') {
        return None;
    }
    let token = bytes[colon + 1..].iter().take_while(|c| is_token_byte(**c)).count();
    (token >= 30).then_some((i, colon + 1 + token))
}

fn private_key_block(text: &str, i: usize) -> Option<(usize, usize)> {
    let head_end = text[i + 10..].find("-----")? + i + 10;
    if !text[i..head_end].ends_with("PRIVATE KEY") {
        return None;
    }
    let end_marker = text[head_end..].find("-----END")? + head_end;
    let close = text[end_marker + 8..].find("-----")? + end_marker + 8 + 5;
    Some((i, close))
}

/// `scheme://user:password@host`: the password's range.
fn url_password(bytes: &[u8], authority: usize) -> Option<(usize, usize)> {
    let len = bytes[authority..]
        .iter()
        .take_while(|c| !matches!(c, b'/' | b'?' | b'#' | b'"' | b'\'' | b'<' | b'>') && !c.is_ascii_whitespace())
        .count();
    let auth = &bytes[authority..authority + len];
    let at = auth.iter().rposition(|c| *c == b'@')?;
    let colon = auth[..at].iter().position(|c| *c == b':')?;
    (at > colon + 1).then_some((authority + colon + 1, authority + at))
}

/// `key = value`, `key: value`, `"key": "value"` or a secret header,
/// where the key names a secret: the value's range.
fn assignment(text: &str, i: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let key_len = bytes[i..]
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.'))
        .count();
    if key_len < 3 {
        return None;
    }
    let key_end = i + key_len;
    let key = text[i..key_end].to_ascii_lowercase();
    let header = SECRET_HEADERS.contains(&key.as_str());
    if !header && !assignment_key_is_secret(&key) {
        return None;
    }
    // Optional closing quote of a JSON key, spaces, then `=` or `:`.
    let mut j = key_end;
    let quoted_key = i > 0 && matches!(bytes[i - 1], b'"' | b'\'');
    if quoted_key && matches!(bytes.get(j), Some(b'"') | Some(b'\'')) {
        j += 1;
    }
    j += count_spaces(&bytes[j..]);
    match bytes.get(j) {
        Some(b'=') => {}
        // `key: value` is prose as often as config; take it only for a
        // header, a quoted (JSON) key, or a key at the start of a line.
        Some(b':') if header || quoted_key || line_start(bytes, i) => {}
        _ => return None,
    }
    j += 1;
    if bytes.get(j) == Some(&b'=') {
        return None; // `==`, a comparison
    }
    j += count_spaces(&bytes[j..]);
    let quote = match bytes.get(j) {
        Some(q @ (b'"' | b'\'')) => {
            j += 1;
            Some(*q)
        }
        _ => None,
    };
    let start = j;
    let end = match quote {
        Some(q) => start + bytes[start..].iter().take_while(|c| **c != q && **c != b'\n').count(),
        // A header keeps its scheme word (`Bearer`, `Basic`) visible.
        None if header => {
            let word = bytes[start..].iter().take_while(|c| c.is_ascii_alphabetic()).count();
            let after = start + word;
            let spaces = count_spaces(&bytes[after..]);
            let cred_start = if word > 0 && spaces > 0 { after + spaces } else { start };
            let end = cred_start
                + bytes[cred_start..]
                    .iter()
                    .take_while(|c| is_credential_byte(**c))
                    .count();
            return (end > cred_start).then_some((cred_start, end));
        }
        None => {
            start
                + bytes[start..]
                    .iter()
                    .take_while(|c| is_credential_byte(**c) && !matches!(c, b'&' | b';' | b')' | b'}' | b']'))
                    .count()
        }
    };
    if end == start {
        return None;
    }
    // `os.getenv("X")`, `process.env.X`: code naming a variable, not a value.
    let value = &text[start..end];
    if value.starts_with("os.") || value.starts_with("process.env") || value.starts_with("${") {
        return None;
    }
    Some((start, end))
}

fn line_start(bytes: &[u8], i: usize) -> bool {
    let before = &bytes[..i];
    let line = before.iter().rposition(|c| *c == b'\n').map_or(0, |p| p + 1);
    before[line..].iter().all(|c| *c == b' ' || *c == b'\t') || before[line..].trim_ascii() == b"export"
}

/// Whether an assignment key (lower-case) names a secret: its last word
/// (split at `_`, `-`, `.`) is a secret word, or it is `key` with a
/// qualifier before it (`api_key`, `private_key`, not a bare `key`).
fn assignment_key_is_secret(key: &str) -> bool {
    let mut words = key.rsplit(['_', '-', '.']);
    let last = words.next().unwrap_or("");
    if SECRET_WORDS.contains(&last) {
        return true;
    }
    if last == "key" {
        return matches!(
            words.next(),
            Some("api" | "private" | "secret" | "access" | "client" | "signing" | "encryption" | "master")
        );
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_in_text_are_redacted_and_the_rest_kept() {
        let cases = [
            ("key sk-abcdefghijklmnop1234 here", "key [REDACTED] here"),
            ("sk-ant-api03-AbCdEfGhIjKlMnOp_qr", "[REDACTED]"),
            ("aws AKIAIOSFODNN7EXAMPLE.", "aws [REDACTED]."),
            ("ghp_0123456789abcdefABCDEF", "[REDACTED]"),
            ("slack xoxb-1234-5678-abcdefghij", "slack [REDACTED]"),
            ("api_key=abc123", "api_key=[REDACTED]"),
            ("OPENAI_API_KEY=sk-x", "OPENAI_API_KEY=[REDACTED]"),
            (r#"{"api_key": "hunter2"}"#, r#"{"api_key": "[REDACTED]"}"#),
            (r#"{"password":"p w"}"#, r#"{"password":"[REDACTED]"}"#),
            ("Authorization: Bearer abc.def.ghi", "Authorization: Bearer [REDACTED]"),
            (
                r#"curl -H "Authorization: Bearer tok123456789" x"#,
                r#"curl -H "Authorization: Bearer [REDACTED]" x"#,
            ),
            (
                r#"{"Authorization": "Basic dXNlcjpwdw=="}"#,
                r#"{"Authorization": "[REDACTED]"}"#,
            ),
            ("x-api-key: abcdef", "x-api-key: [REDACTED]"),
            ("use Bearer 0123456789abcdef now", "use Bearer [REDACTED] now"),
            (
                "postgres://admin:s3cret@db:5432/x",
                "postgres://admin:[REDACTED]@db:5432/x",
            ),
            (
                "https://user:pa:ss@example.com/path?q=1",
                "https://user:[REDACTED]@example.com/path?q=1",
            ),
            ("password: hunter2\nnext", "password: [REDACTED]\nnext"),
            ("export DB_PASSWORD=x1", "export DB_PASSWORD=[REDACTED]"),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY----- after",
                "[REDACTED] after",
            ),
            ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOjF9.sig_x", "jwt [REDACTED]"),
            ("bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq", "[REDACTED]"),
        ];
        for (input, want) in cases {
            assert_eq!(redact_text(input), want, "{input}");
        }
    }

    #[test]
    fn ordinary_text_is_left_alone() {
        for text in [
            "READFILE please read hello.txt",
            "max_tokens: 100, token_count=5",
            "the key: a string",
            "I have a password: it is long",
            "sk-short",
            "task-1234567890abcdef",
            "ask-anything-you-want-please",
            "https://example.com/a@b",
            "http://user@example.com/",
            "a == b; api_key == other",
            "api_key=os.getenv(\"X\")",
            "Bearer short",
            "MOCK-FINAL-ANSWER",
            "é ü 中文 🙂",
        ] {
            assert!(
                matches!(redact_text(text), Cow::Borrowed(_)),
                "{text} became {}",
                redact_text(text)
            );
        }
    }

    #[test]
    fn redaction_is_idempotent() {
        let text = "api_key=abc Authorization: Bearer xyz123456789 sk-abcdefghijklmnop";
        let once = redact_text(text).into_owned();
        assert_eq!(redact_text(&once), once);
    }

    #[test]
    fn secret_keys_of_json_objects_lose_their_values_whatever_they_are() {
        let mut v = json!({
            "path": "/tmp/x",
            "api_key": "abc",
            "headers": {"Authorization": "Bearer tok", "X-Api-Key": 123, "accept": "json"},
            "token": {"nested": "value"},
            "key": null,
            "session_id": "keep",
            "max_tokens": 10,
            "list": ["sk-abcdefghijklmnop1234", "plain"],
        });
        redact_value(&mut v);
        assert_eq!(
            v,
            json!({
                "path": "/tmp/x",
                "api_key": REDACTED,
                "headers": {"Authorization": REDACTED, "X-Api-Key": REDACTED, "accept": "json"},
                "token": REDACTED,
                "key": null,
                "session_id": "keep",
                "max_tokens": 10,
                "list": [REDACTED, "plain"],
            })
        );
    }

    #[test]
    fn long_text_is_cut_at_a_char_boundary_with_a_marker() {
        let text = "é".repeat(1000);
        let cut = truncate_text(&text, 100);
        assert!(cut.len() <= 100, "{}", cut.len());
        assert!(cut.ends_with(" bytes]"));
        assert!(cut.starts_with("éé"));
        assert_eq!(truncate_text("short", 100), "short");
    }

    #[test]
    fn truncation_keeps_json_valid_and_its_shape() {
        let cases = [
            json!({"a": "x".repeat(10_000), "b": 1}),
            json!([{"role": "user", "content": "y".repeat(50_000)}, {"role": "assistant", "content": "ok"}]),
            Value::Array((0..10_000).map(Value::from).collect()),
            Value::Object((0..5_000).map(|i| (format!("k{i}"), Value::from(i))).collect()),
            json!("z".repeat(100_000)),
        ];
        for value in cases {
            for max in [64, 512, 4096] {
                let cut = truncate_value(value.clone(), max);
                let text = serde_json::to_string(&cut).expect("serializes");
                assert!(text.len() <= max, "{} > {max}: {text:.200}", text.len());
                let back: Value = serde_json::from_str(&text).expect("valid JSON");
                if max >= 512 {
                    // Same kind of value at the top.
                    assert_eq!(
                        std::mem::discriminant(&back),
                        std::mem::discriminant(&value),
                        "{text:.200}"
                    );
                }
                assert!(text.contains("truncated") || text.contains("more"), "{text:.200}");
            }
        }
    }

    #[test]
    fn small_values_are_kept_as_they_are() {
        let v = json!({"path": "/home/user/work/hello.txt"});
        assert_eq!(truncate_value(v.clone(), 1024), v);
    }

    #[test]
    fn deep_nesting_is_cut_without_recursing_past_the_limit() {
        let mut v = Value::from(1);
        for _ in 0..(MAX_DEPTH * 3) {
            v = Value::Array(vec![v]);
        }
        let mut redacted = v.clone();
        redact_value(&mut redacted);
        let cut = truncate_value(v, 1 << 20);
        let text = serde_json::to_string(&cut).expect("serializes");
        assert!(text.contains("nested too deep"));
        assert!(serde_json::to_string(&redacted)
            .expect("serializes")
            .contains("nested too deep"));
    }
}
