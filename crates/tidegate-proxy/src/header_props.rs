//! Property tests of the request-header parsers (issue 14): the priority and caller-key
//! headers, hop-by-hop stripping and the refusals, over arbitrary header values. CI runs the
//! default number of cases; `bench/fuzz.sh` runs millions.

use http::header::{CONNECTION, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request};
use proptest::prelude::*;
use tidegate_core::Priority;

use crate::classify::Classifier;
use crate::config::Config;
use crate::forward::strip_hop_by_hop;
use crate::refuse::refusal;

/// Any bytes a header value may hold (visible ASCII, spaces, tabs and obs-text).
fn header_value() -> impl Strategy<Value = HeaderValue> {
    prop::collection::vec(prop_oneof![0x20u8..0x7f, Just(b'\t'), 0x80u8..=0xff], 0..40)
        .prop_map(|bytes| HeaderValue::from_bytes(&bytes).unwrap_or(HeaderValue::from_static("")))
}

fn header_name() -> impl Strategy<Value = HeaderName> {
    prop_oneof![
        Just(HeaderName::from_static("tidegate-priority")),
        Just(HeaderName::from_static("x-user")),
        Just(CONNECTION),
        Just(HeaderName::from_static("keep-alive")),
        Just(http::header::TE),
        Just(http::header::TRANSFER_ENCODING),
        Just(http::header::UPGRADE),
        Just(HOST),
        "x-[a-z]{1,6}".prop_map(|n| HeaderName::from_bytes(n.as_bytes()).unwrap_or(HOST)),
    ]
}

fn headers() -> impl Strategy<Value = HeaderMap> {
    prop::collection::vec((header_name(), header_value()), 0..12).prop_map(|pairs| {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name, value);
        }
        map
    })
}

fn classifier() -> Classifier {
    let mut config = Config::default();
    config.priority.caller_key_header = "x-user".to_owned();
    Classifier::new(&config).unwrap_or_else(|e| panic!("{e}"))
}

proptest! {
    /// Any headers classify without a panic; an untrusted client always gets the default, and
    /// a trusted one's invalid header is flagged rather than honoured.
    #[test]
    fn any_headers_classify(headers in headers(), path in "/[a-z/]{0,10}") {
        let c = classifier();
        let untrusted = c.classify(&path, &headers, false);
        prop_assert_eq!(untrusted.priority, Priority::default());
        prop_assert!(!untrusted.header_invalid);
        let trusted = c.classify(&path, &headers, true);
        if trusted.header_invalid {
            prop_assert_eq!(trusted.priority.tier(), Priority::default().tier());
        }
    }

    /// After stripping, no hop-by-hop field is left, nor any field `Connection` named; every
    /// other field is kept with all its values.
    #[test]
    fn hop_by_hop_fields_never_cross(headers in headers()) {
        let named: Vec<String> = headers
            .get_all(CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .collect();
        let mut stripped = headers.clone();
        strip_hop_by_hop(&mut stripped);
        for hop in ["connection", "keep-alive", "proxy-connection", "te", "transfer-encoding", "upgrade"] {
            prop_assert!(!stripped.contains_key(hop), "{}", hop);
        }
        for name in headers.keys() {
            let hop = matches!(
                name.as_str(),
                "connection" | "keep-alive" | "proxy-connection" | "te" | "transfer-encoding" | "upgrade"
            );
            if hop || named.iter().any(|n| n == name.as_str()) {
                prop_assert!(!stripped.contains_key(name));
            } else {
                prop_assert_eq!(
                    stripped.get_all(name).iter().count(),
                    headers.get_all(name).iter().count()
                );
            }
        }
    }

    /// A request is refused exactly when it is a CONNECT or has more than one Host.
    #[test]
    fn refusals_are_exactly_connect_and_two_hosts(headers in headers(), connect in any::<bool>()) {
        let method = if connect { Method::CONNECT } else { Method::GET };
        let mut request = Request::new(());
        *request.method_mut() = method;
        *request.headers_mut() = headers.clone();
        let hosts = headers.get_all(HOST).iter().count();
        prop_assert_eq!(refusal(&request).is_some(), connect || hosts > 1);
    }
}
