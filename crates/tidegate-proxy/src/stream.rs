//! Long-lived streams: WebSocket (and any HTTP/1.1 `Upgrade`), Server-Sent Events, gRPC
//! server and bidirectional streams. Each goes through its upstream's gate like any request,
//! and leaves it at its response headers.
//!
//! Why: a gate learns the upstream's capacity from how long its requests take, and bounds how
//! many are in flight. A stream open for an hour is not a request an hour slow: held as one,
//! its sample would tell the limit that the upstream had slowed down a thousandfold (the limit
//! sinks, Envoy's adaptive concurrency's known failure, envoy issue 42243), and its slot would
//! stay taken for its whole life (as many subscribers as the limit take every slot, and short
//! requests are shed though the upstream is idle). So a stream's sample is the time to its
//! response headers,
//! when the upstream has done the work of opening it, and its slot is freed then. The request
//! part is counted like any request (`tidegate_request_duration_seconds` to its headers); the
//! stream part apart (`tidegate_streams_open`, `tidegate_streams_total{outcome}`,
//! `tidegate_stream_duration_seconds`).
//!
//! Out of the limit, streams get a bound of their own: `streams.max_per_upstream` open at once
//! per upstream, so that they cannot pile up without end on an upstream whose every stream
//! costs it a connection and memory. Past it, a stream is refused with the shed status and
//! `tidegate-shed: streams`.
//!
//! How a stream is recognised:
//! - **on the request**, before the gate, so that the cap refuses it before any work: an
//!   HTTP/1.1 `Upgrade` (WebSocket, or any protocol), or `Accept: text/event-stream` (which
//!   every `EventSource` sends). Such a request takes its place under the cap first; if its
//!   response turns out not to be a stream (an upgrade refused, an error page), it gives the
//!   place back and is an ordinary request.
//! - **on the response**: `101 Switching Protocols`, or a `Content-Type` in
//!   `streams.content_types` (default `text/event-stream`; add `application/grpc` for gRPC
//!   services with server or bidirectional streams: the proxy cannot tell a streaming call
//!   from a unary one, and for a unary call the headers come with the answer, so its sample
//!   is the same either way). A response recognised only here takes a place if one is free;
//!   if none is, the upstream has already done the work, and throwing the answer away would
//!   turn a unary gRPC answer into an error: it goes on as an ordinary request, holding its
//!   slot to its last byte, and is counted as `over_cap`.
//!
//! A stream whose upstream stays silent for `streams.idle_timeout` (in both directions, for a
//! tunnel) is closed: `client.read_timeout`, meant for a stalled ordinary body, would cut an
//! event stream between two events.

use std::sync::Arc;
use std::time::Duration;

use http::header::{ACCEPT, CONTENT_TYPE, UPGRADE};
use http::{HeaderMap, Request, Response, StatusCode, Version};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde::{Deserialize, Deserializer, Serialize};
use tidegate_core::Nanos;

use crate::abandoned::Abandoned;
use crate::checks::refuse;
use crate::stream_cap::{End, Slot, UpstreamStreams};
use crate::upgrade::Upgrade;

/// Long-lived streams (`[streams]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamsConfig {
    /// Streams open at once per upstream; past it a new one is refused with the shed status.
    #[serde(deserialize_with = "max_per_upstream")]
    pub max_per_upstream: usize,
    /// Response media types that make a response a stream (besides `101`): an entry matches
    /// the type itself and its `+suffix` variants (`application/grpc` matches
    /// `application/grpc+proto`).
    #[serde(deserialize_with = "content_types")]
    pub content_types: Vec<String>,
    /// Longest silence of a stream's upstream (of both sides, for an upgraded connection);
    /// then the stream is closed.
    #[serde(deserialize_with = "idle_timeout")]
    pub idle_timeout: Nanos,
}

impl Default for StreamsConfig {
    fn default() -> StreamsConfig {
        StreamsConfig {
            max_per_upstream: 1000,
            content_types: vec!["text/event-stream".to_owned()],
            idle_timeout: Nanos::from_secs(600),
        }
    }
}

impl StreamsConfig {
    /// The first key that is wrong and why (for what the command line or code set).
    pub(crate) fn invalid(&self) -> Option<(&'static str, String)> {
        if let Some(reason) = max_reason(self.max_per_upstream) {
            return Some(("streams.max_per_upstream", reason));
        }
        if let Some(reason) = self.content_types.iter().find_map(|t| media_type_reason(t)) {
            return Some(("streams.content_types", reason));
        }
        if self.idle_timeout.is_zero() {
            return Some(("streams.idle_timeout", ZERO_TIMEOUT.to_owned()));
        }
        None
    }
}

const ZERO_TIMEOUT: &str = "must be longer than zero";

fn max_reason(max: usize) -> Option<String> {
    (max == 0).then(|| "must be at least 1".to_owned())
}

/// Why `value` is not a media type `type/subtype` (no parameters: they do not select).
fn media_type_reason(value: &str) -> Option<String> {
    let valid = value.split_once('/').is_some_and(|(kind, subtype)| {
        let token = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
        };
        token(kind) && token(subtype)
    });
    (!valid).then(|| format!("{value:?} is not a media type such as \"text/event-stream\""))
}

fn max_per_upstream<'de, D: Deserializer<'de>>(deserializer: D) -> Result<usize, D::Error> {
    let max = usize::deserialize(deserializer)?;
    refuse::<D, _>(max_reason(max), max)
}

fn content_types<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let types = Vec::<String>::deserialize(deserializer)?;
    let reason = types.iter().find_map(|t| media_type_reason(t));
    refuse::<D, _>(reason, types)
}

fn idle_timeout<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Nanos, D::Error> {
    let timeout = Nanos::deserialize(deserializer)?;
    refuse::<D, _>(timeout.is_zero().then(|| ZERO_TIMEOUT.to_owned()), timeout)
}

/// A request that may become a stream, on its way to the upstream.
#[derive(Debug)]
pub(crate) struct Candidate {
    slot: Slot,
    upgrade: Option<Upgrade>,
}

impl Candidate {
    /// Puts the upgrade's fields back into the headers forwarded upstream (the hop-by-hop
    /// rewriting took them out).
    pub(crate) fn forward_headers(&self, headers: &mut HeaderMap) {
        if let Some(upgrade) = &self.upgrade {
            upgrade.forward_headers(headers);
        }
    }
}

/// The request asks for a stream the upstream's cap has no room for.
#[derive(Debug)]
pub(crate) struct Refused;

/// What a response that is a stream becomes.
#[derive(Debug)]
pub(crate) enum Opened {
    /// Its body streams to the client frame by frame, holding the slot.
    Body(Slot),
    /// `101`: the two connections are spliced once both have switched.
    Tunnel(crate::upgrade::Tunnel),
}

/// The streams' settings and metrics; each upstream holds its own [`UpstreamStreams`]
/// (made by [`Streams::upstream`] when the upstream is built, at start or on a reload).
#[derive(Debug)]
pub(crate) struct Streams {
    max: i64,
    open: Family<Labels, Gauge>,
    ends: Family<Labels, Counter>,
    durations: Family<Labels, Histogram, fn() -> Histogram>,
    /// Lowercase.
    content_types: Vec<String>,
    pub(crate) idle_timeout: Duration,
    /// The spliced connections: the drain waits for them, and cuts them with the client
    /// connections.
    pub(crate) tunnels: Abandoned,
    /// `tidegate_client_connections`: a spliced client connection still counts in it.
    pub(crate) client_connections: Gauge,
}

type Labels = Vec<(&'static str, String)>;

impl Streams {
    /// Registers the metrics (each upstream's series start at zero when it is built).
    pub(crate) fn new(
        config: &StreamsConfig,
        client_connections: Gauge,
        registry: &mut Registry,
    ) -> Streams {
        let open = Family::<Labels, Gauge>::default();
        let ends = Family::<Labels, Counter>::default();
        let durations = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            // 1 s to about 4.5 hours.
            || Histogram::new(exponential_buckets(1.0, 4.0, 8)),
        );
        registry.register(
            "tidegate_streams_open",
            "Streams (upgraded connections, event streams, configured content types) open per upstream, or asked for and waiting for their response headers",
            open.clone(),
        );
        registry.register(
            "tidegate_streams",
            "Streams by how they ended: closed, error, idle, cancelled, refused (over streams.max_per_upstream), over_cap (recognised on the response when the cap was full, served as an ordinary request)",
            ends.clone(),
        );
        registry.register(
            "tidegate_stream_duration_seconds",
            "Time from a stream's response headers to its end",
            durations.clone(),
        );
        Streams {
            max: i64::try_from(config.max_per_upstream).unwrap_or(i64::MAX),
            open,
            ends,
            durations,
            content_types: config
                .content_types
                .iter()
                .map(|t| t.to_ascii_lowercase())
                .collect(),
            idle_timeout: Duration::from(config.idle_timeout),
            tunnels: Abandoned::default(),
            client_connections,
        }
    }

    /// The streams of the upstream named `name`, its series registered at zero.
    pub(crate) fn upstream(&self, name: &str) -> Arc<UpstreamStreams> {
        let label = || ("upstream", name.to_owned());
        Arc::new(UpstreamStreams::new(
            self.max,
            self.open.get_or_create(&vec![label()]).clone(),
            End::ALL.map(|end| {
                self.ends
                    .get_or_create(&vec![label(), ("outcome", end.as_str().to_owned())])
                    .clone()
            }),
            self.durations.get_or_create(&vec![label()]).clone(),
        ))
    }

    /// Whether `request`, about to go to the upstream of `streams`, asks for a stream; if
    /// so it takes a place under the cap (or is refused), and an upgrade's client side is
    /// taken from it. Boxed: an ordinary request carries a pointer, not the candidate's
    /// fields, through its moves. `upstream_http1`: upgrades need an HTTP/1.1 upstream; to an HTTP/2 one
    /// the request goes without its `Upgrade` and gets an ordinary answer.
    pub(crate) fn candidate<B>(
        &self,
        request: &mut Request<B>,
        streams: &Arc<UpstreamStreams>,
        upstream_http1: bool,
    ) -> Result<Option<Box<Candidate>>, Refused> {
        // One pass over the (few) names rather than a lookup for each: most requests have
        // neither field, and every request passes here.
        let (mut upgrade, mut accept) = (false, false);
        for name in request.headers().keys() {
            upgrade |= name == UPGRADE;
            accept |= name == ACCEPT;
        }
        let upgrade = upgrade
            && request.version() == Version::HTTP_11
            && upstream_http1
            && crate::upgrade::requested(request.headers());
        let event_stream = accept && accepts_event_stream(request.headers());
        if !upgrade && !event_stream {
            return Ok(None);
        }
        let Some(slot) = streams.take() else {
            streams.count(End::Refused);
            return Err(Refused);
        };
        let upgrade = if upgrade {
            Upgrade::take(request)
        } else {
            None
        };
        Ok(Some(Box::new(Candidate { slot, upgrade })))
    }

    /// Whether `response` from the upstream of `streams` is a stream, and what it becomes;
    /// `None` for an ordinary response (whose candidate's place, if any, is given back).
    pub(crate) fn open<B>(
        &self,
        streams: &Arc<UpstreamStreams>,
        candidate: Option<Box<Candidate>>,
        response: &mut Response<B>,
    ) -> Option<Opened> {
        let (slot, upgrade) = match candidate.map(|c| *c) {
            Some(Candidate { slot, upgrade }) => (Some(slot), upgrade),
            None => (None, None),
        };
        if response.status() == StatusCode::SWITCHING_PROTOCOLS {
            // Only an upgrade asked for can be carried out: a 101 to anything else is an
            // ordinary (empty) answer.
            let (Some(mut slot), Some(upgrade)) = (slot, upgrade) else {
                return None;
            };
            slot.opened();
            return Some(Opened::Tunnel(upgrade.switched(response, slot)));
        }
        if !self.is_stream(response.headers()) {
            return None;
        }
        let Some(mut slot) = slot.or_else(|| streams.take()) else {
            streams.count(End::OverCap);
            return None;
        };
        slot.opened();
        Some(Opened::Body(slot))
    }

    /// Whether the `Content-Type` is one of `streams.content_types`, or a `+suffix` variant
    /// of one. Found in a pass over the (few) fields and compared as bytes: every response
    /// passes here.
    fn is_stream(&self, headers: &HeaderMap) -> bool {
        let Some(media) = headers
            .iter()
            .find_map(|(name, value)| (name == CONTENT_TYPE).then(|| value.as_bytes()))
        else {
            return false;
        };
        self.content_types.iter().any(|t| {
            media.len() >= t.len()
                && media[..t.len()].eq_ignore_ascii_case(t.as_bytes())
                && matches!(media.get(t.len()), None | Some(b'+' | b';' | b' ' | b'\t'))
        })
    }
}

/// `Accept` names `text/event-stream`.
fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            item.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("text/event-stream")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn streams(config: &StreamsConfig) -> Streams {
        Streams::new(config, Gauge::default(), &mut Registry::default())
    }

    fn request(headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::get("/");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    fn response(status: u16, content_type: Option<&str>) -> Response<()> {
        let mut builder = Response::builder().status(status);
        if let Some(t) = content_type {
            builder = builder.header(CONTENT_TYPE, t);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn event_streams_and_upgrades_are_candidates_and_the_cap_refuses_past_it() {
        let config = StreamsConfig {
            max_per_upstream: 2,
            ..StreamsConfig::default()
        };
        let streams = streams(&config);
        let a = streams.upstream("a");
        let plain = streams.candidate(&mut request(&[("accept", "*/*")]), &a, true);
        assert!(matches!(plain, Ok(None)));
        let sse = |accept| {
            streams
                .candidate(&mut request(&[("accept", accept)]), &a, true)
                .map(|c| c.is_some())
        };
        assert!(matches!(
            sse("text/html, Text/Event-Stream;q=0.9"),
            Ok(true)
        ));
        // `Upgrade` counts only where `Connection` names it (RFC 9110 section 7.8).
        let mut alone = request(&[("upgrade", "websocket"), ("connection", "x-other")]);
        assert!(matches!(streams.candidate(&mut alone, &a, true), Ok(None)));
        let mut upgrade = request(&[
            ("upgrade", "websocket"),
            ("connection", "Keep-Alive, Upgrade"),
        ]);
        let held = streams.candidate(&mut upgrade, &a, true);
        let mut h2c = request(&[("upgrade", "h2c"), ("connection", "upgrade")]);
        assert!(matches!(streams.candidate(&mut h2c, &a, true), Ok(None)));
        assert!(matches!(held, Ok(Some(_))));
        assert_eq!(a.open(), 1, "the first was given back");
        let first = streams.candidate(&mut request(&[("accept", "text/event-stream")]), &a, true);
        assert!(matches!(first, Ok(Some(_))));
        let over = streams.candidate(&mut request(&[("accept", "text/event-stream")]), &a, true);
        assert!(over.is_err());
        assert_eq!(a.ended(End::Refused), 1);
        drop(held);
        assert_eq!(a.open(), 1);
        // To an HTTP/2 upstream an upgrade is no candidate (it goes as a plain request).
        drop(first);
        let mut upgrade = request(&[("upgrade", "websocket"), ("connection", "upgrade")]);
        assert!(matches!(
            streams.candidate(&mut upgrade, &a, false),
            Ok(None)
        ));
    }

    #[test]
    fn responses_are_streams_by_content_type_and_suffix() {
        let config = StreamsConfig {
            content_types: vec!["text/event-stream".into(), "application/grpc".into()],
            ..StreamsConfig::default()
        };
        let streams = streams(&config);
        let a = streams.upstream("a");
        for (content_type, stream) in [
            (Some("text/event-stream"), true),
            (Some("Text/Event-Stream; charset=utf-8"), true),
            (Some("application/grpc"), true),
            (Some("application/grpc+proto"), true),
            (Some("application/grpcx"), false),
            (Some("application/json"), false),
            (None, false),
        ] {
            let opened = streams.open(&a, None, &mut response(200, content_type));
            assert_eq!(opened.is_some(), stream, "{content_type:?}");
        }
        assert_eq!(a.open(), 0);
        assert_eq!(
            a.ended(End::Cancelled),
            4,
            "each opened stream dropped unfinished counts as cancelled"
        );
        // A 101 to a request that asked for no upgrade is no tunnel.
        assert!(streams.open(&a, None, &mut response(101, None)).is_none());
    }

    #[test]
    fn a_response_stream_over_the_cap_is_an_ordinary_request_and_counted() {
        let config = StreamsConfig {
            max_per_upstream: 1,
            ..StreamsConfig::default()
        };
        let streams = streams(&config);
        let a = streams.upstream("a");
        let sse = || response(200, Some("text/event-stream"));
        let first = streams.open(&a, None, &mut sse());
        assert!(first.is_some());
        assert!(streams.open(&a, None, &mut sse()).is_none());
        assert_eq!(a.ended(End::OverCap), 1);
        let Some(Opened::Body(slot)) = first else {
            panic!("a body stream")
        };
        slot.end(End::Closed);
        assert_eq!(a.ended(End::Closed), 1);
        assert_eq!(a.open(), 0);
        // A candidate whose answer is no stream gives its place back, uncounted.
        let candidate = streams
            .candidate(&mut request(&[("accept", "text/event-stream")]), &a, true)
            .unwrap();
        assert!(
            streams
                .open(&a, candidate, &mut response(404, Some("text/html")))
                .is_none()
        );
        assert_eq!(a.open(), 0);
        assert_eq!(a.ended(End::Cancelled), 0);
    }

    #[test]
    fn a_media_type_without_its_subtype_is_invalid() {
        let mut config = StreamsConfig::default();
        assert_eq!(config.invalid(), None);
        config.content_types.push("text/".to_owned());
        assert_eq!(
            config.invalid().map(|(key, _)| key),
            Some("streams.content_types")
        );
    }
}
