//! Untrusted text made safe to print on a terminal.
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

#[cfg(test)]
mod tests {
    use super::*;

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
