//! Scheduled spend digests from a real store: each complete period's
//! raised once however many processes look at once, caught up after
//! downtime but never for a period before the schedule was turned on, never
//! shown to an agent's session, and posted to the webhook once.

use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Barrier};

use hermes_meter_model::digest::Every;
use hermes_meter_model::hook::DecodeOptions;
use hermes_meter_runtime::config::webhook::{WebhookConfig, WebhookFormat};
use hermes_meter_runtime::digest::raise_due;
use hermes_meter_runtime::export::webhook::AlertPush;
use hermes_meter_store::replay::{replay_file, ReplayStats};
use hermes_meter_store::{Outbox, Writer};
use hermes_meter_test_support::stream::session_copy;
use serde_json::Value;

const DAY: f64 = 86_400.0;

/// A store whose days are UTC days, holding the readfile session moved to
/// the middle of the day before `now`'s.
fn store_with_yesterday(dir: &Path, now: f64) -> Writer {
    std::fs::write(dir.join("budgets.toml"), "timezone = \"UTC\"\n").expect("budgets");
    let mut store = Writer::open_dir(dir).expect("store");
    let lines: Vec<String> =
        std::fs::read_to_string(hermes_meter_test_support::repository().join("tests/fixtures/readfile.jsonl"))
            .expect("fixture")
            .lines()
            .map(str::to_string)
            .collect();
    let first: f64 = serde_json::from_str::<Value>(&lines[0]).expect("json")["t"]
        .as_f64()
        .expect("t");
    let noon_yesterday = (now / DAY).floor() * DAY - DAY / 2.0;
    let file = dir.join("yesterday.jsonl");
    std::fs::write(&file, session_copy(&lines, 1, noon_yesterday - first)).expect("write");
    let mut stats = ReplayStats::default();
    replay_file(&mut store, &file, DecodeOptions::default(), &mut stats).expect("replay");
    assert!(stats.bad_lines.is_empty(), "{:?}", stats.bad_lines);
    store
}

fn digests(store: &Writer) -> Vec<(String, String, String)> {
    let conn = rusqlite::Connection::open(store.path()).expect("open");
    let mut stmt = conn
        .prepare("SELECT kind, key, text FROM alerts WHERE kind LIKE 'digest_%' ORDER BY kind, key")
        .expect("prepare");
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

#[test]
fn a_days_digest_is_raised_once_however_many_processes_look_at_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let now = hermes_meter_store::unix_now();
    let store = store_with_yesterday(dir.path(), now);
    // Eight "processes", each with its own connection, look at the same time.
    let barrier = Arc::new(Barrier::new(8));
    let raised: usize = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                let path = store.path().to_path_buf();
                let dir = dir.path().to_path_buf();
                s.spawn(move || {
                    let outbox = Outbox::open(&path).expect("outbox");
                    barrier.wait();
                    raise_due(&outbox, &dir, &[Every::Day], now).expect("raise")
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).sum()
    });
    assert_eq!(raised, 1, "one process raises the day's digest");
    let yesterday = jiff::Timestamp::from_second((now - DAY) as i64)
        .expect("time")
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date()
        .to_string();
    let got = digests(&store);
    assert_eq!(got.len(), 1, "{got:?}");
    let (kind, key, text) = &got[0];
    assert_eq!((kind.as_str(), key.as_str()), ("digest_day", yesterday.as_str()));
    assert!(text.starts_with("hermes-meter digest of the day"), "{text}");
    assert!(text.contains("1 sessions, 2 LLM calls"), "{text}");
    // Asked again later: nothing more; and a digest is never a pending
    // alert an agent's session is shown.
    let outbox = Outbox::open(store.path()).expect("outbox");
    assert_eq!(
        raise_due(&outbox, dir.path(), &[Every::Day], now + 60.0).expect("raise"),
        0
    );
    assert!(store.pending_alerts(10).expect("pending").is_empty());
}

#[test]
fn missed_days_are_caught_up_but_none_before_the_digest_was_turned_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let now = hermes_meter_store::unix_now();
    let store = store_with_yesterday(dir.path(), now);
    let outbox = Outbox::open(store.path()).expect("outbox");
    // Turned on now: only the last complete day is sent.
    assert_eq!(raise_due(&outbox, dir.path(), &[Every::Day], now).expect("raise"), 1);
    // Three days pass with nothing running: the three missed days, once each.
    assert_eq!(
        raise_due(&outbox, dir.path(), &[Every::Day], now + 3.0 * DAY).expect("raise"),
        3
    );
    assert_eq!(
        raise_due(&outbox, dir.path(), &[Every::Day], now + 3.0 * DAY).expect("raise"),
        0
    );
    let keys: Vec<String> = digests(&store).into_iter().map(|d| d.1).collect();
    assert_eq!(keys.len(), 4, "{keys:?}");
    // The days after the session's: spent nothing, and say so against it.
    let texts: Vec<String> = digests(&store).into_iter().map(|d| d.2).collect();
    assert!(texts[1].contains("0 sessions, 0 LLM calls"), "{}", texts[1]);
    // A weekly digest turned on beside it sends its last complete week.
    assert_eq!(
        raise_due(&outbox, dir.path(), &[Every::Day, Every::Week], now + 3.0 * DAY).expect("raise"),
        1
    );
}

#[test]
fn a_digest_reaches_the_webhook_once_in_the_slack_shape() {
    let dir = tempfile::tempdir().expect("temp dir");
    let now = hermes_meter_store::unix_now();
    let store = store_with_yesterday(dir.path(), now);
    let outbox = Outbox::open(store.path()).expect("outbox");
    assert_eq!(raise_due(&outbox, dir.path(), &[Every::Day], now).expect("raise"), 1);
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let got = hermes_meter_test_support::webhook::receiver(listener);
    let push = AlertPush::new(WebhookConfig {
        url: format!("http://127.0.0.1:{port}/hook"),
        format: WebhookFormat::Slack,
    });
    assert_eq!(push.run_once(&outbox, now + 1.0).expect("step").pushed, 1);
    assert_eq!(push.run_once(&outbox, now + 120.0).expect("step").pushed, 0, "once");
    let bodies = got.lock().expect("lock").clone();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    let text = bodies[0]["text"].as_str().expect("Slack's text");
    assert!(text.contains("hermes-meter digest of the day"), "{text}");
    // `status` says what went out last, and where.
    let (code, out, err) = hermes_meter_test_support::cli::cli(dir.path(), &["status", "--json"]);
    assert!(code == 0 || code == 1, "{err}");
    let status: Value = serde_json::from_str(&out).expect("JSON");
    let last = &status["digests"]["last"]["day"];
    let yesterday = jiff::Timestamp::from_second((now - DAY) as i64)
        .expect("time")
        .to_zoned(jiff::tz::TimeZone::UTC)
        .date()
        .to_string();
    assert_eq!(last["period"].as_str(), Some(yesterday.as_str()), "{status}");
    assert!(
        last["posted_at"].as_f64().is_some() && last["sent_at"].is_null(),
        "{last}"
    );
    let (_, text, _) = hermes_meter_test_support::cli::cli(dir.path(), &["status"]);
    assert!(text.contains("digests         off (set HERMES_METER_DIGEST"), "{text}");
}
