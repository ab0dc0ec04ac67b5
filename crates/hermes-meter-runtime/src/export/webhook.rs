//! Alerts to a person: each alert the store holds (budget notices, runaway
//! loops, models that started costing money or went away) is posted to the
//! webhook of `HERMES_METER_ALERT_WEBHOOK`, from the store like spans:
//! never from a hook thread, retried until the receiver takes it, once per
//! alert (a process claims an alert before it posts it).
//!
//! Owns: the body shapes, the post, and what every sink of alerts to a
//! person shares: claiming the alerts due, the backoff after a failure
//! (also used by the delivery through Hermes, which sends from Python).
//! Must not touch: the hook path, raising alerts (the gate and the ledger
//! do; this only reads them).

use std::time::Duration;

use crate::config::webhook::{WebhookConfig, WebhookFormat};
use hermes_meter_store::error::Result;
use hermes_meter_store::{AlertRow, AlertSink, Outbox};

/// Alerts older than this when first seen by a webhook are not posted: a
/// webhook configured today does not replay last month.
pub const PUSH_HORIZON_S: f64 = 24.0 * 3600.0;
/// Most alerts posted in one step.
const PER_STEP: usize = 20;
/// How long one post may take.
const POST_TIMEOUT: Duration = Duration::from_secs(5);
/// A post is not begun with less time than this left (an exit's deadline).
const MIN_POST: Duration = Duration::from_millis(50);
/// How long a claim holds off other processes: past a post's timeout.
const CLAIM_S: f64 = 30.0;
/// The longest wait between two tries of one alert.
const MAX_BACKOFF_S: f64 = 300.0;

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushStep {
    pub pushed: usize,
    /// The failure that ended the step, if one did.
    pub error: Option<String>,
}

/// The webhook sink of one process.
pub struct AlertPush {
    config: WebhookConfig,
    agent: ureq::Agent,
    host: String,
    /// The receiver's own backoff: (failures in a row, no post before
    /// this Unix time). A receiver that is down or failing is asked once
    /// per backoff, not once per alert: the per-alert backoff alone asked
    /// it for each alert not yet tried.
    receiver: std::sync::Mutex<(u32, f64)>,
}

/// How a post failed: the receiver (down, slow, 5xx, 429, a redirect),
/// which every alert would meet, or this alert (another 4xx: its body).
enum PostError {
    Receiver(String),
    Alert(String),
}

impl std::fmt::Debug for AlertPush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertPush").field("target", &self.target()).finish()
    }
}

impl AlertPush {
    pub fn new(config: WebhookConfig) -> Self {
        // A redirect is never followed: it would turn the POST into a
        // body-less GET to whatever address the receiver names (an internal
        // one, say), and that GET's 200 would count the alert delivered.
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(POST_TIMEOUT))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into();
        AlertPush {
            config,
            agent,
            host: crate::process::host_name(),
            receiver: std::sync::Mutex::new((0, f64::NEG_INFINITY)),
        }
    }

    /// Where it posts, without the URL's path.
    pub fn target(&self) -> String {
        self.config.redacted()
    }

    /// Posts the alerts due now, oldest first; stops at the first failure
    /// (a receiver that is down is not asked twenty times), which leaves
    /// the alert for a later step, after a backoff.
    pub fn run_once(&self, store: &Outbox, now: f64) -> Result<PushStep> {
        self.run_until(store, now, None)
    }

    /// [`AlertPush::run_once`], each post bounded by `deadline` as well (a
    /// process's exit); none is begun past it.
    pub fn run_until(&self, store: &Outbox, now: f64, deadline: Option<std::time::Instant>) -> Result<PushStep> {
        let mut step = PushStep::default();
        let mut receiver = self.receiver.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if now < receiver.1 {
            // The receiver failed lately: it is not asked again before its backoff.
            return Ok(step);
        }
        // Each claimed just before its post: one the step does not reach
        // (it stopped at a failure) stays free for the next step.
        for alert in store.alerts_to_push(AlertSink::Webhook, now, now - PUSH_HORIZON_S, PER_STEP)? {
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if left.is_some_and(|l| l < MIN_POST) {
                break;
            }
            if !store.claim_alert_push(AlertSink::Webhook, &alert.kind, &alert.key, now, now + CLAIM_S)? {
                continue;
            }
            match self.post(&alert, left) {
                Ok(()) => {
                    sent(store, AlertSink::Webhook, &alert.kind, &alert.key, Ok(()), now)?;
                    step.pushed += 1;
                    *receiver = (0, f64::NEG_INFINITY);
                }
                Err(PostError::Alert(e)) => {
                    sent(store, AlertSink::Webhook, &alert.kind, &alert.key, Err(&e), now)?;
                    step.error = Some(format!("alert webhook {}: {e}", self.target()));
                }
                Err(PostError::Receiver(e)) => {
                    sent(store, AlertSink::Webhook, &alert.kind, &alert.key, Err(&e), now)?;
                    receiver.0 += 1;
                    receiver.1 = now + backoff(receiver.0);
                    step.error = Some(format!("alert webhook {}: {e}", self.target()));
                    break;
                }
            }
        }
        Ok(step)
    }

    /// One POST, within `left` when given; any 2xx is taken, a redirect
    /// is refused (see [`AlertPush::new`]). The answer's body is never read.
    fn post(&self, alert: &AlertRow, left: Option<Duration>) -> std::result::Result<(), PostError> {
        let body = body(self.config.format, alert, &self.host);
        let timeout = left.map_or(POST_TIMEOUT, |l| l.min(POST_TIMEOUT));
        let response = self
            .agent
            .post(&self.config.url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| PostError::Receiver(e.to_string().replace(&self.config.url, &self.config.redacted())))?;
        let status = response.status().as_u16();
        match status {
            200..=299 => Ok(()),
            300..=399 => Err(PostError::Receiver(format!(
                "answered with a redirect (HTTP {status}), which is not followed: point \
                 HERMES_METER_ALERT_WEBHOOK at the address that takes the POST itself"
            ))),
            408 | 429 => Err(PostError::Receiver(format!("answered HTTP {status}"))),
            400..=499 => Err(PostError::Alert(format!("answered HTTP {status}"))),
            _ => Err(PostError::Receiver(format!("answered HTTP {status}"))),
        }
    }
}

/// Up to `limit` alerts due for `sink` now, each claimed by this process
/// for one try (no other process tries it meanwhile), oldest first: take
/// as many as are tried at once (the delivery through Hermes takes one at
/// a time). Alerts raised more than [`PUSH_HORIZON_S`] ago are left alone.
pub fn claim_due(store: &Outbox, sink: AlertSink, now: f64, limit: usize) -> Result<Vec<AlertRow>> {
    let mut out = Vec::new();
    for alert in store.alerts_to_push(sink, now, now - PUSH_HORIZON_S, limit)? {
        if store.claim_alert_push(sink, &alert.kind, &alert.key, now, now + CLAIM_S)? {
            out.push(alert);
        }
    }
    Ok(out)
}

/// Writes down how a claimed try of `sink` went: taken, or failed with
/// the error and due again after a backoff that doubles with each try (5 s
/// to 5 min).
pub fn sent(
    store: &Outbox,
    sink: AlertSink,
    kind: &str,
    key: &str,
    outcome: std::result::Result<(), &str>,
    now: f64,
) -> Result<()> {
    match outcome {
        Ok(()) => store.alert_pushed(sink, kind, key, hermes_meter_store::unix_now()),
        Err(e) => {
            let attempts = store.alert_push_attempts(sink, kind, key)?;
            store.alert_push_failed(sink, kind, key, e, now + backoff(attempts.clamp(0, 10) as u32))
        }
    }
}

/// The wait after the `failures`-th failure in a row: 5 s, doubling, at
/// most [`MAX_BACKOFF_S`].
fn backoff(failures: u32) -> f64 {
    (5.0 * 2f64.powi(failures.clamp(1, 10) as i32 - 1)).min(MAX_BACKOFF_S)
}

/// Text for Slack's message markup: `&`, `<` and `>` escaped as Slack asks,
/// so a model name or session id in an alert cannot ping `<!channel>` or
/// show a link that reads as something else.
pub fn slack_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if c.is_control() && c != '\n' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The body of one alert in `format`.
pub fn body(format: WebhookFormat, alert: &AlertRow, host: &str) -> serde_json::Value {
    match format {
        WebhookFormat::Slack => serde_json::json!({
            "text": format!("*hermes-meter* on {}: {}", slack_escape(host), slack_escape(&alert.text)),
        }),
        WebhookFormat::Json => serde_json::json!({
            "source": "hermes-meter",
            "host": host,
            "kind": alert.kind,
            "key": alert.key,
            "text": alert.text,
            "count": alert.count,
            "first_at": alert.first_at,
            "last_at": alert.last_at,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_text_cannot_ping_or_disguise_a_link() {
        assert_eq!(
            slack_escape("model <!channel> & <https://evil|bank.com>"),
            "model &lt;!channel&gt; &amp; &lt;https://evil|bank.com&gt;"
        );
        assert_eq!(slack_escape("a\x1b[2Jb\nc"), "a [2Jb\nc");
    }
}
