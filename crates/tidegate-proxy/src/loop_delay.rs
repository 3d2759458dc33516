//! The proxy's own overload: when the upstream is fast and the proxy's CPU is what saturates,
//! requests wait in the kernel's socket buffers and in the runtime's ready queue before the
//! proxy reads them. The gates' queues stay empty and their limits measure the upstream,
//! which is as fast as ever, so no gate sees this overload (`docs/performance.md`, "The
//! proxy-bound overload").
//!
//! - **The signal: the event loop's delay.** One probe task per worker thread wakes every
//!   millisecond, yields, and measures how long it waited for its turn: the wait of any task
//!   whose input has arrived, the proxy's own sojourn time, at no cost per request. It is
//!   measured in the thread's CPU time: the work queued ahead, which reading less shortens,
//!   and not the time the machine gave to other processes, which it does not.
//! - **The regulator: the core's PIE**, unchanged and sans-IO ([`LoopRegulator`]), fed the
//!   mean delay of each update interval as its queueing delay.
//! - **The action: reading less.** A refusal still costs a read, a parse and a write (about
//!   0.4 of a forward on this proxy): at ten times the proxy's capacity, refusing everything
//!   it cannot forward would take more CPU than it has. So the regulator acts before anything
//!   is read: with PIE's probability, a client connection's read (the next request head, for
//!   HTTP/1.1) and the next accept wait one probe period. What is not read costs the proxy
//!   nothing; the client's bytes wait in its socket buffer and new connections in the accept
//!   backlog, as they would behind a saturated nginx, and the share of the traffic the proxy
//!   reads settles where its loop's delay holds the target.
//!
//! Off unless `connections.loop_delay_target` is set.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tidegate_core::regulator::{Pie, PieConfig, QueueStats, Regulator, ShedBy};
use tidegate_core::rng::{Rng, splitmix64};
use tidegate_core::{Nanos, Time};
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How often each probe measures the loop, and how long a deferred read or accept waits.
const PROBE_EVERY: Duration = Duration::from_millis(1);

/// The core's PIE on the event loop's delay.
///
/// PIE's gains are RFC 8033's, per second of delay, for a 15 ms target updated every 15 ms.
/// A loop's target is a few milliseconds and its delay moves within milliseconds, so the
/// update interval is the target and the gains are scaled by 15 ms over the target: the same
/// steps relative to the target, at the loop's pace.
#[derive(Debug)]
pub(crate) struct LoopRegulator {
    pie: Pie,
    target: Nanos,
    /// The delays measured since the last update.
    sum: Nanos,
    samples: u32,
    /// The share of reads deferred now.
    share: f64,
}

impl LoopRegulator {
    pub(crate) fn new(target: Nanos) -> LoopRegulator {
        let rfc = PieConfig::default();
        let scale = rfc.target.as_secs_f64() / target.as_secs_f64().max(1e-6);
        let config = PieConfig {
            target,
            update: target,
            max_burst: target.saturating_mul(10),
            alpha: rfc.alpha * scale,
            beta: rfc.beta * scale,
            min_wait: Nanos::ZERO,
            shed_by: ShedBy::Random,
            ..rfc
        };
        LoopRegulator {
            pie: Pie::new(&config),
            target,
            sum: Nanos::ZERO,
            samples: 0,
            share: 0.0,
        }
    }

    /// One probe's measurement at `now`: the loop made a ready task wait `delay`. Returns the
    /// share of reads to defer from now on.
    pub(crate) fn observe(&mut self, now: Time, delay: Nanos) -> f64 {
        self.sum += delay;
        self.samples += 1;
        if now >= self.pie.next_tick() {
            let mean = Nanos::from_nanos(self.sum.as_nanos() / u64::from(self.samples.max(1)));
            (self.sum, self.samples) = (Nanos::ZERO, 0);
            // PIE estimates its delay from the queue: with no dequeue rate measured (the
            // queue is never reported empty before `now`), it takes the oldest entry's wait.
            let queue = QueueStats {
                len: usize::from(!mean.is_zero()),
                oldest_wait: mean,
                last_empty: now,
                ..QueueStats::default()
            };
            self.pie.tick(now, &queue);
            let state = self.pie.state();
            // PIE's own safeguards: a burst allowance, and no draw while the delay is under
            // half the target and the probability small.
            let uncongested =
                mean.as_nanos() < self.target.as_nanos() / 2 && state.reject_ratio < 0.2;
            self.share = if state.burst || uncongested {
                0.0
            } else {
                state.reject_ratio
            };
        }
        self.share
    }
}

/// The loop's regulator, its probes and the reads they hold back; clone to share.
#[derive(Clone, Debug)]
pub(crate) struct LoopDelay {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    regulator: Mutex<LoopRegulator>,
    /// [`LoopRegulator::observe`]'s share, as `f64` bits: read on every read and accept.
    share: AtomicU64,
    /// Wakers of the reads deferred to the next probe.
    parked: Mutex<Vec<Waker>>,
    /// Accepts deferred to the next probe.
    tick: Notify,
    epoch: Instant,
    delay: Gauge,
    deferred: Counter,
}

impl LoopDelay {
    /// Self-protection steering the loop's delay to `target`, or none.
    pub(crate) fn new(target: Option<Nanos>, registry: &mut Registry) -> LoopDelay {
        let inner = target.map(|target| {
            let delay = Gauge::default();
            let deferred = Counter::default();
            registry.register(
                "tidegate_loop_delay_microseconds",
                "How long a ready task waited for the event loop, mean of the last probes (connections.loop_delay_target)",
                delay.clone(),
            );
            registry.register(
                "tidegate_loop_deferred_reads",
                "Client reads and accepts put off by a probe period because the event loop was over its target",
                deferred.clone(),
            );
            Arc::new(Inner {
                regulator: Mutex::new(LoopRegulator::new(target)),
                share: AtomicU64::new(0.0_f64.to_bits()),
                parked: Mutex::new(Vec::new()),
                tick: Notify::new(),
                epoch: Instant::now(),
                delay,
                deferred,
            })
        });
        LoopDelay { inner }
    }

    /// Starts one probe per worker thread of the current runtime; they stop when the set is
    /// dropped.
    pub(crate) fn start(&self) -> JoinSet<()> {
        let mut probes = JoinSet::new();
        if let Some(inner) = &self.inner {
            let workers = tokio::runtime::Handle::current().metrics().num_workers();
            for _ in 0..workers.max(1) {
                probes.spawn(probe(inner.clone()));
            }
        }
        probes
    }

    /// Whether a read should wait for the next probe: `Pending` (the waker kept) if so.
    pub(crate) fn poll_read_turn(&self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(inner) = &self.inner else {
            return Poll::Ready(());
        };
        if !inner.defers() {
            return Poll::Ready(());
        }
        inner
            .parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(cx.waker().clone());
        Poll::Pending
    }

    /// Waits while the next accept is deferred.
    pub(crate) async fn accept_turn(&self) {
        let Some(inner) = &self.inner else { return };
        loop {
            let tick = inner.tick.notified();
            if !inner.defers() {
                return;
            }
            tick.await;
        }
    }
}

impl Inner {
    /// Draws whether this read or accept waits.
    fn defers(&self) -> bool {
        let share = f64::from_bits(self.share.load(Ordering::Relaxed));
        if share <= 0.0 {
            return false;
        }
        let defer = COIN.with(|coin| coin.borrow_mut().chance(share));
        if defer {
            self.deferred.inc();
        }
        defer
    }

    fn observe(&self, delay: Duration) {
        let now = Time::ZERO + Nanos::from(self.epoch.elapsed());
        let share = self
            .regulator
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .observe(now, Nanos::from(delay));
        self.share.store(share.to_bits(), Ordering::Relaxed);
        self.delay
            .set(i64::try_from(delay.as_micros()).unwrap_or(i64::MAX));
        let parked =
            std::mem::take(&mut *self.parked.lock().unwrap_or_else(PoisonError::into_inner));
        for waker in parked {
            waker.wake();
        }
        self.tick.notify_waiters();
    }
}

/// Every [`PROBE_EVERY`]: yields, and reports how long the loop made it wait for its turn,
/// in the worker thread's CPU time when it resumes on the same thread (the work queued ahead
/// of it; time the operating system gave to other processes is no backlog of the proxy's,
/// and reading less would not shorten it), in wall-clock time otherwise.
async fn probe(inner: Arc<Inner>) {
    let mut every = tokio::time::interval(PROBE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let (thread, asked, cpu) = (std::thread::current().id(), Instant::now(), thread_cpu());
        tokio::task::yield_now().await;
        let delay = if std::thread::current().id() == thread {
            thread_cpu().saturating_sub(cpu)
        } else {
            asked.elapsed()
        };
        inner.observe(delay);
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

thread_local! {
    /// Each thread's coin for the deferrals, seeded apart.
    static COIN: RefCell<Rng> = RefCell::new(Rng::seed(splitmix64(thread_seed())));
}

fn thread_seed() -> u64 {
    let marker = 0_u8;
    std::ptr::from_ref(&marker) as u64
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    /// `regulator` probed every millisecond for `ms` milliseconds from `from`, each probe
    /// waiting `delay`; the share after the last.
    fn probe_for(regulator: &mut LoopRegulator, from: &mut Time, ms: u64, delay: Nanos) -> f64 {
        let mut share = 0.0;
        for _ in 0..ms {
            *from += Nanos::from_millis(1);
            share = regulator.observe(*from, delay);
        }
        share
    }

    #[test]
    fn reads_are_deferred_while_the_loop_is_over_target_and_not_after() {
        let mut regulator = LoopRegulator::new(Nanos::from_millis(2));
        let mut now = Time::ZERO;
        // Under the target: nothing is held back, however long.
        let calm = probe_for(&mut regulator, &mut now, 2_000, Nanos::from_micros(500));
        assert_eq!(calm, 0.0);
        // Five times the target: past the burst allowance (20 ms), the share climbs.
        let early = probe_for(&mut regulator, &mut now, 100, Nanos::from_millis(10));
        let later = probe_for(&mut regulator, &mut now, 400, Nanos::from_millis(10));
        assert!(early > 0.0, "{early}");
        assert!(later > early && later > 0.5, "{early} then {later}");
        // The loop drained: the share falls back to nothing.
        let after = probe_for(&mut regulator, &mut now, 3_000, Nanos::ZERO);
        assert_eq!(after, 0.0);
    }

    /// A task that keeps the loop busy: each turn works for `stall` of CPU time, and moves
    /// the paused clock as far (a busy loop never lets paused time advance by itself),
    /// before letting the other tasks run.
    async fn hog(stall: Duration, running: Arc<AtomicBool>) {
        while running.load(Ordering::Relaxed) {
            let start = thread_cpu();
            while thread_cpu().saturating_sub(start) < stall {
                std::hint::spin_loop();
            }
            tokio::time::advance(stall).await;
            tokio::task::yield_now().await;
        }
    }

    /// How many of `n` reads, one per millisecond, were told to wait.
    async fn deferred_reads(loop_delay: &LoopDelay, n: usize) -> usize {
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let mut deferred = 0;
        for _ in 0..n {
            if loop_delay.poll_read_turn(&mut cx).is_pending() {
                deferred += 1;
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
        deferred
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_loop_holds_reads_and_accepts_back_until_it_recovers() {
        let loop_delay = LoopDelay::new(Some(Nanos::from_millis(2)), &mut Registry::default());
        let _probes = loop_delay.start();
        assert_eq!(deferred_reads(&loop_delay, 200).await, 0, "an idle loop");
        let running = Arc::new(AtomicBool::new(true));
        let stall = tokio::spawn(hog(Duration::from_millis(5), running.clone()));
        let stalled = deferred_reads(&loop_delay, 600).await;
        assert!(stalled > 60, "{stalled} of 600 reads deferred");
        running.store(false, Ordering::Relaxed);
        stall.await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(deferred_reads(&loop_delay, 200).await, 0, "recovered");
        // An accept waits its turn only while reads do.
        tokio::time::timeout(Duration::from_millis(1), loop_delay.accept_turn())
            .await
            .unwrap();
    }

    #[test]
    fn off_unless_configured() {
        let loop_delay = LoopDelay::new(None, &mut Registry::default());
        let waker = futures_util::task::noop_waker();
        assert!(
            loop_delay
                .poll_read_turn(&mut Context::from_waker(&waker))
                .is_ready()
        );
    }
}
