//! Models of a deployment at fleet scale: hops of a call chain, each several proxy instances
//! (each with its own gate) in front of several service instances, load balancers between
//! them, and the clients' retry behaviour.
//!
//! A hop is one service of the chain (a frontend A, the B it calls, ...). A request to a hop
//! goes through a load balancer to one of its proxies, whose gate admits, queues or refuses
//! it; the proxy sends what it admits to one of the hop's instances, as tidegate's proxy
//! balances its upstreams: to the one it has the fewest requests outstanding at, ties in turn
//! ([`Upstreams`]). An instance is a pool of workers with a FIFO: a worker does the request's own work,
//! then the request makes `calls` calls to the next hop, one after another or all at once, and
//! is answered when they are (its latency includes theirs); the worker is free while it waits,
//! as in an asynchronous server. A failed call fails the request.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use tidegate_core::Nanos;
use tidegate_core::config::GateConfig;
use tidegate_core::rng::Rng;

use crate::{ConfigError, NonNegative};

/// How a load balancer picks among its targets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BalancePolicy {
    /// In turn.
    #[default]
    RoundRobin,
    /// Uniformly at random.
    Random,
    /// The less loaded of two drawn at random (the "power of two choices", as Finagle's and
    /// Envoy's least-request balancers): nearly the balance of a full scan at the cost of two
    /// reads, where a full scan of 100 proxies per request would dominate the run.
    LeastLoaded,
}

/// A load balancer's state.
#[derive(Clone, Debug, Default)]
pub struct Balancer {
    policy: BalancePolicy,
    next: usize,
}

impl Balancer {
    pub fn new(policy: BalancePolicy) -> Balancer {
        Balancer { policy, next: 0 }
    }

    /// One of `n` targets (`n > 0`), `load(i)` the load of target `i`.
    pub fn pick(&mut self, n: usize, load: impl Fn(usize) -> u32, rng: &mut Rng) -> usize {
        let n = n.max(1);
        let draw = |rng: &mut Rng| rng.range_inclusive(0, n as i64 - 1) as usize;
        match self.policy {
            BalancePolicy::RoundRobin => {
                let i = self.next % n;
                self.next = (i + 1) % n;
                i
            }
            BalancePolicy::Random => draw(rng),
            BalancePolicy::LeastLoaded => {
                let (a, b) = (draw(rng), draw(rng));
                if load(b) < load(a) { b } else { a }
            }
        }
    }
}

/// How a proxy picks one of its hop's instances: tidegate-proxy's least-loaded balancer
/// (`crates/tidegate-proxy/src/upstream.rs`), which sends each request to the upstream with the
/// most availability, its own outstanding requests there against the upstream's limit, ties in
/// turn. The model's proxy has one gate for all its instances, so the availability orders as
/// the outstanding count does. Against round robin, it keeps a slow instance's queue from
/// growing while another's workers idle: with exponential work times and a few workers per
/// instance, round robin leaves the bottleneck hop's workers idle a tenth of the time while
/// requests wait at its other instances.
#[derive(Clone, Debug)]
pub struct Upstreams {
    /// The proxy's requests outstanding at each instance.
    outstanding: Vec<u32>,
    next: usize,
}

impl Upstreams {
    /// Upstreams for `n` instances (at least one).
    pub fn new(n: usize) -> Upstreams {
        Upstreams {
            outstanding: vec![0; n.max(1)],
            next: 0,
        }
    }

    /// The instance to send a request to, counted as outstanding there until
    /// [`Upstreams::done`].
    pub fn pick(&mut self) -> usize {
        let n = self.outstanding.len();
        let start = self.next;
        self.next = (start + 1) % n;
        let mut best = start;
        for offset in 1..n {
            let i = (start + offset) % n;
            if self.outstanding[i] < self.outstanding[best] {
                best = i;
            }
        }
        self.outstanding[best] += 1;
        best
    }

    /// A request sent to `instance` was answered.
    pub fn done(&mut self, instance: usize) {
        if let Some(count) = self.outstanding.get_mut(instance) {
            *count = count.saturating_sub(1);
        }
    }
}

/// How a request makes its calls to the next hop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallMode {
    /// One after another; the first failure ends the request.
    #[default]
    Sequential,
    /// All at once; the request is answered when all are.
    Parallel,
}

/// A lasting change of a hop's speed: from `at`, every piece of work takes `factor` times as
/// long (2 halves the hop's capacity).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slowdown {
    pub at: Nanos,
    pub factor: NonNegative,
}

/// One hop of the chain.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HopConfig {
    /// A name for the reports. Default `hop N`.
    #[serde(default)]
    pub name: String,
    /// Proxy instances, each with its own gate. Default 1.
    #[serde(default = "one")]
    pub proxies: NonZeroU32,
    /// Service instances behind them, shared by all the hop's proxies. Default 1.
    #[serde(default = "one")]
    pub instances: NonZeroU32,
    /// Workers per instance. Default 1.
    #[serde(default = "one")]
    pub workers: NonZeroU32,
    /// Mean own work of a request (exponentially distributed).
    pub work: Nanos,
    /// Calls to the next hop each request makes; 0 for the last hop. Default 0.
    #[serde(default)]
    pub calls: u32,
    #[serde(default)]
    pub mode: CallMode,
    /// How callers pick one of the hop's proxies. Default round robin. (The proxies pick
    /// instances as tidegate's proxy does, [`Upstreams`].)
    #[serde(default)]
    pub balance: BalancePolicy,
    /// One-way network delay into the hop. Default 0.5 ms.
    #[serde(default = "half_millisecond")]
    pub network: Nanos,
    #[serde(default)]
    pub slowdown: Option<Slowdown>,
    /// This hop's proxies' gate, instead of the arm's (when the arm has gates): each service
    /// of a chain protected as its owners configured it.
    #[serde(default)]
    pub gate: Option<GateConfig>,
}

fn one() -> NonZeroU32 {
    NonZeroU32::MIN
}

fn half_millisecond() -> Nanos {
    Nanos::from_micros(500)
}

impl HopConfig {
    /// Requests a second the hop's instances can do at `factor` times their nominal work.
    pub fn capacity(&self, factor: f64) -> f64 {
        let workers = f64::from(self.instances.get()) * f64::from(self.workers.get());
        workers / (self.work.as_secs_f64() * factor)
    }

    /// The work factor in force at `t`.
    pub fn factor_at(&self, t: Nanos) -> f64 {
        match self.slowdown {
            Some(s) if t >= s.at => s.factor.get(),
            _ => 1.0,
        }
    }
}

/// How clients retry a failed attempt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryMode {
    /// Never.
    #[default]
    None,
    /// At once, up to `max_attempts`, whatever the service says.
    Naive,
    /// After an exponential backoff with jitter.
    Backoff,
    /// After the backoff and at least the `Retry-After` of a refusal.
    RetryAfter,
}

/// The clients' retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientRetry {
    pub mode: RetryMode,
    /// Attempts in all, the first included. Default 3.
    pub max_attempts: u32,
    /// Retries at most 10% of requests plus 1 a second (`tidegate_core::outbound`).
    pub budget: bool,
}

impl Default for ClientRetry {
    fn default() -> ClientRetry {
        ClientRetry {
            mode: RetryMode::None,
            max_attempts: 3,
            budget: false,
        }
    }
}

/// Checks what the parser cannot about a chain of hops.
pub fn validate_hops(hops: &[HopConfig]) -> Result<(), ConfigError> {
    if hops.is_empty() {
        return Err(ConfigError::new("hops", "needs at least one hop"));
    }
    for (i, hop) in hops.iter().enumerate() {
        let key = |k: &str| format!("hops[{i}].{k}");
        if hop.work.is_zero() {
            return Err(ConfigError::new(key("work"), "must be longer than zero"));
        }
        if hop.proxies.get() > 1024 || hop.instances.get() > 1024 {
            return Err(ConfigError::new(
                key("proxies"),
                "at most 1024 proxies and 1024 instances a hop",
            ));
        }
        let last = i + 1 == hops.len();
        if last && hop.calls > 0 {
            return Err(ConfigError::new(
                key("calls"),
                "the last hop has no next hop to call",
            ));
        }
        if hop.calls > 16 {
            return Err(ConfigError::new(key("calls"), "at most 16"));
        }
        if hop.slowdown.is_some_and(|s| s.factor.get() <= 0.0) {
            return Err(ConfigError::new(
                key("slowdown.factor"),
                "must be above zero",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_robin_cycles_random_and_least_loaded_spread() {
        let mut rng = Rng::seed(1);
        let mut rr = Balancer::new(BalancePolicy::RoundRobin);
        let picks: Vec<usize> = (0..7).map(|_| rr.pick(3, |_| 0, &mut rng)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
        let mut random = Balancer::new(BalancePolicy::Random);
        let mut counts = [0u32; 4];
        for _ in 0..4_000 {
            counts[random.pick(4, |_| 0, &mut rng)] += 1;
        }
        assert!(
            counts.iter().all(|&c| (850..1150).contains(&c)),
            "{counts:?}"
        );
        // Least loaded never picks the loaded target when another is drawn.
        let mut least = Balancer::new(BalancePolicy::LeastLoaded);
        let loaded = (0..1_000)
            .filter(|_| least.pick(2, |i| if i == 0 { 10 } else { 0 }, &mut rng) == 0)
            .count();
        assert!(loaded < 300, "{loaded}");
    }

    #[test]
    fn a_proxy_sends_to_the_instance_it_has_the_fewest_requests_at() {
        let mut upstreams = Upstreams::new(3);
        // Idle instances share the load in turn.
        assert_eq!(
            [upstreams.pick(), upstreams.pick(), upstreams.pick()],
            [0, 1, 2]
        );
        // 0 and 2 answer; 1 is still busy, so the next two go to 0 and 2.
        upstreams.done(0);
        upstreams.done(2);
        let (a, b) = (upstreams.pick(), upstreams.pick());
        assert_eq!([a.min(b), a.max(b)], [0, 2]);
        // All even again: in turn, from the one after the last turn's start.
        assert_eq!([upstreams.pick(), upstreams.pick()], [2, 0]);
        // An unknown instance is ignored.
        upstreams.done(7);
        assert_eq!(Upstreams::new(0).pick(), 0);
    }

    #[test]
    fn capacity_follows_the_slowdown() {
        let hop: HopConfig = toml::from_str(
            "instances = 2\nworkers = 5\nwork = \"10ms\"\nslowdown = { at = \"20s\", factor = 2 }",
        )
        .expect("valid");
        assert!((hop.capacity(1.0) - 1_000.0).abs() < 1e-9);
        assert_eq!(hop.factor_at(Nanos::from_secs(19)), 1.0);
        assert_eq!(hop.factor_at(Nanos::from_secs(20)), 2.0);
        assert!((hop.capacity(2.0) - 500.0).abs() < 1e-9);
    }

    #[test]
    fn validation_names_the_key() {
        let hop = |calls| HopConfig {
            name: String::new(),
            proxies: one(),
            instances: one(),
            workers: one(),
            work: Nanos::from_millis(1),
            calls,
            mode: CallMode::Sequential,
            balance: BalancePolicy::RoundRobin,
            network: Nanos::ZERO,
            slowdown: None,
            gate: None,
        };
        assert_eq!(
            validate_hops(&[hop(1), hop(1)]).map_err(|e| e.key),
            Err("hops[1].calls".to_owned())
        );
        assert!(validate_hops(&[hop(2), hop(0)]).is_ok());
        assert_eq!(
            validate_hops(&[]).map_err(|e| e.key),
            Err("hops".to_owned())
        );
    }
}
