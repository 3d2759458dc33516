//! What happens to a new connection when `connections.max` are open.
//!
//! `close` (the default): it is accepted and closed at once, before any read. Each costs the
//! proxy an accept, a registration with the event loop and a close, about as many system
//! calls as forwarding a request on a kept-alive connection: when the proxy's own CPU is the
//! bottleneck, refusing a flood of new connections this way takes the CPU the open ones need.
//!
//! `wait`: past the maximum the proxy stops accepting. New connections wait in the kernel's
//! accept backlog (`connections.backlog` of them), and past it the kernel drops their
//! handshakes, which the clients retry a second later: a refusal that costs the proxy
//! nothing, as behind nginx's `worker_connections`. With a short backlog a connection that
//! does get in has waited little, so the proxy spends its turns on fresh requests rather
//! than on those whose clients are giving up (docs/performance.md, "The proxy-bound
//! overload").

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// `connections.at_max`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AtMax {
    /// Accept a connection past the maximum and close it at once.
    #[default]
    Close,
    /// Accept none past the maximum: they wait in the kernel's backlog.
    Wait,
}

/// The accepting side of `connections.max`: with [`AtMax::Wait`], one slot per connection
/// open, taken before the accept.
#[derive(Debug)]
pub(crate) struct Slots(Option<Arc<Semaphore>>);

/// A connection's slot, freed when dropped (when the connection's task ends).
pub(crate) type Slot = Option<OwnedSemaphorePermit>;

impl Slots {
    pub(crate) fn new(at_max: AtMax, max: usize) -> Slots {
        Slots(match at_max {
            AtMax::Close => None,
            AtMax::Wait => Some(Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS)))),
        })
    }

    /// The next connection, once there is room for it. Cancel-safe: dropped while waiting,
    /// nothing is accepted and no slot is held.
    pub(crate) async fn accept(
        &self,
        listener: &TcpListener,
    ) -> (io::Result<(TcpStream, SocketAddr)>, Slot) {
        let slot = match &self.0 {
            None => None,
            // The semaphore is never closed.
            Some(slots) => slots.clone().acquire_owned().await.ok(),
        };
        (listener.accept().await, slot)
    }
}

/// Serves a connection, holding its slot until it ends.
pub(crate) async fn holding(slot: Slot, serve: impl Future<Output = ()>) {
    let _slot = slot;
    serve.await;
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "test setup: a failure is the test's failure"
    )]

    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn past_the_maximum_nothing_is_accepted_until_a_slot_is_freed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let slots = Slots::new(AtMax::Wait, 1);
        let _first_client = TcpStream::connect(addr).await.unwrap();
        let (first, slot) = slots.accept(&listener).await;
        assert!(first.is_ok() && slot.is_some());
        let _second_client = TcpStream::connect(addr).await.unwrap();
        // The second is in the backlog, ready to accept, but the one slot is taken.
        let waiting = tokio::time::timeout(Duration::from_secs(60), slots.accept(&listener));
        assert!(waiting.await.is_err(), "accepted past the maximum");
        drop(slot);
        let (second, slot) = slots.accept(&listener).await;
        assert!(second.is_ok() && slot.is_some());
        // With `close`, no slot: every connection is accepted.
        let slots = Slots::new(AtMax::Close, 1);
        let _third_client = TcpStream::connect(addr).await.unwrap();
        let (third, slot) = slots.accept(&listener).await;
        assert!(third.is_ok() && slot.is_none());
    }
}
