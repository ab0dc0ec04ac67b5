//! Escaping and URL pieces for the viewer. Pure.
//!
//! Everything the viewer writes into HTML that did not come from this
//! crate's own literals (session ids, tool and model names, captured
//! content, error messages) goes through [`esc`]; every id put in a URL
//! through [`url_part`].

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// `text` safe inside HTML text and double-quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Everything but RFC 3986's unreserved characters is escaped.
const NOT_UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// `text` percent-encoded for a path segment or a query value.
pub(crate) fn url_part(text: &str) -> String {
    utf8_percent_encode(text, NOT_UNRESERVED).to_string()
}

/// Decodes `%XX` escapes (and `+` as a space when `plus`, as in a query
/// string); invalid escapes are kept as they are, invalid UTF-8 is replaced.
pub fn percent_decode(text: &str, plus: bool) -> String {
    let text = if plus { text.replace('+', " ") } else { text.to_string() };
    percent_decode_str(&text).decode_utf8_lossy().into_owned()
}

/// The pairs of a query string, decoded.
pub(crate) fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k, true), percent_decode(v, true))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_untrusted_text_is_escaped() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'q'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;"
        );
    }

    #[test]
    fn ids_survive_a_round_trip_through_a_url() {
        for id in ["20261130_013759_e4a976", "a b/c?d=e&f#g", "é<>\"", "100%", "%zz"] {
            assert_eq!(percent_decode(&url_part(id), false), id);
        }
        assert_eq!(percent_decode("a+b%2", true), "a b%2");
        assert_eq!(
            query_pairs("day=2026-11-30&model=gpt+4o&x"),
            vec![
                ("day".into(), "2026-11-30".into()),
                ("model".into(), "gpt 4o".into()),
                ("x".into(), String::new())
            ]
        );
    }
}
