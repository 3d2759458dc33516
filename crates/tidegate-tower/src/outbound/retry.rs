//! Retrying within a budget, after a backoff and the callee's `Retry-After`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::RETRY_AFTER;
use http::{HeaderMap, Request, Response};
use tidegate_core::Nanos;
use tidegate_core::outbound::{RetryBudget, RetryBudgetConfig, RetryPolicy, parse_retry_after};
use tidegate_core::rng::Rng;
use tower::util::ServiceExt as _;
use tower::{BoxError, Layer, Service};

use super::{Clocked, Throttled, is_refusal};

#[derive(Debug)]
struct State {
    budget: RetryBudget,
    rng: Rng,
}

#[derive(Debug)]
struct Shared {
    policy: RetryPolicy,
    clocked: Clocked<State>,
}

/// Applies [`Retrying`]. Every client it wraps shares one budget.
#[derive(Clone, Debug)]
pub struct RetryLayer {
    shared: Arc<Shared>,
}

impl RetryLayer {
    pub fn new(policy: RetryPolicy, budget: RetryBudgetConfig) -> RetryLayer {
        RetryLayer {
            shared: Arc::new(Shared {
                policy,
                clocked: Clocked::new(State {
                    budget: RetryBudget::new(&budget),
                    rng: Rng::seed(super::seed()),
                }),
            }),
        }
    }
}

impl Default for RetryLayer {
    /// 3 attempts, backoff from 25 ms to 1 s, `Retry-After` up to 1 s honoured, 10% budget.
    fn default() -> RetryLayer {
        RetryLayer::new(RetryPolicy::default(), RetryBudgetConfig::default())
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retrying<S>;
    fn layer(&self, inner: S) -> Retrying<S> {
        Retrying {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// A client that retries refused and failed requests, within its budget.
#[derive(Clone, Debug)]
pub struct Retrying<S> {
    inner: S,
    shared: Arc<Shared>,
}

/// The future of a [`Retrying`] call.
pub struct RetryFuture<R> {
    inner: Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>,
}

impl<R> fmt::Debug for RetryFuture<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryFuture").finish_non_exhaustive()
    }
}

impl<R> Future for RetryFuture<R> {
    type Output = Result<R, BoxError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

/// `Retry-After` in whole seconds (its HTTP-date form is not used by gates, and ignored).
fn retry_after(headers: &HeaderMap) -> Option<Nanos> {
    parse_retry_after(headers.get(RETRY_AFTER)?.as_bytes())
}

impl<S, B, ResB> Service<Request<B>> for Retrying<S>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send,
    B: Clone + Send + 'static,
    ResB: Send + 'static,
{
    type Response = Response<ResB>;
    type Error = BoxError;
    type Future = RetryFuture<Response<ResB>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let shared = self.shared.clone();
        // The ready service takes the first attempt; the clone stays for the next call.
        let clone = self.inner.clone();
        let mut service = std::mem::replace(&mut self.inner, clone);
        shared.clocked.state().budget.request(shared.clocked.now());
        RetryFuture {
            inner: Box::pin(async move {
                let mut attempts = 0;
                loop {
                    attempts += 1;
                    if attempts > 1 {
                        service = service.clone();
                        service.ready().await.map_err(Into::into)?;
                    }
                    let result = service.call(request.clone()).await.map_err(Into::into);
                    let asked = match &result {
                        Ok(response) if is_refusal(response.status()) => {
                            retry_after(response.headers())
                        }
                        Ok(_) => return result,
                        // What the outbound layer refused locally stays refused.
                        Err(error) if error.is::<Throttled>() => return result,
                        Err(_) => None,
                    };
                    let wait = {
                        let now = shared.clocked.now();
                        let mut state = shared.clocked.state();
                        let state = &mut *state;
                        match shared.policy.next_wait(attempts, asked, &mut state.rng) {
                            Some(wait) if state.budget.try_retry(now) => wait,
                            _ => return result,
                        }
                    };
                    if !wait.is_zero() {
                        tokio::time::sleep(wait.into()).await;
                    }
                }
            }),
        }
    }
}
