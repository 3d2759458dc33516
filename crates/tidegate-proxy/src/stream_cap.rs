//! The cap on an upstream's streams ([`crate::stream`]): a place under it ([`Slot`]) for
//! each stream asked for, and how each stream ended, counted per upstream.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// How a stream ended, for `tidegate_streams_total{outcome}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Closed by either side in good order.
    Closed,
    /// Broken: the upstream failed mid-stream, or a connection was reset.
    Error,
    /// Nothing came for `streams.idle_timeout`.
    Idle,
    /// The client went away (or the proxy cut its connection after the drain timeout).
    Cancelled,
    /// Refused at once: the upstream had `streams.max_per_upstream` open.
    Refused,
    /// Recognised on its response when the cap was full: served as an ordinary request.
    OverCap,
}

impl End {
    pub(crate) const ALL: [End; 6] = [
        End::Closed,
        End::Error,
        End::Idle,
        End::Cancelled,
        End::Refused,
        End::OverCap,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::Error => "error",
            End::Idle => "idle",
            End::Cancelled => "cancelled",
            End::Refused => "refused",
            End::OverCap => "over_cap",
        }
    }
}

/// One upstream's streams: its cap and its metric handles.
#[derive(Debug)]
pub(crate) struct UpstreamStreams {
    max: i64,
    /// Open, or asked for and waiting for their response headers.
    open: Gauge,
    ends: [Counter; End::ALL.len()],
    durations: Histogram,
}

impl UpstreamStreams {
    pub(crate) fn new(
        max: i64,
        open: Gauge,
        ends: [Counter; End::ALL.len()],
        durations: Histogram,
    ) -> UpstreamStreams {
        UpstreamStreams {
            max,
            open,
            ends,
            durations,
        }
    }

    /// A place under the cap, or `None` when it is full (the caller counts that as it
    /// means: refused for a request, over the cap for a response).
    pub(crate) fn take(self: &Arc<Self>) -> Option<Slot> {
        if self.open.inc() >= self.max {
            self.open.dec();
            return None;
        }
        Some(Slot {
            streams: self.clone(),
            opened: None,
        })
    }

    pub(crate) fn count(&self, end: End) {
        self.ends[end as usize].inc();
    }

    /// Streams open now.
    pub(crate) fn open(&self) -> i64 {
        self.open.get()
    }

    /// `streams.max_per_upstream`.
    pub(crate) fn max(&self) -> i64 {
        self.max
    }

    /// Streams that ended with `end` so far.
    pub(crate) fn ended(&self, end: End) -> u64 {
        self.ends[end as usize].get()
    }

    /// Streams that were open and ended so far, however.
    pub(crate) fn ended_in_all(&self) -> u64 {
        [End::Closed, End::Error, End::Idle, End::Cancelled]
            .iter()
            .map(|end| self.ended(*end))
            .sum()
    }
}

/// A place under an upstream's cap. Dropped before [`Slot::opened`], it is given back
/// uncounted (the response was not a stream); after, it counts its stream as cancelled
/// unless [`Slot::end`] said otherwise.
#[derive(Debug)]
pub(crate) struct Slot {
    streams: Arc<UpstreamStreams>,
    /// When the stream's response headers came.
    opened: Option<tokio::time::Instant>,
}

impl Slot {
    /// The stream is open: from now on it is counted when it ends.
    pub(crate) fn opened(&mut self) {
        self.opened = Some(tokio::time::Instant::now());
    }

    pub(crate) fn end(mut self, end: End) {
        self.finish(end);
    }

    fn finish(&mut self, end: End) {
        if let Some(opened) = self.opened.take() {
            self.streams.count(end);
            self.streams
                .durations
                .observe(opened.elapsed().as_secs_f64());
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.finish(End::Cancelled);
        self.streams.open.dec();
    }
}
