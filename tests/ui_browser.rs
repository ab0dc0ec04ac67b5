//! The viewer in a real browser: headless Chromium (Debian's `chromium`)
//! loads the index and a session page from a viewer on loopback. The pages
//! must log nothing to the console (no script error, no blocked resource:
//! the Content-Security-Policy reports there), the page script must run,
//! and every span of the session must be in the rendered DOM. Screenshots
//! are kept under `target/ui-screenshots/`.
//!
//! Chromium is required: without it this test fails (`.ci/run` installs it;
//! `$CHROMIUM` names another binary).

use hermes_meter_test_support::viewer;

use std::path::{Path, PathBuf};
use std::process::Command;

use hermes_meter::ui::{UiConfig, UiServer};
use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_model::span::SpanOptions;
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::Writer;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(p);
    }
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!("headless Chromium is required for this test: apt-get install chromium (or set CHROMIUM)");
}

fn artefacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("artefact dir");
    dir
}

/// Runs Chromium on `url` with `mode` (`--dump-dom` or `--screenshot=...`);
/// returns stdout and the console lines it logged.
fn browse(url: &str, mode: &str, profile: &Path) -> (String, Vec<String>) {
    browse_at(url, mode, profile, 1400)
}

/// [`browse`] in a window `width` pixels wide.
fn browse_at(url: &str, mode: &str, profile: &Path, width: u32) -> (String, Vec<String>) {
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--enable-logging=stderr",
            "--v=0",
            // Lets the page's refresh poll run once before the dump.
            "--virtual-time-budget=3000",
        ])
        .arg(format!("--window-size={width},1000"))
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(mode)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Chromium's own chrome:// pages may log too; only the viewer's count.
    let console = stderr
        .lines()
        .filter(|l| (l.contains(":CONSOLE") || l.contains("Uncaught")) && !l.contains("source: chrome://"))
        .map(str::to_string)
        .collect();
    (String::from_utf8_lossy(&out.stdout).into_owned(), console)
}

#[test]
fn chromium_renders_the_index_and_a_session_with_every_span_and_no_console_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("store");
    let mut stats = ReplayStats::default();
    let capture = DecodeOptions {
        capture_content: true,
        ..DecodeOptions::default()
    };
    for name in ["delegate_sync", "failonce", "multi_turn"] {
        let file = Path::new(FIXTURES).join(format!("{name}.jsonl"));
        replay_file(&mut store, &file, capture, &mut stats).expect("replay");
    }
    let session = "20261130_013759_e4a976";
    let trace = hermes_meter::trace::load(&store, session, SpanOptions::default())
        .expect("load")
        .expect("the delegate_sync session");
    let spans: Vec<String> = hermes_meter::trace::walk(&trace.root)
        .iter()
        .map(|(_, n)| n.span_id.clone())
        .collect();
    assert_eq!(spans.len(), 8);
    drop(store);
    // Hermes's title of the session: long, and one word (the worst case
    // for a table in a narrow window).
    let hermes_home = tempfile::tempdir().expect("hermes home");
    let conn = rusqlite::Connection::open(hermes_home.path().join("state.db")).expect("state.db");
    conn.execute_batch(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT, started_at REAL, parent_session_id TEXT, title TEXT)",
    )
    .expect("schema");
    conn.execute(
        "INSERT INTO sessions VALUES (?1, 'cli', 1, NULL, ?2)",
        rusqlite::params![session, "Delegated".repeat(25)],
    )
    .expect("session");

    let link = hermes_meter::ui::trace_link::TraceLink::parse("http://127.0.0.1:16686").expect("an address");
    let ui = viewer::start(dir.path(), Some(hermes_home.path()), link);
    let base = format!("http://{}", ui.addr());
    let profile = tempfile::tempdir().expect("profile dir");
    let shots = artefacts();

    let (dom, console) = browse(&format!("{base}/"), "--dump-dom", profile.path());
    assert!(console.is_empty(), "console output on the index: {console:#?}");
    assert!(
        dom.contains("<span id=\"live\">live</span>"),
        "the page script ran and its poll answered: {dom}"
    );
    assert!(dom.contains(&format!("href=\"/session/{session}\"")), "{dom}");
    assert!(dom.contains("<b id=\"total-sessions\">4</b>"), "{dom}");
    assert!(dom.contains("id=\"spend-chart\""), "{dom}");
    assert!(dom.contains("<span class=\"title\">DelegatedDelegated"), "{dom}");

    let (dom, console) = browse(&format!("{base}/session/{session}"), "--dump-dom", profile.path());
    assert!(console.is_empty(), "console output on the session page: {console:#?}");
    assert!(dom.contains("<span id=\"live\">live</span>"));
    for id in &spans {
        assert!(dom.contains(&format!("data-span-id=\"{id}\"")), "span {id} rendered");
    }
    assert!(dom.contains("id=\"turn-chart\""));
    assert!(dom.contains("id=\"session-title\""), "{dom}");
    assert!(
        dom.contains("id=\"trace-link\" href=\"http://127.0.0.1:16686/trace/"),
        "{dom}"
    );
    assert!(
        dom.contains("captured content"),
        "content capture was on for this replay"
    );
    // A span's ids and attributes are in its line's details.
    assert!(dom.contains("<details class=\"span-info\""), "{dom}");
    assert!(dom.contains("<dt>gen_ai.operation.name</dt><dd>chat</dd>"), "{dom}");
    assert!(
        dom.contains(&format!("<dt>span id</dt><dd class=\"id\">{}</dd>", spans[0])),
        "{dom}"
    );

    // Nothing scrolls the page sideways, in the narrowest window headless
    // Chromium draws (500 px) or a wide one.
    for width in [500, 1400] {
        for path in ["/".to_string(), format!("/session/{session}"), "/budgets".to_string()] {
            let (dom, console) = browse_at(&format!("{base}{path}"), "--dump-dom", profile.path(), width);
            assert!(console.is_empty(), "{path} at {width} px: {console:#?}");
            assert!(
                dom.contains("data-overflows=\"false\""),
                "{path} at {width} px scrolls sideways (or the page script did not run): {}",
                &dom[..dom.len().min(400)]
            );
        }
    }

    for (name, path) in [
        ("index", "/".to_string()),
        ("session", format!("/session/{session}")),
        ("budgets", "/budgets".to_string()),
    ] {
        let file = shots.join(format!("{name}.png"));
        let _ = std::fs::remove_file(&file);
        let (_, console) = browse(
            &format!("{base}{path}"),
            &format!("--screenshot={}", file.display()),
            profile.path(),
        );
        assert!(console.is_empty(), "{name}: {console:#?}");
        let png = std::fs::read(&file).expect("screenshot written");
        assert!(
            png.len() > 10_000 && png.starts_with(b"\x89PNG"),
            "{name}: {} bytes",
            png.len()
        );
    }
}

#[test]
fn with_a_token_chromium_loads_the_stylesheet_and_script_with_the_cookie_the_first_page_set() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut store = Writer::open_dir(dir.path()).expect("store");
    let mut stats = ReplayStats::default();
    let file = Path::new(FIXTURES).join("failonce.jsonl");
    replay_file(&mut store, &file, DecodeOptions::default(), &mut stats).expect("replay");
    drop(store);
    let ui = UiServer::start(UiConfig {
        listen: "127.0.0.1:0".into(),
        store_dir: dir.path().to_path_buf(),
        token: Some("browser-token".into()),
        span_options: SpanOptions::default(),
        base: String::new(),
        hermes_home: None,
        trace_link: None,
    })
    .expect("viewer");
    let profile = tempfile::tempdir().expect("profile dir");
    // The address `hermes-meter ui` prints: the viewer answers it with the
    // cookie and a redirect; the page then loads its script and
    // stylesheet, which need the token too.
    let (dom, console) = browse(
        &format!("http://{}/?token=browser-token", ui.addr()),
        "--dump-dom",
        profile.path(),
    );
    assert!(console.is_empty(), "console output with a token: {console:#?}");
    assert!(
        dom.contains("<span id=\"live\">live</span>"),
        "the script loaded with the cookie, ran, and its poll answered: {dom}"
    );
}
