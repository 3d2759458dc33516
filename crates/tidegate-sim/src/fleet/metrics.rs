//! What a fleet run measures: per second, and over the overload (requests sent from
//! `measure_from` on).

use tidegate_core::Time;
use tidegate_core::gate::RejectReason;

/// Why a call was turned away: by its caller, by the hop's proxy on a hint, or by the
/// hop's gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The caller's outbound layer held it back on the callee's cut-off hint.
    Withheld,
    /// The hop's proxy refused it on the cut-off hint it holds for the hops behind it.
    Hint,
    /// The gate turned it away, at arrival or from its queue (a regulator's cut, a full
    /// queue or a displacement, no lease).
    Rejected(RejectReason),
    /// It waited in the gate's queue past the queue's timeout.
    Expired,
}

impl Refusal {
    /// Every refusal, in the order of [`Refusal::index`].
    pub const ALL: [Refusal; 6] = [
        Refusal::Withheld,
        Refusal::Hint,
        Refusal::Rejected(RejectReason::Regulator),
        Refusal::Rejected(RejectReason::QueueFull),
        Refusal::Rejected(RejectReason::NoLease),
        Refusal::Expired,
    ];

    /// Its place in [`Refusal::ALL`] and in the counts kept per refusal.
    pub fn index(self) -> usize {
        match self {
            Refusal::Withheld => 0,
            Refusal::Hint => 1,
            Refusal::Rejected(RejectReason::Regulator) => 2,
            Refusal::Rejected(RejectReason::QueueFull) => 3,
            Refusal::Rejected(RejectReason::NoLease) => 4,
            Refusal::Expired => 5,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Withheld => "withheld",
            Refusal::Hint => "hint",
            Refusal::Rejected(reason) => reason.as_str(),
            Refusal::Expired => "expired",
        }
    }
}

/// Counts per [`Refusal`], indexed by [`Refusal::index`].
pub type ByRefusal = [u64; Refusal::ALL.len()];

/// One second of a run, by the time things happened.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Second {
    /// Original requests sent.
    pub offered: u64,
    /// Attempts sent (originals and retries).
    pub attempts: u64,
    /// Requests answered in time, all tiers and tiers 0-1.
    pub ok: u64,
    pub ok_important: u64,
    /// Calls admitted by a first-hop gate whose chain then failed.
    pub wasted: u64,
    /// Of the users shed by some edge proxy this second and seen by at least two, the share
    /// shed by every edge proxy that saw them; `None` when nobody was.
    pub agreement: Option<f64>,
}

/// Everything a run of one arm measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ArmResult {
    pub name: String,
    pub seconds: Vec<Second>,
    /// Over the measured window: original requests, attempts, answered in time.
    pub requests: u64,
    pub attempts: u64,
    pub ok: u64,
    /// Requests and answers of tiers 0-1, and of the others.
    pub important: (u64, u64),
    pub other: (u64, u64),
    /// Calls a first-hop gate admitted, and those whose chain then failed.
    pub edge_admitted: u64,
    pub wasted: u64,
    /// The wasted chains by the hop where they failed (the first failure of the chain) and
    /// why.
    pub wasted_by: Vec<ByRefusal>,
    /// Sums over the measured seconds of the users shed everywhere they were seen and of
    /// those shed somewhere (the agreement's numerator and denominator).
    pub agree: (u64, u64),
    /// The same sums over cohorts (priority ranks, the tier and the cohort of the caller
    /// key's hash) rather than users: issue 15's own unit, "of the cohorts shed in a second,
    /// the fraction shed on every instance". A cohort holds several users, so an edge proxy
    /// sees it more often in a second than it sees one user, and a line that moves within
    /// the second shows more (see `docs/experiments/README.md`, "Fleets and call chains").
    pub cohort_agree: (u64, u64),
    /// Sums over the measured seconds of the users shed somewhere but not everywhere they
    /// were seen, by why the edge proxies that shed them did (a user shed for two reasons in
    /// a second counts under both).
    pub disagreed_by: ByRefusal,
    /// Requests shed per hop: by the gate, by a cut-off hint at its proxy, or by the caller
    /// before sending (a hint held by the hop before).
    pub shed: Vec<u64>,
    /// Of those, dropped on a hint.
    pub hint_cuts: u64,
    /// Per hop, the whole run's gate refusals by reason: by the regulator, for a full
    /// queue, expired in the queue.
    pub reasons: Vec<[u64; 3]>,
    /// Attempts the clients' own throttle kept home.
    pub client_throttled: u64,
    /// The measured window's length, and the chain's bottleneck capacity (requests a second).
    pub window_secs: f64,
    pub bottleneck: f64,
    /// Events processed, for the cost of the run.
    pub events: u64,
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

impl ArmResult {
    /// Of the users shed in a second, the share shed on every edge proxy (the Jaccard index
    /// of the proxies' shed sets, over the users each saw).
    pub fn agreement(&self) -> Option<f64> {
        ratio(self.agree.0, self.agree.1)
    }

    /// Of the cohorts (priority ranks) shed in a second and seen by at least two edge
    /// proxies, the share shed by every edge proxy that saw them.
    pub fn cohort_agreement(&self) -> Option<f64> {
        ratio(self.cohort_agree.0, self.cohort_agree.1)
    }

    /// First-hop admissions whose chain failed later, as a share of first-hop admissions.
    pub fn wasted_share(&self) -> Option<f64> {
        ratio(self.wasted, self.edge_admitted)
    }

    /// Attempts per original request.
    pub fn amplification(&self) -> Option<f64> {
        ratio(self.attempts, self.requests)
    }

    /// Requests answered in time a second.
    pub fn goodput(&self) -> f64 {
        self.ok as f64 / self.window_secs.max(f64::MIN_POSITIVE)
    }

    /// Goodput as a share of the chain's bottleneck capacity.
    pub fn goodput_share(&self) -> f64 {
        self.goodput() / self.bottleneck
    }

    /// Share of tiers 0-1 answered in time, and of the others.
    pub fn served(&self) -> (Option<f64>, Option<f64>) {
        (
            ratio(self.important.1, self.important.0),
            ratio(self.other.1, self.other.0),
        )
    }
}

/// Which edge proxies saw and shed each user (or each cohort: any `u32` key) in the current
/// second.
#[derive(Debug, Default)]
pub(crate) struct AgreementTracker {
    second: u64,
    /// Per user, bit `p % 128` set for proxy `p`: seen, and shed; and bit
    /// [`Refusal::index`] set for each reason it was shed for.
    users: super::FastMap<u32, (u128, u128, u8)>,
}

/// One second of edge decisions, summed up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AgreementSecond {
    pub second: u64,
    /// Users seen by at least two edge proxies and shed by one: by every proxy that saw
    /// them, and by at least one.
    pub everywhere: u64,
    pub somewhere: u64,
    /// Of those shed somewhere but not everywhere, per reason they were shed for.
    pub disagreed_by: ByRefusal,
}

impl AgreementTracker {
    /// Records that edge proxy `proxy` admitted `user` at `now` (`shed` is `None`) or shed
    /// it, and why. When `now` is in a later second than the records, returns that second's
    /// sums first.
    pub(crate) fn record(
        &mut self,
        now: Time,
        user: u32,
        proxy: u32,
        shed: Option<Refusal>,
    ) -> Option<AgreementSecond> {
        let second = now.as_nanos() / 1_000_000_000;
        let closed = (second != self.second).then(|| self.close());
        self.second = second;
        let bit = 1u128 << (proxy % 128);
        let entry = self.users.entry(user).or_default();
        entry.0 |= bit;
        if let Some(why) = shed {
            entry.1 |= bit;
            entry.2 |= 1 << why.index();
        }
        closed
    }

    /// The current second's sums, and a fresh start.
    pub(crate) fn close(&mut self) -> AgreementSecond {
        let mut sums = AgreementSecond {
            second: self.second,
            ..AgreementSecond::default()
        };
        for (seen, shed, why) in self.users.values() {
            if seen.count_ones() < 2 || *shed == 0 {
                continue;
            }
            sums.somewhere += 1;
            if shed == seen {
                sums.everywhere += 1;
            } else {
                for (i, count) in sums.disagreed_by.iter_mut().enumerate() {
                    *count += u64::from(why >> i & 1);
                }
            }
        }
        self.users.clear();
        sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_counts_users_seen_twice_and_shed_somewhere() {
        let mut tracker = AgreementTracker::default();
        let t = Time::from_nanos(5);
        let cut = Some(Refusal::Rejected(RejectReason::Regulator));
        // User 1: shed by both proxies that saw it. User 2: shed by one of two, by the
        // regulator. User 3: seen once. User 4: admitted by both. User 5: shed by one of
        // three, there once for a hint and once expired.
        for (user, proxy, shed) in [
            (1, 0, cut),
            (1, 1, Some(Refusal::Expired)),
            (2, 0, cut),
            (2, 1, None),
            (3, 2, cut),
            (4, 0, None),
            (4, 2, None),
            (5, 0, None),
            (5, 1, Some(Refusal::Hint)),
            (5, 1, Some(Refusal::Expired)),
            (5, 2, None),
        ] {
            assert_eq!(tracker.record(t, user, proxy, shed), None);
        }
        let next = Time::from_nanos(1_000_000_000);
        let mut disagreed_by = ByRefusal::default();
        disagreed_by[Refusal::Hint.index()] = 1;
        disagreed_by[Refusal::Expired.index()] = 1;
        disagreed_by[Refusal::Rejected(RejectReason::Regulator).index()] = 1;
        assert_eq!(
            tracker.record(next, 9, 0, None),
            Some(AgreementSecond {
                second: 0,
                everywhere: 1,
                somewhere: 3,
                disagreed_by,
            })
        );
        assert_eq!(
            tracker.close(),
            AgreementSecond {
                second: 1,
                ..AgreementSecond::default()
            }
        );
    }

    #[test]
    fn refusals_index_their_place() {
        for (i, refusal) in Refusal::ALL.into_iter().enumerate() {
            assert_eq!(refusal.index(), i, "{refusal:?}");
        }
    }
}
