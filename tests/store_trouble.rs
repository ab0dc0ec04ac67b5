//! Writer trouble: a store locked by another writer, a full disk, a
//! read-only store, a corrupt store file. Through each, hooks keep their
//! latency bound (or fail open), nothing raises, one message says what
//! happened, the bridge recovers by itself once the fault clears, the events
//! kept meanwhile land, and `<store>/health.json` (what `hermes-meter status`
//! shows) records it.
//!
//! Reading commands (`report`, `trace`, `status`, `doctor`) work on a
//! store file or directory that cannot be written; as root, where file
//! modes stop no one, those tests run the commands as `nobody`.
//!
//! The full-disk and read-only bridge cases need root (a tmpfs mount, `chattr +i`,
//! a read-only bind mount). Without it they print `SKIP: ...` and pass;
//! CI runs as root, so there they run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cli::cli_as;
use hermes_meter_test_support::cli;
use hermes_meter_test_support::hooks;
use hooks::call;

use hermes_meter_runtime::bridge::{
    Bridge, BridgeConfig, Message, Outcome, DEFAULT_FLUSH_TIMEOUT, EXIT_EVENTS_LOST, EXIT_LEFT_IN_SPOOL,
};
use hermes_meter_runtime::budget::BudgetGate;
use hermes_meter_runtime::spool;
use hermes_meter_store::health::{self, FaultKind};
use hermes_meter_store::{Writer, DB_FILE_NAME};
use serde_json::json;

/// The hook wait of these bridges: what a gating hook may spend.
const HOOK_WAIT: Duration = Duration::from_millis(100);

/// What a hook that only writes the spool may spend, generously: the CI
/// machine has 2 cores and builds run beside the tests.
const FAST: Duration = Duration::from_millis(250);

fn config(dir: &Path) -> BridgeConfig {
    let mut cfg = BridgeConfig::new(dir.to_path_buf());
    cfg.hook_wait = HOOK_WAIT;
    cfg.store_retry_min = Duration::from_millis(20);
    cfg.store_retry_max = Duration::from_millis(200);
    cfg
}

fn llm_call(bridge: &Bridge, session: &str, n: usize) -> (Outcome, Duration) {
    call(
        bridge,
        "post_api_request",
        json!({
            "session_id": session, "turn_id": format!("{session}:t"),
            "api_request_id": format!("{session}:t:api:{n}"), "model": "gpt-4o", "api_duration": 0.01,
            "usage": {"input_tokens": 100, "output_tokens": 10},
        }),
    )
}

fn gating(bridge: &Bridge, session: &str) -> (Outcome, Duration) {
    call(
        bridge,
        "pre_llm_call",
        json!({"session_id": session, "turn_id": format!("{session}:t")}),
    )
}

fn llm_calls(dir: &Path, session: &str) -> i64 {
    let store = Writer::open_dir(dir).expect("open the store to check it");
    store
        .query_scalar(&format!(
            "SELECT COUNT(*) FROM llm_calls WHERE session_id = '{session}'"
        ))
        .expect("count")
}

/// Polls `what` until it holds or `secs` pass.
fn eventually(secs: u64, mut what: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < deadline {
        if what() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    what()
}

fn events(messages: &[Message]) -> Vec<&'static str> {
    messages.iter().map(|m| m.event).collect()
}

fn health_record(dir: &Path) -> health::HealthRecord {
    health::read(dir).expect("readable health").expect("a health record")
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A tmpfs of `size` mounted at `at`, unmounted on drop.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(at: &Path, size: &str) -> Result<Self, String> {
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
                &at.display().to_string(),
            ],
        )?;
        Ok(Mount(at.to_path_buf()))
    }

    fn bind(from: &Path, at: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        run(
            "mount",
            &["--bind", &from.display().to_string(), &at.display().to_string()],
        )?;
        Ok(Mount(at.to_path_buf()))
    }

    fn remount(&self, opts: &str) {
        run("mount", &["-o", opts, &self.0.display().to_string()]).expect("remount");
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = run("umount", &["-l", &self.0.display().to_string()]);
    }
}

#[test]
fn a_store_locked_by_another_writer_for_5_s_costs_hooks_nothing_and_everything_lands() {
    let dir = tempfile::tempdir().expect("temp dir");
    // With a budget spent (the warm-up call below costs more than the whole
    // limit), pre_llm_call always waits for its verdict: no quick answer is
    // possible.
    std::fs::write(dir.path().join("budgets.toml"), "[global]\ndaily = 0.0001\n").expect("budgets");
    let gate = BudgetGate::for_store_dir(dir.path(), None, false);
    let bridge = Bridge::start_with_gate(config(dir.path()), Box::new(gate));
    assert_eq!(llm_call(&bridge, "warm", 0).0, Outcome::Queued);
    assert!(bridge.flush(Duration::from_secs(10)));
    assert!(matches!(gating(&bridge, "warm").0, Outcome::Committed(_)));
    let blocker = rusqlite::Connection::open(dir.path().join(DB_FILE_NAME)).expect("open");
    blocker.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    let locked_at = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut gated = Vec::new();
    let mut n = 0;
    while locked_at.elapsed() < Duration::from_secs(5) {
        n += 1;
        let (outcome, took) = llm_call(&bridge, "locked", n);
        assert_eq!(outcome, Outcome::Queued, "a spooled hook never waits");
        slowest = slowest.max(took);
        if n % 10 == 0 {
            let (outcome, took) = gating(&bridge, "locked");
            assert!(
                matches!(outcome, Outcome::TimedOut | Outcome::Committed(_)),
                "a gating hook waits at most its bound, then goes ahead: {outcome:?}"
            );
            gated.push(took);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    blocker.execute_batch("ROLLBACK").expect("release");
    drop(blocker);
    assert!(slowest < FAST, "slowest spooled hook {slowest:?}");
    assert!(!gated.is_empty());
    for took in &gated {
        assert!(*took < HOOK_WAIT + FAST, "gating hook took {took:?}");
    }
    assert!(
        eventually(30, || bridge.flush(Duration::from_secs(1))),
        "everything commits once the lock is gone"
    );
    assert_eq!(llm_calls(dir.path(), "locked"), n as i64);
    // No SQLITE_BUSY surfaced as a failed event: at most the one fault line.
    let messages = bridge.take_messages();
    assert!(
        events(&messages)
            .iter()
            .all(|e| *e == "Store.Fault" || *e == "Store.Recovered"),
        "{messages:?}"
    );
    assert_eq!(bridge.stats().failed, 0);
}

#[test]
fn a_full_disk_fails_open_with_one_line_and_the_bridge_resumes_when_space_frees() {
    let root = tempfile::tempdir().expect("temp dir");
    let mnt = root.path().join("small");
    let _mount = match Mount::tmpfs(&mnt, "4m") {
        Ok(m) => m,
        Err(e) => {
            eprintln!("SKIP: a full disk needs a tmpfs mount (root), and mounting failed: {e}");
            return;
        }
    };
    let dir = mnt.join("meter");
    let bridge = Bridge::start(config(&dir));
    assert_eq!(bridge.store_problem(), None);
    assert_eq!(llm_call(&bridge, "before", 0).0, Outcome::Queued);
    assert!(bridge.flush(Duration::from_secs(10)));
    // Fill the file system up to the last byte.
    let filler = mnt.join("filler");
    {
        use std::io::Write as _;
        let mut f = std::fs::File::create(&filler).expect("filler");
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        while f.write_all(&[0u8; 512]).is_ok() {}
        while f.write_all(&[0u8]).is_ok() {}
    }
    // Big enough that a group of them needs new WAL pages.
    let mut kept = 0;
    for n in 0..200 {
        let (_, took) = llm_call(&bridge, "full", n);
        assert!(took < HOOK_WAIT + FAST, "hook {n} took {took:?}");
        kept += 1;
    }
    assert!(
        eventually(10, || bridge.store_problem().is_some()),
        "the writer notices the full disk"
    );
    let problem = bridge.store_problem().expect("problem");
    assert!(problem.contains("disk_full"), "{problem}");
    assert!(
        problem.contains(&dir.join(DB_FILE_NAME).display().to_string()),
        "{problem}"
    );
    // While it lasts, hooks return at once.
    for n in 200..220 {
        let (_, took) = llm_call(&bridge, "full", n);
        assert!(took < FAST, "{took:?}");
        kept += 1;
    }
    let (_, took) = gating(&bridge, "full");
    assert!(took < FAST, "a gating hook does not wait for a closed store: {took:?}");
    let messages = bridge.take_messages();
    let faults = events(&messages).iter().filter(|e| **e == "Store.Fault").count();
    assert_eq!(faults, 1, "{messages:?}");
    assert!(events(&messages).contains(&"Spool.WriteFailed"), "{messages:?}");
    // Space frees: the bridge resumes by itself; kept and later events land.
    std::fs::remove_file(&filler).expect("free space");
    assert!(eventually(30, || bridge.store_problem().is_none()), "recovers");
    assert_eq!(llm_call(&bridge, "after", 0).0, Outcome::Queued);
    assert!(eventually(30, || bridge.flush(Duration::from_secs(1))));
    assert_eq!(llm_calls(&dir, "full"), kept);
    assert_eq!(llm_calls(&dir, "after"), 1);
    assert!(events(&bridge.take_messages()).contains(&"Store.Recovered"));
    let h = health_record(&dir);
    assert_eq!(h.state, "ok");
    assert_eq!(h.last_fault.as_ref().expect("fault").kind, FaultKind::DiskFull);
    assert!(h.counts.recoveries >= 1 && h.counts.spool_write_failures >= 1, "{h:?}");
}

/// `chattr +i` on the store, its WAL, the spool and the directory: root
/// cannot write them either (file modes do not stop root). Not on the
/// `-shm` file: SQLite maps it into memory, and the kernel answers a write
/// to a mapped page of an immutable file with SIGBUS, which no program can
/// fail open from (a known limit, in docs/troubleshooting.md).
fn set_immutable(dir: &Path, on: bool) -> Result<(), String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| !p.to_string_lossy().ends_with("-shm"))
        .collect();
    if let Ok(spools) = std::fs::read_dir(dir.join(spool::SPOOL_DIR_NAME)) {
        paths.extend(spools.filter_map(|e| e.ok().map(|e| e.path())));
    }
    paths.push(dir.join(spool::SPOOL_DIR_NAME));
    paths.push(dir.to_path_buf());
    chattr(paths, on)
}

/// `chattr +i` (or `-i`) on `paths`, in order (in reverse for `-i`).
fn chattr(mut paths: Vec<PathBuf>, on: bool) -> Result<(), String> {
    let flag = if on { "+i" } else { "-i" };
    if !on {
        paths.reverse();
    }
    for p in paths {
        run("chattr", &[flag, &p.display().to_string()])?;
    }
    Ok(())
}

#[test]
fn a_store_made_read_only_under_a_running_bridge_fails_open_and_recovers() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("meter");
    let bridge = Bridge::start(config(&dir));
    assert_eq!(llm_call(&bridge, "before", 0).0, Outcome::Queued);
    assert!(bridge.flush(Duration::from_secs(10)));
    if let Err(e) = set_immutable(&dir, true) {
        let _ = set_immutable(&dir, false);
        eprintln!("SKIP: a read-only store needs chattr +i (root, a file system with attributes): {e}");
        return;
    }
    let mut kept = 0;
    for n in 0..20 {
        let (_, took) = llm_call(&bridge, "ro", n);
        assert!(took < HOOK_WAIT + FAST, "hook {n} took {took:?}");
        kept += 1;
    }
    let noticed = eventually(10, || bridge.store_problem().is_some());
    let problem = bridge.store_problem();
    let _ = bridge.flush(Duration::from_millis(10));
    set_immutable(&dir, false).expect("chattr -i");
    assert!(noticed, "the writer notices the read-only store");
    let problem = problem.expect("problem");
    assert!(problem.contains("read_only"), "{problem}");
    let messages = bridge.take_messages();
    assert_eq!(
        events(&messages).iter().filter(|e| **e == "Store.Fault").count(),
        1,
        "{messages:?}"
    );
    assert!(eventually(30, || bridge.store_problem().is_none()), "recovers");
    assert!(eventually(30, || bridge.flush(Duration::from_secs(1))));
    assert_eq!(llm_calls(&dir, "ro"), kept);
    let h = health_record(&dir);
    assert_eq!(h.last_fault.as_ref().expect("fault").kind, FaultKind::ReadOnly);
    assert_eq!(h.state, "ok");
}

#[test]
fn a_store_on_a_read_only_mount_at_start_is_retried_until_it_is_writable() {
    let root = tempfile::tempdir().expect("temp dir");
    let src = root.path().join("src");
    let dir = root.path().join("meter");
    drop(Writer::open_dir(&src).expect("create the store"));
    let mount = match Mount::bind(&src, &dir) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("SKIP: a read-only mount needs root: {e}");
            return;
        }
    };
    mount.remount("remount,bind,ro");
    let bridge = Bridge::start(config(&dir));
    let problem = bridge.store_problem().expect("a read-only store is a problem");
    assert!(problem.contains("read_only"), "{problem}");
    for n in 0..5 {
        let (outcome, took) = llm_call(&bridge, "ro", n);
        assert_eq!(outcome, Outcome::Queued);
        assert!(took < FAST, "{took:?}");
    }
    // The spool cannot be written either: the events wait in memory.
    assert!(!bridge.flush(Duration::from_secs(1)));
    mount.remount("remount,bind,rw");
    assert!(eventually(30, || bridge.store_problem().is_none()), "recovers");
    assert!(eventually(30, || bridge.flush(Duration::from_secs(1))));
    assert_eq!(llm_calls(&dir, "ro"), 5);
    let (outcome, _) = llm_call(&bridge, "ro", 5);
    assert_eq!(outcome, Outcome::Queued, "the spool exists now");
    assert!(bridge.flush(Duration::from_secs(5)));
}

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read")
}

#[test]
fn a_corrupt_store_is_kept_untouched_and_a_replaced_one_is_picked_up() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("meter");
    drop(Writer::open_dir(&dir).expect("create the store"));
    let db = dir.join(DB_FILE_NAME);
    // Garbage over the header (and the first page).
    {
        use std::io::{Seek as _, Write as _};
        let mut f = std::fs::OpenOptions::new().write(true).open(&db).expect("open");
        f.seek(std::io::SeekFrom::Start(0)).expect("seek");
        f.write_all(&[0xA5; 4096]).expect("garbage");
    }
    let before = bytes(&db);
    let bridge = Bridge::start(config(&dir));
    assert_eq!(bridge.disabled_reason(), None);
    let problem = bridge.store_problem().expect("a corrupt store is a problem");
    assert!(problem.contains("corrupt"), "{problem}");
    assert!(problem.contains(&db.display().to_string()), "names the file: {problem}");
    assert!(problem.contains("doctor --rebuild"), "says what to do: {problem}");
    for n in 0..5 {
        let (outcome, took) = llm_call(&bridge, "c", n);
        assert_eq!(outcome, Outcome::Queued);
        assert!(took < FAST, "{took:?}");
    }
    // Retries leave the file alone.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(bytes(&db), before, "the corrupt file is kept as it was");
    assert_eq!(
        events(&bridge.take_messages())
            .iter()
            .filter(|e| **e == "Store.Fault")
            .count(),
        1
    );
    // The user moves it aside, as the message says: a fresh store is used,
    // and what the hooks recorded meanwhile lands in it.
    let aside = dir.join(format!("{DB_FILE_NAME}.corrupt"));
    std::fs::rename(&db, &aside).expect("move aside");
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("{DB_FILE_NAME}{ext}")));
    }
    assert!(eventually(30, || bridge.store_problem().is_none()), "recovers");
    assert!(eventually(30, || bridge.flush(Duration::from_secs(1))));
    assert_eq!(llm_calls(&dir, "c"), 5);
    assert_eq!(bytes(&aside), before);
    let h = health_record(&dir);
    assert_eq!(h.last_fault.as_ref().expect("fault").kind, FaultKind::Corrupt);
}

#[test]
fn a_hermes_process_makes_no_new_store_beside_a_damaged_one_kept_aside() {
    // `doctor --rebuild` kept the damaged store aside and did not finish:
    // a new store would report nothing spent and split the history.
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("meter");
    drop(Writer::open_dir(&dir).expect("create the store"));
    let db = dir.join(DB_FILE_NAME);
    let aside = dir.join(format!("{DB_FILE_NAME}.damaged-1796002700"));
    std::fs::rename(&db, &aside).expect("kept aside");
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.join(format!("{DB_FILE_NAME}{ext}")));
    }
    let bridge = Bridge::start(config(&dir));
    let problem = bridge
        .store_problem()
        .expect("a missing store beside a kept-aside one is a problem");
    assert!(problem.contains("kept aside"), "{problem}");
    assert!(problem.contains("doctor --rebuild"), "says what to do: {problem}");
    for n in 0..3 {
        let (outcome, took) = llm_call(&bridge, "k", n);
        assert_eq!(outcome, Outcome::Queued);
        assert!(took < FAST, "{took:?}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(!db.exists(), "no empty store was made");
    // The user puts a store back: what the hooks recorded meanwhile lands.
    drop(Writer::open_dir(&dir).expect("a store put back"));
    assert!(eventually(30, || bridge.store_problem().is_none()), "recovers");
    assert!(eventually(30, || bridge.flush(Duration::from_secs(1))));
    assert_eq!(llm_calls(&dir, "k"), 3);
}

#[test]
fn garbage_over_random_pages_never_reaches_a_hook() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("meter");
    {
        let bridge = Bridge::start(config(&dir));
        for n in 0..300 {
            llm_call(&bridge, &format!("s{}", n % 30), n);
        }
        assert!(bridge.flush(Duration::from_secs(10)));
    }
    let db = dir.join(DB_FILE_NAME);
    let len = std::fs::metadata(&db).expect("stat").len();
    let pages = len / 4096;
    assert!(pages > 4, "{pages} pages");
    {
        use std::io::{Seek as _, Write as _};
        let mut f = std::fs::OpenOptions::new().write(true).open(&db).expect("open");
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..pages / 2 {
            let page = rng.u64(1..pages);
            f.seek(std::io::SeekFrom::Start(page * 4096)).expect("seek");
            f.write_all(&[0x5A; 4096]).expect("garbage");
        }
    }
    let bridge = Bridge::start(config(&dir));
    for n in 0..50 {
        let (_, took) = llm_call(&bridge, &format!("s{}", n % 30), 1000 + n);
        assert!(took < HOOK_WAIT + FAST, "{took:?}");
        let (_, took) = gating(&bridge, "g");
        assert!(took < HOOK_WAIT + FAST, "{took:?}");
    }
    let _ = bridge.flush(Duration::from_secs(2));
    // Either SQLite never read a damaged page and everything landed, or the
    // writer called the store corrupt, naming the file.
    if let Some(problem) = bridge.store_problem() {
        assert!(problem.contains("corrupt"), "{problem}");
        assert!(problem.contains(&db.display().to_string()), "{problem}");
        assert!(db.exists(), "never deleted");
    }
}

/// A bridge whose next try of a store in trouble is a minute away, as a
/// store that stayed broken a while waits [`DEFAULT_STORE_RETRY_MAX`]
/// (30 s): a process exits well within that.
fn config_slow_retry(dir: &Path) -> BridgeConfig {
    let mut cfg = config(dir);
    cfg.store_retry_min = Duration::from_secs(60);
    cfg.store_retry_max = Duration::from_secs(60);
    cfg
}

/// A bridge with [`config_slow_retry`] in `dir` that recorded one event.
fn slow_retry_bridge(dir: &Path) -> Bridge {
    let bridge = Bridge::start(config_slow_retry(dir));
    assert_eq!(llm_call(&bridge, "before", 0).0, Outcome::Queued);
    assert!(bridge.flush(Duration::from_secs(10)));
    bridge
}

/// The database and its WAL (not the `-shm`: see [`set_immutable`]).
fn db_files(dir: &Path) -> Vec<PathBuf> {
    let db = dir.join(DB_FILE_NAME);
    vec![db.clone(), PathBuf::from(format!("{}-wal", db.display()))]
}

/// `chattr +i` on `files`, or a SKIP line (and no change) where that needs
/// a root or a file system this test does not have.
fn made_immutable(files: &[PathBuf]) -> bool {
    match chattr(files.to_vec(), true) {
        Ok(()) => true,
        Err(e) => {
            let _ = chattr(files.to_vec(), false);
            eprintln!("SKIP: a read-only store needs chattr +i (root, a file system with attributes): {e}");
            false
        }
    }
}

/// Fills the file system of `path` up to the last byte.
fn fill(path: &Path) {
    use std::io::Write as _;
    let mut f = std::fs::File::create(path).expect("filler");
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    while f.write_all(&[0u8; 512]).is_ok() {}
    while f.write_all(&[0u8]).is_ok() {}
}

/// LLM calls of `session` until the writer finds the store in trouble
/// (some may still commit first, into WAL pages the disk already holds);
/// returns how many were made.
fn calls_until_the_store_is_down(bridge: &Bridge, session: &str) -> i64 {
    let mut n = 0;
    while bridge.store_problem().is_none() {
        assert!(n < 400, "the writer never found the store in trouble");
        llm_call(bridge, session, n as usize);
        n += 1;
        if n % 20 == 0 {
            eventually(1, || bridge.store_problem().is_some());
        }
    }
    // And a few more while it is down, which nothing can take yet.
    for k in 0..11 {
        llm_call(bridge, session, (n + k) as usize);
    }
    n + 11
}

/// A bridge with [`config_slow_retry`] on a 4 MiB tmpfs under `root` that
/// recorded one event; `None` (after a SKIP line) where mounting needs a
/// root this test does not have. Returns the mount, its path, the store
/// directory and the bridge.
fn small_disk_bridge(root: &Path) -> Option<(Mount, PathBuf, PathBuf, Bridge)> {
    let mnt = root.join("small");
    let mount = match Mount::tmpfs(&mnt, "4m") {
        Ok(m) => m,
        Err(e) => {
            eprintln!("SKIP: a full disk needs a tmpfs mount (root), and mounting failed: {e}");
            return None;
        }
    };
    let dir = mnt.join("meter");
    let bridge = slow_retry_bridge(&dir);
    Some((mount, mnt, dir, bridge))
}

fn message_of<'a>(messages: &'a [Message], event: &str) -> Option<&'a str> {
    messages.iter().find(|m| m.event == event).map(|m| m.text.as_str())
}

/// The campaign's case: a disk full for the store and the spool alike,
/// freed a moment before the process exits, long before the writer's
/// backoff would try again. The exit flush tries the store itself.
#[test]
fn an_exit_flush_moments_after_a_full_disk_frees_tries_the_store_again_and_loses_nothing() {
    let root = tempfile::tempdir().expect("temp dir");
    let Some((_mount, mnt, dir, bridge)) = small_disk_bridge(root.path()) else {
        return;
    };
    let filler = mnt.join("filler");
    fill(&filler);
    let made = calls_until_the_store_is_down(&bridge, "full");
    let unsaved = bridge.stats().unsaved;
    assert!(unsaved >= 11, "the spool could not take them either: {unsaved}");
    std::fs::remove_file(&filler).expect("free space");
    let began = Instant::now();
    assert!(bridge.flush_at_exit(DEFAULT_FLUSH_TIMEOUT), "the exit flush commits");
    assert!(began.elapsed() < DEFAULT_FLUSH_TIMEOUT + FAST, "{:?}", began.elapsed());
    assert_eq!(bridge.stats().unsaved, 0);
    let messages = bridge.take_messages();
    assert_eq!(message_of(&messages, EXIT_EVENTS_LOST), None, "{messages:?}");
    assert_eq!(message_of(&messages, EXIT_LEFT_IN_SPOOL), None, "{messages:?}");
    drop(bridge);
    assert_eq!(llm_calls(&dir, "full"), made);
}

/// The store unwritable (immutable files) while its spool is fine: the
/// exit flush tries the store again within its bound, then says in one
/// line how many events the spool keeps for the next process, which
/// records them all.
#[test]
fn an_exit_flush_on_a_store_still_down_says_how_many_events_the_spool_keeps_for_the_next_process() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("meter");
    let bridge = slow_retry_bridge(&dir);
    let store_files = db_files(&dir);
    if !made_immutable(&store_files) {
        return;
    }
    for n in 0..5 {
        assert_eq!(llm_call(&bridge, "ro", n).0, Outcome::Queued, "the spool takes it");
    }
    let noticed = eventually(10, || bridge.store_problem().is_some());
    let began = Instant::now();
    let committed = bridge.flush_at_exit(Duration::from_millis(500));
    let took = began.elapsed();
    let messages = bridge.take_messages();
    let stats = bridge.stats();
    chattr(store_files, false).expect("chattr -i");
    assert!(noticed, "the writer notices the read-only store");
    assert!(!committed);
    assert!(took >= Duration::from_millis(500), "tried until its bound: {took:?}");
    assert!(took < Duration::from_millis(500) + FAST, "{took:?}");
    let left = message_of(&messages, EXIT_LEFT_IN_SPOOL).expect("the left-in-spool line");
    assert!(left.starts_with("5 hook events stay in "), "{left}");
    assert!(left.contains("read_only"), "{left}");
    assert_eq!(message_of(&messages, EXIT_EVENTS_LOST), None, "{messages:?}");
    assert_eq!(stats.unsaved, 0);
    drop(bridge);
    // The next process records them from the spool.
    let next = Bridge::start(config(&dir));
    assert!(eventually(30, || llm_calls(&dir, "ro") == 5));
    assert!(next.flush(Duration::from_secs(10)));
}

/// Neither the store nor the spool can be written (immutable files), but
/// the store directory can: the exit line counts what is lost, the health
/// record keeps it per process, and `status` shows it.
#[test]
fn events_neither_the_store_nor_the_spool_takes_are_counted_at_exit_in_health_and_status() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("meter");
    let bridge = slow_retry_bridge(&dir);
    let mut files = db_files(&dir);
    files.extend(
        std::fs::read_dir(dir.join(spool::SPOOL_DIR_NAME))
            .expect("spool dir")
            .filter_map(|e| e.ok().map(|e| e.path())),
    );
    files.push(dir.join(spool::SPOOL_DIR_NAME));
    if !made_immutable(&files) {
        return;
    }
    for n in 0..4 {
        llm_call(&bridge, "lost", n);
    }
    let noticed = eventually(10, || bridge.store_problem().is_some());
    let unsaved = bridge.stats().unsaved;
    let committed = bridge.flush_at_exit(Duration::from_millis(300));
    let messages = bridge.take_messages();
    chattr(files, false).expect("chattr -i");
    assert!(noticed, "the writer notices the read-only store");
    assert_eq!(unsaved, 4, "held in memory only");
    assert!(!committed);
    let lost = message_of(&messages, EXIT_EVENTS_LOST).expect("the lost line");
    assert!(lost.starts_with("4 hook events could not be saved"), "{lost}");
    assert!(lost.contains("read_only"), "{lost}");
    let h = health_record(&dir);
    assert_eq!(h.counts.dropped_events, 4, "{h:?}");
    let mine: Vec<_> = h.lost.iter().filter(|l| l.pid == std::process::id()).collect();
    assert_eq!(mine.len(), 1, "{h:?}");
    assert_eq!(mine[0].count, 4);
    assert!(mine[0].reason.contains("read_only"), "{}", mine[0].reason);
    drop(bridge);
    let out = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .arg("status")
        .env("HERMES_METER_HOME", &dir)
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = format!("lost events   pid {} ", std::process::id());
    let shown = text
        .lines()
        .find(|l| l.contains(&line))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        shown.contains(": 4 hook events could not be saved (read_only"),
        "{shown}"
    );
}

/// The campaign's silent case: the disk full for the store and the spool
/// until the process ends. Nothing can be written, so the exit line is the
/// only trace, and it counts every event the writer still held.
#[test]
fn a_process_ending_on_a_full_disk_says_at_exit_how_many_events_it_loses() {
    let root = tempfile::tempdir().expect("temp dir");
    let Some((_mount, mnt, _dir, bridge)) = small_disk_bridge(root.path()) else {
        return;
    };
    fill(&mnt.join("filler"));
    calls_until_the_store_is_down(&bridge, "full");
    let unsaved = bridge.stats().unsaved;
    assert!(unsaved >= 11, "{unsaved}");
    assert!(!bridge.flush_at_exit(Duration::from_millis(300)));
    let messages = bridge.take_messages();
    let lost = message_of(&messages, EXIT_EVENTS_LOST).expect("the lost line");
    assert!(
        lost.starts_with(&format!("{unsaved} hook events could not be saved")),
        "{lost}"
    );
    assert!(lost.contains("disk_full"), "{lost}");
}

/// The user that cannot write what is made read-only below: file modes do
/// not stop root (CI runs the tests as root), so as root the commands run
/// as `nobody`; as anyone else, as themselves.
const NOBODY: u32 = 65_534;

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| {
        use std::os::unix::fs::MetadataExt as _;
        m.uid() == 0
    })
}

fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn chown_to(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).expect("chown");
}

/// What cannot be written: the store file, or the store directory.
#[derive(Clone, Copy, Debug)]
enum ReadOnly {
    File,
    Dir,
}

/// A store with the fixtures of one session replayed, made read-only as
/// `what` says, and the user to run the commands as.
fn read_only_store(root: &Path, what: ReadOnly) -> (PathBuf, Option<u32>, String) {
    let home = root.join("meter");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/multi_turn.jsonl");
    let (code, out, err) = cli_as(&home, None, &["replay", &fixture.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, totals, err) = cli_as(&home, None, &["report", "--json"]);
    assert_eq!(code, 0, "{err}");
    let db = home.join(DB_FILE_NAME);
    assert!(!home.join(format!("{DB_FILE_NAME}-wal")).exists(), "closed cleanly");
    let user = if is_root() {
        chmod(root, 0o755);
        match what {
            // Nobody may write the directory, not the file (root's, 0644).
            ReadOnly::File => {
                chown_to(&home, NOBODY);
                chmod(&db, 0o644);
            }
            // Nobody may write the file, not the directory (root's, 0755).
            ReadOnly::Dir => {
                chmod(&home, 0o755);
                chown_to(&db, NOBODY);
            }
        }
        Some(NOBODY)
    } else {
        match what {
            ReadOnly::File => chmod(&db, 0o444),
            ReadOnly::Dir => chmod(&home, 0o555),
        }
        None
    };
    (home, user, totals)
}

fn totals(report_json: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(report_json).expect("report json");
    v["totals"].clone()
}

fn reading_commands_work_on(what: ReadOnly) {
    let root = tempfile::tempdir().expect("temp dir");
    let (home, user, before) = read_only_store(root.path(), what);
    if user.is_some() && run("setpriv", &["--reuid=65534", "--regid=65534", "--clear-groups", "true"]).is_err() {
        eprintln!("SKIP: running as root, and setpriv cannot drop to nobody");
        return;
    }
    let db = home.join(DB_FILE_NAME);
    let bytes_before = bytes(&db);
    let (code, out, err) = cli_as(&home, user, &["report", "--json"]);
    assert_eq!(code, 0, "{what:?}: {out}{err}");
    assert_eq!(totals(&out), totals(&before), "{what:?}: the same report as before");
    assert!(
        err.contains("cannot be written"),
        "{what:?} says so, in one line: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, out, err) = cli_as(&home, user, &["trace", "--last"]);
    assert_eq!(code, 0, "{what:?}: {out}{err}");
    let (code, out, err) = cli_as(&home, user, &["status"]);
    assert_eq!(code, 0, "{what:?}: {out}{err}");
    assert!(out.contains("read-only"), "{what:?}: {out}");
    let (code, out, err) = cli_as(&home, user, &["doctor"]);
    assert_eq!(code, 0, "{what:?}: {out}{err}");
    assert!(out.contains("whole") && out.contains("READ-ONLY"), "{what:?}: {out}");
    assert!(!out.contains("DAMAGED"), "{what:?}: read-only is not damaged: {out}");
    let (code, out, err) = cli_as(&home, user, &["doctor", "--rebuild", "--force"]);
    assert_ne!(code, 0, "{what:?}: {out}");
    assert!(err.contains("cannot rebuild"), "{what:?}: {err}");
    assert_eq!(bytes(&db), bytes_before, "{what:?}: nothing wrote the store");
}

#[test]
fn reading_commands_work_on_a_read_only_store_file() {
    reading_commands_work_on(ReadOnly::File);
}

#[test]
fn reading_commands_work_on_a_store_in_a_read_only_directory() {
    reading_commands_work_on(ReadOnly::Dir);
}

#[test]
fn reading_commands_work_on_a_store_on_a_read_only_mount() {
    let root = tempfile::tempdir().expect("temp dir");
    let src = root.path().join("src");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/multi_turn.jsonl");
    let (code, out, err) = cli_as(&src, None, &["replay", &fixture.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let (_, before, _) = cli_as(&src, None, &["report", "--json"]);
    let home = root.path().join("meter");
    let mount = match Mount::bind(&src, &home) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("SKIP: a read-only mount needs root: {e}");
            return;
        }
    };
    mount.remount("remount,bind,ro");
    // Root cannot write a read-only mount either: no other user needed.
    let (code, out, err) = cli_as(&home, None, &["report", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(totals(&out), totals(&before));
    assert!(err.contains("cannot be written"), "{err}");
    let (code, out, err) = cli_as(&home, None, &["doctor"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("READ-ONLY") && !out.contains("DAMAGED"), "{out}");
}
