//! HTTP/1.1 `Upgrade` (WebSocket, or any protocol) through the proxy: the upgrade request is
//! forwarded with its `Upgrade` and `Connection: upgrade` (hop-by-hop fields, which the
//! forwarding otherwise removes), the upstream's `101` is relayed, and once both connections
//! have switched, their bytes are copied both ways until either side closes
//! (`tokio::io::copy_bidirectional`), or neither sends anything for `streams.idle_timeout`.
//!
//! The request went through the gate like any other (shed under overload, with its priority);
//! its sample is the time to the `101`, and from then on the tunnel holds a place under the
//! stream cap, not a slot of the limit ([`crate::stream`]).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{CONNECTION, UPGRADE};
use http::{HeaderMap, HeaderValue, Request, Response};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

use crate::handler::Shared;
use crate::stream_cap::{End, Slot};

static UPGRADE_TOKEN: HeaderValue = HeaderValue::from_static("upgrade");

/// Whether a request with `headers` asks for an upgrade: `Upgrade`, with `upgrade` among the
/// `Connection` options (RFC 9110 section 7.8: without it, `Upgrade` is a stray field, which
/// the forwarding removes). Never to `h2c`: spliced, an HTTP/2 connection would carry any
/// number of requests to the upstream past its gate (its `Upgrade` is removed, and the
/// request answered as HTTP/1.1).
pub(crate) fn requested(headers: &HeaderMap) -> bool {
    let Some(protocols) = headers.get(UPGRADE) else {
        return false;
    };
    // A protocol list that is not text is no upgrade either.
    let h2c = protocols.to_str().map_or(true, |list| {
        list.split(',')
            .any(|p| p.trim().eq_ignore_ascii_case("h2c"))
    });
    !h2c && headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|option| option.trim().eq_ignore_ascii_case("upgrade"))
}

/// An upgrade a client asked for: the protocol, and its side of the connection once the
/// `101` has been sent to it.
#[derive(Debug)]
pub(crate) struct Upgrade {
    protocol: HeaderValue,
    client: OnUpgrade,
}

impl Upgrade {
    /// The upgrade `request` asks for, taking its client side from it.
    pub(crate) fn take<B>(request: &mut Request<B>) -> Option<Upgrade> {
        let protocol = request.headers().get(UPGRADE)?.clone();
        Some(Upgrade {
            protocol,
            client: hyper::upgrade::on(request),
        })
    }

    /// `Upgrade` and `Connection: upgrade` on the request forwarded upstream.
    pub(crate) fn forward_headers(&self, headers: &mut HeaderMap) {
        headers.insert(UPGRADE, self.protocol.clone());
        headers.insert(CONNECTION, UPGRADE_TOKEN.clone());
    }

    /// The upstream answered `101`: the tunnel to splice, holding `slot`.
    pub(crate) fn switched<B>(self, response: &mut Response<B>, slot: Slot) -> Tunnel {
        let protocol = response
            .headers()
            .get(UPGRADE)
            .cloned()
            .unwrap_or(self.protocol);
        Tunnel {
            protocol,
            client: self.client,
            upstream: hyper::upgrade::on(response),
            slot,
        }
    }
}

/// Both sides of an upgrade the upstream accepted.
#[derive(Debug)]
pub(crate) struct Tunnel {
    protocol: HeaderValue,
    client: OnUpgrade,
    upstream: OnUpgrade,
    slot: Slot,
}

impl Tunnel {
    /// `Upgrade` and `Connection: upgrade` on the `101` relayed to the client.
    pub(crate) fn response_headers(&self, headers: &mut HeaderMap) {
        headers.insert(UPGRADE, self.protocol.clone());
        headers.insert(CONNECTION, UPGRADE_TOKEN.clone());
    }

    /// Splices the two connections in a task of its own, which the drain waits for (and cuts
    /// after the drain timeout).
    pub(crate) fn start(self, shared: Arc<Shared>) {
        let tunnels = &shared.streams.tunnels;
        let mut cut = tunnels.cut_signal();
        // Outside a runtime (it is shutting down), or past the drain: nothing to splice, the
        // slot counts the stream as cancelled.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if *cut.borrow() {
            return;
        }
        tunnels.started();
        // The client connection's task ends with the handover: its count carries on here.
        shared.streams.client_connections.inc();
        runtime.spawn(async move {
            let Tunnel {
                client,
                upstream,
                slot,
                ..
            } = self;
            let idle = shared.streams.idle_timeout;
            let end = tokio::select! {
                end = splice(client, upstream, idle) => end,
                _ = cut.wait_for(|cut| *cut) => End::Cancelled,
            };
            slot.end(end);
            shared.streams.client_connections.dec();
            shared.streams.tunnels.ended();
        });
    }
}

/// Waits for both sides to switch, then copies until the end.
async fn splice(client: OnUpgrade, upstream: OnUpgrade, idle: Duration) -> End {
    let Ok(upstream) = upstream.await else {
        return End::Error;
    };
    let Ok(client) = client.await else {
        return End::Cancelled;
    };
    let activity = Activity::new();
    let mut client = Active::new(TokioIo::new(client), &activity);
    let mut upstream = Active::new(TokioIo::new(upstream), &activity);
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut upstream) => match copied {
            Ok(_) => End::Closed,
            Err(_) => End::Error,
        },
        () = activity.silent_for(idle) => End::Idle,
    }
}

/// When a tunnel last carried bytes, either way.
#[derive(Clone, Debug)]
struct Activity {
    since: Instant,
    /// Nanoseconds after `since`.
    last: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            since: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    fn progressed(&self) {
        let nanos = u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last.store(nanos, Ordering::Relaxed);
    }

    /// Completes once nothing has moved for `idle`.
    async fn silent_for(&self, idle: Duration) {
        loop {
            let last = Duration::from_nanos(self.last.load(Ordering::Relaxed));
            let deadline = self.since + last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A connection whose reads mark the tunnel active (each write follows a read).
#[derive(Debug)]
struct Active<T> {
    inner: T,
    activity: Activity,
}

impl<T> Active<T> {
    fn new(inner: T, activity: &Activity) -> Active<T> {
        Active {
            inner,
            activity: activity.clone(),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Active<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.progressed();
        }
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Active<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn silence_is_measured_from_the_last_byte() {
        let activity = Activity::new();
        let idle = Duration::from_secs(10);
        tokio::time::advance(Duration::from_secs(6)).await;
        activity.progressed();
        let started = Instant::now();
        activity.silent_for(idle).await;
        assert_eq!(
            started.elapsed(),
            idle,
            "10 s after the last byte, not the start"
        );
        // A copy through the wrapper is activity.
        let (near, mut far) = tokio::io::duplex(64);
        let mut near = Active::new(near, &activity);
        tokio::time::advance(Duration::from_secs(4)).await;
        tokio::io::AsyncWriteExt::write_all(&mut far, b"x")
            .await
            .unwrap();
        let mut byte = [0u8; 1];
        tokio::io::AsyncReadExt::read_exact(&mut near, &mut byte)
            .await
            .unwrap();
        let read_at = Instant::now();
        activity.silent_for(idle).await;
        assert_eq!(read_at.elapsed(), idle);
    }
}
