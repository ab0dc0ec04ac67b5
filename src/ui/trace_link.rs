//! The link from a session page to its trace in a trace UI (Jaeger by
//! default; any UI whose address holds the trace id).
//!
//! Owns: what the setting may hold and the address it makes. Must not
//! touch: the page's markup (`pages.rs` escapes what this returns).

use hyper::Uri;

use hermes_meter_runtime::config::cli::TRACE_URL_ENV;

/// Where the trace id goes in a template.
const ID: &str = "{trace_id}";

/// Jaeger's UI port, on the host of the OTLP endpoint when nothing is set
/// (where the shipped docker-compose runs it).
const JAEGER_UI_PORT: u16 = 16686;

/// A trace UI's address for a trace id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLink {
    /// An http(s) address holding [`ID`] once or more.
    template: String,
    /// Made from the OTLP endpoint, not set by the user.
    pub guessed: bool,
    /// A Jaeger address (no template was given).
    pub jaeger: bool,
}

impl TraceLink {
    /// `text` as a user set it: an http(s) address with `{trace_id}` where
    /// the id goes, or a Jaeger address the id is appended to as
    /// `/trace/ID`. An empty text is no link.
    pub fn parse(text: &str) -> Result<Option<TraceLink>, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(None);
        }
        let jaeger = !text.contains(ID);
        let template = if !jaeger {
            text.to_string()
        } else {
            format!("{}/trace/{ID}", text.trim_end_matches('/'))
        };
        let uri: Uri = template
            .replace(ID, "0")
            .parse()
            .map_err(|e| format!("{TRACE_URL_ENV}: not an address ({e})"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none_or(str::is_empty) {
            return Err(format!(
                "{TRACE_URL_ENV}: an http(s) address is needed (with {ID} where the trace id goes)"
            ));
        }
        Ok(Some(TraceLink {
            template,
            guessed: false,
            jaeger,
        }))
    }

    /// Jaeger's UI on the host of the OTLP `endpoint`; `None` when it names
    /// no host.
    pub fn guess(endpoint: &str) -> Option<TraceLink> {
        let uri: Uri = endpoint.trim().parse().ok()?;
        let host = uri.host().filter(|h| !h.is_empty())?;
        Some(TraceLink {
            template: format!("http://{host}:{JAEGER_UI_PORT}/trace/{ID}"),
            guessed: true,
            jaeger: true,
        })
    }

    /// The address of `trace_id` (a span's hex id: nothing to escape).
    pub fn url(&self, trace_id: &str) -> String {
        let id: String = trace_id.chars().filter(char::is_ascii_hexdigit).collect();
        self.template.replace(ID, &id)
    }

    /// The setting: `flag`, else `HERMES_METER_TRACE_URL` (empty: no
    /// link), else Jaeger on the OTLP endpoint's host when one is
    /// configured. A setting that is no http(s) address is said on stderr
    /// and gives no link: the viewer still starts (the dashboard tab
    /// runs it too).
    pub fn from_settings(flag: Option<String>, endpoint: Option<&str>) -> Option<TraceLink> {
        match hermes_meter_runtime::config::cli::trace_url(flag) {
            Some(text) => TraceLink::parse(&text).unwrap_or_else(|e| {
                eprintln!("hermes-meter: {e}; the session pages link to no trace UI");
                None
            }),
            None => endpoint.and_then(TraceLink::guess),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jaeger_address_gets_the_trace_path_and_a_template_the_id() {
        let jaeger = TraceLink::parse("http://jaeger.internal:16686/").unwrap().unwrap();
        assert_eq!(
            jaeger.url("0af7651916cd43dd"),
            "http://jaeger.internal:16686/trace/0af7651916cd43dd"
        );
        let grafana = TraceLink::parse("https://grafana.example/explore?traceId={trace_id}&x=1")
            .unwrap()
            .unwrap();
        assert_eq!(
            grafana.url("abc123"),
            "https://grafana.example/explore?traceId=abc123&x=1"
        );
        // Only hex digits of the id reach the address.
        assert_eq!(
            grafana.url("ab\"><script>"),
            "https://grafana.example/explore?traceId=abc&x=1"
        );
        assert!(!jaeger.guessed && jaeger.jaeger && !grafana.jaeger);
    }

    #[test]
    fn anything_but_an_http_address_is_refused_and_empty_is_no_link() {
        for bad in [
            "javascript:alert(1)",
            "ftp://host/{trace_id}",
            "not a url",
            "http:///trace",
        ] {
            assert!(TraceLink::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(TraceLink::parse("  "), Ok(None));
    }

    #[test]
    fn jaeger_is_guessed_on_the_otlp_endpoints_host() {
        let link = TraceLink::guess("http://collector.lan:4317").unwrap();
        assert!(link.guessed);
        assert_eq!(link.url("ff"), "http://collector.lan:16686/trace/ff");
        assert_eq!(
            TraceLink::guess("https://[::1]:4318/v1/traces").unwrap().url("ff"),
            "http://[::1]:16686/trace/ff"
        );
        assert_eq!(TraceLink::guess("not an endpoint"), None);
    }
}
