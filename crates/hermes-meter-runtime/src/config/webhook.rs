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

/// Where alerts go through Hermes itself (`HERMES_METER_ALERT_DELIVER`),
/// when it is set and not blank.
pub fn deliver_target() -> Option<String> {
    process_var(DELIVER_ENV).filter(|t| !t.trim().is_empty())
}

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
            // Never the value itself: a mistyped URL is still its key.
            return Err(format!(
                "{WEBHOOK_ENV} is not an http:// or https:// URL (it is {} characters long and starts with {:?})",
                url.chars().count(),
                url.chars().take(6).collect::<String>()
            ));
        }
        let format = match format.as_deref().map(str::trim).unwrap_or("") {
            "" | "json" => WebhookFormat::Json,
            "slack" => WebhookFormat::Slack,
            other => return Err(format!("{WEBHOOK_FORMAT_ENV}: {other:?} is neither json nor slack")),
        };
        Ok(Some(WebhookConfig { url, format }))
    }

    /// The URL without anything that may be a secret, for status and
    /// logs: its scheme, host and port only (a Slack webhook's path is its
    /// key; a query or `user:password@` may hold one too).
    pub fn redacted(&self) -> String {
        redact_url(&self.url)
    }
}

/// `url`'s scheme, host and port, with `…` where a path, query, fragment
/// or user information was (any of which may be a secret).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => return "(not a URL)".into(),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let (had_user, host) = match authority.rfind('@') {
        Some(i) => (true, &authority[i + 1..]),
        None => (false, authority),
    };
    let more = authority_end < rest.len();
    format!(
        "{scheme}{}{host}{}",
        if had_user { "…@" } else { "" },
        if more { "/…" } else { "" }
    )
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
        // Credentials, a query without a path, a mistyped URL: never shown.
        for (url, shown) in [
            (
                "https://user:pa55word@hooks.example.com/x",
                "https://…@hooks.example.com/…",
            ),
            ("https://hooks.example.com?token=s3cret", "https://hooks.example.com/…"),
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
        let e = WebhookConfig::from_values(s("hooks.slack.com/services/T0/B0/s3cretkey"), None).expect_err("no scheme");
        assert!(!e.contains("s3cretkey") && !e.contains("services"), "{e}");
        assert!(WebhookConfig::from_values(s("http://127.0.0.1:9/"), s("teams")).is_err());
    }
}
