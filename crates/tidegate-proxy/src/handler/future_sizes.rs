//! The request path's futures are moved by value several times before they are first polled
//! (into hyper's dispatcher, through each `async` layer that awaits them), and each move
//! copies the whole future: its size is paid per request, in `memcpy`. These tests print the
//! sizes (`cargo test -p tidegate-proxy future_sizes -- --nocapture`) and hold the request's
//! future and its exchange's under a bound, so that a rarely taken path that would grow them
//! is boxed instead (docs/performance.md, "The forward path at parity").

use std::mem::size_of;

use super::{AtUpstream, handle};
use crate::pool::Pool;
use crate::request_body::RequestBody;
use hyper::client::conn::http1::SendRequest;

/// The size of what `f` returns, without calling it.
fn returned<F, A, B, C, R>(_: F) -> usize
where
    F: FnOnce(A, B, C) -> R,
{
    size_of::<R>()
}

fn returned2<F, A, B, R>(_: F) -> usize
where
    F: FnOnce(A, B) -> R,
{
    size_of::<R>()
}

#[test]
fn future_sizes() {
    let sizes = [
        ("handle", returned(handle)),
        ("AtUpstream", size_of::<AtUpstream>()),
        (
            "Pool::send_http1",
            returned2(Pool::send_http1::<super::PoolOf>),
        ),
        ("Pool::send_http2", returned2(Pool::send_http2)),
        (
            "try_send_request",
            returned2(SendRequest::<RequestBody>::try_send_request),
        ),
        (
            "the HTTP/1.1 exchange, boxed",
            returned(super::exchange_http1),
        ),
        ("Acquire", size_of::<tidegate_tower::Acquire>()),
        ("Completion", size_of::<super::Completion>()),
        (
            "Request<Incoming>",
            size_of::<http::Request<hyper::body::Incoming>>(),
        ),
    ];
    for (name, size) in sizes {
        eprintln!("{name}: {size} bytes");
    }
    // In a debug build (the tests'): 2,112 and 3,152 bytes before the connects and the HTTP/2
    // path were boxed apart and `send` stopped being `async`; 1,320 and 624 after.
    let (handle, http1, boxed) = (sizes[0].1, sizes[2].1, sizes[5].1);
    // glibc's cache of freed blocks (`tcache`) takes requests up to 1,032 bytes; a larger
    // box costs a full `malloc` and `free` per request (1,056 bytes before the exchange owned
    // its pool through the upstream, [`crate::pool::Pool::send_http1`]).
    assert!(
        boxed <= 1_032,
        "the boxed HTTP/1.1 exchange grew to {boxed} bytes"
    );
    assert!(
        handle <= 1_536,
        "the request's future grew to {handle} bytes"
    );
    assert!(
        http1 <= 1_024,
        "an HTTP/1.1 exchange's future grew to {http1} bytes"
    );
}
