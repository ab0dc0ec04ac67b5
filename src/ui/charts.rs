//! The viewer's two charts, as inline SVG: spend per day on the home page
//! (a bar a day, each a link to that day's sessions) and cost and context
//! per turn on a session's page. Every recorded string escaped.

use std::fmt::Write as _;

use super::html::esc;
use super::pages::{filter_query, usd};
use super::Frame;
use crate::trace::TurnPoint;
use hermes_meter_model::display::human_count;
use hermes_meter_store::{SessionFilter, SessionListTotals};

/// The home page's spend per day: a bar a day, each a link to that day's
/// sessions with the same filters.
pub(super) fn spend_chart(
    h: &mut String,
    frame: &Frame<'_>,
    filter: &SessionFilter,
    day: &str,
    days: &[(String, SessionListTotals)],
) {
    let Some((first, _)) = days.first() else {
        return;
    };
    let b = esc(frame.base);
    let (w, hgt, pad) = (900.0, 110.0, 16.0);
    let step = (w - 2.0 * pad) / days.len() as f64;
    let plot = hgt - 2.0 * pad;
    let max_cost = days.iter().map(|(_, t)| t.cost_usd).fold(0.0, f64::max);
    let total: f64 = days.iter().map(|(_, t)| t.cost_usd).sum();
    let _ = write!(
        h,
        "<section class=\"spend\"><h2>Spend per day <span class=\"muted\">{} in the last {} days (most {} a day)</span></h2>\
<svg class=\"chart days\" id=\"spend-chart\" viewBox=\"0 0 {w} {hgt}\" role=\"img\" aria-label=\"cost per day\">",
        usd(total),
        days.len(),
        usd(max_cost),
    );
    let sort = filter.sort.as_str();
    for (i, (date, t)) in days.iter().enumerate() {
        let x = pad + step * i as f64;
        let bh = if max_cost > 0.0 {
            t.cost_usd / max_cost * plot
        } else {
            0.0
        };
        let selected = if date == day { " selected" } else { "" };
        let href = esc(&format!("?sort={sort}{}", filter_query(filter, date)));
        let _ = write!(
            h,
            "<a class=\"day{selected}\" href=\"{b}/{href}\" data-day=\"{}\" data-cost=\"{:.6}\">\
<rect class=\"hit\" x=\"{x:.1}\" y=\"{pad}\" width=\"{step:.1}\" height=\"{plot}\"></rect>\
<rect class=\"cost\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\"></rect>\
<title>{}: {}, {} sessions</title></a>",
            esc(date),
            t.cost_usd,
            x + step * 0.15,
            hgt - pad - bh,
            step * 0.7,
            esc(date),
            usd(t.cost_usd),
            t.sessions,
        );
    }
    let last = days.last().map(|(d, _)| d.as_str()).unwrap_or_default();
    let _ = write!(
        h,
        "<line class=\"axis\" x1=\"{pad}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\"></line>",
        y0 = hgt - pad,
        x1 = w - pad
    );
    let _ = write!(
        h,
        "<text x=\"{pad}\" y=\"{:.1}\">{}</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text></svg></section>",
        hgt - 2.0,
        esc(first),
        w - pad,
        hgt - 2.0,
        esc(last),
    );
}

/// Cost (bars) and context (a line) per turn of a session.
pub(super) fn turn_chart(turns: &[TurnPoint]) -> String {
    if turns.is_empty() {
        return "<p class=\"muted\">No turns.</p>".into();
    }
    let (w, hgt, pad) = (900.0, 200.0, 30.0);
    let max_cost = turns.iter().map(|t| t.cost_usd).fold(0.0, f64::max);
    let max_ctx = turns.iter().map(|t| t.context_tokens).max().unwrap_or(0).max(1) as f64;
    let step = (w - 2.0 * pad) / turns.len() as f64;
    let plot = hgt - 2.0 * pad;
    let mut s = format!(
        "<div class=\"legend\"><span class=\"swatch-cost\">■ cost (max {})</span>\
<span class=\"swatch-context\">● context, input tokens incl. cache (max {})</span></div>\
<svg class=\"chart\" id=\"turn-chart\" viewBox=\"0 0 {w} {hgt}\" role=\"img\" aria-label=\"cost and context per turn\">\
<line class=\"axis\" x1=\"{pad}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\"></line>",
        usd(max_cost),
        human_count(max_ctx as i64),
        y0 = hgt - pad,
        x1 = w - pad,
    );
    let mut points = Vec::new();
    for (i, t) in turns.iter().enumerate() {
        let x = pad + step * i as f64;
        let bh = if max_cost > 0.0 {
            t.cost_usd / max_cost * plot
        } else {
            0.0
        };
        let _ = write!(
            s,
            "<rect class=\"cost\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>turn {}: {}, {} calls</title></rect>",
            x + step * 0.15,
            hgt - pad - bh,
            step * 0.7,
            bh,
            i + 1,
            usd(t.cost_usd),
            t.llm_calls
        );
        let cy = hgt - pad - t.context_tokens as f64 / max_ctx * plot;
        let cx = x + step / 2.0;
        points.push(format!("{cx:.1},{cy:.1}"));
        let _ = write!(
            s,
            "<circle class=\"context\" cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"3\"><title>turn {}: {} tokens of context</title></circle>",
            i + 1,
            human_count(t.context_tokens)
        );
        let _ = write!(
            s,
            "<text x=\"{cx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            hgt - pad + 14.0,
            i + 1
        );
    }
    let _ = write!(
        s,
        "<polyline class=\"context\" points=\"{}\"></polyline></svg>",
        points.join(" ")
    );
    s
}
