//! `report` from rollups answers exactly what the ledger answers (issue
//! 18): two stores get the same recorded stream, one never rolled up (its
//! reports read the ledger only), the other rolled up wholly or in part,
//! and every report of both agrees, over windows that cut quarter hours
//! and days, in zones with half-hour and quarter-hour offsets and
//! half-hour daylight saving, after late facts. `by_session`, read in one
//! pass, is held to the run totals the ledger keeps for each session, and
//! `report --json`, which streams it, to the report that lists it from
//! one statement a session, byte for byte.

use std::path::Path;

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_model::report::Report;
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;
use jiff::tz::TimeZone;
use serde_json::Value;

use hermes_meter_test_support::stream;

const HOUR: f64 = 3600.0;
const DAY: f64 = 86_400.0;
/// Where the copies begin: 2026-10-01T00:00:00Z.
const T0: f64 = 1_790_812_800.0;

/// Replays copies `copies` of the stream into `store`, copy `c` moved to
/// start `c` × 7 h 7 min after `T0` (so they straddle quarter hours and days).
fn fill(store: &mut Writer, dir: &Path, lines: &[String], copies: std::ops::Range<usize>) {
    let recorded = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["t"].as_f64())
        .fold(f64::MAX, f64::min);
    let path = dir.join("copies.jsonl");
    let mut text = String::new();
    for c in copies {
        text.push_str(&stream::session_copy(
            lines,
            c,
            T0 + c as f64 * (7.0 * HOUR + 420.0) - recorded,
        ));
    }
    std::fs::write(&path, text).expect("write copies");
    let mut stats = ReplayStats::default();
    replay_file(store, &path, DecodeOptions::default(), &mut stats).expect("replay");
    assert!(stats.applied > 0, "{stats:?}");
}

fn roll_up_all(store: &mut Writer, horizon: f64) -> usize {
    let mut buckets = 0;
    loop {
        let step = store.roll_up(horizon).expect("roll up");
        buckets += step.buckets;
        if !step.more {
            return buckets;
        }
    }
}

/// Numbers equal to 1e-9 relative (sums in another order); all else exact.
fn same(a: &Value, b: &Value, at: &str) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            assert!(
                (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0),
                "{at}: {x} != {y}"
            );
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths\n{a:#}\n{b:#}");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                same(x, y, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>(), "{at}");
            for (k, v) in x {
                same(v, &y[k], &format!("{at}.{k}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

fn json(r: &Report) -> Value {
    serde_json::to_value(r).expect("report JSON")
}

/// Windows that start and end off quarter hours, days in three zones,
/// the whole store, and the human form's few sessions.
fn agree(ledger: &Writer, rolled: &Writer, what: &str) {
    // Whole-hour zones, +5:30, +5:45, -3:30 (daylight saving ends in the
    // stretch), and Lord Howe, whose daylight saving (+10:30 to +11) moves
    // it by half an hour on 2026-10-04, inside the stretch.
    let zones = [
        "UTC",
        "Asia/Kolkata",
        "America/New_York",
        "Asia/Kathmandu",
        "America/St_Johns",
        "Australia/Lord_Howe",
    ];
    let windows = [
        (0.0, 253_370_764_800.0),
        (T0 + 3.0 * DAY + 123.4, T0 + 9.0 * DAY + 4567.8),
        (T0 + 2.0 * DAY, T0 + 2.0 * DAY + 900.0),
        (T0 + 11.0 * HOUR + 17.0, T0 + 11.0 * DAY + 19.0 * HOUR),
        (T0 + 5.5 * DAY, 253_370_764_800.0),
        (T0 + 1.0 * DAY + 1800.0, T0 + 6.0 * DAY + 2700.0),
    ];
    for zone in zones {
        let tz = TimeZone::get(zone).expect("zone");
        for (since, until) in windows {
            for top in [None, Some(5)] {
                let a = ledger.report(&tz, since, until, top).expect("ledger report");
                let b = rolled.report(&tz, since, until, top).expect("rolled report");
                same(
                    &json(&a),
                    &json(&b),
                    &format!("{what} {zone} [{since}, {until}) top {top:?}"),
                );
            }
        }
    }
    for (since, until) in windows {
        sessions_agree_with_run_totals(ledger, since, until);
        sessions_agree_with_run_totals(rolled, since, until);
    }
}

/// `by_session` of `[since, until)` lists exactly the runs that started in
/// it, each with the totals the ledger keeps on its run row (which equal
/// the sums of its rows), its auxiliary calls and non-zero exits counted
/// from the rows here; and the human form's few are the first of it.
fn sessions_agree_with_run_totals(store: &Writer, since: f64, until: f64) {
    let all = store.report(&TimeZone::UTC, since, until, None).expect("report");
    let db = rusqlite::Connection::open(store_path(store)).expect("read the store");
    let mut stmt = db
        .prepare(
            "SELECT r.session_id, r.cost_usd, r.input_tokens, r.output_tokens, r.cache_read_tokens,
                    r.cache_write_tokens, r.reasoning_tokens, r.llm_calls, r.estimated_llm_calls,
                    r.unpriced_llm_calls, r.api_errors, r.tool_calls, r.tool_failures,
                    (SELECT COUNT(*) FROM llm_calls l WHERE l.session_id = r.session_id AND l.aux_task IS NOT NULL),
                    (SELECT COALESCE(SUM(cost_usd), 0.0) FROM llm_calls l
                      WHERE l.session_id = r.session_id AND l.aux_task IS NOT NULL),
                    (SELECT COUNT(*) FROM tool_calls t
                      WHERE t.session_id = r.session_id AND t.proxy = 0 AND t.ended_at IS NOT NULL
                        AND COALESCE(t.exit_code, 0) != 0 AND COALESCE(t.status, '') != 'error'
                        AND t.ok IS NOT 0
                        AND COALESCE(t.status, '') NOT IN ('blocked', 'cancelled', 'interrupted', 'timeout', 'timed_out'))
               FROM runs r WHERE r.started_at >= ?1 AND r.started_at < ?2",
        )
        .expect("prepare");
    let mut expected: std::collections::BTreeMap<String, Value> = std::collections::BTreeMap::new();
    let rows = stmt
        .query_map(rusqlite::params![since, until], |r| {
            let id: String = r.get(0)?;
            let totals = serde_json::json!({
                "cost_usd": r.get::<_, f64>(1)?,
                "input_tokens": r.get::<_, i64>(2)?,
                "output_tokens": r.get::<_, i64>(3)?,
                "cache_read_tokens": r.get::<_, i64>(4)?,
                "cache_write_tokens": r.get::<_, i64>(5)?,
                "reasoning_tokens": r.get::<_, i64>(6)?,
                "llm_calls": r.get::<_, i64>(7)?,
                "estimated_llm_calls": r.get::<_, i64>(8)?,
                "unpriced_llm_calls": r.get::<_, i64>(9)?,
                "api_errors": r.get::<_, i64>(10)?,
                "tool_calls": r.get::<_, i64>(11)?,
                "tool_failures": r.get::<_, i64>(12)?,
                "tool_nonzero_exits": r.get::<_, i64>(15)?,
                "aux_llm_calls": r.get::<_, i64>(13)?,
                "aux_cost_usd": r.get::<_, f64>(14)?,
                "sessions": 1,
            });
            Ok((id, totals))
        })
        .expect("query");
    for row in rows {
        let (id, mut totals) = row.expect("row");
        totals["key"] = Value::String(id.clone());
        expected.insert(id, totals);
    }
    let at = format!("by_session [{since}, {until})");
    assert_eq!(all.by_session.len(), expected.len(), "{at}: every session that started");
    let mut listed = 0;
    for group in &all.by_session {
        let key = group.key.clone().expect("a session has an id");
        let want = expected
            .get(&key)
            .unwrap_or_else(|| panic!("{at}: {key} did not start here"));
        let got = serde_json::to_value(group).expect("group JSON");
        // The sum of a run's costs is kept in another order: equal to 1e-9.
        same(&got, want, &format!("{at} {key}"));
        listed += 1;
    }
    assert_eq!(listed, expected.len(), "{at}");
    let costs: Vec<f64> = all.by_session.iter().map(|g| g.totals.cost_usd).collect();
    assert!(costs.windows(2).all(|w| w[0] >= w[1]), "{at}: most expensive first");
    // The human form's few: as costly as the first of all (which of equal
    // costs it names is its own choice), each with the same totals.
    let few = store.report(&TimeZone::UTC, since, until, Some(5)).expect("report");
    let first: Vec<f64> = costs.iter().take(5).copied().collect();
    let few_costs: Vec<f64> = few.by_session.iter().map(|g| g.totals.cost_usd).collect();
    assert_eq!(few_costs, first, "{at}: the few most expensive");
    for group in &few.by_session {
        let same_key = all.by_session.iter().find(|g| g.key == group.key);
        assert_eq!(Some(group), same_key, "{at}: the few as all lists them");
    }
}

/// The file behind `store`.
fn store_path(store: &Writer) -> std::path::PathBuf {
    store.path().to_path_buf()
}

/// A store never rolled up and one rolled up wholly, each given copies
/// 0..12 of the stream (with their directories, which must outlive them).
fn rolled_up_twelve(lines: &[String]) -> (Writer, Writer, tempfile::TempDir, tempfile::TempDir) {
    let (da, db) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let mut ledger = Writer::open_dir(da.path()).expect("store");
    let mut rolled = Writer::open_dir(db.path()).expect("store");
    fill(&mut ledger, da.path(), lines, 0..12);
    fill(&mut rolled, db.path(), lines, 0..12);
    roll_up_all(&mut rolled, T0 + 60.0 * DAY);
    (ledger, rolled, da, db)
}

/// Rollup rows of `level`.
fn rows_of_level(store: &Writer, level: i64) -> i64 {
    store
        .query_scalar(&format!("SELECT COUNT(*) FROM report_rollups WHERE level = {level}"))
        .expect("rows")
}

#[test]
fn reports_from_rollups_equal_reports_from_the_ledger() {
    let lines = stream::fixture_lines();
    let (da, db) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let mut ledger = Writer::open_dir(da.path()).expect("store");
    let mut rolled = Writer::open_dir(db.path()).expect("store");
    fill(&mut ledger, da.path(), &lines, 0..30);
    fill(&mut rolled, db.path(), &lines, 0..30);
    assert_eq!(ledger.rolled_until().expect("mark"), 0, "never rolled up");

    // Half of it rolled up: rollups below the mark, the ledger above.
    let half = T0 + 4.0 * DAY + 1234.0;
    assert!(roll_up_all(&mut rolled, half) > 0);
    let mark = rolled.rolled_until().expect("mark");
    assert_eq!(mark, (half / 900.0).floor() as i64 * 900);
    agree(&ledger, &rolled, "half rolled up");

    // All of it.
    roll_up_all(&mut rolled, T0 + 60.0 * DAY);
    agree(&ledger, &rolled, "rolled up");
    let all = rolled.report(&TimeZone::UTC, 0.0, 1e12, None).expect("report");
    let runs: i64 = rolled.query_scalar("SELECT COUNT(*) FROM runs").expect("runs");
    assert_eq!(all.totals.sessions, runs, "every session counts once, where it started");
    assert_eq!(all.by_session.len() as i64, runs);
    let calls: i64 = rolled.query_scalar("SELECT COUNT(*) FROM llm_calls").expect("calls");
    assert_eq!(all.totals.llm_calls, calls);
    let rows: i64 = rolled
        .query_scalar("SELECT COUNT(*) FROM report_rollups")
        .expect("rows");
    assert!(rows > 0);
    assert!(
        rows_of_level(&rolled, 2) > 0,
        "the whole store by hour, which long reports read"
    );

    // Counts add up: windows that cut the store anywhere sum to the whole,
    // and each (session, model) pair counts once, as SQL counts them.
    let pairs: i64 = rolled
        .query_scalar(
            "SELECT COUNT(*) FROM (SELECT session_id, COALESCE(model, '') FROM llm_calls
              UNION SELECT session_id, COALESCE(model, '') FROM llm_call_errors
              UNION SELECT t.session_id, COALESCE(r.model, '') FROM tool_calls t JOIN runs r USING (session_id)
               WHERE t.proxy = 0 AND t.ended_at IS NOT NULL)",
        )
        .expect("pairs");
    let model_sessions = |r: &Report| r.by_model.iter().map(|g| g.totals.sessions).sum::<i64>();
    assert_eq!(model_sessions(&all), pairs);
    let cuts = [
        0.0,
        T0 + 1.3 * DAY + 77.0,
        T0 + 2.0 * DAY,
        T0 + 4.9 * DAY - 11.0,
        T0 + 7.25 * DAY,
        1e12,
    ];
    let (mut sessions, mut by_model, mut calls_sum, mut cost) = (0, 0, 0, 0.0);
    for w in cuts.windows(2) {
        let r = rolled.report(&TimeZone::UTC, w[0], w[1], Some(3)).expect("window");
        sessions += r.totals.sessions;
        by_model += model_sessions(&r);
        calls_sum += r.totals.llm_calls;
        cost += r.totals.cost_usd;
    }
    assert_eq!((sessions, by_model, calls_sum), (runs, pairs, calls));
    assert!((cost - all.totals.cost_usd).abs() < 1e-9 * cost.max(1.0));

    // Rolling up again with nothing new changes nothing.
    assert_eq!(roll_up_all(&mut rolled, T0 + 60.0 * DAY), 0);
    agree(&ledger, &rolled, "rolled up twice");
}

#[test]
fn a_late_fact_moves_the_mark_back_and_reports_stay_exact() {
    let lines = stream::fixture_lines();
    let (mut ledger, mut rolled, da, db) = rolled_up_twelve(&lines);
    let before = rolled.rolled_until().expect("mark");

    // A spool recovered late: copies whose calls ended days ago land now.
    fill(&mut ledger, da.path(), &lines, 40..42);
    fill(&mut rolled, db.path(), &lines, 40..42);
    let moved = rolled.rolled_until().expect("mark");
    assert!(
        moved < before,
        "the late calls moved the mark back ({moved} >= {before})"
    );
    agree(&ledger, &rolled, "after late facts, before the next roll-up");

    roll_up_all(&mut rolled, T0 + 60.0 * DAY);
    assert_eq!(rolled.rolled_until().expect("mark"), before);
    agree(&ledger, &rolled, "rolled up again");
}

/// A long report reads the whole store's hour rows: without them it
/// comes out short, so they are what keeps it exact and fast.
#[test]
fn a_long_report_reads_the_hour_rollups() {
    let lines = stream::fixture_lines();
    let (ledger, rolled, _da, _db) = rolled_up_twelve(&lines);
    assert!(rows_of_level(&rolled, 2) > 0);
    let path = store_path(&rolled);
    drop(rolled);
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.execute("DELETE FROM report_rollups WHERE level = 2", [])
        .expect("delete hours");
    drop(conn);
    let short = Writer::open(&path).expect("store");
    let whole = ledger.report(&TimeZone::UTC, 0.0, 1e12, None).expect("report");
    let without = short.report(&TimeZone::UTC, 0.0, 1e12, None).expect("report");
    assert!(
        without.totals.llm_calls < whole.totals.llm_calls,
        "hour rows are what a long report reads"
    );
}

/// `report --json` writes its session list as the store reads it, a
/// session at a time, and what it prints is, byte for byte, the report
/// that lists every session with the per-session statement's sums sorted
/// in memory (how `by_session` was made before it was streamed): the same
/// fields, order and values, ties among the copies' equal costs included.
#[test]
fn report_json_streams_the_report_that_lists_every_session() {
    /// The CLI's end of an open window (9999-01-01T00:00:00Z).
    const END_OF_TIME: f64 = 253_370_764_800.0;
    let lines = stream::fixture_lines();
    let (ledger, rolled, da, db) = rolled_up_twelve(&lines);
    // Whole seconds, so the CLI reads back the same bounds.
    let stamp = |t: f64| jiff::Timestamp::from_second(t as i64).expect("time").to_string();
    let windows = [
        (None, None),
        (Some(T0 + 3.0 * DAY + 123.0), Some(T0 + 9.0 * DAY + 4567.0)),
        (Some(T0 + 11.0 * HOUR + 17.0), None),
        (Some(T0 + 2.0 * DAY), Some(T0 + 2.0 * DAY + 900.0)),
    ];
    let mut listed_sessions = 0;
    for (store, dir) in [(&ledger, da.path()), (&rolled, db.path())] {
        for zone in ["UTC", "Asia/Kathmandu", "Australia/Lord_Howe"] {
            let tz = TimeZone::get(zone).expect("zone");
            for (since, until) in windows {
                let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-meter"));
                cmd.arg("--home").arg(dir).args(["report", "--json", "--tz", zone]);
                if let Some(t) = since {
                    cmd.args(["--since", &stamp(t)]);
                }
                if let Some(t) = until {
                    cmd.args(["--until", &stamp(t)]);
                }
                let out = cmd.output().expect("run hermes-meter report");
                assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
                let printed = String::from_utf8(out.stdout).expect("UTF-8");
                let listed = store
                    .report(
                        &tz,
                        since.unwrap_or(0.0),
                        until.unwrap_or(END_OF_TIME),
                        Some(usize::MAX),
                    )
                    .expect("report");
                listed_sessions += listed.by_session.len();
                let want = serde_json::to_string_pretty(&listed).expect("JSON") + "\n";
                let at = format!("{zone} {since:?}..{until:?}");
                let differs = printed.lines().zip(want.lines()).position(|(a, b)| a != b);
                if let Some(line) = differs {
                    panic!(
                        "{at}: line {} differs: {:?} != {:?}",
                        line + 1,
                        printed.lines().nth(line),
                        want.lines().nth(line)
                    );
                }
                assert_eq!(printed, want, "{at}: lengths differ");
            }
        }
    }
    assert!(listed_sessions > 100, "the windows list sessions ({listed_sessions})");
}
