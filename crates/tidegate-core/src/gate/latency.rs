//! The service's latency as the gate sees it, for bounding the gate's own queueing by it.
//!
//! A queue in front of a service is worth having when a request waits a small part of what the
//! service takes anyway. PIE's 15 ms target and a 500 ms queue timeout are small next to a
//! service that answers in 100 ms or 2 s, and large next to one that answers in 2-20 ms
//! (RSocket's servers): at a limit of 1, a request that finds the service busy waits for the
//! one in service to finish, up to 19 ms there, which doubles the tail whatever PIE does. The
//! gate measures what it needs from the answers it passes: the fastest recent answer (what the
//! service costs at its lightest) and the mean (what a slot is held for), successes only, as a
//! refused request answers in microseconds and would fake a fast service.

use crate::time::{Nanos, Time};

/// How long the fastest answer is remembered: the lowest of the current and the last period
/// of this length, so that a service that got slower is seen within two periods.
const FASTEST_PERIOD: Nanos = Nanos::from_secs(10);

/// Time constant of the mean: about a second of answers, whatever their rate, so that the
/// mean spans a whole period of a service that counts its requests per second.
const MEAN_TIME_CONSTANT: f64 = 1.0;

/// The shortest time constant of the latest answers' mean
/// ([`ServiceLatency::expected_answer`]): the clock's resolution, so that a service
/// answering in no time measured keeps a finite one.
const SHORTEST_LATEST_HORIZON: f64 = 1e-9;

/// The fastest recent answer, the mean of recent answers, and the mean of the latest ones.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ServiceLatency {
    /// Lowest rtt of the current period, and when it began.
    current: Option<(Time, Nanos)>,
    /// Lowest rtt of the period before.
    previous: Option<Nanos>,
    mean: Option<DecayedMean>,
    /// The mean of the answers of about the last mean answer's time.
    latest: Option<DecayedMean>,
}

impl ServiceLatency {
    /// A success took `rtt`, finishing at `now`.
    pub(super) fn record(&mut self, now: Time, rtt: Nanos) {
        self.current = match self.current {
            Some((start, lowest)) if now.saturating_since(start) < FASTEST_PERIOD => {
                Some((start, lowest.min(rtt)))
            }
            Some((_, lowest)) => {
                self.previous = Some(lowest);
                Some((now, rtt))
            }
            None => Some((now, rtt)),
        };
        let rtt = rtt.as_secs_f64();
        let mean = match self.mean {
            Some(decayed) => decayed.fed(now, rtt, MEAN_TIME_CONSTANT),
            None => DecayedMean::first(now, rtt, MEAN_TIME_CONSTANT),
        };
        self.mean = Some(mean);
        let horizon = mean.mean().max(SHORTEST_LATEST_HORIZON);
        self.latest = Some(match self.latest {
            Some(decayed) => decayed.fed(now, rtt, horizon),
            None => DecayedMean::first(now, rtt, horizon),
        });
    }

    /// The fastest answer of the last one or two periods.
    pub(super) fn fastest(&self) -> Option<Nanos> {
        let (_, current) = self.current?;
        Some(
            self.previous
                .map_or(current, |previous| previous.min(current)),
        )
    }

    /// The mean answer, in seconds.
    pub(super) fn mean(&self) -> Option<f64> {
        self.mean.as_ref().map(DecayedMean::mean)
    }

    /// What a request sent into the service now is answered in, in seconds: the larger of
    /// the mean and the mean of the answers of about the last mean answer's time, which
    /// were sent when the service held what it holds now. When a burst fills the service's
    /// own queue, the last second's answers are mostly those from before it: behind 30
    /// workers of constant 100 ms work whose callers leave at 200 ms, in bursts of 3x, a
    /// request that had waited in the gate was sent on the mean of before the burst, and a
    /// quarter of the answers came after their callers had left.
    pub(super) fn expected_answer(&self) -> Option<f64> {
        let mean = self.mean()?;
        Some(self.latest.map_or(mean, |latest| mean.max(latest.mean())))
    }

    /// How long a request queued behind `ahead` others would wait for a slot, by Little's law:
    /// slots free at `limit / mean` a second. `None` before any answer.
    pub(super) fn expected_wait(&self, ahead: usize, limit: u32) -> Option<f64> {
        let mean = self.mean()?;
        Some((ahead as f64 + 1.0) * mean / f64::from(limit.max(1)))
    }
}

/// The mean of the answers over about the last [`MEAN_TIME_CONSTANT`], each weighted by the
/// time since the answer before it, `1 - e^(-gap)`, as the weights decay by `e^(-age)`; over
/// the sum of the weights, which nears 1 after a few time constants. Without that sum, the
/// first answer held the weight of all the time before it, and for its first second a gate's
/// mean was mostly that answer, the fastest (short requests finish first): in front of 1 ms of
/// exponential work it read 20-50 us, and the wait bound measured a queue of 240 (12 ms, past
/// the callers' 10 ms timeout) as 0.2 ms of wait. The sums are kept and divided when read, so
/// that an answer costs two multiply-adds, no division.
#[derive(Clone, Copy, Debug)]
struct DecayedMean {
    /// When it was last fed.
    fed: Time,
    /// The sum of the weighted answers, in seconds.
    sum: f64,
    /// The sum of their weights.
    weight: f64,
}

impl DecayedMean {
    /// The first answer, of `rtt` seconds at `now`, over the time constant `tau`: it weighs
    /// what it covers, as no answer came before it for about its own time.
    fn first(now: Time, rtt: f64, tau: f64) -> DecayedMean {
        let weight = decay_weight(rtt / tau);
        DecayedMean {
            fed: now,
            sum: weight * rtt,
            weight,
        }
    }

    /// With an answer of `rtt` seconds at `now`, over the time constant `tau`.
    fn fed(self, now: Time, rtt: f64, tau: f64) -> DecayedMean {
        let dt = now.saturating_since(self.fed).as_secs_f64();
        let gap = decay_weight(dt / tau);
        DecayedMean {
            fed: now,
            sum: self.sum + gap * (rtt - self.sum),
            weight: self.weight + gap * (1.0 - self.weight),
        }
    }

    fn mean(&self) -> f64 {
        self.sum / self.weight
    }
}

/// How the driver's own delays compare with the service's time, over the successes whose
/// driver measured the service's part itself ([`crate::gate::Permit::measured`]): a proxy
/// holds a slot from admission until it has passed the answer on, and the service has the
/// request for part of that. When the rest, the proxy's own wait for CPU, is the larger part,
/// the proxy and not the service is the bottleneck: a slot refused then relieves nothing
/// behind it, and costs the proxy a refusal on top of the reading it already paid for.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct OwnDelay {
    /// Mean slot hold and mean service time in seconds, and when they were last fed.
    means: Option<(Time, f64, f64)>,
}

/// How long the driver's delays are believed to dominate after the last measured answer
/// that said so: the mean's own time constant.
const OWN_DELAY_MEMORY: Nanos = Nanos::from_secs(1);

/// The least mean own delay that can dominate, whatever the service's time: below half a
/// millisecond it is the driver's ordinary work and the scheduler's jitter, not a backlog.
/// Measured on `tidegate proxy` (one thread, an nginx origin answering in 20-90 us, wrk
/// keep-alive; docs/performance.md section 4): at one connection its own share of a slot was
/// 30-60 us (220 us over its first answers), at 10 connections 150-170 us, at 50 about
/// 1 ms, a backlog of 50 requests of 20 us. At the earlier floor of 1 ms, 50 connections sat
/// on the line and the gate turned 6-24% of them away, with the upstream idle. Without a
/// floor, an idle proxy in front of an upstream answering in tens of microseconds spends
/// longer than the upstream on each request and its learnt limit would never bind (a fixed
/// limit always does, [`crate::limit::Limit::is_fixed`]).
const OWN_DELAY_FLOOR: f64 = 0.000_5;

impl OwnDelay {
    /// A success held its slot for `held`, of which the service took `service`.
    pub(super) fn record(&mut self, now: Time, held: Nanos, service: Nanos) {
        let (held, service) = (held.as_secs_f64(), service.as_secs_f64());
        self.means = Some(match self.means {
            Some((last, mean_held, mean_service)) => {
                let dt = now.saturating_since(last).as_secs_f64();
                let weight = decay_weight(dt / MEAN_TIME_CONSTANT);
                (
                    now,
                    mean_held + weight * (held - mean_held),
                    mean_service + weight * (service - mean_service),
                )
            }
            None => (now, held, service),
        });
    }

    /// Whether, as of the answers of the last second, slots were held more by the driver's
    /// own delays than by the service, and by more than [`OWN_DELAY_FLOOR`].
    pub(super) fn dominates(&self, now: Time) -> bool {
        self.means.is_some_and(|(last, held, service)| {
            now.saturating_since(last) < OWN_DELAY_MEMORY
                && held - service > service.max(OWN_DELAY_FLOOR)
        })
    }
}

/// `1 - e^-x`, the weight of a new answer after `x` time constants. A busy gate feeds the mean
/// every few microseconds (x near 1e-6), where `1.0 - (-x).exp()` costs an `exp` per answer and
/// keeps few of its bits (the subtraction from 1 leaves a relative error of about 2e-16 / x);
/// below 2^-10 the series to its fifth term is exact to well under a unit in the last place
/// (the first term left out is x^6 / 720) and costs a few multiplications, above it `expm1`
/// is exact.
fn decay_weight(x: f64) -> f64 {
    if x < 1.0 / 1024.0 {
        x * (1.0 - x / 2.0 * (1.0 - x / 3.0 * (1.0 - x / 4.0 * (1.0 - x / 5.0))))
    } else {
        -(-x).exp_m1()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Time {
        Time::ZERO + Nanos::from_millis(ms)
    }

    #[test]
    fn the_decay_weight_is_one_minus_e_to_the_minus_x() {
        for x in [
            1e-9,
            1e-6,
            3.7e-5,
            1e-4,
            9.7e-4,
            1.0 / 1024.0,
            0.01,
            0.5,
            1.0,
            7.0,
        ] {
            let exact = -f64::exp_m1(-x);
            let weight = decay_weight(x);
            assert!(
                ((weight - exact) / exact).abs() < 1e-15,
                "{x}: {weight} vs {exact}"
            );
        }
    }

    #[test]
    fn the_drivers_delay_dominates_while_it_holds_slots_longer_than_the_service_for_a_second() {
        let ms = Nanos::from_millis;
        let mut own = OwnDelay::default();
        assert!(!own.dominates(at(0)));
        // Held 10 ms, 6 of them at the service: the service's time is the larger part.
        own.record(at(0), ms(10), ms(6));
        assert!(!own.dominates(at(0)));
        // A second of answers held 40 ms for 1 ms of service: the proxy's own.
        for i in 1..=100 {
            own.record(at(i * 10), ms(40), ms(1));
        }
        assert!(own.dominates(at(1_000)));
        // A proxy at ease in front of a 50 us upstream spends longer than the upstream on
        // each request, but not half a millisecond: no backlog.
        let mut idle = OwnDelay::default();
        for i in 0..100 {
            idle.record(at(i), Nanos::from_micros(300), Nanos::from_micros(50));
        }
        assert!(!idle.dominates(at(100)));
        // Fifty requests of 20 us ahead of each one: a backlog of 1 ms, the driver's own
        // (a proxy at 50 connections, measured at 1.00-1.02 ms in front of a 60 us upstream).
        let mut busy = OwnDelay::default();
        for i in 0..100 {
            busy.record(at(i), Nanos::from_micros(700), Nanos::from_micros(60));
        }
        assert!(busy.dominates(at(100)));
        // Said a second ago and not since: forgotten.
        assert!(!own.dominates(at(2_000)));
    }

    #[test]
    fn the_fastest_answer_is_forgotten_within_two_periods() {
        let mut latency = ServiceLatency::default();
        assert_eq!(latency.fastest(), None);
        latency.record(at(0), Nanos::from_millis(2));
        latency.record(at(5_000), Nanos::from_millis(9));
        assert_eq!(latency.fastest(), Some(Nanos::from_millis(2)));
        // The service got slower: the 2 ms answer is in the previous period, then gone.
        latency.record(at(10_000), Nanos::from_millis(20));
        assert_eq!(latency.fastest(), Some(Nanos::from_millis(2)));
        latency.record(at(20_000), Nanos::from_millis(25));
        assert_eq!(latency.fastest(), Some(Nanos::from_millis(20)));
    }

    #[test]
    fn the_first_answer_weighs_no_more_than_the_time_it_covers() {
        // A fast first answer, then 30 ms of answers at 1 ms, 30 us apart (1 ms exponential
        // work at 30 workers): the mean is theirs, not the first one's.
        let mut latency = ServiceLatency::default();
        latency.record(Time::ZERO, Nanos::from_micros(20));
        for i in 1..=1_000 {
            latency.record(
                Time::ZERO + Nanos::from_micros(30 * i),
                Nanos::from_millis(1),
            );
        }
        let mean = latency.mean().expect("fed");
        assert!((mean - 0.001).abs() < 0.000_01, "{mean}");
        // So a queue of 240 in front of a limit of 20 is 12 ms of wait, not 0.2 ms.
        let wait = latency.expected_wait(240, 20).expect("fed");
        assert!((wait - 0.012).abs() < 0.000_2, "{wait}");
    }

    #[test]
    fn the_mean_spans_about_a_second_whatever_the_rate() {
        // 1,000 answers a second at 10 ms, then 5 ms for a second: most of the way there.
        let mut fast = ServiceLatency::default();
        for i in 0..1_000 {
            fast.record(at(i), Nanos::from_millis(10));
        }
        for i in 1_000..2_000 {
            fast.record(at(i), Nanos::from_millis(5));
        }
        let fast = fast.mean().expect("fed");
        // 4 answers a second, the same change.
        let mut slow = ServiceLatency::default();
        for i in 0..4 {
            slow.record(at(i * 250), Nanos::from_millis(10));
        }
        for i in 4..8 {
            slow.record(at(i * 250), Nanos::from_millis(5));
        }
        let slow = slow.mean().expect("fed");
        // The first second's answers weigh `e^-1 - e^-2` of the `1 - e^-2` that two seconds
        // of answers add up to (four answers a second are a coarser sum of the same).
        let (e1, e2) = ((-1.0f64).exp(), (-2.0f64).exp());
        let expected = 0.005 + 0.005 * (e1 - e2) / (1.0 - e2);
        assert!((fast - expected).abs() < 0.000_1, "{fast} vs {expected}");
        assert!((slow - expected).abs() < 0.000_2, "{slow} vs {expected}");
        // Little's law: 3 ahead of a limit of 2 at that mean.
        let mut latency = ServiceLatency::default();
        latency.record(at(0), Nanos::from_millis(10));
        let wait = latency.expected_wait(3, 2).expect("fed");
        assert!((wait - 0.02).abs() < 1e-12, "{wait}");
    }
}
