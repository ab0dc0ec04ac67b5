//! The viewer's advice page (`/advice`): `hermes-meter advise`'s findings
//! over the last days (`?days=`, 1 to 90, default 7), largest saving first,
//! each with its sessions linked. Every recorded string escaped.

use std::fmt::Write as _;

use super::html::{esc, url_part};
use super::pages::Frame;
use hermes_meter_model::advise::Advice;

/// The days a page may ask for.
pub(super) const MOST_DAYS: i64 = 90;

pub(super) fn page(frame: &Frame<'_>, advice: &Advice, days: i64) -> String {
    let b = esc(frame.base);
    let mut h = format!(
        "<h1>Advice <span class=\"muted\">the last {days} days: {} LLM calls, ${:.4}</span></h1>",
        advice.llm_calls, advice.cost_usd
    );
    if advice.findings.is_empty() {
        h.push_str("<p class=\"muted\" id=\"no-advice\">Nothing the ledger shows could have cost clearly less.</p>");
        return h;
    }
    h.push_str("<ol id=\"advice\">");
    for f in &advice.findings {
        let _ = write!(
            h,
            "<li class=\"finding\" data-kind=\"{}\"><p><strong>about ${:.4} less</strong>: {}</p>",
            esc(f.kind),
            f.savings_usd,
            esc(&f.title)
        );
        if !f.sessions.is_empty() {
            h.push_str("<p class=\"muted\">sessions: ");
            let links: Vec<String> = f
                .sessions
                .iter()
                .map(|s| format!("<a href=\"{b}/session/{}\">{}</a>", url_part(s), esc(s)))
                .collect();
            h.push_str(&links.join(", "));
            h.push_str("</p>");
        }
        h.push_str("</li>");
    }
    h.push_str(
        "</ol><p class=\"muted\">Estimates from the ledger alone, at the price table's rates; tokens differ across models and quality is not measured.</p>",
    );
    h
}
