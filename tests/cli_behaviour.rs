//! The `hermes-meter` binary as an operator meets it: a closed pipe, a
//! mistyped directory or file, a window the wrong way round, a budget of
//! $0. Each mistake gets one line saying what to do and touches nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hermes-meter"));
    // The caller's own settings must not leak into what is tested.
    for var in ["HERMES_METER_HOME", "HERMES_HOME", "HERMES_METER_LOG", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    cmd.env("OTEL_SDK_DISABLED", "false");
    cmd
}

fn run(home: &Path, args: &[&str]) -> Output {
    bin()
        .arg("--home")
        .arg(home)
        .args(args)
        .output()
        .expect("run hermes-meter")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A store with the `cron` fixture in it.
fn store_with_history() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let o = run(&home, &["replay", fixture("cron.jsonl").to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    (dir, home)
}

/// A budget file that does not parse is said in `status`'s first line and
/// on its own line after it, with the error (escaped) and what a Hermes
/// process does with it.
#[test]
fn status_says_first_that_the_budget_file_does_not_parse() {
    let (_dir, home) = store_with_history();
    std::fs::write(home.join("budgets.toml"), "[global]\ndaily = 0.5O\x1b[2J\n").expect("write");
    let o = run(&home, &["status"]);
    let text = stdout(&o);
    let first = text.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("summary         PROBLEMS: the budget file does not parse: its limits are not in force"),
        "{text}"
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("BUDGETS "))
        .expect("a BUDGETS line");
    assert!(
        line.contains("holds every tool and LLM call until it is fixed"),
        "{line}"
    );
    assert!(
        !text.contains('\x1b'),
        "the file's text reaches no terminal raw: {text:?}"
    );
    let o = run(&home, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(
        v["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("budget file does not parse"),
        "{v}"
    );
}

/// A budget file every user can write is a problem `status` says first:
/// anyone on the machine can lift the limits.
#[test]
fn status_says_first_that_every_user_can_change_the_limits() {
    use std::os::unix::fs::PermissionsExt;
    let (_dir, home) = store_with_history();
    let file = home.join("budgets.toml");
    std::fs::write(&file, "[global]\ndaily = 0.5\n").expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let text = stdout(&run(&home, &["status"]));
    assert!(text.starts_with("summary         ok"), "{text}");
    assert!(text.contains("limits          this user can change them"), "{text}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    let text = stdout(&run(&home, &["status"]));
    assert!(
        text.starts_with("summary         PROBLEMS: every user of this machine can change the limits"),
        "{text}"
    );
    let line = text.lines().find(|l| l.starts_with("LIMITS ")).expect("a LIMITS line");
    assert!(line.contains("mode 666") && line.contains("chmod o-w"), "{line}");
    let o = run(&home, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["limits"]["world_writable"].as_array().map(Vec::len), Some(1), "{v}");
}

/// `status` and `report` agree on the tool calls: the row a subagent's
/// result records on its parent is counted by neither.
#[test]
fn status_and_report_count_the_same_tool_calls() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let o = run(
        &home,
        &["replay", fixture("delegate_sync.jsonl").to_str().expect("utf-8 path")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&run(&home, &["report", "--json"]).stdout).expect("json");
    let tools = report["totals"]["tool_calls"].as_i64().expect("tool_calls");
    let status = stdout(&run(&home, &["status"]));
    let line = status
        .lines()
        .find(|l| l.starts_with("tool calls "))
        .expect("tool calls line");
    let shown: i64 = line["tool calls".len()..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number");
    assert_eq!(shown, tools, "{line}");
    assert!(line.contains("1 subagent result row"), "{line}");
}

/// The alerts of the last day are where an operator looks: counted in
/// `status`'s first line, listed with where each went, escaped.
#[test]
fn status_lists_the_alerts_of_the_last_day_and_where_they_went() {
    let (_dir, home) = store_with_history();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    {
        let store = hermes_meter_store::Writer::open_dir(&home).expect("store");
        store
            .raise_pending_alert(
                "runaway",
                "run|t1",
                "RUNAWAY: session \x1b[2Jevil looks stuck in a loop",
                now - 60.0,
            )
            .expect("raise");
        store
            .raise_pending_alert("runaway", "run|old", "RUNAWAY: two days ago", now - 2.0 * 86_400.0)
            .expect("raise");
    }
    let text = stdout(&run(&home, &["status"]));
    let first = text.lines().next().unwrap_or_default();
    assert!(first.contains("1 alert(s) in the last 24 h"), "{text}");
    assert!(text.contains("alerts          1 in the last 24 h"), "{text}");
    assert!(text.contains("RUNAWAY: session") && !text.contains('\x1b'), "{text:?}");
    assert!(!text.contains("two days ago"), "{text}");
    assert!(
        text.contains("not shown to an agent yet") && text.contains("webhook off"),
        "{text}"
    );
    let v: serde_json::Value = serde_json::from_slice(&run(&home, &["status", "--json"]).stdout).expect("json");
    assert_eq!(v["recent_alerts"].as_array().map(Vec::len), Some(1), "{v}");
    let listed = stdout(&run(&home, &["budget", "list"]));
    assert!(listed.contains("alerts: 1 in the last 24 h"), "{listed}");
}

/// The release a bug report names: `--version`, the first line of
/// `status` and its `--json` agree, on a store that opens and one that
/// cannot.
#[test]
fn version_and_status_name_this_release() {
    let version = env!("CARGO_PKG_VERSION");
    let o = bin().arg("--version").output().expect("run");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), format!("hermes-meter {version}"));

    let (_dir, home) = store_with_history();
    let o = run(&home, &["status"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A one-line summary, then the release.
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("summary         ok; export off"), "{text}");
    assert_eq!(lines[1], format!("hermes-meter    {version}"));
    let o = run(&home, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["version"], version);

    let broken = tempfile::tempdir().expect("temp dir");
    std::fs::write(broken.path().join("hermes-meter.db"), b"not a database, not at all").expect("write");
    let o = run(broken.path(), &["status"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert_eq!(
        stdout(&o).lines().next(),
        Some(format!("hermes-meter    {version}").as_str())
    );
    let o = run(broken.path(), &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["version"], version);
}

#[test]
fn a_closed_stdout_ends_quietly_with_exit_0() {
    let (_dir, home) = store_with_history();
    for args in [&["status"][..], &["report"], &["status", "--json"], &["budget", "list"]] {
        // The reader is gone before the command writes anything, as with
        // `| head -1` once head has its line.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let o = bin()
            .arg("--home")
            .arg(&home)
            .args(args)
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

/// Output to a full disk (`/dev/full`) is no success: nothing may take a
/// truncated report or JSON for the answer.
#[test]
fn output_that_cannot_be_written_is_an_error() {
    let (_dir, home) = store_with_history();
    let session = "cron_01e7ae8ae880_20261130_013909";
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["report"],
        &["budget", "list", "--json"],
        &["trace", session, "--json"],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full");
        let o = bin()
            .arg("--home")
            .arg(&home)
            .args(args)
            .stdout(Stdio::from(full))
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        assert_eq!(o.status.code(), Some(74), "{args:?}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("the output could not be written: No space left on device"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn a_home_that_does_not_exist_is_an_error_and_stays_absent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let typo = dir.path().join("otle");
    // `status` answers: no store yet, said on stdout, exit 1.
    let o = run(&typo, &["status"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(
        out.starts_with("summary         PROBLEMS: no store yet at") && out.contains("otle"),
        "{out}"
    );
    assert!(!typo.exists(), "status created the mistyped directory");
    for args in [
        &["report"][..],
        &["budget", "list"],
        &["budget", "forecast"],
        &["export", "--since", "1d"],
        &["serve", "--drain"],
    ] {
        let o = run(&typo, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = stderr(&o);
        assert!(e.contains("no store at") && e.contains("otle"), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(!typo.exists(), "{args:?} created the mistyped directory");
    }
    // `budget set` may come before Hermes ever ran: it creates the directory.
    let o = run(&typo, &["budget", "set", "global", "daily", "5"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(typo.join("budgets.toml").exists());
}

#[test]
fn replay_of_a_missing_file_creates_no_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    let present = fixture("cron.jsonl");
    let o = run(
        &home,
        &["replay", present.to_str().expect("utf-8"), "/no/such/file.jsonl"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("/no/such/file.jsonl"), "{}", stderr(&o));
    assert!(!home.exists(), "a store was created for input that was never read");
}

#[test]
fn reversed_and_impossible_windows_get_one_line_naming_the_accepted_forms() {
    let (_dir, home) = store_with_history();
    let o = run(&home, &["report", "--since", "1d", "--until", "7d"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(e.contains("--until 7d is not after --since 1d"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(stdout(&o).is_empty(), "a reversed window printed a report of zeros");

    for bad in ["2026-13-45", "yesterday", "3y"] {
        let o = run(&home, &["report", "--since", bad]);
        assert_eq!(o.status.code(), Some(1), "{bad}");
        let e = stderr(&o);
        assert!(e.contains(bad), "{bad}: {e}");
        assert!(
            e.contains("2026-11-30") && e.contains("7d") && e.contains("RFC 3339"),
            "{bad}: {e}"
        );
        assert!(!e.contains("unit"), "{bad}: {e}");
        assert_eq!(e.lines().count(), 1, "{bad}: {e}");
    }
}

#[test]
fn the_unbounded_report_names_its_window_instead_of_placeholder_dates() {
    let (_dir, home) = store_with_history();
    let o = run(&home, &["report"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let first = stdout(&o).lines().next().unwrap_or_default().to_string();
    assert!(!first.contains("1970") && !first.contains("9999"), "{first}");
    assert!(first.contains("the first event .. now"), "{first}");
}

#[test]
fn a_zero_budget_is_refused_and_rm_removes_one_keeping_comments() {
    let (_dir, home) = store_with_history();
    let o = run(&home, &["budget", "set", "global", "daily", "0"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("more than 0"), "{}", stderr(&o));
    assert!(!home.join("budgets.toml").exists(), "a refused limit wrote the file");

    std::fs::write(
        home.join("budgets.toml"),
        "# ours\n[global]\ndaily = 4.0 # keep me\nweekly = 9.0\n",
    )
    .expect("write");
    let o = run(&home, &["budget", "rm", "global", "weekly"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(home.join("budgets.toml")).expect("read");
    assert!(
        text.contains("# ours") && text.contains("daily = 4.0 # keep me"),
        "{text}"
    );
    assert!(!text.contains("weekly"), "{text}");

    let o = run(&home, &["budget", "rm", "global", "weekly"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no global weekly limit"), "{}", stderr(&o));
}

/// `budget set <scope> <window>_tokens <n>` writes a token limit in whole
/// tokens (5M, 250k, 1_000 accepted); `list` shows it in tokens beside the
/// USD ones, says what is counted, and its JSON names the unit; `rm` takes
/// it out and leaves the USD limit of the same window.
#[test]
fn token_budgets_are_set_listed_in_tokens_and_removed() {
    let (_dir, home) = store_with_history();
    for args in [
        &["budget", "set", "global", "daily", "10"][..],
        &["budget", "set", "global", "daily_tokens", "5M"],
        &["budget", "set", "model", "gpt-4o", "monthly_tokens", "250k"],
    ] {
        let o = run(&home, args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    let o = run(&home, &["budget", "set", "global", "weekly_tokens", "1_500_000"]);
    assert!(
        stdout(&o).contains("global weekly_tokens limit set to 1.5M tokens"),
        "{}",
        stdout(&o)
    );
    let text = std::fs::read_to_string(home.join("budgets.toml")).expect("read");
    assert!(text.contains("daily_tokens = 5000000"), "{text}");
    assert!(text.contains("monthly_tokens = 250000"), "{text}");
    for (args, why) in [
        (
            &["budget", "set", "global", "daily_tokens", "0"][..],
            "more than 0 tokens",
        ),
        (
            &["budget", "set", "global", "daily_tokens", "lots"],
            "not a number of tokens",
        ),
        (
            &["budget", "set", "global", "hourly_tokens", "5"],
            "the same with _tokens (daily_tokens, 5h_tokens)",
        ),
    ] {
        let o = run(&home, args);
        assert!(!o.status.success(), "{args:?}");
        assert!(stderr(&o).contains(why), "{args:?}: {}", stderr(&o));
    }

    let o = run(&home, &["budget", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let list = stdout(&o);
    let row = list
        .lines()
        .find(|l| l.starts_with("global") && l.contains("daily_tokens"))
        .unwrap_or_else(|| panic!("no token row: {list}"));
    assert!(row.contains("5M") && !row.contains('$'), "{row}");
    assert!(list.contains("tokens counted: total"), "{list}");
    let o = run(&home, &["budget", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let budgets = v["budgets"].as_array().expect("budgets");
    let tokens = budgets
        .iter()
        .find(|b| b["key"] == "daily_tokens")
        .expect("the token budget");
    assert_eq!(tokens["unit"], "tokens");
    assert_eq!(tokens["limit_tokens"], 5_000_000.0);
    assert!(tokens.get("limit_usd").is_none(), "{tokens}");
    let usd = budgets.iter().find(|b| b["key"] == "daily").expect("the USD budget");
    assert_eq!(usd["limit_usd"], 10.0);

    let o = run(&home, &["budget", "forecast"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("daily_tokens"), "{}", stdout(&o));

    let o = run(&home, &["budget", "rm", "global", "daily_tokens"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(home.join("budgets.toml")).expect("read");
    let keys: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(
        !keys.iter().any(|l| l.starts_with("daily_tokens")) && keys.contains(&"daily = 10.0"),
        "{text}"
    );
}

#[test]
fn budget_list_shows_scope_defaults_which_limit_applies_and_the_zone() {
    let (_dir, home) = store_with_history();
    std::fs::write(
        home.join("budgets.toml"),
        "timezone = \"Europe/Paris\"\nalert_thresholds = [0.9, 0.5]\n[global]\ndaily = 10.0\n\
         [per_cron_job.default]\ndaily = 3.0\n\
         [per_cron_job.overrides.a-cron-job-id-much-longer-than-twenty-characters]\nweekly = 5.0\n",
    )
    .expect("write");
    let o = run(&home, &["budget", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("windows in Europe/Paris"), "{text}");
    assert!(
        text.contains("alerts at 50%, 90%; notice at 80%; hard at 100%"),
        "{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().find(|l| l.starts_with("scope")).expect("header");
    let default_row = lines
        .iter()
        .find(|l| l.starts_with("cron") && l.contains("(default)"))
        .unwrap_or_else(|| panic!("no scope default row: {text}"));
    assert!(default_row.contains("$3.00"), "{default_row}");
    let long = lines
        .iter()
        .find(|l| l.contains("a-cron-job-id-much-longer-than-twenty-characters") && l.contains("weekly"))
        .unwrap_or_else(|| panic!("no override row: {text}"));
    assert!(long.contains("override"), "{long}");
    // The id keeps its column: every row's window starts where the header's does.
    let col = header.find("window").expect("window column");
    for row in lines
        .iter()
        .filter(|l| l.starts_with("cron") || l.starts_with("global"))
    {
        let word = &row[col..col + 6];
        assert!(
            ["daily ", "weekly", "monthl"].contains(&word),
            "misaligned: {row:?} in\n{text}"
        );
    }

    let o = run(&home, &["budget", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["timezone"], "Europe/Paris");
    assert_eq!(v["alert_thresholds"], serde_json::json!([0.5, 0.9]));
    assert_eq!(
        (v["soft_threshold"].as_f64(), v["hard_threshold"].as_f64()),
        (Some(0.8), Some(1.0))
    );
    assert_eq!(v["scope_defaults"][0]["scope"], "cron");
    assert_eq!(v["scope_defaults"][0]["limit_usd"], 3.0);
    let over = v["budgets"]
        .as_array()
        .expect("budgets")
        .iter()
        .find(|b| b["window"] == "weekly")
        .expect("weekly override");
    assert_eq!(over["limit_of"], "override");
}

/// Polls `what` until it holds or 20 s pass.
fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ok() {
        assert!(std::time::Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The trace export lease of the store in `home`, if someone holds it now.
fn lease_holder(home: &Path) -> Option<String> {
    let store = hermes_meter_store::Writer::open_dir(home).expect("open");
    let now = hermes_meter_store::unix_now();
    store
        .export_state()
        .expect("export state")
        .lease
        .filter(|l| l.expires_at >= now)
        .map(|l| l.holder)
}

/// A port nothing listens on.
fn dead_endpoint() -> String {
    format!("http://{}", hermes_meter_test_support::free_addr())
}

#[test]
fn export_to_a_dead_collector_names_it_says_what_to_do_and_status_keeps_it() {
    let (_dir, home) = store_with_history();
    let endpoint = dead_endpoint();
    let started = std::time::Instant::now();
    let o = bin()
        .arg("--home")
        .arg(&home)
        .args(["export", "--since", "3650d", "--endpoint", &endpoint])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1));
    // The default timeout is one a person waits for (10 s), said up front.
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    let e = stderr(&o);
    assert!(e.contains("giving up after 10 s"), "{e}");
    let last = e.lines().last().unwrap_or_default();
    assert!(last.contains(&endpoint), "{e}");
    assert!(last.contains("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), "what to do: {e}");
    let status = run(&home, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status json");
    let recorded = v["export"]["last_error"].as_str().unwrap_or_default();
    assert!(recorded.contains(&endpoint), "status: {v}");
}

#[test]
fn export_marks_what_it_re_sent_as_exported() {
    let (_dir, home) = store_with_history();
    let receiver = hermes_meter_test_support::grpc(None, None);
    let pending = |home: &Path| {
        let store = hermes_meter_store::Writer::open_dir(home).expect("open");
        store.export_state().expect("state").pending
    };
    assert!(pending(&home) > 0, "the fixture leaves spans waiting");
    let o = run(
        &home,
        &["export", "--since", "3650d", "--endpoint", &receiver.grpc_endpoint()],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(receiver.received.span_count() > 0);
    assert!(stderr(&o).contains("accepted by"), "progress: {}", stderr(&o));
    assert_eq!(pending(&home), 0, "what export re-sent would be sent again");
}

#[test]
fn serve_drain_ends_with_an_error_when_the_collector_stays_down() {
    let (_dir, home) = store_with_history();
    let endpoint = dead_endpoint();
    let o = bin()
        .arg("--home")
        .arg(&home)
        .args([
            "serve",
            "--drain",
            "--drain-timeout-seconds",
            "2",
            "--endpoint",
            &endpoint,
        ])
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let last = stderr(&o).lines().last().unwrap_or_default().to_string();
    assert!(last.contains("serve --drain: gave up after 2 s"), "{last}");
    assert!(last.contains(&endpoint) && last.contains("still waiting"), "{last}");
    assert!(lease_holder(&home).is_none(), "the lease outlived serve");
}

#[test]
fn sigterm_releases_the_export_lease_at_once() {
    let (_dir, home) = store_with_history();
    let mut child = bin()
        .arg("--home")
        .arg(&home)
        .args(["serve", "--endpoint", &dead_endpoint()])
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    eventually("serve to take the lease", || lease_holder(&home).is_some());
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
    assert!(killed.success());
    let sent = std::time::Instant::now();
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(0));
    assert!(
        sent.elapsed() < std::time::Duration::from_secs(2),
        "took {:?}",
        sent.elapsed()
    );
    assert!(lease_holder(&home).is_none(), "the lease is held after SIGTERM");
}

#[test]
fn a_trace_only_backend_gets_one_line_naming_the_variable_and_no_retry_storm() {
    let (_dir, home) = store_with_history();
    let backend = hermes_meter_test_support::grpc_traces_only();
    let mut child = bin()
        .arg("--home")
        .arg(&home)
        .args(["serve", "--poll-ms", "20"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", backend.grpc_endpoint())
        .env("OTEL_METRIC_EXPORT_INTERVAL", "100")
        // Every metric export attempt is logged, repeats at debug.
        .env("HERMES_METER_LOG", "MetricExport=debug,warn")
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    // Traces still go; metrics are refused. Ten push intervals later...
    eventually("the spans", || backend.received.span_count() > 0);
    std::thread::sleep(std::time::Duration::from_millis(1000));
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().expect("stderr"), &mut err).expect("read");
    assert_eq!(child.wait().expect("wait").code(), Some(0), "{err}");
    let attempts: Vec<&str> = err.lines().filter(|l| l.contains("MetricExport.Failed")).collect();
    assert_eq!(attempts.len(), 1, "one attempt, one line:\n{err}");
    assert!(attempts[0].contains("OTEL_METRICS_EXPORTER=none"), "{}", attempts[0]);
    assert!(attempts[0].contains(&backend.grpc_endpoint()), "{}", attempts[0]);
    let status = run(&home, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status json");
    assert!(
        v.to_string().contains("OTEL_METRICS_EXPORTER=none"),
        "status keeps it: {v}"
    );
}

#[test]
fn serve_prometheus_alone_pushes_no_traces_and_says_what_it_serves() {
    let (_dir, home) = store_with_history();
    // A collector listening where the traces would go by default must get nothing.
    let collector = hermes_meter_test_support::grpc(None, None);
    let mut child = bin()
        .arg("--home")
        .arg(&home)
        .args(["serve", "--prometheus", "127.0.0.1:0"])
        .env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", collector.grpc_endpoint())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut said = String::new();
    while !said.contains("/metrics") {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut err, &mut line).expect("read") == 0 {
            break;
        }
        said.push_str(&line);
    }
    // Serving: a few of its steps.
    std::thread::sleep(std::time::Duration::from_millis(1000));
    assert_eq!(collector.received.span_count(), 0);
    let pending = hermes_meter_store::Writer::open_dir(&home)
        .expect("open")
        .export_state()
        .expect("state")
        .pending;
    assert!(pending > 0, "spans stay for a trace exporter");
    // It holds no trace lease: a Hermes process that sends traces sends
    // them while it runs (before, serve held the lease and sent nothing).
    assert_eq!(lease_holder(&home), None);
    let traces = hermes_meter_test_support::grpc(None, None);
    let env: std::collections::HashMap<&str, String> =
        [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", traces.grpc_endpoint())].into();
    let config = hermes_meter_runtime::export::ExportConfig::resolve(
        hermes_meter_runtime::export::ExportOverrides::default(),
        |k| env.get(k).cloned(),
    );
    let mut hermes =
        hermes_meter_runtime::export::Exporter::new(config, &home.join("hermes-meter.db")).expect("exporter");
    let step = hermes
        .flush(std::time::Instant::now() + std::time::Duration::from_secs(20))
        .expect("flush");
    assert!(step.error.is_none(), "{step:?}");
    assert_eq!(
        traces.wait_for_spans(pending as usize, std::time::Duration::from_secs(10)),
        pending as usize
    );
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    child.wait().expect("wait");
    assert!(said.contains("not pushing traces (--prometheus alone)"), "{said}");
    assert!(said.contains("serving Prometheus metrics"), "{said}");
}

#[test]
fn with_no_endpoint_configured_nothing_is_sent_and_status_says_so() {
    let (_dir, home) = store_with_history();
    // `serve` as a user starts it with no collector configured.
    let o = run(&home, &["serve", "--drain", "--drain-timeout-seconds", "5"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("nothing to send: no OTLP endpoint is configured"),
        "{}",
        stderr(&o)
    );
    let status = String::from_utf8_lossy(&run(&home, &["status"]).stdout).into_owned();
    assert!(
        status.contains("no OTLP endpoint configured: nothing is sent"),
        "{status}"
    );
    assert!(!status.contains("last error"), "no failed export to report: {status}");
    let o = run(&home, &["export", "--since", "1d"]);
    assert!(stderr(&o).contains("no OTLP endpoint is configured"), "{}", stderr(&o));
}

/// Ids and names carrying what a terminal acts on: an OSC that retitles
/// it, a CSI that clears it, CR/LF, a bidi override, NUL, a C1 control.
const HOSTILE_SESSION: &str = "s\u{1b}]0;pwned\u{7}\r\nfake line\u{202e}";
const HOSTILE_MODEL: &str = "gpt\u{1b}[2J\u{0}\u{9b}31m\u{2066}4o";
const HOSTILE_TOOL: &str = "read\u{7f}\u{200f}_file\n";

/// A store holding the `readfile` fixture with its session id, model and
/// tool name replaced by [`HOSTILE_SESSION`], [`HOSTILE_MODEL`] and
/// [`HOSTILE_TOOL`].
fn store_with_hostile_names() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let json = |s: &str| {
        let quoted = serde_json::to_string(s).expect("json string");
        quoted[1..quoted.len() - 1].to_string()
    };
    let text = std::fs::read_to_string(fixture("readfile.jsonl"))
        .expect("fixture")
        .replace("20261130_013735_bf4b63", &json(HOSTILE_SESSION))
        .replace("mock-model", &json(HOSTILE_MODEL))
        .replace("\"read_file\"", &format!("\"{}\"", json(HOSTILE_TOOL)));
    let path = dir.path().join("hostile.jsonl");
    std::fs::write(&path, text).expect("write");
    let home = dir.path().join("meter");
    let o = run(&home, &["replay", path.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    (dir, home)
}

/// The first character of `text` a terminal would act on, if any (LF
/// ends the lines the command itself prints).
fn raw_control(text: &str) -> Option<char> {
    text.chars().find(|&c| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

/// Whether a string of `v` is `wanted` (or, with `within`, holds it).
fn holds_string(v: &serde_json::Value, wanted: &str, within: bool) -> bool {
    match v {
        serde_json::Value::String(s) => s == wanted || (within && s.contains(wanted)),
        serde_json::Value::Array(a) => a.iter().any(|v| holds_string(v, wanted, within)),
        serde_json::Value::Object(m) => m.values().any(|v| holds_string(v, wanted, within)),
        _ => false,
    }
}

#[test]
fn control_characters_in_ids_and_names_are_printed_escaped_and_json_stays_exact() {
    let (_dir, home) = store_with_hostile_names();
    for args in [&["report"][..], &["trace", HOSTILE_SESSION], &["trace", "--last"]] {
        let o = run(&home, args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let out = stdout(&o);
        assert_eq!(raw_control(&out), None, "{args:?}:\n{out}");
        assert!(out.contains("s^[]0;pwned^G^M^Jfake line\\u{202e}"), "{args:?}:\n{out}");
        assert!(out.contains("gpt^[[2J^@\\u{9b}31m\\u{2066}4o"), "{args:?}:\n{out}");
    }
    let o = run(&home, &["trace", HOSTILE_SESSION]);
    assert!(stdout(&o).contains("read^?\\u{200f}_file^J"), "{}", stdout(&o));
    // Every table row is one line: the session's row starts with its id.
    let o = run(&home, &["report"]);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.starts_with("s^[]0;pwned^G^M^Jfake line\\u{202e}  ")),
        "{out}"
    );
    // JSON keeps the recorded values exactly (span names hold the model).
    for (args, wanted, within) in [
        (&["report", "--json"][..], [HOSTILE_SESSION, HOSTILE_MODEL], false),
        (
            &["trace", "--json", HOSTILE_SESSION],
            [HOSTILE_SESSION, HOSTILE_SESSION],
            false,
        ),
        (
            &["trace", "--json", HOSTILE_SESSION],
            [HOSTILE_MODEL, HOSTILE_TOOL],
            true,
        ),
    ] {
        let o = run(&home, args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        for w in wanted {
            assert!(holds_string(&v, w, within), "{args:?}: {w:?} not in {v}");
        }
    }
}

#[test]
fn report_and_status_say_how_many_calls_were_held_for_bogus_usage() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bogus.jsonl");
    let line = serde_json::json!({"hook": "post_api_request", "t": 1796002658.0,
        "kwargs": {"session_id": "s", "turn_id": "s:t", "api_request_id": "s:api:1", "model": "gpt-4o",
                   "usage": {"input_tokens": 1e30, "output_tokens": 1e30}}});
    std::fs::write(&path, format!("{line}\n")).expect("write");
    let home = dir.path().join("meter");
    let o = run(&home, &["replay", path.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&home, &["report"]);
    let out = stdout(&o);
    assert!(out.contains("total $0.0000"), "{out}");
    assert!(out.contains("held: 1 llm calls"), "{out}");
    let o = run(&home, &["status"]);
    assert!(stdout(&o).contains("held llm calls  1 "), "{}", stdout(&o));
    let o = run(&home, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["held_llm_calls"], 1);
    let o = run(&home, &["report", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["held_llm_calls"], 1);
}

/// `held confirm` bills a held call from its usage, and the confirmation is
/// journaled: a store rebuilt from its journal still bills it.
#[test]
fn a_confirmed_held_call_stays_billed_through_a_rebuild() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("huge.jsonl");
    let line = serde_json::json!({"hook": "post_api_request", "t": 1796002658.0,
        "kwargs": {"session_id": "s", "turn_id": "s:t", "api_request_id": "s:api:1", "model": "gpt-4o",
                   "usage": {"input_tokens": 60_000_000, "output_tokens": 0}}});
    std::fs::write(&path, format!("{line}\n")).expect("write");
    let home = dir.path().join("meter");
    assert!(run(&home, &["replay", path.to_str().expect("utf-8 path")])
        .status
        .success());
    let o = run(&home, &["held", "list"]);
    assert!(
        stdout(&o).contains("s:api:1  session s  gpt-4o  input 60000000"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("confirming bills $150.0000"), "{}", stdout(&o));
    let o = run(&home, &["held", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v[0]["api_request_id"], "s:api:1");

    let o = run(&home, &["held", "confirm", "s:api:1", "s:api:404"]);
    assert_eq!(o.status.code(), Some(1), "an unknown id fails the command");
    assert!(
        stdout(&o).contains("s:api:1: confirmed, billed $150.0000"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("no LLM call s:api:404"), "{}", stderr(&o));
    let billed = |home: &std::path::Path| {
        let o = run(home, &["report", "--since", "2026-01-01", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
        (
            v["totals"]["cost_usd"].as_f64().expect("cost"),
            v["held_llm_calls"].as_i64().expect("held"),
        )
    };
    assert_eq!(billed(&home), (150.0, 0));
    let o = run(&home, &["held", "confirm", "s:api:1"]);
    assert!(stdout(&o).contains("not held"), "{}", stdout(&o));
    assert_eq!(billed(&home), (150.0, 0), "confirmed once");

    let o = run(&home, &["doctor", "--rebuild", "--force"]);
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert_eq!(billed(&home), (150.0, 0), "the rebuilt store bills it too");
}

/// `budget set|rm session|run <unit>` edits the caps; `budget list` shows
/// them and what each running session and its open run used of them.
#[test]
fn budget_caps_are_set_listed_with_running_sessions_and_removed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    // A session still running: one turn open, two tool calls and a call
    // of 10,000 input tokens.
    let calls = dir.path().join("open.jsonl");
    // Now, or the replay's idle sweep would close it.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let line = |hook: &str, t: f64, kwargs: serde_json::Value| {
        serde_json::json!({"hook": hook, "t": now - 20.0 + t, "kwargs": kwargs}).to_string()
    };
    let lines = [
        line(
            "pre_llm_call",
            10.0,
            serde_json::json!({"session_id": "live", "turn_id": "live:1", "model": "gpt-4o"}),
        ),
        line(
            "pre_tool_call",
            11.0,
            serde_json::json!({"session_id": "live", "tool_call_id": "c1", "tool_name": "terminal"}),
        ),
        line(
            "pre_tool_call",
            12.0,
            serde_json::json!({"session_id": "live", "tool_call_id": "c2", "tool_name": "terminal"}),
        ),
        line(
            "post_api_request",
            13.0,
            serde_json::json!({"session_id": "live", "turn_id": "live:1", "api_request_id": "a1", "model": "gpt-4o",
                               "api_duration": 0.5, "usage": {"input_tokens": 10_000, "output_tokens": 0}}),
        ),
    ];
    std::fs::write(&calls, lines.join("\n") + "\n").expect("write calls");
    let o = run(&home, &["replay", calls.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));

    for args in [
        &["budget", "set", "run", "tool_calls", "2"][..],
        &["budget", "set", "session", "usd", "0.05"],
        &["budget", "set", "session", "tokens", "1_000_000"],
    ] {
        let o = run(&home, args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    assert!(stdout(&run(&home, &["budget", "set", "run", "usd", "1"])).contains("per-run usd cap set to $1.00"));
    let text = std::fs::read_to_string(home.join("budgets.toml")).expect("read");
    assert!(text.contains("[per_run]") && text.contains("tool_calls = 2"), "{text}");
    assert!(text.contains("tokens = 1000000"), "{text}");

    let o = run(&home, &["budget", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let list = stdout(&o);
    assert!(list.contains("per-run      tool_calls  2 tool calls"), "{list}");
    let run_row = list
        .lines()
        .find(|l| l.starts_with("run") && l.contains("tool_calls"))
        .unwrap_or_else(|| panic!("no open run row: {list}"));
    assert!(run_row.contains("live:1") && run_row.ends_with("hard"), "{run_row}");
    let usd_row = list
        .lines()
        .find(|l| l.starts_with("session") && l.contains(" usd "))
        .unwrap_or_else(|| panic!("no session row: {list}"));
    assert!(
        usd_row.contains("$0.03") && usd_row.contains("50") && usd_row.ends_with("ok"),
        "{usd_row}"
    );

    let o = run(&home, &["budget", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["tokens_counted"], "total");
    assert_eq!(v["runaway"]["action"], "alert", "the runaway watch is on by default");
    assert!(
        v["downgrade"].is_null(),
        "no downgrade unless asked: {}",
        v["downgrade"]
    );
    assert!(
        list.contains("runaway watch: alert at 10 identical tool calls in a row"),
        "{list}"
    );
    assert_eq!(v["caps"].as_array().map(Vec::len), Some(4));
    let tokens = v["open_caps"]
        .as_array()
        .expect("open caps")
        .iter()
        .find(|c| c["scope"] == "session" && c["unit"] == "tokens")
        .cloned()
        .expect("the session's token cap");
    assert_eq!(
        (tokens["id"].as_str(), tokens["used"].as_f64()),
        (Some("live"), Some(10_000.0))
    );

    // Bad words and limits are refused before the file is touched.
    for (args, said) in [
        (&["budget", "set", "run", "tool_calls", "0"][..], "more than 0"),
        (&["budget", "set", "run", "tool_calls", "2.5"], "not a tool_calls limit"),
        (&["budget", "set", "session", "minutes", "5"], "unknown cap unit"),
        (
            &["budget", "rm", "session", "tool_calls"],
            "no per-session tool_calls cap",
        ),
    ] {
        let o = run(&home, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains(said), "{args:?}: {}", stderr(&o));
    }
    // status says what the runaway watch does and where alerts go, without
    // the webhook's path (a Slack URL's path is its key).
    let status = stdout(&run(&home, &["status"]));
    assert!(
        status.contains("runaway watch   alert at 10 identical tool calls"),
        "{status}"
    );
    assert!(status.contains("alert webhook   off"), "{status}");
    let o = bin()
        .arg("--home")
        .arg(&home)
        .arg("status")
        .env(
            "HERMES_METER_ALERT_WEBHOOK",
            "https://hooks.example.com/services/T0/B0/secret",
        )
        .env("HERMES_METER_ALERT_WEBHOOK_FORMAT", "slack")
        .output()
        .expect("status");
    let status = stdout(&o);
    assert!(
        status.contains("alert webhook   https://hooks.example.com/… (slack): 0 posted"),
        "{status}"
    );
    assert!(!status.contains("secret"), "{status}");

    let o = run(&home, &["budget", "rm", "run", "tool_calls"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = std::fs::read_to_string(home.join("budgets.toml")).expect("read");
    assert!(!text.lines().any(|l| l.starts_with("tool_calls")), "{text}");
    assert!(text.contains("usd = 1.0"), "the run's other cap stays: {text}");
}

/// A downgrade is shown as `budget list` reads it: which model goes to which.
#[test]
fn budget_list_shows_the_downgrade_routes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    std::fs::create_dir_all(&home).expect("home");
    let o = run(&home, &["budget", "set", "global", "daily", "10"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let path = home.join("budgets.toml");
    let mut text = std::fs::read_to_string(&path).expect("read");
    text.push_str(
        "[downgrade]\nat = 0.5\nto = \"gpt-4o-mini\"\n[downgrade.models]\n\"claude-opus-4\" = \"claude-haiku-4\"\n",
    );
    std::fs::write(&path, text).expect("write");
    let o = run(&home, &["budget", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let list = stdout(&o);
    assert!(
        list.contains("downgrade at 50%: claude-opus-4 -> claude-haiku-4, any other -> gpt-4o-mini"),
        "{list}"
    );
    let o = run(&home, &["budget", "list", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["downgrade"]["at"], 0.5);
    assert_eq!(v["downgrade"]["to"], "gpt-4o-mini");
    assert_eq!(v["downgrade"]["models"]["claude-opus-4"], "claude-haiku-4");
}

/// Hermes users keep their settings in `$HERMES_HOME/.env`, which Hermes
/// loads itself: the standalone command line reads the same file, under
/// the real environment, and `status` says where each value came from.
#[test]
fn settings_in_hermes_env_file_apply_to_the_command_line_too() {
    let (dir, home) = store_with_history();
    let hermes_home = dir.path().join("hermes");
    std::fs::create_dir_all(&hermes_home).expect("hermes home");
    std::fs::write(
        hermes_home.join(".env"),
        "# Hermes settings\nOTEL_EXPORTER_OTLP_ENDPOINT=http://collector.example:4317\nOTEL_SERVICE_NAME='from-dotenv'\n",
    )
    .expect(".env");
    let status = |extra: &[(&str, &str)]| -> serde_json::Value {
        let mut cmd = bin();
        cmd.env("HERMES_HOME", &hermes_home);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let o = cmd
            .arg("--home")
            .arg(&home)
            .args(["status", "--json"])
            .output()
            .expect("status");
        serde_json::from_slice(&o.stdout).expect("status json")
    };
    let setting = |v: &serde_json::Value, name: &str| -> (String, String) {
        let row = v["export_settings"]
            .as_array()
            .expect("settings")
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .clone();
        (
            row["value"].as_str().unwrap_or_default().to_string(),
            row["source"].as_str().unwrap_or_default().to_string(),
        )
    };
    let v = status(&[]);
    let (endpoint, source) = setting(&v, "endpoint");
    assert_eq!(endpoint, "http://collector.example:4317");
    assert!(source.contains(".env"), "{source}");
    // The real environment wins over the file.
    let v = status(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4317")]);
    assert_eq!(
        setting(&v, "endpoint"),
        ("http://other:4317".into(), "env OTEL_EXPORTER_OTLP_ENDPOINT".into())
    );
}

/// Session ids and model names are Hermes's strings, so anything: ESC, OSC
/// (a terminal title, a hidden link), BEL, CR, LF. No command prints one
/// raw to the terminal.
#[test]
fn control_characters_in_recorded_strings_never_reach_the_terminal_raw() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = std::fs::read_to_string(fixture("readfile.jsonl")).expect("fixture");
    let first: serde_json::Value = serde_json::from_str(text.lines().next().expect("a line")).expect("json");
    let sid = first["kwargs"]["session_id"].as_str().expect("session id").to_string();
    let hostile_sid = "s\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nFAKE";
    let hostile_model = "m\u{1b}[31mRED\u{1b}]8;;http://evil\u{1b}\\link\u{1b}]8;;\u{1b}\\\u{7}\r";
    let json_inner = |s: &str| {
        let quoted = serde_json::to_string(s).expect("json");
        quoted[1..quoted.len() - 1].to_string()
    };
    let text = text
        .replace(&json_inner(&sid), &json_inner(hostile_sid))
        .replace("\"mock-model\"", &serde_json::to_string(hostile_model).expect("json"));
    let file = dir.path().join("hostile.jsonl");
    std::fs::write(&file, text).expect("write");
    let home = dir.path().join("meter");
    let o = run(&home, &["replay", file.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    for args in [
        &["report"][..],
        &["report", "--by", "session"],
        &["report", "--by", "model"],
        &["trace", "--last"],
        &["status"],
        &["budget", "list"],
    ] {
        let o = run(&home, args);
        let raw: Vec<u8> = o
            .stdout
            .iter()
            .chain(o.stderr.iter())
            .copied()
            .filter(|b| *b < 0x20 && *b != b'\n' && *b != b'\t' || *b == 0x7f)
            .collect();
        assert!(raw.is_empty(), "{args:?} printed raw control bytes {raw:?}");
        assert!(
            !String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.starts_with("FAKE")),
            "{args:?}: a line break from a session id"
        );
    }
}

#[test]
fn every_command_is_in_the_cli_manual() {
    let help = bin().arg("--help").output().expect("help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let manual = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cli.md")).expect("docs/cli.md");
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 12, "{help}");
    for c in commands {
        assert!(manual.contains(&format!("hermes-meter {c}")), "docs/cli.md lacks `{c}`");
    }
}

#[test]
fn with_no_store_yet_status_names_the_sessions_hermes_ran_without_the_plugin() {
    // A plugin Hermes dropped from its very first run: no store was ever
    // made, and Hermes's own session database holds that run.
    let dir = tempfile::tempdir().expect("temp dir");
    let hermes_home = dir.path().join("hermes");
    std::fs::create_dir_all(&hermes_home).expect("mkdir");
    let conn = rusqlite::Connection::open(hermes_home.join("state.db")).expect("state.db");
    conn.execute_batch(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL, parent_session_id TEXT, title TEXT)",
    )
    .expect("schema");
    let at = hermes_meter_store::unix_now() - 60.0;
    conn.execute(
        "INSERT INTO sessions (id, source, started_at) VALUES ('20261206_lost', 'cli', ?1)",
        [at],
    )
    .expect("session");
    let home = hermes_home.join("meter");
    let o = bin()
        .arg("--home")
        .arg(&home)
        .arg("status")
        .env("HERMES_HOME", &hermes_home)
        .output()
        .expect("status");
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].contains("no store yet") && lines[0].contains("1 Hermes problem(s)"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("PROBLEM         Hermes ran 1 session(s)") && lines[1].contains("20261206_lost"),
        "{out}"
    );
    assert!(!home.exists());
    let o = bin()
        .arg("--home")
        .arg(&home)
        .args(["status", "--json"])
        .env("HERMES_HOME", &hermes_home)
        .output()
        .expect("status");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["hermes"]["sessions"]["missing"][0]["session_id"], "20261206_lost");

    // With a store, a session Hermes ran that it has no run of still fails
    // status (a cron health check reads the exit code); once that session
    // is recorded it passes.
    let o = run(&home, &["replay", fixture("cron.jsonl").to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The plugin's process that ran then, which reported its load.
    let now = hermes_meter_store::unix_now();
    let mut tracker = hermes_meter_store::health::Tracker::new(now - 120.0);
    tracker
        .hermes(
            serde_json::json!({"hermes_version": "0.19.0", "load": "ok", "register_ms": 3.0, "points": []}),
            now - 119.0,
        )
        .expect("report");
    tracker.write(&home, now).expect("health.json");
    let status = || {
        bin()
            .arg("--home")
            .arg(&home)
            .arg("status")
            .env("HERMES_HOME", &hermes_home)
            .output()
            .expect("status")
    };
    let o = status();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("PROBLEM         Hermes ran 1 session(s)"),
        "{}",
        stdout(&o)
    );
    conn.execute("DELETE FROM sessions", []).expect("forget it");
    let o = status();
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

/// `report --price-as MODEL` re-prices every call of the window with its
/// own tokens at MODEL's rates, beside what the calls were billed; a model
/// with no price is one line on stderr (exit 1).
#[test]
fn report_price_as_reprices_each_calls_tokens_at_another_models_rates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(
        home.join("pricing.toml"),
        "[models.\"mock-model\"]\ninput = 3.0\noutput = 15.0\n\n\
         [models.\"cheap-1\"]\ninput = 0.5\noutput = 2.0\ncache_read = 0.5\ncache_write = 0.5\n",
    )
    .expect("prices");
    for name in ["failonce.jsonl", "delegate_sync.jsonl", "multi_turn.jsonl"] {
        let o = run(&home, &["replay", fixture(name).to_str().expect("utf-8 path")]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let report: serde_json::Value =
        serde_json::from_slice(&run(&home, &["report", "--json"]).stdout).expect("report json");
    let t = &report["totals"];
    let tokens = |k: &str| t[k].as_i64().expect("a count");
    let o = run(&home, &["report", "--json", "--price-as", "cheap-1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let p = &v["price_as"]["totals"];
    assert_eq!(p["llm_calls"], t["llm_calls"]);
    let input = tokens("input_tokens") + tokens("cache_read_tokens") + tokens("cache_write_tokens");
    assert_eq!(p["input_tokens"].as_i64(), Some(input));
    let want = (input as f64 * 0.5 + tokens("output_tokens") as f64 * 2.0) / 1e6;
    let got = p["at_price_usd"].as_f64().expect("a cost");
    assert!((got - want).abs() < 1e-9, "{got} {want}");
    let billed = p["billed_usd"].as_f64().expect("billed");
    assert!((billed - t["cost_usd"].as_f64().expect("cost")).abs() < 1e-9 && billed > got);
    // Grouped by the model billed and the kind of session; the subagent's
    // calls are its own kind.
    assert_eq!(v["price_as"]["by_model"]["mock-model"], *p);
    assert!(
        v["price_as"]["by_kind"]["subagent"]["llm_calls"].as_i64() > Some(0),
        "{v}"
    );
    assert!(v["caveats"][0].as_str().expect("a caveat").contains("tokenizer"));

    let o = run(&home, &["report", "--price-as", "cheap-1"]);
    let text = stdout(&o);
    assert!(text.contains(&format!("would have cost ${got:.4}")), "{text}");
    assert!(
        text.contains("by kind of session") && text.contains("caveats:"),
        "{text}"
    );

    let o = run(&home, &["report", "--price-as", "no-such-model\x1b[2J"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no price for no-such-model") && !stderr(&o).contains('\x1b'),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty());
}

/// A copy of fixture `name` with every record's time (and every time in
/// its calls' arguments) moved so that the first record is at `at`.
fn fixture_at(dir: &Path, name: &str, at: f64) -> PathBuf {
    let text = std::fs::read_to_string(fixture(name)).expect("fixture");
    let records: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let first = records[0]["t"].as_f64().expect("a time");
    let lines: Vec<String> = records
        .into_iter()
        .map(|mut r| {
            let t = r["t"].as_f64().expect("a time");
            r["t"] = serde_json::json!(t - first + at);
            if let Some(kwargs) = r["kwargs"].as_object_mut() {
                for v in kwargs.values_mut() {
                    // Unix times (not counts or token figures).
                    if let Some(time) = v.as_f64().filter(|x| (1.7e9..2.0e9).contains(x)) {
                        *v = serde_json::json!(time - first + at);
                    }
                }
            }
            r.to_string()
        })
        .collect();
    let path = dir.join(name);
    std::fs::write(&path, lines.join("\n")).expect("write");
    path
}

/// `report --digest day`: yesterday against the day before, with the top
/// rows, what grew out of line and the budgets now.
#[test]
fn the_digest_compares_the_last_complete_day_with_the_one_before() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("meter");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(
        home.join("pricing.toml"),
        "[models.\"mock-model\"]\ninput = 3.0\noutput = 15.0\n",
    )
    .expect("prices");
    std::fs::write(home.join("budgets.toml"), "[global]\nweekly = 50\n").expect("budgets");
    let midnight = (hermes_meter_store::unix_now() / 86_400.0).floor() * 86_400.0;
    let yesterday = fixture_at(dir.path(), "multi_turn.jsonl", midnight - 12.0 * 3600.0);
    let before = fixture_at(dir.path(), "failonce.jsonl", midnight - 36.0 * 3600.0);
    for f in [&yesterday, &before] {
        let o = run(&home, &["replay", f.to_str().expect("utf-8")]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let window = |since: f64, until: f64| -> serde_json::Value {
        let at = |t: f64| jiff::Timestamp::from_second(t as i64).expect("time").to_string();
        let o = run(
            &home,
            &[
                "report",
                "--json",
                "--tz",
                "UTC",
                "--since",
                &at(since),
                "--until",
                &at(until),
            ],
        );
        serde_json::from_slice(&o.stdout).expect("report")
    };
    let day = window(midnight - 86_400.0, midnight);
    let previous = window(midnight - 2.0 * 86_400.0, midnight - 86_400.0);
    let o = run(&home, &["report", "--digest", "day", "--tz", "UTC", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).expect("digest");
    assert_eq!(d["schema"], "hermes-meter.digest.v1");
    assert_eq!(d["current"]["totals"], day["totals"]);
    assert_eq!(d["previous"]["totals"], previous["totals"]);
    let (now, then) = (
        day["totals"]["cost_usd"].as_f64().expect("cost"),
        previous["totals"]["cost_usd"].as_f64().expect("cost"),
    );
    assert!(now > 0.0 && then > 0.0, "{day} {previous}");
    let change = d["cost_change_pct"].as_f64().expect("a change");
    assert!((change - 100.0 * (now - then) / then).abs() < 1e-6, "{d}");
    assert_eq!(d["top_sessions"][0]["key"], "20261130_013856_a599de", "{d}");
    assert_eq!(d["top_models"][0]["key"], "mock-model");
    // The one model is all of the day: out of line exactly when it at least doubled.
    assert_eq!(
        d["anomalies"].as_array().expect("a list").len(),
        usize::from(now >= 2.0 * then),
        "{d}"
    );
    assert_eq!(d["budgets"][0]["limit"], "weekly");
    assert_eq!(d["budgets"][0]["amount"], 50.0);

    let text = stdout(&run(&home, &["report", "--digest", "day", "--tz", "UTC"]));
    assert!(text.starts_with("hermes-meter digest of the day "), "{text}");
    assert!(
        text.contains(&format!("spent ${now:.4}")) && text.contains("budget global weekly:"),
        "{text}"
    );
    for wrong in [
        &["report", "--digest", "month"][..],
        &["report", "--digest", "day", "--since", "1d"],
    ] {
        assert_eq!(run(&home, wrong).status.code(), Some(2), "{wrong:?}");
    }
}
