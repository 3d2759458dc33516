//! Which clients may speak for themselves: the trust boundary of the priority and caller-key
//! headers and of `X-Forwarded-For`.
//!
//! A priority header from anyone is a priority anyone can claim: in a 10x overload run a
//! client claiming tier 0 got 94% success against 0.04% for tier 3. So the headers that steer
//! the gate, and the client addresses a request says it was forwarded for, are believed only
//! from configured sources (`trust.sources`, CIDR blocks: the load balancers, API gateways or
//! services in front of the proxy). A request from anywhere else gets the route's tier or the
//! default priority, no cohort from its caller key, its priority header removed (or replaced
//! by the one in force when `priority.forward` is on), and an `X-Forwarded-For` of its own
//! address only. Loopback is trusted by default: a client on the same host can already do
//! what it likes there.
//!
//! The decision is made once per connection, from its peer address.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use http::HeaderValue;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An address block, `10.0.0.0/8` or `fd00::/8`; a bare address is a block of one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

/// A block that does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not an address block such as \"10.0.0.0/8\", \"fd00::/8\" or \"192.0.2.7\"")]
pub struct ParseCidrError(String);

impl Cidr {
    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, canonical(ip)) {
            (IpAddr::V4(network), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(network) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(network) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, what a dual-stack listener sees) as IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

impl FromStr for Cidr {
    type Err = ParseCidrError;

    fn from_str(text: &str) -> Result<Cidr, ParseCidrError> {
        let bad = || ParseCidrError(text.to_owned());
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network = canonical(address.parse::<IpAddr>().map_err(|_| bad())?);
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            // Digits only: `u8::from_str` would take a sign.
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= bits)
                .ok_or_else(bad)?,
            Some(_) => return Err(bad()),
        };
        Ok(Cidr { network, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl Serialize for Cidr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Cidr, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The sources trusted by default: loopback.
pub(crate) fn loopback() -> Vec<Cidr> {
    vec![
        Cidr {
            network: IpAddr::from([127, 0, 0, 0]),
            prefix: 8,
        },
        Cidr {
            network: IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
            prefix: 128,
        },
    ]
}

/// The client's address as an `X-Forwarded-For` element.
fn client_value(ip: IpAddr) -> HeaderValue {
    HeaderValue::from_str(&canonical(ip).to_string()).unwrap_or(HeaderValue::from_static("unknown"))
}

/// A client connection: its address as an `X-Forwarded-For` element, and whether its
/// headers are believed.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    pub(crate) address: HeaderValue,
    pub(crate) trusted: bool,
}

impl Peer {
    pub(crate) fn new(ip: IpAddr, sources: &[Cidr]) -> Peer {
        Peer {
            address: client_value(ip),
            trusted: sources.iter().any(|block| block.contains(ip)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn blocks_contain_their_addresses_only() {
        let ten = cidr("10.0.0.0/8");
        assert!(ten.contains(ip("10.255.1.2")));
        assert!(ten.contains(ip("::ffff:10.0.0.1")), "mapped");
        assert!(!ten.contains(ip("11.0.0.0")));
        assert!(!ten.contains(ip("::1")));
        assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(cidr("192.0.2.7").contains(ip("192.0.2.7")));
        assert!(!cidr("192.0.2.7").contains(ip("192.0.2.8")));
        let ula = cidr("fd00::/8");
        assert!(ula.contains(ip("fd12::1")));
        assert!(!ula.contains(ip("fe80::1")));
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
        assert_eq!(
            cidr("::ffff:10.0.0.0/8"),
            ten,
            "a mapped block is the IPv4 one"
        );
        assert_eq!(cidr("10.1.2.3/8").to_string(), "10.1.2.3/8");
    }

    #[test]
    fn bad_blocks_are_named() {
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0/8",
            "host/8",
            "10.0.0.0/8/8",
        ] {
            let err = bad.parse::<Cidr>().expect_err(bad).to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn peers_are_trusted_by_their_address() {
        let sources = loopback();
        assert!(Peer::new(ip("127.0.0.1"), &sources).trusted);
        assert!(Peer::new(ip("::1"), &sources).trusted);
        assert!(Peer::new(ip("::ffff:127.0.0.1"), &sources).trusted);
        let outside = Peer::new(ip("::ffff:203.0.113.9"), &sources);
        assert!(!outside.trusted);
        assert_eq!(outside.address, "203.0.113.9");
        assert!(!Peer::new(ip("127.0.0.1"), &[]).trusted);
    }

    proptest! {
        /// A block built from any address and prefix prints and parses back to itself, and
        /// contains the address it was built from.
        #[test]
        fn blocks_round_trip_and_contain_their_network(
            v4 in any::<u32>(), v6 in any::<u128>(), p4 in 0u8..=32, p6 in 0u8..=128
        ) {
            for (address, prefix) in [
                (IpAddr::from(v4.to_be_bytes()), p4),
                (canonical(IpAddr::from(v6.to_be_bytes())), p6.min(if canonical(IpAddr::from(v6.to_be_bytes())).is_ipv4() { 32 } else { 128 })),
            ] {
                let block = Cidr { network: address, prefix };
                let parsed: Cidr = block.to_string().parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
                prop_assert_eq!(parsed, block);
                prop_assert!(block.contains(address));
            }
        }

        /// Any text either parses or is refused with itself in the message; never a panic.
        #[test]
        fn any_text_parses_or_is_named(text in "\\PC{0,40}") {
            if let Err(e) = text.parse::<Cidr>() {
                let quoted = format!("{text:?}");
                prop_assert!(e.to_string().contains(&quoted));
            }
        }
    }
}
