//! FNV-1a, 64 bits: the hash every replica and every host version must compute alike (shards of
//! guests, rollout shares of keys).

/// FNV-1a, 64 bits: tiny, and its output is fixed by its definition, unlike `std`'s hashers,
/// which may change between Rust releases (and replicas of two versions meet in a rolling
/// update).
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    /// Adds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}
