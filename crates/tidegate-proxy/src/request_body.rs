//! A request body on its way to the upstream, remembering how the client's side of it went.
//!
//! When an exchange fails, the proxy must know whose fault it was. A malformed chunked body
//! or an upload the client cuts off makes the upstream exchange fail too (hyper stops writing
//! and the upstream sees half a request), and blamed on the upstream it was a dropped sample
//! and a strike toward ejection: a few bad clients ejected a healthy upstream. This body
//! records whether the client's bytes ended, broke, or are still coming, so that the handler
//! can tell a client's failure from the upstream's, whichever error the exchange reports.
//!
//! Only a request with a body carries the shared state: a bodiless request (most of them)
//! allocates nothing.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

const SENDING: u8 = 0;
const COMPLETE: u8 = 1;
const BROKEN: u8 = 2;

/// The client's side of a request body, shared between the body and the request's handler.
#[derive(Clone, Debug, Default)]
pub(crate) struct BodyState(Option<Arc<AtomicU8>>);

impl BodyState {
    /// The client's body failed: malformed, or the client went away before its end.
    pub(crate) fn broken(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Acquire) == BROKEN)
    }

    /// The client has not finished sending its body: an upstream that timed out may have
    /// been waiting for it.
    pub(crate) fn incomplete(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Acquire) == SENDING)
    }

    fn set(&self, state: u8) {
        if let Some(shared) = &self.0 {
            shared.store(state, Ordering::Release);
        }
    }
}

/// The client's request body as sent upstream.
#[derive(Debug)]
pub(crate) struct RequestBody {
    inner: Incoming,
    state: BodyState,
}

impl RequestBody {
    /// Wraps `inner`; the state is for the handler.
    pub(crate) fn new(inner: Incoming) -> (RequestBody, BodyState) {
        let state = if inner.is_end_stream() {
            BodyState(None)
        } else {
            BodyState(Some(Arc::new(AtomicU8::new(SENDING))))
        };
        (
            RequestBody {
                inner,
                state: state.clone(),
            },
            state,
        )
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            None => this.state.set(COMPLETE),
            Some(Err(_)) => this.state.set(BROKEN),
            Some(Ok(_)) if this.inner.is_end_stream() => this.state.set(COMPLETE),
            Some(Ok(_)) => {}
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
