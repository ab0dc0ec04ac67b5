//! Reading recorded hook calls (JSON lines) and applying them.
//!
//! A record is `{"hook": NAME, "kwargs": {...}, "t": SECONDS, "pid": N,
//! "thread": NAME, "seq": N}` as the e2e kit's probe writes them; only
//! `hook` and `kwargs` are required. Records are applied in `(t, seq)`
//! order, through the same decoder the Python binding uses.

use std::path::Path;

use std::borrow::Cow;
use std::io::Read as _;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::{Applied, EventContext, Writer};
use hermes_meter_model::hook::{decode, DecodeOptions, Decoded, HookEvent};
/// A recorded line's reader, with the decoder (re-exported: replay reads them).
use hermes_meter_model::hook::{parse_line, utf8, Record};

/// Page cache for bulk replay, so a batch's pages stay in memory until commit.
const BULK_CACHE_KIB: u32 = 64 * 1024;

/// How many events one replay transaction carries.
const BATCH: usize = 2048;

/// Lines a parsing thread parses and hands over at a time.
const PARSE_CHUNK: usize = 512;

/// What the indexing pass reads at a time (it grows for a longer line).
/// Small in unit tests, so a small file spans many blocks.
const READ_BLOCK: usize = if cfg!(test) { 4 << 10 } else { 16 << 20 };

/// What a replay did.
#[derive(Debug, Default)]
pub struct ReplayStats {
    pub records: usize,
    pub applied: usize,
    pub duplicates: usize,
    /// Events older than the journal's retention horizon, refused (the
    /// store can no longer tell whether it has them).
    pub too_old: usize,
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
///
/// Three steps, the last two at once:
/// 1. the file is read through once for where each line is and its order
///    key (`t`, `seq`), read from the fields before its kwargs
///    (`order_key`), which is cheap: the kwargs are what is large;
/// 2. parsing threads read the lines again in `(t, seq)` order, a chunk
///    at a time, and parse and decode them;
/// 3. this thread applies the decoded chunks as they come, `BATCH` events
///    to a transaction.
///
/// The single SQLite writer is the slower side, so applying does not wait
/// for all the parsing to finish first. The file is never held whole:
/// fresh memory for a large file costs more to fault in than reading it.
pub fn replay_file(store: &mut Writer, path: &Path, opts: DecodeOptions, stats: &mut ReplayStats) -> Result<()> {
    store.set_cache_size_kib(BULK_CACHE_KIB)?;
    let (lines, keys) = index_lines(path)?;
    let order = apply_order(&keys);
    let chunks: Vec<&[usize]> = order.chunks(PARSE_CHUNK).collect();
    // One parsing thread per core but the one applying (at least one).
    let parsers = std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1).max(1));
    let mut batch: Vec<(HookEvent, EventContext)> = Vec::with_capacity(BATCH);
    let mut bad_lines = Vec::new();
    std::thread::scope(|scope| -> Result<()> {
        // Parser `p` takes chunks p, p + parsers, ... and hands each over
        // through its own channel, so chunks arrive in order.
        let receivers: Vec<_> = (0..parsers)
            .map(|p| {
                // Room for two transactions' worth: applying takes events a
                // transaction at a time, and parsing must not stall meanwhile.
                let (send, receive) = std::sync::mpsc::sync_channel(2 * BATCH.div_ceil(PARSE_CHUNK));
                let (chunks, lines) = (&chunks, &lines);
                scope.spawn(move || {
                    let mut reader = LineReader::new(path);
                    for chunk in chunks.iter().skip(p).step_by(parsers) {
                        let parsed = reader
                            .read(lines, chunk)
                            .map(|text| parse_chunk(text, lines, chunk, opts));
                        let failed = parsed.is_err();
                        if send.send(parsed).is_err() || failed {
                            return; // the applying side stopped, or the file did
                        }
                    }
                });
                receive
            })
            .collect();
        for n in 0..chunks.len() {
            let Ok(parsed) = receivers[n % parsers].recv() else {
                break; // a parser panicked; the scope rethrows it
            };
            for (line, parsed) in parsed? {
                match parsed {
                    Ok(Some(r)) => {
                        stats.records += 1;
                        match r.decoded {
                            Decoded::Ignored => stats.ignored += 1,
                            Decoded::Unusable(_) => stats.unusable += 1,
                            Decoded::Event(event, problems) => {
                                stats.problems += problems.len();
                                let ctx = EventContext {
                                    pid: r.pid,
                                    thread: r.thread,
                                    profile: r.profile,
                                    problems,
                                };
                                batch.push((event, ctx));
                                if batch.len() == BATCH {
                                    flush(store, &mut batch, stats)?;
                                }
                            }
                        }
                    }
                    Ok(None) => {}
                    Err(message) => bad_lines.push(Error::BadRecord {
                        path: path.to_path_buf(),
                        line,
                        message,
                    }),
                }
            }
        }
        Ok(())
    })?;
    flush(store, &mut batch, stats)?;
    // Reported in file order, not the order they were met in.
    bad_lines.sort_by_key(|e| match e {
        Error::BadRecord { line, .. } => *line,
        _ => 0,
    });
    stats.bad_lines.extend(bad_lines);
    Ok(())
}

/// When a record happened: its `t` (`f64::MAX` without one) and `seq`.
type OrderKey = (f64, Option<i64>);

/// Where one line of a file is (its newline included).
struct Line {
    start: u64,
    len: usize,
}

/// Reads a file block by block: where each line is, and its order key. A
/// helper thread finds the lines and keys of a block while this one reads
/// the next.
fn index_lines(path: &Path) -> Result<(Vec<Line>, Vec<OrderKey>)> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    std::thread::scope(|scope| {
        // (buffer, bytes of whole lines in it, their offset in the file)
        let (send_block, blocks) = std::sync::mpsc::sync_channel::<(Vec<u8>, usize, u64)>(1);
        // Unbounded, so the helper never waits here while this thread waits
        // to send it a block (a deadlock); a few buffers exist at most, as
        // only one block waits to be indexed.
        let (give_back, returned) = std::sync::mpsc::channel::<Vec<u8>>();
        let helper = scope.spawn(move || {
            let (mut lines, mut keys) = (Vec::new(), Vec::new());
            for (block, len, at) in blocks {
                let text = &block[..len];
                let mut start = 0;
                let ends = memchr::memchr_iter(b'\n', text).map(|i| i + 1);
                // The file's last line may have no newline.
                let last = (text.last() != Some(&b'\n')).then_some(len);
                for end in ends.chain(last) {
                    lines.push(Line {
                        start: at + start as u64,
                        len: end - start,
                    });
                    keys.push(order_key(&text[start..end]));
                    start = end;
                }
                let _ = give_back.send(block);
            }
            (lines, keys)
        });
        let mut buf = vec![0u8; READ_BLOCK];
        let (mut filled, mut at) = (0usize, 0u64);
        let read = loop {
            if filled == buf.len() {
                buf.resize(buf.len() * 2, 0); // a line longer than the block
            }
            let n = match file.read(&mut buf[filled..]) {
                Ok(n) => n,
                Err(e) => break Err(Error::io(path, e)),
            };
            filled += n;
            // Whole lines go to the helper; an unfinished last one stays,
            // unless the file ends there.
            let whole = match (n, memchr::memrchr(b'\n', &buf[..filled])) {
                (0, _) => filled,
                (_, Some(i)) => i + 1,
                (_, None) => continue,
            };
            if whole > 0 {
                let mut next = returned.try_recv().unwrap_or_else(|_| vec![0u8; READ_BLOCK]);
                let rest = filled - whole;
                if next.len() < rest.max(READ_BLOCK) {
                    next.resize(rest.max(READ_BLOCK), 0);
                }
                next[..rest].copy_from_slice(&buf[whole..filled]);
                let block = std::mem::replace(&mut buf, next);
                if send_block.send((block, whole, at)).is_err() {
                    break Ok(()); // the helper panicked; joining says so
                }
                at += whole as u64;
                filled = rest;
            }
            if n == 0 {
                break Ok(());
            }
        };
        drop(send_block);
        let indexed = helper.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        read.map(|()| indexed)
    })
}

/// A parsing thread's own handle on the file and buffer for its chunks.
struct LineReader<'p> {
    path: &'p Path,
    file: Option<std::fs::File>,
    text: Vec<u8>,
}

impl<'p> LineReader<'p> {
    fn new(path: &'p Path) -> Self {
        LineReader {
            path,
            file: None,
            text: Vec::new(),
        }
    }

    /// The chunk's lines back to back, each run of lines that follow one
    /// another in the file read at once (a file in order: the whole chunk).
    fn read(&mut self, lines: &[Line], chunk: &[usize]) -> Result<&[u8]> {
        let path = self.path;
        let file = match &mut self.file {
            Some(file) => file,
            None => self
                .file
                .insert(std::fs::File::open(path).map_err(|e| Error::io(path, e))?),
        };
        self.text.clear();
        let mut i = 0;
        while i < chunk.len() {
            let first = &lines[chunk[i]];
            let mut len = first.len;
            let mut next = i + 1;
            while next < chunk.len() && chunk[next] == chunk[next - 1] + 1 {
                len += lines[chunk[next]].len;
                next += 1;
            }
            let at = self.text.len();
            self.text.resize(at + len, 0);
            read_at(file, &mut self.text[at..], first.start).map_err(|e| Error::io(path, e))?;
            i = next;
        }
        Ok(&self.text)
    }
}

/// Fills `buf` from `file` at `offset` (one system call where there is one).
fn read_at(file: &mut std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
    }
    #[cfg(not(unix))]
    {
        use std::io::Read as _;
        file.seek(std::io::SeekFrom::Start(offset))?;
        file.read_exact(buf)
    }
}

/// Parses and decodes a chunk's lines, given back to back in `text`.
#[allow(clippy::type_complexity)]
fn parse_chunk(
    text: &[u8],
    lines: &[Line],
    chunk: &[usize],
    opts: DecodeOptions,
) -> Vec<(usize, std::result::Result<Option<Parsed>, String>)> {
    let mut start = 0;
    chunk
        .iter()
        .map(|&i| {
            let end = start + lines[i].len;
            let parsed = parse_line(&utf8(&text[start..end]), opts.capture_content);
            start = end;
            (i + 1, parsed.map(|r| r.map(|r| Parsed::decode(r, opts))))
        })
        .collect()
}

/// The lines' indexes in `(t, seq)` order; ties and lines without a time
/// keep their file order, the timeless last.
fn apply_order(keys: &[OrderKey]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    // Recorded and spooled files are mostly in order already.
    if !keys.windows(2).all(|k| key_order(&k[0], &k[1]).is_le()) {
        order.sort_by(|&a, &b| key_order(&keys[a], &keys[b]));
    }
    order
}

fn key_order(a: &OrderKey, b: &OrderKey) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// A line's `t` (`f64::MAX` without one) and `seq`, as its record will
/// have them. They are read from the fields before `kwargs` when both are
/// there, as recorded lines have them; otherwise the whole line is read.
/// (A line that repeats `t` or `seq` after its kwargs is ordered by the
/// first ones.)
fn order_key(line: &[u8]) -> OrderKey {
    use serde::de::{Deserializer as _, Error as _, IgnoredAny, MapAccess, Visitor};

    #[derive(Default)]
    struct Key {
        t: Option<Option<f64>>,
        seq: Option<Option<i64>>,
    }
    #[derive(serde::Deserialize)]
    struct Name<'a>(#[serde(borrow)] Cow<'a, str>);
    struct Fields<'k>(&'k mut Key);
    impl<'de> Visitor<'de> for Fields<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a record")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
            while let Some(Name(name)) = map.next_key::<Name<'de>>()? {
                match name.as_ref() {
                    "t" => {
                        let t = map.next_value::<Value>()?;
                        self.0.t = Some(t.as_f64().filter(|t| t.is_finite()));
                    }
                    "seq" => self.0.seq = Some(map.next_value::<Value>()?.as_i64()),
                    "kwargs" if self.0.t.is_some() && self.0.seq.is_some() => {
                        // Everything the key needs is read: skip the rest.
                        return Err(A::Error::custom("read enough"));
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let mut key = Key::default();
    // An error is the early stop, or a line the parser will report.
    let _ = serde_json::Deserializer::from_slice(line).deserialize_map(Fields(&mut key));
    (key.t.flatten().unwrap_or(f64::MAX), key.seq.flatten())
}

/// A record parsed and decoded (on a parsing thread).
struct Parsed {
    pid: Option<i64>,
    thread: Option<String>,
    profile: Option<String>,
    decoded: Decoded,
}

impl Parsed {
    fn decode(r: Record, opts: DecodeOptions) -> Self {
        let opts = DecodeOptions {
            capture_content: r.capture.unwrap_or(opts.capture_content),
            ..opts
        };
        let decoded = decode(&r.hook, &r.kwargs, r.t.unwrap_or(0.0), opts);
        Parsed {
            pid: r.pid,
            thread: r.thread,
            profile: r.profile,
            decoded,
        }
    }
}

fn flush(store: &mut Writer, batch: &mut Vec<(HookEvent, EventContext)>, stats: &mut ReplayStats) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let applied = store.apply_batch(batch.iter().map(|(e, c)| (e, c)))?;
    for a in applied {
        match a {
            Applied::New => stats.applied += 1,
            Applied::Duplicate => stats.duplicates += 1,
            Applied::TooOld => stats.too_old += 1,
        }
    }
    batch.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_key_is_the_records_t_and_seq_wherever_they_are() {
        let key = |line: &str| order_key(line.as_bytes());
        assert_eq!(
            key(r#"{"hook": "h", "t": 2.5, "seq": 7, "kwargs": {"t": 1}}"#),
            (2.5, Some(7))
        );
        // Without seq before the kwargs, the whole line is read.
        assert_eq!(
            key(r#"{"hook": "h", "t": 2.5, "kwargs": {"seq": 1}, "seq": 3}"#),
            (2.5, Some(3))
        );
        assert_eq!(key(r#"{"kwargs": {}, "hook": "h", "t": 4}"#), (4.0, None));
        assert_eq!(
            key(r#"{"hook": "h", "t": 1, "t": 5, "seq": 1, "kwargs": {}}"#),
            (5.0, Some(1))
        );
        assert_eq!(key(r#"{"hook": "h", "kwargs": {}}"#), (f64::MAX, None));
        assert_eq!(key(r#"{"hook": "h", "t": "soon", "kwargs": {}}"#), (f64::MAX, None));
        assert_eq!(key("not json"), (f64::MAX, None));
        assert_eq!(key(r#"{"hook": "h\u00e9", "t": 3, "kwargs": {"#), (3.0, None));
        // The key agrees with the parsed record on every recorded line.
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        for file in std::fs::read_dir(dir).expect("fixtures") {
            let path = file.expect("entry").path();
            if path.extension().is_some_and(|e| e == "jsonl") {
                for line in std::fs::read_to_string(&path).expect("read").lines() {
                    let r = parse_line(line, false).expect("record").expect("one");
                    assert_eq!(key(line), (r.t.unwrap_or(f64::MAX), r.seq), "{line}");
                }
            }
        }
    }

    #[test]
    fn a_replayed_record_keeps_the_profile_it_was_made_in() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("profiles.jsonl");
        let turn = |session: &str, profile: &str| {
            format!(
                r#"{{"hook": "pre_llm_call", "t": 5, {profile}"kwargs": {{"session_id": "{session}", "turn_id": "{session}:t1", "model": "m"}}}}"#
            )
        };
        let text = [turn("s-work", r#""profile": "work", "#), turn("s-old", "")].join("\n");
        std::fs::write(&path, text).expect("write");
        let mut store = Writer::open_dir(dir.path()).expect("open");
        store.set_profile(Some("replaying".into()));
        let mut stats = ReplayStats::default();
        replay_file(&mut store, &path, DecodeOptions::default(), &mut stats).expect("replay");
        assert_eq!(stats.applied, 2, "{stats:?}");
        drop(store);
        let conn = rusqlite::Connection::open(dir.path().join(crate::DB_FILE_NAME)).expect("open");
        let runs: String = conn
            .query_row(
                "SELECT group_concat(session_id || '=' || profile, ' ') FROM (SELECT * FROM runs ORDER BY session_id)",
                [],
                |r| r.get(0),
            )
            .expect("runs");
        // A line of no profile takes the store's (the process replaying).
        assert_eq!(runs, "s-old=replaying s-work=work");
    }

    #[test]
    fn lines_are_found_across_blocks_longer_than_a_block_and_without_a_last_newline() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("lines.jsonl");
        let long = format!(
            r#"{{"hook": "h", "t": 2, "kwargs": {{"x": "{}"}}}}"#,
            "a".repeat(READ_BLOCK + 10)
        );
        let text = format!("{{\"t\": 3}}\n\n{long}\n{{\"t\": 1}}");
        std::fs::write(&path, &text).expect("write");
        let (lines, keys) = index_lines(&path).expect("index");
        let spans: Vec<(u64, usize)> = lines.iter().map(|l| (l.start, l.len)).collect();
        let first = "{\"t\": 3}\n".len();
        assert_eq!(
            spans,
            [
                (0, first),
                (first as u64, 1),
                (first as u64 + 1, long.len() + 1),
                ((first + 2 + long.len()) as u64, "{\"t\": 1}".len())
            ]
        );
        assert_eq!(keys, [(3.0, None), (f64::MAX, None), (2.0, None), (1.0, None)]);
        assert_eq!(apply_order(&keys), [3, 2, 0, 1]);
        // A parsing thread reads a chunk's scattered lines back to back.
        let mut reader = LineReader::new(&path);
        let read = reader.read(&lines, &[3, 0]).expect("read").to_vec();
        assert_eq!(read, b"{\"t\": 1}{\"t\": 3}\n");
    }

    #[test]
    fn a_file_of_many_blocks_is_indexed_line_by_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("many.jsonl");
        let mut text = String::new();
        for n in 0..3000 {
            let pad = "p".repeat(n % 1500);
            text.push_str(&format!(
                "{{\"hook\": \"h\", \"t\": {}, \"kwargs\": {{\"x\": \"{pad}\"}}}}\n",
                3000 - n
            ));
        }
        std::fs::write(&path, &text).expect("write");
        assert!(text.len() > 200 * READ_BLOCK);
        let (lines, keys) = index_lines(&path).expect("index");
        let mut start = 0u64;
        for (n, (line, expected)) in lines.iter().zip(text.split_inclusive('\n')).enumerate() {
            assert_eq!((line.start, line.len), (start, expected.len()), "line {n}");
            assert_eq!(keys[n], ((3000 - n) as f64, None));
            start += expected.len() as u64;
        }
        assert_eq!(lines.len(), 3000);
    }
}
