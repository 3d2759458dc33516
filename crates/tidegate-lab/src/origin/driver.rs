//! The thread that runs the origin's [`Engine`] on the real clock.
//!
//! One thread owns the model (the model is single-threaded, like the simulator's run) and
//! sleeps until the earliest promised completion or the next command, whichever comes
//! first. An OS thread wakes within tens of microseconds of its deadline, where tokio's timer
//! rounds up to the next millisecond: at the RSocket curve's 2 ms latencies that rounding
//! alone would be a 50% error. Request handlers talk to it over a channel and wait for their
//! answer on a oneshot; a handler that is gone (its client hung up) leaves the work running
//! to its end, and the answer it never reads is counted as abandoned.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use tidegate_core::Time;
use tokio::sync::oneshot;

use super::engine::{Answer, Engine, InstanceStats};

/// What the HTTP side asks of the model.
#[derive(Debug)]
pub(crate) enum Command {
    /// A request arrived, for an instance or for the balancing to choose.
    Arrive {
        instance: Option<usize>,
        reply: oneshot::Sender<Answer>,
    },
    /// A snapshot for `/metrics`.
    Stats(oneshot::Sender<Vec<Stats>>),
}

/// An instance's counters, with the answers nobody waited for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    pub(crate) model: InstanceStats,
    /// Served after the caller had gone.
    pub(crate) abandoned: u64,
}

/// Runs until every sender of `commands` is gone; work still in progress then is dropped.
pub(crate) fn run(mut engine: Engine<oneshot::Sender<Answer>>, commands: mpsc::Receiver<Command>) {
    let start = Instant::now();
    let now = || Time::from_nanos(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
    let mut abandoned = vec![0u64; engine.instances()];
    let mut answered = Vec::new();
    loop {
        let t = now();
        engine.advance(t, &mut answered);
        deliver(&mut answered, &mut abandoned);
        let command = match engine.next_due() {
            Some(due) => commands.recv_timeout(Duration::from(due - t)),
            None => commands.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match command {
            Ok(Command::Arrive { instance, reply }) => {
                let t = now();
                engine.advance(t, &mut answered);
                if let Some(turned_away) = engine.arrive(t, instance, reply) {
                    answered.push(turned_away);
                }
                deliver(&mut answered, &mut abandoned);
            }
            Ok(Command::Stats(reply)) => {
                let stats = engine
                    .stats()
                    .iter()
                    .zip(&abandoned)
                    .map(|(&model, &abandoned)| Stats { model, abandoned })
                    .collect();
                let _ = reply.send(stats);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Sends the answers; an answer its handler no longer waits for was work done for nobody.
fn deliver(answered: &mut Vec<(oneshot::Sender<Answer>, Answer)>, abandoned: &mut [u64]) {
    for (reply, answer) in answered.drain(..) {
        if reply.send(answer).is_err()
            && let Answer::Served { instance, .. } = answer
        {
            abandoned[instance] += 1;
        }
    }
}
