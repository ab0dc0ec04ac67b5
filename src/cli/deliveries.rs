//! What `status` says of what reaches a person: the alert webhook, alerts
//! sent through Hermes itself (`HERMES_METER_ALERT_DELIVER`), the alerts of
//! the last day and where each went, and the scheduled spend digests
//! (`HERMES_METER_DIGEST`): what is set, and what went out last.

use hermes_meter_model::digest::Every;
use hermes_meter_store::error::Result;
use hermes_meter_store::Reader;

/// The alert webhook (its URL without the path, which may be its key) and
/// how many alerts it took and has not taken yet.
pub(super) fn webhook_json(store: &Reader) -> Result<serde_json::Value> {
    let config = match hermes_meter_runtime::config::webhook::WebhookConfig::from_env() {
        Ok(Some(c)) => c,
        Ok(None) => return Ok(serde_json::Value::Null),
        Err(e) => return Ok(serde_json::json!({ "error": e })),
    };
    let (pushed, waiting, last_error) = store.alert_push_status(hermes_meter_store::AlertSink::Webhook)?;
    Ok(serde_json::json!({
        "url": config.redacted(),
        "format": format!("{:?}", config.format).to_ascii_lowercase(),
        "pushed": pushed,
        "waiting": waiting,
        "last_error": last_error,
    }))
}

pub(super) fn print_webhook(store: &Reader) -> Result<()> {
    let v = webhook_json(store)?;
    if v.is_null() {
        println!("alert webhook   off (set HERMES_METER_ALERT_WEBHOOK to post alerts to a person)");
    } else if let Some(e) = v["error"].as_str() {
        println!("alert webhook   not usable: {e}");
    } else {
        let error = v["last_error"]
            .as_str()
            .map_or(String::new(), |e| format!("; last failure: {e}"));
        println!(
            "alert webhook   {} ({}): {} posted, {} not yet{error}",
            v["url"].as_str().unwrap_or(""),
            v["format"].as_str().unwrap_or(""),
            v["pushed"],
            v["waiting"]
        );
    }
    Ok(())
}

/// How far back `status` lists the alerts raised.
pub(super) const RECENT_ALERTS_S: f64 = 24.0 * 3600.0;
/// Most alerts `status` lists.
pub(super) const RECENT_ALERTS_MAX: usize = 10;

/// Where one alert went: the agent (shown at a `pre_llm_call`), the
/// webhook and Hermes's channel (taken, failing and why, or off).
fn alert_routes(a: &hermes_meter_store::RecentAlert, webhook: bool, deliver: bool, now: f64) -> Vec<String> {
    let when = |t: f64| hermes_meter_model::display::ago(t, now);
    let esc = |t: &str| hermes_meter_model::display::escape(t).into_owned();
    let mut out = Vec::new();
    out.push(match (a.alert.delivered_at, &a.delivered_to) {
        (Some(t), Some(s)) => format!("shown to the agent of session {} {}", esc(s), when(t)),
        (Some(t), None) => format!("shown to the agent {}", when(t)),
        (None, _) => "not shown to an agent yet (at its next turn)".to_string(),
    });
    let sink = |name: &str, on: bool, sent: Option<f64>, error: &Option<String>| match (on, sent, error) {
        (false, _, _) => format!("{name} off"),
        (true, Some(t), _) => format!("{name} took it {}", when(t)),
        (true, None, Some(e)) => format!("{name} failing: {}", esc(e)),
        (true, None, None) => format!("{name} not tried yet"),
    };
    out.push(sink("webhook", webhook, a.pushed_at, &a.push_error));
    out.push(sink("Hermes channel", deliver, a.hermes_sent_at, &a.hermes_error));
    out
}

pub(super) fn recent_alerts_json(alerts: &[hermes_meter_store::RecentAlert]) -> serde_json::Value {
    serde_json::Value::Array(
        alerts
            .iter()
            .map(|a| {
                serde_json::json!({
                    "kind": a.alert.kind, "text": a.alert.text, "count": a.alert.count,
                    "first_at": a.alert.first_at, "last_at": a.alert.last_at,
                    "shown_at": a.alert.delivered_at, "shown_in": a.delivered_to,
                    "webhook_at": a.pushed_at, "webhook_error": a.push_error,
                    "hermes_at": a.hermes_sent_at, "hermes_error": a.hermes_error,
                })
            })
            .collect(),
    )
}

/// The alerts of the last day (`alerts`, newest first), and where each went.
pub(super) fn print_recent_alerts(alerts: &[hermes_meter_store::RecentAlert]) {
    let now = hermes_meter_store::unix_now();
    if alerts.is_empty() {
        println!("alerts          none in the last 24 h");
        return;
    }
    let webhook = matches!(
        hermes_meter_runtime::config::webhook::WebhookConfig::from_env(),
        Ok(Some(_))
    );
    let deliver = hermes_meter_runtime::config::webhook::deliver_target().is_some();
    println!("alerts          {} in the last 24 h, newest first:", alerts.len());
    for a in alerts {
        let mut text: String = hermes_meter_model::display::escape(&a.alert.text)
            .chars()
            .take(160)
            .collect();
        if a.alert.text.chars().count() > 160 {
            text.push('…');
        }
        let times = if a.alert.count > 1 {
            format!(" ({} times)", a.alert.count)
        } else {
            String::new()
        };
        println!(
            "  {} {}{times}: {text}",
            hermes_meter_model::display::ago(a.alert.last_at, now),
            hermes_meter_model::display::escape(&a.alert.kind)
        );
        println!("      {}", alert_routes(a, webhook, deliver, now).join("; "));
    }
}

/// Where alerts go through Hermes itself (`HERMES_METER_ALERT_DELIVER`)
/// and how many its sender took and has not taken yet.
pub(super) fn delivery_json(store: &Reader) -> Result<serde_json::Value> {
    let Some(target) = hermes_meter_runtime::config::webhook::deliver_target() else {
        return Ok(serde_json::Value::Null);
    };
    let (sent, waiting, last_error) = store.alert_push_status(hermes_meter_store::AlertSink::Hermes)?;
    Ok(serde_json::json!({
        "target": target.trim(),
        "sent": sent,
        "waiting": waiting,
        "last_error": last_error,
    }))
}

fn print_delivery(store: &Reader) -> Result<()> {
    let v = delivery_json(store)?;
    if v.is_null() {
        println!(
            "alert delivery  off (set {} to a Hermes platform, e.g. telegram, to message alerts through Hermes)",
            hermes_meter_runtime::config::webhook::DELIVER_ENV
        );
        return Ok(());
    }
    let error = v["last_error"]
        .as_str()
        .map_or(String::new(), |e| format!("; last failure: {e}"));
    println!(
        "alert delivery  through Hermes to {}: {} sent, {} not yet{error} (sent by Hermes processes, not this command)",
        v["target"].as_str().unwrap_or(""),
        v["sent"],
        v["waiting"]
    );
    Ok(())
}

/// The digests set and the last of each: its period, when it was made, and
/// whether the webhook took it and Hermes's sender sent it.
pub(super) fn digests_json(store: &Reader) -> Result<serde_json::Value> {
    let every = match hermes_meter_runtime::config::digest::from_env() {
        Ok(every) => every,
        Err(e) => return Ok(serde_json::json!({ "error": e })),
    };
    let mut last = serde_json::Map::new();
    for e in [Every::Day, Every::Week] {
        if let Some(d) = store.last_digest(e.alert_kind())? {
            last.insert(
                e.as_str().into(),
                serde_json::json!({
                    "period": d.period,
                    "raised_at": d.raised_at,
                    "posted_at": d.posted_at,
                    "sent_at": d.sent_at,
                }),
            );
        }
    }
    Ok(serde_json::json!({
        "every": every.iter().map(|e| e.as_str()).collect::<Vec<_>>(),
        "last": last,
    }))
}

/// The delivery through Hermes, then the digests.
pub(super) fn print(store: &Reader) -> Result<()> {
    print_delivery(store)?;
    let v = digests_json(store)?;
    if let Some(e) = v["error"].as_str() {
        println!("digests         {e}: none is sent");
        return Ok(());
    }
    let every: Vec<&str> = v["every"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str())
        .collect();
    if every.is_empty() {
        println!(
            "digests         off (set {}=day, week or day,week for a spend digest where alerts go)",
            hermes_meter_runtime::config::digest::DIGEST_ENV
        );
        return Ok(());
    }
    let now = hermes_meter_store::unix_now();
    for e in every {
        let line = match v["last"].get(e) {
            None => "none made yet (the first goes out after the current period ends)".to_string(),
            Some(d) => {
                let went = |k: &str, sink: &str| match d[k].as_f64() {
                    Some(t) => format!("{sink} {}", hermes_meter_model::display::ago(t, now)),
                    None => format!("{sink} not yet"),
                };
                format!(
                    "last {}, made {}; {}, {}",
                    d["period"].as_str().unwrap_or(""),
                    hermes_meter_model::display::ago(d["raised_at"].as_f64().unwrap_or(now), now),
                    went("posted_at", "webhook"),
                    went("sent_at", "through Hermes")
                )
            }
        };
        println!("digest {e:<8} {line}");
    }
    Ok(())
}
