//! Bringing an ejected upstream back as soon as it is reachable again, rather than when its
//! ejection happens to end.
//!
//! An ejection lasts `ejection.base_time`, doubled by each failed probe up to `max_time`: an
//! upstream that restarted after a few failed probes waited 20 s (up to 60 s) for its next
//! one, while it could already answer. While an upstream is ejected, a connection to it is
//! tried every `ejection.reconnect_interval`; once one succeeds, its ejection ends now and the
//! next request probes it, with the probe's usual verdict. An upstream that accepts
//! connections but still fails costs at most one failed request per interval.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::handler::Shared;

/// Watches the ejected upstreams until `stop` turns true; `interval` zero watches nothing.
pub(crate) async fn watch(
    shared: Arc<Shared>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    if interval.is_zero() {
        return;
    }
    let interval_nanos = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(interval) => {}
        }
        // The set in force now (a reload may swap it while this awaits).
        let upstreams = shared.upstreams.load_full();
        for upstream in &upstreams.list {
            // Only an ejection with more than an interval to run is worth cutting short; a
            // probe already out (zero left) decides on its own.
            let due = upstream
                .health
                .ejected_for(shared.now())
                .is_some_and(|left| left.as_nanos() > interval_nanos);
            if due && upstream.pool.reachable().await {
                upstream.health.reconnected(shared.now());
            }
        }
    }
}
