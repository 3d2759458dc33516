//! What a fleet run measures: per second, and over the overload (requests sent from
//! `measure_from` on).

use std::collections::HashMap;

use tidegate_core::Time;

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
    /// Sums over the measured seconds of the users shed everywhere they were seen and of
    /// those shed somewhere (the agreement's numerator and denominator).
    pub agree: (u64, u64),
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

/// Which edge proxies saw and shed each user in the current second.
#[derive(Debug, Default)]
pub(crate) struct AgreementTracker {
    second: u64,
    /// Per user, bit `p % 128` set for proxy `p`: seen, and shed.
    users: HashMap<u32, (u128, u128)>,
}

impl AgreementTracker {
    /// Records that edge proxy `proxy` admitted or shed `user` at `now`. When `now` is in a
    /// later second than the records, returns that second's `(shed everywhere, shed
    /// somewhere)` counts first.
    pub(crate) fn record(
        &mut self,
        now: Time,
        user: u32,
        proxy: u32,
        shed: bool,
    ) -> Option<(u64, u64, u64)> {
        let second = now.as_nanos() / 1_000_000_000;
        let closed = (second != self.second).then(|| self.close());
        self.second = second;
        let bit = 1u128 << (proxy % 128);
        let entry = self.users.entry(user).or_default();
        entry.0 |= bit;
        if shed {
            entry.1 |= bit;
        }
        closed
    }

    /// The current second's `(second, shed everywhere, shed somewhere)`, and a fresh start.
    pub(crate) fn close(&mut self) -> (u64, u64, u64) {
        let (mut everywhere, mut somewhere) = (0, 0);
        for (seen, shed) in self.users.values() {
            if seen.count_ones() >= 2 && *shed != 0 {
                somewhere += 1;
                everywhere += u64::from(shed == seen);
            }
        }
        self.users.clear();
        (self.second, everywhere, somewhere)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_counts_users_seen_twice_and_shed_somewhere() {
        let mut tracker = AgreementTracker::default();
        let t = Time::from_nanos(5);
        // User 1: shed by both proxies that saw it. User 2: shed by one of two. User 3: seen
        // once. User 4: admitted by both.
        for (user, proxy, shed) in [
            (1, 0, true),
            (1, 1, true),
            (2, 0, true),
            (2, 1, false),
            (3, 2, true),
            (4, 0, false),
            (4, 2, false),
        ] {
            assert_eq!(tracker.record(t, user, proxy, shed), None);
        }
        let next = Time::from_nanos(1_000_000_000);
        assert_eq!(tracker.record(next, 9, 0, false), Some((0, 1, 2)));
        assert_eq!(tracker.close(), (1, 0, 0));
    }
}
