//! The spool record: one hook call as one JSON line,
//! `{"hook": NAME, "t": SECONDS, "pid": N, "thread": NAME, "profile": NAME,
//! "capture": BOOL, "kwargs": {...}}`. The same lines are the e2e kit's
//! probe lines and what `hermes-meter replay` reads; only `hook` and
//! `kwargs` are required (a recorded line may also carry `seq`). `profile`
//! is the Hermes profile whose plugin instance took the call (a
//! multi-profile gateway registers the plugin once per profile); lines
//! written before it existed, and calls of no known profile, have none.
//!
//! Owns: the record's layout, both ways: writing one ([`RecordWriter`],
//! [`write_record`]; the binding writes Python values straight into a
//! [`RecordWriter`]) and reading one back ([`parse_line`], keeping only the
//! kwargs the decoder reads), and decoding a call from its record
//! ([`decode_record`]), which the writer thread and a gating hook share.
//! Must not touch: the store (`replay.rs` and the writer apply records;
//! `crates/hermes-meter-store/src/doctor.rs` reads spools with this), files.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{decode, decode_kwargs, DecodeOptions, Decoded, Kwargs, Problem};

/// One parsed record.
#[derive(Debug, Clone)]
pub struct Record {
    pub hook: String,
    pub kwargs: Map<String, Value>,
    pub t: Option<f64>,
    pub seq: Option<i64>,
    pub pid: Option<i64>,
    pub thread: Option<String>,
    /// The Hermes profile the call was made in, when the record says.
    pub profile: Option<String>,
    /// Whether content was captured when the record was made (spool
    /// records say; recorded fixtures do not, and the caller decides).
    pub capture: Option<bool>,
}

/// Parses one line, keeping only the kwargs the decoder reads (content
/// kwargs only when `capture_content`). `Ok(None)` for a blank line.
///
/// Recorded lines carry whole prompts and request bodies (kilobytes each);
/// the kwargs are first split into raw, unparsed values, so skipping the
/// ones nobody reads costs a scan and no allocation.
pub fn parse_line(line: &str, capture_content: bool) -> std::result::Result<Option<Record>, String> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let split = match Split::fast(line) {
        Some(split) => split,
        None => Split::checked(line)?,
    };
    // A spooled record says whether content was captured when it was copied.
    let capture: Option<bool> = split
        .capture
        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
        .and_then(|v| v.as_bool());
    let capture_content = capture.unwrap_or(capture_content);
    let mut kwargs = Map::new();
    if let Some(keys) = crate::hook::keys(&split.hook) {
        let content: &[&str] = if capture_content { keys.content } else { keys.digested };
        // The digest scrub wrote of the digested kwargs.
        let digest: &[&str] = if keys.digested.is_empty() {
            &[]
        } else {
            &[crate::hook::ARGS_DIGEST, crate::hook::ARGS_METER]
        };
        for key in keys.always.iter().chain(content).chain(digest) {
            if let Some(raw) = split.kwargs.get(*key) {
                // A value the parser refuses (nested past its limit) must not
                // cost the record: the decoder sees a string where it wanted
                // something else, repairs what it can and counts the problem.
                let value = serde_json::from_str(raw.get())
                    .unwrap_or_else(|e| Value::String(format!("unparseable value: {e}")));
                kwargs.insert((*key).to_string(), value);
            }
        }
    }
    let small = |raw: Option<&RawValue>| raw.and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok());
    Ok(Some(Record {
        hook: split.hook,
        kwargs,
        t: small(split.t).and_then(|v| v.as_f64()).filter(|t| t.is_finite()),
        seq: small(split.seq).and_then(|v| v.as_i64()),
        pid: small(split.pid).and_then(|v| v.as_i64()),
        thread: small(split.thread).and_then(|v| v.as_str().map(str::to_string)),
        profile: small(split.profile)
            .and_then(|v| v.as_str().map(str::to_string))
            .filter(|p| !p.is_empty()),
        capture,
    }))
}

/// A record line split into its fields, every value still unparsed JSON.
struct Split<'a> {
    hook: String,
    kwargs: HashMap<Cow<'a, str>, &'a RawValue>,
    t: Option<&'a RawValue>,
    seq: Option<&'a RawValue>,
    pid: Option<&'a RawValue>,
    thread: Option<&'a RawValue>,
    profile: Option<&'a RawValue>,
    capture: Option<&'a RawValue>,
}

impl<'a> Split<'a> {
    /// One pass over a well-formed line. Recorded lines carry whole prompts
    /// and request bodies (kilobytes each) in their kwargs, which are split
    /// into raw values as the line is read: scanned once, never copied.
    /// `None` for anything unusual; [`Split::checked`] then says what.
    fn fast(line: &'a str) -> Option<Self> {
        #[derive(serde::Deserialize)]
        struct Line<'a> {
            #[serde(borrow)]
            hook: Option<Cow<'a, str>>,
            #[serde(borrow)]
            kwargs: Option<HashMap<Cow<'a, str>, &'a RawValue>>,
            #[serde(borrow)]
            t: Option<&'a RawValue>,
            #[serde(borrow)]
            seq: Option<&'a RawValue>,
            #[serde(borrow)]
            pid: Option<&'a RawValue>,
            #[serde(borrow)]
            thread: Option<&'a RawValue>,
            #[serde(borrow)]
            profile: Option<&'a RawValue>,
            #[serde(borrow)]
            capture: Option<&'a RawValue>,
        }
        let line: Line<'a> = serde_json::from_str(line).ok()?;
        let hook = line.hook.filter(|h| !h.is_empty())?.into_owned();
        Some(Split {
            hook,
            kwargs: line.kwargs?,
            t: line.t,
            seq: line.seq,
            pid: line.pid,
            thread: line.thread,
            profile: line.profile,
            capture: line.capture,
        })
    }

    /// Field by field, saying what is wrong with a line that is not a record.
    fn checked(line: &'a str) -> std::result::Result<Self, String> {
        let top: HashMap<Cow<'a, str>, &'a RawValue> = match serde_json::from_str(line) {
            Ok(top) => top,
            Err(e) => {
                return Err(match serde_json::from_str::<&RawValue>(line) {
                    Ok(_) => "not a JSON object".to_string(),
                    Err(_) => format!("not JSON: {e}"),
                })
            }
        };
        let hook: String = match top.get("hook").map(|raw| serde_json::from_str::<Value>(raw.get())) {
            Some(Ok(Value::String(s))) if !s.is_empty() => s,
            Some(_) => return Err("\"hook\" is not a string".into()),
            None => return Err("no \"hook\"".into()),
        };
        let kwargs: HashMap<Cow<'a, str>, &'a RawValue> = match top.get("kwargs") {
            Some(raw) => serde_json::from_str(raw.get()).map_err(|_| "\"kwargs\" is not an object".to_string())?,
            None => return Err("no \"kwargs\"".into()),
        };
        Ok(Split {
            hook,
            kwargs,
            t: top.get("t").copied(),
            seq: top.get("seq").copied(),
            pid: top.get("pid").copied(),
            thread: top.get("thread").copied(),
            profile: top.get("profile").copied(),
            capture: top.get("capture").copied(),
        })
    }
}

/// A line as text. Invalid UTF-8 is replaced, not fatal: the rest of the
/// line may be a fine record. (Checked first with `from_utf8`, many times
/// faster than the lossy conversion on the kilobytes of a recorded line.)
pub fn utf8(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Writes one hook call as a spool record (its newline included), of no
/// known profile. `kwargs` are the plain values the binding copied;
/// `capture` says whether content kwargs were among them, so recovery
/// keeps exactly what the live path kept.
pub fn write_record(
    hook: &str,
    at: f64,
    pid: Option<i64>,
    thread: Option<&str>,
    kwargs: &Map<String, Value>,
    capture: bool,
) -> Vec<u8> {
    let origin = Origin {
        pid,
        thread,
        profile: None,
    };
    let mut w = RecordWriter::begin(hook, at, origin, capture);
    for (key, value) in kwargs {
        w.kwarg(key, value);
    }
    w.finish()
}

/// Where a call was made, as a record's header says it: the process, its
/// thread and the Hermes profile (each left out when unknown).
#[derive(Debug, Clone, Copy, Default)]
pub struct Origin<'a> {
    pub pid: Option<i64>,
    pub thread: Option<&'a str>,
    /// Left out when empty too, so a record of no known profile reads as
    /// one written before the field existed.
    pub profile: Option<&'a str>,
}

/// A spool record written field by field: the one place its layout is
/// spelled out. [`write_record`] writes copied kwargs with it; the binding
/// writes kwargs straight from Python values into [`RecordWriter::buf`].
pub struct RecordWriter {
    line: Vec<u8>,
    /// No kwarg written yet (no comma before the next one).
    first: bool,
}

/// Where a [`RecordWriter`] was, to go back to.
#[derive(Debug, Clone, Copy)]
pub struct RecordMark(usize, bool);

impl RecordWriter {
    /// Writes everything before the kwargs' values.
    pub fn begin(hook: &str, at: f64, origin: Origin<'_>, capture: bool) -> Self {
        // Sized for a typical record, so the hook path does not regrow it.
        let mut line = Vec::with_capacity(1024);
        line.extend_from_slice(b"{\"hook\":");
        write_json(&mut line, hook);
        line.extend_from_slice(b",\"t\":");
        write_json(&mut line, &at);
        if let Some(pid) = origin.pid {
            line.extend_from_slice(b",\"pid\":");
            write_json(&mut line, &pid);
        }
        if let Some(thread) = origin.thread {
            line.extend_from_slice(b",\"thread\":");
            write_json(&mut line, thread);
        }
        if let Some(profile) = origin.profile.filter(|p| !p.is_empty()) {
            line.extend_from_slice(b",\"profile\":");
            write_json(&mut line, profile);
        }
        line.extend_from_slice(if capture {
            b",\"capture\":true,\"kwargs\":{"
        } else {
            b",\"capture\":false,\"kwargs\":{"
        });
        RecordWriter { line, first: true }
    }

    /// Writes kwarg `key` with a plain JSON value.
    pub fn kwarg(&mut self, key: &str, value: &Value) {
        self.key(key);
        write_json(&mut self.line, value);
    }

    /// Starts kwarg `key`: its value's JSON goes into [`RecordWriter::buf`]
    /// next.
    pub fn key(&mut self, key: &str) {
        if !self.first {
            self.line.push(b',');
        }
        self.first = false;
        write_json(&mut self.line, key);
        self.line.push(b':');
    }

    /// The line so far, for a value's JSON.
    pub fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.line
    }

    /// Where the writer is now.
    pub fn mark(&self) -> RecordMark {
        RecordMark(self.line.len(), self.first)
    }

    /// Forgets everything written since `mark` (a kwarg left out).
    pub fn rewind(&mut self, mark: RecordMark) {
        self.line.truncate(mark.0);
        self.first = mark.1;
    }

    /// Ends the record, newline included.
    pub fn finish(mut self) -> Vec<u8> {
        self.line.extend_from_slice(b"}}\n");
        self.line
    }
}

/// Serializes a plain value; writing JSON into a Vec cannot fail.
pub fn write_json<T: serde::Serialize + ?Sized>(line: &mut Vec<u8>, value: &T) {
    let _ = serde_json::to_writer(&mut *line, value);
}

/// Decodes a hook call from the spool record this process wrote of it
/// ([`RecordWriter`]), with the capture setting the record was made with,
/// and returns it with the profile the record names (what the writer
/// records, so the live path, recovery and replay read the same bytes).
/// A record that cannot be read is unusable.
///
/// This runs on the hook thread for every call a gate may answer, so the
/// line is read in one pass into its kwargs' raw values, which the decoder
/// parses as it reads them ([`Kwargs::Raw`]): no map of values is built. A
/// line that pass refuses goes through [`parse_line`], which says what is
/// wrong with it; both decode to the same event.
pub fn decode_record(hook: &str, line: &[u8], at: f64, opts: DecodeOptions) -> (Decoded, Option<String>) {
    if let Some(own) = OwnRecord::read(line) {
        let opts = DecodeOptions {
            capture_content: own.capture.unwrap_or(opts.capture_content),
            ..opts
        };
        let profile = own.profile.filter(|p| !p.is_empty()).map(Cow::into_owned);
        return (decode_kwargs(hook, Kwargs::Raw(&own.kwargs.0), at, opts), profile);
    }
    let record = match parse_line(&utf8(line), opts.capture_content) {
        Ok(Some(record)) => record,
        Ok(None) => return (unreadable("an empty spool record".into()), None),
        Err(e) => return (unreadable(e), None),
    };
    let opts = DecodeOptions {
        capture_content: record.capture.unwrap_or(opts.capture_content),
        ..opts
    };
    (decode(hook, &record.kwargs, at, opts), record.profile)
}

/// What [`decode_record`] reads of a record in its one pass.
#[derive(serde::Deserialize)]
struct OwnRecord<'a> {
    #[serde(borrow)]
    kwargs: RawEntries<'a>,
    capture: Option<bool>,
    #[serde(borrow)]
    profile: Option<Cow<'a, str>>,
}

impl<'a> OwnRecord<'a> {
    /// `None` for anything unusual (not UTF-8, a field twice, an escaped
    /// key): [`parse_line`] reads those.
    fn read(line: &'a [u8]) -> Option<Self> {
        serde_json::from_str(std::str::from_utf8(line).ok()?).ok()
    }
}

/// A JSON object's entries in order, keys and values borrowed from the
/// line (a key with escapes refuses the line).
struct RawEntries<'a>(Vec<(&'a str, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for RawEntries<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Entries<'a> {
            type Value = RawEntries<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                // A typical record's kwargs, so the vector is not regrown.
                let mut entries = Vec::with_capacity(24);
                while let Some(entry) = map.next_entry()? {
                    entries.push(entry);
                }
                Ok(RawEntries(entries))
            }
        }
        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

fn unreadable(what: String) -> Decoded {
    Decoded::Unusable(vec![Problem {
        key: "(record)".into(),
        what,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_say_what_is_wrong() {
        assert!(parse_line("", false).expect("blank is fine").is_none());
        for (line, what) in [
            ("{", "not JSON"),
            ("[1]", "not a JSON object"),
            ("{\"kwargs\": {}}", "no \"hook\""),
            ("{\"hook\": \"x\"}", "no \"kwargs\""),
            ("{\"hook\": \"x\", \"kwargs\": 3}", "not an object"),
        ] {
            let err = parse_line(line, false).expect_err(line);
            assert!(err.contains(what), "{line}: {err}");
        }
    }

    #[test]
    fn a_records_profile_is_read_back_and_lines_without_one_still_parse() {
        let mut kwargs = Map::new();
        kwargs.insert("session_id".into(), Value::from("s-1"));
        kwargs.insert("turn_id".into(), Value::from("s-1:t1"));
        let origin = Origin {
            pid: Some(9),
            thread: Some("MainThread"),
            profile: Some("work"),
        };
        let mut w = RecordWriter::begin("pre_llm_call", 3.5, origin, false);
        for (key, value) in &kwargs {
            w.kwarg(key, value);
        }
        let line = w.finish();
        let text = String::from_utf8(line.clone()).expect("utf-8");
        assert!(
            text.contains(",\"profile\":\"work\","),
            "a header field, before the kwargs: {text}"
        );
        let rec = parse_line(&text, false).expect("a record").expect("one");
        assert_eq!(rec.profile.as_deref(), Some("work"));
        assert_eq!(
            (rec.pid, rec.thread.as_deref(), rec.t),
            (Some(9), Some("MainThread"), Some(3.5))
        );
        same_split(&text);
        // The profile says where the call was made, not what it was.
        let opts = DecodeOptions::default();
        let plain = write_record("pre_llm_call", 3.5, Some(9), Some("MainThread"), &kwargs, false);
        let (with, profile) = decode_record("pre_llm_call", &line, 3.5, opts);
        assert_eq!(
            profile.as_deref(),
            Some("work"),
            "the writer records the line's profile"
        );
        assert_eq!(with, decode_record("pre_llm_call", &plain, 3.5, opts).0);
        // A line the one pass refuses says the same through parse_line.
        let twice = text.replacen("{\"hook\":", "{\"capture\":null,\"hook\":", 1);
        assert_eq!(
            decode_record("pre_llm_call", twice.as_bytes(), 3.5, opts).1.as_deref(),
            Some("work")
        );
        assert_eq!(decode_record("pre_llm_call", &plain, 3.5, opts).1, None);
        assert!(matches!(
            decode_record("pre_llm_call", &line, 3.5, opts).0,
            Decoded::Event(..)
        ));
        // Lines of no profile: none written, none read (an old spool, a
        // recorded fixture, an empty name).
        let old = String::from_utf8(plain).expect("utf-8");
        assert!(!old.contains("profile"), "{old}");
        assert_eq!(parse_line(&old, false).expect("a record").expect("one").profile, None);
        let origin = Origin {
            profile: Some(""),
            ..Origin::default()
        };
        let empty = RecordWriter::begin("pre_llm_call", 1.0, origin, false).finish();
        assert!(!String::from_utf8(empty).expect("utf-8").contains("profile"));
        for line in [
            r#"{"hook": "pre_llm_call", "profile": 7, "kwargs": {"session_id": "s"}}"#,
            r#"{"hook": "pre_llm_call", "profile": "", "kwargs": {"session_id": "s"}}"#,
        ] {
            assert_eq!(
                parse_line(line, false).expect("a record").expect("one").profile,
                None,
                "{line}"
            );
        }
    }

    /// The one-pass split must read every field as the checked one does,
    /// or a replay would decode other events than the spool recorded.
    fn same_split(line: &str) {
        let fast = Split::fast(line).expect("a well-formed line");
        let checked = Split::checked(line).expect("a record");
        let raw = |v: Option<&RawValue>| v.map(|r| r.get().to_string());
        assert_eq!(fast.hook, checked.hook);
        let mut a: Vec<_> = fast.kwargs.iter().map(|(k, v)| (k.to_string(), v.get())).collect();
        let mut b: Vec<_> = checked.kwargs.iter().map(|(k, v)| (k.to_string(), v.get())).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b);
        for (x, y) in [
            (fast.t, checked.t),
            (fast.seq, checked.seq),
            (fast.pid, checked.pid),
            (fast.thread, checked.thread),
            (fast.profile, checked.profile),
            (fast.capture, checked.capture),
        ] {
            assert_eq!(raw(x), raw(y));
        }
    }

    #[test]
    fn the_one_pass_split_reads_what_the_checked_one_does() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut lines = 0;
        for file in std::fs::read_dir(dir).expect("fixtures") {
            let path = file.expect("entry").path();
            if path.extension().is_some_and(|e| e == "jsonl") {
                for line in std::fs::read_to_string(&path).expect("read").lines() {
                    same_split(line);
                    lines += 1;
                }
            }
        }
        assert!(lines > 200);
        same_split(
            r#"{"hook": "h\u00e9", "kwargs": {"a\"b": [1, {"x": null}], "a\"b": 2}, "t": 1e3, "extra": {"y": []}}"#,
        );
        // What the one pass gives up on, the checked path still reads.
        for line in [
            r#"{"hook": "x", "hook": "y", "kwargs": {}}"#,
            r#"{"hook": "", "kwargs": {}}"#,
        ] {
            assert!(Split::fast(line).is_none(), "{line}");
        }
        assert_eq!(
            parse_line(r#"{"hook": "x", "hook": "y", "kwargs": {}}"#, false)
                .expect("a record")
                .expect("one")
                .hook,
            "y"
        );
    }

    /// The hook thread reads a record's values raw, the replay parses them
    /// into a map: every kind of value a future Hermes (or garbage) might
    /// pass must decode the same both ways, including values the parser
    /// refuses and keys given twice.
    #[test]
    fn raw_values_decode_as_parsed_ones() {
        let deep = format!("{}{}", "[".repeat(130), "]".repeat(130));
        let values: Vec<&str> = vec![
            r#""plain""#,
            r#""esc\"aped\n\u00e9""#,
            "\"é ü 🙂\"",
            r#""""#,
            r#""  42 ""#,
            r#""7.5""#,
            r#""yes""#,
            "12",
            "0",
            "-7",
            "18446744073709551615",
            "99999999999999999999",
            "123456789012345678",
            "1.5",
            "-0.0",
            "1e3",
            "1e400",
            "true",
            "false",
            "null",
            r#"[1, "a"]"#,
            r#"{"input_tokens": 5, "output_tokens": "6", "cost": 0.25, "status": "ok", "type": "E", "message": "m", "fields": {"content": "x"}}"#,
            r#"{"input_tokens": 1e400}"#,
            r#"{"exit_code": 2, "error": "boom", "success": false}"#,
            r#""{\"exit_code\": 3, \"success\": false}""#,
            &deep,
        ];
        let mut compared = 0;
        for hook in crate::hook::HOOK_NAMES {
            let Some(keys) = crate::hook::keys(hook) else {
                continue;
            };
            let all: Vec<&str> = keys.always.iter().chain(keys.content).copied().collect();
            for capture in [false, true] {
                for offset in 0..values.len() {
                    let mut kwargs: Vec<String> = all
                        .iter()
                        .enumerate()
                        .map(|(i, key)| format!("\"{key}\": {}", values[(i + offset) % values.len()]))
                        .collect();
                    // The same key again, and one spelled with an escape.
                    kwargs.push(format!("\"{}\": {}", all[0], values[offset]));
                    if offset % 3 == 0 {
                        kwargs.push(r#""session\u005fid": "escaped-key""#.to_string());
                    }
                    let line = format!(
                        r#"{{"hook":"{hook}","t":1.0,"capture":{capture},"kwargs":{{{}}}}}"#,
                        kwargs.join(",")
                    );
                    let opts = DecodeOptions {
                        capture_content: capture,
                        ..DecodeOptions::default()
                    };
                    assert_eq!(OwnRecord::read(line.as_bytes()).is_some(), offset % 3 != 0, "{line}");
                    let record = parse_line(&line, !capture).expect("a record").expect("one");
                    let expected = decode(hook, &record.kwargs, 2.0, opts);
                    assert_eq!(decode_record(hook, line.as_bytes(), 2.0, opts).0, expected, "{line}");
                    compared += 1;
                }
            }
        }
        assert!(compared > 300, "{compared}");
    }

    /// The hook thread and the writer decode a call from the record this
    /// process wrote of it: every fixture call must decode from its line
    /// to the event its kwargs decode to, with capture on and off, also
    /// when the one-pass read refuses the line and `parse_line` reads it.
    #[test]
    fn a_call_decodes_from_its_record_as_from_its_kwargs() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut calls = 0;
        for file in std::fs::read_dir(dir).expect("fixtures") {
            let path = file.expect("entry").path();
            if path.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            for line in std::fs::read_to_string(&path).expect("read").lines() {
                for capture in [false, true] {
                    let Ok(Some(rec)) = parse_line(line, capture) else {
                        continue;
                    };
                    let opts = DecodeOptions {
                        capture_content: capture,
                        ..DecodeOptions::default()
                    };
                    let expected = decode(&rec.hook, &rec.kwargs, 7.5, opts);
                    let written = write_record(&rec.hook, 7.5, Some(1), Some("t"), &rec.kwargs, capture);
                    assert_eq!(decode_record(&rec.hook, &written, 7.5, opts).0, expected, "{line}");
                    // The same line with a field twice: the one pass refuses it.
                    let text = String::from_utf8(written).expect("utf-8");
                    let twice = text.replacen("{\"hook\":", "{\"capture\":null,\"hook\":", 1);
                    assert!(serde_json::from_str::<serde_json::Value>(&twice).is_ok());
                    assert_eq!(
                        decode_record(&rec.hook, twice.as_bytes(), 7.5, opts).0,
                        expected,
                        "{twice}"
                    );
                    calls += 1;
                }
            }
        }
        assert!(calls > 400, "{calls}");
        assert!(matches!(
            decode_record("pre_llm_call", b"{", 1.0, DecodeOptions::default()).0,
            Decoded::Unusable(_)
        ));
        assert!(matches!(
            decode_record("pre_llm_call", b"", 1.0, DecodeOptions::default()).0,
            Decoded::Unusable(_)
        ));
    }
}
