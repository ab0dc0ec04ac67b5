//! A small HTTP/1.1 server on a thread of its own, for the endpoints the
//! CLI serves: `serve --prometheus` and `hermes-otel ui`.
//!
//! Owns: the thread, its tokio runtime, the accept loop and the shutdown.
//! Must not touch: what is served (each endpoint passes its own `answer`).
//! Answers run on the runtime's blocking threads: they read the store,
//! which blocks, and must not stall the accept loop.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use crate::error::{Error, Result};

/// What every answer is.
pub type Reply = Response<Full<Bytes>>;

/// A running server; serves until dropped.
pub struct HttpServer {
    addr: SocketAddr,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for HttpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServer").field("addr", &self.addr).finish()
    }
}

impl HttpServer {
    /// Serves `listener` (bound already, so a bind failure is the caller's
    /// to report) on a thread named `name`, answering every request with
    /// `answer`.
    pub fn start(
        listener: std::net::TcpListener,
        name: &str,
        answer: impl Fn(Request<Incoming>) -> Reply + Send + Sync + 'static,
    ) -> Result<Self> {
        let what = |e: std::io::Error| Error::Other(format!("{name}: {e}"));
        let addr = listener.local_addr().map_err(what)?;
        listener.set_nonblocking(true).map_err(what)?;
        let answer = Arc::new(answer);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let label = name.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("hermes-otel-{name}"))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::error!(target: "HttpServer.Failed", server = %label, error = %e);
                        return;
                    }
                };
                runtime.block_on(accept_loop(listener, answer, rx, label));
            })
            .map_err(what)?;
        Ok(HttpServer {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Blocks until the server stops (it does not, unless it failed).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn accept_loop<F>(
    listener: std::net::TcpListener,
    answer: Arc<F>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
    label: String,
) where
    F: Fn(Request<Incoming>) -> Reply + Send + Sync + 'static,
{
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(target: "HttpServer.Failed", server = %label, error = %e);
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
        let _ = stream.set_nodelay(true);
        let answer = Arc::clone(&answer);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let answer = Arc::clone(&answer);
                async move {
                    let reply = tokio::task::spawn_blocking(move || answer(req))
                        .await
                        .unwrap_or_else(|_| {
                            let mut r = Response::new(Full::new(Bytes::from_static(b"the request failed\n")));
                            *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                            r
                        });
                    Ok::<_, Infallible>(reply)
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
