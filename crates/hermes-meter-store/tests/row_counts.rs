//! The row counts `status` reads (`store_counts`) stay equal to `COUNT(*)`
//! of their tables, whatever writes or deletes the rows: new events and
//! repeated ones, retention, the outbox's export, cap and expiry, the idle
//! and exit closers, the metric fold; a transaction that fails half-way and
//! a process killed mid-transaction leave no count behind. Real SQLite in
//! temp dirs, driven by the recorded Hermes stream through the `Writer` API.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use hermes_meter_model::hook::{decode, DecodeOptions, Decoded, Hook, HookEvent};
use hermes_meter_store::{EventContext, Outbox, SentSession, SpanKind, Writer};

use crate::stream;

const DAY: f64 = 86_400.0;

use stream::COUNTED_TABLES as TABLES;

/// Copies `copies` of the recorded stream as decoded events, copy `c`
/// moved `c * spread_days` days back, in the order each copy was recorded.
fn events(copies: std::ops::Range<usize>, spread_days: f64) -> Vec<HookEvent> {
    let lines = stream::fixture_lines();
    let mut out = Vec::new();
    for c in copies {
        let text = stream::session_copy(&lines, c, -(c as f64) * spread_days * DAY);
        for line in text.lines() {
            let Some(rec) = hermes_meter_model::hook::parse_line(line, false).expect("line") else {
                continue;
            };
            if let Decoded::Event(e, _) = decode(&rec.hook, &rec.kwargs, rec.t.unwrap_or(0.0), DecodeOptions::default())
            {
                out.push(e);
            }
        }
    }
    out
}

/// Panics unless every kept count equals its table's `COUNT(*)`.
fn assert_counts_exact(store: &Writer, what: &str) {
    for table in TABLES {
        let kept = store.store_count(table).expect("kept count");
        let real: i64 = store
            .query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
            .expect("count");
        assert_eq!(kept, real, "{table} after {what}");
    }
    let held: i64 = store
        .query_scalar("SELECT COUNT(*) FROM outbox WHERE hold = 1")
        .expect("held");
    assert_eq!(store.export_state().expect("state").held, held, "held after {what}");
    assert_eq!(
        store.counts().expect("counts").journal,
        store.store_count("journal").expect("journal"),
        "status reads the same counter"
    );
}

/// A random sequence of every kind of write, counts checked after each.
fn random_walk(seed: u64, steps: usize) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open(&dir.path().join("walk.db")).expect("open");
    // The exporter's connection beside the writer's, as in a Hermes process.
    let mut outbox = Outbox::open(store.path()).expect("outbox");
    let pool = events(0..4, 9.0);
    let ctx = EventContext::default();
    let now = hermes_meter_store::unix_now();
    let mut next = 0;
    let mut what = Vec::new();
    for step in 0..steps {
        let action = rng.u32(0..12);
        match action {
            // New events, with some already applied mixed in (duplicates).
            0..=4 => {
                let take = rng.usize(1..300).min(pool.len() - next);
                let mut batch: Vec<&HookEvent> = pool[next..next + take].iter().collect();
                next += take;
                for _ in 0..rng.usize(0..20) {
                    if next > 0 {
                        batch.insert(rng.usize(0..=batch.len()), &pool[rng.usize(0..next)]);
                    }
                }
                if rng.bool() {
                    store
                        .apply_batch(batch.iter().map(|e| (*e, &ctx)))
                        .expect("apply batch");
                } else {
                    for e in batch {
                        store.apply(e, &ctx).expect("apply");
                    }
                }
                if next == pool.len() {
                    // Everything again: duplicates only (or refused, once pruned).
                    next = 0;
                }
                what.push(format!("step {step}: {take} events"));
            }
            5 => {
                let n = store
                    .prune_journal(now - rng.f64() * 40.0 * DAY, rng.usize(1..800))
                    .expect("prune");
                what.push(format!("step {step}: pruned {n} journal rows"));
            }
            6 => {
                let n = store
                    .expire_outbox(now - rng.f64() * 40.0 * DAY, rng.usize(1..200))
                    .expect("expire");
                what.push(format!("step {step}: expired {n} outbox rows"));
            }
            7 => {
                let n = outbox
                    .outbox_enforce_cap(rng.u64(0..100), rng.usize(1..100))
                    .expect("cap");
                what.push(format!("step {step}: capped {n} outbox rows"));
            }
            // An export: some of what was ready accepted, session spans
            // moving on to their next span.
            8 => {
                let rows = outbox
                    .outbox_ready(now, rng.f64() * 60.0, rng.usize(1..100))
                    .expect("ready");
                let done = &rows[..rng.usize(0..=rows.len())];
                let sessions: Vec<SentSession> = done
                    .iter()
                    .filter(|r| r.kind == SpanKind::Run && rng.bool())
                    .map(|r| SentSession {
                        session_id: r.session_id.clone(),
                        n: r.n,
                        ended_at: r.ready_at,
                        totals: (0, 0, 0.0),
                    })
                    .collect();
                if rng.u32(0..4) == 0 {
                    outbox.outbox_resent(done, now).expect("resent");
                } else {
                    outbox.outbox_done(done, &sessions, &[], now).expect("done");
                }
                what.push(format!("step {step}: exported {} rows", done.len()));
            }
            9 => {
                if rng.bool() {
                    store.release_held_sessions_since(0.0, now).expect("release");
                } else {
                    store.close_idle_runs(now, rng.f64() * 30.0 * DAY).expect("idle");
                }
                what.push(format!("step {step}: released or closed"));
            }
            10 => {
                let sessions: Vec<String> = (0..3)
                    .filter_map(|_| {
                        if next == 0 {
                            return None;
                        }
                        match &pool[rng.usize(0..next)].hook {
                            Hook::SessionStart(e) => Some(e.session_id.clone()),
                            Hook::PreLlmCall(e) => Some(e.session_id.clone()),
                            _ => None,
                        }
                    })
                    .collect();
                let names: Vec<&str> = sessions.iter().map(String::as_str).collect();
                store.release_held_sessions(&names, now).expect("release");
                store.close_exited_runs(&names, now).expect("exited");
                what.push(format!("step {step}: {} sessions exited", names.len()));
            }
            _ => {
                let mut measure =
                    |_: &hermes_meter_model::rows::MetricFact, _: &mut Vec<hermes_meter_model::rows::Increment>| {};
                let folded = outbox
                    .fold_metrics(now, now - rng.f64() * DAY, rng.usize(1..200), &mut measure)
                    .expect("fold");
                what.push(format!("step {step}: folded {} log rows", folded.rows));
            }
        }
        assert_counts_exact(&store, &format!("seed {seed}, {}", what.join("; ")));
        if what.len() > 4 {
            what.remove(0);
        }
    }
}

#[test]
fn counts_equal_the_tables_after_any_sequence_of_writes() {
    for seed in 1..=4 {
        random_walk(seed, 120);
    }
}

/// A batch that fails half-way (a statement aborts) rolls back its rows
/// and their counts together; the next batch counts from there.
#[test]
fn a_batch_that_fails_half_way_leaves_no_count_behind() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("abort.db");
    let mut store = Writer::open(&path).expect("open");
    let pool = events(0..2, 0.0);
    let ctx = EventContext::default();
    let (first, second) = pool.split_at(pool.len() / 2);
    store.apply_batch(first.iter().map(|e| (e, &ctx))).expect("first half");
    assert_counts_exact(&store, "the first half");
    let before: Vec<i64> = TABLES.iter().map(|t| store.store_count(t).expect("count")).collect();

    // The last LLM call of the second half fails, after the batch wrote
    // journal rows, runs, turns, tool calls and outbox rows before it.
    let failing = second
        .iter()
        .rev()
        .find_map(|e| match &e.hook {
            Hook::PostApiRequest(p) => Some(p.api.api_request_id.clone()),
            _ => None,
        })
        .expect("an LLM call in the second half");
    let raw = rusqlite::Connection::open(&path).expect("raw open");
    raw.execute_batch(&format!(
        "CREATE TRIGGER fail_here BEFORE INSERT ON llm_calls WHEN new.api_request_id = '{failing}'
         BEGIN SELECT RAISE(ABORT, 'injected'); END"
    ))
    .expect("trigger");
    assert!(store.apply_batch(second.iter().map(|e| (e, &ctx))).is_err());
    assert_counts_exact(&store, "the failed batch");
    let after: Vec<i64> = TABLES.iter().map(|t| store.store_count(t).expect("count")).collect();
    assert_eq!(after, before, "nothing of the failed batch was counted");

    raw.execute_batch("DROP TRIGGER fail_here").expect("drop");
    store
        .apply_batch(second.iter().map(|e| (e, &ctx)))
        .expect("second half");
    assert_counts_exact(&store, "the second half, applied again");
    // And once more: only duplicates.
    store.apply_batch(pool.iter().map(|e| (e, &ctx))).expect("again");
    assert_counts_exact(&store, "duplicates");
}

const CHILD: &str = "ROW_COUNTS_CHILD_DIR";

/// The child: applies fresh copies of the stream in large batches, prunes
/// and caps, in a loop, until killed.
fn child(dir: &Path) -> ! {
    let mut store = Writer::open(&dir.join("kill.db")).expect("child open");
    let mut outbox = Outbox::open(store.path()).expect("child outbox");
    let ctx = EventContext::default();
    let seed: usize = std::env::var("ROW_COUNTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let now = hermes_meter_store::unix_now();
    for k in 0.. {
        // Copies spread over ten days, so the prune below deletes some
        // journal rows and the horizon refuses some events.
        let first = 100 + seed * 10_000 + k * 4;
        let pool = events(first..first + 4, 0.0);
        let shift = (k % 10) as f64 * DAY;
        let pool: Vec<HookEvent> = pool
            .into_iter()
            .map(|mut e| {
                e.at -= shift;
                e
            })
            .collect();
        store.apply_batch(pool.iter().map(|e| (e, &ctx))).expect("apply");
        store.prune_journal(now - 6.0 * DAY, 300).expect("prune");
        outbox.outbox_enforce_cap(50, 200).expect("cap");
    }
    unreachable!("the loop ends only when the process is killed")
}

/// Journal rows the children have committed so far (0 before the store
/// exists).
fn journal_rows(dir: &Path) -> i64 {
    let path = dir.join("kill.db");
    if !path.exists() {
        return 0;
    }
    rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| c.query_row("SELECT COUNT(*) FROM journal", [], |r| r.get(0)))
        .unwrap_or(0)
}

fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD).map(PathBuf::from)
}

/// A process killed at a random moment (mid-transaction, mostly) leaves
/// counts equal to the tables: a count moves with its rows or not at all.
#[test]
fn a_process_killed_mid_transaction_leaves_counts_equal_to_the_tables() {
    if let Some(dir) = child_dir() {
        child(&dir);
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut rng = fastrand::Rng::with_seed(7);
    for seed in 0..4u64 {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                &crate::test_name(
                    module_path!(),
                    "a_process_killed_mid_transaction_leaves_counts_equal_to_the_tables",
                ),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, dir.path())
            .env("ROW_COUNTS_SEED", seed.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child");
        // Killed once it is writing (a loaded machine may take seconds to
        // start it), at a random moment after.
        let committed = journal_rows(dir.path());
        let started = std::time::Instant::now();
        while journal_rows(dir.path()) <= committed && started.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(rng.u64(0..1_500)));
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("reap");
        assert!(!status.success(), "the child ended before it was killed");
        let store = Writer::open(&dir.path().join("kill.db")).expect("reopen");
        assert_counts_exact(&store, &format!("kill {seed}"));
    }
    let store = Writer::open(&dir.path().join("kill.db")).expect("reopen");
    assert!(
        store.store_count("journal").expect("journal") > 0,
        "the children committed something"
    );
}
