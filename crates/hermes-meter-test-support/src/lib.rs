//! What hermes-meter's tests and benches share, as a crate they depend on
//! (benches normally, the test binaries as a dev-dependency): OTLP
//! receivers on loopback (this file), a PostgreSQL cluster of its own
//! ([`postgres`]), recorded streams ([`stream`]), child-process loads
//! ([`load`]), one-shot HTTP GETs ([`http_get`]), the `hermes-meter` binary
//! ([`cli`]), hook calls ([`hooks`], [`budget_events`]), a dispatcher like
//! Hermes main's ([`hermes_main`]) and the viewer ([`viewer`]).
//!
//! # OTLP receivers
//!
//! - [`grpc`]: opentelemetry-proto's tonic `TraceService` server, optionally
//!   over TLS ([`grpc_tls`]: also asking for a client certificate).
//! - [`http`]: a minimal HTTP/1.1 server that takes `POST` protobuf bodies
//!   (gzip or not) and answers an empty `ExportTraceServiceResponse`;
//!   [`https`] serves it over TLS, with or without client certificates.
//!
//! Both record every span and the body bytes they received, and can be
//! told to hold answers (to kill an exporter mid-request) or to give
//! other answers than plain acceptance ([`Answer`]: a partial success, a
//! gRPC status, an HTTP error status). Both also take
//! OTLP metrics (the gRPC `MetricsService`, HTTP `POST /v1/metrics`) and
//! keep every request, and OTLP logs (`LogsService`, `POST /v1/logs`),
//! keeping every record.
//!
//! [`grpc_max`] and [`http_max`] refuse a request larger than a maximum,
//! as a Collector does past `max_recv_msg_size_mib` (tonic's own
//! `max_decoding_message_size`: `OUT_OF_RANGE`) or `max_request_body_size`
//! (a 400 that says "request body too large"), or a proxy in front (413).

pub mod budget_events;
pub mod cli;
pub mod fixtures;
pub mod hermes_main;
pub mod hooks;
pub mod http_get;
pub mod load;
pub mod postgres;
// The store's own test binary keeps this module (it links nothing above
// the store); the tests and benches above share the same file.
#[path = "../../hermes-meter-store/tests/stream.rs"]
pub mod stream;
pub mod viewer;
pub mod webhook;

/// The repository's root (fixtures are under its `tests/fixtures/`).
pub fn repository() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The value at fraction `p` (0.5: the median, 0.99: p99) of `sorted`,
/// nearest rank: what the benches report their latencies by.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The name `--exact` runs a test by in this test binary: `test` in the
/// module whose `module_path!()` is `module` (a test binary's modules are
/// part of its test names; its crate's name is not).
pub fn test_name(module: &str, test: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{test}"),
        None => test.to_string(),
    }
}

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{LogsService, LogsServiceServer};
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// What a receiver got.
#[derive(Default)]
pub struct Received {
    pub spans: Mutex<Vec<Span>>,
    pub requests: AtomicUsize,
    /// Body bytes as they came over the wire (compressed if gzip).
    pub body_bytes: AtomicUsize,
    /// While set, requests are received but not answered.
    pub hold: AtomicBool,
    /// Requests that arrived while held.
    pub held: AtomicUsize,
    /// Metric export requests, in arrival order.
    pub metrics: Mutex<Vec<ExportMetricsServiceRequest>>,
    /// Log records, in arrival order.
    pub logs: Mutex<Vec<LogRecord>>,
    /// While set, log requests (over gRPC) are received but not answered.
    pub hold_logs: AtomicBool,
    /// Log requests that arrived while held.
    pub held_logs: AtomicUsize,
    /// Answers to give trace requests, one each, in order; once empty,
    /// every request is accepted in full.
    pub answers: Mutex<VecDeque<Answer>>,
    /// The largest trace or log request taken, in encoded bytes.
    pub largest: AtomicUsize,
    /// Over HTTP: the most bytes a body may have decoded (0: no limit),
    /// and how a larger one is refused.
    http_max: Mutex<Option<(usize, TooLarge)>>,
    /// Requests refused as too large over HTTP.
    pub too_large: AtomicUsize,
}

/// How the HTTP receiver refuses a body over its maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooLarge {
    /// As the Collector's OTLP/HTTP receiver: 400, with a `google.rpc.Status`
    /// body saying "http: request body too large".
    Collector400,
    /// As a proxy in front of it: 413.
    Proxy413,
}

/// How a receiver answers one trace request, when told to answer other
/// than "all accepted".
#[derive(Debug, Clone)]
pub enum Answer {
    /// Accepted, with `rejected` spans refused (an OTLP partial success);
    /// the request's spans are recorded.
    Partial { rejected: i64, message: String },
    /// Refused over gRPC with this code, message and, when set, a
    /// `google.rpc.RetryInfo` delay; nothing is recorded but the request.
    Status {
        code: tonic::Code,
        retry_info: Option<Duration>,
    },
    /// Refused over HTTP with this status and, when set, `Retry-After`
    /// seconds; nothing is recorded but the request.
    Http { status: u16, retry_after: Option<u64> },
    /// Refused over gRPC with this code and message (grpc-go's "received
    /// message larger than max" for a request over its limit).
    StatusMessage { code: tonic::Code, message: String },
}

impl Received {
    /// Queues answers for the next trace requests.
    pub fn answer(&self, answers: impl IntoIterator<Item = Answer>) {
        self.answers.lock().expect("answers lock").extend(answers);
    }

    fn next_answer(&self) -> Option<Answer> {
        self.answers.lock().expect("answers lock").pop_front()
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("spans lock").clone()
    }

    pub fn span_count(&self) -> usize {
        self.spans.lock().expect("spans lock").len()
    }

    /// Every metric request received so far.
    pub fn metric_requests(&self) -> Vec<ExportMetricsServiceRequest> {
        self.metrics.lock().expect("metrics lock").clone()
    }

    /// Every log record received so far.
    pub fn log_records(&self) -> Vec<LogRecord> {
        self.logs.lock().expect("logs lock").clone()
    }

    async fn take_logs_unless_held(&self, request: ExportLogsServiceRequest) {
        if self.hold_logs.load(Ordering::SeqCst) {
            self.held_logs.fetch_add(1, Ordering::SeqCst);
            while self.hold_logs.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        self.take_logs(request);
    }

    fn take_logs(&self, request: ExportLogsServiceRequest) {
        self.largest.fetch_max(request.encoded_len(), Ordering::SeqCst);
        let mut logs = self.logs.lock().expect("logs lock");
        for rl in request.resource_logs {
            for sl in rl.scope_logs {
                logs.extend(sl.log_records);
            }
        }
    }

    fn take_metrics(&self, request: ExportMetricsServiceRequest) {
        self.metrics.lock().expect("metrics lock").push(request);
    }

    async fn take(&self, request: ExportTraceServiceRequest, wire_bytes: usize) {
        if self.hold.load(Ordering::SeqCst) {
            self.held.fetch_add(1, Ordering::SeqCst);
            while self.hold.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        self.requests.fetch_add(1, Ordering::SeqCst);
        self.body_bytes.fetch_add(wire_bytes, Ordering::SeqCst);
        self.largest.fetch_max(request.encoded_len(), Ordering::SeqCst);
        let mut spans = self.spans.lock().expect("spans lock");
        for rs in request.resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    pub received: Arc<Received>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Receiver {
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn http_endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.addr)
    }

    pub fn http_metrics_endpoint(&self) -> String {
        format!("http://{}/v1/metrics", self.addr)
    }

    /// Polls until `n` spans arrived or `timeout` passed; returns the count.
    pub fn wait_for_spans(&self, n: usize, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.received.span_count();
            if got >= n || Instant::now() >= deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.received.hold.store(false, Ordering::SeqCst);
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("receiver runtime")
}

fn bind(rt: &tokio::runtime::Runtime, addr: Option<SocketAddr>) -> tokio::net::TcpListener {
    let addr = addr.unwrap_or_else(|| "127.0.0.1:0".parse().expect("addr"));
    rt.block_on(tokio::net::TcpListener::bind(addr)).expect("bind loopback")
}

/// A free loopback port (bound and released; a test then starts a
/// receiver there later, to play a collector that comes up late).
pub fn free_addr() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

struct Svc(Arc<Received>);

#[tonic::async_trait]
impl TraceService for Svc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.into_inner();
        let len = request.encoded_len();
        match self.0.next_answer() {
            None => {
                self.0.take(request, len).await;
                Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
            }
            Some(Answer::Partial { rejected, message }) => {
                self.0.take(request, len).await;
                Ok(tonic::Response::new(partial_success(rejected, message)))
            }
            Some(Answer::Status { code, retry_info }) => {
                self.0.requests.fetch_add(1, Ordering::SeqCst);
                Err(grpc_status(code, retry_info))
            }
            Some(Answer::StatusMessage { code, message }) => {
                self.0.requests.fetch_add(1, Ordering::SeqCst);
                Err(tonic::Status::new(code, message))
            }
            Some(Answer::Http { status, .. }) => {
                self.0.requests.fetch_add(1, Ordering::SeqCst);
                Err(tonic::Status::internal(format!(
                    "told to answer http {status} over grpc"
                )))
            }
        }
    }
}

fn partial_success(rejected: i64, message: String) -> ExportTraceServiceResponse {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTracePartialSuccess;
    ExportTraceServiceResponse {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: rejected,
            error_message: message,
        }),
    }
}

fn grpc_status(code: tonic::Code, retry_info: Option<Duration>) -> tonic::Status {
    use tonic_types::{ErrorDetails, StatusExt};
    match retry_info {
        Some(delay) => {
            tonic::Status::with_error_details(code, "told to refuse", ErrorDetails::with_retry_info(Some(delay)))
        }
        None => tonic::Status::new(code, "told to refuse"),
    }
}

struct MetricsSvc(Arc<Received>);

#[tonic::async_trait]
impl MetricsService for MetricsSvc {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.take_metrics(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

struct LogsSvc(Arc<Received>);

#[tonic::async_trait]
impl LogsService for LogsSvc {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        self.0.take_logs_unless_held(request.into_inner()).await;
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

/// A receiver's TLS: its certificate and key, and the CA a client
/// certificate must chain to when it asks for one (all PEM).
pub struct ServerTls {
    pub cert: String,
    pub key: String,
    pub client_ca: Option<String>,
}

/// An OTLP/gRPC receiver on `addr` (or an ephemeral port), with TLS when
/// `tls` holds a PEM certificate and key.
pub fn grpc(addr: Option<SocketAddr>, tls: Option<(String, String)>) -> Receiver {
    grpc_tls(
        addr,
        tls.map(|(cert, key)| ServerTls {
            cert,
            key,
            client_ca: None,
        }),
    )
}

/// [`grpc`] with every TLS setting, a client certificate included.
pub fn grpc_tls(addr: Option<SocketAddr>, tls: Option<ServerTls>) -> Receiver {
    grpc_services(addr, tls, true, MAX_MESSAGE)
}

/// An OTLP/gRPC receiver whose services refuse a message over
/// `max_message` bytes (tonic's `max_decoding_message_size`, which answers
/// `OUT_OF_RANGE`, as a Collector's `max_recv_msg_size_mib` answers
/// `RESOURCE_EXHAUSTED`).
pub fn grpc_max(max_message: usize) -> Receiver {
    grpc_services(None, None, true, max_message)
}

/// What the receivers take by default: far more than anything a test
/// sends.
const MAX_MESSAGE: usize = 64 << 20;

/// A trace-only OTLP/gRPC backend (as Arize Phoenix and Jaeger are): no
/// `MetricsService` nor `LogsService`, so a metric or log export gets
/// `UNIMPLEMENTED` from tonic.
pub fn grpc_traces_only() -> Receiver {
    grpc_services(None, None, false, MAX_MESSAGE)
}

fn grpc_services(addr: Option<SocketAddr>, tls: Option<ServerTls>, with_metrics: bool, max_message: usize) -> Receiver {
    let rt = runtime();
    let listener = bind(&rt, addr);
    let addr = listener.local_addr().expect("local addr");
    let received = Arc::new(Received::default());
    let svc = TraceServiceServer::new(Svc(received.clone()))
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .max_decoding_message_size(max_message);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        let mut config =
            tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(tls.cert, tls.key));
        if let Some(ca) = tls.client_ca {
            config = config.client_ca_root(tonic::transport::Certificate::from_pem(ca));
        }
        builder = builder.tls_config(config).expect("server tls");
    }
    let metrics = with_metrics.then(|| {
        MetricsServiceServer::new(MetricsSvc(received.clone()))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
            .max_decoding_message_size(max_message)
    });
    let logs = with_metrics.then(|| {
        LogsServiceServer::new(LogsSvc(received.clone()))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
            .max_decoding_message_size(max_message)
    });
    let router = builder
        .add_service(svc)
        .add_optional_service(metrics)
        .add_optional_service(logs);
    rt.spawn(async move {
        // As a collector does: without TCP_NODELAY, Nagle and delayed ACKs
        // stall some responses by ~40 ms, which is the bench measuring TCP.
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let _ = router.serve_with_incoming(incoming).await;
    });
    Receiver {
        addr,
        received,
        runtime: Some(rt),
    }
}

/// An OTLP/HTTP (protobuf) receiver.
pub fn http(addr: Option<SocketAddr>) -> Receiver {
    serve_http_on(addr, None)
}

/// An OTLP/HTTP receiver that refuses, as `answer` says, a body of more
/// than `max_message` bytes (decoded, as the request's encoded size).
pub fn http_max(max_message: usize, answer: TooLarge) -> Receiver {
    let receiver = serve_http_on(None, None);
    *receiver.received.http_max.lock().expect("limit lock") = Some((max_message, answer));
    receiver
}

/// Accepts connections on `addr` (TLS first when `tls` is given) and
/// serves each with [`serve_http`].
fn serve_http_on(addr: Option<SocketAddr>, tls: Option<tokio_rustls::TlsAcceptor>) -> Receiver {
    let rt = runtime();
    let listener = bind(&rt, addr);
    let addr = listener.local_addr().expect("local addr");
    let received = Arc::new(Received::default());
    let rec = received.clone();
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (rec, tls) = (rec.clone(), tls.clone());
            tokio::spawn(async move {
                let _ = match tls {
                    // A client without the certificate asked for fails here.
                    Some(tls) => match tls.accept(stream).await {
                        Ok(stream) => serve_http(stream, rec).await,
                        Err(e) => Err(e),
                    },
                    None => serve_http(stream, rec).await,
                };
            });
        }
    });
    Receiver {
        addr,
        received,
        runtime: Some(rt),
    }
}

/// [`http`] over TLS: a collector's `https://` endpoint.
pub fn https(tls: ServerTls) -> Receiver {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = CertificateDer::pem_slice_iter(tls.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("server certificate");
    let key = PrivateKeyDer::from_pem_slice(tls.key.as_bytes()).expect("server key");
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("tls versions");
    let builder = match tls.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                roots.add(cert.expect("client ca")).expect("client ca");
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(chain, key).expect("server config");
    serve_http_on(None, Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))))
}

async fn serve_http<S>(stream: S, rec: Arc<Received>) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (read, mut write) = tokio::io::split(stream);
    let mut read = BufReader::new(read);
    loop {
        let mut request_line = String::new();
        if read.read_line(&mut request_line).await? == 0 {
            return Ok(());
        }
        let mut length = 0usize;
        let mut gzip = false;
        loop {
            let mut line = String::new();
            read.read_line(&mut line).await?;
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    "content-encoding" => gzip = v.trim().eq_ignore_ascii_case("gzip"),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        read.read_exact(&mut body).await?;
        let wire = body.len();
        let body = if gzip {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(body.as_slice()), &mut out)?;
            out
        } else {
            body
        };
        let max = *rec.http_max.lock().expect("limit lock");
        if let Some((max, answer)) = max.filter(|(max, _)| body.len() > *max) {
            rec.too_large.fetch_add(1, Ordering::SeqCst);
            let refusal = match answer {
                TooLarge::Collector400 => {
                    // google.rpc.Status { code: 3 (INVALID_ARGUMENT), message }.
                    let message = format!("http: request body too large (over {max} bytes)");
                    let mut status = vec![0x08, 0x03, 0x12, message.len() as u8];
                    status.extend_from_slice(message.as_bytes());
                    ("400 Bad Request", status)
                }
                TooLarge::Proxy413 => ("413 Request Entity Too Large", b"<html>too large</html>".to_vec()),
            };
            let head = format!(
                "HTTP/1.1 {}\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
                refusal.0,
                refusal.1.len()
            );
            write.write_all(head.as_bytes()).await?;
            write.write_all(&refusal.1).await?;
            write.flush().await?;
            continue;
        }
        if request_line.starts_with("POST ") && request_line.contains("/v1/metrics") {
            let answer = match ExportMetricsServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    rec.take_metrics(request);
                    ExportMetricsServiceResponse::default().encode_to_vec()
                }
                Err(_) => {
                    write
                        .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                        .await?;
                    continue;
                }
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
                answer.len()
            );
            write.write_all(head.as_bytes()).await?;
            write.write_all(&answer).await?;
            write.flush().await?;
            continue;
        }
        if request_line.starts_with("POST ") && request_line.contains("/v1/logs") {
            let Ok(request) = ExportLogsServiceRequest::decode(body.as_slice()) else {
                write
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await?;
                continue;
            };
            rec.take_logs(request);
            let answer = ExportLogsServiceResponse::default().encode_to_vec();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
                answer.len()
            );
            write.write_all(head.as_bytes()).await?;
            write.write_all(&answer).await?;
            write.flush().await?;
            continue;
        }
        let ok = request_line.starts_with("POST ") && request_line.contains("/v1/traces");
        match ExportTraceServiceRequest::decode(body.as_slice()) {
            Ok(request) if ok => {
                let answer = match rec.next_answer() {
                    Some(Answer::Http { status, retry_after }) => {
                        rec.requests.fetch_add(1, Ordering::SeqCst);
                        let retry_after = retry_after.map(|s| format!("retry-after: {s}\r\n")).unwrap_or_default();
                        let head = format!("HTTP/1.1 {status} Refused\r\n{retry_after}content-length: 0\r\n\r\n");
                        write.write_all(head.as_bytes()).await?;
                        write.flush().await?;
                        continue;
                    }
                    Some(Answer::Status { .. } | Answer::StatusMessage { .. }) => {
                        rec.requests.fetch_add(1, Ordering::SeqCst);
                        write
                            .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n")
                            .await?;
                        write.flush().await?;
                        continue;
                    }
                    Some(Answer::Partial { rejected, message }) => partial_success(rejected, message),
                    None => ExportTraceServiceResponse::default(),
                };
                rec.take(request, wire).await;
                let answer = answer.encode_to_vec();
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
                    answer.len()
                );
                write.write_all(head.as_bytes()).await?;
                write.write_all(&answer).await?;
            }
            _ => {
                write
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                    .await?;
            }
        }
        write.flush().await?;
    }
}

/// A self-signed certificate for `localhost` and its key (PEM).
pub fn self_signed() -> (String, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("certificate");
    (ck.cert.pem(), ck.signing_key.serialize_pem())
}

/// A CA, a server certificate for `localhost` and a client certificate,
/// both signed by the CA (all PEM), for the mutual-TLS tests.
pub struct Pki {
    pub ca: String,
    pub server: (String, String),
    pub client: (String, String),
}

pub fn pki() -> Pki {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("ca key")).expect("ca");
    let leaf = |name: &str, usage: ExtendedKeyUsagePurpose| {
        let mut params = CertificateParams::new(vec![name.to_string()]).expect("params");
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &ca).expect("sign");
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        server: leaf("localhost", ExtendedKeyUsagePurpose::ServerAuth),
        client: leaf("hermes-meter-client", ExtendedKeyUsagePurpose::ClientAuth),
        ca: ca.pem(),
    }
}

/// Trace and log export settings from `pairs` only (the process
/// environment is ignored); a later pair wins over an earlier one.
pub fn export_configs(
    pairs: &[(&str, &str)],
) -> (
    hermes_meter_runtime::export::ExportConfig,
    hermes_meter_runtime::export::ExportConfig,
) {
    use hermes_meter_runtime::export::{ExportConfig, ExportOverrides};
    let map: std::collections::HashMap<String, String> =
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let var = move |k: &str| map.get(k).cloned();
    (
        ExportConfig::resolve(ExportOverrides::default(), &var),
        ExportConfig::resolve_logs(ExportOverrides::default(), &var),
    )
}
