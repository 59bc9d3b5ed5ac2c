//! A server-side shard of a kind: only the objects whose key hashes into a range, selected by
//! the API server itself (KEP-5866, sharded list and watch, alpha in Kubernetes 1.36 behind the
//! `ShardedListAndWatch` feature gate).
//!
//! The hash is 64-bit FNV-1a of the object's uid or namespace, as the API server computes it;
//! [`ShardRange::contains`] computes the same, so a client can tell which range an object is in.
//!
//! Where it may surprise: a server without the gate ignores the selector and answers with every
//! object. The reflector checks that the server applied it (the list's `shardInfo`) before its
//! first sync, and refuses to cache anything otherwise, naming the gate.

use crate::fnv::Fnv;

/// Why a shard range cannot be made.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The range is empty or runs past 2^64.
    #[error("shard range [{start:#x}, {end:#x}) is empty or ends past 2^64")]
    Empty {
        /// The inclusive start.
        start: u64,
        /// The exclusive end.
        end: u128,
    },
    /// `index` is not below `count`, or `count` is 0.
    #[error("shard {index} of {count} does not exist")]
    NoSuchShard {
        /// The shard asked for.
        index: u64,
        /// How many there are.
        count: u64,
    },
}

/// What an object's hash is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardKey {
    /// `metadata.uid`: objects spread evenly, one namespace's over every shard.
    Uid,
    /// `metadata.namespace`: a namespace's objects stay together.
    Namespace,
}

impl ShardKey {
    fn path(self) -> &'static str {
        match self {
            ShardKey::Uid => "object.metadata.uid",
            ShardKey::Namespace => "object.metadata.namespace",
        }
    }
}

/// The objects whose key's hash is in `[start, end)`, where `end` may be 2^64 (the whole space
/// is `[0, 2^64)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardRange {
    key: ShardKey,
    start: u64,
    end: u128,
}

impl ShardRange {
    /// `[start, end)` over `key`'s hash.
    pub fn new(key: ShardKey, start: u64, end: u128) -> Result<Self, Error> {
        if u128::from(start) >= end || end > 1 << 64 {
            return Err(Error::Empty { start, end });
        }
        Ok(Self { key, start, end })
    }

    /// Shard `index` of `count` equal ranges (the last takes the remainder).
    pub fn nth(key: ShardKey, index: u64, count: u64) -> Result<Self, Error> {
        if count == 0 || index >= count {
            return Err(Error::NoSuchShard { index, count });
        }
        let width = (1u128 << 64) / u128::from(count);
        let start = width * u128::from(index);
        let end = if index + 1 == count {
            1 << 64
        } else {
            start + width
        };
        Self::new(key, start as u64, end)
    }

    /// The `shardSelector` the API server takes for this range. Its bounds must be 16 lowercase
    /// hex digits, but for 2^64, which has 17.
    pub fn selector(&self) -> String {
        let end = if self.end == 1 << 64 {
            "10000000000000000".to_string()
        } else {
            format!("{:016x}", self.end)
        };
        format!(
            "shardRange({}, '0x{:016x}', '0x{end}')",
            self.key.path(),
            self.start
        )
    }

    /// Whether an object with this uid (or namespace, per the key) is in the range.
    pub fn contains(&self, key: &str) -> bool {
        let mut h = Fnv::default();
        h.write(key.as_bytes());
        let hash = u128::from(h.finish());
        u128::from(self.start) <= hash && hash < self.end
    }
}

impl std::fmt::Display for ShardRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = match self.key {
            ShardKey::Uid => "uid",
            ShardKey::Namespace => "namespace",
        };
        write!(f, "{key}:[{:#x},{:#x})", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_is_what_the_api_server_parses() {
        let halves = [
            ShardRange::nth(ShardKey::Uid, 0, 2).unwrap(),
            ShardRange::nth(ShardKey::Uid, 1, 2).unwrap(),
        ];
        assert_eq!(
            halves[0].selector(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        assert_eq!(
            halves[1].selector(),
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            ShardRange::nth(ShardKey::Namespace, 0, 1)
                .unwrap()
                .selector(),
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x10000000000000000')"
        );
        assert_eq!(
            ShardRange::nth(ShardKey::Uid, 1, 4).unwrap().selector(),
            "shardRange(object.metadata.uid, '0x4000000000000000', '0x8000000000000000')"
        );
    }

    #[test]
    fn n_shards_cover_every_hash_exactly_once() {
        for count in [1, 2, 3, 7] {
            let shards: Vec<_> = (0..count)
                .map(|i| ShardRange::nth(ShardKey::Uid, i, count).unwrap())
                .collect();
            for uid in (0..500).map(|i| format!("uid-{i}")) {
                let holders = shards.iter().filter(|s| s.contains(&uid)).count();
                assert_eq!(holders, 1, "{uid} in {count} shards");
            }
            assert_eq!(shards[0].start, 0);
            assert_eq!(shards[count as usize - 1].end, 1 << 64);
            for w in shards.windows(2) {
                assert_eq!(u128::from(w[1].start), w[0].end);
            }
        }
    }

    #[test]
    fn empty_ranges_and_missing_shards_are_refused() {
        assert!(ShardRange::new(ShardKey::Uid, 5, 5).is_err());
        assert!(ShardRange::new(ShardKey::Uid, 0, (1 << 64) + 1).is_err());
        assert_eq!(
            ShardRange::nth(ShardKey::Uid, 3, 3),
            Err(Error::NoSuchShard { index: 3, count: 3 })
        );
        assert!(ShardRange::nth(ShardKey::Uid, 0, 0).is_err());
    }
}
