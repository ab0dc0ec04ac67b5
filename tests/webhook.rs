//! Alerts posted to a webhook from a real store, to a real HTTP receiver
//! on loopback: each once, in both shapes, and none lost while the
//! receiver is down.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use hermes_meter_runtime::config::webhook::{WebhookConfig, WebhookFormat};
use hermes_meter_runtime::export::webhook::{AlertPush, PUSH_HORIZON_S};
use hermes_meter_store::{AlertSink, Outbox, Writer};

fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

fn sink(port: u16, format: WebhookFormat) -> AlertPush {
    AlertPush::new(WebhookConfig {
        url: format!("http://127.0.0.1:{port}/hook"),
        format,
    })
}

#[test]
fn alerts_reach_the_webhook_once_and_wait_while_it_is_down() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Writer::open_dir(dir.path()).expect("store");
    let outbox = Outbox::open(store.path()).expect("outbox");
    let t = now();
    store
        .raise_pending_alert("runaway", "run|t1", "RUNAWAY: session s looks stuck in a loop", t)
        .expect("raise");
    store
        .raise_alert_delivered(
            "budget_hard",
            "global||daily|2026-12-04",
            "the global daily budget is exhausted",
            t + 1.0,
            "s",
        )
        .expect("raise");
    // A port nothing listens on: the receiver is down.
    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let push = sink(port, WebhookFormat::Json);
    let step = push.run_once(&outbox, t + 2.0).expect("step");
    assert_eq!(step.pushed, 0);
    assert!(
        step.error.as_deref().is_some_and(|e| e.contains("127.0.0.1")),
        "{step:?}"
    );
    let (pushed, waiting, error) = store.alert_push_status(AlertSink::Webhook).expect("status");
    assert_eq!((pushed, waiting), (0, 2));
    assert!(error.is_some(), "the failure is kept for status");
    // The receiver backs off as a whole: the alert not tried yet (a step
    // stops at its first failure) waits too, then both are tried.
    let step = push.run_once(&outbox, t + 3.0).expect("step");
    assert_eq!((step.pushed, step.error), (0, None), "the receiver backs off");
    let step = push.run_once(&outbox, t + 8.0).expect("step");
    assert!(step.pushed == 0 && step.error.is_some(), "{step:?}");
    assert_eq!(
        store.alert_push_status(AlertSink::Webhook).expect("status").1,
        2,
        "nothing is lost"
    );
    // The receiver comes up.
    let got = hermes_meter_test_support::webhook::receiver(TcpListener::bind(("127.0.0.1", port)).expect("rebind"));
    let step = push.run_once(&outbox, t + 600.0).expect("step");
    assert_eq!((step.pushed, step.error), (2, None));
    assert_eq!(
        push.run_once(&outbox, t + 1200.0).expect("step").pushed,
        0,
        "each alert once"
    );
    let bodies = got.lock().expect("lock").clone();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    let kinds: Vec<&str> = bodies.iter().filter_map(|b| b["kind"].as_str()).collect();
    assert_eq!(kinds, ["runaway", "budget_hard"], "oldest first");
    assert_eq!(bodies[0]["source"], "hermes-meter");
    assert_eq!(bodies[0]["text"], "RUNAWAY: session s looks stuck in a loop");
    assert!(bodies[0]["host"].as_str().is_some_and(|h| !h.is_empty()));
    assert_eq!(store.alert_push_status(AlertSink::Webhook).expect("status").0, 2);
}

#[test]
fn the_slack_shape_a_claim_and_the_horizon() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Writer::open_dir(dir.path()).expect("store");
    let outbox = Outbox::open(store.path()).expect("outbox");
    let t = now();
    store
        .raise_pending_alert("runaway", "run|old", "an old one", t - PUSH_HORIZON_S - 60.0)
        .expect("raise");
    store
        .raise_pending_alert("runaway", "run|new", "RUNAWAY: a new one", t)
        .expect("raise");
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let got = hermes_meter_test_support::webhook::receiver(listener);
    // Another process claimed the new alert a moment ago: it is not posted twice.
    assert!(outbox
        .claim_alert_push(AlertSink::Webhook, "runaway", "run|new", t, t + 30.0)
        .expect("claim"));
    assert!(
        !outbox
            .claim_alert_push(AlertSink::Webhook, "runaway", "run|new", t, t + 30.0)
            .expect("claim"),
        "claimed once"
    );
    let push = sink(port, WebhookFormat::Slack);
    assert_eq!(push.run_once(&outbox, t + 1.0).expect("step").pushed, 0);
    // The claim lapsed (that process died): this one posts it.
    assert_eq!(push.run_once(&outbox, t + 31.0).expect("step").pushed, 1);
    let bodies = got.lock().expect("lock").clone();
    assert_eq!(bodies.len(), 1, "the day-old alert is not replayed: {bodies:?}");
    let text = bodies[0]["text"].as_str().expect("slack text");
    assert!(
        text.starts_with("*hermes-meter* on ") && text.ends_with("RUNAWAY: a new one"),
        "{text}"
    );
    assert_eq!(
        bodies[0].as_object().map(|o| o.len()),
        Some(1),
        "Slack takes {{\"text\"}}"
    );
}

/// A loopback receiver that answers every request with `answer` (a whole
/// HTTP response) and counts the requests it got.
fn answering(listener: TcpListener, answer: &'static str) -> Arc<Mutex<Vec<String>>> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&got);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut first = String::new();
            let _ = reader.read_line(&mut first);
            kept.lock().expect("lock").push(first.trim().to_string());
            let _ = stream.write_all(answer.as_bytes());
        }
    });
    got
}

/// A receiver that is down is asked once per backoff (5 s, doubling), not
/// once per alert waiting: 25 alerts over 20 s of steps a second make 3
/// requests; when it is back, every alert arrives.
#[test]
fn a_receiver_that_is_down_is_not_asked_over_and_over() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Writer::open_dir(dir.path()).expect("store");
    let outbox = Outbox::open(store.path()).expect("outbox");
    let t = now();
    for n in 0..25 {
        store
            .raise_pending_alert("runaway", &format!("run|t{n}"), "RUNAWAY: a loop", t)
            .expect("raise");
    }
    let hook = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = hook.local_addr().expect("addr").port();
    let asked = answering(
        hook,
        "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
    let push = sink(port, WebhookFormat::Json);
    for second in 0..20 {
        push.run_once(&outbox, t + 1.0 + f64::from(second)).expect("step");
    }
    assert_eq!(asked.lock().expect("lock").len(), 3, "at 1 s, 6 s and 16 s");
    let (pushed, waiting, error) = store.alert_push_status(AlertSink::Webhook).expect("status");
    assert_eq!((pushed, waiting), (0, 25));
    assert!(error.is_some_and(|e| e.contains("503")));
}

#[test]
fn a_webhook_that_redirects_is_not_followed_and_the_alert_is_not_counted_posted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Writer::open_dir(dir.path()).expect("store");
    let outbox = Outbox::open(store.path()).expect("outbox");
    let t = now();
    store
        .raise_pending_alert("runaway", "run|t1", "RUNAWAY: session s looks stuck in a loop", t)
        .expect("raise");
    // The address the redirect names: an "internal admin URL".
    let admin = TcpListener::bind("127.0.0.1:0").expect("bind");
    let admin_port = admin.local_addr().expect("addr").port();
    let fetched = answering(
        admin,
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
    );
    let location: &'static str = Box::leak(
        format!(
            "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:{admin_port}/admin/delete\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .into_boxed_str(),
    );
    let hook = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = hook.local_addr().expect("addr").port();
    let asked = answering(hook, location);
    let step = sink(port, WebhookFormat::Json)
        .run_once(&outbox, t + 1.0)
        .expect("step");
    assert_eq!(step.pushed, 0);
    assert!(
        step.error.as_deref().is_some_and(|e| e.contains("redirect")),
        "{step:?}"
    );
    assert_eq!(asked.lock().expect("lock").len(), 1, "the webhook was asked once");
    assert!(
        fetched.lock().expect("lock").is_empty(),
        "the redirect's target was never fetched"
    );
    let (pushed, waiting, _) = store.alert_push_status(AlertSink::Webhook).expect("status");
    assert_eq!((pushed, waiting), (0, 1), "the alert waits, not counted posted");
}
