//! The spool and the store together: whatever moment a process ends at,
//! every hook call that returned is in the store or in the spool (and so
//! in the store once the next process recovers it), none is in neither,
//! and none is counted twice.
//!
//! Each test runs children (this test binary again, with `DURABILITY_CHILD`
//! set) that submit LLM calls through the hook path with fresh ids and
//! append each call's number to an acknowledgement file once the hook
//! returned. The parent ends them in three ways:
//!
//! - the writer thread `_exit`s the process right after a commit and before
//!   it empties the spool (from the gate's `applied`, which the writer
//!   calls between the two);
//! - the exit flush runs out of time (another connection holds the write
//!   lock for a random while) and the process `_exit`s, as Hermes's
//!   `os._exit` does after our bounded flush;
//! - SIGKILL at a random moment.
//!
//! Then the next bridge recovers the spool, and the store must hold every
//! acknowledged call exactly once: one journal row and one `llm_calls` row
//! per call, token totals equal to the calls' sum, `PRAGMA
//! integrity_check` ok.

// libc calls on this process and its children (descriptor limits, exit,
// signals, ownership): the workspace denies unsafe code elsewhere.
#![allow(unsafe_code)]

use hermes_meter_test_support::hooks;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hermes_meter_model::hook::HookEvent;
use hermes_meter_runtime::bridge::{Bridge, BridgeConfig, Gate, Verdict};
use hermes_meter_runtime::spool;
use hermes_meter_store::Writer;
use serde_json::json;

const CHILD: &str = "DURABILITY_CHILD";
const ACKS: &str = "acks";
/// Input and output tokens of every call.
const TOKENS: (i64, i64) = (100, 7);

/// Ends the process as `os._exit` does.
fn exit_now() -> ! {
    // SAFETY: _exit has no preconditions; it never returns.
    unsafe { libc::_exit(0) }
}

/// A gate that ends the process in the writer's window between a commit
/// and emptying the spool, at its `n`th batch.
struct ExitAfterCommit {
    batches_left: u32,
}

impl Gate for ExitAfterCommit {
    fn verdict(&mut self, _store: &Writer, _event: &HookEvent) -> Option<Verdict> {
        None
    }

    fn applied(&mut self, _spend_usd: f64, _tool_calls: u64) {
        self.batches_left = self.batches_left.saturating_sub(1);
        if self.batches_left == 0 {
            exit_now();
        }
    }
}

/// One LLM call of session `s{child}`, number `n`.
fn llm_call(bridge: &Bridge, child: u64, n: u64) {
    let session = format!("s{child}");
    let turn = format!("{session}:turn:{n}");
    hooks::call(
        bridge,
        "post_api_request",
        json!({
            "session_id": session,
            "turn_id": turn,
            "api_request_id": format!("{turn}:api:1"),
            "task_id": "task",
            "platform": "cli",
            "model": "mock-model",
            "provider": "custom",
            "api_call_count": 1,
            "api_duration": 0.01,
            "finish_reason": "stop",
            "usage": {"input_tokens": TOKENS.0, "output_tokens": TOKENS.1},
        }),
    );
}

fn child(dir: &Path) -> ! {
    let mode = std::env::var("DURABILITY_MODE").expect("mode");
    let seed: u64 = std::env::var("DURABILITY_SEED").expect("seed").parse().expect("seed");
    let id: u64 = std::env::var("DURABILITY_ID").expect("id").parse().expect("id");
    let mut rng = fastrand::Rng::with_seed(seed);
    let config = BridgeConfig::new(dir.to_path_buf());
    let bridge = match mode.as_str() {
        "commit" => Bridge::start_with_gate(
            config,
            Box::new(ExitAfterCommit {
                batches_left: rng.u32(1..6),
            }),
        ),
        _ => Bridge::start(config),
    };
    assert!(bridge.disabled_reason().is_none());
    let mut acks = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join(ACKS))
        .expect("ack file");
    let calls = rng.u64(50..400);
    for n in 0..calls {
        llm_call(&bridge, id, n);
        acks.write_all(format!("{id}:{n}\n").as_bytes()).expect("ack");
        if mode != "flush" && rng.u8(0..20) == 0 {
            // A session end's flush: commits and empties the spool.
            bridge.flush(Duration::from_secs(10));
        }
        if mode == "flush" && n == calls / 2 {
            // The writer cannot commit from here on for a while: the exit
            // flush below may run out of time.
            let db = dir.join(hermes_meter_store::DB_FILE_NAME);
            let hold = Duration::from_millis(rng.u64(0..60));
            let (locked, taken) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let blocker = rusqlite::Connection::open(db).expect("blocker");
                blocker.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
                locked.send(()).expect("tell");
                std::thread::sleep(hold);
                let _ = blocker.execute_batch("COMMIT");
                // Keep the connection open: the process ends with `_exit`.
                std::thread::sleep(Duration::from_secs(60));
            });
            taken.recv().expect("the lock is taken");
        }
    }
    if mode == "flush" {
        // The bounded exit flush, then os._exit.
        bridge.flush(Duration::from_millis(rng.u64(0..40)));
        exit_now();
    }
    // "commit" exits from the writer; "kill" waits for SIGKILL.
    std::thread::sleep(Duration::from_secs(30));
    exit_now();
}

fn spawn(dir: &Path, test: &str, mode: &str, id: u64, seed: u64) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", &hermes_meter_test_support::test_name(module_path!(), test)])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD, dir)
        .env("DURABILITY_MODE", mode)
        .env("DURABILITY_ID", id.to_string())
        .env("DURABILITY_SEED", seed.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child")
}

/// The acknowledged calls, as (child, n).
fn acknowledged(dir: &Path) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(dir.join(ACKS)).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .filter_map(|l| {
            let (c, n) = l.trim().split_once(':')?;
            Some((c.parse().ok()?, n.parse().ok()?))
        })
        .collect()
}

/// What the spools held before recovery: calls also in the store already,
/// and calls only in a spool.
#[derive(Default, Debug)]
struct Left {
    also_committed: usize,
    only_spooled: usize,
}

fn left_in_spools(dir: &Path) -> Left {
    let mut left = Left::default();
    let Ok(files) = std::fs::read_dir(dir.join(spool::SPOOL_DIR_NAME)) else {
        return left;
    };
    let store = Writer::open(&dir.join(hermes_meter_store::DB_FILE_NAME)).expect("open");
    for file in files {
        let text = std::fs::read_to_string(file.expect("entry").path()).expect("spool");
        for line in text.lines() {
            let record = hermes_meter_model::hook::parse_line(line, false)
                .expect("a whole spool line")
                .expect("a record");
            let id = record.kwargs["api_request_id"].as_str().expect("id").to_string();
            let n: i64 = store
                .query_scalar(&format!("SELECT COUNT(*) FROM llm_calls WHERE api_request_id = '{id}'"))
                .expect("count");
            if n > 0 {
                left.also_committed += 1;
            } else {
                left.only_spooled += 1;
            }
        }
    }
    left
}

/// Recovers what the children left and checks every promise.
fn verify(dir: &Path, what: &str) -> Left {
    let acked = acknowledged(dir);
    let left_before = left_in_spools(dir);
    // The next process: a bridge recovers dead processes' spools first.
    let bridge = Bridge::start(BridgeConfig::new(dir.to_path_buf()));
    assert!(bridge.flush(Duration::from_secs(30)), "recovery commits ({what})");
    drop(bridge);
    let store = Writer::open_dir(dir).expect("open");
    let integrity: String = store.query_scalar("PRAGMA integrity_check").expect("integrity");
    assert_eq!(integrity, "ok", "{what}");
    for (child, n) in &acked {
        let key = format!("s{child}:turn:{n}:api:1");
        let calls: i64 = store
            .query_scalar(&format!(
                "SELECT COUNT(*) FROM llm_calls WHERE api_request_id = '{key}'"
            ))
            .expect("count");
        assert_eq!(calls, 1, "acknowledged call {key} is in the store once ({what})");
    }
    // Nothing twice: one journal row and one call per distinct call, and
    // token totals that add up.
    let journal: i64 = store.query_scalar("SELECT COUNT(*) FROM journal").expect("journal");
    let calls: i64 = store.query_scalar("SELECT COUNT(*) FROM llm_calls").expect("calls");
    assert_eq!(journal, calls, "one journal row per call ({what})");
    let input: i64 = store
        .query_scalar("SELECT COALESCE(SUM(input_tokens), 0) FROM runs")
        .expect("run totals");
    assert_eq!(input, calls * TOKENS.0, "run totals equal the calls ({what})");
    assert!(calls as usize >= acked.len(), "{what}");
    let left = std::fs::read_dir(dir.join(spool::SPOOL_DIR_NAME))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "recovered spools are deleted ({what})");
    left_before
}

fn rounds() -> u64 {
    std::env::var("HERMES_METER_CRASH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(|n: u64| n.max(1))
        .unwrap_or(12)
}

fn run_rounds(test: &str, mode: &str) -> Left {
    let mut rng = fastrand::Rng::new();
    let mut total = Left::default();
    for round in 0..rounds() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Two children in turn on one store: the second also recovers
        // what the first left, as a real next process would.
        for id in 0..2 {
            let seed = rng.u64(..);
            let what = format!("mode {mode}, round {round}, child {id}, seed {seed}");
            let mut child = spawn(dir.path(), test, mode, id, seed);
            if mode == "kill" {
                std::thread::sleep(Duration::from_millis(rng.u64(20..300)));
                child.kill().expect("SIGKILL");
            }
            let out = child.wait_with_output().expect("child");
            if mode != "kill" {
                assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
        let left = verify(dir.path(), &format!("mode {mode}, round {round}"));
        total.also_committed += left.also_committed;
        total.only_spooled += left.only_spooled;
    }
    eprintln!("{mode}: what the spools held before recovery: {total:?}");
    total
}

fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD).map(PathBuf::from)
}

#[test]
fn a_writer_ended_between_its_commit_and_emptying_the_spool_loses_and_doubles_nothing() {
    if let Some(dir) = child_dir() {
        child(&dir);
    }
    let left = run_rounds(
        "a_writer_ended_between_its_commit_and_emptying_the_spool_loses_and_doubles_nothing",
        "commit",
    );
    assert!(
        left.also_committed > 0,
        "the writer ended with committed calls still in its spool: the window was hit"
    );
}

#[test]
fn an_exit_flush_that_runs_out_of_time_leaves_the_rest_in_the_spool() {
    if let Some(dir) = child_dir() {
        child(&dir);
    }
    let left = run_rounds(
        "an_exit_flush_that_runs_out_of_time_leaves_the_rest_in_the_spool",
        "flush",
    );
    assert!(
        left.only_spooled > 0,
        "some exit flush ran out of time with calls not committed"
    );
}

#[test]
fn a_process_killed_at_any_moment_loses_no_returned_hook() {
    if let Some(dir) = child_dir() {
        child(&dir);
    }
    run_rounds("a_process_killed_at_any_moment_loses_no_returned_hook", "kill");
}
