//! What the origin's loopback tests share: an origin started on port 0, and one GET on its
//! own connection.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]
#![allow(dead_code, reason = "each test binary uses a part of the helpers")]

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use tidegate_lab::origin::{Origin, OriginConfig};
use tokio::sync::oneshot;

/// A running origin; stops when dropped.
pub(crate) struct Running {
    pub(crate) addr: SocketAddr,
    /// Each instance's own address (the front's when there is one instance).
    pub(crate) instances: Vec<SocketAddr>,
    _stop: oneshot::Sender<()>,
}

pub(crate) async fn start(config: OriginConfig) -> Running {
    let origin = Origin::bind(config).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let running = Running {
        addr: origin.addr(),
        instances: origin.instance_addrs(),
        _stop: stop,
    };
    tokio::spawn(origin.run(async {
        let _ = stopped.await;
    }));
    running
}

/// One GET on its own connection, with `send` (a header name and value) unless its value is
/// empty: the status, the response's header `read`, and the body.
pub(crate) async fn get(
    addr: SocketAddr,
    path: &str,
    send: (&str, &str),
    read: &str,
) -> (StatusCode, Option<String>, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get(path).header("host", addr.to_string());
    if !send.1.is_empty() {
        request = request.header(send.0, send.1);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let read = response
        .headers()
        .get(read)
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, read, String::from_utf8_lossy(&body).into_owned())
}
