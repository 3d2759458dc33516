//! The HTTP/1.1 side: keep-alive connections to one host, and one request's exchange.
//!
//! Connections are raw hyper `http1` connections over tokio TCP streams rather than a
//! pooled client, because the generator needs what a pool hides: a new connection opened the
//! moment a request is due and none is idle (an open-loop generator must never wait for a
//! connection, or it would pace itself by the server), and a connection closed at once when
//! its request times out (an HTTP/1.1 connection with a request outstanding is useless, and
//! keeping it would leak sockets under overload). Each request in flight holds one
//! connection, so the generator's in-flight bound is also its connection bound.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tidegate_core::Nanos;
use tidegate_core::outbound::parse_retry_after;
use tokio::net::TcpStream;
use tokio::task::AbortHandle;

/// The response header a tidegate proxy or tower layer adds when it turns a request away.
pub const SHED_HEADER: &str = "tidegate-shed";

/// Why a request failed, for the report's error breakdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// The origin answered 4xx other than 429.
    Status4xx,
    /// The origin answered 5xx other than 503.
    Status5xx,
    /// Nobody listens at the address.
    ConnectRefused,
    /// Opening the connection failed otherwise (unreachable, out of file descriptors, ...).
    Connect,
    /// The connection closed or was reset before the response ended.
    Closed,
    /// The origin's response was not valid HTTP/1.1.
    Protocol,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Status4xx => "status_4xx",
            ErrorKind::Status5xx => "status_5xx",
            ErrorKind::ConnectRefused => "connect_refused",
            ErrorKind::Connect => "connect",
            ErrorKind::Closed => "closed",
            ErrorKind::Protocol => "protocol",
        }
    }
}

/// As [`ErrorKind::as_str`], the same names in the JSON report as in the text one.
impl Serialize for ErrorKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// How one request ended; every request sent ends in exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// 2xx or 3xx within the timeout.
    Ok { status: u16 },
    /// 429 or 503: turned away; `by_tidegate` when it carries the [`SHED_HEADER`].
    Shed { status: u16, by_tidegate: bool },
    Failed {
        kind: ErrorKind,
        status: Option<u16>,
    },
    /// No complete response within the timeout.
    TimedOut,
}

impl Outcome {
    fn of_status(status: StatusCode, by_tidegate: bool) -> Outcome {
        let code = status.as_u16();
        match code {
            200..=399 => Outcome::Ok { status: code },
            429 | 503 => Outcome::Shed {
                status: code,
                by_tidegate,
            },
            400..=499 => Outcome::Failed {
                kind: ErrorKind::Status4xx,
                status: Some(code),
            },
            500..=599 => Outcome::Failed {
                kind: ErrorKind::Status5xx,
                status: Some(code),
            },
            _ => Outcome::Failed {
                kind: ErrorKind::Protocol,
                status: Some(code),
            },
        }
    }

    fn failed(kind: ErrorKind) -> Outcome {
        Outcome::Failed { kind, status: None }
    }
}

/// An attempt's outcome, with what a retry needs to know of the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) outcome: Outcome,
    /// The response's `Retry-After`, in whole seconds.
    pub(crate) retry_after: Option<Nanos>,
    /// The response's `tidegate-shed` reason.
    pub(crate) shed: Option<HeaderValue>,
}

impl From<Outcome> for Answer {
    fn from(outcome: Outcome) -> Answer {
        Answer {
            outcome,
            retry_after: None,
            shed: None,
        }
    }
}

/// A keep-alive connection; dropping it closes the socket.
#[derive(Debug)]
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    /// The task driving the connection; aborting it closes the socket at once, even with a
    /// request outstanding (after a timeout).
    driver: AbortHandle,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// The idle connections to one host.
#[derive(Debug)]
pub(crate) struct Pool {
    /// The host's addresses, tried in order for each new connection (as curl does, so that
    /// `localhost` works whether the origin listens on ::1 or 127.0.0.1).
    addrs: Vec<SocketAddr>,
    idle: Mutex<Vec<Conn>>,
    /// Connections established so far.
    opened: AtomicU64,
}

impl Pool {
    pub(crate) fn new(addrs: Vec<SocketAddr>) -> Pool {
        Pool {
            addrs,
            idle: Mutex::new(Vec::new()),
            opened: AtomicU64::new(0),
        }
    }

    pub(crate) fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// The most recently used idle connection (warm in every cache on the way).
    fn take_idle(&self) -> Option<Conn> {
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    fn put_back(&self, conn: Conn) {
        if !conn.sender.is_closed() {
            self.idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conn);
        }
    }

    async fn connect(&self) -> Result<Conn, Outcome> {
        let stream = TcpStream::connect(&self.addrs[..]).await.map_err(|e| {
            Outcome::failed(if e.kind() == std::io::ErrorKind::ConnectionRefused {
                ErrorKind::ConnectRefused
            } else {
                ErrorKind::Connect
            })
        })?;
        // Requests are small and latency is what is measured: no Nagle delay.
        stream
            .set_nodelay(true)
            .map_err(|_| Outcome::failed(ErrorKind::Connect))?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|_| Outcome::failed(ErrorKind::Connect))?;
        let driver = tokio::spawn(async move {
            // Its errors reach the request through the response future.
            let _ = connection.await;
        })
        .abort_handle();
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(Conn { sender, driver })
    }

    /// An idle connection that is still usable, or a new one.
    async fn checkout(&self) -> Result<Conn, Outcome> {
        while let Some(mut conn) = self.take_idle() {
            // A connection the origin closed while idle fails here, before anything is sent.
            if conn.sender.ready().await.is_ok() {
                return Ok(conn);
            }
        }
        self.connect().await
    }

    /// Sends `request` and reads the whole response; the connection goes back to the pool
    /// when the exchange completed cleanly.
    pub(crate) async fn exchange(&self, request: Request<Full<Bytes>>) -> Answer {
        let mut conn = match self.checkout().await {
            Ok(conn) => conn,
            Err(outcome) => return outcome.into(),
        };
        let response = match conn.sender.send_request(request).await {
            Ok(response) => response,
            Err(e) if e.is_parse() || e.is_parse_status() || e.is_user() => {
                return Outcome::failed(ErrorKind::Protocol).into();
            }
            Err(_) => return Outcome::failed(ErrorKind::Closed).into(),
        };
        let shed = response.headers().get(SHED_HEADER).cloned();
        let outcome = Outcome::of_status(response.status(), shed.is_some());
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| parse_retry_after(v.as_bytes()));
        // The body must be read to the end before the connection can carry another request;
        // its bytes are not kept.
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                return Outcome::failed(ErrorKind::Closed).into();
            }
        }
        self.put_back(conn);
        Answer {
            outcome,
            retry_after,
            shed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_one_outcome_each() {
        let of =
            |code: u16, tidegate| Outcome::of_status(StatusCode::from_u16(code).unwrap(), tidegate);
        assert_eq!(of(200, false), Outcome::Ok { status: 200 });
        assert_eq!(of(304, false), Outcome::Ok { status: 304 });
        assert_eq!(
            of(503, true),
            Outcome::Shed {
                status: 503,
                by_tidegate: true
            }
        );
        assert_eq!(
            of(429, false),
            Outcome::Shed {
                status: 429,
                by_tidegate: false
            }
        );
        assert_eq!(
            of(404, false),
            Outcome::Failed {
                kind: ErrorKind::Status4xx,
                status: Some(404)
            }
        );
        assert_eq!(
            of(502, true),
            Outcome::Failed {
                kind: ErrorKind::Status5xx,
                status: Some(502)
            }
        );
    }
}
