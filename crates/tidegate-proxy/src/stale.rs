//! Connections that waited too long for the proxy are closed unread.
//!
//! When the proxy itself is the bottleneck (a fast upstream, more requests than its CPU can
//! forward), the queue that forms is not the gate's: new connections wait in the kernel's
//! accept backlog, then as tasks in the runtime's run queue, in arrival order. Served in that
//! order, every request is served late, and past the clients' patience the proxy spends all of
//! its CPU on requests whose clients have given up (docs/performance.md, "The proxy-bound
//! overload": every proxy, nginx included, forwarded 1-31% of its maximum at twice it).
//!
//! A connection whose first turn comes more than `connections.stale_after` after it was
//! accepted has waited behind that queue: it is closed before anything is read from it (the
//! kernel answers the unread request with a reset), which costs the proxy a close instead of
//! a request head parsed and an answer, and tells the client at once rather than after its
//! timeout. What the proxy then spends its turns on is the connections that are still fresh.
//!
//! The age is measured from the accept, in user space (one clock read per connection): the
//! wait in the run queue, not the wait in the accept backlog before it, which only the kernel
//! knows (`TCP_INFO`, receive timestamps: a system call or an unsafe socket option per
//! connection). The accept loop is one task, and under a flood it accepts a turn's worth of
//! connections each time it runs, so the two waits are alike: the threshold sees about half
//! of a connection's age. Requests on kept-alive connections are not aged: their wait is in
//! their socket, invisible without a system call per request.

use std::future::Future;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

/// Runs `serve` unless it starts more than `stale_after` after `accepted` (`None`: never
/// stale); a stale connection is dropped unpolled, with its socket, and counted in `closed`.
pub(crate) async fn unless_stale(
    accepted: Instant,
    stale_after: Option<Duration>,
    closed: Counter,
    serve: impl Future<Output = ()>,
) {
    if let Some(stale_after) = stale_after
        && accepted.elapsed() > stale_after
    {
        closed.inc();
        return;
    }
    serve.await;
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test setup: a failure is the test's failure"
    )]

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    /// What a client that sent a request head gets back from a connection served through
    /// `unless_stale`, the connection having waited `waited` since its accept.
    async fn client_gets(waited: Duration, stale_after: Option<Duration>) -> (Vec<u8>, u64) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let (mut stream, _) = listener.accept().await.unwrap();
        let accepted = Instant::now();
        tokio::time::advance(waited).await;
        let closed = Counter::default();
        let serve = async move {
            let mut head = [0u8; 18];
            stream.read_exact(&mut head).await.unwrap();
            stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").await.unwrap();
        };
        unless_stale(accepted, stale_after, closed.clone(), serve).await;
        let mut answer = Vec::new();
        // Closed unread, the connection is reset: what arrived before it is the answer.
        let _ = client.read_to_end(&mut answer).await;
        (answer, closed.get())
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_waited_past_the_bound_is_closed_unanswered() {
        let bound = Some(Duration::from_millis(500));
        let (answer, closed) = client_gets(Duration::from_millis(501), bound).await;
        assert!(answer.is_empty(), "answered: {answer:?}");
        assert_eq!(closed, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fresh_connection_or_no_bound_is_served() {
        let bound = Some(Duration::from_millis(500));
        let (answer, closed) = client_gets(Duration::from_millis(500), bound).await;
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(closed, 0);
        let (answer, closed) = client_gets(Duration::from_secs(60), None).await;
        assert_eq!(answer, b"HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(closed, 0);
    }
}
