//! One parser per type of setting, and the resolver that walks a setting's
//! rungs (flag, variables in order, default) with them.
//!
//! Owns: how a boolean, a number of seconds, a count and a `k=v` list are
//! read from a variable's text, and the warning a value that does not parse
//! leaves. Must not touch: the process environment (the resolvers in this
//! module's siblings hand it a lookup), the store, the network.

use super::{Resolved, Source};

/// Resolves settings one by one from one lookup, collecting warnings.
pub(crate) struct Resolver<'a> {
    /// The lookup; an empty or blank value counts as unset.
    pub(crate) var: &'a dyn Fn(&str) -> Option<String>,
    pub(crate) warnings: Vec<String>,
}

impl Resolver<'_> {
    /// explicit > each variable in order > default. A variable whose value
    /// does not parse is skipped with a warning (the OTel SDK specification:
    /// an invalid value falls back as if unset).
    pub(crate) fn setting<T>(
        &mut self,
        explicit: Option<T>,
        names: &[&'static str],
        parse: impl Fn(&str) -> Option<T>,
        default: T,
    ) -> Resolved<T> {
        if let Some(value) = explicit {
            return Resolved {
                value,
                source: Source::Explicit,
            };
        }
        for &name in names {
            if let Some(raw) = (self.var)(name) {
                match parse(&raw) {
                    Some(value) => {
                        return Resolved {
                            value,
                            source: Source::Env(name),
                        }
                    }
                    None => self.warnings.push(format!("{name}: value not understood, ignored")),
                }
            }
        }
        Resolved {
            value: default,
            source: Source::Default,
        }
    }

    /// A boolean: the first of `names` that is set decides, read by
    /// [`parse_bool`]; `default` when none is set.
    pub(crate) fn flag(&mut self, names: &[&'static str], default: bool) -> Resolved<bool> {
        for &name in names {
            if let Some(raw) = (self.var)(name) {
                let (value, understood) = parse_bool(&raw);
                if !understood {
                    self.warnings
                        .push(format!("{name}: neither true nor false, read as false"));
                }
                return Resolved {
                    value,
                    source: Source::Env(name),
                };
            }
        }
        Resolved {
            value: default,
            source: Source::Default,
        }
    }
}

/// A boolean as the OTel SDK specification reads one: `true` (any case) is
/// true and anything else false; the second value says whether the text was
/// `true` or `false` (anything else deserves a warning). The specification
/// forbids reading `1`, `yes` or `on` as true, and the one parser means
/// every boolean of ours reads the same (content capture always did).
pub(crate) fn parse_bool(s: &str) -> (bool, bool) {
    let s = s.trim();
    if s.eq_ignore_ascii_case("true") {
        (true, true)
    } else {
        (false, s.eq_ignore_ascii_case("false"))
    }
}

/// Where captured content goes, as the OpenTelemetry GenAI
/// instrumentations spell it (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum CaptureMode {
    /// Nothing is captured (`false`, `NO_CONTENT`).
    #[default]
    NoContent,
    /// On spans (`true`, `SPAN_ONLY`).
    SpanOnly,
    /// In content events, OTLP log records (`EVENT_ONLY`).
    EventOnly,
    /// Both (`SPAN_AND_EVENT`).
    SpanAndEvent,
}

impl CaptureMode {
    /// Parses the value (any case); `None` for anything else (read as off).
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s.trim().to_ascii_uppercase().as_str() {
            "TRUE" | "SPAN_ONLY" => CaptureMode::SpanOnly,
            "SPAN_AND_EVENT" => CaptureMode::SpanAndEvent,
            "EVENT_ONLY" => CaptureMode::EventOnly,
            "FALSE" | "NO_CONTENT" => CaptureMode::NoContent,
            _ => return None,
        })
    }

    /// Whether hooks capture content at all.
    pub(crate) fn captures(self) -> bool {
        self != CaptureMode::NoContent
    }

    /// Whether spans carry it.
    pub(crate) fn on_spans(self) -> bool {
        matches!(self, CaptureMode::SpanOnly | CaptureMode::SpanAndEvent)
    }

    /// Whether content events carry it.
    pub(crate) fn as_events(self) -> bool {
        matches!(self, CaptureMode::EventOnly | CaptureMode::SpanAndEvent)
    }
}

/// Whether hooks capture content: any [`CaptureMode`] but `NO_CONTENT`.
/// `None` for a value that is not one.
pub(crate) fn parse_capture(s: &str) -> Option<bool> {
    CaptureMode::parse(s).map(CaptureMode::captures)
}

/// A non-negative, finite number (seconds, hours, days; fractions allowed).
pub(crate) fn parse_non_negative(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
}

/// A positive whole number.
pub(crate) fn parse_positive<T: std::str::FromStr + PartialOrd + Default>(s: &str) -> Option<T> {
    s.trim().parse::<T>().ok().filter(|n| *n > T::default())
}

/// `k1=v1,k2=v2` with percent-encoded values (the W3C baggage form the
/// specification uses for headers and resource attributes).
pub(crate) fn parse_key_values(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    for pair in s.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = pair.split_once('=')?;
        let k = k.trim();
        if k.is_empty() {
            return None;
        }
        out.push((k.to_string(), percent_decode(v.trim())?));
    }
    Some(out)
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_true_reads_as_true_and_only_true_or_false_reads_without_a_warning() {
        for (text, want) in [
            ("true", (true, true)),
            (" TRUE ", (true, true)),
            ("false", (false, true)),
            ("False", (false, true)),
            ("1", (false, false)),
            ("yes", (false, false)),
            ("on", (false, false)),
            ("0", (false, false)),
            ("", (false, false)),
        ] {
            assert_eq!(parse_bool(text), want, "{text:?}");
        }
    }

    #[test]
    fn amounts_are_finite_and_not_negative() {
        assert_eq!(parse_non_negative(" 1.5 "), Some(1.5));
        assert_eq!(parse_non_negative("0"), Some(0.0));
        assert_eq!(parse_non_negative("-1"), None);
        assert_eq!(parse_non_negative("inf"), None);
        assert_eq!(parse_non_negative("soon"), None);
        assert_eq!(parse_positive::<u64>("0"), None);
        assert_eq!(parse_positive::<u64>(" 7"), Some(7));
    }

    #[test]
    fn key_values_are_percent_decoded() {
        assert_eq!(
            parse_key_values("a=s%3Dx, b=2"),
            Some(vec![("a".into(), "s=x".into()), ("b".into(), "2".into())])
        );
        assert_eq!(parse_key_values("=v"), None);
        assert_eq!(parse_key_values("a=%zz"), None);
    }
}
