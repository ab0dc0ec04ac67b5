//! Crash consistency: a commit SQLite acknowledged survives the end of its
//! process, however the process ends, and the file stays whole.
//!
//! Each iteration runs a child process (this test binary again, with
//! `CRASH_CHILD` set) that opens a database the way the store does
//! ([`hermes_meter_store::connect`]) and commits transactions of random
//! shapes: a few rows, thousands of rows that spill past a tiny page cache
//! and are then rewritten (the shape that lost commits in a VFS of our own),
//! savepoints rolled back and released, whole transactions rolled back,
//! deletes of most of the table, `VACUUM` (a shrinking file) and, through
//! the store's open path (incremental auto-vacuum), the retention sweep's
//! `PRAGMA incremental_vacuum` steps, while a
//! second connection runs passive, restart and truncate checkpoints beside
//! it. After each commit returns, the child appends its sequence number to
//! an acknowledgement file with one `write(2)`. The child ends by `_exit`
//! without closing anything (what Hermes's `os._exit` does) at a random
//! point (mid-transaction, between a commit and its acknowledgement, after
//! it) or is killed with SIGKILL by the parent at a random moment.
//!
//! The parent then reopens the database and checks `PRAGMA
//! integrity_check`, that every acknowledged commit is present, that the
//! commits form an unbroken sequence, and that the table's contents are
//! exactly what the last commit recorded (no half transaction). Several
//! children run in turn on one database, so recovery after recovery is
//! covered too.
//!
//! The same suite runs against SQLite's default VFS opened by hand (the
//! reference) and through the store's own opening path, so a VFS, pragma
//! or open-path change that weakens what a commit means fails here.
//!
//! `HERMES_METER_CRASH_ITERATIONS` sets the number of iterations (default
//! 50 per opener, three children each); for a long run:
//!
//! ```text
//! HERMES_METER_CRASH_ITERATIONS=2000 cargo test --release --test crash_consistency -- --nocapture
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, OpenFlags};

const CHILD: &str = "CRASH_CHILD";
const DB: &str = "crash.db";
const ACKS: &str = "acks";

/// How a connection is opened.
#[derive(Clone, Copy, Debug)]
enum Opener {
    /// [`hermes_meter_store::connect`]: what the store runs on.
    Writer,
    /// SQLite's default VFS with the same journal mode and sync level.
    Reference,
}

impl Opener {
    fn name(self) -> &'static str {
        match self {
            Opener::Writer => "store",
            Opener::Reference => "reference",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "store" => Opener::Writer,
            _ => Opener::Reference,
        }
    }

    fn open(self, path: &Path) -> Connection {
        match self {
            Opener::Writer => hermes_meter_store::connect(path).expect("open as the store does"),
            Opener::Reference => {
                let conn = Connection::open(path).expect("open");
                conn.busy_timeout(Duration::from_secs(5)).expect("busy timeout");
                conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
                conn.pragma_update(None, "synchronous", "NORMAL").expect("sync");
                conn.pragma_update(None, "wal_autocheckpoint", 0)
                    .expect("no auto checkpoint");
                conn
            }
        }
    }
}

/// How the child ends.
#[derive(Clone, Copy, Debug)]
enum End {
    /// `_exit` after a number of transactions, at a point chosen by the child.
    Exit,
    /// Runs until the parent sends SIGKILL.
    Kill,
}

/// Where in its last transaction an exiting child stops.
#[derive(Clone, Copy, Debug)]
enum ExitPoint {
    MidTransaction,
    AfterCommit,
    AfterAck,
}

fn iterations() -> usize {
    std::env::var("HERMES_METER_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

// ---------------------------------------------------------------- child

fn child(dir: &Path) -> ! {
    let opener = Opener::parse(&std::env::var("CRASH_OPENER").expect("opener"));
    let seed: u64 = std::env::var("CRASH_SEED").expect("seed").parse().expect("seed number");
    let end = match std::env::var("CRASH_END").expect("end").as_str() {
        "exit" => End::Exit,
        _ => End::Kill,
    };
    let mut rng = fastrand::Rng::with_seed(seed);
    let path = dir.join(DB);
    let mut conn = opener.open(&path);
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS data (id INTEGER PRIMARY KEY, ver INTEGER NOT NULL, payload BLOB NOT NULL);
         CREATE TABLE IF NOT EXISTS commits (seq INTEGER PRIMARY KEY, rows INTEGER NOT NULL,
                                             ver_sum INTEGER NOT NULL, bytes INTEGER NOT NULL);",
    )
    .expect("schema");
    // A tiny cache makes large transactions spill dirty pages into the WAL
    // before their commit and rewrite them afterwards.
    let cache_pages = [10, 10, 20, 50, 2000][rng.usize(..5)];
    conn.pragma_update(None, "cache_size", cache_pages).expect("cache size");

    // A second connection checkpoints beside the writer, as the writer
    // thread's periodic checkpoint and other processes' do.
    let checkpoint_path = path.clone();
    let checkpoint_seed = rng.u64(..);
    std::thread::spawn(move || {
        let mut rng = fastrand::Rng::with_seed(checkpoint_seed);
        let conn = opener.open(&checkpoint_path);
        conn.busy_timeout(Duration::from_millis(2)).expect("busy timeout");
        loop {
            std::thread::sleep(Duration::from_micros(rng.u64(0..4000)));
            let mode = match rng.u8(0..10) {
                0 => "RESTART",
                1 => "TRUNCATE",
                _ => "PASSIVE",
            };
            let _ = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |_| Ok(()));
        }
    });

    let mut acks = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join(ACKS))
        .expect("ack file");
    let mut seq: i64 = conn
        .query_row("SELECT COALESCE(MAX(seq), 0) FROM commits", [], |r| r.get(0))
        .expect("last seq");
    let (last, exit_at) = match end {
        End::Exit => {
            let point = [ExitPoint::MidTransaction, ExitPoint::AfterCommit, ExitPoint::AfterAck][rng.usize(..3)];
            (rng.usize(1..25), Some(point))
        }
        // Killed by the parent long before this; the bound only stops a
        // child whose parent died.
        End::Kill => (100_000, None),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    for n in 1..=last {
        if Instant::now() > deadline {
            break;
        }
        let final_one = n == last;
        if rng.u8(0..40) == 0 {
            // A shrinking file: VACUUM rewrites the database smaller.
            conn.execute_batch("VACUUM").expect("vacuum");
            continue;
        }
        if rng.u8(0..8) == 0 {
            // The retention sweep's step: free pages moved to the end and
            // cut off (the store opens with incremental auto-vacuum; on the
            // reference, without it, this does nothing).
            conn.execute_batch(&format!("PRAGMA incremental_vacuum({})", rng.u32(1..200)))
                .expect("incremental vacuum");
            continue;
        }
        // Immediate, as the store's apply transactions are: a deferred one
        // that reads first cannot always wait for the checkpointer's lock.
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .expect("begin");
        let rolled_back = rng.u8(0..10) == 0;
        match rng.u8(0..6) {
            // A few rows.
            0 | 1 => insert(&tx, &mut rng, 1..6, seq + 1),
            // Many rows past the cache, then every one of them rewritten.
            2 | 3 => {
                let first: i64 = tx
                    .query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM data", [], |r| r.get(0))
                    .expect("next id");
                insert(&tx, &mut rng, 200..2500, seq + 1);
                tx.execute(
                    "UPDATE data SET ver = ?1, payload = randomblob(length(payload)) WHERE id >= ?2",
                    params![seq + 1, first],
                )
                .expect("rewrite");
            }
            // Savepoints: one rolled back, one released.
            4 => {
                tx.execute_batch("SAVEPOINT a").expect("savepoint");
                insert(&tx, &mut rng, 50..800, seq + 1);
                tx.execute_batch("ROLLBACK TO a").expect("rollback to");
                insert(&tx, &mut rng, 1..300, seq + 1);
                tx.execute_batch("RELEASE a").expect("release");
            }
            // Most of the table deleted, the rest touched.
            _ => {
                tx.execute("DELETE FROM data WHERE id % ?1 != 0", params![rng.i64(2..6)])
                    .expect("delete");
                tx.execute("UPDATE data SET ver = ?1 WHERE id % 7 = 0", params![seq + 1])
                    .expect("touch");
            }
        }
        if rolled_back && !final_one {
            tx.rollback().expect("rollback");
            continue;
        }
        let (rows, ver_sum, bytes): (i64, i64, i64) = tx
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(ver), 0), COALESCE(SUM(length(payload)), 0) FROM data",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .expect("totals");
        tx.execute(
            "INSERT INTO commits (seq, rows, ver_sum, bytes) VALUES (?1, ?2, ?3, ?4)",
            params![seq + 1, rows, ver_sum, bytes],
        )
        .expect("commit row");
        if final_one && matches!(exit_at, Some(ExitPoint::MidTransaction)) {
            exit_now();
        }
        tx.commit().expect("commit");
        seq += 1;
        if final_one && matches!(exit_at, Some(ExitPoint::AfterCommit)) {
            exit_now();
        }
        acks.write_all(format!("{seq}\n").as_bytes()).expect("ack");
    }
    exit_now();
}

/// Inserts a number of rows in `count`, of 100-999 random bytes each.
fn insert(tx: &rusqlite::Transaction<'_>, rng: &mut fastrand::Rng, count: std::ops::Range<usize>, ver: i64) {
    let n = rng.usize(count);
    let mut stmt = tx
        .prepare_cached("INSERT INTO data (ver, payload) VALUES (?1, randomblob(?2))")
        .expect("prepare");
    for _ in 0..n {
        stmt.execute(params![ver, rng.i64(100..1000)]).expect("insert");
    }
}

/// Ends the process as `os._exit` does: no destructor runs, no connection
/// is closed, nothing is flushed.
fn exit_now() -> ! {
    // SAFETY: _exit has no preconditions; it never returns.
    #[allow(unsafe_code)]
    unsafe {
        libc::_exit(0)
    }
}

// ---------------------------------------------------------------- parent

/// Runs one child to its end and returns how it ended.
fn run_child(dir: &Path, opener: Opener, seed: u64, end: End, test_name: &str, rng: &mut fastrand::Rng) {
    let mut cmd = Command::new(std::env::current_exe().expect("test binary"));
    cmd.args(["--exact", &crate::test_name(module_path!(), test_name)])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD, dir)
        .env("CRASH_OPENER", opener.name())
        .env("CRASH_SEED", seed.to_string())
        .env(
            "CRASH_END",
            match end {
                End::Exit => "exit",
                End::Kill => "kill",
            },
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn the child");
    match end {
        End::Exit => {
            let out = child.wait_with_output().expect("child output");
            assert!(
                out.status.success(),
                "the child failed before its planned exit (seed {seed}): {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        End::Kill => {
            std::thread::sleep(Duration::from_millis(rng.u64(5..400)));
            child.kill().expect("SIGKILL");
            let status = child.wait().expect("reap");
            assert!(!status.success(), "the child ended before it was killed");
        }
    }
}

/// Reopens the database and checks every promise; returns the number of
/// commits found.
fn verify(dir: &Path, seed: u64, rng: &mut fastrand::Rng) -> i64 {
    let what = format!("seed {seed}, {}", dir.display());
    let acks = std::fs::read_to_string(dir.join(ACKS)).unwrap_or_default();
    // A line the kill cut short was never acknowledged.
    let acked: i64 = acks
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| l.trim().parse().ok())
        .max()
        .unwrap_or(0);
    if !dir.join(DB).exists() {
        // Killed before it created the file: nothing can have been acknowledged.
        assert_eq!(acked, 0, "acknowledged commits but no database ({what})");
        return 0;
    }
    let conn = Connection::open_with_flags(dir.join(DB), OpenFlags::SQLITE_OPEN_READ_WRITE).expect("reopen");
    if rng.bool() {
        // Leave the WAL for the next child to recover, sometimes.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .expect("no checkpoint on close");
    }
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .expect("integrity check");
    assert_eq!(integrity, "ok", "integrity ({what})");
    let schema: i64 = conn
        .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'commits'", [], |r| {
            r.get(0)
        })
        .expect("schema");
    if schema == 0 {
        // Killed before its schema committed: nothing can have been acknowledged.
        assert_eq!(acked, 0, "acknowledged commits but no schema ({what})");
        return 0;
    }
    let (count, max): (i64, i64) = conn
        .query_row("SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM commits", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("commits");
    assert!(
        max >= acked,
        "acknowledged commit {acked} is missing: the database ends at {max} ({what})"
    );
    assert_eq!(count, max, "commits 1..={max} must all be present ({what})");
    if max > 0 {
        let recorded: (i64, i64, i64) = conn
            .query_row("SELECT rows, ver_sum, bytes FROM commits WHERE seq = ?1", [max], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .expect("last commit");
        let actual: (i64, i64, i64) = conn
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(ver), 0), COALESCE(SUM(length(payload)), 0) FROM data",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .expect("data totals");
        assert_eq!(actual, recorded, "the data is exactly what commit {max} left ({what})");
    }
    max
}

fn crash_suite(opener: Opener, test_name: &str) {
    let mut rng = fastrand::Rng::with_seed(
        std::env::var("HERMES_METER_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| fastrand::u64(..)),
    );
    let n = iterations();
    let mut commits = 0;
    for _ in 0..n {
        let dir = tempfile::tempdir().expect("temp dir");
        for _ in 0..3 {
            let seed = rng.u64(..);
            let end = if rng.bool() { End::Exit } else { End::Kill };
            run_child(dir.path(), opener, seed, end, test_name, &mut rng);
            commits = verify(dir.path(), seed, &mut rng).max(commits);
        }
        if matches!(opener, Opener::Writer) && dir.path().join(DB).exists() {
            // What the store opens is what was crashed: incremental
            // auto-vacuum, whose steps the children ran.
            let conn = Connection::open(dir.path().join(DB)).expect("reopen");
            let mode: i64 = conn
                .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
                .expect("auto_vacuum");
            let pages: i64 = conn
                .query_row("PRAGMA page_count", [], |r| r.get(0))
                .expect("page_count");
            // A file every child was killed in before its first page was
            // written has no mode yet (the next open sets it): on a loaded
            // machine that happens.
            if pages > 0 {
                assert_eq!(mode, 2, "the store's files are incremental");
            }
        }
    }
    eprintln!(
        "{}: {n} iterations, 3 crashes each, every acknowledged commit found",
        opener.name()
    );
    assert!(commits > 0, "the children committed something");
}

fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD).map(PathBuf::from)
}

#[test]
fn every_acknowledged_commit_survives_a_crash_through_the_stores_open_path() {
    if let Some(dir) = child_dir() {
        child(&dir);
    }
    crash_suite(
        Opener::Writer,
        "every_acknowledged_commit_survives_a_crash_through_the_stores_open_path",
    );
}

#[test]
fn every_acknowledged_commit_survives_a_crash_on_sqlites_default_vfs() {
    if let Some(dir) = child_dir() {
        child(&dir);
    }
    crash_suite(
        Opener::Reference,
        "every_acknowledged_commit_survives_a_crash_on_sqlites_default_vfs",
    );
}
