//! A request's priority and partition, from its headers and path.
//!
//! - The tier comes from a route rule's `tier` if one matches (the operator's word is final),
//!   else from the priority header, else from the default.
//! - The cohort comes from the priority header if it names one (`1/17`), else from the
//!   caller-key header (a stable hash, the same on every proxy instance), else from the
//!   default.
//! - A malformed priority header is not an error: the request gets the default priority and
//!   the header is counted, so that a client's typo costs it its priority, never its answer.
//! - The priority header may also carry the hint the edge admitted the request's chain under
//!   (`under=R`, on a field line of its own after the priority's: `docs/feedback.md`); a
//!   malformed one is ignored and counted, the priority still taken.
//! - Neither header is read from a client outside `trust.sources` ([`crate::trust`]): its
//!   request gets the route's tier or the default priority, and a priority header it sent is
//!   counted.

use std::time::SystemTime;

use http::{HeaderMap, HeaderName, HeaderValue};
use tidegate_core::priority::{CohortMap, PriorityHeader};
use tidegate_core::{Priority, Time};

use crate::config::{Config, header_name};
use crate::error::Error;

#[derive(Debug)]
struct RouteRule {
    prefix: String,
    tier: Option<u32>,
    partition: usize,
}

/// Where a request goes and how important it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Class {
    pub(crate) priority: Priority,
    pub(crate) partition: usize,
    /// The priority header was present but did not parse.
    pub(crate) header_invalid: bool,
    /// The priority header was present but its sender is not trusted.
    pub(crate) header_untrusted: bool,
    /// The hint the edge admitted the request's chain under (`under=` in the priority
    /// header, `docs/feedback.md`), from a trusted client.
    pub(crate) under: Option<u16>,
    /// Malformed members of the priority header after the priority, ignored.
    pub(crate) header_ignored: u32,
}

#[derive(Debug)]
pub(crate) struct Classifier {
    header: Option<HeaderName>,
    default: Priority,
    caller_key: Option<HeaderName>,
    cohorts: CohortMap,
    /// Longest prefix first.
    routes: Vec<RouteRule>,
    /// Partition names, the default one (`default`) first.
    partitions: Vec<String>,
}

/// The name of the partition of requests no route assigns.
pub(crate) const DEFAULT_PARTITION: &str = "default";

impl Classifier {
    pub(crate) fn new(config: &Config) -> Result<Classifier, Error> {
        let priority = &config.priority;
        let mut partitions = vec![DEFAULT_PARTITION.to_owned()];
        let mut routes = Vec::with_capacity(config.routes.len());
        for route in &config.routes {
            let partition = match route.partition.as_deref() {
                None => 0,
                Some(name) => match partitions.iter().position(|p| p == name) {
                    Some(index) => index,
                    None => {
                        partitions.push(name.to_owned());
                        partitions.len() - 1
                    }
                },
            };
            routes.push(RouteRule {
                prefix: route.prefix.clone(),
                tier: route.tier,
                partition,
            });
        }
        routes.sort_by_key(|r| std::cmp::Reverse(r.prefix.len()));
        Ok(Classifier {
            header: header_name("priority.header", &priority.header)?,
            default: priority.default,
            caller_key: header_name("priority.caller_key_header", &priority.caller_key_header)?,
            cohorts: priority.cohorts,
            routes,
            partitions,
        })
    }

    pub(crate) fn partitions(&self) -> &[String] {
        &self.partitions
    }

    /// The priority header's name, if one is read.
    pub(crate) fn header(&self) -> Option<&HeaderName> {
        self.header.as_ref()
    }

    /// `trusted`: whether the client may set its priority and caller key.
    pub(crate) fn classify(&self, path: &str, headers: &HeaderMap, trusted: bool) -> Class {
        let route = self.routes.iter().find(|r| path.starts_with(&r.prefix));
        let mut header_invalid = false;
        let mut header_untrusted = false;
        let mut explicit_cohort = false;
        let mut priority = self.default;
        let mut under = None;
        let mut header_ignored = 0;
        let lines = self.header.as_ref().map(|name| headers.get_all(name));
        let first = lines.as_ref().and_then(|lines| lines.iter().next());
        if !trusted {
            header_untrusted = first.is_some();
        } else if let Some(lines) = lines {
            match PriorityHeader::parse(lines.iter().map(HeaderValue::as_bytes)) {
                Some(Ok(parsed)) => {
                    priority = parsed.priority;
                    under = parsed.under;
                    header_ignored = parsed.ignored;
                    // The priority is the list's first member: a cohort if it has a `/`.
                    explicit_cohort = first.is_some_and(|line| {
                        line.as_bytes()
                            .split(|&b| b == b',')
                            .next()
                            .is_some_and(|member| member.contains(&b'/'))
                    });
                }
                Some(Err(_)) => header_invalid = true,
                None => {}
            }
        }
        if let Some(tier) = route.and_then(|r| r.tier)
            && let Ok(routed) = Priority::new(tier, u32::from(priority.cohort()))
        {
            priority = routed;
        }
        if trusted
            && !explicit_cohort
            && let Some(key) = self.caller_key.as_ref().and_then(|name| headers.get(name))
        {
            priority = priority.with_cohort(self.cohorts.cohort(key.as_bytes(), wall_clock()));
        }
        Class {
            priority,
            partition: route.map_or(0, |r| r.partition),
            header_invalid,
            header_untrusted,
            under,
            header_ignored,
        }
    }
}

/// Unix time: the clock every proxy instance shares, so that they map caller keys alike.
fn wall_clock() -> Time {
    let since_epoch = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    Time::ZERO + tidegate_core::Nanos::from(since_epoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Route;

    fn classifier(edit: impl FnOnce(&mut Config)) -> Classifier {
        let mut config = Config::default();
        edit(&mut config);
        Classifier::new(&config).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    fn p(tier: u32, cohort: u32) -> Priority {
        Priority::new(tier, cohort).unwrap()
    }

    #[test]
    fn header_gives_tier_and_cohort() {
        let c = classifier(|_| {});
        let class = c.classify("/", &headers(&[("tidegate-priority", "1/17")]), true);
        assert_eq!(class.priority, p(1, 17));
        assert!(!class.header_invalid);
        assert_eq!(
            c.classify("/", &headers(&[]), true).priority,
            Priority::default()
        );
    }

    #[test]
    fn malformed_header_gets_the_default_and_is_flagged() {
        let c = classifier(|config| config.priority.default = p(4, 2));
        for bad in ["urgent", "9", "1/999", "1/"] {
            let class = c.classify("/", &headers(&[("tidegate-priority", bad)]), true);
            assert_eq!(class.priority, p(4, 2), "{bad}");
            assert!(class.header_invalid, "{bad}");
        }
    }

    #[test]
    fn routes_set_tier_and_partition_longest_prefix_first() {
        let c = classifier(|config| {
            config.routes = vec![
                Route {
                    prefix: "/api".to_owned(),
                    tier: Some(1),
                    partition: None,
                },
                Route {
                    prefix: "/api/batch".to_owned(),
                    tier: Some(5),
                    partition: Some("batch".to_owned()),
                },
            ];
        });
        assert_eq!(c.partitions(), ["default", "batch"]);
        let batch = c.classify(
            "/api/batch/7",
            &headers(&[("tidegate-priority", "0/3")]),
            true,
        );
        assert_eq!((batch.priority, batch.partition), (p(5, 3), 1));
        let api = c.classify("/api/users", &headers(&[]), true);
        assert_eq!((api.priority, api.partition), (p(1, 0), 0));
        let other = c.classify("/health", &headers(&[]), true);
        assert_eq!((other.priority, other.partition), (Priority::default(), 0));
    }

    #[test]
    fn caller_key_gives_a_stable_cohort_unless_the_header_names_one() {
        let c = classifier(|config| config.priority.caller_key_header = "x-user".to_owned());
        let cohorts: Vec<u8> = (0..64)
            .map(|user| {
                let user = format!("user-{user}");
                let first = c.classify("/", &headers(&[("x-user", &user)]), true);
                let again = c.classify(
                    "/",
                    &headers(&[("x-user", &user), ("tidegate-priority", "2")]),
                    true,
                );
                assert_eq!(first.priority.tier(), 3);
                assert_eq!(again.priority.tier(), 2);
                assert_eq!(first.priority.cohort(), again.priority.cohort());
                first.priority.cohort()
            })
            .collect();
        assert!(
            cohorts.iter().any(|&c| c != cohorts[0]),
            "keys spread over cohorts"
        );
        let explicit = c.classify(
            "/",
            &headers(&[("x-user", "u"), ("tidegate-priority", "2/9")]),
            true,
        );
        assert_eq!(explicit.priority, p(2, 9));
    }

    #[test]
    fn empty_header_name_reads_nothing() {
        let c = classifier(|config| config.priority.header = String::new());
        let class = c.classify("/", &headers(&[("tidegate-priority", "0")]), true);
        assert_eq!(class.priority, Priority::default());
    }

    #[test]
    fn an_untrusted_client_gets_the_route_or_default_priority() {
        let c = classifier(|config| {
            config.priority.default = p(4, 2);
            config.priority.caller_key_header = "x-user".to_owned();
            config.routes = vec![Route {
                prefix: "/api".to_owned(),
                tier: Some(1),
                partition: None,
            }];
        });
        let claims = headers(&[("tidegate-priority", "0/9"), ("x-user", "u")]);
        let class = c.classify("/", &claims, false);
        assert_eq!(class.priority, p(4, 2));
        assert!(class.header_untrusted && !class.header_invalid);
        assert_eq!(c.classify("/api/x", &claims, false).priority, p(1, 2));
        let quiet = c.classify("/", &headers(&[("x-user", "u")]), false);
        assert_eq!(quiet.priority, p(4, 2), "no cohort from the caller key");
        assert!(!quiet.header_untrusted);
        assert_eq!(c.classify("/", &claims, true).priority, p(0, 9));
    }
}
