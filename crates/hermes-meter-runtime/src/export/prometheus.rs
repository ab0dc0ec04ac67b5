//! `hermes-meter serve --prometheus ADDR`: the Prometheus text endpoint.
//!
//! Owns: its store connection, answering, through [`HttpServer`],
//! `GET /metrics` with [`hermes_meter_model::metrics::prometheus_text`]. Must not
//! touch: the ledger (it only folds and reads metric state).
//!
//! Each scrape first folds finished ledger rows (one short transaction)
//! and reads every budget's spend and limit into the budget gauges, so
//! what Prometheus reads is current to the scrape. Folding is exactly
//! once whichever process does it, so the endpoint needs no lease: two
//! `serve` processes on one store serve the same totals (scrape only one of
//! them, or sums double).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};

use crate::http_server::{HttpServer, Reply};
use hermes_meter_model::metrics::AllowList;
use hermes_meter_model::semconv::Names;
use hermes_meter_store::error::{Error, Result};
use hermes_meter_store::Outbox;

/// The text exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running `/metrics` endpoint; serves until the process ends or it is
/// dropped.
#[derive(Debug)]
pub struct PrometheusServer {
    server: HttpServer,
}

impl PrometheusServer {
    /// Binds `addr` (`host:port`; port 0 picks one) and serves the store at
    /// `store_path` on a thread of its own. A bind failure is returned here.
    pub fn start(
        addr: &str,
        store_path: &Path,
        allow: AllowList,
        names: Names,
        session_grace_seconds: f64,
    ) -> Result<Self> {
        let listener =
            std::net::TcpListener::bind(addr).map_err(|e| Error::Other(format!("prometheus endpoint {addr}: {e}")))?;
        let store = Outbox::open(store_path)?;
        let state = Scrape {
            store: Mutex::new(store),
            allow,
            names,
            session_grace_seconds,
            path: store_path.to_path_buf(),
        };
        // Scrapes share the one store connection: they run one at a time.
        let server = HttpServer::start(listener, "prometheus", move |req| answer(&state, &req))?;
        Ok(PrometheusServer { server })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }
}

struct Scrape {
    store: Mutex<Outbox>,
    allow: AllowList,
    names: Names,
    session_grace_seconds: f64,
    path: PathBuf,
}

impl Scrape {
    fn render(&self) -> Result<String> {
        let mut store = self.store.lock().map_err(|_| {
            Error::Other(format!(
                "prometheus endpoint: store {} lock poisoned",
                self.path.display()
            ))
        })?;
        super::metrics::fold(&mut store, self.session_grace_seconds)?;
        // Budget gauges are a reading of now, not a fold of the ledger:
        // taken at every scrape, as before every push.
        super::metrics::refresh_budget_gauges(&mut store, self.allow);
        let series = super::metrics::snapshot(&store, self.allow, self.names)?;
        Ok(hermes_meter_model::metrics::prometheus_text(&series))
    }
}

fn answer<B>(state: &Scrape, req: &Request<B>) -> Reply {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
            response.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        response
    };
    if req.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "text/plain", "not found; try /metrics\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", String::new());
    }
    // Outbox work is short (one fold batch, one read); doing it on this
    // single-threaded runtime serialises scrapes, which is what we want.
    match state.render() {
        Ok(text) => reply(StatusCode::OK, CONTENT_TYPE, text),
        Err(e) => {
            tracing::warn!(target: "Prometheus.ScrapeFailed", error = %e);
            reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("{e}\n"))
        }
    }
}
