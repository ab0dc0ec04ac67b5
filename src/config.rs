//! Configuration: where the store lives and how the bridge behaves.
//!
//! Owns: resolving each setting once, in the documented order (explicit
//! argument, then environment, then defaults), and remembering where each
//! value came from so `status` can say. Must not touch: the store, the
//! network.

use std::path::PathBuf;

/// Names of the environment variables the bridge reads.
pub mod env {
    /// The store directory, overriding everything but an explicit flag.
    pub const HERMES_OTEL_HOME: &str = "HERMES_OTEL_HOME";
    /// Hermes's home; the store defaults to `$HERMES_HOME/otel`.
    pub const HERMES_HOME: &str = "HERMES_HOME";
    /// The user's home, for the `~/.hermes/otel` default.
    pub const HOME: &str = "HOME";
    /// Opt-in capture of prompts, responses and tool arguments.
    pub const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";
}

/// Default idle time after which a run that never ended is closed as
/// abandoned (`HERMES_OTEL_IDLE_TIMEOUT_SECONDS`; the writer's sweep and
/// the exporter both use it).
pub const DEFAULT_IDLE_TIMEOUT_SECONDS: f64 = 15.0 * 60.0;

/// The pricing file's name inside the store directory.
pub const PRICING_FILE_NAME: &str = "pricing.toml";

/// Where a resolved value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A command-line flag or an explicit argument.
    Explicit,
    /// An environment variable, by name.
    Env(&'static str),
    /// The built-in default.
    Default,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Explicit => f.write_str("flag"),
            Source::Env(name) => write!(f, "env {name}"),
            Source::Default => f.write_str("default"),
        }
    }
}

/// A resolved value and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved<T> {
    pub value: T,
    pub source: Source,
}

/// The store directory: `explicit` > `$HERMES_OTEL_HOME` >
/// `$HERMES_HOME/otel` > `~/.hermes/otel`. Empty variables count as unset.
pub fn store_dir(explicit: Option<PathBuf>) -> Resolved<PathBuf> {
    store_dir_from(explicit, |name| std::env::var_os(name).filter(|v| !v.is_empty()))
}

/// [`store_dir`] over any environment (tests pass a map).
pub fn store_dir_from(
    explicit: Option<PathBuf>,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Resolved<PathBuf> {
    if let Some(value) = explicit {
        return Resolved {
            value,
            source: Source::Explicit,
        };
    }
    if let Some(v) = var(env::HERMES_OTEL_HOME) {
        return Resolved {
            value: v.into(),
            source: Source::Env(env::HERMES_OTEL_HOME),
        };
    }
    if let Some(v) = var(env::HERMES_HOME) {
        return Resolved {
            value: PathBuf::from(v).join("otel"),
            source: Source::Env(env::HERMES_HOME),
        };
    }
    let home = var(env::HOME).map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    Resolved {
        value: home.join(".hermes").join("otel"),
        source: Source::Default,
    }
}

/// Whether content capture is on: `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`.
pub fn capture_content_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Resolved<bool> {
    match var(env::CAPTURE_CONTENT) {
        Some(v) => Resolved {
            value: v.to_string_lossy().trim().eq_ignore_ascii_case("true"),
            source: Source::Env(env::CAPTURE_CONTENT),
        },
        None => Resolved {
            value: false,
            source: Source::Default,
        },
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
        let all = [("HERMES_OTEL_HOME", "/a"), ("HERMES_HOME", "/h"), ("HOME", "/u")];
        let r = store_dir_from(Some("/flag".into()), env_of(&all));
        assert_eq!((r.value, r.source), (PathBuf::from("/flag"), Source::Explicit));
        let r = store_dir_from(None, env_of(&all));
        assert_eq!(
            (r.value, r.source),
            (PathBuf::from("/a"), Source::Env("HERMES_OTEL_HOME"))
        );
        let r = store_dir_from(None, env_of(&all[1..]));
        assert_eq!(
            (r.value, r.source),
            (PathBuf::from("/h/otel"), Source::Env("HERMES_HOME"))
        );
        let r = store_dir_from(None, env_of(&all[2..]));
        assert_eq!((r.value, r.source), (PathBuf::from("/u/.hermes/otel"), Source::Default));
    }

    #[test]
    fn capture_content_is_off_unless_set_to_true() {
        assert!(!capture_content_from(env_of(&[])).value);
        assert!(!capture_content_from(env_of(&[("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "yes")])).value);
        assert!(
            capture_content_from(env_of(&[(
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                "TRUE"
            )]))
            .value
        );
    }
}
