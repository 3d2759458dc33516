//! Where an upstream is, parsed from its URL once: the configuration's check
//! ([`crate::checks`], `--check`) and the upstream set ([`crate::upstream`]) both read it, so
//! it lives apart from either.

use http::HeaderValue;
use http::uri::{Authority, PathAndQuery, Scheme, Uri};

use crate::error::Error;

/// Where an upstream is: scheme, authority and an optional path prefix.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    authority: Authority,
    /// `https://`: TLS to the upstream.
    tls: bool,
    host: HeaderValue,
    /// Put before every request's path; empty for none. No trailing '/'.
    base_path: String,
}

impl Target {
    pub(crate) fn parse(url: &str) -> Result<Target, Error> {
        let bad = |reason: &str| Error::Url {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            Some(other) => return Err(bad(&format!("unsupported scheme {other:?}"))),
            None => return Err(bad("expected http://HOST:PORT")),
        };
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| bad("expected http://HOST:PORT"))?;
        if authority.host().is_empty() {
            return Err(bad("the host is missing"));
        }
        // `http` reads a port past 65535 as none, which would connect to port 80.
        if let Some((_, port)) = authority.as_str().rsplit_once(':')
            && !port.contains(']')
            && !matches!(port.parse::<u16>(), Ok(1..))
        {
            return Err(bad(&format!("port {port} is not between 1 and 65535")));
        }
        if authority.as_str().contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        if uri.query().is_some() {
            return Err(bad("a query string is not allowed"));
        }
        let base_path = uri.path().trim_end_matches('/').to_owned();
        let host = HeaderValue::from_str(authority.as_str())
            .map_err(|_| bad("the host is not a valid Host header"))?;
        Ok(Target {
            authority,
            tls,
            host,
            base_path,
        })
    }

    /// `host:port` as given, the default name.
    pub(crate) fn authority(&self) -> &str {
        self.authority.as_str()
    }

    /// `host:port` to connect to, the port defaulting to 80 (443 for `https://`).
    pub(crate) fn address(&self) -> String {
        let port = self
            .authority
            .port_u16()
            .unwrap_or(if self.tls { 443 } else { 80 });
        format!("{}:{port}", self.authority.host())
    }

    /// Whether the upstream is reached over TLS.
    pub(crate) fn tls(&self) -> bool {
        self.tls
    }

    /// The host, which TLS sends as SNI and checks the certificate for.
    pub(crate) fn hostname(&self) -> &str {
        self.authority.host()
    }

    /// The `Host` of a request that names none (HTTP/1.0).
    pub(crate) fn host(&self) -> &HeaderValue {
        &self.host
    }

    /// The request's URI for this upstream: the path and query kept, after the base path if
    /// there is one; in origin form for HTTP/1.1, absolute (with this upstream's authority)
    /// for HTTP/2, whose `:authority` and `:scheme` come from it.
    pub(crate) fn uri(&self, original: Uri, absolute: bool) -> Result<Uri, http::Error> {
        let mut parts = original.into_parts();
        let path_and_query = match (parts.path_and_query.take(), self.base_path.is_empty()) {
            (Some(pq), true) => pq,
            (None, true) => PathAndQuery::from_static("/"),
            (pq, false) => {
                let rest = pq.as_ref().map_or("/", PathAndQuery::as_str);
                PathAndQuery::try_from(format!("{}{rest}", self.base_path))?
            }
        };
        if !absolute {
            return Ok(Uri::from(path_and_query));
        }
        parts.scheme = Some(if self.tls {
            Scheme::HTTPS
        } else {
            Scheme::HTTP
        });
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(path_and_query);
        Ok(Uri::from_parts(parts)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_keep_the_path_and_query() {
        let target = Target::parse("http://127.0.0.1:3000").unwrap();
        assert_eq!(target.authority(), "127.0.0.1:3000");
        assert_eq!(target.host(), "127.0.0.1:3000");
        assert_eq!(target.address(), "127.0.0.1:3000");
        let uri = target.uri("/a/b?c=d".parse().unwrap(), true).unwrap();
        assert_eq!(uri, "http://127.0.0.1:3000/a/b?c=d");
        let origin_form = target.uri("/a/b?c=d".parse().unwrap(), false).unwrap();
        assert_eq!(origin_form, "/a/b?c=d");
        let prefixed = Target::parse("http://backend/base/").unwrap();
        assert_eq!(prefixed.address(), "backend:80");
        let uri = prefixed.uri("/x?y".parse().unwrap(), true).unwrap();
        assert_eq!(uri, "http://backend/base/x?y");
        let origin_form = prefixed.uri("/x?y".parse().unwrap(), false).unwrap();
        assert_eq!(origin_form, "/base/x?y");
        let from_h2 = "http://client.example/p".parse().unwrap();
        assert_eq!(
            target.uri(from_h2, true).unwrap(),
            "http://127.0.0.1:3000/p"
        );
        let from_h2 = "http://client.example/p".parse().unwrap();
        assert_eq!(target.uri(from_h2, false).unwrap(), "/p");
    }

    #[test]
    fn an_https_target_is_reached_over_tls_on_443_by_default() {
        let target = Target::parse("https://backend.example/base").unwrap();
        assert!(target.tls());
        assert_eq!(target.address(), "backend.example:443");
        assert_eq!(target.hostname(), "backend.example");
        let uri = target.uri("/x".parse().unwrap(), true).unwrap();
        assert_eq!(uri, "https://backend.example/base/x");
        let plain = Target::parse("http://backend.example").unwrap();
        assert!(!plain.tls());
        assert_eq!(plain.address(), "backend.example:80");
        let v6 = Target::parse("https://[::1]:8443").unwrap();
        assert_eq!(
            (v6.hostname(), v6.address().as_str()),
            ("[::1]", "[::1]:8443")
        );
    }

    #[test]
    fn bad_urls_are_named_with_the_reason() {
        for (url, reason) in [
            ("https://a:0", "port 0 is not"),
            ("ftp://a:1", "unsupported scheme"),
            ("127.0.0.1:3000", "expected http://HOST:PORT"),
            ("http://a:1/?q", "query"),
            ("http://u:p@a:1", "credentials"),
            ("http://a b", "invalid"),
            ("http://a:0", "port 0 is not between 1 and 65535"),
            ("http://a:99999", "port 99999 is not"),
        ] {
            let err = Target::parse(url).unwrap_err().to_string();
            assert!(err.contains(url) && err.contains(reason), "{url}: {err}");
        }
    }
}
