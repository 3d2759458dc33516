//! Every gate's limit, in-flight count and queue length, read in-process by the code that
//! embeds the proxy.
//!
//! Why: the lab runs a proxy in its own process and wants the gates' state once a second
//! beside its load's figures, to see whether the controller took the path the simulator
//! predicted. Polling `/metrics` would work but parses text and goes through the admin
//! listener for figures the process already holds. [`Proxy::gates`](crate::Proxy::gates)
//! hands out a [`GateReadings`] before [`Proxy::run`](crate::Proxy::run) consumes the proxy;
//! it reads the gates as the dashboard's sampler does (the same gates in the same order, each
//! through its snapshot), and holds only the gates, not the proxy's connections or listeners,
//! so keeping it after the proxy stopped keeps nothing else open.

use std::sync::Arc;

use tidegate_tower::SharedGate;

use crate::upstream::Upstreams;

/// A read-only view of a proxy's gates: clone it freely, every clone reads the same gates
/// (those of when it was taken: a reload's new gates are not in it).
#[derive(Clone, Debug)]
pub struct GateReadings {
    /// Each gate with its name, in [`Upstreams::gates`]'s order.
    gates: Arc<[(String, SharedGate)]>,
}

/// One gate at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateReading {
    /// As in `/metrics` and `/status`: the upstream's name, `PARTITION/NAME` for a partition
    /// other than the default one.
    pub name: String,
    /// The concurrency limit in force (capped by the upstream's lease, if it sent one).
    pub limit: u32,
    /// Requests admitted and not yet finished.
    pub inflight: u32,
    /// Requests waiting in the gate's queue.
    pub queued: usize,
}

impl GateReadings {
    pub(crate) fn new(upstreams: &Upstreams) -> GateReadings {
        GateReadings {
            gates: upstreams
                .gates()
                .map(|slot| (slot.name.clone(), slot.gate.clone()))
                .collect(),
        }
    }

    /// Every gate now, one per upstream and partition, upstream by upstream. Takes each
    /// gate's lock once, for a copy of its state (as a `/metrics` scrape does): cheap at a
    /// few readings a second, not meant for every request.
    pub fn read(&self) -> Vec<GateReading> {
        self.gates
            .iter()
            .map(|(name, gate)| {
                let s = gate.snapshot();
                GateReading {
                    name: name.clone(),
                    limit: s.limit,
                    inflight: s.inflight,
                    queued: s.queued,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tidegate_core::Priority;
    use tidegate_core::config::LimitAlgorithm;

    use crate::config::Route;
    use crate::{Config, Proxy, UpstreamConfig};

    #[tokio::test]
    async fn a_proxy_with_two_upstreams_reports_each_gate_with_its_limit() {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let mut config = Config {
            listen: loopback,
            admin: loopback,
            upstreams: ["a", "b"]
                .into_iter()
                .map(|name| UpstreamConfig {
                    // Never connected to: binding does not reach the upstreams.
                    name: Some(name.to_owned()),
                    ..UpstreamConfig::new("http://127.0.0.1:9")
                })
                .collect(),
            ..Config::default()
        };
        config.gate.limit.algorithm = LimitAlgorithm::Fixed;
        config.gate.limit.fixed.limit = 7;
        let proxy = Proxy::bind(config.clone()).await.unwrap();
        let readings = proxy.gates();
        let read = readings.read();
        let names: Vec<&str> = read.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        for r in &read {
            assert_eq!((r.limit, r.inflight, r.queued), (7, 0, 0), "{r:?}");
        }

        // A request admitted by b's gate shows there, and only there, while it lasts.
        let b = &readings.gates[1].1;
        let permit = b.acquire(Priority::default()).await.unwrap();
        let inflight = |readings: &super::GateReadings| {
            readings
                .read()
                .iter()
                .map(|r| r.inflight)
                .collect::<Vec<_>>()
        };
        assert_eq!(inflight(&readings.clone()), [0, 1]);
        drop(permit);
        assert_eq!(inflight(&readings), [0, 0]);

        // With a partition, each upstream has two gates, the default partition's first.
        config.routes.push(Route {
            prefix: "/bulk".to_owned(),
            tier: None,
            partition: Some("bulk".to_owned()),
        });
        let proxy = Proxy::bind(config).await.unwrap();
        let names: Vec<String> = proxy.gates().read().into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["a", "bulk/a", "b", "bulk/b"]);
    }
}
