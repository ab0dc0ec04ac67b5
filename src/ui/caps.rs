//! The caps part of the budgets page: each cap set, then what the running
//! sessions and their open runs used of them. Every recorded string escaped.

use std::fmt::Write as _;

use super::html::{esc, url_part};
use super::pages::{status_class, Frame};
use hermes_meter_model::budget::{BudgetConfig, CapScope, CapState, CapUnit};

/// The caps part of the budgets page: each cap set, then what the running
/// sessions and their open runs used of them.
pub(super) fn cap_section(h: &mut String, frame: &Frame<'_>, cfg: &BudgetConfig, caps: &[CapState]) {
    if cfg.caps.is_empty() {
        return;
    }
    let mut set = Vec::new();
    for (scope, limits) in &cfg.caps {
        for unit in CapUnit::ALL {
            if let Some(limit) = limits.get(unit) {
                set.push(format!("per {scope}: {}", unit.format(limit)));
            }
        }
    }
    let _ = write!(
        h,
        "<h2>Caps</h2><p class=\"muted\" id=\"caps-set\">{}; tokens counted: {}. A tool-call cap blocks tools only.</p>",
        esc(&set.join(", ")),
        cfg.tokens_counted.as_str()
    );
    if caps.is_empty() {
        h.push_str("<p class=\"muted\">No session is running.</p>");
        return;
    }
    h.push_str(
        "<div class=\"wide\"><table class=\"caps\"><thead><tr><th>Scope</th><th>Session or turn</th><th>Cap</th>\
<th class=\"num\">Used</th><th class=\"num\">Limit</th><th class=\"num\">%</th><th>Verdict</th></tr></thead><tbody>",
    );
    let b = esc(frame.base);
    for c in caps {
        let who = match c.cap.scope {
            CapScope::Session => format!("<a href=\"{b}/session/{}\">{}</a>", url_part(&c.id), esc(&c.id)),
            CapScope::Run => esc(&c.id),
        };
        let _ = write!(
            h,
            "<tr class=\"cap {sc}\"><td>{}</td><td>{who}</td><td>{}</td><td class=\"num\">{}</td>\
<td class=\"num\">{}</td><td class=\"num\">{:.0}</td><td class=\"{sc}\">{}</td></tr>",
            c.cap.scope.as_str(),
            c.cap.unit.as_str(),
            esc(&c.cap.unit.format(c.used)),
            esc(&c.cap.unit.format(c.cap.limit)),
            100.0 * c.used / c.cap.limit,
            c.level.as_str(),
            sc = status_class(c.level.as_str()),
        );
    }
    h.push_str("</tbody></table></div>");
}
