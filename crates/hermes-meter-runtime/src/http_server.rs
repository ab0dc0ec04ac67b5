//! A small HTTP/1.1 server on a thread of its own, for the endpoints the
//! CLI serves: `serve --prometheus` and `hermes-meter ui` (which is also the
//! dashboard tab's backend).
//!
//! Owns: the thread, its tokio runtime, the accept loop, the limits every
//! connection lives under, and the shutdown. Must not touch: what is served
//! (each endpoint passes its own `answer`). Answers run on the runtime's
//! blocking threads: they read the store, which blocks, and must not stall
//! the accept loop.
//!
//! # Limits
//!
//! The viewer may listen off loopback, and its token is checked only once
//! a request's headers are in, so a client that connects and sends nothing
//! must cost little and not for long:
//!
//! - a client has [`HEADER_READ_TIMEOUT`] to send a request's headers,
//!   counted from when the connection starts waiting for one, so it is also
//!   the idle timeout of a kept-alive connection;
//! - a connection lives at most [`CONNECTION_LIFETIME`], then is closed
//!   once its answer in flight is out (a client reading an answer a byte
//!   at a time cannot hold it longer);
//! - at most [`Limits::max_connections`] are served at once, half the
//!   process's descriptors ([`connection_cap`]), so a flood is answered
//!   `503` with `Retry-After` and `Connection: close` before the process
//!   runs out of descriptors (which would also starve the store and the
//!   exporter); the `503` is written before anything is read, and what
//!   the client sends is then discarded, briefly, only so that it reads
//!   the answer rather than a reset;
//! - when `accept` fails for want of descriptors or memory (`EMFILE`,
//!   `ENFILE`, ...), the loop waits a growing delay before trying again
//!   instead of spinning on the connection still queued, and logs the
//!   failures at most once per [`LOG_INTERVAL`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;

use hermes_meter_store::error::{Error, Result};

/// What every answer is.
pub type Reply = Response<Full<Bytes>>;

/// How long a client has to send a request's headers. hyper counts it
/// from when the connection starts waiting for a request, on a new
/// connection and between kept-alive requests alike, so it is the idle
/// timeout too. Ten seconds is ample for any client on a network (the
/// headers are a few hundred bytes) and longer than the viewer's pages
/// poll (every 2 s), so their kept-alive connection is reused.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one connection may live, requests and answers included. An
/// answer is at most a page of a few hundred kilobytes; two minutes bounds
/// what a client that reads it a byte at a time can hold, and a browser
/// simply opens a new connection for its next poll.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);

/// How long a connection past its lifetime has to finish the answer in
/// flight before it is cut.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The most connections served at once, whatever the descriptor limit:
/// each holds a task and hyper's read buffer (8 KiB at first), so 4,096
/// idle ones cost tens of megabytes at worst.
pub(crate) const MAX_CONNECTIONS: usize = 4096;

/// The fewest, however low the descriptor limit: a browser opens six.
const MIN_CONNECTIONS: usize = 16;

/// `503` answers being written at once past the cap; further connections
/// past it are closed unanswered, so answering a flood cannot itself use
/// up the descriptors.
const OVERLOAD_ANSWERS: usize = 64;

/// How long a `503` waits for the client to stop sending before the
/// socket is closed: closing with the request unread would send a reset,
/// and the client could lose the `503` before reading it.
const OVERLOAD_LINGER: Duration = Duration::from_secs(1);

/// The most of a refused request read (and dropped) while lingering.
const OVERLOAD_DRAIN_BYTES: usize = 16 * 1024;

/// What a refused client is told to wait, in seconds (`Retry-After`).
pub const RETRY_AFTER_SECONDS: u64 = 1;

/// The listen queue asked of the kernel (which caps it at `somaxconn`).
/// The standard library listens with 128: a burst past that (a flood, or
/// many clients at once while the loop is busy) has its connections
/// dropped and retried by the client a second or more later; tokio's own
/// `bind` asks 1,024.
const LISTEN_BACKLOG: libc::c_int = 1024;

/// The first wait after `accept` failed for want of a resource, doubled
/// on each failure in a row up to [`ACCEPT_BACKOFF_MAX`]: descriptors come
/// back as connections close, which takes milliseconds to seconds.
const ACCEPT_BACKOFF_START: Duration = Duration::from_millis(5);

/// The longest wait between two `accept`s while resources are short.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// At most one log line per this long for repeated accept failures or
/// refused connections; the lines in between are counted, not lost.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The most the binary raises its soft descriptor limit to (see
/// [`raise_open_file_limit`]); far more than [`MAX_CONNECTIONS`] needs.
const OPEN_FILE_CEILING: u64 = 65_536;

/// What one server tolerates; [`Limits::default`] is what the CLI serves
/// with. Tests use shorter ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`CONNECTION_LIFETIME`].
    pub connection_lifetime: Duration,
    /// Connections served at once; past it, `503`.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            connection_lifetime: CONNECTION_LIFETIME,
            max_connections: connection_cap(open_file_limit()),
        }
    }
}

/// The connection cap for a process allowed `open_files` descriptors:
/// half of them (the store, the exporter and, inside Hermes, Hermes itself
/// need the rest, as do the `503`s), within [`MIN_CONNECTIONS`] and
/// [`MAX_CONNECTIONS`].
pub fn connection_cap(open_files: u64) -> usize {
    usize::try_from(open_files / 2)
        .unwrap_or(usize::MAX)
        .clamp(MIN_CONNECTIONS, MAX_CONNECTIONS)
}

/// This process's soft limit on open descriptors (`RLIMIT_NOFILE`), or
/// 1,024, the usual default, when it cannot be read.
pub fn open_file_limit() -> u64 {
    nofile().map(|(soft, _)| soft).unwrap_or(1024)
}

/// Raises this process's soft descriptor limit to its hard limit (at most
/// 65,536), as Go programs do at start: the usual soft default of 1,024
/// caps the viewer at 512 connections for no reason but history. Only the
/// binary calls it; the extension leaves Hermes's process limits alone.
/// Returns the soft limit now in force.
pub fn raise_open_file_limit() -> u64 {
    let Some((soft, hard)) = nofile() else {
        return open_file_limit();
    };
    let want = hard.min(OPEN_FILE_CEILING);
    if want > soft {
        #[allow(clippy::unnecessary_cast)] // as in `nofile`
        let limit = libc::rlimit {
            rlim_cur: want as libc::rlim_t,
            rlim_max: hard as libc::rlim_t,
        };
        // SAFETY: setrlimit reads the struct it is given and nothing else.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
        if rc == 0 {
            return want;
        }
    }
    soft
}

/// The soft and hard `RLIMIT_NOFILE`.
#[allow(clippy::unnecessary_cast)] // rlim_t is u64 on Linux, not everywhere.
fn nofile() -> Option<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    if rc != 0 {
        return None;
    }
    Some((limit.rlim_cur as u64, limit.rlim_max as u64))
}

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
    /// `answer`, under the default [`Limits`].
    pub fn start(
        listener: std::net::TcpListener,
        name: &str,
        answer: impl Fn(Request<Incoming>) -> Reply + Send + Sync + 'static,
    ) -> Result<Self> {
        Self::start_with(listener, name, Limits::default(), answer)
    }

    /// As [`HttpServer::start`], under `limits`.
    pub fn start_with(
        listener: std::net::TcpListener,
        name: &str,
        limits: Limits,
        answer: impl Fn(Request<Incoming>) -> Reply + Send + Sync + 'static,
    ) -> Result<Self> {
        let what = |e: std::io::Error| Error::Other(format!("{name}: {e}"));
        let addr = listener.local_addr().map_err(what)?;
        listener.set_nonblocking(true).map_err(what)?;
        // Listening again on a listening socket only sets its queue length.
        // SAFETY: listen on a descriptor `listener` owns for this call.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::listen(listener.as_raw_fd(), LISTEN_BACKLOG) };
        if rc != 0 {
            return Err(what(std::io::Error::last_os_error()));
        }
        let answer = Arc::new(answer);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let label = name.to_string();
        // Built here, so that a failure (no descriptor left for its
        // epoll) is the caller's error rather than a thread that quits.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(what)?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener).map_err(what)?
        };
        let thread = std::thread::Builder::new()
            .name(format!("hermes-meter-{name}"))
            .spawn(move || runtime.block_on(accept_loop(listener, limits, answer, rx, label)))
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
    listener: tokio::net::TcpListener,
    limits: Limits,
    answer: Arc<F>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
    label: String,
) where
    F: Fn(Request<Incoming>) -> Reply + Send + Sync + 'static,
{
    let served = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refusing = Arc::new(Semaphore::new(OVERLOAD_ANSWERS));
    let mut accept_failures = RateLimitedLog::default();
    let mut refusals = RateLimitedLog::default();
    let mut backoff = ACCEPT_BACKOFF_START;
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    backoff = ACCEPT_BACKOFF_START;
                    stream
                }
                Err(e) => {
                    if accept_failures.due() {
                        tracing::warn!(target: "HttpServer.AcceptFailed", server = %label, error = %e,
                            failures = accept_failures.take());
                    }
                    if !is_connection_error(&e) {
                        // The queued connection is still there: accepting
                        // again at once would fail again at once.
                        tokio::select! {
                            _ = &mut shutdown => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                    }
                    continue;
                }
            },
        };
        let Ok(permit) = Arc::clone(&served).try_acquire_owned() else {
            let answered = Arc::clone(&refusing).try_acquire_owned().ok();
            if refusals.due() {
                tracing::warn!(target: "HttpServer.Overloaded", server = %label,
                    max_connections = limits.max_connections, refused = refusals.take());
            }
            if let Some(slot) = answered {
                tokio::spawn(async move {
                    refuse(stream).await;
                    drop(slot);
                });
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let answer = Arc::clone(&answer);
        tokio::spawn(async move {
            serve_connection(stream, limits, answer).await;
            drop(permit);
        });
    }
}

/// Serves one connection within `limits`.
async fn serve_connection<F>(stream: tokio::net::TcpStream, limits: Limits, answer: Arc<F>)
where
    F: Fn(Request<Incoming>) -> Reply + Send + Sync + 'static,
{
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
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = tokio::time::sleep(limits.connection_lifetime) => {}
    }
    // Past its lifetime: finish the answer in flight, then close.
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn).await;
}

/// Answers a connection past the cap `503` without reading its request,
/// then lingers briefly so the client reads the answer rather than a reset.
async fn refuse(mut stream: tokio::net::TcpStream) {
    let body = "too many connections: retry shortly\n";
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: {RETRY_AFTER_SECONDS}\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let linger = async {
        stream.write_all(head.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        let mut drained = 0;
        while drained < OVERLOAD_DRAIN_BYTES {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(OVERLOAD_LINGER, linger).await;
}

/// An accept error that concerns only the connection being accepted (it
/// was reset or aborted before we took it), not the listener: try the
/// next one at once.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset | Interrupted
    )
}

/// Logs a repeated event at most once per [`LOG_INTERVAL`], counting the
/// occurrences in between so the next line reports them.
#[derive(Debug, Default)]
struct RateLimitedLog {
    last: Option<Instant>,
    count: u64,
}

impl RateLimitedLog {
    /// Counts one occurrence; true when it should be logged now.
    fn due(&mut self) -> bool {
        self.count += 1;
        let now = Instant::now();
        if self.last.is_some_and(|at| now.duration_since(at) < LOG_INTERVAL) {
            return false;
        }
        self.last = Some(now);
        true
    }

    /// The occurrences since the last line, this one included; resets.
    fn take(&mut self) -> u64 {
        std::mem::take(&mut self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    #[test]
    fn only_errors_of_the_connection_being_accepted_are_retried_at_once() {
        for (kind, at_once) in [
            (ErrorKind::ConnectionAborted, true),
            (ErrorKind::ConnectionReset, true),
            (ErrorKind::ConnectionRefused, true),
            (ErrorKind::Interrupted, true),
            (ErrorKind::OutOfMemory, false),
            (ErrorKind::Other, false),
        ] {
            assert_eq!(is_connection_error(&std::io::Error::from(kind)), at_once, "{kind:?}");
        }
        // EMFILE and ENFILE: back off.
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOBUFS, libc::ENOMEM] {
            assert!(
                !is_connection_error(&std::io::Error::from_raw_os_error(errno)),
                "{errno}"
            );
        }
    }

    #[test]
    fn a_repeated_event_is_logged_once_per_interval_with_its_count() {
        let mut log = RateLimitedLog::default();
        assert!(log.due(), "the first is logged");
        assert_eq!(log.take(), 1);
        assert!(!log.due() && !log.due(), "the next ones in the interval are not");
        // As if the interval had passed.
        log.last = Instant::now().checked_sub(LOG_INTERVAL);
        assert!(log.due());
        assert_eq!(log.take(), 3, "the line reports the ones it skipped");
    }

    #[test]
    fn the_cap_is_half_the_descriptors_within_bounds() {
        for (open_files, cap) in [
            (0, MIN_CONNECTIONS),
            (20, MIN_CONNECTIONS),
            (1024, 512),
            (8192, MAX_CONNECTIONS),
            (u64::MAX, MAX_CONNECTIONS),
        ] {
            assert_eq!(connection_cap(open_files), cap, "{open_files}");
        }
    }
}
