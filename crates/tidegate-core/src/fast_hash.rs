//! A hash of small integer keys by one multiplication (Fibonacci hashing), for maps looked
//! up on every request or every simulated event: a proxy's id on an instance's peer board
//! (`crate::peers`), a ticket or a user in the fleet simulator. SipHash guards a map against
//! keys an adversary picks; these maps hold ids their owner bounds (a peer board keeps at
//! most `peers::MAX_PEERS`), and SipHash was a tenth of the simulated fleet's time at scale.
//! Iteration order differs from SipHash's: nothing that uses these maps may depend on it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// See the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A [`HashMap`] hashed by [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;
