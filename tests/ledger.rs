//! The ledger, driven by the recorded Hermes 0.19.0 fixtures.
//!
//! Expected values are computed here straight from the raw JSON records,
//! independently of the decoder and the store, then compared with what the
//! store and the report say.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_model::pricing::PriceTable;
use hermes_meter_model::report::Totals;
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;
use serde_json::Value;

use hermes_meter_test_support::hermes_main;

/// The e2e mock's /v1/models prices, per million tokens.
const MOCK_PRICING: &str = "[models.\"mock-model\"]\ninput = 2.0\noutput = 8.0\ncache_read = 0.5\ncache_write = 2.5\n";

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(files.len() >= 16, "the fixtures are in tests/fixtures");
    files
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("{name}.jsonl"))
}

struct Replayed {
    _dir: tempfile::TempDir,
    store: Writer,
    stats: ReplayStats,
}

fn replay(files: &[PathBuf]) -> Replayed {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("open store");
    let mut prices = PriceTable::default();
    prices
        .add_user_prices(MOCK_PRICING, Path::new("pricing.toml"))
        .expect("prices");
    store.set_prices(prices);
    let mut stats = ReplayStats::default();
    for f in files {
        replay_file(&mut store, f, DecodeOptions::default(), &mut stats).expect("replay");
    }
    Replayed {
        _dir: dir,
        store,
        stats,
    }
}

fn totals(store: &Writer) -> Totals {
    store
        .report(&jiff::tz::TimeZone::UTC, 0.0, 1e12, None)
        .expect("report")
        .totals
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("read fixture")
        .lines()
        .map(|l| serde_json::from_str(l).expect("fixture line is JSON"))
        .collect()
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// Totals computed from the raw records by the rules of the ledger.
fn expected_totals(path: &Path) -> Totals {
    let recs = records(path);
    let mut t = Totals::default();
    let mut approx: HashMap<String, i64> = HashMap::new();
    let mut sessions = BTreeSet::new();
    for r in &recs {
        let kw = &r["kwargs"];
        for key in ["session_id", "parent_session_id", "child_session_id"] {
            if let Some(s) = kw[key].as_str() {
                sessions.insert(s.to_string());
            }
        }
        match r["hook"].as_str().expect("hook") {
            "pre_api_request" => {
                approx.insert(
                    kw["api_request_id"].as_str().expect("id").into(),
                    int(&kw["approx_input_tokens"]),
                );
            }
            "post_api_request" => {
                t.llm_calls += 1;
                let u = &kw["usage"];
                let (input, output, read, write) = if u.is_null() {
                    t.estimated_llm_calls += 1;
                    let chars = int(&kw["assistant_content_chars"]);
                    (
                        approx[kw["api_request_id"].as_str().expect("id")],
                        (chars + 3) / 4,
                        0,
                        0,
                    )
                } else {
                    (
                        int(&u["input_tokens"]),
                        int(&u["output_tokens"]),
                        int(&u["cache_read_tokens"]),
                        int(&u["cache_write_tokens"]),
                    )
                };
                t.input_tokens += input;
                t.output_tokens += output;
                t.cache_read_tokens += read;
                t.cache_write_tokens += write;
                t.reasoning_tokens += int(&u["reasoning_tokens"]);
                t.cost_usd += (input as f64 * 2.0 + output as f64 * 8.0 + read as f64 * 0.5 + write as f64 * 2.5) / 1e6;
            }
            "api_request_error" => t.api_errors += 1,
            "post_tool_call" => {
                t.tool_calls += 1;
                // Failed: Hermes said so, or the command exited non-zero
                // while Hermes said ok (crates/hermes-meter-model/src/tool_outcome.rs).
                let result: serde_json::Value = kw["result"]
                    .as_str()
                    .and_then(|r| serde_json::from_str(r).ok())
                    .unwrap_or_default();
                let exit = result["exit_code"].as_i64().or(kw["exit_code"].as_i64());
                let said_ok = kw["status"].as_str() == Some("ok");
                let nonzero = exit.is_some_and(|c| c != 0);
                t.tool_failures += (!said_ok || nonzero) as i64;
                t.tool_nonzero_exits += (said_ok && nonzero) as i64;
            }
            _ => {}
        }
    }
    t.sessions = sessions.len() as i64;
    t
}

#[test]
fn every_fixture_replays_to_the_totals_of_its_raw_records() {
    for path in fixtures() {
        let r = replay(std::slice::from_ref(&path));
        let mut got = totals(&r.store);
        let want = expected_totals(&path);
        assert!(
            (got.cost_usd - want.cost_usd).abs() < 1e-12,
            "{path:?}: cost {} != {}",
            got.cost_usd,
            want.cost_usd
        );
        got.cost_usd = want.cost_usd;
        assert_eq!(got, want, "{path:?}");
        assert_eq!(r.stats.bad_lines.len(), 0);
        assert_eq!(r.stats.unusable, 0);
        assert_eq!(r.stats.problems, 0, "{path:?}: the recorded kwargs need no repair");
    }
}

#[test]
fn all_fixtures_together_add_up_and_run_totals_match_their_rows() {
    let files = fixtures();
    let r = replay(&files);
    let got = totals(&r.store);
    let mut want = Totals::default();
    for f in &files {
        let t = expected_totals(f);
        want.cost_usd += t.cost_usd;
        want.llm_calls += t.llm_calls;
        want.input_tokens += t.input_tokens;
        want.tool_calls += t.tool_calls;
        want.api_errors += t.api_errors;
    }
    assert_eq!(
        (got.llm_calls, got.input_tokens, got.tool_calls, got.api_errors),
        (want.llm_calls, want.input_tokens, want.tool_calls, want.api_errors)
    );
    assert!((got.cost_usd - want.cost_usd).abs() < 1e-9);
    // Run totals are kept in step with the rows they sum.
    let s = &r.store;
    let q = |sql: &str| s.query_scalar::<i64>(sql).expect(sql);
    assert_eq!(
        q("SELECT SUM(llm_calls) FROM runs"),
        q("SELECT COUNT(*) FROM llm_calls")
    );
    assert_eq!(
        q("SELECT SUM(input_tokens) FROM runs"),
        q("SELECT SUM(input_tokens) FROM llm_calls")
    );
    assert_eq!(
        q("SELECT SUM(api_errors) FROM runs"),
        q("SELECT COUNT(*) FROM llm_call_errors")
    );
    assert_eq!(
        q("SELECT SUM(tool_calls) FROM runs"),
        q("SELECT COUNT(*) FROM tool_calls WHERE ended_at IS NOT NULL AND proxy = 0")
    );
    assert_eq!(
        q("SELECT SUM(tool_failures) FROM runs"),
        q("SELECT COUNT(*) FROM tool_calls WHERE proxy = 0 AND (ok = 0 OR COALESCE(exit_code, 0) != 0)")
    );
}

#[test]
fn replaying_the_same_files_again_changes_nothing() {
    let files = fixtures();
    let mut r = replay(&files);
    let before = (totals(&r.store), r.store.counts().expect("counts"));
    let mut stats = ReplayStats::default();
    for f in &files {
        replay_file(&mut r.store, f, DecodeOptions::default(), &mut stats).expect("replay again");
    }
    assert_eq!(stats.applied, 0);
    assert_eq!(stats.duplicates, r.stats.applied);
    assert_eq!((totals(&r.store), r.store.counts().expect("counts")), before);
}

fn scalar<T: rusqlite_free::FromSqlish>(store: &Writer, sql: &str) -> T {
    T::get(store, sql)
}

/// Tiny adapter so tests read single values without naming rusqlite.
mod rusqlite_free {
    use hermes_meter_store::Writer;
    pub(crate) trait FromSqlish: Sized {
        fn get(store: &Writer, sql: &str) -> Self;
    }
    impl FromSqlish for i64 {
        fn get(store: &Writer, sql: &str) -> Self {
            store.query_scalar(sql).expect(sql)
        }
    }
    impl FromSqlish for f64 {
        fn get(store: &Writer, sql: &str) -> Self {
            store.query_scalar(sql).expect(sql)
        }
    }
    impl FromSqlish for String {
        fn get(store: &Writer, sql: &str) -> Self {
            store
                .query_scalar::<Option<String>>(sql)
                .expect(sql)
                .unwrap_or_else(|| "NULL".into())
        }
    }
}

#[test]
fn a_streamed_call_of_hermes_main_keeps_its_first_token_time_and_0_19_calls_none() {
    let calls = tempfile::tempdir().expect("temp dir");
    let started = 1_796_002_700.0;
    let streamed = hermes_main::streamed_call(calls.path(), "main-streamed", started, Some(started + 0.75));
    let r = replay(&[streamed, fixture("terminal_ok")]);
    let id = hermes_main::api_request_id("main-streamed");
    let sql = format!("SELECT first_token_at FROM llm_calls WHERE api_request_id = '{id}'");
    assert_eq!(scalar::<f64>(&r.store, &sql), started + 0.75);
    // The fixture's calls (Hermes 0.19) have none.
    assert!(scalar::<i64>(&r.store, "SELECT COUNT(*) FROM llm_calls") > 1);
    assert_eq!(
        scalar::<i64>(
            &r.store,
            "SELECT COUNT(*) FROM llm_calls WHERE first_token_at IS NOT NULL"
        ),
        1
    );
}

#[test]
fn a_resumed_session_is_one_run_from_its_first_event() {
    let r = replay(&[fixture("resume")]);
    let s = &r.store;
    assert_eq!(scalar::<i64>(s, "SELECT COUNT(*) FROM runs"), 1);
    assert_eq!(scalar::<i64>(s, "SELECT turns FROM runs"), 2);
    assert_eq!(scalar::<String>(s, "SELECT status FROM runs"), "ok");
    let first: f64 = records(&fixture("resume"))[0]["t"].as_f64().expect("t");
    assert_eq!(scalar::<f64>(s, "SELECT started_at FROM runs"), first);
    // The second process fired no on_session_start and still has its turn.
    assert_eq!(scalar::<i64>(s, "SELECT COUNT(*) FROM turns WHERE outcome = 'ok'"), 2);
}

#[test]
fn a_run_exists_from_whatever_event_comes_first() {
    // Only the second process of `resume`: no on_session_start at all.
    let recs = records(&fixture("resume"));
    let second_pid = recs.last().expect("records")["pid"].clone();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("second.jsonl");
    let lines: Vec<String> = recs
        .iter()
        .filter(|r| r["pid"] == second_pid)
        .map(|r| r.to_string())
        .collect();
    std::fs::write(&path, lines.join("\n")).expect("write");
    let r = replay(&[path]);
    assert_eq!(scalar::<i64>(&r.store, "SELECT COUNT(*) FROM runs"), 1);
    assert_eq!(scalar::<String>(&r.store, "SELECT platform FROM runs"), "cli");
    assert_eq!(scalar::<i64>(&r.store, "SELECT llm_calls FROM runs"), 1);
}

#[test]
fn cron_runs_carry_their_job_id_and_end_without_finalize() {
    let r = replay(&[fixture("cron")]);
    let s = &r.store;
    assert_eq!(scalar::<String>(s, "SELECT cron_job_id FROM runs"), "01e7ae8ae880");
    assert_eq!(scalar::<String>(s, "SELECT platform FROM runs"), "cron");
    assert_eq!(scalar::<String>(s, "SELECT status FROM runs"), "ok");
    assert_eq!(
        scalar::<i64>(s, "SELECT ended_at IS NOT NULL AND finalized_at IS NULL FROM runs"),
        1
    );
}

#[test]
fn each_failed_attempt_is_an_error_row_and_the_retry_one_call() {
    let r = replay(&[fixture("failonce")]);
    let s = &r.store;
    assert_eq!(scalar::<i64>(s, "SELECT COUNT(*) FROM llm_call_errors"), 1);
    assert_eq!(scalar::<i64>(s, "SELECT COUNT(*) FROM llm_calls"), 1);
    assert_eq!(scalar::<i64>(s, "SELECT attempts FROM llm_calls"), 2);
    assert_eq!(scalar::<String>(s, "SELECT status FROM runs"), "ok");
    // The successful attempt starts at its own pre_api_request, not at the
    // shared started_at that includes the failed attempt and the backoff.
    assert!(scalar::<f64>(s, "SELECT ended_at - started_at FROM llm_calls") < 0.5);

    let r = replay(&[fixture("failalways")]);
    let s = &r.store;
    assert_eq!(
        scalar::<String>(s, "SELECT group_concat(retry_count) FROM llm_call_errors"),
        "0,1,2"
    );
    assert_eq!(scalar::<i64>(s, "SELECT COUNT(*) FROM llm_calls"), 0);
    assert_eq!(scalar::<String>(s, "SELECT status FROM runs"), "error");
    assert_eq!(scalar::<String>(s, "SELECT outcome FROM turns"), "error");

    let r = replay(&[fixture("model404")]);
    let s = &r.store;
    assert_eq!(
        scalar::<String>(
            s,
            "SELECT status_code || ' ' || retryable || ' ' || reason || ' ' || error_type FROM llm_call_errors"
        ),
        "404 0 model_not_found NotFoundError"
    );
    assert_eq!(scalar::<String>(s, "SELECT status FROM runs"), "error");
}

#[test]
fn missing_usage_is_estimated_and_flagged() {
    let r = replay(&[fixture("nousage")]);
    let s = &r.store;
    let recs = records(&fixture("nousage"));
    let pre = recs.iter().find(|r| r["hook"] == "pre_api_request").expect("pre");
    let post = recs.iter().find(|r| r["hook"] == "post_api_request").expect("post");
    assert_eq!(scalar::<i64>(s, "SELECT estimated FROM llm_calls"), 1);
    assert_eq!(
        scalar::<i64>(s, "SELECT input_tokens FROM llm_calls"),
        int(&pre["kwargs"]["approx_input_tokens"])
    );
    let chars = int(&post["kwargs"]["assistant_content_chars"]);
    assert_eq!(scalar::<i64>(s, "SELECT output_tokens FROM llm_calls"), (chars + 3) / 4);
    assert_eq!(scalar::<i64>(s, "SELECT estimated_llm_calls FROM runs"), 1);
}

#[test]
fn cached_and_reasoning_tokens_are_priced_without_adding_prompt_tokens() {
    let r = replay(&[fixture("bigcache")]);
    let s = &r.store;
    assert_eq!(
        scalar::<String>(s, "SELECT input_tokens||','||output_tokens||','||cache_read_tokens||','||cache_write_tokens||','||reasoning_tokens FROM llm_calls"),
        "5000,3000,100000,15000,2500"
    );
    let want = (5000.0 * 2.0 + 3000.0 * 8.0 + 100_000.0 * 0.5 + 15_000.0 * 2.5) / 1e6;
    assert!((scalar::<f64>(s, "SELECT cost_usd FROM llm_calls") - want).abs() < 1e-12);
    assert_eq!(scalar::<String>(s, "SELECT cost_source FROM llm_calls"), "user");
}

#[test]
fn the_report_says_how_much_input_the_cache_served_and_what_it_saved() {
    let r = replay(&[fixture("bigcache")]);
    let tz = jiff::tz::TimeZone::UTC;
    let report = r.store.report(&tz, 0.0, f64::MAX, None).expect("report");
    let c = &report.cache;
    // 100,000 cache reads of 5,000 + 100,000 + 15,000 input tokens.
    assert!(
        (c.hit_rate.expect("input") - 100_000.0 / 120_000.0).abs() < 1e-12,
        "{c:?}"
    );
    // Reads at $0.50 instead of $2 save $0.15; writes at $2.50 instead of $2 cost $0.0075.
    let saved = (100_000.0 * 1.5 - 15_000.0 * 0.5) / 1e6;
    assert_eq!(c.by_model.len(), 1, "{c:?}");
    assert_eq!(c.by_model[0].key.as_deref(), Some("mock-model"));
    assert!(
        (c.by_model[0].saved_usd.expect("priced") - saved).abs() < 1e-12,
        "{c:?}"
    );
    assert!((c.saved_usd - saved).abs() < 1e-12);
    assert_eq!((c.unpriced_models, c.by_day.len()), (0, 1));
    assert_eq!(c.by_day[0].saved_usd, None, "a day's models' rates differ");
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["cache"]["by_model"][0]["cache_read_tokens"], 100_000);
    // The same from the command, at the same prices.
    std::fs::write(r._dir.path().join("pricing.toml"), MOCK_PRICING).expect("pricing");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .arg("--home")
        .arg(r._dir.path())
        .arg("report")
        .output()
        .expect("run report");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("cache: 83.3% of input tokens read from the providers' caches, saving $0.1425"),
        "{text}"
    );
    assert!(text.contains("cache by model:"), "{text}");
}

#[test]
fn a_cost_the_provider_reported_is_the_cost_everywhere_with_the_estimate_beside_it() {
    // The readfile run as a provider that bills each call itself would
    // report it (OpenRouter's `usage.cost`): 1 cent, then 2 cents, ...
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("billed.jsonl");
    let mut billed = Vec::new();
    let mut estimates = Vec::new();
    let lines: Vec<String> = records(&fixture("readfile"))
        .into_iter()
        .map(|mut r| {
            if r["hook"] == "post_api_request" {
                let u = &r["kwargs"]["usage"];
                let est = (int(&u["input_tokens"]) as f64 * 2.0
                    + int(&u["output_tokens"]) as f64 * 8.0
                    + int(&u["cache_read_tokens"]) as f64 * 0.5
                    + int(&u["cache_write_tokens"]) as f64 * 2.5)
                    / 1e6;
                let cost = 0.01 * (billed.len() + 1) as f64;
                r["kwargs"]["usage"]["cost"] = cost.into();
                billed.push(cost);
                estimates.push(est);
            }
            r.to_string()
        })
        .collect();
    assert!(billed.len() >= 2, "readfile makes two LLM calls");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    let r = replay(&[path]);
    let s = &r.store;
    let total: f64 = billed.iter().sum();
    let estimate: f64 = estimates.iter().sum();
    assert_eq!(
        scalar::<i64>(s, "SELECT COUNT(*) FROM llm_calls WHERE cost_source = 'provider'"),
        billed.len() as i64
    );
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert!(close(scalar::<f64>(s, "SELECT SUM(cost_usd) FROM llm_calls"), total));
    assert!(close(
        scalar::<f64>(s, "SELECT SUM(estimate_usd) FROM llm_calls"),
        estimate
    ));
    // The run, the report and the budgets count what the provider billed.
    assert!(close(scalar::<f64>(s, "SELECT SUM(cost_usd) FROM runs"), total));
    assert!(close(totals(s).cost_usd, total));
    assert!(close(
        scalar::<f64>(
            s,
            "SELECT SUM(cost_usd) FROM budget_spend WHERE scope = 'global' AND level = 0"
        ),
        total
    ));
    let utc = jiff::tz::TimeZone::UTC;
    let rows = s.report(&utc, 0.0, 1e12, None).expect("report").provider_billed;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].model.as_deref(), rows[0].llm_calls),
        (Some("mock-model"), billed.len() as i64)
    );
    assert!(close(rows[0].billed_usd, total) && close(rows[0].estimate_usd, estimate));
    // A window without those calls has nothing to reconcile.
    assert!(s
        .report(&utc, 0.0, 1.0, None)
        .expect("empty window")
        .provider_billed
        .is_empty());
}

#[test]
fn an_upstream_charge_is_the_cost_with_the_gateways_fee_on_a_users_own_key() {
    // The readfile run through gateways that report the upstream charge:
    // the first call on the user's own key through OpenRouter (its fee of
    // 5% beside the upstream charge, `is_byok`), the second through Nous
    // Portal (the upstream charge only, 5x what the token price says).
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("upstream.jsonl");
    let mut calls = 0;
    let lines: Vec<String> = records(&fixture("readfile"))
        .into_iter()
        .map(|mut r| {
            if r["hook"] == "post_api_request" {
                calls += 1;
                let usage = &mut r["kwargs"]["usage"];
                if calls == 1 {
                    usage["cost"] = 0.0095.into();
                    usage["upstream_cost"] = 0.19.into();
                    usage["byok"] = true.into();
                } else {
                    usage["upstream_cost"] = 0.05.into();
                }
            }
            r.to_string()
        })
        .collect();
    assert_eq!(calls, 2, "readfile makes two LLM calls");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    let r = replay(&[path]);
    let s = &r.store;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    let costs: Vec<(f64, String)> = {
        let conn = rusqlite::Connection::open(s.path()).expect("open");
        let mut stmt = conn
            .prepare("SELECT cost_usd, cost_source FROM llm_calls ORDER BY started_at")
            .expect("prepare");
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    assert_eq!(costs.len(), 2, "{costs:?}");
    assert!(close(costs[0].0, 0.1995) && close(costs[1].0, 0.05), "{costs:?}");
    assert!(
        costs.iter().all(|(_, source)| source == "provider_upstream"),
        "{costs:?}"
    );
    // The runs, the report, the budgets and the provider-billed table count it.
    let total = 0.2495;
    assert!(close(scalar::<f64>(s, "SELECT SUM(cost_usd) FROM runs"), total));
    assert!(close(totals(s).cost_usd, total));
    assert!(close(
        scalar::<f64>(
            s,
            "SELECT SUM(cost_usd) FROM budget_spend WHERE scope = 'global' AND level = 0"
        ),
        total
    ));
    let utc = jiff::tz::TimeZone::UTC;
    let rows = s.report(&utc, 0.0, 1e12, None).expect("report").provider_billed;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].llm_calls, 2);
    assert!(close(rows[0].billed_usd, total), "{rows:?}");
    assert!(
        close(
            rows[0].estimate_usd,
            scalar::<f64>(s, "SELECT SUM(estimate_usd) FROM llm_calls")
        ),
        "{rows:?}"
    );
}

#[test]
fn unknown_models_cost_nothing_and_are_flagged_unpriced() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("open");
    let mut stats = ReplayStats::default();
    replay_file(&mut store, &fixture("bigcache"), DecodeOptions::default(), &mut stats).expect("replay");
    assert_eq!(
        scalar::<String>(&store, "SELECT cost_usd || ' ' || cost_source FROM llm_calls"),
        "0.0 unknown"
    );
    assert_eq!(scalar::<i64>(&store, "SELECT unpriced_llm_calls FROM runs"), 1);
}

#[test]
fn tool_status_decides_and_exit_codes_are_kept() {
    let r = replay(&[fixture("terminal_fail")]);
    // Hermes says "ok" for a command that exited 3: status decides, the code is kept.
    assert_eq!(
        scalar::<String>(
            &r.store,
            "SELECT ok || ' ' || status || ' ' || exit_code FROM tool_calls"
        ),
        "1 ok 3"
    );
    let r = replay(&[fixture("tool_error")]);
    assert_eq!(
        scalar::<String>(
            &r.store,
            "SELECT ok || ' ' || status || ' ' || error_type FROM tool_calls"
        ),
        "0 error tool_error"
    );
    assert_eq!(scalar::<i64>(&r.store, "SELECT tool_failures FROM runs"), 1);
    let r = replay(&[fixture("parallel")]);
    assert_eq!(
        scalar::<i64>(
            &r.store,
            "SELECT COUNT(*) FROM tool_calls WHERE ok = 1 AND ended_at IS NOT NULL"
        ),
        2
    );
}

#[test]
fn subagents_get_an_edge_a_proxy_tool_row_and_their_root() {
    let r = replay(&[fixture("delegate_sync")]);
    let s = &r.store;
    let recs = records(&fixture("delegate_sync"));
    let start = &recs.iter().find(|r| r["hook"] == "subagent_start").expect("start")["kwargs"];
    let (parent, child) = (
        start["parent_session_id"].as_str().expect("p"),
        start["child_session_id"].as_str().expect("c"),
    );
    assert_eq!(
        scalar::<String>(s, "SELECT parent_session_id || ' ' || child_status FROM subagent_edges"),
        format!("{parent} completed")
    );
    assert_eq!(
        scalar::<String>(
            s,
            &format!("SELECT root_session_id FROM runs WHERE session_id = '{child}'")
        ),
        parent
    );
    assert_eq!(
        scalar::<String>(s, &format!("SELECT status FROM runs WHERE session_id = '{child}'")),
        "ok"
    );
    assert_eq!(
        scalar::<String>(
            s,
            "SELECT session_id || ' ' || ok FROM tool_calls WHERE tool_name = 'delegate_task/subagent'"
        ),
        format!("{parent} 1")
    );
    // hermes -z never finalizes: the parent still ends, with a status.
    assert_eq!(
        scalar::<String>(s, &format!("SELECT status FROM runs WHERE session_id = '{parent}'")),
        "ok"
    );
    assert_eq!(
        scalar::<i64>(
            s,
            &format!("SELECT ended_at IS NOT NULL FROM runs WHERE session_id = '{parent}'")
        ),
        1
    );
}

#[test]
fn an_orphaned_background_child_is_closed_as_abandoned() {
    let mut r = replay(&[fixture("delegate_bg_orphan")]);
    let recs = records(&fixture("delegate_bg_orphan"));
    let last = recs.iter().filter_map(|r| r["t"].as_f64()).fold(0.0, f64::max);
    assert_eq!(
        scalar::<i64>(&r.store, "SELECT COUNT(*) FROM runs WHERE status = 'running'"),
        1
    );
    // Not idle long enough yet: nothing closes.
    assert_eq!(r.store.close_idle_runs(last + 60.0, 900.0).expect("sweep"), 0);
    assert_eq!(r.store.close_idle_runs(last + 901.0, 900.0).expect("sweep"), 1);
    assert_eq!(
        scalar::<String>(&r.store, "SELECT status FROM runs WHERE platform = 'subagent'"),
        "abandoned"
    );
    assert_eq!(
        scalar::<i64>(
            &r.store,
            "SELECT ended_at = last_event_at FROM runs WHERE platform = 'subagent'"
        ),
        1
    );
    assert_eq!(
        scalar::<String>(
            &r.store,
            "SELECT outcome FROM turns t JOIN runs r USING (session_id) WHERE r.platform = 'subagent'"
        ),
        "abandoned"
    );
}

#[test]
fn a_childs_spend_rolls_up_to_its_root_cron_job_and_sender() {
    // A cron parent delegating to a child: the child's call is the cron job's spend.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("cron_child.jsonl");
    let parent = "cron_abc123def456_20261130_010000";
    let lines = [
        serde_json::json!({"hook": "on_session_start", "t": 10.0, "kwargs": {"session_id": parent, "platform": "cron", "model": "mock-model"}}),
        serde_json::json!({"hook": "pre_llm_call", "t": 11.0, "kwargs": {"session_id": parent, "turn_id": "p:t", "sender_id": "alice", "platform": "cron"}}),
        serde_json::json!({"hook": "subagent_start", "t": 12.0, "kwargs": {"parent_session_id": parent, "parent_turn_id": "p:t", "child_session_id": "child1"}}),
        serde_json::json!({"hook": "on_session_start", "t": 13.0, "kwargs": {"session_id": "child1", "platform": "subagent"}}),
        serde_json::json!({"hook": "post_api_request", "t": 14.0, "kwargs": {"session_id": "child1", "api_request_id": "c:api:1", "model": "mock-model", "usage": {"input_tokens": 1000000, "output_tokens": 0}}}),
    ];
    std::fs::write(
        &path,
        lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n"),
    )
    .expect("write");
    let r = replay(&[path]);
    let report = r
        .store
        .report(&jiff::tz::TimeZone::UTC, 0.0, 1e12, None)
        .expect("report");
    let cron = report
        .by_cron_job
        .iter()
        .find(|g| g.key.as_deref() == Some("abc123def456"))
        .expect("cron group");
    assert!((cron.totals.cost_usd - 2.0).abs() < 1e-9);
    let sender = report
        .by_sender
        .iter()
        .find(|g| g.key.as_deref() == Some("alice"))
        .expect("sender group");
    assert!((sender.totals.cost_usd - 2.0).abs() < 1e-9);
}

#[test]
fn on_session_end_sets_the_status_of_each_turn() {
    let r = replay(&[fixture("multi_turn")]);
    let s = &r.store;
    assert_eq!(scalar::<i64>(s, "SELECT turns FROM runs"), 2);
    assert_eq!(scalar::<String>(s, "SELECT group_concat(outcome) FROM turns"), "ok,ok");
    // An interrupted turn.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("interrupted.jsonl");
    let lines = [
        serde_json::json!({"hook": "pre_llm_call", "t": 1.0, "kwargs": {"session_id": "s", "turn_id": "s:t"}}),
        serde_json::json!({"hook": "on_session_end", "t": 2.0, "kwargs": {"session_id": "s", "turn_id": "s:t", "completed": false, "interrupted": true}}),
    ];
    std::fs::write(
        &path,
        lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n"),
    )
    .expect("write");
    let r = replay(&[path]);
    assert_eq!(
        scalar::<String>(&r.store, "SELECT status || ' ' || ended_at FROM runs"),
        "interrupted 2.0"
    );
}

/// A store a pre-release build wrote (this fixture is one, from the
/// plugin's first schema) is never opened for writing: `status` says in
/// one line what it is and what to do, every command refuses it, and the
/// file stays byte for byte as it was. The old name's store beside it is
/// pointed out too.
#[test]
fn a_pre_release_store_gets_one_line_and_is_never_touched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    std::fs::create_dir_all(&home).expect("store dir");
    let path = home.join(hermes_meter_store::DB_FILE_NAME);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store/schema-v1.db"),
        &path,
    )
    .expect("copy");
    std::fs::create_dir_all(dir.path().join("otel")).expect("old dir");
    std::fs::write(dir.path().join("otel").join("hermes-otel.db"), b"").expect("old store");
    let before = std::fs::read(&path).expect("read");
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
            .arg("--home")
            .arg(&home)
            .args(args)
            .output()
            .expect("run the cli")
    };
    let status = cli(&["status"]);
    assert_eq!(status.status.code(), Some(1));
    let text = String::from_utf8_lossy(&status.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("pre-release build of hermes-meter"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(&path.display().to_string()), "{line}");
    assert!(line.contains("move its directory aside"), "{line}");
    assert!(text.contains("old store") && text.contains("hermes-otel.db"), "{text}");
    for args in [&["report"][..], &["replay", "/dev/null"], &["doctor"]] {
        let out = cli(args);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
    }
    assert_eq!(std::fs::read(&path).expect("read"), before, "the file is untouched");
    assert!(!home.join(format!("{}-wal", hermes_meter_store::DB_FILE_NAME)).exists());
}

#[test]
fn the_cli_reports_bad_lines_with_file_and_line_and_keeps_the_good_ones() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("mixed.jsonl");
    let mut text = std::fs::read_to_string(fixture("readfile")).expect("read");
    text = text.replacen('\n', "\n{not json\n", 1);
    std::fs::write(&path, text).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .arg("--home")
        .arg(dir.path().join("store"))
        .arg("replay")
        .arg(&path)
        .output()
        .expect("run the cli");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("{}:2:", path.display())), "{stderr}");
    let report = std::process::Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
        .arg("--home")
        .arg(dir.path().join("store"))
        .args(["report", "--json"])
        .output()
        .expect("report");
    let json: Value = serde_json::from_slice(&report.stdout).expect("report is JSON");
    assert_eq!(json["totals"]["llm_calls"], 2);
    assert_eq!(json["totals"]["tool_calls"], 1);
    for key in [
        "cost_usd",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "llm_calls",
        "estimated_llm_calls",
        "api_errors",
        "tool_calls",
        "tool_failures",
        "sessions",
    ] {
        assert!(
            json["totals"].get(key).is_some(),
            "totals.{key} is part of the report schema"
        );
    }
}

/// One event of `hook` for session "s" at `t`, with `model`.
fn event_for_model(hook: &str, t: f64, model: &str) -> hermes_meter_model::hook::HookEvent {
    let kwargs = serde_json::json!({
        "session_id": "s", "model": model, "platform": "cli",
        "task_id": "s", "turn_id": format!("turn-{t}"), "user_message": "hi",
    });
    match hermes_meter_model::hook::decode(hook, kwargs.as_object().expect("object"), t, DecodeOptions::default()) {
        hermes_meter_model::hook::Decoded::Event(e, _) => e,
        other => panic!("{hook} did not decode: {other:?}"),
    }
}

#[test]
fn a_run_written_by_two_processes_keeps_the_last_model_each_one_said() {
    // The writer skips refreshing a run whose event says nothing new, from
    // what it remembers of the run; another process's commit must make it
    // look again.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("meter.db");
    let mut a = Writer::open(&path).expect("open a");
    let mut b = Writer::open(&path).expect("open b");
    let ctx = hermes_meter_store::EventContext::default();
    let model = |s: &Writer| scalar::<String>(s, "SELECT model FROM runs WHERE session_id = 's'");

    a.apply(&event_for_model("pre_llm_call", 100.0, "m1"), &ctx).expect("a");
    b.apply(&event_for_model("post_llm_call", 100.1, "m2"), &ctx)
        .expect("b");
    assert_eq!(model(&a), "m2");
    // Same second, same model as a last said: only b's commit tells a to write.
    a.apply(&event_for_model("post_llm_call", 100.2, "m1"), &ctx)
        .expect("a again");
    assert_eq!(model(&a), "m1");
    // And a run a never saw (b made it) is read, not assumed.
    b.apply(&event_for_model("on_session_start", 100.3, "m3"), &ctx)
        .expect("b again");
    a.apply(&event_for_model("post_llm_call", 100.4, "m3"), &ctx)
        .expect("a third");
    assert_eq!(model(&a), "m3");
    assert_eq!(
        scalar::<f64>(&a, "SELECT started_at FROM runs WHERE session_id = 's'"),
        100.0
    );
}

#[test]
fn a_file_out_of_time_order_is_applied_in_time_order() {
    // All fixtures in one file, lines reversed and blank lines between:
    // the estimate of a call without usage needs its pre_api_request
    // first, and a turn's outcome its on_session_end last.
    let dir = tempfile::tempdir().expect("temp dir");
    let shuffled = dir.path().join("reversed.jsonl");
    let mut lines: Vec<String> = fixtures()
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .expect("read")
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    lines.reverse();
    std::fs::write(&shuffled, lines.join("\n\n")).expect("write");
    let reversed = replay(&[shuffled]);
    let each = replay(&fixtures());
    assert_eq!(reversed.stats.bad_lines.len(), 0);
    assert_eq!(reversed.stats.applied, each.stats.applied);
    assert_eq!(totals(&reversed.store), totals(&each.store));
    let rows = |s: &Writer| {
        scalar::<String>(
            s,
            "SELECT group_concat(session_id || ':' || status || ':' || started_at || ':' || estimated_llm_calls, ',')
             FROM (SELECT * FROM runs ORDER BY session_id)",
        )
    };
    assert_eq!(rows(&reversed.store), rows(&each.store));
}

/// One event of `hook` for `session` at `t` (its turn `turn`, its tool
/// call `call`).
fn session_event(hook: &str, session: &str, t: f64) -> hermes_meter_model::hook::HookEvent {
    let kwargs = serde_json::json!({
        "session_id": session, "model": "m", "platform": "cli", "task_id": session,
        "turn_id": format!("{session}:turn"), "user_message": "hi",
        "tool_call_id": format!("{session}:call"), "tool_name": "terminal", "args": {},
    });
    match hermes_meter_model::hook::decode(hook, kwargs.as_object().expect("object"), t, DecodeOptions::default()) {
        hermes_meter_model::hook::Decoded::Event(e, _) => e,
        other => panic!("{hook} did not decode: {other:?}"),
    }
}

/// What the idle closer left: each session's run status, close reason and
/// end, its turns' outcomes, and the outbox rows it enqueued.
fn closed_state(s: &Writer) -> String {
    [
        "SELECT session_id || ' ' || status || ' ' || close_reason || ' ' || (ended_at = last_event_at) AS x FROM runs",
        "SELECT turn_id || ' ' || outcome || ' ' || ended_at AS x FROM turns",
        "SELECT kind || ' ' || session_id || ' ' || key || ' ' || n || ' ' || hold AS x FROM outbox",
    ]
    .map(|rows| scalar::<String>(s, &format!("SELECT group_concat(x, char(10)) FROM ({rows} ORDER BY x)")))
    .join("\n")
}

#[test]
fn the_idle_closer_works_in_small_transactions_and_closes_what_one_big_one_would() {
    // A store where many processes died mid-turn: each session's run, turn
    // and tool call are open. The writer's sweep closes them a batch a
    // transaction, so no hook waits long behind it; batched or not, what
    // ends up closed and enqueued must be the same.
    const SESSIONS: usize = 100;
    let open = |s: &mut Writer| {
        let ctx = hermes_meter_store::EventContext::default();
        for i in 0..SESSIONS {
            let session = format!("s{i:03}");
            let t = 1000.0 + i as f64;
            for hook in ["on_session_start", "pre_llm_call", "pre_tool_call"] {
                s.apply(&session_event(hook, &session, t), &ctx).expect(hook);
            }
        }
        // One session still active: never closed.
        s.apply(&session_event("pre_llm_call", "active", 5000.0), &ctx)
            .expect("active");
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let mut batched = Writer::open(&dir.path().join("a.db")).expect("open a");
    let mut at_once = Writer::open(&dir.path().join("b.db")).expect("open b");
    open(&mut batched);
    open(&mut at_once);
    let now = 5100.0;

    let mut closed = 0;
    let mut batches = 0;
    loop {
        let (n, more) = batched.close_idle_batch(now, 900.0, 32).expect("batch");
        assert!(n <= 32, "a batch closed {n} runs");
        closed += n;
        batches += 1;
        if !more {
            break;
        }
    }
    assert_eq!(closed, SESSIONS);
    assert_eq!(batches, SESSIONS.div_ceil(32));
    assert_eq!(batched.close_idle_batch(now, 900.0, 32).expect("again"), (0, false));
    assert_eq!(
        at_once
            .close_idle_batch(now, 900.0, usize::MAX >> 1)
            .expect("one batch"),
        (SESSIONS, false)
    );
    assert_eq!(closed_state(&batched), closed_state(&at_once));
    assert_eq!(
        scalar::<i64>(
            &batched,
            "SELECT COUNT(*) FROM runs WHERE status = 'abandoned' AND close_reason = 'idle_timeout'"
        ),
        SESSIONS as i64
    );
    assert_eq!(
        scalar::<i64>(&batched, "SELECT COUNT(*) FROM turns WHERE outcome IS NULL"),
        1,
        "only the active session's turn stays open"
    );
    // Every closed session's run, turn and tool call went to the outbox.
    assert_eq!(
        scalar::<i64>(
            &batched,
            "SELECT COUNT(*) FROM (SELECT session_id FROM outbox WHERE session_id != 'active'
              GROUP BY session_id HAVING COUNT(DISTINCT kind) >= 3)"
        ),
        SESSIONS as i64
    );
    // close_idle_runs, used by the CLI and the export driver, loops the
    // batches to the end.
    let mut third = Writer::open(&dir.path().join("c.db")).expect("open c");
    open(&mut third);
    assert_eq!(third.close_idle_runs(now, 900.0).expect("all"), SESSIONS);
    assert_eq!(closed_state(&third), closed_state(&at_once));
}

#[test]
fn every_attempt_of_hermes_0_22_recovery_cycles_is_a_failed_attempt_of_its_own() {
    // Recorded in the real Hermes 0.22.2 (scripts/make-fixtures.sh 0.22):
    // three retries, then five auto-recovery cycles of three more, each
    // cycle's retry_count from 0 again, all one api_request_id.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hermes-0.22/failalways.jsonl");
    let fired = records(&path)
        .iter()
        .filter(|r| r["hook"] == "api_request_error")
        .count();
    assert_eq!(fired, 18);
    let r = replay(std::slice::from_ref(&path));
    let s = &r.store;
    assert_eq!(scalar::<i64>(s, "SELECT COUNT(*) FROM llm_call_errors"), 18);
    assert_eq!(
        scalar::<String>(
            s,
            "SELECT group_concat(attempt) FROM (SELECT attempt FROM llm_call_errors ORDER BY attempt)"
        ),
        (0..18).map(|n| n.to_string()).collect::<Vec<_>>().join(",")
    );
    assert_eq!(
        scalar::<String>(
            s,
            "SELECT group_concat(retry_count) FROM (SELECT retry_count FROM llm_call_errors ORDER BY attempt)"
        ),
        ["0,1,2"; 6].join(",")
    );
    assert_eq!(scalar::<i64>(s, "SELECT api_errors FROM runs"), 18);
    // Replaying the same file again adds nothing: each fired call is one row.
    let mut store = Writer::open(s.path()).expect("reopen");
    replay_file(&mut store, &path, DecodeOptions::default(), &mut ReplayStats::default()).expect("again");
    assert_eq!(scalar::<i64>(&store, "SELECT COUNT(*) FROM llm_call_errors"), 18);
}

/// A finalize for a session nothing else was recorded of (Hermes's web
/// dashboard opens and closes a chat session on each page load) makes no
/// run; a recorded session's finalize still ends its run.
#[test]
fn a_finalize_of_a_session_never_recorded_makes_no_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("dashboard.jsonl");
    let finalize = serde_json::json!({
        "hook": "on_session_finalize", "t": 1796002726.2, "thread": "MainThread", "pid": 77, "seq": 1,
        "kw_types": {"session_id": "str", "platform": "str", "reason": "str"},
        "kwargs": {"session_id": "dashboard-page-load", "platform": "tui", "reason": "tui_close"},
    });
    std::fs::write(&path, format!("{finalize}\n")).expect("write");
    let r = replay(&[path]);
    assert_eq!(r.stats.applied, 1, "{:?}", r.stats);
    assert_eq!(scalar::<i64>(&r.store, "SELECT COUNT(*) FROM runs"), 0);
    assert_eq!(scalar::<i64>(&r.store, "SELECT COUNT(*) FROM journal"), 1);

    let r = replay(&[fixture("multi_turn")]);
    assert_eq!(
        scalar::<i64>(&r.store, "SELECT COUNT(*) FROM runs WHERE finalized_at IS NULL"),
        0
    );
    assert!(scalar::<i64>(&r.store, "SELECT COUNT(*) FROM runs") > 0);
}
