//! `hermes-meter mcp --listen ADDR`: the MCP tools of `mcp.rs` over the
//! protocol's streamable HTTP transport (rmcp's server; hyper serves it),
//! at `/mcp`, stateless (no session is kept between requests).
//!
//! Access follows the viewer's rules (and its token comparison): loopback by default; an address off
//! loopback needs a token (`--token` or `HERMES_METER_MCP_TOKEN`), and
//! with a token every request must carry `Authorization: Bearer <token>`.
//! Without one, only requests whose `Host` is a loopback name are answered
//! (rmcp's check), so a web page cannot reach the server through DNS
//! rebinding; a request from a browser page (any `Origin`) is refused
//! either way. Bounded: a request body of at most [`MOST_REQUEST_BYTES`],
//! its headers within [`HEADER_TIMEOUT`], at most [`MOST_CONNECTIONS`] open
//! connections (more are closed at once), every answer bounded by
//! `mcp.rs`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{header, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::mcp::MeterMcp;
use hermes_meter_store::error::{Error, Result};

/// The path the transport answers on.
pub(super) const PATH: &str = "/mcp";
/// The largest request body taken (a tool call's arguments are small).
const MOST_REQUEST_BYTES: usize = 1 << 20;
/// How long a client has to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The most connections served at once.
const MOST_CONNECTIONS: usize = 64;

type Answer = Response<BoxBody<Bytes, Infallible>>;

fn plain(status: StatusCode, text: &str) -> Answer {
    let mut r = Response::new(Full::new(Bytes::from(text.to_string())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// What a request may not pass, or `None` when it may.
fn refused(req: &Request<Incoming>, token: Option<&str>) -> Option<Answer> {
    if req.uri().path() != PATH {
        return Some(plain(StatusCode::NOT_FOUND, "not found: the MCP endpoint is /mcp\n"));
    }
    let token = token?;
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given.is_some_and(|g| crate::ui::same_secret(g.trim(), token)) {
        return None;
    }
    let mut r = plain(
        StatusCode::UNAUTHORIZED,
        "this MCP server needs its token: send Authorization: Bearer <token>\n",
    );
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    Some(r)
}

/// Serves on `addr` until SIGINT or SIGTERM; prints the address it listens
/// on (its port when `addr`'s is 0) first.
pub(super) fn serve(dir: PathBuf, addr: SocketAddr, token: Option<String>) -> Result<i32> {
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(Error::Other(format!(
            "mcp would listen on {addr}, which is not loopback: set a token with --token or {}",
            hermes_meter_runtime::config::cli::MCP_TOKEN_ENV
        )));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Other(format!("mcp: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::Other(format!("mcp: cannot listen on {addr}: {e}")))?;
        let local = listener.local_addr().map_err(|e| Error::Other(format!("mcp: {e}")))?;
        println!("hermes-meter mcp: listening on http://{local}{PATH}");
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        let mut config = StreamableHttpServerConfig::default();
        config.legacy_session_mode = false;
        config.json_response = true;
        config.max_request_body_bytes = MOST_REQUEST_BYTES;
        // No browser page may call it; with a token, any host name may.
        let mut config = config.enforce_origin_validation();
        if token.is_some() {
            config = config.disable_allowed_hosts();
        }
        let opts = super::trace::span_options();
        let service = StreamableHttpService::new(
            move || Ok(MeterMcp::new(dir.clone(), opts)),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        let token: Option<Arc<str>> = token.map(Into::into);
        let slots = Arc::new(tokio::sync::Semaphore::new(MOST_CONNECTIONS));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| Error::Other(format!("mcp: {e}")))?;
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(target: "Mcp.Accept", "{e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                _ = tokio::signal::ctrl_c() => break,
                _ = term.recv() => break,
            };
            let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                drop(stream);
                continue;
            };
            let (service, token) = (service.clone(), token.clone());
            tokio::spawn(async move {
                let answer = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let mut service = service.clone();
                    let refusal = refused(&req, token.as_deref());
                    async move {
                        match refusal {
                            Some(r) => Ok::<_, Infallible>(r),
                            None => tower_service::Service::call(&mut service, req).await,
                        }
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), answer)
                    .await;
                drop(slot);
            });
        }
        Ok::<(), Error>(())
    })?;
    Ok(0)
}
