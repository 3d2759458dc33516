//! gRPC answers for shed gRPC requests, and gRPC statuses read as overload signals.
//!
//! A gRPC client reads an HTTP 503 as UNAVAILABLE, which retry policies retry at once, as a
//! fault of one server, often into the same overloaded service: a retry storm. A gRPC request
//! (`content-type: application/grpc...`) the proxy sheds is answered as gRPC itself says
//! "overloaded": a trailers-only response (HTTP 200, headers only) with
//!
//! - `grpc-status: 8` (RESOURCE_EXHAUSTED) when a gate shed it (its priority, a full or slow
//!   queue, the upstream's cut-off): the service is at capacity, and the client should back
//!   off rather than retry elsewhere behind the same proxy;
//! - `grpc-status: 14` (UNAVAILABLE) only when every upstream is ejected (`no_upstream`), the
//!   one case where trying elsewhere (another proxy, another region) helps;
//! - `grpc-retry-pushback-ms`: when to try again, the estimate the HTTP answer's
//!   `Retry-After` is made from, in milliseconds (rounded up) rather than whole seconds;
//! - `grpc-message`, and `tidegate-shed: REASON` as on every shed answer.
//!
//! Upstream answers to gRPC requests: gRPC reports a failure in `grpc-status` under HTTP 200,
//! in the response headers (trailers-only) or in the trailers. RESOURCE_EXHAUSTED and
//! UNAVAILABLE teach the limit what an upstream 503 does (a dropped sample); every other
//! status is an answer like any other.

use std::time::Duration;

use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use tidegate_core::limit::Outcome;

static GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
static GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
static GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// Whether a request is gRPC (`application/grpc`, `application/grpc+proto`, gRPC-Web...).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// The gRPC status of a shed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    /// 8: a gate shed it; back off.
    ResourceExhausted,
    /// 14: no upstream to send it to; another instance may have one.
    Unavailable,
}

impl Code {
    fn value(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Code::ResourceExhausted => "8",
            Code::Unavailable => "14",
        })
    }
}

/// The gRPC form of the proxy's HTTP answer to a shed request: status 200, no body,
/// `grpc-status`, `grpc-message` naming `reason`, and `grpc-retry-pushback-ms` from `wait`
/// (the estimate behind its `Retry-After`, which goes). Its other headers stay.
pub(crate) fn shed<B>(
    mut response: Response<B>,
    code: Code,
    reason: &str,
    wait: Duration,
) -> Response<B> {
    *response.status_mut() = StatusCode::OK;
    let millis = u64::try_from(wait.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1);
    let message = format!("shed by tidegate ({reason}): retry in {millis} ms");
    let headers = response.headers_mut();
    headers.remove(RETRY_AFTER);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(GRPC_STATUS.clone(), code.value());
    // The reasons are plain ASCII words: no percent-encoding is needed.
    if let Ok(message) = HeaderValue::from_str(&message) {
        headers.insert(GRPC_MESSAGE.clone(), message);
    }
    headers.insert(GRPC_PUSHBACK.clone(), HeaderValue::from(millis));
    response
}

/// Whether gRPC headers or trailers report an overloaded server: RESOURCE_EXHAUSTED (8) or
/// UNAVAILABLE (14).
pub(crate) fn overloaded(headers: &HeaderMap) -> bool {
    matches!(
        headers.get(&GRPC_STATUS).map(HeaderValue::as_bytes),
        Some(b"8" | b"14")
    )
}

/// What an upstream's answer to a gRPC request with `outcome` by its HTTP status teaches the
/// limit, given its headers: a dropped sample if they report overload.
pub(crate) fn outcome(outcome: Outcome, headers: &HeaderMap) -> Outcome {
    if overloaded(headers) {
        Outcome::Dropped
    } else {
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn grpc_content_types_are_recognised() {
        for grpc in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc-web",
        ] {
            assert!(is_grpc(&headers(&[("content-type", grpc)])), "{grpc}");
        }
        for other in ["application/json", "text/plain", "application/gr"] {
            assert!(!is_grpc(&headers(&[("content-type", other)])), "{other}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn a_shed_answer_becomes_trailers_only_with_pushback() {
        let mut http = Response::new(());
        *http.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        http.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("2"));
        http.headers_mut()
            .insert("tidegate-shed", HeaderValue::from_static("queue_full"));
        let wait = Duration::from_micros(1_500_001);
        let grpc = shed(http, Code::ResourceExhausted, "queue_full", wait);
        assert_eq!(grpc.status(), StatusCode::OK);
        let h = grpc.headers();
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(h["grpc-status"], "8");
        assert_eq!(h["grpc-retry-pushback-ms"], "1501");
        assert_eq!(
            h["grpc-message"],
            "shed by tidegate (queue_full): retry in 1501 ms"
        );
        assert_eq!(h["tidegate-shed"], "queue_full");
        assert!(!h.contains_key(RETRY_AFTER));
        let none = shed(
            Response::new(()),
            Code::Unavailable,
            "no_upstream",
            Duration::ZERO,
        );
        assert_eq!(none.headers()["grpc-status"], "14");
        assert_eq!(none.headers()["grpc-retry-pushback-ms"], "1");
    }

    #[test]
    fn only_resource_exhausted_and_unavailable_are_overload() {
        for (status, overload) in [
            ("8", true),
            ("14", true),
            ("0", false),
            ("2", false),
            ("4", false),
            ("13", false),
            ("80", false),
        ] {
            let h = headers(&[("grpc-status", status)]);
            assert_eq!(overloaded(&h), overload, "{status}");
            let expected = if overload {
                Outcome::Dropped
            } else {
                Outcome::Success
            };
            assert_eq!(outcome(Outcome::Success, &h), expected, "{status}");
        }
        assert_eq!(
            outcome(Outcome::Ignored, &HeaderMap::new()),
            Outcome::Ignored
        );
    }
}
