//! The gate's refusals, answered from parts made once at start: under a flood most requests
//! end here, so a refusal must cost less than forwarding (`docs/performance.md`, "The shed
//! path").
//!
//! A refusal reads nothing more than the request head hyper has already parsed: the gate
//! decides before anything is made for the upstream (no URI, no forwarded headers, no body
//! wrapper, no pooled connection), and the request body, if any, is never read: a refusal of
//! an HTTP/1 request with a body says `Connection: close` and the connection closes after
//! it (the next request would be behind the unread body), and a client waiting for
//! `100 Continue` never gets it, so it never sends the body. A bodiless request, the common
//! case, keeps its connection.
//! The values of `Retry-After` and of every possible `tidegate-cutoff` are made here once;
//! the body is the caller's type, left empty (`R::default()`); the regulator's cut-off comes
//! with the gate's decision ([`Shed::cutoff_rank`]), without locking the gate again.

use std::time::Duration;

use http::header::CONNECTION;
use http::{HeaderValue, Request, Response, StatusCode, Version};
use http_body::Body;
use tidegate_core::feedback::CutoffHeader;
use tidegate_core::priority::RANKS;
use tidegate_core::regulator::RegulatorState;
use tidegate_tower::Shed;
use tidegate_tower::error::REASON_HEADER;

use crate::cutoff;

/// What every refusal says, made once.
#[derive(Debug)]
pub(crate) struct Refusals {
    status: StatusCode,
    retry_after: HeaderValue,
    /// `tidegate-cutoff: rank=R, ttl=250ms`, by R.
    cutoffs: Box<[HeaderValue]>,
}

impl Refusals {
    /// Refusals with `status` (`server.shed_status`), telling clients to retry after
    /// `retry_after` (whole seconds, at least 1).
    pub(crate) fn new(status: StatusCode, retry_after: Duration) -> Refusals {
        let seconds = retry_after.as_secs_f64().ceil().max(1.0) as u64;
        let cutoffs = (0..RANKS)
            .filter_map(|rank| u16::try_from(rank).ok())
            .filter_map(|rank| {
                let header = CutoffHeader {
                    rank,
                    ttl: cutoff::TTL,
                };
                HeaderValue::from_str(&header.to_string()).ok()
            })
            .collect();
        Refusals {
            status,
            retry_after: HeaderValue::from(seconds),
            cutoffs,
        }
    }

    /// The answer to a request the gate shed: the status, `Retry-After`, the reason in
    /// `tidegate-shed`, and the regulator's cut-off when it cuts by rank.
    pub(crate) fn shed<B: Body, R: Default>(
        &self,
        shed: &Shed,
        request: &Request<B>,
    ) -> Response<R> {
        let state = RegulatorState {
            cutoff_rank: shed.cutoff_rank(),
            ..RegulatorState::default()
        };
        let said = CutoffHeader::of(&state, cutoff::TTL).map(|header| header.rank);
        self.refusal(shed.reason().as_str(), said, request)
    }

    /// A request shed on the upstream's cut-off at `rank`: the reason `cutoff`, and the
    /// cut-off passed on to the caller.
    pub(crate) fn cutoff<B: Body, R: Default>(
        &self,
        rank: u16,
        request: &Request<B>,
    ) -> Response<R> {
        self.refusal("cutoff", Some(rank), request)
    }

    /// A stream asked for while its upstream has `streams.max_per_upstream` open: the reason
    /// `streams` ([`crate::stream`]).
    pub(crate) fn streams<B: Body, R: Default>(&self, request: &Request<B>) -> Response<R> {
        self.refusal("streams", None, request)
    }

    fn refusal<B: Body, R: Default>(
        &self,
        reason: &'static str,
        cutoff_rank: Option<u16>,
        request: &Request<B>,
    ) -> Response<R> {
        let mut response = Response::new(R::default());
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.reserve(3);
        headers.insert(http::header::RETRY_AFTER, self.retry_after.clone());
        headers.insert(REASON_HEADER, HeaderValue::from_static(reason));
        if let Some(value) = cutoff_rank.and_then(|rank| self.cutoffs.get(usize::from(rank))) {
            headers.insert(&cutoff::HEADER, value.clone());
        }
        if request.version() < Version::HTTP_2 && !request.body().is_end_stream() {
            headers.insert(CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_the_status_the_retry_and_the_cutoff_in_force() {
        let refusals = Refusals::new(StatusCode::TOO_MANY_REQUESTS, Duration::from_millis(1500));
        let bodiless = Request::new(http_body_util::Empty::<bytes::Bytes>::new());
        let response: Response<()> = refusals.cutoff(17, &bodiless);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "2");
        assert_eq!(response.headers()[REASON_HEADER], "cutoff");
        assert_eq!(response.headers()[&cutoff::HEADER], "rank=17, ttl=250ms");
        let last = u16::try_from(RANKS - 1).unwrap_or(u16::MAX);
        assert_eq!(
            refusals.cutoff::<_, ()>(last, &bodiless).headers()[&cutoff::HEADER],
            "rank=767, ttl=250ms"
        );
        assert!(!response.headers().contains_key(CONNECTION));
        let with_body = Request::new(http_body_util::Full::new(bytes::Bytes::from("x")));
        assert_eq!(
            refusals.cutoff::<_, ()>(3, &with_body).headers()[CONNECTION],
            "close"
        );
    }
}
