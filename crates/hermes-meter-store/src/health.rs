//! Store health: what kind of trouble the store is in, and the small record
//! of it that `hermes-meter status` shows.
//!
//! Owns: classifying store errors into faults ([`classify`], pure), the
//! health record file `<store>/health.json` and its merge-on-write, and the
//! per-process tracker the bridge's writer thread keeps. Must not touch:
//! the database (the record is a separate file so it can say what happened
//! to a database that cannot be opened), Python, the network.
//!
//! # On disk
//!
//! `<store>/health.json`, one JSON object (`schema:
//! "hermes-meter.health.v1"`):
//!
//! ```text
//! {
//!   "schema": "hermes-meter.health.v1",
//!   "state": "ok" | "fault",          as last reported by any process
//!   "updated_at": unix seconds, "updated_by_pid": int,
//!   "last_fault": {"kind", "message", "at", "pid"} or null,
//!   "last_recovery_at": unix seconds or null,
//!   "counts": {"store_faults", "failed_commits", "open_failures",
//!              "spool_write_failures", "dropped_events", "recoveries",
//!              "hermes_skipped_recorded", "hermes_skipped_lost"},
//!   "lost": [{"pid", "started_at", "at", "count", "reason"}, ...],
//!   "hermes": [{"pid", "started_at", "at", "hermes_version", "python",
//!               "isolation", "register_ms", "load", "points": [...]}, ...]
//! }
//! ```
//!
//! `hermes` is what each Hermes process found of its Hermes when the
//! plugin settled there (`python/hermes_meter/_integrations.py`): its
//! version, whether Hermes abandoned the plugin's load, and the state of
//! every Hermes internal the plugin reaches. One entry per process, the
//! newest [`MAX_HERMES_REPORTS`]: `status` reads it in a process that is
//! not Hermes.
//!
//! `lost` says which processes lost hook events (neither the store nor the
//! spool could take them, or memory was full), one entry per process (its
//! pid and start time), the newest [`MAX_LOST_ENTRIES`]; their counts are
//! also in `dropped_events`. A process that could write nothing at all
//! (the disk full until it ended) leaves no entry: its exit line in the
//! `hermes_meter` log is then the only trace.
//!
//! Counts add up over every process that used the store: each writer adds
//! what it counted since its last successful write, under an exclusive lock
//! on `<store>/health.lock`, and replaces the file with a rename, so a full
//! or read-only disk leaves the previous record whole. A writer that cannot
//! write it (the disk is full, the directory read-only) keeps its counts and
//! tries again later; the record is written off the hook path only.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The health record's file name inside the store directory.
pub const HEALTH_FILE_NAME: &str = "health.json";

/// The lock serializing writers of the health record.
pub(crate) const HEALTH_LOCK_NAME: &str = "health.lock";

/// The `schema` value of the record.
pub const HEALTH_SCHEMA: &str = "hermes-meter.health.v1";

/// Entries of `lost` a record keeps: the newest ones, so a long history of
/// one-shot processes cannot grow the file without bound.
pub(crate) const MAX_LOST_ENTRIES: usize = 32;

/// Entries of `hermes` a record keeps: the newest processes' reports.
pub(crate) const MAX_HERMES_REPORTS: usize = 16;

/// What is wrong with the store, as far as the bridge can act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Another connection held the write lock past the busy timeout.
    Locked,
    /// No space left for the database, its WAL or the spool.
    DiskFull,
    /// The file system or the files are read-only (or immutable).
    ReadOnly,
    /// The file is not a SQLite database, or a page of it is damaged.
    Corrupt,
    /// Anything else that makes the store unusable: a missing directory,
    /// permissions, a schema newer than this build, an I/O error.
    Unavailable,
}

impl FaultKind {
    /// The spelling in the record and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Locked => "locked",
            FaultKind::DiskFull => "disk_full",
            FaultKind::ReadOnly => "read_only",
            FaultKind::Corrupt => "corrupt",
            FaultKind::Unavailable => "unavailable",
        }
    }

    /// What the user can do about it, for the log line and `status`.
    pub fn advice(self, db: &Path) -> String {
        match self {
            FaultKind::Locked => "another process holds the store's write lock; events are kept and land once it lets go".into(),
            FaultKind::DiskFull => "free some space; events are kept (in memory and, if it can be written, the spool) and land once there is room".into(),
            FaultKind::ReadOnly => "make the store directory writable again; events are kept in memory and land once it is".into(),
            FaultKind::Corrupt => format!(
                "stop Hermes (and `hermes-meter serve`), then run `hermes-meter doctor --rebuild`: it keeps {0} aside \
                 for inspection and rebuilds the store from what it can read plus the spool; events are kept in \
                 the spool meanwhile",
                db.display()
            ),
            FaultKind::Unavailable => "events are kept (in the spool if it can be written) and the store is retried".into(),
        }
    }
}

/// The fault `e` says the store is in, or `None` when the error concerns
/// one event rather than the store (a constraint, a bad value): those are
/// reported per event, the store itself is fine.
pub fn classify(e: &Error) -> Option<FaultKind> {
    match e {
        Error::Sqlite(e) | Error::Migration { source: e, .. } => classify_sqlite(e),
        Error::Io { source, .. } => Some(classify_io(source)),
        Error::SchemaTooNew { .. } | Error::PreReleaseStore { .. } | Error::NotAStore { .. } => {
            Some(FaultKind::Unavailable)
        }
        Error::Config { .. } | Error::BadRecord { .. } | Error::Other(_) => None,
    }
}

fn classify_sqlite(e: &rusqlite::Error) -> Option<FaultKind> {
    use rusqlite::ErrorCode as C;
    let rusqlite::Error::SqliteFailure(f, _) = e else {
        return None;
    };
    Some(match f.code {
        C::DatabaseBusy | C::DatabaseLocked => FaultKind::Locked,
        C::DiskFull => FaultKind::DiskFull,
        C::ReadOnly => FaultKind::ReadOnly,
        C::DatabaseCorrupt | C::NotADatabase => FaultKind::Corrupt,
        C::CannotOpen
        | C::SystemIoFailure
        | C::PermissionDenied
        | C::FileLockingProtocolFailed
        | C::NoLargeFileSupport => {
            // SQLITE_IOERR_WRITE and friends on a full disk or a read-only
            // mount arrive as I/O errors; the extended code does not say
            // which, the OS error does, and rusqlite keeps it only in the
            // message. Without it, the store is merely unavailable.
            FaultKind::Unavailable
        }
        _ => return None,
    })
}

fn classify_io(e: &std::io::Error) -> FaultKind {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::StorageFull | K::QuotaExceeded => FaultKind::DiskFull,
        // `chattr +i` gives EPERM even to root, a read-only mount EROFS.
        K::ReadOnlyFilesystem | K::PermissionDenied => FaultKind::ReadOnly,
        _ => FaultKind::Unavailable,
    }
}

/// Refines a fault SQLite could only call an I/O error (`SQLITE_IOERR`
/// keeps the OS error to itself): writes a small probe file in `store_dir`
/// and classifies what the OS says. Runs on the writer thread, at fault
/// time only. `None` when the probe went through.
pub fn probe(store_dir: &Path) -> Option<FaultKind> {
    let path = store_dir.join(format!(".probe-{}", std::process::id()));
    // A page: on a full disk creating an empty file can still work.
    let result = write_new(&path, &[0u8; 4096]);
    let _ = std::fs::remove_file(&path);
    result.err().map(|e| classify_io(&e))
}

/// Counters of store trouble, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthCounts {
    /// Times a writer found the store unusable (each fault counted once,
    /// however long it lasted).
    pub store_faults: u64,
    /// Group commits that failed on a store fault (their events were kept
    /// and retried, not lost).
    pub failed_commits: u64,
    /// Failed attempts to open the store.
    pub open_failures: u64,
    /// Hook calls whose spool write failed (they fell back to waiting for
    /// the commit, or to memory).
    pub spool_write_failures: u64,
    /// Events lost: neither the store nor the spool took them before their
    /// process ended, or the in-memory queue was full while the store was in
    /// trouble (see the record's `lost` for which processes).
    pub dropped_events: u64,
    /// Times the store came back after a fault.
    pub recoveries: u64,
    /// Calls of our hooks Hermes 0.21+ skipped (another call of the same
    /// callback was running) that the plugin recorded from Hermes's
    /// dispatcher anyway: nothing lost, but a sign of load.
    pub hermes_skipped_recorded: u64,
    /// Calls of our hooks Hermes skipped that could not be recovered: lost.
    pub hermes_skipped_lost: u64,
    /// Of the skipped calls, those Hermes skipped because an earlier call
    /// of the same callback had timed out (not because one was running).
    pub hermes_skipped_after_timeout: u64,
    /// Calls of our hooks Hermes gave up waiting for (its hook timeout):
    /// recorded all the same, but Hermes then skips that hook for a while.
    pub hermes_timeouts: u64,
}

impl HealthCounts {
    fn add(&mut self, d: &HealthCounts) {
        self.store_faults += d.store_faults;
        self.failed_commits += d.failed_commits;
        self.open_failures += d.open_failures;
        self.spool_write_failures += d.spool_write_failures;
        self.dropped_events += d.dropped_events;
        self.recoveries += d.recoveries;
        self.hermes_skipped_recorded += d.hermes_skipped_recorded;
        self.hermes_skipped_lost += d.hermes_skipped_lost;
        self.hermes_skipped_after_timeout += d.hermes_skipped_after_timeout;
        self.hermes_timeouts += d.hermes_timeouts;
    }

    fn minus(&self, o: &HealthCounts) -> HealthCounts {
        HealthCounts {
            store_faults: self.store_faults.saturating_sub(o.store_faults),
            failed_commits: self.failed_commits.saturating_sub(o.failed_commits),
            open_failures: self.open_failures.saturating_sub(o.open_failures),
            spool_write_failures: self.spool_write_failures.saturating_sub(o.spool_write_failures),
            dropped_events: self.dropped_events.saturating_sub(o.dropped_events),
            recoveries: self.recoveries.saturating_sub(o.recoveries),
            hermes_skipped_recorded: self.hermes_skipped_recorded.saturating_sub(o.hermes_skipped_recorded),
            hermes_skipped_lost: self.hermes_skipped_lost.saturating_sub(o.hermes_skipped_lost),
            hermes_skipped_after_timeout: self
                .hermes_skipped_after_timeout
                .saturating_sub(o.hermes_skipped_after_timeout),
            hermes_timeouts: self.hermes_timeouts.saturating_sub(o.hermes_timeouts),
        }
    }
}

/// One fault, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    pub kind: FaultKind,
    pub message: String,
    /// When it was first seen, Unix seconds.
    pub at: f64,
    pub pid: u32,
}

/// The record in `health.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthRecord {
    pub schema: String,
    /// `ok` or `fault`, as the last process to write the record saw it.
    pub state: String,
    pub updated_at: f64,
    pub updated_by_pid: u32,
    pub last_fault: Option<Fault>,
    pub last_recovery_at: Option<f64>,
    #[serde(default)]
    pub counts: HealthCounts,
    /// The processes that lost events, oldest first.
    #[serde(default)]
    pub lost: Vec<LostEvents>,
    /// What Hermes processes found of their Hermes, oldest first.
    #[serde(default)]
    pub hermes: Vec<HermesReport>,
}

/// What one Hermes process found of its Hermes (written by the package's
/// `_integrations.settle`, through the binding).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HermesReport {
    pub pid: u32,
    /// When the process's bridge started, Unix seconds.
    pub started_at: f64,
    /// When it reported, Unix seconds.
    pub at: f64,
    #[serde(default)]
    pub hermes_version: Option<String>,
    #[serde(default)]
    pub python: Option<String>,
    /// `in_process`, or `host` (Hermes's `plugins.isolation: host`).
    #[serde(default)]
    pub isolation: String,
    /// How long `register` took, milliseconds.
    #[serde(default)]
    pub register_ms: f64,
    /// `ok`, or `abandoned`: Hermes gave up on the load and threw away
    /// every registration, so the process recorded nothing.
    #[serde(default)]
    pub load: String,
    #[serde(default)]
    pub points: Vec<PointState>,
}

impl HermesReport {
    /// Whether Hermes abandoned the plugin's load in that process.
    pub fn abandoned(&self) -> bool {
        self.load == "abandoned"
    }

    /// The points that were missing.
    pub fn missing(&self) -> impl Iterator<Item = &PointState> {
        self.points.iter().filter(|p| p.state == "MISSING")
    }
}

/// One Hermes integration point in one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointState {
    pub name: String,
    pub versions: String,
    #[serde(default, rename = "use")]
    pub used_for: String,
    /// `active`, `not needed` or `MISSING`.
    pub state: String,
    #[serde(default)]
    pub detail: String,
}

impl PointState {
    /// One line for `status`.
    pub fn line(&self) -> String {
        let text = format!("{} (Hermes {}): {}", self.name, self.versions, self.state);
        if self.detail.is_empty() {
            text
        } else {
            format!("{text}: {}", self.detail)
        }
    }
}

/// Hook events one process lost, as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LostEvents {
    pub pid: u32,
    /// When the process's bridge started, Unix seconds (with the pid, which
    /// process this is).
    pub started_at: f64,
    /// When it last lost one, Unix seconds.
    pub at: f64,
    pub count: u64,
    /// Why they could not be saved (the store fault at the time).
    pub reason: String,
}

impl HealthRecord {
    fn empty() -> Self {
        HealthRecord {
            schema: HEALTH_SCHEMA.into(),
            state: "ok".into(),
            updated_at: 0.0,
            updated_by_pid: 0,
            last_fault: None,
            last_recovery_at: None,
            counts: HealthCounts::default(),
            lost: Vec::new(),
            hermes: Vec::new(),
        }
    }
}

/// The path of the record.
pub(crate) fn health_path(store_dir: &Path) -> PathBuf {
    store_dir.join(HEALTH_FILE_NAME)
}

/// Reads the record; `Ok(None)` when there is none yet (no trouble ever
/// recorded). An unreadable record is an error naming the file.
pub fn read(store_dir: &Path) -> crate::error::Result<Option<HealthRecord>> {
    let path = health_path(store_dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::Other(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// What one process has to say in the record.
#[derive(Debug, Default)]
pub struct Tracker {
    /// Everything this process counted.
    pub counts: HealthCounts,
    /// What is already in the file.
    written: HealthCounts,
    /// The fault this process is in now, if any.
    current: Option<Fault>,
    /// A fault not yet written (it may have cleared since).
    unwritten_fault: Option<Fault>,
    recovered_at: Option<f64>,
    /// The state changed since the last write.
    state_dirty: bool,
    /// When this process started, for its `lost` entry.
    started_at: f64,
    /// The events this process lost, once it lost any.
    lost: Option<LostEvents>,
    /// What this process found of its Hermes, not yet written.
    hermes: Option<HermesReport>,
}

impl Tracker {
    /// The tracker of a process that started at `started_at`.
    pub fn new(started_at: f64) -> Self {
        Tracker {
            started_at,
            ..Tracker::default()
        }
    }

    /// Notes `count` hook events lost for `reason`: counted in
    /// `dropped_events` and in this process's `lost` entry.
    pub fn lost(&mut self, count: u64, reason: &str, now: f64) {
        if count == 0 {
            return;
        }
        self.counts.dropped_events += count;
        let entry = self.lost.get_or_insert_with(|| LostEvents {
            pid: std::process::id(),
            started_at: self.started_at,
            at: now,
            count: 0,
            reason: String::new(),
        });
        entry.count += count;
        entry.at = now;
        entry.reason = reason.to_string();
    }

    /// Events this process lost so far.
    pub fn lost_count(&self) -> u64 {
        self.lost.as_ref().map_or(0, |l| l.count)
    }

    /// Notes a fault; returns whether it is a new one (not the one already
    /// current), which is when the bridge says so in a log line.
    pub fn fault(&mut self, kind: FaultKind, message: String, now: f64) -> bool {
        if self.current.as_ref().is_some_and(|f| f.kind == kind) {
            return false;
        }
        self.counts.store_faults += 1;
        let fault = Fault {
            kind,
            message,
            at: now,
            pid: std::process::id(),
        };
        self.current = Some(fault.clone());
        self.unwritten_fault = Some(fault);
        self.state_dirty = true;
        true
    }

    /// Notes that the store works again; returns whether it was in a fault.
    pub fn recovered(&mut self, now: f64) -> bool {
        if self.current.take().is_none() {
            return false;
        }
        self.counts.recoveries += 1;
        self.recovered_at = Some(now);
        self.state_dirty = true;
        true
    }

    /// The current fault.
    pub fn current(&self) -> Option<&Fault> {
        self.current.as_ref()
    }

    /// Notes what this process found of its Hermes (`report`, the JSON
    /// the package writes); written with the next merge.
    pub fn hermes(&mut self, report: serde_json::Value, now: f64) -> Result<(), String> {
        let mut value = report;
        let object = value.as_object_mut().ok_or("the Hermes report is not a JSON object")?;
        object.insert("pid".into(), std::process::id().into());
        object.insert("started_at".into(), self.started_at.into());
        object.insert("at".into(), now.into());
        let report: HermesReport = serde_json::from_value(value).map_err(|e| format!("the Hermes report: {e}"))?;
        self.hermes = Some(report);
        Ok(())
    }

    /// Whether there is anything to write.
    pub fn dirty(&self) -> bool {
        self.state_dirty || self.counts != self.written || self.hermes.is_some()
    }

    /// Merges what changed into `<store_dir>/health.json`. On failure the
    /// changes stay pending for the next call.
    pub fn write(&mut self, store_dir: &Path, now: f64) -> std::io::Result<()> {
        if !self.dirty() {
            return Ok(());
        }
        let lock = crate::files::private_file_options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(store_dir.join(HEALTH_LOCK_NAME))?;
        lock.lock()?;
        let mut record = read(store_dir).ok().flatten().unwrap_or_else(HealthRecord::empty);
        record.schema = HEALTH_SCHEMA.into();
        record.counts.add(&self.counts.minus(&self.written));
        if let Some(f) = &self.unwritten_fault {
            record.last_fault = Some(f.clone());
        }
        if let Some(t) = self.recovered_at {
            record.last_recovery_at = Some(t);
        }
        if let Some(mine) = &self.lost {
            // This process's entry holds its whole count: replace it.
            record
                .lost
                .retain(|e| !(e.pid == mine.pid && e.started_at == mine.started_at));
            record.lost.push(mine.clone());
            let over = record.lost.len().saturating_sub(MAX_LOST_ENTRIES);
            record.lost.drain(..over);
        }
        if let Some(mine) = &self.hermes {
            record
                .hermes
                .retain(|e| !(e.pid == mine.pid && e.started_at == mine.started_at));
            record.hermes.push(mine.clone());
            let over = record.hermes.len().saturating_sub(MAX_HERMES_REPORTS);
            record.hermes.drain(..over);
        }
        record.state = if self.current.is_some() { "fault" } else { "ok" }.into();
        record.updated_at = now;
        record.updated_by_pid = std::process::id();
        let text = serde_json::to_vec_pretty(&record).map_err(std::io::Error::other)?;
        let tmp = store_dir.join(format!("{HEALTH_FILE_NAME}.{}.tmp", std::process::id()));
        let written = write_new(&tmp, &text).and_then(|()| std::fs::rename(&tmp, health_path(store_dir)));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        drop(lock);
        written?;
        self.written = self.counts;
        self.unwritten_fault = None;
        self.recovered_at = None;
        self.state_dirty = false;
        self.hermes = None;
        Ok(())
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f: File = crate::files::private_file_options()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    f.write_all(bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::ffi;

    fn sqlite(code: i32) -> Error {
        Error::Sqlite(rusqlite::Error::SqliteFailure(ffi::Error::new(code), None))
    }

    fn io(kind: std::io::ErrorKind) -> Error {
        Error::io("/x", std::io::Error::from(kind))
    }

    #[test]
    fn store_errors_are_classified_by_what_the_user_can_do() {
        use std::io::ErrorKind as K;
        let table: Vec<(Error, Option<FaultKind>)> = vec![
            (sqlite(ffi::SQLITE_BUSY), Some(FaultKind::Locked)),
            (sqlite(ffi::SQLITE_LOCKED), Some(FaultKind::Locked)),
            (sqlite(ffi::SQLITE_FULL), Some(FaultKind::DiskFull)),
            (sqlite(ffi::SQLITE_READONLY), Some(FaultKind::ReadOnly)),
            (sqlite(ffi::SQLITE_CORRUPT), Some(FaultKind::Corrupt)),
            (sqlite(ffi::SQLITE_NOTADB), Some(FaultKind::Corrupt)),
            (sqlite(ffi::SQLITE_IOERR), Some(FaultKind::Unavailable)),
            (sqlite(ffi::SQLITE_CANTOPEN), Some(FaultKind::Unavailable)),
            (sqlite(ffi::SQLITE_CONSTRAINT), None),
            (sqlite(ffi::SQLITE_MISMATCH), None),
            (io(K::StorageFull), Some(FaultKind::DiskFull)),
            (io(K::ReadOnlyFilesystem), Some(FaultKind::ReadOnly)),
            (io(K::PermissionDenied), Some(FaultKind::ReadOnly)),
            (io(K::NotADirectory), Some(FaultKind::Unavailable)),
            (
                Error::SchemaTooNew { found: 9, supported: 1 },
                Some(FaultKind::Unavailable),
            ),
            (Error::Other("x".into()), None),
        ];
        for (e, want) in table {
            assert_eq!(classify(&e), want, "{e}");
        }
    }

    #[test]
    fn a_fault_is_new_once_and_recovery_is_counted() {
        let mut t = Tracker::default();
        assert!(t.fault(FaultKind::DiskFull, "full".into(), 1.0));
        assert!(!t.fault(FaultKind::DiskFull, "still full".into(), 2.0));
        assert!(t.fault(FaultKind::ReadOnly, "ro".into(), 3.0), "another kind is news");
        assert_eq!(t.counts.store_faults, 2);
        assert!(t.recovered(4.0));
        assert!(!t.recovered(5.0));
        assert_eq!(t.counts.recoveries, 1);
        assert!(t.current().is_none());
    }

    #[test]
    fn records_of_several_processes_add_up() {
        let dir = tempfile::tempdir().expect("temp dir");
        assert_eq!(read(dir.path()).expect("read"), None);
        let mut a = Tracker::default();
        a.fault(FaultKind::Locked, "busy".into(), 10.0);
        a.counts.failed_commits = 2;
        a.write(dir.path(), 11.0).expect("write");
        let mut b = Tracker::default();
        b.counts.spool_write_failures = 5;
        b.write(dir.path(), 12.0).expect("write");
        a.counts.failed_commits = 3;
        a.recovered(13.0);
        a.write(dir.path(), 13.0).expect("write");
        assert!(!a.dirty());
        let r = read(dir.path()).expect("read").expect("record");
        assert_eq!(r.schema, HEALTH_SCHEMA);
        assert_eq!(r.state, "ok");
        assert_eq!(r.counts.failed_commits, 3);
        assert_eq!(r.counts.spool_write_failures, 5);
        assert_eq!(r.counts.store_faults, 1);
        assert_eq!(r.counts.recoveries, 1);
        let f = r.last_fault.expect("fault");
        assert_eq!((f.kind, f.at), (FaultKind::Locked, 10.0));
        assert_eq!(r.last_recovery_at, Some(13.0));
    }

    #[cfg(unix)]
    #[test]
    fn the_health_record_and_its_lock_are_private_to_the_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let mut t = Tracker::default();
        t.fault(FaultKind::Locked, "busy".into(), 10.0);
        t.write(dir.path(), 11.0).expect("write");
        for name in [HEALTH_FILE_NAME, HEALTH_LOCK_NAME] {
            let mode = std::fs::metadata(dir.path().join(name))
                .expect("stat")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name}");
        }
    }

    #[test]
    fn each_process_that_lost_events_has_one_entry_with_its_whole_count() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut a = Tracker::new(100.0);
        a.lost(3, "disk_full: no room", 101.0);
        a.write(dir.path(), 101.0).expect("write");
        a.lost(2, "disk_full: still no room", 102.0);
        a.write(dir.path(), 102.0).expect("write");
        let mut b = Tracker::new(200.0);
        b.lost(1, "read_only: store", 201.0);
        b.write(dir.path(), 201.0).expect("write");
        let r = read(dir.path()).expect("read").expect("record");
        assert_eq!(r.counts.dropped_events, 6);
        let entries: Vec<(f64, u64, &str)> = r
            .lost
            .iter()
            .map(|e| (e.started_at, e.count, e.reason.as_str()))
            .collect();
        assert_eq!(
            entries,
            vec![(100.0, 5, "disk_full: still no room"), (200.0, 1, "read_only: store")]
        );
        assert_eq!(r.lost[0].pid, std::process::id());
        assert_eq!(r.lost[0].at, 102.0);
    }

    #[test]
    fn the_record_keeps_only_the_newest_processes_that_lost_events() {
        let dir = tempfile::tempdir().expect("temp dir");
        for n in 0..MAX_LOST_ENTRIES + 3 {
            let mut t = Tracker::new(n as f64);
            t.lost(1, "full", n as f64);
            t.write(dir.path(), n as f64).expect("write");
        }
        let r = read(dir.path()).expect("read").expect("record");
        assert_eq!(r.lost.len(), MAX_LOST_ENTRIES);
        assert_eq!(r.lost[0].started_at, 3.0);
        assert_eq!(r.counts.dropped_events, MAX_LOST_ENTRIES as u64 + 3);
    }

    #[test]
    fn a_record_that_cannot_be_written_stays_pending() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = dir.path().join("gone");
        let mut t = Tracker::default();
        t.fault(FaultKind::DiskFull, "full".into(), 1.0);
        assert!(t.write(&missing, 2.0).is_err());
        assert!(t.dirty());
        std::fs::create_dir(&missing).expect("mkdir");
        t.write(&missing, 3.0).expect("write");
        let r = read(&missing).expect("read").expect("record");
        assert_eq!(r.state, "fault");
        assert_eq!(r.last_fault.expect("fault").kind, FaultKind::DiskFull);
    }
}
