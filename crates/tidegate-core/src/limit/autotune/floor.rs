//! The floor under the latency rule: the concurrency the service was seen to hold without a
//! queue, by Little's law.
//!
//! The latency rule reads an rtt above the baseline as a queue. Where the answers' own spread
//! is wide (a cache in front of a store, a heavy tail, few answers a window), whether a window
//! held one of the slow answers reads as a queue window after window, each shrink is judged
//! by windows as noisy, and the limit walks down to a fraction of the knee. The rate a window
//! delivered is a measurement that noise does not bias the same way: a window that answered
//! at the no-queue rtt `rt_prop` while delivering `rate` held `rate x rt_prop` requests
//! without a queue, so the service can hold that many. [`Bdp`]'s estimators measure both,
//! and [`Bdp::unqueued_product`] is the product of them that is safe to hold:
//! - rates only from windows that answered at `rt_prop`, each less its standard error (a
//!   service whose latency follows the rate it is sent delivers more at every limit; the
//!   luckiest of ten windows delivers the most);
//! - only while a window at a fifth less concurrency also answered at `rt_prop` (from above
//!   the knee every window queues, and the least rtt seen is that of the least concurrency
//!   tried: held there, the limit could never go lower);
//! - over the last ten windows only (a service that stopped answering at `rt_prop`, fewer
//!   workers now, holds no floor);
//! - forgetting the rates when `rt_prop` is measured afresh, and never at an `rt_prop`
//!   raised by such a measurement (a drain to three quarters of a product above a halved
//!   knee still queues: the rtt it measures is a queue's).
//!
//! The floor is also at most `Bdp`'s own limit, which backs off on drops (a capacity that
//! halved under a 2x timeout times out what the missing workers leave queued), and it does
//! not hold Autotune's probe: the probe's window at three quarters of the limit is what tells
//! the covariance of inflight and throughput whether the baseline drifted, and held at the
//! floor, a service whose work slowed kept its old baseline, and its limit, for good.

use super::AutotuneConfig;
use crate::limit::{Bdp, BdpConfig, Limit, Sample};

/// `Bdp`'s estimators, read as a floor (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct ProductFloor {
    bdp: Bdp,
    /// The floor, in requests (0 until measured), read per admission.
    value: u32,
    /// `Bdp`'s windows when `value` was computed: it moves only when one closes.
    windows: u64,
}

impl ProductFloor {
    pub(super) fn new(config: &AutotuneConfig) -> ProductFloor {
        ProductFloor {
            bdp: Bdp::new(&BdpConfig {
                initial: config.initial,
                min: config.min,
                max: config.max,
                timeout: config.timeout,
                ..BdpConfig::default()
            }),
            value: 0,
            windows: 0,
        }
    }

    pub(super) fn observe(&mut self, sample: &Sample) {
        self.bdp.on_sample(sample);
        if self.bdp.windows() == self.windows {
            return;
        }
        self.windows = self.bdp.windows();
        self.value = self.bdp.unqueued_product().map_or(0, |product| {
            // `as` saturates; below one request the floor holds nothing.
            (product as u32).min(self.bdp.limit())
        });
    }

    /// The least limit the measurements allow, in requests.
    pub(super) fn get(&self) -> u32 {
        self.value
    }
}
