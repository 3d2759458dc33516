//! The proxies in front of one service, told each other's limit and drop ratio through the
//! instances they share, so that they hold the same limit and draw the same line.
//!
//! Each proxy runs its own gate, and each gate learns its own limit from its own answers.
//! In front of shared instances those limits settle apart: a latency-driven limit reads the
//! queue the other proxies' calls make as its own, the one that anchored its baseline
//! earlier shrinks while another grows (TCP Vegas's unfairness), and two gates of one hop
//! have held 4 and 23 in front of 12 workers while calls waited at the one at 4. At the
//! edge the limits apart also draw the priority line apart: the proxy with less room sheds
//! deeper, and a user it sheds is admitted by the next one (`docs/experiments/README.md`,
//! "Fleets and call chains"). No proxy sees the others, but every instance sees them all:
//!
//! ```text
//! tidegate-peer: id=8f3a0c1d22b4e907, limit=17, ratio=0.620      (on a request, proxy -> instance)
//! tidegate-peers: limit=16.7, ratio=0.640, peers=3               (on its response)
//! ```
//!
//! A proxy says on each request it forwards what its own gate learnt (the limit algorithm's
//! limit and the regulator's drop ratio); an instance keeps the latest of each proxy for a
//! `ttl` ([`PeerBoard`]) and says their means on its responses; the proxy holds its limit
//! part of the way to the mean and pulls its regulator's ratio toward the other mean
//! ([`crate::gate::Gate::hear_peers`], [`PeerConfig`]). Each gate keeps learning from its
//! own answers: the mean moves what is in force, not what is learnt. Keys are separated by
//! commas, white space is ignored, unknown keys are ignored. `docs/peers.md` is the
//! specification.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::fast_hash::FastMap;
use crate::priority::RANKS;
use crate::time::{Nanos, Time};

/// The request header a proxy stamps its own gate's state in.
pub const STAMP_HEADER: &str = "tidegate-peer";

/// The response header an instance says its proxies' means in.
pub const MEAN_HEADER: &str = "tidegate-peers";

/// How a gate takes in its peers' means. The defaults are those the fleet chain's edge
/// proxies met issue 15's goals with (`docs/peers.md`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PeerConfig {
    /// The limit in force is the gate's own plus this share of the way to the peers' mean:
    /// at 1, every proxy holds the mean. Default 1.
    pub limit_weight: f64,
    /// After each update of its drop ratio, the regulator moves it this share of the way to
    /// the peers' mean (PIE's `p`; its own step is kept whole). 0.3: at 0.5 the chain lost
    /// a tenth of its goodput on one seed of six. Default 0.3.
    pub ratio_weight: f64,
    /// How long an instance keeps a proxy's stamp, and a proxy the means it heard. Default 1 s.
    pub ttl: Nanos,
}

impl Default for PeerConfig {
    fn default() -> PeerConfig {
        PeerConfig {
            limit_weight: 1.0,
            ratio_weight: 0.3,
            ttl: Nanos::from_secs(1),
        }
    }
}

/// What a proxy says of its own gate on a request it forwards.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeerStamp {
    /// The proxy, any number its peers do not share (a random one at start).
    pub id: u64,
    /// The limit its limit algorithm learnt (not the one in force).
    pub limit: u32,
    /// Its regulator's drop ratio, in `[0, 1]`.
    pub ratio: f64,
    /// Where its own priority line lies, as a position among the ranks (see
    /// `PriorityCutoff::line`); `None` from a gate that sheds at random, or before it has seen
    /// any traffic.
    pub line: Option<f64>,
}

/// What an instance says of the proxies in front of it on its responses: the means of their
/// latest stamps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeerMean {
    pub limit: f64,
    pub ratio: f64,
    /// How many proxies the means are over.
    pub peers: u32,
    /// The mean of the lines of the stamps that carry one (see `PriorityCutoff::line`).
    pub line: Option<f64>,
}

impl fmt::Display for PeerStamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "id={:016x}, limit={}, ratio={:.3}",
            self.id, self.limit, self.ratio
        )?;
        write_line(f, self.line)
    }
}

impl fmt::Display for PeerMean {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "limit={:.1}, ratio={:.3}, peers={}",
            self.limit, self.ratio, self.peers
        )?;
        write_line(f, self.line)
    }
}

/// The optional `line=` pair that ends both headers.
fn write_line(f: &mut fmt::Formatter<'_>, line: Option<f64>) -> fmt::Result {
    match line {
        Some(line) => write!(f, ", line={line:.2}"),
        None => Ok(()),
    }
}

/// Why a peer header did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParsePeerError {
    #[error("peer header has no `{0}=`")]
    Missing(&'static str),
    #[error("peer header has an invalid `{key}`: {value:?}")]
    Invalid { key: &'static str, value: String },
    #[error("peer header is malformed near {0:?}: expected key=value pairs separated by commas")]
    Syntax(String),
}

/// The `key=value` pairs of a header, each value checked by `parse`, the keys in `wanted`
/// required and `line` optional (a proxy that predates it, or sheds at random, says none).
fn parse_pairs<const N: usize>(
    s: &str,
    wanted: [&'static str; N],
    mut parse: impl FnMut(&'static str, &str) -> Option<()>,
) -> Result<(), ParsePeerError> {
    let mut seen = [false; N];
    for pair in crate::lease::pairs(s) {
        let (key, value) = pair.map_err(|pair| ParsePeerError::Syntax(pair.to_owned()))?;
        let invalid = |key| ParsePeerError::Invalid {
            key,
            value: value.to_owned(),
        };
        if let Some(i) = wanted.iter().position(|w| *w == key) {
            parse(wanted[i], value).ok_or_else(|| invalid(wanted[i]))?;
            seen[i] = true;
        } else if key == "line" {
            parse("line", value).ok_or_else(|| invalid("line"))?;
        }
    }
    match seen.iter().position(|s| !s) {
        Some(i) => Err(ParsePeerError::Missing(wanted[i])),
        None => Ok(()),
    }
}

/// A ratio in `[0, 1]`, a limit finite and at least 1: anything else is not a gate's.
fn ratio(value: &str) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|r| (0.0..=1.0).contains(r))
}

/// A line's position, in `[0, RANKS]` (see `PriorityCutoff::line`).
fn position(value: &str) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|l| (0.0..=RANKS as f64).contains(l))
}

impl FromStr for PeerStamp {
    type Err = ParsePeerError;

    fn from_str(s: &str) -> Result<PeerStamp, ParsePeerError> {
        let mut stamp = PeerStamp {
            id: 0,
            limit: 0,
            ratio: 0.0,
            line: None,
        };
        parse_pairs(s, ["id", "limit", "ratio"], |key, value| {
            match key {
                "id" => stamp.id = u64::from_str_radix(value, 16).ok()?,
                "limit" => stamp.limit = value.parse().ok().filter(|l| *l >= 1)?,
                "line" => stamp.line = Some(position(value)?),
                _ => stamp.ratio = ratio(value)?,
            }
            Some(())
        })?;
        Ok(stamp)
    }
}

impl FromStr for PeerMean {
    type Err = ParsePeerError;

    fn from_str(s: &str) -> Result<PeerMean, ParsePeerError> {
        let mut mean = PeerMean {
            limit: 0.0,
            ratio: 0.0,
            peers: 0,
            line: None,
        };
        parse_pairs(s, ["limit", "ratio", "peers"], |key, value| {
            match key {
                "limit" => {
                    mean.limit = value
                        .parse::<f64>()
                        .ok()
                        .filter(|l| l.is_finite() && *l >= 1.0)?;
                }
                "ratio" => mean.ratio = ratio(value)?,
                "line" => mean.line = Some(position(value)?),
                _ => mean.peers = value.parse().ok().filter(|p| *p >= 1)?,
            }
            Some(())
        })?;
        Ok(mean)
    }
}

/// The line for a proxy's gates to draw (see `PieConfig::line_at_peers`): the mean of the
/// lines its service's instances said last (`PeerMean::line`, each with when it was heard),
/// leaving out those older than `ttl` at `now`. Each instance's mean is over the gates in front
/// of it, one per proxy; a proxy that spreads a user's requests over the instances sheds them
/// by whichever gate each one meets, so its gates draw one line, the mean over all the
/// instances: in the chain on real sockets, the means said by three instances lay 9-15 ranks
/// apart (`docs/experiments/chain-lab.md`). `None` if none is fresh.
pub fn fleet_line(
    heard: impl IntoIterator<Item = (f64, Time)>,
    now: Time,
    ttl: Nanos,
) -> Option<f64> {
    let (sum, n) = heard
        .into_iter()
        .filter(|&(line, at)| !line.is_nan() && now.saturating_since(at) < ttl)
        .fold((0.0, 0u32), |(sum, n), (line, _)| (sum + line, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

/// Most proxies a board keeps: a stamp of a new proxy past it is ignored, so that a board's
/// memory and a lookup's cost are bounded whatever arrives.
pub const MAX_PEERS: usize = 4096;

#[derive(Clone, Copy, Debug)]
struct Seen {
    limit: u32,
    ratio: f64,
    line: Option<f64>,
    at: Time,
}

/// An instance's view of the proxies in front of it: the latest stamp of each, for `ttl`.
///
/// The means are kept as running sums, so that a stamp and a response cost a hash lookup
/// whatever the number of proxies; stamps older than `ttl` are swept out at most every
/// quarter of it (a proxy gone is forgotten within `1.25 ttl`).
#[derive(Clone, Debug)]
pub struct PeerBoard {
    ttl: Nanos,
    /// Hashed by one multiplication: a lookup per request and per response.
    seen: FastMap<u64, Seen>,
    limits: f64,
    ratios: f64,
    /// The sum of the lines of the stamps that carry one, and how many do.
    lines: (f64, u32),
    next_sweep: Time,
    invalid: u64,
}

impl Default for PeerBoard {
    fn default() -> PeerBoard {
        PeerBoard::new(PeerConfig::default().ttl)
    }
}

impl PeerBoard {
    pub fn new(ttl: Nanos) -> PeerBoard {
        PeerBoard {
            ttl,
            seen: FastMap::default(),
            limits: 0.0,
            ratios: 0.0,
            lines: (0.0, 0),
            next_sweep: Time::ZERO,
            invalid: 0,
        }
    }

    /// Takes in the stamp header of a request received at `now`, if it had one; a malformed
    /// one is ignored and counted.
    pub fn receive(&mut self, now: Time, value: Option<&[u8]>) {
        let Some(value) = value else { return };
        match std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse::<PeerStamp>().ok())
        {
            Some(stamp) => self.record(now, stamp),
            None => self.invalid += 1,
        }
    }

    /// Takes in a parsed stamp received at `now`: the proxy's latest.
    pub fn record(&mut self, now: Time, stamp: PeerStamp) {
        let new = Seen {
            limit: stamp.limit,
            ratio: stamp.ratio,
            line: stamp.line,
            at: now,
        };
        if self.seen.len() >= MAX_PEERS && !self.seen.contains_key(&stamp.id) {
            return;
        }
        if let Some(old) = self.seen.insert(stamp.id, new) {
            self.limits -= f64::from(old.limit);
            self.ratios -= old.ratio;
            if let Some(line) = old.line {
                self.lines = (self.lines.0 - line, self.lines.1 - 1);
            }
        }
        self.limits += f64::from(new.limit);
        self.ratios += new.ratio;
        if let Some(line) = new.line {
            self.lines = (self.lines.0 + line, self.lines.1 + 1);
        }
    }

    /// The means of the stamps in force at `now`, if any.
    pub fn mean(&mut self, now: Time) -> Option<PeerMean> {
        if now >= self.next_sweep {
            self.sweep(now);
        }
        let peers = self.seen.len();
        (peers > 0).then(|| PeerMean {
            limit: (self.limits / peers as f64).max(1.0),
            ratio: (self.ratios / peers as f64).clamp(0.0, 1.0),
            peers: peers as u32,
            line: (self.lines.1 > 0)
                .then(|| (self.lines.0 / f64::from(self.lines.1)).clamp(0.0, RANKS as f64)),
        })
    }

    /// Forgets the stamps older than `ttl` and sums the rest afresh (the running sums'
    /// rounding does not accumulate).
    fn sweep(&mut self, now: Time) {
        let ttl = self.ttl;
        self.seen.retain(|_, seen| now - seen.at < ttl);
        self.limits = self.seen.values().map(|s| f64::from(s.limit)).sum();
        self.ratios = self.seen.values().map(|s| s.ratio).sum();
        self.lines = self
            .seen
            .values()
            .filter_map(|s| s.line)
            .fold((0.0, 0), |(sum, n), line| (sum + line, n + 1));
        self.next_sweep = now + Nanos::from_nanos((ttl.as_nanos() / 4).max(1));
    }

    /// Malformed stamps ignored so far.
    pub fn invalid(&self) -> u64 {
        self.invalid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let stamp = PeerStamp {
            id: 0x8f3a_0c1d_22b4_e907,
            limit: 17,
            ratio: 0.62,
            line: None,
        };
        assert_eq!(
            stamp.to_string(),
            "id=8f3a0c1d22b4e907, limit=17, ratio=0.620"
        );
        assert_eq!(stamp.to_string().parse(), Ok(stamp));
        let mean = PeerMean {
            limit: 16.5,
            ratio: 0.625,
            peers: 3,
            line: None,
        };
        assert_eq!(mean.to_string(), "limit=16.5, ratio=0.625, peers=3");
        assert_eq!(mean.to_string().parse(), Ok(mean));
        let lined = PeerStamp {
            line: Some(370.25),
            ..stamp
        };
        assert_eq!(
            lined.to_string(),
            "id=8f3a0c1d22b4e907, limit=17, ratio=0.620, line=370.25"
        );
        assert_eq!(lined.to_string().parse(), Ok(lined));
        let lined = PeerMean {
            line: Some(768.0),
            ..mean
        };
        assert_eq!(lined.to_string().parse(), Ok(lined));
    }

    #[test]
    fn rejects_what_no_gate_says() {
        for bad in [
            "limit=17, ratio=0.5",
            "id=zz, limit=17, ratio=0.5",
            "id=1, limit=0, ratio=0.5",
            "id=1, limit=17, ratio=1.5",
            "id=1, limit=17, ratio=NaN",
            "id=1 limit=17",
            "id=1, limit=17, ratio=0.5, line=-1",
            "id=1, limit=17, ratio=0.5, line=769",
            "id=1, limit=17, ratio=0.5, line=NaN",
        ] {
            assert!(bad.parse::<PeerStamp>().is_err(), "{bad}");
        }
        for bad in [
            "limit=inf, ratio=0.5, peers=2",
            "limit=0.5, ratio=0.5, peers=2",
            "limit=3, ratio=-0.1, peers=2",
            "limit=3, ratio=0.1, peers=0",
            "limit=3, ratio=0.1, peers=2, line=x",
        ] {
            assert!(bad.parse::<PeerMean>().is_err(), "{bad}");
        }
        let ok: PeerMean = " peers = 2 ,ratio=0, limit=4, later=x"
            .parse()
            .expect("valid");
        assert_eq!(ok.peers, 2);
    }

    #[test]
    fn the_board_keeps_the_latest_of_each_proxy_for_its_ttl() {
        let mut board = PeerBoard::new(Nanos::from_secs(1));
        let t = Time::ZERO + Nanos::from_secs(10);
        let stamp = |id, limit, ratio| PeerStamp {
            id,
            limit,
            ratio,
            line: None,
        };
        board.record(t, stamp(1, 10, 0.2));
        board.record(t, stamp(2, 20, 0.4));
        board.record(t, stamp(1, 14, 0.6));
        let mean = board.mean(t).expect("two proxies");
        assert_eq!(mean.peers, 2);
        assert!((mean.limit - 17.0).abs() < 1e-9, "{mean:?}");
        assert!((mean.ratio - 0.5).abs() < 1e-9, "{mean:?}");
        // Proxy 2 falls silent: forgotten within 1.25 ttl.
        let later = t + Nanos::from_millis(900);
        board.record(later, stamp(1, 12, 0.3));
        assert_eq!(board.mean(later).expect("both").peers, 2);
        let gone = t + Nanos::from_millis(1_300);
        let mean = board.mean(gone).expect("proxy 1");
        assert_eq!(mean.peers, 1);
        assert_eq!(mean.limit, 12.0);
        assert!(board.mean(gone + Nanos::from_secs(2)).is_none());
    }

    #[test]
    fn the_board_averages_the_lines_of_the_stamps_that_carry_one() {
        let mut board = PeerBoard::new(Nanos::from_secs(1));
        let t = Time::ZERO + Nanos::from_secs(10);
        let stamp = |id, line| PeerStamp {
            id,
            limit: 10,
            ratio: 0.5,
            line,
        };
        board.record(t, stamp(1, Some(360.0)));
        assert_eq!(board.mean(t).expect("one").line, Some(360.0));
        board.record(t, stamp(2, Some(380.0)));
        board.record(t, stamp(3, None));
        let mean = board.mean(t).expect("three");
        assert_eq!((mean.peers, mean.line), (3, Some(370.0)));
        // A proxy's newer stamp replaces its line, or takes it out.
        board.record(t, stamp(2, None));
        assert_eq!(board.mean(t).expect("three").line, Some(360.0));
        board.record(t, stamp(1, None));
        assert_eq!(board.mean(t).expect("three").line, None);
        // The sweep sums them afresh, the same.
        board.record(t, stamp(1, Some(300.0)));
        let later = t + Nanos::from_millis(900);
        board.record(later, stamp(1, Some(340.0)));
        assert_eq!(board.mean(later).expect("three").line, Some(340.0));
    }

    #[test]
    fn a_fleet_line_is_the_mean_of_the_fresh_lines_heard() {
        let t = Time::ZERO + Nanos::from_secs(10);
        let ttl = Nanos::from_secs(1);
        let ago = |ms: u64| Time::from_nanos(t.as_nanos() - ms * 1_000_000);
        let heard = [
            (360.0, ago(0)),
            (380.0, ago(999)),
            (500.0, ago(1000)),
            (f64::NAN, t),
        ];
        assert_eq!(fleet_line(heard, t, ttl), Some(370.0));
        assert_eq!(fleet_line([(500.0, ago(1000))], t, ttl), None);
        assert_eq!(fleet_line([], t, ttl), None);
    }

    #[test]
    fn a_malformed_stamp_is_ignored_and_counted() {
        let mut board = PeerBoard::new(Nanos::from_secs(1));
        let t = Time::ZERO + Nanos::from_secs(1);
        board.receive(t, Some(b"id=1, limit=8, ratio=0.25"));
        board.receive(t, Some(b"id=2, limit=-3, ratio=0.25"));
        board.receive(t, Some(&[0xff, 0xfe]));
        board.receive(t, None);
        assert_eq!(board.invalid(), 2);
        assert_eq!(board.mean(t).expect("one").limit, 8.0);
    }
}
