//! Whether more arrives than gets into the service: the gate's own word for overload.
//!
//! A queue in front of a full service is a good queue or a bad one (CoDel's terms): one that
//! absorbs the chance peaks of a demand the service can serve drains again; one that stands
//! in front of a demand above the capacity only adds wait. The wait bound
//! ([`crate::gate::QueueConfig::wait_bound`]) measures a wait against the service's fastest
//! answer where the queue would stand, and against its mean answer where it drains: by the
//! fastest below capacity, it turned away the peaks a queue would have served (in front of
//! 30 workers with exponential work at half their capacity, the Poisson peaks over the limit
//! found no answer fast enough to wait behind, and were shed).
//!
//! Below capacity everything that arrives gets in, at once or after a wait, so that over any
//! span the arrivals exceed the admissions only by what the queue holds more at its end than
//! at its start; above it, also by what was turned away or expired, whatever turned it away
//! (so that the bound's own rejections keep the overload seen while it lasts). Admissions,
//! not completions: a service filling its slots from idle completes nothing for a while, and
//! is not overloaded. The counts decay per event, remembering about [`MEMORY`] of them, and
//! their difference is judged against the spread of the difference of two Poisson counts of
//! that size: an overload from [`EVIDENCE`] standard deviations, over below [`RELIEF`].

/// The events (arrivals and admissions) the counts remember: each weighs `1 - 1 / MEMORY`
/// of the one after it. The excess of an overload of `r` times the capacity settles at
/// `(r - 1) / (r + 1) * sqrt(MEMORY)` standard deviations: 4 at 1.5x for 400 events, over
/// [`EVIDENCE`]; a shorter memory leaves a mild overload unseen for as long as it lasts.
const MEMORY: f64 = 400.0;

/// Standard deviations of the difference by which arrivals must exceed admissions for the
/// demand to be an overload.
const EVIDENCE: f64 = 3.0;

/// Standard deviations under which an overload is over: apart from [`EVIDENCE`], so that a
/// demand near the capacity does not flip the bound on and off with every event.
const RELIEF: f64 = 1.0;

/// The decayed counts of arrivals and admissions, and the verdict on them.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Demand {
    arrived: f64,
    admitted: f64,
    overloaded: bool,
}

impl Demand {
    /// A request arrived.
    pub(super) fn arrived(&mut self) {
        self.decay();
        self.arrived += 1.0;
        self.judge();
    }

    /// A request went into the service, at its arrival or from the queue.
    pub(super) fn admitted(&mut self) {
        self.decay();
        self.admitted += 1.0;
        self.judge();
    }

    /// Whether more arrives than gets in, beyond chance.
    pub(super) fn overloaded(&self) -> bool {
        self.overloaded
    }

    fn decay(&mut self) {
        let kept = 1.0 - 1.0 / MEMORY;
        self.arrived *= kept;
        self.admitted *= kept;
    }

    fn judge(&mut self) {
        let excess = (self.arrived - self.admitted) / (self.arrived + self.admitted).sqrt();
        if excess > EVIDENCE {
            self.overloaded = true;
        } else if excess < RELIEF {
            self.overloaded = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `rounds` rounds of `arrivals` arrivals and then `admissions` admissions, and
    /// returns the verdict after each round.
    fn feed(demand: &mut Demand, rounds: usize, arrivals: u32, admissions: u32) -> Vec<bool> {
        (0..rounds)
            .map(|_| {
                for _ in 0..arrivals {
                    demand.arrived();
                }
                for _ in 0..admissions {
                    demand.admitted();
                }
                demand.overloaded()
            })
            .collect()
    }

    #[test]
    fn a_demand_the_service_keeps_up_with_is_no_overload_whatever_it_holds() {
        let mut demand = Demand::default();
        feed(&mut demand, 1_000, 1, 1);
        // Arrivals run ahead of admissions by 30 (a peak that queues 30), then the queue
        // drains: on the whole they keep pace.
        for _ in 0..10 {
            assert!(!feed(&mut demand, 30, 1, 0).contains(&true));
            assert!(!feed(&mut demand, 30, 0, 1).contains(&true));
            assert!(!feed(&mut demand, 300, 1, 1).contains(&true));
        }
    }

    #[test]
    fn three_times_the_capacity_is_seen_within_a_few_hundred_events() {
        let mut demand = Demand::default();
        feed(&mut demand, 1_000, 1, 1);
        let verdicts = feed(&mut demand, 100, 3, 1);
        let seen = verdicts.iter().position(|&v| v).expect("overload seen");
        assert!(seen < 50, "after {seen} rounds of 4 events");
        assert!(
            verdicts[seen..].iter().all(|&v| v),
            "it stays seen while it lasts"
        );
    }

    #[test]
    fn half_again_the_capacity_is_seen_and_ends_when_the_demand_falls() {
        let mut demand = Demand::default();
        feed(&mut demand, 1_000, 1, 1);
        let verdicts = feed(&mut demand, 1_000, 3, 2);
        assert!(verdicts.last() == Some(&true), "1.5x is an overload");
        let after = feed(&mut demand, 1_000, 1, 1);
        assert_eq!(after.last(), Some(&false), "the overload ended");
    }
}
