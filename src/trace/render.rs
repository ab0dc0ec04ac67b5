//! A trace as text for a terminal: each node's label, its duration for
//! people, and the whole tree, colored when asked, every recorded string
//! escaped.

use super::*;

/// A duration for people: `850 ms`, `12.3 s`, `4m 05s`.
pub(crate) fn human_duration(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        let s = (ms / 1000.0).round() as i64;
        format!("{}m {:02}s", s / 60, s % 60)
    }
}

/// The label of a node: its span name, plus the retry number, the
/// session id of a session, and the detail.
pub fn label(n: &TraceNode) -> String {
    let mut l = n.name.clone();
    if n.kind == NodeKind::Session {
        let _ = write!(l, " {}", n.session_id);
    }
    if let Some(a) = n.attempt.filter(|a| *a > 0) {
        let _ = write!(l, " (retry {a})");
    }
    if let Some(d) = &n.detail {
        let _ = write!(l, " [{d}]");
    }
    l
}

const RESET: &str = "\x1b[0m";
const DIM: &str = "\x1b[2m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const YELLOW: &str = "\x1b[33m";
const BOLD: &str = "\x1b[1m";

/// The tree as text, one line per span: tree-drawn label, duration,
/// tokens (input incl. cache → output), cost and status; ANSI colours when
/// `color`.
pub(crate) fn render_text(trace: &Trace, color: bool) -> String {
    let paint = |code: &str, text: &str| -> String {
        if color {
            format!("{code}{text}{RESET}")
        } else {
            text.to_string()
        }
    };
    // Tree prefixes first, to align the columns after them.
    let mut lines: Vec<(String, &TraceNode)> = Vec::new();
    fn prefixes<'a>(n: &'a TraceNode, lead: &str, last: bool, root: bool, out: &mut Vec<(String, &'a TraceNode)>) {
        let head = if root {
            String::new()
        } else if last {
            format!("{lead}└─ ")
        } else {
            format!("{lead}├─ ")
        };
        // Labels hold recorded text (ids, models, tool names): escaped
        // before the columns are measured.
        out.push((format!("{head}{}", hermes_meter_model::display::escape(&label(n))), n));
        let next = if root {
            String::new()
        } else if last {
            format!("{lead}   ")
        } else {
            format!("{lead}│  ")
        };
        for (i, c) in n.children.iter().enumerate() {
            prefixes(c, &next, i + 1 == n.children.len(), false, out);
        }
    }
    prefixes(&trace.root, "", true, true, &mut lines);
    let width = lines.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(0).min(100);
    let mut out = String::new();
    for (text, n) in &lines {
        let pad = width.saturating_sub(text.chars().count());
        let tokens = match (n.input_tokens, n.output_tokens) {
            (Some(i), Some(o)) => format!(
                "{} → {}",
                hermes_meter_model::display::human_count(i),
                hermes_meter_model::display::human_count(o)
            ),
            _ => String::new(),
        };
        let cost = n.cost_usd.map(|c| format!("${c:.4}")).unwrap_or_default();
        let status = match &n.error {
            Some(e) if !e.is_empty() => format!("{} {e}", n.status),
            _ => n.status.clone(),
        };
        let status = hermes_meter_model::display::escape(&status).into_owned();
        let status_colored = match n.status.as_str() {
            "ok" => paint(GREEN, &status),
            RUNNING => paint(YELLOW, &status),
            _ if n.error.is_some() || n.status == "error" => paint(RED, &status),
            _ => paint(YELLOW, &status),
        };
        let text = if n.kind == NodeKind::Session {
            paint(BOLD, text)
        } else {
            text.clone()
        };
        let _ = writeln!(
            out,
            "{text}{}  {:>9}  {:>17}  {:>9}  {status_colored}",
            " ".repeat(pad),
            human_duration(n.duration_ms),
            paint(DIM, &format!("{tokens:>17}")),
            cost,
        );
    }
    let _ = writeln!(out, "{} spans; tokens are input (incl. cache) → output", trace.spans);
    out
}
