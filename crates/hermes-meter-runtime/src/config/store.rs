//! Where the store lives and what it keeps: the store directory, the
//! retention of what is not ledger, and whether content is captured.
//!
//! Owns: resolving those settings, each with its source. Must not touch:
//! the store itself (`crates/hermes-meter-store/src/retention.rs` applies the retention), the
//! environment (the caller hands a lookup; [`store_dir`] reads through
//! [`super::process_var_set`]).

use std::path::PathBuf;

use super::parse::{parse_capture, parse_non_negative};
use super::{env, Resolved, Source};

/// The store directory: `explicit` > `$HERMES_METER_HOME` >
/// `$HERMES_HOME/meter` > `~/.hermes/meter`. Empty variables count as unset.
pub fn store_dir(explicit: Option<PathBuf>) -> Resolved<PathBuf> {
    store_dir_from(explicit, super::process_var_set)
}

/// [`store_dir`] over any environment (tests pass a map).
pub(crate) fn store_dir_from(
    explicit: Option<PathBuf>,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Resolved<PathBuf> {
    if let Some(value) = explicit {
        return Resolved {
            value,
            source: Source::Explicit,
        };
    }
    if let Some(v) = var(env::HERMES_METER_HOME) {
        return Resolved {
            value: v.into(),
            source: Source::Env(env::HERMES_METER_HOME),
        };
    }
    if let Some(v) = var(env::HERMES_HOME) {
        return Resolved {
            value: PathBuf::from(v).join("meter"),
            source: Source::Env(env::HERMES_HOME),
        };
    }
    let home = var(env::HOME).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    Resolved {
        value: home.join(".hermes").join("meter"),
        source: Source::Default,
    }
}

/// Hermes's own home, where its `state.db` and `config.yaml` are:
/// `$HERMES_HOME` > `~/.hermes`. `status` reads Hermes's sessions there to
/// find the ones the plugin did not record.
pub fn hermes_home() -> Resolved<PathBuf> {
    hermes_home_from(super::process_var_set)
}

/// [`hermes_home`] over any environment.
pub(crate) fn hermes_home_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Resolved<PathBuf> {
    if let Some(v) = var(env::HERMES_HOME) {
        return Resolved {
            value: v.into(),
            source: Source::Env(env::HERMES_HOME),
        };
    }
    let home = var(env::HOME).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    Resolved {
        value: home.join(".hermes"),
        source: Source::Default,
    }
}

/// Whether content capture is on: `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`
/// `true`, `SPAN_ONLY`, `EVENT_ONLY` or `SPAN_AND_EVENT` (read by the one
/// parser, [`parse_capture`], so the hooks that capture and the exporters
/// that send agree; where it goes is the exporters' `CaptureMode`).
pub(crate) fn capture_content_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Resolved<bool> {
    match var(env::CAPTURE_CONTENT) {
        Some(v) => Resolved {
            value: parse_capture(&v.to_string_lossy()).unwrap_or(false),
            source: Source::Env(env::CAPTURE_CONTENT),
        },
        None => Resolved {
            value: false,
            source: Source::Default,
        },
    }
}

/// How long the store keeps what is not ledger (see `crates/hermes-meter-store/src/retention.rs`):
/// the ledger and budget rollups are kept for as long as the store lives.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    /// Journal rows older than this many days are deleted; events older
    /// than what was deleted are then refused (their keys are gone).
    pub journal_days: Resolved<f64>,
    /// Spans not accepted by a collector within this many days leave the
    /// outbox (`export --since` can still send them from the ledger).
    pub outbox_days: Resolved<f64>,
    /// Captured content is deleted this many hours after its session ended
    /// and its spans went out (or once its spans left the outbox unsent).
    pub content_hours: Resolved<f64>,
}

impl Retention {
    /// Four weeks: a month of journal to rebuild or replay from, and four
    /// weeks for a collector outage before spans are given up.
    pub(crate) const DEFAULT_JOURNAL_DAYS: f64 = 28.0;
    pub(crate) const DEFAULT_OUTBOX_DAYS: f64 = 28.0;
    /// A day: content exists to go out with its spans.
    pub(crate) const DEFAULT_CONTENT_HOURS: f64 = 24.0;
    /// The shortest journal retention: a hook's event is applied within
    /// seconds, a dead process's spool within a minute of the next start;
    /// a horizon closer than a day could refuse events still on their way.
    pub(crate) const MIN_JOURNAL_DAYS: f64 = 1.0;

    /// The retention settings: each variable if set to a number of at
    /// least its minimum, else the default (and a warning in `warnings`).
    pub fn from_vars(var: impl Fn(&str) -> Option<std::ffi::OsString>, warnings: &mut Vec<String>) -> Self {
        let mut setting = |name: &'static str, default: f64, min: f64| -> Resolved<f64> {
            let Some(v) = var(name) else {
                return Resolved {
                    value: default,
                    source: Source::Default,
                };
            };
            match parse_non_negative(&v.to_string_lossy()) {
                Some(x) if x >= min => Resolved {
                    value: x,
                    source: Source::Env(name),
                },
                _ => {
                    warnings.push(format!(
                        "{name}={v:?} is not a number of at least {min}; using {default}"
                    ));
                    Resolved {
                        value: default,
                        source: Source::Default,
                    }
                }
            }
        };
        Retention {
            journal_days: setting(
                env::RETENTION_JOURNAL_DAYS,
                Self::DEFAULT_JOURNAL_DAYS,
                Self::MIN_JOURNAL_DAYS,
            ),
            outbox_days: setting(env::RETENTION_OUTBOX_DAYS, Self::DEFAULT_OUTBOX_DAYS, 1.0),
            content_hours: setting(env::RETENTION_CONTENT_HOURS, Self::DEFAULT_CONTENT_HOURS, 0.0),
        }
    }

    /// The settings from the process environment (empty counts as unset).
    pub fn from_env(warnings: &mut Vec<String>) -> Self {
        Self::from_vars(super::process_var_set, warnings)
    }

    /// The defaults.
    pub fn defaults() -> Self {
        Self::from_vars(|_| None, &mut Vec::new())
    }

    /// Each setting as (variable, value, source), for `status`.
    pub fn describe(&self) -> Vec<(&'static str, String, String)> {
        [
            (env::RETENTION_JOURNAL_DAYS, &self.journal_days, "days"),
            (env::RETENTION_OUTBOX_DAYS, &self.outbox_days, "days"),
            (env::RETENTION_CONTENT_HOURS, &self.content_hours, "hours"),
        ]
        .into_iter()
        .map(|(name, r, unit)| (name, format!("{} {unit}", r.value), r.source.to_string()))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::ffi::OsString;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: HashMap<String, OsString> = pairs.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn store_dir_follows_flag_then_env_then_default() {
        let all = [("HERMES_METER_HOME", "/a"), ("HERMES_HOME", "/h"), ("HOME", "/u")];
        let r = store_dir_from(Some("/flag".into()), env_of(&all));
        assert_eq!((r.value, r.source), (PathBuf::from("/flag"), Source::Explicit));
        let r = store_dir_from(None, env_of(&all));
        assert_eq!(
            (r.value, r.source),
            (PathBuf::from("/a"), Source::Env("HERMES_METER_HOME"))
        );
        let r = store_dir_from(None, env_of(&all[1..]));
        assert_eq!(
            (r.value, r.source),
            (PathBuf::from("/h/meter"), Source::Env("HERMES_HOME"))
        );
        let r = store_dir_from(None, env_of(&all[2..]));
        assert_eq!(
            (r.value, r.source),
            (PathBuf::from("/u/.hermes/meter"), Source::Default)
        );
    }

    #[test]
    fn retention_follows_env_then_default_and_refuses_too_short_a_journal() {
        let mut warnings = Vec::new();
        let r = Retention::from_vars(env_of(&[]), &mut warnings);
        assert_eq!(r.journal_days.value, Retention::DEFAULT_JOURNAL_DAYS);
        assert_eq!(r.journal_days.source, Source::Default);
        let r = Retention::from_vars(
            env_of(&[
                ("HERMES_METER_RETENTION_JOURNAL_DAYS", "90"),
                ("HERMES_METER_RETENTION_OUTBOX_DAYS", "7"),
                ("HERMES_METER_RETENTION_CONTENT_HOURS", "0"),
            ]),
            &mut warnings,
        );
        assert_eq!(
            (r.journal_days.value, r.outbox_days.value, r.content_hours.value),
            (90.0, 7.0, 0.0)
        );
        assert_eq!(r.outbox_days.source, Source::Env("HERMES_METER_RETENTION_OUTBOX_DAYS"));
        assert!(warnings.is_empty());
        let r = Retention::from_vars(env_of(&[("HERMES_METER_RETENTION_JOURNAL_DAYS", "0.5")]), &mut warnings);
        assert_eq!(r.journal_days.value, Retention::DEFAULT_JOURNAL_DAYS);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn capture_content_is_on_for_true_and_every_mode_but_no_content() {
        let capture =
            |v: &str| capture_content_from(env_of(&[("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", v)])).value;
        assert!(!capture_content_from(env_of(&[])).value);
        for on in [
            "TRUE",
            "true",
            "SPAN_ONLY",
            "span_and_event",
            " SPAN_AND_EVENT ",
            "EVENT_ONLY",
        ] {
            assert!(capture(on), "{on}");
        }
        for off in ["yes", "false", "NO_CONTENT", ""] {
            assert!(!capture(off), "{off}");
        }
    }
}
