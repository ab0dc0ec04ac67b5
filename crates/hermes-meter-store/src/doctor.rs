//! Checking a store's file and rebuilding a damaged one.
//!
//! Owns: `PRAGMA integrity_check` of a store file, and rebuilding a fresh
//! store from what a damaged one still lets us read. Must not touch: the
//! damaged file's contents (it is evidence, read and never written), the
//! spool (the CLI recovers it into the rebuilt store afterwards).
//!
//! # How a rebuild works
//!
//! The journal holds every hook event the store applied, decoded, in the
//! order it was applied. A rebuild reads every journal row it can (a range
//! that fails to read is stepped through one row at a time, so one bad page
//! costs only the rows on it) and applies each event again through the
//! ordinary apply path, so the ledger, run totals, budget rollups, metric
//! log and span outbox of the fresh store are exactly what those events
//! make. Then it carries over, table by table where the damaged file still
//! reads, the state no event can rebuild:
//!
//! - `meta` (the store's instance id), export counters, the metric delta
//!   base, budget verdict counts, one-shot actions (cron pauses) and alerts
//!   with their delivery, the models' free and paid times, run profiles;
//! - what retention pruned from the journal: the ledger rows of sessions
//!   that began before the journal's horizon, and the budget rollups of
//!   buckets and periods that began before it (`carry_pruned_ledger`);
//! - what was already exported: outbox rows the damaged store no longer
//!   held were sent, so they are dropped from the rebuilt outbox (no span
//!   is sent twice); likewise metric log rows already folded, with the
//!   folded series, and captured content already pruned.
//!
//! Costs are computed again with the current prices (the user's file and
//! the built-in table); calls whose cost then differs from the damaged
//! store's are counted in the summary.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::row_counts::{Counted, LogTail, RowCounts, COUNTED};
use super::{EventContext, Reader, Writer};
use crate::error::Result;
use hermes_meter_model::hook::{Hook, HookEvent};

/// What a kept-aside damaged store's name adds to the store's, before the
/// Unix time of the rebuild (`doctor --rebuild`).
pub const DAMAGED_INFIX: &str = ".damaged-";

/// The newest damaged store `doctor --rebuild` kept aside in `dir`, if any.
pub(crate) fn moved_aside(dir: &Path) -> Option<PathBuf> {
    let prefix = format!("{}{}", super::DB_FILE_NAME, DAMAGED_INFIX);
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && !n.ends_with("-wal") && !n.ends_with("-shm"))
        })
        .max()
}

/// The one line saying that the store is missing but a damaged one was
/// kept aside: a new, empty store there would report nothing spent, and
/// split the history in two.
pub fn missing_beside_aside(dir: &Path) -> Option<String> {
    let db = dir.join(super::DB_FILE_NAME);
    if db.exists() {
        return None;
    }
    let aside = moved_aside(dir)?;
    Some(format!(
        "no store at {}, but a damaged one was kept aside as {} (a rebuild that did not finish?): \
         move it back and run `hermes-meter doctor --rebuild`",
        db.display(),
        aside.display()
    ))
}

/// Journal rows read and applied per transaction.
const CHUNK: i64 = 2048;

/// A store file looked at as evidence, the doctor's role (see [`Reader`]
/// for the others): its integrity, whether it can be written, a cheap
/// look for `status`, and a fresh store rebuilt from what it still reads.
/// It never writes the file it looks at.
#[derive(Debug, Clone)]
pub struct Doctor {
    path: PathBuf,
}

impl Doctor {
    /// The doctor of the database file at `path` (which may be missing,
    /// damaged or not ours: every look says what it found).
    pub fn new(path: &Path) -> Self {
        Doctor {
            path: path.to_path_buf(),
        }
    }

    /// The file looked at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs SQLite's full integrity check, listing at most `max`
    /// problems. Opens the file read-only (a damaged file is evidence, and
    /// a read-only store must not look damaged): a WAL left by a dead
    /// process is read, as any reader would, and never checkpointed.
    pub fn check_integrity(&self, max: usize) -> Result<Integrity> {
        check_integrity(&self.path, max)
    }

    /// Why the file cannot be written, or `None` when it can: it is
    /// read-only to this process, or its directory cannot hold the `-wal`
    /// and `-shm` files WAL mode needs. Writes nothing to the database;
    /// probes the directory with a file of its own.
    pub fn check_writable(&self) -> Option<String> {
        check_writable(&self.path)
    }

    /// What a cheap look finds wrong, for `status`: the header against
    /// the file's length (a truncated file), the schema, and the first and
    /// last page of every table and index, never the whole file (that is
    /// [`Doctor::check_integrity`]). Empty when nothing was found.
    pub fn quick_look(&self) -> Vec<String> {
        quick_look(&self.path)
    }

    /// Rebuilds into `fresh` (a new, empty store) every event this file's
    /// journal still yields, then carries over the state events cannot
    /// rebuild (see the module documentation). Runs left open longer than
    /// `idle_run_seconds` before `now` are closed as every command's sweep
    /// would, before the outbox is compared, so the spans of runs the
    /// damaged store closed are not sent again.
    pub fn rebuild_into(&self, fresh: &mut Writer, idle_run_seconds: f64, now: f64) -> Result<Rebuilt> {
        fresh.rebuild_from(&self.path, idle_run_seconds, now)
    }
}

/// What `PRAGMA integrity_check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integrity {
    /// The problems SQLite listed (at most the number asked for); empty
    /// when the file is whole.
    pub problems: Vec<String>,
}

impl Integrity {
    /// Whether the file is whole.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Runs SQLite's full integrity check on the database at `path`, listing
/// at most `max` problems. Opens the file read-only (a damaged file is
/// evidence, and a read-only store must not look damaged): a WAL left by a
/// dead process is read, as any reader would, and never checkpointed.
fn check_integrity(path: &Path, max: usize) -> Result<Integrity> {
    let conn = open_evidence(path)?;
    let mut stmt = conn.prepare(&format!("PRAGMA integrity_check({})", max.max(1)))?;
    let lines: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    let problems = if lines.len() == 1 && lines[0] == "ok" {
        Vec::new()
    } else {
        lines
    };
    Ok(Integrity { problems })
}

/// Why the store at `path` cannot be written, or `None` when it can: the
/// file is read-only to this process (SQLite opens it read-only then, and
/// says so), or its directory cannot hold the `-wal` and `-shm` files WAL
/// mode needs. Writes nothing to the database; probes the directory with a
/// file of its own.
fn check_writable(path: &Path) -> Option<String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    match Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) {
        Ok(conn) if conn.is_readonly(rusqlite::MAIN_DB).unwrap_or(false) => {
            return Some(format!("{} is read-only to this process", path.display()));
        }
        Ok(_) => {}
        Err(e) => return Some(format!("{} cannot be opened for writing ({e})", path.display())),
    }
    crate::health::probe(dir)
        .map(|kind| format!("its directory {} cannot be written ({})", dir.display(), kind.as_str()))
}

/// What a cheap look at the store at `path` finds wrong, for `status`:
/// the header against the file's length (a truncated file), the schema,
/// and the first and last page of every table and index. It reads a few
/// pages per table, never the whole file (that is `doctor`'s
/// `integrity_check`). Empty when nothing was found.
fn quick_look(path: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(p) = truncation(path) {
        problems.push(p);
    }
    let conn = match open_evidence(path) {
        Ok(conn) => conn,
        Err(e) => {
            problems.push(e.to_string());
            return problems;
        }
    };
    let objects: rusqlite::Result<Vec<(String, String)>> = conn
        .prepare(
            "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'index') AND name NOT LIKE 'sqlite_stat%'",
        )
        .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect());
    let objects = match objects {
        Ok(o) => o,
        Err(e) => {
            problems.push(format!("the schema does not read ({e})"));
            return problems;
        }
    };
    for (kind, name) in objects {
        // The first and the last row of each: a lookup down the left and
        // the right edge of its b-tree.
        let probes = if kind == "table" {
            [
                format!("SELECT 1 FROM \"{name}\" LIMIT 1"),
                format!("SELECT rowid FROM \"{name}\" ORDER BY rowid DESC LIMIT 1"),
            ]
        } else {
            let table: String = conn
                .query_row("SELECT tbl_name FROM sqlite_master WHERE name = ?1", [&name], |r| {
                    r.get(0)
                })
                .unwrap_or_default();
            [
                format!("SELECT 1 FROM \"{table}\" INDEXED BY \"{name}\" LIMIT 1"),
                String::new(),
            ]
        };
        for sql in probes.iter().filter(|s| !s.is_empty()) {
            // A WITHOUT ROWID table has no rowid: only its first row is read.
            match conn.query_row(sql, [], |_| Ok(())).optional() {
                Ok(_) => {}
                Err(e) if is_damage(&e) => {
                    problems.push(format!("{kind} {name} does not read ({e})"));
                    break;
                }
                Err(_) => {}
            }
        }
    }
    problems
}

/// Whether `e` says the file is damaged (rather than busy or misused).
fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// The header's page count against the file's length: a file shorter than
/// its header says lost its end (a copy cut short, a truncation).
fn truncation(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut header = [0u8; 100];
    let mut file = std::fs::File::open(path).ok()?;
    file.read_exact(&mut header).ok()?;
    let len = file.metadata().ok()?.len();
    if &header[..16] != b"SQLite format 3\0" {
        return Some(format!(
            "{} is not a SQLite database (its header is wrong)",
            path.display()
        ));
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536,
        n => u64::from(n),
    };
    let pages = u64::from(u32::from_be_bytes([header[28], header[29], header[30], header[31]]));
    // The count is valid only when the change counter matches the
    // "version valid for" field; an older writer leaves it stale.
    let valid = header[24..28] == header[92..96];
    let wal = path.with_file_name(format!(
        "{}-wal",
        path.file_name().and_then(|n| n.to_str()).unwrap_or_default()
    ));
    // Pages beyond the file can still be in the WAL, not yet checkpointed.
    let in_wal = std::fs::metadata(wal).is_ok_and(|m| m.len() > 0);
    (valid && !in_wal && pages * page_size > len).then(|| {
        format!(
            "{} is cut short: its header says {} pages of {page_size} bytes, the file holds {len} bytes",
            path.display(),
            pages
        )
    })
}

/// Opens a store file to read it and nothing else (SQLite's read-only
/// open), whatever state it is in: in a directory that cannot hold a
/// `-shm` file it is opened immutable, and when its schema does not parse
/// (a damaged page of `sqlite_master`) with SQLite's writable-schema
/// setting, which makes SQLite read the schema rows that remain rather
/// than refuse the file. On a read-only connection that setting cannot
/// write anything.
pub(crate) fn open_evidence(path: &Path) -> Result<Connection> {
    match read_only_conn(path) {
        Err(crate::error::Error::Sqlite(e)) if is_damage(&e) => {
            let conn = Connection::open_with_flags(path, READ_ONLY)?;
            conn.pragma_update(None, "writable_schema", "ON")?;
            conn.busy_timeout(std::time::Duration::from_secs(2))?;
            Ok(conn)
        }
        other => other,
    }
}

/// SQLite's read-only open, with URI file names for the fallback below.
const READ_ONLY: OpenFlags = OpenFlags::SQLITE_OPEN_READ_ONLY
    .union(OpenFlags::SQLITE_OPEN_NO_MUTEX)
    .union(OpenFlags::SQLITE_OPEN_URI);

/// A read-only connection to the store at `path`, its schema read. A WAL
/// store's reader needs a `-shm` file; in a directory that cannot hold one
/// (read-only) the file is opened immutable instead, which SQLite reads
/// without any shared memory or lock: right for a store nothing can be
/// writing, which a read-only directory is.
pub(crate) fn read_only_conn(path: &Path) -> Result<Connection> {
    let conn = match Connection::open_with_flags(path, READ_ONLY).and_then(|c| schema_reads(&c).map(|()| c)) {
        Ok(conn) => conn,
        // No `-shm` and no way to make one: SQLite says it cannot open the
        // file, or (SQLITE_READONLY_CANTINIT) that it cannot write it.
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::ReadOnly)
            ) =>
        {
            let conn = Connection::open_with_flags(file_uri(path, "immutable=1"), READ_ONLY)?;
            schema_reads(&conn)?;
            conn
        }
        Err(e) => return Err(e.into()),
    };
    conn.busy_timeout(std::time::Duration::from_secs(2))?;
    Ok(conn)
}

fn schema_reads(conn: &Connection) -> rusqlite::Result<()> {
    conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |_| Ok(()))
}

/// A `file:` URI for `path` with `query` (SQLite's URI filenames, on in
/// the bundled build), the path percent-encoded where a URI needs it.
pub(crate) fn file_uri(path: &Path, query: &str) -> String {
    let mut uri = String::from("file:");
    for b in path.to_string_lossy().bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => uri.push(b as char),
            _ => uri.push_str(&format!("%{b:02X}")),
        }
    }
    uri.push('?');
    uri.push_str(query);
    uri
}

/// What a rebuild read, applied and carried over.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Rebuilt {
    /// Journal rows read from the damaged file.
    pub journal_read: u64,
    /// Journal rows that could not be read (damaged pages).
    pub journal_unreadable: u64,
    /// Whether `journal_unreadable` is exact (an index listed every id) or
    /// estimated from the damaged store's own row count.
    pub journal_unreadable_exact: bool,
    /// Journal rows read whose event could not be decoded.
    pub undecodable: u64,
    /// Events applied to the fresh store.
    pub applied: u64,
    /// Tables whose state was carried over, with the rows it took.
    pub carried: Vec<(&'static str, u64)>,
    /// Tables that could not be read, so their state is what the events
    /// rebuilt (named with what that means).
    pub unreadable: Vec<String>,
    /// LLM calls whose cost, computed with today's prices, differs from the
    /// damaged store's; `None` when the damaged calls could not be read.
    pub cost_differs: Option<u64>,
}

impl Writer {
    /// Applies to this (fresh) store every event the journal of the
    /// damaged database at `damaged` still yields, then carries over the
    /// state events cannot rebuild (see the module documentation). Runs
    /// left open longer than `idle_run_seconds` before `now` are closed as
    /// every command's sweep would, before the outbox is compared, so the
    /// spans of runs the damaged store closed are not sent again.
    fn rebuild_from(&mut self, damaged: &Path, idle_run_seconds: f64, now: f64) -> Result<Rebuilt> {
        let mut out = Rebuilt::default();
        let old = open_evidence(damaged)?;
        self.set_cache_size_kib(64 * 1024)?;
        match journal_ids(&old) {
            Some(ids) => {
                out.journal_unreadable_exact = true;
                for (i, chunk) in ids.chunks(CHUNK as usize).enumerate() {
                    let above = ids.get((i + 1) * CHUNK as usize).copied();
                    let _ = self.read_ids(&old, chunk, above, &mut out)?;
                }
            }
            None => self.scan_journal(&old, &mut out)?,
        }
        drop(old);
        self.close_idle_runs(now, idle_run_seconds)?;
        self.carry_over(damaged, &mut out)?;
        Ok(out)
    }

    /// Reads and applies the journal rows of `ids` (ascending, from an
    /// index); returns the first id if a seek to it reads. A range that
    /// fails to read is read forwards up to the damage and backwards down
    /// to it from `above`, an id past `ids` whose seek reads (a seek to a
    /// damaged page's neighbour can pass through the damaged page, a walk
    /// from the far side does not). What is left between is halved, the
    /// upper half read first so its first id can start the lower half's
    /// walk down, so a damaged page costs about the rows on it.
    fn read_ids(
        &mut self,
        old: &Connection,
        ids: &[i64],
        above: Option<i64>,
        out: &mut Rebuilt,
    ) -> Result<Option<i64>> {
        let (Some(&first), Some(&last)) = (ids.first(), ids.last()) else {
            return Ok(None);
        };
        let (ahead, failed) = stream_journal(old, first, last, false);
        let low = ahead.last().map(|r| r.seq);
        let sought = low.map(|_| first);
        let ahead_n = ahead.len();
        self.apply_rows(ahead, out)?;
        if !failed {
            // An id the index lists whose row the table lacks is lost too.
            out.journal_unreadable += (ids.len() - ahead_n.min(ids.len())) as u64;
            return Ok(sought);
        }
        let (mut behind, _) = stream_journal(old, first, above.unwrap_or(last), true);
        behind.retain(|r| r.seq <= last && low.is_none_or(|low| r.seq > low));
        let high = behind.last().map(|r| r.seq);
        behind.reverse();
        self.apply_rows(behind, out)?;
        let middle: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| low.is_none_or(|low| *id > low) && high.is_none_or(|high| *id < high))
            .collect();
        if middle.len() < ids.len() {
            self.read_ids(old, &middle, above, out)?;
        } else if middle.len() == 1 {
            // Neither a seek nor a walk from either side reads it.
            out.journal_unreadable += 1;
        } else {
            let (lower, upper) = middle.split_at(middle.len() / 2);
            let start = self.read_ids(old, upper, above, out)?;
            self.read_ids(old, lower, start.or(above), out)?;
        }
        Ok(sought)
    }

    /// Reads the journal in id order when no index lists its ids: a seek
    /// into a damaged page fails, so past one the next start that reads is
    /// found by doubling the step and then halving back, and the rows
    /// skipped are counted from the damaged store's own count (estimated).
    fn scan_journal(&mut self, old: &Connection, out: &mut Rebuilt) -> Result<()> {
        let mut next = i64::MIN;
        loop {
            let (rows, failed) = stream_journal(old, next, i64::MAX, false);
            let empty = rows.is_empty();
            if let Some(r) = rows.last() {
                next = r.seq.saturating_add(1);
            }
            self.apply_rows(rows, out)?;
            if failed {
                match next_readable(old, next) {
                    Some(start) => next = start,
                    None => break,
                }
            } else if empty {
                break;
            }
        }
        let counted: Option<i64> = old
            .query_row("SELECT n FROM store_counts WHERE name = 'journal'", [], |r| r.get(0))
            .ok();
        out.journal_unreadable = counted.map_or(0, |n| (n as u64).saturating_sub(out.journal_read));
        Ok(())
    }

    fn apply_rows(&mut self, rows: Vec<JournalRow>, out: &mut Rebuilt) -> Result<()> {
        out.journal_read += rows.len() as u64;
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            match serde_json::from_str::<Hook>(&row.payload) {
                Ok(hook) => events.push((
                    HookEvent { at: row.at, hook },
                    EventContext {
                        pid: row.pid,
                        thread: row.thread,
                        // The journal keeps no profile: the runs'
                        // profiles are carried from the damaged file.
                        profile: None,
                        problems: Vec::new(),
                    },
                )),
                Err(_) => out.undecodable += 1,
            }
        }
        let applied = self.apply_batch(events.iter().map(|(e, c)| (e, c)))?;
        out.applied += applied.len() as u64;
        Ok(())
    }

    /// Copies from the damaged file the state no event rebuilds, each table
    /// on its own, so one unreadable table costs only its own state.
    fn carry_over(&mut self, damaged: &Path, out: &mut Rebuilt) -> Result<()> {
        let conn = self.db.conn();
        // Read-only, so neither this nor the connection's close can write
        // the damaged file (a WAL-mode close checkpoints otherwise).
        let uri = file_uri(damaged, "mode=ro");
        let attach = |c: &Connection| {
            c.execute("ATTACH DATABASE ?1 AS damaged", params![uri])?;
            c.query_row("SELECT COUNT(*) FROM damaged.sqlite_master", [], |_| Ok(()))
        };
        // A schema that does not parse: read the schema rows that remain
        // (see `open_evidence`), for the carry-over only.
        let lenient = attach(conn).is_err();
        if lenient {
            let _ = conn.execute_batch("DETACH DATABASE damaged");
            conn.pragma_update(None, "writable_schema", "ON")?;
            if let Err(e) = attach(conn) {
                conn.pragma_update(None, "writable_schema", "OFF")?;
                out.unreadable.push(format!("every table but the journal ({e})"));
                return Ok(());
            }
        }
        let replaced: [(&'static str, &str); 8] = [
            ("meta", "INSERT OR REPLACE INTO meta SELECT * FROM damaged.meta"),
            (
                "export_state",
                "INSERT OR REPLACE INTO export_state SELECT * FROM damaged.export_state",
            ),
            (
                "metric_delta_base",
                "INSERT OR REPLACE INTO metric_delta_base SELECT * FROM damaged.metric_delta_base",
            ),
            (
                "budget_verdicts",
                "INSERT OR REPLACE INTO budget_verdicts SELECT * FROM damaged.budget_verdicts",
            ),
            (
                "budget_once",
                "INSERT OR REPLACE INTO budget_once SELECT * FROM damaged.budget_once",
            ),
            ("alerts", "INSERT OR REPLACE INTO alerts SELECT * FROM damaged.alerts"),
            (
                "budget_models",
                "INSERT OR REPLACE INTO budget_models SELECT * FROM damaged.budget_models",
            ),
            // The fleet host id: a rebuilt store is the same host, so its
            // pushes (absolute totals) replace its old ones, never add to them.
            (
                "fleet_state",
                "INSERT OR REPLACE INTO fleet_state (singleton, host_id, budgets_version)
                 SELECT singleton, host_id, budgets_version FROM damaged.fleet_state",
            ),
        ];
        for (table, sql) in replaced {
            carry(conn, table, out, |c| Ok(c.execute(sql, [])? as u64));
        }
        carry(conn, "runs (profile)", out, |c| {
            Ok(c.execute(
                "UPDATE runs SET profile = (SELECT d.profile FROM damaged.runs d WHERE d.session_id = runs.session_id)
                  WHERE profile IS NULL",
                [],
            )? as u64)
        });
        // Spans the damaged store no longer had in its outbox were sent.
        carry(conn, "outbox", out, |c| {
            Ok(c.execute(
                "DELETE FROM outbox WHERE NOT EXISTS (SELECT 1 FROM damaged.outbox d
                   WHERE d.kind = outbox.kind AND d.session_id = outbox.session_id
                     AND d.key = outbox.key AND d.n = outbox.n)",
                [],
            )? as u64)
        });
        // Log records: the ones the damaged store still held were not sent
        // (the same seq, so the same uid); the rest were. Replaying the
        // journal made them again, so those go. A damaged store whose log
        // outbox is unreadable keeps the replayed ones: sent twice at
        // worst, never lost.
        carry(conn, "log_outbox", out, |c| {
            let tx = c.unchecked_transaction()?;
            tx.execute("DELETE FROM log_outbox", [])?;
            let n = tx.execute("INSERT INTO log_outbox SELECT * FROM damaged.log_outbox", [])?;
            tx.commit()?;
            Ok(n as u64)
        });
        // What retention took out of the journal: the ledger of sessions
        // that began before its horizon, and the budget rollups before it.
        carry(conn, "ledger before the journal's horizon", out, carry_pruned_ledger);
        // Metric state moves as one: the folded series with the log rows
        // not folded yet, or (either unreadable) everything folded again
        // from the rebuilt log, which gives the ledger's totals.
        carry(conn, "metric_series", out, |c| {
            let tx = c.unchecked_transaction()?;
            tx.execute_batch(
                "CREATE TEMP TABLE pending_log AS SELECT kind, session_id, key, n FROM damaged.metric_log;
                 CREATE INDEX temp.pending_log_key ON pending_log (kind, session_id, key, n);
                 DELETE FROM metric_series;
                 INSERT INTO metric_series SELECT * FROM damaged.metric_series;
                 DELETE FROM metric_sessions;
                 INSERT INTO metric_sessions SELECT * FROM damaged.metric_sessions;
                 DELETE FROM metric_log WHERE NOT EXISTS (SELECT 1 FROM pending_log p
                   WHERE p.kind = metric_log.kind AND p.session_id = metric_log.session_id
                     AND p.key = metric_log.key AND p.n = metric_log.n);
                 DROP TABLE temp.pending_log;",
            )?;
            let n = tx.query_row("SELECT COUNT(*) FROM metric_series", [], |r| r.get::<_, i64>(0))?;
            tx.commit()?;
            Ok(n as u64)
        });
        // Content already pruned stays pruned.
        carry(conn, "span_content", out, |c| {
            Ok(c.execute(
                "DELETE FROM span_content WHERE NOT EXISTS (SELECT 1 FROM damaged.span_content d
                   WHERE d.kind = span_content.kind AND d.session_id = span_content.session_id
                     AND d.key = span_content.key AND d.attr = span_content.attr)",
                [],
            )? as u64)
        });
        out.cost_differs = conn
            .query_row(
                "SELECT COUNT(*) FROM llm_calls n JOIN damaged.llm_calls o USING (api_request_id)
                  WHERE abs(n.cost_usd - o.cost_usd) > 1e-9",
                [],
                |r| r.get::<_, i64>(0),
            )
            .ok()
            .map(|n| n as u64);
        let _ = conn.execute_batch("DETACH DATABASE damaged");
        if lenient {
            conn.pragma_update(None, "writable_schema", "OFF")?;
        }
        Ok(())
    }
}

impl Reader {
    /// The number of journal rows.
    pub fn journal_rows(&self) -> Result<i64> {
        Ok(self
            .conn()
            .query_row("SELECT COUNT(*) FROM journal", [], |r| r.get(0))
            .optional()?
            .unwrap_or(0))
    }
}

/// The ledger tables keyed by session, which a journal rebuild fills.
const SESSION_TABLES: [&str; 7] = [
    "runs",
    "turns",
    "api_requests",
    "llm_calls",
    "llm_call_errors",
    "tool_calls",
    "approvals",
];

/// Copies from the damaged file what its journal's pruned rows made: the
/// ledger rows of sessions that began before the horizon (every event of
/// theirs after it is in the journal too, so the damaged file's rows are
/// the whole story and replace what the rebuild made of them), and the
/// budget rollups of buckets and periods that began before it. Explicit
/// deletes, not `INSERT OR REPLACE`, whose deletes no statement reports,
/// so `store_counts` follows what each statement changed.
/// Nothing to do for a store whose journal was never pruned.
fn carry_pruned_ledger(conn: &Connection) -> Result<u64> {
    let horizon: Option<f64> = conn
        .query_row(
            "SELECT CAST(value AS REAL) FROM damaged.meta WHERE key = 'retention.journal_horizon'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    let Some(h) = horizon else { return Ok(0) };
    let tx = conn.unchecked_transaction()?;
    tx.execute(
        "CREATE TEMP TABLE pruned_sessions AS SELECT session_id FROM damaged.runs WHERE started_at < ?1",
        params![h],
    )?;
    let mut n = 0;
    // What the statements below delete and insert, for `store_counts`
    // (finished rows copied in log themselves for metrics).
    let log = LogTail::read(&tx)?;
    let mut counts = RowCounts::default();
    let counted = |table: &str| COUNTED.into_iter().find(|c| c.table() == table);
    for table in SESSION_TABLES {
        let scope = "session_id IN (SELECT session_id FROM temp.pruned_sessions)";
        let deleted = tx.execute(&format!("DELETE FROM {table} WHERE {scope}"), [])?;
        // Every column but a rowid alias (`llm_call_errors.id`), which the
        // rebuilt rows may already use.
        let columns: Vec<String> = tx
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{table}') WHERE NOT (pk = 1 AND type = 'INTEGER')"
            ))?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let columns = columns.join(", ");
        let inserted = tx.execute(
            &format!("INSERT INTO {table} ({columns}) SELECT {columns} FROM damaged.{table} WHERE {scope}"),
            [],
        )?;
        if let Some(c) = counted(table) {
            counts.deleted(c, deleted);
            counts.inserted(c, inserted);
        }
        n += inserted as u64;
    }
    let edges = "parent_session_id IN (SELECT session_id FROM temp.pruned_sessions)
                 OR child_session_id IN (SELECT session_id FROM temp.pruned_sessions)";
    let deleted = tx.execute(&format!("DELETE FROM subagent_edges WHERE {edges}"), [])?;
    let inserted = tx.execute(
        &format!("INSERT INTO subagent_edges SELECT * FROM damaged.subagent_edges WHERE {edges}"),
        [],
    )?;
    counts.deleted(Counted::SubagentEdges, deleted);
    counts.inserted(Counted::SubagentEdges, inserted);
    n += inserted as u64;
    for (table, start) in [("budget_spend", "bucket"), ("budget_period", "period")] {
        tx.execute(&format!("DELETE FROM {table} WHERE {start} < ?1"), params![h])?;
        n += tx.execute(
            &format!("INSERT INTO {table} SELECT * FROM damaged.{table} WHERE {start} < ?1"),
            params![h],
        )? as u64;
    }
    tx.execute_batch("DROP TABLE temp.pruned_sessions")?;
    log.appended(&tx, &mut counts)?;
    counts.write(&tx)?;
    tx.commit()?;
    Ok(n)
}

/// Runs one carry-over step; a failure (a damaged or missing table) is
/// noted and leaves the rebuilt state as the events made it.
fn carry(conn: &Connection, table: &'static str, out: &mut Rebuilt, step: impl FnOnce(&Connection) -> Result<u64>) {
    match step(conn) {
        Ok(n) => out.carried.push((table, n)),
        Err(e) => out.unreadable.push(format!("{table} ({e})")),
    }
}

struct JournalRow {
    seq: i64,
    at: f64,
    pid: Option<i64>,
    thread: Option<String>,
    payload: String,
}

/// The journal rows with ids from `from` to `to`, in order.
fn read_journal(conn: &Connection, from: i64, to: i64) -> rusqlite::Result<Vec<JournalRow>> {
    // Never more than a chunk at once, whatever the range spans.
    let mut stmt = conn.prepare_cached(
        "SELECT seq, at, pid, thread, payload FROM journal WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![from, to, CHUNK], journal_row)?;
    rows.collect()
}

/// Up to a chunk of journal rows with ids from `from` to `to`, ascending
/// (`descending`: from `to` down), as far as they read: the rows before a
/// damaged page, and whether one stopped the read.
fn stream_journal(conn: &Connection, from: i64, to: i64, descending: bool) -> (Vec<JournalRow>, bool) {
    let sql = if descending {
        "SELECT seq, at, pid, thread, payload FROM journal WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq DESC LIMIT ?3"
    } else {
        "SELECT seq, at, pid, thread, payload FROM journal WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq LIMIT ?3"
    };
    let mut out = Vec::new();
    let Ok(mut stmt) = conn.prepare_cached(sql) else {
        return (out, true);
    };
    let Ok(mut rows) = stmt.query(params![from, to, CHUNK]) else {
        return (out, true);
    };
    loop {
        match rows.next() {
            Ok(Some(r)) => match journal_row(r) {
                Ok(row) => out.push(row),
                Err(_) => return (out, true),
            },
            Ok(None) => return (out, false),
            Err(_) => return (out, true),
        }
    }
}

fn journal_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<JournalRow> {
    Ok(JournalRow {
        seq: r.get(0)?,
        at: r.get(1)?,
        pid: r.get(2)?,
        thread: r.get(3)?,
        payload: r.get(4)?,
    })
}

/// Every journal id, read from the journal's `event_key` index alone (an
/// index entry holds the row's id, so this reads no table page): the rows
/// a damaged page lost are then known exactly. `None` when the index does
/// not read either.
fn journal_ids(conn: &Connection) -> Option<Vec<i64>> {
    let index: String = conn
        .query_row(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'journal' AND sql IS NULL LIMIT 1",
            [],
            |r| r.get(0),
        )
        .ok()?;
    let mut ids: Vec<i64> = conn
        .prepare(&format!("SELECT seq FROM journal INDEXED BY \"{index}\""))
        .ok()?
        .query_map([], |r| r.get(0))
        .ok()?
        .collect::<rusqlite::Result<_>>()
        .ok()?;
    ids.sort_unstable();
    Some(ids)
}

/// The smallest id after `failed` (a start whose seek failed) from which
/// a journal seek reads, or `None` when none does up to the end of ids.
fn next_readable(conn: &Connection, failed: i64) -> Option<i64> {
    let reads = |from: i64| read_journal(conn, from, from.saturating_add(1)).is_ok();
    let start = if failed == i64::MIN { 0 } else { failed };
    // Doubling: a step that lands past the damage.
    let mut step: i64 = 1;
    let mut good = loop {
        let at = start.checked_add(step)?;
        if reads(at) {
            break at;
        }
        step = step.checked_mul(2)?;
    };
    // Halving back: the first start that reads.
    let mut bad = start;
    while good - bad > 1 {
        let mid = bad + (good - bad) / 2;
        if reads(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(good)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_meter_model::hook::{decode, DecodeOptions, Decoded};

    #[test]
    fn a_file_uri_escapes_what_a_uri_would_read_as_syntax() {
        assert_eq!(
            file_uri(Path::new("/home/a b/x?#%.db"), "mode=ro"),
            "file:/home/a%20b/x%3F%23%25.db?mode=ro"
        );
    }

    #[test]
    fn a_store_cut_short_is_found_by_the_cheap_look_and_a_whole_one_is_not() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.db");
        let store = Writer::open(&path).expect("open");
        store.checkpoint_truncate().expect("checkpoint");
        drop(store);
        assert_eq!(quick_look(&path), Vec::<String>::new());
        let len = std::fs::metadata(&path).expect("stat").len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open")
            .set_len(len - 4096)
            .expect("truncate");
        let problems = quick_look(&path);
        assert!(
            problems.first().is_some_and(|p| p.contains("cut short")),
            "{problems:?}"
        );
    }

    /// A journal of 2000 rows with garbage over three of its leaves and,
    /// if `index` is set, over its `event_key` index's root; the leaves'
    /// rows.
    fn damaged_journal(path: &Path, index: bool) -> i64 {
        let conn = Connection::open(path).expect("open");
        conn.execute_batch(
            "PRAGMA journal_mode = DELETE;
             CREATE TABLE journal (seq INTEGER PRIMARY KEY, event_key TEXT NOT NULL UNIQUE, at REAL,
                                   pid INTEGER, thread TEXT, payload TEXT NOT NULL);
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
             INSERT INTO journal SELECT i, 'k' || i, i, NULL, NULL, printf('%.200c', 'x') FROM n;",
        )
        .expect("journal");
        let leaves: Vec<(i64, i64)> = conn
            .prepare("SELECT pageno, ncell FROM dbstat WHERE name = 'journal' AND pagetype = 'leaf' ORDER BY pageno")
            .expect("dbstat")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("leaves")
            .collect::<rusqlite::Result<_>>()
            .expect("leaves");
        let root: i64 = conn
            .query_row(
                "SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'journal'",
                [],
                |r| r.get(0),
            )
            .expect("index root");
        drop(conn);
        let picked = [leaves[3], leaves[leaves.len() / 2], leaves[leaves.len() - 5]];
        let mut pages: Vec<i64> = picked.iter().map(|p| p.0).collect();
        if index {
            pages.push(root);
        }
        use std::io::{Seek as _, Write as _};
        let mut f = std::fs::OpenOptions::new().write(true).open(path).expect("open");
        for page in pages {
            f.seek(std::io::SeekFrom::Start((page as u64 - 1) * 4096))
                .expect("seek");
            f.write_all(&[0xA5; 4096]).expect("garbage");
        }
        picked.iter().map(|p| p.1).sum()
    }

    #[test]
    fn without_its_index_the_journal_is_scanned_past_each_damaged_page() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.db");
        let lost = damaged_journal(&path, true);
        let old = open_evidence(&path).expect("open read-only");
        assert_eq!(journal_ids(&old), None, "the index does not read");
        let mut fresh = Writer::open(&dir.path().join("new.db")).expect("fresh");
        let mut out = Rebuilt::default();
        fresh.scan_journal(&old, &mut out).expect("scan");
        // A seek to the row after a damaged page can pass through it: at
        // most that row is lost besides the page's own.
        let read = out.journal_read as i64;
        assert!(
            read <= 2000 - lost && read >= 2000 - lost - 3,
            "{read} of {}",
            2000 - lost
        );
        assert!(!out.journal_unreadable_exact);
    }

    #[test]
    fn a_damaged_journal_page_costs_only_the_rows_on_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.db");
        let lost = damaged_journal(&path, false);
        let old = open_evidence(&path).expect("open read-only");
        let ids = journal_ids(&old).expect("the index reads");
        assert_eq!(ids.len(), 2000);
        let store_dir = tempfile::tempdir().expect("temp dir");
        let mut fresh = Writer::open(&store_dir.path().join("new.db")).expect("fresh");
        let mut out = Rebuilt::default();
        // The rows are not events: each is read, then found undecodable.
        let _ = fresh.read_ids(&old, &ids, None, &mut out).expect("read");
        assert_eq!(out.journal_unreadable as i64, lost, "{out:?}");
        assert_eq!(out.journal_read as i64, 2000 - lost, "{out:?}");
    }

    /// Every recorded hook call decodes to an event that the journal's
    /// payload gives back unchanged: a rebuild applies what was applied.
    #[test]
    fn journal_payloads_give_back_the_event_they_were_made_of() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).expect("fixtures") {
            let path = entry.expect("entry").path();
            if path.extension().is_none_or(|x| x != "jsonl") {
                continue;
            }
            for line in std::fs::read_to_string(&path).expect("fixture").lines() {
                let Ok(Some(rec)) = hermes_meter_model::hook::parse_line(line, true) else {
                    continue;
                };
                let opts = DecodeOptions {
                    capture_content: true,
                    ..DecodeOptions::default()
                };
                if let Decoded::Event(event, _) = decode(&rec.hook, &rec.kwargs, rec.t.unwrap_or(0.0), opts) {
                    let payload = serde_json::to_string(&event.hook).expect("payload");
                    let back: Hook = serde_json::from_str(&payload).expect("decodes back");
                    assert_eq!(back, event.hook, "{}", path.display());
                    seen += 1;
                }
            }
        }
        assert!(seen > 150, "the fixtures hold many events ({seen})");
    }
}
