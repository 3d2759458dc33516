//! Why a request was shed, as a typed error a framework can turn into a response.

use std::fmt;
use std::time::Duration;

use tidegate_core::gate::RejectReason;

/// Why the gate turned a request away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShedReason {
    /// The regulator judged the queue too slow (PIE, CoDel, PID).
    Regulator,
    /// The queue was full of requests at least as important.
    QueueFull,
    /// The service's lease allows nothing now.
    NoLease,
    /// It waited in the queue past the queue timeout, or so long that, callers being seen
    /// to leave after about that long, the service's mean answer would come after its caller
    /// left (see `tidegate_core::gate::Gate::caller_left`).
    Expired,
    /// The gate went away while the request waited (not seen in practice: a queued request
    /// holds the gate).
    Cancelled,
}

impl ShedReason {
    /// A short name for headers, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ShedReason::Regulator => "regulator",
            ShedReason::QueueFull => "queue_full",
            ShedReason::NoLease => "no_lease",
            ShedReason::Expired => "expired",
            ShedReason::Cancelled => "cancelled",
        }
    }
}

impl From<RejectReason> for ShedReason {
    fn from(reason: RejectReason) -> ShedReason {
        match reason {
            RejectReason::Regulator => ShedReason::Regulator,
            RejectReason::QueueFull => ShedReason::QueueFull,
            RejectReason::NoLease => ShedReason::NoLease,
        }
    }
}

/// A request shed by the gate. Answer it quickly: `503 Service Unavailable` (or `429`) with
/// `Retry-After: `[`Shed::retry_after`] for HTTP (see [`Shed::to_http_response`]),
/// `Status::unavailable` or `resource_exhausted` for gRPC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shed {
    reason: ShedReason,
    retry_after: Duration,
    cutoff_rank: Option<u16>,
}

/// The header that carries [`ShedReason::as_str`] on a shed response.
pub const REASON_HEADER: &str = "tidegate-shed";

impl Shed {
    pub(crate) fn new(reason: ShedReason, retry_after: Duration, cutoff_rank: Option<u16>) -> Shed {
        Shed {
            reason,
            retry_after,
            cutoff_rank,
        }
    }

    pub fn reason(&self) -> ShedReason {
        self.reason
    }

    /// The least important rank the gate's regulator still admitted when it decided (`None`
    /// when it cut off none), with the queue's `hold_back_starving` no less important than
    /// the most important rank starving in the queue ([`tidegate_core::gate::Gate::told_cutoff`]):
    /// what a `tidegate-cutoff` header on the refusal says.
    pub fn cutoff_rank(&self) -> Option<u16> {
        self.cutoff_rank
    }

    /// How long the client should wait before trying again.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// `503` with `Retry-After` (whole seconds, at least 1) and the reason in
    /// `tidegate-shed`, with an empty body.
    pub fn to_http_response<B: Default>(&self) -> http::Response<B> {
        let seconds = self.retry_after.as_secs_f64().ceil().max(1.0) as u64;
        let mut response = http::Response::new(B::default());
        *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        let headers = response.headers_mut();
        headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from(seconds));
        headers.insert(
            REASON_HEADER,
            http::HeaderValue::from_static(self.reason.as_str()),
        );
        response
    }
}

impl fmt::Display for Shed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.reason {
            ShedReason::Regulator => "the queue is too slow",
            ShedReason::QueueFull => "the queue is full",
            ShedReason::NoLease => "the service grants no lease",
            ShedReason::Expired => "it waited past the queue timeout",
            ShedReason::Cancelled => "the gate went away",
        };
        write!(f, "request shed by tidegate: {why}")
    }
}

impl std::error::Error for Shed {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_response_has_status_retry_after_and_reason() {
        let shed = Shed::new(ShedReason::QueueFull, Duration::from_millis(1500), None);
        let response: http::Response<()> = shed.to_http_response();
        assert_eq!(response.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[http::header::RETRY_AFTER], "2");
        assert_eq!(response.headers()[REASON_HEADER], "queue_full");
        let zero = Shed::new(ShedReason::Expired, Duration::ZERO, None).to_http_response::<()>();
        assert_eq!(zero.headers()[http::header::RETRY_AFTER], "1");
        assert_eq!(
            shed.to_string(),
            "request shed by tidegate: the queue is full"
        );
    }
}
