//! hermes-meter's store: one SQLite file per Hermes home that is the
//! journal of hook calls, the ledger, the span and log outboxes, the metric
//! log and the budget state, with the replay that feeds it recorded calls
//! and the classification of its faults.
//!
//! Every SQL statement of hermes-meter is here. No runtime (threads that
//! export or sync), no network, no configuration resolution, no Python:
//! the runtime opens the handles of the roles it plays ([`Writer`],
//! [`Outbox`], [`Reader`], [`Doctor`]) and drives them.
//!
//! Owns: opening the file, pragmas, migrations, and every SQL statement.
//! Must not touch: the network, Python, telemetry encoding.
//!
//! # On disk
//!
//! One SQLite database, `hermes-meter.db`, in the store directory (see
//! the runtime's `config::store_dir`), created mode 0600 in a 0700 directory, in
//! WAL mode so readers never block the writer. `PRAGMA user_version` is the
//! schema version; migrations in `migrations/NNNN_*.sql` run forward only,
//! each in its own transaction, so a failed one leaves the store at the
//! previous version with its data intact. A store newer than this build is
//! refused rather than guessed at.
//!
//! # Invariants
//!
//! - One hook event is applied in one transaction: journal row, ledger rows
//!   and run totals commit together or not at all.
//! - Applying an event whose journal key is already present changes nothing,
//!   so replays and retried writes are idempotent.
//! - Run totals equal the sums over their `llm_calls`, `llm_call_errors` and
//!   `tool_calls` rows.
//! - `run_hours` equals the sums over `runs` per start hour, for the whole
//!   store and per value of each viewer filter (kept by triggers, so in the
//!   same transaction).
//! - WAL checkpoints are not run on the per-event path: the hook connection
//!   turns auto-checkpointing off and [`Writer::checkpoint`] is called from a
//!   background path instead.

pub mod error;
mod files;
pub mod health;
pub mod hermes_state;
pub mod replay;

pub use error::{Error, Result};

/// Now, in Unix seconds: the time the store records (0 if the clock is
/// before 1970).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

mod advice;
mod agent_view;
mod budget;
mod by_session;
mod content;
mod digest;
mod doctor;
mod fleet;
mod held;
mod ledger;
mod log_outbox;
mod metrics;
mod outbox;
mod report;
mod retain_step;
mod retention;
mod rollup;
mod row_counts;
mod run_memo;
mod session_list;
mod session_view;
mod trace_view;

pub use agent_view::{CostlySession, FoundSession, ToolUse};
pub use budget::CapUse;
pub use budget::{AlertRow, AlertSink, RateAmounts, RecentAlert, RATE_KEEP_SECONDS, RESERVATION_TTL_SECONDS};
pub use content::{ContentCursor, ContentKind};
pub use digest::{LastDigest, DIGEST_NOT_FOR_SESSIONS};
pub use doctor::Integrity;
pub use doctor::{missing_beside_aside, Doctor, Rebuilt, DAMAGED_INFIX};
pub use fleet::{FleetRow, FleetStatus, PushRow, Reserved};
pub use held::Confirmation;
pub use held::HeldCall;
pub use ledger::Applied;
pub use ledger::{EventContext, IDLE_CLOSE_BATCH};
pub use log_outbox::LogAttrs;
pub use log_outbox::LogExportState;
pub use log_outbox::{log_counter, LogPlace, LogRow, NewLog, Severity, DEFAULT_LOG_OUTBOX_MAX_ROWS, LOG_LEASE};
pub use metrics::MetricState;
pub use metrics::{add_to_counter, Folded, MetricIdentity, METRIC_LEASE};
pub use outbox::{counter, BatchRows, ExportState, Lease, OutboxRow, SentSession, SpanKind, TRACE_LEASE};
pub use report::StoreCounts;
pub use retain_step::RetainDone;
pub use retain_step::{RetainCutoffs, RetainKind};
pub use retention::pruned;
pub use rollup::RollupStep;
pub use session_list::{FilterValues, SessionFilter, SessionIndex, SessionListRow, SessionListTotals, SessionSort};
pub use session_view::{SessionTotals, SpendTotals};
pub use trace_view::TraceRows;

use crate::files::create_private_file;
pub use crate::files::{create_private_dir, private_file_options, write_atomically};

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use hermes_meter_model::pricing::PriceTable;

/// The database file name inside the store directory.
pub const DB_FILE_NAME: &str = "hermes-meter.db";

/// Migrations, in order; entry `i` brings the schema to version `i + 1`.
/// Version 1 is the whole schema of the first release; a later version is
/// a new file appended here, never an edit of a released one.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_initial.sql"),
    include_str!("migrations/0002_attempts.sql"),
    include_str!("migrations/0003_rate_limits.sql"),
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// `PRAGMA application_id` of every store ("HMet"). Set with version 1, so
/// a file at some version without it, or with [`PRE_RELEASE_APPLICATION_ID`],
/// was written by a pre-release build (whose versions counted a different
/// history) and one with another id by another program: both are refused
/// and left as they are.
pub(crate) const APPLICATION_ID: i32 = 0x484D_6574;

/// The id ("HMtr") the last pre-release builds marked their stores with,
/// whose versions 1 to 5 the first release folded into its version 1.
const PRE_RELEASE_APPLICATION_ID: i32 = 0x484D_7472;

/// How long a statement waits for another process's write lock before
/// giving up. Writers hold the lock for microseconds; waiting longer than
/// this means something is wrong and the caller should fail open.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// SQLite's own busy handler sleeps 1, 2, 5, 10 ... 100 ms between tries,
/// so a writer that loses the lock by a microsecond waits tens of
/// milliseconds; with several processes committing small batches that is
/// most of a hook's wait. Retry every 100 µs for the first 2 ms, then every
/// millisecond, and give up after [`BUSY_TIMEOUT`].
fn wait_for_lock(attempt: i32) -> bool {
    const FAST_TRIES: i32 = 20;
    let (waited, pause) = if attempt < FAST_TRIES {
        (Duration::from_micros(100) * attempt as u32, Duration::from_micros(100))
    } else {
        (
            Duration::from_millis(2) + Duration::from_millis(1) * (attempt - FAST_TRIES) as u32,
            Duration::from_millis(1),
        )
    };
    if waited >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(pause);
    true
}

/// A connection to the store that reads: every query of `report`, the
/// viewer, `status`, `trace` and the budget gate.
///
/// The store has no one type that does everything; each role has a handle
/// of its own, holding its own connection, with only that role's methods:
///
/// - [`Reader`]: reads. [`Reader::open`] opens the file read-only (the
///   CLI's reports, the viewer, `/meter`); the other handles read through
///   one too (they deref to it, as a rusqlite `Transaction` derefs to its
///   `Connection`), on their own connection.
/// - [`Writer`]: the ledger's one writer of a process (the bridge's writer
///   thread, `replay`, `compact`): applies hook events, closes runs, keeps
///   retention, roll-ups and the budget state the gate writes.
/// - [`Outbox`]: what leaves the host (the export driver, `serve`, the
///   fleet sync): the span and log outboxes, the metric fold, the export
///   leases, alerts to push and the fleet's pushes and pulls.
/// - [`Doctor`]: a file that may be damaged, opened only as evidence, and
///   the rebuild of a new store from it.
pub struct Reader {
    conn: Connection,
    path: PathBuf,
    /// The price table costs are computed with (applying calls, the
    /// report's cache savings, the metric fold).
    prices: PriceTable,
}

/// The ledger's writer: see [`Reader`] for the roles.
pub struct Writer {
    db: Reader,
    /// The Hermes profile recorded on runs that have none, for events that
    /// name none themselves (per-profile budgets).
    profile: Option<String>,
    /// What this connection knows of runs, so unchanged runs cost nothing.
    runs: run_memo::RunMemo,
}

/// What leaves the host: see [`Reader`] for the roles.
pub struct Outbox {
    db: Reader,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("path", &self.path).finish()
    }
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("path", &self.db.path).finish()
    }
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").field("path", &self.db.path).finish()
    }
}

impl std::ops::Deref for Writer {
    type Target = Reader;
    fn deref(&self) -> &Reader {
        &self.db
    }
}

impl std::ops::Deref for Outbox {
    type Target = Reader;
    fn deref(&self) -> &Reader {
        &self.db
    }
}

/// Whether the store in `dir` exists at a schema older than this build's,
/// so opening it migrates it: on a year's store that rebuilds indexes for
/// seconds, which the bridge does on its writer thread rather than in the
/// first hook. Reads the version only; false for a missing or unreadable
/// store (opening it then says why).
pub fn migration_due(dir: &Path) -> bool {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let path = dir.join(DB_FILE_NAME);
    let Ok(conn) = Connection::open_with_flags(&path, flags) else {
        return false;
    };
    refuse_unknown(&conn, &path, SCHEMA_VERSION).is_ok_and(|found| (1..SCHEMA_VERSION).contains(&found))
}

/// Whether the existing file at `path` is a store this build can open
/// (ours, at this schema or an older one), reading it read-only: a
/// pre-release store, a newer one or another program's database is an
/// error that says what to do, and the file is left as it is.
pub fn check_identity(path: &Path) -> Result<()> {
    refuse_unknown(&doctor::read_only_conn(path)?, path, SCHEMA_VERSION).map(|_| ())
}

impl Reader {
    /// Opens (creating if needed) the database at `path` read-write and
    /// migrates it: what [`Writer::open`] and [`Outbox::open`] start from.
    fn open_read_write(path: &Path) -> Result<Self> {
        // Before the read-write connection: switching a file to WAL writes
        // its header, and a file that is not ours must not be changed.
        if path.exists() {
            check_identity(path)?;
        }
        create_private_file(path)?;
        let mut conn = connect(path)?;
        by_session::register_functions(&conn)?;
        migrate(&mut conn, MIGRATIONS)?;
        Ok(Reader {
            conn,
            path: path.to_path_buf(),
            prices: PriceTable::default(),
        })
    }

    /// Opens the database at `path` read-only (a report, one viewer
    /// request): no migration, no lock held between statements, so
    /// Hermes's writes go on (WAL readers never block the writer). A store
    /// at an older schema no process of this build has opened yet (the
    /// plugin was just upgraded) is brought up to date once first, as any
    /// command that writes would.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = doctor::read_only_conn(path)?;
        // The report's per-session totals are SQL functions of ours.
        by_session::register_functions(&conn)?;
        conn.set_prepared_statement_cache_capacity(64);
        let found = refuse_unknown(&conn, path, SCHEMA_VERSION)?;
        if found < SCHEMA_VERSION {
            drop(conn);
            drop(Reader::open_read_write(path)?);
            return Self::open(path);
        }
        Ok(Reader {
            conn,
            path: path.to_path_buf(),
            prices: PriceTable::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the file.
    pub fn schema_version(&self) -> Result<i64> {
        Ok(self.conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// Sets the prices costs are computed with from now on.
    pub fn set_prices(&mut self, prices: PriceTable) {
        self.prices = prices;
    }

    /// The connection, for the modules of this one.
    fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The steps of SQLite's plan for `sql`, every parameter bound to
    /// `value` (the EXPLAIN QUERY PLAN tests of this module's statements).
    #[cfg(test)]
    fn query_plan(&self, sql: &str, value: &str) -> Vec<String> {
        let mut plan = self
            .conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .expect("explain");
        let params: Vec<&str> = (0..plan.parameter_count()).map(|_| value).collect();
        plan.query_map(rusqlite::params_from_iter(params), |r| r.get::<_, String>(3))
            .expect("plan")
            .collect::<std::result::Result<_, _>>()
            .expect("rows")
    }

    /// Panics unless every step of `sql`'s plan reads through an index
    /// (SQLite's `SCAN` of a table is a read of all of it).
    #[cfg(test)]
    fn assert_indexed(&self, sql: &str) {
        let steps = self.query_plan(sql, "1");
        let scans: Vec<&String> = steps
            .iter()
            .filter(|s| s.starts_with("SCAN") && s.as_str() != "SCAN CONSTANT ROW")
            .collect();
        assert!(scans.is_empty(), "{sql}\n{steps:?}");
    }
}

impl Writer {
    /// Opens (creating if needed) the store in `dir` and migrates it.
    pub fn open_dir(dir: &Path) -> Result<Self> {
        create_private_dir(dir)?;
        Self::open(&dir.join(DB_FILE_NAME))
    }

    /// Opens (creating if needed) the database at `path` and migrates it.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Writer {
            db: Reader::open_read_write(path)?,
            profile: None,
            runs: run_memo::RunMemo::default(),
        })
    }

    /// Sets SQLite's page cache size. Bulk work (replay) wants more than the
    /// 2 MiB default so a large transaction does not spill pages mid-way.
    pub fn set_cache_size_kib(&self, kib: u32) -> Result<()> {
        self.db.conn.pragma_update(None, "cache_size", -(kib as i64))?;
        Ok(())
    }

    /// Sets the prices used for the costs of calls applied from now on.
    pub fn set_prices(&mut self, prices: PriceTable) {
        self.db.set_prices(prices);
    }

    /// Sets the Hermes profile recorded on runs this store applies events
    /// of when the event names none ([`EventContext::profile`]): the
    /// profile that started the binding (`ctx.profile_name`), for records
    /// written before calls carried their own.
    pub fn set_profile(&mut self, profile: Option<String>) {
        self.profile = profile.filter(|p| !p.is_empty());
    }

    /// The prices in use.
    pub fn prices_mut(&mut self) -> &mut PriceTable {
        &mut self.db.prices
    }

    /// Moves the WAL into the database file without waiting for readers.
    pub fn checkpoint(&self) -> Result<()> {
        checkpoint(&self.db.conn)
    }

    /// This connection as a reader only, once the writing is done (a
    /// command that applied the spools of ended processes, then reports).
    pub fn into_reader(self) -> Reader {
        self.db
    }

    /// This connection as the outbox, once the writing is done (a command
    /// that applied the spools of ended processes, then exports).
    pub fn into_outbox(self) -> Outbox {
        Outbox { db: self.db }
    }
}

impl Outbox {
    /// Opens (creating if needed) the store in `dir` and migrates it.
    pub fn open_dir(dir: &Path) -> Result<Self> {
        create_private_dir(dir)?;
        Self::open(&dir.join(DB_FILE_NAME))
    }

    /// Opens (creating if needed) the database at `path` and migrates it,
    /// as [`Writer::open`] does: an exporter may be the first to open it.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(Outbox {
            db: Reader::open_read_write(path)?,
        })
    }

    /// Sets the prices the metric fold costs calls with.
    pub fn set_prices(&mut self, prices: PriceTable) {
        self.db.set_prices(prices);
    }

    /// Moves the WAL into the database file without waiting for readers.
    pub fn checkpoint(&self) -> Result<()> {
        checkpoint(&self.db.conn)
    }
}

/// A passive checkpoint: the WAL into the database file, without waiting
/// for readers.
fn checkpoint(conn: &Connection) -> Result<()> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
    Ok(())
}

/// Opens a connection to the database at `path` exactly as the store uses
/// it (SQLite's default VFS, WAL, the pragmas below), without creating the
/// file's mode or migrating. The crash-consistency tests open their
/// databases through this, so they test what the store relies on.
pub fn connect(path: &Path) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    // SQLite's default VFS, on purpose: a VFS of our own that gathered WAL
    // writes lost acknowledged commits (crates/hermes-meter-store/tests/crash_consistency.rs).
    let mut conn = Connection::open_with_flags(path, flags)?;
    conn.busy_handler(Some(wait_for_lock))?;
    // Incremental auto-vacuum, so retention can give freed pages back to
    // the file system a few at a time (`Writer::vacuum_step`). Set on a new
    // (empty) file only, before its first table: on an existing file even
    // setting the mode it has writes its header, and an open must never
    // write (a damaged file is evidence). An older store gets it from
    // `hermes-meter compact`.
    let pages: i64 = conn.pragma_query_value(None, "page_count", |r| r.get(0))?;
    if pages == 0 {
        conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    }
    // WAL: readers (reports, the exporter) never block hook writes.
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // NORMAL in WAL mode: a commit has written its frames to the WAL file
    // (the operating system holds them) before it returns, so it survives
    // the process (os._exit, kill -9, a crash); only an OS crash or power
    // loss can take the transactions since the last checkpoint's fsync,
    // and the file stays consistent then. It costs no fsync per event.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Checkpoints are run by `Writer::checkpoint`, off the per-event path.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    // Plans that never depend on bound values. Without this SQLite marks a
    // statement whose WHERE it compared with a constant (a partial index's
    // condition, say) to be compiled again whenever its bindings change,
    // and the statement cache clears bindings on every return: such a
    // statement was parsed and planned anew on every use (the rollup's
    // first-use lookups: about 0.2 ms each).
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.set_prepared_statement_cache_capacity(64);
    Ok(conn)
}

/// The schema version of the database on `conn`, or why it is not a store
/// this build may open: a pre-release store, another program's database, a
/// newer schema. A new (empty) file is version 0.
fn refuse_unknown(conn: &Connection, path: &Path, supported: i64) -> Result<i64> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let application_id: i32 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    match application_id {
        APPLICATION_ID if found > supported => Err(Error::SchemaTooNew { found, supported }),
        APPLICATION_ID => Ok(found),
        0 if found == 0 => Ok(0),
        0 | PRE_RELEASE_APPLICATION_ID => Err(Error::PreReleaseStore {
            path: path.to_path_buf(),
            found,
        }),
        _ => Err(Error::NotAStore {
            path: path.to_path_buf(),
            application_id,
        }),
    }
}

/// Brings the schema of `conn` up to `migrations.len()`, one transaction per
/// version, so a failure leaves the previous version and its data intact.
fn migrate(conn: &mut Connection, migrations: &[&str]) -> Result<()> {
    let path = PathBuf::from(conn.path().unwrap_or_default());
    let supported = migrations.len() as i64;
    let mut found = refuse_unknown(conn, &path, supported)?;
    while found < supported {
        let version = found + 1;
        let fail = |source| Error::Migration { version, source };
        // The write lock first, waiting for it as every writer does (a
        // transaction that has read cannot wait for it later: SQLite
        // refuses at once), then the version again under it: another
        // process may have migrated meanwhile.
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(fail)?;
        found = refuse_unknown(&tx, &path, supported)?;
        if found >= supported {
            break;
        }
        let version = found + 1;
        let fail = |source| Error::Migration { version, source };
        tx.execute_batch(migrations[found as usize]).map_err(fail)?;
        tx.pragma_update(None, "user_version", version).map_err(fail)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID).map_err(fail)?;
        tx.commit().map_err(fail)?;
        found = version;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::params;

    #[test]
    fn a_new_store_is_at_the_current_version_and_private() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store_dir = dir.path().join("meter");
        let store = Writer::open_dir(&store_dir).expect("open");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
        assert_eq!(
            store.query_scalar::<i32>("PRAGMA application_id").expect("id"),
            APPLICATION_ID,
            "marked as a store of this schema"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
            assert_eq!(mode(&store_dir), 0o700);
            assert_eq!(mode(store.path()), 0o600);
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_file_written_atomically_into_the_store_directory_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("budgets.toml");
        write_atomically(&path, b"# budgets\n").expect("write");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.db");
        drop(Writer::open(&path).expect("open"));
        let conn = Connection::open(&path).expect("raw open");
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .expect("bump");
        drop(conn);
        let before = file_bytes(&path);
        match Writer::open(&path) {
            Err(Error::SchemaTooNew { found, .. }) => assert_eq!(found, SCHEMA_VERSION + 1),
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
        assert_eq!(file_bytes(&path).0, before.0, "the newer store is untouched");
    }

    #[test]
    fn a_failed_migration_leaves_the_previous_version_and_its_data() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut conn = Connection::open(dir.path().join("s.db")).expect("open");
        migrate(&mut conn, &MIGRATIONS[..1]).expect("v1");
        conn.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')", [])
            .expect("data");
        let broken = [MIGRATIONS[0], "CREATE TABLE added (x); THIS IS NOT SQL;"];
        match migrate(&mut conn, &broken) {
            Err(Error::Migration { version: 2, .. }) => {}
            other => panic!("expected a failed migration to v2, got {other:?}"),
        }
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("version");
        assert_eq!(version, 1);
        let value: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'k'", [], |r| r.get(0))
            .expect("kept");
        assert_eq!(value, "v");
        let added: i64 = conn
            .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'added'", [], |r| {
                r.get(0)
            })
            .expect("query");
        assert_eq!(added, 0, "the failed migration's first statement was rolled back");
    }

    /// Version 2 keys failed attempts by their place among the request's
    /// attempts: a version 1 store's rows keep their retry_count as their
    /// attempt, its triggers are there again, and a recovery cycle's
    /// attempt (the same retry_count later) is a row of its own.
    #[test]
    fn version_2_keeps_the_failed_attempts_of_a_version_1_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.db");
        let mut conn = Connection::open(&path).expect("open");
        migrate(&mut conn, &MIGRATIONS[..1]).expect("v1");
        for n in 0..3 {
            conn.execute(
                "INSERT INTO llm_call_errors (api_request_id, session_id, retry_count, started_at, ended_at)
                 VALUES ('r', 's', ?1, 1.0, ?2)",
                params![n, 2.0 + n as f64],
            )
            .expect("v1 row");
        }
        migrate(&mut conn, MIGRATIONS).expect("v2");
        let rows: Vec<(i64, i64)> = conn
            .prepare("SELECT attempt, retry_count FROM llm_call_errors ORDER BY id")
            .expect("prepare")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<rusqlite::Result<_>>()
            .expect("rows");
        assert_eq!(rows, [(0, 0), (1, 1), (2, 2)]);
        // A later cycle's retry_count 0 is the request's fourth attempt; the
        // same fired event again is nothing new.
        let insert =
            "INSERT INTO llm_call_errors (api_request_id, session_id, attempt, retry_count, started_at, ended_at)
                      VALUES ('r', 's', (SELECT COUNT(*) FROM llm_call_errors WHERE api_request_id = 'r'), 0, 9.0, ?1)
                      ON CONFLICT DO NOTHING";
        assert_eq!(conn.execute(insert, params![10.0]).expect("cycle"), 1);
        assert_eq!(conn.execute(insert, params![10.0]).expect("again"), 0);
        let logged: i64 = conn
            .query_row("SELECT MAX(n) FROM metric_log WHERE kind = 2", [], |r| r.get(0))
            .expect("metric log");
        assert_eq!(logged, 3, "the trigger logs the attempt");
    }

    /// The runner, for the versions after the first: a store of this
    /// version, with data in it, takes the next one and keeps its data.
    #[test]
    fn a_later_version_applies_to_a_store_of_this_one_with_its_data() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.db");
        drop(Writer::open(&path).expect("create"));
        let mut conn = connect(&path).expect("open");
        conn.execute(
            "INSERT INTO runs (session_id, root_session_id, started_at, last_event_at) VALUES ('s', 's', 1, 1)",
            [],
        )
        .expect("data");
        let next: Vec<&str> = MIGRATIONS
            .iter()
            .copied()
            .chain(["ALTER TABLE runs ADD COLUMN next_version TEXT; UPDATE runs SET next_version = 'filled';"])
            .collect();
        migrate(&mut conn, &next).expect("to the next version");
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("version");
        assert_eq!(version, SCHEMA_VERSION + 1);
        let filled: String = conn
            .query_row("SELECT next_version FROM runs WHERE session_id = 's'", [], |r| r.get(0))
            .expect("the run kept, the new column filled");
        assert_eq!(filled, "filled");
        migrate(&mut conn, &next).expect("again: nothing to do");
        drop(conn);
        match Writer::open(&path) {
            Err(Error::SchemaTooNew { found, supported }) if found == SCHEMA_VERSION + 1 => {
                assert_eq!(supported, SCHEMA_VERSION)
            }
            other => panic!("this build refuses the later version, got {other:?}"),
        }
    }

    /// A database file as it is on disk, main file and WAL.
    fn file_bytes(path: &Path) -> (Vec<u8>, bool) {
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        (std::fs::read(path).expect("read"), wal.exists())
    }

    /// A store a build from before the first release wrote (its versions
    /// counted another history: no application id, or the id the last
    /// pre-release builds set) is refused by every way of opening it, with
    /// a line that says what to do, and not changed: not even switched to
    /// WAL.
    #[test]
    fn a_pre_release_store_is_refused_and_left_as_it_is() {
        for (application_id, version) in [(0, 18), (PRE_RELEASE_APPLICATION_ID, 5)] {
            let dir = tempfile::tempdir().expect("temp dir");
            let path = dir.path().join(DB_FILE_NAME);
            let conn = Connection::open(&path).expect("create");
            conn.execute_batch(&format!(
                "CREATE TABLE runs (session_id TEXT PRIMARY KEY); INSERT INTO runs VALUES ('s');
                 PRAGMA application_id = {application_id}; PRAGMA user_version = {version};"
            ))
            .expect("a pre-release store");
            drop(conn);
            let before = file_bytes(&path);
            assert!(!before.1, "not in WAL mode");
            for (how, opened) in [
                ("Writer::open", Writer::open(&path).map(drop)),
                ("Writer::open_dir", Writer::open_dir(dir.path()).map(drop)),
                ("Reader::open", Reader::open(&path).map(drop)),
                ("Outbox::open", Outbox::open(&path).map(drop)),
            ] {
                match opened {
                    Err(e @ Error::PreReleaseStore { found, .. }) if found == version => {
                        let line = e.to_string();
                        assert!(line.contains(&path.display().to_string()), "{how}: {line}");
                        assert!(
                            line.contains("pre-release") && line.contains("move its directory aside"),
                            "{how}: {line}"
                        );
                    }
                    other => panic!("{how} (id {application_id:#x}): expected PreReleaseStore, got {other:?}"),
                }
            }
            assert!(!migration_due(dir.path()));
            assert_eq!(file_bytes(&path), before, "the file is untouched");
        }
    }

    #[test]
    fn another_programs_database_is_refused_and_left_as_it_is() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("other.db");
        let conn = Connection::open(&path).expect("create");
        conn.execute_batch("PRAGMA application_id = 1; CREATE TABLE t (x); PRAGMA user_version = 1;")
            .expect("someone else's database");
        drop(conn);
        let before = file_bytes(&path);
        match Writer::open(&path) {
            Err(Error::NotAStore { application_id: 1, .. }) => {}
            other => panic!("expected NotAStore, got {other:?}"),
        }
        assert_eq!(file_bytes(&path), before);
    }

    #[test]
    fn reopening_is_a_no_op() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("s.db");
        drop(Writer::open(&path).expect("open"));
        let store = Writer::open(&path).expect("reopen");
        assert_eq!(store.schema_version().expect("version"), SCHEMA_VERSION);
    }
}
