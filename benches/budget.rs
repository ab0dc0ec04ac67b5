//! Budget gate benchmark: how long the gating hooks take to decide, with a
//! small and a large ledger.
//!
//! Run: `cargo bench --bench budget` (`-- --rows N` for one size only,
//! `-- --iters N` for more samples, `-- --no-apply` to time verdicts only).
//!
//! For each size the store gets N `llm_calls` rows (and their runs and
//! spend rollups, as the ledger would have written them) spread over 60
//! days, 50 cron jobs, 200 senders and 10 models, then a budget file with
//! global, per-cron-job, per-sender, per-profile and per-model limits in
//! all three windows (12 budgets apply to the measured cron session, in
//! Asia/Kathmandu, a +05:45 zone). It times `Gate::verdict` (what the
//! bridge's writer runs right after committing a gating hook's event) for
//! `pre_tool_call`, `pre_llm_call` and `pre_api_request`, and the apply of
//! a `post_api_request` with its rollup writes. Targets: p99 ≤
//! 100 µs at 1,000,000 rows and within 2× of the p99 at 1,000 rows.

use std::time::Instant;

use hermes_meter_model::hook::{decode, DecodeOptions, Decoded, HookEvent};
use hermes_meter_runtime::bridge::Gate;
use hermes_meter_runtime::budget::BudgetGate;
use hermes_meter_store::{EventContext, Writer};
use serde_json::{json, Value};

const DAY: f64 = 86_400.0;

fn event(hook: &str, at: f64, kwargs: Value) -> HookEvent {
    let map = kwargs.as_object().expect("kwargs").clone();
    match decode(hook, &map, at, DecodeOptions::default()) {
        Decoded::Event(e, _) => e,
        other => panic!("{hook}: {other:?}"),
    }
}

/// Fills the store with `rows` LLM calls, their runs and rollups, directly
/// in SQL (applying a million events one by one would take minutes).
fn fill(path: &std::path::Path, rows: usize, now: f64) {
    let conn = rusqlite::Connection::open(path).expect("open");
    conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = OFF; BEGIN")
        .expect("begin");
    let sessions = (rows / 20).max(1);
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
         INSERT INTO runs (session_id, platform, cron_job_id, model, sender_id, profile, root_session_id, started_at, last_event_at, status)
         SELECT 'cron_' || printf('%012d', i % 50) || '_s' || i, 'cron', printf('%012d', i % 50), 'model-' || (i % 10),
                'sender-' || (i % 200), 'default', 'cron_' || printf('%012d', i % 50) || '_s' || i,
                ?2 - 60 * ?3 + i * (60 * ?3 / ?1), ?2 - 60 * ?3 + i * (60 * ?3 / ?1), 'ok' FROM n",
        rusqlite::params![sessions as i64, now, DAY],
    )
    .expect("runs");
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
         INSERT INTO llm_calls (api_request_id, session_id, model, started_at, ended_at, input_tokens, output_tokens,
            cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, cost_source, estimated)
         SELECT 'req-' || i, 'cron_' || printf('%012d', (i % ?4) % 50) || '_s' || (i % ?4), 'model-' || ((i % ?4) % 10),
                ?2 - 60 * ?3 + i * (60 * ?3 / ?1), ?2 - 60 * ?3 + i * (60 * ?3 / ?1) + 1, 1000, 100, 0, 0, 0,
                0.00001, 'builtin', i % 7 = 0 FROM n",
        rusqlite::params![rows as i64, now, DAY, sessions as i64],
    )
    .expect("llm_calls");
    // The rollups the ledger writes per call, for all of them at once.
    conn.execute_batch(
        "INSERT INTO budget_spend (scope, id, level, bucket, cost_usd, estimated_usd, calls)
         SELECT scope, id, level, bucket, SUM(cost), SUM(est), COUNT(*) FROM (
           SELECT k.scope AS scope,
                  CASE k.scope WHEN 'global' THEN '' WHEN 'cron' THEN r.cron_job_id WHEN 'sender' THEN r.sender_id
                    WHEN 'profile' THEN r.profile ELSE l.model END AS id,
                  w.level AS level, (CAST(l.ended_at AS INTEGER) / w.width) * w.width AS bucket,
                  l.cost_usd AS cost, CASE WHEN l.estimated THEN l.cost_usd ELSE 0 END AS est
           FROM llm_calls l JOIN runs r ON r.session_id = l.session_id
           CROSS JOIN (SELECT 0 AS level, 900 AS width UNION ALL SELECT 1, 3600 UNION ALL SELECT 2, 86400) w
           CROSS JOIN (SELECT 'global' AS scope UNION ALL SELECT 'cron' UNION ALL SELECT 'sender'
                       UNION ALL SELECT 'profile' UNION ALL SELECT 'model') k
         ) GROUP BY scope, id, level, bucket;
         COMMIT; PRAGMA wal_checkpoint(TRUNCATE);",
    )
    .expect("rollups");
}

const BUDGETS: &str = r#"
timezone = "Asia/Kathmandu"
[global]
daily = 100000
weekly = 500000
monthly = 1000000
[per_cron_job.default]
daily = 10000
weekly = 50000
monthly = 100000
[per_sender.default]
daily = 10000
weekly = 50000
[per_profile.default]
monthly = 1000000
[per_model.default]
daily = 10000
weekly = 50000
monthly = 100000
"#;

fn measure(label: &str, iters: usize, mut f: impl FnMut(usize)) -> (f64, f64) {
    for i in 0..iters / 10 {
        f(i);
    }
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters {
        let t = Instant::now();
        f(i);
        samples.push(t.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let (p50, p99) = (
        hermes_meter_test_support::percentile(&samples, 0.5),
        hermes_meter_test_support::percentile(&samples, 0.99),
    );
    println!("  {label:<34} p50 {p50:>7.1} µs  p99 {p99:>7.1} µs");
    (p50, p99)
}

fn bench(rows: usize, iters: usize) -> f64 {
    let dir = tempfile::tempdir().expect("temp dir");
    let now = hermes_meter_store::unix_now();
    let path = dir.path().join(hermes_meter_store::DB_FILE_NAME);
    drop(Writer::open(&path).expect("create"));
    let started = Instant::now();
    fill(&path, rows, now);
    std::fs::write(dir.path().join("budgets.toml"), BUDGETS).expect("budgets");
    let mut store = Writer::open(&path).expect("open");
    let calls: i64 = store.query_scalar("SELECT COUNT(*) FROM llm_calls").expect("count");
    let buckets: i64 = store.query_scalar("SELECT COUNT(*) FROM budget_spend").expect("count");
    println!(
        "{calls} llm_calls rows, {buckets} spend buckets (filled in {:.1} s)",
        started.elapsed().as_secs_f64()
    );
    let mut gate = BudgetGate::new(dir.path().join("budgets.toml"), None);
    let session = "cron_000000000007_s7";
    let ctx = EventContext::default();
    store
        .apply(
            &event(
                "pre_llm_call",
                now,
                json!({"session_id": session, "turn_id": "bench:t0", "model": "model-7", "platform": "cron",
                       "sender_id": "sender-7"}),
            ),
            &ctx,
        )
        .expect("apply");
    let keys = store.budget_scope_keys(session, None).expect("keys");
    let n = gate.config().budgets_for(&keys).len();
    println!("  {n} budgets apply to the measured session");
    let starts: Vec<i64> = hermes_meter_model::budget::Window::CALENDAR
        .iter()
        .map(|w| {
            hermes_meter_model::budget::window_bounds(*w, hermes_meter_model::budget::timestamp(now), &gate.config().tz)
                .0
                .as_second()
        })
        .collect();
    measure("one scope id, buckets (CLI path)", iters, |_| {
        store
            .bucket_window_spends(hermes_meter_model::budget::Scope::Global, "", &starts, now, None)
            .expect("spends");
    });
    assert!(store.ensure_budget_zone("Asia/Kathmandu", now).expect("zone"));
    let periods: Vec<_> = hermes_meter_model::budget::Window::CALENDAR
        .iter()
        .copied()
        .zip(starts.iter().copied())
        .collect();
    measure("one scope id, period totals", iters, |_| {
        store
            .period_spends(
                hermes_meter_model::budget::Scope::Global,
                "",
                "Asia/Kathmandu",
                &periods,
                now,
                None,
            )
            .expect("spends");
    });
    measure("the session's scope keys", iters, |_| {
        store.budget_scope_keys(session, None).expect("keys");
    });
    let tool = event(
        "pre_tool_call",
        now,
        json!({"session_id": session, "tool_call_id": "c", "tool_name": "terminal"}),
    );
    let (_, p99_tool) = measure("verdict pre_tool_call", iters, |_| {
        assert!(gate.verdict(&store, &tool).is_none());
    });
    let llm = event(
        "pre_llm_call",
        now,
        json!({"session_id": session, "turn_id": "bench:t1", "model": "model-7", "platform": "cron"}),
    );
    let (_, p99_llm) = measure("verdict pre_llm_call", iters, |_| {
        gate.verdict(&store, &llm);
    });
    let api = event(
        "pre_api_request",
        now,
        json!({"session_id": session, "api_request_id": "bench:api", "model": "model-7", "platform": "cron",
               "approx_input_tokens": 1000}),
    );
    let (_, p99_api) = measure("verdict pre_api_request", iters, |_| {
        gate.verdict(&store, &api);
    });
    if std::env::args().any(|a| a == "--no-apply") {
        return p99_tool.max(p99_llm).max(p99_api);
    }
    measure("apply post_api_request (+rollups)", iters / 4, |i| {
        let e = event(
            "post_api_request",
            now + i as f64 * 1e-3,
            json!({"session_id": session, "api_request_id": format!("bench:post:{i}"), "model": "model-7",
                   "platform": "cron", "usage": {"input_tokens": 1000, "output_tokens": 100}}),
        );
        store.apply(&e, &ctx).expect("apply");
    });
    p99_tool.max(p99_llm).max(p99_api)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|n| n.parse::<usize>().ok())
    };
    let iters = arg("--iters").unwrap_or(20_000);
    let sizes = match arg("--rows") {
        Some(n) => vec![n],
        None => vec![1_000, 1_000_000],
    };
    let mut worst = Vec::new();
    for rows in sizes {
        worst.push((rows, bench(rows, iters)));
    }
    if let [(small, a), (large, b)] = worst[..] {
        println!(
            "worst gating p99: {a:.1} µs at {small} rows, {b:.1} µs at {large} rows ({:.2}×); target ≤ 100 µs and ≤ 2×",
            b / a
        );
    }
}
