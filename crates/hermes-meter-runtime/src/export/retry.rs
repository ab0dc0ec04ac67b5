//! Which export failures are retried, and how long to wait. Pure.
//!
//! Owns: the OTLP specification's retry rules for gRPC status codes and
//! HTTP statuses, reading the server's delay hints (gRPC `RetryInfo`, HTTP
//! `Retry-After` in seconds), and the bounded exponential backoff with full
//! jitter. Must not touch: I/O.
//!
//! A *permanent* failure (say 400 or `INVALID_ARGUMENT`, or 401 from a
//! misconfigured token) would make an SDK drop the batch. hermes-meter does
//! not drop: losing spans is worse than retrying slowly, and the retention
//! cap bounds the disk. The exporter retries permanent failures at the
//! maximum backoff and shows the last error in `status`. So does it a
//! `RESOURCE_EXHAUSTED` without `RetryInfo` (not retryable either, for the
//! specification), which it words as the collector's shortage
//! ([`Verdict::Exhausted`]).
//!
//! A request larger than the collector takes ([`Verdict::TooLarge`]) is
//! told apart from the rest: it is not retried as it is, but split
//! (`split.rs`), and one span or record too large alone is counted
//! rejected.

use std::time::Duration;

/// What to do after a failed export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Transient: retry with backoff, or after the server's hint.
    Retry { after: Option<Duration> },
    /// The server will not accept this as it is; retry slowly.
    Permanent,
    /// gRPC `RESOURCE_EXHAUSTED` without `RetryInfo`: the collector is out
    /// of something (memory: the Collector's `memory_limiter` extension
    /// refuses every request so; a quota) and did not say when it
    /// recovers. The OTLP
    /// specification calls that not retryable; hermes-meter keeps the batch
    /// and retries at the slowest pace, as for [`Verdict::Permanent`], but
    /// tells the user it is the collector's resource, not the request's
    /// headers or endpoint.
    Exhausted,
    /// The server does not take this signal at all (gRPC `UNIMPLEMENTED`,
    /// HTTP 404, 405 or 501): a trace-only backend sent metrics, say.
    /// Retrying soon cannot help; the user should turn the signal off.
    Unsupported,
    /// The request is larger than the collector takes: grpc-go's
    /// `RESOURCE_EXHAUSTED` "received message larger than max" (the
    /// Collector's `max_recv_msg_size_mib`, 4 MiB by default), tonic's
    /// `OUT_OF_RANGE` ("decoded message length too large"), HTTP 413, or
    /// the Collector's HTTP 400 "request body too large"
    /// (`max_request_body_size`). The same request will never be taken:
    /// the exporter sends it again in smaller parts, and counts a span or
    /// record too large alone as rejected.
    TooLarge,
}

/// How long a signal the backend does not take waits before it is tried
/// again: it will not start taking it by itself, but a collector may be
/// reconfigured or replaced, so the door stays open, once per 15 minutes
/// rather than every 30 s (which filled logs and the backend's).
pub(crate) const UNSUPPORTED_RETRY: Duration = Duration::from_secs(15 * 60);

/// Where a failed send's error came from, which decides what its message
/// tells the user: a collector's answer is about the request (headers,
/// payload), the others are about the connection and say nothing of the
/// request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The collector answered with an error status.
    Answered,
    /// No connection was made (nothing listening, DNS, TLS handshake).
    Unreachable,
    /// The connection was reset or closed before an answer came.
    Closed,
    /// The collector took the request and did not answer within the
    /// export timeout (a hung collector or proxy).
    NoAnswer,
}

/// The message tonic gives the status of a request that hit the channel's
/// timeout (`tonic::TimeoutExpired`'s text; the status keeps no source).
pub(crate) const GRPC_TIMEOUT_MESSAGE: &str = "Timeout expired";

/// What tonic begins the message of a status it made from an HTTP/2
/// error with (a reset stream, a GOAWAY), keeping no source.
pub(crate) const GRPC_H2_ERROR_PREFIX: &str = "h2 protocol error";

/// Where a gRPC status came from. tonic makes a status of its own, with
/// the client error as its source, when the request got no answer; a
/// status the collector sent has no source. A timeout and an HTTP/2 error
/// are told by their message, as tonic keeps no source for them.
pub(crate) fn grpc_cause(code: tonic::Code, message: &str, made_by_client: bool) -> Cause {
    use tonic::Code::*;
    let made_by_client = made_by_client || message.starts_with(GRPC_H2_ERROR_PREFIX);
    match code {
        Cancelled if message == GRPC_TIMEOUT_MESSAGE => Cause::NoAnswer,
        Unavailable if made_by_client && is_connect_failure(message) => Cause::Unreachable,
        Unavailable | Unknown | Internal | Cancelled if made_by_client => Cause::Closed,
        _ => Cause::Answered,
    }
}

/// Whether a client-side message says no connection was made at all
/// (tonic's `ConnectError` and hyper's connector say so).
fn is_connect_failure(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("connect") && !m.contains("reset") && !m.contains("closed")
}

/// What grpc-go (the Collector's gRPC server) says of a message over its
/// receiver's `max_recv_msg_size_mib`, as `RESOURCE_EXHAUSTED`; the
/// Collector's `memory_limiter` answers the same code without it.
pub(crate) const GRPC_TOO_LARGE_MESSAGE: &str = "larger than max";

/// What the Collector's OTLP/HTTP receiver says, in the body of its 400,
/// of a body over `max_request_body_size` (Go's `http.MaxBytesReader`).
pub(crate) const HTTP_TOO_LARGE_BODY: &[u8] = b"request body too large";

/// The verdict of a gRPC failure: a failure of the connection is transient
/// whatever code tonic gave it (a reset arrives as `UNKNOWN`, which would
/// read as the collector refusing the request); an answer follows the
/// OTLP table of [`classify_grpc`].
pub(crate) fn classify_grpc_failure(
    code: tonic::Code,
    message: &str,
    retry_info: Option<Duration>,
    cause: Cause,
) -> Verdict {
    match cause {
        Cause::Answered => classify_grpc(code, message, retry_info),
        Cause::Unreachable | Cause::Closed | Cause::NoAnswer => Verdict::Retry { after: None },
    }
}

/// The gRPC codes the OTLP specification calls retryable.
/// `RESOURCE_EXHAUSTED` only is when the server sent `RetryInfo`; without
/// it, it is [`Verdict::Exhausted`], or [`Verdict::TooLarge`] when its
/// message says the request was larger than the server's maximum.
/// `OUT_OF_RANGE` (retryable for the specification) is what tonic and
/// grpc-java answer a message over their maximum: retrying the same
/// request would be refused forever, so it is [`Verdict::TooLarge`] too.
pub(crate) fn classify_grpc(code: tonic::Code, message: &str, retry_info: Option<Duration>) -> Verdict {
    use tonic::Code::*;
    match code {
        OutOfRange => Verdict::TooLarge,
        ResourceExhausted if message.contains(GRPC_TOO_LARGE_MESSAGE) => Verdict::TooLarge,
        Cancelled | DeadlineExceeded | Aborted | Unavailable | DataLoss => Verdict::Retry { after: retry_info },
        ResourceExhausted if retry_info.is_some() => Verdict::Retry { after: retry_info },
        ResourceExhausted => Verdict::Exhausted,
        Unimplemented => Verdict::Unsupported,
        _ => Verdict::Permanent,
    }
}

/// The HTTP statuses the OTLP specification calls retryable: 429, 502, 503,
/// 504 (with `Retry-After` honoured). 404, 405 and 501 say the server has
/// no such signal (a trace-only backend's answer to `/v1/metrics`).
/// 413, and a 400 whose `body` says the request body is too large (the
/// Collector's answer), are [`Verdict::TooLarge`]. Anything else that is
/// not 2xx is permanent.
pub(crate) fn classify_http(status: u16, retry_after: Option<Duration>, body: &[u8]) -> Verdict {
    match status {
        429 | 502 | 503 | 504 => Verdict::Retry { after: retry_after },
        404 | 405 | 501 => Verdict::Unsupported,
        413 => Verdict::TooLarge,
        400 if contains(body, HTTP_TOO_LARGE_BODY) => Verdict::TooLarge,
        _ => Verdict::Permanent,
    }
}

/// Whether `needle` occurs in `haystack` (the Collector's answer is a
/// protobuf `Status` or plain text: its message is plain bytes either way).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle))
}

/// `Retry-After` as delay-seconds (the HTTP-date form is ignored: the
/// backoff applies instead).
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// The `google.rpc.RetryInfo` delay in a gRPC status's details, if any.
pub(crate) fn grpc_retry_info(status: &tonic::Status) -> Option<Duration> {
    use tonic_types::StatusExt;
    status.get_details_retry_info()?.retry_delay
}

/// The backoff's cap. 30 s keeps an outage's tail short once the collector
/// is back, while a dead collector costs one attempt per 30 s. Also the
/// pace of a [`Verdict::Permanent`] or [`Verdict::Exhausted`] failure, and
/// of a [`Verdict::TooLarge`] one that reaches the backoff (a metric push,
/// which is not split).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Bounded exponential backoff with full jitter.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// The first delay's upper bound. 500 ms: a restarting collector is
    /// usually back within a second or two.
    pub initial: Duration,
    /// The cap ([`MAX_BACKOFF`]).
    pub max: Duration,
    failures: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(500),
            max: MAX_BACKOFF,
            failures: 0,
        }
    }
}

impl Backoff {
    /// The delay before the next attempt after one more failure: uniform in
    /// `[0, min(max, initial * 2^failures)]`, or the server's hint (capped
    /// at `max`), or `max` for a permanent or exhausted failure.
    pub fn next(&mut self, verdict: Verdict) -> Duration {
        self.failures = self.failures.saturating_add(1);
        match verdict {
            Verdict::Permanent | Verdict::Exhausted | Verdict::TooLarge => self.max,
            Verdict::Unsupported => UNSUPPORTED_RETRY,
            Verdict::Retry { after: Some(hint) } => hint.min(self.max),
            Verdict::Retry { after: None } => {
                let exp = self.failures.saturating_sub(1).min(20);
                let ceiling = self.initial.saturating_mul(1 << exp).min(self.max);
                ceiling.mul_f64(fastrand::f64())
            }
        }
    }

    /// Resets after a success.
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn grpc_codes_follow_the_otlp_table() {
        let hint = Some(Duration::from_secs(3));
        for (code, info, want) in [
            (Code::Cancelled, None, Verdict::Retry { after: None }),
            (Code::DeadlineExceeded, None, Verdict::Retry { after: None }),
            (Code::Aborted, None, Verdict::Retry { after: None }),
            (Code::OutOfRange, None, Verdict::TooLarge),
            (Code::Unavailable, hint, Verdict::Retry { after: hint }),
            (Code::DataLoss, None, Verdict::Retry { after: None }),
            (Code::ResourceExhausted, None, Verdict::Exhausted),
            (Code::ResourceExhausted, hint, Verdict::Retry { after: hint }),
            (Code::InvalidArgument, None, Verdict::Permanent),
            (Code::Unauthenticated, None, Verdict::Permanent),
            (Code::PermissionDenied, None, Verdict::Permanent),
            (Code::Unimplemented, None, Verdict::Unsupported),
            (Code::Internal, None, Verdict::Permanent),
            (Code::NotFound, None, Verdict::Permanent),
        ] {
            assert_eq!(classify_grpc(code, "told to refuse", info), want, "{code:?}");
        }
    }

    /// The refusals the OpenTelemetry Collector (core v0.165.0) sends, as
    /// its OTLP receiver puts them on the wire: a message with no status
    /// details (no `RetryInfo`) over gRPC, no `Retry-After` over HTTP.
    /// (`tests/e2e/test_pipeline.py` has the Collector send them.)
    #[test]
    fn the_real_collectors_refusals_are_classified_by_their_code() {
        let retry = Verdict::Retry { after: None };
        for (code, message, want) in [
            // The memory_limiter extension as the receiver's middleware.
            (Code::ResourceExhausted, "RESOURCE_EXHAUSTED", Verdict::Exhausted),
            // grpc-go, past the receiver's max_recv_msg_size_mib.
            (
                Code::ResourceExhausted,
                "grpc: received message larger than max (5242880 vs. 4194304)",
                Verdict::TooLarge,
            ),
            // The same past the receiver's decompression limit.
            (
                Code::ResourceExhausted,
                "grpc: received message after decompression larger than max (5242880 vs. 4194304)",
                Verdict::TooLarge,
            ),
            // tonic (and grpc-java) past max_decoding_message_size.
            (
                Code::OutOfRange,
                "Error, decoded message length too large: found 5242880 bytes, the limit is: 4194304 bytes",
                Verdict::TooLarge,
            ),
            // exporterhelper's full sending queue and the memory_limiter
            // processor: plain errors, which the receiver answers as
            // UNAVAILABLE.
            (Code::Unavailable, "sending queue is full", retry),
            (Code::Unavailable, "data refused due to high memory usage", retry),
        ] {
            let cause = grpc_cause(code, message, false);
            assert_eq!(cause, Cause::Answered, "{message}");
            assert_eq!(classify_grpc_failure(code, message, None, cause), want, "{message}");
        }
        // The memory_limiter's refusal with RetryInfo is an ordinary retry,
        // and a request too large stays too large whatever the hint.
        let hint = Some(Duration::from_secs(1));
        assert_eq!(
            classify_grpc(Code::ResourceExhausted, "RESOURCE_EXHAUSTED", hint),
            Verdict::Retry { after: hint }
        );
        assert_eq!(
            classify_grpc(Code::ResourceExhausted, "grpc: received message larger than max", hint),
            Verdict::TooLarge
        );
        // Over HTTP: the memory_limiter extension's 429, a plain-text body
        // and no Retry-After; a body over max_request_body_size is a 400
        // that says so (a protobuf Status, or text), and a proxy's 413.
        assert_eq!(
            classify_http(429, None, b"data refused due to high memory usage"),
            retry
        );
        assert_eq!(
            classify_http(400, None, b"\x08\x03\x12\x1chttp: request body too large"),
            Verdict::TooLarge
        );
        assert_eq!(
            classify_http(400, None, b"HTTP: Request Body Too Large"),
            Verdict::TooLarge
        );
        assert_eq!(
            classify_http(400, None, b"proto: cannot parse invalid wire-format data"),
            Verdict::Permanent
        );
        assert_eq!(classify_http(400, None, b""), Verdict::Permanent);
        assert_eq!(
            classify_http(413, None, b"<html>413 Request Entity Too Large</html>"),
            Verdict::TooLarge
        );
        assert_eq!(classify_http(413, None, b""), Verdict::TooLarge);
        assert_eq!(classify_http(500, None, b"request body too large"), Verdict::Permanent);
    }

    #[test]
    fn a_grpc_failure_of_the_connection_is_transient_and_never_read_as_a_refusal() {
        for (code, message, by_client, cause, verdict) in [
            (
                Code::Unknown,
                "h2 protocol error: connection reset",
                true,
                Cause::Closed,
                Verdict::Retry { after: None },
            ),
            (
                Code::Unknown,
                "transport error",
                true,
                Cause::Closed,
                Verdict::Retry { after: None },
            ),
            (
                Code::Internal,
                "h2 protocol error: stream closed",
                true,
                Cause::Closed,
                Verdict::Retry { after: None },
            ),
            (
                Code::Unknown,
                "h2 protocol error: connection reset",
                false,
                Cause::Closed,
                Verdict::Retry { after: None },
            ),
            (
                Code::Unavailable,
                "error trying to connect: tcp connect error",
                true,
                Cause::Unreachable,
                Verdict::Retry { after: None },
            ),
            (
                Code::Unavailable,
                "connection reset by peer",
                true,
                Cause::Closed,
                Verdict::Retry { after: None },
            ),
            (
                Code::Cancelled,
                GRPC_TIMEOUT_MESSAGE,
                false,
                Cause::NoAnswer,
                Verdict::Retry { after: None },
            ),
            (Code::Unknown, "bad things", false, Cause::Answered, Verdict::Permanent),
            (
                Code::Unauthenticated,
                "no token",
                false,
                Cause::Answered,
                Verdict::Permanent,
            ),
            (
                Code::Unavailable,
                "overloaded",
                false,
                Cause::Answered,
                Verdict::Retry { after: None },
            ),
        ] {
            assert_eq!(grpc_cause(code, message, by_client), cause, "{code:?} {message}");
            assert_eq!(
                classify_grpc_failure(code, message, None, cause),
                verdict,
                "{code:?} {message}"
            );
        }
    }

    #[test]
    fn http_statuses_follow_the_otlp_table() {
        let hint = Some(Duration::from_secs(7));
        for (status, want) in [
            (429, Verdict::Retry { after: hint }),
            (502, Verdict::Retry { after: hint }),
            (503, Verdict::Retry { after: hint }),
            (504, Verdict::Retry { after: hint }),
            (400, Verdict::Permanent),
            (401, Verdict::Permanent),
            (404, Verdict::Unsupported),
            (405, Verdict::Unsupported),
            (501, Verdict::Unsupported),
            (413, Verdict::TooLarge),
            (500, Verdict::Permanent),
        ] {
            assert_eq!(classify_http(status, hint, b""), want, "{status}");
        }
    }

    #[test]
    fn retry_after_takes_seconds_only() {
        assert_eq!(parse_retry_after(" 12 "), Some(Duration::from_secs(12)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn retry_info_is_read_from_status_details() {
        use tonic_types::{ErrorDetails, StatusExt};
        let details = ErrorDetails::with_retry_info(Some(Duration::new(2, 500)));
        let status = tonic::Status::with_error_details(tonic::Code::ResourceExhausted, "slow down", details);
        assert_eq!(grpc_retry_info(&status), Some(Duration::new(2, 500)));
        assert_eq!(grpc_retry_info(&tonic::Status::unavailable("down")), None);
    }

    #[test]
    fn backoff_grows_is_bounded_and_resets() {
        let mut b = Backoff::default();
        for _ in 0..50 {
            let d = b.next(Verdict::Retry { after: None });
            assert!(d <= b.max);
        }
        assert_eq!(b.next(Verdict::Permanent), b.max);
        assert_eq!(b.next(Verdict::Exhausted), b.max);
        assert_eq!(b.next(Verdict::TooLarge), b.max);
        assert_eq!(b.next(Verdict::Unsupported), UNSUPPORTED_RETRY);
        assert_eq!(
            b.next(Verdict::Retry {
                after: Some(Duration::from_secs(999))
            }),
            b.max
        );
        b.reset();
        assert_eq!(b.failures(), 0);
        assert!(b.next(Verdict::Retry { after: None }) <= b.initial);
    }
}
