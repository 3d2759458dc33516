//! Client connections, each within bounds a hostile client cannot stretch: how many may be
//! open, how long one may take to send a request head, how long a write to it may stay
//! blocked, how large its heads may be, and HTTP/2's stream and reset limits, all set here
//! rather than inherited from the libraries' defaults.
//!
//! - **Count.** Past `connections.max`, a new connection is closed at once, before any read:
//!   an idle-connection flood costs one accept each.
//! - **First request.** A connection has `header_read_timeout` to send its first request
//!   head, whatever the protocol: hyper's own header timeout starts only once HTTP/1.1 is
//!   recognised, and a client trickling the HTTP/2 preface (or nothing) was held forever.
//!   For HTTP/1.1 the same timeout then bounds each later head and every idle keep-alive
//!   wait (hyper's).
//! - **Writes.** A client that stops reading its response fills the socket's buffers, and
//!   its request then holds its gate slot for as long as it likes: twenty such connections
//!   starved everyone else. A write blocked for `write_timeout` closes the connection, which
//!   frees the slot (counted as cancelled).
//! - **HTTP/2.** An HTTP/2 connection with no stream open for `idle_timeout` is shut down
//!   (GOAWAY), and one whose client leaves a response waiting for its flow-control window for
//!   `write_timeout` is closed as a blocked write would close it (`crate::http2_watch`). One
//!   that sends nothing for `http2_keep_alive_interval` gets a PING, and is closed if it has
//!   not answered within `write_timeout`: a client gone without a word no longer holds its
//!   open streams.
//! - **Heads and HTTP/2 limits.** Heads past `max_header_bytes` get 431 (HTTP/1.1) or a reset
//!   (HTTP/2, which also bounds CONTINUATION floods); HTTP/2 connections carry at most
//!   `http2_max_concurrent_streams` streams, and the rapid-reset limits are explicit.
//!
//! `tidegate_client_connections` and `tidegate_client_connections_closed_total{reason}` show
//! them at work.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use tidegate_core::Nanos;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::accept::{AtMax, Slot, Slots};
use crate::checks;
use crate::handler::{self, Shared};
use crate::http2_watch::{Http2Watch, Verdict, Watched};
use crate::stall::Stall;
use crate::tls;
use crate::trust::Peer;

/// The bounds of client connections (`[connections]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionsConfig {
    /// Client connections open at once; past it new ones are closed at once.
    pub max: usize,
    /// Time a connection has to send its first request head, and (HTTP/1.1) each later head
    /// and every idle keep-alive wait. The admin listener's heads too.
    pub header_read_timeout: Nanos,
    /// Longest a write to a client may stay blocked (the client not reading); then the
    /// connection is closed and its requests' slots freed.
    pub write_timeout: Nanos,
    /// How long an HTTP/2 connection may stay with no stream open before it is shut down
    /// (GOAWAY, then closed). HTTP/1.1's idle wait is `header_read_timeout`.
    #[serde(deserialize_with = "checks::positive_duration")]
    pub idle_timeout: Nanos,
    /// How long an HTTP/2 client may send nothing before it gets a PING, which it must answer
    /// within `write_timeout` or lose the connection.
    #[serde(deserialize_with = "checks::positive_duration")]
    pub http2_keep_alive_interval: Nanos,
    /// Largest request head: past it 431 (HTTP/1.1) or a stream reset (HTTP/2). At least
    /// 8192.
    #[serde(deserialize_with = "checks::header_bytes")]
    pub max_header_bytes: usize,
    /// Most header fields in an HTTP/1.1 request.
    pub max_headers: usize,
    /// Streams an HTTP/2 client may have open at once on one connection.
    pub http2_max_concurrent_streams: u32,
    /// Streams an HTTP/2 client may reset before the proxy has accepted them (the rapid-reset
    /// attack, CVE-2023-44487); past it the connection is closed.
    pub http2_max_pending_accept_reset_streams: usize,
    /// Streams the proxy may reset for a client's protocol errors before closing the
    /// connection.
    pub http2_max_local_error_reset_streams: usize,
    /// Past `max`: `close` accepts a new connection and closes it at once; `wait` accepts
    /// none until one closes, and they wait in the kernel's backlog (`crate::accept`).
    pub at_max: AtMax,
    /// The listener's accept backlog: connections the kernel holds for the proxy to accept.
    /// Past it the kernel drops new handshakes (the clients retry).
    pub backlog: u32,
}

impl Default for ConnectionsConfig {
    fn default() -> ConnectionsConfig {
        ConnectionsConfig {
            max: 10_000,
            header_read_timeout: Nanos::from_secs(30),
            write_timeout: Nanos::from_secs(30),
            idle_timeout: Nanos::from_secs(60),
            http2_keep_alive_interval: Nanos::from_secs(30),
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            http2_max_concurrent_streams: 128,
            http2_max_pending_accept_reset_streams: 20,
            http2_max_local_error_reset_streams: 1024,
            at_max: AtMax::Close,
            backlog: 1024,
        }
    }
}

type Labels = Vec<(&'static str, &'static str)>;

/// Why the proxy closed a client connection itself.
#[derive(Clone, Copy, Debug)]
enum Closed {
    /// Over `connections.max`.
    Refused,
    /// No request head within `header_read_timeout` (the first, or a later one over
    /// HTTP/1.1).
    FirstRequest,
    /// A write blocked past `write_timeout`, or an HTTP/2 response left waiting for its
    /// flow-control window as long.
    Write,
    /// An HTTP/2 connection with no stream open for `idle_timeout`.
    Idle,
    /// An HTTP/2 client that did not answer a keep-alive PING within `write_timeout`.
    Ping,
}

impl Closed {
    fn as_str(self) -> &'static str {
        match self {
            Closed::Refused => "max_connections",
            Closed::FirstRequest => "header_timeout",
            Closed::Write => "write_timeout",
            Closed::Idle => "idle_timeout",
            Closed::Ping => "ping_timeout",
        }
    }
}

/// Serves client connections within their bounds.
#[derive(Debug)]
pub(crate) struct Connections {
    builder: auto::Builder<TokioExecutor>,
    max: i64,
    pub(crate) header_read_timeout: Duration,
    write_timeout: Duration,
    idle_timeout: Duration,
    open: Gauge,
    /// By [`Closed`].
    closed: [Counter; 5],
    slots: Slots,
    /// TLS termination, when `[tls]` has a certificate.
    tls: Option<tls::Listener>,
}

impl Connections {
    pub(crate) fn new(
        config: &ConnectionsConfig,
        http2: bool,
        tls: Option<tls::Listener>,
        registry: &mut Registry,
    ) -> Connections {
        let header_read_timeout = Duration::from(config.header_read_timeout);
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            .writev(false)
            .max_buf_size(config.max_header_bytes)
            .max_headers(config.max_headers);
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(config.http2_max_concurrent_streams)
            .max_header_list_size(u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX))
            .max_pending_accept_reset_streams(config.http2_max_pending_accept_reset_streams)
            .max_local_error_reset_streams(config.http2_max_local_error_reset_streams)
            .keep_alive_interval(Duration::from(config.http2_keep_alive_interval))
            .keep_alive_timeout(Duration::from(config.write_timeout));
        if !http2 {
            builder = builder.http1_only();
        }
        let open = Gauge::default();
        let closed = Family::<Labels, Counter>::default();
        registry.register(
            "tidegate_client_connections",
            "Client connections open",
            open.clone(),
        );
        registry.register(
            "tidegate_client_connections_closed",
            "Client connections the proxy closed itself, by reason: max_connections (refused at once), header_timeout (no request head in time), write_timeout (the client stopped reading, or left an HTTP/2 response without window), idle_timeout (an HTTP/2 connection with no stream open), ping_timeout (an HTTP/2 client that did not answer a keep-alive PING)",
            closed.clone(),
        );
        let closed = [
            Closed::Refused,
            Closed::FirstRequest,
            Closed::Write,
            Closed::Idle,
            Closed::Ping,
        ]
        .map(|reason| {
            closed
                .get_or_create(&vec![("reason", reason.as_str())])
                .clone()
        });
        Connections {
            builder,
            max: i64::try_from(config.max).unwrap_or(i64::MAX),
            header_read_timeout,
            write_timeout: Duration::from(config.write_timeout),
            idle_timeout: Duration::from(config.idle_timeout),
            open,
            closed,
            slots: Slots::new(config.at_max, config.max),
            tls,
        }
    }

    /// The next connection, once `at_max` lets one in, with its slot.
    pub(crate) async fn accept(
        &self,
        listener: &TcpListener,
    ) -> (io::Result<(TcpStream, SocketAddr)>, Slot) {
        self.slots.accept(listener).await
    }

    /// `tidegate_client_connections`, which an upgraded connection keeps counting in (and
    /// against `connections.max`) after hyper has handed it over (`crate::upgrade`).
    pub(crate) fn open_gauge(&self) -> Gauge {
        self.open.clone()
    }

    fn close(&self, why: Closed) {
        self.closed[why as usize].inc();
    }

    /// Serves one client connection, or closes it at once when `connections.max` are open.
    /// `drain` changes when the proxy shuts down: the connection then finishes what it has
    /// and closes (it holds `drain` until then, which the shutdown waits for).
    pub(crate) async fn serve(
        self: Arc<Self>,
        stream: TcpStream,
        shared: Arc<Shared>,
        client: Peer,
        mut drain: watch::Receiver<()>,
    ) {
        if self.open.inc() >= self.max {
            self.open.dec();
            self.close(Closed::Refused);
            return;
        }
        let _open = Open(&self.open);
        let _ = stream.set_nodelay(true);
        let asked = Arc::new(AtomicBool::new(false));
        let streams = Http2Watch::new();
        let service = service_fn({
            let asked = asked.clone();
            let streams = streams.clone();
            move |request: hyper::Request<hyper::body::Incoming>| {
                asked.store(true, Ordering::Relaxed);
                let stream = streams.opened(request.version());
                // A map rather than an `async` block around it: the block would hold the
                // request's future twice (captured, then awaited), and hyper moves it whole.
                handler::handle(shared.clone(), client.clone(), request).map(|response| {
                    response.map(|response| response.map(|body| Watched::new(body, stream)))
                })
            }
        });
        // The TLS handshake, if any, is part of the time to the first request head.
        let first_head = tokio::time::Instant::now() + self.header_read_timeout;
        let io = WriteDeadline::new(stream, self.write_timeout);
        let io = match &self.tls {
            None => tls::Stream::Plain(io),
            Some(tls) => match tls.accept(io, first_head).await {
                Some(io) => tls::Stream::Tls(Box::new(io)),
                None => return,
            },
        };
        let io = TokioIo::new(io);
        // With upgrades: a `101` hands the socket to `crate::upgrade`.
        let connection = self.builder.serve_connection_with_upgrades(io, service);
        let mut connection = std::pin::pin!(connection);
        let first_head = tokio::time::sleep_until(first_head);
        let mut first_head = std::pin::pin!(first_head);
        let mut first_head_due = true;
        let watched = streams.run(self.idle_timeout, self.write_timeout);
        let mut watched = std::pin::pin!(watched);
        let mut watching = true;
        let mut draining = false;
        // Once shut down for idling, the time it has to finish (a stream whose data the
        // client never took would hold it).
        let closing = tokio::time::sleep(Duration::MAX);
        let mut closing = std::pin::pin!(closing);
        let mut closing_due = false;
        // A connection error is the client's business (it went away, or spoke something else
        // than HTTP): nothing to do with it but count the proxy's own reasons.
        let result = loop {
            tokio::select! {
                result = &mut connection => break result,
                () = &mut first_head, if first_head_due => {
                    // No request yet: dropping the connection closes it.
                    if !asked.load(Ordering::Relaxed) {
                        self.close(Closed::FirstRequest);
                        return;
                    }
                    first_head_due = false;
                }
                _ = drain.changed(), if !draining => {
                    draining = true;
                    connection.as_mut().graceful_shutdown();
                }
                verdict = &mut watched, if watching => {
                    watching = false;
                    match verdict {
                        Verdict::Stalled => {
                            self.close(Closed::Write);
                            return;
                        }
                        Verdict::Idle => {
                            self.close(Closed::Idle);
                            connection.as_mut().graceful_shutdown();
                            closing
                                .as_mut()
                                .reset(tokio::time::Instant::now() + self.write_timeout);
                            closing_due = true;
                        }
                    }
                }
                () = &mut closing, if closing_due => return,
            }
        };
        if let Err(error) = result {
            if is_write_timeout(error.as_ref()) {
                self.close(Closed::Write);
            } else if error
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_timeout)
            {
                // Over HTTP/2 hyper's only timer is the keep-alive PING's; over HTTP/1.1 it
                // is the header timeout (heads after the first, or a first head whose timer
                // hyper started just before this one).
                self.close(if streams.is_http2() {
                    Closed::Ping
                } else {
                    Closed::FirstRequest
                });
            }
        }
    }
}

/// Counts a connection open until dropped.
struct Open<'a>(&'a Gauge);

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Whether a connection ended because a write to the client stayed blocked too long.
fn is_write_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        // `io::Error::source` skips the error it wraps: look inside.
        let inner = match error.downcast_ref::<io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => Some(error),
        };
        if inner.is_some_and(|inner| inner.is::<WriteStalled>()) {
            return true;
        }
        cause = error.source();
    }
    false
}

/// A write to the client stayed blocked for the write timeout.
#[derive(Debug, thiserror::Error)]
#[error("the client read nothing for {0:?}")]
struct WriteStalled(Duration);

/// A client socket whose writes fail once one has stayed blocked for `timeout`. The timer
/// runs only while a write is blocked: a client that reads never costs one.
#[derive(Debug)]
struct WriteDeadline {
    inner: TcpStream,
    timeout: Duration,
    stall: Stall,
}

impl WriteDeadline {
    fn new(inner: TcpStream, timeout: Duration) -> WriteDeadline {
        WriteDeadline {
            inner,
            timeout,
            stall: Stall::default(),
        }
    }

    /// The write was blocked: runs the timer, an error once it fired.
    fn blocked(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        match self.stall.poll_waiting(cx, self.timeout) {
            Poll::Ready(()) => {
                let stalled = WriteStalled(self.timeout);
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, stalled)))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn wrote(
        &mut self,
        written: Poll<io::Result<usize>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Pending => self.blocked(cx),
            ready => {
                self.stall.progressed();
                ready
            }
        }
    }
}

impl AsyncRead for WriteDeadline {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for WriteDeadline {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.wrote(written, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.wrote(written, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
