//! `hermes-meter ui`: a local, read-only web viewer over the store.
//!
//! Owns: routing (served by [`HttpServer`], as `serve --prometheus` is), the access token, and the JSON endpoints. The
//! pages are [`pages`], the trees [`crate::trace`], the queries
//! [`hermes_meter_store`]. Must not touch: writes to the store.
//!
//! # Reading without getting in Hermes's way
//!
//! Every request opens the database read-only ([`Reader::open`]),
//! reads in one snapshot and closes it: in WAL mode a reader never blocks
//! a writer, and no connection is held between requests, so the viewer
//! holds no lock while Hermes runs. The store is opened for writing once,
//! at start, only to create or migrate it.
//!
//! # Access
//!
//! Loopback by default. A non-loopback address needs a token (`--token` or
//! `HERMES_METER_UI_TOKEN`), and once a token is set every request must
//! carry it, the stylesheet and script included: `?token=` (answered with
//! an `HttpOnly`, `SameSite=Strict` cookie and a redirect to the base
//! path's index, built from the configured base only, that drops it from
//! the URL), the cookie (which the browser also sends for the page's
//! stylesheet and script), or `Authorization: Bearer`. Without a token
//! the viewer answers only requests whose `Host` is a loopback name, so a
//! web page elsewhere cannot reach it through DNS rebinding.
//!
//! # Pages
//!
//! `/` sessions, `/session/{id}` one session, `/budgets`; `/api/version`
//! (the data version pages poll to refresh), `/api/sessions`,
//! `/api/session/{id}`; `/static/` the stylesheet and script, embedded.

mod advice;
mod caps;
mod charts;
pub mod html;
pub mod pages;
pub mod trace_link;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use jiff::tz::TimeZone;

use hermes_meter_model::budget;
use hermes_meter_model::span::SpanOptions;
use hermes_meter_runtime::http_server::HttpServer;
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::hermes_state::HermesSessionInfo;
use hermes_meter_store::{Reader, SessionFilter, SessionSort, Writer, DB_FILE_NAME};
use html::{percent_decode, query_pairs};
use pages::{Frame, Tab};

/// Most running sessions whose caps the budgets page shows.
const SHOWN_CAP_SESSIONS: usize = 20;

use hermes_meter_runtime::config::cli::UI_TOKEN_ENV;
/// The default address.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:8765";
/// The cookie a browser keeps the token in.
const COOKIE: &str = "hermes_meter_ui";
/// Sessions on one index page.
pub(crate) const PAGE_SIZE: usize = 50;

/// Where the stylesheet and the script are served, under the base path.
pub(crate) const STYLE_PATH: &str = "/static/style.css";
/// See [`STYLE_PATH`].
pub(crate) const SCRIPT_PATH: &str = "/static/app.js";

const STYLE: &str = include_str!("assets/style.css");
const SCRIPT: &str = include_str!("assets/app.js");

/// Everything the viewer needs.
#[derive(Debug, Clone)]
pub struct UiConfig {
    /// `host:port`; port 0 picks one.
    pub listen: String,
    /// The store directory.
    pub store_dir: PathBuf,
    /// Required on every request when set; required to bind off loopback.
    pub token: Option<String>,
    /// The exporter's span options, so trees match exported spans.
    pub span_options: SpanOptions,
    /// A path prefix the pages are served under (`""`, or e.g. `/meter`
    /// behind a proxy); links and the script use it.
    pub base: String,
    /// Hermes's home, whose `state.db` names the sessions the plugin did not
    /// record and holds their titles; `None` inside a Hermes process (see
    /// `hermes_meter_store::hermes_state`), where only the processes' own reports show.
    pub hermes_home: Option<PathBuf>,
    /// Where a session page links its trace (Jaeger, or any trace UI).
    pub trace_link: Option<trace_link::TraceLink>,
}

/// A running viewer; serves until dropped.
#[derive(Debug)]
pub struct UiServer {
    server: HttpServer,
}

impl UiServer {
    /// Checks the token rule, creates or migrates the store, binds and
    /// serves on a thread of its own.
    pub fn start(config: UiConfig) -> Result<Self> {
        let token = config.token.clone().filter(|t| !t.is_empty());
        let what = |e: std::io::Error| Error::Other(format!("viewer address {}: {e}", config.listen));
        let listener = std::net::TcpListener::bind(&config.listen).map_err(what)?;
        let addr = listener.local_addr().map_err(what)?;
        if !addr.ip().is_loopback() && token.is_none() {
            return Err(Error::Other(format!(
                "the viewer would listen on {addr}, which is not loopback: set a token with --token or {UI_TOKEN_ENV}"
            )));
        }
        drop(Writer::open_dir(&config.store_dir)?);
        let state = State {
            db: config.store_dir.join(DB_FILE_NAME),
            dir: config.store_dir.clone(),
            token,
            opts: config.span_options,
            base: config.base.trim_end_matches('/').to_string(),
            loopback_only: addr.ip().is_loopback(),
            tz: TimeZone::system(),
            hermes_home: config.hermes_home.clone(),
            trace_link: config.trace_link.clone(),
        };
        let server = HttpServer::start(listener, "ui", move |req| answer(&state, &Asked::of(&req)))?;
        Ok(UiServer { server })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Blocks until the server stops (it does not, unless it failed).
    pub fn wait(self) {
        self.server.wait();
    }
}

struct State {
    db: PathBuf,
    dir: PathBuf,
    token: Option<String>,
    opts: SpanOptions,
    base: String,
    loopback_only: bool,
    tz: TimeZone,
    hermes_home: Option<PathBuf>,
    trace_link: Option<trace_link::TraceLink>,
}

/// What a request asked, copied out of it.
#[derive(Debug, Clone)]
struct Asked {
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    host: Option<String>,
    cookie: Option<String>,
    bearer: Option<String>,
}

impl Asked {
    fn of<B>(req: &Request<B>) -> Self {
        let header_text = |name: header::HeaderName| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let cookie = header_text(header::COOKIE).and_then(|c| {
            c.split(';').find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                (k == COOKIE).then(|| percent_decode(v, false))
            })
        });
        let bearer =
            header_text(header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer ").map(|t| t.trim().to_string()));
        Asked {
            method: req.method().clone(),
            path: req.uri().path().to_string(),
            query: query_pairs(req.uri().query().unwrap_or("")),
            host: header_text(header::HOST),
            cookie,
            bearer,
        }
    }

    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
}

/// Equal in time independent of where they differ (the viewer's and
/// `mcp --listen`'s tokens).
pub(crate) fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Whether a `Host` header names this machine's loopback.
fn loopback_host(host: &str) -> bool {
    let name = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host)
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn answer(state: &State, asked: &Asked) -> Response<Full<Bytes>> {
    if asked.method != Method::GET && asked.method != Method::HEAD {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "read-only viewer: GET only\n");
    }
    let path = match asked.path.strip_prefix(state.base.as_str()) {
        Some(p) if state.base.is_empty() || p.is_empty() || p.starts_with('/') => {
            if p.is_empty() {
                "/"
            } else {
                p
            }
        }
        _ => return plain(StatusCode::NOT_FOUND, "not found\n"),
    };
    // Every route, the stylesheet and script included, is behind the
    // token: what a request may see is decided before what it asked for.
    match &state.token {
        Some(token) => {
            if let Some(given) = asked.param("token") {
                if !same_secret(given, token) {
                    return plain(StatusCode::UNAUTHORIZED, "wrong token\n");
                }
                // Keep it in a cookie and take it out of the address bar.
                // The redirect goes to the configured base only: a path
                // from the request (`//elsewhere/`) would be another site.
                let rest: Vec<String> = asked
                    .query
                    .iter()
                    .filter(|(k, _)| k != "token")
                    .map(|(k, v)| format!("{}={}", html::url_part(k), html::url_part(v)))
                    .collect();
                let mut location = format!("{}/", state.base);
                if !rest.is_empty() {
                    location = format!("{location}?{}", rest.join("&"));
                }
                let mut r = plain(StatusCode::SEE_OTHER, "");
                set_header(&mut r, header::LOCATION, &location);
                set_header(
                    &mut r,
                    header::SET_COOKIE,
                    &format!("{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict", html::url_part(token)),
                );
                return r;
            }
            let ok = [&asked.cookie, &asked.bearer]
                .iter()
                .any(|g| g.as_deref().is_some_and(|g| same_secret(g, token)));
            if !ok {
                let mut r = plain(
                    StatusCode::UNAUTHORIZED,
                    "this viewer needs its token: open the address `hermes-meter ui` printed, \
or send Authorization: Bearer <token>\n",
                );
                set_header(&mut r, header::WWW_AUTHENTICATE, "Bearer");
                return r;
            }
        }
        None => {
            if state.loopback_only && !asked.host.as_deref().is_some_and(loopback_host) {
                return plain(StatusCode::FORBIDDEN, "the viewer answers loopback host names only\n");
            }
        }
    }
    // The page passes the token to its stylesheet and script the way it
    // reaches every page: the cookie set by the `?token=` redirect, sent
    // by the browser with each request.
    match path {
        STYLE_PATH => return asset("text/css; charset=utf-8", STYLE),
        SCRIPT_PATH => return asset("text/javascript; charset=utf-8", SCRIPT),
        _ => {}
    }
    match route(state, path, asked) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(target: "Ui.RequestFailed", path = %asked.path, error = %e);
            plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n"))
        }
    }
}

fn route(state: &State, path: &str, asked: &Asked) -> Result<Response<Full<Bytes>>> {
    let store = Reader::open(&state.db)?;
    let version = data_version(&store)?;
    let frame = Frame {
        base: &state.base,
        version,
        tz: &state.tz,
    };
    if path == "/api/version" {
        return Ok(json(&serde_json::json!({ "version": version })));
    }
    if path == "/" || path == "/api/sessions" {
        let (filter, day) = filter_of(asked, &state.tz);
        if path == "/api/sessions" {
            let (rows, totals) = store.read_snapshot(|s| s.session_list(&filter))?;
            return Ok(json(&serde_json::json!({ "sessions": rows, "totals": totals })));
        }
        let trouble =
            crate::hermes_check::HermesView::look(&store, &state.dir, state.hermes_home.as_deref()).problems();
        let dates = chart_days(&state.tz);
        let windows: Vec<(f64, f64)> = dates.iter().map(|(_, since, until)| (*since, *until)).collect();
        let hermes_meter_store::SessionIndex {
            rows,
            totals,
            values,
            by_window,
        } = store.read_snapshot(|s| s.session_index(&filter, &windows))?;
        let days: Vec<(String, hermes_meter_store::SessionListTotals)> =
            dates.into_iter().map(|(date, _, _)| date).zip(by_window).collect();
        let ids: Vec<&str> = rows.iter().map(|r| r.session_id.as_str()).collect();
        let infos = hermes_infos(state, &ids);
        let view = pages::IndexView {
            filter: &filter,
            day: &day,
            rows: &rows,
            totals: &totals,
            values: &values,
            days: &days,
            infos: &infos,
            trouble: &trouble,
        };
        let body = pages::index(&frame, &view);
        return Ok(html_page(
            StatusCode::OK,
            pages::page(&frame, "Sessions", Tab::Sessions, &body),
        ));
    }
    if path == "/advice" {
        let days = asked
            .param("days")
            .and_then(|d| d.parse::<i64>().ok())
            .unwrap_or(7)
            .clamp(1, advice::MOST_DAYS);
        let now = hermes_meter_store::unix_now();
        let since = now - days as f64 * 86_400.0;
        let model = asked.param("price_as").map(str::trim).filter(|m| !m.is_empty());
        let (found, what_if) = store.read_snapshot(|s| {
            let found = hermes_meter_runtime::advise::advise(s, &state.dir, since, now)?;
            let what_if = match model {
                Some(m) => Some(hermes_meter_runtime::advise::price_as(s, &state.dir, m, since, now)?),
                None => None,
            };
            Ok((found, what_if))
        })?;
        let mut body = advice::page(&frame, &found, days);
        body.push_str(&advice::what_if(model, what_if.as_ref(), days));
        return Ok(html_page(
            StatusCode::OK,
            pages::page(&frame, "Advice", Tab::Advice, &body),
        ));
    }
    if path == "/budgets" {
        let cfg = hermes_meter_runtime::config::load_budgets(&state.dir.join(budget::BUDGETS_FILE_NAME))?;
        let now = hermes_meter_store::unix_now();
        let (states, caps, verdicts, alerts) = store.read_snapshot(|s| {
            let states = if cfg.is_empty() {
                Vec::new()
            } else {
                s.budget_states(&cfg, now)?
            };
            let caps = s.open_cap_states(&cfg, now, SHOWN_CAP_SESSIONS)?;
            Ok((states, caps, s.budget_verdict_counts()?, s.alerts()?))
        })?;
        let rows: Vec<pages::BudgetRow> = states
            .into_iter()
            .map(|state| {
                let (start, end) = budget::window_bounds(state.budget.window, budget::timestamp(now), &cfg.tz);
                let forecast = budget::forecast(state.spend.total(), start.as_second(), end.as_second(), now);
                let line = state.budget.limit * cfg.hard_threshold;
                let runs_out = forecast.reaches(state.spend.total(), line, now, state.window_end);
                pages::BudgetRow {
                    state,
                    forecast,
                    runs_out,
                }
            })
            .collect();
        let body = pages::budgets(&frame, &cfg, &rows, &caps, &verdicts, &alerts);
        return Ok(html_page(
            StatusCode::OK,
            pages::page(&frame, "Budgets", Tab::Budgets, &body),
        ));
    }
    let api = path.strip_prefix("/api/session/");
    if let Some(raw) = api.or_else(|| path.strip_prefix("/session/")) {
        let id = percent_decode(raw, false);
        return Ok(match crate::trace::load(&store, &id, state.opts)? {
            Some(trace) if api.is_some() => json(&trace),
            Some(trace) => {
                let infos = hermes_infos(state, &[trace.session_id.as_str()]);
                let body = pages::session(&frame, &trace, infos.get(&trace.session_id), state.trace_link.as_ref());
                html_page(
                    StatusCode::OK,
                    pages::page(&frame, &format!("Session {id}"), Tab::None, &body),
                )
            }
            None if api.is_some() => {
                let mut r = json(&serde_json::json!({ "error": format!("no session {id:?}") }));
                *r.status_mut() = StatusCode::NOT_FOUND;
                r
            }
            None => html_page(
                StatusCode::NOT_FOUND,
                pages::page(
                    &frame,
                    "Not found",
                    Tab::None,
                    &pages::not_found(&format!("No session {id:?} in this store.")),
                ),
            ),
        });
    }
    Ok(html_page(
        StatusCode::NOT_FOUND,
        pages::page(
            &frame,
            "Not found",
            Tab::None,
            &pages::not_found(&format!("Nothing at {path}.")),
        ),
    ))
}

/// Days on the home page's spend chart.
const CHART_DAYS: i64 = 30;

/// The chart's days in `tz`, oldest first: `(date, midnight, next midnight)`.
fn chart_days(tz: &TimeZone) -> Vec<(String, f64, f64)> {
    let today = jiff::Timestamp::now().to_zoned(tz.clone()).date();
    (0..CHART_DAYS)
        .rev()
        .filter_map(|back| {
            let date = today.checked_sub(jiff::Span::new().days(back)).ok()?;
            let since = day_start(date, tz)?;
            let until = date.tomorrow().ok().and_then(|next| day_start(next, tz))?;
            Some((date.to_string(), since, until))
        })
        .collect()
}

/// Hermes's titles and first prompts of `ids`, from its `state.db` (never
/// inside a Hermes process; nothing when it cannot be read).
fn hermes_infos(state: &State, ids: &[&str]) -> HashMap<String, HermesSessionInfo> {
    let Some(home) = state.hermes_home.as_deref() else {
        return HashMap::new();
    };
    match hermes_meter_store::hermes_state::session_infos(home, ids) {
        Ok(found) => found.unwrap_or_default(),
        Err(e) => {
            tracing::debug!(target: "Ui", error = %e, "Hermes's session titles not read");
            HashMap::new()
        }
    }
}

/// The newest journal row: moves with every event any process applies.
fn data_version(store: &Reader) -> Result<i64> {
    store.query_scalar("SELECT COALESCE(MAX(seq), 0) FROM journal")
}

/// The index filter from the query: `day` (a date in the viewer's zone),
/// `platform`, `cron`, `sender`, `model`, `sort`, `offset`.
fn filter_of(asked: &Asked, tz: &TimeZone) -> (SessionFilter, String) {
    let text = |k: &str| asked.param(k).map(str::to_string);
    let mut filter = SessionFilter {
        platform: text("platform"),
        cron_job_id: text("cron"),
        sender_id: text("sender"),
        model: text("model"),
        sort: asked.param("sort").and_then(SessionSort::parse).unwrap_or_default(),
        limit: PAGE_SIZE,
        offset: asked.param("offset").and_then(|o| o.parse().ok()).unwrap_or(0),
        ..SessionFilter::default()
    };
    let mut day = String::new();
    if let Some(d) = asked.param("day").and_then(|d| d.parse::<jiff::civil::Date>().ok()) {
        filter.since = day_start(d, tz);
        filter.until = d.tomorrow().ok().and_then(|next| day_start(next, tz));
        day = d.to_string();
    }
    (filter, day)
}

/// Midnight of `date` in `tz`, Unix seconds.
fn day_start(date: jiff::civil::Date, tz: &TimeZone) -> Option<f64> {
    date.to_zoned(tz.clone())
        .ok()
        .map(|z| z.timestamp().as_microsecond() as f64 / 1e6)
}

fn set_header(r: &mut Response<Full<Bytes>>, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().insert(name, v);
    }
}

fn respond(status: StatusCode, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    set_header(&mut r, header::CONTENT_TYPE, content_type);
    set_header(&mut r, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set_header(&mut r, header::REFERRER_POLICY, "no-referrer");
    r
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = respond(status, "text/plain; charset=utf-8", Bytes::from(text.to_string()));
    set_header(&mut r, header::CACHE_CONTROL, "no-store");
    r
}

fn asset(content_type: &str, text: &'static str) -> Response<Full<Bytes>> {
    let mut r = respond(StatusCode::OK, content_type, Bytes::from_static(text.as_bytes()));
    // `private`: answered only with the token, so no shared cache keeps it.
    set_header(&mut r, header::CACHE_CONTROL, "private, max-age=300");
    r
}

fn html_page(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut r = respond(status, "text/html; charset=utf-8", Bytes::from(text));
    set_header(&mut r, header::CACHE_CONTROL, "no-store");
    // Only this viewer's own script and stylesheet; SVG geometry instead
    // of inline styles.
    set_header(
        &mut r,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
base-uri 'none'; form-action 'self'",
    );
    r
}

fn json<T: serde::Serialize>(value: &T) -> Response<Full<Bytes>> {
    match serde_json::to_vec(value) {
        Ok(body) => {
            let mut r = respond(StatusCode::OK, "application/json", Bytes::from(body));
            set_header(&mut r, header::CACHE_CONTROL, "no-store");
            r
        }
        Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised() {
        for (host, want) in [
            ("127.0.0.1:8765", true),
            ("localhost:8765", true),
            ("LOCALHOST", true),
            ("[::1]:8765", true),
            ("127.1.2.3", true),
            ("evil.example:8765", false),
            ("192.168.1.2:8765", false),
            ("", false),
        ] {
            assert_eq!(loopback_host(host), want, "{host}");
        }
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "abcd"));
    }
}
