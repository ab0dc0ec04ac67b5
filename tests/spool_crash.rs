//! A process killed right after its hooks returned loses none of them: the
//! events are in its spool, and the next bridge to open the store applies
//! them.
//!
//! The child is this test binary run again with `SPOOL_CRASH_CHILD` set. It
//! holds SQLite's write lock from a second connection so its own writer
//! cannot commit anything, submits every event of a recorded session through
//! the hook path, prints how many returned, and aborts (SIGABRT: no
//! destructors, no flush, like `kill -9`).

use std::path::{Path, PathBuf};
use std::process::Command;

use hermes_meter_model::hook::parse_line;
use hermes_meter_model::hook::{self, decode, DecodeOptions, Decoded};
use hermes_meter_runtime::bridge::{Bridge, BridgeConfig, Outcome};
use hermes_meter_runtime::spool;
use hermes_meter_store::{EventContext, Writer};

const CHILD: &str = "SPOOL_CRASH_CHILD";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/delegate_sync.jsonl")
}

fn child(dir: &Path) -> ! {
    let blocker = rusqlite::Connection::open(dir.join(hermes_meter_store::DB_FILE_NAME)).expect("open blocker");
    let mut config = BridgeConfig::new(dir.to_path_buf());
    config.hook_wait = std::time::Duration::from_millis(5);
    let bridge = Bridge::start(config);
    assert!(bridge.disabled_reason().is_none());
    // From here on the writer cannot commit: every event lives only in the spool.
    blocker.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let mut returned = 0;
    for line in std::fs::read_to_string(fixture()).expect("fixture").lines() {
        let rec = parse_line(line, false).expect("record").expect("not blank");
        let at = rec.t.expect("t");
        if let Decoded::Event(event, problems) = decode(&rec.hook, &rec.kwargs, at, DecodeOptions::default()) {
            let ctx = EventContext {
                pid: rec.pid,
                thread: rec.thread.clone(),
                profile: None,
                problems,
            };
            let record = hook::write_record(&rec.hook, at, rec.pid, rec.thread.as_deref(), &rec.kwargs, false);
            let outcome = bridge.submit_recorded(event, ctx, Some(&record));
            assert!(
                matches!(outcome, Outcome::Queued | Outcome::TimedOut),
                "nothing can commit, so a hook either returned at once or timed out: {outcome:?}"
            );
            returned += 1;
        }
    }
    println!("returned {returned}");
    std::process::abort();
}

#[test]
fn hooks_that_returned_before_a_crash_are_in_the_store_after_it() {
    if let Some(dir) = std::env::var_os(CHILD) {
        child(Path::new(&dir));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    drop(Writer::open_dir(dir.path()).expect("create the store"));
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            &hermes_meter_test_support::test_name(
                module_path!(),
                "hooks_that_returned_before_a_crash_are_in_the_store_after_it",
            ),
            "--nocapture",
        ])
        .env(CHILD, dir.path())
        .output()
        .expect("run the child");
    assert!(!out.status.success(), "the child aborts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let returned: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("returned "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("child output: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert!(returned > 10);
    {
        let store = Writer::open_dir(dir.path()).expect("open");
        let journal: i64 = store.query_scalar("SELECT COUNT(*) FROM journal").expect("count");
        assert_eq!(journal, 0, "the child committed nothing");
    }
    // The next bridge applies the dead process's spool before anything else.
    let bridge = Bridge::start(BridgeConfig::new(dir.path().to_path_buf()));
    assert!(bridge.flush(std::time::Duration::from_secs(10)));
    assert_eq!(bridge.stats().recovered, returned as u64);
    drop(bridge);
    let store = Writer::open_dir(dir.path()).expect("open");
    let journal: i64 = store.query_scalar("SELECT COUNT(*) FROM journal").expect("count");
    assert_eq!(journal as usize, returned);
    let llm_calls: i64 = store.query_scalar("SELECT COUNT(*) FROM llm_calls").expect("count");
    assert_eq!(llm_calls, 3, "delegate_sync has three successful LLM calls");
    let spools = std::fs::read_dir(dir.path().join(spool::SPOOL_DIR_NAME))
        .expect("spool dir")
        .count();
    assert_eq!(spools, 0, "recovered spools are deleted and a clean exit leaves none");
}
