//! A timer for "no progress for this long", for I/O that usually progresses at once: made on
//! the first wait and reused, and armed only while a wait lasts, so that the common case (a
//! frame or a write ready when asked) costs nothing. The response body uses it for an
//! upstream silent mid-body, the client connections for a client that stopped reading.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

#[derive(Debug, Default)]
pub(crate) struct Stall {
    timer: Option<Pin<Box<Sleep>>>,
    /// Whether `timer` runs for the wait under way.
    armed: bool,
}

impl Stall {
    /// The operation waits: starts the timer if this wait has not, and polls it. Ready once
    /// `timeout` has passed since the wait began.
    pub(crate) fn poll_waiting(&mut self, cx: &mut Context<'_>, timeout: Duration) -> Poll<()> {
        if !self.armed {
            let deadline = tokio::time::Instant::now() + timeout;
            match &mut self.timer {
                Some(timer) => timer.as_mut().reset(deadline),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.armed = true;
        }
        match &mut self.timer {
            Some(timer) => timer.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }

    /// The operation progressed: the next wait starts afresh.
    pub(crate) fn progressed(&mut self) {
        self.armed = false;
    }
}
