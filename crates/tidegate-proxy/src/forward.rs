//! Rewriting messages as they cross the proxy (RFC 9110 section 7.6).
//!
//! Hop-by-hop fields describe one connection and must not be forwarded: `Connection` and every
//! field it names, plus `Proxy-Connection`, `Keep-Alive`, `TE`, `Transfer-Encoding` and
//! `Upgrade` (hyper frames each side's body itself). A request gains `X-Forwarded-For` (the
//! client's address appended) and `Via`; a response gains `Via`. The values that do not change
//! per request are made once: the client's address per connection, `Via` and the 768
//! priorities at startup, so that forwarding allocates nothing in the common case.

use http::header::Entry;
use http::header::{CONNECTION, HOST, TE, TRANSFER_ENCODING, UPGRADE, VIA};
use http::{HeaderMap, HeaderName, HeaderValue, Version};
use tidegate_core::Priority;
use tidegate_core::priority::PriorityHeader;

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// `Via` values for the protocol a message was received with. Statics, made at compile time:
/// `HeaderValue::from_static` called at run time checks its bytes on every call.
fn via(version: Version) -> HeaderValue {
    static VIA: [HeaderValue; 5] = [
        HeaderValue::from_static("0.9 tidegate"),
        HeaderValue::from_static("1.0 tidegate"),
        HeaderValue::from_static("1.1 tidegate"),
        HeaderValue::from_static("2 tidegate"),
        HeaderValue::from_static("3 tidegate"),
    ];
    VIA[match version {
        Version::HTTP_09 => 0,
        Version::HTTP_10 => 1,
        Version::HTTP_2 => 3,
        Version::HTTP_3 => 4,
        _ => 2,
    }]
    .clone()
}

/// The hop-by-hop fields other than those `Connection` names, each with a bit.
static HOP_BY_HOP: [(&HeaderName, u8); 6] = [
    (&CONNECTION, 1),
    (&KEEP_ALIVE, 2),
    (&PROXY_CONNECTION, 4),
    (&TE, 8),
    (&TRANSFER_ENCODING, 16),
    (&UPGRADE, 32),
];

/// The bit of `name` in [`HOP_BY_HOP`], 0 for an end-to-end field. By the name's length
/// first: most names have none of the five lengths, and a standard name's text is a table
/// lookup, cheaper than comparing it with each of the six.
fn hop_by_hop_bit(name: &HeaderName) -> u8 {
    let name = name.as_str();
    match name.len() {
        2 | 7 | 10 | 16 | 17 => match name {
            "connection" => 1,
            "keep-alive" => 2,
            "proxy-connection" => 4,
            "te" => 8,
            "transfer-encoding" => 16,
            "upgrade" => 32,
            _ => 0,
        },
        _ => 0,
    }
}

/// Removes the hop-by-hop fields. One pass over the (few) names finds which are present,
/// cheaper than a lookup for each: most requests have none, and most responses only
/// `Connection: keep-alive`.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let mut present = 0u8;
    for name in headers.keys() {
        present |= hop_by_hop_bit(name);
    }
    if present == 0 {
        return;
    }
    let options_only = |value: &HeaderValue| {
        let value = value.as_bytes();
        value.eq_ignore_ascii_case(b"keep-alive") || value.eq_ignore_ascii_case(b"close")
    };
    if present & 1 != 0 && !headers.get_all(&CONNECTION).iter().all(options_only) {
        // `close` and `keep-alive` are options, not field names (`Keep-Alive` goes anyway).
        let named: Vec<HeaderName> = headers
            .get_all(&CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .filter(|token| {
                !token.eq_ignore_ascii_case("close") && !token.eq_ignore_ascii_case("keep-alive")
            })
            .filter_map(|token| HeaderName::from_bytes(token.as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    for (hop, bit) in &HOP_BY_HOP {
        if present & bit != 0 {
            headers.remove(*hop);
        }
    }
}

/// The per-request values made once.
#[derive(Debug)]
pub(crate) struct Forwarding {
    /// The header the priority is sent in, with a value per rank; `None` when not forwarded.
    priority: Option<(HeaderName, Vec<HeaderValue>)>,
    /// The field line of the chain's hint (`under=R`), by rank.
    unders: Vec<HeaderValue>,
    /// `feedback.hold_for_chain`: a request that comes with no chain hint is forwarded with
    /// the one this proxy admits it under.
    pub(crate) hold_for_chain: bool,
    /// The version of the requests sent upstream.
    pub(crate) upstream_version: Version,
}

impl Forwarding {
    pub(crate) fn new(priority_header: Option<HeaderName>, upstream_http2: bool) -> Forwarding {
        let priority = priority_header.map(|name| {
            let values = (0..tidegate_core::priority::RANKS as u16)
                .filter_map(Priority::from_rank)
                .map(|p| {
                    HeaderValue::from_str(&p.to_string()).unwrap_or(HeaderValue::from_static("3/0"))
                })
                .collect();
            (name, values)
        });
        let unders = (0..tidegate_core::priority::RANKS as u16)
            .filter_map(|rank| HeaderValue::from_str(&PriorityHeader::under_line(rank)).ok())
            .collect();
        Forwarding {
            priority,
            unders,
            hold_for_chain: false,
            upstream_version: if upstream_http2 {
                Version::HTTP_2
            } else {
                Version::HTTP_11
            },
        }
    }

    /// Rewrites a request's headers for the upstream. `client` is the client's address as a
    /// header value (made once per connection); `default_host` the upstream's, for a request
    /// that names no host; `(priority, under)` the priority in force and the hint the
    /// request's chain was admitted under, if any.
    pub(crate) fn request_headers(
        &self,
        headers: &mut HeaderMap,
        version: Version,
        authority: Option<&http::uri::Authority>,
        client: &HeaderValue,
        default_host: &HeaderValue,
        (priority, under): (Priority, Option<u16>),
    ) {
        // HTTP/2 carries the host in the `:authority` pseudo-header, HTTP/1.0 may carry none;
        // an HTTP/1.1 upstream needs `Host`.
        if let Entry::Vacant(host) = headers.entry(HOST) {
            let from_authority = authority.and_then(|a| HeaderValue::from_str(a.as_str()).ok());
            host.insert(from_authority.unwrap_or_else(|| default_host.clone()));
        }
        // gRPC over HTTP/2 requires `te: trailers` end to end; it is the one TE value that
        // may cross (RFC 9113 section 8.2.2).
        let te_trailers = self.upstream_version == Version::HTTP_2
            && headers
                .get(&TE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| {
                    v.split(',')
                        .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
                });
        strip_hop_by_hop(headers);
        if te_trailers {
            headers.insert(TE, HeaderValue::from_static("trailers"));
        }
        append_forwarded_for(headers, client);
        headers.append(VIA, via(version));
        if let Some((name, values)) = &self.priority {
            headers.insert(name.clone(), values[usize::from(priority.rank())].clone());
            // The chain's hint on a line of its own after the priority's, which a reader
            // of the first line alone (tidegate before it) does not see (docs/feedback.md).
            if let Some(value) = under.and_then(|rank| self.unders.get(usize::from(rank))) {
                headers.append(name.clone(), value.clone());
            }
        }
    }
}

/// Appends the client's address to `X-Forwarded-For`, joining an existing list into one line
/// (many readers look at the first line only).
fn append_forwarded_for(headers: &mut HeaderMap, client: &HeaderValue) {
    match headers.entry(&X_FORWARDED_FOR) {
        Entry::Vacant(entry) => {
            entry.insert(client.clone());
        }
        Entry::Occupied(mut entry) => {
            let mut all: Vec<&HeaderValue> = entry.iter().collect();
            all.push(client);
            let joined = join(&all);
            entry.insert(joined);
        }
    }
}

fn join(values: &[&HeaderValue]) -> HeaderValue {
    let mut bytes = Vec::new();
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            bytes.extend_from_slice(b", ");
        }
        bytes.extend_from_slice(value.as_bytes());
    }
    // Joined valid values with ", " stay valid.
    HeaderValue::from_bytes(&bytes).unwrap_or_else(|_| values[values.len() - 1].clone())
}

/// Rewrites a response's headers for the client.
pub(crate) fn response_headers(headers: &mut HeaderMap, version: Version) {
    strip_hop_by_hop(headers);
    headers.append(VIA, via(version));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        headers
    }

    /// The bit found by name is the table's, for each hop-by-hop field; none for end-to-end
    /// fields, those of the same lengths included.
    #[test]
    fn each_hop_by_hop_field_is_known_by_its_bit() {
        for (name, bit) in &HOP_BY_HOP {
            assert_eq!(hop_by_hop_bit(name), *bit, "{name}");
        }
        for name in [
            "user-agent",
            "accept",
            "x-priority",
            "host",
            "content-location",
            "tk",
        ] {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            assert_eq!(hop_by_hop_bit(&name), 0, "{name}");
        }
        assert_eq!(via(Version::HTTP_11), "1.1 tidegate");
        assert_eq!(via(Version::HTTP_2), "2 tidegate");
    }

    #[test]
    fn hop_by_hop_fields_go_and_the_rest_stays() {
        let mut headers = map(&[
            ("connection", "keep-alive, x-secret"),
            ("connection", "close"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("content-type", "text/plain"),
            ("x-kept", "yes"),
        ]);
        strip_hop_by_hop(&mut headers);
        let mut names: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["content-type", "x-kept"]);
        // The usual response: only `Connection: keep-alive`.
        let mut usual = map(&[("connection", "Keep-Alive"), ("content-length", "5")]);
        strip_hop_by_hop(&mut usual);
        let names: Vec<&str> = usual.keys().map(HeaderName::as_str).collect();
        assert_eq!(names, ["content-length"]);
        let mut none = map(&[("content-length", "5"), ("x-a", "1")]);
        strip_hop_by_hop(&mut none);
        assert_eq!(none.len(), 2);
    }

    #[test]
    fn request_gains_forwarded_for_via_host_and_priority() {
        let forwarding = Forwarding::new(Some(HeaderName::from_static("tidegate-priority")), false);
        let client = HeaderValue::from_static("10.0.0.7");
        let mut headers = map(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "2.2.2.2"),
        ]);
        let authority: http::uri::Authority = "example.com:8080".parse().unwrap();
        let upstream = HeaderValue::from_static("upstream:80");
        forwarding.request_headers(
            &mut headers,
            Version::HTTP_2,
            Some(&authority),
            &client,
            &upstream,
            (Priority::new(1, 17).unwrap(), None),
        );
        assert_eq!(headers["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 10.0.0.7");
        assert_eq!(headers.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(headers["via"], "2 tidegate");
        assert_eq!(headers["host"], "example.com:8080");
        assert_eq!(headers["tidegate-priority"], "1/17");
        let mut plain = map(&[("host", "kept"), ("via", "1.1 edge")]);
        forwarding.request_headers(
            &mut plain,
            Version::HTTP_11,
            None,
            &client,
            &upstream,
            (Priority::LOWEST, None),
        );
        assert_eq!(plain["x-forwarded-for"], "10.0.0.7");
        assert_eq!(plain["host"], "kept");
        let vias: Vec<_> = plain.get_all("via").iter().collect();
        assert_eq!(vias, ["1.1 edge", "1.1 tidegate"]);
        assert_eq!(plain["tidegate-priority"], "5/127");
        let mut http10 = HeaderMap::new();
        forwarding.request_headers(
            &mut http10,
            Version::HTTP_10,
            None,
            &client,
            &upstream,
            (Priority::LOWEST, None),
        );
        assert_eq!(http10["host"], "upstream:80");
        assert_eq!(http10["via"], "1.0 tidegate");
        // The chain's hint goes on a line of its own after the priority's, replacing what
        // came.
        let mut chained = map(&[
            ("tidegate-priority", "0/1"),
            ("tidegate-priority", "under=9"),
        ]);
        forwarding.request_headers(
            &mut chained,
            Version::HTTP_11,
            None,
            &client,
            &upstream,
            (Priority::new(2, 94).unwrap(), Some(400)),
        );
        let lines: Vec<_> = chained.get_all("tidegate-priority").iter().collect();
        assert_eq!(lines, ["2/94", "under=400"]);
    }

    #[test]
    fn te_trailers_crosses_to_an_http2_upstream_only() {
        let client = HeaderValue::from_static("127.0.0.1");
        let host = HeaderValue::from_static("h");
        let h2 = Forwarding::new(None, true);
        let mut headers = map(&[("te", "trailers")]);
        h2.request_headers(
            &mut headers,
            Version::HTTP_2,
            None,
            &client,
            &host,
            (Priority::default(), None),
        );
        assert_eq!(headers["te"], "trailers");
        assert!(!headers.contains_key("tidegate-priority"), "not forwarded");
        let h1 = Forwarding::new(None, false);
        let mut headers = map(&[("te", "trailers")]);
        h1.request_headers(
            &mut headers,
            Version::HTTP_2,
            None,
            &client,
            &host,
            (Priority::default(), None),
        );
        assert!(!headers.contains_key("te"));
    }
}
