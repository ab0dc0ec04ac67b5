//! The viewer's advice page (`/advice`): `hermes-meter advise`'s findings
//! over the last days (`?days=`, 1 to 90, default 7), largest saving first,
//! each with its sessions linked. Every recorded string escaped.

use std::fmt::Write as _;

use super::html::{esc, url_part};
use super::pages::Frame;
use hermes_meter_model::advise::Advice;
use hermes_meter_model::price_as::PriceAs;

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

/// The what-if: a form for a model, and the days' calls re-priced at its
/// rates when one was asked for (`report --price-as`), with the caveats.
pub(super) fn what_if(model: Option<&str>, result: Option<&Result<PriceAs, String>>, days: i64) -> String {
    let mut h = format!(
        "<section id=\"what-if\"><h2>What if</h2><form method=\"get\"><input type=\"hidden\" name=\"days\" value=\"{days}\">\
<label>these days' calls at the prices of <input name=\"price_as\" value=\"{}\" maxlength=\"200\" placeholder=\"a model id\"></label> \
<button>Re-price</button></form>",
        esc(model.unwrap_or_default())
    );
    match result {
        None => {}
        Some(Err(why)) => {
            let _ = write!(h, "<p class=\"error\" id=\"what-if-error\">{}</p>", esc(why));
        }
        Some(Ok(p)) => {
            let _ = write!(
                h,
                "<p id=\"what-if-total\">{} LLM calls billed <strong>${:.4}</strong>; at {}'s prices <strong>${:.4}</strong>.</p><table><tr><th>kind of session</th><th>calls</th><th>billed</th><th>at {}</th></tr>",
                p.totals.llm_calls,
                p.totals.billed_usd,
                esc(&p.priced_as),
                p.totals.at_price_usd,
                esc(&p.priced_as)
            );
            for (kind, s) in &p.by_kind {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>${:.4}</td><td>${:.4}</td></tr>",
                    esc(kind),
                    s.llm_calls,
                    s.billed_usd,
                    s.at_price_usd
                );
            }
            h.push_str("</table><ul class=\"muted\">");
            for c in p.caveats() {
                let _ = write!(h, "<li>{}</li>", esc(&c));
            }
            h.push_str("</ul>");
        }
    }
    h.push_str("</section>");
    h
}
