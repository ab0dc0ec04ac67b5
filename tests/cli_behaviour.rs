//! The `hermes-otel` binary as an operator meets it: a closed pipe, a
//! mistyped directory or file, a window the wrong way round, a budget of
//! $0. Each mistake gets one line saying what to do and touches nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hermes-otel"));
    // The caller's own settings must not leak into what is tested.
    for var in ["HERMES_OTEL_HOME", "HERMES_HOME", "HERMES_OTEL_LOG", "RUST_LOG"] {
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
        .expect("run hermes-otel")
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
    let home = dir.path().join("otel");
    let o = run(&home, &["replay", fixture("cron.jsonl").to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    (dir, home)
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

#[test]
fn a_home_that_does_not_exist_is_an_error_and_stays_absent() {
    let dir = tempfile::tempdir().expect("temp dir");
    let typo = dir.path().join("otle");
    for args in [
        &["status"][..],
        &["report"],
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
    let home = dir.path().join("otel");
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

#[test]
fn budget_list_shows_scope_defaults_which_limit_applies_and_the_zone() {
    let (_dir, home) = store_with_history();
    std::fs::write(
        home.join("budgets.toml"),
        "timezone = \"Europe/Paris\"\n[global]\ndaily = 10.0\n\
         [per_cron_job.default]\ndaily = 3.0\n\
         [per_cron_job.overrides.a-cron-job-id-much-longer-than-twenty-characters]\nweekly = 5.0\n",
    )
    .expect("write");
    let o = run(&home, &["budget", "list"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("windows in Europe/Paris"), "{text}");
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
