//! A call to the next hop of a chain, made once a request's own work is done
//! (`tidegate origin --call URL`): the smallest real service that calls another, so that a
//! chain of proxies and origins runs on loopback (issue 15).
//!
//! It does what `tidegate-tower`'s outbound layer does for a real service: it sends the
//! priority the request came with (`tidegate-priority`, so the next hop ranks it as the first
//! did, with the hint the edge admitted the chain under: a call that hint admits is sent
//! whatever the cut-off since), keeps the next hop's cut-off (`tidegate-cutoff`,
//! `docs/feedback.md`) and drops before sending what that cut-off refuses, and says the
//! cut-off it holds on its own response, so that the proxy in front of it stops admitting
//! what the hop behind refuses.
//!
//! The next hop may be several instances (`--call` repeated, e.g. every proxy of the next
//! hop), called round-robin as a real service's client balances. Their cut-offs go into one
//! `Feedback`, which holds the deepest until it lapses: every call is held to it whichever
//! instance it would go to, and the one cut-off is what this hop passes on. With a cut-off
//! held per instance, a request the deeper one refuses is still sent to the looser, and the
//! origins in front of one instance pass on another cut-off than those in front of the next.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tidegate_core::feedback::{CutoffHeader, Feedback};
use tidegate_core::priority::PriorityHeader;
use tidegate_core::{Nanos, Priority, Time};

/// The priority header a tidegate proxy forwards and its classifier reads.
static PRIORITY: HeaderName = HeaderName::from_static("tidegate-priority");
static CUTOFF: HeaderName = HeaderName::from_static(tidegate_core::feedback::HEADER);

/// How long the next hop may take before the call counts as failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// How a call to the next hop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Called {
    /// The next hop answered 2xx.
    Ok,
    /// The cut-off the next hop said refuses this priority: not sent.
    HeldBack,
    /// The next hop refused or failed: its status, or `None` when there was no response.
    Failed(Option<StatusCode>),
}

/// The next hop's instances and what is known of its cut-off.
#[derive(Debug)]
pub(crate) struct NextHop {
    /// The instances, called round-robin (never empty).
    urls: Vec<Uri>,
    /// The round-robin's count of calls sent.
    sent: AtomicUsize,
    client: Client<HttpConnector, Empty<Bytes>>,
    /// The deepest cut-off any instance said, in force until it lapses.
    feedback: Mutex<Feedback>,
    /// Whether to hold back what the cut-off refuses and pass it on (off: the chain without
    /// feedback, to compare with).
    honour_cutoff: bool,
    started: Instant,
    /// Calls by how they ended: ok, held back, failed.
    ended: [AtomicU64; 3],
    /// Requests whose `tidegate-priority` did not parse (sent on at the default priority),
    /// and malformed members after a priority that did (a chain hint that is not a rank).
    priority_invalid: AtomicU64,
    priority_ignored: AtomicU64,
}

impl NextHop {
    /// The next hop at `urls`, `None` when there is none.
    pub(crate) fn new(urls: Vec<Uri>, honour_cutoff: bool) -> Option<NextHop> {
        if urls.is_empty() {
            return None;
        }
        Some(NextHop {
            urls,
            sent: AtomicUsize::new(0),
            client: Client::builder(TokioExecutor::new()).build_http(),
            feedback: Mutex::new(Feedback::default()),
            honour_cutoff,
            started: Instant::now(),
            ended: Default::default(),
            priority_invalid: AtomicU64::new(0),
            priority_ignored: AtomicU64::new(0),
        })
    }

    fn now(&self) -> Time {
        Time::ZERO + Nanos::from_nanos(self.started.elapsed().as_nanos() as u64)
    }

    /// Calls the next hop for a request that came with `headers`.
    pub(crate) async fn call(&self, headers: &HeaderMap) -> Called {
        let called = self.send(headers).await;
        let index = match called {
            Called::Ok => 0,
            Called::HeldBack => 1,
            Called::Failed(_) => 2,
        };
        self.ended[index].fetch_add(1, Ordering::Relaxed);
        called
    }

    async fn send(&self, headers: &HeaderMap) -> Called {
        // The priority and the hint the edge admitted the chain under, on their field lines.
        let carried = headers.get_all(&PRIORITY);
        let header = match PriorityHeader::parse(carried.iter().map(HeaderValue::as_bytes)) {
            Some(Ok(header)) => {
                self.priority_ignored
                    .fetch_add(u64::from(header.ignored), Ordering::Relaxed);
                Some(header)
            }
            Some(Err(_)) => {
                self.priority_invalid.fetch_add(1, Ordering::Relaxed);
                None
            }
            None => None,
        };
        let priority = header.map_or_else(Priority::default, |h| h.priority);
        let under = header.and_then(|h| h.under);
        if self.honour_cutoff
            && self
                .feedback()
                .refuses_in_chain(self.now(), priority, under)
                .is_some()
        {
            return Called::HeldBack;
        }
        // Round-robin over the instances, among the calls sent (a call held back goes nowhere).
        let url = &self.urls[self.sent.fetch_add(1, Ordering::Relaxed) % self.urls.len()];
        let mut request = Request::get(url.clone());
        for value in carried {
            request = request.header(&PRIORITY, value);
        }
        let Ok(request) = request.body(Empty::new()) else {
            return Called::Failed(None);
        };
        let response = match tokio::time::timeout(CALL_TIMEOUT, self.client.request(request)).await
        {
            Ok(Ok(response)) => response,
            Ok(Err(_)) | Err(_) => return Called::Failed(None),
        };
        let cutoff = response.headers().get(&CUTOFF).map(HeaderValue::as_bytes);
        self.feedback().receive(self.now(), cutoff);
        let status = response.status();
        // Read the body so that the connection goes back to the pool.
        let _ = response.into_body().collect().await;
        if status.is_success() {
            Called::Ok
        } else {
            Called::Failed(Some(status))
        }
    }

    /// The next hop's cut-off this hop holds, to say on its own response.
    pub(crate) fn cutoff(&self) -> Option<HeaderValue> {
        if !self.honour_cutoff {
            return None;
        }
        let now = self.now();
        let hint = self.feedback().hint(now)?;
        let header = CutoffHeader {
            rank: hint.rank,
            ttl: hint.expires - now,
        };
        HeaderValue::from_str(&header.to_string()).ok()
    }

    /// The calls' counters, in the Prometheus text format, for the origin's `/metrics`.
    pub(crate) fn metrics(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP tidegate_origin_calls_total Calls to the next hop (--call), by how they \
             ended: ok (2xx), held_back (its cut-off refused them: not sent), failed.\n\
             # TYPE tidegate_origin_calls_total counter"
        );
        for (outcome, count) in ["ok", "held_back", "failed"].iter().zip(&self.ended) {
            let count = count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "tidegate_origin_calls_total{{outcome=\"{outcome}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP tidegate_origin_invalid_cutoffs_total Malformed tidegate-cutoff headers \
             from the next hop, ignored.\n\
             # TYPE tidegate_origin_invalid_cutoffs_total counter\n\
             tidegate_origin_invalid_cutoffs_total {}",
            self.feedback().invalid()
        );
        let _ = writeln!(
            out,
            "# HELP tidegate_origin_priority_header_invalid_total Requests whose \
             tidegate-priority did not parse, called at the default priority.\n\
             # TYPE tidegate_origin_priority_header_invalid_total counter\n\
             tidegate_origin_priority_header_invalid_total {}\n\
             # HELP tidegate_origin_priority_header_ignored_total Malformed members after \
             the priority in tidegate-priority (a chain hint that is not a rank), ignored.\n\
             # TYPE tidegate_origin_priority_header_ignored_total counter\n\
             tidegate_origin_priority_header_ignored_total {}",
            self.priority_invalid.load(Ordering::Relaxed),
            self.priority_ignored.load(Ordering::Relaxed)
        );
        out
    }

    fn feedback(&self) -> std::sync::MutexGuard<'_, Feedback> {
        self.feedback.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
