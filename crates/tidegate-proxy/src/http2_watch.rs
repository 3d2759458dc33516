//! What an HTTP/2 connection's socket cannot tell: whether the connection is idle, and whether
//! a response is stuck because its client never opens the stream's flow-control window.
//!
//! Over HTTP/1.1 both show at the socket (an idle keep-alive wait is a header read; a client
//! that does not read blocks the writes). Over HTTP/2 neither does: between requests the
//! connection just waits, for ever, and a client that reads its socket but never sends a
//! WINDOW_UPDATE for a stream (or gives it an initial window of 0) leaves that stream's
//! response waiting inside hyper, which polls a response body only when the stream has room,
//! while the socket stays writable. That stream held its gate slot and its connection for as
//! long as the client liked.
//!
//! So each HTTP/2 connection counts its streams and watches their response bodies:
//!
//! - **Idle.** No stream open and none started for `connections.idle_timeout`: the connection
//!   is shut down gracefully (GOAWAY, then closed), and closed outright if that has not
//!   finished within `write_timeout`.
//! - **Stalled.** A response body handed over but not taken for `write_timeout` (hyper has
//!   not asked for its next frame, which it does as soon as the stream has room): the client
//!   is not opening the window, and the connection is closed as a blocked write would close
//!   it. Its streams are reset with it, their slots freed, each request counted once
//!   (cancelled).
//!
//! A response body's wait is timed from when it was handed over, or from its last frame, and
//! a look is taken every quarter of the shorter timeout, so each bound holds within a
//! quarter of itself. HTTP/1.1 requests cost nothing here.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::Version;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Why [`Http2Watch::run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No stream open or started for the idle timeout.
    Idle,
    /// A response body waited for the client's window for the write timeout.
    Stalled,
}

/// One client connection's HTTP/2 streams.
#[derive(Debug)]
pub(crate) struct Http2Watch {
    epoch: Instant,
    /// Set by the first HTTP/2 request: until then nothing is watched.
    http2: AtomicBool,
    started_http2: Notify,
    /// Streams at the handler or with a response under way.
    open: AtomicUsize,
    /// Streams started so far: tells a connection idle between two looks from a busy one.
    started: AtomicU64,
    /// Each response body under way: since when it has waited for hyper to take a frame
    /// (nanoseconds since `epoch`, plus one), 0 while it is not waiting.
    waiting: Mutex<Vec<Arc<AtomicU64>>>,
}

impl Http2Watch {
    pub(crate) fn new() -> Arc<Http2Watch> {
        Arc::new(Http2Watch {
            epoch: Instant::now(),
            http2: AtomicBool::new(false),
            started_http2: Notify::new(),
            open: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            waiting: Mutex::new(Vec::new()),
        })
    }

    /// A request arrived: for HTTP/2, a stream opened, until the returned guard (which its
    /// response body carries) is dropped.
    pub(crate) fn opened(self: &Arc<Self>, version: Version) -> Option<StreamGuard> {
        if version != Version::HTTP_2 {
            return None;
        }
        if !self.http2.swap(true, Ordering::Relaxed) {
            self.started_http2.notify_one();
        }
        self.open.fetch_add(1, Ordering::Relaxed);
        self.started.fetch_add(1, Ordering::Relaxed);
        Some(StreamGuard {
            watch: self.clone(),
            waiting: None,
        })
    }

    /// Whether the connection has carried an HTTP/2 request.
    pub(crate) fn is_http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    /// Watches the connection once it has carried an HTTP/2 request; ends with the first
    /// bound it finds crossed. Never ends for an HTTP/1.1 connection.
    pub(crate) async fn run(&self, idle_timeout: Duration, write_timeout: Duration) -> Verdict {
        while !self.http2.load(Ordering::Relaxed) {
            self.started_http2.notified().await;
        }
        let look = (idle_timeout.min(write_timeout) / 4).max(Duration::from_millis(1));
        let write_nanos = u64::try_from(write_timeout.as_nanos()).unwrap_or(u64::MAX);
        let mut idle_since: Option<Instant> = None;
        let mut started = self.started.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(look).await;
            let now = self.now();
            let stalled = self
                .waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|since| since.load(Ordering::Relaxed))
                .any(|since| since != 0 && now.saturating_sub(since) >= write_nanos);
            if stalled {
                return Verdict::Stalled;
            }
            let started_now = self.started.load(Ordering::Relaxed);
            if self.open.load(Ordering::Relaxed) > 0 || started_now != started {
                idle_since = None;
            } else if idle_since.get_or_insert_with(Instant::now).elapsed() >= idle_timeout {
                return Verdict::Idle;
            }
            started = started_now;
        }
    }
}

/// An HTTP/2 stream open on its connection, and the wait of its response body.
#[derive(Debug)]
pub(crate) struct StreamGuard {
    watch: Arc<Http2Watch>,
    /// Registered with the watch once the response is handed over.
    waiting: Option<Arc<AtomicU64>>,
}

impl StreamGuard {
    /// The response is handed to hyper: its body waits from now.
    fn handed_over(&mut self) {
        let since = Arc::new(AtomicU64::new(self.watch.now()));
        self.watch
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(since.clone());
        self.waiting = Some(since);
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.watch.open.fetch_sub(1, Ordering::Relaxed);
        if let Some(since) = self.waiting.take() {
            self.watch
                .waiting
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .retain(|other| !Arc::ptr_eq(other, &since));
        }
    }
}

/// A response body that tells its stream's watch when it waits to be taken.
#[derive(Debug)]
pub(crate) struct Watched<B> {
    inner: B,
    /// `None` over HTTP/1.1.
    stream: Option<StreamGuard>,
}

impl<B> Watched<B> {
    pub(crate) fn new(inner: B, mut stream: Option<StreamGuard>) -> Watched<B> {
        if let Some(stream) = &mut stream {
            stream.handed_over();
        }
        Watched { inner, stream }
    }
}

impl<B: Body + Unpin> Body for Watched<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Some(StreamGuard {
            watch,
            waiting: Some(since),
        }) = &this.stream
        {
            // Taken: waiting for the upstream is the response timeouts' business, waiting
            // for the client (the next poll) this watch's.
            let handed = matches!(&polled, Poll::Ready(Some(Ok(_))));
            since.store(if handed { watch.now() } else { 0 }, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test(start_paused = true)]
    async fn an_http1_connection_is_never_watched() {
        let watch = Http2Watch::new();
        assert!(watch.opened(Version::HTTP_11).is_none());
        let run = watch.run(Duration::from_secs(1), Duration::from_secs(1));
        assert!(
            tokio::time::timeout(Duration::from_secs(3600), run)
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn idle_once_no_stream_is_open_or_started_for_the_idle_timeout() {
        let watch = Http2Watch::new();
        let stream = watch.opened(Version::HTTP_2);
        let run = watching(&watch, 8, 4);
        // Open for 20 s: not idle, however long.
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(!run.is_finished());
        drop(stream);
        let closed = Instant::now();
        assert_eq!(run.await.unwrap(), Verdict::Idle);
        let waited = Instant::now().duration_since(closed);
        assert!(
            waited >= Duration::from_secs(8) && waited <= Duration::from_secs(10),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_not_taken_for_the_write_timeout_is_stalled_and_a_taken_one_is_not() {
        let watch = Http2Watch::new();
        let run = watching(&watch, 600, 4);
        // Taken frame by frame every 3 s: never stalled.
        let mut taken = Watched::new(
            http_body_util::StreamBody::new(futures_stream(5)),
            watch.opened(Version::HTTP_2),
        );
        while let Some(frame) = taken.frame().await {
            frame.unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        assert!(!run.is_finished());
        // Handed over and never taken.
        let handed = Instant::now();
        let _stuck = Watched::new(
            Full::new(bytes::Bytes::from_static(b"stuck")),
            watch.opened(Version::HTTP_2),
        );
        assert_eq!(run.await.unwrap(), Verdict::Stalled);
        let waited = Instant::now().duration_since(handed);
        assert!(
            waited >= Duration::from_secs(4) && waited <= Duration::from_secs(5),
            "{waited:?}"
        );
    }

    /// The watch run in a task of its own, with these timeouts in seconds.
    fn watching(
        watch: &Arc<Http2Watch>,
        idle: u64,
        write: u64,
    ) -> tokio::task::JoinHandle<Verdict> {
        let watch = watch.clone();
        tokio::spawn(async move {
            watch
                .run(Duration::from_secs(idle), Duration::from_secs(write))
                .await
        })
    }

    /// `n` data frames, each ready at once.
    fn futures_stream(
        n: usize,
    ) -> impl futures_util::Stream<Item = Result<Frame<bytes::Bytes>, std::convert::Infallible>>
    {
        futures_util::stream::iter((0..n).map(|_| Ok(Frame::data(bytes::Bytes::from_static(b"x")))))
    }
}
