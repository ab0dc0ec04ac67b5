//! Reading recorded hook calls (JSON lines) and applying them.
//!
//! A record is `{"hook": NAME, "kwargs": {...}, "t": SECONDS, "pid": N,
//! "thread": NAME, "seq": N}` as the e2e kit's probe writes them; only
//! `hook` and `kwargs` are required. Records are applied in `(t, seq)`
//! order, through the same decoder the Python binding uses.

use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::hook::{decode, DecodeOptions, Decoded, HookEvent};
use crate::store::{Applied, EventContext, Store};

/// How many events one replay transaction carries.
const BATCH: usize = 2048;

/// One parsed record.
#[derive(Debug, Clone)]
pub struct Record {
    pub hook: String,
    pub kwargs: serde_json::Map<String, Value>,
    pub t: Option<f64>,
    pub seq: Option<i64>,
    pub pid: Option<i64>,
    pub thread: Option<String>,
}

/// Parses one line. `Ok(None)` for a blank line.
pub fn parse_line(line: &str) -> std::result::Result<Option<Record>, String> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(mut obj) = value else {
        return Err("not a JSON object".into());
    };
    let hook = match obj.remove("hook") {
        Some(Value::String(s)) if !s.is_empty() => s,
        Some(_) => return Err("\"hook\" is not a string".into()),
        None => return Err("no \"hook\"".into()),
    };
    let kwargs = match obj.remove("kwargs") {
        Some(Value::Object(m)) => m,
        Some(_) => return Err("\"kwargs\" is not an object".into()),
        None => return Err("no \"kwargs\"".into()),
    };
    Ok(Some(Record {
        hook,
        kwargs,
        t: obj.get("t").and_then(Value::as_f64).filter(|t| t.is_finite()),
        seq: obj.get("seq").and_then(Value::as_i64),
        pid: obj.get("pid").and_then(Value::as_i64),
        thread: obj.get("thread").and_then(Value::as_str).map(str::to_string),
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
    let text = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let text = String::from_utf8_lossy(&text);
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        match parse_line(line) {
            Ok(Some(r)) => records.push(r),
            Ok(None) => {}
            Err(message) => stats.bad_lines.push(Error::BadRecord {
                path: path.to_path_buf(),
                line: i + 1,
                message,
            }),
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
        assert!(parse_line("").expect("blank is fine").is_none());
        for (line, what) in [
            ("{", "not JSON"),
            ("[1]", "not a JSON object"),
            ("{\"kwargs\": {}}", "no \"hook\""),
            ("{\"hook\": \"x\"}", "no \"kwargs\""),
            ("{\"hook\": \"x\", \"kwargs\": 3}", "not an object"),
        ] {
            let err = parse_line(line).expect_err(line);
            assert!(err.contains(what), "{line}: {err}");
        }
    }
}
