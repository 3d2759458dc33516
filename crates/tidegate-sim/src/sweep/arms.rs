//! The arms every case runs, and the oracle's grid.
//!
//! The bare limiters (`aimd`, `vegas`, `gradient2`) run as Netflix's concurrency-limits library
//! runs them: the limit alone, no regulator, no queue (an arrival over the limit is turned
//! away at once). `fixed knee` is what an operator who knows the service's workers sets: the
//! knee, no regulator, and a queue whose wait is bounded by a third of the client's timeout
//! (Cinnamon's rule). The others are tidegate's combinations, each with the defaults of the
//! tables it does not name, as in the scenario files.
//!
//! The **oracle** is the best of a grid of fixed limits and queue timeouts, chosen in
//! hindsight for each case: what an operator who knew the service and the load could set.
//! Its grid: the limit at 0.5, 1, 1.5 and 2 times the knee, and the queue off, bounded by one
//! work time, by a third of the client's timeout, or by the timeout itself; the winner has the
//! best goodput (within half a percent) and, among those, the lowest p99.

use tidegate_core::Nanos;
use tidegate_core::config::{LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig};
use tidegate_core::gate::QueueConfig;
use tidegate_core::limit::FixedConfig;

use super::case::Case;
use crate::scenario::{ArmConfig, ArmKind};

/// The arms, in the tables' order; the last one is the oracle.
pub const ARMS: [&str; 11] = [
    "off",
    "fixed knee",
    "aimd",
    "vegas",
    "gradient2",
    "hillclimb + pie",
    "autotune + codel",
    "autotune + pid",
    "bdp + pie",
    "tidegate default",
    ORACLE,
];

pub const ORACLE: &str = "oracle";
pub const DEFAULT: &str = "tidegate default";

/// Goodputs within this of the best count as equal when the oracle picks its point; the
/// lower p99 decides between them.
pub const ORACLE_GOODPUT_TIE: f64 = 0.005;

/// The limit multiples of the knee the oracle tries.
const ORACLE_LIMITS: [f64; 4] = [0.5, 1.0, 1.5, 2.0];

/// A queue timeout of the oracle's grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum QueueWait {
    /// No queue: turned away at once when the limit is reached.
    None,
    /// One mean work time.
    OneWork,
    /// A third of the client's timeout.
    ThirdOfTimeout,
    /// The client's timeout: the queue turns nobody away that the client still waits for
    /// (below capacity, where a shorter bound expires the unlucky waits of random arrivals).
    Timeout,
}

const ORACLE_QUEUES: [QueueWait; 4] = [
    QueueWait::None,
    QueueWait::OneWork,
    QueueWait::ThirdOfTimeout,
    QueueWait::Timeout,
];

/// The arm called `name` on `case` (the oracle is not one arm: see [`oracle_grid`]).
pub fn arm(name: &str, case: &Case) -> Option<ArmConfig> {
    let gate = |limit: Option<LimitConfig>,
                regulator: Option<RegulatorConfig>,
                queue: Option<QueueConfig>| ArmConfig {
        name: name.to_owned(),
        kind: ArmKind::Gate,
        limit,
        regulator,
        queue,
        lease: None,
    };
    let limiter = |algorithm| {
        gate(
            Some(LimitConfig::of(algorithm)),
            Some(RegulatorConfig::of(RegulatorAlgorithm::Off)),
            Some(no_queue()),
        )
    };
    let autotune_with = |regulator| gate(None, Some(RegulatorConfig::of(regulator)), None);
    Some(match name {
        "off" => ArmConfig {
            kind: ArmKind::Off,
            ..gate(None, None, None)
        },
        "fixed knee" => fixed(name, case.knee, QueueWait::ThirdOfTimeout, case),
        "aimd" => limiter(LimitAlgorithm::Aimd),
        "vegas" => limiter(LimitAlgorithm::Vegas),
        "gradient2" => limiter(LimitAlgorithm::Gradient2),
        "hillclimb + pie" => gate(Some(LimitConfig::of(LimitAlgorithm::HillClimb)), None, None),
        // The default's regulator and queue, BBR's model for the limit: only the limit differs.
        "bdp + pie" => gate(Some(LimitConfig::of(LimitAlgorithm::Bdp)), None, None),
        "autotune + codel" => autotune_with(RegulatorAlgorithm::Codel),
        "autotune + pid" => autotune_with(RegulatorAlgorithm::Pid),
        DEFAULT => gate(None, None, None),
        _ => return None,
    })
}

/// The oracle's grid on `case`: fixed limits and queue timeouts, each an arm named by its
/// point (`oracle 30 q=1W`). `fixed knee` is one of its points, under its own name.
pub fn oracle_grid(case: &Case) -> Vec<ArmConfig> {
    let mut limits: Vec<u32> = ORACLE_LIMITS
        .iter()
        .map(|m| ((f64::from(case.knee) * m).round() as u32).max(1))
        .collect();
    limits.dedup();
    let mut grid = Vec::new();
    for &limit in &limits {
        for wait in ORACLE_QUEUES {
            let name = if limit == case.knee && wait == QueueWait::ThirdOfTimeout {
                "fixed knee".to_owned()
            } else {
                let q = match wait {
                    QueueWait::None => "none",
                    QueueWait::OneWork => "1W",
                    QueueWait::ThirdOfTimeout => "timeout/3",
                    QueueWait::Timeout => "timeout",
                };
                format!("{ORACLE} {limit} q={q}")
            };
            grid.push(fixed(&name, limit, wait, case));
        }
    }
    grid
}

fn fixed(name: &str, limit: u32, wait: QueueWait, case: &Case) -> ArmConfig {
    let queue = match wait {
        QueueWait::None => no_queue(),
        QueueWait::OneWork => waiting(case.work()),
        QueueWait::ThirdOfTimeout => waiting(Nanos::from_nanos(case.timeout().as_nanos() / 3)),
        QueueWait::Timeout => waiting(case.timeout()),
    };
    ArmConfig {
        name: name.to_owned(),
        kind: ArmKind::Gate,
        limit: Some(LimitConfig {
            algorithm: LimitAlgorithm::Fixed,
            fixed: FixedConfig { limit },
            ..LimitConfig::default()
        }),
        regulator: Some(RegulatorConfig::of(RegulatorAlgorithm::Off)),
        queue: Some(queue),
        lease: None,
    }
}

fn no_queue() -> QueueConfig {
    QueueConfig {
        capacity: 0,
        ..QueueConfig::default()
    }
}

/// A queue bounded by its wait alone: the entries an operator's timeout lets stand.
fn waiting(timeout: Nanos) -> QueueConfig {
    QueueConfig {
        capacity: 100_000,
        timeout,
        lifo_after: None,
        wait_bound: f64::INFINITY,
        hold_back_starving: false,
    }
}
