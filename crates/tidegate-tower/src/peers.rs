//! The instance's side of the proxies' exchange (`docs/peers.md`): what the proxies in front
//! of this service say of their gates, and their means said back.
//!
//! Several tidegate proxies in front of the same instances each learn their own limit, and
//! those limits settle apart; no proxy sees the others, but every instance sees them all.
//! [`PeerBoardLayer`] keeps the latest `tidegate-peer` stamp of each proxy from the requests
//! it receives, for a `ttl`, and adds `tidegate-peers` (their mean limit and drop ratio) to
//! every response. A proxy that hears it holds its limit toward the mean. Malformed stamps are
//! ignored and counted ([`PeerBoardLayer::invalid`]). A server that is not a tower service
//! (the lab's `tidegate origin --peers`) keeps a [`SharedPeerBoard`] itself, the board the
//! layer keeps.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Request, Response};
use pin_project_lite::pin_project;
use tidegate_core::peers::{MEAN_HEADER, PeerBoard, STAMP_HEADER};
use tidegate_core::{Nanos, Time};
use tokio::time::Instant;
use tower::Layer;

/// An instance's [`PeerBoard`] on tokio's clock, shared by every request it serves: takes in
/// the stamps of the requests' headers and says the means in the responses'.
#[derive(Clone, Debug)]
pub struct SharedPeerBoard {
    board: Arc<Mutex<PeerBoard>>,
    epoch: Instant,
}

impl SharedPeerBoard {
    /// Keeps each proxy's stamp for `ttl` (`tidegate_core::peers::PeerConfig::ttl`, 1 s).
    pub fn new(ttl: Duration) -> SharedPeerBoard {
        SharedPeerBoard {
            board: Arc::new(Mutex::new(PeerBoard::new(Nanos::from(ttl)))),
            epoch: Instant::now(),
        }
    }

    /// Takes in the `tidegate-peer` stamp of a request's headers, if it has one; a malformed
    /// one is ignored and counted.
    pub fn receive(&self, headers: &HeaderMap) {
        if let Some(value) = headers.get(STAMP_HEADER) {
            let now = self.now();
            self.board().receive(now, Some(value.as_bytes()));
        }
    }

    /// Puts `tidegate-peers`, the means of the stamps in force, in a response's headers, when
    /// there are any.
    pub fn say_means(&self, headers: &mut HeaderMap) {
        let now = self.now();
        let mean = self.board().mean(now);
        if let Some(value) = mean.and_then(|m| HeaderValue::from_str(&m.to_string()).ok()) {
            headers.insert(MEAN_HEADER, value);
        }
    }

    /// Malformed `tidegate-peer` stamps ignored so far.
    pub fn invalid(&self) -> u64 {
        self.board().invalid()
    }

    fn now(&self) -> Time {
        Time::ZERO + Nanos::from(self.epoch.elapsed())
    }

    fn board(&self) -> std::sync::MutexGuard<'_, PeerBoard> {
        self.board.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Keeps the proxies' stamps and says their means on every response of the wrapped service.
#[derive(Clone, Debug)]
pub struct PeerBoardLayer {
    board: SharedPeerBoard,
}

impl PeerBoardLayer {
    /// Keeps each proxy's stamp for `ttl` (`tidegate_core::peers::PeerConfig::ttl`, 1 s).
    pub fn new(ttl: Duration) -> PeerBoardLayer {
        PeerBoardLayer {
            board: SharedPeerBoard::new(ttl),
        }
    }

    /// Malformed `tidegate-peer` stamps ignored so far.
    pub fn invalid(&self) -> u64 {
        self.board.invalid()
    }
}

impl<S> Layer<S> for PeerBoardLayer {
    type Service = PeerBoarding<S>;

    fn layer(&self, inner: S) -> PeerBoarding<S> {
        PeerBoarding {
            inner,
            board: self.board.clone(),
        }
    }
}

/// A service that keeps its proxies' stamps and says their means (see [`PeerBoardLayer`]).
#[derive(Clone, Debug)]
pub struct PeerBoarding<S> {
    inner: S,
    board: SharedPeerBoard,
}

impl<S, B, ResB> tower::Service<Request<B>> for PeerBoarding<S>
where
    S: tower::Service<Request<B>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = PeerBoardingFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.board.receive(request.headers());
        PeerBoardingFuture {
            inner: self.inner.call(request),
            board: self.board.clone(),
        }
    }
}

pin_project! {
    /// The future of a [`PeerBoarding`] call.
    pub struct PeerBoardingFuture<F> {
        #[pin]
        inner: F,
        board: SharedPeerBoard,
    }
}

impl<F> fmt::Debug for PeerBoardingFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerBoardingFuture").finish_non_exhaustive()
    }
}

impl<F, ResB, E> Future for PeerBoardingFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<ResB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        this.board.say_means(response.headers_mut());
        Poll::Ready(Ok(response))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tidegate_core::peers::PeerMean;
    use tower::{ServiceBuilder, ServiceExt};

    use super::*;

    async fn call(
        service: &mut (
                 impl tower::Service<Request<()>, Response = Response<()>, Error = Infallible> + Clone
             ),
        stamp: Option<&'static str>,
    ) -> Option<PeerMean> {
        let mut request = Request::new(());
        if let Some(stamp) = stamp {
            request
                .headers_mut()
                .insert(STAMP_HEADER, HeaderValue::from_static(stamp));
        }
        let response = service
            .clone()
            .oneshot(request)
            .await
            .unwrap_or_else(|never| match never {});
        response
            .headers()
            .get(MEAN_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    }

    #[tokio::test(start_paused = true)]
    async fn says_the_mean_of_each_proxys_latest_stamp_and_counts_the_malformed() {
        let layer = PeerBoardLayer::new(Duration::from_secs(1));
        let mut service = ServiceBuilder::new()
            .layer(layer.clone())
            .service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
        assert_eq!(call(&mut service, None).await, None);
        call(&mut service, Some("id=1, limit=10, ratio=0.2")).await;
        call(&mut service, Some("id=2, limit=30, ratio=0.4")).await;
        let mean = call(&mut service, Some("id=1, limit=14, ratio=0.6"))
            .await
            .expect("two proxies");
        assert_eq!(mean.peers, 2);
        assert_eq!(mean.limit, 22.0);
        assert!((mean.ratio - 0.5).abs() < 1e-9, "{mean:?}");
        call(&mut service, Some("id=3, limit=0, ratio=0.5")).await;
        assert_eq!(layer.invalid(), 1);
        // Both fall silent: forgotten after the ttl.
        tokio::time::advance(Duration::from_millis(1_300)).await;
        assert_eq!(call(&mut service, None).await, None);
    }
}
