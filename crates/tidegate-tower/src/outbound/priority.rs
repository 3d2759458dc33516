//! The priority of the request being served, carried to the calls made while serving it.
//!
//! A request's priority (tier and cohort) is computed once, at the edge, and every later hop
//! must rank it the same: otherwise a request admitted at hop 1 may be the one hop 3 sheds, and
//! the work of hops 1 and 2 on it is wasted. The edge (the tidegate proxy) forwards it in the
//! `tidegate-priority` header; a service that calls others while serving a request keeps it in
//! a task-local for the duration of the call ([`PriorityScopeLayer`] does this for every
//! request of an HTTP service), and [`super::Outbound`] stamps it on every request sent from
//! inside that scope.

use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderValue, Request};
use tidegate_core::Priority;
use tidegate_core::priority::PriorityHeader;
use tokio::task::futures::TaskLocalFuture;
use tower::{Layer, Service};

/// The request header that carries a priority between hops (`TIER/COHORT`), and the hint
/// the edge admitted the request's chain under (`under=RANK`, on a field line of its own:
/// [`PriorityHeader`], `docs/feedback.md`).
pub const PRIORITY_HEADER: &str = "tidegate-priority";

/// What the request being served says of itself to the calls made while serving it: its
/// priority, and the hint its chain was admitted under at the edge, if the edge said one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Served {
    pub priority: Priority,
    /// The least important rank of the hint the edge admitted the chain under: no outbound
    /// layer drops a call of the chain this rank admits.
    pub under: Option<u16>,
}

impl From<Priority> for Served {
    fn from(priority: Priority) -> Served {
        Served {
            priority,
            under: None,
        }
    }
}

/// The scope of a request being served: what it says of itself, and, once an outbound layer
/// at the edge of the chain admitted its first call (every layer does by default, but those
/// built [`super::OutboundLayer::without_chain_hint`]), the hint that call was admitted
/// under, for the calls after it.
#[derive(Debug)]
pub struct ServedScope {
    served: Cell<Served>,
}

tokio::task_local! {
    static CURRENT: ServedScope;
}

/// The priority of the request being served by the calling task, if it runs inside
/// [`with_priority`] (or a [`PriorityScopeLayer`]'d service).
pub fn current_priority() -> Option<Priority> {
    current_served().map(|served| served.priority)
}

/// The priority and chain hint of the request being served by the calling task, if it runs
/// inside [`with_served`] or [`with_priority`] (or a [`PriorityScopeLayer`]'d service).
pub fn current_served() -> Option<Served> {
    CURRENT.try_with(|scope| scope.served.get()).ok()
}

/// Gives the request being served, if any, the chain hint `under` its first call was
/// admitted under: it keeps it for the rest of the request (an edge admits a chain once).
pub(crate) fn hold_chain(under: u16) {
    let _ = CURRENT.try_with(|scope| {
        let served = scope.served.get();
        scope.served.set(Served {
            under: Some(under),
            ..served
        });
    });
}

/// Runs `future` with `priority` as the current priority: outbound calls made by it carry it.
pub fn with_priority<F: Future>(priority: Priority, future: F) -> TaskLocalFuture<ServedScope, F> {
    with_served(priority.into(), future)
}

/// Runs `future` serving `served`: outbound calls made by it carry its priority and chain
/// hint.
pub fn with_served<F: Future>(served: Served, future: F) -> TaskLocalFuture<ServedScope, F> {
    CURRENT.scope(
        ServedScope {
            served: Cell::new(served),
        },
        future,
    )
}

/// The priority a request's `tidegate-priority` header says, if it has a valid one.
pub fn header_priority(headers: &HeaderMap) -> Option<Priority> {
    header_served(headers).map(|(served, _)| served.priority)
}

/// What a request's `tidegate-priority` header says, if it has a valid priority, with the
/// number of malformed members after it that were ignored.
pub fn header_served(headers: &HeaderMap) -> Option<(Served, u32)> {
    let lines = headers
        .get_all(PRIORITY_HEADER)
        .iter()
        .map(HeaderValue::as_bytes);
    let header = PriorityHeader::parse(lines)?.ok()?;
    let served = Served {
        priority: header.priority,
        under: header.under,
    };
    Some((served, header.ignored))
}

/// Puts `served` on a request's headers: the priority's field line, and the chain hint's
/// after it, replacing what they said.
pub(crate) fn stamp(headers: &mut HeaderMap, served: Served) {
    headers.remove(PRIORITY_HEADER);
    if let Ok(value) = HeaderValue::from_str(&served.priority.to_string()) {
        headers.append(PRIORITY_HEADER, value);
    }
    if let Some(under) = served.under
        && let Ok(value) = HeaderValue::from_str(&PriorityHeader::under_line(under))
    {
        headers.append(PRIORITY_HEADER, value);
    }
}

/// Serves each request inside the scope of its priority and chain hint: the ones its
/// `tidegate-priority` header says (forwarded by the hop before), or `default` without a
/// valid priority. Malformed members after the priority are ignored and counted
/// ([`PriorityScopeLayer::ignored`]).
#[derive(Clone, Debug)]
pub struct PriorityScopeLayer {
    default: Priority,
    ignored: Arc<AtomicU64>,
}

impl PriorityScopeLayer {
    pub fn new(default: Priority) -> PriorityScopeLayer {
        PriorityScopeLayer {
            default,
            ignored: Arc::default(),
        }
    }

    /// Malformed members of `tidegate-priority` after the priority (a chain hint that is not
    /// a rank, say), ignored so far by the services of this layer.
    pub fn ignored(&self) -> u64 {
        self.ignored.load(Ordering::Relaxed)
    }
}

impl Default for PriorityScopeLayer {
    fn default() -> PriorityScopeLayer {
        PriorityScopeLayer::new(Priority::default())
    }
}

impl<S> Layer<S> for PriorityScopeLayer {
    type Service = PriorityScope<S>;
    fn layer(&self, inner: S) -> PriorityScope<S> {
        PriorityScope {
            inner,
            default: self.default,
            ignored: self.ignored.clone(),
        }
    }
}

/// A service whose requests are served in the scope of their priority.
#[derive(Clone)]
pub struct PriorityScope<S> {
    inner: S,
    default: Priority,
    ignored: Arc<AtomicU64>,
}

impl<S: fmt::Debug> fmt::Debug for PriorityScope<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PriorityScope")
            .field("inner", &self.inner)
            .field("default", &self.default)
            .finish()
    }
}

impl<S, B> Service<Request<B>> for PriorityScope<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = TaskLocalFuture<ServedScope, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let served = match header_served(request.headers()) {
            Some((served, ignored)) => {
                if ignored > 0 {
                    self.ignored
                        .fetch_add(u64::from(ignored), Ordering::Relaxed);
                }
                served
            }
            None => self.default.into(),
        };
        with_served(served, self.inner.call(request))
    }
}
