//! `hermes-otel doctor`: a damaged store is reported by `doctor` and
//! `status` in one line with what to do, and `doctor --rebuild` keeps the
//! damaged file aside, unchanged, and rebuilds the store from what it can
//! read plus the spool.

use std::path::{Path, PathBuf};
use std::process::Command;

use hermes_otel::store::{Store, DB_FILE_NAME};
use rusqlite::Connection;

const BIN: &str = env!("CARGO_BIN_EXE_hermes-otel");

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

fn cli(home: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("HERMES_OTEL_HOME")
        .output()
        .expect("run hermes-otel");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
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
                n.starts_with("hermes-otel.db.damaged-") && !n.ends_with("-wal") && !n.ends_with("-shm")
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
    hermes_otel::store::Store::open_dir(home)
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
    let spool_dir = home.join(hermes_otel::spool::SPOOL_DIR_NAME);
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
    let store = Store::open(&db).expect("open the rebuilt store");
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
    let spool = hermes_otel::spool::Spool::create(home).expect("spool");
    let (code, out, err) = cli(home, &["doctor", "--rebuild", "--force"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("stop Hermes"), "{err}");
    assert!(home.join(DB_FILE_NAME).exists(), "the store was left in place");
    drop(spool);
}
