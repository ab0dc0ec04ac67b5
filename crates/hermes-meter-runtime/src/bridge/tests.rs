//! The bridge's tests: hooks, the writer, gates and the exporter slot
//! driven through the public surface against temp-dir stores.

use super::host_price::MAX_HOST_ASKED;
use super::*;
use hermes_meter_model::hook::{decode, Decoded, Hook};
use hermes_meter_model::pricing::ModelPrice;
use hermes_meter_store::{Reader, Writer};
use serde_json::{json, Value};
use std::sync::atomic::AtomicBool;

fn event(hook: &str, kwargs: Value) -> HookEvent {
    let map = kwargs.as_object().expect("kwargs object").clone();
    match decode(hook, &map, unix_now(), DecodeOptions::default()) {
        Decoded::Event(e, _) => e,
        other => panic!("{hook}: {other:?}"),
    }
}

fn llm_call(session: &str, n: usize, model: &str) -> HookEvent {
    event(
        "post_api_request",
        json!({
            "session_id": session, "turn_id": format!("{session}:t"),
            "api_request_id": format!("{session}:t:api:{n}"), "model": model,
            "api_duration": 0.01,
            "usage": {"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 0,
                      "cache_write_tokens": 0, "reasoning_tokens": 0},
        }),
    )
}

fn config(dir: &std::path::Path) -> BridgeConfig {
    BridgeConfig::new(dir.join("meter"))
}

fn reader(dir: &std::path::Path) -> Reader {
    Reader::open(&dir.join("meter").join(hermes_meter_store::DB_FILE_NAME)).expect("reader opens the store")
}

fn scalar<T: rusqlite::types::FromSql>(store: &Reader, sql: &str) -> T {
    store.query_scalar(sql).expect(sql)
}

/// Holds SQLite's write lock on the store from another connection
/// until dropped, as another process in a write would.
struct WriteLock(rusqlite::Connection);

impl WriteLock {
    fn take(dir: &std::path::Path) -> Self {
        let conn = rusqlite::Connection::open(dir.join("meter").join(hermes_meter_store::DB_FILE_NAME)).expect("open");
        conn.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
        WriteLock(conn)
    }
}

impl Drop for WriteLock {
    fn drop(&mut self) {
        let _ = self.0.execute_batch("ROLLBACK");
    }
}

/// A long-lived gateway meeting ever new model names keeps a bounded
/// map of the models it asked Hermes about.
#[test]
fn the_models_asked_about_stay_bounded() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start(config(dir.path()));
    for i in 0..3 * MAX_HOST_ASKED {
        assert!(bridge.needs_host_price(&format!("unknown-model-{i}")));
    }
    let State::Running(run) = &bridge.state else {
        panic!("the bridge runs");
    };
    let kept = lock(&run.host_asked).len();
    assert!(kept > 0 && kept <= MAX_HOST_ASKED, "{kept}");
}

#[test]
fn a_submitted_event_is_committed_when_submit_returns() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start(config(dir.path()));
    assert_eq!(bridge.disabled_reason(), None);
    let outcome = bridge.submit(llm_call("s1", 1, "gpt-4o"), EventContext::default());
    assert_eq!(outcome, Outcome::Committed(None));
    let store = reader(dir.path());
    assert_eq!(
        scalar::<i64>(&store, "SELECT llm_calls FROM runs WHERE session_id = 's1'"),
        1
    );
}

/// Submits `kwargs` the way the binding does while no gate waits: as
/// its spool record, for the writer to decode.
fn undecoded(bridge: &Bridge, hook: &'static str, kwargs: Value) -> Outcome {
    let kwargs = kwargs.as_object().expect("kwargs object").clone();
    let at = unix_now();
    let line = hermes_meter_model::hook::write_record(hook, at, Some(1), Some("t"), &kwargs, false);
    let ctx = EventContext {
        pid: Some(1),
        thread: Some("t".into()),
        profile: None,
        problems: Vec::new(),
    };
    bridge.submit_line(hook, line, at, ctx)
}

#[test]
fn a_calls_profile_comes_from_its_record_else_the_bridges() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = config(dir.path());
    config.profile = Some("first".into());
    let bridge = Bridge::start(config);
    for (session, profile) in [("s-work", Some("work")), ("s-old", None)] {
        let kwargs = json!({"session_id": session, "turn_id": format!("{session}:t"), "model": "m"});
        let origin = hermes_meter_model::hook::Origin {
            profile,
            ..hermes_meter_model::hook::Origin::default()
        };
        let mut w = hermes_meter_model::hook::RecordWriter::begin("pre_llm_call", unix_now(), origin, false);
        for (key, value) in kwargs.as_object().expect("kwargs object") {
            w.kwarg(key, value);
        }
        // Whatever the caller's context says, the record decides: it is
        // what recovery and replay read.
        let ctx = EventContext {
            profile: Some("not-this".into()),
            ..EventContext::default()
        };
        bridge.submit_line("pre_llm_call", w.finish(), unix_now(), ctx);
    }
    assert!(bridge.flush(Duration::from_secs(5)));
    let store = reader(dir.path());
    let profiles: String = scalar(
        &store,
        "SELECT group_concat(session_id || '=' || profile, ' ') FROM (SELECT * FROM runs ORDER BY session_id)",
    );
    assert_eq!(profiles, "s-old=first s-work=work");
}

#[test]
fn a_call_decoded_on_the_writer_lands_as_a_decoded_one_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start(config(dir.path()));
    assert!(
        bridge.decodes_later("post_api_request"),
        "no gate wants anything: the writer decodes"
    );
    let kwargs = json!({
        "session_id": "s1", "turn_id": "s1:t", "api_request_id": "s1:t:api:1",
        "model": "gpt-4o", "api_duration": 0.01,
        "usage": {"input_tokens": 1000, "output_tokens": 100, "cache_read_tokens": 0,
                  "cache_write_tokens": 0, "reasoning_tokens": 0},
    });
    assert_eq!(undecoded(&bridge, "post_api_request", kwargs.clone()), Outcome::Queued);
    // The same call again, decoded on this thread, is a duplicate.
    let mut again = kwargs;
    again["api_request_id"] = json!("s1:t:api:2");
    assert_eq!(
        bridge.submit(event("post_api_request", again), EventContext::default()),
        Outcome::Committed(None)
    );
    assert!(bridge.flush(Duration::from_secs(5)));
    let store = reader(dir.path());
    let (calls, cost): (i64, f64) = (
        scalar(&store, "SELECT llm_calls FROM runs WHERE session_id = 's1'"),
        scalar(&store, "SELECT cost_usd FROM runs WHERE session_id = 's1'"),
    );
    assert_eq!(calls, 2);
    // gpt-4o: $2.50 in, $10 out per million; both calls cost the same.
    assert!(
        (cost - 2.0 * (1000.0 * 2.5 + 100.0 * 10.0) / 1e6).abs() < 1e-12,
        "{cost}"
    );
    let thread: String = scalar(
        &store,
        "SELECT thread FROM journal WHERE hook = 'post_api_request' ORDER BY seq LIMIT 1",
    );
    assert_eq!(thread, "t");
}

#[test]
fn only_the_hooks_said_to_carry_spend_have_a_bound_above_zero() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let prices = PriceTable::default();
    let mut checked = 0;
    for file in std::fs::read_dir(dir).expect("fixtures") {
        let path = file.expect("entry").path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        for line in std::fs::read_to_string(&path).expect("read").lines() {
            let Ok(Some(rec)) = hermes_meter_model::hook::parse_line(line, false) else {
                continue;
            };
            let Decoded::Event(e, _) = decode(&rec.hook, &rec.kwargs, 1.0, DecodeOptions::default()) else {
                continue;
            };
            if !carries_spend(e.hook.name()) {
                assert_eq!(spend_bound(&e, &prices, |_| true), Some(0.0), "{}", e.hook.name());
                checked += 1;
            }
        }
    }
    assert!(checked > 100, "{checked}");
}

#[test]
fn a_call_the_writer_cannot_decode_is_counted_and_logged() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start(config(dir.path()));
    // No session id: nothing to key the event by.
    undecoded(&bridge, "post_api_request", json!({"model": "gpt-4o"}));
    assert!(bridge.flush(Duration::from_secs(5)));
    let stats = bridge.stats();
    assert_eq!((stats.committed, stats.failed), (0, 1));
    let messages = bridge.take_messages();
    assert!(
        messages
            .iter()
            .any(|m| m.event == "Decode.Unusable" && m.text.starts_with("post_api_request call not recorded")),
        "{messages:?}"
    );
    // It was handled: a clean stop leaves no spool to replay.
    let State::Running(run) = &bridge.state else {
        panic!("disabled")
    };
    let spool = run.shared.spool.get().expect("spool").path().to_path_buf();
    drop(bridge);
    assert!(!spool.exists(), "{} left behind", spool.display());
}

#[test]
fn an_event_no_one_waits_for_commits_without_waking_the_writer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start(config(dir.path()));
    let kwargs = json!({"session_id": "quiet", "model": "gpt-4o", "platform": "cli"});
    assert_eq!(undecoded(&bridge, "on_session_start", kwargs), Outcome::Queued);
    // No flush, no waiter: the writer's own tick must take it.
    let deadline = Instant::now() + 10 * GATE_REFRESH;
    while bridge.stats().committed < 1 {
        assert!(
            Instant::now() < deadline,
            "not committed within {:?}",
            10 * GATE_REFRESH
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        scalar::<i64>(
            &reader(dir.path()),
            "SELECT count(*) FROM runs WHERE session_id = 'quiet'"
        ),
        1
    );
}

#[test]
fn events_queued_while_the_writer_is_busy_commit_in_one_transaction() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = config(dir.path());
    cfg.hook_wait = Duration::ZERO;
    let bridge = Bridge::start(cfg);
    // The first event keeps the writer waiting on the lock while the
    // rest queue up behind it.
    let lock = WriteLock::take(dir.path());
    assert_eq!(
        bridge.submit(llm_call("g", 0, "gpt-4o"), EventContext::default()),
        Outcome::Queued
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while bridge.stats().batches == 0 && Instant::now() < deadline {
        std::thread::yield_now();
    }
    for n in 1..=50 {
        bridge.submit(llm_call("g", n, "gpt-4o"), EventContext::default());
    }
    drop(lock);
    assert!(bridge.flush(Duration::from_secs(10)), "flush in time");
    let stats = bridge.stats();
    assert_eq!(stats.committed, 51);
    assert_eq!(stats.batches, 2, "{stats:?}");
    assert_eq!(stats.largest_batch, 50);
    let store = reader(dir.path());
    assert_eq!(
        scalar::<i64>(&store, "SELECT llm_calls FROM runs WHERE session_id = 'g'"),
        51
    );
}

#[test]
fn a_hook_waits_no_longer_than_the_bound_and_its_write_lands_later() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = config(dir.path());
    cfg.hook_wait = Duration::from_millis(20);
    let bridge = Bridge::start(cfg);
    let lock = WriteLock::take(dir.path());
    let started = Instant::now();
    let outcome = bridge.submit(llm_call("w", 1, "gpt-4o"), EventContext::default());
    let waited = started.elapsed();
    assert_eq!(outcome, Outcome::TimedOut);
    assert!(waited >= Duration::from_millis(20), "{waited:?}");
    assert!(waited < Duration::from_millis(1000), "{waited:?}");
    assert_eq!(bridge.stats().timed_out, 1);
    drop(lock);
    assert!(bridge.flush(Duration::from_secs(10)));
    let store = reader(dir.path());
    assert_eq!(
        scalar::<i64>(&store, "SELECT llm_calls FROM runs WHERE session_id = 'w'"),
        1
    );
}

/// Counts the verdicts it was asked for.
struct CountingGate(Arc<AtomicU64>);

impl Gate for CountingGate {
    fn verdict(&mut self, _store: &Writer, _event: &HookEvent) -> Option<Verdict> {
        self.0.fetch_add(1, Ordering::SeqCst);
        None
    }
}

#[test]
fn a_gating_hook_that_gave_up_gets_no_verdict_later() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = config(dir.path());
    cfg.hook_wait = Duration::from_millis(20);
    let asked = Arc::new(AtomicU64::new(0));
    let bridge = Bridge::start_with_gate(cfg, Box::new(CountingGate(Arc::clone(&asked))));
    let gating = |turn: &str| event("pre_llm_call", json!({"session_id": "g", "turn_id": turn}));
    assert!(matches!(
        bridge.submit(gating("g:0"), EventContext::default()),
        Outcome::Committed(None)
    ));
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    let lock = WriteLock::take(dir.path());
    assert_eq!(bridge.submit(gating("g:1"), EventContext::default()), Outcome::TimedOut);
    drop(lock);
    assert!(bridge.flush(Duration::from_secs(30)));
    let store = reader(dir.path());
    assert_eq!(
        scalar::<i64>(&store, "SELECT COUNT(*) FROM journal WHERE session_id = 'g'"),
        2,
        "the event itself lands"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 1, "no verdict for the hook that gave up");
}

#[test]
fn a_store_that_cannot_be_opened_is_retried_and_hooks_do_not_wait_meanwhile() {
    let dir = tempfile::tempdir().expect("temp dir");
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"x").expect("write");
    let mut cfg = BridgeConfig::new(not_a_dir.join("meter"));
    cfg.store_retry_min = Duration::from_millis(10);
    cfg.store_retry_max = Duration::from_millis(20);
    let bridge = Bridge::start(cfg);
    assert_eq!(bridge.disabled_reason(), None, "store trouble does not disable");
    let problem = bridge.store_problem().expect("a store problem");
    assert!(problem.contains(&not_a_dir.display().to_string()), "{problem}");
    let started = Instant::now();
    assert_eq!(
        bridge.submit(llm_call("d", 1, "gpt-4o"), EventContext::default()),
        Outcome::Queued
    );
    assert!(!bridge.flush(Duration::from_secs(5)), "nothing can commit");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    // The store comes back: the kept event lands, without a new submit.
    std::fs::remove_file(&not_a_dir).expect("clear the fault");
    let deadline = Instant::now() + Duration::from_secs(10);
    while bridge.store_problem().is_some() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(bridge.store_problem(), None);
    assert!(bridge.flush(Duration::from_secs(5)));
    let store = Writer::open_dir(&not_a_dir.join("meter")).expect("open");
    assert_eq!(
        scalar::<i64>(&store, "SELECT llm_calls FROM runs WHERE session_id = 'd'"),
        1
    );
    let messages = bridge.take_messages();
    let events: Vec<&str> = messages.iter().map(|m| m.event).collect();
    assert_eq!(events.iter().filter(|e| **e == "Store.Fault").count(), 1, "{events:?}");
    assert!(events.contains(&"Store.Recovered"), "{events:?}");
}

#[test]
fn many_threads_submitting_at_once_give_exact_totals() {
    const THREADS: usize = 8;
    const EACH: usize = 250;
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start(config(dir.path()));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let bridge = &bridge;
            s.spawn(move || {
                let session = format!("c{}", t % 3);
                for n in 0..EACH {
                    let outcome = bridge.submit(llm_call(&session, t * EACH + n, "gpt-4o"), EventContext::default());
                    assert!(
                        matches!(outcome, Outcome::Committed(None) | Outcome::TimedOut),
                        "{outcome:?}"
                    );
                }
            });
        }
    });
    assert!(bridge.flush(Duration::from_secs(10)));
    let stats = bridge.stats();
    assert_eq!(stats.committed, (THREADS * EACH) as u64);
    assert!(stats.batches < stats.committed, "group commit happened: {stats:?}");
    let store = reader(dir.path());
    let total = (THREADS * EACH) as i64;
    assert_eq!(scalar::<i64>(&store, "SELECT SUM(llm_calls) FROM runs"), total);
    assert_eq!(scalar::<i64>(&store, "SELECT SUM(input_tokens) FROM runs"), total * 100);
    assert_eq!(scalar::<i64>(&store, "SELECT COUNT(*) FROM llm_calls"), total);
    let cost: f64 = scalar(&store, "SELECT SUM(cost_usd) FROM runs");
    let expected = total as f64 * (100.0 * 2.5 + 10.0 * 10.0) / 1e6;
    assert!((cost - expected).abs() < 1e-9, "{cost} vs {expected}");
}

struct BlockTools;

impl Gate for BlockTools {
    fn verdict(&mut self, store: &Writer, event: &HookEvent) -> Option<Verdict> {
        let Hook::PreToolCall(e) = &event.hook else { return None };
        // The gate sees the store including the event itself.
        let n: i64 = store.query_scalar("SELECT COUNT(*) FROM journal").ok()?;
        Some(Verdict::Block {
            message: format!("{} blocked after {n} events", e.tool.tool_name),
        })
    }
}

#[test]
fn a_gate_gives_verdicts_for_gating_hooks_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start_with_gate(config(dir.path()), Box::new(BlockTools));
    let pre = event(
        "pre_tool_call",
        json!({"session_id": "v", "tool_call_id": "c1", "tool_name": "terminal"}),
    );
    let outcome = bridge.submit(pre, EventContext::default());
    assert_eq!(
        outcome.verdict(),
        Some(&Verdict::Block {
            message: "terminal blocked after 1 events".into()
        })
    );
    let outcome = bridge.submit(llm_call("v", 1, "gpt-4o"), EventContext::default());
    assert_eq!(outcome, Outcome::Committed(None));
}

struct PanickingGate;

impl Gate for PanickingGate {
    fn verdict(&mut self, _store: &Writer, _event: &HookEvent) -> Option<Verdict> {
        panic!("gate panicked on purpose")
    }
}

#[test]
fn a_panic_on_the_writer_fails_the_batch_and_the_writer_goes_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cfg = config(dir.path());
    // Printing the panic's backtrace can take longer than the default bound.
    cfg.hook_wait = Duration::from_secs(30);
    let bridge = Bridge::start_with_gate(cfg, Box::new(PanickingGate));
    let pre = event("pre_llm_call", json!({"session_id": "p", "turn_id": "p:t"}));
    assert_eq!(bridge.submit(pre, EventContext::default()), Outcome::Failed);
    assert!(bridge.has_messages());
    let messages = bridge.take_messages();
    assert_eq!(messages[0].event, "Writer.Panicked");
    assert!(messages[0].text.contains("gate panicked on purpose"), "{messages:?}");
    assert!(!bridge.has_messages());
    assert_eq!(
        bridge.submit(llm_call("p", 1, "gpt-4o"), EventContext::default()),
        Outcome::Committed(None)
    );
}

#[test]
fn a_host_price_costs_models_no_table_knows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start(config(dir.path()));
    assert!(!bridge.needs_host_price("gpt-4o"), "the built-in table knows it");
    assert!(bridge.needs_host_price("mock-model"));
    assert!(!bridge.needs_host_price("mock-model"), "asked once per retry interval");
    bridge.set_host_price(
        "mock-model",
        ModelPrice {
            cache_read: Some(0.5),
            cache_write: Some(2.5),
            ..ModelPrice::flat(2.0, 8.0)
        },
    );
    assert!(!bridge.needs_host_price("mock-model"));
    assert_eq!(
        bridge.submit(llm_call("h", 1, "mock-model"), EventContext::default()),
        Outcome::Committed(None)
    );
    let store = reader(dir.path());
    let source: String = scalar(&store, "SELECT cost_source FROM llm_calls");
    let cost: f64 = scalar(&store, "SELECT cost_usd FROM llm_calls");
    assert_eq!(source, "host");
    assert!((cost - (100.0 * 2.0 + 10.0 * 8.0) / 1e6).abs() < 1e-12, "{cost}");
}

struct Flag(Arc<AtomicBool>);

impl Background for Flag {
    fn shutdown(&mut self, _deadline: Instant) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn the_exporter_starts_once_and_stops_with_the_bridge() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bridge = Bridge::start(config(dir.path()));
    let stopped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stopped);
    bridge.set_exporter_factory(Box::new(move |_cfg| Ok(Box::new(Flag(flag)) as Box<dyn Background>)));
    assert!(bridge.start_exporter());
    assert!(!bridge.start_exporter(), "started only once");
    bridge.shutdown(Duration::from_secs(5));
    assert!(stopped.load(Ordering::SeqCst));
    assert_eq!(
        bridge.submit(llm_call("x", 1, "gpt-4o"), EventContext::default()),
        Outcome::Disabled
    );
}

/// Every start of a Hermes process recovers the spools of ended ones; one
/// that held nothing is removed without a message (Hermes logs ours as
/// warnings), while one that held an event still says so.
#[test]
fn an_empty_spool_of_an_ended_process_is_removed_without_a_message() {
    let dir = tempfile::tempdir().expect("temp dir");
    let spool_dir = dir.path().join("meter").join(crate::spool::SPOOL_DIR_NAME);
    std::fs::create_dir_all(&spool_dir).expect("spool dir");
    let empty = spool_dir.join("ended-empty.jsonl");
    std::fs::write(&empty, b"").expect("empty spool");
    let bridge = Bridge::start(config(dir.path()));
    assert_eq!(
        bridge.submit(llm_call("s1", 1, "gpt-4o"), EventContext::default()),
        Outcome::Committed(None)
    );
    assert!(!empty.exists(), "the empty spool was removed");
    let messages = bridge.take_messages();
    assert!(!messages.iter().any(|m| m.event.starts_with("Spool.")), "{messages:?}");
    drop(bridge);

    // A spool that held an event is news.
    let line = hermes_meter_model::hook::write_record(
        "on_session_start",
        1.0,
        Some(7),
        Some("MainThread"),
        json!({"session_id": "s2", "platform": "cli"})
            .as_object()
            .expect("kwargs"),
        false,
    );
    std::fs::write(spool_dir.join("ended-full.jsonl"), line).expect("full spool");
    let bridge = Bridge::start(config(dir.path()));
    assert_eq!(
        bridge.submit(llm_call("s3", 1, "gpt-4o"), EventContext::default()),
        Outcome::Committed(None)
    );
    let messages = bridge.take_messages();
    assert!(messages.iter().any(|m| m.event == "Spool.Recovered"), "{messages:?}");
}
