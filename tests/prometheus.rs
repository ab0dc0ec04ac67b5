//! A real Prometheus (Debian's) scraping `hermes-meter serve`: the ledger's
//! totals arrive and the budget alert rule fires. In the `services` test
//! binary: it needs `/usr/bin/prometheus`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hermes_meter_store::Writer;
use hermes_meter_test_support::fixtures::{all_fixtures, call_now, close, ledger, replay};

// --- A real Prometheus -------------------------------------------------------

const PROMETHEUS: &str = "/usr/bin/prometheus";

/// A child process killed (and reaped) when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The value of an instant PromQL query returning one sample, if it does.
fn query(prometheus: &str, promql: &str) -> Option<f64> {
    let body =
        hermes_meter_test_support::http_get::ok_body(prometheus, &format!("/api/v1/query?query={}", encode(promql)))?;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    let result = v["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

/// Polls `f` until it returns `Some` or `timeout` passes.
fn poll<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_real_prometheus_scraping_serve_sees_the_ledger_totals_and_fires_the_budget_alert() {
    // Missing Prometheus is a failure, not a silent pass: scripts/test.sh
    // checks for it first and says how to install it.
    assert!(
        Path::new(PROMETHEUS).exists(),
        "{PROMETHEUS} is missing: apt-get install -y prometheus (Debian); this test needs the real server"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let mut store = Writer::open_dir(&home).expect("open");
    replay(&mut store, &all_fixtures());
    let l = ledger(store.path());

    let serve_addr = hermes_meter_test_support::free_addr().to_string();
    let serve = Reaped(
        Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
            .args([
                "--home",
                home.to_str().expect("utf-8 path"),
                "serve",
                "--prometheus",
                &serve_addr,
            ])
            .env("OTEL_TRACES_EXPORTER", "none")
            .env_remove("OTEL_METRICS_EXPORTER")
            .env("HERMES_METER_SESSION_GRACE_SECONDS", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hermes-meter serve"),
    );
    let text = poll(Duration::from_secs(30), || {
        hermes_meter_test_support::http_get::ok_body(&serve_addr, "/metrics")
    })
    .expect("serve answers /metrics");
    assert!(text.contains("# TYPE gen_ai_client_operation_cost histogram"), "{text}");
    assert!(
        !text.contains("gen_ai_usage_cost_total"),
        "previous names only with gen_ai/dup"
    );

    let prom_addr = hermes_meter_test_support::free_addr().to_string();
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("collector-config/prometheus/rules/hermes-meter.rules.yaml");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: hermes-meter\n    static_configs:\n      - targets: [\"{serve_addr}\"]\n",
            rules.display()
        ),
    )
    .expect("prometheus config");
    let prometheus = Reaped(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("tsdb").display()))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );

    let wait = Duration::from_secs(90);
    let expect = |promql: &str, want: f64| {
        let got = poll(wait, || query(&prom_addr, promql).filter(|v| close(*v, want)));
        assert!(
            got.is_some(),
            "{promql}: wanted {want}, Prometheus says {:?}",
            query(&prom_addr, promql)
        );
    };
    expect("sum(gen_ai_client_operation_cost_sum)", l.cost);
    expect(
        "sum(hermes_token_usage_total{hermes_token_type=\"input\"})",
        l.input as f64,
    );
    expect(
        "sum(hermes_token_usage_total{hermes_token_type=\"cache_read\"})",
        l.cache_read as f64,
    );
    expect(
        "sum(hermes_token_usage_total{hermes_token_type=\"output\"})",
        l.output as f64,
    );
    expect(
        "sum(gen_ai_client_inference_usage_input_tokens_total)",
        (l.input + l.cache_read + l.cache_write) as f64,
    );
    expect(
        "sum(gen_ai_client_inference_operation_output_tokens_count)",
        (l.calls + l.errors) as f64,
    );
    expect(
        "sum(gen_ai_client_inference_operation_output_tokens_count{error_type!=\"\"})",
        l.errors as f64,
    );
    expect(
        "sum(gen_ai_client_inference_duration_seconds_count)",
        (l.calls + l.errors) as f64,
    );
    expect(
        "sum(gen_ai_client_inference_duration_seconds_bucket{le=\"+Inf\"})",
        (l.calls + l.errors) as f64,
    );
    expect("sum(hermes_api_errors_total)", l.errors as f64);
    expect("sum(hermes_tool_calls_total)", l.tools as f64);
    expect("sum(gen_ai_execute_tool_duration_seconds_count)", l.tools as f64);
    expect("sum(hermes_turns_total)", l.turns as f64);
    expect("sum(hermes_sessions_total)", l.sessions as f64);
    let notfound = query(
        &prom_addr,
        "sum(hermes_api_errors_total{http_response_status_code=\"404\"})",
    );
    assert!(
        notfound.is_some_and(|v| v >= 1.0),
        "the model404 fixture's 404: {notfound:?}"
    );

    // Budgets on this route (no OTLP push here): the gauges follow the
    // budget file and the spend within a scrape of each change, and a
    // budget going over its limit makes HermesBudgetHardBurn fire.
    assert!(
        hermes_meter_test_support::http_get::ok_body(&prom_addr, "/api/v1/alerts")
            .is_some_and(|b| !b.contains("HermesBudgetHardBurn")),
        "not firing before the budget is exceeded"
    );
    let cli = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_hermes-meter"))
            .arg("--home")
            .arg(&home)
            .args(args)
            .output()
            .expect("hermes-meter");
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    let global = "{hermes_budget_scope=\"global\",hermes_budget_window=\"daily\"}";
    cli(&["budget", "set", "global", "daily", "10"]);
    expect(&format!("hermes_budget_limit{global}"), 10.0);
    expect(&format!("hermes_budget_spend{global}"), 0.0);
    replay(&mut store, &[call_now(dir.path(), "spend-now")]);
    expect(&format!("hermes_budget_spend{global}"), 3.0);
    cli(&["budget", "set", "global", "daily", "2"]);
    expect(&format!("hermes_budget_limit{global}"), 2.0);
    expect("hermes_budget_spend / hermes_budget_limit", 1.5);
    let firing = poll(wait, || {
        let body = hermes_meter_test_support::http_get::ok_body(&prom_addr, "/api/v1/alerts")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["alerts"].as_array()?.iter().find_map(|a| {
            (a["labels"]["alertname"] == "HermesBudgetHardBurn" && a["state"] == "firing").then(|| a.clone())
        })
    });
    let firing = firing.expect("HermesBudgetHardBurn fires");
    assert_eq!(firing["labels"]["hermes_budget_scope"], "global");
    assert_eq!(firing["labels"]["hermes_budget_window"], "daily");
    // Removed: the series goes stale at the next scrape.
    cli(&["budget", "rm", "global", "daily"]);
    let gone = poll(wait, || {
        let body = hermes_meter_test_support::http_get::ok_body(
            &prom_addr,
            &format!("/api/v1/query?query={}", encode("count(hermes_budget_limit)")),
        )?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["result"].as_array()?.is_empty().then_some(())
    });
    assert!(gone.is_some(), "hermes_budget_limit still scraped after budget rm");
    drop(prometheus);
    drop(serve);
}
