//! The work left running after its client went away: exchanges whose upstream has not
//! answered yet ([`crate::handler`]) and upgraded connections ([`crate::upgrade`]). The
//! drain on shutdown waits for them as for connections, and cuts them with the connections.

use tokio::sync::watch;

/// A count of the work left running, and the signal that cuts it.
#[derive(Debug)]
pub(crate) struct Abandoned {
    running: watch::Sender<usize>,
    cut: watch::Sender<bool>,
}

impl Default for Abandoned {
    fn default() -> Abandoned {
        Abandoned {
            running: watch::Sender::new(0),
            cut: watch::Sender::new(false),
        }
    }
}

impl Abandoned {
    /// Until none runs.
    pub(crate) async fn finished(&self) {
        let _ = self.running.subscribe().wait_for(|n| *n == 0).await;
    }

    /// Ends every one at once, as cancelled; none starts after.
    pub(crate) fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// How many run now.
    pub(crate) fn running(&self) -> usize {
        *self.running.borrow()
    }

    /// Turns true when they are cut.
    pub(crate) fn cut_signal(&self) -> watch::Receiver<bool> {
        self.cut.subscribe()
    }

    pub(crate) fn started(&self) {
        self.running.send_modify(|n| *n += 1);
    }

    pub(crate) fn ended(&self) {
        self.running.send_modify(|n| *n = n.saturating_sub(1));
    }
}
