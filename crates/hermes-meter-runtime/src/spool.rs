//! The spool: hook events made crash-proof before they reach SQLite.
//!
//! Owns: one append-only file per process in `<store>/spool/`, the lock that
//! says its process is alive, and recovering the files of dead processes.
//! Must not touch: the ledger (recovery hands the files to [`hermes_meter_store::replay`]).
//!
//! # Why
//!
//! A SQLite commit costs tens of microseconds (a WAL frame write per page
//! touched); a `write(2)` of one line costs one or two. A hook appends its
//! event to this process's spool, hands it to the writer thread and returns:
//! once `write` returned, the line is in the kernel's page cache and
//! survives the process (a crash, `kill -9`, `os._exit`), so "the event
//! reached the store" holds without waiting for the commit. The writer
//! applies events in group commits as before and empties the file once
//! everything in it is committed.
//!
//! # On disk
//!
//! `<store>/spool/<pid>-<unix-nanos>.jsonl`, mode 0600, one replay record
//! per line (`{"hook", "t", "pid", "thread", "kwargs", "capture"?}`, the
//! format `hermes-meter replay` reads). The owning process holds an exclusive
//! `flock` on it for its whole life; a file nobody holds belongs to a dead
//! process and is replayed into the store, then deleted, by the next bridge
//! or CLI that opens the store. Replaying is idempotent (journal keys), so a
//! crash between a commit and the file being emptied double-applies nothing.

use crate::lock;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;

/// The spool directory's name inside the store directory.
pub const SPOOL_DIR_NAME: &str = "spool";

/// A spool file is emptied once everything in it is committed and it holds
/// at least this much; emptying on every batch would cost a syscall a batch.
pub(crate) const RESET_BYTES: u64 = 1 << 20;

/// This process's spool file.
#[derive(Debug)]
pub struct Spool {
    path: PathBuf,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Holds the exclusive lock for as long as the process lives.
    file: File,
    /// Records appended since the process started.
    appended: u64,
    /// Bytes in the file now.
    bytes: u64,
}

impl Spool {
    /// Creates this process's spool file in `<store_dir>/spool/` and locks it.
    pub fn create(store_dir: &Path) -> Result<Self> {
        let dir = store_dir.join(SPOOL_DIR_NAME);
        hermes_meter_store::create_private_dir(&dir)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = dir.join(format!("{}-{nanos}.jsonl", std::process::id()));
        let file = hermes_meter_store::private_file_options()
            .append(true)
            .create(true)
            .read(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        file.try_lock()
            .map_err(|e| Error::Other(format!("{}: cannot lock: {e}", path.display())))?;
        Ok(Spool {
            path,
            inner: Mutex::new(Inner {
                file,
                appended: 0,
                bytes: 0,
            }),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record (a [`record`] line) in one write.
    pub fn append(&self, record: &[u8]) -> std::io::Result<()> {
        // [`record`] ends its lines; anything else gets its newline here.
        let owned;
        let line = if record.ends_with(b"\n") {
            record
        } else {
            owned = [record, b"\n"].concat();
            &owned
        };
        let mut inner = lock(&self.inner);
        if let Err(e) = inner.file.write_all(line) {
            // A full disk can take part of the line: cut it off, or the
            // next line would be glued to it and both lost at recovery.
            let _ = inner.file.set_len(inner.bytes);
            return Err(e);
        }
        inner.appended += 1;
        inner.bytes += line.len() as u64;
        Ok(())
    }

    /// Records appended since the process started.
    pub fn appended(&self) -> u64 {
        lock(&self.inner).appended
    }

    /// Empties the file if all `handled` records appended so far are
    /// committed and it holds at least `min_bytes`. Returns whether it did.
    pub(crate) fn reset_if_handled(&self, handled: u64, min_bytes: u64) -> std::io::Result<bool> {
        let mut inner = lock(&self.inner);
        if inner.appended != handled || inner.bytes < min_bytes || inner.bytes == 0 {
            return Ok(false);
        }
        // Appends go to the end whatever it is, so the next line starts at 0.
        inner.file.set_len(0)?;
        inner.bytes = 0;
        Ok(true)
    }

    /// Deletes the file if everything appended is committed (clean exit).
    pub fn finish(&self, handled: u64) -> std::io::Result<bool> {
        let inner = lock(&self.inner);
        if inner.appended != handled {
            return Ok(false);
        }
        std::fs::remove_file(&self.path)?;
        Ok(true)
    }
}

/// What recovering dead processes' spools did.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Files replayed and deleted.
    pub files: usize,
    /// Events applied that were not in the store yet.
    pub applied: usize,
    /// Files skipped because a live process holds them.
    pub live: usize,
    /// Problems, one line each (a file that could not be read or replayed).
    pub errors: Vec<String>,
}

/// Replays into `store` every spool file in `store_dir` whose process is
/// gone, then deletes it. `own` (this process's spool) is never touched.
pub fn recover(store: &mut Writer, store_dir: &Path, own: Option<&Path>, opts: DecodeOptions) -> Recovered {
    let mut out = Recovered::default();
    let dir = store_dir.join(SPOOL_DIR_NAME);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl") && Some(p.as_path()) != own)
        .collect();
    paths.sort();
    for path in paths {
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) => {
                out.errors.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                out.live += 1;
                continue;
            }
            Err(TryLockError::Error(e)) => {
                out.errors.push(format!("{}: cannot lock: {e}", path.display()));
                continue;
            }
        }
        let mut stats = ReplayStats::default();
        match replay_file(store, &path, opts, &mut stats) {
            Ok(()) => {
                out.files += 1;
                out.applied += stats.applied;
                for bad in stats.bad_lines {
                    // A line cut short by a full disk or a crash mid-write.
                    out.errors.push(bad.to_string());
                }
                if let Err(e) = std::fs::remove_file(&path) {
                    out.errors.push(format!("{}: {e}", path.display()));
                }
            }
            Err(e) => out.errors.push(format!("{}: {e}", path.display())),
        }
        drop(file);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(hook: &str, t: f64, kwargs: serde_json::Value) -> Vec<u8> {
        let kwargs = kwargs.as_object().cloned().expect("kwargs object");
        hermes_meter_model::hook::write_record(hook, t, Some(7), Some("MainThread"), &kwargs, false)
    }

    #[test]
    fn a_dead_processes_spool_is_replayed_and_deleted_a_live_one_is_not() {
        let dir = tempfile::tempdir().expect("temp dir");
        let spool = Spool::create(dir.path()).expect("spool");
        spool
            .append(&record(
                "on_session_start",
                1.0,
                serde_json::json!({"session_id": "s1", "platform": "cli"}),
            ))
            .expect("append");
        let mut store = Writer::open_dir(&dir.path().join("db")).expect("store");
        // Held by this (live) spool: left alone.
        let r = recover(&mut store, dir.path(), None, DecodeOptions::default());
        assert_eq!((r.files, r.live), (0, 1));
        let path = spool.path().to_path_buf();
        drop(spool); // the lock goes with the file, as when the process dies
        let r = recover(&mut store, dir.path(), None, DecodeOptions::default());
        assert_eq!((r.files, r.applied, r.live), (1, 1, 0), "{:?}", r.errors);
        assert!(!path.exists());
        assert_eq!(store.query_scalar::<i64>("SELECT COUNT(*) FROM runs").expect("runs"), 1);
        // Replaying again (a crash after commit, before the file was emptied) changes nothing.
        let spool = Spool::create(dir.path()).expect("spool");
        spool
            .append(&record(
                "on_session_start",
                1.0,
                serde_json::json!({"session_id": "s1", "platform": "cli"}),
            ))
            .expect("append");
        drop(spool);
        let r = recover(&mut store, dir.path(), None, DecodeOptions::default());
        assert_eq!((r.files, r.applied), (1, 0));
    }

    /// Journal keys are built from the hook time; a spool line read back
    /// must give the very same f64, or recovery would apply an event twice.
    #[test]
    fn hook_times_read_back_from_a_record_are_bit_for_bit_the_same() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..100_000 {
            let at = 1_796_008_818.0 + rng.f64() * 1e6;
            let line = record("on_session_start", at, serde_json::json!({"session_id": "s"}));
            let rec = hermes_meter_model::hook::parse_line(std::str::from_utf8(&line).expect("utf-8"), false)
                .expect("record")
                .expect("line");
            assert_eq!(rec.t.map(f64::to_bits), Some(at.to_bits()), "{at}");
        }
    }

    #[test]
    fn the_file_is_emptied_only_when_everything_in_it_was_handled() {
        let dir = tempfile::tempdir().expect("temp dir");
        let spool = Spool::create(dir.path()).expect("spool");
        spool.append(b"{}").expect("append");
        spool.append(b"{}").expect("append");
        assert!(!spool.reset_if_handled(1, 0).expect("reset"));
        assert!(spool.reset_if_handled(2, 0).expect("reset"));
        assert_eq!(std::fs::metadata(spool.path()).expect("stat").len(), 0);
        spool.append(b"{\"x\":1}").expect("append");
        assert_eq!(std::fs::read(spool.path()).expect("read"), b"{\"x\":1}\n");
        assert!(!spool.finish(2).expect("finish"));
        assert!(spool.finish(3).expect("finish"));
        assert!(!spool.path().exists());
    }

    #[test]
    fn a_truncated_last_line_is_reported_and_the_rest_lands() {
        let dir = tempfile::tempdir().expect("temp dir");
        let spool = Spool::create(dir.path()).expect("spool");
        spool
            .append(&record(
                "on_session_start",
                1.0,
                serde_json::json!({"session_id": "s1"}),
            ))
            .expect("append");
        let path = spool.path().to_path_buf();
        drop(spool);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"hook\": \"on_sess"))
            .expect("torn write");
        let mut store = Writer::open_dir(&dir.path().join("db")).expect("store");
        let r = recover(&mut store, dir.path(), None, DecodeOptions::default());
        assert_eq!((r.files, r.applied, r.errors.len()), (1, 1, 1));
    }
}
