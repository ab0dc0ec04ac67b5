//! `hermes-meter doctor`: a damaged store (pages overwritten, the file cut
//! short) is reported by every command that opens it in one line with what
//! to do, and `doctor --rebuild` builds a new store beside it from what it
//! can read plus the spool, swaps it in only when it is complete, and keeps
//! the damaged file aside, unchanged; a rebuild that can read nothing
//! leaves it where it was, and no command makes an empty store beside one
//! kept aside.

use std::path::{Path, PathBuf};

use cli::cli;
use hermes_meter_test_support::cli;

use hermes_meter_store::{Writer, DB_FILE_NAME};
use rusqlite::Connection;

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("fixtures")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

/// A store with every fixture replayed.
fn replayed(home: &Path) {
    let files = fixtures();
    let mut args = vec!["replay"];
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    let (code, out, err) = cli(home, &args);
    assert_eq!(code, 0, "{out}{err}");
}

/// Rows of `sql` as text lines, sorted, for comparing two stores.
fn rows(db: &Path, sql: &str) -> Vec<String> {
    let conn = Connection::open(db).expect("open");
    let mut stmt = conn.prepare(sql).expect("prepare");
    let n = stmt.column_count();
    let mut out: Vec<String> = stmt
        .query_map([], |r| {
            let mut line = Vec::with_capacity(n);
            for i in 0..n {
                let v: rusqlite::types::Value = r.get(i)?;
                line.push(format!("{v:?}"));
            }
            Ok(line.join("|"))
        })
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    out.sort();
    out
}

fn the_damaged_file(home: &Path) -> PathBuf {
    std::fs::read_dir(home)
        .expect("store dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.starts_with("hermes-meter.db.damaged-") && !n.ends_with("-wal") && !n.ends_with("-shm")
            })
        })
        .expect("the damaged file is kept aside")
}

#[test]
fn rebuilding_a_whole_store_gives_the_same_ledger_and_sends_nothing_twice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    replayed(home);
    let db = home.join(DB_FILE_NAME);
    // Half the spans went out (the exporter deletes what the collector took).
    Connection::open(&db)
        .expect("open")
        .execute("DELETE FROM outbox WHERE seq % 2 = 0", [])
        .expect("export half");
    // It took part in a fleet: a rebuilt store must stay the same host.
    hermes_meter_store::Outbox::open_dir(home)
        .expect("open")
        .fleet_host_id()
        .expect("host id");
    let (code, out, _) = cli(home, &["doctor"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("whole"), "{out}");
    let (code, out, err) = cli(home, &["doctor", "--rebuild"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("nothing to rebuild"), "{out}");
    let (code, out, err) = cli(home, &["doctor", "--rebuild", "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 unreadable"), "{out}");
    let old = the_damaged_file(home);
    for (what, sql) in [
        ("runs", "SELECT * FROM runs"),
        ("turns", "SELECT * FROM turns"),
        ("llm calls", "SELECT * FROM llm_calls"),
        ("api errors", "SELECT * FROM llm_call_errors"),
        ("tool calls", "SELECT * FROM tool_calls"),
        ("subagent edges", "SELECT * FROM subagent_edges"),
        (
            "journal",
            "SELECT event_key, hook, session_id, at, pid, thread, payload FROM journal",
        ),
        ("outbox", "SELECT kind, session_id, key, n, hold FROM outbox"),
        ("budget spend", "SELECT * FROM budget_spend"),
        ("metric log", "SELECT kind, session_id, key, n FROM metric_log"),
        ("meta", "SELECT * FROM meta"),
        ("fleet host id", "SELECT host_id FROM fleet_state"),
    ] {
        assert_eq!(rows(&db, sql), rows(&old, sql), "{what} after a rebuild");
    }
}

/// Overwrites `pages` of the file at `db` with garbage.
fn damage(db: &Path, pages: &[i64]) {
    use std::io::{Seek, SeekFrom, Write};
    let page_size: i64 = Connection::open(db)
        .expect("open")
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .expect("page size");
    let mut file = std::fs::OpenOptions::new().write(true).open(db).expect("open file");
    for page in pages {
        file.seek(SeekFrom::Start(((page - 1) * page_size) as u64))
            .expect("seek");
        file.write_all(&vec![0xA5; page_size as usize]).expect("garbage");
    }
}

#[test]
fn a_damaged_store_is_reported_and_rebuilt_from_what_reads_plus_the_spool() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    replayed(home);
    let db = home.join(DB_FILE_NAME);
    // Two journal leaves in the middle, and the rows they hold.
    let (pages, lost, total): (Vec<i64>, i64, i64) = {
        let conn = Connection::open(&db).expect("open");
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .expect("checkpoint");
        let leaves: Vec<(i64, i64)> = conn
            .prepare("SELECT pageno, ncell FROM dbstat WHERE name = 'journal' AND pagetype = 'leaf' ORDER BY pageno")
            .expect("dbstat")
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("leaves")
            .collect::<rusqlite::Result<_>>()
            .expect("leaves");
        assert!(leaves.len() > 10, "the journal spans many pages");
        let picked = [leaves[leaves.len() / 3], leaves[2 * leaves.len() / 3]];
        let total: i64 = conn
            .query_row("SELECT COUNT(*) FROM journal", [], |r| r.get(0))
            .expect("count");
        (
            picked.iter().map(|p| p.0).collect(),
            picked.iter().map(|p| p.1).sum(),
            total,
        )
    };
    damage(&db, &pages);
    let damaged_bytes = std::fs::read(&db).expect("read");

    // A dead process's spool holds events the store never got.
    let spool_dir = home.join(hermes_meter_runtime::spool::SPOOL_DIR_NAME);
    std::fs::create_dir_all(&spool_dir).expect("spool dir");
    let extra = "{\"hook\":\"on_session_start\",\"t\":1900000000.5,\"kwargs\":{\"session_id\":\"after-the-damage\",\"platform\":\"cli\"}}\n";
    std::fs::write(spool_dir.join("999999-1.jsonl"), extra).expect("spool");

    let (code, out, _) = cli(home, &["doctor"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("DAMAGED"), "{out}");
    assert!(out.contains("doctor --rebuild"), "{out}");
    let (code, out, _) = cli(home, &["status"]);
    assert_eq!(code, 1, "status of a damaged store exits 1: {out}");
    assert!(out.contains("doctor --rebuild"), "status says what to do: {out}");

    let (code, out, err) = cli(home, &["doctor", "--rebuild"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("{lost} unreadable")), "{out}");
    let old = the_damaged_file(home);
    assert_eq!(
        std::fs::read(&old).expect("read aside"),
        damaged_bytes,
        "the damaged file is kept exactly as it was"
    );
    let store = Writer::open(&db).expect("open the rebuilt store");
    let integrity: String = store.query_scalar("PRAGMA integrity_check").expect("check");
    assert_eq!(integrity, "ok");
    let journal: i64 = store.query_scalar("SELECT COUNT(*) FROM journal").expect("count");
    assert_eq!(journal, total - lost + 1, "every readable event and the spool's");
    let recovered: i64 = store
        .query_scalar("SELECT COUNT(*) FROM runs WHERE session_id = 'after-the-damage'")
        .expect("count");
    assert_eq!(recovered, 1, "the spool was applied to the rebuilt store");
    // The rebuilt ledger keeps its invariant: run totals are their calls' sums.
    let mismatched: i64 = store
        .query_scalar(
            "SELECT COUNT(*) FROM runs r WHERE r.input_tokens !=
               (SELECT COALESCE(SUM(input_tokens), 0) FROM llm_calls c WHERE c.session_id = r.session_id)",
        )
        .expect("totals");
    assert_eq!(mismatched, 0);
    drop(store);
    let (code, out, _) = cli(home, &["doctor"]);
    assert_eq!(code, 0, "whole after the rebuild: {out}");
}

#[test]
fn a_rebuild_is_refused_while_hermes_uses_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    replayed(home);
    // A live process: its spool is locked.
    let spool = hermes_meter_runtime::spool::Spool::create(home).expect("spool");
    let (code, out, err) = cli(home, &["doctor", "--rebuild", "--force"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("stop Hermes"), "{err}");
    assert!(home.join(DB_FILE_NAME).exists(), "the store was left in place");
    drop(spool);
}

/// Files in `home` a rebuild must not leave behind (its temporary store).
fn leftovers(home: &Path) -> Vec<String> {
    std::fs::read_dir(home)
        .expect("store dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".rebuild-"))
        .collect()
}

/// The WAL folded into the file, so the file alone is the store.
fn checkpointed(db: &Path) {
    Connection::open(db)
        .expect("open")
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
}

fn count(db: &Path, table: &str) -> i64 {
    Connection::open(db)
        .expect("open")
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |r| r.get(0))
        .expect("count")
}

/// The N of "N unreadable" in the rebuild's summary line.
fn unreadable_in(out: &str) -> i64 {
    let line = out.lines().find(|l| l.starts_with("rebuilt ")).expect("summary line");
    let before = line.split(" unreadable").next().expect("unreadable");
    before
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a count of unreadable rows")
}

#[test]
fn a_store_cut_short_by_its_last_page_is_rebuilt_from_what_reads_and_never_left_missing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    replayed(home);
    let db = home.join(DB_FILE_NAME);
    checkpointed(&db);
    let (journal, calls) = (count(&db, "journal"), count(&db, "llm_calls"));
    let len = std::fs::metadata(&db).expect("stat").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .expect("open file")
        .set_len(len - 4096)
        .expect("truncate");
    let damaged_bytes = std::fs::read(&db).expect("read");

    // Every command that opens it says so, with what to do, and fails.
    let (code, out, _) = cli(home, &["status"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("doctor --rebuild"), "{out}");
    let (code, _, err) = cli(home, &["report"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("damaged") && err.contains("doctor"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");

    let (code, out, err) = cli(home, &["doctor", "--rebuild"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(db.exists(), "a store is in place after the rebuild");
    let lost = unreadable_in(&out);
    assert_eq!(count(&db, "journal"), journal - lost, "every event that reads: {out}");
    assert!(lost < journal / 10, "most of the journal came back: {out}");
    if lost == 0 {
        assert_eq!(count(&db, "llm_calls"), calls, "{out}");
    }
    assert_eq!(
        std::fs::read(the_damaged_file(home)).expect("read aside"),
        damaged_bytes,
        "the damaged file is kept exactly as it was"
    );
    assert_eq!(leftovers(home), Vec::<String>::new());
    let (code, out, _) = cli(home, &["doctor"]);
    assert_eq!(code, 0, "whole after the rebuild: {out}");
    let (code, out, err) = cli(home, &["report", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn a_rebuild_that_can_read_nothing_leaves_the_damaged_store_where_it_was() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    replayed(home);
    let db = home.join(DB_FILE_NAME);
    checkpointed(&db);
    // Garbage over the header: SQLite calls it no database at all.
    damage(&db, &[1]);
    let before = std::fs::read(&db).expect("read");
    let (code, out, err) = cli(home, &["doctor", "--rebuild"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("nothing could be read"), "{out}");
    assert_eq!(
        std::fs::read(&db).expect("still there"),
        before,
        "left exactly as it was"
    );
    assert_eq!(leftovers(home), Vec::<String>::new());
    let aside: Vec<String> = std::fs::read_dir(home)
        .expect("dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains(".damaged-"))
        .collect();
    assert_eq!(aside, Vec::<String>::new(), "nothing was moved aside");
}

#[test]
fn a_missing_store_beside_a_kept_aside_one_is_said_and_no_empty_store_is_made() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    replayed(home);
    let db = home.join(DB_FILE_NAME);
    checkpointed(&db);
    let aside = home.join(format!("{DB_FILE_NAME}.damaged-1700000000"));
    std::fs::rename(&db, &aside).expect("move aside");
    for args in [
        &["report"][..],
        &["status"],
        &["trace", "--last"],
        &["doctor"],
        &["compact"],
        &["budget", "list"],
        &["export", "--since", "1d"],
    ] {
        let (code, out, err) = cli(home, args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.contains(&aside.display().to_string()), "{args:?} names it: {err}");
        assert!(!db.exists(), "{args:?} made no store");
    }
    // Replay makes stores; it says so, and goes on.
    let fixture = fixtures().into_iter().next().expect("a fixture");
    let (code, out, err) = cli(home, &["replay", &fixture.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains(&aside.display().to_string()), "{err}");
}

#[test]
fn status_finds_a_damaged_table_with_no_trouble_recorded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path();
    replayed(home);
    let db = home.join(DB_FILE_NAME);
    checkpointed(&db);
    let root: i64 = Connection::open(&db)
        .expect("open")
        .query_row("SELECT rootpage FROM sqlite_master WHERE name = 'journal'", [], |r| {
            r.get(0)
        })
        .expect("journal root");
    damage(&db, &[root]);
    let _ = std::fs::remove_file(home.join(hermes_meter_store::health::HEALTH_FILE_NAME));
    let (code, out, _) = cli(home, &["status"]);
    assert_eq!(code, 1, "{out}");
    let mut lines = out.lines();
    let summary = lines.next().unwrap_or_default();
    assert!(
        summary.starts_with("summary         PROBLEMS: the store is damaged"),
        "{out}"
    );
    let first = lines.next().unwrap_or_default();
    assert!(first.starts_with("DAMAGED") && first.contains("journal"), "{out}");
    assert!(first.contains("doctor --rebuild"), "{out}");
    // A report that never reads the journal still says so, in one line.
    let (_, _, err) = cli(home, &["report"]);
    assert!(err.contains("damaged") && err.contains("doctor"), "{err}");
}

#[test]
fn a_whole_store_whose_plugin_hermes_dropped_says_so_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    replayed(&home);
    let now = hermes_meter_store::unix_now();
    let mut tracker = hermes_meter_store::health::Tracker::new(now - 60.0);
    tracker
        .hermes(
            serde_json::json!({"hermes_version": "0.22.2", "load": "abandoned", "register_ms": 10500.0, "points": []}),
            now - 59.0,
        )
        .expect("report");
    tracker.write(&home, now).expect("health.json");
    let (code, out, _) = cli(&home, &["doctor"]);
    assert_eq!(code, 0, "the file is whole: {out}");
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("PROBLEM Hermes abandoned loading the plugin in 1 process(es)"),
        "{out}"
    );
    assert!(out.contains("whole (PRAGMA integrity_check: ok)"), "{out}");
}
