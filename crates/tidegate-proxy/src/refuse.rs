//! Requests refused before they reach a gate, answered at once: forwarded, each would hang or
//! be read differently by the proxy and the upstream.
//!
//! - `CONNECT` asks for a tunnel, which a reverse proxy does not make: forwarded as
//!   `CONNECT /`, the client waited for a tunnel that never came. `501`.
//! - Two `Host` fields (RFC 9112 section 3.2: "a server MUST respond with a 400") leave it to
//!   each reader to pick one: the proxy could route by one and the upstream serve the other.
//!
//! (`Content-Length` beside `Transfer-Encoding` needs nothing here: hyper reads such a body as
//! chunked, drops the length and closes the connection after the answer, as RFC 9112 section
//! 6.1 requires, so that nothing after the body, a smuggled request, is served.)
//!
//! Each refusal over HTTP/1 closes its connection (`Connection: close`).
//!
//! They are counted in the duration histogram as `upstream="none", class="refused"`, so that
//! every request still ends in one counted outcome.

use http::header::HOST;
use http::{Method, Request, StatusCode};

/// The status a request is refused with, or `None` to serve it.
pub(crate) fn refusal<B>(request: &Request<B>) -> Option<StatusCode> {
    if request.method() == Method::CONNECT {
        return Some(StatusCode::NOT_IMPLEMENTED);
    }
    let mut hosts = request.headers().get_all(HOST).iter();
    if hosts.next().is_some() && hosts.next().is_some() {
        return Some(StatusCode::BAD_REQUEST);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method, hosts: &[&str]) -> Request<()> {
        let mut builder = Request::builder().method(method).uri("/");
        for host in hosts {
            builder = builder.header(HOST, *host);
        }
        builder.body(()).unwrap_or_default()
    }

    #[test]
    fn connect_and_two_hosts_are_refused_and_the_rest_served() {
        assert_eq!(
            refusal(&request(Method::CONNECT, &["a:443"])),
            Some(StatusCode::NOT_IMPLEMENTED)
        );
        assert_eq!(
            refusal(&request(Method::GET, &["a", "b"])),
            Some(StatusCode::BAD_REQUEST)
        );
        assert_eq!(
            refusal(&request(Method::GET, &["a", "a"])),
            Some(StatusCode::BAD_REQUEST)
        );
        assert_eq!(refusal(&request(Method::GET, &["a"])), None);
        assert_eq!(refusal(&request(Method::POST, &[])), None);
        assert_eq!(refusal(&request(Method::OPTIONS, &["a"])), None);
    }
}
