//! Untrusted text made safe to print on a terminal, and durations as a
//! person reads them ([`duration`], [`ago`]).
//!
//! Owns: [`escape`], the one function every text output (`report`'s
//! tables, `trace`'s tree, `status`'s errors) passes a recorded string
//! through before printing it: session ids, models, providers, tool names,
//! senders, cron jobs and error messages come from Hermes, providers and
//! collectors, and any of them may carry an escape sequence that retitles
//! the terminal or rewrites what is on screen, a CR or LF that breaks a
//! table, or a bidi override that shows text in another order than it is.
//! Must not touch: JSON output, which stays exact (a JSON string escapes
//! controls itself, and a reader must get the recorded value back).

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character a terminal would act on shown instead:
/// C0 controls and DEL as `cat -v` shows them (`^[` for ESC, `^M` for CR,
/// `^J` for LF, `^@` for NUL, `^?` for DEL; a tab too, which would break a
/// column), and C1 controls (U+0080 to U+009F) and the bidi and format
/// overrides (U+202A to U+202E, U+2066 to U+2069, U+200E, U+200F, U+061C)
/// as `\u{202e}`. Borrowed when there is nothing to escape (the usual case).
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\u{0}'..='\u{1f}' => {
                out.push('^');
                out.push(char::from(c as u8 + 0x40));
            }
            '\u{7f}' => out.push_str("^?"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Whether a terminal would act on `c` rather than show it.
fn needs_escape(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{200e}' | '\u{200f}' | '\u{061c}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// A duration as a person reads it: `45 s`, `12 min`, `3 h 5 min`,
/// `2 d 4 h`.
pub fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..=119 => format!("{s} s"),
        120..=3_599 => format!("{} min", s / 60),
        3_600..=86_399 => match (s % 3_600) / 60 {
            0 => format!("{} h", s / 3_600),
            m => format!("{} h {m} min", s / 3_600),
        },
        _ => match (s % 86_400) / 3_600 {
            0 => format!("{} d", s / 86_400),
            h => format!("{} d {h} h", s / 86_400),
        },
    }
}

/// How long ago `at` (Unix seconds) was, from `now`: `3 min ago`.
pub fn ago(at: f64, now: f64) -> String {
    format!("{} ago", duration(now - at))
}

/// A count with thousands separators.
pub fn human_count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(duration(0.4), "0 s");
        assert_eq!(duration(59.0), "59 s");
        assert_eq!(duration(119.0), "119 s");
        assert_eq!(duration(125.0), "2 min");
        assert_eq!(duration(3_600.0), "1 h");
        assert_eq!(duration(3_600.0 + 5.0 * 60.0), "1 h 5 min");
        assert_eq!(duration(2.0 * 86_400.0 + 4.0 * 3_600.0 + 59.0), "2 d 4 h");
        assert_eq!(duration(-5.0), "0 s");
        assert_eq!(ago(100.0, 400.0), "5 min ago");
    }

    #[test]
    fn controls_and_overrides_are_shown_escaped_and_the_rest_is_kept() {
        for (raw, shown) in [
            ("plain-id", "plain-id"),
            ("modèle 模型", "modèle 模型"),
            ("\u{1b}]0;pwned\u{7}", "^[]0;pwned^G"),
            ("\u{1b}[2J", "^[[2J"),
            ("a\r\nb", "a^M^Jb"),
            ("nul\u{0}", "nul^@"),
            ("tab\there", "tab^Ihere"),
            ("del\u{7f}", "del^?"),
            ("csi\u{9b}31m", "csi\\u{9b}31m"),
            ("gpt\u{202e}4o", "gpt\\u{202e}4o"),
            ("\u{2066}x\u{2069}", "\\u{2066}x\\u{2069}"),
            ("\u{200e}\u{200f}\u{61c}", "\\u{200e}\\u{200f}\\u{61c}"),
        ] {
            assert_eq!(escape(raw), shown, "{raw:?}");
        }
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
    }
}
