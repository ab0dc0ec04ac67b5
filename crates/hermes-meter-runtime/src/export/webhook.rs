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
use crate::error::Result;
use crate::store::{AlertRow, AlertSink, Outbox};

/// Alerts older than this when first seen by a webhook are not posted: a
/// webhook configured today does not replay last month.
pub const PUSH_HORIZON_S: f64 = 24.0 * 3600.0;
/// Most alerts posted in one step.
const PER_STEP: usize = 20;
/// How long one post may take.
const POST_TIMEOUT: Duration = Duration::from_secs(5);
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
}

impl std::fmt::Debug for AlertPush {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlertPush").field("target", &self.target()).finish()
    }
}

impl AlertPush {
    pub fn new(config: WebhookConfig) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(POST_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        AlertPush {
            config,
            agent,
            host: crate::process::host_name(),
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
        let mut step = PushStep::default();
        // Each claimed just before its post: one the step does not reach
        // (it stopped at a failure) stays free for the next step.
        for alert in store.alerts_to_push(AlertSink::Webhook, now, now - PUSH_HORIZON_S, PER_STEP)? {
            if !store.claim_alert_push(AlertSink::Webhook, &alert.kind, &alert.key, now, now + CLAIM_S)? {
                continue;
            }
            match self.post(&alert) {
                Ok(()) => {
                    sent(store, AlertSink::Webhook, &alert.kind, &alert.key, Ok(()), now)?;
                    step.pushed += 1;
                }
                Err(e) => {
                    sent(store, AlertSink::Webhook, &alert.kind, &alert.key, Err(&e), now)?;
                    step.error = Some(format!("alert webhook {}: {e}", self.target()));
                    break;
                }
            }
        }
        Ok(step)
    }

    /// One POST; any 2xx is taken.
    fn post(&self, alert: &AlertRow) -> std::result::Result<(), String> {
        let body = body(self.config.format, alert, &self.host);
        let response = self
            .agent
            .post(&self.config.url)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            Ok(())
        } else {
            Err(format!("answered HTTP {status}"))
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
        Ok(()) => store.alert_pushed(sink, kind, key, crate::unix_now()),
        Err(e) => {
            let attempts = store.alert_push_attempts(sink, kind, key)?;
            let wait = (5.0 * 2f64.powi(attempts.clamp(1, 10) as i32 - 1)).min(MAX_BACKOFF_S);
            store.alert_push_failed(sink, kind, key, e, now + wait)
        }
    }
}

/// The body of one alert in `format`.
pub fn body(format: WebhookFormat, alert: &AlertRow, host: &str) -> serde_json::Value {
    match format {
        WebhookFormat::Slack => serde_json::json!({
            "text": format!("*hermes-meter* on {host}: {}", alert.text),
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
