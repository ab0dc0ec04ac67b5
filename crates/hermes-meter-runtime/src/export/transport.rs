//! Sending one OTLP request (traces, metrics, logs): gRPC (tonic), HTTP/protobuf (hyper), or
//! the console.
//!
//! Owns: connections, TLS, compression, headers, timeouts, and turning each
//! failure into a retry verdict (through [`super::retry`]). Must not touch:
//! the store.
//!
//! Endpoints: `http://` is plaintext, `https://` is TLS (verified against
//! the CA file of `OTEL_EXPORTER_OTLP_CERTIFICATE` when set, else the system
//! roots). A gRPC endpoint without a scheme is TLS unless
//! `OTEL_EXPORTER_OTLP_INSECURE=true`. A collector that asks for a client
//! certificate (mutual TLS) gets the one of
//! `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` / `_CLIENT_KEY`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{ExportMetricsServiceRequest, ExportMetricsServiceResponse};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use prost::Message;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::retry::{self, Cause, Verdict};
use crate::config::export::{Compression, ExportConfig, Headers, Protocol, TracesExporter};
use hermes_meter_store::error::{Error, Result};

/// The most of a collector's answer read over OTLP/HTTP: an
/// `Export*ServiceResponse` (a partial success) or an error status is a
/// few hundred bytes.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// The collector accepted a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Accepted {
    /// Spans the collector said it rejected (partial success). They are not
    /// retried: the collector decided.
    pub rejected_spans: i64,
    /// Metric data points the collector said it rejected (partial success).
    pub rejected_data_points: i64,
    /// Log records the collector said it rejected (partial success).
    pub rejected_log_records: i64,
}

/// A failed send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendError {
    pub verdict: Verdict,
    /// Whether the collector answered, or the connection failed and how.
    pub cause: Cause,
    /// What failed, without header values.
    pub message: String,
}

impl SendError {
    /// A send the collector did not answer within `timeout`. The message
    /// is the same for both protocols and for an attempt a process ended
    /// in the middle of (see [`hermes_meter_store::Outbox::export_attempt`]).
    pub fn no_answer(what: &str, timeout: Duration) -> Self {
        SendError {
            verdict: Verdict::Retry { after: None },
            cause: Cause::NoAnswer,
            message: format!("{what}: no answer within {} ms", timeout.as_millis()),
        }
    }
}

/// Where requests go.
pub(crate) enum Transport {
    Grpc(Box<GrpcTransport>),
    Http(Box<HttpTransport>),
    Console,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Grpc(_) => "Transport::Grpc",
            Transport::Http(_) => "Transport::Http",
            Transport::Console => "Transport::Console",
        })
    }
}

impl Transport {
    /// Builds the transport `config` asks for. Connects lazily: a collector
    /// that is down is not an error here. Must be called inside a tokio
    /// runtime context.
    pub(crate) fn new(config: &ExportConfig) -> Result<Self> {
        if config.exporter.value == TracesExporter::Console {
            return Ok(Transport::Console);
        }
        let read = |path: &Option<std::path::PathBuf>| -> Result<Option<Vec<u8>>> {
            match path {
                Some(path) => Ok(Some(std::fs::read(path).map_err(|e| Error::io(path, e))?)),
                None => Ok(None),
            }
        };
        let tls = Tls {
            ca: read(&config.certificate.value)?,
            client: match (read(&config.client_certificate.value)?, read(&config.client_key.value)?) {
                (Some(cert), Some(key)) => Some((cert, key)),
                (None, None) => None,
                _ => {
                    return Err(Error::Other(format!(
                        "otlp client certificate: {} and {} go together (mutual TLS needs both)",
                        crate::config::export::env::CLIENT_CERTIFICATE,
                        crate::config::export::env::CLIENT_KEY
                    )))
                }
            },
        };
        Ok(match config.protocol.value {
            Protocol::Grpc => Transport::Grpc(Box::new(GrpcTransport::new(config, tls)?)),
            Protocol::HttpProtobuf => Transport::Http(Box::new(HttpTransport::new(config, tls)?)),
        })
    }

    /// Sends one request.
    pub(crate) async fn send(&mut self, request: ExportTraceServiceRequest) -> Result<Accepted, SendError> {
        match self {
            Transport::Grpc(t) => t.send(request).await,
            Transport::Http(t) => t.send(request).await,
            Transport::Console => {
                super::console::print(&request);
                Ok(Accepted::default())
            }
        }
    }

    /// Sends one logs request (to the logs endpoint of the config the
    /// transport was built from).
    pub(crate) async fn send_logs(&mut self, request: ExportLogsServiceRequest) -> Result<Accepted, SendError> {
        match self {
            Transport::Grpc(t) => t.send_logs(request).await,
            Transport::Http(t) => t.send_logs(request).await,
            Transport::Console => {
                super::console::print_logs(&request);
                Ok(Accepted::default())
            }
        }
    }

    /// Sends one metrics request (to the metrics endpoint of the config the
    /// transport was built from; see [`crate::config::export::Signal`]).
    pub(crate) async fn send_metrics(&mut self, request: ExportMetricsServiceRequest) -> Result<Accepted, SendError> {
        match self {
            Transport::Grpc(t) => t.send_metrics(request).await,
            Transport::Http(t) => t.send_metrics(request).await,
            Transport::Console => {
                super::console::print_metrics(&request);
                Ok(Accepted::default())
            }
        }
    }
}

/// What a TLS connection trusts and presents, as PEM: the CA of the
/// collector (else the system roots), and a client certificate with its key
/// for a collector that asks for one.
struct Tls {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

/// OTLP/gRPC through opentelemetry-proto's tonic client.
pub(crate) struct GrpcTransport {
    client: TraceServiceClient<Channel>,
    metrics: MetricsServiceClient<Channel>,
    logs: LogsServiceClient<Channel>,
    headers: Vec<(
        tonic::metadata::MetadataKey<tonic::metadata::Ascii>,
        tonic::metadata::AsciiMetadataValue,
    )>,
    /// The channel's request timeout, named in a no-answer failure.
    timeout: Duration,
}

impl GrpcTransport {
    fn new(config: &ExportConfig, tls: Tls) -> Result<Self> {
        let raw = config.endpoint.value.trim();
        let url = if raw.contains("://") {
            raw.to_string()
        } else if config.insecure.value {
            format!("http://{raw}")
        } else {
            format!("https://{raw}")
        };
        let bad = |e: tonic::transport::Error| Error::Other(format!("otlp grpc endpoint {url}: {e}"));
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(bad)?
            .timeout(config.timeout.value)
            .connect_timeout(config.timeout.value);
        if url.starts_with("https://") {
            let mut tls_config = match tls.ca {
                Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
                None => ClientTlsConfig::new().with_native_roots(),
            };
            if let Some((cert, key)) = tls.client {
                tls_config = tls_config.identity(Identity::from_pem(cert, key));
            }
            endpoint = endpoint.tls_config(tls_config).map_err(bad)?;
        }
        let channel = endpoint.connect_lazy();
        let mut client = TraceServiceClient::new(channel.clone());
        let mut metrics = MetricsServiceClient::new(channel.clone());
        let mut logs = LogsServiceClient::new(channel);
        let gzip = tonic::codec::CompressionEncoding::Gzip;
        if config.compression.value == Compression::Gzip {
            client = client.send_compressed(gzip);
            metrics = metrics.send_compressed(gzip);
            logs = logs.send_compressed(gzip);
        }
        client = client
            .accept_compressed(gzip)
            .max_decoding_message_size(ANSWER_DECODE_LIMIT);
        metrics = metrics
            .accept_compressed(gzip)
            .max_decoding_message_size(ANSWER_DECODE_LIMIT);
        logs = logs
            .accept_compressed(gzip)
            .max_decoding_message_size(ANSWER_DECODE_LIMIT);
        let headers = grpc_headers(&config.headers.value);
        Ok(GrpcTransport {
            client,
            metrics,
            logs,
            headers,
            timeout: config.timeout.value,
        })
    }

    async fn send_metrics(&mut self, request: ExportMetricsServiceRequest) -> Result<Accepted, SendError> {
        let response = self.metrics.export(self.request(request)).await;
        let response = match response {
            Ok(r) => r,
            Err(status) if answer_unreadable(&status) => return Ok(Accepted::default()),
            Err(status) => return Err(grpc_error("otlp grpc metrics", status, self.timeout)),
        };
        Ok(Accepted {
            rejected_data_points: response
                .into_inner()
                .partial_success
                .map(|p| p.rejected_data_points)
                .unwrap_or(0),
            ..Accepted::default()
        })
    }

    async fn send_logs(&mut self, request: ExportLogsServiceRequest) -> Result<Accepted, SendError> {
        let response = self.logs.export(self.request(request)).await;
        let response = match response {
            Ok(r) => r,
            Err(status) if answer_unreadable(&status) => return Ok(Accepted::default()),
            Err(status) => return Err(grpc_error("otlp grpc logs", status, self.timeout)),
        };
        Ok(Accepted {
            rejected_log_records: response
                .into_inner()
                .partial_success
                .map(|p| p.rejected_log_records)
                .unwrap_or(0),
            ..Accepted::default()
        })
    }

    async fn send(&mut self, request: ExportTraceServiceRequest) -> Result<Accepted, SendError> {
        let response = self.client.export(self.request(request)).await;
        let response = match response {
            Ok(r) => r,
            Err(status) if answer_unreadable(&status) => return Ok(Accepted::default()),
            Err(status) => return Err(grpc_error(Protocol::Grpc.otlp_name(), status, self.timeout)),
        };
        Ok(Accepted {
            rejected_spans: response
                .into_inner()
                .partial_success
                .map(|p| p.rejected_spans)
                .unwrap_or(0),
            ..Accepted::default()
        })
    }

    /// A request carrying the configured headers.
    fn request<T>(&self, body: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(body);
        for (k, v) in &self.headers {
            request.metadata_mut().insert(k.clone(), v.clone());
        }
        request
    }
}

/// Whether `status` is this client failing to read the collector's answer
/// (over [`ANSWER_DECODE_LIMIT`]): tonic's "decoded message length too
/// large ... the limit is: N bytes" with this client's own N. (A tonic
/// collector refusing a request over its limit says the same words with
/// its limit: that is a refusal as too large.) A gRPC server sends an
/// answer message only when the call succeeded (an error is a status
/// alone), so the request was accepted: counting it refused would send it
/// again and again to a collector that has it. A partial success it may
/// have carried is unknown.
fn answer_unreadable(status: &tonic::Status) -> bool {
    status.code() == tonic::Code::OutOfRange
        && status.message().contains("decoded message length too large")
        && status
            .message()
            .contains(&format!("the limit is: {ANSWER_DECODE_LIMIT} bytes"))
}

/// The largest answer read over gRPC: an answer is a partial success, a
/// few hundred bytes; past this it is not read (memory stays bounded). An
/// odd number, so a refusal that names it is recognisably this client's.
pub const ANSWER_DECODE_LIMIT: usize = (4 << 20) + 1;

/// A failed gRPC export, classified for retry: an answer of the collector
/// by its code, a failure of the connection as transient.
fn grpc_error(what: &str, status: tonic::Status, timeout: Duration) -> SendError {
    let made_by_client = std::error::Error::source(&status).is_some();
    let cause = retry::grpc_cause(status.code(), status.message(), made_by_client);
    if cause == Cause::NoAnswer {
        return SendError::no_answer(what, timeout);
    }
    SendError {
        verdict: retry::classify_grpc_failure(status.code(), status.message(), retry::grpc_retry_info(&status), cause),
        cause,
        message: format!("{what}: {:?}: {}", status.code(), status.message()),
    }
}

fn grpc_headers(
    headers: &Headers,
) -> Vec<(
    tonic::metadata::MetadataKey<tonic::metadata::Ascii>,
    tonic::metadata::AsciiMetadataValue,
)> {
    headers
        .0
        .iter()
        .filter_map(|(k, v)| {
            let key = tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes()).ok()?;
            let value = tonic::metadata::AsciiMetadataValue::try_from(v.as_str()).ok()?;
            Some((key, value))
        })
        .collect()
}

/// OTLP/HTTP with protobuf bodies over one kept-alive HTTP/1.1 connection.
pub(crate) struct HttpTransport {
    host: String,
    port: u16,
    path: String,
    authority: String,
    tls: Option<tokio_rustls::TlsConnector>,
    headers: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
    gzip: bool,
    timeout: Duration,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl HttpTransport {
    fn new(config: &ExportConfig, tls_files: Tls) -> Result<Self> {
        let url = config.endpoint.value.trim();
        let bad = |what: &str| Error::Other(format!("otlp http endpoint {url}: {what}"));
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            _ => return Err(bad("scheme is not http or https")),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                (h.to_string(), p.parse::<u16>().map_err(|_| bad("bad port"))?)
            }
            _ => (authority.to_string(), if tls { 443 } else { 80 }),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let tls = if tls { Some(tls_connector(tls_files)?) } else { None };
        let headers = config
            .headers
            .value
            .0
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    hyper::header::HeaderName::from_bytes(k.as_bytes()).ok()?,
                    hyper::header::HeaderValue::from_str(v).ok()?,
                ))
            })
            .collect();
        Ok(HttpTransport {
            host,
            port,
            path: path.to_string(),
            authority: authority.to_string(),
            tls,
            headers,
            gzip: config.compression.value == Compression::Gzip,
            timeout: config.timeout.value,
            sender: None,
        })
    }

    async fn connect(&self) -> std::io::Result<SendRequest<Full<Bytes>>> {
        let tcp = tokio::net::TcpStream::connect((self.host.as_str(), self.port)).await?;
        tcp.set_nodelay(true)?;
        let other = |e: hyper::Error| std::io::Error::other(e.to_string());
        match &self.tls {
            Some(connector) => {
                let name = rustls_pki_types::ServerName::try_from(self.host.clone())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
                let stream = connector.connect(name, tcp).await?;
                let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(other)?;
                tokio::spawn(conn);
                Ok(sender)
            }
            None => {
                let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                    .await
                    .map_err(other)?;
                tokio::spawn(conn);
                Ok(sender)
            }
        }
    }

    async fn send(&mut self, request: ExportTraceServiceRequest) -> Result<Accepted, SendError> {
        let body = self.post(request.encode_to_vec()).await?;
        let rejected_spans = ExportTraceServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map(|p| p.rejected_spans)
            .unwrap_or(0);
        Ok(Accepted {
            rejected_spans,
            ..Accepted::default()
        })
    }

    async fn send_metrics(&mut self, request: ExportMetricsServiceRequest) -> Result<Accepted, SendError> {
        let body = self.post(request.encode_to_vec()).await?;
        let rejected_data_points = ExportMetricsServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map(|p| p.rejected_data_points)
            .unwrap_or(0);
        Ok(Accepted {
            rejected_data_points,
            ..Accepted::default()
        })
    }

    async fn send_logs(&mut self, request: ExportLogsServiceRequest) -> Result<Accepted, SendError> {
        let body = self.post(request.encode_to_vec()).await?;
        let rejected_log_records = ExportLogsServiceResponse::decode(body)
            .ok()
            .and_then(|r| r.partial_success)
            .map(|p| p.rejected_log_records)
            .unwrap_or(0);
        Ok(Accepted {
            rejected_log_records,
            ..Accepted::default()
        })
    }

    /// POSTs one protobuf body; the answer's body on a 2xx status (empty
    /// when the answer was over [`MAX_ANSWER_BYTES`]: accepted, with no
    /// partial success readable).
    async fn post(&mut self, body: Vec<u8>) -> Result<Bytes, SendError> {
        let body = if self.gzip { gzip(&body) } else { body };
        match tokio::time::timeout(self.timeout, self.send_body(body)).await {
            Ok(result) => result,
            Err(_) => {
                self.sender = None;
                Err(SendError::no_answer(Protocol::HttpProtobuf.otlp_name(), self.timeout))
            }
        }
    }

    async fn send_body(&mut self, body: Vec<u8>) -> Result<Bytes, SendError> {
        let transient = |cause: Cause, message: String| SendError {
            verdict: Verdict::Retry { after: None },
            cause,
            message,
        };
        let reusable = match self.sender.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        if !reusable {
            self.sender = Some(self.connect().await.map_err(|e| {
                transient(
                    Cause::Unreachable,
                    format!("otlp http: connect {}: {e}", self.authority),
                )
            })?);
        }
        let mut builder = hyper::Request::post(self.path.as_str())
            .header(hyper::header::HOST, self.authority.as_str())
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf");
        if self.gzip {
            builder = builder.header(hyper::header::CONTENT_ENCODING, "gzip");
        }
        for (k, v) in &self.headers {
            builder = builder.header(k, v);
        }
        let request = builder
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| transient(Cause::Unreachable, format!("otlp http: request: {e}")))?;
        let Some(sender) = self.sender.as_mut() else {
            return Err(transient(Cause::Unreachable, "otlp http: no connection".into()));
        };
        let response = match sender.send_request(request).await {
            Ok(r) => r,
            Err(e) => {
                self.sender = None;
                return Err(transient(Cause::Closed, format!("otlp http: send: {e}")));
            }
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(retry::parse_retry_after);
        // The answer is read up to MAX_ANSWER_BYTES: a collector (or a
        // proxy before it) that answers endlessly must not grow this
        // process. Past the bound the rest is left unread and the
        // connection dropped; the status alone decides.
        let body = match http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
                self.sender = None;
                Bytes::new()
            }
            Err(e) => {
                self.sender = None;
                return Err(transient(Cause::Closed, format!("otlp http: reading the answer: {e}")));
            }
        };
        if (200..300).contains(&status) {
            return Ok(body);
        }
        Err(SendError {
            verdict: retry::classify_http(status, retry_after, &body),
            cause: Cause::Answered,
            message: format!("otlp http: status {status}"),
        })
    }
}

fn tls_connector(tls: Tls) -> Result<tokio_rustls::TlsConnector> {
    let client = tls.client.as_ref().map(|(cert, key)| (cert.as_slice(), key.as_slice()));
    let mut config = client_tls_config(tls.ca.as_deref(), client, "otlp")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// A rustls client configuration: trust `ca` (PEM certificates) or, without
/// it, the system's roots; present `client` (PEM chain, PEM key) if given.
/// `what` names the caller in errors. For OTLP and the fleet database.
pub(crate) fn client_tls_config(
    ca: Option<&[u8]>,
    client: Option<(&[u8], &[u8])>,
    what: &str,
) -> Result<rustls::ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let pem_error = |part: &str, e: &dyn std::fmt::Display| Error::Other(format!("{what} {part}: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| pem_error("certificate", &e))?;
                roots.add(cert).map_err(|e| pem_error("certificate", &e))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Other(format!("tls: {e}")))?
        .with_root_certificates(roots);
    Ok(match client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| pem_error("client certificate", &e))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| pem_error("client key", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| pem_error("client certificate", &e))?
        }
        None => builder.with_no_client_auth(),
    })
}

/// Gzips a body (level 6, the usual balance).
pub fn gzip(body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(body.len() / 4), flate2::Compression::new(6));
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(body);
    enc.finish().unwrap_or_default()
}
