//! Slow start by rounds (TCP's per-round doubling, with HyStart++'s exit, RFC 9406): while
//! slow start lasts, the limit may double once a *round*, the time for a request admitted
//! after the round began to answer, rather than once a window. A window lasts 100 answers'
//! rtt or 500 ms whatever the limit, and measures its mean to a sixth of the tolerance (16
//! work times a window for exponential work): from the initial 20, a knee of 200 at 5 ms of
//! work took 2 s of windows to reach, a knee of 1,000 at 100 ms some 80 work times.
//!
//! A round's signal is the least rtt of its first [`ROUND_ANSWERS`] answers. A queue in the
//! service delays every request, the fastest too, so the least answer rises by the queue's
//! wait; a heavy tail's slow answers, which make a window's mean noisy and, while slots fill,
//! biased short, do not move it. A round whose least answer rose by [`RISE`] of the mean rtt
//! stops the doubling; [`CONFIRMING_ROUNDS`] in a row stop it for the rest of slow start, and
//! a round back under it resumes (HyStart++'s conservative slow start: one high least answer
//! of 32 exponential ones happens by chance). The windows still judge every doubling, as
//! before: a doubling past the knee that the least answer did not show (contention slows
//! the short answers by little) is shrunk back by the latency it adds.

use crate::time::{Nanos, Time};

/// Answers whose least rtt is a round's signal; a round with fewer neither doubles nor
/// judges. A round holds about one answer per request of the limit, so under a limit of
/// about 32 slow start doubles by its windows alone.
pub(super) const ROUND_ANSWERS: u32 = 32;

/// The rise of a round's least answer over the last round's, as a fraction of the mean rtt,
/// that reads as a queue: three times the noise of the least of 32 exponential answers
/// (`1/32` of the mean), and a fifth of what a queue at 1.5 times the knee adds.
pub(super) const RISE: f64 = 0.1;

/// Rounds in a row whose least answer rose that end slow start's doubling by rounds.
pub(super) const CONFIRMING_ROUNDS: u32 = 3;

/// Requests in flight, over what Little's law gives for the window's answers (its rate
/// times their mean rtt), past which a round does not double: the answers so far leave out
/// requests still running, the slow tail a doubling would be judged without.
pub(super) const LITTLE_DOUBLING: f64 = 1.25;

/// The state of slow start's rounds.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Rounds {
    /// When the current round began: it ends with the first answer admitted after it.
    start: Time,
    /// The least rtt of the round's first answers, and how many.
    least: Option<Nanos>,
    answers: u32,
    /// The least rtt of the last round that was not rising: what a rise is measured from.
    reference: Option<Nanos>,
    /// Rounds in a row whose least answer rose.
    rising: u32,
    /// A request admitted in the round found the limit full.
    bound: bool,
    /// Rising rounds confirmed the queue: no more doubling by rounds.
    ended: bool,
}

/// What a round's end decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RoundEnd {
    /// Not the end of a round, or a round that neither doubles nor stops.
    Nothing,
    Double,
    /// The least answer rose for [`CONFIRMING_ROUNDS`] rounds: the doubling by rounds ends.
    Ended,
}

impl Rounds {
    /// Whether the doubling by rounds has ended for good.
    pub(super) fn ended(&self) -> bool {
        self.ended
    }

    /// Feeds an answer in time: `now`, its `rtt`, whether the limit was full when it was
    /// admitted, the window's mean rtt so far in seconds, and whether the window's state
    /// allows a doubling (`may_double`, asked only at a round's end). Returns what the end
    /// of a round, if this answer ends one, decided.
    pub(super) fn on_answer(
        &mut self,
        now: Time,
        rtt: Nanos,
        bound: bool,
        mean: f64,
        may_double: impl FnOnce() -> bool,
    ) -> RoundEnd {
        if self.ended {
            return RoundEnd::Nothing;
        }
        self.bound |= bound;
        if self.answers < ROUND_ANSWERS {
            self.least = Some(self.least.map_or(rtt, |least| least.min(rtt)));
            self.answers += 1;
        }
        let admitted = Time::from_nanos(now.as_nanos().saturating_sub(rtt.as_nanos()));
        // A round lasts at least the mean rtt: the first answers of a heavy tail's round
        // come back long before its slow ones.
        if admitted < self.start || now.saturating_since(self.start).as_secs_f64() < mean {
            return RoundEnd::Nothing;
        }
        let end = match (self.least, self.answers >= ROUND_ANSWERS) {
            (Some(least), true) => {
                let rose = self.reference.is_some_and(|reference| {
                    least.as_secs_f64() > reference.as_secs_f64() + RISE * mean
                });
                if rose {
                    self.rising += 1;
                    if self.rising >= CONFIRMING_ROUNDS {
                        self.ended = true;
                        RoundEnd::Ended
                    } else {
                        RoundEnd::Nothing
                    }
                } else {
                    // A round back under the rise clears the suspicion; the next one may
                    // double.
                    let suspected = std::mem::take(&mut self.rising) > 0;
                    self.reference = Some(least);
                    if !suspected && self.bound && may_double() {
                        RoundEnd::Double
                    } else {
                        RoundEnd::Nothing
                    }
                }
            }
            (least, _) => {
                // The first round's least answer is the reference even if the round was
                // short of answers.
                self.reference = self.reference.or(least);
                RoundEnd::Nothing
            }
        };
        *self = Rounds {
            start: now,
            least: None,
            answers: 0,
            bound: false,
            ..*self
        };
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a round of `answers` answers of `least` and longer, each admitted just before
    /// the round began, the last admitted after it so that it ends the round; returns the
    /// time of the last and what the round's end decided. The mean rtt is 10 ms.
    fn round(
        rounds: &mut Rounds,
        start: Time,
        answers: u32,
        least: Nanos,
        full: bool,
    ) -> (Time, RoundEnd) {
        let ms = Nanos::from_millis;
        for i in 0..answers - 1 {
            let rtt = least + ms(u64::from(i % 4));
            let now = start + (rtt - Nanos::from_micros(1));
            let end = rounds.on_answer(now, rtt, full, 0.01, || true);
            assert_eq!(end, RoundEnd::Nothing, "within the round");
        }
        // Admitted 1 ms after the round began, 10 ms (the mean rtt) before the end.
        let now = start + ms(11) + least;
        let rtt = now.saturating_since(start + ms(1));
        (now, rounds.on_answer(now, rtt, full, 0.01, || true))
    }

    #[test]
    fn a_round_whose_least_answer_holds_doubles_and_one_that_rose_three_times_ends_it() {
        let ms = Nanos::from_millis;
        let mut rounds = Rounds::default();
        // The first round sets the reference; the ones after, at the same least answer with
        // the limit full, double.
        let (now, end) = round(&mut rounds, Time::ZERO, 40, ms(2), true);
        assert_eq!(end, RoundEnd::Double);
        let (now, end) = round(&mut rounds, now, 40, ms(2), true);
        assert_eq!(end, RoundEnd::Double);
        // The limit never full in the round: no doubling.
        let (now, end) = round(&mut rounds, now, 40, ms(2), false);
        assert_eq!(end, RoundEnd::Nothing);
        // A round short of answers neither doubles nor judges.
        let (now, end) = round(&mut rounds, now, 20, ms(9), true);
        assert_eq!(end, RoundEnd::Nothing);
        // The least answer up by 2 ms, a fifth of the mean rtt: suspected, no doubling; back
        // under, the suspicion is cleared (and that round does not double either); then
        // three rising rounds in a row end the doubling by rounds for good.
        let (now, end) = round(&mut rounds, now, 40, ms(4), true);
        assert_eq!(end, RoundEnd::Nothing);
        let (now, end) = round(&mut rounds, now, 40, ms(2), true);
        assert_eq!(end, RoundEnd::Nothing);
        let (now, end) = round(&mut rounds, now, 40, ms(2), true);
        assert_eq!(end, RoundEnd::Double);
        let (now, _) = round(&mut rounds, now, 40, ms(4), true);
        let (now, _) = round(&mut rounds, now, 40, ms(4), true);
        assert!(!rounds.ended());
        let (now, end) = round(&mut rounds, now, 40, ms(4), true);
        assert_eq!(end, RoundEnd::Ended);
        assert!(rounds.ended());
        let (_, end) = round(&mut rounds, now, 40, ms(2), true);
        assert_eq!(end, RoundEnd::Nothing);
    }

    #[test]
    fn a_round_lasts_at_least_the_mean_rtt_and_doubles_only_where_the_window_allows() {
        let ms = Nanos::from_millis;
        let mut rounds = Rounds::default();
        let (now, _) = round(&mut rounds, Time::ZERO, 40, ms(2), true);
        // An answer admitted after the round began, but the round younger than the mean
        // rtt (10 ms): not its end.
        for i in 1..=40 {
            let at = now + ms(2) + Nanos::from_micros(i);
            let end = rounds.on_answer(at, ms(1), true, 0.01, || true);
            assert_eq!(end, RoundEnd::Nothing);
        }
        let at = now + ms(12);
        assert_eq!(
            rounds.on_answer(at, ms(1), true, 0.01, || false),
            RoundEnd::Nothing,
            "the window's state refused the doubling"
        );
    }
}
