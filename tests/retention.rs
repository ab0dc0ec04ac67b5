//! Retention: the writer's sweep forgets journal rows, spans
//! nobody accepted and captured content past their retention, in small
//! batches, while the ledger, budget rollups and re-export stay exact; an
//! event that comes back after its key was pruned is refused, not counted
//! twice. Real SQLite in temp dirs, driven by the recorded Hermes stream.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_model::pricing::PriceTable;
use hermes_meter_model::report::Totals;
use hermes_meter_runtime::bridge::{Bridge, BridgeConfig};
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::{pruned, Doctor, Outbox, Writer};

use hermes_meter_test_support::stream;

const DAY: f64 = 86_400.0;
const MOCK_PRICING: &str = "[models.\"mock-model\"]\ninput = 2.0\noutput = 8.0\ncache_read = 0.5\ncache_write = 2.5\n";

/// Copy `copy` of the recorded stream, with fresh ids and every call
/// `days_ago` days before its recording, as a file.
fn stream(dir: &Path, copy: usize, days_ago: f64) -> PathBuf {
    let path = dir.join(format!("copy{copy}.jsonl"));
    let text = stream::session_copy(&stream::fixture_lines(), copy, -days_ago * DAY);
    std::fs::write(&path, text).expect("write stream");
    path
}

fn open(dir: &Path) -> Writer {
    let mut store = Writer::open_dir(dir).expect("open store");
    let mut prices = PriceTable::default();
    prices
        .add_user_prices(MOCK_PRICING, Path::new("pricing.toml"))
        .expect("prices");
    store.set_prices(prices);
    store
}

fn replay(store: &mut Writer, path: &Path, capture: bool) -> ReplayStats {
    let mut stats = ReplayStats::default();
    let opts = DecodeOptions {
        capture_content: capture,
        ..DecodeOptions::default()
    };
    replay_file(store, path, opts, &mut stats).expect("replay");
    stats
}

fn totals(store: &Writer) -> Totals {
    store
        .report(&jiff::tz::TimeZone::UTC, 0.0, 1e12, None)
        .expect("report")
        .totals
}

fn count(store: &Writer, sql: &str) -> i64 {
    store.query_scalar(sql).expect(sql)
}

/// Every budget rollup row, for comparing before and after.
fn budget_rows(store: &Writer) -> String {
    store
        .query_scalar(
            "SELECT COALESCE(group_concat(row, ';'), '') FROM (SELECT scope || '|' || id || '|' || level || '|' || bucket
               || '|' || printf('%.12f', cost_usd) || '|' || calls AS row FROM budget_spend ORDER BY 1)",
        )
        .expect("budget rows")
}

/// Prunes the journal before `before`, then the finished requests before
/// the horizon that moved, as the writer's sweep does (small batches).
/// Returns the journal rows pruned.
fn prune_all(store: &mut Writer, before: f64) -> usize {
    let mut total = 0;
    loop {
        let n = store.prune_journal(before, 50).expect("prune");
        total += n;
        if n == 0 {
            break;
        }
    }
    while store.prune_finished_requests(7).expect("prune requests").1 {}
    total
}

#[test]
fn pruning_the_journal_keeps_reports_budgets_and_re_export_exact() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = open(dir.path());
    let old = replay(&mut store, &stream(dir.path(), 1, 60.0), false);
    let recent = replay(&mut store, &stream(dir.path(), 2, 0.0), false);
    assert!(old.applied > 100 && recent.applied == old.applied);
    let before = totals(&store);
    let budgets = budget_rows(&store);
    let history = store.history(0.0).expect("history").len();
    let runs = count(&store, "SELECT COUNT(*) FROM runs");

    let requests = count(&store, "SELECT COUNT(*) FROM api_requests");
    let unanswered = "SELECT COUNT(*) FROM api_requests a
        WHERE NOT EXISTS (SELECT 1 FROM llm_calls l WHERE l.api_request_id = a.api_request_id)";
    let open_before = count(&store, unanswered);
    let horizon = hermes_meter_store::unix_now() - 28.0 * DAY;
    let old_calls = count(
        &store,
        &format!("SELECT COUNT(*) FROM llm_calls WHERE ended_at < {horizon}"),
    );
    assert!(old_calls > 10 && open_before > 0, "{old_calls} {open_before}");

    let pruned = prune_all(&mut store, horizon);

    assert_eq!(pruned, old.applied, "exactly the old copy's events went");
    // The old copy's answered requests went; the recent copy's and every
    // request that never got an answer stayed.
    assert_eq!(
        count(&store, "SELECT COUNT(*) FROM api_requests") as i64,
        requests - old_calls
    );
    assert_eq!(count(&store, unanswered), open_before);
    assert_eq!(store.store_count(pruned::REQUESTS).expect("count"), old_calls);
    assert_eq!(count(&store, "SELECT COUNT(*) FROM journal") as usize, recent.applied);
    assert_eq!(totals(&store), before, "the report is the same");
    assert_eq!(budget_rows(&store), budgets, "the budget rollups are the same");
    assert_eq!(
        store.history(0.0).expect("history").len(),
        history,
        "export --since re-sends the same spans"
    );
    assert_eq!(count(&store, "SELECT COUNT(*) FROM runs"), runs);
    assert_eq!(store.store_count(pruned::JOURNAL).expect("count") as usize, pruned);
    assert_eq!(store.counts().expect("counts").journal as usize, recent.applied);
}

#[test]
fn an_event_replayed_after_its_key_was_pruned_is_not_counted_twice() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = open(dir.path());
    let old_copy = stream(dir.path(), 1, 60.0);
    let recent_copy = stream(dir.path(), 2, 0.0);
    let old = replay(&mut store, &old_copy, false);
    replay(&mut store, &recent_copy, false);
    let before = totals(&store);
    let budgets = budget_rows(&store);
    prune_all(&mut store, hermes_meter_store::unix_now() - 28.0 * DAY);

    // The old stream comes back (a replayed file, a spool recovered late):
    // its keys are gone, so every event of it is refused and counted.
    let again = replay(&mut store, &old_copy, false);
    assert_eq!((again.applied, again.too_old), (0, old.applied), "{again:?} vs {old:?}");
    assert_eq!(store.store_count(pruned::REFUSED).expect("count") as usize, old.applied);
    // What is within retention is still a duplicate by its key.
    let again = replay(&mut store, &recent_copy, false);
    assert_eq!((again.applied, again.too_old), (0, 0));
    assert_eq!(totals(&store), before, "nothing was counted twice");
    assert_eq!(budget_rows(&store), budgets);

    // A new session after the horizon is recorded as ever.
    let fresh = replay(&mut store, &stream(dir.path(), 3, 0.0), false);
    assert_eq!(fresh.applied, old.applied, "{fresh:?} vs {old:?}");
    // Two copies were counted before, three now.
    let after = totals(&store);
    assert_eq!(2 * after.llm_calls, 3 * before.llm_calls);
    assert_eq!(2 * after.tool_calls, 3 * before.tool_calls);
}

#[test]
fn spans_nobody_accepted_within_retention_leave_the_outbox_and_stay_exportable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = open(dir.path());
    replay(&mut store, &stream(dir.path(), 1, 60.0), false);
    let waiting = store.export_state().expect("state").pending;
    assert!(waiting > 10, "the old copy left spans waiting ({waiting})");
    let history = store.history(0.0).expect("history").len();
    let mut expired = 0;
    loop {
        let n = store
            .expire_outbox(hermes_meter_store::unix_now() - 28.0 * DAY, 7)
            .expect("expire");
        expired += n as i64;
        if n == 0 {
            break;
        }
    }
    assert_eq!(expired, waiting);
    assert_eq!(count(&store, "SELECT COUNT(*) FROM outbox"), 0);
    let state = store.export_state().expect("state");
    assert_eq!(state.pending, 0);
    assert_eq!(store.store_count(pruned::OUTBOX).expect("count"), waiting);
    assert_eq!(store.history(0.0).expect("history").len(), history);
}

#[test]
fn captured_content_is_kept_out_of_the_journal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = open(dir.path());
    replay(&mut store, &stream(dir.path(), 1, 0.0), true);
    assert!(count(&store, "SELECT COUNT(*) FROM span_content") > 0, "capture was on");
    for field in [
        "\"request_messages\":",
        "\"assistant_content\":",
        "\"user_message\":",
        "\"args\":",
        "\"result\":",
        "\"assistant_response\":",
    ] {
        let sql = format!("SELECT COUNT(*) FROM journal WHERE instr(payload, '{field}') > 0");
        assert_eq!(count(&store, &sql), 0, "{field} in a journal payload");
    }
    // The prompts of the fixtures are not anywhere in the journal.
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM journal WHERE instr(payload, 'TERMINAL_OK please') > 0"
        ),
        0
    );
}

/// The counters `status` reads equal the tables after every kind of change.
#[test]
fn the_kept_row_counts_equal_the_tables() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = open(dir.path());
    replay(&mut store, &stream(dir.path(), 1, 60.0), false);
    replay(&mut store, &stream(dir.path(), 2, 0.0), true);
    store
        .close_idle_runs(hermes_meter_store::unix_now(), 3600.0)
        .expect("idle");
    prune_all(&mut store, hermes_meter_store::unix_now() - 28.0 * DAY);
    store
        .expire_outbox(hermes_meter_store::unix_now() - 28.0 * DAY, 10)
        .expect("expire");
    let mut outbox = Outbox::open(store.path()).expect("outbox");
    outbox.outbox_enforce_cap(20, 5).expect("cap");
    let mut measure = |_: &hermes_meter_model::rows::MetricFact, _: &mut Vec<hermes_meter_model::rows::Increment>| {};
    outbox
        .fold_metrics(
            hermes_meter_store::unix_now(),
            hermes_meter_store::unix_now(),
            30,
            &mut measure,
        )
        .expect("fold");
    for table in stream::COUNTED_TABLES {
        assert_eq!(
            store.store_count(table).expect("kept"),
            count(&store, &format!("SELECT COUNT(*) FROM {table}")),
            "{table}"
        );
    }
    assert_eq!(
        store.export_state().expect("state").held,
        count(&store, "SELECT COUNT(*) FROM outbox WHERE hold = 1")
    );
}

/// A Hermes process with trace export off (no exporter in this bridge)
/// and the defaults users run: its writer's sweep prunes the journal past
/// four weeks, folds the metric log, holds the outbox to its cap, builds
/// report rollups and leaves the ledger as it was.
#[test]
fn the_writer_sweep_prunes_folds_and_caps_with_no_exporter() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store_dir = dir.path().join("meter");
    let mut store = open(&store_dir);
    let old = replay(&mut store, &stream(dir.path(), 1, 60.0), false);
    replay(&mut store, &stream(dir.path(), 2, 60.0), false);
    let before = totals(&store);
    assert!(count(&store, "SELECT COUNT(*) FROM metric_log") > 0);
    drop(store);

    let home = store_dir.display().to_string();
    let config = BridgeConfig::from_vars(|name| match name {
        "HERMES_METER_HOME" => Some(home.clone().into()),
        "OTEL_TRACES_EXPORTER" => Some("none".into()),
        "HERMES_METER_OUTBOX_MAX_ROWS" => Some("3".into()),
        _ => None,
    });
    assert_eq!(config.outbox_max_rows, 3);
    let bridge = Bridge::start(config);
    let store = open(&store_dir);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let journal = count(&store, "SELECT COUNT(*) FROM journal");
        let outbox = count(&store, "SELECT COUNT(*) FROM outbox");
        let log = count(&store, "SELECT COUNT(*) FROM metric_log");
        let answered = count(
            &store,
            "SELECT COUNT(*) FROM api_requests a JOIN llm_calls l USING (api_request_id)
              WHERE l.ended_at < (SELECT CAST(value AS REAL) FROM meta WHERE key = 'retention.journal_horizon')",
        );
        // Report rollups reach five minutes ago (within a quarter hour).
        let rolled = store.rolled_until().expect("rollup mark") as f64;
        let rolled_up = rolled >= hermes_meter_store::unix_now() - 300.0 - 900.0;
        // The newest journal row stays (its seq is never reused).
        if journal <= 1 && outbox <= 3 && log == 0 && answered == 0 && rolled_up {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "journal {journal}, outbox {outbox}, metric log {log}, answered requests {answered}, rollups up to {rolled}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    bridge.shutdown(Duration::from_secs(5));
    // Read from the rollups the sweep built now: sums in another order.
    let mut after = totals(&store);
    assert!((after.cost_usd - before.cost_usd).abs() < 1e-9, "{after:?} {before:?}");
    assert!((after.aux_cost_usd - before.aux_cost_usd).abs() < 1e-9);
    (after.cost_usd, after.aux_cost_usd) = (before.cost_usd, before.aux_cost_usd);
    assert_eq!(after, before, "the ledger is untouched");
    assert!(
        count(
            &store,
            "SELECT COUNT(*) FROM report_rollups WHERE level = 0 AND dim = 0"
        ) > 0
    );
    assert!(store.store_count(pruned::JOURNAL).expect("count") as usize >= 2 * old.applied - 1);
    assert!(store.store_count(pruned::REQUESTS).expect("count") > 10);
    assert!(
        count(&store, "SELECT COUNT(*) FROM metric_series") > 0,
        "the log was folded, not dropped"
    );
}

/// A new store gives what retention freed back to the file system, a few
/// pages a step (incremental auto-vacuum).
#[test]
fn a_new_store_gives_freed_pages_back_a_step_at_a_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = open(dir.path());
    assert_eq!(count(&store, "PRAGMA auto_vacuum"), 2, "incremental");
    for copy in 1..=4 {
        replay(&mut store, &stream(dir.path(), copy, 60.0), false);
    }
    prune_all(&mut store, hermes_meter_store::unix_now() - 28.0 * DAY);
    let pages = count(&store, "PRAGMA page_count");
    let free = count(&store, "PRAGMA freelist_count");
    assert!(free > 20, "pruning freed pages ({free})");
    let mut given = 0;
    loop {
        let n = store.vacuum_step(0, 16).expect("vacuum step");
        assert_eq!(n, 16.min(free - given), "a step gives back what it may");
        given += n;
        if n == 0 {
            break;
        }
    }
    assert_eq!(given, free);
    assert_eq!(count(&store, "PRAGMA freelist_count"), 0);
    assert_eq!(count(&store, "PRAGMA page_count"), pages - free);
    let integrity: String = store.query_scalar("PRAGMA integrity_check").expect("check");
    assert_eq!(integrity, "ok");
}

/// A store created before incremental auto-vacuum was the default gets it,
/// and its freed space back, from `hermes-meter compact`.
#[test]
fn compact_gives_an_older_store_its_space_back_and_turns_on_incremental_vacuum() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store_dir = dir.path().join("meter");
    std::fs::create_dir_all(&store_dir).expect("dir");
    {
        // A table first: auto-vacuum can no longer change without a VACUUM.
        let conn = rusqlite::Connection::open(store_dir.join("hermes-meter.db")).expect("raw open");
        conn.execute_batch("CREATE TABLE before_9 (x)").expect("table");
    }
    let mut store = open(&store_dir);
    assert_eq!(count(&store, "PRAGMA auto_vacuum"), 0);
    for copy in 1..=4 {
        replay(&mut store, &stream(dir.path(), copy, 60.0), false);
    }
    let before = totals(&store);
    prune_all(&mut store, hermes_meter_store::unix_now() - 28.0 * DAY);
    assert_eq!(
        store.vacuum_step(0, 16).expect("step"),
        0,
        "nothing to do without the mode"
    );
    drop(store);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .args(["--home", &store_dir.display().to_string(), "compact"])
        .output()
        .expect("run compact");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("compacted"));
    let store = open(&store_dir);
    assert_eq!(count(&store, "PRAGMA auto_vacuum"), 2);
    assert_eq!(count(&store, "PRAGMA freelist_count"), 0);
    assert_eq!(totals(&store), before, "the ledger is whole");
}

/// `doctor --rebuild` after retention: the journal no longer holds the old
/// sessions' events, so their ledger and budget rollups come from the
/// damaged file's tables; reports, budgets and re-export are as before.
#[test]
fn a_rebuild_after_pruning_keeps_the_ledger_the_journal_no_longer_holds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = open(&dir.path().join("old"));
    replay(&mut store, &stream(dir.path(), 1, 60.0), false);
    replay(&mut store, &stream(dir.path(), 2, 0.0), false);
    prune_all(&mut store, hermes_meter_store::unix_now() - 28.0 * DAY);
    // As the rebuild does, so both have closed the same idle runs.
    store
        .close_idle_runs(hermes_meter_store::unix_now(), 3600.0)
        .expect("idle");
    let before = totals(&store);
    let budgets = budget_rows(&store);
    let runs = count(&store, "SELECT COUNT(*) FROM runs");
    let history = store.history(0.0).expect("history").len();
    let damaged = store.path().to_path_buf();
    drop(store);

    let mut rebuilt = open(&dir.path().join("new"));
    let report = Doctor::new(&damaged)
        .rebuild_into(&mut rebuilt, 3600.0, hermes_meter_store::unix_now())
        .expect("rebuild");
    assert!(report.unreadable.is_empty(), "{report:?}");
    assert_eq!(totals(&rebuilt), before);
    assert_eq!(budget_rows(&rebuilt), budgets);
    assert_eq!(count(&rebuilt, "SELECT COUNT(*) FROM runs"), runs);
    assert_eq!(rebuilt.history(0.0).expect("history").len(), history);
    for table in [
        "runs",
        "llm_calls",
        "llm_call_errors",
        "tool_calls",
        "turns",
        "subagent_edges",
        "journal",
        "outbox",
        "metric_log",
    ] {
        assert_eq!(
            rebuilt.store_count(table).expect("kept"),
            count(&rebuilt, &format!("SELECT COUNT(*) FROM {table}")),
            "{table}"
        );
    }
    // The horizon came along: the old stream is still refused.
    let again = replay(&mut rebuilt, &stream(dir.path(), 1, 60.0), false);
    assert_eq!(again.applied, 0);
    assert_eq!(totals(&rebuilt), before);
}

/// `status` says what retention pruned and refused, and from which
/// settings, without counting any table.
#[test]
fn status_counts_what_was_pruned_and_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store_dir = dir.path().join("meter");
    let mut store = open(&store_dir);
    let old_copy = stream(dir.path(), 1, 60.0);
    let old = replay(&mut store, &old_copy, false);
    replay(&mut store, &stream(dir.path(), 2, 0.0), false);
    let pruned = prune_all(&mut store, hermes_meter_store::unix_now() - 28.0 * DAY);
    replay(&mut store, &old_copy, false);
    drop(store);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .args(["--home", &store_dir.display().to_string(), "status", "--json"])
        .env("HERMES_METER_RETENTION_OUTBOX_DAYS", "7")
        .output()
        .expect("run status");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let r = &v["retention"];
    assert_eq!(r["pruned"]["journal"].as_u64(), Some(pruned as u64));
    assert!(r["pruned"]["finished_requests"].as_u64().is_some_and(|n| n > 10), "{r}");
    assert_eq!(r["refused_too_old"].as_u64(), Some(old.applied as u64));
    assert!(r["journal_horizon"].as_f64().is_some());
    let settings = r["settings"].as_array().expect("settings");
    let outbox = settings
        .iter()
        .find(|s| s["name"] == "HERMES_METER_RETENTION_OUTBOX_DAYS")
        .expect("outbox setting");
    assert_eq!(outbox["value"], "7 days");
    assert_eq!(outbox["source"], "env HERMES_METER_RETENTION_OUTBOX_DAYS");
    assert_eq!(v["rows"]["journal"].as_u64(), Some((2 * old.applied - pruned) as u64));
}
