//! Hermes's `.env` file (`$HERMES_HOME/.env`), where Hermes users keep their
//! settings: Hermes loads it into its own environment at start, so the
//! plugin inside Hermes sees those variables; the standalone `hermes-meter`
//! reads the same file here, so both resolve the same settings. A variable
//! of the real environment wins over the file's.
//!
//! Owns: reading and parsing that one file, once per process. Must not
//! touch: the process environment itself (nothing is set: the values are
//! consulted by [`super::process_var`] only).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The file's name in Hermes's home.
pub const DOTENV_FILE_NAME: &str = ".env";

/// Largest `.env` read; past it the file is ignored (it is a settings file).
const MAX_BYTES: u64 = 1 << 20;

static LOADED: OnceLock<Loaded> = OnceLock::new();

struct Loaded {
    path: PathBuf,
    vars: HashMap<String, String>,
}

fn loaded() -> &'static Loaded {
    LOADED.get_or_init(|| {
        let home = super::store::hermes_home_from(|name| std::env::var_os(name).filter(|v| !v.is_empty())).value;
        let path = home.join(DOTENV_FILE_NAME);
        let vars = read(&path).unwrap_or_default();
        Loaded { path, vars }
    })
}

/// The file's value of `name`, if it sets one.
pub(crate) fn var(name: &str) -> Option<String> {
    loaded().vars.get(name).cloned()
}

/// Where `name` came from when the real environment does not set it and
/// the file does: the file's path, for `status` ("from ~/.hermes/.env").
pub fn provides(name: &str) -> Option<&'static Path> {
    let l = loaded();
    (std::env::var_os(name).is_none() && l.vars.contains_key(name)).then_some(l.path.as_path())
}

fn read(path: &Path) -> Option<HashMap<String, String>> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_BYTES {
        return None;
    }
    Some(parse(&std::fs::read_to_string(path).ok()?))
}

/// `KEY=VALUE` lines as python-dotenv (Hermes's reader) takes them: blank
/// lines and `#` comments skipped, an optional `export ` prefix, values in
/// single quotes taken as they are, in double quotes with `\n`, `\"` and
/// `\\` escapes, unquoted ones up to a ` #` comment, trimmed. Lines that
/// are none of these are skipped.
pub(crate) fn parse(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map(str::trim_start).unwrap_or(line);
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let valid = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            continue;
        }
        let value = value.trim();
        let value = if let Some(rest) = value.strip_prefix('\'') {
            match rest.find('\'') {
                Some(end) => rest[..end].to_string(),
                None => continue,
            }
        } else if let Some(rest) = value.strip_prefix('"') {
            let mut v = String::new();
            let mut chars = rest.chars();
            let mut closed = false;
            while let Some(c) = chars.next() {
                match c {
                    '"' => {
                        closed = true;
                        break;
                    }
                    '\\' => match chars.next() {
                        Some('n') => v.push('\n'),
                        Some(other) => v.push(other),
                        None => break,
                    },
                    c => v.push(c),
                }
            }
            if !closed {
                continue;
            }
            v
        } else {
            match value.find(" #") {
                Some(i) => value[..i].trim_end().to_string(),
                None => value.to_string(),
            }
        };
        out.insert(key.to_string(), value);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_as_hermes_reads_them() {
        let vars = parse(
            "# settings\n\
             OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4317\n\
             export HERMES_METER_BUDGET_MODE = observe\n\
             QUOTED=\"a \\\"b\\\" c\"\n\
             SINGLE='x # not a comment'\n\
             COMMENTED=value # a comment\n\
             1BAD=x\n\
             no equals sign\n\
             UNCLOSED=\"open\n",
        );
        assert_eq!(vars["OTEL_EXPORTER_OTLP_ENDPOINT"], "http://collector:4317");
        assert_eq!(vars["HERMES_METER_BUDGET_MODE"], "observe");
        assert_eq!(vars["QUOTED"], "a \"b\" c");
        assert_eq!(vars["SINGLE"], "x # not a comment");
        assert_eq!(vars["COMMENTED"], "value");
        assert!(!vars.contains_key("1BAD") && !vars.contains_key("UNCLOSED"));
        assert_eq!(vars.len(), 5);
    }
}
