//! What the trace and the metric exporter share about sending: the store
//! lease a signal is sent under, the backoff between failed sends (with the
//! log line a failure gets, and, for a bounded flush, whether one more send
//! fits before its deadline), and a send bounded by a flush deadline.
//!
//! Owns: [`Lease`], [`Pacing`] and [`block_on_until`]. Must not touch:
//! what is sent (spans, series), the journal, when a flush has sent enough
//! (each exporter's own rule: no more ready spans; one accepted push).
//!
//! One copy for both exporters means
//! the two signals cannot drift apart in how they take over a dead holder's
//! lease, how long they wait after a failure, how a flush gives way to its
//! deadline, or how often they log a failure. Each signal still has its own
//! lease and its own [`Pacing`]: the collector may take one and refuse the
//! other.

use std::future::Future;
use std::time::{Duration, Instant};

use super::retry::{self, Backoff};
use super::transport::{Accepted, SendError};
use hermes_meter_store::error::Result;
use hermes_meter_store::Outbox;

/// The store lease one signal is sent under (`traces`, `metrics`): only its
/// holder sends, so processes sharing a store never send twice.
#[derive(Debug, Clone)]
pub(crate) struct Lease {
    name: &'static str,
    holder: String,
    ttl_seconds: f64,
}

impl Lease {
    /// Lease `name` for this process (see [`crate::process::lease_holder`]),
    /// lapsing `ttl_seconds` after its last renewal.
    pub(crate) fn new(name: &'static str, ttl_seconds: f64) -> Self {
        Lease {
            name,
            holder: crate::process::lease_holder(),
            ttl_seconds,
        }
    }

    /// This process's id in the lease.
    pub(crate) fn holder(&self) -> &str {
        &self.holder
    }

    /// Takes or renews the lease at `now`; whether this process holds it.
    pub(crate) fn take(&self, store: &mut Outbox, now: f64) -> Result<bool> {
        take_lease(store, self.name, &self.holder, now, self.ttl_seconds)
    }

    /// Gives the lease up, if this process holds it.
    pub(crate) fn release(&self, store: &mut Outbox) -> Result<()> {
        store.release_lease(self.name, &self.holder)
    }
}

/// Takes or renews lease `name` for `holder`. A lease whose holder has
/// ended (a one-shot `hermes -z` that left with `os._exit`, a `kill -9`)
/// is taken over at once rather than after it lapses, so the next process
/// sends what the dead one left without waiting out the lease.
pub(crate) fn take_lease(store: &mut Outbox, name: &str, holder: &str, now: f64, ttl_seconds: f64) -> Result<bool> {
    let pid = std::process::id() as i64;
    if store.acquire_lease(name, holder, pid, now, ttl_seconds)? {
        return Ok(true);
    }
    match store.lease(name)? {
        Some(l) if l.holder != holder && crate::process::holder_is_gone(&l.holder, l.pid) => {
            store.release_lease(name, &l.holder)?;
            store.acquire_lease(name, holder, pid, now, ttl_seconds)
        }
        _ => Ok(false),
    }
}

/// When a signal may be sent again: the backoff after failures, the time
/// before which nothing is tried, and the failure last logged.
#[derive(Debug, Clone)]
pub(crate) struct Pacing {
    /// The log event of a failure (`Export.Failed`, `MetricExport.Failed`).
    event: &'static str,
    backoff: Backoff,
    not_before: Option<Instant>,
    /// The failure last logged at `warn`: a repeat is logged at `debug`.
    last_logged: Option<String>,
}

impl Pacing {
    /// No failure yet; failures are logged as `event`.
    pub(crate) fn new(event: &'static str) -> Self {
        Pacing {
            event,
            backoff: Backoff::default(),
            not_before: None,
            last_logged: None,
        }
    }

    /// How long the backoff still holds sends back, if it does.
    pub(crate) fn wait_left(&self) -> Option<Duration> {
        let t = self.not_before?;
        let now = Instant::now();
        (now < t).then(|| t - now)
    }

    /// For a flush, before each send: whether one may start before
    /// `deadline`, having slept out a backoff that ends before it. False at
    /// once once the deadline passed, or if the backoff ends at or after it
    /// (a flush never waits for a send it could not make in time). Both
    /// exporters' flushes loop on it, each stopping early by its own rule.
    pub(crate) fn wait_to_send_by(&self, deadline: Instant) -> bool {
        if Instant::now() >= deadline {
            return false;
        }
        let Some(t) = self.not_before else {
            return true;
        };
        if t >= deadline {
            return false;
        }
        let now = Instant::now();
        if t > now {
            std::thread::sleep(t - now);
        }
        true
    }

    /// A send was accepted: the next failure starts the backoff over and is
    /// logged at `warn` again.
    pub(crate) fn succeeded(&mut self) {
        self.backoff.reset();
        self.not_before = None;
        self.last_logged = None;
    }

    /// A send failed with `verdict`, described by `text`: holds sends back
    /// for the backoff's next delay, logs it (once at `warn` while it
    /// repeats) and returns the delay.
    pub(crate) fn failed(&mut self, verdict: retry::Verdict, text: &str) -> Duration {
        let wait = self.backoff.next(verdict);
        self.not_before = Some(Instant::now() + wait);
        super::log_failure(self.event, &mut self.last_logged, text, wait);
        wait
    }

    /// The backoff alone, for a caller that waits itself (`export --since`).
    pub(crate) fn backoff(&mut self) -> &mut Backoff {
        &mut self.backoff
    }
}

/// Runs one send on `runtime`, giving up with a retryable error once
/// `deadline` (if any) passes; `what` names the signal in that error.
pub(crate) fn block_on_until(
    runtime: &tokio::runtime::Runtime,
    send: impl Future<Output = Result<Accepted, SendError>>,
    deadline: Option<Instant>,
    what: &str,
) -> Result<Accepted, SendError> {
    let Some(d) = deadline else {
        return runtime.block_on(send);
    };
    let left = d.saturating_duration_since(Instant::now());
    runtime
        .block_on(async { tokio::time::timeout(left, send).await })
        .unwrap_or_else(|_| {
            Err(SendError {
                verdict: retry::Verdict::Retry { after: None },
                cause: retry::Cause::NoAnswer,
                message: format!("{what}: flush deadline passed"),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_holds_sends_back_and_a_success_lets_them_go() {
        let mut pacing = Pacing::new("Export.Failed");
        assert_eq!(pacing.wait_left(), None);
        let wait = pacing.failed(retry::Verdict::Permanent, "down");
        assert_eq!(wait, Backoff::default().max);
        assert!(pacing.wait_left().is_some_and(|left| left <= wait));
        assert!(
            !pacing.wait_to_send_by(Instant::now() + Duration::from_millis(1)),
            "a flush does not wait for a backoff past its deadline"
        );
        pacing.succeeded();
        assert_eq!(pacing.wait_left(), None);
        assert!(pacing.wait_to_send_by(Instant::now() + Duration::from_secs(60)));
        assert!(
            !pacing.wait_to_send_by(Instant::now()),
            "nothing is sent once the deadline passed"
        );
        assert_eq!(pacing.backoff().failures(), 0);
    }

    #[test]
    fn a_lease_is_held_by_one_holder_at_a_time() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut store =
            hermes_meter_store::Outbox::open(&dir.path().join(hermes_meter_store::DB_FILE_NAME)).expect("store");
        let mine = Lease::new("traces", 30.0);
        let theirs = Lease {
            holder: "other-host:1:0".into(),
            ..mine.clone()
        };
        assert!(mine.take(&mut store, 100.0).expect("take"));
        assert!(!theirs.take(&mut store, 101.0).expect("take"), "held by a live holder");
        mine.release(&mut store).expect("release");
        assert!(theirs.take(&mut store, 102.0).expect("take"), "free once released");
    }
}
