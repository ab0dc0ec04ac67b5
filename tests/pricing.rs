//! `hermes-meter pricing` as an operator uses it: which price a model gets
//! and why, a price list read into pricing.toml from a file or a URL (a
//! loopback HTTP server here), and what bad input gets. (`pricing drift`
//! needs Hermes's own Python: tests/e2e/test_scenarios.py runs it.)

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn run(home: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hermes-meter"));
    for var in ["HERMES_METER_HOME", "HERMES_HOME", "HERMES_METER_LOG", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    // Nothing in a test leaves loopback, not even through a proxy.
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    cmd.arg("--home")
        .arg(home)
        .args(args)
        .output()
        .expect("run hermes-meter")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn show(home: &Path, model: &str, provider: Option<&str>) -> Value {
    let mut args = vec!["pricing", "show", model, "--json"];
    if let Some(p) = provider {
        args.extend(["--provider", p]);
    }
    let o = run(home, &args);
    assert!(o.status.success(), "{}", err(&o));
    serde_json::from_str(&out(&o)).expect("show --json is JSON")
}

/// OpenRouter's /models shape, two models.
const OPENROUTER: &str = r#"{"data": [
    {"id": "anthropic/claude-sonnet-4.5", "pricing": {"prompt": "0.0000033", "completion": "0.0000165",
     "input_cache_read": "0.00000033", "input_cache_write": "0.000004125"}},
    {"id": "vendor/new-model", "pricing": {"prompt": "0.000001", "completion": "0.000004"}},
    {"id": "openrouter/auto", "pricing": {"prompt": "-1", "completion": "-1"}}
]}"#;

#[test]
fn show_names_the_price_and_the_entry_it_came_from() {
    let home = tempfile::tempdir().expect("temp dir");
    let s = show(home.path(), "anthropic/claude-opus-4.7", None);
    assert_eq!(
        (s["source"].as_str(), s["entry"].as_str()),
        (Some("builtin"), Some("claude-opus-4-7"))
    );
    assert_eq!((s["input"].as_f64(), s["output"].as_f64()), (Some(5.0), Some(25.0)));
    // Cache writes default to 1.25 × input, shown resolved.
    assert_eq!(s["cache_write"].as_f64(), Some(6.25));
    std::fs::write(
        home.path().join("pricing.toml"),
        "[models.\"gemini-2.5-pro\"]\ninput = 1.25\noutput = 10.0\nabove_tokens = 200000\n\
         above = { input = 2.5, output = 15.0 }\n\
         [providers.openrouter.models.\"google/gemini-2.5-pro\"]\ninput = 1.5\noutput = 11.0\n",
    )
    .expect("write pricing");
    let s = show(home.path(), "google/gemini-2.5-pro", None);
    assert_eq!(
        (s["source"].as_str(), s["above_tokens"].as_i64()),
        (Some("user"), Some(200_000))
    );
    assert_eq!(s["above"]["input"].as_f64(), Some(2.5));
    assert!(s["file"].as_str().is_some_and(|f| f.ends_with("pricing.toml")));
    let s = show(home.path(), "google/gemini-2.5-pro", Some("OpenRouter"));
    assert_eq!(
        (s["entry_provider"].as_str(), s["input"].as_f64()),
        (Some("openrouter"), Some(1.5))
    );
    let s = show(home.path(), "mock-model", None);
    assert_eq!((s["source"].as_str(), s["input"].as_f64()), (Some("unknown"), None));
    let text = out(&run(home.path(), &["pricing", "show", "google/gemini-2.5-pro"]));
    assert!(
        text.contains("your pricing file") && text.contains("above 200000 prompt tokens"),
        "{text}"
    );
}

#[test]
fn update_from_a_file_shows_a_diff_and_keeps_the_users_entries() {
    let home = tempfile::tempdir().expect("temp dir");
    let pricing = home.path().join("pricing.toml");
    let mine = "# negotiated with our vendor\n[models.\"vendor/own\"]\ninput = 1.0\noutput = 2.0\n";
    std::fs::write(&pricing, mine).expect("write pricing");
    let list = home.path().join("models.json");
    std::fs::write(&list, OPENROUTER).expect("write list");
    let from = list.to_str().expect("utf-8 path");

    let dry = run(home.path(), &["pricing", "update", "--from", from, "--dry-run"]);
    assert!(dry.status.success(), "{}", err(&dry));
    let text = out(&dry);
    assert!(
        text.contains("+[providers.openrouter.models.\"vendor/new-model\"]"),
        "{text}"
    );
    assert!(
        text.contains("2 added, 0 changed, 0 unchanged") && text.contains("1 left out"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(&pricing).expect("read"),
        mine,
        "a dry run writes nothing"
    );

    let o = run(home.path(), &["pricing", "update", "--from", from]);
    assert!(o.status.success(), "{}", err(&o));
    let written = std::fs::read_to_string(&pricing).expect("read");
    assert!(
        written.starts_with(mine),
        "the user's lines stay first and untouched:\n{written}"
    );
    let s = show(home.path(), "anthropic/claude-sonnet-4.5", Some("openrouter"));
    assert_eq!((s["source"].as_str(), s["input"].as_f64()), (Some("user"), Some(3.3)));
    assert_eq!(s["cache_write"].as_f64(), Some(4.125));
    // Through another provider the model keeps the built-in price.
    assert_eq!(
        show(home.path(), "anthropic/claude-sonnet-4.5", Some("anthropic"))["input"].as_f64(),
        Some(3.0)
    );
    // Again: nothing changes, nothing is written.
    let again = run(home.path(), &["pricing", "update", "--from", from]);
    assert!(
        out(&again).contains("0 added, 0 changed, 2 unchanged"),
        "{}",
        out(&again)
    );
    assert_eq!(std::fs::read_to_string(&pricing).expect("read"), written);
    // --model narrows what is read.
    let one = run(
        home.path(),
        &["pricing", "update", "--from", from, "--model", "vendor/", "--dry-run"],
    );
    assert!(out(&one).contains("0 added, 0 changed, 1 unchanged"), "{}", out(&one));
}

#[test]
fn update_imports_openrouters_long_context_overrides_and_says_what_it_cannot() {
    // OpenRouter's model list, its long-context override beside the base
    // prices (#109976), and an override on something else than the prompt.
    let home = tempfile::tempdir().expect("temp dir");
    let list = home.path().join("models.json");
    std::fs::write(
        &list,
        r#"{"data": [{"id": "openai/gpt-5.5", "pricing": {"prompt": "0.000005", "completion": "0.00003",
            "input_cache_read": "0.0000005", "overrides": [
              {"min_prompt_tokens": 272000, "prompt": "0.00001", "completion": "0.000045", "input_cache_read": "0.000001"},
              {"time_of_day": "off-peak", "prompt": "0.0000025"}]}}]}"#,
    )
    .expect("write list");
    let o = run(
        home.path(),
        &["pricing", "update", "--from", list.to_str().expect("utf-8 path")],
    );
    assert!(o.status.success(), "{}", err(&o));
    let text = out(&o);
    assert!(text.contains("1 added") && text.contains("0 left out"), "{text}");
    assert!(
        text.contains("openai/gpt-5.5: an override on time_of_day is not a context tier"),
        "{text}"
    );
    let s = show(home.path(), "openai/gpt-5.5", Some("openrouter"));
    assert_eq!(s["above_tokens"].as_i64(), Some(271_999), "{s}");
    assert_eq!(
        (
            s["above"]["input"].as_f64(),
            s["above"]["output"].as_f64(),
            s["above"]["cache_read"].as_f64()
        ),
        (Some(10.0), Some(45.0), Some(1.0)),
        "{s}"
    );
}

#[test]
fn a_new_price_from_a_list_is_a_dated_change_and_show_says_it() {
    // Yesterday's rates are in the file; the list now says dearer: the
    // entry keeps them for the calls before today, a change from today
    // holds the new ones.
    let home = tempfile::tempdir().expect("temp dir");
    let pricing = home.path().join("pricing.toml");
    std::fs::write(
        &pricing,
        "[providers.openrouter.models.\"vendor/new-model\"]\ninput = 0.5\noutput = 4.0\n",
    )
    .expect("write pricing");
    let list = home.path().join("models.json");
    std::fs::write(&list, OPENROUTER).expect("write list");
    let from = list.to_str().expect("utf-8 path");
    let o = run(
        home.path(),
        &["pricing", "update", "--from", from, "--model", "vendor/"],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(out(&o).contains("0 added, 1 changed, 0 unchanged"), "{}", out(&o));
    let today = jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date()
        .to_string();
    let written = std::fs::read_to_string(&pricing).expect("read");
    assert!(
        written.contains("input = 0.5\n")
            && written.contains(&format!("changes = [{{ from = \"{today}\", input = 1.0 }}]")),
        "{written}"
    );
    // In force now: the list's price; the same list again changes nothing.
    let s = show(home.path(), "vendor/new-model", Some("openrouter"));
    assert_eq!(
        s["schedule"][0].as_str(),
        Some(format!("from {today}T00:00:00Z: input $1").as_str()),
        "{s}"
    );
    let again = run(
        home.path(),
        &["pricing", "update", "--from", from, "--model", "vendor/"],
    );
    assert!(
        out(&again).contains("0 added, 0 changed, 1 unchanged"),
        "{}",
        out(&again)
    );
}

#[test]
fn update_from_a_url_reads_the_list_over_http() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}/api/v1/models", listener.local_addr().expect("addr"));
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        let mut request_line = String::new();
        BufReader::new(&conn)
            .read_line(&mut request_line)
            .expect("read request");
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            OPENROUTER.len()
        );
        conn.write_all(head.as_bytes())
            .and_then(|()| conn.write_all(OPENROUTER.as_bytes()))
            .expect("answer");
        request_line
    });
    let home = tempfile::tempdir().expect("temp dir");
    let o = run(home.path(), &["pricing", "update", "--from", &url]);
    assert!(o.status.success(), "{}", err(&o));
    assert!(server.join().expect("server").starts_with("GET /api/v1/models "));
    assert_eq!(
        show(home.path(), "vendor/new-model", Some("openrouter"))["output"].as_f64(),
        Some(4.0)
    );
}

#[test]
fn bad_lists_and_unreachable_urls_get_one_line_and_change_nothing() {
    let home = tempfile::tempdir().expect("temp dir");
    let pricing = home.path().join("pricing.toml");
    std::fs::write(&pricing, "[models.m]\ninput = 1.0\noutput = 1.0\n").expect("write pricing");
    let bad = home.path().join("bad.json");
    std::fs::write(&bad, "<html>not a price list</html>").expect("write");
    let list = home.path().join("models.json");
    std::fs::write(&list, OPENROUTER).expect("write list");
    // A port nothing listens on: bind one, then free it.
    let closed = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let dead = format!("http://{closed}/models");
    for (args, says) in [
        (vec!["--from", bad.to_str().unwrap()], "not JSON"),
        (vec!["--from", "/no/such/file.json"], "/no/such/file.json"),
        (vec!["--from", dead.as_str()], dead.as_str()),
        (
            vec!["--from", list.to_str().unwrap(), "--model", "nothing/"],
            "no model",
        ),
    ] {
        let o = run(home.path(), &[&["pricing", "update"][..], &args].concat());
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let e = err(&o);
        assert!(e.contains(says) && e.lines().count() == 1, "{args:?}: {e}");
    }
    assert_eq!(
        std::fs::read_to_string(&pricing).expect("read"),
        "[models.m]\ninput = 1.0\noutput = 1.0\n"
    );
    // A pricing file the plugin would refuse is not written over either.
    std::fs::write(&pricing, "[models.m]\ninput = -1.0\noutput = 1.0\n").expect("write");
    let o = run(home.path(), &["pricing", "show", "m"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("not negative"), "{}", err(&o));
}
