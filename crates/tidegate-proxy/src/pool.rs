//! Keep-alive connections to one upstream.
//!
//! A pool per upstream, on hyper's connection API rather than a general-purpose client: the
//! proxy knows its upstreams at startup, so there is no pool key to hash, no URI to take apart
//! and no boxed future per request. HTTP/1.1 connections carry one exchange at a time: one is
//! taken from the idle stack (most recently used first, so that a few connections stay warm
//! and the rest age out), and goes back when its response body has ended, which only the
//! proxy's response body sees. With `http2`, one multiplexed connection is shared.
//!
//! A request whose connection turns out to be closed before the request was written (the
//! upstream closed an idle keep-alive connection just then) is sent again on a new
//! connection: it never reached the upstream, so this is safe for any method.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;

use crate::metrics::ErrorKind;
use crate::request_body::RequestBody;
use crate::timed::{Stamps, TimedStream};
use crate::tls;

/// A connection to an upstream, over TLS for an `https://` one.
type Upstream = tls::Stream<TimedStream, tokio_rustls::client::TlsStream<TimedStream>>;

/// How to reach an upstream and how long to keep its connections.
#[derive(Debug)]
pub(crate) struct PoolConfig {
    /// `host:port`, resolved on each new connection.
    pub(crate) address: String,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_idle: usize,
    pub(crate) http2: bool,
    /// TLS to an `https://` upstream.
    pub(crate) tls: Option<tls::Connector>,
}

/// An upstream's connections.
#[derive(Debug)]
pub(crate) struct Pool {
    config: PoolConfig,
    /// HTTP/1.1 connections ready for a request, the most recently used last.
    idle: Mutex<VecDeque<Idle>>,
    /// The shared HTTP/2 connection.
    shared: Mutex<Option<http2::SendRequest<RequestBody>>>,
    /// Held while an HTTP/2 connection is being made, so that concurrent requests wait for
    /// it instead of each making one.
    connecting: tokio::sync::Mutex<()>,
    clock: quanta::Clock,
}

#[derive(Debug)]
struct Idle {
    connection: Http1,
    since: quanta::Instant,
}

/// An HTTP/1.1 connection: the handle that sends on it, and its exchange's times.
#[derive(Debug)]
pub(crate) struct Http1 {
    sender: http1::SendRequest<RequestBody>,
    stamps: Arc<Stamps>,
}

/// A connection lent to one exchange. HTTP/1.1 connections go back to the pool with
/// [`Pool::put`] once the response has been read to its end; dropped, they close.
#[derive(Debug)]
pub(crate) enum Lent {
    Http1(Http1),
    Http2,
}

impl Lent {
    /// What the upstream took with the exchange so far: from its request's first write to
    /// the arrival of the answer's latest bytes ([`crate::timed`]). `None` on a shared
    /// HTTP/2 connection, which carries other exchanges at once.
    pub(crate) fn upstream_time(&self) -> Option<Duration> {
        match self {
            Lent::Http1(connection) => connection.stamps.upstream_time(),
            Lent::Http2 => None,
        }
    }
}

/// Why an exchange failed.
#[derive(Debug)]
pub(crate) struct SendError {
    pub(crate) kind: ErrorKind,
}

impl Pool {
    pub(crate) fn new(config: PoolConfig) -> Pool {
        Pool {
            config,
            idle: Mutex::new(VecDeque::new()),
            shared: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            clock: quanta::Clock::new(),
        }
    }

    /// Whether requests go over the shared HTTP/2 connection ([`Pool::send_http2`]) rather
    /// than pooled HTTP/1.1 ones ([`Pool::send_http1`]). The two are apart so that each
    /// request's future is the size of its own protocol's path: one for both would be the
    /// size of the larger, copied whole on every request (docs/performance.md, "The forward
    /// path at parity").
    pub(crate) fn http2(&self) -> bool {
        self.config.http2
    }

    /// Sends `request` on a pooled HTTP/1.1 connection (a new one if none is idle) and waits
    /// for the response's head. The connection comes back with the response, to return with
    /// [`Pool::put`] when its body has ended.
    ///
    /// The pool comes by an owner of it (`pool`, the upstream's `Arc`), so that the future
    /// owns what it borrows and can be boxed as it is: built inside an `async` block that
    /// owns the upstream instead, it would sit beside the request the block captured (a
    /// block's captures keep their room), 1,056 bytes in all, past the allocator's cache of
    /// small blocks (`tcache`, up to 1,032), and each request paid a full `malloc` and `free`
    /// for it (docs/performance.md, "The forward path at parity").
    pub(crate) async fn send_http1<P: std::ops::Deref<Target = Pool>>(
        pool: P,
        request: Request<RequestBody>,
    ) -> Result<(Response<Incoming>, Lent), SendError> {
        let this: &Pool = &pool;
        let mut request = request;
        // Idle connections first; a request refused unsent by a stale one goes on to the
        // next, then to a new connection.
        loop {
            let (mut connection, reused) = match this.take_idle() {
                Some(connection) => (connection, true),
                // Boxed: a new connection is rare, and its future (the TCP connect, a TLS
                // handshake) would otherwise make this one several times larger, copied
                // whole on every request (docs/performance.md, "The forward path at parity").
                None => (Box::pin(this.connect_http1()).await?, false),
            };
            connection.stamps.start();
            match connection.sender.try_send_request(request).await {
                Ok(response) => return Ok((response, Lent::Http1(connection))),
                Err(mut error) => match error.take_message() {
                    Some(unsent) if reused => request = unsent,
                    _ => {
                        return Err(SendError {
                            kind: kind_of(&error.into_error()),
                        });
                    }
                },
            }
        }
    }

    /// Returns a connection whose exchange has ended.
    pub(crate) fn put(&self, lent: Lent) {
        let Lent::Http1(connection) = lent else {
            return;
        };
        if connection.sender.is_closed() || self.config.max_idle == 0 {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() >= self.config.max_idle {
            idle.pop_front();
        }
        idle.push_back(Idle {
            connection,
            since: self.clock.now(),
        });
    }

    /// The most recently used idle connection that is still open, dropping those that were
    /// closed or idle too long.
    fn take_idle(&self) -> Option<Http1> {
        let now = self.clock.now();
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        // The oldest ages out first: most are taken from the other end.
        while idle
            .front()
            .is_some_and(|c| now.saturating_duration_since(c.since) > self.config.idle_timeout)
        {
            idle.pop_front();
        }
        for _ in 0..idle.len() {
            let Some(idle_one) = idle.pop_back() else {
                break;
            };
            if idle_one.connection.sender.is_ready() {
                return Some(idle_one.connection);
            }
            // Open but not ready: its task is still finishing the last exchange (on another
            // thread). It goes to the cold end rather than being closed.
            if !idle_one.connection.sender.is_closed() {
                idle.push_front(idle_one);
            }
        }
        None
    }

    /// Whether a TCP connection to the upstream can be made now (it is closed at once).
    pub(crate) async fn reachable(&self) -> bool {
        self.connect(Arc::default()).await.is_ok()
    }

    /// A new connection, its TLS handshake included, within `connect_timeout`, its
    /// exchanges timed in `stamps`. A failed handshake (a certificate that does not verify)
    /// is a connection failure.
    async fn connect(&self, stamps: Arc<Stamps>) -> Result<TokioIo<Upstream>, SendError> {
        let connecting = async {
            let stream = TcpStream::connect(self.config.address.as_str()).await?;
            let _ = stream.set_nodelay(true);
            let stream = TimedStream::new(stream, stamps);
            Ok::<_, std::io::Error>(match &self.config.tls {
                None => tls::Stream::Plain(stream),
                Some(tls) => tls::Stream::Tls(Box::new(tls.connect(stream).await?)),
            })
        };
        match tokio::time::timeout(self.config.connect_timeout, connecting).await {
            Ok(Ok(stream)) => Ok(TokioIo::new(stream)),
            Ok(Err(_)) | Err(_) => Err(SendError {
                kind: ErrorKind::Connect,
            }),
        }
    }

    async fn connect_http1(&self) -> Result<Http1, SendError> {
        let stamps = Arc::new(Stamps::default());
        let io = self.connect(stamps.clone()).await?;
        let (sender, connection) = http1::Builder::new()
            .writev(false)
            .handshake(io)
            .await
            .map_err(|e| SendError { kind: kind_of(&e) })?;
        // The connection's own task reads and writes the socket; it ends when the upstream
        // closes it, every sender is gone, or it hands the socket over after a `101`.
        tokio::spawn(async move {
            let _ = connection.with_upgrades().await;
        });
        Ok(Http1 { sender, stamps })
    }

    /// Sends `request` on the shared HTTP/2 connection (made if there is none).
    pub(crate) async fn send_http2(
        &self,
        request: Request<RequestBody>,
    ) -> Result<(Response<Incoming>, Lent), SendError> {
        let (mut sender, reused) = match self.shared_http2() {
            Some(sender) => (sender, true),
            None => {
                let _connecting = self.connecting.lock().await;
                match self.shared_http2() {
                    // Made while this request waited.
                    Some(sender) => (sender, false),
                    None => (Box::pin(self.connect_http2()).await?, false),
                }
            }
        };
        let mut error = match sender.try_send_request(request).await {
            Ok(response) => return Ok((response, Lent::Http2)),
            Err(error) => error,
        };
        match error.take_message() {
            // The shared connection was going away: once more on a new one.
            Some(unsent) if reused => {
                let mut fresh = Box::pin(self.connect_http2()).await?;
                match fresh.try_send_request(unsent).await {
                    Ok(response) => Ok((response, Lent::Http2)),
                    Err(error) => Err(SendError {
                        kind: kind_of(&error.into_error()),
                    }),
                }
            }
            _ => Err(SendError {
                kind: kind_of(&error.into_error()),
            }),
        }
    }

    fn shared_http2(&self) -> Option<http2::SendRequest<RequestBody>> {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|s| !s.is_closed())
            .cloned()
    }

    async fn connect_http2(&self) -> Result<http2::SendRequest<RequestBody>, SendError> {
        // Many exchanges at once share it: its stamps time none of them.
        let io = self.connect(Arc::default()).await?;
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .handshake(io)
            .await
            .map_err(|e| SendError { kind: kind_of(&e) })?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender.clone());
        Ok(sender)
    }
}

/// Which kind of upstream failure a hyper error is.
pub(crate) fn kind_of(error: &hyper::Error) -> ErrorKind {
    if error.is_timeout() {
        return ErrorKind::Timeout;
    }
    if error.is_incomplete_message() || error.is_canceled() || error.is_closed() {
        return ErrorKind::Reset;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as Io;
            return match io.kind() {
                Io::ConnectionReset
                | Io::ConnectionAborted
                | Io::BrokenPipe
                | Io::UnexpectedEof => ErrorKind::Reset,
                Io::TimedOut => ErrorKind::Timeout,
                _ => ErrorKind::Protocol,
            };
        }
        if let Some(h2) = cause.downcast_ref::<hyper::Error>()
            && (h2.is_incomplete_message() || h2.is_closed())
        {
            return ErrorKind::Reset;
        }
        source = cause.source();
    }
    ErrorKind::Protocol
}
