//! No regulation: the queue is bounded only by its capacity and its entries' deadlines.

use super::{QueueStats, Regulator, RegulatorState, Verdict};
use crate::priority::Priority;
use crate::time::Time;

/// Admits everything. The baseline against which the other regulators are measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Off;

impl Regulator for Off {
    fn on_arrival(&mut self, _: Time, _: Priority, _: usize) -> Verdict {
        Verdict::Admit
    }

    fn tick(&mut self, _: Time, _: &QueueStats) {}

    fn next_tick(&self) -> Time {
        Time::MAX
    }

    fn state(&self) -> RegulatorState {
        RegulatorState::default()
    }

    fn transparent(&self) -> bool {
        true
    }
}
