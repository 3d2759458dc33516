//! A response body that holds the request's permit until its last byte.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tidegate_core::limit::Outcome;

use crate::Permit;

pin_project! {
    /// Wraps a response body and releases the permit when the body ends: with the response's
    /// outcome when its last frame is sent, as dropped if the body fails, as cancelled if the
    /// body is dropped before its end (the client went away).
    pub struct PermitBody<B> {
        #[pin]
        inner: B,
        permit: Option<Permit>,
        outcome: Outcome,
    }
}

impl<B: Body> PermitBody<B> {
    pub(crate) fn new(inner: B, permit: Option<Permit>, outcome: Outcome) -> PermitBody<B> {
        let mut body = PermitBody {
            inner,
            permit,
            outcome,
        };
        // A body that is already over (empty) may never be polled.
        if body.inner.is_end_stream()
            && let Some(permit) = body.permit.take()
        {
            permit.release(Some(outcome));
        }
        body
    }
}

impl<B: Body> Body for PermitBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let frame = std::task::ready!(this.inner.as_mut().poll_frame(cx));
        let end = match &frame {
            None => Some(*this.outcome),
            Some(Err(_)) => Some(Outcome::Dropped),
            // Hyper stops polling once the body says it is over, and drops it: the last
            // frame is the end.
            Some(Ok(_)) if this.inner.is_end_stream() => Some(*this.outcome),
            Some(Ok(_)) => None,
        };
        if let Some(outcome) = end
            && let Some(permit) = this.permit.take()
        {
            permit.release(Some(outcome));
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> fmt::Debug for PermitBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitBody")
            .field("permit", &self.permit)
            .field("outcome", &self.outcome)
            .finish()
    }
}
