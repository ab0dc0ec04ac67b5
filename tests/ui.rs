//! The viewer (`hermes-meter ui`) over HTTP on loopback: pages, status
//! codes, escaping of untrusted text, the access token, refreshing, and
//! the query plans behind the pages.

use hermes_meter_test_support::http_get;
use hermes_meter_test_support::viewer;

use std::path::{Path, PathBuf};

use hermes_meter::ui::{UiConfig, UiServer};
use hermes_meter_model::hook::{decode, DecodeOptions, Decoded};
use hermes_meter_model::span::SpanOptions;
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::{EventContext, SessionFilter, Writer};
use http_get::get;
use serde_json::{json, Value};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(format!("{name}.jsonl"))
}

fn store_with(names: &[&str]) -> (tempfile::TempDir, Writer) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("store");
    let mut stats = ReplayStats::default();
    for n in names {
        replay_file(&mut store, &fixture(n), DecodeOptions::default(), &mut stats).expect("replay");
    }
    (dir, store)
}

fn serve(dir: &Path, token: Option<&str>, listen: &str) -> UiServer {
    UiServer::start(UiConfig {
        listen: listen.into(),
        store_dir: dir.to_path_buf(),
        token: token.map(Into::into),
        span_options: SpanOptions::default(),
        base: String::new(),
        hermes_home: None,
        trace_link: None,
    })
    .expect("viewer starts")
}

fn apply(store: &mut Writer, hook: &str, at: f64, kwargs: Value) {
    let map = kwargs.as_object().expect("object").clone();
    let Decoded::Event(event, _) = decode(hook, &map, at, DecodeOptions::default()) else {
        panic!("{hook} did not decode");
    };
    store.apply(&event, &EventContext::default()).expect("apply");
}

fn session_of(name: &str) -> String {
    let text = std::fs::read_to_string(fixture(name)).expect("fixture");
    let first: Value = serde_json::from_str(text.lines().next().expect("a line")).expect("json");
    first["kwargs"]["session_id"].as_str().expect("id").to_string()
}

#[test]
fn the_index_lists_sessions_newest_first_with_totals_and_links() {
    let (dir, _store) = store_with(&["failonce", "delegate_sync", "cron", "multi_turn"]);
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    let page = get(ui.addr(), "/", &[]);
    assert_eq!(page.status, 200);
    assert!(page.header("content-type").is_some_and(|c| c.starts_with("text/html")));
    assert!(page
        .header("content-security-policy")
        .is_some_and(|c| c.contains("script-src 'self'")));
    // Four root sessions and delegate_sync's subagent.
    assert!(page.body.contains("<b id=\"total-sessions\">5</b>"), "{}", page.body);
    for n in ["cron", "multi_turn", "delegate_sync", "failonce"] {
        assert!(
            page.body.contains(&format!("href=\"/session/{}\"", session_of(n))),
            "{n} listed"
        );
    }
    let api = get(ui.addr(), "/api/sessions", &[]);
    let list: Value = serde_json::from_str(&api.body).expect("json");
    let starts: Vec<f64> = list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["started_at"].as_f64().expect("start"))
        .collect();
    assert!(starts.windows(2).all(|w| w[0] >= w[1]), "{starts:?}");
    assert_eq!(list["totals"]["sessions"], 5);

    let cron = get(ui.addr(), "/?platform=cron", &[]);
    assert!(cron.body.contains("<b id=\"total-sessions\">1</b>"), "{}", cron.body);
    assert!(cron.body.contains(&session_of("cron")));
    assert!(!cron.body.contains(&session_of("failonce")));

    let none = get(ui.addr(), "/?day=2001-01-01", &[]);
    assert!(none.body.contains("id=\"no-sessions\""));
    let by_cost = get(ui.addr(), "/api/sessions?sort=cost", &[]);
    let list: Value = serde_json::from_str(&by_cost.body).expect("json");
    let costs: Vec<f64> = list["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["cost_usd"].as_f64().expect("cost"))
        .collect();
    assert!(costs.windows(2).all(|w| w[0] >= w[1]), "{costs:?}");
}

#[test]
fn a_session_page_shows_every_span_of_the_trace_and_its_errors() {
    let (dir, _store) = store_with(&["delegate_sync", "failonce"]);
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    for name in ["delegate_sync", "failonce"] {
        let id = session_of(name);
        let tree: Value = serde_json::from_str(&get(ui.addr(), &format!("/api/session/{id}"), &[]).body).expect("json");
        let page = get(ui.addr(), &format!("/session/{id}"), &[]);
        assert_eq!(page.status, 200);
        let mut stack = vec![&tree["root"]];
        let mut n = 0;
        while let Some(node) = stack.pop() {
            let span = node["span_id"].as_str().expect("span id");
            assert!(
                page.body.contains(&format!("data-span-id=\"{span}\"")),
                "{name}: span {span} on the page"
            );
            stack.extend(node["children"].as_array().expect("children"));
            n += 1;
        }
        assert_eq!(
            page.body.matches("<tr class=\"span ").count(),
            n,
            "{name}: one row a span"
        );
        assert!(page.body.contains("id=\"turn-chart\""), "{name}: the per-turn chart");
    }
    // The kit's mock-model is in no price list: its calls say unpriced, not $0.
    let readfile = get(ui.addr(), &format!("/session/{}", session_of("delegate_sync")), &[]).body;
    let chat_rows: Vec<&str> = readfile.split("<tr class=\"span kind-chat").skip(1).collect();
    assert!(!chat_rows.is_empty());
    for row in chat_rows {
        let row = &row[..row.find("</tr>").expect("row end")];
        assert!(row.contains(">unpriced</span>") && !row.contains("$0.0000"), "{row}");
    }
    // No cache reads, no cache figure.
    assert!(!get(ui.addr(), &format!("/session/{}", session_of("failonce")), &[])
        .body
        .contains("id=\"cache-hit\""));
    let failed = get(ui.addr(), &format!("/session/{}", session_of("failonce")), &[]);
    assert!(failed.body.contains("<table class=\"errors\">"));
    assert!(failed.body.contains("InternalServerError") && failed.body.contains("server_error"));
    assert!(failed.body.contains("(retry 1)"));
    // The subagent links to its own page.
    let parent = get(ui.addr(), &format!("/session/{}", session_of("delegate_sync")), &[]);
    assert!(parent.body.contains("href=\"/session/20261130_013800_5b8baf\""));
    // One cost for the session everywhere: its own, as the list shows it,
    // and with its subagent beside it, named so.
    let between = |text: &str, from: &str| -> String {
        let at = text.find(from).unwrap_or_else(|| panic!("{from} on the page")) + from.len();
        text[at..].split("</b>").next().unwrap_or_default().to_string()
    };
    let own = between(&parent.body, "id=\"session-cost\">");
    let family = between(&parent.body, "id=\"cost-with-subagents\">");
    assert!(parent.body.contains("cost with 1 subagent<"), "named the same way");
    assert!(family.starts_with('$'), "{family}");
    let list = get(ui.addr(), "/", &[]).body;
    let row_at = list
        .find(&format!("href=\"/session/{}\"", session_of("delegate_sync")))
        .expect("the parent in the list");
    let row = &list[row_at..row_at + list[row_at..].find("</tr>").expect("row end")];
    assert!(
        row.contains(&format!(">{own}<")),
        "the list shows the same cost {own}: {row}"
    );
    assert_eq!(get(ui.addr(), "/session/20261130_013800_5b8baf", &[]).status, 200);
}

#[test]
fn unknown_sessions_and_paths_are_404_and_writes_are_refused() {
    let (dir, _store) = store_with(&["failonce"]);
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    let missing = get(ui.addr(), "/session/no-such-session", &[]);
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains("id=\"not-found\""));
    assert_eq!(get(ui.addr(), "/api/session/no-such-session", &[]).status, 404);
    assert_eq!(get(ui.addr(), "/nothing/here", &[]).status, 404);
    let mut stream = std::net::TcpStream::connect(ui.addr()).expect("connect");
    use std::io::{Read, Write};
    write!(
        stream,
        "POST / HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        ui.addr()
    )
    .expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).expect("read");
    assert!(reply.starts_with("HTTP/1.1 405"), "{reply}");
}

#[test]
fn untrusted_ids_names_and_content_are_escaped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("store");
    let sid = "s<script>alert(1)</script>";
    let tool = "<img src=x onerror=alert(2)>";
    apply(
        &mut store,
        "on_session_start",
        100.0,
        json!({"session_id": sid, "platform": "cli\"><b>x"}),
    );
    apply(
        &mut store,
        "pre_llm_call",
        100.5,
        json!({"session_id": sid, "turn_id": format!("{sid}:t1"), "model": "m<i>", "platform": "cli"}),
    );
    apply(
        &mut store,
        "pre_tool_call",
        101.0,
        json!({"session_id": sid, "turn_id": format!("{sid}:t1"), "tool_name": tool, "tool_call_id": "c1", "args": {}}),
    );
    apply(
        &mut store,
        "post_tool_call",
        102.0,
        json!({"session_id": sid, "turn_id": format!("{sid}:t1"), "tool_name": tool, "tool_call_id": "c1",
               "result": "{\"error\": null}", "status": "ok"}),
    );
    drop(store);
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    let index = get(ui.addr(), "/", &[]);
    assert!(!index.body.contains("<script>alert"), "raw markup in the index");
    assert!(index.body.contains("s&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(index
        .body
        .contains("href=\"/session/s%3Cscript%3Ealert%281%29%3C%2Fscript%3E\""));
    assert!(!index.body.contains("\"><b>x"));
    let page = get(ui.addr(), "/session/s%3Cscript%3Ealert%281%29%3C%2Fscript%3E", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("<img src=x"), "raw tool name on the page");
    assert!(page.body.contains("execute_tool &lt;img src=x onerror=alert(2)&gt;"));
    assert!(!page.body.contains("<script>alert"));
    let missing = get(ui.addr(), "/session/%3Cb%3Enope", &[]);
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains("&lt;b&gt;nope") && !missing.body.contains("<b>nope"));
}

#[test]
fn off_loopback_needs_a_token_and_every_request_must_carry_it() {
    let (dir, _store) = store_with(&["failonce"]);
    let refused = UiServer::start(UiConfig {
        listen: "0.0.0.0:0".into(),
        store_dir: dir.path().to_path_buf(),
        token: None,
        span_options: SpanOptions::default(),
        base: String::new(),
        hermes_home: None,
        trace_link: None,
    });
    let err = refused.expect_err("no token off loopback");
    assert!(err.to_string().contains("token"), "{err}");

    // Listening on every address with a token; reached over loopback.
    let ui = serve(dir.path(), Some("s3cret-token"), "0.0.0.0:0");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", ui.addr().port()).parse().expect("addr");
    let other_host = [("Host", "viewer.lan:8765")];
    assert_eq!(get(addr, "/", &other_host).status, 401);
    assert_eq!(get(addr, "/api/version", &other_host).status, 401);
    assert_eq!(get(addr, "/?token=wrong", &other_host).status, 401);
    let bearer = get(
        addr,
        "/",
        &[("Host", "viewer.lan:8765"), ("Authorization", "Bearer s3cret-token")],
    );
    assert_eq!(bearer.status, 200);
    let first = get(addr, "/?token=s3cret-token&platform=cli", &other_host);
    assert_eq!(first.status, 303);
    assert_eq!(first.header("location"), Some("/?platform=cli"));
    let cookie = first.header("set-cookie").expect("a cookie").to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().expect("name=value");
    let with_cookie = get(addr, "/?platform=cli", &[("Host", "viewer.lan:8765"), ("Cookie", pair)]);
    assert_eq!(with_cookie.status, 200);
    assert!(with_cookie.body.contains(&session_of("failonce")));
}

#[test]
fn with_a_token_the_stylesheet_and_script_need_it_too() {
    let (dir, _store) = store_with(&["failonce"]);
    let ui = serve(dir.path(), Some("s3cret-token"), "127.0.0.1:0");
    let first = get(ui.addr(), "/?token=s3cret-token", &[]);
    let cookie = first.header("set-cookie").expect("a cookie").to_string();
    let pair = cookie.split(';').next().expect("name=value");
    for asset in ["/static/app.js", "/static/style.css"] {
        assert_eq!(get(ui.addr(), asset, &[]).status, 401, "{asset} without the token");
        assert_eq!(
            get(ui.addr(), asset, &[("Cookie", "hermes_meter_ui=wrong")]).status,
            401,
            "{asset}"
        );
        // The way a browser loads them after the first page: the cookie.
        let with_cookie = get(ui.addr(), asset, &[("Cookie", pair)]);
        assert_eq!(with_cookie.status, 200, "{asset} with the cookie");
        assert!(!with_cookie.body.is_empty());
        let bearer = get(ui.addr(), asset, &[("Authorization", "Bearer s3cret-token")]);
        assert_eq!(bearer.status, 200, "{asset} with the bearer token");
    }
    // The cookie's path covers the assets wherever the pages are.
    assert!(cookie.contains("Path=/;"), "{cookie}");
}

#[test]
fn the_token_redirect_goes_to_the_configured_base_path_only() {
    let (dir, _store) = store_with(&["failonce"]);
    let ui = serve(dir.path(), Some("s3cret-token"), "127.0.0.1:0");
    for path in ["//evil.example/?token=s3cret-token", "/session/x?token=s3cret-token"] {
        let r = get(ui.addr(), path, &[("Host", "evil.example")]);
        assert_eq!(r.status, 303, "{path}");
        assert_eq!(r.header("location"), Some("/"), "{path}");
    }
    let under = UiServer::start(UiConfig {
        listen: "127.0.0.1:0".into(),
        store_dir: dir.path().to_path_buf(),
        token: Some("s3cret-token".into()),
        span_options: SpanOptions::default(),
        base: "/meter/".into(),
        hermes_home: None,
        trace_link: None,
    })
    .expect("viewer starts");
    let r = get(
        under.addr(),
        "/meter//evil.example/?token=s3cret-token&day=2026-01-02",
        &[],
    );
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/meter/?day=2026-01-02"));
}

#[test]
fn without_a_token_only_loopback_host_names_are_answered() {
    let (dir, _store) = store_with(&["failonce"]);
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    assert_eq!(get(ui.addr(), "/", &[("Host", "attacker.example")]).status, 403);
    assert_eq!(get(ui.addr(), "/", &[("Host", "localhost:8765")]).status, 200);
}

#[test]
fn the_data_version_moves_when_hermes_records_more() {
    let (dir, mut store) = store_with(&["failonce"]);
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    let version = |ui: &UiServer| -> i64 {
        let v: Value = serde_json::from_str(&get(ui.addr(), "/api/version", &[]).body).expect("json");
        v["version"].as_i64().expect("version")
    };
    let before = version(&ui);
    // The store stays writable while the viewer serves: it holds no lock.
    apply(
        &mut store,
        "on_session_start",
        2e9,
        json!({"session_id": "later", "platform": "cli"}),
    );
    let after = version(&ui);
    assert!(after > before, "{before} -> {after}");
    let page = get(ui.addr(), "/", &[]);
    assert!(page.body.contains(&format!("content=\"{after}\"")));
    assert!(page.body.contains("href=\"/session/later\""));
    let script = get(ui.addr(), "/static/app.js", &[]);
    assert!(script.body.contains("/api/version"));
}

#[test]
fn a_session_page_says_how_much_input_the_cache_served() {
    let (dir, _store) = store_with(&["bigcache"]);
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    let page = get(ui.addr(), &format!("/session/{}", session_of("bigcache")), &[]);
    // 100,000 cache reads of 120,000 input tokens.
    assert!(
        page.body.contains("<b id=\"cache-hit\">83%</b>input from cache"),
        "{}",
        page.body
    );
}

#[test]
fn the_budgets_page_shows_spend_against_limit_with_its_forecast() {
    let (dir, _store) = store_with(&["cron", "model404"]);
    let empty = serve(dir.path(), None, "127.0.0.1:0");
    assert!(get(empty.addr(), "/budgets", &[]).body.contains("id=\"no-budgets\""));
    drop(empty);
    let home = dir.path().display().to_string();
    assert_eq!(
        hermes_meter::cli::run([
            "hermes-meter",
            "--home",
            &home,
            "budget",
            "set",
            "global",
            "daily",
            "10"
        ]),
        0
    );
    let set_tokens = [
        "hermes-meter",
        "--home",
        &home,
        "budget",
        "set",
        "global",
        "monthly_tokens",
        "100M",
    ];
    assert_eq!(hermes_meter::cli::run(set_tokens), 0);
    let set_rolling = [
        "hermes-meter",
        "--home",
        &home,
        "budget",
        "set",
        "global",
        "5h",
        "usd",
        "4",
    ];
    assert_eq!(hermes_meter::cli::run(set_rolling), 0);
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    let page = get(ui.addr(), "/budgets", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains("<tr class=\"budget status-ok\"><td>global</td><td>-</td><td>daily</td>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("$10.00"));
    assert!(page.body.contains("Per hour"));
    // The token budget beside it, in tokens, never in dollars.
    assert!(
        page.body
            .contains("<tr class=\"budget status-ok\"><td>global</td><td>-</td><td>monthly_tokens</td>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<td class=\"num\">100M tokens</td>"),
        "{}",
        page.body
    );
    // A rolling window says what is left and that it frees as spend
    // leaves it (nothing spent in the last 5 hours here).
    assert!(
        page.body
            .contains("<tr class=\"budget status-ok\"><td>global</td><td>-</td><td>5h</td>"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<td>$4.00 left; it frees up as spend leaves its rolling 5h window</td>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("$10.00 left; it resets "), "{}", page.body);
    // Nothing spent in today's window (the fixtures are older): it does not run out.
    assert!(page.body.contains("<th>Runs out</th>"), "{}", page.body);
    assert!(page.body.contains("<td class=\"runs-out\">-</td>"), "{}", page.body);
    // model404's alert is a verdict the plugin gave.
    assert!(page.body.contains("model_unavailable"), "{}", page.body);
}

#[test]
fn the_budgets_page_shows_the_caps_and_what_running_sessions_used() {
    let (dir, mut store) = store_with(&[]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    apply(
        &mut store,
        "pre_llm_call",
        now,
        json!({"session_id": "live<1>", "turn_id": "live:1", "model": "gpt-4o"}),
    );
    for n in 0..4 {
        let call = json!({"session_id": "live<1>", "tool_call_id": format!("c{n}"), "tool_name": "terminal"});
        apply(&mut store, "pre_tool_call", now + 1.0 + f64::from(n), call);
    }
    std::fs::write(
        dir.path().join("budgets.toml"),
        "[per_run]\ntool_calls = 4\n[per_session]\nusd = 2\n",
    )
    .expect("budgets");
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    let page = get(ui.addr(), "/budgets", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        !page.body.contains("id=\"no-budgets\""),
        "caps are budgets: {}",
        page.body
    );
    assert!(
        page.body
            .contains("Runaway watch: alert at 10 identical tool calls in a row"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("per session: $2.00, per run: 4 tool calls; tokens counted: total"),
        "{}",
        page.body
    );
    // The session's id is escaped in the text and in its link.
    assert!(
        page.body.contains("<a href=\"/session/live%3C1%3E\">live&lt;1&gt;</a>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains(
            "<tr class=\"cap status-hard\"><td>run</td><td>live:1</td><td>tool_calls</td>\
<td class=\"num\">4 tool calls</td>"
        ),
        "{}",
        page.body
    );
}

/// The pages' reads use indexes, not scans of the ledger.
#[test]
fn the_index_and_session_queries_use_indexes() {
    let (_dir, store) = store_with(&["failonce"]);
    let plans = store
        .trace_query_plans(&SessionFilter {
            limit: 50,
            ..SessionFilter::default()
        })
        .expect("plans");
    assert!(!plans.is_empty());
    for (query, detail) in &plans {
        // A subquery's rows are not reads of the ledger.
        let scan = detail.starts_with("SCAN")
            && !detail.contains("USING INDEX")
            && !detail.contains("USING COVERING INDEX")
            && !detail.starts_with("SCAN (subquery");
        assert!(!scan, "{query}: {detail}\n{plans:#?}");
    }
    let index: Vec<&str> = plans
        .iter()
        .filter(|(q, _)| q == "index by newest")
        .map(|(_, d)| d.as_str())
        .collect();
    assert!(index.iter().any(|d| d.contains("runs_started")), "{index:?}");
    let calls: Vec<&str> = plans
        .iter()
        .filter(|(q, _)| q == "llm_calls")
        .map(|(_, d)| d.as_str())
        .collect();
    assert!(
        calls
            .iter()
            .any(|d| d.contains("SEARCH l USING INDEX llm_calls_session (session_id=?)")),
        "{calls:?}"
    );
}

/// A Hermes home whose `state.db` lists `sessions` (id, source, started_at).
fn hermes_home_with(sessions: &[(&str, &str, f64)]) -> tempfile::TempDir {
    let home = tempfile::tempdir().expect("temp dir");
    let conn = rusqlite::Connection::open(home.path().join("state.db")).expect("state.db");
    conn.execute_batch(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL, parent_session_id TEXT, title TEXT)",
    )
    .expect("schema");
    for (id, source, at) in sessions {
        conn.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES (?1, ?2, ?3)",
            rusqlite::params![id, source, at],
        )
        .expect("session");
    }
    home
}

#[test]
fn the_index_says_first_what_hermes_ran_that_was_not_recorded() {
    let (dir, _store) = store_with(&["multi_turn"]);
    let now = hermes_meter_store::unix_now();
    // A process a minute ago whose load Hermes abandoned, and the cron
    // session it ran, which the ledger therefore lacks.
    let mut tracker = hermes_meter_store::health::Tracker::new(now - 60.0);
    tracker
        .hermes(
            json!({"hermes_version": "0.22.2", "load": "abandoned", "register_ms": 10500.0, "points": []}),
            now - 59.0,
        )
        .expect("report");
    tracker.write(dir.path(), now).expect("health.json");
    let home = hermes_home_with(&[("20261206_lost<i>", "cron<b>", now - 30.0)]);
    let ui = viewer::start(dir.path(), Some(home.path()), None);
    let page = get(ui.addr(), "/", &[]).body;
    let trouble = &page[page.find("id=\"trouble\"").expect("a trouble section")..];
    let trouble = &trouble[..trouble.find("</section>").expect("its end")];
    assert!(
        trouble.contains("Hermes ran 1 session(s)") && trouble.contains("20261206_lost&lt;i&gt;"),
        "{trouble}"
    );
    assert!(trouble.contains("from cron&lt;b&gt;"), "escaped: {trouble}");
    assert!(
        trouble.contains("Hermes abandoned loading the plugin in 1 process(es)"),
        "{trouble}"
    );
    // The section comes before the list.
    assert!(page.find("id=\"trouble\"") < page.find("id=\"total-sessions\""));

    // Inside a Hermes process (the dashboard tab) Hermes's database is not
    // opened; the processes' own reports still show.
    let inside = serve(dir.path(), None, "127.0.0.1:0");
    let page = get(inside.addr(), "/", &[]).body;
    assert!(page.contains("Hermes abandoned loading the plugin"), "{page}");
    assert!(!page.contains("20261206_lost"), "{page}");

    // Nothing wrong: no section.
    let (clean, _store) = store_with(&["multi_turn"]);
    let quiet = serve(clean.path(), None, "127.0.0.1:0");
    assert!(!get(quiet.addr(), "/", &[]).body.contains("id=\"trouble\""));
}

/// Moves `session`'s run to start at `at` and to have cost `cost` (the
/// triggers keep the hourly sums right).
fn move_run(dir: &Path, session: &str, at: f64, cost: f64) {
    let conn = rusqlite::Connection::open(dir.join("hermes-meter.db")).expect("store");
    let moved = conn
        .execute(
            "UPDATE runs SET started_at = ?2, last_event_at = ?2 + 5, ended_at = ?2 + 5, cost_usd = ?3
              WHERE session_id = ?1",
            rusqlite::params![session, at, cost],
        )
        .expect("move");
    assert_eq!(moved, 1);
}

/// The local date of `at` as the viewer shows it.
fn local_date(at: f64) -> String {
    let ts = jiff::Timestamp::from_second(at as i64).expect("time");
    ts.to_zoned(jiff::tz::TimeZone::system()).date().to_string()
}

/// `(day, cost)` of each bar of the spend chart.
fn chart_bars(page: &str) -> Vec<(String, f64)> {
    let chart = &page[page.find("id=\"spend-chart\"").expect("a spend chart")..];
    let chart = &chart[..chart.find("</svg>").expect("its end")];
    chart
        .split("data-day=\"")
        .skip(1)
        .map(|part| {
            let day = part[..part.find('"').expect("day end")].to_string();
            let cost = part.split("data-cost=\"").nth(1).expect("a cost");
            (day, cost[..cost.find('"').expect("cost end")].parse().expect("number"))
        })
        .collect()
}

#[test]
fn the_home_page_charts_spend_per_day_with_the_filters_and_says_what_they_matched() {
    let (dir, _store) = store_with(&["failonce", "multi_turn", "cron"]);
    let now = hermes_meter_store::unix_now();
    let (today, before) = (0.25, 1.5);
    move_run(dir.path(), &session_of("multi_turn"), now - 60.0, today);
    move_run(dir.path(), &session_of("failonce"), now - 2.0 * 86_400.0, before);
    // Older than the chart's 30 days.
    move_run(dir.path(), &session_of("cron"), now - 40.0 * 86_400.0, 7.0);
    let ui = serve(dir.path(), None, "127.0.0.1:0");
    let page = get(ui.addr(), "/", &[]).body;
    let bars = chart_bars(&page);
    assert_eq!(bars.len(), 30, "{bars:?}");
    assert_eq!(bars.last().expect("today").0, local_date(now), "{bars:?}");
    let cost_of = |day: &str| bars.iter().filter(|(d, _)| d == day).map(|(_, c)| c).sum::<f64>();
    assert!((cost_of(&local_date(now - 60.0)) - today).abs() < 1e-6, "{bars:?}");
    assert!(
        (cost_of(&local_date(now - 2.0 * 86_400.0)) - before).abs() < 1e-6,
        "{bars:?}"
    );
    let sum: f64 = bars.iter().map(|(_, c)| c).sum();
    assert!((sum - today - before).abs() < 1e-6, "{bars:?}");
    // A bar opens its day's sessions.
    let day = local_date(now - 60.0);
    assert!(
        page.contains(&format!("href=\"/?sort=newest&amp;day={day}\"")),
        "{page}"
    );

    // Filters match substrings, in any case; the page says what matched,
    // and the chart keeps the filter.
    let platform = |s: &str| get(ui.addr(), &format!("/?platform={s}"), &[]).body;
    let page = platform("LI");
    let said = &page[page.find("id=\"filter-values\"").expect("what matched")..];
    assert!(said.contains("platform “LI” matches cli"), "{said}");
    assert!(page.contains(&format!("href=\"/?sort=newest&amp;day={day}&amp;platform=LI\"")));
    assert!(page.contains(&format!("href=\"/session/{}\"", session_of("multi_turn"))));
    assert!(!page.contains(&format!("href=\"/session/{}\"", session_of("cron"))));
    let page = platform("%3Cnone%3E");
    assert!(page.contains("platform “&lt;none&gt;” matches no value"), "{page}");
    assert!(page.contains("id=\"no-sessions\""));
    assert_eq!(chart_bars(&page).iter().map(|(_, c)| c).sum::<f64>(), 0.0);
}

#[test]
fn titles_and_first_prompts_come_from_hermes_and_the_trace_links_to_jaeger() {
    let (dir, _store) = store_with(&["multi_turn"]);
    let id = session_of("multi_turn");
    let home = tempfile::tempdir().expect("temp dir");
    let conn = rusqlite::Connection::open(home.path().join("state.db")).expect("state.db");
    conn.execute_batch(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL, parent_session_id TEXT, title TEXT);
         CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT, role TEXT, content TEXT, timestamp REAL);",
    )
    .expect("schema");
    conn.execute(
        "INSERT INTO sessions VALUES (?1, 'cli', 1, NULL, 'Fix <b>the</b> build')",
        [&id],
    )
    .expect("session");
    conn.execute(
        "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?1, 'user', 'héllo world', 2)",
        [&id],
    )
    .expect("message");
    let link = hermes_meter::ui::trace_link::TraceLink::parse("http://jaeger.test:16686/")
        .expect("an address")
        .expect("a link");
    let ui = viewer::start(dir.path(), Some(home.path()), Some(link));
    let index = get(ui.addr(), "/", &[]).body;
    assert!(
        index.contains("<span class=\"title\">Fix &lt;b&gt;the&lt;/b&gt; build</span>"),
        "{index}"
    );
    assert!(index.contains("<td class=\"num prompt\">11</td>"), "{index}");
    let page = get(ui.addr(), &format!("/session/{id}"), &[]).body;
    assert!(
        page.contains("<h1 id=\"session-title\">Fix &lt;b&gt;the&lt;/b&gt; build</h1>"),
        "{page}"
    );
    assert!(page.contains("<b id=\"first-prompt\">11</b>"), "{page}");
    let api: Value = serde_json::from_str(&get(ui.addr(), &format!("/api/session/{id}"), &[]).body).expect("json");
    let trace_id = api["root"]["trace_id"].as_str().expect("a trace id");
    assert_eq!(trace_id.len(), 32);
    assert!(
        page.contains(&format!(
            "id=\"trace-link\" href=\"http://jaeger.test:16686/trace/{trace_id}\""
        )),
        "{page}"
    );

    // Without a link setting or Hermes's database: neither.
    let plain = serve(dir.path(), None, "127.0.0.1:0");
    let page = get(plain.addr(), &format!("/session/{id}"), &[]).body;
    assert!(
        !page.contains("trace-link") && !page.contains("session-title"),
        "{page}"
    );
}
