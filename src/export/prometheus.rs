//! `hermes-otel serve --prometheus ADDR`: the Prometheus text endpoint.
//!
//! Owns: a small HTTP/1.1 server (hyper, already in the tree through
//! tonic) on its own thread and its own store connection, answering
//! `GET /metrics` with [`crate::metrics::prometheus_text`]. Must not
//! touch: the ledger (it only folds and reads metric state).
//!
//! Each scrape first folds finished ledger rows (one short transaction)
//! and reads every budget's spend and limit into the budget gauges, so
//! what Prometheus reads is current to the scrape. Folding is exactly
//! once whichever process does it, so the endpoint needs no lease: two
//! `serve` processes on one store serve the same totals (scrape only one of
//! them, or sums double).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::error::{Error, Result};
use crate::metrics::AllowList;
use crate::store::Store;

/// The text exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A running `/metrics` endpoint; serves until the process ends or it is
/// dropped.
pub struct PrometheusServer {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for PrometheusServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrometheusServer").field("addr", &self.addr).finish()
    }
}

impl PrometheusServer {
    /// Binds `addr` (`host:port`; port 0 picks one) and serves the store at
    /// `store_path` on a thread of its own. A bind failure is returned here.
    pub fn start(addr: &str, store_path: &Path, allow: AllowList, session_grace_seconds: f64) -> Result<Self> {
        let listener =
            std::net::TcpListener::bind(addr).map_err(|e| Error::Other(format!("prometheus endpoint {addr}: {e}")))?;
        let bound = listener
            .local_addr()
            .map_err(|e| Error::Other(format!("prometheus endpoint {addr}: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::Other(format!("prometheus endpoint {addr}: {e}")))?;
        let store = Store::open(store_path)?;
        let state = Arc::new(Scrape {
            store: Mutex::new(store),
            allow,
            session_grace_seconds,
            path: store_path.to_path_buf(),
        });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("hermes-otel-prometheus".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(target: "Prometheus.Failed", error = %e);
                        return;
                    }
                };
                runtime.block_on(accept_loop(listener, state, rx));
            })
            .map_err(|e| Error::Other(format!("prometheus endpoint thread: {e}")))?;
        Ok(PrometheusServer {
            addr: bound,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Scrape {
    store: Mutex<Store>,
    allow: AllowList,
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
        super::metrics::refresh_budget_gauges(&mut store);
        let series = super::metrics::snapshot(&store, self.allow)?;
        Ok(crate::metrics::prometheus_text(&series))
    }
}

async fn accept_loop(
    listener: std::net::TcpListener,
    state: Arc<Scrape>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(target: "Prometheus.Failed", error = %e);
            return;
        }
    };
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => continue,
            },
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(answer(&state, &req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn answer<B>(state: &Scrape, req: &Request<B>) -> Response<Full<Bytes>> {
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
    // Store work is short (one fold batch, one read); doing it on this
    // single-threaded runtime serialises scrapes, which is what we want.
    match state.render() {
        Ok(text) => reply(StatusCode::OK, CONTENT_TYPE, text),
        Err(e) => {
            tracing::warn!(target: "Prometheus.ScrapeFailed", error = %e);
            reply(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", format!("{e}\n"))
        }
    }
}
