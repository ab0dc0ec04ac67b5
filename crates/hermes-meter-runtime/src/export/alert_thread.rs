//! The alert webhook's own thread: posting alerts never holds up the export
//! of spans, log records and metrics. A receiver that hangs costs this
//! thread a post's timeout; the export loop goes on, so a run's own spans
//! still leave before it ends (a payments webhook sender keeps its
//! deliveries off the request path the same way).
//!
//! Owns: the thread, its own store connection, its pace (a step a second,
//! the receiver's backoff inside [`AlertPush`]), the log lines of failure
//! and recovery, and the last step of a stopping process within its
//! deadline. Must not touch: the export loop's connection or leases.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::webhook::{AlertPush, PushStep};
use crate::lock;
use hermes_meter_store::Outbox;

/// How often the thread looks for alerts due.
const STEP: Duration = Duration::from_secs(1);

/// What the owner tells the thread.
#[derive(Default)]
struct Control {
    stop: bool,
    /// With `stop`: post what is due by then before ending.
    last_until: Option<Instant>,
}

/// The thread posting a store's alerts to the webhook; stopped (without a
/// last post) when dropped.
pub(crate) struct AlertThread {
    control: Arc<(Mutex<Control>, Condvar)>,
    done: mpsc::Receiver<()>,
    handle: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for AlertThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AlertThread")
    }
}

impl AlertThread {
    /// Starts posting the alerts of the store at `store_path` through
    /// `push`, on a connection of its own. `None` when the thread cannot
    /// start (said in the log; the alerts wait in the store).
    pub(crate) fn start(push: AlertPush, store_path: PathBuf) -> Option<Self> {
        let control = Arc::new((Mutex::new(Control::default()), Condvar::new()));
        let (done_tx, done) = mpsc::channel();
        let shared = Arc::clone(&control);
        let spawned = std::thread::Builder::new()
            .name("hermes-meter-alerts".into())
            .spawn(move || {
                run(&push, &store_path, &shared);
                let _ = done_tx.send(());
            });
        match spawned {
            Ok(handle) => Some(AlertThread {
                control,
                done,
                handle: Some(handle),
            }),
            Err(e) => {
                tracing::warn!(target: "AlertPush.Failed", "alert webhook: no thread ({e}); the alerts wait in the store");
                None
            }
        }
    }

    /// Stops the thread: with `deadline`, after a last post of the alerts
    /// due, begun only before it; waits for the thread until then at most
    /// (a post in flight past it is left to end on its own, and what it
    /// did not post waits in the store for the next process).
    pub(crate) fn stop(&mut self, deadline: Option<Instant>) {
        {
            let (state, wake) = &*self.control;
            let mut c = lock(state);
            c.stop = true;
            c.last_until = deadline;
            wake.notify_all();
        }
        let wait = deadline.map_or(Duration::from_millis(100), |d| {
            d.saturating_duration_since(Instant::now()) + Duration::from_millis(100)
        });
        if self.done.recv_timeout(wait).is_ok() {
            if let Some(handle) = self.handle.take() {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for AlertThread {
    fn drop(&mut self) {
        if self.handle.is_some() {
            self.stop(None);
        }
    }
}

/// The thread's loop: a step a second until told to stop, then the last
/// step within its deadline, if it has one.
fn run(push: &AlertPush, store_path: &std::path::Path, control: &(Mutex<Control>, Condvar)) {
    let store = match Outbox::open(store_path) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(target: "AlertPush.Failed", "alert webhook: cannot open the store ({e}); the alerts wait in it");
            return;
        }
    };
    let mut failing = false;
    let (state, wake) = control;
    loop {
        let last_until = {
            let mut c = lock(state);
            if !c.stop {
                c = wake
                    .wait_timeout(c, STEP)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
            if c.stop {
                Some(c.last_until)
            } else {
                None
            }
        };
        match last_until {
            Some(Some(deadline)) => {
                let step = push.run_until(&store, hermes_meter_store::unix_now(), Some(deadline));
                say(&step, &mut failing);
                return;
            }
            Some(None) => return,
            None => {
                let step = push.run_once(&store, hermes_meter_store::unix_now());
                say(&step, &mut failing);
            }
        }
    }
}

/// Logs a failure once until a post succeeds again, and the recovery.
fn say(step: &hermes_meter_store::Result<PushStep>, failing: &mut bool) {
    match step {
        Ok(PushStep { error: Some(e), .. }) if !*failing => {
            *failing = true;
            tracing::warn!(target: "AlertPush.Failed", "{e}; the alerts wait in the store and are tried again");
        }
        Err(e) if !*failing => {
            *failing = true;
            tracing::warn!(target: "AlertPush.Failed", "alert webhook: {e}; the alerts wait in the store");
        }
        Ok(PushStep { error: None, pushed }) if *pushed > 0 && *failing => {
            *failing = false;
            tracing::info!(target: "AlertPush.Recovered", "alert webhook: {pushed} alert(s) delivered again");
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpListener;

    use super::*;
    use crate::config::webhook::{WebhookConfig, WebhookFormat};
    use hermes_meter_store::{AlertSink, Writer};

    fn push_to(port: u16) -> AlertPush {
        AlertPush::new(WebhookConfig {
            url: format!("http://127.0.0.1:{port}/hook"),
            format: WebhookFormat::Json,
        })
    }

    /// A receiver that answers each request after `hold` (forever: never).
    fn receiver(hold: Option<Duration>) -> (u16, Arc<Mutex<usize>>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let asked = Arc::new(Mutex::new(0));
        let count = Arc::clone(&asked);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let count = Arc::clone(&count);
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                    let mut line = String::new();
                    let mut length = 0usize;
                    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        line.clear();
                    }
                    let mut body = vec![0; length];
                    let _ = std::io::Read::read_exact(&mut reader, &mut body);
                    *lock(&count) += 1;
                    match hold {
                        None => std::thread::sleep(Duration::from_secs(3600)),
                        Some(d) => {
                            std::thread::sleep(d);
                            let _ =
                                stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                        }
                    }
                });
            }
        });
        (port, asked)
    }

    #[test]
    fn alerts_are_posted_off_the_export_loop_and_a_hung_receiver_holds_up_no_stop() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Writer::open_dir(dir.path()).expect("store");
        store
            .raise_pending_alert("runaway", "run|t1", "RUNAWAY: a loop", hermes_meter_store::unix_now())
            .expect("raise");
        // A receiver that takes it: the thread posts it by itself.
        let (port, asked) = receiver(Some(Duration::ZERO));
        let mut thread = AlertThread::start(push_to(port), store.path().to_path_buf()).expect("thread");
        let until = Instant::now() + Duration::from_secs(10);
        while store.alert_push_status(AlertSink::Webhook).expect("status").0 == 0 {
            assert!(Instant::now() < until, "never posted");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(*lock(&asked), 1);
        thread.stop(Some(Instant::now() + Duration::from_millis(200)));
        // A receiver that never answers: a stopping process waits for its
        // thread no longer than its deadline, not the post's 5 s timeout.
        store
            .raise_pending_alert(
                "runaway",
                "run|t2",
                "RUNAWAY: another loop",
                hermes_meter_store::unix_now(),
            )
            .expect("raise");
        let (port, asked) = receiver(None);
        let mut thread = AlertThread::start(push_to(port), store.path().to_path_buf()).expect("thread");
        let until = Instant::now() + Duration::from_secs(10);
        while *lock(&asked) == 0 {
            assert!(Instant::now() < until, "never asked");
            std::thread::sleep(Duration::from_millis(20));
        }
        let stopping = Instant::now();
        thread.stop(Some(Instant::now() + Duration::from_millis(300)));
        assert!(stopping.elapsed() < Duration::from_secs(3), "{:?}", stopping.elapsed());
        let (pushed, waiting, _) = store.alert_push_status(AlertSink::Webhook).expect("status");
        assert_eq!((pushed, waiting), (1, 1), "the hung one waits in the store");
    }
}
