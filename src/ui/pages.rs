//! The viewer's pages as HTML strings. Pure: callers hand in what the
//! store said.
//!
//! Owns: markup. Every value that is not one of this file's literals is
//! escaped with [`esc`] (text) or [`url_part`] (ids in links). No inline
//! scripts or style attributes: the page's Content-Security-Policy allows
//! only the viewer's own `/static/` files, and bars and charts are SVG
//! geometry.

use std::collections::HashMap;
use std::fmt::Write as _;

use jiff::tz::TimeZone;

use super::html::{esc, url_part};
use crate::trace::{human_duration, walk, NodeKind, Trace, TraceNode, TurnPoint};
use hermes_meter_model::budget::{left_text, BudgetConfig, BudgetState, CapState, Forecast, Level};
use hermes_meter_model::display::human_count;
use hermes_meter_store::hermes_state::HermesSessionInfo;
use hermes_meter_store::{AlertRow, FilterValues, SessionFilter, SessionListRow, SessionListTotals, SessionSort};

/// Which page the header marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Sessions,
    Budgets,
    Advice,
    None,
}

/// What every page shares.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    /// Path prefix the viewer is mounted under (`""` standalone).
    pub base: &'a str,
    /// The store's data version, which the page polls for.
    pub version: i64,
    pub tz: &'a TimeZone,
}

/// A whole page around `body`.
pub fn page(frame: &Frame<'_>, title: &str, tab: Tab, body: &str) -> String {
    let b = esc(frame.base);
    let here = |t: Tab| if t == tab { " class=\"here\"" } else { "" };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<meta name=\"hermes-meter-version\" content=\"{version}\">\
<title>{title} · hermes-meter</title><link rel=\"stylesheet\" href=\"{b}{style}\"></head>\
<body data-base=\"{b}\"><header class=\"top\"><span class=\"brand\">hermes-meter</span>\
<a href=\"{b}/\"{s}>Sessions</a><a href=\"{b}/budgets\"{u}>Budgets</a><a href=\"{b}/advice\"{a}>Advice</a><span id=\"live\"></span></header>\
<main>{body}</main><script src=\"{b}{script}\"></script></body></html>\n",
        version = frame.version,
        style = super::STYLE_PATH,
        script = super::SCRIPT_PATH,
        title = esc(title),
        s = here(Tab::Sessions),
        u = here(Tab::Budgets),
        a = here(Tab::Advice),
    )
}

/// A local time for people.
pub(crate) fn local_time(unix: f64, tz: &TimeZone) -> String {
    jiff::Timestamp::from_microsecond((unix * 1e6) as i64)
        .map(|t| t.to_zoned(tz.clone()).strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

pub(super) fn usd(v: f64) -> String {
    format!("${v:.4}")
}

/// A budget's figure: USD to four places, tokens in their short form.
fn amount(unit: hermes_meter_model::budget::BudgetUnit, v: f64) -> String {
    match unit {
        hermes_meter_model::budget::BudgetUnit::Usd => usd(v),
        hermes_meter_model::budget::BudgetUnit::Tokens => hermes_meter_model::budget::format_tokens(v),
    }
}

pub(super) fn status_class(status: &str) -> String {
    let s: String = status
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    format!("status-{s}")
}

/// The index: filters, totals, one page of sessions, paging links.
/// What the session list shows.
pub struct IndexView<'a> {
    pub filter: &'a SessionFilter,
    /// The day filter as asked (`YYYY-MM-DD`), or empty.
    pub day: &'a str,
    pub rows: &'a [SessionListRow],
    pub totals: &'a SessionListTotals,
    /// What each filter text matched.
    pub values: &'a FilterValues,
    /// Spend per day, oldest first: `(date, totals)` with the filter's texts.
    pub days: &'a [(String, SessionListTotals)],
    /// Hermes's title and first prompt of the rows' sessions, when read.
    pub infos: &'a HashMap<String, HermesSessionInfo>,
    /// What `status` says first: runs the plugin did not record.
    pub trouble: &'a [String],
}

/// Most characters of a Hermes title shown in the list.
const SHOWN_TITLE_CHARS: usize = 80;

pub fn index(frame: &Frame<'_>, view: &IndexView<'_>) -> String {
    let IndexView {
        filter,
        day,
        rows,
        totals,
        values,
        days,
        infos,
        trouble,
    } = *view;
    let b = esc(frame.base);
    let mut h = String::new();
    h.push_str("<h1>Sessions</h1>");
    if !trouble.is_empty() {
        // What `status` says in its first lines: runs the plugin did not
        // record are not in the list below.
        h.push_str("<section class=\"trouble\" id=\"trouble\"><h2>Not recorded</h2><ul>");
        for line in trouble {
            let _ = write!(h, "<li>{}</li>", esc(line));
        }
        h.push_str("</ul></section>");
    }
    let _ = write!(h, "<form class=\"filters\" method=\"get\" action=\"{b}/\">");
    let text = |label: &str, name: &str, value: &Option<String>| {
        format!(
            "<label>{label}<input name=\"{name}\" value=\"{}\" size=\"14\"></label>",
            esc(value.as_deref().unwrap_or(""))
        )
    };
    let _ = write!(
        h,
        "<label>Day<input type=\"date\" name=\"day\" value=\"{}\"></label>",
        esc(day)
    );
    h.push_str(&text("Platform", "platform", &filter.platform));
    h.push_str(&text("Cron job", "cron", &filter.cron_job_id));
    h.push_str(&text("Sender", "sender", &filter.sender_id));
    h.push_str(&text("Model", "model", &filter.model));
    h.push_str("<label>Sort<select name=\"sort\">");
    for (value, label) in [
        (SessionSort::Newest, "newest first"),
        (SessionSort::Cost, "cost"),
        (SessionSort::Duration, "duration"),
    ] {
        let sel = if value == filter.sort { " selected" } else { "" };
        let _ = write!(h, "<option value=\"{}\"{sel}>{label}</option>", value.as_str());
    }
    h.push_str("</select></label><button type=\"submit\">Apply</button></form>");
    filter_matches(&mut h, values);
    super::charts::spend_chart(&mut h, frame, filter, day, days);
    let _ = write!(
        h,
        "<div class=\"totals\"><div><b id=\"total-sessions\">{}</b>sessions</div><div><b id=\"total-cost\">{}</b>cost</div>\
<div><b>{}</b>LLM calls</div><div><b>{} → {}</b>tokens in (incl. cache) → out</div><div><b>{}</b>API errors</div></div>",
        human_count(totals.sessions),
        usd(totals.cost_usd),
        human_count(totals.llm_calls),
        human_count(totals.input_tokens),
        human_count(totals.output_tokens),
        human_count(totals.api_errors),
    );
    if rows.is_empty() {
        h.push_str("<p class=\"muted\" id=\"no-sessions\">No sessions match.</p>");
        return h;
    }
    h.push_str(
        "<div class=\"wide\"><table class=\"sessions\"><thead><tr><th>Started</th><th>Session</th><th>Platform</th><th>Model</th>\
<th>Status</th><th class=\"num\" title=\"the first prompt's length, in characters\">Prompt</th><th class=\"num\">Turns</th><th class=\"num\">LLM calls</th><th class=\"num\">Tokens in → out</th>\
<th class=\"num\">Cost</th><th class=\"num\">Duration</th><th class=\"num\">Errors</th></tr></thead><tbody>",
    );
    for r in rows {
        let mut who = esc(r.platform.as_deref().unwrap_or("?"));
        if let Some(c) = &r.cron_job_id {
            let _ = write!(who, " <span class=\"muted\">cron {}</span>", esc(c));
        }
        if r.parent_session_id.is_some() {
            who.push_str(" <span class=\"muted\">(subagent)</span>");
        }
        let info = infos.get(&r.session_id);
        let name = match info.and_then(|i| i.title.as_deref()) {
            Some(title) => format!(
                "<span class=\"title\">{}</span><span class=\"id muted\">{}</span>",
                esc(&shorten(title, SHOWN_TITLE_CHARS)),
                esc(&r.session_id)
            ),
            None => esc(&r.session_id),
        };
        let prompt = info
            .and_then(|i| i.first_prompt_chars)
            .map(human_count)
            .unwrap_or_default();
        let _ = write!(
            h,
            "<tr class=\"session {sc}\"><td>{}</td><td class=\"session-name\"><a href=\"{b}/session/{}\">{name}</a></td><td>{who}</td><td>{}</td>\
<td class=\"{sc}\">{}</td><td class=\"num prompt\">{prompt}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{} → {}</td>\
<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            local_time(r.started_at, frame.tz),
            url_part(&r.session_id),
            esc(r.model.as_deref().unwrap_or("")),
            esc(&r.status),
            r.turns,
            r.llm_calls,
            human_count(r.input_tokens),
            human_count(r.output_tokens),
            usd(r.cost_usd),
            human_duration((r.last_at - r.started_at).max(0.0) * 1000.0),
            r.api_errors + r.tool_failures,
            sc = status_class(&r.status),
        );
    }
    h.push_str("</tbody></table></div><div class=\"pager\">");
    let link = |offset: usize| {
        esc(&format!(
            "?sort={}&offset={offset}{}",
            filter.sort.as_str(),
            filter_query(filter, day)
        ))
    };
    if filter.offset > 0 {
        let _ = write!(
            h,
            "<a href=\"{b}/{}\">← newer</a>",
            link(filter.offset.saturating_sub(filter.limit))
        );
    }
    let shown_to = filter.offset + rows.len();
    let _ = write!(
        h,
        "<span class=\"muted\">{}–{} of {}</span>",
        filter.offset + 1,
        shown_to,
        human_count(totals.sessions)
    );
    if (shown_to as i64) < totals.sessions {
        let _ = write!(h, "<a href=\"{b}/{}\">older →</a>", link(shown_to));
    }
    h.push_str("</div>");
    h
}

/// `&name=value` for the day and each filter text set (unescaped for HTML).
pub(super) fn filter_query(filter: &SessionFilter, day: &str) -> String {
    let mut q = String::new();
    for (k, v) in [
        ("day", Some(day)),
        ("platform", filter.platform.as_deref()),
        ("cron", filter.cron_job_id.as_deref()),
        ("sender", filter.sender_id.as_deref()),
        ("model", filter.model.as_deref()),
    ] {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            let _ = write!(q, "&{k}={}", url_part(v));
        }
    }
    q
}

/// `text` cut to `most` characters, with an ellipsis when cut.
fn shorten(text: &str, most: usize) -> String {
    let mut chars = text.chars();
    let mut out: String = chars.by_ref().take(most).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// Under the form: the values each filter text matched (a text matches
/// every value that contains it, in any case).
fn filter_matches(h: &mut String, values: &FilterValues) {
    if values.dims.is_empty() {
        return;
    }
    h.push_str("<ul class=\"matches muted\" id=\"filter-values\">");
    for (name, text, matched) in &values.dims {
        let list = if matched.is_empty() {
            "no value: nothing is shown".to_string()
        } else {
            matched.iter().map(|v| esc(v)).collect::<Vec<_>>().join(", ")
        };
        let more = if values.more.contains(name) {
            format!(" and more (the first {} are used)", matched.len())
        } else {
            String::new()
        };
        let _ = write!(h, "<li>{name} “{}” matches {list}{more}</li>", esc(text));
    }
    h.push_str("</ul>");
}

/// The session page: summary, waterfall, per-turn chart, errors.
pub fn session(
    frame: &Frame<'_>,
    trace: &Trace,
    info: Option<&HermesSessionInfo>,
    link: Option<&super::trace_link::TraceLink>,
) -> String {
    let b = esc(frame.base);
    let root = &trace.root;
    let nodes = walk(root);
    let sessions: Vec<&TraceNode> = nodes
        .iter()
        .map(|(_, n)| *n)
        .filter(|n| n.kind == NodeKind::Session)
        .collect();
    // One cost for a session on every surface: its own calls' (the session
    // list, `report`, the trace root), and with its subagents' beside it.
    let own_cost = root.cost_usd.unwrap_or(0.0);
    let cost: f64 = sessions.iter().filter_map(|n| n.cost_usd).sum();
    let with_subagents = if sessions.len() > 1 {
        format!(
            "<div><b id=\"cost-with-subagents\">{}</b>cost with {} subagent{}</div>",
            usd(cost),
            sessions.len() - 1,
            if sessions.len() == 2 { "" } else { "s" }
        )
    } else {
        String::new()
    };
    let input: i64 = sessions.iter().filter_map(|n| n.input_tokens).sum();
    let output: i64 = sessions.iter().filter_map(|n| n.output_tokens).sum();
    let cache_read: i64 = sessions.iter().filter_map(|n| n.cache_read_tokens).sum();
    let cache = if cache_read > 0 && input > 0 {
        format!(
            "<div><b id=\"cache-hit\">{:.0}%</b>input from cache</div>",
            100.0 * cache_read as f64 / input as f64
        )
    } else {
        String::new()
    };
    let chats = nodes.iter().filter(|(_, n)| n.kind == NodeKind::Chat).count();
    let tools = nodes.iter().filter(|(_, n)| n.kind == NodeKind::Tool).count();
    let mut h = String::new();
    match info.and_then(|i| i.title.as_deref()) {
        Some(title) => {
            let _ = write!(
                h,
                "<h1 id=\"session-title\">{}</h1><p class=\"muted\">Session <span id=\"session-id\">{}</span></p>",
                esc(title),
                esc(&trace.session_id)
            );
        }
        None => {
            let _ = write!(
                h,
                "<h1>Session <span id=\"session-id\">{}</span></h1>",
                esc(&trace.session_id)
            );
        }
    }
    let prompt = match info.and_then(|i| i.first_prompt_chars) {
        Some(n) => format!(
            "<div><b id=\"first-prompt\">{}</b>characters in the first prompt</div>",
            human_count(n)
        ),
        None => String::new(),
    };
    if let Some(link) = link.filter(|_| !root.trace_id.is_empty()) {
        let label = if link.jaeger {
            "Trace in Jaeger"
        } else {
            "Trace in your trace UI"
        };
        let why = if link.guessed {
            "Jaeger on the OTLP endpoint's host; set HERMES_METER_TRACE_URL (or ui --trace-url) for another address"
        } else {
            "from HERMES_METER_TRACE_URL or ui --trace-url"
        };
        let _ = write!(
            h,
            "<p><a id=\"trace-link\" href=\"{}\" rel=\"noopener noreferrer\" target=\"_blank\" title=\"{why}\">{label} ↗</a> \
<span class=\"muted id\">{}</span></p>",
            esc(&link.url(&root.trace_id)),
            esc(&root.trace_id)
        );
    }
    let _ = write!(
        h,
        "<div class=\"totals\"><div><b class=\"{}\">{}</b>status</div><div><b>{}</b>started</div><div><b>{}</b>duration</div>\
<div><b id=\"session-cost\">{}</b>cost</div>{with_subagents}<div><b>{} → {}</b>tokens in (incl. cache) → out{}</div>{cache}\
<div><b>{chats}</b>LLM attempts</div><div><b>{tools}</b>tool calls</div><div><b>{}</b>errors</div>{prompt}</div>",
        status_class(&root.status),
        esc(&root.status),
        local_time(root.start, frame.tz),
        human_duration(root.duration_ms),
        usd(own_cost),
        human_count(input),
        human_count(output),
        if sessions.len() > 1 { ", with subagents" } else { "" },
        trace.errors.len(),
    );
    // Waterfall over the tree's whole time range.
    let t0 = nodes.iter().map(|(_, n)| n.start).fold(f64::INFINITY, f64::min);
    let t1 = nodes.iter().map(|(_, n)| n.end).fold(f64::NEG_INFINITY, f64::max);
    let range = (t1 - t0).max(1e-6);
    h.push_str(
        "<h2>Spans</h2><div class=\"wide\"><table class=\"waterfall\"><thead><tr><th>Span</th><th class=\"bar\">Timeline</th>\
<th class=\"num\">Duration</th><th class=\"num\">Tokens in → out</th><th class=\"num\">Cost</th><th>Status</th></tr></thead><tbody>",
    );
    for (depth, n) in &nodes {
        let kind = match n.kind {
            NodeKind::Session => "session",
            NodeKind::Continuation => "continuation",
            NodeKind::Turn => "turn",
            NodeKind::Chat => "chat",
            NodeKind::Tool => "tool",
            NodeKind::Approval => "approval",
        };
        let x = (n.start - t0) / range * 1000.0;
        let w = ((n.end - n.start) / range * 1000.0).max(2.0);
        let mut label = esc(&n.name);
        if n.kind == NodeKind::Session && !std::ptr::eq(*n, root) {
            let _ = write!(
                label,
                " <a href=\"{b}/session/{}\">{}</a>",
                url_part(&n.session_id),
                esc(&n.session_id)
            );
        }
        if let Some(a) = n.attempt.filter(|a| *a > 0) {
            let _ = write!(label, " <span class=\"muted\">(retry {a})</span>");
        }
        if let Some(d) = &n.detail {
            let _ = write!(label, " <span class=\"muted\">[{}]</span>", esc(d));
        }
        let tokens = match (n.input_tokens, n.output_tokens) {
            (Some(i), Some(o)) => format!("{} → {}", human_count(i), human_count(o)),
            _ => String::new(),
        };
        let status = match &n.error {
            Some(e) if !e.is_empty() => format!("{} {}", esc(&n.status), esc(e)),
            _ => esc(&n.status),
        };
        let indent = if *depth > 0 {
            format!("<span class=\"indent i{}\"></span>", depth.min(&10))
        } else {
            String::new()
        };
        let info = span_info(n, trace.content.get(&n.span_id));
        let _ = write!(
            h,
            "<tr class=\"span kind-{kind} {sc}\" data-span-id=\"{}\" data-parent-span-id=\"{}\" data-depth=\"{depth}\">\
<td class=\"name\"><details class=\"span-info\" id=\"a-{sid}\"><summary>{indent}{label}</summary>{info}</details></td><td class=\"bar\"><svg class=\"bar\" viewBox=\"0 0 1000 10\" preserveAspectRatio=\"none\">\
<rect x=\"{x:.2}\" y=\"1\" width=\"{w:.2}\" height=\"8\"><title>{}</title></rect></svg></td>\
<td class=\"num\">{}</td><td class=\"num\">{tokens}</td><td class=\"num\">{}</td><td class=\"{sc}\">{status}</td></tr>",
            esc(&n.span_id),
            esc(n.parent_span_id.as_deref().unwrap_or("")),
            esc(&n.name),
            human_duration(n.duration_ms),
            match n.cost_usd {
                Some(c) => usd(c),
                None if n.detail.as_deref().is_some_and(|d| d.starts_with(crate::trace::UNPRICED)) => {
                    "<span class=\"muted\" title=\"no price for this model\">unpriced</span>".to_string()
                }
                None => String::new(),
            },
            sc = status_class(&n.status),
            sid = esc(&n.span_id),
        );
        if let Some(content) = trace.content.get(&n.span_id) {
            let _ = write!(
                h,
                "<tr class=\"content\"><td colspan=\"6\"><details class=\"content\" id=\"c-{}\"><summary>captured content</summary>",
                esc(&n.span_id)
            );
            for (name, text) in content {
                let pretty = serde_json::from_str::<serde_json::Value>(text)
                    .ok()
                    .and_then(|v| serde_json::to_string_pretty(&v).ok())
                    .unwrap_or_else(|| text.clone());
                let _ = write!(h, "<div class=\"muted\">{}</div><pre>{}</pre>", esc(name), esc(&pretty));
            }
            h.push_str("</details></td></tr>");
        }
    }
    h.push_str("</tbody></table></div>");
    if trace.content.is_empty() {
        h.push_str(
            "<p class=\"muted\">No prompts or responses: content capture was off \
(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT).</p>",
        );
    }
    // The session's own turns (a subagent's turns are on its own page).
    let own: Vec<TurnPoint> = trace
        .turns
        .iter()
        .filter(|t| t.session_id == trace.session_id)
        .cloned()
        .collect();
    h.push_str("<h2>Per turn: cost and context size</h2>");
    h.push_str(&super::charts::turn_chart(&own));
    h.push_str("<h2>Errors</h2>");
    if trace.errors.is_empty() {
        h.push_str("<p class=\"muted\" id=\"no-errors\">None.</p>");
    } else {
        h.push_str(
            "<div class=\"wide\"><table class=\"errors\"><thead><tr><th>At</th><th>Span</th><th>Error</th><th class=\"num\">HTTP</th>\
<th>Reason</th><th>Message</th></tr></thead><tbody>",
        );
        for e in &trace.errors {
            let _ = write!(
                h,
                "<tr class=\"error\" data-span-id=\"{}\"><td>{}</td><td>{}</td><td class=\"status-error\">{}</td>\
<td class=\"num\">{}</td><td>{}</td><td>{}</td></tr>",
                esc(&e.span_id),
                local_time(e.at, frame.tz),
                esc(&e.name),
                esc(&e.error_type),
                e.status_code.map(|c| c.to_string()).unwrap_or_default(),
                esc(e.reason.as_deref().unwrap_or("")),
                esc(e.message.as_deref().unwrap_or("")),
            );
        }
        h.push_str("</tbody></table></div>");
    }
    h
}

/// Bars of each turn's cost and a line of its context size, as SVG.
/// The most characters of one attribute's value the viewer shows.
const SHOWN_VALUE_CHARS: usize = 2000;

/// A span's ids and attributes, shown when its line is clicked (escaped;
/// captured content is left to its own block below the line).
fn span_info(n: &TraceNode, content: Option<&Vec<(String, String)>>) -> String {
    let mut h = String::from("<dl class=\"attrs\">");
    let ids = [
        ("trace id", n.trace_id.as_str()),
        ("span id", n.span_id.as_str()),
        ("parent span id", n.parent_span_id.as_deref().unwrap_or("")),
    ];
    for (k, v) in ids.into_iter().filter(|(_, v)| !v.is_empty()) {
        let _ = write!(h, "<dt>{k}</dt><dd class=\"id\">{}</dd>", esc(v));
    }
    let captured = |key: &str| content.is_some_and(|c| c.iter().any(|(name, _)| name == key));
    for (k, v) in n.attributes.iter().filter(|(k, _)| !captured(k)) {
        let shown: String = v.chars().take(SHOWN_VALUE_CHARS).collect();
        let more = if shown.len() < v.len() { "…" } else { "" };
        let _ = write!(h, "<dt>{}</dt><dd>{}{more}</dd>", esc(k), esc(&shown));
    }
    h.push_str("</dl>");
    h
}

/// One budget with its forecast, for the budgets page.
#[derive(Debug, Clone)]
pub struct BudgetRow {
    pub state: BudgetState,
    pub forecast: Forecast,
    /// When the hard line is reached at the window's rate so far, if
    /// within the window (Unix seconds).
    pub runs_out: Option<f64>,
}

/// The budgets page: each budget's spend against its limit, the forecast,
/// and the verdicts and alerts given so far.
pub fn budgets(
    frame: &Frame<'_>,
    cfg: &BudgetConfig,
    rows: &[BudgetRow],
    caps: &[CapState],
    verdicts: &[(&str, i64)],
    alerts: &[AlertRow],
) -> String {
    let mut h = String::from("<h1>Budgets</h1>");
    if rows.is_empty() && cfg.caps.is_empty() {
        h.push_str(
            "<p class=\"muted\" id=\"no-budgets\">No budgets set; add one with <code>hermes-meter budget set global daily 10</code>.</p>",
        );
    } else {
        let _ = write!(
            h,
            "<p class=\"muted\">Mode {}, windows in {}; soft at {:.0}%, hard at {:.0}% of the limit.</p>",
            esc(cfg.mode.as_str()),
            esc(&cfg.tz_name),
            cfg.soft_threshold * 100.0,
            cfg.hard_threshold * 100.0
        );
        h.push_str(
            "<div class=\"wide\"><table class=\"budgets\"><thead><tr><th>Scope</th><th>Id</th><th>Window</th><th>Spend / limit</th>\
<th class=\"num\">Spend</th><th class=\"num\">Limit</th><th class=\"num\">%</th><th>Verdict</th>\
<th class=\"num\">Per hour</th><th class=\"num\">Projected</th><th>Runs out</th><th>Left, and when it comes back</th></tr></thead><tbody>",
        );
        for r in rows {
            let s = &r.state;
            let spend = s.spend.total();
            let frac = if s.budget.limit > 0.0 {
                (spend / s.budget.limit).min(1.0)
            } else {
                1.0
            };
            let verdict = if s.softened {
                "soft (estimated)"
            } else {
                s.level.as_str()
            };
            let projected_class = if r.forecast.projected >= s.budget.limit {
                status_class(Level::Hard.as_str())
            } else {
                String::new()
            };
            let _ = write!(
                h,
                "<tr class=\"budget {sc}\"><td>{}</td><td>{}</td><td>{}</td>\
<td><svg class=\"gauge\" viewBox=\"0 0 160 10\"><rect class=\"track\" x=\"0\" y=\"0\" width=\"160\" height=\"10\"></rect>\
<rect class=\"spend\" x=\"0\" y=\"0\" width=\"{:.1}\" height=\"10\"></rect></svg></td>\
<td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"{sc}\">{}</td>\
<td class=\"num\">{}</td><td class=\"num {projected_class}\">{}</td><td class=\"runs-out\">{}</td><td>{}</td></tr>",
                s.budget.scope.as_str(),
                esc(if s.budget.id.is_empty() { "-" } else { &s.budget.id }),
                s.budget.key(),
                frac * 160.0,
                amount(s.budget.unit, spend),
                s.budget.unit.format(s.budget.limit),
                if s.budget.limit > 0.0 {
                    format!("{:.0}", 100.0 * spend / s.budget.limit)
                } else {
                    "-".into()
                },
                esc(verdict),
                amount(s.budget.unit, r.forecast.per_hour),
                s.budget.unit.format(r.forecast.projected),
                match r.runs_out {
                    Some(_) if s.level == Level::Hard => "now".to_string(),
                    Some(at) => local_time(at, &cfg.tz),
                    None => "-".to_string(),
                },
                esc(&left_text(s, s.budget.limit * cfg.hard_threshold, &cfg.tz)),
                sc = status_class(s.level.as_str()),
            );
        }
        h.push_str("</tbody></table></div>");
    }
    super::caps::cap_section(&mut h, frame, cfg, caps);
    let _ = write!(
        h,
        "<p class=\"muted\" id=\"runaway\">Runaway watch: {}.</p>",
        esc(&cfg.runaway.describe())
    );
    h.push_str("<h2>Verdicts given</h2><div class=\"wide\"><table class=\"verdicts\"><tbody>");
    for (v, n) in verdicts {
        let _ = write!(h, "<tr><td>{}</td><td class=\"num\">{n}</td></tr>", esc(v));
    }
    h.push_str("</tbody></table></div><h2>Alerts</h2>");
    if alerts.is_empty() {
        h.push_str("<p class=\"muted\">None.</p>");
    } else {
        h.push_str(
            "<div class=\"wide\"><table class=\"alerts\"><thead><tr><th>Last</th><th>Kind</th><th>What</th><th class=\"num\">Times</th>\
<th>Shown</th></tr></thead><tbody>",
        );
        for a in alerts {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>",
                local_time(a.last_at, frame.tz),
                esc(&a.kind),
                esc(&a.text),
                a.count,
                a.delivered_at
                    .map(|t| local_time(t, frame.tz))
                    .unwrap_or_else(|| "not yet".into())
            );
        }
        h.push_str("</tbody></table></div>");
    }
    h
}

/// The body of a 404 page.
pub(crate) fn not_found(what: &str) -> String {
    format!("<h1>Not found</h1><p id=\"not-found\">{}</p>", esc(what))
}
