//! What `status` says of what reaches a person besides the webhook:
//! alerts sent through Hermes itself (`HERMES_METER_ALERT_DELIVER`) and the
//! scheduled spend digests (`HERMES_METER_DIGEST`): what is set, and what
//! went out last.

use hermes_meter_model::digest::Every;
use hermes_meter_store::error::Result;
use hermes_meter_store::Reader;

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
