//! Reading recorded hook calls (JSON lines) and applying them.
//!
//! A record is `{"hook": NAME, "kwargs": {...}, "t": SECONDS, "pid": N,
//! "thread": NAME, "seq": N}` as the e2e kit's probe writes them; only
//! `hook` and `kwargs` are required. Records are applied in `(t, seq)`
//! order, through the same decoder the Python binding uses.

use std::path::Path;

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::BufRead as _;

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::hook::{decode, DecodeOptions, Decoded, HookEvent};
use crate::store::{Applied, EventContext, Store};

/// Page cache for bulk replay, so a batch's pages stay in memory until commit.
const BULK_CACHE_KIB: u32 = 64 * 1024;

/// How many events one replay transaction carries.
const BATCH: usize = 2048;

/// Lines read before they are parsed, on two threads: recorded lines are
/// kilobytes of JSON, and parsing is a third of a replay's time.
const PARSE_CHUNK: usize = 4096;

/// One parsed record.
#[derive(Debug, Clone)]
pub struct Record {
    pub hook: String,
    pub kwargs: serde_json::Map<String, Value>,
    pub t: Option<f64>,
    pub seq: Option<i64>,
    pub pid: Option<i64>,
    pub thread: Option<String>,
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
    let top: HashMap<Cow<'_, str>, &RawValue> = match serde_json::from_str(line) {
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
    let raw_kwargs: HashMap<Cow<'_, str>, &RawValue> = match top.get("kwargs") {
        Some(raw) => serde_json::from_str(raw.get()).map_err(|_| "\"kwargs\" is not an object".to_string())?,
        None => return Err("no \"kwargs\"".into()),
    };
    // A spooled record says whether content was captured when it was copied.
    let capture: Option<bool> = top
        .get("capture")
        .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
        .and_then(|v| v.as_bool());
    let capture_content = capture.unwrap_or(capture_content);
    let mut kwargs = Map::new();
    if let Some(keys) = crate::hook::keys(&hook) {
        let content: &[&str] = if capture_content { keys.content } else { &[] };
        for key in keys.always.iter().chain(content) {
            if let Some(raw) = raw_kwargs.get(*key) {
                // A value the parser refuses (nested past its limit) must not
                // cost the record: the decoder sees a string where it wanted
                // something else, repairs what it can and counts the problem.
                let value = serde_json::from_str(raw.get())
                    .unwrap_or_else(|e| Value::String(format!("unparseable value: {e}")));
                kwargs.insert((*key).to_string(), value);
            }
        }
    }
    let small = |key: &str| {
        top.get(key)
            .and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok())
    };
    Ok(Some(Record {
        hook,
        kwargs,
        t: small("t").and_then(|v| v.as_f64()).filter(|t| t.is_finite()),
        seq: small("seq").and_then(|v| v.as_i64()),
        pid: small("pid").and_then(|v| v.as_i64()),
        thread: small("thread").and_then(|v| v.as_str().map(str::to_string)),
        capture,
    }))
}

/// What a replay did.
#[derive(Debug, Default)]
pub struct ReplayStats {
    pub records: usize,
    pub applied: usize,
    pub duplicates: usize,
    /// Hooks the bridge does not use.
    pub ignored: usize,
    /// Records missing the id they are keyed by.
    pub unusable: usize,
    /// Kwargs that had to be repaired.
    pub problems: usize,
    /// Lines that are not records, with file and line number.
    pub bad_lines: Vec<Error>,
}

/// Reads `path` and applies its records to `store`. Bad lines are
/// collected in the stats; the valid lines of the file still land.
pub fn replay_file(store: &mut Store, path: &Path, opts: DecodeOptions, stats: &mut ReplayStats) -> Result<()> {
    store.set_cache_size_kib(BULK_CACHE_KIB)?;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut records = Vec::new();
    let mut chunk: Vec<(usize, Vec<u8>)> = Vec::with_capacity(PARSE_CHUNK);
    let mut line_no = 0;
    loop {
        let mut buf = Vec::new();
        let n = reader.read_until(b'\n', &mut buf).map_err(|e| Error::io(path, e))?;
        if n > 0 {
            line_no += 1;
            chunk.push((line_no, buf));
        }
        if chunk.len() == PARSE_CHUNK || (n == 0 && !chunk.is_empty()) {
            for (line, parsed) in parse_chunk(&chunk, opts.capture_content) {
                match parsed {
                    Ok(Some(r)) => records.push(r),
                    Ok(None) => {}
                    Err(message) => stats.bad_lines.push(Error::BadRecord {
                        path: path.to_path_buf(),
                        line,
                        message,
                    }),
                }
            }
            chunk.clear();
        }
        if n == 0 {
            break;
        }
    }
    records.sort_by(|a, b| {
        let ta = a.t.unwrap_or(f64::MAX);
        let tb = b.t.unwrap_or(f64::MAX);
        ta.total_cmp(&tb).then(a.seq.cmp(&b.seq))
    });
    stats.records += records.len();
    let mut batch: Vec<(HookEvent, EventContext)> = Vec::with_capacity(BATCH);
    for r in records {
        let opts = DecodeOptions {
            capture_content: r.capture.unwrap_or(opts.capture_content),
            ..opts
        };
        match decode(&r.hook, &r.kwargs, r.t.unwrap_or(0.0), opts) {
            Decoded::Ignored => stats.ignored += 1,
            Decoded::Unusable(_) => stats.unusable += 1,
            Decoded::Event(event, problems) => {
                stats.problems += problems.len();
                let ctx = EventContext {
                    pid: r.pid,
                    thread: r.thread,
                    problems,
                };
                batch.push((event, ctx));
                if batch.len() == BATCH {
                    flush(store, &mut batch, stats)?;
                }
            }
        }
    }
    flush(store, &mut batch, stats)
}

/// Parses `lines` (numbered) in order, the second half on another thread.
#[allow(clippy::type_complexity)]
fn parse_chunk(
    lines: &[(usize, Vec<u8>)],
    capture_content: bool,
) -> Vec<(usize, std::result::Result<Option<Record>, String>)> {
    let parse = |part: &[(usize, Vec<u8>)]| -> Vec<_> {
        part.iter()
            .map(|(line, bytes)| {
                // Invalid UTF-8 is replaced, not fatal: the rest of the line may be a fine record.
                let text = String::from_utf8_lossy(bytes);
                (*line, parse_line(&text, capture_content))
            })
            .collect()
    };
    let (first, second) = lines.split_at(lines.len() / 2);
    std::thread::scope(|scope| {
        let other = scope.spawn(|| parse(second));
        let mut out = parse(first);
        out.extend(other.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)));
        out
    })
}

fn flush(store: &mut Store, batch: &mut Vec<(HookEvent, EventContext)>, stats: &mut ReplayStats) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let applied = store.apply_batch(batch.iter().map(|(e, c)| (e, c)))?;
    for a in applied {
        match a {
            Applied::New => stats.applied += 1,
            Applied::Duplicate => stats.duplicates += 1,
        }
    }
    batch.clear();
    Ok(())
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
}
