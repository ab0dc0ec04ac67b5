//! `report` from rollups answers exactly what the ledger answers (issue
//! 18): two stores get the same recorded stream, one never rolled up (its
//! reports read the ledger only), the other rolled up wholly or in part,
//! and every report of both agrees, over windows that cut quarter hours
//! and days, in zones with half-hour offsets, after late facts.

use std::path::Path;

use hermes_otel::hook::DecodeOptions;
use hermes_otel::replay::{replay_file, ReplayStats};
use hermes_otel::report::Report;
use hermes_otel::store::Store;
use jiff::tz::TimeZone;
use serde_json::Value;

#[path = "support/stream.rs"]
mod stream;

const HOUR: f64 = 3600.0;
const DAY: f64 = 86_400.0;
/// Where the copies begin: 2026-10-01T00:00:00Z.
const T0: f64 = 1_790_812_800.0;

/// Replays copies `copies` of the stream into `store`, copy `c` moved to
/// start `c` × 7 h 7 min after `T0` (so they straddle quarter hours and days).
fn fill(store: &mut Store, dir: &Path, lines: &[String], copies: std::ops::Range<usize>) {
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

fn roll_up_all(store: &mut Store, horizon: f64) -> usize {
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
fn agree(ledger: &Store, rolled: &Store, what: &str) {
    let zones = ["UTC", "Asia/Kolkata", "America/New_York", "Asia/Kathmandu"];
    let windows = [
        (0.0, 253_370_764_800.0),
        (T0 + 3.0 * DAY + 123.4, T0 + 9.0 * DAY + 4567.8),
        (T0 + 2.0 * DAY, T0 + 2.0 * DAY + 900.0),
        (T0 + 11.0 * HOUR + 17.0, T0 + 11.0 * DAY + 19.0 * HOUR),
        (T0 + 5.5 * DAY, 253_370_764_800.0),
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
}

#[test]
fn reports_from_rollups_equal_reports_from_the_ledger() {
    let lines = stream::fixture_lines();
    let (da, db) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let mut ledger = Store::open_dir(da.path()).expect("store");
    let mut rolled = Store::open_dir(db.path()).expect("store");
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
    let (da, db) = (tempfile::tempdir().expect("dir"), tempfile::tempdir().expect("dir"));
    let mut ledger = Store::open_dir(da.path()).expect("store");
    let mut rolled = Store::open_dir(db.path()).expect("store");
    fill(&mut ledger, da.path(), &lines, 0..12);
    fill(&mut rolled, db.path(), &lines, 0..12);
    roll_up_all(&mut rolled, T0 + 60.0 * DAY);
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
