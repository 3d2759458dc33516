//! PIE, Proportional Integral controller Enhanced (RFC 8033), as Kanaloa uses it in front of a
//! service: a drop probability steered by the queueing delay the gate's queue would impose.
//!
//! PIE does not timestamp entries. Every update interval it estimates the delay from Little's
//! law, `delay = queue_len / average dequeue rate`, and moves the drop probability `p` by a
//! proportional term on the delay's distance from the target and a derivative term on its
//! change since the last update. Arrivals are then dropped with probability `p`.
//!
//! The gains are the RFC's, per second of delay. Kanaloa's pseudocode divides the delays by
//! the target instead, which at 15 ms multiplies both gains by 67: in tidegate's queue driver
//! that version swung `p` between 0.03 and 0.7 every few hundred milliseconds (the beta term
//! amplifies the Poisson noise of a 15 ms queue sample, and only steps up are capped) and held
//! the delay around 8 times the target, where the RFC's units settle `p` within a few percent
//! of the excess and the delay near the target.

use serde::{Deserialize, Serialize};

use super::cutoff::{HISTORY_HALF_LIFE, PriorityCutoff, unit};
use super::{PeersHeard, QueueStats, Regulator, RegulatorState, Verdict, updates_due};
use crate::priority::Priority;
use crate::rng::Rng;
use crate::time::{Nanos, Time};

/// Weight of a new dequeue-rate measurement in the running average. Measurements are one update
/// interval long (a handful of dequeues at low rates), so the average spans about 8 of them.
const RATE_WEIGHT: f64 = 0.125;

/// How PIE picks the arrivals it drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShedBy {
    /// A seeded coin with probability `p` for each arrival, whatever its priority (RFC 8033,
    /// Kanaloa).
    Random,
    /// The least important `p` of the recent traffic, through a [`PriorityCutoff`].
    Priority,
}

/// Configuration of [`Pie`]. The defaults are RFC 8033's, but for `shed_by`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PieConfig {
    /// Queueing delay PIE steers to (`QDELAY_REF`). Default 15 ms.
    pub target: Nanos,
    /// Time between updates of the drop probability (`T_UPDATE`). Default 15 ms.
    pub update: Nanos,
    /// How long a new burst is let through untouched (`MAX_BURST`). Default 150 ms.
    pub max_burst: Nanos,
    /// Gain on the delay's distance from the target: probability added per update per second
    /// of delay above the target (`alpha`). Default 0.125.
    pub alpha: f64,
    /// Gain on the delay's change since the last update: probability added per update per
    /// second of increase (`beta`). Default 1.25.
    pub beta: f64,
    /// An arrival that finds at most this many entries waiting is never dropped (the RFC's
    /// "2 packets" safeguard, counted in requests). Default 0: an arrival that finds nobody
    /// waiting is never dropped; beyond that, `min_wait` decides.
    pub min_queue: usize,
    /// An arrival whose wait, estimated as the entries ahead of it over the average dequeue
    /// rate, is below this is never dropped: the RFC's safeguard in time rather than in
    /// entries. Two requests ahead are 2 ms at 1,000 per second but 570 ms at 3.5 per
    /// second, already past the caller's patience in the capacity demo. Default 5 ms.
    pub min_wait: Nanos,
    /// By priority (default) or at random (as RFC 8033 and Kanaloa). With a single priority
    /// both shed the same share; with several, shedding by priority turns away the least
    /// important first, which is the point of tidegate.
    pub shed_by: ShedBy,
    /// Shedding by priority: the ranks shed in full (turned away whatever the queue) follow
    /// a rising `p` at once, and a falling one by at most this share of the traffic per
    /// second, as Cinnamon's rejector does; the draw at the line follows `p` both ways. `p`
    /// jitters by several points from one update to the next; where the share to shed is
    /// just past a tier boundary (3,000 rps of half tier 1, half tier 5 into 1,300 of
    /// capacity: 57%), each dip below 50% let tier 5 in again. Default 0.05 (a tier of half
    /// the traffic is readmitted over 10 s).
    pub cut_fall_rate: f64,
    /// Shedding by priority: this gate's callers hold back the ranks it cuts, because they
    /// honour the `tidegate-cutoff` header its responses carry (`docs/feedback.md`). The cut
    /// is then drawn over the traffic as it would arrive without their hold-back, a level
    /// rather than a share of what still comes ([`PriorityCutoff::with_held_ranks`]);
    /// otherwise each header is drawn deeper into what the callers still send than the last.
    /// Default false (for callers that hold back nothing it changes little: a held rank's
    /// floor goes as soon as its arrivals meet it).
    pub callers_hold_back: bool,
    /// Shedding by priority: draw the line at least at the share of the arrivals that this
    /// gate kept out of the service (turned away, expired in the queue, or pushed out of it),
    /// counted with this half-life, and keep the histogram of ranks the line is drawn on for
    /// as long (at least the default second). An update at which the service has room (no
    /// queue and a free slot) counts every arrival since the last as served, and the line
    /// falls. Where the gate sees a few arrivals per update (100 a second, 33 served, in
    /// front of a slow chain), PIE's delay estimate is noise, `p` stays far under the share
    /// to shed, and the queue's timeout sheds the rest: which request expires depends on its
    /// place in one gate's queue, and gates in front of the same service shed different
    /// users. Gates in front of the same service measure the same share, and over seconds of
    /// arrivals the same mix of ranks, so they draw the same line
    /// (`docs/experiments/chain-lab.md`, "A line at the shed share"). `None` (default): the
    /// line is PIE's `p` alone.
    pub line_at_shed_share: Option<Nanos>,
    /// Draw the priority line where the peers' lines lie on average (their `line` in
    /// `tidegate-peers`, `crate::peers`), while they say one; this gate's own line, drawn on
    /// its own traffic, is what it stamps for them. Gates in front of the same instances
    /// each draw their line on their own few hundred arrivals a second, and a user near the
    /// line is shed by one and admitted by the next: in the chain on real sockets, lines a
    /// dozen or two ranks apart, most of the disagreement that was not the queue's expiry
    /// (`docs/experiments/chain-lab.md`). The mean of their positions is one line for all
    /// of them, and each gate's own line still moves it by its share. Default false.
    pub line_at_peers: bool,
    /// Seed of the drop draws when shedding at random. Default 0.
    pub seed: u64,
}

impl Default for PieConfig {
    fn default() -> PieConfig {
        PieConfig {
            target: Nanos::from_millis(15),
            update: Nanos::from_millis(15),
            max_burst: Nanos::from_millis(150),
            alpha: 0.125,
            beta: 1.25,
            min_queue: 0,
            min_wait: Nanos::from_millis(5),
            shed_by: ShedBy::Priority,
            cut_fall_rate: 0.05,
            callers_hold_back: false,
            line_at_shed_share: None,
            line_at_peers: false,
            seed: 0,
        }
    }
}

/// RFC 8033 PIE as Kanaloa applies it to requests. Defaults: target 15 ms, update 15 ms, max
/// burst 150 ms, alpha 0.125, beta 1.25.
///
/// Every `update`:
///
/// 1. The dequeue rate is measured over the interval if the queue was busy throughout (an
///    interval with an empty moment measures the arrivals, not the service), and averaged.
///    `delay = queue_len / average rate`; before any measurement, the oldest entry's wait.
/// 2. `step = alpha * (delay - target) + beta * (delay - old_delay)`, delays in seconds, scaled
///    down while `p` is small as in RFC 8033 section 4.2: divided by 2048 below 0.000001, 512
///    below 0.00001, 128 below 0.0001, 32 below 0.001, 8 below 0.01 and 2 below 0.1 (Kanaloa
///    simplifies this to /8 and /2; the RFC's ladder lets `p` climb from zero without a jump).
///    Above 0.1, a step up is capped at 0.02 (RFC 8033's pseudocode, Linux `sch_pie`).
/// 3. `p += step`; if both `delay` and `old_delay` are zero, `p *= 0.98`; `p` is kept in
///    `[0, 1]`.
/// 4. The burst allowance shrinks by the elapsed time, and is re-armed to `max_burst` when
///    `p == 0` and both delays are below half the target.
///
/// On arrival: while the burst allowance lasts, everything is admitted. Otherwise an arrival
/// is admitted without a draw when `old_delay < target / 2` and `p < 0.2` (the queue is not
/// congested), when at most `min_queue` entries wait, or when the entries ahead of it would
/// keep it waiting less than `min_wait` at the average dequeue rate (the safeguards); the
/// rest are dropped with probability `p`, at random or by priority. Shedding by priority, a
/// rank that the cut-off sheds in full is turned away on the safeguard paths too, so that a
/// short queue never lets in tier 5 while tier 1 is being shed.
///
/// With [`PieConfig::line_at_shed_share`], the cut by priority is drawn at the higher of `p`
/// and the share of the arrivals the gate did not serve, counted over seconds: a gate that sees
/// less than a dequeue per update draws its line where the service needs it, not where PIE's
/// noisy delay estimate leaves `p`. With [`PieConfig::line_at_peers`], the line in force is
/// where the peers' lines lie on average, and the one drawn by `p` (and the share) is what the
/// gate stamps for them.
///
/// Left out from the RFC: de-randomization (section 5.1), which needs a uniform coin and
/// brings nothing to priority shedding; and the active/inactive switch on queue length, which
/// the burst allowance and the safeguards cover.
#[derive(Debug)]
pub struct Pie {
    target: f64,
    update: Nanos,
    max_burst: Nanos,
    alpha: f64,
    beta: f64,
    min_queue: usize,
    min_wait: f64,
    shed_by: ShedBy,
    /// Drop probability.
    p: f64,
    /// The delay estimated at the last update, in seconds.
    old_delay: f64,
    burst: Nanos,
    /// Average dequeue rate, per second, once measured.
    rate: Option<f64>,
    last_tick: Option<Time>,
    last_dequeued: u64,
    rng: Rng,
    cutoff: PriorityCutoff,
    /// What the peers said ([`Regulator::hear_peers`]): their mean drop probability and the
    /// share of the way to it `p` moves at each update, and their mean line.
    peers: Option<PeersHeard>,
    /// [`PieConfig::line_at_peers`].
    line_at_peers: bool,
    /// With [`PieConfig::line_at_shed_share`]: what the gate kept out of its service.
    shed_share: Option<ShedShare>,
}

/// The share of a gate's arrivals that did not go into its service, over decayed counts
/// (see [`PieConfig::line_at_shed_share`]).
#[derive(Debug)]
struct ShedShare {
    half_life: f64,
    /// Arrivals seen by [`Regulator::on_arrival`], all of them, since the gate started.
    arrivals: u64,
    /// Decayed counts of the arrivals and of the requests the service answered.
    arrived: f64,
    served: f64,
    /// The cumulative counts at the last update: arrivals, and requests the service answered
    /// ([`QueueStats::completed`]; not those that left the queue, which the gate counts when
    /// it takes an entry out to find it expired).
    last_arrivals: u64,
    last_served: u64,
}

impl ShedShare {
    fn new(half_life: Nanos) -> ShedShare {
        ShedShare {
            half_life: half_life.max(Nanos::from_nanos(1)).as_secs_f64(),
            arrivals: 0,
            arrived: 0.0,
            served: 0.0,
            last_arrivals: 0,
            last_served: 0,
        }
    }

    /// Starts counting from the gate's totals now.
    fn start(&mut self, queue: &QueueStats) {
        (self.last_arrivals, self.last_served) = (self.arrivals, queue.completed);
    }

    /// Takes in the interval from `last` to `now` and returns the share shed.
    fn update(&mut self, now: Time, last: Time, queue: &QueueStats) -> f64 {
        let arrived = self.arrivals.saturating_sub(self.last_arrivals) as f64;
        let mut served = queue.completed.saturating_sub(self.last_served) as f64;
        self.start(queue);
        if queue.len == 0 && queue.inflight < queue.limit {
            // The service has room: whatever the line turned away, it could have served.
            served = served.max(arrived);
        }
        let decay = 0.5f64.powf((now - last).as_secs_f64() / self.half_life);
        self.arrived = self.arrived * decay + arrived;
        self.served = self.served * decay + served;
        if self.arrived > 0.0 {
            unit(1.0 - self.served / self.arrived)
        } else {
            0.0
        }
    }
}

impl Pie {
    pub fn new(config: &PieConfig) -> Pie {
        Pie {
            target: config.target.max(Nanos::from_nanos(1)).as_secs_f64(),
            update: config.update.max(Nanos::from_nanos(1)),
            max_burst: config.max_burst,
            alpha: config.alpha,
            beta: config.beta,
            min_queue: config.min_queue,
            min_wait: config.min_wait.as_secs_f64(),
            shed_by: config.shed_by,
            p: 0.0,
            old_delay: 0.0,
            burst: config.max_burst,
            rate: None,
            last_tick: None,
            last_dequeued: 0,
            rng: Rng::seed(config.seed),
            peers: None,
            line_at_peers: config.line_at_peers,
            shed_share: config.line_at_shed_share.map(ShedShare::new),
            cutoff: {
                let history = config
                    .line_at_shed_share
                    .map_or(HISTORY_HALF_LIFE, |half_life| {
                        half_life.max(HISTORY_HALF_LIFE)
                    });
                let cutoff = PriorityCutoff::new(history).with_fall_rate(config.cut_fall_rate);
                if config.callers_hold_back {
                    cutoff.with_held_ranks()
                } else {
                    cutoff
                }
            },
        }
    }

    /// The current drop probability.
    pub fn probability(&self) -> f64 {
        self.p
    }

    /// RFC 8033 section 4.2: small probabilities move in small steps.
    fn scale(p: f64) -> f64 {
        match p {
            p if p < 0.000_001 => 1.0 / 2048.0,
            p if p < 0.000_01 => 1.0 / 512.0,
            p if p < 0.000_1 => 1.0 / 128.0,
            p if p < 0.001 => 1.0 / 32.0,
            p if p < 0.01 => 1.0 / 8.0,
            p if p < 0.1 => 1.0 / 2.0,
            _ => 1.0,
        }
    }

    /// One update of the drop probability on the queueing delay `delay` (RFC 8033, 4.2).
    fn update_probability(&mut self, delay: f64) {
        let mut step = (self.alpha * (delay - self.target) + self.beta * (delay - self.old_delay))
            * Pie::scale(self.p);
        if self.p >= 0.1 && step > 0.02 {
            step = 0.02;
        }
        self.p += step;
        if delay == 0.0 && self.old_delay == 0.0 {
            self.p *= 0.98;
        }
        self.p = unit(self.p);
        self.old_delay = delay;
    }

    fn estimate_delay(&mut self, now: Time, last: Time, queue: &QueueStats) -> f64 {
        let elapsed = (now - last).as_secs_f64();
        let dequeued = queue.dequeued.saturating_sub(self.last_dequeued);
        if queue.last_empty < last && elapsed > 0.0 {
            let sample = dequeued as f64 / elapsed;
            let average = self
                .rate
                .map_or(sample, |avg| avg + RATE_WEIGHT * (sample - avg));
            self.rate = Some(average);
        }
        match self.rate {
            _ if queue.len == 0 => 0.0,
            Some(rate) if rate > 0.0 => queue.len as f64 / rate,
            _ => queue.oldest_wait.as_secs_f64(),
        }
    }
}

impl Regulator for Pie {
    fn on_arrival(&mut self, _: Time, priority: Priority, queue_len: usize) -> Verdict {
        if let Some(share) = self.shed_share.as_mut() {
            share.arrivals += 1;
        }
        if self.shed_by == ShedBy::Priority {
            self.cutoff.record(priority.rank());
        }
        // A rank shed in full is turned away whatever the queue: the burst allowance and the
        // safeguards below keep the service busy, which is no reason to let in tier 5 while
        // tier 1 is being shed. Without this, tier 5 got in whenever the queue was short
        // while the probability, pushed up to make up for it, cut into tier 1 (Cinnamon's
        // experiment at 3,000 rps: 71 tier-5 requests a second served while 19% of tier 1
        // was shed).
        if self.shed_by == ShedBy::Priority && self.cutoff.excludes(priority.rank()) {
            return Verdict::Reject;
        }
        if !self.burst.is_zero() {
            return Verdict::Admit;
        }
        let uncongested = self.old_delay < self.target / 2.0 && self.p < 0.2;
        let short_wait = self
            .rate
            .is_some_and(|rate| rate > 0.0 && queue_len as f64 / rate < self.min_wait);
        if uncongested || queue_len <= self.min_queue || short_wait {
            return Verdict::Admit;
        }
        let drop = match self.shed_by {
            ShedBy::Random => self.rng.chance(self.p),
            ShedBy::Priority => self.cutoff.should_reject(priority.rank()),
        };
        if drop {
            Verdict::Reject
        } else {
            Verdict::Admit
        }
    }

    fn tick(&mut self, now: Time, queue: &QueueStats) {
        let Some(last) = self.last_tick.replace(now) else {
            self.last_dequeued = queue.dequeued;
            if let Some(share) = self.shed_share.as_mut() {
                share.start(queue);
            }
            return;
        };
        let delay = self.estimate_delay(now, last, queue);
        self.last_dequeued = queue.dequeued;

        // The control law is a clock's: one update per interval. A driver that ticks late (a
        // proxy ticks on its own traffic: at 8 requests a second, every ~120 ms rather than
        // every 15) gets the updates it missed, on the delay measured now, rather than one;
        // with one, the controller's gain fell with the traffic, and in front of the capacity
        // demo's 3.5 answers a second the real proxy let its queue wait ~150 ms longer than
        // the simulator, whose ticks are on time.
        let updates = updates_due(last, now, self.update);
        let before = self.old_delay;
        for _ in 0..updates {
            self.update_probability(delay);
            // The peers' mean pulls the level, after this gate's own step, which is kept
            // whole: each PIE still answers its own queue.
            if let Some(peers) = self.peers {
                self.p = unit(self.p + peers.weight * (peers.ratio - self.p));
            }
        }

        self.burst = self.burst - (now - last);
        let calm = delay < self.target / 2.0 && before < self.target / 2.0;
        if self.p == 0.0 && calm {
            self.burst = self.max_burst;
        }
        if self.shed_by == ShedBy::Priority {
            let shed = self
                .shed_share
                .as_mut()
                .map_or(0.0, |share| share.update(now, last, queue));
            self.cutoff.update(now, self.p.max(shed));
            if self.line_at_peers
                && let Some(line) = self.peers.and_then(|peers| peers.line)
            {
                self.cutoff.draw_at(line);
            }
        }
    }

    fn next_tick(&self) -> Time {
        self.last_tick.map_or(Time::ZERO, |last| last + self.update)
    }

    fn state(&self) -> RegulatorState {
        RegulatorState {
            reject_ratio: match self.shed_by {
                // The ratio the line is drawn at.
                ShedBy::Priority => self.cutoff.ratio(),
                ShedBy::Random => self.p,
            },
            cutoff_rank: match self.shed_by {
                ShedBy::Priority => self.cutoff.cutoff_rank(),
                ShedBy::Random => None,
            },
            burst: !self.burst.is_zero(),
            overloaded: self.p > 0.0,
            line: match self.shed_by {
                ShedBy::Priority => self.cutoff.line(),
                ShedBy::Random => None,
            },
        }
    }

    /// At p = 0, once no rank is held shed in full and no line drawn at the peers' is in
    /// force, every arrival is admitted. The priority histogram only matters once p > 0, and
    /// p only rises over updates that saw a standing queue, while arrivals are seen.
    fn transparent(&self) -> bool {
        self.p <= 0.0 && !self.cutoff.holding() && !self.cutoff.cutting()
    }

    fn hear_peers(&mut self, peers: Option<PeersHeard>) {
        self.peers = peers;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::priority::RANKS;
    use crate::regulator::testkit::{Mix, Setup, run};

    /// Ticks a regulator every 15 ms with a queue of a given length that the service empties
    /// at 1000 entries per second, so that PIE's delay estimate is `len` milliseconds.
    struct Feed {
        now: Time,
        dequeued: u64,
        every: Nanos,
        per_tick: u64,
    }

    impl Feed {
        fn new() -> Feed {
            Feed::slow(Nanos::from_millis(15), 15)
        }

        /// Ticks every `every`, the service taking `per_tick` entries in between.
        fn slow(every: Nanos, per_tick: u64) -> Feed {
            Feed {
                now: Time::ZERO + Nanos::from_millis(1),
                dequeued: 0,
                every,
                per_tick,
            }
        }

        fn tick(&mut self, pie: &mut Pie, len: usize) {
            let stats = QueueStats {
                len,
                dequeued: self.dequeued,
                ..QueueStats::default()
            };
            pie.tick(self.now, &stats);
            self.now += self.every;
            self.dequeued += self.per_tick;
        }
    }

    fn rejections(pie: &mut Pie, priority: Priority, queue_len: usize) -> usize {
        (0..1_000)
            .filter(|_| pie.on_arrival(Time::ZERO, priority, queue_len) == Verdict::Reject)
            .count()
    }

    #[test]
    fn the_control_law_runs_on_the_clock_whatever_the_ticks() {
        // The same standing queue (30 ms of delay at 1,000 dequeues a second) for 1.2 s,
        // ticked every 15 ms as the simulator does and every 120 ms as a proxy does on a
        // few requests a second: `p` must climb alike. With one update per tick, the late
        // one climbed an eighth as fast.
        let on_time = &mut Pie::new(&PieConfig::default());
        let late = &mut Pie::new(&PieConfig::default());
        let (mut fast, mut slow) = (Feed::new(), Feed::slow(Nanos::from_millis(120), 120));
        // The first tick of each only starts the clock.
        for _ in 0..=80 {
            fast.tick(on_time, 30);
        }
        for _ in 0..=10 {
            slow.tick(late, 30);
        }
        let climbed = on_time.p;
        assert!(climbed > 0.01, "{climbed}");
        assert!(
            (late.p / climbed - 1.0).abs() < 0.05,
            "{} vs {climbed}",
            late.p
        );
        // And it decays alike once the queue is gone.
        for _ in 0..160 {
            fast.tick(on_time, 0);
        }
        for _ in 0..20 {
            slow.tick(late, 0);
        }
        assert!(on_time.p < climbed / 2.0, "{} from {climbed}", on_time.p);
        assert!(
            (late.p - on_time.p).abs() < 0.05 * climbed,
            "{} vs {}",
            late.p,
            on_time.p
        );
    }

    #[test]
    fn the_peers_mean_pulls_p_after_its_own_step() {
        // Three updates on an empty queue: alone, `p` stays at zero; pulled 0.3 of the way
        // to a peers' mean of 0.6 after each of its own steps, it climbs toward it, and it
        // stops being pulled once the mean lapses.
        let mut alone = Pie::new(&PieConfig::default());
        let mut pulled = Pie::new(&PieConfig::default());
        pulled.hear_peers(Some(PeersHeard {
            ratio: 0.6,
            weight: 0.3,
            line: None,
        }));
        let (mut a, mut b) = (Feed::new(), Feed::new());
        for _ in 0..=3 {
            a.tick(&mut alone, 0);
            b.tick(&mut pulled, 0);
        }
        assert_eq!(alone.p, 0.0);
        // 0.3 of the way three times over: 1 - 0.7^3 = 66% of the way, less its own steps
        // down on the empty queue.
        assert!(pulled.p > 0.35 && pulled.p < 0.6 * 0.66, "{}", pulled.p);
        pulled.hear_peers(None);
        let before = pulled.p;
        b.tick(&mut pulled, 0);
        assert!(pulled.p < before, "{} from {before}", pulled.p);
    }

    #[test]
    fn with_line_at_peers_the_peers_line_is_drawn_and_the_own_one_stamped() {
        // A gate whose own queue is empty (its `p` stays 0) hears that its peers draw their
        // line at the start of tier 4: it turns tiers 4-5 away and lets tier 3 in, and still
        // stamps its own line, which cuts nothing. Without the option it cuts nothing.
        let heard = PeersHeard {
            ratio: 0.0,
            weight: 0.0,
            line: Some(f64::from(Priority::new(4, 0).expect("valid").rank())),
        };
        let mut by_peers = Pie::new(&PieConfig {
            line_at_peers: true,
            ..PieConfig::default()
        });
        let mut alone = Pie::new(&PieConfig::default());
        let mut feed = Feed::new();
        for pie in [&mut by_peers, &mut alone] {
            for tier in 0..6 {
                pie.on_arrival(Time::ZERO, Priority::new(tier, 7).expect("valid"), 0);
            }
            pie.hear_peers(Some(heard));
        }
        for _ in 0..3 {
            feed.tick(&mut by_peers, 0);
            feed.tick(&mut alone, 0);
        }
        let tier = |t| Priority::new(t, 7).expect("valid");
        assert!(
            !by_peers.transparent(),
            "the peers' line must see every arrival"
        );
        assert_eq!(rejections(&mut by_peers, tier(5), 0), 1_000);
        assert_eq!(rejections(&mut by_peers, tier(4), 0), 1_000);
        assert_eq!(rejections(&mut by_peers, tier(3), 0), 0);
        assert_eq!(by_peers.state().line, Some(RANKS as f64));
        assert!(alone.transparent());
        assert_eq!(rejections(&mut alone, tier(5), 0), 0);
        // Once the peers' means lapse, the gate draws its own line again.
        by_peers.hear_peers(None);
        feed.tick(&mut by_peers, 0);
        assert_eq!(rejections(&mut by_peers, tier(5), 0), 0);
        assert!(by_peers.transparent());
    }

    #[test]
    fn the_short_queue_safeguard_is_a_wait_not_a_count() {
        // 1,000 dequeues a second: an entry ahead is 1 ms of waiting.
        let mut pie = Pie::new(&PieConfig::default());
        let mut feed = Feed::new();
        for _ in 0..400 {
            feed.tick(&mut pie, 60);
        }
        assert!(pie.probability() > 0.5, "{}", pie.probability());
        let any = Priority::default();
        assert_eq!(rejections(&mut pie, any, 4), 0, "4 ms ahead: never dropped");
        assert!(rejections(&mut pie, any, 6) > 300, "6 ms ahead: drawn");
        // 3.3 dequeues a second (the capacity demo: 7 workers at 2 s): one entry ahead is
        // 300 ms, already most of the caller's 500 ms of slack. RFC 8033's count of 2 let
        // two such entries in; only an arrival that finds nobody waiting is spared now.
        let slow = PieConfig {
            update: Nanos::from_millis(300),
            ..PieConfig::default()
        };
        let mut pie = Pie::new(&slow);
        let mut feed = Feed::slow(Nanos::from_millis(300), 1);
        for _ in 0..100 {
            feed.tick(&mut pie, 1);
        }
        assert!(pie.probability() > 0.5, "{}", pie.probability());
        assert_eq!(
            rejections(&mut pie, any, 0),
            0,
            "nobody waiting: never dropped"
        );
        assert!(
            rejections(&mut pie, any, 1) > 300,
            "one ahead is 300 ms: drawn"
        );
    }

    #[test]
    fn ranks_shed_in_full_are_turned_away_on_every_path_and_whole_tiers_come_back_slowly() {
        let tier = |t| Priority::new(t, 64).expect("valid");
        let mut pie = Pie::new(&PieConfig::default());
        let mut feed = Feed::new();
        // Half tier 1, half tier 5, and a queue that asks for about 80% of shedding.
        for _ in 0..400 {
            for _ in 0..10 {
                let _ = pie.on_arrival(Time::ZERO, tier(1), 0);
                let _ = pie.on_arrival(Time::ZERO, tier(5), 0);
            }
            let len = if pie.probability() < 0.8 { 60 } else { 10 };
            feed.tick(&mut pie, len);
        }
        let p = pie.probability();
        assert!(p > 0.75, "{p}");
        // An arrival that finds nobody waiting passes the safeguards, unless its tier is
        // being shed in full.
        assert_eq!(rejections(&mut pie, tier(5), 0), 1_000);
        assert_eq!(rejections(&mut pie, tier(1), 0), 0);
        // The overload ends: the queue is empty, p decays and the burst allowance is re-armed,
        // but tier 5 comes back only as the held line falls, 0.05 of the traffic a second.
        for _ in 0..200 {
            feed.tick(&mut pie, 0);
        }
        assert_eq!(pie.probability(), 0.0);
        assert!(pie.state().burst);
        assert_eq!(
            rejections(&mut pie, tier(5), 0),
            1_000,
            "3 s after: still out"
        );
        assert!(!pie.transparent(), "a held line must see every arrival");
        for _ in 0..600 {
            feed.tick(&mut pie, 0);
        }
        assert_eq!(rejections(&mut pie, tier(5), 0), 0, "12 s after: back");
        for _ in 0..400 {
            feed.tick(&mut pie, 0);
        }
        assert!(pie.transparent(), "18 s after: the line is gone");
    }

    #[test]
    fn probability_rises_while_the_delay_is_above_target_and_falls_to_zero_once_drained() {
        let mut pie = Pie::new(&PieConfig::default());
        let mut feed = Feed::new();
        feed.tick(&mut pie, 30);
        feed.tick(&mut pie, 30);
        let mut previous = pie.probability();
        for _ in 0..200 {
            feed.tick(&mut pie, 30); // 30 ms: twice the target
            assert!(
                pie.probability() > previous,
                "{} after {previous}",
                pie.probability()
            );
            previous = pie.probability();
        }
        // alpha * 15 ms = 0.0019 per update once p > 10%: about 0.125 per second.
        assert!(
            (0.12..0.25).contains(&previous),
            "3 s at twice the target: {previous}"
        );
        assert!(!pie.state().burst, "the allowance ran out");
        for _ in 0..10 {
            feed.tick(&mut pie, 10); // 10 ms: below target
            assert!(pie.probability() < previous);
            previous = pie.probability();
        }
        let mut updates = 0;
        while pie.probability() > 0.0 && updates < 1_000 {
            feed.tick(&mut pie, 0);
            assert!(pie.probability() < previous || pie.probability() == 0.0);
            previous = pie.probability();
            updates += 1;
        }
        // The 2% decay and the shrinking steps of the ladder: about 1.5 s from p = 0.15.
        assert!(
            (50..150).contains(&updates),
            "back to zero in {updates} updates of 15 ms"
        );
        assert!(
            pie.state().burst,
            "calm again: the burst allowance is re-armed"
        );
    }

    #[test]
    fn small_probabilities_move_in_the_rfc_ladder_of_steps() {
        let config = PieConfig::default();
        let mut pie = Pie::new(&config);
        let mut feed = Feed::new();
        feed.tick(&mut pie, 30);
        feed.tick(&mut pie, 30);
        // The delay now stays at 30 ms, so the beta term is zero and each step is
        // alpha * (30 ms - 15 ms) divided by the scale of the probability before it.
        let mut scales_seen = Vec::new();
        for _ in 0..300 {
            let before = pie.probability();
            feed.tick(&mut pie, 30);
            let expected = (config.alpha * 0.015 / Pie::scale(before).recip()).min(0.02);
            let step = pie.probability() - before;
            assert!(
                (step - expected).abs() < 1e-12,
                "at p = {before}: step {step}, expected {expected}"
            );
            let scale = Pie::scale(before).recip() as u32;
            if scales_seen.last() != Some(&scale) {
                scales_seen.push(scale);
            }
        }
        assert_eq!(scales_seen, [128, 32, 8, 2, 1], "from p ~ 2e-5 up past 10%");
    }

    #[test]
    fn decays_by_two_percent_per_update_when_there_is_no_delay() {
        let mut pie = Pie::new(&PieConfig {
            alpha: 0.0,
            ..PieConfig::default()
        });
        let mut feed = Feed::new();
        feed.tick(&mut pie, 0);
        pie.p = 0.5;
        feed.tick(&mut pie, 0);
        assert!(
            (pie.probability() - 0.49).abs() < 1e-12,
            "{}",
            pie.probability()
        );
    }

    #[test]
    fn safeguards_admit_short_queues_and_an_uncongested_queue() {
        let mut pie = Pie::new(&PieConfig::default());
        let mut feed = Feed::new();
        for _ in 0..190 {
            feed.tick(&mut pie, 30);
        }
        let p = pie.probability();
        assert!(p > 0.1 && p < 0.2 && !pie.state().burst, "{p}");
        let priority = Priority::default();
        let rejected = |pie: &mut Pie, queue_len| {
            (0..10_000)
                .filter(|_| pie.on_arrival(Time::ZERO, priority, queue_len) == Verdict::Reject)
                .count()
        };
        assert_eq!(rejected(&mut pie, 2), 0, "at most 2 waiting: never dropped");
        let dropped = rejected(&mut pie, 100);
        assert!(
            (dropped as f64 - p * 10_000.0).abs() < 300.0,
            "p = {p}: {dropped} of 10000"
        );
        // One update with a 5 ms delay: p is still above 10%, but the last delay is below half
        // the target, so PIE does not drop.
        feed.tick(&mut pie, 5);
        assert!(pie.probability() > 0.05 && pie.probability() < 0.2);
        assert_eq!(rejected(&mut pie, 100), 0);
    }

    #[test]
    fn a_burst_shorter_than_the_allowance_passes_untouched() {
        // Half capacity, then 20 ms at three times capacity: 40 entries of queue, drained in
        // ~80 ms, all within the 150 ms allowance.
        let short = Setup::thousand_rps(&[(2_000, 500.0), (20, 3_000.0), (2_000, 500.0)]);
        let trace = run(&mut Pie::new(&PieConfig::default()), &short);
        assert!(trace.max_queue(2_000, 2_100) > 30, "the burst did queue");
        assert_eq!(trace.shed_share(0, 4_000), 0.0);
        assert!(
            trace
                .ticks
                .iter()
                .all(|(_, s)| s.burst || s.reject_ratio < 0.01)
        );

        // The same spike for 500 ms outlasts the allowance and is regulated.
        let long = Setup::thousand_rps(&[(2_000, 500.0), (500, 3_000.0), (2_000, 500.0)]);
        let trace = run(&mut Pie::new(&PieConfig::default()), &long);
        assert!(
            trace.shed_share(2_000, 2_500) > 0.2,
            "{}",
            trace.shed_share(2_000, 2_500)
        );
        assert!(!trace.state_at(2_400).burst);
    }

    #[test]
    fn holds_the_delay_near_target_under_twice_the_capacity_then_lets_go() {
        let setup = Setup::thousand_rps(&[(1_000, 500.0), (10_000, 2_000.0), (5_000, 500.0)]);
        let trace = run(&mut Pie::new(&PieConfig::default()), &setup);
        let shed = trace.shed_share(4_000, 11_000);
        assert!((0.45..0.55).contains(&shed), "sheds the excess: {shed}");
        // Queue length in entries is the delay in ms at 1000 per second.
        let queue = trace.max_queue(4_000, 11_000);
        assert!(
            queue < 80,
            "the delay stays within a few targets: {queue} ms"
        );
        let served: u64 = trace.between(4_000, 11_000).iter().map(|w| w.served).sum();
        assert!(served > 6_900, "the service is kept busy: {served}");
        assert_eq!(trace.state_at(14_000).reject_ratio, 0.0);
        assert_eq!(trace.shed_share(13_000, 16_000), 0.0);
    }

    #[test]
    fn shed_by_priority_takes_the_lowest_ranks_first() {
        let config = PieConfig {
            shed_by: ShedBy::Priority,
            ..PieConfig::default()
        };
        let setup = Setup::thousand_rps(&[(1_000, 500.0), (10_000, 1_500.0)])
            .with_mix(Mix::Tiers(vec![1, 5]));
        let trace = run(&mut Pie::new(&config), &setup);
        let total = trace.shed_share(4_000, 11_000);
        assert!((0.28..0.40).contains(&total), "a third of 1500/s: {total}");
        let tier1 = trace.tier_shed_share(1, 4_000, 11_000);
        let tier5 = trace.tier_shed_share(5, 4_000, 11_000);
        assert!(
            tier1 < 0.02 && tier5 > 0.55,
            "tier 1 {tier1}, tier 5 {tier5}"
        );
        let share = |from: u16, to: u16| {
            let ranks = usize::from(Priority::new(5, from.into()).expect("valid").rank())
                ..usize::from(Priority::new(5, to.into()).expect("valid").rank());
            trace.rejected_by_rank[ranks.clone()].iter().sum::<u64>() as f64
                / trace.arrived_by_rank[ranks].iter().sum::<u64>() as f64
        };
        assert!(
            share(96, 127) > 0.8 && share(0, 32) < 0.3,
            "{} vs {}",
            share(96, 127),
            share(0, 32)
        );
        assert!(
            trace
                .state_at(8_000)
                .cutoff_rank
                .is_some_and(|r| r >= 5 * 128)
        );
    }

    /// The chain's edge gate of `docs/experiments/chain-lab.md`: 100 arrivals a second of
    /// tiers 0-5 (10, 10, 20, 20, 20, 20%) into a service answering 33 (10 slots of 300 ms)
    /// with a 500 ms queue timeout, then 20 a second. `(expired a second, served a second,
    /// the least share of tiers 4 and 5 turned away by the regulator, the greatest of tiers 0
    /// and 1)` over 10-30 s, and the drop ratio 15 s after the overload ends.
    fn edge_of_a_slow_chain(line_at_shed_share: Option<Nanos>) -> (f64, f64, f64, f64, f64) {
        let mut setup = Setup::thousand_rps(&[(30_000, 100.0), (30_000, 20.0)])
            .with_mix(Mix::Tiers(vec![0, 1, 2, 2, 3, 3, 4, 4, 5, 5]))
            .with_timeout(Nanos::from_millis(500));
        setup.service = Nanos::from_millis(300);
        let mut pie = Pie::new(&PieConfig {
            line_at_shed_share,
            ..PieConfig::default()
        });
        let trace = run(&mut pie, &setup);
        let overload = trace.between(10_000, 30_000);
        let per_second = |n: u64| n as f64 / 20.0;
        (
            per_second(overload.iter().map(|w| w.expired).sum()),
            per_second(overload.iter().map(|w| w.served).sum()),
            trace
                .tier_shed_share(4, 10_000, 30_000)
                .min(trace.tier_shed_share(5, 10_000, 30_000)),
            trace
                .tier_shed_share(0, 10_000, 30_000)
                .max(trace.tier_shed_share(1, 10_000, 30_000)),
            trace.state_at(45_000).reject_ratio,
        )
    }

    #[test]
    fn a_line_at_the_shed_share_takes_the_cut_from_the_queue_timeout() {
        // PIE alone: at half a dequeue per update its delay estimate is noise, `p` stays low,
        // and the queue's timeout sheds most of what must go, by each entry's place in the
        // queue rather than by a line.
        let (expired, served, _, _, _) = edge_of_a_slow_chain(None);
        assert!(expired > 30.0, "{expired} a second expired");
        assert!(served > 32.0, "{served}");
        // At the share shed, the line turns away what must go, the least important first,
        // and the queue's timeout is left a few a second; the service stays full.
        let (expired, served, least, most, after) = edge_of_a_slow_chain(Some(Nanos::from_secs(4)));
        assert!(expired < 10.0, "{expired} a second expired");
        assert!(served > 32.0, "{served}");
        assert!(least > 0.99, "tiers 4-5: {least} turned away");
        assert!(most < 0.01, "tiers 0-1: {most} turned away");
        // Once the overload ends the service has room at every update, and the line goes.
        assert_eq!(after, 0.0);
    }

    #[test]
    fn configuration_reads_durations_and_rejects_unknown_keys() {
        let config: PieConfig =
            toml::from_str("target = \"20ms\"\nshed_by = \"priority\"").expect("valid");
        assert_eq!(config.target, Nanos::from_millis(20));
        assert_eq!(config.shed_by, ShedBy::Priority);
        assert_eq!(config.max_burst, Nanos::from_millis(150));
        assert_eq!(config.line_at_shed_share, None);
        let config: PieConfig = toml::from_str("line_at_shed_share = \"4s\"").expect("valid");
        assert_eq!(config.line_at_shed_share, Some(Nanos::from_secs(4)));
        assert!(toml::from_str::<PieConfig>("line_at_shed_share = 4").is_err());
        assert!(toml::from_str::<PieConfig>("tarket = \"20ms\"").is_err());
    }
}
