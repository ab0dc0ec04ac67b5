//! The alert webhook's settings: `HERMES_METER_ALERT_WEBHOOK` (the URL a
//! JSON POST goes to for each alert) and `HERMES_METER_ALERT_WEBHOOK_FORMAT`
//! (`json`, the default, or `slack`, the body a Slack incoming webhook and
//! the services copying it take).

use super::process_var;

/// The variable naming the webhook URL.
pub(crate) const WEBHOOK_ENV: &str = "HERMES_METER_ALERT_WEBHOOK";
/// The variable naming its body's shape.
pub(crate) const WEBHOOK_FORMAT_ENV: &str = "HERMES_METER_ALERT_WEBHOOK_FORMAT";
/// A platform Hermes's gateway is configured for (its home channel), or
/// `platform:chat_id[:thread_id]`: alerts go there as a message through
/// Hermes itself (read by the plugin, which sends them).
pub const DELIVER_ENV: &str = "HERMES_METER_ALERT_DELIVER";

/// The body's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WebhookFormat {
    /// `{"source": "hermes-meter", "kind": ..., "text": ..., ...}`.
    #[default]
    Json,
    /// `{"text": ...}`.
    Slack,
}

/// Where alerts are pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    pub url: String,
    pub format: WebhookFormat,
}

impl WebhookConfig {
    /// From the environment: `None` without a URL; an error for a URL that
    /// is not http(s) or an unknown format.
    pub fn from_env() -> Result<Option<Self>, String> {
        Self::from_values(process_var(WEBHOOK_ENV), process_var(WEBHOOK_FORMAT_ENV))
    }

    pub(crate) fn from_values(url: Option<String>, format: Option<String>) -> Result<Option<Self>, String> {
        let Some(url) = url.map(|u| u.trim().to_string()).filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let lower = url.to_ascii_lowercase();
        if !(lower.starts_with("http://") || lower.starts_with("https://")) {
            return Err(format!("{WEBHOOK_ENV}: {url:?} is not an http:// or https:// URL"));
        }
        let format = match format.as_deref().map(str::trim).unwrap_or("") {
            "" | "json" => WebhookFormat::Json,
            "slack" => WebhookFormat::Slack,
            other => return Err(format!("{WEBHOOK_FORMAT_ENV}: {other:?} is neither json nor slack")),
        };
        Ok(Some(WebhookConfig { url, format }))
    }

    /// The URL without what may be a secret (a Slack webhook's path is its
    /// key), for status and logs.
    pub fn redacted(&self) -> String {
        match self
            .url
            .find("://")
            .and_then(|i| self.url[i + 3..].find('/').map(|j| i + 3 + j))
        {
            Some(path) => format!("{}/…", &self.url[..path]),
            None => self.url.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_and_format_are_checked_and_the_path_kept_out_of_logs() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(WebhookConfig::from_values(None, s("slack")), Ok(None));
        let c = WebhookConfig::from_values(s("https://hooks.slack.com/services/T0/B0/secret"), s("slack"))
            .expect("valid")
            .expect("set");
        assert_eq!(c.format, WebhookFormat::Slack);
        assert_eq!(c.redacted(), "https://hooks.slack.com/…");
        assert!(WebhookConfig::from_values(s("ftp://x"), None).is_err());
        assert!(WebhookConfig::from_values(s("http://127.0.0.1:9/"), s("teams")).is_err());
    }
}
