//! Where the shared gate reads the time.
//!
//! Every request reads the clock twice (admission and completion: the latency the limit learns
//! from), so the clock is a good part of what the gate costs. The operating system's monotonic
//! clock costs 20-25 ns a read here; the CPU's time-stamp counter, calibrated by `quanta`, 9 ns.
//! But tests that pause tokio's clock need the gate to follow tokio's time, not the CPU's:
//! a queued request sleeps on a tokio timer until its deadline, and with the gate on another
//! clock it would wake, find its deadline not reached in real time, and sleep again at once.
//! [`ClockSource::Auto`] picks tokio's clock when the gate is made inside a runtime whose clock
//! is paused, and the counter otherwise.

use tidegate_core::{Nanos, Time};
use tokio::time::Instant;

/// Which clock a [`SharedGate`](crate::SharedGate) reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockSource {
    /// Tokio's clock if the gate is created inside a tokio runtime whose clock is paused (a
    /// test), the time-stamp counter otherwise.
    #[default]
    Auto,
    /// Tokio's clock (`tokio::time::Instant`): follows paused time; the OS's monotonic clock
    /// otherwise.
    Tokio,
    /// The CPU's time-stamp counter through `quanta` (the OS clock where there is no usable
    /// counter). Never pause tokio's clock with it.
    Tsc,
}

/// A clock with the gate's epoch, and the way to turn its times into tokio instants for
/// timers.
#[derive(Debug)]
pub(crate) enum Clock {
    Tokio {
        epoch: Instant,
    },
    Tsc {
        clock: quanta::Clock,
        /// The counter's raw reading at the epoch: a reading's distance from it, scaled to
        /// nanoseconds, is the time (one multiplication, no `Duration` in between).
        epoch: u64,
        timers: Instant,
    },
}

impl Clock {
    pub(crate) fn new(source: ClockSource) -> Clock {
        let use_tokio = match source {
            ClockSource::Tokio => true,
            ClockSource::Tsc => false,
            ClockSource::Auto => tokio_clock_is_paused(),
        };
        if use_tokio {
            return Clock::Tokio {
                epoch: Instant::now(),
            };
        }
        let clock = quanta::Clock::new();
        let epoch = clock.raw();
        Clock::Tsc {
            clock,
            epoch,
            timers: Instant::now(),
        }
    }

    /// Nanoseconds since the gate was made.
    #[inline(always)]
    pub(crate) fn now(&self) -> Time {
        match self {
            Clock::Tokio { epoch } => Time::ZERO + Nanos::from(epoch.elapsed()),
            Clock::Tsc { clock, epoch, .. } => {
                Time::ZERO + Nanos::from_nanos(clock.delta_as_nanos(*epoch, clock.raw()))
            }
        }
    }

    /// The tokio instant of `at`, for a timer.
    pub(crate) fn instant(&self, at: Time) -> Instant {
        let since = std::time::Duration::from(at - Time::ZERO);
        match self {
            Clock::Tokio { epoch } => *epoch + since,
            Clock::Tsc { timers, .. } => *timers + since,
        }
    }

    #[cfg(test)]
    fn is_tokio(&self) -> bool {
        matches!(self, Clock::Tokio { .. })
    }
}

/// Whether the calling thread is in a tokio runtime whose clock is paused: its time does not
/// move while real time does. (Tokio has no query for it; its clock can only be paused with
/// its `test-util` feature.)
fn tokio_clock_is_paused() -> bool {
    if tokio::runtime::Handle::try_current().is_err() {
        return false;
    }
    let tokio_before = Instant::now();
    let real_before = std::time::Instant::now();
    while real_before.elapsed() < std::time::Duration::from_micros(2) {
        std::hint::spin_loop();
    }
    Instant::now() == tokio_before
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn auto_follows_a_paused_tokio_clock() {
        let clock = Clock::new(ClockSource::Auto);
        assert!(clock.is_tokio());
        tokio::time::advance(std::time::Duration::from_millis(250)).await;
        assert_eq!(clock.now(), Time::ZERO + Nanos::from_millis(250));
    }

    #[tokio::test]
    async fn auto_reads_the_counter_when_time_runs() {
        assert!(!Clock::new(ClockSource::Auto).is_tokio());
    }

    #[test]
    fn auto_reads_the_counter_outside_a_runtime() {
        let clock = Clock::new(ClockSource::Auto);
        assert!(!clock.is_tokio());
        let (a, b) = (clock.now(), clock.now());
        assert!(b >= a);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(
            clock.now() - a >= Nanos::from_millis(2),
            "the counter keeps real time"
        );
    }

    #[test]
    fn timers_line_up_with_the_clock() {
        for source in [ClockSource::Tokio, ClockSource::Tsc] {
            let clock = Clock::new(source);
            let at = Time::ZERO + Nanos::from_millis(40);
            let delta = clock.instant(at) - clock.instant(Time::ZERO);
            assert_eq!(delta, std::time::Duration::from_millis(40));
        }
    }
}
